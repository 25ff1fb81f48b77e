//! The seam between the engine and a queue service: the [`Transport`] trait, its erased form that
//! a broker shares, [`layer`], which makes a transport that changes a few calls of another out of
//! hooks, and [`meter`], the hooks that count and time every call of a broker.
//!
//! A transport speaks in the SQS and SNS words of [`model`](crate::model): its requests,
//! responses and errors are re-exported here, so an implementation imports one module.
//!
//! The SNS calls (topics, subscriptions, `PublishBatch`) and the operators' calls (`ListQueues`,
//! `PurgeQueue`, and a peek that changes nothing, which only the in-process account has) have
//! default bodies that answer [`ErrorKind::UnsupportedOperation`], so a transport written for the
//! engine's SQS calls alone keeps compiling and says which call it lacks when one is made.
//!
//! # The actions, written once
//!
//! Each action is one row of the table `transport_actions!` below: its name, its arguments and
//! answer, the argument that names its queue or topic, and a default body if a transport may lack
//! it. The table
//! expands, through one small `macro_rules!` a part, to the [`Transport`] method, its erased
//! mirror, the typed hook and the forwarder of [`layer::Hooked`], the [`layer::Action`] variant with
//! its name, and the field of [`meter::ApiCalls`] with the sums it counts in
//! ([`messaging`](meter::ApiCalls::messaging), [`changing`](meter::ApiCalls::changing)). A new action is therefore a row and its two
//! backend implementations (the in-process account's and the aws-sdk transport's), and nothing
//! else.
//!
//! Why macros here and plain generic code elsewhere: the parts are signatures (a trait method, a
//! hook with a default body, an enum variant, a struct field), one per action, and Rust has no
//! generic way to write "a method per row"; what treats every action alike is generic code over
//! [`layer::Action`] instead: the meter is one hook ([`layer::Hooks::around`]) that counts into an
//! array indexed by the action and times each call. The typed methods and their futures stay as
//! they were, so the hot path pays for no table.
//!
//! The rules a backend checks of a whole request before sending anything (a queue name SQS would
//! refuse, a batch of 11) are the backend's, run once a call as its first step: the in-process
//! account answers as SQS would, the aws-sdk transport refuses before the network. Its error then
//! [says it was unsent](TransportError::is_unsent) (a backend marks it with
//! [`TransportError::unsent`]), which is how the meter leaves such a call uncounted: no layer
//! checks a request again.

use std::future::Future;
use std::sync::Arc;

pub use crate::model::error::{BatchFailure, ErrorKind, TransportError};
pub use crate::model::subscription::{
    Subscribe, Subscription, SubscriptionAttributes, TopicAttributes,
};
pub use crate::model::topic::{Publish, PublishBatchEntry, PublishBatchResult, Published};
pub use crate::model::wire::*;

/// The table of the transport's actions: one row an action, and everything that lists the actions
/// is expanded from it (see [the module](self)). `transport_actions!(callback)` hands every row to
/// `callback!`, which writes its part: [`Transport`] and its erased form here, the typed hooks and
/// the forwarders of [`layer::Hooked`], [`layer::Action`], and the meter's [`meter::ApiCalls`].
///
/// A row: the trait method's docs; the action's variant (its name in the API), the method, the
/// service (`sqs` or `sns`) and the classes the meter sums it in (`messaging`: the calls a message
/// costs, for [`ApiCalls::messaging`](meter::ApiCalls::messaging); `changing`: the calls that
/// change what is stored, for [`ApiCalls::changing`](meter::ApiCalls::changing)); the borrowed arguments, then after `;` the owned one; the answer; the
/// argument `around` sees as the call's target (`target_owned` when it is moved into the call);
/// and, for an action a transport need not implement, the default body.
macro_rules! transport_actions {
    ($callback:ident) => {
        $callback! {
            /// `GetQueueUrl`.
            GetQueueUrl get_queue_url sqs [] (name: &str) -> String,
                target { name };

            /// `CreateQueue`: creates the queue or returns the URL of an identical one.
            CreateQueue create_queue sqs [changing] (name: &str; attributes: QueueAttributes) -> String,
                target { name };

            /// `GetQueueAttributes`.
            GetQueueAttributes get_queue_attributes sqs []
                (queue_url: &str, names: &[&str]) -> QueueAttributes,
                target { queue_url };

            /// `SetQueueAttributes`: all or nothing. The broker sets a queue's `Policy` with it, to
            /// let the topics the queue is subscribed to send to it.
            SetQueueAttributes set_queue_attributes sqs [changing]
                (queue_url: &str; attributes: QueueAttributes) -> (),
                target { queue_url },
                default {
                    let _ = (queue_url, attributes);
                    std::future::ready(Err(without_operation(
                        "SetQueueAttributes",
                        "subscribing a queue to a topic (the queue's policy)",
                    )))
                };

            /// `SendMessageBatch`.
            SendMessageBatch send_message_batch sqs [messaging, changing]
                (queue_url: &str; entries: Vec<SendBatchEntry>) -> BatchResult<SentMessage>,
                target { queue_url };

            /// `ReceiveMessage`.
            ReceiveMessage receive_message sqs [messaging]
                (queue_url: &str; request: ReceiveMessage) -> Vec<ReceivedMessage>,
                target { queue_url };

            /// `DeleteMessageBatch`.
            DeleteMessageBatch delete_message_batch sqs [messaging, changing]
                (queue_url: &str; entries: Vec<DeleteEntry>) -> BatchResult<()>,
                target { queue_url };

            /// `ChangeMessageVisibilityBatch`.
            ChangeMessageVisibilityBatch change_message_visibility_batch sqs [messaging]
                (queue_url: &str; entries: Vec<ChangeVisibilityEntry>) -> BatchResult<()>,
                target { queue_url };

            /// `ListQueues`: the URLs of the queues whose names start with `prefix` (every page, in
            /// one list, sorted).
            ListQueues list_queues sqs [] (prefix: &str) -> Vec<String>,
                target { prefix },
                default {
                    let _ = prefix;
                    std::future::ready(Err(without_operation("ListQueues", "listing queues")))
                };

            /// `PurgeQueue`: deletes every message of the queue, in flight or not (SQS allows one
            /// purge a minute).
            PurgeQueue purge_queue sqs [changing] (queue_url: &str) -> (),
                target { queue_url },
                default {
                    let _ = queue_url;
                    std::future::ready(Err(without_operation("PurgeQueue", "purging a queue")))
                };

            /// A look at up to `request.max` of the queue's messages in storage order, after
            /// skipping `request.offset`, that changes nothing: no receive counted, no visibility
            /// changed. Only a transport that [`peeks`](Self::peeks) implements it; SQS has no such
            /// call.
            PeekMessages peek_messages sqs []
                (queue_url: &str; request: PeekMessages) -> Vec<PeekedMessage>,
                target { queue_url },
                default {
                    let _ = (queue_url, request);
                    std::future::ready(Err(without_operation(
                        "PeekMessages",
                        "peeking without receiving (SQS has no such call)",
                    )))
                };

            /// SNS `CreateTopic`: creates the topic (FIFO with `FifoTopic=true`) and returns its
            /// ARN, or the ARN of the topic of this name if its attributes are the ones given.
            CreateTopic create_topic sns [changing] (name: &str; attributes: TopicAttributes) -> String,
                target { name },
                default {
                    let _ = (name, attributes);
                    std::future::ready(Err(without_sns("CreateTopic")))
                };

            /// SNS `GetTopicAttributes`.
            GetTopicAttributes get_topic_attributes sns [] (topic_arn: &str) -> TopicAttributes,
                target { topic_arn },
                default {
                    let _ = topic_arn;
                    std::future::ready(Err(without_sns("GetTopicAttributes")))
                };

            /// SNS `Subscribe`: returns the subscription's ARN (SNS's `ReturnSubscriptionArn`), the
            /// existing one's when the endpoint is subscribed already with the attributes given.
            Subscribe subscribe sns [changing] (; request: Subscribe) -> String,
                target_owned { request.topic_arn },
                default {
                    let _ = request;
                    std::future::ready(Err(without_sns("Subscribe")))
                };

            /// SNS `GetSubscriptionAttributes`.
            GetSubscriptionAttributes get_subscription_attributes sns []
                (subscription_arn: &str) -> SubscriptionAttributes,
                target { subscription_arn },
                default {
                    let _ = subscription_arn;
                    std::future::ready(Err(without_sns("GetSubscriptionAttributes")))
                };

            /// SNS `ListSubscriptionsByTopic`: every page, in one list.
            ListSubscriptionsByTopic list_subscriptions_by_topic sns []
                (topic_arn: &str) -> Vec<Subscription>,
                target { topic_arn },
                default {
                    let _ = topic_arn;
                    std::future::ready(Err(without_sns("ListSubscriptionsByTopic")))
                };

            /// SNS `PublishBatch` (a single publish is a batch of one): each entry succeeds or
            /// fails alone, as in `SendMessageBatch`.
            PublishBatch publish_batch sns [messaging, changing]
                (topic_arn: &str; entries: Vec<PublishBatchEntry>) -> PublishBatchResult,
                target { topic_arn },
                default {
                    let _ = (topic_arn, entries);
                    std::future::ready(Err(without_sns("PublishBatch")))
                };

            /// S3 `CreateBucket`: creates the bucket, or succeeds when this account owns it
            /// already (S3's `BucketAlreadyOwnedByYou`).
            CreateBucket create_bucket s3 [changing] (bucket: &str) -> (),
                target { bucket },
                default {
                    let _ = bucket;
                    std::future::ready(Err(without_s3("CreateBucket")))
                };

            /// S3 `PutObject`: stores `body` under `key`, replacing what was there.
            PutObject put_object s3 [changing] (bucket: &str, key: &str; body: Vec<u8>) -> (),
                target { bucket },
                default {
                    let _ = (bucket, key, body);
                    std::future::ready(Err(without_s3("PutObject")))
                };

            /// S3 `GetObject`: the object's bytes.
            GetObject get_object s3 [] (bucket: &str, key: &str) -> Vec<u8>,
                target { bucket },
                default {
                    let _ = (bucket, key);
                    std::future::ready(Err(without_s3("GetObject")))
                };

            /// S3 `HeadObject`: the object's size in bytes, without its bytes.
            HeadObject head_object s3 [] (bucket: &str, key: &str) -> u64,
                target { bucket },
                default {
                    let _ = (bucket, key);
                    std::future::ready(Err(without_s3("HeadObject")))
                };

            /// S3 `CopyObject` of an object onto itself, its metadata replaced: the object is written
            /// again as it is, so its age (what a bucket's lifecycle rule reads) starts now.
            CopyObject copy_object s3 [changing] (bucket: &str, key: &str) -> (),
                target { bucket },
                default {
                    let _ = (bucket, key);
                    std::future::ready(Err(without_s3("CopyObject")))
                };

            /// S3 `DeleteObject`: succeeds whether or not the object was there, as S3 does.
            DeleteObject delete_object s3 [changing] (bucket: &str, key: &str) -> (),
                target { bucket },
                default {
                    let _ = (bucket, key);
                    std::future::ready(Err(without_s3("DeleteObject")))
                };
        }
    };
}

pub mod layer;
pub mod meter;

/// Writes [`Transport`]: a method an action, with its default body if the row has one.
macro_rules! transport_trait {
    ($(
        $(#[$doc:meta])*
        $action:ident $method:ident $service:ident [$($class:ident),*]
            ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?) -> $answer:ty,
            $target_kind:ident { $target:expr }
            $(, default $default:block)?;
    )*) => {
        /// What the engine needs from a queue service. The in-process
        /// [`Account`](crate::account::Account) and the aws-sdk transport answer alike, with the
        /// same [`ErrorKind`]s, so everything above this trait is tested once, on the account.
        ///
        /// Every method mirrors the SQS or SNS action of the same name. The SNS methods answer
        /// [`ErrorKind::UnsupportedOperation`] unless implemented (see [the module](self)).
        pub trait Transport: Send + Sync + 'static {
            $(
                transport_method! {
                    $(#[$doc])*
                    $method ($($arg: &$arg_ty),* $(; $owned: $owned_ty)?) -> $answer
                    $(, $default)?
                }
            )*

            /// Whether [`peek_messages`](Self::peek_messages) is implemented: a look at a queue's
            /// messages that changes nothing. SQS has no such call (a receive counts and hides what
            /// it returns), so by default a transport does not peek; the in-process account does.
            fn peeks(&self) -> bool {
                false
            }

            /// Whether a `ReceiveMessage` dropped before it answers has taken no message. Over a
            /// network it may have: the server still hands messages to the abandoned call, and they
            /// stay invisible for their visibility timeout. So by default the engine lets a receive
            /// in flight at shutdown finish (within the long poll) and releases what it got; a
            /// backend that takes messages only as it answers says `true` here, and shutdown drops
            /// the wait instead.
            fn abandoned_receive_takes_nothing(&self) -> bool {
                false
            }

            /// The longest one attempt of a call may take before it is given up, if the transport
            /// bounds it: a subscription's long poll must be shorter, or every receive is cut and
            /// retried.
            fn attempt_timeout(&self) -> Option<std::time::Duration> {
                None
            }
        }
    };
}

/// One method of [`Transport`]: required, or with the row's default body.
macro_rules! transport_method {
    (
        $(#[$doc:meta])*
        $method:ident ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?) -> $answer:ty
    ) => {
        $(#[$doc])*
        fn $method(
            &self,
            $($arg: &$arg_ty,)*
            $($owned: $owned_ty)?
        ) -> impl Future<Output = Result<$answer, TransportError>> + Send;
    };
    (
        $(#[$doc:meta])*
        $method:ident ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?) -> $answer:ty,
        $default:block
    ) => {
        $(#[$doc])*
        fn $method(
            &self,
            $($arg: &$arg_ty,)*
            $($owned: $owned_ty)?
        ) -> impl Future<Output = Result<$answer, TransportError>> + Send $default
    };
}

transport_actions!(transport_trait);

/// What an SNS call answers on a transport that does not implement it.
fn without_sns(action: &str) -> TransportError {
    TransportError::service(
        ErrorKind::UnsupportedOperation,
        format!(
            "this transport has no SNS: it does not implement `{action}`; implement the SNS \
             methods of `Transport`, or use a transport that has them (the in-process account)"
        ),
    )
}

/// What an S3 call answers on a transport without S3.
fn without_s3(action: &str) -> TransportError {
    TransportError::service(
        ErrorKind::UnsupportedOperation,
        format!(
            "this transport has no S3: it does not implement `{action}`, which large payloads \
             need; implement the S3 methods of `Transport`, or use a transport that has them (the \
             in-process account)"
        ),
    )
}

/// What a queue call answers on a transport that does not implement it.
fn without_operation(action: &str, what: &str) -> TransportError {
    TransportError::service(
        ErrorKind::UnsupportedOperation,
        format!(
            "this transport does not implement `{action}`, which {what} needs; implement it, or \
             use a transport that has it"
        ),
    )
}

pub use crate::task::BoxFuture;

/// Writes [`DynTransport`] and its blanket implementation: each action's future boxed.
macro_rules! dyn_transport {
    ($(
        $(#[$doc:meta])*
        $action:ident $method:ident $service:ident [$($class:ident),*]
            ($($arg:ident: &$arg_ty:ty),* $(; $owned:ident: $owned_ty:ty)?) -> $answer:ty,
            $target_kind:ident { $target:expr }
            $(, default $default:block)?;
    )*) => {
        /// [`Transport`] behind a pointer, so a broker holds either backend as one type; every
        /// [`Transport`] is one.
        // Some actions are made only by the operators' tools, the SNS resolver or tests, which a
        // build may not have.
        #[allow(dead_code)]
        pub(crate) trait DynTransport: Send + Sync + 'static {
            $(
                fn $method<'a>(
                    &'a self,
                    $($arg: &'a $arg_ty,)*
                    $($owned: $owned_ty)?
                ) -> BoxFuture<'a, Result<$answer, TransportError>>;
            )*
            fn peeks(&self) -> bool;
            fn abandoned_receive_takes_nothing(&self) -> bool;
            fn attempt_timeout(&self) -> Option<std::time::Duration>;
        }

        impl<T: Transport> DynTransport for T {
            $(
                fn $method<'a>(
                    &'a self,
                    $($arg: &'a $arg_ty,)*
                    $($owned: $owned_ty)?
                ) -> BoxFuture<'a, Result<$answer, TransportError>> {
                    Box::pin(Transport::$method(self, $($arg,)* $($owned)?))
                }
            )*
            fn peeks(&self) -> bool {
                Transport::peeks(self)
            }
            fn abandoned_receive_takes_nothing(&self) -> bool {
                Transport::abandoned_receive_takes_nothing(self)
            }
            fn attempt_timeout(&self) -> Option<std::time::Duration> {
                Transport::attempt_timeout(self)
            }
        }
    };
}

transport_actions!(dyn_transport);

/// The transport a broker and its engine share.
pub(crate) type SharedTransport = Arc<dyn DynTransport>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A transport written for SQS alone, before SNS: its SQS calls are never made here.
    struct SqsOnly;

    impl Transport for SqsOnly {
        async fn get_queue_url(&self, _name: &str) -> Result<String, TransportError> {
            unreachable!()
        }
        async fn create_queue(
            &self,
            _name: &str,
            _attributes: QueueAttributes,
        ) -> Result<String, TransportError> {
            unreachable!()
        }
        async fn get_queue_attributes(
            &self,
            _queue_url: &str,
            _names: &[&str],
        ) -> Result<QueueAttributes, TransportError> {
            unreachable!()
        }
        async fn send_message_batch(
            &self,
            _queue_url: &str,
            _entries: Vec<SendBatchEntry>,
        ) -> Result<BatchResult<SentMessage>, TransportError> {
            unreachable!()
        }
        async fn receive_message(
            &self,
            _queue_url: &str,
            _request: ReceiveMessage,
        ) -> Result<Vec<ReceivedMessage>, TransportError> {
            unreachable!()
        }
        async fn delete_message_batch(
            &self,
            _queue_url: &str,
            _entries: Vec<DeleteEntry>,
        ) -> Result<BatchResult<()>, TransportError> {
            unreachable!()
        }
        async fn change_message_visibility_batch(
            &self,
            _queue_url: &str,
            _entries: Vec<ChangeVisibilityEntry>,
        ) -> Result<BatchResult<()>, TransportError> {
            unreachable!()
        }
    }

    #[tokio::test]
    async fn a_transport_without_sns_says_so_for_each_sns_call_and_the_queue_policy_call() {
        let transport: SharedTransport = Arc::new(SqsOnly);
        assert!(!transport.peeks());
        let topic = "arn:aws:sns:us-east-1:000000000000:events";
        let answers = [
            transport
                .create_topic("events", TopicAttributes::new())
                .await
                .map(drop),
            transport.get_topic_attributes(topic).await.map(drop),
            transport
                .subscribe(Subscribe::sqs(
                    topic,
                    "arn:aws:sqs:us-east-1:000000000000:q",
                ))
                .await
                .map(drop),
            transport.get_subscription_attributes(topic).await.map(drop),
            transport.list_subscriptions_by_topic(topic).await.map(drop),
            transport
                .publish_batch(topic, vec![PublishBatchEntry::new("0", Publish::new("m"))])
                .await
                .map(drop),
            transport
                .set_queue_attributes("http://q", QueueAttributes::new())
                .await,
            transport.list_queues("").await.map(drop),
            transport.purge_queue("http://q").await,
            transport
                .peek_messages("http://q", PeekMessages { offset: 0, max: 1 })
                .await
                .map(drop),
        ];
        for (answer, action) in answers.into_iter().zip([
            "CreateTopic",
            "GetTopicAttributes",
            "Subscribe",
            "GetSubscriptionAttributes",
            "ListSubscriptionsByTopic",
            "PublishBatch",
            "SetQueueAttributes",
            "ListQueues",
            "PurgeQueue",
            "PeekMessages",
        ]) {
            let error = answer.unwrap_err();
            assert_eq!(error.kind(), Some(ErrorKind::UnsupportedOperation));
            assert!(error.to_string().contains(action), "{error}");
        }
    }
}
