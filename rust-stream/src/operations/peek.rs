//! A look at a queue's messages without taking them: [`Operations::peek`] with a
//! [`MessageFilter`], an amount and an offset, and [`Operations::show`] for one message.
//!
//! What a peek is depends on the backend:
//!
//! - **The in-process account** peeks for real: nothing about the messages changes (no receive
//!   counted, no visibility, no FIFO group held), in flight and delayed messages are seen too,
//!   each with its state, in storage order (each FIFO group in its order).
//! - **Amazon SQS** has no peek. Here a peek is a receive that keeps what it got invisible while
//!   it gathers (so it sees each message once), then makes it visible again at once
//!   (`ChangeMessageVisibility` 0). Each peeked message's receive count goes up by one, and for
//!   that moment a consumer cannot have it. Only visible messages are seen. On a FIFO queue a
//!   received message holds its group, so only each group's first messages (those one receive
//!   hands out together) are seen. So a peek refuses, with [`OperationError::PeekRefused`], a
//!   FIFO queue and a queue with a `RedrivePolicy` unless forced ([`Peek::force`]): see
//!   [`PeekRisk`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::queues::{at, redrive_target, OperationError, Operations, PeekRisk};
use crate::model::entry_id::entry_id;
use crate::model::headers::{
    ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER, ORIGINAL_MESSAGE_ID_HEADER, SOURCE_QUEUE_HEADER,
};
use crate::model::rules;
use crate::transport::{
    ChangeVisibilityEntry, MessageAttributeValue, MessageState, PeekMessages, PeekedMessage,
    ReceiveMessage, ReceivedMessage, SystemAttribute,
};

/// Messages a peek on the account reads in one look while it filters.
const PEEK_PAGE: usize = 1_000;

/// How long a peek on SQS keeps what it received invisible while it gathers more: it makes
/// every one visible again as soon as it has enough, or the queue has no more.
const HOLD_SECONDS: i32 = 30;

/// Which messages a peek keeps: those that match every condition set (none set: all).
///
/// ```
/// use rust_stream::operations::MessageFilter;
///
/// let failed_payments = MessageFilter::new()
///     .source_queue("payments.fifo")
///     .body_contains("\"currency\":\"EUR\"");
/// # let _ = failed_payments;
/// ```
#[derive(Clone, Default)]
pub struct MessageFilter {
    message_id: Option<String>,
    message_ids: Vec<String>,
    json_pointers: Vec<(String, serde_json::Value)>,
    sent_before_ms: Option<u64>,
    sent_after_ms: Option<u64>,
    group_id: Option<String>,
    body_contains: Option<String>,
    attributes: Vec<(String, String)>,
    source_queue: Option<String>,
    reason_contains: Option<String>,
    predicate: Option<Predicate>,
}

/// A test of a message a filter makes beside its own.
type Predicate = Arc<dyn Fn(&Message) -> bool + Send + Sync>;

impl std::fmt::Debug for MessageFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageFilter")
            .field("message_id", &self.message_id)
            .field("message_ids", &self.message_ids.len())
            .field("json_pointers", &self.json_pointers.len())
            .field("sent_before_ms", &self.sent_before_ms)
            .field("sent_after_ms", &self.sent_after_ms)
            .field("group_id", &self.group_id)
            .field(
                "body_contains",
                &self.body_contains.as_ref().map(String::len),
            )
            .field("attributes", &self.attributes.len())
            .field("source_queue", &self.source_queue)
            .field("reason_contains", &self.reason_contains)
            .field("predicate", &self.predicate.is_some())
            .finish()
    }
}

impl MessageFilter {
    /// Every message.
    pub fn new() -> Self {
        Self::default()
    }

    /// The message of this id.
    #[must_use]
    pub fn message_id(mut self, id: impl Into<String>) -> Self {
        self.message_id = Some(id.into());
        self
    }

    /// Messages whose id is one of `ids` (added to any given before).
    #[must_use]
    pub fn message_ids<I: Into<String>>(mut self, ids: impl IntoIterator<Item = I>) -> Self {
        self.message_ids.extend(ids.into_iter().map(Into::into));
        self
    }

    /// Messages whose body is JSON with `value` at `pointer` (RFC 6901, as
    /// [`serde_json::Value::pointer`]: `/currency`, `/items/0/sku`).
    #[must_use]
    pub fn json_pointer(
        mut self,
        pointer: impl Into<String>,
        value: impl Into<serde_json::Value>,
    ) -> Self {
        self.json_pointers.push((pointer.into(), value.into()));
        self
    }

    /// Messages sent to this queue before `time` (their `SentTimestamp`; for a dead-letter
    /// copy, when it was dead-lettered).
    #[must_use]
    pub fn sent_before(mut self, time: SystemTime) -> Self {
        self.sent_before_ms = Some(millis(time));
        self
    }

    /// Messages sent to this queue at or after `time` (their `SentTimestamp`).
    #[must_use]
    pub fn sent_after(mut self, time: SystemTime) -> Self {
        self.sent_after_ms = Some(millis(time));
        self
    }

    /// Whether it sets no condition (it matches every message).
    pub fn is_empty(&self) -> bool {
        self.message_id.is_none()
            && self.message_ids.is_empty()
            && self.json_pointers.is_empty()
            && self.sent_before_ms.is_none()
            && self.sent_after_ms.is_none()
            && self.group_id.is_none()
            && self.body_contains.is_none()
            && self.attributes.is_empty()
            && self.source_queue.is_none()
            && self.reason_contains.is_none()
            && self.predicate.is_none()
    }

    /// Messages of this message group.
    #[must_use]
    pub fn group_id(mut self, group: impl Into<String>) -> Self {
        self.group_id = Some(group.into());
        self
    }

    /// Messages whose body contains `text`.
    #[must_use]
    pub fn body_contains(mut self, text: impl Into<String>) -> Self {
        self.body_contains = Some(text.into());
        self
    }

    /// Messages whose message attribute `name` has the text `value` (a `String` or `Number`).
    #[must_use]
    pub fn attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.push((name.into(), value.into()));
        self
    }

    /// Dead-letter copies that came from `queue` (their
    /// [`SOURCE_QUEUE_HEADER`]).
    #[must_use]
    pub fn source_queue(mut self, queue: impl Into<String>) -> Self {
        self.source_queue = Some(queue.into());
        self
    }

    /// Dead-letter copies whose reason contains `text`.
    #[must_use]
    pub fn reason_contains(mut self, text: impl Into<String>) -> Self {
        self.reason_contains = Some(text.into());
        self
    }

    /// Messages for which `predicate` holds: any test of a [`Message`] the others do not make.
    #[must_use]
    pub fn matching(
        mut self,
        predicate: impl Fn(&Message) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.predicate = Some(Arc::new(predicate));
        self
    }

    /// Whether `message` matches every condition.
    pub fn matches(&self, message: &Message) -> bool {
        let dead = message.dead_letter.as_ref();
        let sent = message.sent_timestamp_ms;
        self.message_id
            .as_ref()
            .is_none_or(|id| *id == message.message_id)
            && (self.message_ids.is_empty() || self.message_ids.contains(&message.message_id))
            && self
                .sent_before_ms
                .is_none_or(|before| sent.is_some_and(|sent| sent < before))
            && self
                .sent_after_ms
                .is_none_or(|after| sent.is_some_and(|sent| sent >= after))
            && (self.json_pointers.is_empty()
                || serde_json::from_str::<serde_json::Value>(&message.body).is_ok_and(|body| {
                    self.json_pointers
                        .iter()
                        .all(|(pointer, value)| body.pointer(pointer) == Some(value))
                }))
            && self
                .group_id
                .as_ref()
                .is_none_or(|group| message.group_id.as_ref() == Some(group))
            && self
                .body_contains
                .as_ref()
                .is_none_or(|text| message.body.contains(text.as_str()))
            && self.attributes.iter().all(|(name, value)| {
                message
                    .message_attributes
                    .get(name)
                    .is_some_and(|found| found.value == *value)
            })
            && self
                .source_queue
                .as_ref()
                .is_none_or(|queue| dead.and_then(|dead| dead.source_queue.as_ref()) == Some(queue))
            && self.reason_contains.as_ref().is_none_or(|text| {
                dead.and_then(|dead| dead.reason.as_ref())
                    .is_some_and(|reason| reason.contains(text.as_str()))
            })
            && self
                .predicate
                .as_ref()
                .is_none_or(|predicate| predicate(message))
    }
}

/// A peek: which messages ([`filter`](Self::filter)), how many ([`amount`](Self::amount),
/// default 10) after skipping how many matches ([`offset`](Self::offset)), and whether to peek
/// on SQS where it would change what it looks at ([`force`](Self::force)).
#[derive(Debug, Clone)]
#[must_use]
pub struct Peek {
    pub(crate) filter: MessageFilter,
    pub(crate) amount: usize,
    pub(crate) offset: usize,
    pub(crate) force: bool,
}

impl Default for Peek {
    fn default() -> Self {
        Self {
            filter: MessageFilter::new(),
            amount: 10,
            offset: 0,
            force: false,
        }
    }
}

impl Peek {
    /// Up to 10 messages, from the first, any message.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps the messages `filter` matches.
    pub fn filter(mut self, filter: MessageFilter) -> Self {
        self.filter = filter;
        self
    }

    /// Returns up to `amount` messages.
    pub fn amount(mut self, amount: usize) -> Self {
        self.amount = amount;
        self
    }

    /// Skips the first `offset` matching messages.
    pub fn offset(mut self, offset: usize) -> Self {
        self.offset = offset;
        self
    }

    /// Peeks on SQS even a FIFO queue or one with a `RedrivePolicy` (see [`PeekRisk`]).
    pub fn force(mut self) -> Self {
        self.force = true;
        self
    }
}

/// A message attribute as shown: its data type and its text (a binary value's length).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttributeText {
    /// `String`, `Number`, `Binary` (with any label).
    pub data_type: String,
    /// The value; `<N bytes>` for a binary one.
    pub value: String,
}

/// What a dead-letter copy made by the engine says of where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterOrigin {
    /// The queue the message was dead-lettered from ([`SOURCE_QUEUE_HEADER`]).
    pub source_queue: Option<String>,
    /// The message's id there ([`ORIGINAL_MESSAGE_ID_HEADER`]).
    pub original_message_id: Option<String>,
    /// The attempts it had ([`ATTEMPTS_HEADER`]).
    pub attempts: Option<u32>,
    /// Why ([`DEAD_LETTER_REASON_HEADER`]).
    pub reason: Option<String>,
    /// The queue SQS's own redrive moved it from (`DeadLetterQueueSourceArn`), when SQS moved
    /// it.
    pub moved_by_sqs_from: Option<String>,
}

impl DeadLetterOrigin {
    /// What `message`'s attributes say of where it was dead-lettered from: read by a peek and
    /// by a redrive's plan alike.
    pub(crate) fn of(message: &ReceivedMessage) -> Self {
        let attribute = |name: &str| {
            message
                .message_attributes
                .get(name)
                .and_then(text_of)
                .map(str::to_owned)
        };
        Self {
            source_queue: attribute(SOURCE_QUEUE_HEADER),
            original_message_id: attribute(ORIGINAL_MESSAGE_ID_HEADER),
            attempts: attribute(ATTEMPTS_HEADER).and_then(|n| n.parse().ok()),
            reason: attribute(DEAD_LETTER_REASON_HEADER),
            moved_by_sqs_from: message
                .attributes
                .get(SystemAttribute::DeadLetterQueueSourceArn.name())
                .map(|arn| arn.rsplit(':').next().unwrap_or(arn).to_owned()),
        }
    }
}

/// A message as a peek shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Message {
    /// Its message id.
    pub message_id: String,
    /// Its body.
    pub body: String,
    /// `visible`, `in flight` or `delayed` when peeked (on SQS always `visible`: a peek sees
    /// only those, and makes them visible again).
    pub state: &'static str,
    /// For one in flight or delayed: milliseconds until it is visible.
    pub visible_in_ms: Option<u64>,
    /// `ApproximateReceiveCount` (on SQS, counting the peek's own receive).
    pub receive_count: Option<u32>,
    /// `MessageGroupId`.
    pub group_id: Option<String>,
    /// `MessageDeduplicationId`.
    pub dedup_id: Option<String>,
    /// `SequenceNumber` (FIFO).
    pub sequence_number: Option<String>,
    /// `SentTimestamp`: milliseconds since the epoch.
    pub sent_timestamp_ms: Option<u64>,
    /// Every system attribute, by SQS name.
    pub attributes: BTreeMap<String, String>,
    /// Its message attributes.
    pub message_attributes: BTreeMap<String, AttributeText>,
    /// Where a dead-letter copy came from, when it is one.
    pub dead_letter: Option<DeadLetterOrigin>,
}

/// The text of a `String` or `Number` attribute.
pub(crate) fn text_of(value: &MessageAttributeValue) -> Option<&str> {
    value.string_value.as_deref()
}

impl Message {
    pub(crate) fn of(message: &ReceivedMessage, state: MessageState) -> Self {
        let origin = DeadLetterOrigin::of(message);
        let is_copy = origin.source_queue.is_some()
            || origin.original_message_id.is_some()
            || origin.reason.is_some()
            || origin.moved_by_sqs_from.is_some();
        let visible_in_ms = match state {
            MessageState::InFlight { visible_in } | MessageState::Delayed { visible_in } => {
                Some(u64::try_from(visible_in.as_millis()).unwrap_or(u64::MAX))
            }
            _ => None,
        };
        Self {
            message_id: message.message_id.clone(),
            body: message.body.clone(),
            state: state.name(),
            visible_in_ms,
            receive_count: message.receive_count(),
            group_id: message.group_id().map(str::to_owned),
            dedup_id: message.dedup_id().map(str::to_owned),
            sequence_number: message.sequence_number().map(str::to_owned),
            sent_timestamp_ms: message.attributes.number(SystemAttribute::SentTimestamp),
            attributes: message
                .attributes
                .iter()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
            message_attributes: message
                .message_attributes
                .iter()
                .map(|(name, value)| {
                    let text = match (&value.string_value, &value.binary_value) {
                        (Some(text), _) => text.clone(),
                        (None, Some(bytes)) => format!("<{} bytes>", bytes.len()),
                        (None, None) => String::new(),
                    };
                    (
                        name.clone(),
                        AttributeText {
                            data_type: value.data_type.clone(),
                            value: text,
                        },
                    )
                })
                .collect(),
            dead_letter: is_copy.then_some(origin),
        }
    }
}

impl Operations {
    /// Up to `peek.amount` of `queue`'s messages that `peek.filter` matches, after skipping
    /// `peek.offset` of them, taking none: see [the module](crate::operations::peek) for what that means on each
    /// backend.
    ///
    /// # Errors
    ///
    /// [`OperationError::PeekRefused`] on SQS for a FIFO queue or one with a `RedrivePolicy`
    /// unless [forced](Peek::force), before any receive; [`OperationError::Queue`] when the queue
    /// does not exist or a call fails (on SQS what was received is made visible again first).
    pub async fn peek(&self, queue: &str, peek: &Peek) -> Result<Vec<Message>, OperationError> {
        let name = self.named(queue)?;
        let url = self.url_of(&name).await?;
        if self.client.transport().peeks() {
            return self.peek_in_place(&name, &url, peek).await;
        }
        if !peek.force {
            if let Some(risk) = self.peek_risk(&name, &url).await? {
                return Err(OperationError::PeekRefused { queue: name, risk });
            }
        }
        let mut found = Vec::new();
        let mut skipped = 0;
        self.receive_and_restore(&name, &url, |message| {
            let shown = Message::of(message, MessageState::Visible);
            if peek.filter.matches(&shown) {
                if skipped < peek.offset {
                    skipped += 1;
                } else {
                    found.push(shown);
                }
            }
            found.len() < peek.amount
        })
        .await?;
        Ok(found)
    }

    /// One message of `queue` by its id, with every attribute, taking it not: a peek with the id
    /// as its filter (so on SQS refused where a peek is, unless `force`).
    ///
    /// # Errors
    ///
    /// As [`peek`](Self::peek); [`OperationError::MessageNotFound`] when no message has the id.
    pub async fn show(
        &self,
        queue: &str,
        message_id: &str,
        force: bool,
    ) -> Result<Message, OperationError> {
        let mut peek = Peek::new()
            .filter(MessageFilter::new().message_id(message_id))
            .amount(1);
        peek.force = force;
        self.peek(queue, &peek)
            .await?
            .pop()
            .ok_or_else(|| OperationError::MessageNotFound {
                queue: self.named(queue).unwrap_or_else(|_| queue.to_owned()),
                message_id: message_id.to_owned(),
            })
    }

    /// A true peek (the account): pages through the queue in storage order.
    async fn peek_in_place(
        &self,
        name: &str,
        url: &str,
        peek: &Peek,
    ) -> Result<Vec<Message>, OperationError> {
        let mut found = Vec::new();
        let mut skipped = 0;
        let mut position = 0;
        while found.len() < peek.amount {
            let page = self
                .client
                .transport()
                .peek_messages(
                    url,
                    PeekMessages {
                        offset: position,
                        max: PEEK_PAGE,
                    },
                )
                .await
                .map_err(|source| at(name, source))?;
            position += page.len();
            let last = page.len() < PEEK_PAGE;
            for PeekedMessage { message, state } in &page {
                let shown = Message::of(message, *state);
                if !peek.filter.matches(&shown) {
                    continue;
                }
                if skipped < peek.offset {
                    skipped += 1;
                } else if found.len() < peek.amount {
                    found.push(shown);
                }
            }
            if last {
                break;
            }
        }
        Ok(found)
    }

    /// What a receive-based peek would do to `queue`, if anything.
    async fn peek_risk(&self, name: &str, url: &str) -> Result<Option<PeekRisk>, OperationError> {
        if rules::is_fifo_name(name) {
            return Ok(Some(PeekRisk::Fifo));
        }
        let attributes = self
            .client
            .transport()
            .get_queue_attributes(url, &["RedrivePolicy"])
            .await
            .map_err(|source| at(name, source))?;
        Ok(
            redrive_target(&attributes).map(|target| PeekRisk::RedrivePolicy {
                dead_letter_queue: target.queue,
                max_receive_count: target.max_receive_count,
            }),
        )
    }

    /// Receives `queue`'s visible messages, holding each invisible, and hands each to `take`
    /// until it says it wants no more or the queue has none; then makes every one visible again.
    /// The peek of a backend without one.
    pub(crate) async fn receive_and_restore(
        &self,
        name: &str,
        url: &str,
        mut take: impl FnMut(&ReceivedMessage) -> bool,
    ) -> Result<(), OperationError> {
        let mut held: Vec<String> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut outcome = Ok(());
        'receive: loop {
            // A long poll of a second asks every SQS server, where a short one samples a few and
            // may answer empty while messages wait.
            let request = ReceiveMessage::new(10)
                .wait_time_seconds(1)
                .visibility_timeout(HOLD_SECONDS);
            let received = match self.client.transport().receive_message(url, request).await {
                Ok(received) => received,
                Err(source) => {
                    outcome = Err(at(name, source));
                    break;
                }
            };
            if received.is_empty() {
                break;
            }
            // Every one is released at the end, those after the last one wanted too.
            held.extend(
                received
                    .iter()
                    .map(|message| message.receipt_handle.clone()),
            );
            for message in &received {
                // A message seen already came back (its hold ran out): the queue has been seen
                // through once.
                if !seen.insert(message.message_id.clone()) || !take(message) {
                    break 'receive;
                }
            }
        }
        let restored = self.release(url, held).await;
        outcome?;
        restored.map_err(|source| at(name, source))
    }

    /// Makes messages held by these receipt handles visible again at once, ten a call.
    pub(crate) async fn release(
        &self,
        url: &str,
        handles: Vec<String>,
    ) -> Result<(), crate::transport::TransportError> {
        let mut first_error = None;
        for chunk in handles.chunks(rules::MAX_BATCH_ENTRIES) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(index, handle)| ChangeVisibilityEntry {
                    id: entry_id(index),
                    receipt_handle: handle.clone(),
                    visibility_timeout: 0,
                })
                .collect();
            match self
                .client
                .transport()
                .change_message_visibility_batch(url, entries)
                .await
            {
                Ok(result) if result.failed.is_empty() => {}
                Ok(result) => {
                    tracing::warn!(
                        queue_url = %url,
                        failed = result.failed.len(),
                        "some peeked messages could not be made visible again; they are visible \
                         once their hold ends"
                    );
                }
                Err(error) => {
                    tracing::warn!(
                        queue_url = %url,
                        error = %error,
                        hold_seconds = HOLD_SECONDS,
                        "peeked messages could not be made visible again; they are visible once \
                         their hold ends"
                    );
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// How long a peek on SQS may hide a message at most.
pub const SQS_PEEK_HOLD: Duration = Duration::from_secs(HOLD_SECONDS as u64);

/// Milliseconds since the epoch at `time` (0 before it).
fn millis(time: SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}
