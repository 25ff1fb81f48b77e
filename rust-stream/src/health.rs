//! Health of a running service, for an orchestrator's probes: where the app is in its life, and
//! for each subscription whether it consumes and when it last received.
//!
//! ```
//! use std::time::Duration;
//!
//! use rust_stream::health::AppState;
//! use rust_stream::prelude::*;
//!
//! struct Accept;
//!
//! impl Handle<serde_json::Value> for Accept {
//!     async fn handle(&self, _: &serde_json::Value, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
//!         Ok(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let broker = SqsBroker::in_process();
//! let jobs = SqsQueue::new("jobs").create_if_missing().wait(Duration::from_secs(1));
//! let app = RustStream::new(AppInfo::new("jobs", "0.1.0")).with_broker(broker, |b| {
//!     b.include(subscriber(jobs, Accept).build());
//! });
//! let health = app.health(); // readable from any task: an HTTP probe, a watchdog
//! assert_eq!(health.state(), AppState::Starting);
//! assert!(!health.is_ready());
//!
//! let stop = app.shutdown_handle();
//! let running = tokio::spawn(app.run_until(std::future::pending()));
//! health.wait_for(AppState::Running).await;
//! assert!(health.is_live());
//! let report = health.report();
//! assert_eq!(report.subscriptions[0].queue, "jobs");
//!
//! stop.shutdown();
//! running.await.unwrap().unwrap();
//! assert_eq!(health.state(), AppState::Stopped);
//! assert!(!health.is_live());
//! # }
//! ```
//!
//! The states follow each other in one order: [`AppState::Starting`] (settings checked, queues
//! resolved, consumers started), [`AppState::Running`] (every subscription consumes),
//! [`AppState::Draining`] (shutdown requested: no new receive, running handlers finish, held
//! messages are released), [`AppState::Stopped`] (`run` returned, or is returning). An app whose
//! start fails goes from `Starting` to `Stopped`.
//!
//! *Live* means the process should be left running: any state but `Stopped`. *Ready* means it
//! does its work: `Running`, and every subscription's last receive answered (a subscription
//! whose receives fail, SQS unreachable or access denied, is not consuming until one succeeds).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

use crate::task::BoxFuture;

/// Where a service is in its life; serialized as its lower-case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum AppState {
    /// Checking its settings, resolving queues, starting consumers.
    Starting,
    /// Every subscription consumes.
    Running,
    /// Shutdown was requested: no new receive, running handlers finish, held messages are
    /// released.
    Draining,
    /// `run` has returned, or is returning.
    Stopped,
}

impl AppState {
    /// The state's name, lower case, as a probe or a log shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Running => "running",
            Self::Draining => "draining",
            Self::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A service's health, readable from any task. Cheap to clone.
#[derive(Clone)]
pub struct Health {
    stage: watch::Receiver<Stage>,
    probes: Probes,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("state", &self.state())
            .finish()
    }
}

impl Health {
    pub(crate) fn new(stage: watch::Receiver<Stage>, probes: Probes) -> Self {
        Self { stage, probes }
    }

    /// Where the service is now.
    pub fn state(&self) -> AppState {
        self.stage.borrow().state()
    }

    /// Whether the process should be left running: any state but [`AppState::Stopped`].
    pub fn is_live(&self) -> bool {
        self.state() != AppState::Stopped
    }

    /// Whether the service does its work: [`AppState::Running`], every subscription consuming,
    /// and every worker (an outbox relay) keeping up.
    pub fn is_ready(&self) -> bool {
        self.state() == AppState::Running
            && self.probes.all().iter().all(|probe| probe.consuming())
            && self.probes.workers().iter().all(|probe| probe.is_ready())
    }

    /// The state, every subscription's health and every worker's, read now.
    pub fn report(&self) -> HealthReport {
        HealthReport {
            state: self.state(),
            subscriptions: self.probes.all().iter().map(|probe| probe.read()).collect(),
            workers: self
                .probes
                .workers()
                .iter()
                .map(|probe| probe.read())
                .collect(),
        }
    }

    /// Resolves once the service has reached `state` or a later one (a service that stopped
    /// without running resolves a wait for `Running` too; [`state`](Self::state) tells).
    pub async fn wait_for(&self, state: AppState) {
        let mut stage = self.stage.clone();
        let _ = stage
            .wait_for(|stage| stage.state() as u8 >= state as u8)
            .await;
    }
}

/// A service's health at one moment: what [`Health::report`] reads. Serialized as the probes
/// over HTTP show it: `{"state":"running","subscriptions":[{"queue":..,"consuming":true,
/// "last_receive_ms":..,"last_message_ms":..,"receive_failures":0}]}`, times in milliseconds
/// since 1970 (`null` for never).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct HealthReport {
    /// Where the service is.
    pub state: AppState,
    /// Each subscription, in the order the app includes them.
    pub subscriptions: Vec<SubscriptionHealth>,
    /// Each worker the app runs beside its subscriptions (an outbox relay), in the order added;
    /// left out of the serialized report when there is none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerHealth>,
}

/// One worker's health: whether it keeps up, and what it says of itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct WorkerHealth {
    /// The worker's name.
    pub name: String,
    /// Whether it keeps up: what readiness reads.
    pub ready: bool,
    /// What it last said of itself (an outbox relay: its backlog, or why it cannot relay).
    pub status: String,
}

/// One subscription's health.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct SubscriptionHealth {
    /// The queue it reads.
    pub queue: String,
    /// Whether it consumes: its receive loop runs and its last receive answered.
    pub consuming: bool,
    /// When a receive last answered, with messages or without (a long poll that found nothing
    /// still shows the queue reachable).
    #[serde(rename = "last_receive_ms", serialize_with = "milliseconds_since_1970")]
    pub last_receive: Option<SystemTime>,
    /// When a receive last brought messages.
    #[serde(rename = "last_message_ms", serialize_with = "milliseconds_since_1970")]
    pub last_message: Option<SystemTime>,
    /// Receives failed in a row since the last that answered.
    pub receive_failures: u32,
}

/// A time as milliseconds since 1970, as probes and dashboards read it; `null` for never.
fn milliseconds_since_1970<S: serde::Serializer>(
    time: &Option<SystemTime>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let milliseconds = time
        .and_then(|time| time.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map(|since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX));
    serde::Serialize::serialize(&milliseconds, serializer)
}

/// The subscriptions' and workers' probes of one app, in the order they were made.
#[derive(Debug, Clone, Default)]
pub(crate) struct Probes {
    subscriptions: Arc<Mutex<Vec<Arc<SubscriptionProbe>>>>,
    workers: Arc<Mutex<Vec<Arc<WorkerProbe>>>>,
}

impl Probes {
    /// A probe for the worker called `name`, reported from now on: not ready until it says so.
    pub(crate) fn add_worker(&self, name: &str) -> Arc<WorkerProbe> {
        let probe = Arc::new(WorkerProbe {
            name: name.to_owned(),
            ready: std::sync::atomic::AtomicBool::new(false),
            status: Mutex::new("starting".to_owned()),
        });
        self.workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(probe.clone());
        probe
    }

    fn workers(&self) -> Vec<Arc<WorkerProbe>> {
        self.workers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A probe for the subscription of `queue`, reported from now on.
    pub(crate) fn add(&self, queue: &str) -> Arc<SubscriptionProbe> {
        let probe = Arc::new(SubscriptionProbe {
            queue: queue.to_owned(),
            loop_state: AtomicU8::new(IDLE),
            last_receive_ms: AtomicU64::new(NEVER),
            last_message_ms: AtomicU64::new(NEVER),
            receive_failures: AtomicU32::new(0),
        });
        self.subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(probe.clone());
        probe
    }

    fn all(&self) -> Vec<Arc<SubscriptionProbe>> {
        self.subscriptions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// No receive yet.
const NEVER: u64 = 0;

/// A receive loop that has not started, or whose last receive failed.
const IDLE: u8 = 0;
/// A receive loop that runs, whose last receive (if any) answered.
const CONSUMING: u8 = 1;
/// A receive loop that has ended.
const ENDED: u8 = 2;

/// What a subscription's receive loop tells its health: atomics, so a probe reads without
/// holding up a receive.
#[derive(Debug)]
pub struct SubscriptionProbe {
    queue: String,
    /// [`IDLE`], [`CONSUMING`] or [`ENDED`]; once ended, a receive still in flight answers
    /// without making the subscription consume again.
    loop_state: AtomicU8,
    last_receive_ms: AtomicU64,
    last_message_ms: AtomicU64,
    receive_failures: AtomicU32,
}

impl SubscriptionProbe {
    /// The receive loop has started: its queue was found at startup, so it consumes until a
    /// receive fails (the first long poll may take its whole wait to answer).
    pub fn started(&self) {
        self.move_state(IDLE, CONSUMING);
    }

    /// A receive answered, with `messages` messages.
    pub fn received(&self, messages: usize) {
        let now = now_ms();
        self.last_receive_ms.store(now, Ordering::Relaxed);
        if messages > 0 {
            self.last_message_ms.store(now, Ordering::Relaxed);
        }
        self.receive_failures.store(0, Ordering::Relaxed);
        self.move_state(IDLE, CONSUMING);
    }

    /// A receive failed: the subscription does not consume until one answers.
    pub fn receive_failed(&self) {
        self.receive_failures.fetch_add(1, Ordering::Relaxed);
        self.move_state(CONSUMING, IDLE);
    }

    /// The receive loop has ended.
    pub fn stopped(&self) {
        self.loop_state.store(ENDED, Ordering::Relaxed);
    }

    /// Whether the subscription consumes now.
    fn consuming(&self) -> bool {
        self.loop_state.load(Ordering::Relaxed) == CONSUMING
    }

    /// Moves from `from` to `to`, and from nothing else: an ended loop stays ended.
    fn move_state(&self, from: u8, to: u8) {
        let _ = self
            .loop_state
            .compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed);
    }

    fn read(&self) -> SubscriptionHealth {
        let time = |ms: u64| (ms != NEVER).then(|| UNIX_EPOCH + Duration::from_millis(ms));
        SubscriptionHealth {
            queue: self.queue.clone(),
            consuming: self.consuming(),
            last_receive: time(self.last_receive_ms.load(Ordering::Relaxed)),
            last_message: time(self.last_message_ms.load(Ordering::Relaxed)),
            receive_failures: self.receive_failures.load(Ordering::Relaxed),
        }
    }
}

/// What a worker tells its health: whether it keeps up, and a line about how it does.
#[derive(Debug)]
pub struct WorkerProbe {
    name: String,
    ready: std::sync::atomic::AtomicBool,
    status: Mutex<String>,
}

impl WorkerProbe {
    /// Reports whether the worker keeps up (`ready`), and how it does, in a line for a person.
    pub fn report(&self, ready: bool, status: impl Into<String>) {
        *self.status.lock().unwrap_or_else(PoisonError::into_inner) = status.into();
        self.ready.store(ready, Ordering::Relaxed);
    }

    fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    fn read(&self) -> WorkerHealth {
        WorkerHealth {
            name: self.name.clone(),
            ready: self.is_ready(),
            status: self
                .status
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
        }
    }
}

/// Wall-clock milliseconds since 1970 (never 0, which means "never").
fn now_ms() -> u64 {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    ms.max(1)
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
