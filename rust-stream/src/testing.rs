//! Helpers for testing a service on the in-process broker, usually on a paused clock
//! (`#[tokio::test(start_paused = true)]`), where waiting costs no real time; and for testing a
//! handler alone, as a function: [`TestContext`] builds the context it is called with.
//!
//! ```
//! use rust_stream::prelude::*;
//! use rust_stream::testing::TestApp;
//! # #[derive(serde::Deserialize)] struct Ping;
//! # struct Pong;
//! # impl Handle<Ping> for Pong {
//! #     async fn handle(&self, _: &Ping, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> { Ok(()) }
//! # }
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let broker = SqsBroker::in_process();
//! let pings = broker.publisher(SqsQueue::new("pings").create_if_missing());
//! let app = RustStream::new(AppInfo::new("pong", "0.1.0")).with_broker(broker, |b| {
//!     b.include(subscriber(SqsQueue::new("pings").create_if_missing(), Pong).build());
//! });
//! let running = TestApp::spawn(app);
//! pings.raw("{}").send().await.unwrap();
//! running.stop().await.unwrap();
//! # }
//! ```

use std::time::Duration;

use tokio::task::JoinHandle;

use crate::app::{App, RunError, ShutdownHandle};

mod context;

pub use context::TestContext;

/// A service running in the background of a test.
#[derive(Debug)]
pub struct TestApp {
    shutdown: ShutdownHandle,
    task: JoinHandle<Result<(), RunError>>,
}

impl TestApp {
    /// Runs `app` in a task until [`stop`](Self::stop).
    pub fn spawn(app: impl App) -> Self {
        let shutdown = app.shutdown_handle();
        let task = tokio::spawn(app.run_until(std::future::pending()));
        Self { shutdown, task }
    }

    /// The app's shutdown handle.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shutdown.clone()
    }

    /// Whether the app has returned (after a shutdown, or failing to start).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
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

/// Waits, in steps of 10 ms of tokio time, until `condition` holds.
///
/// # Panics
///
/// After 10 minutes of tokio time, naming `what` was awaited.
pub async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let step = Duration::from_millis(10);
    for _ in 0..60_000 {
        if condition() {
            return;
        }
        tokio::time::sleep(step).await;
    }
    panic!("waited 10 minutes of tokio time for {what}");
}
