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
//! - [`Hooks::around`]: one generic hook around every call, given the [`Action`], the queue and
//!   the call's future: for what treats all calls alike (the broker's meter, deadlines, tracing).
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

/// The SQS or SNS action a [`Transport`] call performs, as [`Hooks::around`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// `GetQueueUrl`.
    GetQueueUrl,
    /// `CreateQueue`.
    CreateQueue,
    /// `GetQueueAttributes`.
    GetQueueAttributes,
    /// `SetQueueAttributes`.
    SetQueueAttributes,
    /// `SendMessageBatch`.
    SendMessageBatch,
    /// `ReceiveMessage`.
    ReceiveMessage,
    /// `DeleteMessageBatch`.
    DeleteMessageBatch,
    /// `ChangeMessageVisibilityBatch`.
    ChangeMessageVisibilityBatch,
    /// `ListQueues`.
    ListQueues,
    /// `PurgeQueue`.
    PurgeQueue,
    /// A peek at a queue's messages that changes nothing: the in-process account's own call,
    /// which SQS does not have.
    PeekMessages,
    /// SNS `CreateTopic`.
    CreateTopic,
    /// SNS `GetTopicAttributes`.
    GetTopicAttributes,
    /// SNS `Subscribe`.
    Subscribe,
    /// SNS `GetSubscriptionAttributes`.
    GetSubscriptionAttributes,
    /// SNS `ListSubscriptionsByTopic`.
    ListSubscriptionsByTopic,
    /// SNS `PublishBatch`.
    PublishBatch,
}

impl Action {
    /// The action's name in the SQS or SNS API: `"ReceiveMessage"`, `"PublishBatch"`.
    pub fn name(self) -> &'static str {
        match self {
            Action::GetQueueUrl => "GetQueueUrl",
            Action::CreateQueue => "CreateQueue",
            Action::GetQueueAttributes => "GetQueueAttributes",
            Action::SetQueueAttributes => "SetQueueAttributes",
            Action::SendMessageBatch => "SendMessageBatch",
            Action::ReceiveMessage => "ReceiveMessage",
            Action::DeleteMessageBatch => "DeleteMessageBatch",
            Action::ChangeMessageVisibilityBatch => "ChangeMessageVisibilityBatch",
            Action::ListQueues => "ListQueues",
            Action::PurgeQueue => "PurgeQueue",
            Action::PeekMessages => "PeekMessages",
            Action::CreateTopic => "CreateTopic",
            Action::GetTopicAttributes => "GetTopicAttributes",
            Action::Subscribe => "Subscribe",
            Action::GetSubscriptionAttributes => "GetSubscriptionAttributes",
            Action::ListSubscriptionsByTopic => "ListSubscriptionsByTopic",
            Action::PublishBatch => "PublishBatch",
        }
    }

    /// Whether the action is SNS's (a topic's, a subscription's, a publish) rather than SQS's.
    pub fn is_sns(self) -> bool {
        matches!(
            self,
            Action::CreateTopic
                | Action::GetTopicAttributes
                | Action::Subscribe
                | Action::GetSubscriptionAttributes
                | Action::ListSubscriptionsByTopic
                | Action::PublishBatch
        )
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a [`Hooked`] transport does around and instead of its inner transport's calls. Every
/// hook passes the call through unless overridden; see [the module](self) for how they fit.
///
/// A typed hook may be written as an `async fn` or, on a call every message makes, as a plain
/// `fn` that starts the inner call and hands back its future (wrapped once, if it must see the
/// answer), so the future allocated per call holds no second copy of the arguments.
pub trait Hooks: Send + Sync + 'static {
    /// Runs around every call: `action` on `queue` (its URL, or its name for `GetQueueUrl` and
    /// `CreateQueue`; for an SNS call, the topic's ARN, its name for `CreateTopic`, or the
    /// subscription's ARN for `GetSubscriptionAttributes`), whose future is `call` (the typed
    /// hook's, over the inner transport's).
    /// Runs when the call is made; what it hands back is what the caller awaits.
    fn around<R: Send>(
        &self,
        action: Action,
        queue: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
        let _ = (action, queue);
        call
    }

    /// `GetQueueUrl`, over `inner`.
    fn get_queue_url(
        &self,
        inner: &impl Transport,
        name: &str,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        inner.get_queue_url(name)
    }

    /// `CreateQueue`, over `inner`.
    fn create_queue(
        &self,
        inner: &impl Transport,
        name: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        inner.create_queue(name, attributes)
    }

    /// `GetQueueAttributes`, over `inner`.
    fn get_queue_attributes(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        names: &[&str],
    ) -> impl Future<Output = Result<QueueAttributes, TransportError>> + Send {
        inner.get_queue_attributes(queue_url, names)
    }

    /// `SetQueueAttributes`, over `inner`.
    fn set_queue_attributes(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        inner.set_queue_attributes(queue_url, attributes)
    }

    /// `SendMessageBatch`, over `inner`.
    fn send_message_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> impl Future<Output = Result<BatchResult<SentMessage>, TransportError>> + Send {
        inner.send_message_batch(queue_url, entries)
    }

    /// `ReceiveMessage`, over `inner`.
    fn receive_message(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send {
        inner.receive_message(queue_url, request)
    }

    /// `DeleteMessageBatch`, over `inner`.
    fn delete_message_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        inner.delete_message_batch(queue_url, entries)
    }

    /// `ChangeMessageVisibilityBatch`, over `inner`.
    fn change_message_visibility_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        inner.change_message_visibility_batch(queue_url, entries)
    }

    /// `ListQueues`, over `inner`.
    fn list_queues(
        &self,
        inner: &impl Transport,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, TransportError>> + Send {
        inner.list_queues(prefix)
    }

    /// `PurgeQueue`, over `inner`.
    fn purge_queue(
        &self,
        inner: &impl Transport,
        queue_url: &str,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        inner.purge_queue(queue_url)
    }

    /// Whether `inner` peeks.
    fn peeks(&self, inner: &impl Transport) -> bool {
        inner.peeks()
    }

    /// A peek, over `inner`.
    fn peek_messages(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        request: PeekMessages,
    ) -> impl Future<Output = Result<Vec<PeekedMessage>, TransportError>> + Send {
        inner.peek_messages(queue_url, request)
    }

    /// SNS `CreateTopic`, over `inner`.
    fn create_topic(
        &self,
        inner: &impl Transport,
        name: &str,
        attributes: TopicAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        inner.create_topic(name, attributes)
    }

    /// SNS `GetTopicAttributes`, over `inner`.
    fn get_topic_attributes(
        &self,
        inner: &impl Transport,
        topic_arn: &str,
    ) -> impl Future<Output = Result<TopicAttributes, TransportError>> + Send {
        inner.get_topic_attributes(topic_arn)
    }

    /// SNS `Subscribe`, over `inner`.
    fn subscribe(
        &self,
        inner: &impl Transport,
        request: Subscribe,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        inner.subscribe(request)
    }

    /// SNS `GetSubscriptionAttributes`, over `inner`.
    fn get_subscription_attributes(
        &self,
        inner: &impl Transport,
        subscription_arn: &str,
    ) -> impl Future<Output = Result<SubscriptionAttributes, TransportError>> + Send {
        inner.get_subscription_attributes(subscription_arn)
    }

    /// SNS `ListSubscriptionsByTopic`, over `inner`.
    fn list_subscriptions_by_topic(
        &self,
        inner: &impl Transport,
        topic_arn: &str,
    ) -> impl Future<Output = Result<Vec<Subscription>, TransportError>> + Send {
        inner.list_subscriptions_by_topic(topic_arn)
    }

    /// SNS `PublishBatch`, over `inner`.
    fn publish_batch(
        &self,
        inner: &impl Transport,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
    ) -> impl Future<Output = Result<PublishBatchResult, TransportError>> + Send {
        inner.publish_batch(topic_arn, entries)
    }

    /// [`Transport::abandoned_receive_takes_nothing`]: `inner`'s answer unless overridden (a
    /// hook that receives on its own, or stands for a network, answers for itself).
    fn abandoned_receive_takes_nothing(&self, inner: &impl Transport) -> bool {
        inner.abandoned_receive_takes_nothing()
    }

    /// [`Transport::attempt_timeout`]: `inner`'s unless overridden (a hook that bounds each call
    /// itself says so here).
    fn attempt_timeout(&self, inner: &impl Transport) -> Option<Duration> {
        inner.attempt_timeout()
    }
}

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

impl<T: Transport, H: Hooks> Transport for Hooked<T, H> {
    fn get_queue_url(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        let call = self.hooks.get_queue_url(&self.inner, name);
        self.hooks.around(Action::GetQueueUrl, name, call)
    }

    fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        let call = self.hooks.create_queue(&self.inner, name, attributes);
        self.hooks.around(Action::CreateQueue, name, call)
    }

    fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> impl Future<Output = Result<QueueAttributes, TransportError>> + Send {
        let call = self
            .hooks
            .get_queue_attributes(&self.inner, queue_url, names);
        self.hooks
            .around(Action::GetQueueAttributes, queue_url, call)
    }

    fn set_queue_attributes(
        &self,
        queue_url: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        let call = self
            .hooks
            .set_queue_attributes(&self.inner, queue_url, attributes);
        self.hooks
            .around(Action::SetQueueAttributes, queue_url, call)
    }

    fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> impl Future<Output = Result<BatchResult<SentMessage>, TransportError>> + Send {
        let call = self
            .hooks
            .send_message_batch(&self.inner, queue_url, entries);
        self.hooks.around(Action::SendMessageBatch, queue_url, call)
    }

    fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send {
        let call = self.hooks.receive_message(&self.inner, queue_url, request);
        self.hooks.around(Action::ReceiveMessage, queue_url, call)
    }

    fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        let call = self
            .hooks
            .delete_message_batch(&self.inner, queue_url, entries);
        self.hooks
            .around(Action::DeleteMessageBatch, queue_url, call)
    }

    fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        let call = self
            .hooks
            .change_message_visibility_batch(&self.inner, queue_url, entries);
        self.hooks
            .around(Action::ChangeMessageVisibilityBatch, queue_url, call)
    }

    fn list_queues(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>, TransportError>> + Send {
        let call = self.hooks.list_queues(&self.inner, prefix);
        self.hooks.around(Action::ListQueues, prefix, call)
    }

    fn purge_queue(
        &self,
        queue_url: &str,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        let call = self.hooks.purge_queue(&self.inner, queue_url);
        self.hooks.around(Action::PurgeQueue, queue_url, call)
    }

    fn peeks(&self) -> bool {
        self.hooks.peeks(&self.inner)
    }

    fn peek_messages(
        &self,
        queue_url: &str,
        request: PeekMessages,
    ) -> impl Future<Output = Result<Vec<PeekedMessage>, TransportError>> + Send {
        let call = self.hooks.peek_messages(&self.inner, queue_url, request);
        self.hooks.around(Action::PeekMessages, queue_url, call)
    }

    fn create_topic(
        &self,
        name: &str,
        attributes: TopicAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send {
        let call = self.hooks.create_topic(&self.inner, name, attributes);
        self.hooks.around(Action::CreateTopic, name, call)
    }

    fn get_topic_attributes(
        &self,
        topic_arn: &str,
    ) -> impl Future<Output = Result<TopicAttributes, TransportError>> + Send {
        let call = self.hooks.get_topic_attributes(&self.inner, topic_arn);
        self.hooks
            .around(Action::GetTopicAttributes, topic_arn, call)
    }

    // The request moves into the call, so `around` is lent a copy of its topic's ARN, kept in
    // this future (a subscribe is a startup call: the extra layer costs nothing that matters).
    async fn subscribe(&self, request: Subscribe) -> Result<String, TransportError> {
        let topic_arn = request.topic_arn.clone();
        let call = self.hooks.subscribe(&self.inner, request);
        self.hooks.around(Action::Subscribe, &topic_arn, call).await
    }

    fn get_subscription_attributes(
        &self,
        subscription_arn: &str,
    ) -> impl Future<Output = Result<SubscriptionAttributes, TransportError>> + Send {
        let call = self
            .hooks
            .get_subscription_attributes(&self.inner, subscription_arn);
        self.hooks
            .around(Action::GetSubscriptionAttributes, subscription_arn, call)
    }

    fn list_subscriptions_by_topic(
        &self,
        topic_arn: &str,
    ) -> impl Future<Output = Result<Vec<Subscription>, TransportError>> + Send {
        let call = self
            .hooks
            .list_subscriptions_by_topic(&self.inner, topic_arn);
        self.hooks
            .around(Action::ListSubscriptionsByTopic, topic_arn, call)
    }

    fn publish_batch(
        &self,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
    ) -> impl Future<Output = Result<PublishBatchResult, TransportError>> + Send {
        let call = self.hooks.publish_batch(&self.inner, topic_arn, entries);
        self.hooks.around(Action::PublishBatch, topic_arn, call)
    }

    fn abandoned_receive_takes_nothing(&self) -> bool {
        self.hooks.abandoned_receive_takes_nothing(&self.inner)
    }

    fn attempt_timeout(&self) -> Option<Duration> {
        self.hooks.attempt_timeout(&self.inner)
    }
}

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
