//! Amazon SNS topics and publishes as data, and SNS's limits and rules, in one place.
//!
//! This is to SNS what [`wire`](super::wire) and [`rules`] are to SQS: a topic's name
//! and ARN ([`TopicArn`]), a publish shaped like the SNS API ([`Publish`], [`PublishBatchEntry`],
//! answered by [`Published`] and [`PublishBatchResult`]), and the validators both backends call
//! before anything is sent ([`check_publish`], [`check_publish_batch`], [`check_topic_name`]), so a
//! bad publish is refused with the same [`ErrorKind`] and message on the in-process account and
//! on AWS, without a network call. What SNS then delivers to a queue is in
//! [`envelope`](super::envelope).
//!
//! Each rule cites the AWS page it comes from. Where SNS's rule is the same as SQS's (a message
//! attribute's name, a group or deduplication id's alphabet, a batch's entry ids), the SQS check
//! in [`rules`] is called rather than written twice; the error kind is SNS's.
//!
//! ```
//! use rust_stream::model::topic::{check_publish, Publish, PublishTarget, TopicArn};
//! use rust_stream::model::wire::MessageAttributeValue;
//! use rust_stream::model::ErrorKind;
//!
//! let arn = TopicArn::new("eu-west-1", "123456789012", "payments-posted.fifo").unwrap();
//! assert_eq!(arn.to_string(), "arn:aws:sns:eu-west-1:123456789012:payments-posted.fifo");
//! assert_eq!(TopicArn::parse(&arn.to_string()).unwrap().name(), "payments-posted.fifo");
//!
//! let target = PublishTarget::new(arn.name());
//! let publish = Publish::new(r#"{"amount":120}"#)
//!     .attribute("kind", MessageAttributeValue::string("card"))
//!     .attribute("channels", MessageAttributeValue::string_array(r#"["ledger","risk"]"#))
//!     .group_id("account-7");
//! // A FIFO topic without content-based deduplication needs a deduplication id.
//! let refused = check_publish(&publish, target).unwrap_err();
//! assert_eq!(refused.kind(), Some(ErrorKind::InvalidParameter));
//! assert!(check_publish(&publish.dedup_id("payment-1"), target).is_ok());
//! ```

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::error::{ErrorKind, TransportError};
use super::rules::{self, fail};
use super::wire::{BatchResult, EntryId, MessageAttributeValue, MessageAttributes};

/// The suffix that marks a FIFO topic's name, counted in its length.
/// (CreateTopic, `Name`: <https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html>)
pub const FIFO_TOPIC_SUFFIX: &str = ".fifo";
/// Longest topic name, `.fifo` included: 1 to 256 characters of `[A-Za-z0-9_-]`.
/// (CreateTopic, `Name`: <https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html>)
pub const MAX_TOPIC_NAME_LEN: usize = 256;
/// Largest publish a topic takes unless its `MaximumMessageSize` says otherwise: the message and
/// every attribute's name, type and value together, in bytes (256 KiB).
/// (Publish, `Message`: <https://docs.aws.amazon.com/sns/latest/api/API_Publish.html>;
/// MessageAttributeValue: <https://docs.aws.amazon.com/sns/latest/api/API_MessageAttributeValue.html>)
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 262_144;
/// The largest `MaximumMessageSize` a topic may set, in bytes (1 MiB).
/// (PublishBatch: <https://docs.aws.amazon.com/sns/latest/api/API_PublishBatch.html>)
pub const MAX_MAXIMUM_MESSAGE_SIZE: usize = 1_048_576;
/// Most entries in one `PublishBatch`; their sizes together must also fit the topic's
/// `MaximumMessageSize` (`BatchRequestTooLong`).
/// (PublishBatch: <https://docs.aws.amazon.com/sns/latest/api/API_PublishBatch.html>)
pub const MAX_PUBLISH_BATCH_ENTRIES: usize = rules::MAX_BATCH_ENTRIES;
/// Longest `PublishBatch` entry id: up to 80 characters of `[A-Za-z0-9_-]`, distinct in a batch,
/// the same rule as SQS's batch entry ids.
/// (PublishBatchRequestEntry: <https://docs.aws.amazon.com/sns/latest/api/API_PublishBatchRequestEntry.html>)
pub const MAX_BATCH_ENTRY_ID_LEN: usize = rules::MAX_BATCH_ENTRY_ID_LEN;
/// Longest subject, in characters: "less than 100 characters long", UTF-8 with no line breaks or
/// control characters.
/// (Publish, `Subject`: <https://docs.aws.amazon.com/sns/latest/api/API_Publish.html>)
pub const MAX_SUBJECT_CHARS: usize = 99;
/// Longest message attribute name, in characters.
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-message-attributes.html>)
pub const MAX_ATTRIBUTE_NAME_LEN: usize = 256;
/// Longest message attribute data type, in bytes.
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-message-attributes.html>)
pub const MAX_ATTRIBUTE_TYPE_LEN: usize = 256;
/// Most message attributes SNS sends to an SQS subscription with raw message delivery; a message
/// with more is discarded for that subscription (an enveloped delivery carries any number in its
/// JSON).
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-message-attributes.html>)
pub const MAX_RAW_DELIVERY_ATTRIBUTES: usize = 10;
/// Longest `MessageGroupId` or `MessageDeduplicationId`: up to 128 letters, digits and ASCII
/// punctuation, the same alphabet as SQS's.
/// (Publish, `MessageGroupId`, `MessageDeduplicationId`:
/// <https://docs.aws.amazon.com/sns/latest/api/API_Publish.html>)
pub const MAX_TOKEN_LEN: usize = rules::MAX_TOKEN_LEN;
/// How long a FIFO topic remembers a deduplication id: a publish with the same id within it is
/// accepted and not delivered again. The scope is the whole topic, not a message group.
/// (<https://docs.aws.amazon.com/sns/latest/dg/fifo-message-dedup.html>)
pub const DEDUP_WINDOW: Duration = Duration::from_secs(300);

/// SNS's data type for an array of strings, numbers, `true`, `false` and `null` written as a JSON
/// array, which filter policies match element by element.
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-message-attributes.html#SNSMessageAttributes.DataTypes>)
pub const STRING_ARRAY_TYPE: &str = "String.Array";

/// Whether `name` is a FIFO topic's: it ends in `.fifo`.
pub fn is_fifo_topic_name(name: &str) -> bool {
    name.ends_with(FIFO_TOPIC_SUFFIX)
}

/// Checks a topic name: 1 to 256 characters of `[A-Za-z0-9_-]`, and, when `fifo`, the `.fifo`
/// suffix (counted in the 256); a standard topic's name may not end in `.fifo`.
/// SNS answers `InvalidParameter` (CreateTopic:
/// <https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html>).
pub fn check_topic_name(name: &str, fifo: bool) -> Result<(), TransportError> {
    let stem = if fifo {
        name.strip_suffix(FIFO_TOPIC_SUFFIX)
    } else {
        Some(name)
    };
    let valid = stem.is_some_and(|stem| {
        !stem.is_empty()
            && stem
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
    }) && name.len() <= MAX_TOPIC_NAME_LEN;
    if valid {
        return Ok(());
    }
    let kind = if fifo { "FIFO topic" } else { "standard topic" };
    let lower_case = name.len() > FIFO_TOPIC_SUFFIX.len()
        && name.is_char_boundary(name.len() - FIFO_TOPIC_SUFFIX.len())
        && name[name.len() - FIFO_TOPIC_SUFFIX.len()..].eq_ignore_ascii_case(FIFO_TOPIC_SUFFIX);
    let suffix = if !fifo && lower_case {
        // `.FIFO` is not the suffix SNS knows: the name is neither a FIFO topic's nor a valid
        // standard one's.
        "for a FIFO topic, end the name in `.fifo`, in lower case"
    } else if fifo {
        "end in `.fifo` (counted in the 256)"
    } else {
        "not end in `.fifo`, which only a FIFO topic's name does"
    };
    fail(
        ErrorKind::InvalidParameter,
        format!(
            "Invalid parameter: Topic Name: {kind} name `{name}` is invalid ({} characters): use 1 \
             to {MAX_TOPIC_NAME_LEN} characters of letters, digits, `-` and `_`, and {suffix}",
            name.chars().count()
        ),
    )
}

/// A topic's ARN, `arn:aws:sns:REGION:ACCOUNT:NAME`, and its parts.
///
/// Built from a region, an account and a checked name ([`TopicArn::new`]), or read back from an
/// ARN ([`TopicArn::parse`], also [`FromStr`]); [`Display`](fmt::Display) writes the ARN.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicArn {
    partition: String,
    region: String,
    account: String,
    name: String,
}

impl TopicArn {
    /// The ARN of topic `name` in `region` of `account`, in the `aws` partition. The name is checked
    /// as [`check_topic_name`] does, its type read from its suffix.
    pub fn new(
        region: impl Into<String>,
        account: impl Into<String>,
        name: impl Into<String>,
    ) -> Result<Self, TransportError> {
        let name = name.into();
        check_topic_name(&name, is_fifo_topic_name(&name))?;
        Ok(Self {
            partition: "aws".to_owned(),
            region: region.into(),
            account: account.into(),
            name,
        })
    }

    /// Reads an SNS topic ARN: six `:`-separated parts, `arn`, a partition, `sns`, a region, an
    /// account and a valid topic name. Anything else is SNS's `InvalidParameter` for `TopicArn`.
    pub fn parse(arn: &str) -> Result<Self, TransportError> {
        let invalid = |why: &str| {
            fail(
                ErrorKind::InvalidParameter,
                format!(
                    "Invalid parameter: TopicArn: `{arn}` is not a topic ARN ({why}); write \
                     arn:aws:sns:REGION:ACCOUNT:NAME"
                ),
            )
        };
        let parts: Vec<&str> = arn.split(':').collect();
        let [prefix, partition, service, region, account, name] = parts[..] else {
            return invalid("it needs 6 parts separated by `:`");
        };
        if prefix != "arn" || partition.is_empty() || service != "sns" {
            return invalid("it must start with `arn:PARTITION:sns:`");
        }
        if region.is_empty() || account.is_empty() {
            return invalid("its region and account may not be empty");
        }
        if check_topic_name(name, is_fifo_topic_name(name)).is_err() {
            return invalid("its last part is not a topic name");
        }
        Ok(Self {
            partition: partition.to_owned(),
            region: region.to_owned(),
            account: account.to_owned(),
            name: name.to_owned(),
        })
    }

    /// The topic's name, the last part of the ARN.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The region.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The account id.
    pub fn account(&self) -> &str {
        &self.account
    }

    /// The partition (`aws`, `aws-cn`, `aws-us-gov`).
    pub fn partition(&self) -> &str {
        &self.partition
    }

    /// Whether the topic is FIFO (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        is_fifo_topic_name(&self.name)
    }

    /// The ARN of this topic's subscription `id`: the topic's ARN, `:` and the id, as SNS writes
    /// them.
    pub fn subscription_arn(&self, id: &str) -> String {
        format!("{self}:{id}")
    }
}

impl fmt::Display for TopicArn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arn:{}:sns:{}:{}:{}",
            self.partition, self.region, self.account, self.name
        )
    }
}

impl FromStr for TopicArn {
    type Err = TransportError;

    fn from_str(arn: &str) -> Result<Self, Self::Err> {
        Self::parse(arn)
    }
}

/// A message to publish to a topic: `Publish`, or one entry of `PublishBatch`.
///
/// Message attributes use the crate's [`MessageAttributeValue`], whose data type is SNS's
/// (`String`, `String.Array`, `Number`, `Binary`, optionally with a `.label`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Publish {
    /// The message: at least 1 byte of UTF-8.
    pub message: String,
    /// `Subject`: shown by email endpoints and carried in the JSON envelope.
    pub subject: Option<String>,
    /// Message attributes by name.
    pub message_attributes: MessageAttributes,
    /// `MessageGroupId`: required on FIFO topics; on standard topics optional, and passed only to
    /// SQS standard queues (fair queues).
    pub group_id: Option<String>,
    /// `MessageDeduplicationId`: FIFO topics only; required there without content-based
    /// deduplication.
    pub dedup_id: Option<String>,
}

impl Publish {
    /// A publish of this message and nothing else set.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            subject: None,
            message_attributes: MessageAttributes::new(),
            group_id: None,
            dedup_id: None,
        }
    }

    /// Sets `Subject`.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// Sets `MessageGroupId`.
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }

    /// Sets `MessageDeduplicationId`.
    pub fn dedup_id(mut self, dedup_id: impl Into<String>) -> Self {
        self.dedup_id = Some(dedup_id.into());
        self
    }

    /// Adds a message attribute.
    pub fn attribute(mut self, name: impl Into<String>, value: MessageAttributeValue) -> Self {
        self.message_attributes.insert(name.into(), value);
        self
    }
}

/// One entry of a `PublishBatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishBatchEntry {
    /// The entry's id within the batch.
    pub id: EntryId,
    /// The message.
    pub publish: Publish,
}

impl PublishBatchEntry {
    /// An entry with this id.
    pub fn new(id: impl Into<String>, publish: Publish) -> Self {
        Self {
            id: EntryId::Owned(id.into()),
            publish,
        }
    }
}

/// What a publish answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The message id; for a deduplicated publish on a FIFO topic, the original's.
    pub message_id: String,
    /// FIFO topics only: the sequence number SNS gives the message, increasing within its group.
    pub sequence_number: Option<String>,
    /// Whether the publish was a duplicate within [`DEDUP_WINDOW`] and so was not delivered
    /// again. SNS does not report this; the in-process account does, and a network transport
    /// reports `false`.
    pub duplicate: bool,
}

/// A `PublishBatch`'s answer: published entries by id, and failed entries with their reason.
pub type PublishBatchResult = BatchResult<Published>;

/// What a publish must know of the topic it goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishTarget<'a> {
    /// The topic's name, for messages.
    pub topic: &'a str,
    /// Whether the topic is FIFO.
    pub fifo: bool,
    /// Whether the topic has `ContentBasedDeduplication` (FIFO only).
    pub content_based_dedup: bool,
    /// The topic's `MaximumMessageSize`, in bytes.
    pub maximum_message_size: usize,
}

impl<'a> PublishTarget<'a> {
    /// Topic `name` with its type read from its suffix, no content-based deduplication, and the
    /// default maximum message size.
    pub fn new(name: &'a str) -> Self {
        Self {
            topic: name,
            fifo: is_fifo_topic_name(name),
            content_based_dedup: false,
            maximum_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }

    /// With `ContentBasedDeduplication` on or off.
    pub fn content_based_dedup(mut self, enabled: bool) -> Self {
        self.content_based_dedup = enabled;
        self
    }

    /// With this `MaximumMessageSize`.
    pub fn maximum_message_size(mut self, bytes: usize) -> Self {
        self.maximum_message_size = bytes;
        self
    }
}

/// A publish's size as SNS counts it against the topic's `MaximumMessageSize` and a batch's
/// limit: the message, and each attribute's name, data type and value (a `Binary` value's bytes,
/// not its base64 text).
/// (MessageAttributeValue: <https://docs.aws.amazon.com/sns/latest/api/API_MessageAttributeValue.html>)
pub fn publish_size(publish: &Publish) -> usize {
    publish.message.len() + rules::attributes_size(&publish.message_attributes)
}

/// A check's failure with SNS's kind in place of the one the shared SQS check gave: the rule is
/// the same, the service's word for breaking it is not.
fn as_sns(error: TransportError, kind: ErrorKind) -> TransportError {
    match error {
        TransportError::Service { message, .. } => TransportError::service(kind, message),
        other => other,
    }
}

/// Checks a subject: present means 1 to 99 characters, none of them a line break or another
/// control character. SNS answers `InvalidParameter`.
/// (Publish, `Subject`: <https://docs.aws.amazon.com/sns/latest/api/API_Publish.html>)
pub fn check_subject(subject: &str) -> Result<(), TransportError> {
    let chars = subject.chars().count();
    let problem = if chars == 0 {
        Some("it is empty; leave it out instead".to_owned())
    } else if chars > MAX_SUBJECT_CHARS {
        Some(format!(
            "it is {chars} characters; SNS takes fewer than 100"
        ))
    } else {
        subject.chars().find(|c| c.is_control()).map(|c| {
            format!(
                "it holds control character U+{:04X}; use one line of text",
                c as u32
            )
        })
    };
    match problem {
        Some(why) => fail(
            ErrorKind::InvalidParameter,
            format!("Invalid parameter: Subject: {why}"),
        ),
        None => Ok(()),
    }
}

/// Checks a publish's message attributes and returns their size as SNS counts it (name, type and
/// value bytes). SNS answers `InvalidParameterValue` for a bad attribute.
///
/// - the name: SQS's rule word for word, so [`rules`]' check is used;
/// - the type: `String`, `Number` or `Binary`, optionally followed by `.label`, at most 256 bytes
///   (`String.Array` is a `String` with a label SNS reads);
/// - the value: not empty; a string value without characters outside the Basic Multilingual Plane
///   (SNS refuses the surrogate pairs they take, an emoji for one); a `Number` a decimal number; a
///   `String.Array` a JSON array of strings, numbers, `true`, `false` and `null`.
///
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-message-attributes.html>)
pub fn check_message_attributes(attributes: &MessageAttributes) -> Result<usize, TransportError> {
    let mut size = 0;
    for (name, value) in attributes {
        rules::check_attribute_name(name)?;
        size += name.len() + value.data_type.len() + check_attribute_value(name, value)?;
    }
    Ok(size)
}

/// Checks one attribute's type and value; returns the value's size in bytes.
fn check_attribute_value(
    name: &str,
    value: &MessageAttributeValue,
) -> Result<usize, TransportError> {
    let data_type = value.data_type.as_str();
    let (base, label) = match data_type.split_once('.') {
        Some((base, label)) => (base, Some(label)),
        None => (data_type, None),
    };
    if !matches!(base, "String" | "Number" | "Binary")
        || label.is_some_and(str::is_empty)
        || data_type.len() > MAX_ATTRIBUTE_TYPE_LEN
    {
        return fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "The message attribute '{name}' has an invalid message attribute type `{data_type}`: \
                 use `String`, `String.Array`, `Number` or `Binary`, optionally followed by \
                 `.label`, in at most {MAX_ATTRIBUTE_TYPE_LEN} bytes"
            ),
        );
    }
    let invalid = |why: String| {
        fail(
            ErrorKind::InvalidParameterValue,
            format!("The message attribute '{name}' of type `{data_type}` {why}"),
        )
    };
    match (base, &value.string_value, &value.binary_value) {
        ("Binary", None, Some(bytes)) if !bytes.is_empty() => Ok(bytes.len()),
        ("String" | "Number", Some(text), None) if !text.is_empty() => {
            if let Some(c) = text.chars().find(|c| u32::from(*c) > 0xFFFF) {
                return invalid(format!(
                    "holds character U+{:04X}, outside the Basic Multilingual Plane, which SNS \
                     refuses in attribute values",
                    c as u32
                ));
            }
            if base == "Number" && !is_number(text) {
                return invalid(format!("holds `{text}`, which is not a decimal number"));
            }
            if data_type == STRING_ARRAY_TYPE && !is_string_array(text) {
                return invalid(
                    "is not a JSON array of strings, numbers, `true`, `false` and `null`"
                        .to_owned(),
                );
            }
            Ok(text.len())
        }
        _ => invalid(format!(
            "must carry one non-empty {} value",
            if base == "Binary" { "binary" } else { "string" }
        )),
    }
}

/// Whether `text` is a decimal number: digits with an optional sign, fraction and exponent.
fn is_number(text: &str) -> bool {
    text.bytes().any(|byte| byte.is_ascii_digit())
        && text
            .bytes()
            .all(|byte| byte.is_ascii_digit() || matches!(byte, b'+' | b'-' | b'.' | b'e' | b'E'))
        && text.parse::<f64>().is_ok_and(f64::is_finite)
}

/// Whether `text` is a JSON array of strings, numbers, booleans and nulls (no nested arrays or
/// objects), SNS's `String.Array`.
fn is_string_array(text: &str) -> bool {
    serde_json::from_str::<Vec<serde_json::Value>>(text).is_ok_and(|values| {
        values.iter().all(|value| {
            !matches!(
                value,
                serde_json::Value::Array(_) | serde_json::Value::Object(_)
            )
        })
    })
}

/// Checks a publish against every rule of the topic it goes to; returns its size.
///
/// In SNS's order: the subject, the message (not empty), the attributes, the size against the
/// topic's `MaximumMessageSize`, the group and deduplication ids' alphabet (SQS's, 1–128 letters,
/// digits and ASCII punctuation), then the topic type's rules: a FIFO topic needs a group id, and
/// a deduplication id unless it has content-based deduplication; a standard topic refuses a
/// deduplication id and takes a group id (which it passes to SQS standard queues for fair
/// queueing). Every failure is `InvalidParameter` but a bad attribute's, which is
/// `InvalidParameterValue`.
/// (Publish: <https://docs.aws.amazon.com/sns/latest/api/API_Publish.html>;
/// <https://docs.aws.amazon.com/sns/latest/dg/fifo-message-dedup.html>)
pub fn check_publish(
    publish: &Publish,
    target: PublishTarget<'_>,
) -> Result<usize, TransportError> {
    let topic = target.topic;
    if let Some(subject) = &publish.subject {
        check_subject(subject)?;
    }
    if publish.message.is_empty() {
        return fail(
            ErrorKind::InvalidParameter,
            "Invalid parameter: Empty message: SNS needs at least 1 byte",
        );
    }
    let size = publish.message.len() + check_message_attributes(&publish.message_attributes)?;
    if size > target.maximum_message_size {
        return fail(
            ErrorKind::InvalidParameter,
            format!(
                "Invalid parameter: Message too long: the message is {size} bytes (message and \
                 attributes); topic `{topic}` takes at most {} (MaximumMessageSize)",
                target.maximum_message_size
            ),
        );
    }
    if let Some(group) = &publish.group_id {
        rules::check_token("MessageGroupId", group)
            .map_err(|error| as_sns(error, ErrorKind::InvalidParameter))?;
    }
    if let Some(dedup) = &publish.dedup_id {
        rules::check_token("MessageDeduplicationId", dedup)
            .map_err(|error| as_sns(error, ErrorKind::InvalidParameter))?;
    }
    if !target.fifo {
        if publish.dedup_id.is_some() {
            return fail(
                ErrorKind::InvalidParameter,
                format!(
                    "Invalid parameter: MessageDeduplicationId: topic `{topic}` is a standard \
                     topic and takes no MessageDeduplicationId; remove it or use a FIFO topic"
                ),
            );
        }
        return Ok(size);
    }
    if publish.group_id.is_none() {
        return fail(
            ErrorKind::InvalidParameter,
            format!(
                "Invalid parameter: The MessageGroupId parameter is required for FIFO topics: \
                 give every publish to `{topic}` a MessageGroupId"
            ),
        );
    }
    if publish.dedup_id.is_none() && !target.content_based_dedup {
        return fail(
            ErrorKind::InvalidParameter,
            format!(
                "Invalid parameter: topic `{topic}` is FIFO without ContentBasedDeduplication: \
                 give each publish a MessageDeduplicationId, or enable ContentBasedDeduplication"
            ),
        );
    }
    Ok(size)
}

/// Checks a `PublishBatch` as a whole: 1 to 10 entries with distinct valid ids (SQS's batch rules,
/// the same kinds: `EmptyBatchRequest`, `TooManyEntriesInBatchRequest`, `InvalidBatchEntryId`,
/// `BatchEntryIdsNotDistinct`), and their sizes together within the topic's
/// `MaximumMessageSize` (`BatchRequestTooLong`, the whole batch refused). Each entry's own rules
/// are [`check_publish`]'s, answered per entry.
/// (PublishBatch: <https://docs.aws.amazon.com/sns/latest/api/API_PublishBatch.html>)
pub fn check_publish_batch(
    entries: &[PublishBatchEntry],
    target: PublishTarget<'_>,
) -> Result<(), TransportError> {
    rules::check_batch_ids(entries.iter().map(|entry| entry.id.as_ref()))?;
    let total: usize = entries
        .iter()
        .map(|entry| publish_size(&entry.publish))
        .sum();
    if total > target.maximum_message_size {
        return fail(
            ErrorKind::BatchRequestTooLong,
            format!(
                "the batch's messages add up to {total} bytes; topic `{}` takes at most {} per \
                 batch (MaximumMessageSize): split it",
                target.topic, target.maximum_message_size
            ),
        );
    }
    Ok(())
}

/// The deduplication id a FIFO topic with `ContentBasedDeduplication` gives a publish without
/// one: the SHA-256 of the message, in hex. Attributes do not count.
/// (<https://docs.aws.amazon.com/sns/latest/dg/fifo-message-dedup.html>)
pub fn content_dedup_id(message: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(message.as_bytes());
    let mut hex = String::with_capacity(2 * digest.len());
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    hex
}

#[cfg(test)]
mod tests;
