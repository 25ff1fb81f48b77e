//! Amazon SQS: [`SqsBroker`], the [`SqsQueue`] descriptor, and the SQS [`rules`](crate::model::rules) every backend
//! honours.
//!
//! A broker holds one [`Transport`]: the in-process [`Account`], or Amazon SQS over aws-sdk-sqs
//! ([`aws`](crate::aws), feature `aws`), chosen in code or, with [`SqsBroker::from_env_or_in_process`], by the
//! environment. It resolves each queue once (its URL, creating the queue when asked, and its
//! `MaximumMessageSize`), and owns one batcher per queue and action, shared by every subscription
//! and publisher of the broker.

#[cfg(feature = "aws")]
mod environment;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub use crate::aws::ConnectError;
pub use crate::engine::start::StartError;
pub use crate::model::queue::{
    ConfigError, ConfigErrors, SqsQueue, MAX_BATCH_LINGER, RECEIVE_VISIBILITY_TIMEOUT,
};

use crate::account::Account;
use crate::app::{AppContext, AppInfo, RunError};
use crate::broker::Broker;
use crate::client::Client;
use crate::model::{declare, SnsTopic};
use crate::publish::Publisher;
use crate::subscriber::Subscriber;
use crate::transport::layer::Hooked;
use crate::transport::meter::{ApiCalls, Meter};
use crate::transport::Transport;

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
/// [`RustStream::with_broker`](crate::RustStream::with_broker)). A clone configured apart
/// (`broker.clone().batch_linger(..)`, a prefix, ...) gets batchers and lookups of its own with
/// its settings, over the same backend: the original and whatever was built on it keep theirs.
pub struct SqsBroker {
    core: Arc<Client>,
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
                    sqs.endpoint = %crate::aws::shown_endpoint(&url),
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
    pub fn aws() -> crate::aws::AwsBrokerBuilder {
        crate::aws::AwsBrokerBuilder::default()
    }

    /// A broker over `account`, which a test may share to send, receive and inspect.
    pub fn with_account(account: &Account) -> Self {
        Self::with_transport(account.clone())
    }

    /// A broker over any [`Transport`].
    pub fn with_transport(transport: impl Transport) -> Self {
        let meter = Meter::default();
        let calls = meter.calls.clone();
        Self {
            core: Arc::new(Client::new(Arc::new(Hooked::new(transport, meter)), calls)),
            app: Mutex::default(),
        }
    }

    /// The SQS API calls this broker has made so far, by action.
    pub fn api_calls(&self) -> ApiCalls {
        self.core.api_calls()
    }

    /// The operations an operator runs on this broker's queues: list them with their counts and
    /// dead-letter relations, peek, show, redrive dead letters, purge (see
    /// [`operations`](crate::operations)). They go through this broker's transport and queue
    /// names, and [`api_calls`](Self::api_calls) counts them.
    ///
    /// ```
    /// use rust_stream::operations::Peek;
    /// use rust_stream::SqsBroker;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), rust_stream::operations::OperationError> {
    /// let broker = SqsBroker::in_process();
    /// let operations = broker.operations();
    /// let peeked = operations.peek("payments-dlq", &Peek::new().amount(5)).await;
    /// assert!(peeked.is_err(), "no such queue yet");
    /// # Ok(())
    /// # }
    /// ```
    pub fn operations(&self) -> crate::operations::Operations {
        crate::operations::Operations::new(self.core.clone())
    }

    /// This broker with its settings changed: a broker shared with a clone (or with what was
    /// built on it) gets a client of its own, so the others keep theirs.
    fn configured(self, change: impl FnOnce(&mut crate::client::Settings)) -> Self {
        Self {
            core: Client::configured(self.core, change),
            app: self.app,
        }
    }

    /// How long the first entry of a batched call waits for company (default 5 ms): a standard
    /// queue's sends and deletes. A FIFO queue's sends never wait it: each of its in-order
    /// batchers sends at once when its call is free, and gathers while the call is out. Applies
    /// to batchers the broker starts from now on; set it before the app runs. More than
    /// [`MAX_BATCH_LINGER`] keeps an app from starting
    /// (`ConfigError::BatchLinger`).
    #[must_use]
    pub fn batch_linger(self, linger: Duration) -> Self {
        self.configured(|settings| settings.linger = linger)
    }

    /// Sends the body of every message over `large`'s threshold (256 KiB unless set) through S3,
    /// as AWS's extended clients do: the body is put in `large`'s bucket and the message carries
    /// a pointer to it, which every extended client (Java, Python) reads, with the payload's
    /// SHA-256 beside it. It applies to every publisher, topic and handler output of the broker.
    /// A message over SQS's 1 MiB is then sent too. See
    /// [`large_payload`](crate::model::large_payload).
    #[must_use]
    pub fn large_payloads(self, large: crate::model::large_payload::LargePayloads) -> Self {
        self.configured(|settings| settings.large_payloads = Some(large))
    }

    /// Sends the trace context of every message this broker sends (publishers, batches, handler
    /// outputs, dead-letter copies, redrives) as X-Ray's `AWSTraceHeader` system attribute too,
    /// beside the W3C `traceparent` message attribute, so that consumers which read only X-Ray's
    /// header (a Lambda function, the X-Ray SDKs) continue the same trace. The system attribute
    /// is not one of a message's 10 attributes, so a message whose own attributes take all 10
    /// still carries it. Needs the `opentelemetry` feature (without it no message has a trace
    /// context to send); an `AWSTraceHeader` the sender set is kept. Off by default. See
    /// [`propagation`](crate::propagation).
    #[must_use]
    pub fn aws_trace_header(self) -> Self {
        self.configured(|settings| settings.aws_trace_header = true)
    }

    /// How often a running app on this broker samples the backlog of each queue it subscribes
    /// to (default [`DEFAULT_BACKLOG_INTERVAL`](crate::metrics::DEFAULT_BACKLOG_INTERVAL), 60 s): one
    /// `GetQueueAttributes` call a queue an interval, and one for each dead-letter queue, which
    /// set the gauges `rust_stream.queue.visible`, `.in_flight`, `.delayed`, `.oldest_age` and
    /// `.dead_letter` (see [`metrics`](crate::metrics)); the first sample is taken when the app
    /// consumes. For autoscaling on the backlog: `docs/observability.md`, "Backlog and
    /// autoscaling". Less than a second keeps an app from starting
    /// (`ConfigError::BacklogInterval`).
    #[must_use]
    pub fn backlog_interval(self, interval: Duration) -> Self {
        self.configured(|settings| settings.backlog_interval = Some(interval))
    }

    /// Samples no backlog: no gauge of what the queues hold, and no call for it (an IAM role
    /// without `sqs:GetQueueAttributes`, or a service that reads CloudWatch instead).
    #[must_use]
    pub fn no_backlog_gauges(self) -> Self {
        self.configured(|settings| settings.backlog_interval = None)
    }

    /// Makes every publisher and subscription output of this broker refuse a message for a FIFO
    /// queue that names no group, as [`Publisher::strict_groups`] does for one: with
    /// [`PublishError::NoGroup`](crate::PublishError::NoGroup), before any call, instead of
    /// sending it to the group `"default"`. A handler's output still takes its input's group when
    /// the input comes from a FIFO queue; a dead-letter copy keeps its message's group.
    #[must_use]
    pub fn strict_groups(self) -> Self {
        self.configured(|settings| settings.strict_groups = true)
    }

    /// Puts `prefix` before the name of every queue this broker resolves, so one service binary
    /// names its queues per environment: with `"staging-"`, `payments.fifo` is
    /// `staging-payments.fifo`. It applies to the queues of the subscribers an app includes
    /// (their dead-letter queues and outputs too) and of the publishers the broker makes, in one
    /// place, when the subscriber is included or the publisher made: create, send, dead-letter,
    /// health and the AsyncAPI document all show the name it makes. A queue's RedrivePolicy
    /// names its dead-letter queue itself, and is read as it is.
    ///
    /// Set it before building apps and publishers on the broker: a clone configured apart has
    /// its own.
    ///
    /// ```
    /// use rust_stream::SqsBroker;
    ///
    /// let broker = SqsBroker::in_process().queue_name_prefix("staging-");
    /// assert_eq!(broker.publisher("payments.fifo").destination().name(), "staging-payments.fifo");
    /// ```
    ///
    /// A prefix SQS refuses (a character other than letters, digits, `-` and `_`), or one that
    /// takes a name past 80 characters, is found before any network call:
    /// [`ConfigError::QueueNaming`] naming the queue, from the app's start (with its other
    /// problems) or from the publisher's sends.
    #[must_use]
    pub fn queue_name_prefix(self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.configured(|settings| settings.naming.prefix = prefix)
    }

    /// Puts `suffix` after the name of every queue this broker resolves, before a `.fifo`: with
    /// `"-blue"`, `payments.fifo` is `payments-blue.fifo`. Applied and checked as
    /// [`queue_name_prefix`](Self::queue_name_prefix) is.
    #[must_use]
    pub fn queue_name_suffix(self, suffix: impl Into<String>) -> Self {
        let suffix = suffix.into();
        self.configured(|settings| settings.naming.suffix = suffix)
    }

    /// Names the message attribute that carries a typed message's type, for this broker's
    /// publishers and its apps' routed queues (default [`TYPE_HEADER`](crate::TYPE_HEADER),
    /// `rust_stream.type`; see [`routing`](crate::routing)). Set it before building apps and
    /// publishers on the broker: a clone configured apart has its own. A name SQS does not take as an attribute name
    /// keeps an app with a routed queue from starting ([`ConfigError::TypeHeaderName`]).
    ///
    /// ```
    /// use rust_stream::SqsBroker;
    ///
    /// let broker = SqsBroker::in_process().type_header("event_type");
    /// # let _ = broker;
    /// ```
    #[must_use]
    pub fn type_header(self, name: impl Into<String>) -> Self {
        let name: Arc<str> = Arc::from(name.into());
        self.configured(|settings| settings.type_header = name)
    }

    /// The client the broker's subscriptions and publishers share.
    #[cfg(feature = "lambda")]
    pub(crate) fn client(&self) -> &Arc<Client> {
        &self.core
    }

    /// A recorder of what this broker's subscriptions do with each message: what they handled,
    /// published and dead-lettered. The first call starts it; later calls share it.
    #[cfg(feature = "testing")]
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn recorder(&self) -> crate::record::Recorder {
        let recorder = crate::record::Recorder::default();
        let shared: Arc<dyn crate::record::Record> = Arc::new(recorder.clone());
        self.core
            .recorder_or(shared)
            .as_any()
            .downcast_ref::<crate::record::Recorder>()
            .cloned()
            .expect("a broker's recorder is a Recorder")
    }

    /// A publisher for `queue`, bound to this broker. It belongs to the broker, not to an app:
    /// its declaration of the queue joins that of every app on the broker that names the queue
    /// (the queue is created, when asked, as all of them together describe it, and such an app
    /// refuses to start if they disagree), and every app's AsyncAPI document lists it, with the
    /// messages its [`payload`](Publisher::payload) says it sends.
    ///
    /// Its queue is named as the broker names every queue (see
    /// [`queue_name_prefix`](Self::queue_name_prefix)).
    pub fn publisher(&self, queue: impl Into<SqsQueue>) -> Publisher {
        let publisher = Publisher::new(queue);
        publisher.bind(&self.core);
        // A name the broker cannot make is refused by every send, and declares nothing.
        if let (None, Some(queue)) = (publisher.naming_problem(), publisher.destination().queue()) {
            self.core.declarations().publisher(queue);
        }
        publisher
    }

    /// A publisher for an SNS `topic`, bound to this broker: the same [`Publisher`], with the
    /// same steps, whose messages go to the topic (`PublishBatch`, up to 10 a call, each FIFO
    /// group in order) and from it to every queue subscribed whose filter policy takes them.
    ///
    /// The topic is looked up once, on the first publish: created when declared
    /// `create_if_missing` (as every declaration of it on the broker describes it), else found
    /// by its ARN in the account and region of the broker's queues. Its name is named as the
    /// broker names every queue and topic (see [`queue_name_prefix`](Self::queue_name_prefix)).
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// use rust_stream::model::SnsTopic;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let broker = SqsBroker::in_process();
    /// let posted = broker.topic(SnsTopic::new("payments-posted.fifo").create_if_missing());
    /// let sent = posted
    ///     .message(&serde_json::json!({"id": 1}))
    ///     .group_id("account-7")
    ///     .header("kind", "card")
    ///     .send()
    ///     .await
    ///     .unwrap();
    /// assert!(sent.sequence_number.is_some());
    /// assert_eq!(broker.api_calls().publish_batch, 1);
    /// # }
    /// ```
    pub fn topic(&self, topic: impl Into<SnsTopic>) -> Publisher {
        let publisher = Publisher::for_topic(topic.into());
        publisher.bind(&self.core);
        // A name the broker cannot make is refused by every publish, and declares nothing.
        if let (None, Some(topic)) = (publisher.naming_problem(), publisher.topic()) {
            self.core.declarations().topic_publisher(topic);
        }
        publisher
    }
}

impl SqsBroker {
    /// The relay of the outbox in `store`, sending through this broker: mount it with the app's
    /// subscribers, `b.worker(broker.relay(store))`. See [`outbox`](crate::outbox).
    pub fn relay<S: crate::store::OutboxStore>(&self, store: S) -> crate::outbox::Relay<S> {
        crate::outbox::Relay::new(store, self.core.clone())
    }
}

impl Broker for SqsBroker {
    type Subscriber = Subscriber;

    /// Names the subscriber's queue, its dead-letter queue and its outputs as the broker names
    /// every queue (see [`queue_name_prefix`](SqsBroker::queue_name_prefix)), binding the outputs
    /// to this broker; a name it cannot make is kept for the app's start to refuse.
    fn adopt(&self, mut subscriber: Subscriber) -> Subscriber {
        subscriber.queue = self
            .core
            .naming()
            .queue(&subscriber.queue, &mut subscriber.problems);
        for output in &subscriber.outputs {
            output.bind(&self.core);
            if let Some(problem) = output.naming_problem() {
                subscriber.problems.push(problem.clone());
            }
        }
        subscriber
    }

    /// Registers the app's declarations with the broker, for a publisher that resolves one of
    /// its queues before it runs; they stay for as long as this broker value, which the app
    /// holds: until the app is dropped, or its run ends. Its checks never read them: the app's
    /// start builds its own from its subscribers again.
    fn declare(&self, subscribers: &[Subscriber]) {
        // Typed messages sent to a routed queue from now on carry their type header.
        for queue in crate::routing::routed_queues(subscribers) {
            self.core.route_by_type(&queue);
        }
        let registered = self
            .core
            .register(crate::subscriber::declarations(subscribers));
        // Declaring again replaces (and so takes back) what this broker value declared before.
        *self.app.lock().unwrap_or_else(PoisonError::into_inner) = Some(registered);
    }

    fn asyncapi(&self, info: &AppInfo, subscribers: &[Subscriber]) -> serde_json::Value {
        let (declarations, published, published_topics, outboxes) = {
            let registry = self.core.declarations();
            (
                registry.documented(crate::subscriber::declarations(subscribers)),
                registry.published(),
                registry.published_topics(),
                registry.outboxes(),
            )
        };
        let merged = |queue: &SqsQueue| declarations.merged(queue);
        let mut writer = crate::asyncapi::Writer::new(info, &merged).outboxes(outboxes);
        writer.routed(
            crate::routing::routed_queues(subscribers),
            &self.core.type_header(),
        );
        for subscriber in subscribers {
            writer.subscriber(subscriber);
        }
        for (queue, payloads) in &published {
            writer.publisher(queue, payloads);
        }
        for topic in &published_topics {
            writer.topic_publisher(topic);
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

#[cfg(feature = "aws")]
impl crate::aws::AwsBrokerBuilder {
    /// Loads the configuration, checks that it names a region and yields credentials, and makes
    /// the broker. Makes no SQS request: a missing queue, or credentials SQS refuses, show when
    /// the app starts.
    ///
    /// # Errors
    ///
    /// [`ConnectError::MissingRegion`] when no region is set here, in the environment or in the
    /// profile; [`ConnectError::MissingCredentials`] when the credentials provider finds none or
    /// does not answer within 5 s.
    pub async fn connect(self) -> Result<SqsBroker, ConnectError> {
        Ok(SqsBroker::with_transport(self.transport().await?))
    }
}
