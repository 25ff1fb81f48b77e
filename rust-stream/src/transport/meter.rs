//! Counts of SQS and SNS API calls by action, kept by every broker over whatever transport it has, so
//! tests and benchmarks can see what a workload costs (SQS bills per request); each call is also
//! recorded as a metric (see [`crate::metrics`]). The meter is two generic hooks over the broker's
//! transport: [`Hooks::before`] counts each call as it is made, unless its request fails the checks
//! both backends make of a whole request before anything is sent (a queue name SQS would refuse, a
//! batch of 11): such a call is refused without reaching SQS, so SQS neither sees nor bills it, and
//! it is not counted; [`Hooks::around`] times every call. Which check an action has is its row in
//! the transport's table of actions, so the meter names no action.

use std::future::Future;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::layer::{Action, Hooks};
use super::TransportError;

/// Writes [`ApiCalls`]: a field an action, named as its [`Transport`](super::Transport) method,
/// and the subtraction of two snapshots.
macro_rules! api_calls {
    ($(
        $(#[$doc:meta])*
        $action:ident $method:ident $service:ident
            ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?) -> $answer:ty,
            $target_kind:ident { $target:expr },
            check { $check:expr }
            $(, default $default:block)?;
    )*) => {
        /// SQS and SNS API calls by action: those sent, not those a backend refused before sending
        /// them (see [the module](self)). `peek_messages` counts the in-process account's peeks (a
        /// call SQS does not have, and does not bill); `publish_batch` counts one a batch, however
        /// many entries (SNS bills a request per batch).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct ApiCalls {
            $(
                #[doc = concat!("`", stringify!($action), "`.")]
                pub $method: u64,
            )*
        }

        impl Sub for ApiCalls {
            type Output = ApiCalls;

            /// The calls made between two snapshots.
            fn sub(self, earlier: ApiCalls) -> ApiCalls {
                ApiCalls {
                    $($method: self.$method - earlier.$method,)*
                }
            }
        }

        impl CallCounter {
            /// The counts so far.
            pub(crate) fn snapshot(&self) -> ApiCalls {
                ApiCalls {
                    $($method: self.of(Action::$action).load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

transport_actions!(api_calls);

impl ApiCalls {
    /// The calls that move messages (send, receive, delete, change visibility, and SNS's
    /// publish): what a workload costs, without the startup calls.
    pub fn messaging(&self) -> u64 {
        self.send_message_batch
            + self.receive_message
            + self.delete_message_batch
            + self.change_message_visibility_batch
            + self.publish_batch
    }

    /// The calls that change what a queue holds or how it is set: sends, deletes, purges,
    /// creations, attribute changes and SNS publishes. Receives, visibility changes, peeks and
    /// lookups are not among them: they leave every message stored where it was. A dry run of a
    /// redrive makes none of these.
    pub fn changing(&self) -> u64 {
        self.send_message_batch
            + self.delete_message_batch
            + self.purge_queue
            + self.create_queue
            + self.set_queue_attributes
            + self.create_topic
            + self.subscribe
            + self.publish_batch
    }
}

/// The live counters behind [`ApiCalls`], one an action.
#[derive(Debug, Default)]
pub(crate) struct CallCounter([AtomicU64; Action::ALL.len()]);

impl CallCounter {
    /// The counter of `action`'s calls.
    fn of(&self, action: Action) -> &AtomicU64 {
        &self.0[action as usize]
    }
}

/// Runs one call of `action` on `queue` (a URL, or a name before there is one; for an SNS action a
/// topic's or subscription's ARN, or a topic's name), and records its duration and failure as the
/// `messaging.client.operation.duration` metric.
async fn timed<T>(
    action: Action,
    queue: &str,
    call: impl Future<Output = Result<T, TransportError>>,
) -> Result<T, TransportError> {
    let started = tokio::time::Instant::now();
    let result = call.await;
    crate::metrics::call(
        action.name(),
        action.is_sns(),
        queue,
        started.elapsed(),
        &result,
    );
    result
}

/// The hooks that count and time every call of a broker's transport, as
/// `Hooked::new(transport, meter)`.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub(crate) calls: Arc<CallCounter>,
}

// Counted when the call is made, timed while it runs: the call's own future wrapped once, no
// `async fn` layer that would keep a second copy of the arguments. Whether a request is refused
// before it is sent is the table's check, the one each backend makes first (the in-process account
// as SQS would answer, the aws-sdk transport to refuse before the network).
impl Hooks for Meter {
    const CHECKS_REQUESTS: bool = true;

    fn before(&self, action: Action, refused: bool) {
        if !refused {
            self.calls.of(action).fetch_add(1, Ordering::Relaxed);
        }
    }

    fn around<R: Send>(
        &self,
        action: Action,
        queue: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
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

    #[tokio::test]
    async fn a_publish_batch_of_ten_is_one_call_and_a_batch_of_eleven_none() {
        use crate::transport::{Publish, PublishBatchEntry, TopicAttributes};

        let metered = Hooked::new(Account::new(), Meter::default());
        let topic = metered
            .create_topic("events", TopicAttributes::new())
            .await
            .unwrap();
        let batch = |size: usize| -> Vec<PublishBatchEntry> {
            (0..size)
                .map(|n| PublishBatchEntry::new(n.to_string(), Publish::new("m")))
                .collect()
        };
        let published = metered.publish_batch(&topic, batch(10)).await.unwrap();
        assert_eq!(published.successful.len(), 10);
        metered.publish_batch(&topic, batch(11)).await.unwrap_err();
        metered
            .create_topic("bad name", TopicAttributes::new())
            .await
            .unwrap_err();
        let calls = metered.hooks().calls.snapshot();
        assert_eq!(
            calls,
            ApiCalls {
                create_topic: 1,
                publish_batch: 1,
                ..ApiCalls::default()
            }
        );
        assert_eq!(calls.messaging(), 1);
    }

    #[tokio::test]
    async fn a_call_refused_before_it_is_sent_is_not_counted() {
        let metered = Hooked::new(Account::new(), Meter::default());
        let refused = metered.get_queue_url("orders!").await.unwrap_err();
        assert!(refused.to_string().contains("`orders!`"), "{refused}");
        let bad_attribute = QueueAttributes::from([("VisibilityTimeout".into(), "-1".into())]);
        metered
            .create_queue("jobs", bad_attribute)
            .await
            .unwrap_err();
        let url = metered
            .create_queue("jobs", QueueAttributes::default())
            .await
            .unwrap();
        metered
            .receive_message(&url, ReceiveMessage::new(11))
            .await
            .unwrap_err();
        metered
            .delete_message_batch(&url, Vec::new())
            .await
            .unwrap_err();
        metered
            .change_message_visibility_batch(&url, Vec::new())
            .await
            .unwrap_err();
        metered
            .send_message_batch(&url, Vec::new())
            .await
            .unwrap_err();
        let bad_attribute = QueueAttributes::from([("DelaySeconds".into(), "901".into())]);
        metered
            .set_queue_attributes(&url, bad_attribute)
            .await
            .unwrap_err();
        let policy = QueueAttributes::from([("Policy".into(), "{}".into())]);
        metered.set_queue_attributes(&url, policy).await.unwrap();
        // Sent and refused by the service: counted.
        metered.get_queue_url("missing").await.unwrap_err();
        let calls = metered.hooks().calls.snapshot();
        assert_eq!(
            calls,
            ApiCalls {
                get_queue_url: 1,
                create_queue: 1,
                set_queue_attributes: 1,
                ..ApiCalls::default()
            }
        );
    }
}
