//! Large payloads through S3, as the message says it: the pointer a message carries in place of a
//! body kept in an S3 object, in the form every AWS extended client reads.
//!
//! AWS's extended clients (Java's `amazon-sqs-java-extended-client-lib` and its SNS sibling,
//! Python's `amazon-sqs-extended-client`) put a body over their threshold in S3 and send, in its
//! place, a JSON array naming the pointer's class and the object:
//!
//! ```text
//! ["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"payments","s3Key":"7f0c…"}]
//! ```
//!
//! with the message attribute `ExtendedPayloadSize` (a `Number`: the payload's size in bytes).
//! Older Java clients wrote the attribute `SQSLargePayloadSize` and a plain object
//! (`{"s3BucketName":..,"s3Key":..}`) instead of the array; both are still read, so a dead letter
//! of an older producer redrives and decodes. rust-stream writes the array and
//! `ExtendedPayloadSize`, which all of them read, and adds [`PAYLOAD_SHA256_HEADER`]: the payload's
//! SHA-256, which a consumer checks before the handler sees the payload (the Java client has no
//! integrity check of its own).
//!
//! ```
//! use rust_stream::model::large_payload::PayloadPointer;
//! use rust_stream::EXTENDED_PAYLOAD_SIZE;
//! use rust_stream::model::wire::{MessageAttributeValue, MessageAttributes};
//!
//! let pointer = PayloadPointer::new("payments", "7f0c");
//! let body = pointer.to_body();
//! let mut attributes = MessageAttributes::new();
//! attributes.insert(EXTENDED_PAYLOAD_SIZE.into(), MessageAttributeValue::number("300000"));
//!
//! let read = PayloadPointer::read(&body, &attributes).unwrap().unwrap();
//! assert_eq!(read.pointer, pointer);
//! assert_eq!(read.size, 300_000);
//! // A body without the size attribute is a body, whatever it looks like.
//! assert!(PayloadPointer::read(&body, &MessageAttributes::new()).unwrap().is_none());
//! ```

use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::headers::{EXTENDED_PAYLOAD_SIZE, LEGACY_PAYLOAD_SIZE, PAYLOAD_SHA256_HEADER};
use super::rules;
use super::wire::{MessageAttributeValue, MessageAttributes, SendMessage};

/// The class name the Java extended client gives its pointer, the array's first element.
const POINTER_CLASS: &str = "software.amazon.payloadoffloading.PayloadS3Pointer";

/// The class name older Java extended clients (1.x) gave it, which Python's client still writes
/// with its legacy attribute: read, never written.
const LEGACY_POINTER_CLASS: &str = "com.amazon.sqs.javamessaging.MessageS3Pointer";

/// Where an offloaded payload is: its S3 bucket and key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PayloadPointer {
    /// The bucket.
    #[serde(rename = "s3BucketName")]
    pub bucket: String,
    /// The object's key.
    #[serde(rename = "s3Key")]
    pub key: String,
}

/// A pointer read from a message, with what its attributes say of the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPointer {
    /// Where the payload is.
    pub pointer: PayloadPointer,
    /// Its size in bytes, as the sender wrote it.
    pub size: u64,
    /// Its SHA-256 in lowercase hex, when the sender wrote one ([`PAYLOAD_SHA256_HEADER`]).
    pub sha256: Option<String>,
}

/// Why a message marked as a pointer is not one that can be followed: the message is then not a
/// message a handler can be given (a decode failure, dead-lettered with this reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    /// The size attribute is there but its value is no size in bytes.
    #[error("the `{attribute}` attribute says `{value}`, which is no size in bytes")]
    BadSize {
        /// The attribute's name.
        attribute: &'static str,
        /// What it held.
        value: String,
    },
    /// The body of a message marked as a pointer is no pointer the extended clients write.
    #[error(
        "the message has a `{attribute}` attribute, so its body should point at an S3 object, but \
         the body is neither `[\"{POINTER_CLASS}\",{{\"s3BucketName\":..,\"s3Key\":..}}]` nor \
         `{{\"s3BucketName\":..,\"s3Key\":..}}`: {reason}"
    )]
    NotAPointer {
        /// The attribute that marked it.
        attribute: &'static str,
        /// What did not parse.
        reason: String,
    },
}

impl PayloadPointer {
    /// A pointer to `key` in `bucket`.
    pub fn new(bucket: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            key: key.into(),
        }
    }

    /// The body that carries this pointer, in the Java extended client's form, which every
    /// extended client reads.
    pub fn to_body(&self) -> String {
        serde_json::to_string(&(POINTER_CLASS, self)).expect("a pointer serializes")
    }

    /// The attributes a message carrying this pointer adds: [`EXTENDED_PAYLOAD_SIZE`] with
    /// `size`, and [`PAYLOAD_SHA256_HEADER`] with `sha256` (lowercase hex).
    pub fn attributes(size: u64, sha256: &str) -> [(&'static str, MessageAttributeValue); 2] {
        [
            (
                EXTENDED_PAYLOAD_SIZE,
                MessageAttributeValue::number(size.to_string()),
            ),
            (PAYLOAD_SHA256_HEADER, MessageAttributeValue::string(sha256)),
        ]
    }

    /// The pointer a received message carries, if it carries one: a message is a pointer when it
    /// has the [`EXTENDED_PAYLOAD_SIZE`] or [`LEGACY_PAYLOAD_SIZE`] attribute, as every extended
    /// client decides; `body` is then the array or the plain object. `Ok(None)` for any other
    /// message, whatever its body looks like.
    ///
    /// # Errors
    ///
    /// [`PointerError`] when the attribute is there but the size or the body is not what the
    /// extended clients write.
    pub fn read(
        body: &str,
        attributes: &MessageAttributes,
    ) -> Result<Option<ReadPointer>, PointerError> {
        let marked = [EXTENDED_PAYLOAD_SIZE, LEGACY_PAYLOAD_SIZE]
            .into_iter()
            .find_map(|name| Some((name, attributes.get(name)?)));
        let Some((attribute, value)) = marked else {
            return Ok(None);
        };
        let text = value.string_value.as_deref().unwrap_or_default();
        let size = text
            .trim()
            .parse::<u64>()
            .map_err(|_| PointerError::BadSize {
                attribute,
                value: text.to_owned(),
            })?;
        let pointer = Self::parse_body(body)
            .map_err(|reason| PointerError::NotAPointer { attribute, reason })?;
        let sha256 = attributes
            .get(PAYLOAD_SHA256_HEADER)
            .and_then(|value| value.string_value.clone());
        Ok(Some(ReadPointer {
            pointer,
            size,
            sha256,
        }))
    }

    /// The pointer in a body: the array `[class, {..}]` or, from older clients, the plain object.
    fn parse_body(body: &str) -> Result<Self, String> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Array(String, PayloadPointer),
            Plain(PayloadPointer),
        }
        match serde_json::from_str::<Form>(body.trim()) {
            Ok(Form::Array(class, pointer))
                if class == POINTER_CLASS || class == LEGACY_POINTER_CLASS =>
            {
                Ok(pointer)
            }
            Ok(Form::Array(class, _)) => Err(format!("the pointer's class is `{class}`")),
            Ok(Form::Plain(pointer)) => Ok(pointer),
            Err(error) => Err(error.to_string()),
        }
    }
}

/// The size over which a message's body goes to S3 by default: 256 KiB, the extended clients'
/// threshold (SQS's own limit was 256 KiB until 2025).
pub const DEFAULT_THRESHOLD: usize = 262_144;

/// Large payloads through S3, as a broker sends them: the bucket, and the size of a message (body
/// and attributes, as SQS counts it) over which its body goes there.
///
/// ```
/// use rust_stream::model::large_payload::LargePayloads;
/// use rust_stream::SqsBroker;
///
/// let broker = SqsBroker::in_process()
///     .large_payloads(LargePayloads::new("payment-files").create_if_missing().threshold(128 * 1024));
/// # drop(broker);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LargePayloads {
    pub(crate) bucket: String,
    pub(crate) threshold: usize,
    pub(crate) create_if_missing: bool,
}

impl LargePayloads {
    /// Large payloads in `bucket`, over [`DEFAULT_THRESHOLD`].
    pub fn new(bucket: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            threshold: DEFAULT_THRESHOLD,
            create_if_missing: false,
        }
    }

    /// Sends to S3 the body of every message larger than `bytes` (body and attributes), up to
    /// SQS's limit of 1 MiB: a message over it could not be sent otherwise.
    pub fn threshold(mut self, bytes: usize) -> Self {
        self.threshold = bytes.min(rules::MAX_MESSAGE_SIZE);
        self
    }

    /// Sends every body to S3, whatever its size.
    pub fn always(self) -> Self {
        self.threshold(0)
    }

    /// Creates the bucket when the app starts, if it does not exist.
    pub fn create_if_missing(mut self) -> Self {
        self.create_if_missing = true;
        self
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Whether `message` goes through S3: it is larger than the threshold and not a pointer
    /// already (a dead-letter copy or a redrive of one sends the pointer it has).
    pub(crate) fn offloads(&self, message: &SendMessage) -> bool {
        rules::message_size(message) > self.threshold
            && !message
                .message_attributes
                .contains_key(EXTENDED_PAYLOAD_SIZE)
            && !message.message_attributes.contains_key(LEGACY_PAYLOAD_SIZE)
    }

    /// Makes `message` the pointer to an object of key `key` in the bucket, and gives back the
    /// payload to put there. The pointer's attributes are added unless the sender set them.
    pub(crate) fn offload(&self, message: &mut SendMessage, key: String) -> Vec<u8> {
        let payload = std::mem::take(&mut message.body).into_bytes();
        let sha256 = hex(&sha2::Sha256::digest(&payload));
        message.body = PayloadPointer::new(&self.bucket, key).to_body();
        for (name, value) in PayloadPointer::attributes(payload.len() as u64, &sha256) {
            message
                .message_attributes
                .entry(name.to_owned())
                .or_insert(value);
        }
        payload
    }

    /// `message` as it would be sent, when it goes through S3: what the rules are checked
    /// against before any call. A key of a fresh UUID's length and a digest of SHA-256's length
    /// stand for the real ones, so the body is neither copied nor hashed here: the send does that
    /// once ([`offload`](Self::offload)).
    ///
    /// # Errors
    ///
    /// A body larger than S3 takes in one `PUT` ([`MAX_OBJECT_SIZE`]).
    pub(crate) fn as_sent(
        &self,
        message: &SendMessage,
    ) -> Result<Option<SendMessage>, super::error::TransportError> {
        if !self.offloads(message) {
            return Ok(None);
        }
        check_object_size(message.body.len() as u64)?;
        let key = uuid::Uuid::nil().to_string();
        let mut pointer = SendMessage::new(PayloadPointer::new(&self.bucket, key).to_body());
        pointer.delay_seconds = message.delay_seconds;
        pointer.group_id = message.group_id.clone();
        pointer.dedup_id = message.dedup_id.clone();
        pointer.message_attributes = message.message_attributes.clone();
        let size = message.body.len() as u64;
        for (name, value) in PayloadPointer::attributes(size, &"0".repeat(64)) {
            pointer
                .message_attributes
                .entry(name.to_owned())
                .or_insert(value);
        }
        Ok(Some(pointer))
    }
}

/// The largest object S3 stores from one `PUT`, 5 GiB: the send of a large payload is one `PUT`
/// (no multipart upload), as every extended client's is.
pub const MAX_OBJECT_SIZE: u64 = 5 * 1024 * 1024 * 1024;

/// Refuses, before any call, a payload S3 would refuse as `EntityTooLarge` after it was uploaded.
fn check_object_size(bytes: u64) -> Result<(), super::error::TransportError> {
    if bytes <= MAX_OBJECT_SIZE {
        return Ok(());
    }
    rules::fail(
        rules::ErrorKind::InvalidParameterValue,
        format!(
            "the body is {bytes} bytes, more than the 5 GiB ({MAX_OBJECT_SIZE} bytes) S3 takes in \
             one PUT: upload it yourself (a multipart upload) and send its key in a small message"
        ),
    )
}

/// The object a stored message points at, in its body or, for an SNS notification, in its
/// `Message`: what a copy of the message (a dead-letter copy, a redrive) points at too.
pub(crate) fn pointer_in(body: &str, attributes: &MessageAttributes) -> Option<PayloadPointer> {
    if let Ok(Some(read)) = PayloadPointer::read(body, attributes) {
        return Some(read.pointer);
    }
    let notification = super::envelope::Envelope::parse(body).ok()?;
    let read = PayloadPointer::read(&notification.message, &notification.message_attributes);
    Some(read.ok()??.pointer)
}

/// A received message that points at its payload in S3, as a consumer holds it.
#[derive(Debug)]
pub(crate) struct Large {
    /// The pointer, or why the message marked as one is not one.
    pub(crate) pointer: Result<ReadPointer, PointerError>,
    /// The payload, once fetched and checked: what the handler reads.
    pub(crate) fetched: std::sync::OnceLock<String>,
}

impl Large {
    /// What a received message with `body` and `attributes` (an SNS notification's `Message`
    /// and `MessageAttributes` when it came in one) points at, if it is a pointer: boxed, as few
    /// messages are.
    pub(crate) fn of(body: &str, attributes: &MessageAttributes) -> Option<Box<Self>> {
        let pointer = PayloadPointer::read(body, attributes).transpose()?;
        Some(Box::new(Self {
            pointer,
            fetched: std::sync::OnceLock::new(),
        }))
    }

    /// Why the payload is not at hand, while it is not.
    pub(crate) fn unread(&self) -> Option<String> {
        if self.fetched.get().is_some() {
            return None;
        }
        Some(match &self.pointer {
            Err(error) => error.to_string(),
            Ok(_) => "its payload in S3 was not fetched".to_owned(),
        })
    }
}

/// Checks an S3 bucket name: 3 to 63 characters, lowercase letters,
/// digits, dots and hyphens, beginning and ending with a letter or digit.
pub(crate) fn check_bucket_name(bucket: &str) -> Result<(), super::error::TransportError> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-';
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if (3..=63).contains(&bucket.len())
        && bucket.chars().all(allowed)
        && edge(bucket.chars().next())
        && edge(bucket.chars().last())
    {
        return Ok(());
    }
    rules::fail(
        rules::ErrorKind::InvalidParameterValue,
        format!(
            "`{bucket}` is no S3 bucket name: 3 to 63 lowercase letters, digits, dots and \
             hyphens, beginning and ending with a letter or digit"
        ),
    )
}

/// A payload fetched for a pointer, checked against what the pointer's attributes say of it.
///
/// # Errors
///
/// Why the payload is not the one the message was sent with, or is no text.
pub(crate) fn checked_payload(read: &ReadPointer, payload: Vec<u8>) -> Result<String, String> {
    let pointer = &read.pointer;
    if payload.len() as u64 != read.size {
        return Err(format!(
            "the S3 object `{}` in `{}` holds {} bytes, but the message says its payload has {}",
            pointer.key,
            pointer.bucket,
            payload.len(),
            read.size
        ));
    }
    if let Some(expected) = &read.sha256 {
        let actual = hex(&sha2::Sha256::digest(&payload));
        if !actual.eq_ignore_ascii_case(expected) {
            return Err(format!(
                "the S3 object `{}` in `{}` is not the payload the message was sent with: its \
                 SHA-256 is {actual}, the message's {PAYLOAD_SHA256_HEADER} says {expected}",
                pointer.key, pointer.bucket
            ));
        }
    }
    String::from_utf8(payload).map_err(|_| {
        format!(
            "the S3 object `{}` in `{}` is not UTF-8 text, so it is no message body",
            pointer.key, pointer.bucket
        )
    })
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(name: &str, size: &str) -> MessageAttributes {
        let mut attributes = MessageAttributes::new();
        attributes.insert(name.into(), MessageAttributeValue::number(size));
        attributes
    }

    // The bodies as the Java client (`PayloadS3Pointer.toJson`, Jackson with default typing) and
    // Python's `amazon-sqs-extended-client` write them, spaces and all.
    const JAVA_BODY: &str = r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"bucket-1","s3Key":"9c5e4a2e-1b6d-4a8f-9e59-2f3c1d0b7a61"}]"#;
    const PYTHON_BODY: &str = r#"["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": "bucket-1", "s3Key": "9c5e4a2e-1b6d-4a8f-9e59-2f3c1d0b7a61"}]"#;
    const LEGACY_BODY: &str =
        r#"{"s3BucketName":"bucket-1","s3Key":"9c5e4a2e-1b6d-4a8f-9e59-2f3c1d0b7a61"}"#;
    // Java 1.x's class, which Python's client writes with `use_legacy_attribute`.
    const LEGACY_CLASS_BODY: &str = r#"["com.amazon.sqs.javamessaging.MessageS3Pointer", {"s3BucketName": "bucket-1", "s3Key": "9c5e4a2e-1b6d-4a8f-9e59-2f3c1d0b7a61"}]"#;

    #[test]
    fn the_pointers_of_every_extended_client_read_alike() {
        let expected = PayloadPointer::new("bucket-1", "9c5e4a2e-1b6d-4a8f-9e59-2f3c1d0b7a61");
        for (body, attribute) in [
            (JAVA_BODY, EXTENDED_PAYLOAD_SIZE),
            (PYTHON_BODY, EXTENDED_PAYLOAD_SIZE),
            (LEGACY_BODY, LEGACY_PAYLOAD_SIZE),
            (JAVA_BODY, LEGACY_PAYLOAD_SIZE),
            (LEGACY_CLASS_BODY, LEGACY_PAYLOAD_SIZE),
        ] {
            let read = PayloadPointer::read(body, &marked(attribute, "262145"))
                .unwrap()
                .unwrap_or_else(|| panic!("{body} under {attribute} is a pointer"));
            assert_eq!(read.pointer, expected, "{body}");
            assert_eq!(read.size, 262_145);
            assert_eq!(read.sha256, None);
        }
    }

    #[test]
    fn ours_is_the_java_form_and_reads_back_with_its_digest() {
        let pointer = PayloadPointer::new("bucket-1", "9c5e4a2e-1b6d-4a8f-9e59-2f3c1d0b7a61");
        assert_eq!(pointer.to_body(), JAVA_BODY);
        let mut attributes = MessageAttributes::new();
        for (name, value) in PayloadPointer::attributes(300_000, "ab12") {
            attributes.insert(name.into(), value);
        }
        let read = PayloadPointer::read(&pointer.to_body(), &attributes)
            .unwrap()
            .unwrap();
        assert_eq!(
            read,
            ReadPointer {
                pointer,
                size: 300_000,
                sha256: Some("ab12".into()),
            }
        );
    }

    // The rules are checked against `as_sent` before the send offloads: it must be exactly as
    // large as the message the send makes, or a message near a limit would pass one and fail the
    // other.
    #[test]
    fn the_message_checked_is_as_large_as_the_message_sent() {
        let large = LargePayloads::new("payment-files");
        let mut message = SendMessage::new("x".repeat(300_000));
        message.group_id = Some("g".into());
        message
            .message_attributes
            .insert("k".into(), MessageAttributeValue::string("v"));
        let checked = large.as_sent(&message).unwrap().unwrap();
        large.offload(&mut message, uuid::Uuid::new_v4().to_string());
        assert_eq!(rules::message_size(&checked), rules::message_size(&message));
        assert_eq!(
            checked.message_attributes.len(),
            message.message_attributes.len()
        );
        assert_eq!(checked.group_id, message.group_id);
    }

    // A 5 GiB body is not made in a test: the rule is checked on sizes, and `as_sent` calls it.
    #[test]
    fn a_payload_over_what_s3_takes_in_one_put_is_refused_before_any_call() {
        assert!(check_object_size(MAX_OBJECT_SIZE).is_ok(), "5 GiB is taken");
        let refused = check_object_size(MAX_OBJECT_SIZE + 1).unwrap_err();
        assert_eq!(
            refused.kind(),
            Some(rules::ErrorKind::InvalidParameterValue)
        );
        let text = refused.to_string();
        for named in ["5368709121 bytes", "5 GiB", "one PUT", "multipart upload"] {
            assert!(text.contains(named), "{named} missing from: {text}");
        }
    }

    #[test]
    fn a_body_without_the_size_attribute_is_a_body() {
        for body in [JAVA_BODY, LEGACY_BODY, "{}", "plain"] {
            assert_eq!(
                PayloadPointer::read(body, &MessageAttributes::new()),
                Ok(None)
            );
        }
    }

    #[test]
    fn a_marked_message_that_points_nowhere_says_why() {
        let not_json = PayloadPointer::read("plain", &marked(EXTENDED_PAYLOAD_SIZE, "10"));
        assert!(
            matches!(&not_json, Err(PointerError::NotAPointer { attribute, .. }) if *attribute == EXTENDED_PAYLOAD_SIZE),
            "{not_json:?}"
        );
        let other_class = PayloadPointer::read(
            r#"["com.example.Other",{"s3BucketName":"b","s3Key":"k"}]"#,
            &marked(EXTENDED_PAYLOAD_SIZE, "10"),
        )
        .unwrap_err();
        assert!(
            other_class.to_string().contains("`com.example.Other`"),
            "{other_class}"
        );
        let bad_size =
            PayloadPointer::read(JAVA_BODY, &marked(LEGACY_PAYLOAD_SIZE, "-3")).unwrap_err();
        assert_eq!(
            bad_size,
            PointerError::BadSize {
                attribute: LEGACY_PAYLOAD_SIZE,
                value: "-3".into()
            }
        );
    }
}
