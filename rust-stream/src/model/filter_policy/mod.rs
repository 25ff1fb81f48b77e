//! Amazon SNS subscription filter policies as data: parsed, checked against SNS's limits, and
//! matched against a message, with no service in the loop.
//!
//! A *filter policy* is the JSON document an SNS subscription carries to say which of a topic's
//! messages it wants. Its keys name message attributes (scope `MessageAttributes`, the default) or
//! properties of a JSON message body (scope `MessageBody`, where keys may nest); each key lists the
//! values it accepts. A message is delivered when every key of the policy accepts the message
//! (AND across keys), a key accepting when at least one of its values matches (OR within a key);
//! `"$or"` joins whole sub-policies with OR. A value is an exact string, number, `true`, `false`
//! or `null`, or an operator object: `prefix`, `suffix`, `equals-ignore-case`, `anything-but`,
//! `numeric`, `exists` and `cidr`.
//!
//! ```
//! use rust_stream::model::filter_policy::{FilterPolicy, FilterPolicyScope};
//! use rust_stream::model::wire::{MessageAttributeValue, MessageAttributes};
//!
//! let policy = FilterPolicy::parse(
//!     r#"{"kind": ["payment.posted"], "amount": [{"numeric": [">=", 1000]}]}"#,
//!     FilterPolicyScope::MessageAttributes,
//! )?;
//!
//! let mut attributes = MessageAttributes::new();
//! attributes.insert("kind".into(), MessageAttributeValue::string("payment.posted"));
//! attributes.insert("amount".into(), MessageAttributeValue::number("2500"));
//! assert!(policy.matches_attributes(&attributes));
//!
//! attributes.insert("amount".into(), MessageAttributeValue::number("999.99"));
//! assert!(!policy.matches_attributes(&attributes));
//!
//! // The same rules over a JSON body, where keys may nest.
//! let body_policy = FilterPolicy::parse(
//!     r#"{"payment": {"currency": [{"equals-ignore-case": "eur"}]}}"#,
//!     FilterPolicyScope::MessageBody,
//! )?;
//! let body: serde_json::Value = serde_json::from_str(r#"{"payment": {"currency": "EUR"}}"#)?;
//! assert!(body_policy.matches_body(&body));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! How the parts fit:
//! - [`FilterPolicy::parse`] reads the JSON (`parse.rs`) into a tree of AND and OR nodes whose
//!   leaves are a key path and the patterns it accepts, and checks SNS's limits on the way: policy
//!   size, operator syntax, numeric ranges, nesting only in the body scope, at most
//!   [`MAX_KEYS`] keys and at most [`MAX_COMBINATIONS`] combinations. Every refusal is a
//!   [`FilterPolicyError`] naming the key and saying how to fix it.
//! - [`FilterPolicy::matches_attributes`] and [`FilterPolicy::matches_body`] walk that tree
//!   (`matching.rs`): each key turns the message into the values found under it (the elements of
//!   a `String.Array` attribute or a JSON array each count on their own), and the key accepts
//!   when one of its patterns accepts one of those values, or, for `exists`, when the key is
//!   present or absent as asked.
//! - The policy keeps the text it was parsed from ([`FilterPolicy::as_json`]), so that the very
//!   same document is sent to SNS and written in the AsyncAPI document.
//! - [`FilterPolicyScope`] (`scope.rs`), [`FilterPolicyError`] (`error.rs`) and SNS's limits
//!   (`limits.rs`) stand in files of their own, which `parse.rs` and `matching.rs` use without
//!   going through this file.
//!
//! The rules follow the Amazon SNS Developer Guide: "Amazon SNS subscription filter policies",
//! "Filter policy constraints", "AND/OR logic", "Key matching", "Numeric value matching" and
//! "String value matching". Nothing here calls a service.

use std::fmt;

use super::wire::MessageAttributes;

mod error;
mod limits;
mod matching;
mod parse;
mod scope;

pub use error::FilterPolicyError;
pub use limits::{MAX_COMBINATIONS, MAX_KEYS, MAX_NUMBER, MAX_POLICY_SIZE, NUMBER_DECIMALS};
pub use scope::FilterPolicyScope;

#[cfg(test)]
mod tests;

/// An SNS subscription filter policy: parsed, within SNS's limits, ready to match messages.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterPolicy {
    json: String,
    scope: FilterPolicyScope,
    root: parse::Node,
}

impl FilterPolicy {
    /// Parses `json` as a filter policy of this scope and checks it against SNS's rules and
    /// limits, so that a policy this accepts is one SNS accepts too.
    ///
    /// # Errors
    ///
    /// A [`FilterPolicyError`] saying which key is wrong and how.
    pub fn parse(json: &str, scope: FilterPolicyScope) -> Result<Self, FilterPolicyError> {
        let root = parse::parse(json, scope)?;
        Ok(Self {
            json: json.to_owned(),
            scope,
            root,
        })
    }

    /// The JSON text the policy was parsed from, unchanged: what to send to SNS as the
    /// `FilterPolicy` subscription attribute.
    pub fn as_json(&self) -> &str {
        &self.json
    }

    /// The scope the policy was parsed for.
    pub fn scope(&self) -> FilterPolicyScope {
        self.scope
    }

    /// Whether SNS would deliver a message with these attributes, the policy read in the
    /// `MessageAttributes` scope. `String` attributes match string values, `Number` attributes
    /// match numbers (compared as numbers: `"3.015e2"` equals `301.5`), each element of a
    /// `String.Array` attribute (a JSON array) matches on its own, and `Binary` attributes are
    /// ignored, as though absent.
    ///
    /// A policy parsed for the `MessageBody` scope matches no attributes.
    pub fn matches_attributes(&self, attributes: &MessageAttributes) -> bool {
        self.scope == FilterPolicyScope::MessageAttributes
            && matching::matches(&self.root, &matching::Attributes(attributes))
    }

    /// Whether SNS would deliver a message with this body, the policy read in the `MessageBody`
    /// scope. Only a JSON object can match: SNS drops a body that is not JSON, or not an object,
    /// for a body-scope subscription. Arrays in the body match element by element.
    ///
    /// A policy parsed for the `MessageAttributes` scope matches no body.
    pub fn matches_body(&self, body: &serde_json::Value) -> bool {
        self.scope == FilterPolicyScope::MessageBody
            && body.is_object()
            && matching::matches(&self.root, &matching::Body(body))
    }
}

impl fmt::Display for FilterPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.json)
    }
}
