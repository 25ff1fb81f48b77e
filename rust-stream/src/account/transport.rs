//! The account as a [`Transport`]: each method is the account's operation of the same name, so
//! the engine runs on the account exactly as it runs on Amazon SQS.

use crate::engine::transport::{
    BatchResult, ChangeVisibilityEntry, DeleteEntry, QueueAttributes, ReceiveMessage,
    ReceivedMessage, SendBatchEntry, SentMessage, Transport, TransportError,
};

use super::Account;

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

    async fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> Result<BatchResult<SentMessage>, TransportError> {
        Account::send_message_batch(self, queue_url, entries).await
    }

    async fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        Account::receive_message(self, queue_url, request).await
    }

    async fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        Account::delete_message_batch(self, queue_url, entries).await
    }

    async fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        Account::change_message_visibility_batch(self, queue_url, entries).await
    }

    /// The account takes messages in the same step that answers, so a receive dropped before
    /// then has taken nothing.
    fn abandoned_receive_takes_nothing(&self) -> bool {
        true
    }
}
