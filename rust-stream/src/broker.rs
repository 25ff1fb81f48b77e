//! The contract between an app and the broker it runs on: the [`Broker`] trait, [`Include`] (the
//! scope in which an app mounts its subscribers, `b.include(..)`), and what a broker is given
//! and answers: [`AppInfo`], [`AppContext`], [`Shutdown`], [`RunError`].
//!
//! Handlers know nothing of brokers: a [`Handle`](crate::Handle) impl runs unchanged on any
//! broker whose subscribers can carry it. [`SqsBroker`](crate::SqsBroker) is the first.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

use crate::health::{Inspect, Probes, Stage, SubscriptionProbe};
use crate::model::ConfigErrors;
use crate::state::States;
pub use crate::task::Shutdown;
use crate::worker::{ErasedWorker, Worker};

/// The AsyncAPI version of the documents brokers write.
pub const ASYNCAPI_VERSION: &str = "3.0.0";

/// A message broker an app runs on.
pub trait Broker: Send + 'static {
    /// What [`Include::include`] accepts.
    type Subscriber: Send + 'static;

    /// Takes in a subscriber the app includes, before [`declare`](Self::declare): a broker that
    /// names queues its own way (a prefix per environment) renames them here, once, so that its
    /// declarations, the AsyncAPI document, health and the run all see the names it uses. By
    /// default the subscriber stays as it is.
    fn adopt(&self, subscriber: Self::Subscriber) -> Self::Subscriber {
        subscriber
    }

    /// Learns the app's subscribers as soon as they are included, before the app runs, so that
    /// what the broker does before then (a publisher creating a queue) already follows them.
    fn declare(&self, subscribers: &[Self::Subscriber]) {
        let _ = subscribers;
    }

    /// The AsyncAPI document of an app with these subscribers on this broker; by default, the
    /// app's info and no channel.
    fn asyncapi(&self, info: &AppInfo, subscribers: &[Self::Subscriber]) -> serde_json::Value {
        let _ = subscribers;
        serde_json::json!({
            "asyncapi": ASYNCAPI_VERSION,
            "info": info.asyncapi(),
            "channels": {},
            "operations": {},
        })
    }

    /// Runs the subscribers until the app's shutdown is requested, then stops them gracefully.
    fn run(
        self,
        app: AppContext,
        subscribers: Vec<Self::Subscriber>,
    ) -> impl Future<Output = Result<(), RunError>> + Send;
}

/// The subscribers of one broker, gathered by [`RustStream::with_broker`](crate::RustStream::with_broker),
/// and the app's middleware around them (`b.layer(..)`, see
/// [`middleware`](crate::handler::middleware)).
pub struct Include<B: Broker> {
    subscribers: Vec<B::Subscriber>,
    /// What the app puts around every subscriber (its middleware layers), in the order added.
    wraps: Vec<Wrap<B::Subscriber>>,
    /// What the app runs beside its subscribers.
    workers: Vec<ErasedWorker>,
}

/// A change the app makes to each of its subscribers once all are included.
type Wrap<S> = Box<dyn Fn(&mut S) + Send + Sync>;

impl<B: Broker> std::fmt::Debug for Include<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Include")
            .field("subscribers", &self.subscribers.len())
            .field("layers", &self.wraps.len())
            .field("workers", &self.workers)
            .finish()
    }
}

impl<B: Broker> Include<B> {
    pub(crate) fn new() -> Self {
        Self {
            subscribers: Vec::new(),
            wraps: Vec::new(),
            workers: Vec::new(),
        }
    }

    /// Changes every subscriber, included before or after, once the app has them all: the app's
    /// middleware, which knows the broker's subscriber type.
    pub(crate) fn wrap_each(&mut self, wrap: Wrap<B::Subscriber>) {
        self.wraps.push(wrap);
    }

    /// The subscribers included, each inside the app's layers (the last added is put on first,
    /// so that the first added ends outermost and runs first), and the workers.
    pub(crate) fn into_parts(self) -> (Vec<B::Subscriber>, Vec<ErasedWorker>) {
        let mut subscribers = self.subscribers;
        for subscriber in &mut subscribers {
            for wrap in self.wraps.iter().rev() {
                wrap(subscriber);
            }
        }
        (subscribers, self.workers)
    }

    /// Runs `worker` beside the subscribers, from the moment they consume until the app stops:
    /// an outbox's relay (`b.worker(broker.relay(store))`, see [`outbox`](crate::outbox)).
    pub fn worker(&mut self, worker: impl Worker) -> &mut Self {
        self.workers.push(ErasedWorker::new(worker));
        self
    }

    /// Mounts a subscriber: a built [`Subscriber`](crate::Subscriber), or a `#[subscriber]`
    /// function, on its attribute's queue (`b.include(fulfil)`) or on one chosen at run time
    /// (`b.include(fulfil.on(queue))`).
    pub fn include(&mut self, subscriber: impl Into<B::Subscriber>) -> &mut Self {
        self.subscribers.push(subscriber.into());
        self
    }
}

/// A service's name, version and, optionally, what it does: the `info` of its AsyncAPI
/// document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppInfo {
    name: String,
    version: String,
    description: Option<String>,
}

impl AppInfo {
    /// A service called `name` at `version`.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            version: version.into(),
            description: None,
        }
    }

    /// What the service does, for its AsyncAPI document (CommonMark).
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// The service's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The service's version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// What the service does, if it says.
    pub fn description(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The `info` object of the app's AsyncAPI document.
    pub(crate) fn asyncapi(&self) -> serde_json::Value {
        let mut info = serde_json::json!({ "title": self.name(), "version": self.version() });
        if let Some(description) = self.description() {
            info["description"] = serde_json::json!(description);
        }
        info
    }
}

/// What a broker gets from the app it runs: its info, shared state, the shutdown signal, and
/// where to say it consumes.
#[derive(Clone)]
pub struct AppContext {
    info: AppInfo,
    states: Arc<States>,
    shutdown: Shutdown,
    stage: Arc<watch::Sender<Stage>>,
    probes: Probes,
}

impl std::fmt::Debug for AppContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppContext")
            .field("info", &self.info)
            .field("shutdown", &self.shutdown)
            .finish()
    }
}

impl AppContext {
    /// What the app hands its broker when it runs.
    pub(crate) fn new(
        info: AppInfo,
        states: Arc<States>,
        shutdown: Shutdown,
        stage: Arc<watch::Sender<Stage>>,
        probes: Probes,
    ) -> Self {
        Self {
            info,
            states,
            shutdown,
            stage,
            probes,
        }
    }

    /// The app's name and version.
    pub fn info(&self) -> &AppInfo {
        &self.info
    }

    /// The app's shared state.
    pub fn states(&self) -> &Arc<States> {
        &self.states
    }

    /// When to stop, and how long stopping may take.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// Says that every subscription consumes; `inspect` reports what the broker's queues hold.
    pub fn consuming(&self, inspect: Arc<dyn Inspect>) {
        self.stage.send_replace(Stage::Consuming(inspect));
    }

    /// Says that shutdown has begun: no new receive starts, and what is held is being settled
    /// or released.
    pub fn draining(&self) {
        self.stage.send_replace(Stage::Draining);
    }

    /// The probe through which the subscription of `queue` reports its health (see
    /// [`App::health`](crate::App::health)).
    pub fn subscription_probe(&self, queue: &str) -> Arc<SubscriptionProbe> {
        self.probes.add(queue)
    }

    /// The probe through which the worker called `name` reports its health.
    pub(crate) fn worker_probe(&self, name: &str) -> Arc<crate::health::WorkerProbe> {
        self.probes.add_worker(name)
    }
}

/// Why a service could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Settings that cannot work, all of them, found before any network call.
    #[error("{0}")]
    Config(ConfigErrors),
    /// The broker could not start the app's subscriptions: what its queue service refused or
    /// lacks, as the broker's own error type says it ([`SqsBroker`](crate::SqsBroker)'s is
    /// [`sqs::StartError`](crate::sqs::StartError)); [`broker_error`](Self::broker_error) reads
    /// it as that type.
    #[error("{0}")]
    Broker(Box<dyn std::error::Error + Send + Sync + 'static>),
    /// The signal handlers could not be installed.
    #[error("cannot listen for SIGINT/SIGTERM: {0}")]
    Signal(String),
}

impl RunError {
    /// A broker's error: how a [`Broker`] says why it could not run the subscribers.
    pub fn broker(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Broker(Box::new(error))
    }

    /// The broker's error, when the service could not run for one of type `E`.
    ///
    /// ```
    /// use rust_stream::sqs::StartError;
    /// use rust_stream::RunError;
    ///
    /// let error = RunError::broker(StartError::QueueMissing { queue: "orders".to_owned() });
    /// assert!(matches!(error.broker_error(), Some(StartError::QueueMissing { queue }) if queue == "orders"));
    /// assert!(RunError::Signal("no signals".to_owned()).broker_error::<StartError>().is_none());
    /// ```
    pub fn broker_error<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Self::Broker(error) => error.downcast_ref(),
            Self::Config(_) | Self::Signal(_) => None,
        }
    }
}
