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

use std::future::Future;
use std::sync::Arc;

pub use crate::model::error::{BatchFailure, ErrorKind, TransportError};
pub use crate::model::subscription::{
    Subscribe, Subscription, SubscriptionAttributes, TopicAttributes,
};
pub use crate::model::topic::{Publish, PublishBatchEntry, PublishBatchResult, Published};
pub use crate::model::wire::*;

pub mod layer;
pub mod meter;

/// What the engine needs from a queue service. The in-process
/// [`Account`](crate::account::Account) and the aws-sdk transport answer alike, with the same
/// [`ErrorKind`]s, so everything above this trait is tested once, on the account.
///
/// Every method mirrors the SQS or SNS action of the same name. The SNS methods answer
/// [`ErrorKind::UnsupportedOperation`] unless implemented (see [the module](self)).
pub trait Transport: Send + Sync + 'static {
    /// `GetQueueUrl`.
    fn get_queue_url(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<String, TransportError>> + Send;

    /// `CreateQueue`: creates the queue or returns the URL of an identical one.
    fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send;

    /// `GetQueueAttributes`.
    fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> impl Future<Output = Result<QueueAttributes, TransportError>> + Send;

    /// `SetQueueAttributes`: all or nothing. The broker sets a queue's `Policy` with it, to let
    /// the topics the queue is subscribed to send to it.
    fn set_queue_attributes(
        &self,
        queue_url: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        let _ = (queue_url, attributes);
        std::future::ready(Err(TransportError::service(
            ErrorKind::UnsupportedOperation,
            "this transport does not implement `SetQueueAttributes`, which subscribing a queue to a \
             topic needs (the queue's policy); implement it, or use a transport that has it",
        )))
    }

    /// `SendMessageBatch`.
    fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> impl Future<Output = Result<BatchResult<SentMessage>, TransportError>> + Send;

    /// `ReceiveMessage`.
    fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send;

    /// `DeleteMessageBatch`.
    fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send;

    /// `ChangeMessageVisibilityBatch`.
    fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send;

    /// `ListQueues`: the URLs of the queues whose names start with `prefix` (every page, in one
    /// list, sorted).
    fn list_queues(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, TransportError>> + Send {
        let _ = prefix;
        std::future::ready(Err(without_operation("ListQueues", "listing queues")))
    }

    /// `PurgeQueue`: deletes every message of the queue, in flight or not (SQS allows one purge
    /// a minute).
    fn purge_queue(
        &self,
        queue_url: &str,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        let _ = queue_url;
        std::future::ready(Err(without_operation("PurgeQueue", "purging a queue")))
    }

    /// Whether [`peek_messages`](Self::peek_messages) is implemented: a look at a queue's
    /// messages that changes nothing. SQS has no such call (a receive counts and hides what it
    /// returns), so by default a transport does not peek; the in-process account does.
    fn peeks(&self) -> bool {
        false
    }

    /// A look at up to `request.max` of the queue's messages in storage order, after skipping
    /// `request.offset`, that changes nothing: no receive counted, no visibility changed. Only a
    /// transport that [`peeks`](Self::peeks) implements it.
    fn peek_messages(
        &self,
        queue_url: &str,
        request: PeekMessages,
    ) -> impl Future<Output = Result<Vec<PeekedMessage>, TransportError>> + Send {
        let _ = (queue_url, request);
        std::future::ready(Err(without_operation(
            "PeekMessages",
            "peeking without receiving (SQS has no such call)",
        )))
    }

    /// SNS `CreateTopic`: creates the topic (FIFO with `FifoTopic=true`) and returns its ARN, or
    /// the ARN of the topic of this name if its attributes are the ones given.
    fn create_topic(
        &self,
        name: &str,
        attributes: TopicAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        let _ = (name, attributes);
        std::future::ready(Err(without_sns("CreateTopic")))
    }

    /// SNS `GetTopicAttributes`.
    fn get_topic_attributes(
        &self,
        topic_arn: &str,
    ) -> impl Future<Output = Result<TopicAttributes, TransportError>> + Send {
        let _ = topic_arn;
        std::future::ready(Err(without_sns("GetTopicAttributes")))
    }

    /// SNS `Subscribe`: returns the subscription's ARN (SNS's `ReturnSubscriptionArn`), the
    /// existing one's when the endpoint is subscribed already with the attributes given.
    fn subscribe(
        &self,
        request: Subscribe,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        let _ = request;
        std::future::ready(Err(without_sns("Subscribe")))
    }

    /// SNS `GetSubscriptionAttributes`.
    fn get_subscription_attributes(
        &self,
        subscription_arn: &str,
    ) -> impl Future<Output = Result<SubscriptionAttributes, TransportError>> + Send {
        let _ = subscription_arn;
        std::future::ready(Err(without_sns("GetSubscriptionAttributes")))
    }

    /// SNS `ListSubscriptionsByTopic`: every page, in one list.
    fn list_subscriptions_by_topic(
        &self,
        topic_arn: &str,
    ) -> impl Future<Output = Result<Vec<Subscription>, TransportError>> + Send {
        let _ = topic_arn;
        std::future::ready(Err(without_sns("ListSubscriptionsByTopic")))
    }

    /// SNS `PublishBatch` (a single publish is a batch of one): each entry succeeds or fails
    /// alone, as in `SendMessageBatch`.
    fn publish_batch(
        &self,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
    ) -> impl Future<Output = Result<PublishBatchResult, TransportError>> + Send {
        let _ = (topic_arn, entries);
        std::future::ready(Err(without_sns("PublishBatch")))
    }

    /// Whether a `ReceiveMessage` dropped before it answers has taken no message. Over a network
    /// it may have: the server still hands messages to the abandoned call, and they stay
    /// invisible for their visibility timeout. So by default the engine lets a receive in flight
    /// at shutdown finish (within the long poll) and releases what it got; a backend that takes
    /// messages only as it answers says `true` here, and shutdown drops the wait instead.
    fn abandoned_receive_takes_nothing(&self) -> bool {
        false
    }

    /// The longest one attempt of a call may take before it is given up, if the transport bounds
    /// it: a subscription's long poll must be shorter, or every receive is cut and retried.
    fn attempt_timeout(&self) -> Option<std::time::Duration> {
        None
    }
}

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

/// [`Transport`] behind a pointer, so a broker holds either backend as one type; every
/// [`Transport`] is one.
pub(crate) trait DynTransport: Send + Sync + 'static {
    fn get_queue_url<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<String, TransportError>>;
    fn create_queue<'a>(
        &'a self,
        name: &'a str,
        attributes: QueueAttributes,
    ) -> BoxFuture<'a, Result<String, TransportError>>;
    fn get_queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
        names: &'a [&'a str],
    ) -> BoxFuture<'a, Result<QueueAttributes, TransportError>>;
    // Made by the resolver of topic subscriptions; until then by tests.
    #[cfg_attr(not(test), allow(dead_code))]
    fn set_queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
        attributes: QueueAttributes,
    ) -> BoxFuture<'a, Result<(), TransportError>>;
    fn send_message_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<SendBatchEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<SentMessage>, TransportError>>;
    fn receive_message<'a>(
        &'a self,
        queue_url: &'a str,
        request: ReceiveMessage,
    ) -> BoxFuture<'a, Result<Vec<ReceivedMessage>, TransportError>>;
    fn delete_message_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<DeleteEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>>;
    fn change_message_visibility_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>>;
    fn list_queues<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, TransportError>>;
    fn purge_queue<'a>(&'a self, queue_url: &'a str) -> BoxFuture<'a, Result<(), TransportError>>;
    fn peeks(&self) -> bool;
    fn peek_messages<'a>(
        &'a self,
        queue_url: &'a str,
        request: PeekMessages,
    ) -> BoxFuture<'a, Result<Vec<PeekedMessage>, TransportError>>;
    // The SNS calls: made by the broker's SNS publisher; until then
    // by tests only.
    #[cfg_attr(not(test), allow(dead_code))]
    fn create_topic<'a>(
        &'a self,
        name: &'a str,
        attributes: TopicAttributes,
    ) -> BoxFuture<'a, Result<String, TransportError>>;
    #[cfg_attr(not(test), allow(dead_code))]
    fn get_topic_attributes<'a>(
        &'a self,
        topic_arn: &'a str,
    ) -> BoxFuture<'a, Result<TopicAttributes, TransportError>>;
    #[cfg_attr(not(test), allow(dead_code))]
    fn subscribe<'a>(&'a self, request: Subscribe)
        -> BoxFuture<'a, Result<String, TransportError>>;
    #[cfg_attr(not(test), allow(dead_code))]
    fn get_subscription_attributes<'a>(
        &'a self,
        subscription_arn: &'a str,
    ) -> BoxFuture<'a, Result<SubscriptionAttributes, TransportError>>;
    #[cfg_attr(not(test), allow(dead_code))]
    fn list_subscriptions_by_topic<'a>(
        &'a self,
        topic_arn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Subscription>, TransportError>>;
    #[cfg_attr(not(test), allow(dead_code))]
    fn publish_batch<'a>(
        &'a self,
        topic_arn: &'a str,
        entries: Vec<PublishBatchEntry>,
    ) -> BoxFuture<'a, Result<PublishBatchResult, TransportError>>;
    fn abandoned_receive_takes_nothing(&self) -> bool;
    fn attempt_timeout(&self) -> Option<std::time::Duration>;
}

impl<T: Transport> DynTransport for T {
    fn get_queue_url<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<String, TransportError>> {
        Box::pin(Transport::get_queue_url(self, name))
    }
    fn create_queue<'a>(
        &'a self,
        name: &'a str,
        attributes: QueueAttributes,
    ) -> BoxFuture<'a, Result<String, TransportError>> {
        Box::pin(Transport::create_queue(self, name, attributes))
    }
    fn get_queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
        names: &'a [&'a str],
    ) -> BoxFuture<'a, Result<QueueAttributes, TransportError>> {
        Box::pin(Transport::get_queue_attributes(self, queue_url, names))
    }
    fn set_queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
        attributes: QueueAttributes,
    ) -> BoxFuture<'a, Result<(), TransportError>> {
        Box::pin(Transport::set_queue_attributes(self, queue_url, attributes))
    }
    fn send_message_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<SendBatchEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<SentMessage>, TransportError>> {
        Box::pin(Transport::send_message_batch(self, queue_url, entries))
    }
    fn receive_message<'a>(
        &'a self,
        queue_url: &'a str,
        request: ReceiveMessage,
    ) -> BoxFuture<'a, Result<Vec<ReceivedMessage>, TransportError>> {
        Box::pin(Transport::receive_message(self, queue_url, request))
    }
    fn delete_message_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<DeleteEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>> {
        Box::pin(Transport::delete_message_batch(self, queue_url, entries))
    }
    fn change_message_visibility_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>> {
        Box::pin(Transport::change_message_visibility_batch(
            self, queue_url, entries,
        ))
    }
    fn list_queues<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, TransportError>> {
        Box::pin(Transport::list_queues(self, prefix))
    }
    fn purge_queue<'a>(&'a self, queue_url: &'a str) -> BoxFuture<'a, Result<(), TransportError>> {
        Box::pin(Transport::purge_queue(self, queue_url))
    }
    fn peeks(&self) -> bool {
        Transport::peeks(self)
    }
    fn peek_messages<'a>(
        &'a self,
        queue_url: &'a str,
        request: PeekMessages,
    ) -> BoxFuture<'a, Result<Vec<PeekedMessage>, TransportError>> {
        Box::pin(Transport::peek_messages(self, queue_url, request))
    }
    fn create_topic<'a>(
        &'a self,
        name: &'a str,
        attributes: TopicAttributes,
    ) -> BoxFuture<'a, Result<String, TransportError>> {
        Box::pin(Transport::create_topic(self, name, attributes))
    }
    fn get_topic_attributes<'a>(
        &'a self,
        topic_arn: &'a str,
    ) -> BoxFuture<'a, Result<TopicAttributes, TransportError>> {
        Box::pin(Transport::get_topic_attributes(self, topic_arn))
    }
    fn subscribe<'a>(
        &'a self,
        request: Subscribe,
    ) -> BoxFuture<'a, Result<String, TransportError>> {
        Box::pin(Transport::subscribe(self, request))
    }
    fn get_subscription_attributes<'a>(
        &'a self,
        subscription_arn: &'a str,
    ) -> BoxFuture<'a, Result<SubscriptionAttributes, TransportError>> {
        Box::pin(Transport::get_subscription_attributes(
            self,
            subscription_arn,
        ))
    }
    fn list_subscriptions_by_topic<'a>(
        &'a self,
        topic_arn: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Subscription>, TransportError>> {
        Box::pin(Transport::list_subscriptions_by_topic(self, topic_arn))
    }
    fn publish_batch<'a>(
        &'a self,
        topic_arn: &'a str,
        entries: Vec<PublishBatchEntry>,
    ) -> BoxFuture<'a, Result<PublishBatchResult, TransportError>> {
        Box::pin(Transport::publish_batch(self, topic_arn, entries))
    }
    fn abandoned_receive_takes_nothing(&self) -> bool {
        Transport::abandoned_receive_takes_nothing(self)
    }
    fn attempt_timeout(&self) -> Option<std::time::Duration> {
        Transport::attempt_timeout(self)
    }
}

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
