//! Counts of SQS and SNS API calls by action, kept by every broker over whatever transport it has, so
//! tests and benchmarks can see what a workload costs (SQS bills per request); each call is also
//! recorded as a metric (see [`crate::metrics`]). The meter is one generic hook over the broker's
//! transport, [`Hooks::around`]: it counts each call as it is made and times it. A call whose
//! request breaks the rules a backend checks of a whole request before sending anything (a queue
//! name SQS would refuse, a batch of 11) reaches no service, so SQS neither sees nor bills it: the
//! backend's error [says so](TransportError::is_unsent), and the meter takes the call back. The
//! backend is the one place the rules run, once a call, and the meter names no action.

use std::future::Future;
use std::ops::Sub;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use super::layer::{Action, Hooks};
use super::TransportError;

/// Writes [`ApiCalls`]: a field an action, named as its [`Transport`](super::Transport) method,
/// and the subtraction of two snapshots.
macro_rules! api_calls {
    ($(
        $(#[$doc:meta])*
        $action:ident $method:ident $service:ident [$($class:ident),*]
            ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?) -> $answer:ty,
            $target_kind:ident { $target:expr }
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

        // A class the table names is one the meter sums: a misspelt one fails the build.
        const _: () = {
            macro_rules! known_class {
                (messaging) => {};
                (changing) => {};
            }
            $($(known_class!($class);)*)*
        };

        impl ApiCalls {
            /// The counts of the actions whose row in the table names `class`.
            fn sum_of_class(&self, class: &str) -> u64 {
                let mut sum = 0;
                $(
                    if [$(stringify!($class)),*].contains(&class) {
                        sum += self.$method;
                    }
                )*
                sum
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
    /// publish): what a workload costs, without the startup calls. The actions of the class
    /// `messaging` in the transport's table.
    pub fn messaging(&self) -> u64 {
        self.sum_of_class("messaging")
    }

    /// The calls that change what a queue holds or how it is set: sends, deletes, purges,
    /// creations, attribute changes and SNS publishes. Receives, visibility changes, peeks and
    /// lookups are not among them: they leave every message stored where it was. A dry run of a
    /// redrive makes none of these. The actions of the class `changing` in the transport's table.
    pub fn changing(&self) -> u64 {
        self.sum_of_class("changing")
    }
}

/// The live counters behind [`ApiCalls`], one an action, and the moment they were made, from which
/// a call in flight keeps its start.
#[derive(Debug)]
pub(crate) struct CallCounter {
    counts: [AtomicU64; Action::ALL.len()],
    since: Instant,
}

impl Default for CallCounter {
    fn default() -> Self {
        Self {
            counts: Default::default(),
            since: Instant::now(),
        }
    }
}

impl CallCounter {
    /// The counter of `action`'s calls.
    fn of(&self, action: Action) -> &AtomicU64 {
        &self.counts[action as usize]
    }

    /// Nanoseconds since the counters were made, on tokio's clock: a call's start kept in 8 bytes
    /// rather than an `Instant`'s 16, so that the reference to the counters a call now holds (to
    /// take it back if it was never sent) leaves its future no bigger. 584 years fit.
    fn now(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

pin_project_lite::pin_project! {
    /// One call of `action` on `queue` (a URL, or a name before there is one; for an SNS action a
    /// topic's or subscription's ARN, or a topic's name), counted in `calls` as it was made, which
    /// records its duration and failure as the `messaging.client.operation.duration` metric when
    /// it ends, and takes it back from `calls` if the backend refused it before sending anything.
    ///
    /// A future of its own rather than an `async fn`: its fields are laid out as tight as they go
    /// (no state of its own, the start in 8 bytes), so the reference to the counters leaves every
    /// metered call's future, allocated for every receive and batch, the size it had.
    struct Timed<'q, 'c, F> {
        #[pin]
        call: F,
        queue: &'q str,
        calls: &'c CallCounter,
        started: u64,
        action: Action,
    }
}

/// `call`, timed from now.
fn timed<'q, 'c, F>(
    action: Action,
    queue: &'q str,
    calls: &'c CallCounter,
    call: F,
) -> Timed<'q, 'c, F> {
    Timed {
        call,
        queue,
        calls,
        started: calls.now(),
        action,
    }
}

impl<T, F: Future<Output = Result<T, TransportError>>> Future for Timed<'_, '_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let result = ready!(this.call.poll(cx));
        if result.as_ref().is_err_and(TransportError::is_unsent) {
            this.calls.of(*this.action).fetch_sub(1, Ordering::Relaxed);
        }
        crate::metrics::call(
            this.action.name(),
            this.action.is_sns(),
            this.queue,
            Duration::from_nanos(this.calls.now().saturating_sub(*this.started)),
            &result,
        );
        Poll::Ready(result)
    }
}

/// The hooks that count and time every call of a broker's transport, as
/// `Hooked::new(transport, meter)`.
#[derive(Debug, Default)]
pub(crate) struct Meter {
    pub(crate) calls: Arc<CallCounter>,
}

// Counted when the call is made (a call dropped unawaited was made all the same, as a receive cut
// short at shutdown), timed while it runs: the call's own future wrapped once, no `async fn` layer
// that would keep a second copy of the arguments. Whether a request was refused before it was sent
// is the backend's to say, on its error: it checks first (the in-process account as SQS would
// answer, the aws-sdk transport to refuse before the network), and nothing checks again.
impl Hooks for Meter {
    fn around<R: Send>(
        &self,
        action: Action,
        queue: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
        self.calls.of(action).fetch_add(1, Ordering::Relaxed);
        timed(action, queue, &self.calls, call)
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of_val;

    use super::*;
    use crate::account::Account;
    use crate::transport::layer::Hooked;
    use crate::transport::{QueueAttributes, ReceiveMessage, Transport};

    // The classes come from the table's rows: each action's count weighs a bit of its own, so a
    // sum tells exactly which actions it took.
    #[test]
    fn the_classes_sum_the_actions_their_rows_name() {
        let calls = ApiCalls {
            get_queue_url: 1,
            create_queue: 1 << 1,
            get_queue_attributes: 1 << 2,
            set_queue_attributes: 1 << 3,
            send_message_batch: 1 << 4,
            receive_message: 1 << 5,
            delete_message_batch: 1 << 6,
            change_message_visibility_batch: 1 << 7,
            list_queues: 1 << 8,
            purge_queue: 1 << 9,
            peek_messages: 1 << 10,
            create_topic: 1 << 11,
            get_topic_attributes: 1 << 12,
            subscribe: 1 << 13,
            get_subscription_attributes: 1 << 14,
            list_subscriptions_by_topic: 1 << 15,
            publish_batch: 1 << 16,
            ..ApiCalls::default()
        };
        assert_eq!(
            calls.messaging(),
            calls.send_message_batch
                + calls.receive_message
                + calls.delete_message_batch
                + calls.change_message_visibility_batch
                + calls.publish_batch
        );
        assert_eq!(
            calls.changing(),
            calls.send_message_batch
                + calls.delete_message_batch
                + calls.purge_queue
                + calls.create_queue
                + calls.set_queue_attributes
                + calls.create_topic
                + calls.subscribe
                + calls.publish_batch
        );
    }

    // Every receive and batch call allocates its future (a broker holds the transport erased):
    // the meter's hooks must make it no bigger than the inner call timed by hand.
    #[test]
    fn a_metered_call_is_the_inner_call_timed_and_no_bigger() {
        let account = Account::new();
        let metered = Hooked::new(account.clone(), Meter::default());
        let counter = CallCounter::default();
        let url = "https://sqs.local/000000000000/jobs";
        macro_rules! same_size {
            ($action:ident, $call:ident($argument:expr)) => {
                assert_eq!(
                    size_of_val(&metered.$call(url, $argument)),
                    size_of_val(&timed(
                        Action::$action,
                        url,
                        &counter,
                        account.$call(url, $argument)
                    )),
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

    // The backend checks a request's rules and says on its error whether it refused the request
    // before sending it; the meter does not check it again.
    #[tokio::test]
    async fn a_metered_call_runs_its_requests_rules_once() {
        use crate::model::rules::QUEUE_NAME_CHECKS;

        let metered = Hooked::new(Account::new(), Meter::default());
        let runs = || QUEUE_NAME_CHECKS.with(|runs| runs.get());
        let before = runs();
        metered.get_queue_url("orders!").await.unwrap_err();
        assert_eq!(runs() - before, 1, "a refused call");
        let before = runs();
        metered
            .create_queue("jobs", QueueAttributes::default())
            .await
            .unwrap();
        metered.get_queue_url("jobs").await.unwrap();
        assert_eq!(runs() - before, 2, "two calls sent");
        let calls = metered.hooks().calls.snapshot();
        assert_eq!(
            calls,
            ApiCalls {
                create_queue: 1,
                get_queue_url: 1,
                ..ApiCalls::default()
            }
        );
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

    // S3's calls are rows of the same table: the meter counts them as it counts SQS's, and a
    // bucket name S3 would refuse is no call.
    #[tokio::test]
    async fn s3_calls_are_counted_under_their_actions() {
        let metered = Hooked::new(Account::new(), Meter::default());
        metered.create_bucket("payloads").await.unwrap();
        metered
            .put_object("payloads", "k", b"body".to_vec())
            .await
            .unwrap();
        assert_eq!(metered.get_object("payloads", "k").await.unwrap(), b"body");
        assert_eq!(metered.head_object("payloads", "k").await.unwrap(), 4);
        metered.delete_object("payloads", "k").await.unwrap();
        metered.create_bucket("Bad_Name").await.unwrap_err();
        let calls = metered.hooks().calls.snapshot();
        assert_eq!(
            calls,
            ApiCalls {
                create_bucket: 1,
                put_object: 1,
                get_object: 1,
                head_object: 1,
                delete_object: 1,
                ..ApiCalls::default()
            }
        );
        assert_eq!(calls.changing(), 3, "the bucket, the put and the delete");
        assert_eq!(calls.messaging(), 0);
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
