//! Declarations belong to the app: an app checks, resolves and documents only the queues it names
//! (its subscriptions, their dead-letter queues and outputs), with the declarations of the
//! broker's publishers of those queues. An app that is refused, dropped or stopped leaves the
//! broker as it found it, so a later app on the same broker never sees its queues or its problems.

mod common;

use std::time::Duration;

use common::engine::{jobs, Job, Log, Scripted};
use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::sqs::StartError;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::{ConfigError, Output, RunError};
use serde_json::Value;

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

/// An app of one subscription to `queue` that takes every job, and the log of what it took.
fn one_subscription(broker: &SqsBroker, name: &str, queue: SqsQueue) -> (impl App, Log) {
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new(name, "0")).with_broker(broker.clone(), |b| {
        b.include(subscriber(queue, handler).build());
    });
    (app, log)
}

/// Starts `app`, has it handle one job sent to `queue`, and stops it.
async fn runs_and_handles(broker: &SqsBroker, app: impl App, log: &Log, queue: &str) {
    let running = TestApp::spawn(app).await.expect("the app starts");
    broker
        .publisher(queue)
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    eventually("handled", async || jobs(log).len() == 1).await;
    running.drain().await;
    running.stop().await.expect("the app stops cleanly");
}

/// An app whose two declarations of `jobs` disagree on the visibility timeout: never startable.
fn conflicting_app(broker: &SqsBroker) -> impl App {
    let (first, _) = Scripted::new(|_, _| Ok(()));
    let (second, _) = Scripted::new(|_, _| Ok(()));
    RustStream::new(AppInfo::new("conflicted", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(SqsQueue::new("jobs").create_if_missing(), first)
                .visibility_timeout(Duration::from_secs(30))
                .build(),
        );
        b.include(
            subscriber(SqsQueue::new("jobs").create_if_missing(), second)
                .visibility_timeout(Duration::from_secs(60))
                .build(),
        );
    })
}

/// The names of a document's channels.
fn channels(document: &Value) -> Vec<String> {
    document["channels"]
        .as_object()
        .expect("channels")
        .keys()
        .cloned()
        .collect()
}

#[tokio::test(start_paused = true)]
async fn an_app_refused_for_conflicting_declarations_leaves_nothing_the_next_app_checks() {
    let broker = SqsBroker::in_process();
    let error = TestApp::spawn(conflicting_app(&broker)).await.unwrap_err();
    let RunError::Config(problems) = &error else {
        panic!("a setting problem: {error}");
    };
    assert!(
        problems.0.iter().any(|problem| matches!(
            problem,
            ConfigError::ConflictingDeclarations { queue, setting: "visibility timeout", .. } if queue == "jobs"
        )),
        "{error}"
    );

    // The same broker runs an app that never names `jobs`, and one that names it rightly.
    let (orders, log) = one_subscription(
        &broker,
        "orders",
        SqsQueue::new("orders").create_if_missing(),
    );
    runs_and_handles(&broker, orders, &log, "orders").await;
    let (jobs_app, log) = one_subscription(
        &broker,
        "jobs",
        SqsQueue::new("jobs")
            .create_if_missing()
            .visibility_timeout(Duration::from_secs(45)),
    );
    runs_and_handles(&broker, jobs_app, &log, "jobs").await;
}

#[tokio::test(start_paused = true)]
async fn an_app_refused_for_a_missing_queue_leaves_nothing_the_next_app_checks() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let (first, _) = one_subscription(&broker, "first", SqsQueue::new("absent"));
    let error = TestApp::spawn(first).await.unwrap_err();
    assert!(
        matches!(error.broker_error(), Some(StartError::QueueMissing { queue }) if queue == "absent"),
        "{error}"
    );

    // A second app that is refused too is refused for its own queue, not the first app's.
    let (second, _) = one_subscription(&broker, "second", SqsQueue::new("also-absent"));
    let error = TestApp::spawn(second).await.unwrap_err();
    assert!(
        matches!(error.broker_error(), Some(StartError::QueueMissing { queue }) if queue == "also-absent"),
        "{error}"
    );
    assert!(!error.to_string().contains("`absent`"), "{error}");

    let (third, log) = one_subscription(
        &broker,
        "third",
        SqsQueue::new("present").create_if_missing(),
    );
    runs_and_handles(&broker, third, &log, "present").await;
    assert!(
        account.get_queue_url("absent").await.is_err(),
        "nothing created the first app's queue"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_app_leaves_nothing_the_next_app_checks_or_a_publisher_creates_from() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    drop(conflicting_app(&broker));
    let (ghost, _) = one_subscription(
        &broker,
        "ghost",
        SqsQueue::new("ghosts").dead_letter("ghosts-dlq", 3),
    );
    drop(ghost);

    let (jobs_app, log) = one_subscription(
        &broker,
        "jobs",
        SqsQueue::new("jobs")
            .create_if_missing()
            .visibility_timeout(Duration::from_secs(45)),
    );
    assert_eq!(channels(&jobs_app.asyncapi()), ["jobs"]);
    runs_and_handles(&broker, jobs_app, &log, "jobs").await;

    // A publisher that creates `ghosts` now creates it as it says, without the dropped app's
    // dead-letter queue.
    broker
        .publisher(SqsQueue::new("ghosts").create_if_missing())
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    let url = account.get_queue_url("ghosts").await.unwrap();
    let attributes = account
        .get_queue_attributes(&url, &["RedrivePolicy"])
        .await
        .unwrap();
    assert!(!attributes.contains_key("RedrivePolicy"), "{attributes:?}");
    assert!(account.get_queue_url("ghosts-dlq").await.is_err());
}

#[tokio::test(start_paused = true)]
async fn an_app_that_ran_and_stopped_leaves_nothing_the_next_app_checks() {
    let broker = SqsBroker::in_process();
    let (first, log) = one_subscription(
        &broker,
        "first",
        SqsQueue::new("jobs")
            .create_if_missing()
            .visibility_timeout(Duration::from_secs(30)),
    );
    runs_and_handles(&broker, first, &log, "jobs").await;
    // The queue is the same, the declaration another: the first app is gone, so they do not
    // disagree.
    let (second, log) = one_subscription(
        &broker,
        "second",
        SqsQueue::new("jobs").visibility_timeout(Duration::from_secs(60)),
    );
    runs_and_handles(&broker, second, &log, "jobs").await;
}

#[tokio::test(start_paused = true)]
async fn two_apps_built_on_one_broker_each_check_only_their_own_declarations() {
    let broker = SqsBroker::in_process();
    // Kept alive, never run: its problem is its own.
    let _conflicted = conflicting_app(&broker);
    let (orders, log) = one_subscription(
        &broker,
        "orders",
        SqsQueue::new("orders").create_if_missing(),
    );
    runs_and_handles(&broker, orders, &log, "orders").await;
}

#[test]
fn two_apps_built_on_one_broker_each_document_only_their_own_queues() {
    let broker = SqsBroker::in_process();
    // A publisher made from the broker belongs to the broker: every app on it lists it.
    let _notices = broker.publisher("notices");
    let (sink, _) = Scripted::new(|_, _| Ok(()));
    let relay = RustStream::new(AppInfo::new("relay", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(SqsQueue::new("inbox").dead_letter("inbox-dlq", 3), Relay)
                .outputs(Output::<Job>::new("outbox"))
                .build(),
        );
        b.include(subscriber("outbox", sink).build());
    });
    let (audit, _) = Scripted::new(|_, _| Ok(()));
    let auditor = RustStream::new(AppInfo::new("auditor", "0")).with_broker(broker.clone(), |b| {
        // The same queue as the relay's, declared otherwise: each document shows its own.
        b.include(
            subscriber(SqsQueue::new("inbox").dead_letter("audit-dlq", 5), audit)
                .visibility_timeout(Duration::from_secs(90))
                .build(),
        );
    });

    let relay = relay.asyncapi();
    assert_eq!(
        channels(&relay),
        ["inbox", "inbox-dlq", "notices", "outbox"]
    );
    let inbox = &relay["channels"]["inbox"]["bindings"]["sqs"]["queue"];
    assert_eq!(inbox["redrivePolicy"]["maxReceiveCount"], 3, "{inbox}");
    assert!(inbox.get("visibilityTimeout").is_none(), "{inbox}");

    let auditor = auditor.asyncapi();
    assert_eq!(channels(&auditor), ["audit-dlq", "inbox", "notices"]);
    let inbox = &auditor["channels"]["inbox"]["bindings"]["sqs"]["queue"];
    assert_eq!(inbox["redrivePolicy"]["maxReceiveCount"], 5, "{inbox}");
    assert_eq!(inbox["visibilityTimeout"], 90, "{inbox}");
    for document in [&relay, &auditor] {
        assert_eq!(document["operations"]["publish.notices"]["action"], "send");
    }
}
