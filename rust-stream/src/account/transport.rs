//! The account as a [`Transport`]: each method is the account's operation of the same name, so
//! the engine runs on the account exactly as it runs on Amazon SQS (and SNS).

use crate::transport::{
    BatchResult, ChangeVisibilityEntry, DeleteEntry, PeekMessages, PeekedMessage,
    PublishBatchEntry, PublishBatchResult, QueueAttributes, ReceiveMessage, ReceivedMessage,
    SendBatchEntry, SentMessage, Subscribe, Subscription, SubscriptionAttributes, TopicAttributes,
    Transport, TransportError,
};

use super::Account;
use std::future::Future;

// The calls on the way of every message hand back the account's own futures, without an
// `async fn` layer that would keep a second copy of the arguments.
impl Transport for Account {
    async fn get_queue_url(&self, name: &str) -> Result<String, TransportError> {
        Account::get_queue_url(self, name).await
    }

    async fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> Result<String, TransportError> {
        Account::create_queue(self, name, attributes).await
    }

    async fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> Result<QueueAttributes, TransportError> {
        Account::get_queue_attributes(self, queue_url, names).await
    }

    async fn set_queue_attributes(
        &self,
        queue_url: &str,
        attributes: QueueAttributes,
    ) -> Result<(), TransportError> {
        Account::set_queue_attributes(self, queue_url, attributes).await
    }

    fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> impl Future<Output = Result<BatchResult<SentMessage>, TransportError>> + Send {
        Account::send_message_batch(self, queue_url, entries)
    }

    fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send {
        Account::receive_message(self, queue_url, request)
    }

    fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        Account::delete_message_batch(self, queue_url, entries)
    }

    fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send {
        Account::change_message_visibility_batch(self, queue_url, entries)
    }

    async fn list_queues(&self, prefix: &str) -> Result<Vec<String>, TransportError> {
        Ok(Account::list_queues(self, prefix).await)
    }

    async fn purge_queue(&self, queue_url: &str) -> Result<(), TransportError> {
        Account::purge_queue(self, queue_url).await
    }

    fn peeks(&self) -> bool {
        true
    }

    async fn peek_messages(
        &self,
        queue_url: &str,
        request: PeekMessages,
    ) -> Result<Vec<PeekedMessage>, TransportError> {
        Account::peek_messages(self, queue_url, request).await
    }

    async fn create_topic(
        &self,
        name: &str,
        attributes: TopicAttributes,
    ) -> Result<String, TransportError> {
        Account::create_topic(self, name, attributes).await
    }

    async fn get_topic_attributes(
        &self,
        topic_arn: &str,
    ) -> Result<TopicAttributes, TransportError> {
        Account::get_topic_attributes(self, topic_arn).await
    }

    async fn subscribe(&self, request: Subscribe) -> Result<String, TransportError> {
        Account::subscribe(self, request).await
    }

    async fn get_subscription_attributes(
        &self,
        subscription_arn: &str,
    ) -> Result<SubscriptionAttributes, TransportError> {
        Account::get_subscription_attributes(self, subscription_arn).await
    }

    async fn list_subscriptions_by_topic(
        &self,
        topic_arn: &str,
    ) -> Result<Vec<Subscription>, TransportError> {
        Account::list_subscriptions_by_topic(self, topic_arn).await
    }

    fn publish_batch(
        &self,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
    ) -> impl Future<Output = Result<PublishBatchResult, TransportError>> + Send {
        Account::publish_batch(self, topic_arn, entries)
    }

    /// The account takes messages in the same step that answers, so a receive dropped before
    /// then has taken nothing.
    fn abandoned_receive_takes_nothing(&self) -> bool {
        true
    }

    async fn create_bucket(&self, bucket: &str) -> Result<(), TransportError> {
        Account::create_bucket(self, bucket).await
    }

    async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Vec<u8>,
    ) -> Result<(), TransportError> {
        Account::put_object(self, bucket, key, body).await
    }

    async fn get_object(&self, bucket: &str, key: &str) -> Result<Vec<u8>, TransportError> {
        Account::get_object(self, bucket, key).await
    }

    async fn head_object(&self, bucket: &str, key: &str) -> Result<u64, TransportError> {
        Account::head_object(self, bucket, key).await
    }

    async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), TransportError> {
        Account::delete_object(self, bucket, key).await
    }

    async fn copy_object(&self, bucket: &str, key: &str) -> Result<(), TransportError> {
        Account::copy_object(self, bucket, key).await
    }
}
