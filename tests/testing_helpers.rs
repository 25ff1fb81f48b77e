//! The testing helpers a service's own tests use: `TestApp` (startup errors at once, `drain`),
//! async `eventually`, and the `Recorder` of what each subscription handled, published and
//! dead-lettered.

mod common;

use common::engine::Job;
use rust_stream::prelude::*;
use rust_stream::sqs::StartError;
use rust_stream::testing::{eventually, Settled, TestApp};
use rust_stream::Output;

/// Bills each job once its second attempt comes: the first one fails.
struct Bill;

impl Handle<Job, Output<Job>> for Bill {
    async fn handle(
        &self,
        job: &Job,
        receipts: &Output<Job>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        if job.n == 0 {
            return Err(HandlerOutcome::dead_letter("nothing to bill"));
        }
        if ctx.sqs().receive_count() == 1 {
            return Err(HandlerOutcome::retry());
        }
        ctx.publish(receipts.message(job));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn the_recorder_shows_what_was_handled_published_and_dead_lettered() {
    let broker = SqsBroker::in_process();
    let recorder = broker.recorder();
    let jobs = SqsQueue::new("jobs")
        .create_if_missing()
        .dead_letter("jobs-dlq", 5);
    let app = RustStream::new(AppInfo::new("billing", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(jobs.clone(), Bill)
                .outputs(Output::<Job>::new(
                    SqsQueue::new("receipts").create_if_missing(),
                ))
                .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let publisher = broker.publisher("jobs");
    publisher.message(&Job::new("-", 0)).send().await.unwrap();
    publisher.message(&Job::new("-", 1)).send().await.unwrap();
    // Async conditions may read the queues themselves.
    eventually("a receipt in its queue", async || {
        running
            .queues()
            .await
            .iter()
            .any(|load| load.queue == "receipts" && load.visible == 1)
    })
    .await;
    running.drain().await;
    running.stop().await.unwrap();

    let settled: Vec<Settled> = recorder
        .handled("jobs")
        .iter()
        .map(|handled| handled.settled)
        .collect();
    let mut sorted = settled.clone();
    sorted.sort_by_key(|settled| format!("{settled:?}"));
    assert_eq!(
        sorted,
        [Settled::Acked, Settled::DeadLettered, Settled::Retried],
        "{settled:?}"
    );
    assert_eq!(recorder.published_as::<Job>("receipts"), [Job::new("-", 1)]);
    let dead = recorder.dead_lettered("jobs");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, "nothing to bill");
}

#[tokio::test(start_paused = true)]
async fn spawn_returns_the_startup_error_at_once() {
    let broker = SqsBroker::in_process();
    let app = RustStream::new(AppInfo::new("missing", "0")).with_broker(broker, |b| {
        b.include(
            subscriber("no-such-queue", Bill)
                .outputs(Output::<Job>::new("x"))
                .build(),
        );
    });
    let started = tokio::time::Instant::now();
    let error = TestApp::spawn(app).await.unwrap_err();
    assert!(
        matches!(error.broker_error(), Some(StartError::QueueMissing { .. })),
        "{error}"
    );
    // Refused at once, not after waiting out the 30 s patience for a start.
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}

#[test]
fn one_body_runs_on_each_backend_with_the_librarys_helpers_alone() {
    use rust_stream::testing::{on_each_backend, BackendKind};
    use std::sync::Mutex;

    let kinds = Mutex::new(Vec::new());
    on_each_backend(async |backend| {
        let broker = backend.broker().clone();
        let recorder = broker.recorder();
        let jobs = SqsQueue::new(backend.queue_name("jobs"))
            .create_if_missing()
            .dead_letter(backend.queue_name("jobs-dlq"), 5);
        let receipts = SqsQueue::new(backend.queue_name("receipts")).create_if_missing();
        let app = RustStream::new(AppInfo::new("billing", "0")).with_broker(broker.clone(), |b| {
            b.include(
                subscriber(jobs.clone(), Bill)
                    .outputs(Output::<Job>::new(receipts.clone()))
                    .build(),
            );
        });
        let running = TestApp::spawn(app).await.expect("the app starts");
        broker
            .publisher(jobs.clone())
            .message(&Job::new("-", 3))
            .send()
            .await
            .unwrap();
        eventually("the receipt recorded", async || {
            recorder.published(receipts.name()).len() == 1
        })
        .await;
        running.drain().await;
        running.stop().await.unwrap();
        assert_eq!(
            recorder.published_as::<Job>(receipts.name()),
            [Job::new("-", 3)]
        );
        kinds.lock().unwrap().push(backend.kind());
    });
    let kinds = kinds.into_inner().unwrap();
    assert_eq!(kinds[0], BackendKind::InProcess);
    if std::env::var_os(rust_stream::testing::LIVE_ENDPOINT_VAR).is_some() {
        assert_eq!(kinds, [BackendKind::InProcess, BackendKind::Live]);
    }
}

/// The panic message of a failed task.
async fn panic_of(task: tokio::task::JoinHandle<()>) -> String {
    let panic = task.await.unwrap_err().into_panic();
    match panic.downcast::<String>() {
        Ok(message) => *message,
        Err(panic) => (*panic.downcast::<&str>().unwrap()).to_owned(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_fails_names_the_tests_line() {
    use rust_stream::testing::eventually_within;
    use std::time::Duration;

    let line = line!() + 1;
    let wait = eventually_within("the impossible", Duration::from_secs(1), async || false);
    let message = panic_of(tokio::spawn(wait)).await;
    assert!(
        message.contains(&format!("(at {}:{line}:", file!())),
        "{message}"
    );
    assert!(!message.contains("src/testing"), "{message}");

    let line = line!() + 1;
    let wait = eventually("the impossible", async || Err::<(), _>("still not"));
    let message = panic_of(tokio::spawn(wait)).await;
    assert!(
        message
            .starts_with("waited 30s for the impossible; last observed: Err(\"still not\") (at "),
        "{message}"
    );
    assert!(
        message.contains(&format!("{}:{line}:", file!())),
        "{message}"
    );
}

#[test]
fn a_drain_that_fails_names_the_tests_line() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let line = line!() + 12;
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async {
            let broker = SqsBroker::in_process();
            let jobs = SqsQueue::new("stuck-jobs").create_if_missing();
            let app =
                RustStream::new(AppInfo::new("stuck", "0")).with_broker(broker.clone(), |b| {
                    b.include(subscriber(jobs.clone(), Stuck).build());
                });
            let running = TestApp::spawn(app).await.expect("the app starts");
            broker.publisher(jobs).raw("{}").send().await.unwrap();
            // Never drained: the handler never finishes.
            running.drain().await;
        });
    }))
    .unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("every queue the app consumes empty"),
        "{message}"
    );
    assert!(
        message.contains(&format!("(at {}:{line}:", file!())),
        "{message}"
    );
}

/// Never finishes: its message stays in flight.
struct Stuck;

impl Handle<serde_json::Value> for Stuck {
    async fn handle(
        &self,
        _: &serde_json::Value,
        _: &(),
        _: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn the_recorder_asked_about_a_queue_it_never_saw_says_so() {
    let broker = SqsBroker::in_process();
    let recorder = broker.recorder();
    let app = RustStream::new(AppInfo::new("billing", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(
                SqsQueue::new("jobs.fifo")
                    .create_if_missing()
                    .dead_letter("jobs-dlq.fifo", 3),
                Bill,
            )
            .outputs(Output::<Job>::new(
                SqsQueue::new("ledger.fifo").create_if_missing(),
            ))
            .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    // A queue the app names and nothing happened on: an empty list, truly.
    assert!(recorder.published("ledger.fifo").is_empty());
    assert!(recorder.handled("jobs.fifo").is_empty());
    assert_eq!(
        recorder.queues(),
        ["jobs-dlq.fifo", "jobs.fifo", "ledger.fifo"]
    );
    let mistyped = std::panic::catch_unwind(|| recorder.published("ledger")).unwrap_err();
    assert_eq!(
        mistyped.downcast_ref::<String>().unwrap(),
        "the recorder knows no queue `ledger`; the broker's queues are: `jobs-dlq.fifo`, \
         `jobs.fifo`, `ledger.fifo`"
    );
    running.stop().await.unwrap();
}
