//! What a broker shares among its publishers and consumers: the [`Client`] of one SQS backend.
//!
//! - `Client` (here): one transport (metered), the declarations of the broker's apps and
//!   publishers, and the send pipeline.
//! - `resolver`: the [`Resolver`](resolver::Resolver), which owns what the broker learned of its
//!   queues (each resolved once: its URL, created when asked, its `MaximumMessageSize`) and topics,
//!   and the calls that learn it.
//! - [`batch`]: the batcher every batched SQS action goes through (send, delete, change
//!   visibility): calls of up to 10 entries, gathered for a linger, retried with backoff.
//! - [`send`]: the senders, one per queue (on FIFO, calls formed by group, so each group stays in
//!   order).
//! - [`lease`]: a held message's claim on its visibility, settled exactly once.
//! - [`topic`]: what a broker learns of an SNS topic once (its ARN, the attributes a publish is
//!   checked against); `topic_lookup`: how it looks one up (created when asked), and the queue
//!   ARNs a subscription needs.
//! - [`publish`]: publishes to a topic through its batchers (`PublishBatch`), each FIFO group in
//!   order. [`Client::send_to`] chooses between a queue's sends and a topic's publishes, so what
//!   stands on the client sends to a [`Destination`] without asking which it is.

pub(crate) mod batch;
mod large;
pub(crate) mod lease;
pub(crate) mod publish;
mod resolver;
mod routed;
pub(crate) mod send;
pub(crate) mod topic;
mod topic_lookup;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use batch::{BatchSettings, Batcher};
pub(crate) use resolver::Resolved;
use resolver::Resolver;
use routed::RoutedQueues;

use crate::model::declare;
use crate::model::large_payload::LargePayloads;
use crate::model::naming::QueueNaming;
use crate::model::{ConfigError, Destination, SqsQueue};
use crate::propagation::TraceHeaders;
use crate::transport::meter::CallCounter;
use crate::transport::{Publish, SendMessage, SentMessage, SharedTransport, TransportError};

/// What a broker shares among its subscriptions and publishers.
pub(crate) struct Client {
    /// The queue service: its callers outside the client reach it through
    /// [`transport`](Self::transport).
    transport: SharedTransport,
    /// The meter's counts of the transport's calls.
    calls: Arc<CallCounter>,
    /// Fixed once the client is shared: a broker configured after that gets a client of its own
    /// ([`Client::configured`]), so no clone or publisher sees its settings change under it.
    settings: Settings,
    /// The queues and topics resolved so far, each once, and how more are.
    resolver: Resolver,
    /// The publishers' declarations, and those of the apps built on the broker that live.
    declarations: Arc<Mutex<declare::Registry>>,
    batchers: Mutex<Batchers>,
    /// Told what the engine does, when a test asked for a recorder.
    recorder: std::sync::OnceLock<Arc<dyn crate::record::Record>>,
    /// Queues that an app on this broker routes by type (as the broker names them).
    routed: RoutedQueues,
    /// Set once the large payloads' bucket is known to exist (created, when it is declared so).
    payload_bucket: tokio::sync::OnceCell<()>,
}

/// A broker's settings: what its builder methods set, read by the client and everything built on
/// it.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    /// How long a batched call's first entry waits for company (unordered batchers).
    pub(crate) linger: Duration,
    /// Every publisher and output of the broker refuses a FIFO message that names no group.
    pub(crate) strict_groups: bool,
    /// The prefix and suffix the broker adds to every queue name, read when a subscriber is
    /// included or a publisher bound.
    pub(crate) naming: QueueNaming,
    /// The message attribute that names a typed message's type
    /// ([`TYPE_HEADER`](crate::model::headers::TYPE_HEADER) unless the broker names it otherwise),
    /// for publishers and routed subscriptions alike.
    pub(crate) type_header: Arc<str>,
    /// Where and over what size message bodies go to S3, when they do.
    pub(crate) large_payloads: Option<LargePayloads>,
    /// Messages carry their trace as the `AWSTraceHeader` system attribute too (X-Ray's form).
    pub(crate) aws_trace_header: bool,
    /// How often a running app samples its queues' backlog gauges; `None`: never.
    pub(crate) backlog_interval: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            linger: Duration::from_millis(5),
            strict_groups: false,
            naming: QueueNaming::default(),
            type_header: Arc::from(crate::model::headers::TYPE_HEADER),
            large_payloads: None,
            aws_trace_header: false,
            backlog_interval: Some(crate::metrics::DEFAULT_BACKLOG_INTERVAL),
        }
    }
}

#[derive(Default)]
struct Batchers {
    send: HashMap<String, send::Sender>,
    /// By topic ARN.
    publish: HashMap<String, send::Sender<batch::PublishBatch>>,
    delete: HashMap<String, Batcher<batch::DeleteBatch>>,
    visibility: HashMap<String, Batcher<batch::VisibilityBatch>>,
}

/// Calls in flight per batcher where order does not matter: at 20 ms a call, 16 calls of 10 carry
/// about 7,000 messages a second, what a consumer's 16 receives bring. A call goes out only once
/// full or once its first entry has waited the linger, so room for more calls adds calls only
/// when the ones out are slow.
const PARALLEL_CALLS: usize = 16;

/// Full delete calls in flight for a FIFO queue (a call that is not full waits for the calls in
/// flight, gathering the runs of other lanes meanwhile): as many as the unordered batchers, since
/// a lane's run of 10 is a full call, and at 20 ms a call 4 of them capped a consumer near 2,000
/// messages a second.
const CONFIRMED_DELETES_IN_FLIGHT: usize = PARALLEL_CALLS;

/// The longest a FIFO delete waits for the deletes of other lanes whose handler runs (never more
/// than the broker's linger): short against a handler's own time, long enough for lanes that are
/// quick to share the call.
const CONFIRMED_DELETE_WAIT: Duration = Duration::from_micros(250);

impl Client {
    pub(crate) fn new(transport: SharedTransport, calls: Arc<CallCounter>) -> Self {
        Self::sharing(transport, calls, Arc::default())
    }

    /// A client over `transport` that knows no queue yet, with the broker's `declarations`.
    fn sharing(
        transport: SharedTransport,
        calls: Arc<CallCounter>,
        declarations: Arc<Mutex<declare::Registry>>,
    ) -> Self {
        Self {
            resolver: Resolver::new(transport.clone(), declarations.clone()),
            transport,
            calls,
            settings: Settings::default(),
            declarations,
            recorder: std::sync::OnceLock::new(),
            batchers: Mutex::new(Batchers::default()),
            routed: RoutedQueues::default(),
            payload_bucket: tokio::sync::OnceCell::new(),
        }
    }

    /// `client` with its settings changed by `change`: in place while no one else holds it (a
    /// broker being built), else a client of its own over the same backend, sharing the call
    /// counts, the declarations and the recorder, with fresh batchers and lookups. So a clone of a
    /// broker configured apart leaves the original, and whatever was built on it, as they were.
    pub(crate) fn configured(
        mut client: Arc<Self>,
        change: impl FnOnce(&mut Settings),
    ) -> Arc<Self> {
        if let Some(alone) = Arc::get_mut(&mut client) {
            change(&mut alone.settings);
            return client;
        }
        let mut settings = client.settings.clone();
        change(&mut settings);
        let mut own = Self::sharing(
            client.transport.clone(),
            client.calls.clone(),
            client.declarations.clone(),
        );
        own.settings = settings;
        if let Some(recorder) = client.recorder.get() {
            let _ = own.recorder.set(recorder.clone());
        }
        Arc::new(own)
    }

    /// The queue service this client calls: for a call no batcher or resolver makes (a
    /// subscription's receives, an operator's peek or redrive, the setup of topics).
    pub(crate) fn transport(&self) -> &SharedTransport {
        &self.transport
    }

    /// Whether every publisher and output of the broker refuses a FIFO message without a group.
    pub(crate) fn strict_groups(&self) -> bool {
        self.settings.strict_groups
    }

    /// The name of the message attribute that names a typed message's type.
    pub(crate) fn type_header(&self) -> Arc<str> {
        self.settings.type_header.clone()
    }

    /// Notes that an app on this broker routes `queue` by type, so that typed messages sent to it
    /// carry the type header.
    pub(crate) fn route_by_type(&self, queue: &str) {
        self.routed.add(queue);
    }

    /// Whether an app on this broker routes `queue` by type.
    pub(crate) fn routes_by_type(&self, queue: &str) -> bool {
        self.routed.contains(queue)
    }

    pub(crate) fn linger(&self) -> Duration {
        self.settings.linger
    }

    /// How often a running app samples its queues' backlog gauges, if it does.
    pub(crate) fn backlog_interval(&self) -> Option<Duration> {
        self.settings.backlog_interval
    }

    /// How the broker names queues.
    pub(crate) fn naming(&self) -> QueueNaming {
        self.settings.naming.clone()
    }

    /// Batchers whose calls may go out in any order: each call's first entry waits the linger.
    fn settings(&self) -> BatchSettings {
        BatchSettings {
            linger: self.linger(),
            max_in_flight: PARALLEL_CALLS,
        }
    }

    /// The URL of one of a running app's queues, resolved once. A queue declared
    /// `create_if_missing` is created (with its dead-letter queue and redrive policy) when it does
    /// not exist, as `queue` (the app's declarations) and the broker's publishers describe it; the
    /// other apps on the broker have no say.
    pub(crate) async fn resolve(&self, queue: &SqsQueue) -> Result<String, TransportError> {
        Ok(self
            .resolved_as(queue, declare::Registry::for_app)
            .await?
            .url)
    }

    /// The URL and `MaximumMessageSize` of a publisher's queue, looked up once. A queue created
    /// here is created as every declaration of it alive on the broker describes it: a publisher
    /// that runs before the app that names its queue creates it as the app declares it.
    pub(crate) async fn resolved(&self, queue: &SqsQueue) -> Result<Resolved, TransportError> {
        self.resolved_as(queue, declare::Registry::for_publisher)
            .await
    }

    /// The queue's URL and `MaximumMessageSize`, looked up once, as `merge` describes it for a
    /// creation.
    async fn resolved_as(
        &self,
        queue: &SqsQueue,
        merge: fn(&declare::Registry, &SqsQueue) -> SqsQueue,
    ) -> Result<Resolved, TransportError> {
        if let Some(recorder) = self.recorder.get() {
            // Before the lookup, so that a test asking about a queue the app failed to resolve
            // is told the name was right.
            recorder.named(&queue.name);
        }
        self.resolver.resolved_as(queue, merge).await
    }

    /// The queues resolved so far, by name, with their URLs.
    pub(crate) fn resolved_queues(&self) -> Vec<(String, String)> {
        self.resolver.resolved_queues()
    }

    pub(crate) fn declarations(&self) -> std::sync::MutexGuard<'_, declare::Registry> {
        self.declarations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the recorder, if a test asked for one, what the engine did; the event is made only
    /// then.
    pub(crate) fn record(&self, event: impl FnOnce() -> crate::record::Event) {
        if let Some(recorder) = self.recorder.get() {
            recorder.record(event());
        }
    }

    /// Whether a test asked for a recorder.
    pub(crate) fn is_recording(&self) -> bool {
        self.recorder.get().is_some()
    }

    /// The broker's recorder: `recorder` if it had none, else the one it has.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn recorder_or(
        &self,
        recorder: Arc<dyn crate::record::Record>,
    ) -> &Arc<dyn crate::record::Record> {
        self.recorder.get_or_init(|| recorder)
    }

    /// The calls made through the broker's transport so far, by action.
    pub(crate) fn api_calls(&self) -> crate::transport::meter::ApiCalls {
        self.calls.snapshot()
    }

    /// Registers an app's declarations with the broker, for as long as the answer lives.
    pub(crate) fn register(&self, app: declare::Declarations) -> declare::Registered {
        declare::Registry::register(&self.declarations, app)
    }

    /// The declarations of an app (`app`, its own) that disagree, among themselves or with the
    /// broker's publishers of the same queues, for its start to refuse.
    pub(crate) fn conflicting_declarations(&self, app: declare::Declarations) -> Vec<ConfigError> {
        self.declarations().checked(app).conflicts()
    }

    /// The queues an app names (its subscriptions', their dead-letter queues and outputs), as it
    /// and the broker's publishers declare them, dead-letter queues first.
    pub(crate) fn declared_queues(&self, app: declare::Declarations) -> Vec<SqsQueue> {
        self.declarations().checked(app).in_creation_order()
    }

    /// Sends messages to a queue through its sender, each FIFO group in order.
    pub(crate) async fn send_many(
        &self,
        queue: &SqsQueue,
        mut messages: Vec<SendMessage>,
    ) -> Vec<Result<SentMessage, TransportError>> {
        // Read before the first wait, while the caller's span is the current one.
        let trace = TraceHeaders::current();
        let resolved = match self.resolved(queue).await {
            Ok(resolved) => resolved,
            Err(error) => return messages.iter().map(|_| Err(error.clone())).collect(),
        };
        if let Some(trace) = &trace {
            for message in &mut messages {
                trace.inject(
                    message,
                    resolved.maximum_message_size,
                    self.settings.aws_trace_header,
                );
            }
        }
        // SQS refuses a message over the queue's own MaximumMessageSize (which may be as low as
        // 1 KiB); finding it here saves the call and names both sizes.
        let checks: Vec<Result<(), TransportError>> = messages
            .iter()
            .map(|message| {
                queue.check_message(
                    message,
                    resolved.maximum_message_size,
                    resolved.content_based_dedup,
                )
            })
            .collect();
        // On FIFO, a refused message holds its group's later ones in this submission (the
        // sender's rule): none is sent ahead of it.
        let answered = self
            .sender(&resolved.url, queue.is_fifo())
            .submit_checked(messages, checks)
            .await;
        let sent = answered.iter().filter(|answer| answer.is_ok()).count();
        if sent > 0 {
            crate::metrics::sent(&queue.name, sent, None);
        }
        for error in answered.iter().filter_map(|answer| answer.as_ref().err()) {
            crate::metrics::sent(&queue.name, 1, Some(error));
        }
        answered
    }

    /// Sends messages to a queue or a topic, and answers each in the order given: to a queue
    /// through its sender (`SendMessageBatch`), to a topic through its publisher (`PublishBatch`),
    /// each FIFO group in order either way. The one send path of publishers and handlers' outputs.
    ///
    /// `messages` is an iterator so that one message (`iter::once`) or a `Vec` becomes the list a
    /// queue's sender or a topic's publisher takes with one allocation at most.
    pub(crate) async fn send_to(
        &self,
        destination: &Destination,
        messages: impl IntoIterator<Item = SendMessage>,
    ) -> Vec<Result<SentMessage, TransportError>> {
        let Some(large) = &self.settings.large_payloads else {
            return self.send_as_they_are(destination, messages).await;
        };
        self.send_through_s3(large, destination, messages.into_iter().collect())
            .await
    }

    /// Where and over what size message bodies go to S3, when the broker sends them there.
    pub(crate) fn large_payloads(&self) -> Option<&LargePayloads> {
        self.settings.large_payloads.as_ref()
    }

    /// Sends `messages` to `destination` with their bodies as they are.
    pub(super) async fn send_as_they_are(
        &self,
        destination: &Destination,
        messages: impl IntoIterator<Item = SendMessage>,
    ) -> Vec<Result<SentMessage, TransportError>> {
        let messages = messages.into_iter();
        match destination {
            Destination::Queue(queue) => self.send_many(queue, messages.collect()).await,
            Destination::Topic(topic) => {
                let publishes = messages.map(Publish::from).collect();
                self.publish_many(topic, publishes).await
            }
        }
    }

    /// Sends one message.
    pub(crate) async fn send(
        &self,
        queue: &SqsQueue,
        message: SendMessage,
    ) -> Result<SentMessage, TransportError> {
        self.send_many(queue, vec![message])
            .await
            .pop()
            .expect("one answer per message")
    }

    fn batchers(&self) -> std::sync::MutexGuard<'_, Batchers> {
        self.batchers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue's batcher for one action, started on first use.
    fn batcher<A: batch::Action>(
        &self,
        url: &str,
        settings: BatchSettings,
        pick: impl FnOnce(&mut Batchers) -> &mut HashMap<String, Batcher<A>>,
    ) -> Batcher<A> {
        let mut batchers = self.batchers();
        let spawn = || Batcher::spawn(self.transport.clone(), url.to_owned(), settings);
        let batcher = pick(&mut batchers)
            .entry(url.to_owned())
            .or_insert_with(spawn);
        if batcher.is_closed() {
            // Its task is gone (a panic): a new one takes the queue's calls from here on.
            tracing::error!(queue_url = %url, "a batcher had stopped; a new one is started");
            *batcher = spawn();
        }
        batcher.clone()
    }

    /// The queue's sender, started on first use. A FIFO queue's sends go out one call at a time
    /// per group, in calls formed from what waits, so no group is reordered while groups go out
    /// side by side.
    fn sender(&self, url: &str, fifo: bool) -> send::Sender {
        let mut batchers = self.batchers();
        batchers
            .send
            .entry(url.to_owned())
            .or_insert_with(|| {
                let transport = self.transport.clone();
                if fifo {
                    send::Sender::fifo(transport, url, send::FIFO_SEND_CALLS)
                } else {
                    send::Sender::standard(transport, url, self.settings())
                }
            })
            .clone()
    }

    /// A standard queue's deleter: deletes nobody waits for wait out the linger and go out up to
    /// 10 a call, several calls at once.
    pub(crate) fn deleter(&self, url: &str) -> Batcher<batch::DeleteBatch> {
        self.batcher(url, self.settings(), |batchers| &mut batchers.delete)
    }

    /// A FIFO subscription's own deleter. Its lanes each wait for their run's deletes before
    /// going on, so a delete never waits for a linger: a full call goes out at once, and one that
    /// is not full as soon as no call is in flight, with the runs that queued meanwhile, and
    /// waiting at most `CONFIRMED_DELETE_WAIT` for the other running lanes (`lanes` counts them,
    /// and `lanes_left` says when one ended or rests) whose run is not in yet. Lanes whose runs
    /// one call answered thus share the next call.
    pub(crate) fn confirmed_deleter(
        &self,
        url: &str,
        lanes: Arc<dyn Fn() -> usize + Send + Sync>,
        lanes_left: Arc<tokio::sync::Notify>,
    ) -> Batcher<batch::DeleteBatch> {
        Batcher::spawn_with_company(
            self.transport.clone(),
            url.to_owned(),
            CONFIRMED_DELETES_IN_FLIGHT,
            batch::Company {
                callers: lanes,
                left: lanes_left,
                wait: CONFIRMED_DELETE_WAIT.min(self.linger()),
            },
        )
    }

    pub(crate) fn visibility_batcher(&self, url: &str) -> Batcher<batch::VisibilityBatch> {
        self.batcher(url, self.settings(), |batchers| &mut batchers.visibility)
    }
}
