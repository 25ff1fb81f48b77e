//! A filter policy's JSON read into a tree of AND and OR nodes, checked against SNS's rules on
//! the way. The tree is what `matching` walks; nothing here looks at a message.

use std::net::IpAddr;

use serde_json::{Map, Value};

use super::error::FilterPolicyError;
use super::limits::{MAX_COMBINATIONS, MAX_KEYS, MAX_NUMBER, MAX_POLICY_SIZE, NUMBER_DECIMALS};
use super::scope::FilterPolicyScope;

/// The words SNS reads as operators: an `"$or"` whose alternatives use one of them as a key is
/// not an OR but a key named `$or` ("AND/OR logic", "OR operator").
const OPERATORS: [&str; 7] = [
    "prefix",
    "suffix",
    "equals-ignore-case",
    "anything-but",
    "numeric",
    "exists",
    "cidr",
];

/// A parsed policy, or part of one.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    /// Every child accepts: the keys of one JSON object.
    All(Vec<Node>),
    /// At least one child accepts: the alternatives of an `"$or"`.
    Any(Vec<Node>),
    /// One key and the values it accepts.
    Key(KeyRule),
}

/// A key (a path of nested keys in the body scope) and the patterns it accepts, any one sufficing.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct KeyRule {
    /// The key, then the keys nested in it; one element in the attribute scope.
    pub(super) path: Vec<String>,
    /// The array the policy gives the key.
    pub(super) patterns: Vec<Pattern>,
}

impl KeyRule {
    fn name(&self) -> String {
        self.path.join(".")
    }
}

/// One element of a key's array.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Pattern {
    /// A plain value: equal strings, equal numbers, or the same `true`, `false` or `null`.
    Exact(Literal),
    /// `{"prefix": "..."}`: a string starting with this.
    Prefix(String),
    /// `{"suffix": "..."}`: a string ending with this.
    Suffix(String),
    /// `{"equals-ignore-case": "..."}`, kept in lower case: a string equal to this in any case.
    EqualsIgnoreCase(String),
    /// `{"anything-but": ...}` with values: a value present and equal to none of these.
    AnythingBut(Vec<Literal>),
    /// `{"anything-but": {"prefix": "..."}}`: a string present and not starting with this.
    AnythingButPrefix(String),
    /// `{"numeric": [...]}`: a number in this range.
    Numeric(Range),
    /// `{"exists": true}` or `{"exists": false}`: the key present, or absent.
    Exists(bool),
    /// `{"cidr": "..."}`: a string that is an IP address in this network.
    Cidr(Network),
}

/// A plain value of a policy, numbers rounded to [`NUMBER_DECIMALS`] digits.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Literal {
    /// A JSON string.
    String(String),
    /// A JSON number.
    Number(f64),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
}

/// The numbers a `numeric` expression accepts: each bound is a number and whether it is included.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Range {
    pub(super) lower: Option<(f64, bool)>,
    pub(super) upper: Option<(f64, bool)>,
}

impl Range {
    /// Whether `value`, rounded like the bounds, is in the range.
    pub(super) fn contains(&self, value: f64) -> bool {
        let above = self.lower.is_none_or(|(bound, inclusive)| {
            if inclusive {
                value >= bound
            } else {
                value > bound
            }
        });
        let below = self.upper.is_none_or(|(bound, inclusive)| {
            if inclusive {
                value <= bound
            } else {
                value < bound
            }
        });
        above && below
    }
}

/// An IP network of a `cidr` pattern.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Network {
    address: IpAddr,
    bits: u8,
}

impl Network {
    /// Whether `address` is in the network; an IPv4 address is never in an IPv6 network, nor the
    /// other way round.
    pub(super) fn contains(&self, address: IpAddr) -> bool {
        match (self.address, address) {
            (IpAddr::V4(network), IpAddr::V4(address)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(network) & mask == u32::from(address) & mask
            }
            (IpAddr::V6(network), IpAddr::V6(address)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(network) & mask == u128::from(address) & mask
            }
            _ => false,
        }
    }
}

/// A number as numeric matching sees it: rounded to [`NUMBER_DECIMALS`] digits after the point
/// ("five digits of accuracy after the decimal point", "Filter policy constraints").
pub(super) fn round(value: f64) -> f64 {
    let scale = 10f64.powi(NUMBER_DECIMALS);
    (value * scale).round() / scale
}

/// Reads and checks a whole policy.
pub(super) fn parse(json: &str, scope: FilterPolicyScope) -> Result<Node, FilterPolicyError> {
    if json.len() > MAX_POLICY_SIZE {
        return Err(FilterPolicyError::TooLarge {
            size: json.len(),
            max: MAX_POLICY_SIZE,
        });
    }
    let value: Value =
        serde_json::from_str(json).map_err(|err| FilterPolicyError::NotJson(err.to_string()))?;
    let Value::Object(object) = value else {
        return Err(FilterPolicyError::NotAnObject {
            found: kind(&value),
        });
    };
    let root = Parser { scope }.object(&object, &[])?;

    let combinations = combinations(&root);
    if combinations > MAX_COMBINATIONS {
        return Err(FilterPolicyError::TooComplex {
            combinations,
            max: MAX_COMBINATIONS,
        });
    }
    let mut keys = widest_alternative(&root);
    if keys.len() > MAX_KEYS {
        keys.sort();
        return Err(FilterPolicyError::TooManyKeys {
            count: keys.len(),
            keys: keys.join(", "),
            max: MAX_KEYS,
        });
    }
    Ok(root)
}

/// SNS's complexity measure: within one object, the product of each key's number of values times
/// its nesting depth ("3 x 4 x 2 x 3 = 72" for a 4-value key three deep beside a 3-value key two
/// deep, "Filter policy constraints"); the alternatives of an `"$or"` add up ("AND/OR logic").
pub(super) fn combinations(node: &Node) -> u64 {
    match node {
        Node::Key(rule) => {
            let values = u64::try_from(rule.patterns.len()).unwrap_or(u64::MAX);
            let depth = u64::try_from(rule.path.len()).unwrap_or(u64::MAX);
            values.saturating_mul(depth)
        }
        Node::All(children) => children.iter().fold(1, |product, child| {
            product.saturating_mul(combinations(child))
        }),
        Node::Any(children) => children
            .iter()
            .fold(0, |sum, child| sum.saturating_add(combinations(child))),
    }
}

/// The keys of the alternative with the most keys: keys given values count, keys holding nested
/// objects do not ("Filter policy constraints": `finding` is not counted, its nested keys are).
pub(super) fn widest_alternative(node: &Node) -> Vec<String> {
    match node {
        Node::Key(rule) => vec![rule.name()],
        Node::All(children) => children.iter().flat_map(widest_alternative).collect(),
        Node::Any(children) => children
            .iter()
            .map(widest_alternative)
            .max_by_key(Vec::len)
            .unwrap_or_default(),
    }
}

/// What a JSON value is, for error messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether an `"$or"` key's value makes it an OR: an array of at least two objects, none of them
/// keyed by an operator word. Otherwise `$or` is a key like any other ("AND/OR logic").
fn is_or(value: &Value) -> bool {
    let Value::Array(alternatives) = value else {
        return false;
    };
    alternatives.len() >= 2
        && alternatives.iter().all(|alternative| {
            alternative
                .as_object()
                .is_some_and(|object| !object.keys().any(|key| OPERATORS.contains(&key.as_str())))
        })
}

struct Parser {
    scope: FilterPolicyScope,
}

impl Parser {
    /// The keys of one object (the policy, a nested key's object, or an `"$or"` alternative),
    /// all of which must accept.
    fn object(
        &self,
        object: &Map<String, Value>,
        parent: &[String],
    ) -> Result<Node, FilterPolicyError> {
        let mut children = Vec::with_capacity(object.len());
        for (key, value) in object {
            if key == "$or" && is_or(value) {
                let alternatives = value.as_array().into_iter().flatten();
                let alternatives = alternatives
                    .filter_map(Value::as_object)
                    .map(|alternative| self.object(alternative, parent))
                    .collect::<Result<_, _>>()?;
                children.push(Node::Any(alternatives));
                continue;
            }
            let mut path = parent.to_vec();
            path.push(key.clone());
            match value {
                Value::Array(items) => children.push(Node::Key(self.key(path, items)?)),
                Value::Object(nested) => {
                    if self.scope == FilterPolicyScope::MessageAttributes {
                        return Err(FilterPolicyError::NestedInAttributeScope {
                            key: path.join("."),
                        });
                    }
                    children.push(self.object(nested, &path)?);
                }
                other => {
                    return Err(FilterPolicyError::NotAnArray {
                        key: path.join("."),
                        nested_hint: match self.scope {
                            FilterPolicyScope::MessageAttributes => "",
                            FilterPolicyScope::MessageBody => ", or an object of nested keys",
                        },
                        found: kind(other),
                    });
                }
            }
        }
        Ok(Node::All(children))
    }

    fn key(&self, path: Vec<String>, items: &[Value]) -> Result<KeyRule, FilterPolicyError> {
        let key = path.join(".");
        if items.is_empty() {
            return Err(FilterPolicyError::EmptyArray { key });
        }
        let patterns = items
            .iter()
            .map(|item| pattern(&key, item))
            .collect::<Result<_, _>>()?;
        Ok(KeyRule { path, patterns })
    }
}

fn pattern(key: &str, item: &Value) -> Result<Pattern, FilterPolicyError> {
    match item {
        Value::Object(object) => operator(key, object),
        Value::Array(_) => Err(FilterPolicyError::InvalidValue {
            key: key.to_owned(),
            found: "an array",
        }),
        plain => literal(key, plain).map(Pattern::Exact),
    }
}

/// A plain value; `item` is not an array or an object.
fn literal(key: &str, item: &Value) -> Result<Literal, FilterPolicyError> {
    Ok(match item {
        Value::String(text) => Literal::String(text.clone()),
        Value::Number(number) => Literal::Number(checked_number(key, json_number(number))?),
        Value::Bool(flag) => Literal::Bool(*flag),
        Value::Null => Literal::Null,
        Value::Array(_) | Value::Object(_) => {
            return Err(FilterPolicyError::InvalidValue {
                key: key.to_owned(),
                found: kind(item),
            });
        }
    })
}

fn json_number(number: &serde_json::Number) -> f64 {
    // Without serde_json's arbitrary precision every JSON number has an f64 value.
    number.as_f64().unwrap_or(f64::NAN)
}

/// A policy number within ±10^9 ("Filter policy constraints"), rounded for matching.
fn checked_number(key: &str, value: f64) -> Result<f64, FilterPolicyError> {
    if value.is_nan() || value.abs() > MAX_NUMBER {
        return Err(FilterPolicyError::NumberOutOfRange {
            key: key.to_owned(),
            value,
        });
    }
    Ok(round(value))
}

fn string_operand<'a>(
    key: &str,
    operator: &'static str,
    value: &'a Value,
    expected: &'static str,
) -> Result<&'a str, FilterPolicyError> {
    value
        .as_str()
        .ok_or_else(|| FilterPolicyError::OperatorValue {
            key: key.to_owned(),
            operator,
            expected,
        })
}

fn operator(key: &str, object: &Map<String, Value>) -> Result<Pattern, FilterPolicyError> {
    let mut entries = object.iter();
    let (Some((name, value)), None) = (entries.next(), entries.next()) else {
        return Err(FilterPolicyError::OperatorCount {
            key: key.to_owned(),
            count: object.len(),
        });
    };
    Ok(match name.as_str() {
        "prefix" => Pattern::Prefix(
            string_operand(
                key,
                "prefix",
                value,
                "a string, e.g. {\"prefix\": \"order-\"}",
            )?
            .to_owned(),
        ),
        "suffix" => Pattern::Suffix(
            string_operand(
                key,
                "suffix",
                value,
                "a string, e.g. {\"suffix\": \".png\"}",
            )?
            .to_owned(),
        ),
        "equals-ignore-case" => Pattern::EqualsIgnoreCase(
            string_operand(
                key,
                "equals-ignore-case",
                value,
                "a string, e.g. {\"equals-ignore-case\": \"eur\"}",
            )?
            .to_lowercase(),
        ),
        "exists" => {
            Pattern::Exists(
                value
                    .as_bool()
                    .ok_or_else(|| FilterPolicyError::OperatorValue {
                        key: key.to_owned(),
                        operator: "exists",
                        expected: "true or false, e.g. {\"exists\": true}",
                    })?,
            )
        }
        "numeric" => Pattern::Numeric(numeric(key, value)?),
        "cidr" => Pattern::Cidr(cidr(
            key,
            string_operand(
                key,
                "cidr",
                value,
                "a string, e.g. {\"cidr\": \"10.0.0.0/24\"}",
            )?,
        )?),
        "anything-but" => anything_but(key, value)?,
        other => {
            return Err(FilterPolicyError::UnknownOperator {
                key: key.to_owned(),
                operator: other.to_owned(),
            });
        }
    })
}

/// `anything-but`: a string, a number, a non-empty array of strings and numbers, or
/// `{"prefix": "..."}` ("String value matching", "Numeric value matching"). SNS has no
/// `anything-but` suffix or case-insensitive form.
fn anything_but(key: &str, value: &Value) -> Result<Pattern, FilterPolicyError> {
    const EXPECTED: &str = "a string, a number, a non-empty array of strings and numbers, or \
                            {\"prefix\": \"...\"}, e.g. {\"anything-but\": [\"test\", \"dev\"]}";
    let wrong = || FilterPolicyError::OperatorValue {
        key: key.to_owned(),
        operator: "anything-but",
        expected: EXPECTED,
    };
    match value {
        Value::String(_) | Value::Number(_) => Ok(Pattern::AnythingBut(vec![literal(key, value)?])),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|item| match item {
                Value::String(_) | Value::Number(_) => literal(key, item),
                _ => Err(wrong()),
            })
            .collect::<Result<_, _>>()
            .map(Pattern::AnythingBut),
        Value::Object(object) => {
            let mut entries = object.iter();
            match (entries.next(), entries.next()) {
                (Some((name, Value::String(prefix))), None) if name == "prefix" => {
                    Ok(Pattern::AnythingButPrefix(prefix.clone()))
                }
                (Some((name, _)), None) if name == "prefix" => Err(wrong()),
                (Some((name, _)), None) => Err(FilterPolicyError::AnythingButPattern {
                    key: key.to_owned(),
                    pattern: name.clone(),
                }),
                _ => Err(wrong()),
            }
        }
        _ => Err(wrong()),
    }
}

/// `numeric`: `["=", n]`, one bound (`<`, `<=`, `>`, `>=`), or a lower bound then an upper one
/// with the lower below the upper ("Numeric value matching").
fn numeric(key: &str, value: &Value) -> Result<Range, FilterPolicyError> {
    let bad = |reason: String| FilterPolicyError::Numeric {
        key: key.to_owned(),
        reason,
    };
    let Value::Array(terms) = value else {
        return Err(bad(format!("it is {}, not an array", kind(value))));
    };
    if terms.is_empty() {
        return Err(bad("the array is empty".to_owned()));
    }
    if terms.len() % 2 == 1 || terms.len() > 4 {
        return Err(bad(format!(
            "{} terms: give one operator and number, or two for a range",
            terms.len()
        )));
    }
    let mut bounds = Vec::with_capacity(2);
    for pair in terms.chunks(2) {
        let Some(operator) = pair[0].as_str() else {
            return Err(bad(format!("{} where an operator belongs", kind(&pair[0]))));
        };
        if !matches!(operator, "=" | "<" | "<=" | ">" | ">=") {
            return Err(bad(format!(
                "unknown operator `{operator}`: use =, <, <=, > or >="
            )));
        }
        let Value::Number(number) = &pair[1] else {
            return Err(bad(format!(
                "`{operator}` is followed by {}, not a number",
                kind(&pair[1])
            )));
        };
        bounds.push((operator, checked_number(key, json_number(number))?));
    }
    let bound = |(operator, number): (&str, f64)| match operator {
        ">" => (Some((number, false)), None),
        ">=" => (Some((number, true)), None),
        "<" => (None, Some((number, false))),
        "<=" => (None, Some((number, true))),
        _ => (Some((number, true)), Some((number, true))),
    };
    match bounds.as_slice() {
        [single] => {
            let (lower, upper) = bound(*single);
            Ok(Range { lower, upper })
        }
        [first, second] => {
            if !matches!(first.0, ">" | ">=") || !matches!(second.0, "<" | "<=") {
                return Err(bad(format!(
                    "a range is a lower bound (> or >=) then an upper bound (< or <=), not `{}` \
                     then `{}`",
                    first.0, second.0
                )));
            }
            if first.1 >= second.1 {
                return Err(bad(format!(
                    "the lower bound {} is not below the upper bound {}",
                    first.1, second.1
                )));
            }
            Ok(Range {
                lower: bound(*first).0,
                upper: bound(*second).1,
            })
        }
        _ => Err(bad("no terms".to_owned())),
    }
}

/// `cidr`: an IPv4 or IPv6 address, `/`, and how many leading bits name the network ("IP address
/// matching").
fn cidr(key: &str, text: &str) -> Result<Network, FilterPolicyError> {
    let bad = |reason: &'static str| FilterPolicyError::Cidr {
        key: key.to_owned(),
        value: text.to_owned(),
        reason,
    };
    let Some((address, bits)) = text.split_once('/') else {
        return Err(bad("one '/' is needed between the address and the bits"));
    };
    let bits: u8 = bits
        .parse()
        .map_err(|_| bad("the bits after '/' must be a whole number"))?;
    let address: IpAddr = address
        .parse()
        .map_err(|_| bad("the part before '/' is not an IPv4 or IPv6 address"))?;
    let max_bits = if address.is_ipv4() { 32 } else { 128 };
    if bits > max_bits {
        return Err(bad(
            "more bits than the address has (32 for IPv4, 128 for IPv6)",
        ));
    }
    Ok(Network { address, bits })
}
