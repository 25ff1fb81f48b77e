//! Publishing: a [`Publisher`] for a queue or an SNS topic, the [`Outgoing`] message with its steps
//! (`group_id`, `dedup_id`, `delay`, `header`, `header_number`, `header_binary`), sent one at a
//! time or many at once ([`Publisher::send_batch`]), and a subscriber's typed [`Output`]s.
//!
//! ```no_run
//! use rust_stream::SqsBroker;
//!
//! # async fn place(broker: SqsBroker) -> Result<(), rust_stream::PublishError> {
//! let orders = broker.publisher("orders.fifo");
//! orders.message(&serde_json::json!({"id": 1})).group_id("customer-7").send().await?;
//! # Ok(()) }
//! ```
//!
//! On a FIFO queue a message's group is its `group_id` step, else its [`PARTITION_KEY_HEADER`]
//! header, else (for a handler's output, when its input came from a FIFO queue) the input's group,
//! else `"default"`, unless the publisher or its broker refuses that with `strict_groups()`
//! ([`PublishError::NoGroup`]); its deduplication id is its `dedup_id` step, else a new UUID (unique
//! across processes), unless the queue was declared with content-based deduplication. Sends are
//! batched (up to 10 messages and 1 MiB per `SendMessageBatch`: on a standard queue after a short
//! linger, on a FIFO queue with whatever arrived while the group's previous call was out) without
//! reordering a group's messages, and every rule SQS would check is checked before the network,
//! the queue's own `MaximumMessageSize` included. With the `opentelemetry` feature every send also
//! carries the W3C trace context of the span it was made in, where the message has room for it
//! ([`propagation`](crate::propagation)).
//!
//! A publisher for a topic ([`SqsBroker::topic`](crate::SqsBroker::topic)) is the same type with
//! the same steps: the same group and deduplication rules on a FIFO topic, its publishes checked
//! against every SNS rule (the topic's `MaximumMessageSize`, its attributes, FIFO or not, with
//! content-based deduplication or not, read from the topic once) before the network and sent in
//! `PublishBatch` calls of up to 10, each FIFO group in order. SNS has no delay: a `delay` step is
//! refused.

use std::borrow::Cow;
use std::collections::hash_map::{Entry, HashMap};
use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Serialize;

use crate::client::Client;
use crate::codec::{Codec, EncodeError, Json};
use crate::describe::Payload;
use crate::model::headers::{IDEMPOTENCY_KEY_HEADER, PARTITION_KEY_HEADER, TYPE_HEADER};
use crate::model::rules::{self, ErrorKind};
use crate::model::topic::{check_publish, PublishTarget};
use crate::model::{ConfigError, SnsTopic, SqsQueue};
use crate::store::history::{HistoryKey, Ticket};
use crate::store::StoreError;
use crate::transport::{
    MessageAttributeValue, MessageAttributes, Publish, Published, SendMessage, SentMessage,
    TransportError,
};

/// The group of a FIFO message that names none, unless strict groups refuse it.
const DEFAULT_GROUP: &str = "default";

/// Publishes to one queue, or to one SNS topic. Cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    inner: Arc<PublisherInner>,
}

#[derive(Clone)]
struct PublisherInner {
    /// The queue as declared; for a topic publisher, the topic's name and FIFO settings as a
    /// queue's, which the FIFO steps (group, deduplication id) read as they do a queue's.
    queue: SqsQueue,
    /// The topic as declared, for a topic publisher.
    topic: Option<SnsTopic>,
    binding: OnceLock<Binding>,
    /// Refuses a FIFO message that names no group rather than send it to `"default"`.
    strict_groups: bool,
    /// Every typed message carries the type header, whether or not the broker knows the queue
    /// as routed.
    type_header: bool,
    /// The command history messages with a `once` step are checked against.
    history: Option<History>,
}

/// The broker a publisher belongs to, and its queue as that broker names it.
#[derive(Clone)]
struct Binding {
    core: Arc<Client>,
    /// The queue with the broker's prefix and suffix, or why they make a name SQS refuses.
    named: Result<SqsQueue, ConfigError>,
    /// For a topic publisher: the topic as the broker names it.
    topic: Option<SnsTopic>,
}

/// A topic's name and FIFO settings as a queue's: what the FIFO steps of a message read.
fn stand_in(topic: &SnsTopic) -> SqsQueue {
    let mut queue = SqsQueue::new(topic.name.clone());
    queue.content_based_dedup = topic.deduplicates_by_content();
    queue
}

/// What a topic's publish answers, as a queue's send answers it: the same three facts.
fn sent(published: Published) -> SentMessage {
    SentMessage {
        message_id: published.message_id,
        sequence_number: published.sequence_number,
        duplicate: published.duplicate,
    }
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("queue", &self.queue().name)
            .field("topic", &self.topic().is_some())
            .field("bound", &self.inner.binding.get().is_some())
            .finish()
    }
}

impl Publisher {
    /// A publisher for `queue` that is bound to a broker later: by the app, when it is a
    /// subscriber's output. Use [`SqsBroker::publisher`](crate::SqsBroker::publisher) for one that
    /// is bound at once.
    pub fn new(queue: impl Into<SqsQueue>) -> Self {
        Self {
            inner: Arc::new(PublisherInner {
                queue: queue.into(),
                topic: None,
                binding: OnceLock::new(),
                strict_groups: false,
                type_header: false,
                history: None,
            }),
        }
    }

    /// A publisher for `topic`, bound to a broker later; see
    /// [`SqsBroker::topic`](crate::SqsBroker::topic) for one that is bound at once.
    pub(crate) fn for_topic(topic: SnsTopic) -> Self {
        Self {
            inner: Arc::new(PublisherInner {
                queue: stand_in(&topic),
                topic: Some(topic),
                binding: OnceLock::new(),
                strict_groups: false,
                type_header: false,
                history: None,
            }),
        }
    }

    /// The topic this publisher publishes to, for a topic publisher: once bound to a broker, as
    /// the broker names it, else as declared. `None` for a queue's publisher.
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// use rust_stream::model::SnsTopic;
    ///
    /// let broker = SqsBroker::in_process().queue_name_prefix("staging-");
    /// let posted = broker.topic(SnsTopic::new("payments-posted").create_if_missing());
    /// assert_eq!(posted.topic().unwrap().name(), "staging-payments-posted");
    /// assert!(broker.publisher("ledger").topic().is_none());
    /// ```
    pub fn topic(&self) -> Option<&SnsTopic> {
        match self.inner.binding.get() {
            Some(Binding {
                named: Ok(_),
                topic: Some(named),
                ..
            }) => Some(named),
            _ => self.inner.topic.as_ref(),
        }
    }
    /// Refuses a message for a FIFO queue that names no group (no `group_id` step, no
    /// [`PARTITION_KEY_HEADER`] header, and, for a handler's output, no FIFO input to take it
    /// from) with [`PublishError::NoGroup`], before any call, instead of sending it to the group
    /// `"default"`: one group for all, handled one message at a time. A standard queue needs no
    /// group, so this changes nothing there. For every publisher and output of a broker, see
    /// [`SqsBroker::strict_groups`](crate::SqsBroker::strict_groups).
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// use rust_stream::PublishError;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let broker = SqsBroker::in_process();
    /// let payments = broker
    ///     .publisher(SqsQueue::new("payments.fifo").create_if_missing())
    ///     .strict_groups();
    /// let refused = payments.raw("{}").send().await.unwrap_err();
    /// assert!(matches!(refused, PublishError::NoGroup { .. }));
    /// assert_eq!(broker.api_calls(), Default::default(), "refused before any call");
    /// payments.raw("{}").group_id("account-7").send().await.unwrap();
    /// # }
    /// ```
    pub fn strict_groups(self) -> Self {
        let mut inner = PublisherInner::clone(&self.inner);
        inner.strict_groups = true;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Makes every typed message of this publisher ([`message`](Self::message),
    /// [`encoded`](Self::encoded)) carry the type header (`rust_stream.type` unless the broker
    /// names it otherwise, [`SqsBroker::type_header`](crate::SqsBroker::type_header)), set to the
    /// short name of the value's Rust type, as subscribers routed by type read it
    /// ([`routing`](crate::routing)). A publisher adds it by itself for a queue that an app on
    /// its broker routes; this is for a queue routed by a service elsewhere, or a topic that
    /// feeds one. A header of that name set by hand is kept; a message that already has 10
    /// attributes is refused with [`PublishError::NoRoomForType`], before any call.
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// # #[derive(serde::Serialize)] struct PaymentPosted { id: u64 }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let broker = SqsBroker::in_process();
    /// let payments = broker
    ///     .publisher(SqsQueue::new("payments").create_if_missing())
    ///     .with_type_header();
    /// payments.message(&PaymentPosted { id: 1 }).send().await.unwrap();
    /// # }
    /// ```
    pub fn with_type_header(self) -> Self {
        let mut inner = PublisherInner::clone(&self.inner);
        inner.type_header = true;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Says that this publisher sends messages described by `payload`, for the AsyncAPI
    /// document: every app on the broker lists them on the queue's `publish.QUEUE` operation, as
    /// it lists a subscription's outputs (with the `schemars` feature `Payload::schema::<T>()` is
    /// their JSON Schema). A publisher takes any type, so it may say several; a type said again is
    /// listed once. Only a publisher made with [`SqsBroker::publisher`](crate::SqsBroker::publisher)
    /// is in the document: on another, this does nothing; nor does it on a topic publisher, whose
    /// topic the document does not describe yet.
    ///
    /// ```
    /// use rust_stream::asyncapi::Payload;
    /// use rust_stream::prelude::*;
    /// # #[derive(serde::Serialize)] struct Order { id: u64 }
    ///
    /// let broker = SqsBroker::in_process();
    /// let orders = broker.publisher("orders").payload(Payload::named::<Order>());
    /// # let _ = orders;
    /// let app = RustStream::new(AppInfo::new("shop", "1.0.0")).with_broker(broker, |_| {});
    /// let document = app.asyncapi();
    /// assert_eq!(document["channels"]["orders"]["messages"]["Order"]["name"], "Order");
    /// assert_eq!(
    ///     document["operations"]["publish.orders"]["messages"][0]["$ref"],
    ///     "#/channels/orders/messages/Order"
    /// );
    /// ```
    pub fn payload(self, payload: Payload) -> Self {
        // Payloads are listed by queue name: a topic's would land on a queue of the same name.
        if let (Some(core), None) = (self.core(), self.topic()) {
            core.declarations()
                .publisher_payload(&self.queue().name, payload);
        }
        self
    }

    /// Whether a FIFO message naming no group is refused: by this publisher, or by its broker.
    fn refuses_default_group(&self) -> bool {
        self.inner.strict_groups
            || self
                .inner
                .binding
                .get()
                .is_some_and(|binding| binding.core.strict_groups())
    }

    /// A publisher for `queue` as the broker already names it (a subscription's dead-letter
    /// queue, a queue a RedrivePolicy names), bound to it: its name is not named again.
    pub(crate) fn bound(queue: SqsQueue, core: Arc<Client>) -> Self {
        let publisher = Self::new(queue.clone());
        let _ = publisher.inner.binding.set(Binding {
            core,
            named: Ok(queue),
            topic: None,
        });
        publisher
    }

    /// Binds an unbound publisher, naming its queue as the broker does; a bound one keeps its
    /// broker.
    pub(crate) fn bind(&self, core: &Arc<Client>) {
        self.inner.binding.get_or_init(|| {
            let mut problems = Vec::new();
            let naming = core.naming();
            let (named, topic) = match &self.inner.topic {
                Some(topic) => {
                    let topic = naming.topic(topic, &mut problems);
                    (stand_in(&topic), Some(topic))
                }
                None => (naming.queue(&self.inner.queue, &mut problems), None),
            };
            Binding {
                core: core.clone(),
                named: problems.into_iter().next().map_or(Ok(named), Err),
                topic,
            }
        });
    }

    /// The broker this publisher is bound to, if any.
    pub(crate) fn core(&self) -> Option<Arc<Client>> {
        self.inner.binding.get().map(|binding| binding.core.clone())
    }

    /// Why the broker this publisher is bound to cannot name its queue (its prefix or suffix
    /// makes a name SQS refuses), if it cannot.
    pub(crate) fn naming_problem(&self) -> Option<&ConfigError> {
        self.inner.binding.get()?.named.as_ref().err()
    }

    /// The queue this publisher sends to: once bound to a broker, as the broker names it (with
    /// its [queue-name prefix](crate::SqsBroker::queue_name_prefix)), else as declared. A topic
    /// publisher has no queue: this is its topic's name and FIFO settings as a queue's (see
    /// [`topic`](Self::topic)).
    pub fn queue(&self) -> &SqsQueue {
        match self.inner.binding.get().map(|binding| &binding.named) {
            Some(Ok(named)) => named,
            _ => &self.inner.queue,
        }
    }

    /// The queue as declared, before the broker's naming: what tells two publishers of one
    /// queue apart from those of another, bound or not.
    fn declared(&self) -> &SqsQueue {
        &self.inner.queue
    }

    /// A message whose body is `value` in JSON.
    pub fn message<T: Serialize + ?Sized>(&self, value: &T) -> Outgoing {
        self.encoded(&Json, value)
    }

    /// A message whose body is `value` encoded by `codec`.
    pub fn encoded<C: Codec, T: Serialize + ?Sized>(&self, codec: &C, value: &T) -> Outgoing {
        let mut outgoing = Outgoing::new(self.clone(), codec.encode(value));
        outgoing.type_name = Some(Cow::Borrowed(std::any::type_name::<T>()));
        outgoing
    }

    /// The name of the type header this publisher's typed messages carry, when they carry it:
    /// when it says so ([`with_type_header`](Self::with_type_header)) or its broker routes its
    /// queue by type.
    fn type_header(&self) -> Option<Arc<str>> {
        let core = self.inner.binding.get().map(|binding| &binding.core);
        let routed = || {
            self.inner.topic.is_none()
                && core.is_some_and(|core| core.routes_by_type(&self.queue().name))
        };
        if !self.inner.type_header && !routed() {
            return None;
        }
        Some(core.map_or_else(|| Arc::from(TYPE_HEADER), |core| core.type_header()))
    }

    /// A message with this body as it is.
    pub fn raw(&self, body: impl Into<String>) -> Outgoing {
        Outgoing::new(self.clone(), Ok(body.into()))
    }

    /// Sends many messages to this publisher's queue in as few `SendMessageBatch` calls as SQS
    /// allows (10 messages and 1 MiB a call), and answers each message in the order given:
    /// `results[i]` is what became of the `i`-th message.
    ///
    /// Each message is checked before the network, as [`Outgoing::send`] checks it; one that
    /// fails gets its own error and the others still go. On a FIFO queue every group keeps the
    /// order of the batch: a group's messages go out one call at a time, in that order, while
    /// other groups' calls go out beside them. An empty batch, or one whose every message fails
    /// its check, makes no call.
    ///
    /// Every message must be for this publisher's queue: make them with this publisher (or any
    /// publisher for a queue of the same name). A message for another queue is refused with
    /// [`PublishError::OtherQueue`] rather than sent where it was not meant to go. Each message
    /// goes out as this publisher's, through its broker and with its queue's settings (FIFO,
    /// content-based deduplication).
    ///
    /// Messages sent [`once`](Outgoing::once) are checked against the publisher's
    /// [command history](history) first, their keys reserved all at once: a key sent within its
    /// duration answers the original's message id with `duplicate` set and is not sent again, and
    /// a key given to two messages of the batch is sent with the first, the second answering as
    /// it did.
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// # #[derive(serde::Serialize)] struct Payment { id: u32, account: String }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let broker = SqsBroker::in_process();
    /// let payments = broker.publisher(SqsQueue::new("payments.fifo").create_if_missing());
    /// let batch = (0..100).map(|id| {
    ///     let account = format!("account-{}", id % 5);
    ///     payments.message(&Payment { id, account: account.clone() }).group_id(account)
    /// });
    ///
    /// let results = payments.send_batch(batch).await;
    /// assert_eq!(results.len(), 100);
    /// assert!(results.iter().all(Result::is_ok));
    /// assert_eq!(broker.api_calls().send_message_batch, 10);
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// Each message's own [`PublishError`]: it is for another queue, breaks an SQS rule (found
    /// before the network), cannot be encoded, this publisher is not bound to a broker, or SQS
    /// refuses it.
    #[must_use = "each message has its own result: a failed one was not sent"]
    pub async fn send_batch(
        &self,
        messages: impl IntoIterator<Item = Outgoing>,
    ) -> Vec<Result<SentMessage, PublishError>> {
        // Each message's group as given, for the FIFO rule below.
        let mut groups: Vec<Option<String>> = Vec::new();
        let mut slots: Vec<Slot> = messages
            .into_iter()
            .map(|mut outgoing| {
                groups.push(outgoing.group_id.clone());
                let once = outgoing.once.take();
                match (self.request_for(outgoing), once) {
                    (Err(error), _) => Slot::Answered(Err(error)),
                    (Ok(request), None) => Slot::Send(request, None),
                    (Ok(_), Some(_)) if self.history().is_none() => {
                        Slot::Answered(Err(PublishError::NoHistory {
                            queue: self.queue().name.clone(),
                        }))
                    }
                    (Ok(request), Some(once)) => Slot::Reserve(request, once),
                }
            })
            .collect();
        if let Some(history) = self.history() {
            self.reserve_keys(history, &mut slots).await;
        }
        if self.queue().is_fifo() {
            self.hold_behind_refused(&mut slots, &groups);
        }
        let mut requests = Vec::new();
        let mut tickets = Vec::new();
        for slot in &mut slots {
            if matches!(slot, Slot::Send(..)) {
                let Slot::Send(request, ticket) = std::mem::replace(slot, Slot::Sending) else {
                    unreachable!("matched above");
                };
                requests.push(request);
                tickets.push(ticket);
            }
        }
        let answers = self.send_requests(requests).await;
        if let Some(history) = self.history() {
            // Each key confirmed or cancelled as its send went, all at once.
            futures_util::future::join_all(answers.iter().zip(&tickets).filter_map(
                |(answer, ticket)| {
                    let (key, ticket, duration) = ticket.as_ref()?;
                    Some(history.settle(key, ticket, answer.as_ref().ok(), *duration))
                },
            ))
            .await;
        }
        let mut settled = answers.into_iter();
        let mut results: Vec<Result<SentMessage, PublishError>> = Vec::with_capacity(slots.len());
        for slot in slots {
            let result = match slot {
                Slot::Sending => settled.next().expect("one answer per request"),
                Slot::Answered(result) => result,
                // A key given twice in one batch: the later copy answers as the first did.
                Slot::SameAs(first) => match &results[first] {
                    Ok(sent) => Ok(SentMessage {
                        duplicate: true,
                        ..sent.clone()
                    }),
                    Err(error) => Err(error.clone()),
                },
                Slot::Send(..) | Slot::Reserve(..) => {
                    unreachable!("every slot was sent or answered")
                }
            };
            results.push(result);
        }
        results
    }

    /// The FIFO send rule for what this batch refuses before the broker's sender (which keeps
    /// it for what is refused or fails from there on): a message refused here holds its group's
    /// later messages of the batch, answered [`TransportError::HeldBehind`] unsent, so none is
    /// stored ahead of it. A message for another queue holds nothing here.
    fn hold_behind_refused(&self, slots: &mut [Slot], groups: &[Option<String>]) {
        let mut refused: HashMap<&str, String> = HashMap::new();
        for (slot, group) in slots.iter_mut().zip(groups) {
            let Some(group) = group.as_deref() else {
                continue;
            };
            match (&*slot, refused.get(group)) {
                (Slot::Send(..), Some(why)) => {
                    *slot = Slot::Answered(Err(PublishError::Rejected {
                        queue: self.queue().name.clone(),
                        error: TransportError::HeldBehind {
                            message: why.clone(),
                        },
                    }));
                }
                // A message for another queue is no part of this queue's groups.
                (Slot::Answered(Err(PublishError::OtherQueue { .. })), _) => {}
                (Slot::Answered(Err(error)), None) => {
                    refused.insert(group, error.to_string());
                }
                _ => {}
            }
        }
    }

    /// Reserves the key of every slot that has one, all at once: a key held by a send of it
    /// answers that send's result; a key given twice in the batch is reserved once.
    async fn reserve_keys(&self, history: &History, slots: &mut [Slot]) {
        let mut first_of_key: HashMap<String, usize> = HashMap::new();
        let mut reserving = Vec::new();
        for (index, slot) in slots.iter_mut().enumerate() {
            let Slot::Reserve(_, once) = slot else {
                continue;
            };
            match first_of_key.entry(once.key.clone()) {
                Entry::Occupied(first) => *slot = Slot::SameAs(*first.get()),
                Entry::Vacant(vacant) => {
                    vacant.insert(index);
                    reserving.push((index, self.history_key(&once.key)));
                }
            }
        }
        let held = futures_util::future::join_all(
            reserving.iter().map(|(_, key)| self.reserve(history, key)),
        )
        .await;
        for ((index, key), held) in reserving.into_iter().zip(held) {
            let Slot::Reserve(request, once) = std::mem::replace(&mut slots[index], Slot::Sending)
            else {
                unreachable!("a reserved slot held a key");
            };
            slots[index] = match held {
                Ok(Held::Reserved(ticket)) => {
                    Slot::Send(request, Some((key, ticket, once.duration)))
                }
                Ok(Held::Sent(sent)) => Slot::Answered(Ok(sent)),
                Err(error) => Slot::Answered(Err(error)),
            };
        }
    }

    /// Sends checked requests through this publisher's broker, one answer each, in order.
    async fn send_requests(
        &self,
        requests: Vec<SendMessage>,
    ) -> Vec<Result<SentMessage, PublishError>> {
        match (requests.is_empty(), self.core()) {
            (true, _) => Vec::new(),
            (false, Some(core)) => match self.topic() {
                Some(topic) => {
                    let publishes = requests.into_iter().map(publish_of).collect();
                    core.publish_many(topic, publishes)
                        .await
                        .into_iter()
                        .map(|answer| {
                            answer
                                .map(sent)
                                .map_err(PublishError::rejected(self.queue()))
                        })
                        .collect()
                }
                None => core
                    .send_many(self.queue(), requests)
                    .await
                    .into_iter()
                    .map(|answer| answer.map_err(PublishError::rejected(self.queue())))
                    .collect(),
            },
            (false, None) => requests
                .iter()
                .map(|_| {
                    Err(PublishError::Unbound {
                        queue: self.queue().name.clone(),
                    })
                })
                .collect(),
        }
    }

    /// Keeps a command history in `history`'s store: a message given
    /// [`once(key, duration)`](Outgoing::once) is skipped when its key was sent to this queue (or
    /// topic) within its duration, by this publisher or any other on the same store. See
    /// [`publish::history`](history).
    pub fn with_history(self, history: History) -> Self {
        let mut inner = PublisherInner::clone(&self.inner);
        inner.history = Some(history);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The command history this publisher keeps, if any.
    fn history(&self) -> Option<&History> {
        self.inner.history.as_ref()
    }

    /// The key `key` of this publisher's sends, in the history: by the queue's name as the
    /// broker names it, a topic's prefixed (`:` is in no queue's name, so the two never meet).
    fn history_key(&self, key: &str) -> HistoryKey {
        match self.topic() {
            Some(topic) => HistoryKey::new(format!("topic:{}", topic.name), key),
            None => HistoryKey::new(self.queue().name.clone(), key),
        }
    }

    /// Reserves `key` in `history` for a send of this publisher's.
    async fn reserve(&self, history: &History, key: &HistoryKey) -> Result<Held, PublishError> {
        let queue = &self.queue().name;
        history
            .reserve(key, queue, self.topic().is_some())
            .await
            .map_err(|refused| match refused {
                Refused::Store(error) => PublishError::History {
                    queue: queue.clone(),
                    error: Arc::new(error),
                },
                Refused::InFlight => PublishError::InFlight {
                    queue: queue.clone(),
                    key: key.key.clone(),
                },
            })
    }

    /// The request `outgoing` becomes as a message of this publisher.
    fn request_for(&self, outgoing: Outgoing) -> Result<SendMessage, PublishError> {
        if outgoing.publisher.declared().name != self.declared().name
            || outgoing.publisher.inner.topic.is_some() != self.inner.topic.is_some()
        {
            return Err(PublishError::OtherQueue {
                queue: self.queue().name.clone(),
                message_queue: outgoing.queue().name.clone(),
            });
        }
        // The batch is checked against this publisher's queue, so its FIFO defaults (group,
        // generated deduplication id) must come from the same descriptor, not from whichever
        // publisher made the message.
        let outgoing = Outgoing {
            publisher: self.clone(),
            ..outgoing
        };
        Ok(outgoing.into_request()?.1)
    }
}

/// What became, so far, of one message of a [`Publisher::send_batch`].
enum Slot {
    /// Checked, its key (if any) reserved under the ticket: to be sent.
    Send(SendMessage, Option<(HistoryKey, Ticket, Duration)>),
    /// Checked, with a key to reserve first.
    Reserve(SendMessage, Once),
    /// In the batch's call; its answer comes in order.
    Sending,
    /// Answered without a call: refused, or skipped as sent before.
    Answered(Result<SentMessage, PublishError>),
    /// Its key is that of the message at this index, earlier in the batch.
    SameAs(usize),
}

/// A message on its way to a queue: add steps, then [`send`](Self::send) it, give it with others
/// to [`Publisher::send_batch`], or hand it to [`Context::publish`](crate::Context::publish) to
/// send it as part of handling a message.
#[derive(Debug)]
#[must_use = "a message is sent only by `.send().await`, `publisher.send_batch(..)` or `ctx.publish(..)`"]
pub struct Outgoing {
    publisher: Publisher,
    body: Result<String, EncodeError>,
    group_id: Option<String>,
    dedup_id: Option<String>,
    delay: Option<Duration>,
    headers: MessageAttributes,
    /// The Rust type of a typed message's value, for its type header.
    type_name: Option<Cow<'static, str>>,
    /// Its command-history key and duration, when it is sent once.
    once: Option<Once>,
}

impl Outgoing {
    fn new(publisher: Publisher, body: Result<String, EncodeError>) -> Self {
        Self {
            publisher,
            body,
            group_id: None,
            dedup_id: None,
            delay: None,
            headers: MessageAttributes::new(),
            type_name: None,
            once: None,
        }
    }

    /// Adds the type header, when the message is typed and its publisher sends it (see
    /// [`Publisher::with_type_header`]); one set by hand is kept.
    fn add_type_header(&mut self) -> Result<(), PublishError> {
        let Some(type_name) = self.type_name.as_deref() else {
            return Ok(());
        };
        let Some(header) = self.publisher.type_header() else {
            return Ok(());
        };
        if self.headers.contains_key(&*header) {
            return Ok(());
        }
        if self.headers.len() >= rules::MAX_MESSAGE_ATTRIBUTES {
            return Err(PublishError::NoRoomForType {
                queue: self.publisher.queue().name.clone(),
                header: header.to_string(),
                attributes: self.headers.len(),
            });
        }
        self.headers.insert(
            header.to_string(),
            MessageAttributeValue::string(crate::describe::short_name(type_name)),
        );
        Ok(())
    }

    /// The message group (FIFO): messages of one group are handled in order, one at a time.
    pub fn group_id(mut self, group_id: impl Into<String>) -> Self {
        self.group_id = Some(group_id.into());
        self
    }

    /// The deduplication id (FIFO): a send with an id seen in the last 5 minutes is not stored again.
    pub fn dedup_id(mut self, dedup_id: impl Into<String>) -> Self {
        self.dedup_id = Some(dedup_id.into());
        self
    }

    /// Sends the message only if `key` was not sent to its queue within the last `duration`, by
    /// this process or any replica sharing the publisher's [command history](history): a send
    /// whose key is there is skipped, and answers the original's message id with
    /// [`duplicate`](SentMessage::duplicate) set. The key is recorded only once the send
    /// succeeded; a failed send leaves it free. Works on any queue or topic, FIFO or not; the
    /// publisher needs [`with_history`](Publisher::with_history) (else the send fails with
    /// [`PublishError::NoHistory`]), and a handler's output
    /// ([`Context::publish`](crate::Context::publish)) cannot take it
    /// ([`PublishError::OnceInOutput`]: give the subscription an inbox instead).
    ///
    /// `key` is the command's identity: a hash of the payload, or a business id
    /// (`format!("scrape-{player}")`).
    pub fn once(mut self, key: impl Into<String>, duration: Duration) -> Self {
        self.once = Some(Once {
            key: key.into(),
            duration,
        });
        self
    }

    /// Delays delivery (standard queues; up to 15 minutes, rounded up to whole seconds).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Adds a header (a `String` message attribute). For numbers and bytes see
    /// [`header_number`](Self::header_number) and [`header_binary`](Self::header_binary).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers
            .insert(name.into(), MessageAttributeValue::string(value));
        self
    }

    /// Adds a `Number` message attribute: an integer or a float (`3`, `-0.75`), or text holding
    /// one (`"12.50"`), written as its decimal text. SQS takes at most 38 digits; a value it
    /// would refuse (`"12abc"`, `f64::NAN`, `f64::MAX`) fails the send before the network with
    /// [`ErrorKind::InvalidParameterValue`]. A handler reads it as text through
    /// [`Context::header`](crate::Context::header).
    ///
    /// ```
    /// # let orders = rust_stream::Publisher::new("orders");
    /// let order = orders.raw("{}").header_number("amount", 12.5).header_number("lines", 3);
    /// # drop(order);
    /// ```
    pub fn header_number(mut self, name: impl Into<String>, value: impl fmt::Display) -> Self {
        self.headers.insert(
            name.into(),
            MessageAttributeValue::number(value.to_string()),
        );
        self
    }

    /// Adds a `Binary` message attribute. SQS needs at least one byte, so an empty value fails
    /// the send before the network. Headers are text, so a handler finds this one in
    /// [`Context::attributes`](crate::Context::attributes), not [`Context::header`](crate::Context::header).
    pub fn header_binary(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers
            .insert(name.into(), MessageAttributeValue::binary(value));
        self
    }

    /// The queue this message goes to.
    pub fn queue(&self) -> &SqsQueue {
        self.publisher.queue()
    }

    /// The name its queue or topic was declared with, before the broker's naming: what a
    /// recorded message is sent to again.
    pub(crate) fn declared_name(&self) -> &str {
        &self.publisher.declared().name
    }

    /// The group it names: its `group_id` step; failing that, on a FIFO queue, its
    /// [`PARTITION_KEY_HEADER`] header.
    fn named_group(&self) -> Option<&str> {
        if !self.publisher.queue().is_fifo() {
            return self.group_id.as_deref();
        }
        let header = || {
            self.headers
                .get(PARTITION_KEY_HEADER)?
                .string_value
                .as_deref()
        };
        self.group_id.as_deref().or_else(header)
    }

    /// The group it is sent with: the one it names; failing that, on a FIFO queue (which needs
    /// one), `"default"`.
    fn group(&self) -> Option<&str> {
        match self.named_group() {
            None if self.publisher.queue().is_fifo() => Some(DEFAULT_GROUP),
            named => named,
        }
    }

    /// Takes `group` (the group of the FIFO message being handled) when this is for a FIFO queue
    /// and names no group of its own: a handler's outputs follow their input's group.
    pub(crate) fn inherit_group(mut self, group: &str) -> Self {
        if self.publisher.queue().is_fifo() && self.named_group().is_none() {
            self.group_id = Some(group.to_owned());
        }
        self
    }

    /// Gives a handler's output the ids that make a resend of it one message: `derive` is given
    /// a digest of what the message carries (its group and body), so that an id never stands for
    /// other content. The deduplication id, when the message has none and its FIFO queue needs
    /// one, lets SQS store a resend within five minutes once; the [`IDEMPOTENCY_KEY_HEADER`]
    /// header, when it has none and room is left for it (SQS takes 10 attributes, the type
    /// header among them), lets an [inbox](crate::inbox) downstream handle a resend once
    /// whenever it comes.
    pub(crate) fn derive_ids(mut self, derive: impl FnOnce(&str) -> String) -> Self {
        use sha2::Digest;
        let mut digest = sha2::Sha256::new();
        digest.update(self.group().unwrap_or_default().as_bytes());
        digest.update([0]);
        digest.update(self.body.as_deref().unwrap_or_default().as_bytes());
        let digest = digest.finalize();
        let short: String = digest[..8]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let id = derive(&short);
        let queue = self.publisher.queue();
        if self.dedup_id.is_none() && queue.is_fifo() && !queue.content_based_dedup {
            self.dedup_id = Some(id.clone());
        }
        let type_header = usize::from(self.needs_type_header());
        if !self.headers.contains_key(IDEMPOTENCY_KEY_HEADER)
            && self.headers.len() + type_header < rules::MAX_MESSAGE_ATTRIBUTES
        {
            self.headers.insert(
                IDEMPOTENCY_KEY_HEADER.to_owned(),
                MessageAttributeValue::string(id),
            );
        }
        self
    }

    /// Whether [`add_type_header`](Self::add_type_header) will add a header.
    fn needs_type_header(&self) -> bool {
        self.type_name.is_some()
            && self
                .publisher
                .type_header()
                .is_some_and(|header| !self.headers.contains_key(&*header))
    }

    /// The message this becomes, checked against every rule of its destination: SQS's for a
    /// queue; SNS's for a topic (as declared; the topic's own attributes are checked again once
    /// it is resolved), its body and attributes in a `SendMessage` ([`publish_of`] makes the
    /// publish). What a send and a handler's output send, with the publisher that sends it.
    pub(crate) fn into_request(mut self) -> Result<(Publisher, SendMessage), PublishError> {
        if let Some(problem) = self.publisher.naming_problem() {
            return Err(PublishError::Config(problem.clone()));
        }
        if self.once.is_some() {
            // `send` and `send_batch` take the step off first: what is left is a handler's
            // output, which the engine sends without the history.
            return Err(PublishError::OnceInOutput {
                queue: self.publisher.queue().name.clone(),
            });
        }
        self.add_type_header()?;
        let queue = self.publisher.queue().clone();
        let reject = |error: TransportError| PublishError::Rejected {
            queue: queue.name.clone(),
            error,
        };
        if queue.is_fifo() && self.named_group().is_none() && self.publisher.refuses_default_group()
        {
            return Err(PublishError::NoGroup {
                queue: queue.name.clone(),
            });
        }
        let group = self.group().map(str::to_owned);
        let body = self.body.map_err(PublishError::Encode)?;
        let mut message = SendMessage::new(body);
        message.message_attributes = self.headers;
        if let Some(delay) = self.delay {
            // Saturating: `Duration::MAX` must be refused by the delay rule, not overflow here.
            let seconds = delay
                .as_secs()
                .saturating_add(u64::from(delay.subsec_nanos() > 0));
            message.delay_seconds = Some(i32::try_from(seconds).unwrap_or(i32::MAX));
        }
        if let Some(topic) = self.publisher.topic() {
            if message.delay_seconds.is_some() {
                return Err(reject(TransportError::service(
                    ErrorKind::InvalidParameter,
                    format!(
                        "topic `{}`: SNS delivers at once and takes no delay; remove the \
                         `delay(..)` step, or give the subscribed queue a DelaySeconds",
                        topic.name
                    ),
                )));
            }
            message.group_id = group;
            message.dedup_id = match self.dedup_id {
                None if topic.is_fifo() && !topic.deduplicates_by_content() => {
                    Some(uuid::Uuid::new_v4().to_string())
                }
                dedup => dedup,
            };
            let target = PublishTarget::new(&topic.name)
                .content_based_dedup(topic.deduplicates_by_content())
                .maximum_message_size(crate::model::topic::MAX_MAXIMUM_MESSAGE_SIZE);
            // The largest size any topic takes: the topic's own is read when it is resolved.
            check_publish(&publish_of(message.clone()), target).map_err(reject)?;
            return Ok((self.publisher, message));
        }
        if queue.is_fifo() {
            message.group_id = group;
            let publisher = self.publisher;
            let outgoing_dedup = self.dedup_id;
            message.dedup_id = match outgoing_dedup {
                Some(id) => Some(id),
                None if queue.content_based_dedup => None,
                None => Some(uuid::Uuid::new_v4().to_string()),
            };
            queue
                .check_message(&message, rules::MAX_MESSAGE_SIZE, None)
                .map_err(reject)?;
            return Ok((publisher, message));
        }
        message.group_id = group;
        message.dedup_id = self.dedup_id;
        queue
            .check_message(&message, rules::MAX_MESSAGE_SIZE, None)
            .map_err(reject)?;
        Ok((self.publisher, message))
    }

    /// Sends the message now (batched with other sends to its queue).
    ///
    /// # Errors
    ///
    /// [`PublishError`] when the message breaks an SQS rule (found before the network), cannot be
    /// encoded, its publisher is not bound to a broker, or SQS refuses it; with a
    /// [`once`](Self::once) step, also when its publisher keeps no history
    /// ([`PublishError::NoHistory`]), the history's store fails ([`PublishError::History`]), or
    /// another send holds its key for longer than the history's wait ([`PublishError::InFlight`]):
    /// nothing was sent then. A send skipped because its key was sent is not an error: it answers
    /// the original's [`SentMessage`] with `duplicate` set.
    pub async fn send(mut self) -> Result<SentMessage, PublishError> {
        let Some(once) = self.once.take() else {
            let (publisher, message) = self.into_request()?;
            return send_request(publisher, message).await;
        };
        let history = self
            .publisher
            .history()
            .cloned()
            .ok_or_else(|| PublishError::NoHistory {
                queue: self.publisher.queue().name.clone(),
            })?;
        // Checked before the key is reserved: a message SQS would refuse holds no key.
        let (publisher, message) = self.into_request()?;
        if publisher.core().is_none() {
            return Err(PublishError::Unbound {
                queue: publisher.queue().name.clone(),
            });
        }
        let key = publisher.history_key(&once.key);
        match publisher.reserve(&history, &key).await? {
            Held::Sent(sent) => Ok(sent),
            Held::Reserved(ticket) => {
                let answer = send_request(publisher, message).await;
                history
                    .settle(&key, &ticket, answer.as_ref().ok(), once.duration)
                    .await;
                answer
            }
        }
    }
}

/// Sends one checked message through its publisher's broker.
async fn send_request(
    publisher: Publisher,
    message: SendMessage,
) -> Result<SentMessage, PublishError> {
    let core = publisher.core().ok_or_else(|| PublishError::Unbound {
        queue: publisher.queue().name.clone(),
    })?;
    if let Some(topic) = publisher.topic() {
        return core
            .publish_many(topic, vec![publish_of(message)])
            .await
            .pop()
            .expect("one answer per publish")
            .map(sent)
            .map_err(PublishError::rejected(publisher.queue()));
    }
    core.send(publisher.queue(), message)
        .await
        .map_err(PublishError::rejected(publisher.queue()))
}

/// The SNS publish a checked message for a topic becomes: its body, attributes, group and
/// deduplication id (a topic has no delay, which the check refused).
pub(crate) fn publish_of(message: SendMessage) -> Publish {
    Publish {
        message: message.body,
        subject: None,
        message_attributes: message.message_attributes,
        group_id: message.group_id,
        dedup_id: message.dedup_id,
    }
}

/// A message a handler gave to [`Context::publish`](crate::Context::publish), as a test reads it
/// from [`Context::published`](crate::Context::published): where it goes and what it carries,
/// before anything is sent.
#[derive(Debug, Clone, Copy)]
pub struct PublishedMessage<'a> {
    outgoing: &'a Outgoing,
}

impl<'a> PublishedMessage<'a> {
    pub(crate) fn new(outgoing: &'a Outgoing) -> Self {
        Self { outgoing }
    }

    /// The queue it goes to.
    pub fn queue(&self) -> &'a SqsQueue {
        self.outgoing.queue()
    }

    /// The body, or why the value could not be encoded (the engine then retries the handled
    /// message instead of acknowledging it).
    ///
    /// # Errors
    ///
    /// The [`EncodeError`] of the value given to [`Output::message`] or [`Publisher::encoded`].
    pub fn body(&self) -> Result<&'a str, &'a EncodeError> {
        self.outgoing.body.as_deref()
    }

    /// The group it is sent with: its `group_id` step; failing that, on a FIFO queue (which
    /// needs one), its [`PARTITION_KEY_HEADER`] header, else the handled message's group when
    /// that came from a FIFO queue, else `"default"`.
    pub fn group_id(&self) -> Option<&'a str> {
        self.outgoing.group()
    }

    /// The deduplication id: its `dedup_id` step, else on a FIFO queue the one
    /// [`Context::publish`](crate::Context::publish) made of the handled message's id and this
    /// message's position.
    pub fn dedup_id(&self) -> Option<&'a str> {
        self.outgoing.dedup_id.as_deref()
    }

    /// Its `delay` step.
    pub fn delay(&self) -> Option<Duration> {
        self.outgoing.delay
    }

    /// A header given with its `header` step.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        self.outgoing.headers.get(name)?.string_value.as_deref()
    }
}

/// Why a publish failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The value could not be encoded.
    #[error(transparent)]
    Encode(EncodeError),
    /// The message breaks an SQS rule, or SQS refused it.
    #[error("publishing to `{queue}`: {error}")]
    Rejected {
        /// The queue.
        queue: String,
        /// What SQS (or the check before it) said.
        error: TransportError,
    },
    /// A batch holds a message for another queue than its publisher's.
    #[error(
        "a batch for `{queue}` holds a message for `{message_queue}`: send that message with a \
         publisher for `{message_queue}`"
    )]
    OtherQueue {
        /// The batch's queue: that of the publisher sending it.
        queue: String,
        /// The queue the message was made for.
        message_queue: String,
    },
    /// A message for a FIFO queue names no group, and its publisher or broker refuses to send
    /// such a message to the group `"default"` (`strict_groups()`).
    #[error(
        "a message for the FIFO queue `{queue}` names no message group, and strict groups are on: \
         give it `.group_id(..)` (or a `partition_key` header); a handler's output takes its \
         input's group when the input comes from a FIFO queue"
    )]
    NoGroup {
        /// The queue.
        queue: String,
    },
    /// The broker's queue-name prefix or suffix makes the queue's name one SQS refuses; found
    /// before the network.
    #[error(transparent)]
    Config(ConfigError),
    /// A typed message for a queue routed by type has no room left for its type header: it
    /// carries 10 attributes already, the most SQS takes. Found before the network.
    #[error(
        "a message for `{queue}`, which routes by message type, carries {attributes} attributes \
         and has no room for its type header `{header}` (SQS takes at most 10): drop or merge \
         one, or set `{header}` yourself in place of one"
    )]
    NoRoomForType {
        /// The queue.
        queue: String,
        /// The type header's name.
        header: String,
        /// How many attributes the message carries.
        attributes: usize,
    },
    /// The publisher belongs to no broker.
    #[error(
        "publisher for `{queue}` is not bound to a broker: declare it as a subscriber's output, \
         or make it with `broker.publisher(..)`"
    )]
    Unbound {
        /// The queue.
        queue: String,
    },
    /// A message has a [`once`](Outgoing::once) step, and its publisher keeps no command
    /// history. Found before the network.
    #[error(
        "a message for `{queue}` is sent `.once(..)`, but its publisher keeps no command history: \
         make it with `.with_history(History::new(store))`"
    )]
    NoHistory {
        /// The queue.
        queue: String,
    },
    /// A handler's output (given to [`Context::publish`](crate::Context::publish)) has a
    /// [`once`](Outgoing::once) step: outputs are sent by the engine, which does not consult a
    /// command history.
    #[error(
        "a handler's output for `{queue}` is sent `.once(..)`, which only a publisher's own sends \
         honour: drop `.once(..)` and give the subscription an inbox (`idempotent(..)`), which \
         sends a handled message's outputs once, or send it with `publisher.send()`"
    )]
    OnceInOutput {
        /// The queue.
        queue: String,
    },
    /// The command history's store failed; nothing was sent.
    #[error("publishing to `{queue}`: nothing was sent, as the command history failed: {error}")]
    History {
        /// The queue.
        queue: String,
        /// What the store said.
        error: Arc<StoreError>,
    },
    /// Another send of the message's key held it for longer than the history's
    /// [`wait`](History::wait); nothing was sent.
    #[error(
        "publishing to `{queue}`: another send of key `{key}` is under way (or its sender died, \
         and its lease has not passed yet); nothing was sent: try again later, or raise the \
         history's `wait`"
    )]
    InFlight {
        /// The queue.
        queue: String,
        /// The message's key.
        key: String,
    },
}

impl PublishError {
    /// How a refusal of a message for `queue` (by SQS, or by the check before the call) is told.
    pub(crate) fn rejected(queue: &SqsQueue) -> impl Fn(TransportError) -> Self + '_ {
        |error| Self::Rejected {
            queue: queue.name.clone(),
            error,
        }
    }

    /// The SQS error kind, when SQS (or the check before it) refused the message.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Rejected { error, .. } => error.kind(),
            _ => None,
        }
    }
}

/// A subscriber's output: a queue it publishes `U` values to, sent before its input is
/// acknowledged.
///
/// ```
/// use rust_stream::{Context, Handle, HandlerOutcome, Output};
/// # #[derive(serde::Deserialize)] struct Order { id: u64 }
/// # #[derive(serde::Serialize)] struct Receipt { order: u64 }
///
/// struct Bill;
///
/// impl Handle<Order, Output<Receipt>> for Bill {
///     async fn handle(&self, order: &Order, receipts: &Output<Receipt>, ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
///         ctx.publish(receipts.message(&Receipt { order: order.id }).group_id("billing"));
///         Ok(())
///     }
/// }
/// ```
pub struct Output<U> {
    publisher: Publisher,
    payload: Payload,
    _values: PhantomData<fn(&U)>,
}

impl<U> std::fmt::Debug for Output<U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Output")
            .field(&self.publisher.queue().name)
            .finish()
    }
}

impl<U> Clone for Output<U> {
    fn clone(&self) -> Self {
        Self {
            publisher: self.publisher.clone(),
            payload: self.payload,
            _values: PhantomData,
        }
    }
}

/// Where an [`Output`] publishes: a queue (its name, or an [`SqsQueue`]) or an SNS topic
/// ([`SnsTopic`]).
///
/// ```
/// use rust_stream::prelude::*;
/// use rust_stream::publish::OutputTarget;
///
/// assert!(matches!(OutputTarget::from("ledger.fifo"), OutputTarget::Queue(_)));
/// assert!(matches!(
///     OutputTarget::from(SnsTopic::new("payments-posted")),
///     OutputTarget::Topic(_)
/// ));
/// ```
#[derive(Debug, Clone)]
pub enum OutputTarget {
    /// A queue: the output sends to it.
    Queue(SqsQueue),
    /// A topic: the output publishes to it, and SNS delivers to its subscriptions.
    Topic(SnsTopic),
}

impl From<SqsQueue> for OutputTarget {
    fn from(queue: SqsQueue) -> Self {
        Self::Queue(queue)
    }
}

impl From<&str> for OutputTarget {
    fn from(queue: &str) -> Self {
        Self::Queue(queue.into())
    }
}

impl From<String> for OutputTarget {
    fn from(queue: String) -> Self {
        Self::Queue(queue.into())
    }
}

impl From<SnsTopic> for OutputTarget {
    fn from(topic: SnsTopic) -> Self {
        Self::Topic(topic)
    }
}

impl<U: Serialize> Output<U> {
    /// An output to a queue (a name or an [`SqsQueue`]) or to an SNS topic (an [`SnsTopic`]):
    /// what the handler gives [`Context::publish`](crate::Context::publish) is sent after it
    /// returns, before its message is acknowledged. A topic output's topic is resolved (or
    /// created, when declared so) with the app's other topics when it starts.
    pub fn new(target: impl Into<OutputTarget>) -> Self {
        let publisher = match target.into() {
            OutputTarget::Queue(queue) => Publisher::new(queue),
            OutputTarget::Topic(topic) => Publisher::for_topic(topic),
        };
        Self {
            publisher,
            payload: Payload::named::<U>(),
            _values: PhantomData,
        }
    }

    /// How the [AsyncAPI document](crate::asyncapi) describes this output's messages (default:
    /// by their type's name). With the `schemars` feature, `Payload::schema::<U>()` gives their
    /// JSON Schema.
    ///
    /// # Panics
    ///
    /// When `payload` describes another type than `U`.
    pub fn payload(mut self, payload: Payload) -> Self {
        payload.check_describes::<U>();
        self.payload = payload;
        self
    }

    /// A message carrying `value`; give it to [`Context::publish`](crate::Context::publish).
    pub fn message(&self, value: &U) -> Outgoing {
        self.publisher.message(value)
    }

    /// Refuses a message that names no group, as [`Publisher::strict_groups`]: on a FIFO queue,
    /// an output of a handler whose input is not from a FIFO queue (and so has no group to take)
    /// must then name one.
    pub fn strict_groups(mut self) -> Self {
        self.publisher = self.publisher.strict_groups();
        self
    }

    /// The publisher underneath.
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }
}

/// The outputs a subscriber declares: `()`, one [`Output`], or a tuple of them.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a set of outputs",
    note = "declare outputs as `()`, an `Output<T>`, or a tuple of `Output<T>`s"
)]
pub trait Outputs: Send + Sync + 'static {
    /// The publishers of these outputs.
    fn publishers(&self) -> Vec<Publisher>;

    /// How each output's messages are described in the AsyncAPI document, in the order of
    /// [`publishers`](Self::publishers); by default none is.
    fn payloads(&self) -> Vec<Payload> {
        Vec::new()
    }
}

impl Outputs for () {
    fn publishers(&self) -> Vec<Publisher> {
        Vec::new()
    }
}

impl<U: 'static> Outputs for Output<U> {
    fn publishers(&self) -> Vec<Publisher> {
        vec![self.publisher.clone()]
    }

    fn payloads(&self) -> Vec<Payload> {
        vec![self.payload]
    }
}

macro_rules! tuple_outputs {
    ($($name:ident),+) => {
        impl<$($name: Outputs),+> Outputs for ($($name,)+) {
            #[allow(non_snake_case)]
            fn publishers(&self) -> Vec<Publisher> {
                let ($($name,)+) = self;
                let mut all = Vec::new();
                $(all.extend($name.publishers());)+
                all
            }

            #[allow(non_snake_case)]
            fn payloads(&self) -> Vec<Payload> {
                let ($($name,)+) = self;
                let mut all = Vec::new();
                $(all.extend($name.payloads());)+
                all
            }
        }
    };
}

tuple_outputs!(A);
tuple_outputs!(A, B);
tuple_outputs!(A, B, C);
tuple_outputs!(A, B, C, D);
tuple_outputs!(A, B, C, D, E);
tuple_outputs!(A, B, C, D, E, F);

pub mod history;
pub(crate) mod recorded;

pub use history::History;
use history::{Held, Once, Refused};

#[cfg(test)]
mod tests;
