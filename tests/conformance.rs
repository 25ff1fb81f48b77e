//! One conformance suite, two backends: every scenario runs on the in-process account (paused
//! clock) and on a live LocalStack (real time), through the same `Transport`, and asserts the
//! same observable results. Where LocalStack 4.13.1 differs from Amazon SQS, the scenario names
//! the deviation and asserts each backend's own answer; the account follows SQS.
//!
//! Requests that break the SQS rules are refused by the aws transport before the network (a
//! transport pointed at a closed port answers them with the rule's error kind, not a connection
//! error), so its live leg alone would compare the rules with themselves: the same requests also go
//! to LocalStack through the plain SDK client, and the server's error kind must be the rules'.
//!
//! Live legs need `RUST_STREAM_LIVE_ENDPOINT` (set by `scripts/test.sh`); under CI a missing
//! endpoint fails them.

#[macro_use]
mod common;

use std::time::Duration;

use common::backend::{Backend, Kind};
use common::bodies;
use rust_stream::model::rules::ErrorKind;
use rust_stream::transport::TransportError;
use rust_stream::transport::{
    ChangeVisibilityEntry, DeleteEntry, MessageAttributeValue, ReceiveMessage, ReceivedMessage,
    SendBatchEntry, SendMessage, SentMessage, Transport,
};
use rust_stream::SqsBroker;

both_backends!(
    fifo_groups_are_handed_out_in_order_and_held_while_in_flight,
    releasing_one_message_while_others_of_its_group_are_in_flight,
    a_timed_out_group_comes_back_with_its_unacknowledged_messages_first,
    explicit_deduplication_answers_the_original,
    content_based_deduplication_ignores_attributes,
    deduplication_holds_within_one_batch,
    visibility_timeouts_and_receive_counts,
    redrive_moves_a_message_to_the_dead_letter_queue_and_its_group_continues,
    per_message_delays_hold_messages_back,
    a_batch_answers_each_entry,
    invalid_requests_fail_with_the_same_error_kinds,
    receipt_handles_are_checked,
    an_expired_fifo_receipt_handle_deletes_nothing,
    a_received_message_carries_what_was_sent,
);

async fn send<T: Transport>(
    backend: &Backend<T>,
    url: &str,
    messages: Vec<SendMessage>,
) -> Vec<SentMessage> {
    let entries = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| SendBatchEntry::new(format!("e{i}"), m))
        .collect();
    let result = backend
        .transport
        .send_message_batch(url, entries)
        .await
        .unwrap();
    assert!(result.failed.is_empty(), "{:?}", result.failed);
    result
        .successful
        .into_iter()
        .map(|(_, sent)| sent)
        .collect()
}

fn fifo(body: &str, group: &str) -> SendMessage {
    SendMessage::new(body).group_id(group).dedup_id(body)
}

/// Receives once, waiting up to `wait` seconds for a first message.
async fn receive<T: Transport>(
    backend: &Backend<T>,
    url: &str,
    max: i32,
    wait: i32,
) -> Vec<ReceivedMessage> {
    let request = ReceiveMessage::new(max).wait_time_seconds(wait);
    backend
        .transport
        .receive_message(url, request)
        .await
        .unwrap()
}

/// Receives until `count` messages have come or `wait` passes (LocalStack may spread a FIFO
/// group's messages over receives).
async fn receive_all<T: Transport>(
    backend: &Backend<T>,
    url: &str,
    count: usize,
    wait: i32,
) -> Vec<ReceivedMessage> {
    let mut got = Vec::new();
    for _ in 0..10 {
        got.extend(receive(backend, url, 10, wait).await);
        if got.len() >= count {
            break;
        }
    }
    got
}

async fn delete<T: Transport>(backend: &Backend<T>, url: &str, messages: &[ReceivedMessage]) {
    if messages.is_empty() {
        return;
    }
    let entries = messages
        .iter()
        .enumerate()
        .map(|(i, m)| DeleteEntry {
            id: format!("d{i}").into(),
            receipt_handle: m.receipt_handle.clone(),
        })
        .collect();
    let result = backend
        .transport
        .delete_message_batch(url, entries)
        .await
        .unwrap();
    assert!(result.failed.is_empty(), "{:?}", result.failed);
}

async fn change_visibility<T: Transport>(
    backend: &Backend<T>,
    url: &str,
    messages: &[&ReceivedMessage],
    seconds: i32,
) {
    let entries = messages
        .iter()
        .enumerate()
        .map(|(i, m)| ChangeVisibilityEntry {
            id: format!("v{i}").into(),
            receipt_handle: m.receipt_handle.clone(),
            visibility_timeout: seconds,
        })
        .collect();
    let result = backend
        .transport
        .change_message_visibility_batch(url, entries)
        .await
        .unwrap();
    assert!(result.failed.is_empty(), "{:?}", result.failed);
}

async fn fifo_groups_are_handed_out_in_order_and_held_while_in_flight<T: Transport>(
    backend: Backend<T>,
) {
    let url = backend
        .queue("order.fifo", &[("VisibilityTimeout", "30")])
        .await;
    let sent = send(
        &backend,
        &url,
        vec![
            fifo("a1", "a"),
            fifo("b1", "b"),
            fifo("a2", "a"),
            fifo("a3", "a"),
        ],
    )
    .await;
    let sequences: Vec<u128> = sent
        .iter()
        .map(|s| s.sequence_number.as_ref().unwrap().parse().unwrap())
        .collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "sequence numbers increase: {sequences:?}"
    );

    let first = receive(&backend, &url, 1, 1).await;
    assert_eq!(bodies(&first), ["a1"], "the oldest group's first message");
    let rest = receive_all(&backend, &url, 1, 1).await;
    assert_eq!(
        bodies(&rest),
        ["b1"],
        "group a is held while a1 is in flight"
    );
    delete(&backend, &url, &first).await;
    let next = receive_all(&backend, &url, 2, 1).await;
    assert_eq!(
        bodies(&next),
        ["a2", "a3"],
        "then group a goes on, in order"
    );
}

/// SQS keeps the group held until every in-flight message of it is settled; LocalStack 4.13.1
/// hands the released message out at once (a known deviation the engine guards against).
async fn releasing_one_message_while_others_of_its_group_are_in_flight<T: Transport>(
    backend: Backend<T>,
) {
    let url = backend
        .queue("release.fifo", &[("VisibilityTimeout", "30")])
        .await;
    send(
        &backend,
        &url,
        vec![fifo("m1", "g"), fifo("m2", "g"), fifo("m3", "g")],
    )
    .await;
    let got = receive_all(&backend, &url, 3, 1).await;
    assert_eq!(bodies(&got), ["m1", "m2", "m3"]);

    change_visibility(&backend, &url, &[&got[0]], 0).await;
    let early = receive(&backend, &url, 10, 1).await;
    match backend.kind {
        Kind::InProcess => assert!(early.is_empty(), "m2 and m3 are still in flight"),
        Kind::LocalStack => assert_eq!(
            bodies(&early),
            ["m1"],
            "LocalStack deviation: the released message comes at once"
        ),
    }
    if backend.kind == Kind::InProcess {
        delete(&backend, &url, &got[1..]).await;
        let later = receive(&backend, &url, 10, 1).await;
        assert_eq!(
            bodies(&later),
            ["m1"],
            "once the others settle, the released message comes first"
        );
        assert_eq!(later[0].receive_count(), Some(2));
    }
}

async fn a_timed_out_group_comes_back_with_its_unacknowledged_messages_first<T: Transport>(
    backend: Backend<T>,
) {
    let url = backend
        .queue("timeout.fifo", &[("VisibilityTimeout", "4")])
        .await;
    send(
        &backend,
        &url,
        vec![fifo("m1", "g"), fifo("m2", "g"), fifo("m3", "g")],
    )
    .await;
    let got = receive_all(&backend, &url, 3, 1).await;
    assert_eq!(bodies(&got), ["m1", "m2", "m3"]);
    delete(&backend, &url, &got[1..2]).await;
    send(&backend, &url, vec![fifo("m4", "g")]).await;
    // The long poll waits past the 4 s timeout, so a slow machine only makes it wait less.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = receive_all(&backend, &url, 3, 4).await;
    assert_eq!(bodies(&again), ["m1", "m3", "m4"]);
    assert_eq!(again[0].receive_count(), Some(2));
    assert_eq!(again[2].receive_count(), Some(1));
}

/// Both answer the original message id; SQS (and the account) also answer its sequence number,
/// while LocalStack 4.13.1 answers a new one (a known deviation).
async fn explicit_deduplication_answers_the_original<T: Transport>(backend: Backend<T>) {
    let url = backend.queue("dedup.fifo", &[]).await;
    let first = send(
        &backend,
        &url,
        vec![SendMessage::new("deposit")
            .group_id("acct")
            .dedup_id("dep-1")],
    )
    .await;
    let again = send(
        &backend,
        &url,
        vec![SendMessage::new("deposit again")
            .group_id("acct")
            .dedup_id("dep-1")],
    )
    .await;
    assert_eq!(again[0].message_id, first[0].message_id);
    match backend.kind {
        Kind::InProcess => assert_eq!(again[0].sequence_number, first[0].sequence_number),
        Kind::LocalStack => assert_ne!(
            again[0].sequence_number, first[0].sequence_number,
            "LocalStack deviation"
        ),
    }
    let got = receive_all(&backend, &url, 1, 1).await;
    assert_eq!(bodies(&got), ["deposit"], "stored once");
}

/// What a receive hands back is what was sent: the id the send answered, the body, each message
/// attribute (string, number, binary) and the system attributes asked for, and a receipt handle
/// that deletes it.
async fn a_received_message_carries_what_was_sent<T: Transport>(backend: Backend<T>) {
    let url = backend.queue("carried.fifo", &[]).await;
    let message = SendMessage::new("{\"order\":7,\"note\":\"é ✓\"}")
        .group_id("acct-7")
        .dedup_id("order-7")
        .attribute("kind", MessageAttributeValue::string("order"))
        .attribute("retry", MessageAttributeValue::number("2"))
        .attribute("blob", MessageAttributeValue::binary(vec![0, 1, 254, 255]));
    let sent = send(&backend, &url, vec![message.clone()]).await;
    let request = ReceiveMessage::new(1)
        .wait_time_seconds(1)
        .system_attribute_names(["ApproximateReceiveCount", "SentTimestamp", "MessageGroupId"])
        .message_attribute_names(["All"]);
    let got = backend
        .transport
        .receive_message(&url, request)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    let received = &got[0];
    assert_eq!(received.message_id, sent[0].message_id);
    assert_eq!(received.body, message.body);
    assert_eq!(received.message_attributes, message.message_attributes);
    assert_eq!(received.receive_count(), Some(1));
    assert_eq!(received.attributes.get("MessageGroupId"), Some("acct-7"));
    assert!(received.attributes.get("SentTimestamp").is_some());
    assert!(!received.receipt_handle.is_empty());
    delete(&backend, &url, &got).await;
    assert!(receive(&backend, &url, 1, 1).await.is_empty(), "deleted");
}

async fn content_based_deduplication_ignores_attributes<T: Transport>(backend: Backend<T>) {
    let url = backend
        .queue("content.fifo", &[("ContentBasedDeduplication", "true")])
        .await;
    let first = send(&backend, &url, vec![SendMessage::new("same").group_id("g")]).await;
    let tagged = SendMessage::new("same")
        .group_id("g")
        .attribute("retry", MessageAttributeValue::number("1"));
    let again = send(&backend, &url, vec![tagged]).await;
    assert_eq!(again[0].message_id, first[0].message_id);
    send(
        &backend,
        &url,
        vec![SendMessage::new("other").group_id("g")],
    )
    .await;
    let got = receive_all(&backend, &url, 2, 1).await;
    assert_eq!(bodies(&got), ["same", "other"]);
}

async fn deduplication_holds_within_one_batch<T: Transport>(backend: Backend<T>) {
    let url = backend.queue("batchdedup.fifo", &[]).await;
    let sent = send(
        &backend,
        &url,
        vec![
            SendMessage::new("one").group_id("g").dedup_id("d1"),
            SendMessage::new("one again").group_id("g").dedup_id("d1"),
            SendMessage::new("two").group_id("g").dedup_id("d2"),
        ],
    )
    .await;
    assert_eq!(sent[0].message_id, sent[1].message_id);
    let got = receive_all(&backend, &url, 2, 1).await;
    assert_eq!(bodies(&got), ["one", "two"]);
}

async fn visibility_timeouts_and_receive_counts<T: Transport>(backend: Backend<T>) {
    // LocalStack's timer ticks once a second and a loaded machine stalls for a second or more:
    // every "still invisible" look comes at least 3 s before the timeout ends, and every "back
    // again" look is a long poll that waits past it.
    let url = backend
        .queue("visibility", &[("VisibilityTimeout", "4")])
        .await;
    send(&backend, &url, vec![SendMessage::new("m")]).await;
    let first = receive(&backend, &url, 1, 1).await;
    assert_eq!(first[0].receive_count(), Some(1));
    assert!(
        receive(&backend, &url, 1, 0).await.is_empty(),
        "invisible while in flight"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = receive(&backend, &url, 1, 5).await;
    assert_eq!(second[0].receive_count(), Some(2));
    assert_ne!(second[0].receipt_handle, first[0].receipt_handle);

    // Extending keeps it invisible past the queue's timeout; releasing brings it back at once.
    change_visibility(&backend, &url, &[&second[0]], 9).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        receive(&backend, &url, 1, 0).await.is_empty(),
        "extended to 9 s, past the queue's 4 s"
    );
    let third = receive(&backend, &url, 1, 8).await;
    assert_eq!(third[0].receive_count(), Some(3));
    change_visibility(&backend, &url, &[&third[0]], 0).await;
    let fourth = receive(&backend, &url, 1, 1).await;
    assert_eq!(fourth[0].receive_count(), Some(4));
    delete(&backend, &url, &fourth).await;
    // Longer than the visibility timeout: a delete that did not hold would show here.
    assert!(
        receive(&backend, &url, 1, 6).await.is_empty(),
        "deleted for good"
    );
}

async fn redrive_moves_a_message_to_the_dead_letter_queue_and_its_group_continues<T: Transport>(
    backend: Backend<T>,
) {
    let dlq = backend.queue("redrive-dlq.fifo", &[]).await;
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        backend.arn(&dlq).await
    );
    let url = backend
        .queue(
            "redrive.fifo",
            &[("VisibilityTimeout", "2"), ("RedrivePolicy", &policy)],
        )
        .await;
    let sent = send(&backend, &url, vec![fifo("o1", "c"), fifo("o2", "c")]).await;
    let first = receive(&backend, &url, 1, 1).await;
    assert_eq!(bodies(&first), ["o1"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let next = receive_all(&backend, &url, 1, 2).await;
    assert_eq!(
        bodies(&next),
        ["o2"],
        "o1 moved on its second receive; the group goes on"
    );
    let dead = receive_all(&backend, &dlq, 1, 2).await;
    assert_eq!(bodies(&dead), ["o1"]);
    assert_eq!(
        dead[0].message_id, sent[0].message_id,
        "the message keeps its id"
    );
    assert_eq!(dead[0].group_id(), Some("c"));
}

async fn per_message_delays_hold_messages_back<T: Transport>(backend: Backend<T>) {
    let url = backend.queue("delays", &[]).await;
    send(
        &backend,
        &url,
        vec![
            SendMessage::new("later").delay_seconds(5),
            SendMessage::new("now"),
        ],
    )
    .await;
    // Seconds of room before "later" is due, for a loaded machine.
    let got = receive(&backend, &url, 10, 1).await;
    assert_eq!(bodies(&got), ["now"]);
    let got = receive(&backend, &url, 10, 8).await;
    assert_eq!(bodies(&got), ["later"]);
}

async fn a_batch_answers_each_entry<T: Transport>(backend: Backend<T>) {
    let url = backend.queue("partial.fifo", &[]).await;
    let entries = vec![
        SendBatchEntry::new("good", fifo("good", "g")),
        SendBatchEntry::new("delayed", fifo("delayed", "g").delay_seconds(5)),
        SendBatchEntry::new("nogroup", SendMessage::new("x").dedup_id("x")),
        SendBatchEntry::new("also-good", fifo("also-good", "g")),
    ];
    let result = backend
        .transport
        .send_message_batch(&url, entries)
        .await
        .unwrap();
    let ok: Vec<&str> = result
        .successful
        .iter()
        .map(|(id, _)| id.as_ref())
        .collect();
    assert_eq!(ok, ["good", "also-good"]);
    let mut failed: Vec<(&str, ErrorKind, bool)> = result
        .failed
        .iter()
        .map(|f| (f.id.as_ref(), f.kind, f.sender_fault))
        .collect();
    failed.sort_by_key(|(id, _, _)| *id);
    assert_eq!(
        failed,
        [
            ("delayed", ErrorKind::InvalidParameterValue, true),
            ("nogroup", ErrorKind::MissingParameter, true)
        ]
    );
    let got = receive_all(&backend, &url, 2, 1).await;
    assert_eq!(bodies(&got), ["good", "also-good"]);
}

/// A request SQS refuses, and the error kind it refuses it with.
#[derive(Debug, Clone, Copy)]
enum Invalid {
    GetQueueUrlOfANameWithASpace,
    CreateQueueOfANameWithASpace,
    CreateQueueWithAVisibilityTimeoutOverTwelveHours,
    CreateQueueWithAnUnknownAttribute,
    ReceiveElevenMessages,
    ReceiveWithALongPollOverTwentySeconds,
    SendElevenEntriesInABatch,
    SendTwoBatchEntriesWithOneId,
    SendABatchEntryIdWithPunctuation,
    DeleteAnEmptyBatch,
    ChangeVisibilityOfTwoBatchEntriesWithOneId,
}

const INVALID: [Invalid; 11] = [
    Invalid::GetQueueUrlOfANameWithASpace,
    Invalid::CreateQueueOfANameWithASpace,
    Invalid::CreateQueueWithAVisibilityTimeoutOverTwelveHours,
    Invalid::CreateQueueWithAnUnknownAttribute,
    Invalid::ReceiveElevenMessages,
    Invalid::ReceiveWithALongPollOverTwentySeconds,
    Invalid::SendElevenEntriesInABatch,
    Invalid::SendTwoBatchEntriesWithOneId,
    Invalid::SendABatchEntryIdWithPunctuation,
    Invalid::DeleteAnEmptyBatch,
    Invalid::ChangeVisibilityOfTwoBatchEntriesWithOneId,
];

impl Invalid {
    /// The error kind Amazon SQS answers.
    fn kind(self) -> ErrorKind {
        match self {
            Self::GetQueueUrlOfANameWithASpace
            | Self::CreateQueueOfANameWithASpace
            | Self::ReceiveElevenMessages
            | Self::ReceiveWithALongPollOverTwentySeconds => ErrorKind::InvalidParameterValue,
            Self::CreateQueueWithAVisibilityTimeoutOverTwelveHours => {
                ErrorKind::InvalidAttributeValue
            }
            Self::CreateQueueWithAnUnknownAttribute => ErrorKind::InvalidAttributeName,
            Self::SendElevenEntriesInABatch => ErrorKind::TooManyEntriesInBatchRequest,
            Self::SendTwoBatchEntriesWithOneId
            | Self::ChangeVisibilityOfTwoBatchEntriesWithOneId => {
                ErrorKind::BatchEntryIdsNotDistinct
            }
            Self::SendABatchEntryIdWithPunctuation => ErrorKind::InvalidBatchEntryId,
            Self::DeleteAnEmptyBatch => ErrorKind::EmptyBatchRequest,
        }
    }

    /// What LocalStack 4.13.1 answers (`None`: it accepts the request), where it differs from
    /// the rules.
    fn localstack_answer(self) -> Option<ErrorKind> {
        match self {
            // LocalStack looks the name up without checking it. Whether SQS itself checks the
            // name here or answers `QueueDoesNotExist` too is not established (moto, tested
            // against SQS, answers `NonExistentQueue` for unknown names).
            Self::GetQueueUrlOfANameWithASpace => Some(ErrorKind::QueueDoesNotExist),
            // LocalStack checks no attribute value at creation (it also takes -1 and "abc").
            Self::CreateQueueWithAVisibilityTimeoutOverTwelveHours => None,
            _ => Some(self.kind()),
        }
    }

    /// Makes the request through a [`Transport`]; `name` is a valid, unused queue name and `url`
    /// an existing queue's.
    async fn through<T: Transport>(self, transport: &T, name: &str, url: &str) -> TransportError {
        let attribute = |name: &str, value: &str| [(name.to_owned(), value.to_owned())].into();
        let sends = |ids: &[&str]| {
            ids.iter()
                .map(|id| SendBatchEntry::new(*id, SendMessage::new("x")))
                .collect()
        };
        let refused = match self {
            Self::GetQueueUrlOfANameWithASpace => transport.get_queue_url("bad name").await.err(),
            Self::CreateQueueOfANameWithASpace => transport
                .create_queue("bad name", Default::default())
                .await
                .err(),
            Self::CreateQueueWithAVisibilityTimeoutOverTwelveHours => transport
                .create_queue(name, attribute("VisibilityTimeout", "43201"))
                .await
                .err(),
            Self::CreateQueueWithAnUnknownAttribute => transport
                .create_queue(name, attribute("Colour", "blue"))
                .await
                .err(),
            Self::ReceiveElevenMessages => transport
                .receive_message(url, ReceiveMessage::new(11))
                .await
                .err(),
            Self::ReceiveWithALongPollOverTwentySeconds => transport
                .receive_message(url, ReceiveMessage::new(1).wait_time_seconds(21))
                .await
                .err(),
            Self::SendElevenEntriesInABatch => {
                let ids: Vec<String> = (0..11).map(|i| format!("e{i}")).collect();
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                transport.send_message_batch(url, sends(&ids)).await.err()
            }
            Self::SendTwoBatchEntriesWithOneId => transport
                .send_message_batch(url, sends(&["a", "a"]))
                .await
                .err(),
            Self::SendABatchEntryIdWithPunctuation => transport
                .send_message_batch(url, sends(&["bad id!"]))
                .await
                .err(),
            Self::DeleteAnEmptyBatch => transport.delete_message_batch(url, vec![]).await.err(),
            Self::ChangeVisibilityOfTwoBatchEntriesWithOneId => {
                let entry = ChangeVisibilityEntry {
                    id: "a".into(),
                    receipt_handle: "not-a-receipt-handle".into(),
                    visibility_timeout: 0,
                };
                transport
                    .change_message_visibility_batch(url, vec![entry.clone(), entry])
                    .await
                    .err()
            }
        };
        refused.unwrap_or_else(|| panic!("{self:?} was accepted"))
    }

    /// Makes the request with the plain SDK client; answers the server's error code, `None` when
    /// the server accepted it.
    async fn through_sdk(
        self,
        client: &aws_sdk_sqs::Client,
        name: &str,
        url: &str,
    ) -> Option<String> {
        use aws_sdk_sqs::types::{
            ChangeMessageVisibilityBatchRequestEntry, QueueAttributeName,
            SendMessageBatchRequestEntry,
        };
        let sends = |ids: &[&str]| {
            ids.iter()
                .map(|id| {
                    SendMessageBatchRequestEntry::builder()
                        .id(*id)
                        .message_body("x")
                        .build()
                        .unwrap()
                })
                .collect::<Vec<_>>()
        };
        let send_batch = |ids: &[&str]| {
            client
                .send_message_batch()
                .queue_url(url)
                .set_entries(Some(sends(ids)))
                .send()
        };
        match self {
            Self::GetQueueUrlOfANameWithASpace => {
                code(client.get_queue_url().queue_name("bad name").send().await)
            }
            Self::CreateQueueOfANameWithASpace => {
                code(client.create_queue().queue_name("bad name").send().await)
            }
            Self::CreateQueueWithAVisibilityTimeoutOverTwelveHours => code(
                client
                    .create_queue()
                    .queue_name(name)
                    .attributes(QueueAttributeName::VisibilityTimeout, "43201")
                    .send()
                    .await,
            ),
            Self::CreateQueueWithAnUnknownAttribute => code(
                client
                    .create_queue()
                    .queue_name(name)
                    .attributes(QueueAttributeName::from("Colour"), "blue")
                    .send()
                    .await,
            ),
            Self::ReceiveElevenMessages => code(
                client
                    .receive_message()
                    .queue_url(url)
                    .max_number_of_messages(11)
                    .send()
                    .await,
            ),
            Self::ReceiveWithALongPollOverTwentySeconds => code(
                client
                    .receive_message()
                    .queue_url(url)
                    .wait_time_seconds(21)
                    .send()
                    .await,
            ),
            Self::SendElevenEntriesInABatch => {
                let ids: Vec<String> = (0..11).map(|i| format!("e{i}")).collect();
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                code(send_batch(&ids).await)
            }
            Self::SendTwoBatchEntriesWithOneId => code(send_batch(&["a", "a"]).await),
            Self::SendABatchEntryIdWithPunctuation => code(send_batch(&["bad id!"]).await),
            Self::DeleteAnEmptyBatch => code(
                client
                    .delete_message_batch()
                    .queue_url(url)
                    .set_entries(Some(vec![]))
                    .send()
                    .await,
            ),
            Self::ChangeVisibilityOfTwoBatchEntriesWithOneId => {
                let entry = ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id("a")
                    .receipt_handle("not-a-receipt-handle")
                    .visibility_timeout(0)
                    .build()
                    .unwrap();
                code(
                    client
                        .change_message_visibility_batch()
                        .queue_url(url)
                        .entries(entry.clone())
                        .entries(entry)
                        .send()
                        .await,
                )
            }
        }
    }
}

/// The error code of a refused SDK call, `None` when it was accepted.
fn code<O, E, R>(result: Result<O, aws_sdk_sqs::error::SdkError<E, R>>) -> Option<String>
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata,
{
    use aws_sdk_sqs::error::ProvideErrorMetadata;
    let error = result.err()?;
    Some(error.code().unwrap_or("(no code)").to_owned())
}

async fn invalid_requests_fail_with_the_same_error_kinds<T: Transport>(backend: Backend<T>) {
    let missing = backend
        .transport
        .get_queue_url(&backend.name("missing"))
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), Some(ErrorKind::QueueDoesNotExist));
    let url = backend.queue("limits", &[]).await;
    for invalid in INVALID {
        let error = invalid
            .through(&backend.transport, &backend.name("refused"), &url)
            .await;
        assert_eq!(error.kind(), Some(invalid.kind()), "{invalid:?}: {error}");
    }
}

/// The aws transport checks the rules before the network: pointed at a closed port, it answers
/// every invalid request with the rule's error kind, while a valid request finds the port closed.
#[tokio::test]
async fn the_aws_transport_refuses_invalid_requests_before_the_network() {
    let closed = SqsBroker::aws()
        .endpoint("http://127.0.0.1:9")
        .region("us-east-1")
        .test_credentials()
        .transport()
        .await
        .unwrap();
    let url = "http://127.0.0.1:9/000000000000/limits";
    for invalid in INVALID {
        let error = invalid.through(&closed, "refused", url).await;
        assert!(
            matches!(&error, TransportError::Service { kind, .. } if *kind == invalid.kind()),
            "{invalid:?}: {error:?}"
        );
    }
    let valid = closed.get_queue_url("limits").await.unwrap_err();
    assert!(
        matches!(valid, TransportError::Unavailable { .. }),
        "a valid request goes to the network, and nothing listens there: {valid:?}"
    );
}

/// What LocalStack itself answers to the invalid requests, through the plain SDK client (no rules
/// of this project in the way), is the error kind the rules give, but for the named deviations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localstack_refuses_invalid_requests_with_the_error_kinds_of_the_rules() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let endpoint = rust_stream::testing::live_endpoint("live test").unwrap();
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .build();
    let client = aws_sdk_sqs::Client::from_conf(config);
    let url = backend.queue("limits", &[]).await;
    let mut answers = Vec::new();
    for invalid in INVALID {
        let code = invalid
            .through_sdk(&client, &backend.name("refused"), &url)
            .await;
        let kind = code.as_deref().and_then(ErrorKind::from_code);
        answers.push((invalid, kind, code));
    }
    let unexpected: Vec<_> = answers
        .iter()
        .filter(|(invalid, kind, _)| *kind != invalid.localstack_answer())
        .collect();
    assert!(
        unexpected.is_empty(),
        "LocalStack answered otherwise: {unexpected:#?}"
    );
    let agreeing = answers
        .iter()
        .filter(|(invalid, kind, _)| *kind == Some(invalid.kind()))
        .count();
    println!(
        "LocalStack refuses {agreeing} of {} invalid requests with the rules' error kind",
        INVALID.len()
    );
}

async fn receipt_handles_are_checked<T: Transport>(backend: Backend<T>) {
    let url = backend
        .queue("handles", &[("VisibilityTimeout", "30")])
        .await;
    send(&backend, &url, vec![SendMessage::new("m")]).await;
    let got = receive(&backend, &url, 1, 1).await;
    // A handle the queue never issued.
    let entries = vec![DeleteEntry {
        id: "bogus".into(),
        receipt_handle: "not-a-receipt-handle".into(),
    }];
    let result = backend
        .transport
        .delete_message_batch(&url, entries)
        .await
        .unwrap();
    assert_eq!(result.failed.len(), 1);
    assert_eq!(result.failed[0].kind, ErrorKind::ReceiptHandleIsInvalid);
    // Deleting twice succeeds: retries are safe.
    delete(&backend, &url, &got).await;
    delete(&backend, &url, &got).await;
}

/// On a FIFO queue a receipt handle expires with its visibility: a delete with it, once the
/// message is visible again, fails, and the message stays (SQS answers `InvalidParameterValue`,
/// "The receipt handle has expired"; LocalStack a failed entry too). A consumer whose delete came
/// too late must learn it, so the rest of its group goes back behind the message.
async fn an_expired_fifo_receipt_handle_deletes_nothing<T: Transport>(backend: Backend<T>) {
    let url = backend
        .queue("expired.fifo", &[("VisibilityTimeout", "1")])
        .await;
    send(&backend, &url, vec![fifo("m1", "g")]).await;
    let got = receive(&backend, &url, 1, 1).await;
    assert_eq!(bodies(&got), ["m1"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let entries = vec![DeleteEntry {
        id: "late".into(),
        receipt_handle: got[0].receipt_handle.clone(),
    }];
    let result = backend
        .transport
        .delete_message_batch(&url, entries)
        .await
        .unwrap();
    assert_eq!(result.failed.len(), 1, "{result:?}");
    assert!(
        matches!(
            result.failed[0].kind,
            ErrorKind::InvalidParameterValue | ErrorKind::ReceiptHandleIsInvalid
        ),
        "{:?}",
        result.failed[0]
    );
    if backend.kind == Kind::InProcess {
        assert!(
            result.failed[0].message.contains("expired"),
            "{:?}",
            result.failed[0]
        );
    }
    let again = receive(&backend, &url, 1, 1).await;
    assert_eq!(bodies(&again), ["m1"], "the message stayed");
    assert_eq!(again[0].receive_count(), Some(2));
}
