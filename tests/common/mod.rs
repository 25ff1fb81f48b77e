//! Helpers shared by the integration tests.
#![allow(dead_code)] // each test binary uses its own subset

use rust_stream::account::Account;
use rust_stream::engine::transport::{
    QueueAttributes, ReceiveMessage, ReceivedMessage, SendMessage, TransportError,
};

/// Queue attributes from `(name, value)` pairs.
pub fn attributes(pairs: &[(&str, &str)]) -> QueueAttributes {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The bodies of received messages, in the order received.
pub fn bodies(messages: &[ReceivedMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.body.as_str()).collect()
}

/// Creates a FIFO queue with these extra attributes.
pub async fn fifo_queue(account: &Account, name: &str, extra: &[(&str, &str)]) -> String {
    let mut attrs = attributes(extra);
    attrs.insert("FifoQueue".into(), "true".into());
    account
        .create_queue(name, attrs)
        .await
        .expect("create FIFO queue")
}

/// Sends `body` to a FIFO queue's `group`, deduplicated by the body (spaces made `_`).
pub async fn send_fifo(account: &Account, url: &str, group: &str, body: &str) -> String {
    let message = SendMessage::new(body)
        .group_id(group)
        .dedup_id(body.replace(' ', "_"));
    account
        .send_message(url, message)
        .await
        .expect("send")
        .message_id
}

/// One immediate receive of up to `max` messages.
pub async fn receive(account: &Account, url: &str, max: i32) -> Vec<ReceivedMessage> {
    account
        .receive_message(url, ReceiveMessage::new(max))
        .await
        .expect("receive")
}

/// Deletes every received message.
pub async fn delete_all(account: &Account, url: &str, messages: &[ReceivedMessage]) {
    for message in messages {
        account
            .delete_message(url, &message.receipt_handle)
            .await
            .expect("delete");
    }
}

/// Releases a received message (visibility 0).
pub async fn release(
    account: &Account,
    url: &str,
    message: &ReceivedMessage,
) -> Result<(), TransportError> {
    account
        .change_message_visibility(url, &message.receipt_handle, 0)
        .await
}
