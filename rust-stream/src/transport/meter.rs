//! Counts of SQS API calls by action, kept by every broker over whatever transport it has, so
//! tests and benchmarks can see what a workload costs (SQS bills per request); each call is also
//! recorded as a metric (see [`crate::metrics`]).

use std::future::Future;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{
    BatchResult, ChangeVisibilityEntry, DeleteEntry, QueueAttributes, ReceiveMessage,
    ReceivedMessage, SendBatchEntry, SentMessage, Transport, TransportError,
};

/// SQS API calls by action.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiCalls {
    /// `GetQueueUrl`.
    pub get_queue_url: u64,
    /// `CreateQueue`.
    pub create_queue: u64,
    /// `GetQueueAttributes`.
    pub get_queue_attributes: u64,
    /// `SendMessageBatch`.
    pub send_message_batch: u64,
    /// `ReceiveMessage`.
    pub receive_message: u64,
    /// `DeleteMessageBatch`.
    pub delete_message_batch: u64,
    /// `ChangeMessageVisibilityBatch`.
    pub change_message_visibility_batch: u64,
}

impl ApiCalls {
    /// The calls that move messages (send, receive, delete, change visibility): what a
    /// workload costs, without the startup calls.
    pub fn messaging(&self) -> u64 {
        self.send_message_batch
            + self.receive_message
            + self.delete_message_batch
            + self.change_message_visibility_batch
    }
}

impl Sub for ApiCalls {
    type Output = ApiCalls;

    /// The calls made between two snapshots.
    fn sub(self, earlier: ApiCalls) -> ApiCalls {
        ApiCalls {
            get_queue_url: self.get_queue_url - earlier.get_queue_url,
            create_queue: self.create_queue - earlier.create_queue,
            get_queue_attributes: self.get_queue_attributes - earlier.get_queue_attributes,
            send_message_batch: self.send_message_batch - earlier.send_message_batch,
            receive_message: self.receive_message - earlier.receive_message,
            delete_message_batch: self.delete_message_batch - earlier.delete_message_batch,
            change_message_visibility_batch: self.change_message_visibility_batch
                - earlier.change_message_visibility_batch,
        }
    }
}

/// The live counters behind [`ApiCalls`].
#[derive(Debug, Default)]
pub(crate) struct CallCounter {
    get_queue_url: AtomicU64,
    create_queue: AtomicU64,
    get_queue_attributes: AtomicU64,
    send_message_batch: AtomicU64,
    receive_message: AtomicU64,
    delete_message_batch: AtomicU64,
    change_message_visibility_batch: AtomicU64,
}

impl CallCounter {
    pub(crate) fn snapshot(&self) -> ApiCalls {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ApiCalls {
            get_queue_url: read(&self.get_queue_url),
            create_queue: read(&self.create_queue),
            get_queue_attributes: read(&self.get_queue_attributes),
            send_message_batch: read(&self.send_message_batch),
            receive_message: read(&self.receive_message),
            delete_message_batch: read(&self.delete_message_batch),
            change_message_visibility_batch: read(&self.change_message_visibility_batch),
        }
    }
}

fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Runs one call of `action` on `queue` (a URL, or a name before there is one), and records its
/// duration and failure as the `messaging.client.operation.duration` metric.
async fn timed<T>(
    action: &'static str,
    queue: &str,
    call: impl Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    let started = tokio::time::Instant::now();
    let result = call.await;
    crate::metrics::call(action, queue, started.elapsed(), &result);
    result
}

/// A transport that counts its calls.
pub(crate) struct Metered<T> {
    inner: T,
    pub(crate) calls: Arc<CallCounter>,
}

impl<T> Metered<T> {
    pub(crate) fn new(inner: T) -> Self {
        Self {
            inner,
            calls: Arc::default(),
        }
    }
}

// The calls on the way of every message return the inner call's future wrapped once, not an
// `async fn` around it: each layer of `async fn` would keep its own copy of the arguments in a
// future that is allocated per call.
impl<T: Transport> Transport for Metered<T> {
    async fn get_queue_url(&self, name: &str) -> Result<String, TransportError> {
        count(&self.calls.get_queue_url);
        timed("GetQueueUrl", name, self.inner.get_queue_url(name)).await
    }

    async fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> Result<String, TransportError> {
        count(&self.calls.create_queue);
        timed(
            "CreateQueue",
            name,
            self.inner.create_queue(name, attributes),
        )
        .await
    }

    async fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> Result<QueueAttributes, TransportError> {
        count(&self.calls.get_queue_attributes);
        timed(
            "GetQueueAttributes",
            queue_url,
            self.inner.get_queue_attributes(queue_url, names),
        )
        .await
    }

    fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> impl Future<Output = Result<BatchResult<SentMessage>, TransportError>> + Send {
        count(&self.calls.send_message_batch);
        timed(
            "SendMessageBatch",
            queue_url,
            self.inner.send_message_batch(queue_url, entries),
        )
    }

    fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send {
        count(&self.calls.receive_message);
        timed(
            "ReceiveMessage",
            queue_url,
            self.inner.receive_message(queue_url, request),
        )
    }

    fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        count(&self.calls.delete_message_batch);
        timed(
            "DeleteMessageBatch",
            queue_url,
            self.inner.delete_message_batch(queue_url, entries),
        )
    }

    fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        count(&self.calls.change_message_visibility_batch);
        timed(
            "ChangeMessageVisibilityBatch",
            queue_url,
            self.inner
                .change_message_visibility_batch(queue_url, entries),
        )
    }

    fn abandoned_receive_takes_nothing(&self) -> bool {
        self.inner.abandoned_receive_takes_nothing()
    }

    fn attempt_timeout(&self) -> Option<std::time::Duration> {
        self.inner.attempt_timeout()
    }
}
