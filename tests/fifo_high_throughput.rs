//! High-throughput FIFO (`SqsQueue::high_throughput`): a queue created with
//! `DeduplicationScope=messageGroup` and `FifoThroughputLimit=perMessageGroupId`, by a
//! subscription (with its dead-letter queue) and by the operations API; a deduplication id that counts within its group only;
//! a warning naming each attribute an existing queue lacks; refused on a standard queue; and the
//! same on LocalStack.

mod common;

use std::time::Duration;

use common::backend::{Backend, Kind};
use common::engine::Job;
use common::logged_while;
use rust_stream::operations::QueueSpec;
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::transport::Transport;
use rust_stream::{ConfigError, Context, Handle, HandlerOutcome, RunError};

struct Ack;

impl Handle<Job> for Ack {
    async fn handle(&self, _: &Job, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        Ok(())
    }
}

const THROUGHPUT: [&str; 2] = ["DeduplicationScope", "FifoThroughputLimit"];

/// The queue's two throughput attributes.
async fn throughput_of(transport: &impl Transport, url: &str) -> (String, String) {
    let attributes = transport
        .get_queue_attributes(url, &THROUGHPUT)
        .await
        .unwrap();
    (
        attributes.get(THROUGHPUT[0]).cloned().unwrap_or_default(),
        attributes.get(THROUGHPUT[1]).cloned().unwrap_or_default(),
    )
}

fn high() -> (String, String) {
    ("messageGroup".to_owned(), "perMessageGroupId".to_owned())
}

/// Sends `job` in `group` with deduplication id `dedup`; whether SQS took it as a duplicate.
async fn send(broker: &SqsBroker, queue: &str, group: &str, dedup: &str) -> String {
    broker
        .publisher(queue)
        .message(&Job::new(group, 0))
        .group_id(group)
        .dedup_id(dedup)
        .send()
        .await
        .unwrap()
        .message_id
        .to_string()
}

/// The body both legs run: a subscription creates the queue high-throughput, and its dead-letter
/// queue too; a deduplication id seen in one group is a new message in another and a duplicate
/// in its own.
async fn created_high_throughput_and_deduplicated_per_group<T: Transport + Clone>(
    backend: &Backend<T>,
) {
    let name = backend.name("fast.fifo");
    let dead_letter = backend.name("fast-dlq.fifo");
    let queue = SqsQueue::new(name.clone())
        .create_if_missing()
        .high_throughput()
        .dead_letter(dead_letter.clone(), 3);
    let app = RustStream::new(AppInfo::new("fast", "0"))
        .shutdown_timeout(Duration::from_secs(3))
        .with_broker(backend.broker.clone(), |b| {
            b.include(subscriber(queue, Ack).build());
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    running.stop().await.unwrap();
    let url = backend.transport.get_queue_url(&name).await.unwrap();
    assert_eq!(throughput_of(&backend.transport, &url).await, high());
    let dead_letter_url = backend.transport.get_queue_url(&dead_letter).await.unwrap();
    assert_eq!(
        throughput_of(&backend.transport, &dead_letter_url).await,
        high(),
        "the dead-letter queue takes a burst of failures at the queue's rate"
    );

    let first = send(&backend.broker, &name, "a", "d-1").await;
    let other_group = send(&backend.broker, &name, "b", "d-1").await;
    let same_group = send(&backend.broker, &name, "a", "d-1").await;
    assert_ne!(first, other_group, "another group's message is a new one");
    if backend.kind == Kind::InProcess {
        // LocalStack answers a duplicate with a new message id (SQS and the account with the
        // first's); what it stores is the same, which the count below checks on both.
        assert_eq!(
            first, same_group,
            "the same group's is the duplicate, answered with its id"
        );
    }
    let visible = backend
        .transport
        .get_queue_attributes(&url, &["ApproximateNumberOfMessages"])
        .await
        .unwrap();
    assert_eq!(visible["ApproximateNumberOfMessages"], "2");
}

#[tokio::test(start_paused = true)]
async fn in_process_a_high_throughput_queue_is_created_so_and_deduplicates_per_group() {
    created_high_throughput_and_deduplicated_per_group(&Backend::in_process()).await;
}

#[tokio::test]
async fn live_a_high_throughput_queue_is_created_so_and_deduplicates_per_group() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    created_high_throughput_and_deduplicated_per_group(&backend).await;
}

#[tokio::test(start_paused = true)]
async fn the_operations_api_creates_a_high_throughput_queue() {
    let backend = Backend::in_process();
    let url = backend
        .broker
        .operations()
        .create_queue("ops.fifo", &QueueSpec::new().fifo().high_throughput())
        .await
        .unwrap();
    assert_eq!(throughput_of(&backend.transport, &url).await, high());
}

#[test]
fn an_existing_queue_without_high_throughput_is_a_warning_naming_each_attribute() {
    let logged = logged_while(|| async {
        let backend = Backend::in_process();
        // One of the two set: the throughput is still per queue.
        backend
            .queue("half.fifo", &[("DeduplicationScope", "messageGroup")])
            .await;
        let queue = SqsQueue::new(backend.name("half.fifo")).high_throughput();
        let app =
            RustStream::new(AppInfo::new("fast", "0")).with_broker(backend.broker.clone(), |b| {
                b.include(subscriber(queue, Ack).build());
            });
        let running = TestApp::spawn(app).await.expect("the app starts");
        running.stop().await.unwrap();
    });
    let warnings: Vec<&str> = logged
        .lines()
        .filter(|line| line.contains("declared `.high_throughput()`"))
        .collect();
    assert_eq!(warnings.len(), 1, "{logged}");
    assert!(
        warnings[0].contains("attribute=\"FifoThroughputLimit\"")
            && warnings[0].contains("declared=\"perMessageGroupId\"")
            && warnings[0].contains("actual=perQueue"),
        "{logged}"
    );
}

#[tokio::test(start_paused = true)]
async fn high_throughput_on_a_standard_queue_keeps_the_app_from_starting() {
    let queue = SqsQueue::new("plain").create_if_missing().high_throughput();
    let app =
        RustStream::new(AppInfo::new("fast", "0")).with_broker(SqsBroker::in_process(), |b| {
            b.include(subscriber(queue, Ack).build());
        });
    let Err(RunError::Config(problems)) = TestApp::spawn(app).await else {
        panic!("the app must not start");
    };
    assert!(
        matches!(problems.0.as_slice(), [ConfigError::HighThroughput { queue }] if queue == "plain"),
        "{problems}"
    );
}
