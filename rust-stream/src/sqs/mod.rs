//! Amazon SQS: [`SqsBroker`], the [`SqsQueue`] descriptor, and the SQS [`rules`] every backend
//! honours.
//!
//! A broker holds one [`Transport`]: the in-process [`Account`], or Amazon SQS over aws-sdk-sqs
//! ([`aws`], feature `aws`), chosen in code or, with [`SqsBroker::from_env_or_in_process`], by the
//! environment. It resolves each queue once (its URL, creating the queue when asked, and its
//! `MaximumMessageSize`), and owns one batcher per queue and action, shared by every subscription
//! and publisher of the broker.

#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub mod aws;
pub(crate) mod declare;
#[cfg(feature = "aws")]
mod environment;
pub(crate) mod queue;
pub mod rules;
pub(crate) mod send;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub use aws::ConnectError;
pub use queue::{ConfigError, ConfigErrors, SqsQueue, MAX_BATCH_LINGER};

use crate::account::Account;
use crate::app::{AppContext, AppInfo, Inspect, QueueLoad, RunError};
use crate::broker::Broker;
use crate::engine::batch::{self, BatchSettings, Batcher};
use crate::engine::meter::{ApiCalls, CallCounter, Metered};
use crate::engine::transport::{
    BoxFuture, QueueAttributes, SendMessage, SentMessage, SharedTransport, Transport,
    TransportError,
};
use crate::handler::Subscriber;
use crate::propagation::TraceHeaders;
use crate::publish::{self, PublishError, Publisher};
use rules::ErrorKind;

/// The SQS broker: subscriptions and publishers over one SQS backend.
///
/// ```
/// use rust_stream::account::Account;
/// use rust_stream::SqsBroker;
///
/// let fresh = SqsBroker::in_process();
/// let account = Account::new();
/// let shared = SqsBroker::with_account(&account); // the test keeps `account` to look inside
/// # let _ = (fresh, shared);
/// ```
///
/// A clone shares the backend, the queues resolved, the batchers and the publishers' declarations;
/// the declarations of an app built on a broker stay with that app (see
/// [`RustStream::with_broker`](crate::RustStream::with_broker)).
pub struct SqsBroker {
    core: Arc<BrokerCore>,
    /// The declarations of the app this broker value was given to, registered with `core` for as
    /// long as the app lives: until it is dropped, or its run ends.
    app: Mutex<Option<declare::Registered>>,
}

impl Clone for SqsBroker {
    fn clone(&self) -> Self {
        Self {
            core: self.core.clone(),
            // An app's declarations are the app's, not every copy's: they go with the app.
            app: Mutex::default(),
        }
    }
}

impl std::fmt::Debug for SqsBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsBroker")
            .field("linger", &self.core.linger())
            .finish()
    }
}

impl SqsBroker {
    /// A broker over a fresh in-process account.
    pub fn in_process() -> Self {
        Self::with_account(&Account::new())
    }

    /// A broker over Amazon SQS, configured from the environment as the AWS CLI is (region,
    /// credentials, profile, `AWS_ENDPOINT_URL`).
    ///
    /// ```no_run
    /// use rust_stream::SqsBroker;
    ///
    /// # async fn connect() -> Result<(), rust_stream::sqs::ConnectError> {
    /// let broker = SqsBroker::from_env().await?;
    /// # let _ = broker;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ConnectError::MissingRegion`] when neither `AWS_REGION`, `AWS_DEFAULT_REGION` nor the
    /// profile names a region; [`ConnectError::MissingCredentials`] when the credentials provider
    /// finds none, or does not answer within 5 s (an unreachable instance metadata service). Both
    /// are found before any SQS call.
    #[cfg(feature = "aws")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
    pub async fn from_env() -> Result<Self, ConnectError> {
        Self::aws().connect().await
    }

    /// A broker over the SQS the environment names, or else over a fresh in-process account: one
    /// service binary for a laptop, a local stack and AWS.
    ///
    /// The rule, on environment variables only (an empty one counts as unset):
    ///
    /// 1. `AWS_ENDPOINT_URL_SQS` or `AWS_ENDPOINT_URL` set: SQS at that endpoint, as
    ///    [`from_env`](Self::from_env) configures it. An endpoint means a local stand-in such as
    ///    LocalStack (or a VPC endpoint); it still needs a region and credentials from the
    ///    environment, which a stand-in takes whatever their value.
    /// 2. Else `AWS_REGION`, `AWS_DEFAULT_REGION`, `AWS_PROFILE` or `AWS_ACCESS_KEY_ID` set:
    ///    Amazon SQS, as [`from_env`](Self::from_env) configures it. A region alone means real
    ///    SQS; a profile or an access key says the service is meant for AWS, and connecting then
    ///    asks for a region if none is set.
    /// 3. Else the in-process account.
    ///
    /// It logs its choice at `info`, naming the variable that made it. A deployed service that
    /// must never fall back to the in-process account (on EC2 with only an instance role, none of
    /// these variables is set) calls [`from_env`](Self::from_env) instead.
    ///
    /// ```no_run
    /// use rust_stream::SqsBroker;
    ///
    /// # async fn connect() -> Result<(), rust_stream::sqs::ConnectError> {
    /// // `cargo run`: in process. `AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1
    /// // AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test cargo run`: on LocalStack.
    /// let broker = SqsBroker::from_env_or_in_process().await?;
    /// # let _ = broker;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// When the environment names SQS, as [`from_env`](Self::from_env); the in-process account
    /// cannot fail.
    #[cfg(feature = "aws")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
    pub async fn from_env_or_in_process() -> Result<Self, ConnectError> {
        match environment::choose(|name| std::env::var(name).ok()) {
            environment::Choice::Endpoint { variable, url } => {
                tracing::info!(
                    sqs.endpoint = %aws::shown_endpoint(&url),
                    sqs.chosen_by = variable,
                    "running on SQS at the endpoint the environment names"
                );
                Self::from_env().await
            }
            environment::Choice::Aws { variable } => {
                tracing::info!(
                    sqs.chosen_by = variable,
                    "running on Amazon SQS, as the environment configures it"
                );
                Self::from_env().await
            }
            environment::Choice::InProcess => {
                tracing::info!(
                    "running on a fresh in-process SQS account; set AWS_REGION for Amazon SQS, or \
                     AWS_ENDPOINT_URL for a local stand-in"
                );
                Ok(Self::in_process())
            }
        }
    }

    /// A broker over Amazon SQS or a local stand-in, to configure: endpoint, region, profile,
    /// test credentials.
    #[cfg(feature = "aws")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
    pub fn aws() -> aws::AwsBrokerBuilder {
        aws::AwsBrokerBuilder::default()
    }

    /// A broker over `account`, which a test may share to send, receive and inspect.
    pub fn with_account(account: &Account) -> Self {
        Self::with_transport(account.clone())
    }

    /// A broker over any [`Transport`].
    pub fn with_transport(transport: impl Transport) -> Self {
        let metered = Metered::new(transport);
        let calls = metered.calls.clone();
        Self {
            core: Arc::new(BrokerCore::new(Arc::new(metered), calls)),
            app: Mutex::default(),
        }
    }

    /// The SQS API calls this broker has made so far, by action.
    pub fn api_calls(&self) -> ApiCalls {
        self.core.calls.snapshot()
    }

    /// How long the first entry of a batched call waits for company (default 5 ms): a standard
    /// queue's sends and deletes. A FIFO queue's sends never wait it: each of its in-order
    /// batchers sends at once when its call is free, and gathers while the call is out. Applies
    /// to batchers the broker starts from now on; set it before the app runs. More than
    /// [`MAX_BATCH_LINGER`] keeps an app from starting
    /// (`ConfigError::BatchLinger`).
    #[must_use]
    pub fn batch_linger(self, linger: Duration) -> Self {
        self.core.linger_nanos.store(
            u64::try_from(linger.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self
    }

    /// A recorder of what this broker's subscriptions do with each message: what they handled,
    /// published and dead-lettered. The first call starts it; later calls share it.
    #[cfg(feature = "testing")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn recorder(&self) -> crate::testing::Recorder {
        let recorder = crate::testing::Recorder::default();
        let shared: Arc<dyn crate::engine::record::Record> = Arc::new(recorder.clone());
        match self.core.recorder.set(shared) {
            Ok(()) => recorder,
            Err(_) => self
                .core
                .recorder
                .get()
                .and_then(|shared| shared.as_any().downcast_ref::<crate::testing::Recorder>())
                .cloned()
                .expect("a broker's recorder is a Recorder"),
        }
    }

    /// A publisher for `queue`, bound to this broker. It belongs to the broker, not to an app:
    /// its declaration of the queue joins that of every app on the broker that names the queue
    /// (the queue is created, when asked, as all of them together describe it, and such an app
    /// refuses to start if they disagree), and every app's AsyncAPI document lists it.
    pub fn publisher(&self, queue: impl Into<SqsQueue>) -> Publisher {
        let queue = queue.into();
        self.core.declarations().publisher(&queue);
        Publisher::bound(queue, self.core.clone())
    }
}

impl Broker for SqsBroker {
    type Subscriber = Subscriber;

    /// Registers the app's declarations with the broker, for a publisher that resolves one of
    /// its queues before it runs; they stay for as long as this broker value, which the app
    /// holds: until the app is dropped, or its run ends. Its checks never read them: the app's
    /// start builds its own from its subscribers again.
    fn declare(&self, subscribers: &[Subscriber]) {
        let registered = declare::Registry::register(
            &self.core.declarations,
            declare::Declarations::of_app(subscribers),
        );
        // Declaring again replaces (and so takes back) what this broker value declared before.
        *self.app.lock().unwrap_or_else(PoisonError::into_inner) = Some(registered);
    }

    fn asyncapi(&self, info: &AppInfo, subscribers: &[Subscriber]) -> serde_json::Value {
        let (declarations, published) = {
            let registry = self.core.declarations();
            (registry.documented(subscribers), registry.published())
        };
        let merged = |queue: &SqsQueue| declarations.merged(queue);
        let mut writer = crate::asyncapi::Writer::new(info, &merged);
        for subscriber in subscribers {
            writer.subscriber(subscriber);
        }
        for queue in &published {
            writer.publisher(queue);
        }
        writer.finish()
    }

    async fn run(self, app: AppContext, subscribers: Vec<Subscriber>) -> Result<(), RunError> {
        tracing::info!(app.name = %app.info().name(), app.version = %app.info().version(), "starting");
        let Self {
            core,
            app: declared,
        } = self;
        let result = crate::engine::run(core, subscribers, app).await;
        // The app's declarations last as long as its run, and no longer: a refused or stopped app
        // leaves the broker as it found it (a dropped run future drops them too).
        drop(declared);
        result
    }
}

/// What a broker shares among its subscriptions and publishers.
pub(crate) struct BrokerCore {
    pub(crate) transport: SharedTransport,
    calls: Arc<CallCounter>,
    linger_nanos: AtomicU64,
    /// Queues by name, each resolved once behind its own cell: a slow lookup of one queue holds up
    /// no other, and callers asking for the same queue at once share one lookup.
    queues: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Resolved>>>>,
    /// The publishers' declarations, and those of the apps built on the broker that live.
    declarations: Arc<Mutex<declare::Registry>>,
    batchers: Mutex<Batchers>,
    /// Told what the engine does, when a test asked for a recorder.
    recorder: std::sync::OnceLock<Arc<dyn crate::engine::record::Record>>,
}

/// What a broker learns of a queue once.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) url: String,
    /// The queue's `MaximumMessageSize`: SQS refuses a larger message to this queue even when it
    /// is within the 1 MiB every queue could take.
    pub(crate) maximum_message_size: usize,
    /// The queue's `ContentBasedDeduplication`, when it could be read: SQS takes a FIFO message
    /// without a deduplication id only when it is on, whatever the declaration says.
    pub(crate) content_based_dedup: Option<bool>,
}

#[derive(Default)]
struct Batchers {
    send: HashMap<String, send::Sender>,
    delete: HashMap<String, Batcher<batch::DeleteBatch>>,
    visibility: HashMap<String, Batcher<batch::VisibilityBatch>>,
}

/// Calls in flight per batcher where order does not matter.
const PARALLEL_CALLS: usize = 4;

/// Full delete calls in flight for a FIFO queue (a call that is not full waits for the calls in
/// flight, gathering the deletes of other lanes meanwhile).
const CONFIRMED_DELETES_IN_FLIGHT: usize = 4;

/// The longest a FIFO delete waits for the deletes of other lanes whose handler runs (never more
/// than the broker's linger): short against a handler's own time, long enough for lanes that are
/// quick to share the call.
const CONFIRMED_DELETE_WAIT: Duration = Duration::from_micros(250);

impl BrokerCore {
    fn new(transport: SharedTransport, calls: Arc<CallCounter>) -> Self {
        Self {
            transport,
            calls,
            linger_nanos: AtomicU64::new(5_000_000),
            queues: Mutex::new(HashMap::new()),
            declarations: Arc::default(),
            recorder: std::sync::OnceLock::new(),
            batchers: Mutex::new(Batchers::default()),
        }
    }

    pub(crate) fn linger(&self) -> Duration {
        Duration::from_nanos(self.linger_nanos.load(Ordering::Relaxed))
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
    /// creation. A failed lookup is not kept, so the next caller tries again.
    async fn resolved_as(
        &self,
        queue: &SqsQueue,
        merge: fn(&declare::Registry, &SqsQueue) -> SqsQueue,
    ) -> Result<Resolved, TransportError> {
        let cell = self.cell(&queue.name);
        if let Some(resolved) = cell.get() {
            return Ok(resolved.clone());
        }
        let queue = merge(&self.declarations(), queue);
        cell.get_or_try_init(|| self.look_up(&queue)).await.cloned()
    }

    fn declarations(&self) -> std::sync::MutexGuard<'_, declare::Registry> {
        self.declarations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Tells the recorder, if a test asked for one, what the engine did; the event is made only
    /// then.
    pub(crate) fn record(&self, event: impl FnOnce() -> crate::engine::record::Event) {
        if let Some(recorder) = self.recorder.get() {
            recorder.record(event());
        }
    }

    /// Whether a test asked for a recorder.
    pub(crate) fn is_recording(&self) -> bool {
        self.recorder.get().is_some()
    }

    /// The declarations of an app with these subscribers that disagree (among themselves, or
    /// with the broker's publishers of the same queues), for its start to refuse.
    pub(crate) fn conflicting_declarations(&self, subscribers: &[Subscriber]) -> Vec<ConfigError> {
        self.declarations().checked(subscribers).conflicts()
    }

    /// The queues an app with these subscribers names (its subscriptions', their dead-letter
    /// queues and outputs), as it and the broker's publishers declare them, dead-letter queues
    /// first.
    pub(crate) fn declared_queues(&self, subscribers: &[Subscriber]) -> Vec<SqsQueue> {
        self.declarations().checked(subscribers).in_creation_order()
    }

    /// The cell a queue is resolved in, made on first use.
    fn cell(&self, name: &str) -> Arc<tokio::sync::OnceCell<Resolved>> {
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    async fn look_up(&self, queue: &SqsQueue) -> Result<Resolved, TransportError> {
        let url = match self.transport.get_queue_url(&queue.name).await {
            Ok(url) => url,
            Err(error)
                if queue.create_if_missing
                    && error.kind() == Some(ErrorKind::QueueDoesNotExist) =>
            {
                self.create(queue).await?
            }
            Err(error) => return Err(error),
        };
        self.describe(queue, url).await
    }

    /// Creates a queue declared `create_if_missing`, with its type, visibility timeout and
    /// redrive policy.
    async fn create(&self, queue: &SqsQueue) -> Result<String, TransportError> {
        let mut attributes = QueueAttributes::new();
        if queue.is_fifo() {
            attributes.insert("FifoQueue".into(), "true".into());
            if queue.content_based_dedup {
                attributes.insert("ContentBasedDeduplication".into(), "true".into());
            }
        }
        if let Some(timeout) = queue.consumer.visibility_timeout {
            attributes.insert("VisibilityTimeout".into(), timeout.as_secs().to_string());
        }
        if let (Some(dead_letter), Some(policy)) = (queue.dead_letter_queue(), &queue.dead_letter) {
            // A RedrivePolicy names its target by ARN, so the dead-letter queue must exist first.
            // It is resolved in its own cell, so a subscription or publisher of it shares this
            // lookup and the queue is made once.
            let dead_letter_url = self
                .cell(&dead_letter.name)
                .get_or_try_init(|| self.look_up_plain(&dead_letter))
                .await?
                .url
                .clone();
            let arn = self
                .transport
                .get_queue_attributes(&dead_letter_url, &["QueueArn"])
                .await?;
            let arn = arn.get("QueueArn").cloned().unwrap_or_default();
            // The consumer dead-letters by its own count; SQS's redrive is the backstop for what
            // the consumer never sees fail (crashes), so it leaves room for receives that were no
            // attempt.
            let max_receive_count = crate::retry::redrive_backstop(policy.max_receive_count);
            let redrive = serde_json::json!({ "deadLetterTargetArn": arn, "maxReceiveCount": max_receive_count });
            attributes.insert("RedrivePolicy".into(), redrive.to_string());
        }
        let url = self.transport.create_queue(&queue.name, attributes).await?;
        tracing::info!(messaging.destination.name = %queue.name, "queue created");
        Ok(url)
    }

    /// Finds a queue, or creates it with only its type set.
    async fn look_up_plain(&self, queue: &SqsQueue) -> Result<Resolved, TransportError> {
        let url = match self.transport.get_queue_url(&queue.name).await {
            Err(error)
                if queue.create_if_missing
                    && error.kind() == Some(ErrorKind::QueueDoesNotExist) =>
            {
                let mut attributes = QueueAttributes::new();
                if queue.is_fifo() {
                    attributes.insert("FifoQueue".into(), "true".into());
                }
                self.transport.create_queue(&queue.name, attributes).await?
            }
            found => found?,
        };
        self.describe(queue, url).await
    }

    /// Reads what sends to the queue must respect besides the rules every queue shares.
    async fn describe(&self, queue: &SqsQueue, url: String) -> Result<Resolved, TransportError> {
        let mut content_based_dedup = None;
        let maximum_message_size = match self
            .transport
            .get_queue_attributes(&url, &["MaximumMessageSize", "ContentBasedDeduplication"])
            .await
        {
            Ok(attributes) => {
                if queue.is_fifo() {
                    content_based_dedup = Some(
                        attributes
                            .get("ContentBasedDeduplication")
                            .is_some_and(|on| on == "true"),
                    );
                }
                attributes
                    .get("MaximumMessageSize")
                    .and_then(|size| size.parse().ok())
                    .unwrap_or(rules::MAX_MESSAGE_SIZE)
            }
            // A publisher may be allowed to send but not to read attributes (an IAM policy without
            // sqs:GetQueueAttributes); SQS still enforces the queue's limit on each send.
            Err(error @ TransportError::Other { .. }) => {
                tracing::warn!(
                    messaging.destination.name = %queue.name,
                    error = %error,
                    "cannot read the queue's MaximumMessageSize; messages are checked against 1 MiB \
                     before sending and SQS refuses any over the queue's own limit"
                );
                rules::MAX_MESSAGE_SIZE
            }
            Err(error) => return Err(error),
        };
        Ok(Resolved {
            url,
            maximum_message_size,
            content_based_dedup,
        })
    }

    /// Sends messages to a queue through its sender, each FIFO group in order.
    pub(crate) async fn send_many(
        &self,
        queue: &SqsQueue,
        mut messages: Vec<SendMessage>,
    ) -> Vec<Result<SentMessage, PublishError>> {
        // Read before the first wait, while the caller's span is the current one.
        let trace = TraceHeaders::current();
        let reject = |error: TransportError| PublishError::Rejected {
            queue: queue.name.clone(),
            error,
        };
        let resolved = match self.resolved(queue).await {
            Ok(resolved) => resolved,
            Err(error) => {
                return messages
                    .iter()
                    .map(|_| Err(reject(error.clone())))
                    .collect()
            }
        };
        if let Some(trace) = &trace {
            for message in &mut messages {
                trace.inject(message, resolved.maximum_message_size);
            }
        }
        // SQS refuses a message over the queue's own MaximumMessageSize (which may be as low as
        // 1 KiB); finding it here saves the call and names both sizes.
        let checks: Vec<Result<(), TransportError>> = messages
            .iter()
            .map(|message| {
                publish::check(
                    message,
                    queue,
                    resolved.maximum_message_size,
                    resolved.content_based_dedup,
                )
            })
            .collect();
        let accepted: Vec<SendMessage> = messages
            .into_iter()
            .zip(&checks)
            .filter(|(_, check)| check.is_ok())
            .map(|(message, _)| message)
            .collect();
        let mut answers = if accepted.is_empty() {
            Vec::new()
        } else {
            self.sender(&resolved.url, queue.is_fifo())
                .submit(accepted)
                .await
        }
        .into_iter();
        let answered: Vec<Result<SentMessage, TransportError>> = checks
            .into_iter()
            .map(|check| match check {
                Ok(()) => answers.next().expect("the batcher answers every entry"),
                Err(error) => Err(error),
            })
            .collect();
        let sent = answered.iter().filter(|answer| answer.is_ok()).count();
        if sent > 0 {
            crate::metrics::sent(&queue.name, sent, None);
        }
        for error in answered.iter().filter_map(|answer| answer.as_ref().err()) {
            crate::metrics::sent(&queue.name, 1, Some(error));
        }
        answered
            .into_iter()
            .map(|answer| answer.map_err(reject))
            .collect()
    }

    /// Sends one message.
    pub(crate) async fn send(
        &self,
        queue: &SqsQueue,
        message: SendMessage,
    ) -> Result<SentMessage, PublishError> {
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
    /// per group, through in-order batchers picked by group, so no group is reordered while
    /// groups go out side by side.
    fn sender(&self, url: &str, fifo: bool) -> send::Sender {
        let mut batchers = self.batchers();
        batchers
            .send
            .entry(url.to_owned())
            .or_insert_with(|| {
                let transport = self.transport.clone();
                if fifo {
                    send::Sender::fifo(transport, url, send::FIFO_SEND_SHARDS)
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

    /// A FIFO subscription's own deleter. Its lanes each wait for their delete before going on,
    /// so a delete never waits for a linger: a full call goes out at once, and one that is not
    /// full as soon as no call is in flight, with the deletes that queued meanwhile, and waiting
    /// at most `CONFIRMED_DELETE_WAIT` for the other running lanes (`lanes` counts them, and
    /// `lanes_left` says when one ended or rests) whose delete is not in yet. Lanes whose deletes one call confirmed thus share the next call.
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

    /// The queues resolved so far, by name, with their URLs.
    fn resolved_queues(&self) -> Vec<(String, String)> {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let mut resolved: Vec<(String, String)> = queues
            .iter()
            .filter_map(|(name, cell)| Some((name.clone(), cell.get()?.url.clone())))
            .collect();
        resolved.sort();
        resolved
    }

    pub(crate) fn visibility_batcher(&self, url: &str) -> Batcher<batch::VisibilityBatch> {
        self.batcher(url, self.settings(), |batchers| &mut batchers.visibility)
    }
}

/// A running app's queues: every queue its broker resolved, and which of them it consumes.
pub(crate) struct AppQueues {
    pub(crate) core: Arc<BrokerCore>,
    pub(crate) consumed: Vec<String>,
}

impl Inspect for AppQueues {
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueLoad>, String>> {
        Box::pin(async move {
            const COUNTS: [&str; 3] = [
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ];
            let mut loads = Vec::new();
            for (name, url) in self.core.resolved_queues() {
                let attributes = self
                    .core
                    .transport
                    .get_queue_attributes(&url, &COUNTS)
                    .await
                    .map_err(|error| format!("queue `{name}`: {error}"))?;
                let count = |attribute: &str| {
                    attributes
                        .get(attribute)
                        .and_then(|value| value.parse().ok())
                        .unwrap_or(0)
                };
                let consumed = self.consumed.contains(&name);
                loads.push(QueueLoad::new(
                    name,
                    consumed,
                    count(COUNTS[0]),
                    count(COUNTS[1]),
                    count(COUNTS[2]),
                ));
            }
            Ok(loads)
        })
    }
}
