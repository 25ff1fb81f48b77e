//! The peek's `filter`: a subset of MongoDB's query operators, as the seed's API takes them, over
//! each message as the API shows it (`{"_id": ..., "payload": ..., "attempts": ...}`), turned
//! into the operations API's [`MessageFilter`] (its [`matching`](MessageFilter::matching) test).
//!
//! | form | matches when |
//! | --- | --- |
//! | `{"payload.user.name": "ann"}` | the field (a dotted path into the document) equals the value; a field holding an array matches when one element does |
//! | `{"f": {"$eq": v}}`, `$ne` | equal, not equal (a missing field is not equal) |
//! | `$gt`, `$gte`, `$lt`, `$lte` | numbers by value, strings in byte order; other types never |
//! | `$in`, `$nin` (an array) | equals one of, none of |
//! | `$exists` (a boolean) | the field is there, or is not |
//! | `{"$and": [..]}`, `{"$or": [..]}`, `{"$nor": [..]}` | all, any, none of the filters |
//!
//! Several fields, or several operators on one field, must all hold. Any other operator (`$regex`,
//! `$elemMatch`, `$where`, ...) is refused with a [`FilterError`] that names it, rather than
//! ignored.

use serde_json::{Map, Value};

use crate::operations::{Message, MessageFilter};

/// Why a peek's `filter` was refused: the request's fault (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FilterError {
    /// The filter is not JSON.
    #[error("`filter` is not JSON ({0}); pass an object such as {{\"payload.id\": 7}}")]
    NotJson(String),
    /// The filter, or one inside `$and`/`$or`/`$nor`, is not an object.
    #[error("`filter` must be a JSON object (found {0}), such as {{\"payload.id\": 7}}")]
    NotAnObject(&'static str),
    /// An operator outside the supported subset.
    #[error(
        "`filter` operator `{0}` is not supported; use $eq, $ne, $gt, $gte, $lt, $lte, $in, $nin, \
         $exists, $and, $or or $nor"
    )]
    UnsupportedOperator(String),
    /// An operator with an operand of the wrong type.
    #[error("`filter` operator `{operator}` takes {expected}")]
    Operand {
        /// The operator.
        operator: String,
        /// What it takes.
        expected: &'static str,
    },
}

/// A parsed filter: a tree of conditions on the shown document.
#[derive(Debug, Clone, PartialEq)]
enum Condition {
    All(Vec<Condition>),
    Any(Vec<Condition>),
    None(Vec<Condition>),
    Field { path: Vec<String>, test: Test },
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    Eq(Value),
    Ne(Value),
    Gt(Value),
    Gte(Value),
    Lt(Value),
    Lte(Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
}

/// A JSON value's kind, for error messages.
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

/// Parses `text` (the `filter` query parameter) into a [`MessageFilter`].
///
/// # Errors
///
/// [`FilterError`] for text that is not a JSON object or uses an operator outside the subset.
pub fn parse(text: &str) -> Result<MessageFilter, FilterError> {
    let value: Value =
        serde_json::from_str(text).map_err(|error| FilterError::NotJson(error.to_string()))?;
    let condition = condition(&value)?;
    Ok(MessageFilter::new().matching(move |message| holds(&condition, &document(message))))
}

/// A message as the API shows it: what a filter looks at.
pub(super) fn document(message: &Message) -> Value {
    let mut document = Map::new();
    document.insert("_id".into(), Value::String(message.message_id.clone()));
    document.insert("payload".into(), payload(&message.body));
    if let Some(attempts) = message.receive_count {
        document.insert("attempts".into(), Value::from(attempts));
    }
    Value::Object(document)
}

/// A body as the payload it was pushed as: its JSON, or the text itself when it is not JSON (a
/// message sent to the queue by something other than this API).
pub(super) fn payload(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|_| Value::String(body.to_owned()))
}

fn condition(value: &Value) -> Result<Condition, FilterError> {
    let Value::Object(fields) = value else {
        return Err(FilterError::NotAnObject(kind(value)));
    };
    let mut all = Vec::with_capacity(fields.len());
    for (key, operand) in fields {
        match key.as_str() {
            "$and" | "$or" | "$nor" => {
                let Value::Array(filters) = operand else {
                    return Err(FilterError::Operand {
                        operator: key.clone(),
                        expected: "an array of filters",
                    });
                };
                let parts = filters.iter().map(condition).collect::<Result<_, _>>()?;
                all.push(match key.as_str() {
                    "$and" => Condition::All(parts),
                    "$or" => Condition::Any(parts),
                    _ => Condition::None(parts),
                });
            }
            operator if operator.starts_with('$') => {
                return Err(FilterError::UnsupportedOperator(operator.to_owned()));
            }
            path => {
                let path: Vec<String> = path.split('.').map(str::to_owned).collect();
                for test in tests(operand)? {
                    all.push(Condition::Field {
                        path: path.clone(),
                        test,
                    });
                }
            }
        }
    }
    Ok(Condition::All(all))
}

/// The tests on one field: an object of operators, or a value to equal.
fn tests(operand: &Value) -> Result<Vec<Test>, FilterError> {
    let operators = match operand {
        Value::Object(map) if !map.is_empty() && map.keys().all(|key| key.starts_with('$')) => map,
        _ => return Ok(vec![Test::Eq(operand.clone())]),
    };
    operators
        .iter()
        .map(|(operator, value)| {
            let list = || match value {
                Value::Array(values) => Ok(values.clone()),
                _ => Err(FilterError::Operand {
                    operator: operator.clone(),
                    expected: "an array",
                }),
            };
            Ok(match operator.as_str() {
                "$eq" => Test::Eq(value.clone()),
                "$ne" => Test::Ne(value.clone()),
                "$gt" => Test::Gt(value.clone()),
                "$gte" => Test::Gte(value.clone()),
                "$lt" => Test::Lt(value.clone()),
                "$lte" => Test::Lte(value.clone()),
                "$in" => Test::In(list()?),
                "$nin" => Test::Nin(list()?),
                "$exists" => match value {
                    Value::Bool(exists) => Test::Exists(*exists),
                    _ => {
                        return Err(FilterError::Operand {
                            operator: operator.clone(),
                            expected: "true or false",
                        })
                    }
                },
                other => return Err(FilterError::UnsupportedOperator(other.to_owned())),
            })
        })
        .collect()
}

fn holds(condition: &Condition, document: &Value) -> bool {
    match condition {
        Condition::All(parts) => parts.iter().all(|part| holds(part, document)),
        Condition::Any(parts) => parts.iter().any(|part| holds(part, document)),
        Condition::None(parts) => !parts.iter().any(|part| holds(part, document)),
        Condition::Field { path, test } => {
            let found = path
                .iter()
                .try_fold(document, |value, step| value.get(step.as_str()));
            passes(test, found)
        }
    }
}

fn passes(test: &Test, found: Option<&Value>) -> bool {
    match test {
        Test::Eq(value) => found.is_some_and(|found| equals(found, value)),
        Test::Ne(value) => !found.is_some_and(|found| equals(found, value)),
        Test::In(values) => found.is_some_and(|found| values.iter().any(|v| equals(found, v))),
        Test::Nin(values) => !found.is_some_and(|found| values.iter().any(|v| equals(found, v))),
        Test::Exists(exists) => found.is_some() == *exists,
        Test::Gt(value) => compares(found, value, |o| o.is_gt()),
        Test::Gte(value) => compares(found, value, |o| o.is_ge()),
        Test::Lt(value) => compares(found, value, |o| o.is_lt()),
        Test::Lte(value) => compares(found, value, |o| o.is_le()),
    }
}

/// Mongo's equality: the same value, or an array field one of whose elements is it.
fn equals(found: &Value, value: &Value) -> bool {
    if same(found, value) {
        return true;
    }
    match found {
        Value::Array(elements) if !value.is_array() => elements.iter().any(|e| same(e, value)),
        _ => false,
    }
}

/// Equal values, numbers by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        #[allow(clippy::float_cmp)]
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}

fn compares(
    found: Option<&Value>,
    value: &Value,
    wanted: impl Fn(std::cmp::Ordering) -> bool,
) -> bool {
    let Some(found) = found else {
        return false;
    };
    let ordering = match (found, value) {
        (Value::Number(a), Value::Number(b)) => a
            .as_f64()
            .zip(b.as_f64())
            .and_then(|(a, b)| a.partial_cmp(&b)),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    };
    ordering.is_some_and(wanted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn matches(filter: Value, document: &Value) -> bool {
        holds(&condition(&filter).expect("a supported filter"), document)
    }

    #[test]
    fn each_operator_against_a_table_of_documents() {
        let document = json!({
            "_id": "m-1",
            "payload": {"user": {"name": "ann", "age": 41}, "tags": ["vip", "eu"], "amount": 12.5},
            "attempts": 2
        });
        let cases = [
            (json!({}), true),
            (json!({"_id": "m-1"}), true),
            (json!({"_id": "m-2"}), false),
            (json!({"payload.user.name": "ann"}), true),
            (json!({"payload.user.name": "bob"}), false),
            (json!({"payload.user.name": {"$eq": "ann"}}), true),
            (json!({"payload.user.name": {"$ne": "ann"}}), false),
            (json!({"payload.missing": {"$ne": 1}}), true),
            (json!({"payload.user.age": {"$gt": 40}}), true),
            (json!({"payload.user.age": {"$gt": 41}}), false),
            (json!({"payload.user.age": {"$gte": 41, "$lt": 42}}), true),
            (json!({"payload.user.age": {"$lte": 40}}), false),
            (json!({"payload.user.age": {"$gt": "40"}}), false),
            (json!({"payload.user.name": {"$gt": "am"}}), true),
            (json!({"payload.amount": 12.5}), true),
            (json!({"payload.user.age": 41.0}), true),
            (json!({"payload.tags": "vip"}), true),
            (json!({"payload.tags": "us"}), false),
            (json!({"payload.tags": ["vip", "eu"]}), true),
            (json!({"payload.user.name": {"$in": ["bob", "ann"]}}), true),
            (
                json!({"payload.user.name": {"$nin": ["bob", "ann"]}}),
                false,
            ),
            (json!({"payload.user": {"$exists": true}}), true),
            (json!({"payload.nope": {"$exists": true}}), false),
            (json!({"payload.nope": {"$exists": false}}), true),
            (json!({"attempts": {"$gte": 2}}), true),
            (json!({"$or": [{"_id": "x"}, {"attempts": 2}]}), true),
            (json!({"$or": [{"_id": "x"}, {"attempts": 3}]}), false),
            (json!({"$and": [{"_id": "m-1"}, {"attempts": 2}]}), true),
            (json!({"$nor": [{"_id": "x"}, {"attempts": 3}]}), true),
            (json!({"payload.user.name": "ann", "attempts": 3}), false),
            (json!({"payload.user": {"name": "ann", "age": 41}}), true),
        ];
        for (filter, expected) in cases {
            assert_eq!(matches(filter.clone(), &document), expected, "{filter}");
        }
    }

    #[test]
    fn refused_filters_say_why() {
        assert!(matches!(parse("{"), Err(FilterError::NotJson(_))));
        assert_eq!(
            parse("[1]").unwrap_err(),
            FilterError::NotAnObject("an array")
        );
        assert_eq!(
            parse(r#"{"payload.a": {"$regex": "x"}}"#).unwrap_err(),
            FilterError::UnsupportedOperator("$regex".into())
        );
        assert_eq!(
            parse(r#"{"$where": "1"}"#).unwrap_err(),
            FilterError::UnsupportedOperator("$where".into())
        );
        assert!(matches!(
            parse(r#"{"a": {"$in": 3}}"#).unwrap_err(),
            FilterError::Operand { .. }
        ));
        assert!(matches!(
            parse(r#"{"$or": {}}"#).unwrap_err(),
            FilterError::Operand { .. }
        ));
        let message = parse(r#"{"a": {"$regex": "x"}}"#).unwrap_err().to_string();
        assert!(
            message.contains("$regex") && message.contains("$eq"),
            "{message}"
        );
    }
}
