//! The in-process account's standard-queue semantics, on a paused clock: visibility and
//! redelivery, receive counts, delays, changing visibility, long polling, redrive, retention,
//! purge, counts and attribute selection.

mod common;

use std::time::Duration;

use common::{attributes, bodies, receive};
use rust_stream::account::{Account, QueueCounts};
use rust_stream::model::rules::ErrorKind;
use rust_stream::transport::{MessageAttributeValue, ReceiveMessage, SendMessage};
use tokio::time::{advance, Instant};

async fn standard(account: &Account, name: &str, extra: &[(&str, &str)]) -> String {
    account.create_queue(name, attributes(extra)).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_message_not_deleted_comes_back_when_its_visibility_timeout_ends() {
    let account = Account::new();
    let url = standard(&account, "q", &[("VisibilityTimeout", "30")]).await;
    let sent = account
        .send_message(&url, SendMessage::new("m"))
        .await
        .unwrap();

    let first = receive(&account, &url, 10).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].message_id, sent.message_id);
    assert_eq!(first[0].receive_count(), Some(1));
    assert!(
        receive(&account, &url, 10).await.is_empty(),
        "in flight, so invisible"
    );

    advance(Duration::from_secs(29)).await;
    assert!(
        receive(&account, &url, 10).await.is_empty(),
        "still invisible at 29 s"
    );
    advance(Duration::from_secs(1)).await;
    let second = receive(&account, &url, 10).await;
    assert_eq!(second.len(), 1);
    assert_eq!(second[0].message_id, sent.message_id);
    assert_eq!(
        second[0].receive_count(),
        Some(2),
        "a timed-out receive counts"
    );
    assert_ne!(
        second[0].receipt_handle, first[0].receipt_handle,
        "each receive issues a new handle"
    );

    // The superseded handle deletes nothing: the newer receiver keeps the message.
    account
        .delete_message(&url, &first[0].receipt_handle)
        .await
        .unwrap();
    assert_eq!(account.counts(&url).await.unwrap().in_flight, 1);
    account
        .delete_message(&url, &second[0].receipt_handle)
        .await
        .unwrap();
    assert_eq!(account.counts(&url).await.unwrap(), QueueCounts::default());
    // Deleting again is safe.
    account
        .delete_message(&url, &second[0].receipt_handle)
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_receive_may_override_the_visibility_timeout() {
    let account = Account::new();
    let url = standard(&account, "q", &[]).await;
    account
        .send_message(&url, SendMessage::new("m"))
        .await
        .unwrap();
    let got = account
        .receive_message(&url, ReceiveMessage::new(1).visibility_timeout(5))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    advance(Duration::from_secs(5)).await;
    assert_eq!(receive(&account, &url, 1).await.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn message_and_queue_delays_hold_messages_back() {
    let account = Account::new();
    let url = standard(&account, "q", &[("DelaySeconds", "5")]).await;
    account
        .send_message(&url, SendMessage::new("queue-delay"))
        .await
        .unwrap();
    account
        .send_message(&url, SendMessage::new("own-delay").delay_seconds(10))
        .await
        .unwrap();
    account
        .send_message(&url, SendMessage::new("no-delay").delay_seconds(0))
        .await
        .unwrap();

    assert_eq!(
        account.counts(&url).await.unwrap(),
        QueueCounts {
            visible: 1,
            in_flight: 0,
            delayed: 2
        }
    );
    assert_eq!(bodies(&receive(&account, &url, 10).await), ["no-delay"]);
    advance(Duration::from_secs(5)).await;
    assert_eq!(bodies(&receive(&account, &url, 10).await), ["queue-delay"]);
    advance(Duration::from_secs(4)).await;
    assert!(receive(&account, &url, 10).await.is_empty());
    advance(Duration::from_secs(1)).await;
    assert_eq!(bodies(&receive(&account, &url, 10).await), ["own-delay"]);
}

#[tokio::test(start_paused = true)]
async fn changing_visibility_releases_or_extends_a_message() {
    let account = Account::new();
    let url = standard(&account, "q", &[("VisibilityTimeout", "30")]).await;
    account
        .send_message(&url, SendMessage::new("m"))
        .await
        .unwrap();
    let got = receive(&account, &url, 1).await;

    account
        .change_message_visibility(&url, &got[0].receipt_handle, 0)
        .await
        .unwrap();
    let again = receive(&account, &url, 1).await;
    assert_eq!(again.len(), 1, "visibility 0 releases at once");
    assert_eq!(again[0].receive_count(), Some(2));

    account
        .change_message_visibility(&url, &again[0].receipt_handle, 100)
        .await
        .unwrap();
    advance(Duration::from_secs(99)).await;
    assert!(
        receive(&account, &url, 1).await.is_empty(),
        "extended past the queue's 30 s"
    );
    advance(Duration::from_secs(1)).await;
    let third = receive(&account, &url, 1).await;
    assert_eq!(third.len(), 1);

    // The 12-hour cap counts from the receive: extend to the cap exactly, then a step more fails.
    account
        .change_message_visibility(&url, &third[0].receipt_handle, 43_200)
        .await
        .unwrap();
    advance(Duration::from_secs(3600)).await;
    account
        .change_message_visibility(&url, &third[0].receipt_handle, 39_600)
        .await
        .unwrap();
    let err = account
        .change_message_visibility(&url, &third[0].receipt_handle, 39_601)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::InvalidParameterValue));
    assert!(err.to_string().contains("12 hours"), "{err}");

    // A stale handle cannot change visibility.
    let err = account
        .change_message_visibility(&url, &got[0].receipt_handle, 10)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::MessageNotInflight));
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_returns_as_soon_as_a_message_is_sent() {
    let account = Account::new();
    let url = standard(&account, "q", &[]).await;
    let start = Instant::now();
    let poll = tokio::spawn({
        let (account, url) = (account.clone(), url.clone());
        async move {
            account
                .receive_message(&url, ReceiveMessage::new(10).wait_time_seconds(20))
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    account
        .send_message(&url, SendMessage::new("m"))
        .await
        .unwrap();
    let got = poll.await.unwrap().unwrap();
    assert_eq!(bodies(&got), ["m"]);
    assert_eq!(start.elapsed(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_returns_when_a_visibility_timeout_or_a_delay_ends() {
    let account = Account::new();
    let url = standard(&account, "q", &[]).await;
    account
        .send_message(&url, SendMessage::new("timed-out"))
        .await
        .unwrap();
    account
        .receive_message(&url, ReceiveMessage::new(1).visibility_timeout(7))
        .await
        .unwrap();
    account
        .send_message(&url, SendMessage::new("delayed").delay_seconds(4))
        .await
        .unwrap();

    let start = Instant::now();
    let long = ReceiveMessage::new(10).wait_time_seconds(20);
    let got = account.receive_message(&url, long.clone()).await.unwrap();
    assert_eq!(bodies(&got), ["delayed"]);
    assert_eq!(start.elapsed(), Duration::from_secs(4));
    let got = account.receive_message(&url, long).await.unwrap();
    assert_eq!(bodies(&got), ["timed-out"]);
    assert_eq!(start.elapsed(), Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_with_nothing_to_receive_returns_empty_at_the_end_of_its_wait() {
    let account = Account::new();
    let url = standard(&account, "q", &[("ReceiveMessageWaitTimeSeconds", "12")]).await;
    let start = Instant::now();
    let got = account
        .receive_message(&url, ReceiveMessage::new(10).wait_time_seconds(20))
        .await
        .unwrap();
    assert!(got.is_empty());
    assert_eq!(start.elapsed(), Duration::from_secs(20));
    // Without a wait of its own, a receive takes the queue's ReceiveMessageWaitTimeSeconds.
    let start = Instant::now();
    let got = account
        .receive_message(&url, ReceiveMessage::new(10).queue_wait_time())
        .await
        .unwrap();
    assert!(got.is_empty());
    assert_eq!(start.elapsed(), Duration::from_secs(12));
}

#[tokio::test(start_paused = true)]
async fn a_long_poll_on_a_deleted_queue_reports_it_gone() {
    let account = Account::new();
    let url = standard(&account, "q", &[]).await;
    let poll = tokio::spawn({
        let (account, url) = (account.clone(), url.clone());
        async move {
            account
                .receive_message(&url, ReceiveMessage::new(10).wait_time_seconds(20))
                .await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    account.delete_queue(&url).await.unwrap();
    let err = poll.await.unwrap().unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::QueueDoesNotExist));
}

#[tokio::test(start_paused = true)]
async fn a_receive_that_would_pass_max_receive_count_moves_the_message_to_the_dead_letter_queue() {
    let account = Account::new();
    let dlq = standard(&account, "orders-dlq", &[]).await;
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":2}}"#,
        account.queue_arn_for("orders-dlq")
    );
    let url = standard(
        &account,
        "orders",
        &[("VisibilityTimeout", "10"), ("RedrivePolicy", &policy)],
    )
    .await;
    let sent = account
        .send_message(&url, SendMessage::new("poison"))
        .await
        .unwrap();
    account
        .send_message(&url, SendMessage::new("fine").delay_seconds(25))
        .await
        .unwrap();

    for attempt in 1..=2 {
        let got = receive(&account, &url, 10).await;
        assert_eq!(got[0].receive_count(), Some(attempt));
        advance(Duration::from_secs(10)).await;
    }
    advance(Duration::from_secs(5)).await;
    let got = receive(&account, &url, 10).await;
    assert_eq!(
        bodies(&got),
        ["fine"],
        "the third receive moves the poison message instead"
    );

    let dead = receive(&account, &dlq, 10).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].message_id, sent.message_id,
        "the message keeps its id"
    );
    assert_eq!(dead[0].body, "poison");
    assert_eq!(
        dead[0].attributes["DeadLetterQueueSourceArn"],
        account.queue_arn_for("orders")
    );
    assert_eq!(dead[0].receive_count(), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_message_moved_to_a_standard_dead_letter_queue_keeps_its_original_enqueue_time() {
    const DAY: Duration = Duration::from_secs(86_400);
    let account = Account::new();
    // The dead-letter queue keeps the default retention of 4 days.
    let dlq = standard(&account, "orders-dlq", &[]).await;
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":1}}"#,
        account.queue_arn_for("orders-dlq")
    );
    let url = standard(&account, "orders", &[("RedrivePolicy", &policy)]).await;
    account
        .send_message(&url, SendMessage::new("poison"))
        .await
        .unwrap();
    let first = receive(&account, &url, 1).await;
    let sent_at = &first[0].attributes["SentTimestamp"];

    // Three days in the source queue; meanwhile a message sent to the dead-letter queue directly,
    // which the redriven one, older, must not wait behind.
    advance(3 * DAY).await;
    account
        .send_message(&dlq, SendMessage::new("direct"))
        .await
        .unwrap();
    assert!(
        receive(&account, &url, 1).await.is_empty(),
        "the receive moves it"
    );
    assert_eq!(account.counts(&dlq).await.unwrap().visible, 2);

    advance(DAY - Duration::from_secs(1)).await;
    let dead = account
        .receive_message(&dlq, ReceiveMessage::new(10))
        .await
        .unwrap();
    assert_eq!(dead.len(), 2);
    let poison = dead.iter().find(|m| m.body == "poison").unwrap();
    assert_eq!(
        &poison.attributes["SentTimestamp"], sent_at,
        "the move keeps the send time"
    );
    let sent: u64 = sent_at.parse().unwrap();
    let first_receive: u64 = poison.attributes["ApproximateFirstReceiveTimestamp"]
        .parse()
        .unwrap();
    assert_eq!(
        first_receive - sent,
        (4 * DAY - Duration::from_secs(1)).as_millis() as u64,
        "the first receive from the dead-letter queue"
    );

    advance(Duration::from_secs(1)).await;
    assert_eq!(
        account.counts(&dlq).await.unwrap(),
        QueueCounts {
            visible: 0,
            in_flight: 1,
            delayed: 0
        },
        "4 days after its first send, 1 day after the move, the redriven message expires"
    );
}

#[tokio::test(start_paused = true)]
async fn messages_past_the_retention_period_are_dropped() {
    let account = Account::new();
    let url = standard(&account, "q", &[("MessageRetentionPeriod", "60")]).await;
    account
        .send_message(&url, SendMessage::new("old"))
        .await
        .unwrap();
    advance(Duration::from_secs(30)).await;
    account
        .send_message(&url, SendMessage::new("new"))
        .await
        .unwrap();
    advance(Duration::from_secs(30)).await;
    assert_eq!(account.counts(&url).await.unwrap().visible, 1);
    assert_eq!(bodies(&receive(&account, &url, 10).await), ["new"]);
}

#[tokio::test(start_paused = true)]
async fn purge_drops_every_message_and_counts_follow_each_state() {
    let account = Account::new();
    let url = standard(&account, "q", &[]).await;
    for body in ["a", "b", "c"] {
        account
            .send_message(&url, SendMessage::new(body))
            .await
            .unwrap();
    }
    account
        .send_message(&url, SendMessage::new("later").delay_seconds(60))
        .await
        .unwrap();
    receive(&account, &url, 1).await;
    assert_eq!(
        account.counts(&url).await.unwrap(),
        QueueCounts {
            visible: 2,
            in_flight: 1,
            delayed: 1
        }
    );
    let attrs = account.get_queue_attributes(&url, &["All"]).await.unwrap();
    assert_eq!(attrs["ApproximateNumberOfMessages"], "2");
    assert_eq!(attrs["ApproximateNumberOfMessagesNotVisible"], "1");
    assert_eq!(attrs["ApproximateNumberOfMessagesDelayed"], "1");
    assert_eq!(attrs["QueueArn"], account.queue_arn_for("q"));

    account.purge_queue(&url).await.unwrap();
    assert_eq!(account.counts(&url).await.unwrap(), QueueCounts::default());
    advance(Duration::from_secs(60)).await;
    assert!(
        receive(&account, &url, 10).await.is_empty(),
        "purged messages never come back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_receive_returns_only_the_attributes_it_asks_for() {
    let account = Account::new();
    let url = standard(&account, "q", &[]).await;
    let message = SendMessage::new("m")
        .attribute("trace.id", MessageAttributeValue::string("t-1"))
        .attribute("trace.span", MessageAttributeValue::string("s-1"))
        .attribute("tenant", MessageAttributeValue::string("acme"))
        .attribute("traced", MessageAttributeValue::number("1"));
    account.send_message(&url, message).await.unwrap();
    let request = ReceiveMessage::new(1)
        .system_attribute_names(["ApproximateReceiveCount"])
        .message_attribute_names(["trace.*", "tenant"]);
    let got = account.receive_message(&url, request).await.unwrap();
    assert_eq!(
        got[0].attributes.keys().collect::<Vec<_>>(),
        ["ApproximateReceiveCount"]
    );
    assert_eq!(
        got[0].message_attributes.keys().collect::<Vec<_>>(),
        ["tenant", "trace.id", "trace.span"]
    );

    account
        .change_message_visibility(&url, &got[0].receipt_handle, 0)
        .await
        .unwrap();
    let bare = ReceiveMessage::new(1)
        .system_attribute_names(Vec::<String>::new())
        .message_attribute_names(Vec::<String>::new());
    let got = account.receive_message(&url, bare).await.unwrap();
    assert!(got[0].attributes.is_empty() && got[0].message_attributes.is_empty());
}

#[tokio::test(start_paused = true)]
async fn system_attributes_carry_timestamps_on_the_accounts_clock() {
    let account = Account::new();
    let url = standard(&account, "q", &[]).await;
    account
        .send_message(&url, SendMessage::new("m"))
        .await
        .unwrap();
    advance(Duration::from_secs(90)).await;
    let got = receive(&account, &url, 1).await;
    let sent: u64 = got[0].attributes["SentTimestamp"].parse().unwrap();
    let first: u64 = got[0].attributes["ApproximateFirstReceiveTimestamp"]
        .parse()
        .unwrap();
    assert_eq!(
        first - sent,
        90_000,
        "a paused clock moves the timestamps too"
    );
}
