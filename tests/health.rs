//! A service's health (`App::health`), produced by what changes it: the life of a service from
//! start to stop, with a handler still running while it drains (both backends); a start that
//! fails; and receives that fail and recover (a transport wrapper, in process). The probes over
//! HTTP are tested with their example, in `tests/observability_example.rs`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::backend::Backend;
use common::engine::{Faulty, Job, Scripted};
use rust_stream::account::Account;
use rust_stream::health::AppState;
use rust_stream::prelude::*;
use rust_stream::sqs::StartError;
use rust_stream::testing::eventually;
use rust_stream::transport::Transport;

both_backends!(a_service_goes_from_starting_to_running_to_draining_to_stopped);

/// A handler that holds its message until told to finish.
struct Held {
    started: Arc<AtomicBool>,
    finish: Arc<AtomicBool>,
}

impl Handle<Job> for Held {
    async fn handle(&self, _: &Job, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        self.started.store(true, Ordering::SeqCst);
        while !self.finish.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

async fn a_service_goes_from_starting_to_running_to_draining_to_stopped<T: Transport>(
    backend: Backend<T>,
) {
    let queue = SqsQueue::new(backend.name("health"))
        .create_if_missing()
        .wait(Duration::from_secs(1));
    let started = Arc::new(AtomicBool::new(false));
    let finish = Arc::new(AtomicBool::new(false));
    let handler = Held {
        started: started.clone(),
        finish: finish.clone(),
    };
    let app = RustStream::new(AppInfo::new("health", "0"))
        .shutdown_timeout(Duration::from_secs(60))
        .with_broker(backend.broker.clone(), |b| {
            b.include(subscriber(queue.clone(), handler).build());
        });
    let health = app.health();
    let stop = app.shutdown_handle();
    assert_eq!(health.state(), AppState::Starting);
    assert!(health.is_live(), "a starting service is live");
    assert!(!health.is_ready(), "a starting service is not ready");

    // Health reads wall-clock milliseconds.
    let before = SystemTime::now() - Duration::from_millis(1);
    let running = tokio::spawn(app.run_until(std::future::pending()));
    health.wait_for(AppState::Running).await;
    assert_eq!(health.state(), AppState::Running);
    assert!(health.is_ready(), "{:?}", health.report());
    let report = health.report();
    assert_eq!(report.subscriptions.len(), 1);
    assert_eq!(report.subscriptions[0].queue, queue.name());
    assert!(report.subscriptions[0].consuming);
    assert_eq!(
        report.subscriptions[0].last_message, None,
        "nothing sent yet"
    );

    backend
        .broker
        .publisher(queue.clone())
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    eventually("the handler runs", async || started.load(Ordering::SeqCst)).await;
    let report = health.report();
    let last_message = report.subscriptions[0]
        .last_message
        .expect("a receive brought the message");
    assert!(
        last_message >= before,
        "{last_message:?} is now, not before"
    );
    assert!(report.subscriptions[0].last_receive >= Some(last_message));

    // Shutdown waits for the running handler: the service drains, live but not ready.
    stop.shutdown();
    health.wait_for(AppState::Draining).await;
    assert_eq!(health.state(), AppState::Draining);
    assert!(health.is_live(), "a draining service is live");
    assert!(!health.is_ready(), "a draining service takes no new work");
    assert!(!running.is_finished(), "the handler still runs");

    finish.store(true, Ordering::SeqCst);
    running.await.unwrap().unwrap();
    assert_eq!(health.state(), AppState::Stopped);
    assert!(!health.is_live());
    assert!(!health.report().subscriptions[0].consuming);
}

#[tokio::test(start_paused = true)]
async fn a_service_whose_start_fails_goes_from_starting_to_stopped() {
    let (handler, _) = Scripted::new(|_, _| Ok(()));
    let app =
        RustStream::new(AppInfo::new("health", "0")).with_broker(SqsBroker::in_process(), |b| {
            b.include(subscriber(SqsQueue::new("missing"), handler).build());
        });
    let health = app.health();
    let error = app.run_until(std::future::pending()).await.unwrap_err();
    assert!(
        matches!(error.broker_error(), Some(StartError::QueueMissing { .. })),
        "{error}"
    );
    assert_eq!(health.state(), AppState::Stopped);
    assert!(!health.is_live());
    assert!(!health.is_ready());
}

#[tokio::test(start_paused = true)]
async fn a_subscription_whose_receives_fail_is_not_consuming_until_one_answers() {
    let account = Account::new();
    let faulty = Faulty::default();
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let queue = SqsQueue::new("flaky")
        .create_if_missing()
        .wait(Duration::from_secs(1));
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("health", "0")).with_broker(broker.clone(), |b| {
        b.include(subscriber(queue.clone(), handler).build());
    });
    let health = app.health();
    let stop = app.shutdown_handle();
    let running = tokio::spawn(app.run_until(std::future::pending()));
    health.wait_for(AppState::Running).await;
    eventually("a first receive answers", async || {
        health.report().subscriptions[0].last_receive.is_some()
    })
    .await;

    // SQS stops answering: after the next receive fails, the subscription is not consuming and
    // the service is not ready, though still live and running.
    faulty.receive_failures.store(3, Ordering::SeqCst);
    eventually("receives fail", async || {
        let report = health.report();
        !report.subscriptions[0].consuming && report.subscriptions[0].receive_failures >= 1
    })
    .await;
    assert!(!health.is_ready());
    assert!(health.is_live());
    assert_eq!(health.state(), AppState::Running);

    // The failures end: the next receive answers, and the message sent meanwhile is handled.
    broker
        .publisher(queue)
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    eventually("consuming again", async || health.is_ready()).await;
    eventually("the message is handled", async || {
        log.lock().unwrap().len() == 1
    })
    .await;
    assert_eq!(health.report().subscriptions[0].receive_failures, 0);

    stop.shutdown();
    running.await.unwrap().unwrap();
}
