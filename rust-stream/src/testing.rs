//! Helpers for testing a service: [`TestApp`] runs it in the background of a test, and
//! [`eventually`] waits for what it does, on a paused clock (`#[tokio::test(start_paused = true)]`,
//! where waiting costs no real time) or in real time against a live server.
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
//! running.drain().await; // nothing left visible, in flight or delayed in any of its queues
//! running.stop().await.unwrap();
//! # }
//! ```

use std::fmt::Debug;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::app::{App, QueueLoad, Readiness, RunError, ShutdownHandle};

/// How long [`eventually`] and [`TestApp::drain`] wait before they fail: short in real time, and
/// no real time at all on a paused clock.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(30);

/// How often a condition is looked at again.
const STEP: Duration = Duration::from_millis(10);

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

    /// Waits until every queue the app has used holds nothing visible, in flight or delayed:
    /// the work sent so far is done, retries and dead-letter moves included.
    ///
    /// # Panics
    ///
    /// After [`DEFAULT_PATIENCE`], showing what the queues still held.
    pub async fn drain(&self) {
        eventually("every queue of the app empty", async || {
            let loads = self.queues().await;
            let busy: Vec<QueueLoad> = loads.into_iter().filter(|load| !load.is_empty()).collect();
            if busy.is_empty() {
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
/// `Result` whose `Err` shows what was seen last.
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
    let started = Instant::now();
    loop {
        let observed = condition().await;
        if observed.holds() {
            return;
        }
        if started.elapsed() >= patience {
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
    #[should_panic(expected = "waited 1s for the count to reach 5; last observed: Err(2)")]
    async fn a_condition_that_never_holds_fails_fast_with_what_it_saw() {
        eventually_within("the count to reach 5", Duration::from_secs(1), async || {
            Err::<(), u32>(2)
        })
        .await;
    }
}
