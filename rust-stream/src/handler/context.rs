//! [`Context`]: what a handler knows of the message in hand (what any broker's message has: id,
//! queue, body, headers, attempt, sent time, ordering key; what SQS says of it, [`SqsMessage`];
//! the SNS notification it came in, if any; and the values the subscription's
//! [middleware](crate::handler::middleware) put in for it) and how it publishes as part of handling it.
//!
//! What a message shows of itself is read in one place, [`Message`]: a delivery at its attempt
//! number. A handler's context is over one (its accessors say "see [`Message`]"), and so is each
//! message of a middleware [`Call`](crate::handler::middleware::Call), as `middleware::Message`.
//!
//! The engine holds each received message as a `Delivery` (`delivery.rs`), made once per
//! receive. A queue subscribed to an SNS topic with raw message delivery off receives SNS's JSON
//! notification envelopes; its delivery unwraps them where the message is first read, so that
//! everything downstream sees the published message: the codec decodes the envelope's `Message`,
//! the headers and [`Context::attributes`] are the envelope's `MessageAttributes`, the `process`
//! span continues the trace they carry, and [`Context::sns`] has the envelope itself. A raw
//! delivery, or a message sent to the queue directly, is no envelope and is read as it is, so a
//! handler gets the same value and headers from either kind of delivery. What the engine keeps
//! of the SQS message itself (the body and attributes a dead-letter copy is made of, the body a
//! test's recorder shows) stays as received.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;
use tokio_util::sync::CancellationToken;

use super::outgoing::{Outgoing, PublishedMessage};
use crate::model::rules;
use crate::model::wire::MessageAttributes;
use crate::state::{State, States};

pub use super::delivery::SnsNotification;
pub(crate) use super::delivery::{Delivery, Sns};

/// What SQS says of a received message beyond what any broker's message has, as
/// [`Context::sqs`] and [`Message::sqs`] give it (SNS's part is [`Context::sns`]).
///
/// What every broker's message has (its id, body, headers, attempt, ordering key) is on
/// [`Message`] and [`Context`]; the FIFO group is also the [ordering key](Message::ordering_key).
#[derive(Debug, Clone, Copy)]
pub struct SqsMessage<'a> {
    delivery: &'a Delivery,
}

impl<'a> SqsMessage<'a> {
    /// The message group (FIFO queues, and standard queues whose sender set one).
    pub fn group_id(&self) -> Option<&'a str> {
        self.delivery.group_id.as_deref()
    }

    /// The deduplication id (FIFO queues).
    pub fn dedup_id(&self) -> Option<&'a str> {
        self.delivery.dedup_id.as_deref()
    }

    /// The sequence number (FIFO queues): increasing within a group.
    pub fn sequence_number(&self) -> Option<&'a str> {
        self.delivery.sequence_number.as_deref()
    }

    /// How many times the message has been received, this time included. On a FIFO queue a
    /// message retried in place is not received again, so this stays where it was while
    /// [`Message::attempt`] goes up.
    pub fn receive_count(&self) -> u32 {
        self.delivery.receive_count
    }
}

/// One received message at its attempt number, as a handler's [`Context`] and a
/// [middleware](crate::handler::middleware) [`Call`](crate::handler::middleware::Call) show it: what any broker's
/// message has (id, queue, body, headers, ordering key, which attempt this is), what SQS says of
/// it ([`sqs`](Self::sqs)) and the SNS notification it came in ([`sns`](Self::sns)).
#[derive(Clone)]
pub struct Message {
    delivery: Arc<Delivery>,
    attempt: u32,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("message_id", &self.delivery.message_id)
            .field("queue", &self.delivery.queue)
            .field("group_id", &self.delivery.group_id)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl Message {
    /// The message of `delivery`, at its attempt number `attempt` (as the retry policy counts).
    pub(crate) fn new(delivery: Arc<Delivery>, attempt: u32) -> Self {
        Self { delivery, attempt }
    }

    /// The delivery, as the engine holds it.
    pub(crate) fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// The body the handler's message was decoded from: an SNS notification's `Message`, else the
    /// SQS body.
    pub fn body(&self) -> &str {
        self.delivery.payload().unwrap_or(&self.delivery.body)
    }

    /// The SQS message id, kept across redeliveries.
    pub fn message_id(&self) -> &str {
        &self.delivery.message_id
    }

    /// The queue the message was received from.
    pub fn queue(&self) -> &str {
        &self.delivery.queue
    }

    /// What keeps messages in order: a FIFO queue's message group here (and a standard queue's
    /// message whose sender set one), a partition key on another broker. Messages of one key
    /// are handled one at a time, in order; `None` when the message has none.
    pub fn ordering_key(&self) -> Option<&str> {
        self.delivery.group_id.as_deref()
    }

    /// What SQS says of the message beyond what any broker's message has: its group,
    /// deduplication id, sequence number and receive count.
    ///
    /// ```
    /// # use rust_stream::prelude::*;
    /// # async fn example(ctx: &mut Context<'_>) -> HandlerOutcome {
    /// if ctx.sqs().receive_count() > 3 {
    ///     tracing::warn!(group = ctx.sqs().group_id(), "received more than three times");
    /// }
    /// # HandlerOutcome::ack()
    /// # }
    /// ```
    pub fn sqs(&self) -> SqsMessage<'_> {
        SqsMessage {
            delivery: &self.delivery,
        }
    }

    /// Which attempt at the message this is, 1 for the first: the number the subscription's
    /// retry policy counts, and dead-letters by once it reaches its `max_attempts`.
    ///
    /// On a standard queue each attempt is a receive, so this is the receive count less the
    /// receives this process gave back without running the message (a stop that could not start
    /// it). On a FIFO queue a failed message is retried in place, without a new receive, and this
    /// counts the attempts this process made at the message: with `dead_letter(.., 3)` the
    /// handler sees attempts 1, 2 and 3 while the receive count stays 1, and a failure at attempt
    /// 3 dead-letters the message. Receives a stop gave back, in this process or an earlier one,
    /// are not attempts; attempts an earlier process made are not known, and a message that
    /// crashes its consumers is left to the queue's redrive (`maxReceiveCount` `n + 10` on a queue
    /// the library creates).
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

    /// A header (a message attribute of type `String`, or `Number` as its decimal text, or
    /// `String.Array` as its JSON array text). A `Binary` attribute is in
    /// [`attributes`](Self::attributes). A message that came from an SNS topic has the publish's
    /// attributes as headers, whether SNS delivered it raw or in its envelope.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.delivery.header(name)
    }

    /// All headers (message attributes of type `String`, `Number` or `String.Array`), with the
    /// group in [`PARTITION_KEY_HEADER`](crate::PARTITION_KEY_HEADER) when the message has one.
    pub fn headers(&self) -> &BTreeMap<String, String> {
        self.delivery.headers()
    }

    /// All message attributes as received, binary ones included; for a message SNS delivered in
    /// its envelope, the publish's attributes read from the envelope (each with its SNS type, a
    /// `Binary` value decoded from base64), as a raw delivery carries them.
    pub fn attributes(&self) -> &MessageAttributes {
        self.delivery.message_attributes()
    }

    /// The SNS notification the message came in, when SNS delivered it from a topic in its JSON
    /// envelope (the queue's subscription has raw message delivery off): the topic, SNS's
    /// message id, the subject and when it was published. `None` for a raw delivery, which
    /// carries none of these, and for a message sent to the queue directly.
    ///
    /// A subscriber unwraps envelopes when its queue declares an enveloped subscription
    /// ([`SqsQueue::subscribed_to`](crate::SqsQueue::subscribed_to) a topic without
    /// [`raw_message_delivery(true)`](crate::TopicSubscription::raw_message_delivery)); on other
    /// queues a body is always read as it is.
    ///
    /// ```
    /// # use rust_stream::prelude::*;
    /// # async fn example(ctx: &mut Context<'_>) -> HandlerOutcome {
    /// let topic = ctx.sns().map(|notification| notification.topic_arn().name());
    /// tracing::info!(topic, "payment received");
    /// # HandlerOutcome::ack()
    /// # }
    /// ```
    pub fn sns(&self) -> Option<&SnsNotification> {
        match &self.delivery.sns {
            Sns::Notification(notification) => Some(notification),
            Sns::Unwrapped | Sns::Broken(_) => None,
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
/// What it shows of the message (id, headers, attempt, ordering key, [`sqs`](Self::sqs), ..) is
/// its [`Message`]'s, each accessor a "see [`Message`]" of the same name.
///
/// The engine lends each handler call a context over the delivery it holds. A unit test builds
/// one that owns its message instead, with `rust_stream::testing::TestContext` (feature
/// `testing`), and reads what the handler published with [`published`](Self::published).
#[derive(Debug)]
pub struct Context<'a> {
    // Borrowed from the engine, which keeps the delivery until it is settled; owned when a test
    // builds the context, so the test has one value to hold and no lifetime to arrange.
    message: Cow<'a, Message>,
    states: Cow<'a, States>,
    staged: Vec<Outgoing>,
    /// Cancelled once the app begins to stop.
    stopping: CancellationToken,
    /// What the call's middleware put in for the handler; borrowed from the call, or the shared
    /// empty set when the subscription has no middleware.
    extensions: Cow<'a, Extensions>,
}

impl<'a> Context<'a> {
    /// A context over `message`.
    pub(crate) fn new(
        message: &'a Message,
        states: &'a States,
        stopping: CancellationToken,
    ) -> Self {
        Self {
            message: Cow::Borrowed(message),
            states: Cow::Borrowed(states),
            staged: Vec::new(),
            stopping,
            extensions: Cow::Borrowed(&NO_EXTENSIONS),
        }
    }

    /// The context, with what the call's middleware put in for the handler.
    #[inline]
    pub(crate) fn with_extensions(mut self, extensions: &'a Extensions) -> Self {
        self.extensions = Cow::Borrowed(extensions);
        self
    }

    #[cfg(feature = "testing")]
    /// A context that owns its delivery, state and extensions, as a unit test builds it.
    pub(crate) fn owned(
        delivery: Delivery,
        attempt: u32,
        (states, extensions): (States, Extensions),
        stopping: CancellationToken,
    ) -> Context<'static> {
        Context {
            message: Cow::Owned(Message::new(Arc::new(delivery), attempt)),
            states: Cow::Owned(states),
            staged: Vec::new(),
            stopping,
            extensions: Cow::Owned(extensions),
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

    /// The value of type `T` that a [middleware](crate::handler::middleware) layer put in for this call
    /// ([`Call::insert`](crate::handler::middleware::Call::insert)): the tenant it read from a header,
    /// the user it authenticated. `None` when no layer did.
    ///
    /// ```
    /// # use rust_stream::prelude::*;
    /// #[derive(Debug)]
    /// struct Tenant(String);
    ///
    /// # async fn example(ctx: &mut Context<'_>) -> HandlerOutcome {
    /// let Some(Tenant(tenant)) = ctx.extension::<Tenant>() else {
    ///     return HandlerOutcome::dead_letter("no tenant");
    /// };
    /// tracing::info!(tenant, "handling");
    /// # HandlerOutcome::ack()
    /// # }
    /// ```
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.extensions.get::<T>()
    }

    /// The SQS message id: see [`Message::message_id`].
    pub fn message_id(&self) -> &str {
        self.message.message_id()
    }

    /// The queue the message was received from: see [`Message::queue`].
    pub fn queue(&self) -> &str {
        self.message.queue()
    }

    /// What keeps messages in order (a FIFO queue's message group here): see
    /// [`Message::ordering_key`].
    pub fn ordering_key(&self) -> Option<&str> {
        self.message.ordering_key()
    }

    /// What SQS says of the message (group, deduplication id, sequence number, receive count):
    /// see [`Message::sqs`].
    pub fn sqs(&self) -> SqsMessage<'_> {
        self.message.sqs()
    }

    /// Which attempt at the message this is, 1 for the first: see [`Message::attempt`].
    pub fn attempt(&self) -> u32 {
        self.message.attempt()
    }

    /// When the message was sent: see [`Message::sent_at`].
    pub fn sent_at(&self) -> Option<SystemTime> {
        self.message.sent_at()
    }

    /// A header: see [`Message::header`].
    pub fn header(&self, name: &str) -> Option<&str> {
        self.message.header(name)
    }

    /// All headers: see [`Message::headers`].
    pub fn headers(&self) -> &BTreeMap<String, String> {
        self.message.headers()
    }

    /// All message attributes, binary ones included: see [`Message::attributes`].
    pub fn attributes(&self) -> &MessageAttributes {
        self.message.attributes()
    }

    /// The SNS notification the message came in, if SNS delivered it in its envelope: see
    /// [`Message::sns`].
    pub fn sns(&self) -> Option<&SnsNotification> {
        self.message.sns()
    }

    /// Publishes `message` as part of handling this one: it is sent after the handler returns,
    /// before this message is acknowledged, and only if the handler acknowledges.
    ///
    /// When this message came from a FIFO queue, an output to a FIFO queue that names no group
    /// (no `group_id` step, no [`PARTITION_KEY_HEADER`](crate::PARTITION_KEY_HEADER) header) takes this message's group, so
    /// what a group's messages publish stays in that group's order.
    ///
    /// An output gets the key `<this message's id>-<position>-<digest of its group and body>`:
    /// as its deduplication id on a FIFO queue without content-based deduplication when it was
    /// given none, so a retry of this message that publishes the same output again is
    /// deduplicated by SQS (within its 5 minutes); and as its
    /// [`IDEMPOTENCY_KEY_HEADER`](crate::IDEMPOTENCY_KEY_HEADER) header when it has none
    /// and room is left, so an [inbox](crate::inbox) downstream handles such a resend once
    /// however late it comes. One that publishes something else at that position is another
    /// key, never taken for the earlier one.
    pub fn publish(&mut self, message: Outgoing) {
        let delivery = self.message.delivery();
        let message = match delivery.group_id.as_deref() {
            Some(group) if rules::is_fifo_name(&delivery.queue) => message.inherit_group(group),
            _ => message,
        };
        let position = self.staged.len();
        let input = &delivery.message_id;
        self.staged
            .push(message.derive_ids(|content| format!("{input}-{position}-{content}")));
    }

    /// What [`publish`](Self::publish) has been given so far, in order, as a test reads it. None
    /// of it is sent yet: the engine sends it after the handler returns, and only if it
    /// acknowledges.
    pub fn published(&self) -> Vec<PublishedMessage<'_>> {
        self.staged.iter().map(PublishedMessage::new).collect()
    }

    /// The token cancelled once the app begins to stop.
    pub(crate) fn stopping_token(&self) -> &CancellationToken {
        &self.stopping
    }

    pub(crate) fn into_staged(self) -> Vec<Outgoing> {
        self.staged
    }
}

/// Values of any type, at most one a type: what a call's middleware puts in for its handler
/// ([`Context::extension`]). Cloned only when a test's context takes a copy, so each value is
/// shared, not cloned.
#[derive(Clone, Default)]
pub(crate) struct Extensions {
    /// `None` until a value is put in: most calls put none, and dropping an empty map is a call
    /// into the map's drop each time, while `None` is a test.
    values: Option<Values>,
}

/// Each value by its type, with the type's name for `Debug`.
type Values = BTreeMap<TypeId, (Arc<dyn Any + Send + Sync>, &'static str)>;

/// The extensions of every call no middleware sees: one empty set, so a context without
/// middleware borrows it and allocates nothing.
static NO_EXTENSIONS: Extensions = Extensions { values: None };

impl Extensions {
    /// Puts `value` in, in place of any value of its type.
    pub(crate) fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.values.get_or_insert_with(Values::new).insert(
            TypeId::of::<T>(),
            (Arc::new(value), std::any::type_name::<T>()),
        );
    }

    /// The value of type `T`, if one was put in.
    pub(crate) fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values
            .as_ref()?
            .get(&TypeId::of::<T>())?
            .0
            .downcast_ref()
    }
}

impl std::fmt::Debug for Extensions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set()
            .entries(
                self.values
                    .iter()
                    .flat_map(BTreeMap::values)
                    .map(|(_, name)| name),
            )
            .finish()
    }
}
