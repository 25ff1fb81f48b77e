//! The account's own tests of its public operations.

use std::time::Duration;

use super::*;
use crate::transport::{ReceiveMessage, ReceivedMessage, SendMessage};

async fn redrive(account: &Account, url: &str, target: &str, max_receive_count: u32) {
    let policy = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":{max_receive_count}}}"#,
        account.queue_arn_for(target)
    );
    let attributes = QueueAttributes::from([("RedrivePolicy".to_owned(), policy)]);
    account.set_queue_attributes(url, attributes).await.unwrap();
}

/// Receives once with a zero visibility timeout, so the message is visible again at once.
async fn receive_again(account: &Account, url: &str) -> Vec<ReceivedMessage> {
    let request = ReceiveMessage::new(10).visibility_timeout(0);
    account.receive_message(url, request).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_queue_created_after_its_source_or_the_source_itself_takes_the_message() {
    let account = Account::new();
    let source = account.create_standard_queue("source").await.unwrap();
    // Newer than its source: the receive takes the locks in the other order.
    let dlq = account.create_standard_queue("source-dlq").await.unwrap();
    redrive(&account, &source, "source-dlq", 1).await;
    account
        .send_message(&source, SendMessage::new("poison"))
        .await
        .unwrap();
    assert_eq!(receive_again(&account, &source).await.len(), 1);
    assert!(receive_again(&account, &source).await.is_empty());
    let dead = receive_again(&account, &dlq).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(
        dead[0].attributes["DeadLetterQueueSourceArn"],
        account.queue_arn_for("source")
    );

    redrive(&account, &dlq, "source-dlq", 1).await;
    assert!(
        receive_again(&account, &dlq).await.is_empty(),
        "the receive that would pass maxReceiveCount moves the message instead"
    );
    let again = receive_again(&account, &dlq).await;
    assert_eq!(
        again[0].receive_count(),
        Some(1),
        "moved to itself, its count starts over"
    );
    assert_eq!(again[0].message_id, dead[0].message_id);
}

#[test]
fn queues_that_are_each_others_dead_letter_queue_are_received_from_at_once_without_deadlock() {
    let account = Account::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let urls = runtime.block_on(async {
        let a = account.create_standard_queue("a").await.unwrap();
        let b = account.create_standard_queue("b").await.unwrap();
        redrive(&account, &a, "b", 1).await;
        redrive(&account, &b, "a", 1).await;
        for n in 0..10 {
            let message = SendMessage::new(format!("m{n}"));
            account.send_message(&a, message.clone()).await.unwrap();
            account.send_message(&b, message).await.unwrap();
        }
        [a, b]
    });
    // Each receive moves messages to the other queue, holding both locks: taken in one
    // order they never wait for each other (taking each receive's own queue first, this
    // test deadlocks).
    let (done, finished) = std::sync::mpsc::channel();
    for url in urls.clone() {
        let (account, done) = (account.clone(), done.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            runtime.block_on(async {
                for _ in 0..2_000 {
                    receive_again(&account, &url).await;
                }
            });
            done.send(()).unwrap();
        });
    }
    for _ in urls.iter() {
        finished
            .recv_timeout(Duration::from_secs(30))
            .expect("both receivers finish: no deadlock");
    }
    let total: usize = runtime.block_on(async {
        let mut total = 0;
        for url in &urls {
            let counts = account.counts(url).await.unwrap();
            total += counts.visible + counts.in_flight + counts.delayed;
        }
        total
    });
    assert_eq!(total, 20, "no message is lost or duplicated in the moves");
}
