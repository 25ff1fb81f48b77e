//! Hooks that count the messages a transport deleted, so that a run ends the moment its last
//! message is deleted, on either backend, without reading the queue (which would cost calls and
//! take the account's lock while the engine works).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rust_stream::transport::layer::Hooks;
use rust_stream::transport::{BatchResult, DeleteEntry, Transport, TransportError};
use tokio::sync::Notify;

use crate::Fallible;

/// Messages deleted so far through a [`CountingDeletes`].
#[derive(Debug)]
pub struct Deleted {
    count: AtomicU64,
    /// The count [`Deleted::wait_for`] waits for: only a delete that reaches it wakes the waiter,
    /// so that the wait costs the run one wake-up, not one per call (the channel beside it pays
    /// none).
    target: AtomicU64,
    reached: Notify,
}

impl Default for Deleted {
    fn default() -> Self {
        Self {
            count: AtomicU64::new(0),
            target: AtomicU64::new(u64::MAX),
            reached: Notify::new(),
        }
    }
}

impl Deleted {
    /// Waits until `count` messages were deleted and returns when that was seen; fails after
    /// `patience`.
    pub async fn wait_for(&self, count: u64, patience: Duration) -> Fallible<Instant> {
        let waiting = async {
            self.target.store(count, Ordering::SeqCst);
            loop {
                // Made before the check, so a delete between the check and the wait still wakes it.
                let reached = self.reached.notified();
                if self.count.load(Ordering::SeqCst) >= count {
                    return Instant::now();
                }
                reached.await;
            }
        };
        tokio::time::timeout(patience, waiting).await.map_err(|_| {
            format!(
                "{} of {count} messages deleted after {patience:?}",
                self.count.load(Ordering::SeqCst)
            )
            .into()
        })
    }
}

/// Hooks that count the messages the `DeleteMessageBatch` calls through them deleted.
#[derive(Debug)]
pub struct CountingDeletes {
    deleted: Arc<Deleted>,
}

impl CountingDeletes {
    pub fn new(deleted: Arc<Deleted>) -> Self {
        Self { deleted }
    }
}

impl Hooks for CountingDeletes {
    // On the way of every message: the inner call's future wrapped once, without an `async fn`
    // layer that would keep a second copy of the arguments.
    fn delete_message_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        let deleting = inner.delete_message_batch(queue_url, entries);
        async move {
            let result = deleting.await;
            if let Ok(result) = &result {
                let deleted = result.successful.len() as u64;
                let count = self.deleted.count.fetch_add(deleted, Ordering::SeqCst) + deleted;
                if count >= self.deleted.target.load(Ordering::SeqCst) {
                    self.deleted.reached.notify_waiters();
                }
            }
            result
        }
    }
}
