//! Counts of SQS and SNS API calls by action, kept by every broker over whatever transport it has, so
//! tests and benchmarks can see what a workload costs (SQS bills per request); each call is also
//! recorded as a metric (see [`crate::metrics`]). The meter is hooks over the broker's transport:
//! [`Hooks::around`] times every call, and each action's typed hook counts it, unless its request
//! fails the checks both backends make of a whole request before anything is sent (a queue name
//! SQS would refuse, a batch of 11): such a call is refused without reaching SQS, so SQS neither
//! sees nor bills it, and it is not counted.

use std::future::Future;
use std::ops::Sub;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::layer::{Action, Hooks};
use super::{
    BatchResult, ChangeVisibilityEntry, DeleteEntry, PeekMessages, PeekedMessage,
    PublishBatchEntry, PublishBatchResult, QueueAttributes, ReceiveMessage, ReceivedMessage,
    SendBatchEntry, SentMessage, Subscribe, Subscription, SubscriptionAttributes, TopicAttributes,
    Transport, TransportError,
};
use crate::model::rules;
use crate::model::subscription;
use crate::model::topic::{self, PublishTarget, TopicArn};

/// SQS and SNS API calls by action: those sent, not those a backend refused before sending them (see
/// [the module](self)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiCalls {
    /// `GetQueueUrl`.
    pub get_queue_url: u64,
    /// `CreateQueue`.
    pub create_queue: u64,
    /// `GetQueueAttributes`.
    pub get_queue_attributes: u64,
    /// `SetQueueAttributes`.
    pub set_queue_attributes: u64,
    /// `SendMessageBatch`.
    pub send_message_batch: u64,
    /// `ReceiveMessage`.
    pub receive_message: u64,
    /// `DeleteMessageBatch`.
    pub delete_message_batch: u64,
    /// `ChangeMessageVisibilityBatch`.
    pub change_message_visibility_batch: u64,
    /// `ListQueues`.
    pub list_queues: u64,
    /// `PurgeQueue`.
    pub purge_queue: u64,
    /// The in-process account's peeks (a call SQS does not have, and does not bill).
    pub peek_messages: u64,
    /// SNS `CreateTopic`.
    pub create_topic: u64,
    /// SNS `GetTopicAttributes`.
    pub get_topic_attributes: u64,
    /// SNS `Subscribe`.
    pub subscribe: u64,
    /// SNS `GetSubscriptionAttributes`.
    pub get_subscription_attributes: u64,
    /// SNS `ListSubscriptionsByTopic`.
    pub list_subscriptions_by_topic: u64,
    /// SNS `PublishBatch`: one a batch, however many entries (SNS bills a request per batch).
    pub publish_batch: u64,
}

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

impl Sub for ApiCalls {
    type Output = ApiCalls;

    /// The calls made between two snapshots.
    fn sub(self, earlier: ApiCalls) -> ApiCalls {
        ApiCalls {
            get_queue_url: self.get_queue_url - earlier.get_queue_url,
            create_queue: self.create_queue - earlier.create_queue,
            get_queue_attributes: self.get_queue_attributes - earlier.get_queue_attributes,
            set_queue_attributes: self.set_queue_attributes - earlier.set_queue_attributes,
            send_message_batch: self.send_message_batch - earlier.send_message_batch,
            receive_message: self.receive_message - earlier.receive_message,
            delete_message_batch: self.delete_message_batch - earlier.delete_message_batch,
            change_message_visibility_batch: self.change_message_visibility_batch
                - earlier.change_message_visibility_batch,
            list_queues: self.list_queues - earlier.list_queues,
            purge_queue: self.purge_queue - earlier.purge_queue,
            peek_messages: self.peek_messages - earlier.peek_messages,
            create_topic: self.create_topic - earlier.create_topic,
            get_topic_attributes: self.get_topic_attributes - earlier.get_topic_attributes,
            subscribe: self.subscribe - earlier.subscribe,
            get_subscription_attributes: self.get_subscription_attributes
                - earlier.get_subscription_attributes,
            list_subscriptions_by_topic: self.list_subscriptions_by_topic
                - earlier.list_subscriptions_by_topic,
            publish_batch: self.publish_batch - earlier.publish_batch,
        }
    }
}

/// The live counters behind [`ApiCalls`].
#[derive(Debug, Default)]
pub(crate) struct CallCounter {
    get_queue_url: AtomicU64,
    create_queue: AtomicU64,
    get_queue_attributes: AtomicU64,
    set_queue_attributes: AtomicU64,
    send_message_batch: AtomicU64,
    receive_message: AtomicU64,
    delete_message_batch: AtomicU64,
    change_message_visibility_batch: AtomicU64,
    list_queues: AtomicU64,
    purge_queue: AtomicU64,
    peek_messages: AtomicU64,
    create_topic: AtomicU64,
    get_topic_attributes: AtomicU64,
    subscribe: AtomicU64,
    get_subscription_attributes: AtomicU64,
    list_subscriptions_by_topic: AtomicU64,
    publish_batch: AtomicU64,
}

impl CallCounter {
    /// The counter of `action`'s calls.
    fn of(&self, action: Action) -> &AtomicU64 {
        match action {
            Action::GetQueueUrl => &self.get_queue_url,
            Action::CreateQueue => &self.create_queue,
            Action::GetQueueAttributes => &self.get_queue_attributes,
            Action::SetQueueAttributes => &self.set_queue_attributes,
            Action::SendMessageBatch => &self.send_message_batch,
            Action::ReceiveMessage => &self.receive_message,
            Action::DeleteMessageBatch => &self.delete_message_batch,
            Action::ChangeMessageVisibilityBatch => &self.change_message_visibility_batch,
            Action::ListQueues => &self.list_queues,
            Action::PurgeQueue => &self.purge_queue,
            Action::PeekMessages => &self.peek_messages,
            Action::CreateTopic => &self.create_topic,
            Action::GetTopicAttributes => &self.get_topic_attributes,
            Action::Subscribe => &self.subscribe,
            Action::GetSubscriptionAttributes => &self.get_subscription_attributes,
            Action::ListSubscriptionsByTopic => &self.list_subscriptions_by_topic,
            Action::PublishBatch => &self.publish_batch,
        }
    }

    /// The counts so far.
    pub(crate) fn snapshot(&self) -> ApiCalls {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ApiCalls {
            get_queue_url: read(&self.get_queue_url),
            create_queue: read(&self.create_queue),
            get_queue_attributes: read(&self.get_queue_attributes),
            set_queue_attributes: read(&self.set_queue_attributes),
            send_message_batch: read(&self.send_message_batch),
            receive_message: read(&self.receive_message),
            delete_message_batch: read(&self.delete_message_batch),
            change_message_visibility_batch: read(&self.change_message_visibility_batch),
            list_queues: read(&self.list_queues),
            purge_queue: read(&self.purge_queue),
            peek_messages: read(&self.peek_messages),
            create_topic: read(&self.create_topic),
            get_topic_attributes: read(&self.get_topic_attributes),
            subscribe: read(&self.subscribe),
            get_subscription_attributes: read(&self.get_subscription_attributes),
            list_subscriptions_by_topic: read(&self.list_subscriptions_by_topic),
            publish_batch: read(&self.publish_batch),
        }
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

impl Meter {
    /// Counts a call of `action` unless `checked` says its request is refused before it is sent.
    fn count<T>(&self, action: Action, checked: Result<T, TransportError>) {
        if checked.is_ok() {
            self.calls.of(action).fetch_add(1, Ordering::Relaxed);
        }
    }
}

// Counted when the call is made, timed while it runs: the call's own future wrapped once, no
// `async fn` layer that would keep a second copy of the arguments. The checks are the ones each
// backend makes first, by the same functions, before it sends anything (the in-process account as
// SQS would answer, the aws-sdk transport to refuse before the network).
impl Hooks for Meter {
    fn around<R: Send>(
        &self,
        action: Action,
        queue: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
        timed(action, queue, call)
    }

    fn get_queue_url(
        &self,
        inner: &impl Transport,
        name: &str,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        self.count(Action::GetQueueUrl, rules::check_queue_name(name));
        inner.get_queue_url(name)
    }

    fn create_queue(
        &self,
        inner: &impl Transport,
        name: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        let checked = rules::check_queue_name(name).and_then(|()| {
            attributes.iter().try_for_each(|(attribute, value)| {
                rules::parse_queue_attribute(attribute, value).map(drop)
            })
        });
        self.count(Action::CreateQueue, checked);
        inner.create_queue(name, attributes)
    }

    fn get_queue_attributes(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        names: &[&str],
    ) -> impl Future<Output = Result<QueueAttributes, TransportError>> + Send {
        self.count(Action::GetQueueAttributes, Ok(()));
        inner.get_queue_attributes(queue_url, names)
    }

    fn set_queue_attributes(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        let checked = attributes.iter().try_for_each(|(attribute, value)| {
            rules::parse_queue_attribute(attribute, value).map(drop)
        });
        self.count(Action::SetQueueAttributes, checked);
        inner.set_queue_attributes(queue_url, attributes)
    }

    fn send_message_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> impl Future<Output = Result<BatchResult<SentMessage>, TransportError>> + Send {
        self.count(Action::SendMessageBatch, rules::check_send_batch(&entries));
        inner.send_message_batch(queue_url, entries)
    }

    fn receive_message(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send {
        let checked = rules::check_receive(
            request.max_number_of_messages,
            request.wait_time_seconds,
            request.visibility_timeout,
            request.receive_request_attempt_id.as_deref(),
        )
        .and_then(|_| rules::check_system_attribute_names(&request.system_attribute_names));
        self.count(Action::ReceiveMessage, checked);
        inner.receive_message(queue_url, request)
    }

    fn delete_message_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        let checked = rules::check_batch_ids(entries.iter().map(|entry| entry.id.as_str()));
        self.count(Action::DeleteMessageBatch, checked);
        inner.delete_message_batch(queue_url, entries)
    }

    fn change_message_visibility_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        let checked = rules::check_batch_ids(entries.iter().map(|entry| entry.id.as_str()));
        self.count(Action::ChangeMessageVisibilityBatch, checked);
        inner.change_message_visibility_batch(queue_url, entries)
    }

    fn list_queues(
        &self,
        inner: &impl Transport,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, TransportError>> + Send {
        self.count(Action::ListQueues, Ok(()));
        inner.list_queues(prefix)
    }

    fn purge_queue(
        &self,
        inner: &impl Transport,
        queue_url: &str,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        self.count(Action::PurgeQueue, Ok(()));
        inner.purge_queue(queue_url)
    }

    fn peek_messages(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        request: PeekMessages,
    ) -> impl Future<Output = Result<Vec<PeekedMessage>, TransportError>> + Send {
        self.count(Action::PeekMessages, Ok(()));
        inner.peek_messages(queue_url, request)
    }

    fn create_topic(
        &self,
        inner: &impl Transport,
        name: &str,
        attributes: TopicAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        let checked = subscription::check_topic_attributes(name, &attributes);
        self.count(Action::CreateTopic, checked);
        inner.create_topic(name, attributes)
    }

    fn get_topic_attributes(
        &self,
        inner: &impl Transport,
        topic_arn: &str,
    ) -> impl Future<Output = Result<TopicAttributes, TransportError>> + Send {
        self.count(Action::GetTopicAttributes, TopicArn::parse(topic_arn));
        inner.get_topic_attributes(topic_arn)
    }

    fn subscribe(
        &self,
        inner: &impl Transport,
        request: Subscribe,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        self.count(Action::Subscribe, subscription::check_subscribe(&request));
        inner.subscribe(request)
    }

    fn get_subscription_attributes(
        &self,
        inner: &impl Transport,
        subscription_arn: &str,
    ) -> impl Future<Output = Result<SubscriptionAttributes, TransportError>> + Send {
        self.count(Action::GetSubscriptionAttributes, Ok(()));
        inner.get_subscription_attributes(subscription_arn)
    }

    fn list_subscriptions_by_topic(
        &self,
        inner: &impl Transport,
        topic_arn: &str,
    ) -> impl Future<Output = Result<Vec<Subscription>, TransportError>> + Send {
        self.count(Action::ListSubscriptionsByTopic, TopicArn::parse(topic_arn));
        inner.list_subscriptions_by_topic(topic_arn)
    }

    fn publish_batch(
        &self,
        inner: &impl Transport,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
    ) -> impl Future<Output = Result<PublishBatchResult, TransportError>> + Send {
        // The whole-batch rules at the default size limit, which every topic has (no topic
        // attribute sets another).
        let checked = TopicArn::parse(topic_arn)
            .and_then(|arn| topic::check_publish_batch(&entries, PublishTarget::new(arn.name())));
        self.count(Action::PublishBatch, checked);
        inner.publish_batch(topic_arn, entries)
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
