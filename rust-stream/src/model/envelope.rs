//! What SNS puts in an SQS queue for a publish: the JSON notification envelope when the
//! subscription's raw message delivery is off, the publish as it was when it is on.
//!
//! An [`Envelope`] is built from a [`Publish`] by the in-process account
//! ([`Envelope::unsigned`]) and read back by a consumer ([`Envelope::parse`]), which tells a body
//! that is no envelope at all (a raw delivery, or a message sent straight to the queue) from an
//! envelope that is broken ([`EnvelopeError`]). Its message attributes come back as the crate's
//! [`MessageAttributes`], a `Binary` value's base64 decoded, so a handler sees the same headers
//! from either kind of delivery. [`QueueDelivery`] says what one SQS subscription receives: the
//! body, the attributes (carried as SQS message attributes only by a raw delivery, at most
//! [`MAX_RAW_DELIVERY_ATTRIBUTES`]), the group and
//! deduplication ids.
//!
//! The fields are those AWS documents for a notification
//! (<https://docs.aws.amazon.com/sns/latest/dg/sns-message-and-json-formats.html#http-notification-json>,
//! and the SQS form in <https://docs.aws.amazon.com/sns/latest/dg/sns-sqs-as-subscriber.html>):
//! `Type`, `MessageId`, `TopicArn`, `Subject` (only when the publish had one), `Message`,
//! `Timestamp`, `SignatureVersion`, `Signature`, `SigningCertURL`, `UnsubscribeURL`,
//! `MessageAttributes` (each `{"Type": .., "Value": ..}`), and on FIFO topics `SequenceNumber`.
//!
//! **The in-process account does not sign.** AWS signs each notification with a private key and
//! points `SigningCertURL` at its certificate; an envelope built here carries
//! [`UNSIGNED_SIGNATURE`] and [`UNSIGNED_CERT_URL`] instead, so a verifier refuses it rather than
//! trusting it, and [`Envelope::is_unsigned`] tells it apart.
//!
//! ```
//! use rust_stream::model::envelope::Envelope;
//! use rust_stream::model::topic::{Publish, TopicArn};
//! use rust_stream::model::wire::MessageAttributeValue;
//!
//! let topic = TopicArn::new("us-east-1", "000000000000", "payments-posted").unwrap();
//! let publish = Publish::new(r#"{"amount":120}"#)
//!     .subject("posted")
//!     .attribute("kind", MessageAttributeValue::string("card"))
//!     .attribute("digest", MessageAttributeValue::binary(vec![0xde, 0xad]));
//! let envelope = Envelope::unsigned(
//!     &publish,
//!     &topic,
//!     "5f1c0e4e-0000-4000-8000-000000000001",
//!     1_764_633_600_123,
//!     &topic.subscription_arn("ledger"),
//! );
//! let body = envelope.to_json();
//! assert!(body.contains(r#""Timestamp":"2025-12-02T00:00:00.123Z""#));
//! assert!(body.contains(r#""digest":{"Type":"Binary","Value":"3q0="}"#));
//!
//! let read = Envelope::parse(&body).unwrap();
//! assert_eq!(read, envelope);
//! assert_eq!(read.message, r#"{"amount":120}"#);
//! assert_eq!(read.message_attributes, publish.message_attributes);
//! assert!(read.is_unsigned());
//! // A raw delivery is no envelope: the consumer decodes it as it is.
//! assert!(Envelope::parse(r#"{"amount":120}"#).unwrap_err().is_not_an_envelope());
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::base64;
use super::error::{ErrorKind, TransportError};
use super::rules::fail;
use super::topic::{Publish, TopicArn, MAX_RAW_DELIVERY_ATTRIBUTES};
use super::wire::{MessageAttributeValue, MessageAttributes, SendMessage};

/// The `Type` of a notification, the only kind SNS delivers to an SQS queue.
pub const NOTIFICATION_TYPE: &str = "Notification";
/// The `SignatureVersion` an envelope built here carries: AWS's `1` (SHA1withRSA), the version
/// SNS writes unless a topic asks for `2`.
pub const SIGNATURE_VERSION: &str = "1";
/// The `Signature` of an envelope the in-process account built: not a signature, and not base64,
/// so no verifier mistakes it for one.
pub const UNSIGNED_SIGNATURE: &str = "UNSIGNED: built by the rust-stream in-process account";
/// The `SigningCertURL` of an envelope the in-process account built: no certificate, and not an
/// `https://sns.*.amazonaws.com` address, which verifiers require before they fetch one.
pub const UNSIGNED_CERT_URL: &str = "urn:rust-stream:in-process-account:unsigned";

/// The notification SNS delivers to an SQS queue when raw message delivery is off.
///
/// The publish's message is in [`message`](Self::message) as it was published; its attributes
/// are in [`message_attributes`](Self::message_attributes) (the SQS message itself has none).
/// Fields AWS always sends but a test double might leave out (the signature's, the unsubscribe
/// address) are optional when parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// `MessageId`: the publish's id, the same in every subscription's copy.
    pub message_id: String,
    /// `TopicArn`: the topic the message was published to.
    pub topic_arn: TopicArn,
    /// `Subject`, when the publish had one.
    pub subject: Option<String>,
    /// `Message`: the published message.
    pub message: String,
    /// `Timestamp`: when SNS accepted the publish, ISO 8601 in UTC with milliseconds
    /// (`2012-05-02T00:54:06.655Z`); [`timestamp_millis`](Self::timestamp_millis) reads it.
    pub timestamp: String,
    /// `SequenceNumber`: on FIFO topics, the number SNS gave the publish.
    pub sequence_number: Option<String>,
    /// `SignatureVersion`: `1` (SHA1withRSA) or `2` (SHA256withRSA).
    pub signature_version: Option<String>,
    /// `Signature`: base64 of AWS's signature over the notification's fields, or
    /// [`UNSIGNED_SIGNATURE`].
    pub signature: Option<String>,
    /// `SigningCertURL`: where AWS's certificate is, or [`UNSIGNED_CERT_URL`].
    pub signing_cert_url: Option<String>,
    /// `UnsubscribeURL`: the address that ends the subscription.
    pub unsubscribe_url: Option<String>,
    /// `MessageAttributes`: the publish's attributes, binary values decoded.
    pub message_attributes: MessageAttributes,
}

impl Envelope {
    /// The envelope the in-process account delivers for `publish` on `topic` to subscription
    /// `subscription_arn`: message id `message_id`, published at `published_at_millis` (since the
    /// Unix epoch), marked unsigned. A FIFO topic's sequence number is added with
    /// [`with_sequence_number`](Self::with_sequence_number).
    pub fn unsigned(
        publish: &Publish,
        topic: &TopicArn,
        message_id: impl Into<String>,
        published_at_millis: u64,
        subscription_arn: &str,
    ) -> Self {
        Self {
            message_id: message_id.into(),
            topic_arn: topic.clone(),
            subject: publish.subject.clone(),
            message: publish.message.clone(),
            timestamp: format_timestamp(published_at_millis),
            sequence_number: None,
            signature_version: Some(SIGNATURE_VERSION.to_owned()),
            signature: Some(UNSIGNED_SIGNATURE.to_owned()),
            signing_cert_url: Some(UNSIGNED_CERT_URL.to_owned()),
            unsubscribe_url: Some(format!(
                "https://sns.{}.amazonaws.com/?Action=Unsubscribe&SubscriptionArn={subscription_arn}",
                topic.region()
            )),
            message_attributes: publish.message_attributes.clone(),
        }
    }

    /// With `SequenceNumber`, which SNS adds on FIFO topics.
    #[must_use]
    pub fn with_sequence_number(mut self, sequence_number: impl Into<String>) -> Self {
        self.sequence_number = Some(sequence_number.into());
        self
    }

    /// Whether the in-process account built this envelope: it carries [`UNSIGNED_SIGNATURE`].
    pub fn is_unsigned(&self) -> bool {
        self.signature.as_deref() == Some(UNSIGNED_SIGNATURE)
    }

    /// [`timestamp`](Self::timestamp) as milliseconds since the Unix epoch, when it is ISO 8601 in
    /// UTC (`YYYY-MM-DDTHH:MM:SS[.fraction]Z`).
    pub fn timestamp_millis(&self) -> Option<u64> {
        parse_timestamp(&self.timestamp)
    }

    /// The envelope as the JSON text SNS puts in the SQS message's body, fields in AWS's order,
    /// `Subject`, `SequenceNumber` and `MessageAttributes` only when there are some.
    pub fn to_json(&self) -> String {
        let topic_arn = self.topic_arn.to_string();
        let outgoing = Outgoing {
            kind: NOTIFICATION_TYPE,
            message_id: &self.message_id,
            sequence_number: self.sequence_number.as_deref(),
            topic_arn: &topic_arn,
            subject: self.subject.as_deref(),
            message: &self.message,
            timestamp: &self.timestamp,
            signature_version: self.signature_version.as_deref(),
            signature: self.signature.as_deref(),
            signing_cert_url: self.signing_cert_url.as_deref(),
            unsubscribe_url: self.unsubscribe_url.as_deref(),
            message_attributes: self
                .message_attributes
                .iter()
                .map(|(name, value)| (name.as_str(), OutgoingAttribute::of(value)))
                .collect(),
        };
        serde_json::to_string(&outgoing).expect("an envelope of strings always serializes")
    }

    /// Reads an SQS message body as an SNS notification envelope.
    ///
    /// A body that is not a JSON object with `"Type": "Notification"` and a `TopicArn` is
    /// [`EnvelopeError::NotAnEnvelope`]: a raw delivery, or a message sent to the queue directly,
    /// which the consumer decodes as it is. One that is, but lacks `MessageId`, `Message` or
    /// `Timestamp`, has a field of the wrong JSON type, a topic ARN that is not one, or an
    /// attribute that cannot be read (an unknown type, a `Binary` value that is not base64), is
    /// [`EnvelopeError::Invalid`], naming the field.
    pub fn parse(body: &str) -> Result<Self, EnvelopeError> {
        // Most raw bodies are not JSON objects: no parser is started for them.
        if !body.trim_start().starts_with('{') {
            return Err(EnvelopeError::NotAnEnvelope);
        }
        let Ok(incoming) = serde_json::from_str::<Incoming>(body) else {
            return Err(EnvelopeError::NotAnEnvelope);
        };
        let is_notification =
            matches!(&incoming.kind, Some(Value::String(kind)) if kind == NOTIFICATION_TYPE);
        let Some(Value::String(topic_arn)) = incoming.topic_arn.filter(|_| is_notification) else {
            return Err(EnvelopeError::NotAnEnvelope);
        };
        let topic_arn = TopicArn::parse(&topic_arn)
            .map_err(|_| EnvelopeError::invalid("TopicArn", "it is not an SNS topic ARN"))?;
        Ok(Self {
            message_id: required("MessageId", incoming.message_id)?,
            topic_arn,
            subject: optional("Subject", incoming.subject)?,
            message: required("Message", incoming.message)?,
            timestamp: required("Timestamp", incoming.timestamp)?,
            sequence_number: optional("SequenceNumber", incoming.sequence_number)?,
            signature_version: optional("SignatureVersion", incoming.signature_version)?,
            signature: optional("Signature", incoming.signature)?,
            signing_cert_url: optional("SigningCertURL", incoming.signing_cert_url)?,
            unsubscribe_url: optional("UnsubscribeURL", incoming.unsubscribe_url)?,
            message_attributes: attributes(incoming.message_attributes)?,
        })
    }
}

/// Why an SQS message body could not be read as an SNS envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// The body is not an SNS notification: a raw delivery or a message sent to the queue
    /// directly, to be decoded as it is.
    #[error("the body is not an SNS notification envelope")]
    NotAnEnvelope,
    /// The body is an SNS notification with a field that cannot be read.
    #[error("the SNS notification envelope's `{field}` is invalid: {reason}")]
    Invalid {
        /// The field, as SNS names it (`MessageAttributes.kind.Value` for an attribute's).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl EnvelopeError {
    fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// Whether the body is simply not an envelope (rather than a broken one).
    pub fn is_not_an_envelope(&self) -> bool {
        matches!(self, Self::NotAnEnvelope)
    }
}

/// The envelope as it is written: borrowed, in AWS's field order.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct Outgoing<'a> {
    #[serde(rename = "Type")]
    kind: &'a str,
    message_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence_number: Option<&'a str>,
    topic_arn: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject: Option<&'a str>,
    message: &'a str,
    timestamp: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    signature_version: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<&'a str>,
    #[serde(rename = "SigningCertURL", skip_serializing_if = "Option::is_none")]
    signing_cert_url: Option<&'a str>,
    #[serde(rename = "UnsubscribeURL", skip_serializing_if = "Option::is_none")]
    unsubscribe_url: Option<&'a str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    message_attributes: BTreeMap<&'a str, OutgoingAttribute<'a>>,
}

/// One attribute as an envelope writes it: its type, and its value as text.
#[derive(Serialize)]
struct OutgoingAttribute<'a> {
    #[serde(rename = "Type")]
    data_type: &'a str,
    #[serde(rename = "Value")]
    value: Cow<'a, str>,
}

impl<'a> OutgoingAttribute<'a> {
    fn of(value: &'a MessageAttributeValue) -> Self {
        let text = match (&value.string_value, &value.binary_value) {
            (Some(text), _) => Cow::Borrowed(text.as_str()),
            (None, Some(bytes)) => Cow::Owned(base64::encode(bytes)),
            (None, None) => Cow::Borrowed(""),
        };
        Self {
            data_type: &value.data_type,
            value: text,
        }
    }
}

/// The envelope as it is read: any JSON under each known name, so that a body of the wrong shape
/// is told from a broken envelope after parsing, not by a parse error; other names are skipped.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Incoming {
    #[serde(rename = "Type", default)]
    kind: Option<Value>,
    #[serde(default)]
    message_id: Option<Value>,
    #[serde(default)]
    topic_arn: Option<Value>,
    #[serde(default)]
    subject: Option<Value>,
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    timestamp: Option<Value>,
    #[serde(default)]
    sequence_number: Option<Value>,
    #[serde(default)]
    signature_version: Option<Value>,
    #[serde(default)]
    signature: Option<Value>,
    #[serde(rename = "SigningCertURL", default)]
    signing_cert_url: Option<Value>,
    #[serde(rename = "UnsubscribeURL", default)]
    unsubscribe_url: Option<Value>,
    #[serde(default)]
    message_attributes: Option<Value>,
}

fn required(field: &str, value: Option<Value>) -> Result<String, EnvelopeError> {
    optional(field, value)?.ok_or_else(|| EnvelopeError::invalid(field, "it is missing"))
}

/// A field that may be absent (or `null`), and is text when present.
fn optional(field: &str, value: Option<Value>) -> Result<Option<String>, EnvelopeError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(EnvelopeError::invalid(field, "it is not a JSON string")),
    }
}

/// `MessageAttributes` read back: `{"name": {"Type": "..", "Value": ".."}}`, a `Binary` type's
/// value base64-decoded.
fn attributes(value: Option<Value>) -> Result<MessageAttributes, EnvelopeError> {
    let entries = match value {
        None | Some(Value::Null) => return Ok(MessageAttributes::new()),
        Some(Value::Object(entries)) => entries,
        Some(_) => {
            return Err(EnvelopeError::invalid(
                "MessageAttributes",
                "it is not a JSON object",
            ))
        }
    };
    let mut attributes = MessageAttributes::new();
    for (name, entry) in entries {
        let Value::Object(mut entry) = entry else {
            return Err(EnvelopeError::invalid(
                format!("MessageAttributes.{name}"),
                "it is not a JSON object with `Type` and `Value`",
            ));
        };
        let data_type = required(
            &format!("MessageAttributes.{name}.Type"),
            entry.remove("Type"),
        )?;
        let value_field = format!("MessageAttributes.{name}.Value");
        let text = required(&value_field, entry.remove("Value"))?;
        let value = match data_type.split('.').next().unwrap_or_default() {
            "String" | "Number" => MessageAttributeValue {
                data_type,
                string_value: Some(text),
                binary_value: None,
            },
            "Binary" => MessageAttributeValue {
                binary_value: Some(base64::decode(&text).ok_or_else(|| {
                    EnvelopeError::invalid(&value_field, "a Binary value must be padded base64")
                })?),
                data_type,
                string_value: None,
            },
            _ => {
                return Err(EnvelopeError::invalid(
                    format!("MessageAttributes.{name}.Type"),
                    format!("`{data_type}` is not String, String.Array, Number or Binary"),
                ))
            }
        };
        attributes.insert(name, value);
    }
    Ok(attributes)
}

/// The SQS message attributes a raw delivery carries: the publish's own, each keeping its data
/// type (SQS takes `String.Array` as a `String` with the label `Array`). A publish with more than
/// [`MAX_RAW_DELIVERY_ATTRIBUTES`] is not delivered to a raw SQS subscription: SNS discards it as
/// a client-side error, answered here as `InvalidParameterValue`. An enveloped delivery carries
/// the attributes in its JSON instead, any number of them.
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-message-attributes.html>,
/// <https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>)
pub fn raw_delivery_attributes(
    attributes: &MessageAttributes,
) -> Result<MessageAttributes, TransportError> {
    if attributes.len() > MAX_RAW_DELIVERY_ATTRIBUTES {
        return fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "the message has {} attributes; SNS sends at most {MAX_RAW_DELIVERY_ATTRIBUTES} \
                 to an SQS subscription with raw message delivery and discards the message: drop \
                 some, or turn raw message delivery off",
                attributes.len()
            ),
        );
    }
    Ok(attributes.clone())
}

/// How a publish reaches one SQS subscription: what the subscription and the two ends are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueDelivery<'a> {
    /// The envelope to deliver, or `None` for a raw delivery.
    pub envelope: Option<&'a Envelope>,
    /// Whether the topic is FIFO.
    pub topic_fifo: bool,
    /// Whether the subscribed queue is FIFO.
    pub queue_fifo: bool,
    /// The publish's deduplication id on a FIFO topic: its own, or the one content-based
    /// deduplication gave it ([`content_dedup_id`](super::topic::content_dedup_id)).
    pub dedup_id: Option<&'a str>,
}

impl QueueDelivery<'_> {
    /// The SQS message SNS sends for `publish`: the envelope's JSON or the raw message as the
    /// body; the attributes as SQS message attributes only when raw
    /// ([`raw_delivery_attributes`]); the group id to a FIFO queue, and to a standard queue only
    /// from a standard topic (fair queues; a FIFO topic's group id is not passed to standard
    /// queues); the deduplication id to a FIFO queue.
    /// (<https://docs.aws.amazon.com/sns/latest/dg/fifo-message-grouping.html>,
    /// <https://docs.aws.amazon.com/sns/latest/dg/fifo-message-dedup.html>,
    /// Publish, `MessageGroupId`: <https://docs.aws.amazon.com/sns/latest/api/API_Publish.html>)
    pub fn message(&self, publish: &Publish) -> Result<SendMessage, TransportError> {
        let (body, message_attributes) = match self.envelope {
            Some(envelope) => (envelope.to_json(), MessageAttributes::new()),
            None => (
                publish.message.clone(),
                raw_delivery_attributes(&publish.message_attributes)?,
            ),
        };
        let passes_group = self.queue_fifo || !self.topic_fifo;
        Ok(SendMessage {
            body,
            delay_seconds: None,
            message_attributes,
            group_id: publish.group_id.clone().filter(|_| passes_group),
            dedup_id: self.dedup_id.filter(|_| self.queue_fifo).map(str::to_owned),
            aws_trace_header: None,
        })
    }
}

/// Milliseconds since the Unix epoch as SNS writes a `Timestamp`: `2012-05-02T00:54:06.655Z`.
pub(crate) fn format_timestamp(millis: u64) -> String {
    let seconds = millis / 1000;
    let (year, month, day) = civil_from_days(seconds / 86_400);
    let of_day = seconds % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3600,
        of_day % 3600 / 60,
        of_day % 60,
        millis % 1000
    )
}

/// An ISO 8601 UTC timestamp (`YYYY-MM-DDTHH:MM:SS[.fraction]Z`, from 1970 on) as milliseconds
/// since the Unix epoch; digits past the milliseconds are dropped.
pub(crate) fn parse_timestamp(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let (clock, fraction) = match time.split_once('.') {
        Some((clock, fraction)) => (clock, Some(fraction)),
        None => (time, None),
    };
    let number = |part: &str, digits: usize| -> Option<u64> {
        (part.len() == digits && part.bytes().all(|byte| byte.is_ascii_digit()))
            .then(|| part.parse().ok())
            .flatten()
    };
    let mut date = date.split('-');
    let (year, month, day) = (
        number(date.next()?, 4)?,
        number(date.next()?, 2)?,
        number(date.next()?, 2)?,
    );
    let mut clock = clock.split(':');
    let (hour, minute, second) = (
        number(clock.next()?, 2)?,
        number(clock.next()?, 2)?,
        number(clock.next()?, 2)?,
    );
    if date.next().is_some() || clock.next().is_some() || year < 1970 {
        return None;
    }
    if !(1..=12).contains(&month) || day == 0 || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    // A day past its month's end (February 30) comes back as another date.
    if civil_from_days(days) != (year, month, day) {
        return None;
    }
    let millis = match fraction {
        None => 0,
        Some(fraction) if !fraction.is_empty() && fraction.bytes().all(|b| b.is_ascii_digit()) => {
            let kept = &fraction[..fraction.len().min(3)];
            kept.parse::<u64>().ok()? * 10u64.pow(3 - kept.len() as u32)
        }
        Some(_) => return None,
    };
    Some(((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millis)
}

/// The date `days` after 1970-01-01 (the proleptic Gregorian calendar, counted in 400-year eras
/// of 146 097 days from 0000-03-01, so that a leap day ends its year).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let since_era_start = days + 719_468;
    let era = since_era_start / 146_097;
    let day_of_era = since_era_start % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + u64::from(month <= 2);
    (year, month, day)
}

/// The days from 1970-01-01 to a date from 1970 on; [`civil_from_days`] backwards.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = year - u64::from(month <= 2);
    let era = year / 400;
    let year_of_era = year % 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests;
