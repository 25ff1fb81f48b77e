//! The in-process account's FIFO semantics, following the FIFO guide's "Receiving" and
//! "Deduplication": storage order, sequence numbers, groups held while in flight, release and
//! timeout order, deduplication, delays, dead-lettering with the group going on, attempt ids.

mod common;

use std::time::Duration;

use common::{bodies, delete_all, fifo_queue, receive, release, send_fifo};
use rust_stream::account::Account;
use rust_stream::transport::{MessageAttributeValue, ReceiveMessage, SendBatchEntry, SendMessage};
use tokio::time::{advance, Instant};

#[tokio::test(start_paused = true)]
async fn a_group_is_handed_out_in_storage_order_with_increasing_sequence_numbers() {
    let account = Account::new();
    let url = fifo_queue(&account, "ledger.fifo", &[]).await;
    for body in ["opened", "deposited 100", "withdrew 30", "closed"] {
        send_fifo(&account, &url, "acct-9", body).await;
    }
    let got = receive(&account, &url, 10).await;
    assert_eq!(
        bodies(&got),
        ["opened", "deposited 100", "withdrew 30", "closed"]
    );
    let sequences: Vec<u128> = got
        .iter()
        .map(|m| m.sequence_number().unwrap().parse().unwrap())
        .collect();
    assert!(sequences.windows(2).all(|w| w[0] < w[1]), "{sequences:?}");
    assert!(got.iter().all(|m| m.sequence_number().unwrap().len() == 20));
    assert!(got.iter().all(|m| m.group_id() == Some("acct-9")));
}

#[tokio::test(start_paused = true)]
async fn a_batch_is_stored_in_request_order() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    let entries = (0..10)
        .map(|i| {
            SendBatchEntry::new(
                format!("e{i}"),
                SendMessage::new(format!("m{i}"))
                    .group_id("g")
                    .dedup_id(format!("d{i}")),
            )
        })
        .collect();
    let result = account.send_message_batch(&url, entries).await.unwrap();
    assert!(result.failed.is_empty());
    let got = receive(&account, &url, 10).await;
    let expected: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies(&got), expected);
}

#[tokio::test(start_paused = true)]
async fn a_group_with_a_message_in_flight_is_not_handed_out_but_other_groups_are() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    send_fifo(&account, &url, "a", "a1").await;
    send_fifo(&account, &url, "a", "a2").await;
    send_fifo(&account, &url, "b", "b1").await;

    assert_eq!(bodies(&receive(&account, &url, 1).await), ["a1"]);
    assert_eq!(
        bodies(&receive(&account, &url, 10).await),
        ["b1"],
        "a is held while a1 is in flight"
    );
    assert!(receive(&account, &url, 10).await.is_empty());
    send_fifo(&account, &url, "a", "a3").await;
    assert!(
        receive(&account, &url, 10).await.is_empty(),
        "a new message does not free a held group"
    );
}

#[tokio::test(start_paused = true)]
async fn one_receive_returns_several_groups_each_with_consecutive_messages() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    for (group, body) in [
        ("a", "a1"),
        ("b", "b1"),
        ("a", "a2"),
        ("c", "c1"),
        ("b", "b2"),
        ("a", "a3"),
    ] {
        send_fifo(&account, &url, group, body).await;
    }
    let got = receive(&account, &url, 10).await;
    assert_eq!(bodies(&got), ["a1", "a2", "a3", "b1", "b2", "c1"]);

    // With a smaller maximum a receive stops inside a group, and that group stays held.
    let url = fifo_queue(&account, "r.fifo", &[]).await;
    for (group, body) in [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1")] {
        send_fifo(&account, &url, group, body).await;
    }
    assert_eq!(bodies(&receive(&account, &url, 2).await), ["a1", "a2"]);
    assert_eq!(bodies(&receive(&account, &url, 10).await), ["b1"]);
}

#[tokio::test(start_paused = true)]
async fn a_released_message_keeps_its_group_held_until_the_rest_settle_then_comes_first() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    for body in ["m1", "m2", "m3", "m4"] {
        send_fifo(&account, &url, "g", body).await;
    }
    let got = receive(&account, &url, 3).await;
    assert_eq!(bodies(&got), ["m1", "m2", "m3"]);

    release(&account, &url, &got[0]).await.unwrap();
    assert!(
        receive(&account, &url, 10).await.is_empty(),
        "m2 and m3 are still in flight"
    );
    delete_all(&account, &url, &got[1..2]).await;
    assert!(
        receive(&account, &url, 10).await.is_empty(),
        "m3 is still in flight"
    );
    delete_all(&account, &url, &got[2..3]).await;

    let again = receive(&account, &url, 10).await;
    assert_eq!(
        bodies(&again),
        ["m1", "m4"],
        "the released message comes first"
    );
    assert_eq!(again[0].receive_count(), Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_group_comes_back_with_its_unacknowledged_messages_first_in_order() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[("VisibilityTimeout", "10")]).await;
    for body in ["m1", "m2", "m3"] {
        send_fifo(&account, &url, "g", body).await;
    }
    let got = receive(&account, &url, 3).await;
    send_fifo(&account, &url, "g", "m4").await;
    delete_all(&account, &url, &got[1..2]).await;

    advance(Duration::from_secs(9)).await;
    assert!(receive(&account, &url, 10).await.is_empty());
    advance(Duration::from_secs(1)).await;
    assert_eq!(
        bodies(&receive(&account, &url, 10).await),
        ["m1", "m3", "m4"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_wakes_when_a_held_group_is_freed() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    send_fifo(&account, &url, "g", "m1").await;
    send_fifo(&account, &url, "g", "m2").await;
    let first = receive(&account, &url, 1).await;

    let start = Instant::now();
    let poll = tokio::spawn({
        let (account, url) = (account.clone(), url.clone());
        async move {
            account
                .receive_message(&url, ReceiveMessage::new(10).wait_time_seconds(20))
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    delete_all(&account, &url, &first).await;
    assert_eq!(bodies(&poll.await.unwrap().unwrap()), ["m2"]);
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_send_within_five_minutes_answers_the_original_and_is_not_stored() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    let send = || {
        SendMessage::new("deposited 100")
            .group_id("acct-9")
            .dedup_id("acct-9-dep-1")
    };
    let original = account.send_message(&url, send()).await.unwrap();
    assert!(!original.duplicate);

    advance(Duration::from_secs(299)).await;
    let again = account
        .send_message(
            &url,
            send().attribute("retry", MessageAttributeValue::number("1")),
        )
        .await
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.message_id, original.message_id);
    assert_eq!(again.sequence_number, original.sequence_number);
    assert_eq!(account.counts(&url).await.unwrap().visible, 1);

    // Deleting the original does not end the window.
    let got = receive(&account, &url, 10).await;
    delete_all(&account, &url, &got).await;
    assert!(account.send_message(&url, send()).await.unwrap().duplicate);

    advance(Duration::from_secs(1)).await;
    let later = account.send_message(&url, send()).await.unwrap();
    assert!(!later.duplicate, "after 5 minutes the id is new again");
    assert_ne!(later.message_id, original.message_id);
    assert_eq!(account.counts(&url).await.unwrap().visible, 1);
}

#[tokio::test(start_paused = true)]
async fn content_based_deduplication_hashes_the_body_only_and_an_explicit_id_wins() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[("ContentBasedDeduplication", "true")]).await;
    let first = account
        .send_message(&url, SendMessage::new("same").group_id("g"))
        .await
        .unwrap();
    let attributed = SendMessage::new("same")
        .group_id("g")
        .attribute("k", MessageAttributeValue::string("v"));
    let second = account.send_message(&url, attributed).await.unwrap();
    assert!(
        second.duplicate,
        "attributes do not count toward the digest"
    );
    assert_eq!(second.message_id, first.message_id);
    let other_group = account
        .send_message(&url, SendMessage::new("same").group_id("h"))
        .await
        .unwrap();
    assert!(
        other_group.duplicate,
        "the default scope is the whole queue"
    );
    let explicit = account
        .send_message(&url, SendMessage::new("same").group_id("g").dedup_id("x"))
        .await
        .unwrap();
    assert!(!explicit.duplicate, "an explicit id wins over the digest");

    let got = receive(&account, &url, 10).await;
    assert_eq!(got.len(), 2);
    // The SHA-256 of "same", computed outside the account's code.
    assert_eq!(
        got[0].dedup_id(),
        Some("0967115f2813a3541eaef77de9d9d5773f1c0c04314b0bbfe4ff3b3b1c55b5d5")
    );
}

#[tokio::test(start_paused = true)]
async fn deduplication_holds_within_one_batch() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    let entries = vec![
        SendBatchEntry::new("a", SendMessage::new("one").group_id("g").dedup_id("d1")),
        SendBatchEntry::new(
            "b",
            SendMessage::new("one again").group_id("g").dedup_id("d1"),
        ),
        SendBatchEntry::new("c", SendMessage::new("two").group_id("g").dedup_id("d2")),
    ];
    let result = account.send_message_batch(&url, entries).await.unwrap();
    assert!(result.failed.is_empty());
    let (a, b) = (&result.successful[0].1, &result.successful[1].1);
    assert!(!a.duplicate && b.duplicate);
    assert_eq!(a.message_id, b.message_id);
    assert_eq!(a.sequence_number, b.sequence_number);
    assert_eq!(bodies(&receive(&account, &url, 10).await), ["one", "two"]);
}

#[tokio::test(start_paused = true)]
async fn message_group_scope_deduplicates_within_a_group_only() {
    let account = Account::new();
    let url = fifo_queue(
        &account,
        "q.fifo",
        &[
            ("DeduplicationScope", "messageGroup"),
            ("FifoThroughputLimit", "perMessageGroupId"),
        ],
    )
    .await;
    let g = account
        .send_message(&url, SendMessage::new("x").group_id("g").dedup_id("d"))
        .await
        .unwrap();
    let h = account
        .send_message(&url, SendMessage::new("x").group_id("h").dedup_id("d"))
        .await
        .unwrap();
    let g2 = account
        .send_message(&url, SendMessage::new("x").group_id("g").dedup_id("d"))
        .await
        .unwrap();
    assert!(!g.duplicate && !h.duplicate && g2.duplicate);
    assert_eq!(account.counts(&url).await.unwrap().visible, 2);
}

#[tokio::test(start_paused = true)]
async fn the_queue_delay_applies_to_every_fifo_message() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[("DelaySeconds", "3")]).await;
    send_fifo(&account, &url, "g", "m1").await;
    account
        .send_message(
            &url,
            SendMessage::new("m2")
                .group_id("g")
                .dedup_id("m2")
                .delay_seconds(0),
        )
        .await
        .unwrap();
    assert!(receive(&account, &url, 10).await.is_empty());
    advance(Duration::from_secs(3)).await;
    assert_eq!(bodies(&receive(&account, &url, 10).await), ["m1", "m2"]);
}

#[tokio::test(start_paused = true)]
async fn after_a_message_moves_to_the_dead_letter_queue_its_group_continues() {
    let account = Account::new();
    let dlq = fifo_queue(&account, "orders-dlq.fifo", &[]).await;
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        account.queue_arn_for("orders-dlq.fifo")
    );
    let url = fifo_queue(
        &account,
        "orders.fifo",
        &[("VisibilityTimeout", "5"), ("RedrivePolicy", &policy)],
    )
    .await;
    let poison = send_fifo(&account, &url, "cust-1", "o1").await;
    send_fifo(&account, &url, "cust-1", "o2").await;
    send_fifo(&account, &url, "cust-1", "o3").await;

    assert_eq!(bodies(&receive(&account, &url, 1).await), ["o1"]);
    advance(Duration::from_secs(5)).await;
    let got = receive(&account, &url, 10).await;
    assert_eq!(
        bodies(&got),
        ["o2", "o3"],
        "o1 moved; the group goes on with o2"
    );

    let dead = receive(&account, &dlq, 10).await;
    assert_eq!(bodies(&dead), ["o1"]);
    assert_eq!(dead[0].message_id, poison);
    assert_eq!(dead[0].group_id(), Some("cust-1"));
    assert_eq!(
        dead[0].attributes["DeadLetterQueueSourceArn"],
        account.queue_arn_for("orders.fifo")
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_moved_to_a_fifo_dead_letter_queue_starts_its_retention_anew() {
    const DAY: Duration = Duration::from_secs(86_400);
    let account = Account::new();
    // The dead-letter queue keeps the default retention of 4 days.
    let dlq = fifo_queue(&account, "orders-dlq.fifo", &[]).await;
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        account.queue_arn_for("orders-dlq.fifo")
    );
    let url = fifo_queue(&account, "orders.fifo", &[("RedrivePolicy", &policy)]).await;
    send_fifo(&account, &url, "cust-1", "o1").await;
    assert_eq!(bodies(&receive(&account, &url, 1).await), ["o1"]);

    advance(3 * DAY).await;
    assert!(
        receive(&account, &url, 1).await.is_empty(),
        "the receive moves it"
    );
    advance(DAY).await;
    assert_eq!(
        account.counts(&dlq).await.unwrap().visible,
        1,
        "4 days after its send, but the move reset its enqueue time"
    );
    advance(3 * DAY - Duration::from_secs(1)).await;
    assert_eq!(account.counts(&dlq).await.unwrap().visible, 1);
    advance(Duration::from_secs(1)).await;
    assert_eq!(
        account.counts(&dlq).await.unwrap().visible,
        0,
        "4 days after the move"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retried_receive_with_the_same_attempt_id_returns_the_same_messages() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    for body in ["m1", "m2"] {
        send_fifo(&account, &url, "g", body).await;
    }
    send_fifo(&account, &url, "h", "h1").await;
    let request = ReceiveMessage::new(2).receive_request_attempt_id("attempt-1");
    let first = account
        .receive_message(&url, request.clone())
        .await
        .unwrap();
    let retried = account
        .receive_message(&url, request.clone())
        .await
        .unwrap();
    assert_eq!(first, retried, "same messages, same receipt handles");

    // Once a message of the attempt is settled, the id no longer replays it.
    delete_all(&account, &url, &first).await;
    let fresh = account.receive_message(&url, request).await.unwrap();
    assert_eq!(bodies(&fresh), ["h1"]);
}

#[tokio::test(start_paused = true)]
async fn a_retried_receive_with_the_same_attempt_id_resets_the_visibility_timeout() {
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    for body in ["m1", "m2"] {
        send_fifo(&account, &url, "g", body).await;
    }
    let request = ReceiveMessage::new(10)
        .visibility_timeout(30)
        .receive_request_attempt_id("attempt-1");
    let first = account
        .receive_message(&url, request.clone())
        .await
        .unwrap();
    assert_eq!(bodies(&first), ["m1", "m2"]);

    advance(Duration::from_secs(20)).await;
    let retried = account.receive_message(&url, request).await.unwrap();
    assert_eq!(first, retried, "same messages, same receipt handles");

    advance(Duration::from_secs(20)).await;
    assert!(
        receive(&account, &url, 10).await.is_empty(),
        "at 40 s, past the first receive's 30 s: the retry at 20 s made them invisible until 50 s"
    );
    advance(Duration::from_secs(9)).await;
    assert!(receive(&account, &url, 10).await.is_empty());
    advance(Duration::from_secs(1)).await;
    let again = receive(&account, &url, 10).await;
    assert_eq!(bodies(&again), ["m1", "m2"]);
    assert_eq!(
        again[0].receive_count(),
        Some(2),
        "the retry was not a receive of its own"
    );
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_with_an_attempt_id_returns_a_message_sent_during_its_wait() {
    // Regression: an attempt that found nothing at first must not replay that empty answer.
    let account = Account::new();
    let url = fifo_queue(&account, "q.fifo", &[]).await;
    let start = Instant::now();
    let poll = tokio::spawn({
        let (account, url) = (account.clone(), url.clone());
        async move {
            let request = ReceiveMessage::new(10)
                .wait_time_seconds(20)
                .receive_request_attempt_id("attempt-1");
            account.receive_message(&url, request).await
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    send_fifo(&account, &url, "g", "m1").await;
    assert_eq!(bodies(&poll.await.unwrap().unwrap()), ["m1"]);
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}
