//! Helpers for testing a service: [`TestApp`] runs it in the background of a test, and
//! [`eventually`] waits for what it does, on a paused clock (`#[tokio::test(start_paused = true)]`,
//! where waiting costs no real time) or in real time against a live server; [`Recorder`] shows
//! what each subscription handled, published and dead-lettered; and for testing a handler alone,
//! as a function, [`TestContext`] builds the context it is called with.
//!
//! ```
//! use rust_stream::prelude::*;
//! use rust_stream::testing::{eventually, TestApp};
//! # use std::sync::atomic::{AtomicU32, Ordering};
//! # use std::sync::Arc;
//! # #[derive(serde::Deserialize)] struct Ping {}
//! # struct Pong(Arc<AtomicU32>);
//! # impl Handle<Ping> for Pong {
//! #     async fn handle(&self, _: &Ping, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
//! #         self.0.fetch_add(1, Ordering::SeqCst);
//! #         Ok(())
//! #     }
//! # }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let broker = SqsBroker::in_process();
//! let pings = broker.publisher(SqsQueue::new("pings").create_if_missing());
//! let handled = Arc::new(AtomicU32::new(0));
//! let app = RustStream::new(AppInfo::new("pong", "0.1.0")).with_broker(broker, |b| {
//!     b.include(subscriber(SqsQueue::new("pings").create_if_missing(), Pong(handled.clone())).build());
//! });
//! // Returns once the service consumes, or with the error that kept it from starting.
//! let running = TestApp::spawn(app).await.unwrap();
//! pings.raw("{}").send().await.unwrap();
//! eventually("the ping handled", async || handled.load(Ordering::SeqCst) == 1).await;
//! running.drain().await; // nothing left visible, in flight or delayed in the queues it reads
//! running.stop().await.unwrap();
//! # }
//! ```

use std::fmt::Debug;

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::app::{App, QueueLoad, Readiness, RunError, ShutdownHandle};
pub use crate::record::{DeadLettered, Handled, Recorder, Settled};

mod context;

pub use context::TestContext;

/// How long [`eventually`] and [`TestApp::drain`] wait before they fail: short in real time, and
/// no real time at all on a paused clock.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(30);

/// How often a condition is looked at again.
const STEP: Duration = Duration::from_millis(10);

/// How many looks in a row must find the app's queues empty before [`TestApp::drain`] trusts it.
const EMPTY_LOOKS: u32 = 3;

/// A service running in the background of a test.
#[derive(Debug)]
pub struct TestApp {
    shutdown: ShutdownHandle,
    readiness: Readiness,
    task: JoinHandle<Result<(), RunError>>,
}

impl TestApp {
    /// Runs `app` in a task and returns once every subscription consumes.
    ///
    /// # Errors
    ///
    /// What the app's `run` returned when it could not start (a setting, a missing queue): the
    /// test sees the cause at once, not as a condition that never came true.
    ///
    /// # Panics
    ///
    /// If the app's task panicked, or the app returned without error before it consumed.
    pub async fn spawn(app: impl App) -> Result<Self, RunError> {
        let shutdown = app.shutdown_handle();
        let readiness = app.readiness();
        let mut task = tokio::spawn(app.run_until(std::future::pending()));
        if readiness.consuming().await {
            return Ok(Self {
                shutdown,
                readiness,
                task,
            });
        }
        match (&mut task).await.expect("the app's task panicked") {
            Err(error) => Err(error),
            Ok(()) => panic!("the app returned before it consumed, without an error"),
        }
    }

    /// The app's shutdown handle.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Whether the app has returned (after a shutdown, say).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// What every queue the app has used holds now (read, published to, dead-lettered to).
    ///
    /// # Panics
    ///
    /// If the app no longer runs, or the queues cannot be read.
    pub async fn queues(&self) -> Vec<QueueLoad> {
        match self.readiness.queues().await {
            Some(Ok(loads)) => loads,
            Some(Err(error)) => panic!("cannot read the app's queues: {error}"),
            None => panic!("the app no longer runs"),
        }
    }

    /// Waits until every queue the app consumes holds nothing visible, in flight or delayed: the
    /// work sent so far is done, retries and dead-letter moves included. (Queues it only writes
    /// to, its dead-letter queues and outputs nobody in the app reads, keep what they were sent.)
    ///
    /// # Panics
    ///
    /// After [`DEFAULT_PATIENCE`], showing what the queues still held.
    pub async fn drain(&self) {
        // A server may count a message it is handing out as neither visible nor in flight for an
        // instant (LocalStack does), so emptiness must be seen on several looks in a row.
        let mut empty_looks = 0;
        eventually("every queue the app consumes empty", async || {
            let loads = self.queues().await;
            let busy: Vec<QueueLoad> = loads
                .into_iter()
                .filter(|load| load.consumed && !load.is_empty())
                .collect();
            empty_looks = if busy.is_empty() { empty_looks + 1 } else { 0 };
            if empty_looks >= EMPTY_LOOKS {
                Ok(())
            } else {
                Err(busy)
            }
        })
        .await;
    }

    /// Shuts the app down gracefully and returns what `run` returned.
    ///
    /// # Errors
    ///
    /// What the app's run returned.
    ///
    /// # Panics
    ///
    /// If the app's task panicked.
    pub async fn stop(self) -> Result<(), RunError> {
        self.shutdown.shutdown();
        self.task.await.expect("the app's task panicked")
    }
}

/// Where [`on_each_backend`] runs a test body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendKind {
    /// The in-process account, on a paused clock.
    InProcess,
    /// The SQS-compatible server named by [`LIVE_ENDPOINT_VAR`], in real time.
    Live,
}

/// The environment variable that names a live SQS-compatible endpoint (LocalStack, say) for
/// [`on_each_backend`]; the project's `scripts/test.sh` sets it.
pub const LIVE_ENDPOINT_VAR: &str = "RUST_STREAM_LIVE_ENDPOINT";

/// The live endpoint named by [`LIVE_ENDPOINT_VAR`], or `None` after saying that `what` (a live
/// test or leg) is skipped.
///
/// The note is written straight to the terminal, past libtest's capture of `eprintln!`, so a
/// skipped live test shows in the test output. Under `CI` a missing endpoint panics instead: a
/// live test is never skipped there.
///
/// # Panics
///
/// Under `CI` when [`LIVE_ENDPOINT_VAR`] is unset or empty.
pub fn live_endpoint(what: &str) -> Option<String> {
    use std::io::Write as _;
    let endpoint = std::env::var(LIVE_ENDPOINT_VAR)
        .ok()
        .filter(|value| !value.is_empty());
    if endpoint.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "{LIVE_ENDPOINT_VAR} is not set under CI: run the tests through scripts/test.sh, which \
             starts LocalStack, so that {what} runs"
        );
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIPPED {what}: {LIVE_ENDPOINT_VAR} is not set; scripts/test.sh starts LocalStack and sets it"
        );
    }
    endpoint
}

/// One backend a test body runs on: a fresh broker, and names that keep this run's queues apart
/// from other runs on a shared server.
#[derive(Debug, Clone)]
pub struct Backend {
    broker: crate::SqsBroker,
    kind: BackendKind,
    run: String,
}

impl Backend {
    /// The broker to build the service and its publishers on.
    pub fn broker(&self) -> &crate::SqsBroker {
        &self.broker
    }

    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// A queue name unique to this run: `base` with the run's id before any `.fifo`.
    pub fn queue_name(&self, base: &str) -> String {
        match base.strip_suffix(".fifo") {
            Some(stem) => format!("{stem}-{}.fifo", self.run),
            None => format!("{base}-{}", self.run),
        }
    }
}

/// Runs one test body on each backend: the in-process account on a paused clock, then, when
/// [`LIVE_ENDPOINT_VAR`] names an endpoint, that server in real time (region `us-east-1`, test
/// credentials). Call it from a plain `#[test]`, not from inside a runtime.
///
/// ```
/// use rust_stream::prelude::*;
/// use rust_stream::testing::on_each_backend;
///
/// #[derive(serde::Deserialize)]
/// struct Ping {}
///
/// struct Pong;
///
/// impl Handle<Ping> for Pong {
///     async fn handle(&self, _: &Ping, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
///         Ok(())
///     }
/// }
///
/// # fn main() {
/// on_each_backend(async |backend| {
///     let pings = SqsQueue::new(backend.queue_name("pings")).create_if_missing();
///     let app = RustStream::new(AppInfo::new("pong", "0.1.0")).with_broker(backend.broker().clone(), |b| {
///         b.include(subscriber(pings.clone(), Pong).build());
///     });
///     let running = rust_stream::testing::TestApp::spawn(app).await.unwrap();
///     backend.broker().publisher(pings).raw("{}").send().await.unwrap();
///     running.drain().await;
///     running.stop().await.unwrap();
/// });
/// # }
/// ```
///
/// # Panics
///
/// When the body panics; and under `CI` when no live endpoint is named, so that a live leg is
/// never skipped silently there. Elsewhere a missing endpoint is said on standard error.
pub fn on_each_backend(body: impl AsyncFn(Backend)) {
    let in_process = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a test runtime");
    in_process.block_on(body(Backend {
        broker: crate::SqsBroker::in_process(),
        kind: BackendKind::InProcess,
        run: run_id(),
    }));
    drop(in_process);
    let Some(endpoint) = live_endpoint("live leg") else {
        return;
    };
    live(&endpoint, body);
}

#[cfg(feature = "aws")]
fn live(endpoint: &str, body: impl AsyncFn(Backend)) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a test runtime");
    runtime.block_on(async {
        let broker = crate::SqsBroker::aws()
            .endpoint(endpoint)
            .region("us-east-1")
            .test_credentials()
            .connect()
            .await
            .expect("the live endpoint's broker");
        body(Backend {
            broker,
            kind: BackendKind::Live,
            run: run_id(),
        })
        .await;
    });
}

#[cfg(not(feature = "aws"))]
fn live(_endpoint: &str, _body: impl AsyncFn(Backend)) {
    panic!("{LIVE_ENDPOINT_VAR} names a live endpoint, but rust-stream was built without its `aws` feature");
}

/// A short id, unique enough to keep concurrent runs' queues apart.
fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// What a condition of [`eventually`] observed: whether it holds, and what to show if it never
/// does.
pub trait Observation {
    /// Whether the awaited condition holds.
    fn holds(&self) -> bool;
    /// What was observed, for the failure message.
    fn shown(&self) -> String;
}

impl Observation for bool {
    fn holds(&self) -> bool {
        *self
    }
    fn shown(&self) -> String {
        self.to_string()
    }
}

/// `Ok` holds; `Err` carries the value observed, shown if the wait fails.
impl<T: Debug, E: Debug> Observation for Result<T, E> {
    fn holds(&self) -> bool {
        self.is_ok()
    }
    fn shown(&self) -> String {
        format!("{self:?}")
    }
}

/// Waits until `condition` holds, looking every 10 ms of tokio time, for at most
/// [`DEFAULT_PATIENCE`]. The condition is async, so it may read queues; return `bool`, or a
/// `Result` whose `Err` shows what was seen last. The patience bounds the looks too: a look
/// that does not answer (a stalled server) fails the wait when the patience runs out.
///
/// # Panics
///
/// When the condition does not hold in time, naming `what` and the last observation.
pub async fn eventually<O: Observation>(what: &str, condition: impl AsyncFnMut() -> O) {
    eventually_within(what, DEFAULT_PATIENCE, condition).await;
}

/// [`eventually`], waiting at most `patience`.
///
/// # Panics
///
/// When the condition does not hold in time, naming `what` and the last observation.
pub async fn eventually_within<O: Observation>(
    what: &str,
    patience: Duration,
    mut condition: impl AsyncFnMut() -> O,
) {
    let deadline = Instant::now() + patience;
    let mut last_seen: Option<String> = None;
    loop {
        // A look that itself hangs (a call to a stalled server) must not outlast the patience:
        // in real time nothing else would ever end the wait.
        let Ok(observed) = tokio::time::timeout_at(deadline, condition()).await else {
            match last_seen {
                // The patience ran out during a look; the one before tells what was wrong.
                Some(seen) => panic!("waited {patience:?} for {what}; last observed: {seen}"),
                None => panic!(
                    "waited {patience:?} for {what}; the first look did not answer in that time"
                ),
            }
        };
        if observed.holds() {
            return;
        }
        last_seen = Some(observed.shown());
        if Instant::now() >= deadline {
            panic!(
                "waited {patience:?} for {what}; last observed: {}",
                observed.shown()
            );
        }
        tokio::time::sleep(STEP).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn eventually_waits_for_an_async_condition() {
        let started = Instant::now();
        let mut looks = 0;
        eventually("three looks", async || {
            looks += 1;
            looks == 3
        })
        .await;
        assert_eq!(started.elapsed(), STEP * 2);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(
        expected = "waited 1s for a hung look; the first look did not answer in that time"
    )]
    async fn a_look_that_never_answers_fails_when_the_patience_runs_out() {
        eventually_within("a hung look", Duration::from_secs(1), async || {
            std::future::pending::<bool>().await
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "waited 1s for a slow look; last observed: Err(1)")]
    async fn a_look_cut_short_by_the_patience_reports_the_one_before() {
        let mut looks = 0;
        eventually_within("a slow look", Duration::from_secs(1), async || {
            looks += 1;
            if looks > 1 {
                std::future::pending::<()>().await;
            }
            Err::<(), u32>(looks)
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "waited 1s for the count to reach 5; last observed: Err(2)")]
    async fn a_condition_that_never_holds_fails_fast_with_what_it_saw() {
        eventually_within("the count to reach 5", Duration::from_secs(1), async || {
            Err::<(), u32>(2)
        })
        .await;
    }
}
