//! The [`Publisher`]: a [`Destination`] (a queue or a topic) to publish to, its settings (strict
//! groups, the type header, a payload's schema, a command history) and the broker it is bound to,
//! with the destination as that broker names it.
//!
//! Messages are made and sent in [`outgoing`](super::outgoing), many at once in
//! [`batch`](super::batch).

use std::sync::{Arc, OnceLock};

use super::history::History;
use crate::client::Client;
use crate::describe::Payload;
use crate::handler::outgoing::Sink;
use crate::model::flow::RateLimit;
use crate::model::headers::TYPE_HEADER;
use crate::model::large_payload::LargePayloads;
use crate::model::{ConfigError, Destination, SnsTopic, SqsQueue};
use crate::store::history::HistoryKey;

/// Publishes to one queue, or to one SNS topic. Cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    pub(super) inner: Arc<PublisherInner>,
}

#[derive(Clone)]
pub(super) struct PublisherInner {
    /// The queue or topic as declared.
    pub(super) destination: Destination,
    pub(super) binding: OnceLock<Binding>,
    /// Refuses a FIFO message that names no group rather than send it to `"default"`.
    pub(super) strict_groups: bool,
    /// Every typed message carries the type header, whether or not the broker knows the queue
    /// as routed.
    pub(super) type_header: bool,
    /// The command history messages with a `once` step are checked against.
    pub(super) history: Option<History>,
    /// The rate limit each send waits for.
    pub(super) rate_limit: Option<RateLimit>,
}

/// The broker a publisher belongs to, and its destination as that broker names it.
#[derive(Clone)]
pub(super) struct Binding {
    pub(super) core: Arc<Client>,
    /// The queue or topic with the broker's prefix and suffix, or why they make a name SQS or SNS
    /// refuses.
    pub(super) named: Result<Destination, ConfigError>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::fmt::Debug for PublisherInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("destination", &Sink::destination(self))
            .field("bound", &self.binding.get().is_some())
            .finish()
    }
}

impl Publisher {
    /// A publisher for `queue` that is bound to a broker later: by the app, when it is a
    /// subscriber's output. Use [`SqsBroker::publisher`](crate::SqsBroker::publisher) for one that
    /// is bound at once.
    pub fn new(queue: impl Into<SqsQueue>) -> Self {
        Self::to(Destination::Queue(queue.into()))
    }

    /// A publisher for `topic`, bound to a broker later; see
    /// [`SqsBroker::topic`](crate::SqsBroker::topic) for one that is bound at once.
    pub(crate) fn for_topic(topic: SnsTopic) -> Self {
        Self::to(Destination::Topic(topic))
    }

    /// A publisher for `destination`, bound to a broker later.
    fn to(destination: Destination) -> Self {
        Self {
            inner: Arc::new(PublisherInner {
                destination,
                binding: OnceLock::new(),
                strict_groups: false,
                type_header: false,
                history: None,
                rate_limit: None,
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
        self.destination().topic()
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
    ///
    /// [`PARTITION_KEY_HEADER`]: crate::PARTITION_KEY_HEADER
    /// [`PublishError::NoGroup`]: crate::PublishError::NoGroup
    pub fn strict_groups(self) -> Self {
        let mut inner = PublisherInner::clone(&self.inner);
        inner.strict_groups = true;
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Sends at most `limit` messages: a number a second, or a [`RateLimit`] shared with
    /// subscriptions and other publishers (a downstream's budget, spent by both). Each send, a
    /// batch's and a handler's output's too, waits for its messages' tokens before the call. A
    /// limit that cannot work (0 messages) refuses every send with [`PublishError::Config`]
    /// before any call.
    ///
    /// ```
    /// use rust_stream::flow::RateLimit;
    /// use rust_stream::prelude::*;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let broker = SqsBroker::in_process();
    /// let emails = broker
    ///     .publisher(SqsQueue::new("emails").create_if_missing())
    ///     .rate_limit(RateLimit::new("ses", 14));
    /// let started = tokio::time::Instant::now();
    /// for n in 0..24 {
    ///     emails.raw(format!("{n}")).send().await.unwrap();
    /// }
    /// // 10 at once (the burst), then one every 1/14 s.
    /// assert!(started.elapsed() >= std::time::Duration::from_millis(14 * 71));
    /// # }
    /// ```
    ///
    /// [`PublishError::Config`]: crate::PublishError::Config
    pub fn rate_limit(self, limit: impl Into<RateLimit>) -> Self {
        let mut inner = PublisherInner::clone(&self.inner);
        let name = self.destination().name().to_owned();
        inner.rate_limit = Some(limit.into().named_if_unnamed(&name));
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The rate limit its sends wait for.
    pub(crate) fn rate_limit_of(&self) -> Option<&RateLimit> {
        self.inner.rate_limit.as_ref()
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
    ///
    /// [`PublishError::NoRoomForType`]: crate::PublishError::NoRoomForType
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
    /// listed once. Only a publisher made with [`SqsBroker::publisher`]
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
    ///
    /// [`SqsBroker::publisher`]: crate::SqsBroker::publisher
    pub fn payload(self, payload: Payload) -> Self {
        // Payloads are listed by queue name: a topic's would land on a queue of the same name.
        if let (Some(core), Some(queue)) = (self.core(), self.destination().queue()) {
            core.declarations().publisher_payload(&queue.name, payload);
        }
        self
    }

    /// A publisher for `queue` as the broker already names it (a subscription's dead-letter
    /// queue, a queue a RedrivePolicy names), bound to it: its name is not named again.
    pub(crate) fn bound(queue: SqsQueue, core: Arc<Client>) -> Self {
        let publisher = Self::new(queue.clone());
        let _ = publisher.inner.binding.set(Binding {
            core,
            named: Ok(Destination::Queue(queue)),
        });
        publisher
    }

    /// Binds an unbound publisher, naming its queue or topic as the broker does; a bound one
    /// keeps its broker.
    pub(crate) fn bind(&self, core: &Arc<Client>) {
        self.inner.binding.get_or_init(|| {
            let mut problems = Vec::new();
            let named = core
                .naming()
                .destination(&self.inner.destination, &mut problems);
            Binding {
                core: core.clone(),
                named: problems.into_iter().next().map_or(Ok(named), Err),
            }
        });
    }

    /// The broker this publisher is bound to, if any.
    pub(crate) fn core(&self) -> Option<Arc<Client>> {
        self.inner.binding.get().map(|binding| binding.core.clone())
    }

    /// Why the broker this publisher is bound to cannot name its queue or topic (its prefix or
    /// suffix makes a name SQS or SNS refuses), if it cannot.
    pub(crate) fn naming_problem(&self) -> Option<&ConfigError> {
        self.inner.naming_problem()
    }

    /// The queue or topic this publisher sends to: once bound to a broker, as the broker names
    /// it (with its [queue-name prefix](crate::SqsBroker::queue_name_prefix)), else as declared.
    ///
    /// ```
    /// use rust_stream::model::Destination;
    /// use rust_stream::prelude::*;
    ///
    /// let broker = SqsBroker::in_process().queue_name_prefix("staging-");
    /// let payments = broker.publisher("payments.fifo");
    /// assert_eq!(payments.destination().name(), "staging-payments.fifo");
    /// assert!(matches!(payments.destination(), Destination::Queue(_)));
    /// ```
    pub fn destination(&self) -> &Destination {
        self.inner.destination()
    }

    /// The queue or topic as declared, before the broker's naming: what tells two publishers of
    /// one destination apart from those of another, bound or not.
    pub(crate) fn declared(&self) -> &Destination {
        self.inner.declared()
    }

    /// Keeps a command history in `history`'s store: a message given
    /// [`once(key, duration)`] is skipped when its key was sent to this queue (or
    /// topic) within its duration, by this publisher or any other on the same store. See
    /// [`publish::history`](crate::publish::history).
    ///
    /// [`once(key, duration)`]: crate::Outgoing::once
    pub fn with_history(self, history: History) -> Self {
        let mut inner = PublisherInner::clone(&self.inner);
        inner.history = Some(history);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The command history this publisher keeps, if any.
    pub(super) fn history(&self) -> Option<&History> {
        self.inner.history.as_ref()
    }

    /// The key `key` of this publisher's sends, in the history: by the queue's or topic's name as
    /// the broker names it, a topic's prefixed (`:` is in no queue's name, so the two never meet).
    pub(super) fn history_key(&self, key: &str) -> HistoryKey {
        HistoryKey::new(self.destination().unique_name(), key)
    }

    /// This publisher as the sink of the messages it makes.
    pub(super) fn sink(&self) -> Arc<dyn Sink> {
        self.inner.clone()
    }

    /// The publisher that made a message, from its sink: every sink is a publisher's.
    pub(super) fn from_sink(sink: Arc<dyn Sink>) -> Self {
        let any: Arc<dyn std::any::Any + Send + Sync> = sink;
        Self {
            inner: any
                .downcast()
                .expect("only a publisher makes an outgoing message"),
        }
    }
}

impl Sink for PublisherInner {
    fn destination(&self) -> &Destination {
        match self.binding.get().map(|binding| &binding.named) {
            Some(Ok(named)) => named,
            _ => &self.destination,
        }
    }

    fn declared(&self) -> &Destination {
        &self.destination
    }

    /// Carried when the publisher says so ([`with_type_header`](Publisher::with_type_header)) or
    /// its broker routes its queue by type.
    fn type_header(&self) -> Option<Arc<str>> {
        let core = self.binding.get().map(|binding| &binding.core);
        let routed = || {
            let queue = self.destination().queue();
            queue.is_some_and(|queue| core.is_some_and(|core| core.routes_by_type(&queue.name)))
        };
        if !self.type_header && !routed() {
            return None;
        }
        Some(core.map_or_else(|| Arc::from(TYPE_HEADER), |core| core.type_header()))
    }

    fn naming_problem(&self) -> Option<&ConfigError> {
        self.binding.get()?.named.as_ref().err()
    }

    fn large_payloads(&self) -> Option<&LargePayloads> {
        self.binding.get()?.core.large_payloads()
    }

    fn refuses_default_group(&self) -> bool {
        self.strict_groups
            || self
                .binding
                .get()
                .is_some_and(|binding| binding.core.strict_groups())
    }
}
