//! Transports that change a few calls of another: [`Hooked`] implements every [`Transport`] call
//! once, over an inner transport and a [`Hooks`] value that overrides only the calls it changes.
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//!
//! use rust_stream::account::Account;
//! use rust_stream::transport::layer::{Hooked, Hooks};
//! use rust_stream::transport::{
//!     ReceiveMessage, ReceivedMessage, SendMessage, Transport, TransportError,
//! };
//!
//! /// Counts the messages received; every other call passes through.
//! #[derive(Default)]
//! struct CountReceived(AtomicUsize);
//!
//! impl Hooks for CountReceived {
//!     async fn receive_message(
//!         &self,
//!         inner: &impl Transport,
//!         queue_url: &str,
//!         request: ReceiveMessage,
//!     ) -> Result<Vec<ReceivedMessage>, TransportError> {
//!         let received = inner.receive_message(queue_url, request).await?;
//!         self.0.fetch_add(received.len(), Ordering::Relaxed);
//!         Ok(received)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), TransportError> {
//! let account = Account::new();
//! let url = account.create_queue("jobs", Default::default()).await?;
//! account.send_message(&url, SendMessage::new("hello")).await?;
//!
//! // A transport like any other: `SqsBroker::with_transport(transport)` runs an app over it.
//! let transport = Hooked::new(account, CountReceived::default());
//! transport.receive_message(&url, ReceiveMessage::new(10)).await?;
//! assert_eq!(transport.hooks().0.load(Ordering::Relaxed), 1);
//! # Ok(())
//! # }
//! ```
//!
//! # Two kinds of hook
//!
//! - [`Hooks::around`]: one generic hook around every call, run as the call is made, given the
//!   [`Action`], the queue and the call's future: for what treats all calls alike (the broker's
//!   meter, deadlines, tracing). A call the backend refuses by its rules before sending anything
//!   answers an error that [says so](TransportError::is_unsent), so a hook that counts calls
//!   sent reads it there: no layer checks a request again.
//! - One typed hook per action, named after it ([`Hooks::receive_message`], ...), given the inner
//!   transport and the request. Its code before the inner call is a before-hook: it may record
//!   the request, wait, change the request, or answer without calling the inner transport at
//!   all. Its code after the call is an after-hook: it may read or change the answer. What it
//!   learned before the call (the entries it failed on purpose, a position in a log) is a local
//!   variable after it.
//!
//! Every hook's default passes the call through. A call runs `around`, then the typed hook, then
//! the inner transport; a [`Hooked`] may be the inner transport of another.
//!
//! Why one typed hook per action rather than a before and an after hook: most wrappers carry
//! something from before the call to after it, which separate hooks could only hand over through
//! the hooks value, and a pass-through default costs nothing: it hands back the inner transport's
//! own future, so a hooks value that overrides only `around` gives each call the same future a
//! hand-written wrapper would (one more layer of `async` per call would copy the arguments into a
//! future allocated for every receive and delete).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use super::{
    BatchResult, ChangeVisibilityEntry, DeleteEntry, PeekMessages, PeekedMessage,
    PublishBatchEntry, PublishBatchResult, QueueAttributes, ReceiveMessage, ReceivedMessage,
    SendBatchEntry, SentMessage, Subscribe, Subscription, SubscriptionAttributes, TopicAttributes,
    Transport, TransportError,
};

/// Whether an action of this service is SNS's.
macro_rules! is_sns {
    (sns) => {
        true
    };
    (sqs) => {
        false
    };
    (s3) => {
        false
    };
}

/// Writes [`Action`], with its name and service.
macro_rules! action_enum {
    ($(
        $(#[$doc:meta])*
        $action:ident $method:ident $service:ident [$($class:ident),*]
            ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?) -> $answer:ty,
            $target_kind:ident { $target:expr }
            $(, default $default:block)?;
    )*) => {
        /// The SQS or SNS action a [`Transport`] call performs, as [`Hooks::around`] sees it.
        /// `PeekMessages` is the in-process account's own call, a peek at a queue's messages that
        /// changes nothing, which SQS does not have.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Action {
            $(
                #[doc = concat!("`", stringify!($action), "`.")]
                $action,
            )*
        }

        impl Action {
            /// Every action, in the order of the table (the order of [`Action`]'s variants).
            pub const ALL: &'static [Action] = &[$(Action::$action),*];

            /// The action's name in the SQS or SNS API: `"ReceiveMessage"`, `"PublishBatch"`.
            pub fn name(self) -> &'static str {
                match self {
                    $(Action::$action => stringify!($action),)*
                }
            }

            /// Whether the action is SNS's (a topic's, a subscription's, a publish) rather than
            /// SQS's.
            pub fn is_sns(self) -> bool {
                match self {
                    $(Action::$action => is_sns!($service),)*
                }
            }
        }
    };
}

transport_actions!(action_enum);

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Writes [`Hooks`]: the generic hooks, and a typed hook an action that passes the call through.
macro_rules! hooks_trait {
    ($(
        $(#[$doc:meta])*
        $action:ident $method:ident $service:ident [$($class:ident),*]
            ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?) -> $answer:ty,
            $target_kind:ident { $target:expr }
            $(, default $default:block)?;
    )*) => {
        /// What a [`Hooked`] transport does around and instead of its inner transport's calls.
        /// Every hook passes the call through unless overridden; see [the module](self) for how
        /// they fit.
        ///
        /// A typed hook may be written as an `async fn` or, on a call every message makes, as a
        /// plain `fn` that starts the inner call and hands back its future (wrapped once, if it
        /// must see the answer), so the future allocated per call holds no second copy of the
        /// arguments.
        pub trait Hooks: Send + Sync + 'static {
            /// Runs around every call: `action` on `queue` (its URL, or its name for
            /// `GetQueueUrl` and `CreateQueue`; for an SNS call, the topic's ARN, its name for
            /// `CreateTopic`, or the subscription's ARN for `GetSubscriptionAttributes`), whose
            /// future is `call` (the typed hook's, over the inner transport's).
            /// Runs when the call is made; what it hands back is what the caller awaits. A call
            /// the backend refused by its rules before sending anything ends in an error that
            /// [`is_unsent`](TransportError::is_unsent).
            fn around<R: Send>(
                &self,
                action: Action,
                queue: &str,
                call: impl Future<Output = Result<R, TransportError>> + Send,
            ) -> impl Future<Output = Result<R, TransportError>> + Send {
                let _ = (action, queue);
                call
            }

            $(
                #[doc = concat!("`", stringify!($action), "`, over `inner`.")]
                fn $method(
                    &self,
                    inner: &impl Transport,
                    $($arg: &$arg_ty,)*
                    $($owned: $owned_ty)?
                ) -> impl Future<Output = Result<$answer, TransportError>> + Send {
                    inner.$method($($arg,)* $($owned)?)
                }
            )*

            /// Whether `inner` peeks.
            fn peeks(&self, inner: &impl Transport) -> bool {
                inner.peeks()
            }

            /// [`Transport::abandoned_receive_takes_nothing`]: `inner`'s answer unless overridden
            /// (a hook that receives on its own, or stands for a network, answers for itself).
            fn abandoned_receive_takes_nothing(&self, inner: &impl Transport) -> bool {
                inner.abandoned_receive_takes_nothing()
            }

            /// [`Transport::attempt_timeout`]: `inner`'s unless overridden (a hook that bounds
            /// each call itself says so here).
            fn attempt_timeout(&self, inner: &impl Transport) -> Option<Duration> {
                inner.attempt_timeout()
            }
        }
    };
}

transport_actions!(hooks_trait);

/// A [`Transport`] made of an inner transport and [`Hooks`]: each call runs
/// [`Hooks::around`] over the action's typed hook over `inner`. See [the module](self).
#[derive(Debug, Clone, Default)]
pub struct Hooked<T, H> {
    inner: T,
    hooks: H,
}

impl<T, H> Hooked<T, H> {
    /// `inner`, its calls going through `hooks`.
    pub fn new(inner: T, hooks: H) -> Self {
        Self { inner, hooks }
    }

    /// The transport the calls go to.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The hooks, for what they recorded or to change how they act.
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// The inner transport and the hooks, apart.
    pub fn into_parts(self) -> (T, H) {
        (self.inner, self.hooks)
    }
}

/// Writes [`Hooked`]'s [`Transport`]: each action's typed hook's future handed to `around`.
macro_rules! hooked_transport {
    ($(
        $(#[$doc:meta])*
        $action:ident $method:ident $service:ident [$($class:ident),*]
            ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?) -> $answer:ty,
            $target_kind:ident { $target:expr }
            $(, default $default:block)?;
    )*) => {
        impl<T: Transport, H: Hooks> Transport for Hooked<T, H> {
            $(
                hooked_call! {
                    $action $method ($($arg: &$arg_ty),* $(; $owned: $owned_ty)?) -> $answer,
                    $target_kind { $target }
                }
            )*

            fn peeks(&self) -> bool {
                self.hooks.peeks(&self.inner)
            }

            fn abandoned_receive_takes_nothing(&self) -> bool {
                self.hooks.abandoned_receive_takes_nothing(&self.inner)
            }

            fn attempt_timeout(&self) -> Option<Duration> {
                self.hooks.attempt_timeout(&self.inner)
            }
        }
    };
}

/// One forwarder of [`Hooked`]: the typed hook's own future handed to `around`, no `async` layer
/// of its own (which would copy the arguments into every call's future), unless the target is
/// moved into the call.
macro_rules! hooked_call {
    (
        $action:ident $method:ident ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?)
            -> $answer:ty,
        target { $target:expr }
    ) => {
        fn $method(
            &self,
            $($arg: &$arg_ty,)*
            $($owned: $owned_ty)?
        ) -> impl Future<Output = Result<$answer, TransportError>> + Send {
            let call = self.hooks.$method(&self.inner, $($arg,)* $($owned)?);
            self.hooks.around(Action::$action, $target, call)
        }
    };
    // The request moves into the call, so `around` is lent a copy of its target, kept in this
    // future (a subscribe is a startup call: the extra layer costs nothing that matters).
    (
        $action:ident $method:ident ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?)
            -> $answer:ty,
        target_owned { $target:expr }
    ) => {
        async fn $method(
            &self,
            $($arg: &$arg_ty,)*
            $($owned: $owned_ty)?
        ) -> Result<$answer, TransportError> {
            let target = ($target).clone();
            let call = self.hooks.$method(&self.inner, $($arg,)* $($owned)?);
            self.hooks.around(Action::$action, &target, call).await
        }
    };
}

transport_actions!(hooked_transport);

#[cfg(test)]
mod tests {
    use std::mem::size_of_val;
    use std::sync::Mutex;

    use super::*;
    use crate::account::Account;
    use crate::transport::{BatchFailure, ErrorKind, SendMessage};

    /// Hooks that override nothing.
    struct PassThrough;

    impl Hooks for PassThrough {}

    // A wrapper that changes nothing adds nothing to a call's future, which the engine allocates
    // for every receive and batch call.
    #[test]
    fn pass_through_hooks_hand_back_the_inner_calls_own_futures() {
        let account = Account::new();
        let hooked = Hooked::new(account.clone(), PassThrough);
        let url = "https://sqs.local/000000000000/jobs";
        macro_rules! same_size {
            ($call:ident($argument:expr)) => {
                assert_eq!(
                    size_of_val(&hooked.$call(url, $argument)),
                    size_of_val(&Transport::$call(&account, url, $argument)),
                    stringify!($call),
                )
            };
        }
        same_size!(receive_message(ReceiveMessage::new(10)));
        same_size!(delete_message_batch(Vec::new()));
        same_size!(change_message_visibility_batch(Vec::new()));
        same_size!(send_message_batch(Vec::new()));
        assert!(hooked.abandoned_receive_takes_nothing());
        assert_eq!(hooked.attempt_timeout(), None);
    }

    /// Records the actions `around` saw, refuses deletes, and shortens every receive to one
    /// message.
    #[derive(Default)]
    struct Meddling {
        seen: Mutex<Vec<(Action, String)>>,
    }

    impl Hooks for Meddling {
        fn around<R: Send>(
            &self,
            action: Action,
            queue: &str,
            call: impl Future<Output = Result<R, TransportError>> + Send,
        ) -> impl Future<Output = Result<R, TransportError>> + Send {
            self.seen.lock().unwrap().push((action, queue.to_owned()));
            call
        }

        fn receive_message(
            &self,
            inner: &impl Transport,
            queue_url: &str,
            mut request: ReceiveMessage,
        ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send {
            request.max_number_of_messages = 1;
            inner.receive_message(queue_url, request)
        }

        async fn delete_message_batch(
            &self,
            _inner: &impl Transport,
            _queue_url: &str,
            entries: Vec<DeleteEntry>,
        ) -> Result<BatchResult<()>, TransportError> {
            Ok(BatchResult {
                successful: Vec::new(),
                failed: entries
                    .into_iter()
                    .map(|entry| BatchFailure {
                        id: entry.id,
                        kind: ErrorKind::InternalError,
                        sender_fault: false,
                        message: "refused".into(),
                    })
                    .collect(),
            })
        }

        fn abandoned_receive_takes_nothing(&self, _inner: &impl Transport) -> bool {
            false
        }
    }

    // The counters are an array indexed by the action, and the names are the API's.
    #[test]
    fn every_action_is_listed_once_in_the_order_of_its_variants() {
        for (index, action) in Action::ALL.iter().enumerate() {
            assert_eq!(*action as usize, index, "{action}");
        }
        let mut names: Vec<&str> = Action::ALL.iter().map(|action| action.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Action::ALL.len());
        assert_eq!(
            Action::ChangeMessageVisibilityBatch.name(),
            "ChangeMessageVisibilityBatch"
        );
        assert!(Action::PublishBatch.is_sns() && !Action::SendMessageBatch.is_sns());
    }

    /// Records, for each call `around` saw end, whether the backend refused it before sending.
    #[derive(Default)]
    struct Unsent(Mutex<Vec<(Action, bool)>>);

    impl Hooks for Unsent {
        async fn around<R: Send>(
            &self,
            action: Action,
            _queue: &str,
            call: impl Future<Output = Result<R, TransportError>> + Send,
        ) -> Result<R, TransportError> {
            let result = call.await;
            let unsent = result.as_ref().is_err_and(TransportError::is_unsent);
            self.0.lock().unwrap().push((action, unsent));
            result
        }
    }

    #[tokio::test]
    async fn around_is_told_by_the_error_which_requests_the_backend_refused_before_sending() {
        let hooked = Hooked::new(Account::new(), Unsent::default());
        hooked.get_queue_url("orders!").await.unwrap_err();
        let url = hooked
            .create_queue("jobs", QueueAttributes::default())
            .await
            .unwrap();
        hooked
            .receive_message(&url, ReceiveMessage::new(11))
            .await
            .unwrap_err();
        hooked
            .receive_message(&url, ReceiveMessage::new(10))
            .await
            .unwrap();
        // Sent, and refused by the service.
        hooked.get_queue_url("missing").await.unwrap_err();
        assert_eq!(
            *hooked.hooks().0.lock().unwrap(),
            [
                (Action::GetQueueUrl, true),
                (Action::CreateQueue, false),
                (Action::ReceiveMessage, true),
                (Action::ReceiveMessage, false),
                (Action::GetQueueUrl, false),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn sns_calls_pass_through_hooks_that_see_each_one() {
        use crate::transport::{Publish, PublishBatchEntry, Subscribe, TopicAttributes};

        let account = Account::new();
        let hooked = Hooked::new(account.clone(), Meddling::default());
        let topic = hooked
            .create_topic("events", TopicAttributes::new())
            .await
            .unwrap();
        let queue = account.create_standard_queue("jobs").await.unwrap();
        let subscription = hooked
            .subscribe(
                Subscribe::sqs(&topic, account.queue_arn_for("jobs")).raw_message_delivery(true),
            )
            .await
            .unwrap();
        let attributes = hooked.get_topic_attributes(&topic).await.unwrap();
        assert_eq!(attributes["SubscriptionsConfirmed"], "1");
        let listed = hooked.list_subscriptions_by_topic(&topic).await.unwrap();
        assert_eq!(listed[0].subscription_arn, subscription);
        let attributes = hooked
            .get_subscription_attributes(&subscription)
            .await
            .unwrap();
        assert_eq!(attributes["RawMessageDelivery"], "true");
        let entries = vec![PublishBatchEntry::new("0", Publish::new("hello"))];
        let published = hooked.publish_batch(&topic, entries).await.unwrap();
        assert_eq!(published.successful.len(), 1);
        let received = account
            .receive_message(&queue, ReceiveMessage::new(10))
            .await
            .unwrap();
        assert_eq!(received[0].body, "hello", "the publish reached the account");

        let seen = hooked.hooks().seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                (Action::CreateTopic, "events".to_owned()),
                (Action::Subscribe, topic.clone()),
                (Action::GetTopicAttributes, topic.clone()),
                (Action::ListSubscriptionsByTopic, topic.clone()),
                (Action::GetSubscriptionAttributes, subscription.clone()),
                (Action::PublishBatch, topic.clone()),
            ]
        );
    }

    #[tokio::test]
    async fn hooks_change_requests_answer_instead_and_see_every_call() {
        let account = Account::new();
        let url = account
            .create_queue("jobs", QueueAttributes::default())
            .await
            .unwrap();
        for body in ["a", "b"] {
            account
                .send_message(&url, SendMessage::new(body))
                .await
                .unwrap();
        }
        let hooked = Hooked::new(account.clone(), Meddling::default());

        let received = hooked
            .receive_message(&url, ReceiveMessage::new(10))
            .await
            .unwrap();
        assert_eq!(received.len(), 1, "the hook asked for one");
        let deleted = hooked
            .delete_message_batch(
                &url,
                vec![DeleteEntry {
                    id: "0".into(),
                    receipt_handle: received[0].receipt_handle.clone(),
                }],
            )
            .await
            .unwrap();
        assert_eq!(deleted.failed.len(), 1, "the hook refused it");
        assert_eq!(hooked.get_queue_url("jobs").await.unwrap(), url);
        assert!(!hooked.abandoned_receive_takes_nothing());

        let seen = hooked.hooks().seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                (Action::ReceiveMessage, url.clone()),
                (Action::DeleteMessageBatch, url.clone()),
                (Action::GetQueueUrl, "jobs".to_owned()),
            ]
        );
        let attributes = account
            .get_queue_attributes(&url, &["ApproximateNumberOfMessagesNotVisible"])
            .await
            .unwrap();
        assert_eq!(
            attributes["ApproximateNumberOfMessagesNotVisible"], "1",
            "the refused delete never reached the account"
        );
    }
}
