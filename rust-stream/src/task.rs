//! Helpers for futures the crate runs: catching a panic as an error ([`CatchUnwind`],
//! [`panic_message`]), polling once in the calling task ([`poll_once`]), running a list of
//! futures side by side without a list of them while none waits ([`side_by_side`]), and the
//! signal a running app's broker and workers watch to stop ([`Shutdown`]).

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

/// Runs `run` over `items` side by side, as `join_all` would, but one after another while each
/// is done in its first poll: only from the first that waits on are the rest's futures made,
/// together, in a list (a receive's ten message futures are over ten kilobytes, and an
/// allocation of a kilobyte or more makes glibc merge its free lists, whose chunks lie all over
/// a large backlog's heap). The one that waited is not polled again in the poll it waited in,
/// so nothing is polled sooner than under `join_all`. A future of its own, not an `async fn`,
/// whose state made a receive's part 184 bytes larger.
pub(crate) fn side_by_side<T, F: Future<Output = ()>, R: FnMut(T) -> F>(
    items: Vec<T>,
    run: R,
) -> SideBySide<T, F, R> {
    SideBySide {
        items: items.into_iter(),
        run,
        running: None,
        rest: None,
        rest_done: false,
    }
}

pin_project_lite::pin_project! {
    /// [`side_by_side`]'s future.
    pub(crate) struct SideBySide<T, F: Future, R> {
        items: std::vec::IntoIter<T>,
        run: R,
        // The item in its first poll, or the first that waited, until it is done.
        #[pin]
        running: Option<F>,
        // The items after the first that waited, once it has.
        rest: Option<futures_util::future::JoinAll<F>>,
        rest_done: bool,
    }
}

impl<T, F: Future<Output = ()>, R: FnMut(T) -> F> Future for SideBySide<T, F, R> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        let Some(rest) = this.rest.as_mut() else {
            // One after another while each is done at once.
            loop {
                if this.running.is_none() {
                    let Some(item) = this.items.next() else {
                        return Poll::Ready(());
                    };
                    this.running.set(Some((this.run)(item)));
                }
                let running = this.running.as_mut().as_pin_mut().expect("set above");
                if running.poll(cx).is_ready() {
                    this.running.set(None);
                    continue;
                }
                // It waits: the rest start beside it, and it is not polled again in this poll.
                let rest = futures_util::future::join_all(this.items.by_ref().map(&mut *this.run));
                *this.rest_done = Pin::new(this.rest.insert(rest)).poll(cx).is_ready();
                return Poll::Pending;
            }
        };
        if !*this.rest_done {
            *this.rest_done = Pin::new(rest).poll(cx).is_ready();
        }
        if let Some(running) = this.running.as_mut().as_pin_mut() {
            if running.poll(cx).is_ready() {
                this.running.set(None);
            }
        }
        if this.running.is_none() && *this.rest_done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    /// Which items were polled and which ended, in order.
    type Notes = Arc<Mutex<Vec<usize>>>;

    /// A run that is done once its gate is open, noting each poll and its end.
    struct Gated {
        item: usize,
        open: Arc<AtomicBool>,
        polls: Notes,
        ended: Notes,
    }

    impl Future for Gated {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.lock().unwrap().push(self.item);
            if self.open.load(Ordering::Acquire) {
                self.ended.lock().unwrap().push(self.item);
                Poll::Ready(())
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }

    /// Items 1 to 4, the one numbered `waits` behind `gate`, the others done at once.
    fn four(
        waits: usize,
        gate: &Arc<AtomicBool>,
    ) -> (
        Notes,
        Notes,
        SideBySide<usize, Gated, impl FnMut(usize) -> Gated>,
    ) {
        let (polls, ended) = (Notes::default(), Notes::default());
        let (gate, notes) = (gate.clone(), (polls.clone(), ended.clone()));
        let run = move |item| Gated {
            item,
            open: if item == waits {
                gate.clone()
            } else {
                Arc::new(AtomicBool::new(true))
            },
            polls: notes.0.clone(),
            ended: notes.1.clone(),
        };
        (polls, ended, side_by_side(vec![1, 2, 3, 4], run))
    }

    #[tokio::test]
    async fn runs_done_at_once_go_one_after_another_each_polled_once() {
        let (polls, ended, all) = four(0, &Arc::new(AtomicBool::new(false)));
        all.await;
        assert_eq!(*polls.lock().unwrap(), [1, 2, 3, 4]);
        assert_eq!(*ended.lock().unwrap(), [1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn from_the_first_that_waits_the_rest_start_beside_it() {
        let gate = Arc::new(AtomicBool::new(false));
        let (polls, ended, all) = four(2, &gate);
        let mut all = std::pin::pin!(all);
        assert!(poll_once(&mut all).await.is_none(), "2 waits");
        // 3 and 4 started (and ended) in the poll where 2 first waited; 2 was not polled twice.
        assert_eq!(*polls.lock().unwrap(), [1, 2, 3, 4]);
        assert_eq!(*ended.lock().unwrap(), [1, 3, 4]);
        gate.store(true, Ordering::Release);
        all.await;
        assert_eq!(*ended.lock().unwrap(), [1, 3, 4, 2]);
        assert_eq!(*polls.lock().unwrap(), [1, 2, 3, 4, 2]);
    }
}
