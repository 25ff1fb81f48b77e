//! The app: [`RustStream`] and [`AppInfo`] describe a service, [`App`] runs it until SIGINT,
//! SIGTERM or a [`ShutdownHandle`] stops it, then shuts it down gracefully.
//!
//! ```no_run
//! use rust_stream::prelude::*;
//! # #[derive(serde::Deserialize)] struct Order;
//! # struct Fulfil;
//! # impl Handle<Order> for Fulfil {
//! #     async fn handle(&self, _: &Order, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> { Ok(()) }
//! # }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), rust_stream::RunError> {
//!     RustStream::new(AppInfo::new("fulfillment", "0.1.0"))
//!         .with_broker(SqsBroker::in_process(), |b| {
//!             b.include(subscriber(SqsQueue::new("orders.fifo").create_if_missing(), Fulfil).build());
//!         })
//!         .run()
//!         .await
//! }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::broker::{Broker, Include};
use crate::engine::transport::BoxFuture;
use crate::engine::transport::TransportError;
use crate::health::{AppState, Health, Probes, SubscriptionProbe};
use crate::sqs::rules::ErrorKind;
use crate::sqs::ConfigErrors;
use crate::state::States;

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
}

/// How long a stop takes at most unless set: within Kubernetes' default grace period of 30 s, and
/// above the default long poll of 20 s.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(25);

/// A service being described: its info and how long shutdown may take.
#[derive(Debug, Clone)]
#[must_use = "add a broker with `.with_broker(..)`"]
pub struct RustStream {
    info: AppInfo,
    shutdown_timeout: Duration,
    states: States,
}

impl RustStream {
    /// A service with this info.
    pub fn new(info: AppInfo) -> Self {
        Self {
            info,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            states: States::default(),
        }
    }

    /// Registers a value of shared state: handlers read it with
    /// [`Context::state`](crate::Context::state) or a `State<T>` parameter. One value per type.
    pub fn with_state<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.states.insert(value);
        self
    }

    /// How long a stop may take in all (default 25 s, within Kubernetes' default grace period of
    /// 30 s): held messages go on starting for the first half, running handlers are cancelled
    /// when a fifth of it (at most 3 s) is left, and what is still held is then released for
    /// other consumers. On SQS keep it above the long poll (`wait`, 20 s by default): a stop
    /// waits for a receive in flight, so that what it brings is not hidden.
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }

    /// Runs on `broker`, with the subscribers `include` mounts.
    pub fn with_broker<B: Broker>(
        self,
        broker: B,
        include: impl FnOnce(&mut Include<B>),
    ) -> Service<B> {
        let mut scope = Include::new();
        include(&mut scope);
        broker.declare(&scope.subscribers);
        let (sender, _) = watch::channel(false);
        let (stage, _) = watch::channel(Stage::Starting);
        Service {
            states: Arc::new(self.states),
            info: self.info,
            broker,
            subscribers: scope.subscribers,
            shutdown_timeout: self.shutdown_timeout,
            shutdown: ShutdownHandle {
                sender: Arc::new(sender),
            },
            stage: Arc::new(stage),
            probes: Probes::default(),
        }
    }
}

/// A runnable service.
pub trait App: Send + Sized + 'static {
    /// A handle that stops the service when fired.
    fn shutdown_handle(&self) -> ShutdownHandle;

    /// A handle that tells when the running service consumes every subscription, and what its
    /// queues hold.
    fn readiness(&self) -> Readiness;

    /// The service's health, readable from any task: its state (starting, running, draining,
    /// stopped) and each subscription's; what liveness and readiness probes read.
    fn health(&self) -> Health;

    /// The service's AsyncAPI 3.0 document: its queues, what it receives and sends on each, and
    /// the messages' payloads. See [`asyncapi`](crate::asyncapi).
    fn asyncapi(&self) -> serde_json::Value;

    /// Runs until `signal` resolves or the shutdown handle fires, then shuts down gracefully.
    fn run_until(
        self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = Result<(), RunError>> + Send;

    /// Runs until SIGINT (Ctrl-C), SIGTERM or the shutdown handle, then shuts down gracefully.
    ///
    /// # Errors
    ///
    /// [`RunError`] when a setting is wrong (all problems at once, before any network call), a
    /// queue is missing, or the signal handlers cannot be installed.
    fn run(self) -> impl Future<Output = Result<(), RunError>> + Send {
        async move {
            let signals = os_signals()?;
            self.run_until(signals).await
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
fn os_signals() -> Result<impl Future<Output = ()> + Send + 'static, RunError> {
    #[cfg(unix)]
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|error| RunError::Signal(error.to_string()))?;
    Ok(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown signal received");
    })
}

/// A service on a broker: what [`RustStream::with_broker`] returns.
#[derive(Debug)]
pub struct Service<B: Broker> {
    info: AppInfo,
    states: Arc<States>,
    broker: B,
    subscribers: Vec<B::Subscriber>,
    shutdown_timeout: Duration,
    shutdown: ShutdownHandle,
    stage: Arc<watch::Sender<Stage>>,
    probes: Probes,
}

impl<B: Broker> App for Service<B> {
    fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    fn readiness(&self) -> Readiness {
        Readiness {
            stage: self.stage.subscribe(),
        }
    }

    fn health(&self) -> Health {
        Health::new(self.stage.subscribe(), self.probes.clone())
    }

    fn asyncapi(&self) -> serde_json::Value {
        self.broker.asyncapi(&self.info, &self.subscribers)
    }

    async fn run_until(
        self,
        signal: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), RunError> {
        let shutdown = Shutdown {
            requested: self.shutdown.sender.subscribe(),
            timeout: self.shutdown_timeout,
        };
        let handle = self.shutdown.clone();
        let stage = self.stage.clone();
        let app = AppContext {
            info: self.info,
            states: self.states,
            shutdown,
            stage: self.stage,
            probes: self.probes,
        };
        let run = self.broker.run(app, self.subscribers);
        tokio::pin!(run);
        let result = tokio::select! {
            result = &mut run => result,
            () = signal => {
                handle.shutdown();
                run.await
            }
        };
        stage.send_replace(Stage::Ended);
        result
    }
}

/// Where a running app is.
#[derive(Clone)]
pub(crate) enum Stage {
    Starting,
    Consuming(Arc<dyn Inspect>),
    Draining,
    Ended,
}

impl Stage {
    pub(crate) fn state(&self) -> AppState {
        match self {
            Self::Starting => AppState::Starting,
            Self::Consuming(_) => AppState::Running,
            Self::Draining => AppState::Draining,
            Self::Ended => AppState::Stopped,
        }
    }
}

impl std::fmt::Debug for Stage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.state().as_str())
    }
}

/// What a broker's queues hold, for tests that wait for a service to finish its work.
pub trait Inspect: Send + Sync + 'static {
    /// Every queue the app has used (read, published to, dead-lettered to), with its counts.
    fn queues(&self) -> BoxFuture<'_, Result<Vec<QueueLoad>, String>>;
}

/// The messages one queue holds, as the queue reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueLoad {
    /// The queue's name.
    pub queue: String,
    /// Whether the app consumes it (an output or dead-letter queue it only writes to holds what
    /// it is sent until something else reads it).
    pub consumed: bool,
    /// Messages ready to be received.
    pub visible: u64,
    /// Messages received and not yet deleted or released.
    pub in_flight: u64,
    /// Messages whose delay has not ended.
    pub delayed: u64,
}

impl QueueLoad {
    /// A queue's load.
    pub fn new(
        queue: impl Into<String>,
        consumed: bool,
        visible: u64,
        in_flight: u64,
        delayed: u64,
    ) -> Self {
        Self {
            queue: queue.into(),
            consumed,
            visible,
            in_flight,
            delayed,
        }
    }

    /// Whether the queue holds nothing: no message visible, in flight or delayed.
    pub fn is_empty(&self) -> bool {
        self.visible + self.in_flight + self.delayed == 0
    }
}

/// Tells when a running app consumes every subscription. Cheap to clone.
#[derive(Clone)]
pub struct Readiness {
    stage: watch::Receiver<Stage>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("stage", &*self.stage.borrow())
            .finish()
    }
}

impl Readiness {
    /// Resolves once every subscription consumes (`true`), or the app has ended first, having
    /// failed to start or been stopped (`false`).
    pub async fn consuming(&self) -> bool {
        let mut stage = self.stage.clone();
        let seen = stage
            .wait_for(|stage| !matches!(stage, Stage::Starting))
            .await
            .map(|stage| matches!(&*stage, Stage::Consuming(_)));
        seen.unwrap_or(false)
    }

    /// What the app's queues hold now; `None` before the app consumes or after it ended.
    pub async fn queues(&self) -> Option<Result<Vec<QueueLoad>, String>> {
        let inspect = match &*self.stage.borrow() {
            Stage::Consuming(inspect) => inspect.clone(),
            _ => return None,
        };
        Some(inspect.queues().await)
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
    /// [`App::health`]).
    pub fn subscription_probe(&self, queue: &str) -> Arc<SubscriptionProbe> {
        self.probes.add(queue)
    }
}

/// Stops a running service gracefully. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    sender: Arc<watch::Sender<bool>>,
}

impl ShutdownHandle {
    /// Asks the service to stop: it stops receiving, lets running handlers finish, releases
    /// what it holds, and returns from `run`.
    pub fn shutdown(&self) {
        self.sender.send_replace(true);
    }
}

/// What a broker watches to know when to stop, and how long it may take.
#[derive(Debug, Clone)]
pub struct Shutdown {
    requested: watch::Receiver<bool>,
    timeout: Duration,
}

impl Shutdown {
    /// Resolves once shutdown is requested.
    pub async fn requested(&self) {
        let mut requested = self.requested.clone();
        let _ = requested.wait_for(|requested| *requested).await;
    }

    /// How long the whole stop may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// Why a service could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Settings that cannot work, all of them, found before any network call.
    #[error("{0}")]
    Config(ConfigErrors),
    /// A queue the service needs does not exist.
    #[error(
        "queue `{queue}` does not exist; create it, or declare it with `.create_if_missing()`"
    )]
    QueueMissing {
        /// The queue.
        queue: String,
    },
    /// SQS refused a startup call for a queue.
    #[error("queue `{queue}`: {error}")]
    Queue {
        /// The queue.
        queue: String,
        /// What SQS said.
        error: TransportError,
    },
    /// An existing queue's attribute contradicts its declaration in a way that would break it.
    #[error("queue `{queue}` has {attribute}={actual:?} but is declared with {attribute}={declared}; change the queue or the declaration")]
    QueueAttribute {
        /// The queue.
        queue: String,
        /// The SQS attribute.
        attribute: &'static str,
        /// What the declaration needs.
        declared: String,
        /// What the queue has.
        actual: String,
    },
    /// The dead-letter queue takes smaller messages than the queue it serves: a copy of a large
    /// message could never be sent, and the message would be held (on FIFO, with its group) for
    /// ever.
    #[error(
        "dead-letter queue `{dead_letter}` has MaximumMessageSize {dead_letter_maximum} but queue `{queue}` takes messages \
         up to {queue_maximum} bytes; set the dead-letter queue's MaximumMessageSize to at least {queue_maximum}"
    )]
    DeadLetterTooSmall {
        /// The queue consumed.
        queue: String,
        /// Its dead-letter queue.
        dead_letter: String,
        /// The queue's `MaximumMessageSize`.
        queue_maximum: usize,
        /// The dead-letter queue's `MaximumMessageSize`.
        dead_letter_maximum: usize,
    },
    /// A FIFO queue's `RedrivePolicy` names a dead-letter queue the consumer cannot reach, and
    /// the subscription declares none: a message out of attempts could only be left to SQS's
    /// redrive, which on FIFO moves the rest of its group with it (every release raises their
    /// receive counts too).
    #[error(
        "queue `{queue}`: its RedrivePolicy names dead-letter queue `{dead_letter}`, which cannot be reached ({error}); \
         on a FIFO queue a message out of attempts must be moved by the consumer, alone: grant access to it, or \
         declare a reachable one with `.dead_letter(..)`"
    )]
    DeadLetterUnreachable {
        /// The queue consumed.
        queue: String,
        /// The dead-letter queue of its policy.
        dead_letter: String,
        /// Why it could not be reached.
        error: TransportError,
    },
    /// The signal handlers could not be installed.
    #[error("cannot listen for SIGINT/SIGTERM: {0}")]
    Signal(String),
}

impl RunError {
    pub(crate) fn from_transport(queue: String, error: TransportError) -> Self {
        if error.kind() == Some(ErrorKind::QueueDoesNotExist) {
            Self::QueueMissing { queue }
        } else {
            Self::Queue { queue, error }
        }
    }
}
