//! A parsed filter policy matched against a message: its attributes or its JSON body, each seen
//! as the values found under a key.

use std::borrow::Cow;
use std::net::IpAddr;

use serde_json::Value;

use super::parse::{round, KeyRule, Literal, Node, Pattern};
use crate::model::wire::MessageAttributes;

/// One value found in a message under a key.
#[derive(Debug)]
pub(super) enum Found<'a> {
    String(Cow<'a, str>),
    /// Rounded like the policy's numbers.
    Number(f64),
    Bool(bool),
    Null,
}

/// A message as a policy sees it.
pub(super) trait Message {
    /// The values under `path`, or `None` when the message does not have the key (for `exists`
    /// and `anything-but`, which need it present).
    fn values(&self, path: &[String]) -> Option<Vec<Found<'_>>>;
}

/// Whether `message` passes the policy `node`.
pub(super) fn matches(node: &Node, message: &impl Message) -> bool {
    match node {
        Node::All(children) => children.iter().all(|child| matches(child, message)),
        Node::Any(children) => children.iter().any(|child| matches(child, message)),
        Node::Key(rule) => key_matches(rule, message),
    }
}

/// A key accepts when one of its patterns does: `exists` by the key's presence, the others by one
/// of the values under the key ("Amazon SNS subscription filter policies": at least one property
/// value matches).
fn key_matches(rule: &KeyRule, message: &impl Message) -> bool {
    let found = message.values(&rule.path);
    rule.patterns.iter().any(|pattern| match pattern {
        Pattern::Exists(wanted) => *wanted == found.is_some(),
        other => found.iter().flatten().any(|value| accepts(other, value)),
    })
}

fn accepts(pattern: &Pattern, value: &Found<'_>) -> bool {
    match (pattern, value) {
        (Pattern::Exact(literal), value) => equals(literal, value),
        (Pattern::Prefix(prefix), Found::String(text)) => text.starts_with(prefix.as_str()),
        (Pattern::Suffix(suffix), Found::String(text)) => text.ends_with(suffix.as_str()),
        (Pattern::EqualsIgnoreCase(lower), Found::String(text)) => text.to_lowercase() == *lower,
        // Among an array's values, one that is none of these is enough ("Numeric value
        // matching": [100, 50] passes anything-but [100, 500]).
        (Pattern::AnythingBut(excluded), value) => {
            !excluded.iter().any(|literal| equals(literal, value))
        }
        (Pattern::AnythingButPrefix(prefix), Found::String(text)) => {
            !text.starts_with(prefix.as_str())
        }
        (Pattern::Numeric(range), Found::Number(number)) => range.contains(*number),
        (Pattern::Cidr(network), Found::String(text)) => text
            .parse::<IpAddr>()
            .is_ok_and(|address| network.contains(address)),
        _ => false,
    }
}

/// Strings match strings and numbers match numbers, never each other ("Prefixes are supported
/// for string matching only"; a `Number` attribute compares as a number).
fn equals(literal: &Literal, value: &Found<'_>) -> bool {
    match (literal, value) {
        (Literal::String(expected), Found::String(text)) => expected == text,
        (Literal::Number(expected), Found::Number(number)) => expected == number,
        (Literal::Bool(expected), Found::Bool(flag)) => expected == flag,
        (Literal::Null, Found::Null) => true,
        _ => false,
    }
}

/// A number from a message, rounded like the policy's, or `None` if it is not finite.
fn number(value: f64) -> Option<f64> {
    value.is_finite().then(|| round(value))
}

/// The scalar values in a JSON value: itself, or the elements of an array (arrays in arrays too).
/// Objects hold no values of their own.
fn scalars<'a>(value: &'a Value, out: &mut Vec<Found<'a>>) {
    match value {
        Value::String(text) => out.push(Found::String(Cow::Borrowed(text))),
        Value::Number(n) => out.extend(n.as_f64().and_then(number).map(Found::Number)),
        Value::Bool(flag) => out.push(Found::Bool(*flag)),
        Value::Null => out.push(Found::Null),
        Value::Array(items) => items.iter().for_each(|item| scalars(item, out)),
        Value::Object(_) => {}
    }
}

/// The attributes of a message, for a `MessageAttributes` policy.
pub(super) struct Attributes<'a>(pub(super) &'a MessageAttributes);

impl Message for Attributes<'_> {
    fn values(&self, path: &[String]) -> Option<Vec<Found<'_>>> {
        let [name] = path else {
            return None;
        };
        let attribute = self.0.get(name)?;
        let text = attribute.string_value.as_deref().unwrap_or_default();
        let data_type = attribute.data_type.as_str();
        // A custom type keeps its base type's matching: `Number.float` is a Number.
        let base = data_type.split('.').next().unwrap_or_default();
        if data_type == "String.Array" {
            // Each element counts on its own: strings as strings, numbers as numbers
            // ("String value matching"). A value that is not a JSON array has no elements.
            let mut found = Vec::new();
            if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text) {
                for item in &items {
                    owned_scalars(item, &mut found);
                }
            }
            return Some(found);
        }
        match base {
            "String" => Some(vec![Found::String(Cow::Borrowed(text))]),
            "Number" => Some(
                text.trim()
                    .parse::<f64>()
                    .ok()
                    .and_then(number)
                    .map(Found::Number)
                    .into_iter()
                    .collect(),
            ),
            // "Amazon SNS ignores message attributes with the Binary data type": as if absent.
            _ => None,
        }
    }
}

/// [`scalars`] of a value parsed here, so its strings are copied out.
fn owned_scalars(value: &Value, out: &mut Vec<Found<'static>>) {
    let mut borrowed = Vec::new();
    scalars(value, &mut borrowed);
    out.extend(borrowed.into_iter().map(|found| match found {
        Found::String(text) => Found::String(Cow::Owned(text.into_owned())),
        Found::Number(n) => Found::Number(n),
        Found::Bool(flag) => Found::Bool(flag),
        Found::Null => Found::Null,
    }));
}

/// A JSON object body, for a `MessageBody` policy.
pub(super) struct Body<'a>(pub(super) &'a Value);

impl Message for Body<'_> {
    fn values(&self, path: &[String]) -> Option<Vec<Found<'_>>> {
        // Walk the nested keys; an array on the way stands for each of its elements, so a key
        // under an array of objects gathers the values of every element.
        let mut level = vec![self.0];
        for key in path {
            let mut next = Vec::new();
            for value in level {
                objects(value, &mut |object| next.extend(object.get(key)));
            }
            level = next;
        }
        let mut found = Vec::new();
        for value in level {
            scalars(value, &mut found);
        }
        // A key whose value is an object, or an empty array, has no value to match: SNS matches
        // leaves only, so it counts as absent.
        (!found.is_empty()).then_some(found)
    }
}

/// Calls `each` with `value` if it is an object, or with each object in it if it is an array.
fn objects<'a>(value: &'a Value, each: &mut impl FnMut(&'a serde_json::Map<String, Value>)) {
    match value {
        Value::Object(object) => each(object),
        Value::Array(items) => items.iter().for_each(|item| objects(item, each)),
        _ => {}
    }
}
