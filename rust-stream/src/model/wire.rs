//! SQS requests and responses as plain data, shaped like the SQS API (names, fields, seconds as
//! integers, attributes read as maps from names to text), so that the in-process
//! [`Account`](crate::account::Account) and the aws-sdk transport answer the same questions in the
//! same words. Nothing here knows which backend is underneath.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use super::error::BatchFailure;

/// Queue attributes by their SQS names (`VisibilityTimeout`, `FifoQueue`, `RedrivePolicy`, ...).
pub type QueueAttributes = BTreeMap<String, String>;

/// Message attributes by name.
pub type MessageAttributes = BTreeMap<String, MessageAttributeValue>;

/// A message attribute: a data type and one value of that type.
#[derive(Clone, PartialEq, Eq)]
pub struct MessageAttributeValue {
    /// `String`, `Number` or `Binary`, optionally with a `.label` suffix (SNS reads the label of
    /// `String.Array`).
    pub data_type: String,
    /// The value of a `String` or `Number` attribute.
    pub string_value: Option<String>,
    /// The value of a `Binary` attribute.
    pub binary_value: Option<Vec<u8>>,
}

impl MessageAttributeValue {
    /// A `String` attribute.
    pub fn string(value: impl Into<String>) -> Self {
        Self {
            data_type: "String".to_owned(),
            string_value: Some(value.into()),
            binary_value: None,
        }
    }

    /// A `Number` attribute, written as its decimal text.
    pub fn number(value: impl Into<String>) -> Self {
        Self {
            data_type: "Number".to_owned(),
            string_value: Some(value.into()),
            binary_value: None,
        }
    }

    /// An SNS `String.Array` attribute: a JSON array of strings, numbers, `true`, `false` and
    /// `null`, written as text (`["ledger","risk"]`). SQS takes it as a `String` with the label
    /// `Array`.
    pub fn string_array(json: impl Into<String>) -> Self {
        Self {
            data_type: "String.Array".to_owned(),
            string_value: Some(json.into()),
            binary_value: None,
        }
    }

    /// A `Binary` attribute.
    pub fn binary(value: impl Into<Vec<u8>>) -> Self {
        Self {
            data_type: "Binary".to_owned(),
            string_value: None,
            binary_value: Some(value.into()),
        }
    }
}

impl fmt::Debug for MessageAttributeValue {
    // Attribute values may hold user data; print their shape, not their content.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let len = self.string_value.as_ref().map_or(0, String::len)
            + self.binary_value.as_ref().map_or(0, Vec::len);
        f.debug_struct("MessageAttributeValue")
            .field("data_type", &self.data_type)
            .field("value_len", &len)
            .finish()
    }
}

/// A message to send: `SendMessage`, or one entry of `SendMessageBatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct SendMessage {
    /// The body: 1 byte to 1 MiB of the characters SQS accepts.
    pub body: String,
    /// Per-message delay in seconds (standard queues only; FIFO queues refuse a non-zero one).
    pub delay_seconds: Option<i32>,
    /// Message attributes, at most 10.
    pub message_attributes: MessageAttributes,
    /// `MessageGroupId`: required on FIFO queues.
    pub group_id: Option<String>,
    /// `MessageDeduplicationId`: required on FIFO queues without content-based deduplication.
    pub dedup_id: Option<String>,
    /// The `AWSTraceHeader` message system attribute: an X-Ray trace header
    /// (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`), the one
    /// system attribute a sender may set. It is not one of the 10 message attributes and does
    /// not count toward the message's size.
    pub aws_trace_header: Option<String>,
}

impl SendMessage {
    /// A message with this body and nothing else set.
    pub fn new(body: impl Into<String>) -> Self {
        Self {
            body: body.into(),
            delay_seconds: None,
            message_attributes: MessageAttributes::new(),
            group_id: None,
            dedup_id: None,
            aws_trace_header: None,
        }
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

    /// Sets the per-message `DelaySeconds`.
    pub fn delay_seconds(mut self, seconds: i32) -> Self {
        self.delay_seconds = Some(seconds);
        self
    }

    /// Sets the `AWSTraceHeader` system attribute (an X-Ray trace header).
    pub fn aws_trace_header(mut self, header: impl Into<String>) -> Self {
        self.aws_trace_header = Some(header.into());
        self
    }

    /// Adds a message attribute.
    pub fn attribute(mut self, name: impl Into<String>, value: MessageAttributeValue) -> Self {
        self.message_attributes.insert(name.into(), value);
        self
    }
}

pub use super::entry_id::EntryId;

/// One entry of a `SendMessageBatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendBatchEntry {
    /// The entry's id within the batch.
    pub id: EntryId,
    /// The message.
    pub message: SendMessage,
}

impl SendBatchEntry {
    /// An entry with this id.
    pub fn new(id: impl Into<String>, message: SendMessage) -> Self {
        Self {
            id: EntryId::Owned(id.into()),
            message,
        }
    }
}

/// What a send answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    /// The message id; for a deduplicated send, the original's.
    pub message_id: String,
    /// The FIFO sequence number (20 digits); for a deduplicated send, the original's.
    pub sequence_number: Option<String>,
    /// Whether the send was a duplicate and so was not stored again: skipped by a publisher's
    /// [command history](crate::publish::history) (on either backend), or a FIFO duplicate within
    /// the 5-minute window (Amazon SQS does not report those; the in-process account does, and a
    /// network transport reports `false`).
    pub duplicate: bool,
}

/// A receive request: `ReceiveMessage`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct ReceiveMessage {
    /// `MaxNumberOfMessages`, 1–10.
    pub max_number_of_messages: i32,
    /// `WaitTimeSeconds`, 0–20; `None` takes the queue's `ReceiveMessageWaitTimeSeconds`.
    pub wait_time_seconds: Option<i32>,
    /// `VisibilityTimeout` for the received messages; `None` takes the queue's.
    pub visibility_timeout: Option<i32>,
    /// System attributes to return (`All`, `ApproximateReceiveCount`, `SequenceNumber`, ...).
    /// Names known when the program is written are borrowed, not copied for each receive.
    pub system_attribute_names: Vec<Cow<'static, str>>,
    /// Message attributes to return: `All`, `.*`, a `prefix.*`, or exact names.
    pub message_attribute_names: Vec<Cow<'static, str>>,
    /// `ReceiveRequestAttemptId` (FIFO): a retried receive within 5 minutes returns the same messages.
    pub receive_request_attempt_id: Option<String>,
}

impl ReceiveMessage {
    /// Receive up to `max` messages without waiting, returning all system and message attributes.
    pub fn new(max: i32) -> Self {
        Self {
            max_number_of_messages: max,
            wait_time_seconds: Some(0),
            visibility_timeout: None,
            system_attribute_names: vec![Cow::Borrowed("All")],
            message_attribute_names: vec![Cow::Borrowed("All")],
            receive_request_attempt_id: None,
        }
    }

    /// Long-poll for up to `seconds`.
    pub fn wait_time_seconds(mut self, seconds: i32) -> Self {
        self.wait_time_seconds = Some(seconds);
        self
    }

    /// Use the queue's `ReceiveMessageWaitTimeSeconds`.
    pub fn queue_wait_time(mut self) -> Self {
        self.wait_time_seconds = None;
        self
    }

    /// Override the queue's visibility timeout for these messages.
    pub fn visibility_timeout(mut self, seconds: i32) -> Self {
        self.visibility_timeout = Some(seconds);
        self
    }

    /// Return only these system attributes.
    pub fn system_attribute_names<I: IntoIterator<Item = S>, S: Into<Cow<'static, str>>>(
        mut self,
        names: I,
    ) -> Self {
        self.system_attribute_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Return only these message attributes.
    pub fn message_attribute_names<I: IntoIterator<Item = S>, S: Into<Cow<'static, str>>>(
        mut self,
        names: I,
    ) -> Self {
        self.message_attribute_names = names.into_iter().map(Into::into).collect();
        self
    }

    /// Set `ReceiveRequestAttemptId`.
    pub fn receive_request_attempt_id(mut self, attempt_id: impl Into<String>) -> Self {
        self.receive_request_attempt_id = Some(attempt_id.into());
        self
    }
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The message id, kept across redeliveries and dead-lettering.
    pub message_id: String,
    /// The handle to delete or change this receive; every receive issues a new one.
    pub receipt_handle: String,
    /// The body.
    pub body: String,
    /// The requested system attributes, by SQS name.
    pub attributes: SystemAttributes,
    /// The requested message attributes.
    pub message_attributes: MessageAttributes,
}

/// The most messages a kept list ([`ReceivedMessage::list`]) holds: a receive's 10, with room.
const KEPT_LIST_MESSAGES: usize = 16;

thread_local! {
    /// A receive's list of messages, given back empty by whoever took the messages out: a list of
    /// 10 messages is kilobytes, and a request for that much makes glibc's allocator sort all its
    /// recently freed small blocks first, which on a large heap costs more than the receive.
    static KEPT_LIST: std::cell::Cell<Vec<ReceivedMessage>> = const {
        std::cell::Cell::new(Vec::new())
    };
}

impl ReceivedMessage {
    /// An empty list for a receive's `count` messages: the one this thread was given back
    /// ([`give_back_list`](Self::give_back_list)) when it is large enough.
    pub(crate) fn list(count: usize) -> Vec<ReceivedMessage> {
        // An empty answer allocates nothing, and may never be given back: it keeps no list.
        if count == 0 {
            return Vec::new();
        }
        let kept = KEPT_LIST
            .try_with(std::cell::Cell::take)
            .unwrap_or_default();
        if kept.capacity() >= count {
            return kept;
        }
        // Too small for this one, kept for the next.
        let _ = KEPT_LIST.try_with(|cell| cell.set(kept));
        Vec::with_capacity(count)
    }

    /// Keeps a receive's list, emptied, for the thread's next receive ([`list`](Self::list)).
    pub(crate) fn give_back_list(mut list: Vec<ReceivedMessage>) {
        if list.capacity() <= KEPT_LIST_MESSAGES {
            list.clear();
            // A thread that is ending keeps nothing.
            let _ = KEPT_LIST.try_with(|kept| kept.set(list));
        }
    }
    /// `ApproximateReceiveCount`, when it was requested.
    pub fn receive_count(&self) -> Option<u32> {
        self.attributes
            .number(SystemAttribute::ApproximateReceiveCount)?
            .try_into()
            .ok()
    }

    /// `SequenceNumber`, when the queue is FIFO and it was requested.
    pub fn sequence_number(&self) -> Option<&str> {
        self.attributes.text(SystemAttribute::SequenceNumber)
    }

    /// `MessageGroupId`, when the message has one and it was requested.
    pub fn group_id(&self) -> Option<&str> {
        self.attributes.text(SystemAttribute::MessageGroupId)
    }

    /// `MessageDeduplicationId`, when the message has one and it was requested.
    pub fn dedup_id(&self) -> Option<&str> {
        self.attributes
            .text(SystemAttribute::MessageDeduplicationId)
    }
}

/// A system attribute this crate knows by name; [`SystemAttributes`] holds these without a map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SystemAttribute {
    /// `AWSTraceHeader`: the X-Ray trace header the sender set, if it set one.
    AwsTraceHeader,
    /// `ApproximateFirstReceiveTimestamp`: milliseconds since the epoch.
    ApproximateFirstReceiveTimestamp,
    /// `ApproximateReceiveCount`.
    ApproximateReceiveCount,
    /// `DeadLetterQueueSourceArn`.
    DeadLetterQueueSourceArn,
    /// `MessageDeduplicationId`.
    MessageDeduplicationId,
    /// `MessageGroupId`.
    MessageGroupId,
    /// `SenderId`.
    SenderId,
    /// `SentTimestamp`: milliseconds since the epoch.
    SentTimestamp,
    /// `SequenceNumber`: 20 digits.
    SequenceNumber,
}

impl SystemAttribute {
    /// Every one, in the order of their names.
    pub const ALL: [Self; 9] = [
        Self::AwsTraceHeader,
        Self::ApproximateFirstReceiveTimestamp,
        Self::ApproximateReceiveCount,
        Self::DeadLetterQueueSourceArn,
        Self::MessageDeduplicationId,
        Self::MessageGroupId,
        Self::SenderId,
        Self::SentTimestamp,
        Self::SequenceNumber,
    ];

    /// The SQS name.
    pub fn name(self) -> &'static str {
        match self {
            Self::AwsTraceHeader => "AWSTraceHeader",
            Self::ApproximateFirstReceiveTimestamp => "ApproximateFirstReceiveTimestamp",
            Self::ApproximateReceiveCount => "ApproximateReceiveCount",
            Self::DeadLetterQueueSourceArn => "DeadLetterQueueSourceArn",
            Self::MessageDeduplicationId => "MessageDeduplicationId",
            Self::MessageGroupId => "MessageGroupId",
            Self::SenderId => "SenderId",
            Self::SentTimestamp => "SentTimestamp",
            Self::SequenceNumber => "SequenceNumber",
        }
    }

    /// The one of this SQS name.
    pub fn named(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|known| known.name() == name)
    }
}

/// A received message's system attributes, read as a map from SQS names to their text
/// (`attributes["SentTimestamp"]`, [`get`](Self::get), [`keys`](Self::keys) in name order).
///
/// The attributes this crate knows ([`SystemAttribute`]) are held in place, numbers as numbers
/// with their digits, so a receive returns them without allocating a map and a string for each;
/// any other name a service returns is kept as sent.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SystemAttributes {
    /// By [`SystemAttribute`], in the order of [`SystemAttribute::ALL`].
    known: [Option<AttributeText>; SystemAttribute::ALL.len()],
    other: BTreeMap<String, String>,
}

/// The text of one known attribute.
#[derive(Clone, PartialEq, Eq)]
enum AttributeText {
    Number(Digits),
    Text(String),
}

impl AttributeText {
    fn as_str(&self) -> &str {
        match self {
            Self::Number(digits) => digits.as_str(),
            Self::Text(text) => text,
        }
    }
}

/// A number and its decimal digits, written in place (at least `width` of them, zero-padded).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Digits {
    value: u64,
    text: [u8; 20],
    start: u8,
}

impl Digits {
    fn new(value: u64, width: usize) -> Self {
        // Two digits a division: a receive writes two or three numbers a message.
        const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
            2021222324252627282930313233343536373839\
            4041424344454647484950515253545556575859\
            6061626364656667686970717273747576777879\
            8081828384858687888990919293949596979899";
        let mut text = [b'0'; 20];
        let mut start = text.len();
        let mut rest = value;
        while rest >= 100 {
            let pair = (rest % 100) as usize * 2;
            rest /= 100;
            start -= 2;
            text[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        }
        if rest >= 10 {
            let pair = rest as usize * 2;
            start -= 2;
            text[start..start + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
        } else {
            start -= 1;
            text[start] = b'0' + rest as u8;
        }
        let start = start.min(text.len().saturating_sub(width)) as u8;
        Self { value, text, start }
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[usize::from(self.start)..]).expect("ASCII digits")
    }
}

impl SystemAttributes {
    /// None.
    pub fn new() -> Self {
        Self::default()
    }

    /// The attribute's text, if it is here.
    pub fn get(&self, name: &str) -> Option<&str> {
        match SystemAttribute::named(name) {
            Some(known) => self.text(known),
            None => self.other.get(name).map(String::as_str),
        }
    }

    /// A known attribute's text, if it is here: [`get`](Self::get) without looking the name up.
    pub fn text(&self, attribute: SystemAttribute) -> Option<&str> {
        self.known[attribute as usize]
            .as_ref()
            .map(AttributeText::as_str)
    }

    /// A known attribute's value as a number, if it is here and is one.
    pub fn number(&self, attribute: SystemAttribute) -> Option<u64> {
        match self.known[attribute as usize].as_ref()? {
            AttributeText::Number(digits) => Some(digits.value),
            AttributeText::Text(text) => text.parse().ok(),
        }
    }

    /// Whether the attribute is here. (Generic over the name's type as a map's is, so that code
    /// written against the map this type replaced reads the same.)
    pub fn contains_key<N: AsRef<str> + ?Sized>(&self, name: &N) -> bool {
        self.get(name.as_ref()).is_some()
    }

    /// Sets an attribute to `value`, as a service returned it.
    pub fn insert(&mut self, name: impl AsRef<str>, value: impl Into<String>) {
        let name = name.as_ref();
        match SystemAttribute::named(name) {
            Some(known) => self.known[known as usize] = Some(AttributeText::Text(value.into())),
            None => {
                self.other.insert(name.to_owned(), value.into());
            }
        }
    }

    /// Sets a known attribute to a number, written with at least `width` digits (zero-padded, as
    /// SQS writes a sequence number); nothing is allocated.
    pub fn insert_number(&mut self, attribute: SystemAttribute, value: u64, width: usize) {
        self.known[attribute as usize] = Some(AttributeText::Number(Digits::new(value, width)));
    }

    /// Takes an attribute out, returning its text.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        match SystemAttribute::named(name) {
            Some(known) => self.take(known),
            None => self.other.remove(name),
        }
    }

    /// Takes a known attribute out, returning its text: [`remove`](Self::remove) without
    /// looking the name up.
    pub fn take(&mut self, attribute: SystemAttribute) -> Option<String> {
        match self.known[attribute as usize].take()? {
            AttributeText::Number(digits) => Some(digits.as_str().to_owned()),
            AttributeText::Text(text) => Some(text),
        }
    }

    /// The attributes here, by name in name order, with their text.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut known = SystemAttribute::ALL
            .into_iter()
            .filter_map(|attribute| {
                let text = self.known[attribute as usize].as_ref()?;
                Some((attribute.name(), text.as_str()))
            })
            .peekable();
        let mut other = self
            .other
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .peekable();
        std::iter::from_fn(move || match (known.peek(), other.peek()) {
            (Some(a), Some(b)) if b.0 < a.0 => other.next(),
            (Some(_), _) => known.next(),
            (None, _) => other.next(),
        })
    }

    /// The names of the attributes here, in name order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().map(|(name, _)| name)
    }

    /// How many attributes are here.
    pub fn len(&self) -> usize {
        self.known.iter().flatten().count() + self.other.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::ops::Index<&str> for SystemAttributes {
    type Output = str;

    /// The attribute's text; panics when it is not here, as a map's index does.
    fn index(&self, name: &str) -> &str {
        self.get(name)
            .unwrap_or_else(|| panic!("no system attribute {name:?}"))
    }
}

impl fmt::Debug for SystemAttributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<N: AsRef<str>, V: Into<String>> FromIterator<(N, V)> for SystemAttributes {
    fn from_iter<I: IntoIterator<Item = (N, V)>>(pairs: I) -> Self {
        let mut attributes = Self::new();
        for (name, value) in pairs {
            attributes.insert(name, value);
        }
        attributes
    }
}

/// One entry of `DeleteMessageBatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteEntry {
    /// The entry's id within the batch.
    pub id: EntryId,
    /// The receipt handle of the latest receive.
    pub receipt_handle: String,
}

/// One entry of `ChangeMessageVisibilityBatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeVisibilityEntry {
    /// The entry's id within the batch.
    pub id: EntryId,
    /// The receipt handle of the latest receive.
    pub receipt_handle: String,
    /// The new visibility timeout in seconds, counted from now; 0 releases the message.
    pub visibility_timeout: i32,
}

/// A batch call's answer: entries that succeeded, and entries that failed with their reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchResult<T> {
    /// Successful entries, by entry id.
    pub successful: Vec<(EntryId, T)>,
    /// Failed entries.
    pub failed: Vec<BatchFailure>,
}

impl<T> Default for BatchResult<T> {
    fn default() -> Self {
        Self {
            successful: Vec::new(),
            failed: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A list given back is the next list asked for, emptied, while it is large enough; a list
    /// larger than a receive's is not kept, so a thread keeps at most a few hundred bytes a
    /// message for it.
    #[test]
    fn a_receives_list_given_back_is_the_threads_next() {
        let message = || ReceivedMessage {
            message_id: "m".into(),
            receipt_handle: "r".into(),
            body: "b".into(),
            attributes: SystemAttributes::new(),
            message_attributes: MessageAttributes::new(),
        };
        let mut list = ReceivedMessage::list(10);
        list.extend((0..10).map(|_| message()));
        let storage = list.as_ptr();
        ReceivedMessage::give_back_list(list);
        let again = ReceivedMessage::list(3);
        assert!(again.is_empty(), "given back emptied");
        assert_eq!(again.as_ptr(), storage, "the same storage");
        ReceivedMessage::give_back_list(again);
        let larger = ReceivedMessage::list(11);
        assert!(larger.capacity() >= 11);
        let kept = ReceivedMessage::list(1);
        assert_eq!(kept.as_ptr(), storage, "kept while a larger list was made");
        drop(kept);
        let mut huge = larger;
        huge.reserve(100);
        huge.push(message());
        ReceivedMessage::give_back_list(huge);
        let fresh = ReceivedMessage::list(1);
        assert!(
            fresh.capacity() < 100,
            "a list larger than a receive's is not kept"
        );
    }

    #[test]
    fn system_attributes_read_as_a_map_of_names_in_name_order() {
        let mut attributes = SystemAttributes::new();
        attributes.insert_number(SystemAttribute::SentTimestamp, 1_700_000_000_123, 0);
        attributes.insert("MessageGroupId", "ada");
        attributes.insert("AWSTraceHeader", "Root=1-abc");
        attributes.insert("ApproximateReceiveCount", "3");
        assert_eq!(
            attributes.keys().collect::<Vec<_>>(),
            [
                "AWSTraceHeader",
                "ApproximateReceiveCount",
                "MessageGroupId",
                "SentTimestamp"
            ]
        );
        assert_eq!(attributes.len(), 4);
        assert_eq!(&attributes["SentTimestamp"], "1700000000123");
        assert_eq!(
            attributes.number(SystemAttribute::ApproximateReceiveCount),
            Some(3),
            "a number a service sent as text reads as a number too"
        );
        assert_eq!(attributes.get("AWSTraceHeader"), Some("Root=1-abc"));
        assert_eq!(
            attributes.remove("SentTimestamp").as_deref(),
            Some("1700000000123")
        );
        assert!(!attributes.contains_key("SentTimestamp"));
        assert_eq!(
            format!("{attributes:?}"),
            r#"{"AWSTraceHeader": "Root=1-abc", "ApproximateReceiveCount": "3", "MessageGroupId": "ada"}"#
        );
    }

    #[test]
    fn numbers_are_written_as_their_decimal_digits_at_every_length_and_taken_by_name_or_not() {
        let mut values = vec![u64::MAX, u64::MAX - 1, 101, 11];
        values.extend((0..64).map(|bit| 1u64 << bit));
        values.extend((0..20).map(|digits| 10u64.pow(digits)));
        values.extend((1..20).map(|digits| 10u64.pow(digits) - 1));
        for value in values {
            for width in [0, 20] {
                let mut attributes = SystemAttributes::new();
                attributes.insert_number(SystemAttribute::SequenceNumber, value, width);
                let expected = format!("{value:0width$}");
                assert_eq!(
                    attributes.text(SystemAttribute::SequenceNumber),
                    Some(expected.as_str())
                );
                assert_eq!(
                    attributes.number(SystemAttribute::SequenceNumber),
                    Some(value)
                );
                assert_eq!(
                    attributes.take(SystemAttribute::SequenceNumber),
                    Some(expected)
                );
                assert_eq!(attributes.get("SequenceNumber"), None, "taken");
            }
        }
    }
}

/// Where a peeked message stands in its queue, as a peek saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MessageState {
    /// Receivable now.
    Visible,
    /// Received and not yet deleted; visible again in this long unless deleted or extended.
    InFlight {
        /// Until its visibility timeout ends.
        visible_in: std::time::Duration,
    },
    /// Waiting out its delay.
    Delayed {
        /// Until its delay ends.
        visible_in: std::time::Duration,
    },
}

impl MessageState {
    /// `visible`, `in flight` or `delayed`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Visible => "visible",
            Self::InFlight { .. } => "in flight",
            Self::Delayed { .. } => "delayed",
        }
    }
}

/// A peek request: up to `max` of a queue's messages in storage order, after skipping `offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeekMessages {
    /// Messages to skip from the front of the queue.
    pub offset: usize,
    /// Messages to return at most.
    pub max: usize,
}

/// A message as a peek sees it: left as it is (no receive counted, no visibility changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeekedMessage {
    /// The message with every system and message attribute; its `receipt_handle` is empty, as
    /// a peek is no receive and hands out no handle to delete or change it by.
    pub message: ReceivedMessage,
    /// Where it stands.
    pub state: MessageState,
}
