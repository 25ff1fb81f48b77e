//! How a broker resolves queues: each queue once, however many callers ask at once, and no queue
//! waiting on another's lookup.

mod common;

use std::time::Duration;

use common::attributes;
use common::engine::Faulty;
use rust_stream::account::Account;
use rust_stream::{SqsBroker, SqsQueue};
use tokio::time::Instant;

/// How long the slow queue's `GetQueueUrl` takes.
const SLOW_LOOKUP: Duration = Duration::from_secs(10);

#[tokio::test(start_paused = true)]
async fn a_slow_queue_lookup_holds_up_no_other_queue() {
    let account = Account::new();
    for name in ["slow", "fast"] {
        account.create_queue(name, attributes(&[])).await.unwrap();
    }
    let broker = SqsBroker::with_transport(Faulty::with_slow_lookup(&account, "slow", SLOW_LOOKUP));
    let began = Instant::now();
    let slow = {
        let publisher = broker.publisher("slow");
        tokio::spawn(async move { publisher.raw("slow").send().await })
    };
    // Let the slow lookup begin before the other queue is asked for.
    tokio::time::sleep(Duration::from_millis(1)).await;

    let asked = Instant::now();
    broker
        .publisher("fast")
        .raw("fast")
        .send()
        .await
        .expect("sent");
    let waited = asked.elapsed();
    assert!(
        waited < Duration::from_secs(1),
        "the other queue waited {waited:?} on the slow lookup"
    );
    assert!(!slow.is_finished(), "the slow lookup is still going");

    slow.await
        .unwrap()
        .expect("the slow queue is sent to in the end");
    assert!(began.elapsed() >= SLOW_LOOKUP);
}

#[tokio::test(start_paused = true)]
async fn concurrent_publishes_to_one_queue_look_it_up_once() {
    let account = Account::new();
    account.create_queue("jobs", attributes(&[])).await.unwrap();
    // A slow lookup keeps every publish waiting on the first one's.
    let broker = SqsBroker::with_transport(Faulty::with_slow_lookup(&account, "jobs", SLOW_LOOKUP));
    let sends: Vec<_> = (0..20)
        .map(|n| {
            let publisher = broker.publisher("jobs");
            tokio::spawn(async move { publisher.raw(format!("job {n}")).send().await })
        })
        .collect();
    for send in sends {
        send.await.unwrap().expect("sent");
    }
    let calls = broker.api_calls();
    assert_eq!(calls.get_queue_url, 1, "{calls:?}");
    assert_eq!(calls.get_queue_attributes, 1, "{calls:?}");
}

#[tokio::test(start_paused = true)]
async fn a_missing_queue_and_its_dead_letter_queue_are_created_once_under_concurrent_publishes() {
    let account = Account::new();
    // The dead-letter queue's lookup is slow, so the source's creation and the dead-letter
    // queue's own publishers all wait on it at once.
    let broker = SqsBroker::with_transport(Faulty::with_slow_lookup(
        &account,
        "orders-dlq",
        SLOW_LOOKUP,
    ));
    let orders = SqsQueue::new("orders")
        .create_if_missing()
        .dead_letter("orders-dlq", 3);
    let dead_letter = SqsQueue::new("orders-dlq").create_if_missing();
    let sends: Vec<_> = (0..10)
        .map(|n| {
            let queue = if n % 2 == 0 {
                orders.clone()
            } else {
                dead_letter.clone()
            };
            let publisher = broker.publisher(queue);
            tokio::spawn(async move { publisher.raw(format!("order {n}")).send().await })
        })
        .collect();
    for send in sends {
        send.await.unwrap().expect("sent");
    }
    let calls = broker.api_calls();
    assert_eq!(
        (calls.get_queue_url, calls.create_queue),
        (2, 2),
        "each queue looked up and created once: {calls:?}"
    );
    let url = account.get_queue_url("orders").await.unwrap();
    let redrive = account
        .get_queue_attributes(&url, &["RedrivePolicy"])
        .await
        .unwrap();
    assert!(
        redrive["RedrivePolicy"].contains(&account.queue_arn_for("orders-dlq")),
        "{redrive:?}"
    );
}
