//! Helpers for futures the crate runs: catching a panic as an error ([`CatchUnwind`],
//! [`panic_message`]), polling once in the calling task ([`poll_once`]), and the signal a running
//! app's broker and workers watch to stop ([`Shutdown`]).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// A boxed, sendable future: what a trait object's async method returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

pin_project_lite::pin_project! {
    /// A future whose panic is caught and answered as `Err(message)`, so an engine task, a handler
    /// or a transport call that panics is logged and recovered from instead of wedging what waits
    /// on it. The future is polled in place: pinned where this is, boxed or not.
    pub(crate) struct CatchUnwind<F> {
        #[pin]
        inner: F,
    }
}

impl<F: Future> CatchUnwind<F> {
    pub(crate) fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, String>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.project().inner;
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(poll) => poll.map(Ok),
            Err(panic) => Poll::Ready(Err(panic_message(panic.as_ref()))),
        }
    }
}

/// The message a panic was raised with.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// Polls `future` once, in the calling task: its output when it is ready at once, `None` when it
/// is pending (its waker then wakes the calling task, which polls it again).
pub(crate) async fn poll_once<F: Future + Unpin>(future: &mut F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *future).poll(cx) {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        })
    })
    .await
}

/// What a broker watches to know when to stop, and how long it may take.
#[derive(Debug, Clone)]
pub struct Shutdown {
    requested: tokio::sync::watch::Receiver<bool>,
    timeout: Duration,
}

impl Shutdown {
    /// Requested when `requested` turns `true`; the stop may take `timeout`.
    pub(crate) fn new(requested: tokio::sync::watch::Receiver<bool>, timeout: Duration) -> Self {
        Self { requested, timeout }
    }

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
