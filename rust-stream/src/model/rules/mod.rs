//! The Amazon SQS limits and rules, in one place, shared by every transport.
//!
//! The in-process account enforces these rules exactly; a network transport calls the same
//! validators before it sends a request, so a bad name, id, size or attribute fails the same way
//! (same [`ErrorKind`], same message) whichever backend is underneath. Numbers follow the current
//! AWS API model.

use std::collections::BTreeMap;
use std::time::Duration;

pub use super::error::ErrorKind;
use super::error::TransportError;
use super::wire::{MessageAttributeValue, MessageAttributes, SendMessage};

mod schedule;

pub(crate) use schedule::{due_in, due_in_the_past, sqs_keeps_delay};
pub use schedule::{MAX_DELAY_SECONDS, MAX_SCHEDULE, PAST_DUE_TOLERANCE};

/// Largest message: body and message attributes together, in bytes (1 MiB since 2025-08).
pub const MAX_MESSAGE_SIZE: usize = 1_048_576;
/// Most entries in one `SendMessageBatch`, `DeleteMessageBatch` or `ChangeMessageVisibilityBatch`.
pub const MAX_BATCH_ENTRIES: usize = 10;
/// Largest `SendMessageBatch`: its messages' bodies and attributes together, in bytes. SQS refuses
/// a larger batch whole (`BatchRequestTooLong`), valid messages and all.
pub const MAX_BATCH_PAYLOAD_SIZE: usize = 1_048_576;
/// Most messages one receive returns.
pub const MAX_RECEIVE_MESSAGES: i32 = 10;
/// Longest long poll, in seconds.
pub const MAX_WAIT_TIME_SECONDS: i32 = 20;
/// Longest visibility timeout, and the cap on a message's total invisibility after a receive.
pub const MAX_VISIBILITY_TIMEOUT_SECONDS: i32 = 43_200;
/// Most message attributes on one message.
pub const MAX_MESSAGE_ATTRIBUTES: usize = 10;
/// How long a FIFO queue remembers a deduplication id or a receive request attempt id.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(300);
/// How often a queue may be purged.
pub const PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// How long a deleted queue's name stays unusable.
pub const QUEUE_DELETED_RECENTLY: Duration = Duration::from_secs(60);
/// Longest queue name, `.fifo` included.
pub const MAX_QUEUE_NAME_LEN: usize = 80;
/// Longest group id, deduplication id or receive request attempt id.
pub const MAX_TOKEN_LEN: usize = 128;
/// Longest batch entry id.
pub const MAX_BATCH_ENTRY_ID_LEN: usize = 80;

pub(crate) fn fail<T>(kind: ErrorKind, message: impl Into<String>) -> Result<T, TransportError> {
    Err(TransportError::service(kind, message))
}

#[cfg(test)]
thread_local! {
    /// How many times [`check_queue_name`] ran on this thread: a test counts a rule's runs a call.
    pub(crate) static QUEUE_NAME_CHECKS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Checks a queue name: 1–80 characters of `[A-Za-z0-9_-]`, plus the `.fifo` suffix for a FIFO queue.
pub(crate) fn check_queue_name(name: &str) -> Result<(), TransportError> {
    #[cfg(test)]
    QUEUE_NAME_CHECKS.with(|runs| runs.set(runs.get() + 1));
    let stem = name.strip_suffix(".fifo").unwrap_or(name);
    let chars_ok = !stem.is_empty()
        && stem
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !chars_ok || name.len() > MAX_QUEUE_NAME_LEN {
        return fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "queue name `{name}` is invalid ({} characters): use 1 to 80 characters of letters, \
                 digits, `-` and `_`, and end a FIFO queue's name in `.fifo` (counted in the 80)",
                name.chars().count()
            ),
        );
    }
    Ok(())
}

/// Whether a name is that of a FIFO queue.
pub(crate) fn is_fifo_name(name: &str) -> bool {
    name.ends_with(".fifo")
}

/// Checks a group id, deduplication id or receive request attempt id: 1–128 characters of
/// alphanumerics and ASCII punctuation.
pub(crate) fn check_token(parameter: &str, value: &str) -> Result<(), TransportError> {
    // Letters, digits and punctuation are the graphic ASCII bytes, 0x21..=0x7E; tested without a
    // branch a byte, so the compiler runs the test over many bytes at once (a FIFO send checks a
    // group id and a 36-character deduplication id, twice in process).
    let ok = !value.is_empty()
        && value.len() <= MAX_TOKEN_LEN
        && value
            .bytes()
            .fold(true, |ok, byte| ok & (byte.wrapping_sub(0x21) < 0x5E));
    if ok {
        Ok(())
    } else {
        fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "{parameter} `{value}` is invalid ({} characters): use 1 to {MAX_TOKEN_LEN} characters of letters, digits and ASCII punctuation",
                value.chars().count()
            ),
        )
    }
}

/// Checks an integer parameter against its range.
pub(crate) fn check_range(
    parameter: &str,
    value: i32,
    min: i32,
    max: i32,
) -> Result<u32, TransportError> {
    if (min..=max).contains(&value) {
        Ok(value as u32)
    } else {
        fail(
            ErrorKind::InvalidParameterValue,
            format!("{parameter} {value} is outside {min}..={max}"),
        )
    }
}

fn is_allowed_char(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// Whether every character of `text` is one SQS accepts ([`is_allowed_char`]), read a byte at a
/// time: a `&str` is valid UTF-8, so below U+0080 only the control characters other than tab, line
/// feed and carriage return are refused, and above it only U+FFFE and U+FFFF (surrogates cannot
/// occur), encoded `EF BF BE` and `EF BF BF` (an `EF` byte always starts a character). The test of
/// a byte has no branch, so the compiler runs it over many bytes at once: every body is checked
/// at every send, by the publisher and again by the account, and a character at a time it cost
/// about 25 instructions a byte.
fn all_allowed(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut wide = false;
    for chunk in bytes.chunks(64) {
        let (mut control, mut above_ascii) = (false, false);
        for &byte in chunk {
            control |= (byte < 0x20) & (byte != b'\t') & (byte != b'\n') & (byte != b'\r');
            above_ascii |= byte >= 0x80;
        }
        if control {
            return false;
        }
        wide |= above_ascii;
    }
    !wide
        || !bytes
            .windows(3)
            .any(|three| three[0] == 0xEF && three[1] == 0xBF && three[2] >= 0xBE)
}

/// Checks a message body: at least one character, all in the set SQS accepts.
pub(crate) fn check_body(body: &str) -> Result<(), TransportError> {
    if body.is_empty() {
        return fail(
            ErrorKind::MissingParameter,
            "the message body is empty: SQS needs at least 1 character",
        );
    }
    if all_allowed(body) {
        return Ok(());
    }
    if let Some((at, c)) = body.char_indices().find(|(_, c)| !is_allowed_char(*c)) {
        return fail(
            ErrorKind::InvalidMessageContents,
            format!(
                "the message body has character U+{:04X} at byte {at}, which SQS does not accept; \
                 encode binary data (for example as base64)",
                c as u32
            ),
        );
    }
    Ok(())
}

/// Checks message attributes and returns their size as SQS counts it (name, type and value bytes).
pub(crate) fn check_message_attributes(
    attributes: &BTreeMap<String, MessageAttributeValue>,
) -> Result<usize, TransportError> {
    if attributes.len() > MAX_MESSAGE_ATTRIBUTES {
        return fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "the message has {} attributes; SQS allows at most {MAX_MESSAGE_ATTRIBUTES}: drop or merge some",
                attributes.len()
            ),
        );
    }
    let mut size = 0;
    for (name, value) in attributes {
        check_attribute_name(name)?;
        size += name.len() + value.data_type.len() + check_attribute_value(name, value)?;
    }
    Ok(size)
}

/// Checks a message attribute's name: 1–256 characters of `[A-Za-z0-9_.-]`, no `AWS.` or `Amazon.`
/// prefix in any case, no `.` first, last or twice in a row. SNS's rule is word for word the same,
/// so its publishes are checked here too ([`topic`](super::topic)).
pub(crate) fn check_attribute_name(name: &str) -> Result<(), TransportError> {
    // Compared without a lowercase copy: every send's attributes are checked twice (the
    // broker's meter, then the backend).
    let reserved = |prefix: &str| {
        name.get(..prefix.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(prefix))
    };
    let problem = if name.is_empty() || name.len() > 256 {
        Some("must be 1 to 256 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        Some("may hold only letters, digits, `_`, `-` and `.`")
    } else if reserved("aws.") || reserved("amazon.") {
        Some("may not start with `AWS.` or `Amazon.`, which AWS reserves")
    } else if name.starts_with('.') || name.ends_with('.') || name.contains("..") {
        Some("may not start or end with `.` or hold `..`")
    } else {
        None
    };
    match problem {
        Some(why) => fail(
            ErrorKind::InvalidParameterValue,
            format!("message attribute name `{name}` is invalid: a name {why}"),
        ),
        None => Ok(()),
    }
}

/// Checks one attribute's type and value; returns the value's size in bytes.
fn check_attribute_value(
    name: &str,
    value: &MessageAttributeValue,
) -> Result<usize, TransportError> {
    let base = value.data_type.split('.').next().unwrap_or_default();
    let label_ok = value
        .data_type
        .split_once('.')
        .is_none_or(|(_, label)| !label.is_empty() && label.len() <= 256);
    if !label_ok || !matches!(base, "String" | "Number" | "Binary") {
        return fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "message attribute `{name}` has type `{}`; use `String`, `Number` or `Binary`, \
                 optionally followed by `.label`",
                value.data_type
            ),
        );
    }
    match (base, &value.string_value, &value.binary_value) {
        ("Binary", None, Some(bytes)) if !bytes.is_empty() => Ok(bytes.len()),
        ("String" | "Number", Some(text), None) if !text.is_empty() => {
            let refused = || text.chars().find(|c| !is_allowed_char(*c));
            if let Some(c) = (!all_allowed(text)).then(refused).flatten() {
                return fail(
                    ErrorKind::InvalidParameterValue,
                    format!(
                        "message attribute `{name}` holds character U+{:04X}, which SQS does not accept",
                        c as u32
                    ),
                );
            }
            if base == "Number" && !is_sqs_number(text) {
                return fail(
                    ErrorKind::InvalidParameterValue,
                    format!("message attribute `{name}` of type Number holds `{text}`, which is not a number of up to 38 digits"),
                );
            }
            Ok(text.len())
        }
        _ => fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "message attribute `{name}` must carry one non-empty {} value for its type `{}`",
                if base == "Binary" { "binary" } else { "string" },
                value.data_type
            ),
        ),
    }
}

fn is_sqs_number(text: &str) -> bool {
    let digits = text.bytes().filter(u8::is_ascii_digit).count();
    digits > 0 && digits <= 38 && text.parse::<f64>().is_ok_and(f64::is_finite)
}

/// A message's size as SQS counts it against `MaximumMessageSize` and a batch's payload limit:
/// the body, and each attribute's name, type and value.
pub(crate) fn message_size(message: &SendMessage) -> usize {
    message.body.len() + attributes_size(&message.message_attributes)
}

/// What message attributes add to a message's size, as SQS and SNS both count it: each
/// attribute's name, data type and value (a `Binary` value's bytes, not its base64 text).
pub(crate) fn attributes_size(attributes: &MessageAttributes) -> usize {
    attributes
        .iter()
        .map(|(name, value)| {
            name.len()
                + value.data_type.len()
                + value.string_value.as_ref().map_or(0, String::len)
                + value.binary_value.as_ref().map_or(0, Vec::len)
        })
        .sum()
}

/// What a send must know of the queue it goes to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SendTarget<'a> {
    pub(crate) queue: &'a str,
    pub(crate) fifo: bool,
    pub(crate) content_based_dedup: bool,
    pub(crate) maximum_message_size: usize,
}

/// Checks a message against every send rule; returns the per-message delay it asks for
/// (`None` when it leaves the queue's delay, and always on FIFO, where only 0 is accepted).
pub(crate) fn check_send(
    message: &SendMessage,
    target: SendTarget<'_>,
) -> Result<Option<u32>, TransportError> {
    let queue = target.queue;
    check_body(&message.body)?;
    let size = message.body.len() + check_message_attributes(&message.message_attributes)?;
    if size > target.maximum_message_size {
        return fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "the message is {size} bytes (body and attributes); queue `{queue}` takes at most {} (MaximumMessageSize)",
                target.maximum_message_size
            ),
        );
    }
    if let Some(group) = &message.group_id {
        check_token("MessageGroupId", group)?;
    }
    if let Some(header) = &message.aws_trace_header {
        if !crate::model::xray::is_xray_header(header) {
            return fail(
                ErrorKind::InvalidParameterValue,
                format!(
                    "the AWSTraceHeader system attribute `{header}` is not an X-Ray trace header \
                     (`Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=<0 or 1>`)"
                ),
            );
        }
    }
    if let Some(dedup) = &message.dedup_id {
        check_token("MessageDeduplicationId", dedup)?;
    }
    let delay = match message.delay_seconds {
        Some(seconds) if !(0..=MAX_DELAY_SECONDS).contains(&seconds) => {
            return fail(
                ErrorKind::InvalidParameterValue,
                format!(
                    "DelaySeconds {seconds} is outside 0..={MAX_DELAY_SECONDS}: delay a message by at most 15 minutes, or write it to an outbox with `.delay(..)` or `.deliver_at(..)`, which schedules it for any time (docs/scheduling.md)"
                ),
            )
        }
        seconds => seconds.map(|s| s as u32),
    };
    if !target.fifo {
        if message.dedup_id.is_some() {
            return fail(
                ErrorKind::InvalidParameterValue,
                format!(
                    "queue `{queue}` is a standard queue and takes no MessageDeduplicationId; remove it or use a FIFO queue"
                ),
            );
        }
        return Ok(delay);
    }
    if let Some(seconds) = delay.filter(|s| *s != 0) {
        return fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "queue `{queue}` is FIFO and refuses a per-message DelaySeconds ({seconds}); set the queue's DelaySeconds instead, or write the message to an outbox with `.delay(..)` or `.deliver_at(..)`, which schedules it on FIFO queues too (docs/scheduling.md)"
            ),
        );
    }
    if message.group_id.is_none() {
        return fail(
            ErrorKind::MissingParameter,
            format!("queue `{queue}` is FIFO: every message needs a MessageGroupId"),
        );
    }
    if message.dedup_id.is_none() && !target.content_based_dedup {
        return fail(
            ErrorKind::InvalidParameterValue,
            format!(
                "queue `{queue}` is FIFO without ContentBasedDeduplication: give each message a \
                 MessageDeduplicationId, or enable ContentBasedDeduplication"
            ),
        );
    }
    Ok(None)
}

/// Checks a batch's entry ids: 1–10 entries, each id 1–80 characters of `[A-Za-z0-9_-]`, all distinct.
pub(crate) fn check_batch_ids<'a>(
    ids: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), TransportError> {
    let count = ids.len();
    if count == 0 {
        return fail(
            ErrorKind::EmptyBatchRequest,
            "the batch has no entries; send 1 to 10",
        );
    }
    if count > MAX_BATCH_ENTRIES {
        return fail(
            ErrorKind::TooManyEntriesInBatchRequest,
            format!("the batch has {count} entries; split it into batches of at most {MAX_BATCH_ENTRIES}"),
        );
    }
    // At most 10 ids: comparing each with those before it is cheaper than hashing them.
    let mut seen = [""; MAX_BATCH_ENTRIES];
    for (at, id) in ids.enumerate() {
        let valid = !id.is_empty()
            && id.len() <= MAX_BATCH_ENTRY_ID_LEN
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !valid {
            return fail(
                ErrorKind::InvalidBatchEntryId,
                format!("batch entry id `{id}` is invalid: use 1 to 80 characters of letters, digits, `-` and `_`"),
            );
        }
        if seen[..at].contains(&id) {
            return fail(
                ErrorKind::BatchEntryIdsNotDistinct,
                format!("batch entry id `{id}` appears twice; give each entry its own id"),
            );
        }
        seen[at] = id;
    }
    Ok(())
}

/// Checks a `SendMessageBatch` as a whole: its entry ids, and its total payload (at most 1 MiB).
pub(crate) fn check_send_batch(
    entries: &[super::wire::SendBatchEntry],
) -> Result<(), TransportError> {
    check_batch_ids(entries.iter().map(|entry| entry.id.as_ref()))?;
    let total: usize = entries
        .iter()
        .map(|entry| {
            entry.message.body.len()
                + check_message_attributes(&entry.message.message_attributes).unwrap_or_default()
        })
        .sum();
    if total > MAX_BATCH_PAYLOAD_SIZE {
        return fail(
            ErrorKind::BatchRequestTooLong,
            format!("the batch's messages add up to {total} bytes; SQS takes at most {MAX_BATCH_PAYLOAD_SIZE} per batch: split it"),
        );
    }
    Ok(())
}

/// Checks the receive parameters; returns `(max_number_of_messages, wait, visibility)`.
pub(crate) fn check_receive(
    max_number_of_messages: i32,
    wait_time_seconds: Option<i32>,
    visibility_timeout: Option<i32>,
    attempt_id: Option<&str>,
) -> Result<(usize, Option<u32>, Option<u32>), TransportError> {
    let max = check_range(
        "MaxNumberOfMessages",
        max_number_of_messages,
        1,
        MAX_RECEIVE_MESSAGES,
    )?;
    let wait = wait_time_seconds
        .map(|w| check_range("WaitTimeSeconds", w, 0, MAX_WAIT_TIME_SECONDS))
        .transpose()?;
    let visibility = visibility_timeout
        .map(|v| check_range("VisibilityTimeout", v, 0, MAX_VISIBILITY_TIMEOUT_SECONDS))
        .transpose()?;
    if let Some(attempt) = attempt_id {
        check_token("ReceiveRequestAttemptId", attempt)?;
    }
    Ok((max as usize, wait, visibility))
}

/// The system attributes a receive may ask for.
pub(crate) const SYSTEM_ATTRIBUTE_NAMES: &[&str] = &[
    "All",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "SentTimestamp",
    "SenderId",
    "SequenceNumber",
    "MessageGroupId",
    "MessageDeduplicationId",
    "DeadLetterQueueSourceArn",
    "AWSTraceHeader",
];

/// Checks the system attribute names of a receive.
pub(crate) fn check_system_attribute_names(
    names: &[std::borrow::Cow<'static, str>],
) -> Result<(), TransportError> {
    match names
        .iter()
        .find(|n| !SYSTEM_ATTRIBUTE_NAMES.contains(&n.as_ref()))
    {
        Some(unknown) => fail(
            ErrorKind::InvalidAttributeName,
            format!(
                "unknown message system attribute `{unknown}`; use one of {}",
                SYSTEM_ATTRIBUTE_NAMES.join(", ")
            ),
        ),
        None => Ok(()),
    }
}

/// How a FIFO queue scopes deduplication ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DedupScope {
    Queue,
    MessageGroup,
}

/// A queue's redrive policy: where messages go after `max_receive_count` receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedrivePolicy {
    pub(crate) dead_letter_target_arn: String,
    pub(crate) max_receive_count: u32,
}

impl RedrivePolicy {
    /// The dead-letter queue's name: the last part of its ARN.
    pub(crate) fn target_name(&self) -> &str {
        self.dead_letter_target_arn
            .rsplit(':')
            .next()
            .unwrap_or_default()
    }

    pub(crate) fn to_json(&self) -> String {
        serde_json::json!({
            "deadLetterTargetArn": self.dead_letter_target_arn,
            "maxReceiveCount": self.max_receive_count,
        })
        .to_string()
    }
}

/// One settable queue attribute, parsed and range-checked.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum QueueAttribute {
    VisibilityTimeout(u32),
    DelaySeconds(u32),
    ReceiveMessageWaitTimeSeconds(u32),
    MessageRetentionPeriod(u32),
    MaximumMessageSize(u32),
    FifoQueue(bool),
    ContentBasedDeduplication(bool),
    DeduplicationScope(DedupScope),
    FifoThroughputLimit {
        per_message_group: bool,
    },
    /// `None` removes the policy (an empty value).
    RedrivePolicy(Option<RedrivePolicy>),
    /// Stored and echoed, not modelled (`Policy`, `RedriveAllowPolicy`, encryption settings).
    Opaque(String),
}

/// The attributes a caller may read but never set.
pub(crate) const READ_ONLY_ATTRIBUTES: &[&str] = &[
    "QueueArn",
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
];

const OPAQUE_ATTRIBUTES: &[&str] = &[
    "Policy",
    "RedriveAllowPolicy",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
];

/// Parses one attribute of `CreateQueue` / `SetQueueAttributes`.
pub(crate) fn parse_queue_attribute(
    name: &str,
    value: &str,
) -> Result<QueueAttribute, TransportError> {
    let seconds = |min: i32, max: i32| -> Result<u32, TransportError> {
        match value.trim().parse::<i64>() {
            Ok(n) if (min as i64..=max as i64).contains(&n) => Ok(n as u32),
            _ => fail(
                ErrorKind::InvalidAttributeValue,
                format!("attribute {name} is `{value}`; it must be an integer in {min}..={max}"),
            ),
        }
    };
    let boolean = || match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => fail(
            ErrorKind::InvalidAttributeValue,
            format!("attribute {name} is `{value}`; use `true` or `false`"),
        ),
    };
    Ok(match name {
        "VisibilityTimeout" => QueueAttribute::VisibilityTimeout(seconds(0, MAX_VISIBILITY_TIMEOUT_SECONDS)?),
        "DelaySeconds" => QueueAttribute::DelaySeconds(seconds(0, MAX_DELAY_SECONDS)?),
        "ReceiveMessageWaitTimeSeconds" => {
            QueueAttribute::ReceiveMessageWaitTimeSeconds(seconds(0, MAX_WAIT_TIME_SECONDS)?)
        }
        "MessageRetentionPeriod" => QueueAttribute::MessageRetentionPeriod(seconds(60, 1_209_600)?),
        "MaximumMessageSize" => QueueAttribute::MaximumMessageSize(seconds(1024, MAX_MESSAGE_SIZE as i32)?),
        "FifoQueue" => QueueAttribute::FifoQueue(boolean()?),
        "ContentBasedDeduplication" => QueueAttribute::ContentBasedDeduplication(boolean()?),
        "DeduplicationScope" => QueueAttribute::DeduplicationScope(match value {
            "queue" => DedupScope::Queue,
            "messageGroup" => DedupScope::MessageGroup,
            _ => {
                return fail(
                    ErrorKind::InvalidAttributeValue,
                    format!("attribute DeduplicationScope is `{value}`; use `queue` or `messageGroup`"),
                )
            }
        }),
        "FifoThroughputLimit" => QueueAttribute::FifoThroughputLimit {
            per_message_group: match value {
                "perQueue" => false,
                "perMessageGroupId" => true,
                _ => {
                    return fail(
                        ErrorKind::InvalidAttributeValue,
                        format!("attribute FifoThroughputLimit is `{value}`; use `perQueue` or `perMessageGroupId`"),
                    )
                }
            },
        },
        "RedrivePolicy" => QueueAttribute::RedrivePolicy(parse_redrive_policy(value)?),
        _ if OPAQUE_ATTRIBUTES.contains(&name) => QueueAttribute::Opaque(value.to_owned()),
        _ if READ_ONLY_ATTRIBUTES.contains(&name) => {
            return fail(
                ErrorKind::InvalidAttributeName,
                format!("attribute {name} is read-only; it cannot be set"),
            )
        }
        _ => {
            return fail(
                ErrorKind::InvalidAttributeName,
                format!("unknown queue attribute `{name}`"),
            )
        }
    })
}

fn parse_redrive_policy(value: &str) -> Result<Option<RedrivePolicy>, TransportError> {
    if value.trim().is_empty() {
        return Ok(None);
    }
    let invalid = |why: &str| {
        fail(
            ErrorKind::InvalidAttributeValue,
            format!(
                "RedrivePolicy `{value}` is invalid: {why}; write {{\"deadLetterTargetArn\":\"arn:aws:sqs:REGION:ACCOUNT:NAME\",\"maxReceiveCount\":1..1000}}"
            ),
        )
    };
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_str::<serde_json::Value>(value)
    else {
        return invalid("it is not a JSON object");
    };
    let Some(arn) = fields.get("deadLetterTargetArn").and_then(|v| v.as_str()) else {
        return invalid("deadLetterTargetArn is missing");
    };
    let count = match fields.get("maxReceiveCount") {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse::<u64>().ok(),
        _ => None,
    };
    let Some(count) = count.filter(|c| (1..=1000).contains(c)) else {
        return invalid("maxReceiveCount must be an integer in 1..=1000");
    };
    let parts: Vec<&str> = arn.split(':').collect();
    if parts.len() != 6
        || parts[0] != "arn"
        || parts[2] != "sqs"
        || check_queue_name(parts[5]).is_err()
    {
        return invalid("deadLetterTargetArn is not an SQS queue ARN");
    }
    Ok(Some(RedrivePolicy {
        dead_letter_target_arn: arn.to_owned(),
        max_receive_count: count as u32,
    }))
}

#[cfg(test)]
mod tests;
