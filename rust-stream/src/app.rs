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

pub use crate::broker::{AppContext, AppInfo, RunError, Shutdown};
use crate::broker::{Broker, Include};
use crate::health::{Health, Probes, Stage};
pub use crate::health::{Inspect, QueueLoad};
use crate::state::States;
use crate::worker::{ErasedWorker, WorkerContext};

/// How long a stop takes at most unless set: within Kubernetes' default grace period of 30 s. An
/// idle service stops in about a second whatever its budget.
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
    /// other consumers. The stop ends as soon as nothing is left to do: an idle service in about
    /// a second, whatever its long poll.
    ///
    /// On SQS a receive in flight is waited for a second, and while messages are held (so that
    /// it cannot take back what the stop releases), then given up; SQS may still hand it
    /// messages, hidden for the receive's visibility timeout:
    /// [`RECEIVE_VISIBILITY_TIMEOUT`](crate::RECEIVE_VISIBILITY_TIMEOUT) (10 s) at most.
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
        let (subscribers, workers) = scope.into_parts();
        let subscribers: Vec<B::Subscriber> = subscribers
            .into_iter()
            .map(|subscriber| broker.adopt(subscriber))
            .collect();
        broker.declare(&subscribers);
        let (sender, _) = watch::channel(false);
        let (stage, _) = watch::channel(Stage::Starting);
        Service {
            states: Arc::new(self.states),
            info: self.info,
            broker,
            subscribers,
            workers,
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
    workers: Vec<ErasedWorker>,
    shutdown_timeout: Duration,
    shutdown: ShutdownHandle,
    stage: Arc<watch::Sender<Stage>>,
    probes: Probes,
}

impl<B: Broker> Service<B> {
    /// The app's context, broker and subscribers, for a host other than [`App::run`]: the
    /// Lambda host, which serves events instead of running the broker.
    #[cfg(feature = "lambda")]
    pub(crate) fn into_hosted(self) -> (AppContext, B, Vec<B::Subscriber>) {
        let shutdown = Shutdown::new(self.shutdown.sender.subscribe(), self.shutdown_timeout);
        let app = AppContext::new(self.info, self.states, shutdown, self.stage, self.probes);
        (app, self.broker, self.subscribers)
    }
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
        let shutdown = Shutdown::new(self.shutdown.sender.subscribe(), self.shutdown_timeout);
        let handle = self.shutdown.clone();
        // When the stop began: the workers stop within the same budget as the subscriptions,
        // side by side with them, not in a budget of their own after them.
        let mut asked = self.shutdown.sender.subscribe();
        let stop_began = tokio::spawn(async move {
            let _ = asked.wait_for(|asked| *asked).await;
            tokio::time::Instant::now()
        });
        let stage = self.stage.clone();
        let app = AppContext::new(self.info, self.states, shutdown, self.stage, self.probes);
        let workers = start_workers(self.workers, &app, stage.subscribe());
        let run = self.broker.run(app, self.subscribers);
        tokio::pin!(run);
        let result = tokio::select! {
            result = &mut run => result,
            () = signal => {
                handle.shutdown();
                run.await
            }
        };
        // The broker has stopped (or never started): so do the workers, within the stop's time.
        handle.shutdown();
        let began = stop_began
            .await
            .unwrap_or_else(|_| tokio::time::Instant::now());
        let stopped = futures_util::future::join_all(workers);
        if tokio::time::timeout_at(began + self.shutdown_timeout, stopped)
            .await
            .is_err()
        {
            tracing::warn!("a worker did not stop within the shutdown timeout; it is left to end with the runtime");
        }
        stage.send_replace(Stage::Ended);
        result
    }
}

/// Spawns each worker, to run once the app consumes (not at all if it ends first).
fn start_workers(
    workers: Vec<ErasedWorker>,
    app: &AppContext,
    stage: watch::Receiver<Stage>,
) -> Vec<tokio::task::JoinHandle<()>> {
    workers
        .into_iter()
        .map(|worker| {
            let context =
                WorkerContext::new(app.shutdown().clone(), app.worker_probe(&worker.name));
            let readiness = Readiness {
                stage: stage.clone(),
            };
            tokio::spawn(async move {
                if readiness.consuming().await {
                    (worker.start)(context).await;
                }
            })
        })
        .collect()
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
