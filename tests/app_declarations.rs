//! Declarations resolved as a whole: every queue an app names is resolved or created before any
//! subscription starts, as all its declarations together describe it, whatever the order of
//! `include`; declarations that disagree, and existing queues that contradict their declaration,
//! are refused at startup with both sides named.

mod common;

use common::engine::{jobs, Job, Scripted};
use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::sqs::StartError;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::{ConfigError, Output, RunError};

/// Passes each job on to its output.
struct Relay;

impl Handle<Job, Output<Job>> for Relay {
    async fn handle(
        &self,
        job: &Job,
        out: &Output<Job>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        ctx.publish(out.message(job));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn an_output_queue_that_a_later_subscription_creates_exists_before_either_starts() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let (sink, log) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("relay", "0")).with_broker(broker.clone(), |b| {
        // The relay is included first; its output queue is created by the second subscription.
        b.include(
            subscriber(SqsQueue::new("inbox").create_if_missing(), Relay)
                .outputs(Output::<Job>::new("outbox"))
                .build(),
        );
        b.include(subscriber(SqsQueue::new("outbox").create_if_missing(), sink).build());
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    broker
        .publisher("inbox")
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    eventually("relayed", async || jobs(&log).len() == 1).await;
    running.drain().await;
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_publishers_create_if_missing_creates_the_queue_with_the_subscriptions_dead_letter_queue()
{
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let orders = broker.publisher(SqsQueue::new("orders").create_if_missing());
    let (handler, _) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("orders", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(
                SqsQueue::new("orders")
                    .dead_letter("orders-dlq", 4)
                    .visibility_timeout(std::time::Duration::from_secs(45)),
                handler,
            )
            .build(),
        );
    });
    // The publisher resolves (and creates) the queue before the app runs.
    orders.message(&Job::new("-", 1)).send().await.unwrap();
    let url = account.get_queue_url("orders").await.unwrap();
    let attributes = account
        .get_queue_attributes(&url, &["RedrivePolicy", "VisibilityTimeout"])
        .await
        .unwrap();
    let redrive = &attributes["RedrivePolicy"];
    assert!(
        redrive.contains("orders-dlq") && redrive.contains('4'),
        "created with the subscription's dead-letter queue: {redrive}"
    );
    assert_eq!(attributes["VisibilityTimeout"], "45");
    let running = TestApp::spawn(app).await.expect("the app starts");
    running.drain().await;
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn two_declarations_that_disagree_keep_the_app_from_starting_and_name_both() {
    let broker = SqsBroker::in_process();
    let _audit = broker.publisher(SqsQueue::new("payments").dead_letter("audit-dlq", 3));
    let (handler, _) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("payments", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(
                SqsQueue::new("payments")
                    .create_if_missing()
                    .dead_letter("payments-dlq", 3),
                handler,
            )
            .build(),
        );
    });
    let error = TestApp::spawn(app).await.unwrap_err();
    let RunError::Config(problems) = &error else {
        panic!("a setting problem, before any network call: {error}");
    };
    assert!(
        problems.0.iter().any(|problem| matches!(
            problem,
            ConfigError::ConflictingDeclarations { queue, setting: "dead-letter queue", .. } if queue == "payments"
        )),
        "{error}"
    );
    let shown = error.to_string();
    assert!(
        shown.contains("a publisher made with `broker.publisher(..)`")
            && shown.contains("the subscription of `payments`"),
        "{shown}"
    );
    assert_eq!(broker.api_calls().messaging(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_existing_queue_without_the_declared_content_based_deduplication_is_refused() {
    let account = Account::new();
    let mut attributes = rust_stream::transport::QueueAttributes::new();
    attributes.insert("FifoQueue".into(), "true".into());
    account
        .create_queue("ledger.fifo", attributes)
        .await
        .unwrap();
    let broker = SqsBroker::with_account(&account);
    let (handler, _) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("ledger", "0")).with_broker(broker, |b| {
        b.include(subscriber(SqsQueue::new("ledger.fifo").content_based_dedup(), handler).build());
    });
    let error = TestApp::spawn(app).await.unwrap_err();
    assert!(
        matches!(
            error.broker_error(),
            Some(StartError::QueueAttribute {
                attribute: "ContentBasedDeduplication",
                ..
            })
        ),
        "{error}"
    );
    assert!(error.to_string().contains("ledger.fifo"), "{error}");
}
