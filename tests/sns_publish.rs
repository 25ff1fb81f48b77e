//! Publishing to SNS topics on the in-process broker: an app's queues subscribed to a topic when it
//! starts (and found, not made again, by the next), typed start errors for what is missing, a
//! drifted subscription warned about by attribute, `PublishBatch` calls filled, every bad publish
//! refused before the network, and a FIFO topic's groups kept in order.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::account::Account;
use rust_stream::model::subscription::Subscribe;
use rust_stream::model::{SnsTopic, TopicSubscription};
use rust_stream::prelude::*;
use rust_stream::sqs::StartError;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::layer::{Hooked, Hooks};
use rust_stream::transport::{
    ErrorKind, PublishBatchEntry, PublishBatchResult, QueueAttributes, ReceiveMessage,
    TopicAttributes, Transport, TransportError,
};
use rust_stream::{Handle, PublishError};
use serde_json::{json, Value};

/// What each queue's handler saw: the message as published (the consumer unwraps an SNS
/// envelope), and whether it came raw (no envelope, so no `Context::sns`).
type Seen = Arc<Mutex<Vec<(Value, bool)>>>;

/// Records what it handles.
struct Record(Seen);

impl Handle<Value> for Record {
    async fn handle(
        &self,
        value: &Value,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let raw = ctx.sns().is_none();
        self.0.lock().unwrap().push((value.clone(), raw));
        Ok(())
    }
}

const TOPIC: &str = "payments";

fn topic() -> SnsTopic {
    SnsTopic::new(TOPIC).create_if_missing()
}

/// Three queues on one topic: `all` raw without a filter, `cards` and `wires` enveloped with a
/// filter on the `kind` attribute each.
fn queues() -> [SqsQueue; 3] {
    [
        SqsQueue::new("all")
            .create_if_missing()
            .subscribed_to(TopicSubscription::new(topic()).raw_message_delivery(true)),
        SqsQueue::new("cards")
            .create_if_missing()
            .subscribed_to(TopicSubscription::new(topic()).filter_policy(r#"{"kind": ["card"]}"#)),
        SqsQueue::new("wires")
            .create_if_missing()
            .subscribed_to(TopicSubscription::new(topic()).filter_policy(r#"{"kind": ["wire"]}"#)),
    ]
}

/// An app consuming the three queues, and what each handler saw.
fn fan_out(broker: &SqsBroker) -> (impl App, [Seen; 3]) {
    let seen: [Seen; 3] = Default::default();
    let handlers = seen.clone();
    let app = RustStream::new(AppInfo::new("fan-out", "0")).with_broker(broker.clone(), |b| {
        for (queue, seen) in queues().into_iter().zip(handlers) {
            b.include(subscriber(queue, Record(seen)).build());
        }
    });
    (app, seen)
}

#[tokio::test(start_paused = true)]
async fn a_publish_reaches_exactly_the_subscribed_queues_whose_policy_takes_it() {
    let account = Account::new();
    // One queue exists already, with a policy statement of its own, which must be kept.
    let theirs = json!({"Sid": "theirs", "Effect": "Allow", "Principal": {"AWS": "123"}, "Action": "sqs:ReceiveMessage", "Resource": "*"});
    let policy = json!({"Version": "2012-10-17", "Statement": [theirs]}).to_string();
    account
        .create_queue(
            "all",
            QueueAttributes::from([("Policy".to_owned(), policy)]),
        )
        .await
        .unwrap();
    let broker = SqsBroker::with_account(&account);
    let (app, [all, cards, wires]) = fan_out(&broker);
    let running = TestApp::spawn(app).await.expect("the app starts");
    let url = account.get_queue_url("all").await.unwrap();
    let policy = account
        .get_queue_attributes(&url, &["Policy"])
        .await
        .unwrap()["Policy"]
        .clone();
    let policy: Value = serde_json::from_str(&policy).unwrap();
    let statements = policy["Statement"].as_array().unwrap();
    assert_eq!(statements.len(), 2, "{policy}");
    assert_eq!(statements[0], theirs, "kept as it was");
    assert_eq!(
        statements[1]["Principal"],
        json!({"Service": "sns.amazonaws.com"})
    );
    assert_eq!(
        statements[1]["Condition"]["ArnEquals"]["aws:SourceArn"],
        json!([account.topic_arn_for(TOPIC)]),
        "{policy}"
    );
    let calls = broker.api_calls();
    assert_eq!(
        (
            calls.create_topic,
            calls.subscribe,
            calls.set_queue_attributes
        ),
        (1, 3, 3),
        "the topic made once, each queue subscribed once with its policy set: {calls:?}"
    );

    let payments = broker.topic(TOPIC);
    payments
        .message(&json!({"id": 1}))
        .header("kind", "card")
        .send()
        .await
        .unwrap();
    eventually("the raw queue and the card queue handle it", async || {
        all.lock().unwrap().len() == 1 && cards.lock().unwrap().len() == 1
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    running.stop().await.unwrap();

    assert_eq!(
        *all.lock().unwrap(),
        [(json!({"id": 1}), true)],
        "the raw body as published"
    );
    assert_eq!(
        *cards.lock().unwrap(),
        [(json!({"id": 1}), false)],
        "the published message, from its envelope"
    );
    assert!(
        wires.lock().unwrap().is_empty(),
        "the wire policy refuses a card"
    );
    let url = account.get_queue_url("wires").await.unwrap();
    assert_eq!(account.counts(&url).await.unwrap().visible, 0);
}

#[tokio::test(start_paused = true)]
async fn a_second_start_finds_the_topic_and_subscriptions_and_makes_nothing() {
    let account = Account::new();
    let first = SqsBroker::with_account(&account);
    let (app, _) = fan_out(&first);
    TestApp::spawn(app).await.unwrap().stop().await.unwrap();
    let topic_arn = account.topic_arn_for(TOPIC);
    let subscriptions = account
        .list_subscriptions_by_topic(&topic_arn)
        .await
        .unwrap();
    assert_eq!(subscriptions.len(), 3);

    let second = SqsBroker::with_account(&account);
    let (app, _) = fan_out(&second);
    TestApp::spawn(app).await.unwrap().stop().await.unwrap();
    let calls = second.api_calls();
    assert_eq!(
        (
            calls.create_topic,
            calls.subscribe,
            calls.set_queue_attributes
        ),
        (0, 0, 0),
        "found, not made: {calls:?}"
    );
    assert_eq!(calls.list_subscriptions_by_topic, 3);
    assert_eq!(
        account
            .list_subscriptions_by_topic(&topic_arn)
            .await
            .unwrap(),
        subscriptions,
        "the same subscriptions, the same ARNs"
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_subscription_or_topic_the_app_may_not_make_is_a_typed_start_error() {
    let account = Account::new();
    account
        .create_queue("ledger", QueueAttributes::new())
        .await
        .unwrap();
    account
        .create_topic(TOPIC, TopicAttributes::new())
        .await
        .unwrap();
    let start = |queue: SqsQueue| {
        let broker = SqsBroker::with_account(&account);
        let seen = Seen::default();
        let app = RustStream::new(AppInfo::new("t", "0")).with_broker(broker, |b| {
            b.include(subscriber(queue, Record(seen)).build());
        });
        async move { TestApp::spawn(app).await.map(drop) }
    };

    // The queue exists but is not subscribed, and may not be changed by the app.
    let refused = start(SqsQueue::new("ledger").subscribed_to(SnsTopic::new(TOPIC)))
        .await
        .unwrap_err();
    let Some(StartError::SubscriptionMissing { queue, topic }) = refused.broker_error() else {
        panic!("{refused:?}");
    };
    assert_eq!((queue.as_str(), topic.as_str()), ("ledger", TOPIC));
    assert!(
        refused.to_string().contains(".create_if_missing()"),
        "{refused}"
    );
    let topic_arn = account.topic_arn_for(TOPIC);
    assert!(account
        .list_subscriptions_by_topic(&topic_arn)
        .await
        .unwrap()
        .is_empty());

    // A topic that does not exist and is not declared `create_if_missing`.
    let refused = start(SqsQueue::new("ledger").subscribed_to(SnsTopic::new("refunds")))
        .await
        .unwrap_err();
    assert!(
        matches!(refused.broker_error(), Some(StartError::TopicMissing { topic }) if topic == "refunds"),
        "{refused:?}"
    );
    assert!(
        refused.to_string().contains("create_if_missing"),
        "{refused}"
    );
}

#[test]
fn a_subscription_made_by_hand_with_another_filter_policy_is_warned_about_by_name() {
    let logs = common::logged_while(|| async {
        let account = Account::new();
        account
            .create_queue("cards", QueueAttributes::new())
            .await
            .unwrap();
        let topic_arn = account
            .create_topic(TOPIC, TopicAttributes::new())
            .await
            .unwrap();
        let queue_arn = account.queue_arn_for("cards");
        let by_hand = Subscribe::sqs(&topic_arn, &queue_arn)
            .attribute("FilterPolicy", r#"{"kind": ["cheque"]}"#);
        account.subscribe(by_hand).await.unwrap();

        let broker = SqsBroker::with_account(&account);
        let queue = SqsQueue::new("cards").subscribed_to(
            TopicSubscription::new(SnsTopic::new(TOPIC)).filter_policy(r#"{"kind": ["card"]}"#),
        );
        let app = RustStream::new(AppInfo::new("t", "0")).with_broker(broker.clone(), |b| {
            b.include(subscriber(queue, Record(Seen::default())).build());
        });
        TestApp::spawn(app).await.unwrap().stop().await.unwrap();
        assert_eq!(broker.api_calls().subscribe, 0, "kept as it is");
    });
    let warning = logs
        .lines()
        .find(|line| line.contains("WARN") && line.contains("subscription"))
        .unwrap_or_else(|| panic!("no warning in:\n{logs}"));
    assert!(warning.contains("attribute=FilterPolicy"), "{warning}");
    assert!(
        warning.contains("cheque") && warning.contains("card"),
        "{warning}"
    );
    assert!(!logs.contains("attribute=RawMessageDelivery"), "{logs}");
}

#[tokio::test(start_paused = true)]
async fn a_thousand_publishes_take_a_tenth_of_a_call_each() {
    let prometheus = common::gauges::prometheus();
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let payments = broker.topic(topic());
    let results = payments
        .send_batch((0..1_000).map(|id| {
            payments
                .message(&json!({ "id": id }))
                .header("kind", "card")
        }))
        .await;
    assert!(
        results.iter().all(Result::is_ok),
        "{:?}",
        results.iter().find(|r| r.is_err())
    );
    let calls = broker.api_calls().publish_batch;
    assert!(
        calls <= 100,
        "{calls} PublishBatch calls for 1,000 publishes"
    );

    // Published one by one from many tasks, they still share calls.
    let sends: Vec<_> = (0..1_000)
        .map(|id| {
            let payments = payments.clone();
            tokio::spawn(async move { payments.raw(format!("{id}")).send().await })
        })
        .collect();
    for send in sends {
        send.await.unwrap().unwrap();
    }
    let singles = broker.api_calls().publish_batch - calls;
    assert!(
        singles <= 100,
        "{singles} PublishBatch calls for 1,000 single publishes"
    );
    common::report(format!(
        "PublishBatch calls for 1,000 publishes: {calls} in one send_batch, {singles} sent one by \
         one from 1,000 tasks"
    ));

    // Metered as SNS, by topic name (other tests of this binary publish to it too).
    let text = prometheus.render();
    let line = |prefix: &str, labels: &str| {
        text.lines()
            .find(|line| line.starts_with(prefix) && line.contains(labels))
            .and_then(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {prefix}{{{labels}}} in:\n{text}"))
    };
    let sent = line(
        "messaging_client_sent_messages",
        r#"messaging_system="aws_sns",messaging_destination_name="payments"}"#,
    );
    assert!(sent >= 2_000.0, "{sent}");
    let timed = line(
        "messaging_client_operation_duration_count",
        r#"messaging_system="aws_sns",messaging_operation_name="PublishBatch",messaging_destination_name="payments"}"#,
    );
    assert!(timed >= (calls + singles) as f64, "{timed}");
    assert!(
        !text.contains(r#"messaging_system="aws_sqs",messaging_operation_name="PublishBatch""#),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn every_bad_publish_is_refused_before_the_network_with_a_typed_error() {
    let broker = SqsBroker::in_process();
    let standard = broker.topic(topic());
    let fifo = broker
        .topic(SnsTopic::new("payments.fifo").create_if_missing())
        .strict_groups();
    let kind = |result: Result<_, PublishError>| match result {
        Err(error @ PublishError::Rejected { .. }) => error.kind(),
        other => panic!("{other:?}"),
    };
    // Over the topic's 256 KiB (within the 1 MiB an SQS queue could take).
    let oversize = standard.raw("x".repeat(300 * 1024)).send().await;
    assert_eq!(kind(oversize), Some(ErrorKind::InvalidParameter));
    assert_eq!(
        kind(standard.raw("").send().await),
        Some(ErrorKind::InvalidParameter)
    );
    let bad_number = standard
        .raw("{}")
        .header_number("amount", "12abc")
        .send()
        .await;
    assert_eq!(kind(bad_number), Some(ErrorKind::InvalidParameterValue));
    let bad_type = standard.raw("{}").header("emoji", "\u{1F600}").send().await;
    assert_eq!(kind(bad_type), Some(ErrorKind::InvalidParameterValue));
    let dedup = standard.raw("{}").dedup_id("d").send().await;
    assert_eq!(
        kind(dedup),
        Some(ErrorKind::InvalidParameter),
        "no dedup id on a standard topic"
    );
    let delayed = standard
        .raw("{}")
        .delay(Duration::from_secs(1))
        .send()
        .await;
    assert_eq!(
        kind(delayed),
        Some(ErrorKind::InvalidParameter),
        "SNS has no delay"
    );
    let bad_group = fifo
        .raw("{}")
        .group_id("a group with spaces\u{7}")
        .send()
        .await;
    assert_eq!(kind(bad_group), Some(ErrorKind::InvalidParameter));
    let no_group = fifo.raw("{}").send().await.unwrap_err();
    assert!(
        matches!(no_group, PublishError::NoGroup { .. }),
        "{no_group:?}"
    );
    // In a batch, each bad one alone.
    let batch = standard
        .send_batch([
            standard.raw(""),
            standard.raw("{}"),
            fifo.raw("{}").group_id("g"),
        ])
        .await;
    assert!(batch[0].is_err() && batch[1].is_ok(), "{batch:?}");
    assert!(
        matches!(batch[2], Err(PublishError::OtherQueue { .. })),
        "{:?}",
        batch[2]
    );
    assert_eq!(
        broker.api_calls().publish_batch,
        1,
        "only the good one went out"
    );
}

/// Delays every third `PublishBatch` call by 30 ms and the others by 1 ms.
#[derive(Default)]
struct Uneven(std::sync::atomic::AtomicUsize);

impl Hooks for Uneven {
    async fn publish_batch(
        &self,
        inner: &impl Transport,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
    ) -> Result<PublishBatchResult, TransportError> {
        let call = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let delay = if call.is_multiple_of(3) { 30 } else { 1 };
        tokio::time::sleep(Duration::from_millis(delay)).await;
        inner.publish_batch(topic_arn, entries).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_fifo_topic_keeps_each_group_in_order_into_a_fifo_queue() {
    let account = Account::new();
    let queue_url = common::fifo_queue(&account, "ledger.fifo", &[]).await;
    let topic_arn = account
        .create_fifo_topic("payments.fifo", false)
        .await
        .unwrap();
    let subscribe =
        Subscribe::sqs(&topic_arn, account.queue_arn_for("ledger.fifo")).raw_message_delivery(true);
    account.subscribe(subscribe).await.unwrap();
    // Publish calls whose answers come late, then early, then late: a call sent after another
    // of its group, if one were, would overtake it.
    let broker = SqsBroker::with_transport(Hooked::new(account.clone(), Uneven::default()));
    // A topic not declared `create_if_missing` is found by the ARN it has in the account and
    // region of the broker's queues: a send resolves one (its body has no `-`, so it is skipped).
    broker
        .publisher("ledger.fifo")
        .raw("start")
        .group_id("z")
        .send()
        .await
        .unwrap();
    let payments = broker.topic("payments.fifo");

    // Interleaved, in one batch and in sends racing from a task per group.
    let groups = ["a", "b", "c"];
    let batch = (0..25)
        .flat_map(|n| groups.map(|group| payments.raw(format!("{group}-{n}")).group_id(group)));
    assert!(payments.send_batch(batch).await.iter().all(Result::is_ok));
    let tasks: Vec<_> = groups
        .map(|group| {
            let payments = payments.clone();
            tokio::spawn(async move {
                for n in 25..50 {
                    payments
                        .raw(format!("{group}-{n}"))
                        .group_id(group)
                        .send()
                        .await
                        .unwrap();
                }
            })
        })
        .into_iter()
        .collect();
    for task in tasks {
        task.await.unwrap();
    }

    let mut order: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    loop {
        let received = account
            .receive_message(&queue_url, ReceiveMessage::new(10))
            .await
            .unwrap();
        if received.is_empty() {
            break;
        }
        for message in &received {
            if let Some((group, n)) = message.body.split_once('-') {
                order
                    .entry(group.to_owned())
                    .or_default()
                    .push(n.parse().unwrap());
            }
        }
        common::delete_all(&account, &queue_url, &received).await;
    }
    for group in groups {
        assert_eq!(order[group], (0..50).collect::<Vec<_>>(), "group {group}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_topic_that_cannot_be_found_refuses_its_publishes_saying_how_to_fix_it() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    // No queue resolved yet: the broker cannot build the topic's ARN, and may not create it.
    let refused = broker.topic("refunds").raw("{}").send().await.unwrap_err();
    assert_eq!(refused.kind(), Some(ErrorKind::NotFound), "{refused:?}");
    assert!(
        refused.to_string().contains(".create_if_missing()"),
        "{refused}"
    );
    // Once a queue is resolved, the topic is looked up by the ARN it would have: missing still.
    account
        .create_queue("ledger", QueueAttributes::new())
        .await
        .unwrap();
    broker.publisher("ledger").raw("x").send().await.unwrap();
    let refused = broker.topic("refunds").raw("{}").send().await.unwrap_err();
    assert_eq!(refused.kind(), Some(ErrorKind::NotFound), "{refused:?}");
    assert!(refused.to_string().contains("does not exist"), "{refused}");
    assert_eq!(broker.api_calls().create_topic, 0);
    assert_eq!(broker.api_calls().publish_batch, 0);
    // It exists now: the next publish finds it (a failed lookup is not kept).
    account
        .create_topic("refunds", TopicAttributes::new())
        .await
        .unwrap();
    broker.topic("refunds").raw("{}").send().await.unwrap();
}

/// Publishes each refund request it handles to the `refunds` topic, as its output.
struct Refund;

impl Handle<Value, rust_stream::Output<Value>> for Refund {
    async fn handle(
        &self,
        value: &Value,
        refunds: &rust_stream::Output<Value>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        ctx.publish(
            refunds
                .message(&json!({"refunded": value["id"]}))
                .header("kind", "refund"),
        );
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_handlers_output_to_a_topic_reaches_the_queues_subscribed_to_it() {
    let refunds = SnsTopic::new("refunds").create_if_missing();
    let broker = SqsBroker::in_process();
    let seen: Seen = Seen::default();
    let handled = seen.clone();
    let output = rust_stream::Output::new(refunds.clone());
    assert!(output.publisher().topic().is_some());
    let app = RustStream::new(AppInfo::new("refunds", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(SqsQueue::new("refund-requests").create_if_missing(), Refund)
                .outputs(output)
                .build(),
        );
        b.include(
            subscriber(
                SqsQueue::new("notices").create_if_missing().subscribed_to(
                    TopicSubscription::new(refunds).filter_policy(r#"{"kind": ["refund"]}"#),
                ),
                Record(handled),
            )
            .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    broker
        .publisher("refund-requests")
        .message(&json!({"id": 7}))
        .send()
        .await
        .unwrap();
    eventually("the output reaches the subscribed queue", async || {
        seen.lock().unwrap().len() == 1
    })
    .await;
    running.stop().await.unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [(json!({"refunded": 7}), false)],
        "published to the topic by the handler, delivered enveloped through the filter policy"
    );
    let calls = broker.api_calls();
    assert_eq!(calls.publish_batch, 1, "{calls:?}");
    assert_eq!(calls.create_topic, 1, "{calls:?}");
}
