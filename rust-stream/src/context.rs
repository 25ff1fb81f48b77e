//! [`Context`]: what a handler knows of the message in hand (ids, queue, group, sequence, receive
//! count, attempt, sent time, headers) and how it publishes as part of handling it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

use crate::model::rules;
use crate::publish::{Outgoing, PublishedMessage, PARTITION_KEY_HEADER};
use crate::state::{State, States};
use crate::transport::{MessageAttributes, ReceivedMessage, SystemAttribute};

/// One received message as the engine holds it.
// `Clone` because `Cow` asks for it; a context never clones its delivery.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub(crate) message_id: String,
    pub(crate) body: String,
    pub(crate) queue: Arc<str>,
    pub(crate) group_id: Option<String>,
    pub(crate) dedup_id: Option<String>,
    pub(crate) sequence_number: Option<String>,
    pub(crate) receive_count: u32,
    pub(crate) sent_at: Option<SystemTime>,
    pub(crate) headers: BTreeMap<String, String>,
    pub(crate) attributes: MessageAttributes,
}

impl Delivery {
    /// The delivery of a received message from `queue`. The system attributes it keeps are moved
    /// out of the message, not copied.
    pub(crate) fn new(queue: &Arc<str>, mut message: ReceivedMessage) -> Self {
        let mut headers: BTreeMap<String, String> = message
            .message_attributes
            .iter()
            .filter_map(|(name, value)| Some((name.clone(), value.string_value.clone()?)))
            .collect();
        let group_id = message.attributes.remove("MessageGroupId");
        if let Some(group) = &group_id {
            // A delivery carries its group where a publisher may have put it.
            headers
                .entry(PARTITION_KEY_HEADER.to_owned())
                .or_insert_with(|| group.clone());
        }
        Self {
            receive_count: message.receive_count().unwrap_or(1),
            sent_at: message
                .attributes
                .number(SystemAttribute::SentTimestamp)
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
            sequence_number: message.attributes.remove("SequenceNumber"),
            dedup_id: message.attributes.remove("MessageDeduplicationId"),
            group_id,
            headers,
            message_id: message.message_id,
            body: message.body,
            queue: queue.clone(),
            attributes: message.message_attributes,
        }
    }
}

/// The message in hand: its identity and headers, and publishing that is part of handling it.
///
/// What a handler publishes through [`publish`](Self::publish) is sent after it returns and before
/// its message is acknowledged, and only if it acknowledges; on a FIFO queue each such message
/// carries a deduplication id made of the input's message id and its position, so a retried
/// handler does not publish twice.
///
/// The engine lends each handler call a context over the delivery it holds. A unit test builds
/// one that owns its message instead, with `rust_stream::testing::TestContext` (feature
/// `testing`), and reads what the handler published with [`published`](Self::published).
#[derive(Debug)]
pub struct Context<'a> {
    // Borrowed from the engine, which keeps the delivery until it is settled; owned when a test
    // builds the context, so the test has one value to hold and no lifetime to arrange.
    delivery: Cow<'a, Delivery>,
    /// Which attempt this is, as the retry policy counts them.
    attempt: u32,
    states: Cow<'a, States>,
    staged: Vec<Outgoing>,
    /// Cancelled once the app begins to stop.
    stopping: CancellationToken,
}

impl<'a> Context<'a> {
    /// A context over `delivery` for its attempt number `attempt` (as the retry policy counts).
    pub(crate) fn new(
        delivery: &'a Delivery,
        attempt: u32,
        states: &'a States,
        stopping: CancellationToken,
    ) -> Self {
        Self {
            delivery: Cow::Borrowed(delivery),
            attempt,
            states: Cow::Borrowed(states),
            staged: Vec::new(),
            stopping,
        }
    }

    #[cfg(feature = "testing")]
    /// A context that owns its delivery and state, as a unit test builds it.
    pub(crate) fn owned(
        delivery: Delivery,
        attempt: u32,
        states: States,
        stopping: CancellationToken,
    ) -> Context<'static> {
        Context {
            delivery: Cow::Owned(delivery),
            attempt,
            states: Cow::Owned(states),
            staged: Vec::new(),
            stopping,
        }
    }

    /// Whether the app has begun to stop. A handler still runs to its end (within the stop's
    /// budget, then it is cancelled) and its message is settled by what it returns; a long one
    /// may use this to finish early, or to save its progress and ask for a retry.
    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// Resolves once the app begins to stop (at once if it has): to race against a long piece
    /// of work, as in `tokio::select!`.
    ///
    /// ```
    /// # use rust_stream::prelude::*;
    /// # async fn example(ctx: &mut Context<'_>) -> HandlerOutcome {
    /// tokio::select! {
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(600)) => HandlerOutcome::ack(),
    ///     // The work is saved elsewhere; the message comes back to finish it.
    ///     () = ctx.stopping() => HandlerOutcome::retry(),
    /// }
    /// # }
    /// ```
    pub fn stopping(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.stopping.clone().cancelled_owned()
    }

    /// The app's shared state of type `T`, registered with
    /// [`RustStream::with_state`](crate::RustStream::with_state).
    pub fn state<T: Clone + Send + Sync + 'static>(&self) -> Option<State<T>> {
        self.states.get::<T>()
    }

    /// The SQS message id, kept across redeliveries.
    pub fn message_id(&self) -> &str {
        &self.delivery.message_id
    }

    /// The queue the message was received from.
    pub fn queue(&self) -> &str {
        &self.delivery.queue
    }

    /// The message group (FIFO queues, and standard queues whose sender set one).
    pub fn group_id(&self) -> Option<&str> {
        self.delivery.group_id.as_deref()
    }

    /// The deduplication id (FIFO queues).
    pub fn dedup_id(&self) -> Option<&str> {
        self.delivery.dedup_id.as_deref()
    }

    /// The sequence number (FIFO queues): increasing within a group.
    pub fn sequence_number(&self) -> Option<&str> {
        self.delivery.sequence_number.as_deref()
    }

    /// How many times the message has been received, this time included. On a FIFO queue a
    /// message retried in place is not received again, so this stays where it was while
    /// [`attempt`](Self::attempt) goes up.
    pub fn receive_count(&self) -> u32 {
        self.delivery.receive_count
    }

    /// Which attempt at the message this is, 1 for the first: the number the subscription's
    /// retry policy counts, and dead-letters by once it reaches its `max_attempts`.
    ///
    /// On a standard queue each attempt is a receive, so this is the receive count less the
    /// receives that were no attempt (a stop gave the message back before running it). On a FIFO
    /// queue a failed message is retried in place, without a new receive, and each of those
    /// tries counts too: with `dead_letter(.., 3)` the handler sees attempts 1, 2 and 3 while the
    /// receive count stays 1, and a failure at attempt 3 dead-letters the message.
    ///
    /// ```
    /// # use rust_stream::prelude::*;
    /// # async fn example(ctx: &mut Context<'_>) -> HandlerOutcome {
    /// if ctx.attempt() > 1 {
    ///     tracing::info!(attempt = ctx.attempt(), "trying the message again");
    /// }
    /// # HandlerOutcome::ack()
    /// # }
    /// ```
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the message was sent.
    pub fn sent_at(&self) -> Option<SystemTime> {
        self.delivery.sent_at
    }

    /// A header (a message attribute of type `String`, or `Number` as its decimal text). A
    /// `Binary` attribute is in [`attributes`](Self::attributes).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.delivery.headers.get(name).map(String::as_str)
    }

    /// All headers (message attributes of type `String` or `Number`), with the group in
    /// [`PARTITION_KEY_HEADER`] when the message has one.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.delivery.headers
    }

    /// All message attributes as received, binary ones included.
    pub fn attributes(&self) -> &MessageAttributes {
        &self.delivery.attributes
    }

    /// Publishes `message` as part of handling this one: it is sent after the handler returns,
    /// before this message is acknowledged, and only if the handler acknowledges.
    ///
    /// When this message came from a FIFO queue, an output to a FIFO queue that names no group
    /// (no `group_id` step, no [`PARTITION_KEY_HEADER`] header) takes this message's group, so
    /// what a group's messages publish stays in that group's order.
    ///
    /// On a FIFO queue without content-based deduplication a message given no deduplication id
    /// gets `<this message's id>-<position>-<digest of its group and body>`: a retry of this
    /// message that publishes the same output again is deduplicated by SQS (within its 5
    /// minutes), while one that publishes something else at that position is stored, never taken
    /// for the earlier one.
    pub fn publish(&mut self, message: Outgoing) {
        let message = match self.delivery.group_id.as_deref() {
            Some(group) if rules::is_fifo_name(&self.delivery.queue) => {
                message.inherit_group(group)
            }
            _ => message,
        };
        let position = self.staged.len();
        let input = &self.delivery.message_id;
        self.staged
            .push(message.derive_dedup_id(|content| format!("{input}-{position}-{content}")));
    }

    /// What [`publish`](Self::publish) has been given so far, in order, as a test reads it. None
    /// of it is sent yet: the engine sends it after the handler returns, and only if it
    /// acknowledges.
    pub fn published(&self) -> Vec<PublishedMessage<'_>> {
        self.staged.iter().map(PublishedMessage::new).collect()
    }

    pub(crate) fn into_staged(self) -> Vec<Outgoing> {
        self.staged
    }
}
