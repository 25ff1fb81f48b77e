//! Counts of SQS API calls by action, kept by every broker over whatever transport it has, so
//! tests and benchmarks can see what a workload costs (SQS bills per request); each call is also
//! recorded as a metric (see [`crate::metrics`]). The meter is one [`Hooks::around`] hook over
//! the broker's transport.

use std::future::Future;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::layer::{Action, Hooks};
use super::TransportError;

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
    /// The counter of `action`'s calls.
    fn of(&self, action: Action) -> &AtomicU64 {
        match action {
            Action::GetQueueUrl => &self.get_queue_url,
            Action::CreateQueue => &self.create_queue,
            Action::GetQueueAttributes => &self.get_queue_attributes,
            Action::SendMessageBatch => &self.send_message_batch,
            Action::ReceiveMessage => &self.receive_message,
            Action::DeleteMessageBatch => &self.delete_message_batch,
            Action::ChangeMessageVisibilityBatch => &self.change_message_visibility_batch,
        }
    }

    /// The counts so far.
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

/// Runs one call of `action` on `queue` (a URL, or a name before there is one), and records its
/// duration and failure as the `messaging.client.operation.duration` metric.
async fn timed<T>(
    action: Action,
    queue: &str,
    call: impl Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    let started = tokio::time::Instant::now();
    let result = call.await;
    crate::metrics::call(action.name(), queue, started.elapsed(), &result);
    result
}

/// The hooks that count and time every call of a broker's transport, as
/// `Hooked::new(transport, meter)`.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub(crate) calls: Arc<CallCounter>,
}

// Counted when the call is made, timed while it runs: the call's own future wrapped once, no
// `async fn` layer that would keep a second copy of the arguments.
impl Hooks for Meter {
    fn around<R: Send>(
        &self,
        action: Action,
        queue: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
        self.calls.of(action).fetch_add(1, Ordering::Relaxed);
        timed(action, queue, call)
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of_val;

    use super::*;
    use crate::account::Account;
    use crate::transport::layer::Hooked;
    use crate::transport::{QueueAttributes, ReceiveMessage, Transport};

    // Every receive and batch call allocates its future (a broker holds the transport erased):
    // the meter's hooks must make it no bigger than the inner call timed by hand.
    #[test]
    fn a_metered_call_is_the_inner_call_timed_and_no_bigger() {
        let account = Account::new();
        let metered = Hooked::new(account.clone(), Meter::default());
        let url = "https://sqs.local/000000000000/jobs";
        macro_rules! same_size {
            ($action:ident, $call:ident($argument:expr)) => {
                assert_eq!(
                    size_of_val(&metered.$call(url, $argument)),
                    size_of_val(&timed(Action::$action, url, account.$call(url, $argument))),
                    stringify!($action),
                )
            };
        }
        same_size!(ReceiveMessage, receive_message(ReceiveMessage::new(10)));
        same_size!(DeleteMessageBatch, delete_message_batch(Vec::new()));
        same_size!(
            ChangeMessageVisibilityBatch,
            change_message_visibility_batch(Vec::new())
        );
        same_size!(SendMessageBatch, send_message_batch(Vec::new()));
    }

    #[tokio::test]
    async fn every_call_is_counted_under_its_action() {
        let metered = Hooked::new(Account::new(), Meter::default());
        let url = metered
            .create_queue("jobs", QueueAttributes::default())
            .await
            .unwrap();
        metered.get_queue_url("jobs").await.unwrap();
        metered
            .receive_message(&url, ReceiveMessage::new(1))
            .await
            .unwrap();
        let calls = metered.hooks().calls.snapshot();
        assert_eq!(
            (
                calls.create_queue,
                calls.get_queue_url,
                calls.receive_message
            ),
            (1, 1, 1)
        );
        assert_eq!(calls.messaging(), 1);
    }
}
