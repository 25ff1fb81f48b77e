//! The size limits SQS puts on sends, honoured by a publisher before the network: sends are packed
//! so that no `SendMessageBatch` passes 1 MiB in total, and a message over its queue's own
//! `MaximumMessageSize` is refused without a call.

mod common;

use common::attributes;
use rust_stream::account::Account;
use rust_stream::model::rules::ErrorKind;
use rust_stream::prelude::*;
use rust_stream::transport::layer::{Hooked, Hooks};
use rust_stream::transport::{
    QueueAttributes, SendBatchEntry, SendMessage, Transport, TransportError,
};
use rust_stream::PublishError;

const KIB: usize = 1024;

#[tokio::test(start_paused = true)]
async fn concurrent_large_sends_are_packed_into_calls_of_at_most_one_mebibyte() {
    let account = Account::new();
    let url = account
        .create_queue("large", attributes(&[]))
        .await
        .unwrap();
    // The account refuses a batch over 1 MiB whole, as SQS does: all its messages fail together.
    let oversized: Vec<SendBatchEntry> = (0..4)
        .map(|n| SendBatchEntry::new(n.to_string(), SendMessage::new("x".repeat(300 * KIB))))
        .collect();
    let refused = account
        .send_message_batch(&url, oversized)
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), Some(ErrorKind::BatchRequestTooLong));

    let broker = SqsBroker::with_account(&account);
    let sends: Vec<_> = (0..10)
        .map(|n| {
            let publisher = broker.publisher("large");
            let body = format!("{n}:{}", "x".repeat(300 * KIB));
            tokio::spawn(async move { publisher.raw(body).send().await })
        })
        .collect();
    for send in sends {
        send.await.unwrap().expect("every send succeeds");
    }
    let calls = broker.api_calls().send_message_batch;
    assert!(
        calls >= 4,
        "ten 300 KiB messages need at least 4 calls of at most 1 MiB; made {calls}"
    );
    assert_eq!(account.counts(&url).await.unwrap().visible, 10);
}

#[tokio::test(start_paused = true)]
async fn a_message_over_the_queues_maximum_message_size_is_refused_before_the_network() {
    let account = Account::new();
    account
        .create_queue("small", attributes(&[("MaximumMessageSize", "2048")]))
        .await
        .unwrap();
    let broker = SqsBroker::with_account(&account);
    let small = broker.publisher("small");

    let error = small.raw("x".repeat(4 * KIB)).send().await.unwrap_err();
    let PublishError::Rejected { queue, error } = &error else {
        panic!("expected a rejection, got {error}")
    };
    assert_eq!(queue, "small");
    assert_eq!(error.kind(), Some(ErrorKind::InvalidParameterValue));
    let text = error.to_string();
    for expected in ["`small`", "4096", "2048", "MaximumMessageSize"] {
        assert!(text.contains(expected), "missing `{expected}` in: {text}");
    }
    let calls = broker.api_calls();
    assert_eq!(calls.send_message_batch, 0, "nothing was sent: {calls:?}");

    small
        .raw("x".repeat(2 * KIB))
        .send()
        .await
        .expect("a message of exactly the queue's limit is sent");
    let calls = broker.api_calls();
    assert_eq!(calls.send_message_batch, 1);
    assert_eq!(
        (calls.get_queue_url, calls.get_queue_attributes),
        (1, 1),
        "the queue is looked up once: {calls:?}"
    );
}

/// An IAM policy that lets a service send to its queue but not read the queue's attributes: SQS
/// answers `GetQueueAttributes` with `AccessDenied`.
struct SendOnly;

impl Hooks for SendOnly {
    async fn get_queue_attributes(
        &self,
        _inner: &impl Transport,
        _queue_url: &str,
        _names: &[&str],
    ) -> Result<QueueAttributes, TransportError> {
        Err(TransportError::service(
            ErrorKind::AccessDenied,
            "User: arn:aws:iam::123456789012:assumed-role/payments/task is not authorized to \
             perform: sqs:getqueueattributes",
        ))
    }
}

#[tokio::test(start_paused = true)]
async fn a_publisher_not_allowed_to_read_its_queues_attributes_sends_checked_against_one_mebibyte()
{
    let account = Account::new();
    let url = account
        .create_queue("payments", attributes(&[]))
        .await
        .unwrap();
    let broker = SqsBroker::with_transport(Hooked::new(account.clone(), SendOnly));
    let payments = broker.publisher("payments");
    payments
        .raw("a payment")
        .send()
        .await
        .expect("sent without the queue's attributes");
    let error = payments
        .raw("x".repeat(1024 * KIB + 1))
        .send()
        .await
        .unwrap_err();
    let PublishError::Rejected { error, .. } = &error else {
        panic!("expected a rejection, got {error}")
    };
    assert_eq!(error.kind(), Some(ErrorKind::InvalidParameterValue));
    assert_eq!(account.counts(&url).await.unwrap().visible, 1);
    assert_eq!(broker.api_calls().send_message_batch, 1);
}
