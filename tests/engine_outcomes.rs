//! How handler outcomes, outputs, publishing and startup checks behave end to end on the
//! in-process broker: outputs before acks, no duplicate outputs on a retried handler,
//! `retry_after`, panics, undecodable bodies, dead-lettering, context fields, publisher steps,
//! batching of sends, and the errors a service gets before any network call.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::engine::{jobs, Faulty, Job, Scripted};
use common::{bodies, receive};
use rust_stream::account::Account;
use rust_stream::model::rules::ErrorKind;
use rust_stream::prelude::*;
use rust_stream::sqs::StartError;
use rust_stream::testing::{eventually, eventually_within, TestApp};
use rust_stream::transport::ReceiveMessage;
use rust_stream::RetryPolicy;
use rust_stream::{Output, RunError, DEAD_LETTER_REASON_HEADER, PARTITION_KEY_HEADER};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

fn app(broker: &SqsBroker, subscriber: rust_stream::Subscriber) -> impl App {
    RustStream::new(AppInfo::new("test", "0.0.0")).with_broker(broker.clone(), |b| {
        b.include(subscriber);
    })
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Receipt {
    job: u32,
    line: u32,
}

/// Publishes two receipts per job to its output, then acks.
struct Bill {
    calls: Arc<AtomicU32>,
}

impl Handle<Job, Output<Receipt>> for Bill {
    async fn handle(
        &self,
        job: &Job,
        receipts: &Output<Receipt>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        for line in 0..2 {
            ctx.publish(
                receipts
                    .message(&Receipt { job: job.n, line })
                    .group_id(&job.group),
            );
        }
        Ok(())
    }
}

async fn bill_service(broker: &SqsBroker, visibility: u64) -> (impl App, Arc<AtomicU32>) {
    let calls = Arc::new(AtomicU32::new(0));
    let subscriber = subscriber(
        SqsQueue::new("jobs.fifo").create_if_missing(),
        Bill {
            calls: calls.clone(),
        },
    )
    .visibility_timeout(Duration::from_secs(visibility))
    .outputs(Output::<Receipt>::new(
        SqsQueue::new("receipts.fifo").create_if_missing(),
    ))
    .build();
    (app(broker, subscriber), calls)
}

#[tokio::test(start_paused = true)]
async fn outputs_are_sent_with_derived_dedup_ids_and_the_input_is_then_deleted() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let (service, calls) = bill_service(&broker, 30).await;
    let running = TestApp::spawn(service).await.expect("the app starts");
    let sent = jobs_fifo(&broker)
        .message(&Job::new("g", 7))
        .group_id("g")
        .send()
        .await
        .unwrap();
    eventually("the job handled", async || {
        calls.load(Ordering::SeqCst) == 1
    })
    .await;
    let jobs_url = account.get_queue_url("jobs.fifo").await.unwrap();
    eventually_empty(&account, &jobs_url).await;
    running.stop().await.unwrap();

    let receipts_url = account.get_queue_url("receipts.fifo").await.unwrap();
    let got = receive(&account, &receipts_url, 10).await;
    let lines: Vec<Receipt> = got
        .iter()
        .map(|m| serde_json::from_str(&m.body).unwrap())
        .collect();
    assert_eq!(
        lines,
        [Receipt { job: 7, line: 0 }, Receipt { job: 7, line: 1 }]
    );
    // The input's id, the position and a digest of the content (16 hex digits).
    for (position, message) in got.iter().enumerate() {
        let dedup = message.dedup_id().unwrap();
        let prefix = format!("{}-{position}-", sent.message_id);
        assert!(
            dedup.starts_with(&prefix) && dedup.len() == prefix.len() + 16,
            "{dedup}"
        );
    }
    assert!(got.iter().all(|m| m.group_id() == Some("g")));
}

async fn eventually_empty(account: &Account, url: &str) {
    for _ in 0..10_000 {
        let counts = account.counts(url).await.unwrap();
        if counts.visible + counts.in_flight + counts.delayed == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("queue {url} never emptied");
}

#[tokio::test(start_paused = true)]
async fn an_input_whose_outputs_cannot_be_sent_is_not_acknowledged() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let (service, calls) = bill_service(&broker, 5).await;
    let running = TestApp::spawn(service).await.expect("the app starts");
    // Let the app create its queues, then take the output queue away.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let receipts_url = account.get_queue_url("receipts.fifo").await.unwrap();
    account.delete_queue(&receipts_url).await.unwrap();
    jobs_fifo(&broker)
        .message(&Job::new("g", 1))
        .group_id("g")
        .send()
        .await
        .unwrap();
    eventually("the job handled twice", async || {
        calls.load(Ordering::SeqCst) >= 2
    })
    .await;
    running.stop().await.unwrap();
    let jobs_url = account.get_queue_url("jobs.fifo").await.unwrap();
    let counts = account.counts(&jobs_url).await.unwrap();
    assert_eq!(
        counts.visible + counts.in_flight,
        1,
        "the input stays until its outputs are sent"
    );
}

#[tokio::test(start_paused = true)]
async fn a_handler_run_again_after_a_lost_delete_does_not_publish_its_outputs_twice() {
    let account = Account::new();
    let faulty = Faulty::default();
    faulty.permanent_delete_failures.store(1, Ordering::SeqCst);
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let (service, calls) = bill_service(&broker, 5).await;
    let running = TestApp::spawn(service).await.expect("the app starts");
    jobs_fifo(&broker)
        .message(&Job::new("g", 3))
        .group_id("g")
        .send()
        .await
        .unwrap();
    eventually(
        "the job handled again after its delete failed",
        async || calls.load(Ordering::SeqCst) == 2,
    )
    .await;
    let jobs_url = account.get_queue_url("jobs.fifo").await.unwrap();
    eventually_empty(&account, &jobs_url).await;
    running.stop().await.unwrap();
    let receipts_url = account.get_queue_url("receipts.fifo").await.unwrap();
    assert_eq!(
        receive(&account, &receipts_url, 10).await.len(),
        2,
        "the second run's outputs were deduplicated"
    );
}

/// A publisher that creates `jobs.fifo` if the app has not yet.
fn jobs_fifo(broker: &SqsBroker) -> rust_stream::Publisher {
    broker.publisher(SqsQueue::new("jobs.fifo").create_if_missing())
}

fn standard_jobs() -> SqsQueue {
    SqsQueue::new("jobs")
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(10))
}

#[tokio::test(start_paused = true)]
async fn retry_after_brings_the_message_back_after_the_delay() {
    let broker = SqsBroker::in_process();
    let times = Arc::new(Mutex::new(Vec::new()));
    let (handler, log) = Scripted::new({
        let times = times.clone();
        move |_, ctx| {
            times.lock().unwrap().push(Instant::now());
            match ctx.sqs().receive_count() {
                1 => Err(HandlerOutcome::retry_after(Duration::from_secs(40))),
                _ => Ok(()),
            }
        }
    });
    let running = TestApp::spawn(app(&broker, subscriber(standard_jobs(), handler).build()))
        .await
        .expect("the app starts");
    broker
        .publisher(standard_jobs())
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    eventually_within("the second try", Duration::from_secs(3600), async || {
        log.lock().unwrap().len() == 2
    })
    .await;
    running.stop().await.unwrap();
    let times = times.lock().unwrap();
    let waited = times[1] - times[0];
    assert!(
        waited >= Duration::from_secs(40) && waited < Duration::from_secs(41),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_is_retried_and_the_service_goes_on() {
    let broker = SqsBroker::in_process();
    let (handler, log) = Scripted::new(|job, ctx| {
        if job.n == 1 && ctx.sqs().receive_count() == 1 {
            panic!("the first try of job 1 panics");
        }
        Ok(())
    });
    let running = TestApp::spawn(app(&broker, subscriber(standard_jobs(), handler).build()))
        .await
        .expect("the app starts");
    for n in 0..3 {
        broker
            .publisher(standard_jobs())
            .message(&Job::new("-", n))
            .send()
            .await
            .unwrap();
    }
    eventually("four calls", async || log.lock().unwrap().len() == 4).await;
    running.stop().await.unwrap();
    let seen = log.lock().unwrap().clone();
    let retried: Vec<u32> = seen
        .iter()
        .filter(|s| s.job.n == 1)
        .map(|s| s.receive_count)
        .collect();
    assert_eq!(
        retried,
        [1, 2],
        "released at once after the panic and received again"
    );
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_body_without_a_dead_letter_queue_is_never_deleted() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let backoff = RetryPolicy::exponential(Duration::from_secs(1), Duration::from_secs(300));
    let sub = subscriber(standard_jobs(), handler).retry(backoff.without_jitter());
    let running = TestApp::spawn(app(&broker, sub.build()))
        .await
        .expect("the app starts");
    broker
        .publisher(standard_jobs())
        .raw("not json")
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(25)).await;
    running.stop().await.unwrap();
    assert!(log.lock().unwrap().is_empty());
    // Retried by the backoff, not at once and not at the visibility timeout's pace: received at
    // 0, 1, 3, 7 and 15 s (plus a few ms of work each); the last retry let it wait 16 s, until
    // just after 31 s.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let url = account.get_queue_url("jobs").await.unwrap();
    let got = receive(&account, &url, 10).await;
    assert_eq!(bodies(&got), ["not json"]);
    assert_eq!(
        got[0].receive_count(),
        Some(6),
        "received at 0, 1, 3, 7 and 15 s, then here"
    );
}

#[tokio::test(start_paused = true)]
async fn an_undecodable_body_is_dead_lettered_with_its_reason() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let (handler, _log) = Scripted::new(|_, _| Ok(()));
    let queue = standard_jobs().dead_letter("jobs-dlq", 5);
    let running = TestApp::spawn(app(&broker, subscriber(queue, handler).build()))
        .await
        .expect("the app starts");
    broker
        .publisher(standard_jobs())
        .raw("not json")
        .send()
        .await
        .unwrap();
    let dlq = loop {
        if let Ok(url) = account.get_queue_url("jobs-dlq").await {
            break url;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let got = account
        .receive_message(&dlq, ReceiveMessage::new(1).wait_time_seconds(20))
        .await
        .unwrap();
    running.stop().await.unwrap();
    assert_eq!(bodies(&got), ["not json"]);
    let reason = got[0].message_attributes[DEAD_LETTER_REASON_HEADER]
        .string_value
        .clone()
        .unwrap();
    assert!(
        reason.contains("Job"),
        "the reason names the type: {reason}"
    );
    let source = account.get_queue_url("jobs").await.unwrap();
    eventually_empty(&account, &source).await;
}

#[tokio::test(start_paused = true)]
async fn dead_letter_without_a_dead_letter_queue_keeps_the_message() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let (handler, log) = Scripted::new(|_, _| Err(HandlerOutcome::dead_letter("no good")));
    let running = TestApp::spawn(app(&broker, subscriber(standard_jobs(), handler).build()))
        .await
        .expect("the app starts");
    broker
        .publisher(standard_jobs())
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    eventually("two tries", async || log.lock().unwrap().len() == 2).await;
    running.stop().await.unwrap();
    let seen = log.lock().unwrap().clone();
    assert_eq!(seen[1].receive_count, 2, "it came back");
}

/// What one delivery showed its handler: group, partition key header, tenant header, sequence
/// number, dedup id, queue.
type Observed = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    String,
);

#[derive(Default)]
struct Inspect {
    seen: Mutex<Vec<Observed>>,
}

impl Handle<Job> for Arc<Inspect> {
    async fn handle(
        &self,
        _job: &Job,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        assert!(ctx.sent_at().is_some());
        self.seen.lock().unwrap().push((
            ctx.sqs().group_id().map(str::to_owned),
            ctx.header(PARTITION_KEY_HEADER).map(str::to_owned),
            ctx.header("tenant").map(str::to_owned),
            ctx.sqs().sequence_number().map(str::to_owned),
            ctx.sqs().dedup_id().map(str::to_owned),
            ctx.queue().to_owned(),
        ));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_fifo_group_comes_from_the_step_or_the_partition_key_or_default_and_every_delivery_carries_it(
) {
    let broker = SqsBroker::in_process();
    let inspect = Arc::new(Inspect::default());
    let queue = SqsQueue::new("jobs.fifo").create_if_missing();
    let running = TestApp::spawn(app(&broker, subscriber(queue, inspect.clone()).build()))
        .await
        .expect("the app starts");
    let jobs = jobs_fifo(&broker);
    jobs.message(&Job::new("-", 1))
        .group_id("step")
        .header("tenant", "acme")
        .send()
        .await
        .unwrap();
    jobs.message(&Job::new("-", 2))
        .header(PARTITION_KEY_HEADER, "header")
        .dedup_id("mine")
        .send()
        .await
        .unwrap();
    jobs.message(&Job::new("-", 3)).send().await.unwrap();
    eventually("three deliveries", async || {
        inspect.seen.lock().unwrap().len() == 3
    })
    .await;
    running.stop().await.unwrap();
    let mut seen = inspect.seen.lock().unwrap().clone();
    seen.sort_by(|a, b| a.3.cmp(&b.3));
    let groups: Vec<_> = seen
        .iter()
        .map(|s| (s.0.as_deref(), s.1.as_deref()))
        .collect();
    assert_eq!(
        groups,
        [
            (Some("step"), Some("step")),
            (Some("header"), Some("header")),
            (Some("default"), Some("default"))
        ]
    );
    assert_eq!(seen[0].2.as_deref(), Some("acme"));
    assert_eq!(seen[1].4.as_deref(), Some("mine"));
    assert!(seen
        .iter()
        .all(|s| s.3.is_some() && s.4.is_some() && s.5 == "jobs.fifo"));
}

#[tokio::test(start_paused = true)]
async fn concurrent_sends_to_a_queue_share_batch_calls() {
    let broker = SqsBroker::in_process();
    broker
        .publisher(standard_jobs())
        .raw("warm up")
        .send()
        .await
        .unwrap();
    let before = broker.api_calls();
    let sends: Vec<_> = (0..25)
        .map(|n| {
            let publisher = broker.publisher("jobs");
            tokio::spawn(async move { publisher.message(&Job::new("-", n)).send().await })
        })
        .collect();
    for send in sends {
        send.await.unwrap().unwrap();
    }
    let calls = broker.api_calls() - before;
    assert!(
        calls.send_message_batch <= 4,
        "25 sends in {} calls",
        calls.send_message_batch
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_that_breaks_an_sqs_rule_fails_before_the_network() {
    let broker = SqsBroker::in_process();
    let error = broker
        .publisher("jobs.fifo")
        .raw("x")
        .delay(Duration::from_secs(5))
        .send()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), Some(ErrorKind::InvalidParameterValue));
    assert!(error.to_string().contains("DelaySeconds"), "{error}");
    assert_eq!(
        broker.api_calls(),
        Default::default(),
        "nothing reached the broker's transport"
    );
}

#[tokio::test(start_paused = true)]
async fn every_setting_problem_is_reported_at_once_before_any_network_call() {
    let broker = SqsBroker::in_process();
    let (first, _) = Scripted::new(|_, _| Ok(()));
    let (second, _) = Scripted::new(|_, _| Ok(()));
    let (third, _) = Scripted::new(|_, _| Ok(()));
    let service = RustStream::new(AppInfo::new("t", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber("jobs.fifo", first)
                .batch_size(11)
                .wait(Duration::from_secs(25))
                .build(),
        );
        b.include(
            subscriber("jobs.fifo", second)
                .dead_letter("dlq", 3)
                .build(),
        );
        b.include(subscriber("bad name!", third).concurrency(0).build());
    });
    let error = service.run_until(std::future::pending()).await.unwrap_err();
    let RunError::Config(problems) = &error else {
        panic!("{error}")
    };
    assert_eq!(problems.0.len(), 6, "{error}");
    let text = error.to_string();
    for expected in [
        "batch size 11",
        "wait 25s",
        "dead-letter queue `dlq`",
        "two subscriptions",
        "bad name!",
        "concurrency 0",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
    assert_eq!(broker.api_calls(), Default::default());
}

#[tokio::test(start_paused = true)]
async fn a_missing_queue_is_a_startup_error_that_names_it() {
    let broker = SqsBroker::in_process();
    let (handler, _) = Scripted::new(|_, _| Ok(()));
    let error = app(&broker, subscriber("orders", handler).build())
        .run_until(std::future::pending())
        .await
        .unwrap_err();
    assert!(
        matches!(error.broker_error(), Some(StartError::QueueMissing { queue }) if queue == "orders"),
        "{error}"
    );
    assert!(error.to_string().contains("create_if_missing"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn handlers_see_their_jobs_through_the_scripted_helper() {
    // A plain standard queue: every message is handled once and deleted.
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let running = TestApp::spawn(app(&broker, subscriber(standard_jobs(), handler).build()))
        .await
        .expect("the app starts");
    for n in 0..30 {
        broker
            .publisher(standard_jobs())
            .message(&Job::new("-", n))
            .send()
            .await
            .unwrap();
    }
    eventually("30 jobs", async || log.lock().unwrap().len() == 30).await;
    running.stop().await.unwrap();
    let mut handled: Vec<u32> = jobs(&log).iter().map(|job| job.n).collect();
    handled.sort_unstable();
    assert_eq!(handled, (0..30).collect::<Vec<_>>());
    let url = account.get_queue_url("jobs").await.unwrap();
    eventually_empty(&account, &url).await;
}

/// Publishes each job to a publisher of another broker, as part of handling it.
struct Forward {
    to: rust_stream::Publisher,
}

impl Handle<Job> for Forward {
    async fn handle(&self, job: &Job, _: &(), ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        ctx.publish(self.to.message(job));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn staged_outputs_go_through_the_broker_their_publisher_belongs_to() {
    let here = Account::new();
    let elsewhere = Account::new();
    let broker = SqsBroker::with_account(&here);
    let other = SqsBroker::with_account(&elsewhere);
    let to = other.publisher(SqsQueue::new("audit").create_if_missing());
    let running = TestApp::spawn(app(
        &broker,
        subscriber(standard_jobs(), Forward { to }).build(),
    ))
    .await
    .expect("the app starts");
    broker
        .publisher(standard_jobs())
        .message(&Job::new("-", 7))
        .send()
        .await
        .unwrap();
    let mut got = Vec::new();
    for _ in 0..1000 {
        if let Ok(audit) = elsewhere.get_queue_url("audit").await {
            got = receive(&elsewhere, &audit, 10).await;
            if !got.is_empty() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.stop().await.unwrap();
    assert_eq!(got.len(), 1, "sent on the publisher's own broker");
    assert!(
        here.get_queue_url("audit").await.is_err(),
        "nothing was created on the subscription's broker"
    );
}

/// `(attempt, receive_count)` of each call of a handler that always fails, on `queue` (declared
/// with `dead_letter(DLQ, 3)`), until its one message is dead-lettered; and the dead-letter copy.
async fn attempts_until_dead_lettered(
    queue: SqsQueue,
    dlq: &str,
) -> (Vec<(u32, u32)>, rust_stream::transport::ReceivedMessage) {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (handler, _log) = Scripted::new({
        let seen = seen.clone();
        move |_, ctx| {
            seen.lock()
                .unwrap()
                .push((ctx.attempt(), ctx.sqs().receive_count()));
            Err(HandlerOutcome::failed("still failing"))
        }
    });
    let running = TestApp::spawn(app(&broker, subscriber(queue.clone(), handler).build()))
        .await
        .expect("the app starts");
    let mut message = broker.publisher(queue.clone()).message(&Job::new("g", 1));
    if queue.is_fifo() {
        message = message.group_id("g");
    }
    message.send().await.unwrap();
    let dlq_url = account.get_queue_url(dlq).await.unwrap();
    let mut dead = Vec::new();
    eventually_within(
        "the message dead-lettered",
        Duration::from_secs(3600),
        async || {
            dead.extend(receive(&account, &dlq_url, 1).await);
            !dead.is_empty()
        },
    )
    .await;
    // Time for a fourth attempt, were there one.
    tokio::time::sleep(Duration::from_secs(60)).await;
    running.stop().await.unwrap();
    let seen = seen.lock().unwrap().clone();
    (seen, dead.remove(0))
}

#[tokio::test(start_paused = true)]
async fn a_handler_sees_its_attempt_through_fifo_retries_in_place_while_the_receive_count_stays_1()
{
    let queue = SqsQueue::new("jobs.fifo")
        .create_if_missing()
        .dead_letter("jobs-dlq.fifo", 3)
        .retry(RetryPolicy::exponential(
            Duration::from_millis(200),
            Duration::from_secs(2),
        ));
    let (seen, dead) = attempts_until_dead_lettered(queue, "jobs-dlq.fifo").await;
    assert_eq!(
        seen,
        [(1, 1), (2, 1), (3, 1)],
        "retried in place: one receive, three attempts, then dead-lettered at the policy's count"
    );
    let attempts = dead.message_attributes[rust_stream::ATTEMPTS_HEADER]
        .string_value
        .clone();
    assert_eq!(attempts.as_deref(), Some("3"));
}

#[tokio::test(start_paused = true)]
async fn a_handler_sees_its_attempt_on_a_standard_queue_as_the_receive_count() {
    let queue = standard_jobs()
        .dead_letter("jobs-dlq", 3)
        .retry(RetryPolicy::exponential(
            Duration::from_secs(1),
            Duration::from_secs(2),
        ));
    let (seen, dead) = attempts_until_dead_lettered(queue, "jobs-dlq").await;
    assert_eq!(seen, [(1, 1), (2, 2), (3, 3)], "each attempt is a receive");
    let attempts = dead.message_attributes[rust_stream::ATTEMPTS_HEADER]
        .string_value
        .clone();
    assert_eq!(attempts.as_deref(), Some("3"));
}

/// Publishes one receipt naming no group and one naming `named`, then acks.
struct Receipts;

impl Handle<Job, Output<Receipt>> for Receipts {
    async fn handle(
        &self,
        job: &Job,
        receipts: &Output<Receipt>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        ctx.publish(receipts.message(&Receipt {
            job: job.n,
            line: 0,
        }));
        ctx.publish(
            receipts
                .message(&Receipt {
                    job: job.n,
                    line: 1,
                })
                .group_id("named"),
        );
        Ok(())
    }
}

/// Runs [`Receipts`] on `input` (on `broker`) for one job of group `g`, and answers the
/// `(line, group)` of each receipt stored in `receipts.fifo`.
async fn receipt_groups(
    account: &Account,
    broker: &SqsBroker,
    input: SqsQueue,
) -> Vec<(u32, String)> {
    let sub = subscriber(input.clone(), Receipts)
        .outputs(Output::<Receipt>::new(
            SqsQueue::new("receipts.fifo").create_if_missing(),
        ))
        .build();
    let running = TestApp::spawn(app(broker, sub))
        .await
        .expect("the app starts");
    broker
        .publisher(input)
        .message(&Job::new("g", 1))
        .group_id("g")
        .send()
        .await
        .unwrap();
    let url = account.get_queue_url("receipts.fifo").await.unwrap();
    let mut got = Vec::new();
    eventually("two receipts", async || {
        got.extend(receive(account, &url, 10).await);
        got.len() == 2
    })
    .await;
    running.stop().await.unwrap();
    let mut groups: Vec<(u32, String)> = got
        .iter()
        .map(|m| {
            let receipt: Receipt = serde_json::from_str(&m.body).unwrap();
            (receipt.line, m.group_id().unwrap().to_owned())
        })
        .collect();
    groups.sort();
    groups
}

#[tokio::test(start_paused = true)]
async fn an_output_to_a_fifo_queue_takes_its_fifo_inputs_group_unless_it_names_one() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let groups = receipt_groups(&account, &broker, jobs_fifo_queue()).await;
    assert_eq!(groups, [(0, "g".to_owned()), (1, "named".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn a_strict_broker_still_lets_outputs_take_their_fifo_inputs_group() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account).strict_groups();
    let groups = receipt_groups(&account, &broker, jobs_fifo_queue()).await;
    assert_eq!(groups, [(0, "g".to_owned()), (1, "named".to_owned())]);
}

#[tokio::test(start_paused = true)]
async fn an_output_of_a_standard_input_goes_to_the_default_group_unless_strict() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    // A standard queue's message may carry a group (fair queues); its outputs do not take it.
    let groups = receipt_groups(&account, &broker, standard_jobs()).await;
    assert_eq!(groups, [(0, "default".to_owned()), (1, "named".to_owned())]);
}

fn jobs_fifo_queue() -> SqsQueue {
    SqsQueue::new("jobs.fifo").create_if_missing()
}

#[tokio::test(start_paused = true)]
async fn strict_groups_refuse_a_fifo_send_naming_no_group_before_any_call() {
    for (broker, publisher) in [
        {
            let broker = SqsBroker::in_process();
            let publisher = broker.publisher(jobs_fifo_queue()).strict_groups();
            (broker, publisher)
        },
        {
            let broker = SqsBroker::in_process().strict_groups();
            let publisher = broker.publisher(jobs_fifo_queue());
            (broker, publisher)
        },
    ] {
        let refused = publisher.raw("{}").send().await.unwrap_err();
        assert!(
            matches!(&refused, rust_stream::PublishError::NoGroup { queue } if queue == "jobs.fifo"),
            "{refused:?}"
        );
        let text = refused.to_string();
        for needle in ["`jobs.fifo`", "names no message group", "`.group_id(..)`"] {
            assert!(text.contains(needle), "`{needle}` missing in: {text}");
        }
        let batch = publisher.send_batch([publisher.raw("{}")]).await;
        assert!(matches!(
            batch[0],
            Err(rust_stream::PublishError::NoGroup { .. })
        ));
        assert_eq!(broker.api_calls(), rust_stream::ApiCalls::default());
        // Naming a group, by the step or the header, goes through; a standard queue needs none.
        publisher.raw("{}").group_id("g").send().await.unwrap();
        publisher
            .raw("{}")
            .header(PARTITION_KEY_HEADER, "h")
            .send()
            .await
            .unwrap();
        broker
            .publisher(standard_jobs())
            .strict_groups()
            .raw("{}")
            .send()
            .await
            .unwrap();
    }
}

#[test]
fn a_unit_tested_handlers_output_takes_the_fifo_inputs_group() {
    use rust_stream::testing::TestContext;
    let receipts = Output::<Receipt>::new("receipts.fifo");
    let mut ctx = TestContext::new().queue("jobs.fifo").group_id("g").build();
    ctx.publish(receipts.message(&Receipt { job: 1, line: 0 }));
    assert_eq!(ctx.published()[0].group_id(), Some("g"));
    let mut ctx = TestContext::new().group_id("g").build();
    ctx.publish(receipts.message(&Receipt { job: 1, line: 0 }));
    assert_eq!(
        ctx.published()[0].group_id(),
        Some("default"),
        "the input of `test-queue`, a standard queue, gives no group"
    );
}

/// Fails every attempt with its own error.
#[subscriber(
    SqsQueue::new("flaky.fifo").create_if_missing(),
    retry = RetryPolicy::exponential(Duration::from_millis(200), Duration::from_secs(2)),
    dead_letter("flaky-dlq.fifo", 2)
)]
async fn always_failing(job: &Job) -> Result<(), String> {
    Err(format!("job {} failed", job.n))
}

#[test]
fn the_last_failed_attempt_logs_dead_lettered_and_no_retry() {
    let logged = common::logged_while(|| async {
        let account = Account::new();
        let broker = SqsBroker::with_account(&account);
        let app = RustStream::new(AppInfo::new("test", "0.0.0")).with_broker(broker.clone(), |b| {
            b.include(always_failing);
        });
        let running = TestApp::spawn(app).await.expect("the app starts");
        broker
            .publisher(SqsQueue::new("flaky.fifo"))
            .message(&Job::new("g", 1))
            .group_id("g")
            .send()
            .await
            .unwrap();
        let dlq_url = account.get_queue_url("flaky-dlq.fifo").await.unwrap();
        eventually("the message dead-lettered", async || {
            account.counts(&dlq_url).await.unwrap().visible == 1
        })
        .await;
        running.stop().await.unwrap();
    });
    let decisions: Vec<&str> = logged
        .lines()
        .filter(|line| {
            [
                "will be retried",
                "message dead-lettered",
                "handler failed;",
            ]
            .iter()
            .any(|decision| line.contains(decision))
        })
        .collect();
    assert_eq!(decisions.len(), 2, "{logged}");
    assert!(
        decisions[0].contains("message failed; it will be retried")
            && decisions[0].contains("attempts=1")
            && decisions[0].contains("job 1 failed"),
        "the first attempt is retried, with the handler's error: {}",
        decisions[0]
    );
    assert!(
        decisions[1].contains("message dead-lettered") && decisions[1].contains("attempts=2"),
        "the last is dead-lettered, and nothing says it will be retried: {}",
        decisions[1]
    );
    assert!(!logged.contains("handler failed;"), "{logged}");
}

#[tokio::test(start_paused = true)]
async fn a_lookup_refused_before_it_is_sent_is_not_counted_as_an_api_call() {
    let broker = SqsBroker::in_process();
    let refused = broker
        .publisher("orders!")
        .raw("{}")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        refused.kind(),
        Some(ErrorKind::InvalidParameterValue),
        "{refused}"
    );
    assert_eq!(broker.api_calls(), rust_stream::ApiCalls::default());
    // A lookup that reaches SQS counts, refused or not.
    broker
        .publisher("orders")
        .raw("{}")
        .send()
        .await
        .unwrap_err();
    assert_eq!(broker.api_calls().get_queue_url, 1);
}
