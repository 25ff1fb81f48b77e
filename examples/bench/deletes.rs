//! A transport that counts the messages it deleted, so that a run ends the moment its last message
//! is deleted, on either backend, without reading the queue (which would cost calls and take the
//! account's lock while the engine works).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rust_stream::transport::{
    BatchResult, ChangeVisibilityEntry, DeleteEntry, QueueAttributes, ReceiveMessage,
    ReceivedMessage, SendBatchEntry, SentMessage, Transport, TransportError,
};
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

/// `inner`, counting the messages its `DeleteMessageBatch` calls deleted.
#[derive(Debug)]
pub struct CountingDeletes<T> {
    inner: T,
    deleted: Arc<Deleted>,
}

impl<T> CountingDeletes<T> {
    pub fn new(inner: T, deleted: Arc<Deleted>) -> Self {
        Self { inner, deleted }
    }
}

impl<T: Transport> Transport for CountingDeletes<T> {
    fn get_queue_url(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        self.inner.get_queue_url(name)
    }

    fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        self.inner.create_queue(name, attributes)
    }

    fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> impl Future<Output = Result<QueueAttributes, TransportError>> + Send {
        self.inner.get_queue_attributes(queue_url, names)
    }

    fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> impl Future<Output = Result<BatchResult<SentMessage>, TransportError>> + Send {
        self.inner.send_message_batch(queue_url, entries)
    }

    fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send {
        self.inner.receive_message(queue_url, request)
    }

    fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        let deleting = self.inner.delete_message_batch(queue_url, entries);
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

    fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        self.inner
            .change_message_visibility_batch(queue_url, entries)
    }

    fn abandoned_receive_takes_nothing(&self) -> bool {
        self.inner.abandoned_receive_takes_nothing()
    }
}
