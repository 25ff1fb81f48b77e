//! Helpers for testing a service: [`TestApp`] runs it in the background of a test, and
//! [`eventually`] waits for what it does, on a paused clock (`#[tokio::test(start_paused = true)]`,
//! where waiting costs no real time) or in real time against a live server; [`Recorder`] shows
//! what each subscription handled, published and dead-lettered; and for testing a handler alone,
//! as a function, [`TestContext`] builds the context it is called with.
//!
//! For live tests, [`on_each_backend`] runs one test body on the in-process account and on a
//! LocalStack, which [`LocalStack`] reuses (named by [`LIVE_ENDPOINT_VAR`]) or installs and starts
//! for the test process, with no Docker; [`QueueNames`] keeps each run's queues apart on it.
//! `docs/testing.md` shows a crate's live test from scratch.
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
use std::future::Future;
use std::panic::Location;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::app::{App, QueueLoad, Readiness, RunError, ShutdownHandle};
pub use crate::record::{Batch, DeadLettered, Handled, Recorder, Settled};

mod backend;
mod context;
#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub mod lambda;
mod localstack;

pub use backend::{
    live_endpoint, on_each_backend, on_each_backend_in_real_time, Backend, BackendKind, QueueNames,
    SKIP_LIVE_VAR,
};
#[cfg(feature = "postgres")]
pub use backend::{live_postgres_url, POSTGRES_URL_VAR};
pub use context::{take_transaction, TestBatch, TestContext};
#[cfg(feature = "aws")]
pub use localstack::live_broker;
pub use localstack::{
    install_dir, LocalStack, LocalStackError, LIVE_ENDPOINT_VAR, LIVE_POLL_SECONDS,
    LOCALSTACK_DIR_VAR,
};

/// How long [`eventually`] and [`TestApp::drain`] wait before they fail: short in real time, and
/// no real time at all on a paused clock.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(30);

/// How often a condition is looked at again.
const STEP: Duration = Duration::from_millis(10);

/// How many looks in a row must find the app's queues empty before [`TestApp::drain`] trusts it.
const EMPTY_LOOKS: u32 = 3;

/// Awaits `work`, which waits for something outside tokio's clock (a query on a SQLite or
/// PostgreSQL pool, a connection being opened), with a paused clock held still meanwhile: the
/// way a test body on a paused clock (`#[tokio::test(start_paused = true)]`, the in-process leg
/// of [`on_each_backend`]) makes its own database calls.
///
/// On a paused clock tokio moves time to the next timer whenever every task waits, and a task
/// waiting for a database's answer looks idle to it: sqlx's pool acquire timeout then fires at
/// once (`PoolTimedOut`). The library's stores hold the clock this way around each of their own
/// calls; wrap yours (creating tables, counting rows) in it. A query a handler makes through the
/// inbox's transaction needs nothing: the connection is already held, and no timeout of sqlx's
/// runs around the query (at most, the clock moves to the next timer meanwhile, as it does
/// whenever the service waits). On a clock that runs (a live leg, `#[tokio::test]` without
/// `start_paused`, or a multi-thread runtime) it is `work.await`, at the cost of a blocking
/// thread for the call on a current-thread runtime.
///
/// ```
/// use std::time::Duration;
/// use rust_stream::testing::hold_the_clock;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // An answer from another thread, which tokio's clock does not see: a database's, say.
/// let answer = || {
///     let (sender, receiver) = tokio::sync::oneshot::channel();
///     std::thread::spawn(move || {
///         std::thread::sleep(Duration::from_millis(50));
///         let _ = sender.send(42);
///     });
///     receiver
/// };
/// // A paused clock jumps to the 30 s timeout while the thread works ...
/// assert!(tokio::time::timeout(Duration::from_secs(30), answer()).await.is_err());
/// // ... and stands still while it is held.
/// let held = hold_the_clock(tokio::time::timeout(Duration::from_secs(30), answer())).await;
/// assert_eq!(held.unwrap().unwrap(), 42);
/// # }
/// ```
pub async fn hold_the_clock<F: Future>(work: F) -> F::Output {
    crate::store::hold_the_clock(work).await
}

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
    /// After [`DEFAULT_PATIENCE`], showing what the queues still held and naming the caller's
    /// line.
    #[track_caller]
    pub fn drain(&self) -> impl Future<Output = ()> + '_ {
        let caller = Location::caller();
        async move {
            // A server may count a message it is handing out as neither visible nor in flight for
            // an instant (LocalStack does), so emptiness must be seen on several looks in a row.
            let mut empty_looks = 0;
            wait_until(
                "every queue the app consumes empty",
                DEFAULT_PATIENCE,
                async || {
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
                },
                caller,
            )
            .await;
        }
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
/// A plain function that returns the wait, so that a failure names the line that called it (not
/// one inside this crate): `eventually(..).await` reads as an `async fn` would.
///
/// # Panics
///
/// When the condition does not hold in time, naming `what`, the last observation and the
/// caller's file and line.
#[track_caller]
pub fn eventually<'a, O, C>(what: &'a str, condition: C) -> impl Future<Output = ()> + 'a
where
    O: Observation + 'a,
    C: AsyncFnMut() -> O + 'a,
{
    wait_until(what, DEFAULT_PATIENCE, condition, Location::caller())
}

/// [`eventually`], waiting at most `patience`.
///
/// # Panics
///
/// When the condition does not hold in time, naming `what`, the last observation and the
/// caller's file and line.
#[track_caller]
pub fn eventually_within<'a, O, C>(
    what: &'a str,
    patience: Duration,
    condition: C,
) -> impl Future<Output = ()> + 'a
where
    O: Observation + 'a,
    C: AsyncFnMut() -> O + 'a,
{
    wait_until(what, patience, condition, Location::caller())
}

/// The wait of [`eventually`], failing in the name of `caller`.
async fn wait_until<O: Observation>(
    what: &str,
    patience: Duration,
    mut condition: impl AsyncFnMut() -> O,
    caller: &'static Location<'static>,
) {
    let deadline = Instant::now() + patience;
    let mut last_seen: Option<String> = None;
    loop {
        // A look that itself hangs (a call to a stalled server) must not outlast the patience:
        // in real time nothing else would ever end the wait.
        let Ok(observed) = tokio::time::timeout_at(deadline, condition()).await else {
            match last_seen {
                // The patience ran out during a look; the one before tells what was wrong.
                Some(seen) => {
                    panic!("waited {patience:?} for {what}; last observed: {seen} (at {caller})")
                }
                None => panic!(
                    "waited {patience:?} for {what}; the first look did not answer in that time \
                     (at {caller})"
                ),
            }
        };
        if observed.holds() {
            return;
        }
        last_seen = Some(observed.shown());
        if Instant::now() >= deadline {
            panic!(
                "waited {patience:?} for {what}; last observed: {} (at {caller})",
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
