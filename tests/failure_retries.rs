//! Failure semantics on both backends (the in-process account on a paused clock, and LocalStack in
//! real time), each promise tested by producing its failure:
//!
//! - a FIFO message that fails is retried in place; the valid later messages of its group wait,
//!   are never received again, and never reach the dead-letter queue unhandled;
//! - a message out of attempts is dead-lettered alone, after exactly its attempts, whether the
//!   subscription declares the dead-letter queue or the queue's own `RedrivePolicy` does;
//! - a handler failing for a while is retried by a backoff, not in a loop;
//! - shutdown with a long poll in flight ends within its budget and leaves nothing hidden longer
//!   than a receive's visibility (`RECEIVE_VISIBILITY_TIMEOUT`), and a handler outliving the
//!   shutdown timeout is no longer running when `run` returns.
//!
//! Queues are checked to the last message with the counts they report (visible, in flight and
//! delayed), and released messages by their receive counts against the receives the service made,
//! as recorded at its transport.

#[macro_use]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::backend::{Backend, Kind};
use common::engine::{jobs, Job, Scripted};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::{ReceivedMessage, Transport};
use rust_stream::{
    RetryPolicy, Subscriber, ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER,
    ORIGINAL_MESSAGE_ID_HEADER, SOURCE_QUEUE_HEADER,
};
use tokio::time::Instant;

both_backends!(
    a_fifo_message_failing_twice_is_retried_in_place_and_its_group_stays_whole_and_in_order,
    a_fifo_message_that_always_fails_is_dead_lettered_alone_after_exactly_its_attempts,
    the_queues_redrive_policy_sets_the_attempts_and_dead_letter_queue_when_the_subscription_has_none,
    undecodable_fifo_messages_go_to_the_queues_dead_letter_queue_and_the_valid_rest_is_handled,
    a_handler_failing_for_ten_seconds_is_attempted_a_few_times_not_hundreds,
    shutdown_with_a_long_poll_in_flight_leaves_no_message_hidden,
    a_handler_outliving_the_shutdown_timeout_is_not_running_when_run_returns,
    dead_letter_works_on_a_queue_that_already_exists_without_a_redrive_policy,
);

/// Fast enough for real time on LocalStack, still a growing backoff.
fn quick_retries() -> RetryPolicy {
    RetryPolicy::exponential(Duration::from_millis(200), Duration::from_secs(2))
}

async fn service<T: Transport>(
    backend: &Backend<T>,
    shutdown: Duration,
    sub: Subscriber,
) -> TestApp {
    TestApp::spawn(
        RustStream::new(AppInfo::new("failures", "0"))
            .shutdown_timeout(shutdown)
            .with_broker(backend.broker.clone(), |b| {
                b.include(sub);
            }),
    )
    .await
    .expect("the app starts")
}

/// Runs the service on `queue` until g5 is handled, and lets the last delete land before it stops.
async fn until_g5_handled<T: Transport, H: Handle<Job>>(
    backend: &Backend<T>,
    queue: &SqsQueue,
    handler: H,
    log: &common::engine::Log,
) {
    let sub = subscriber(queue.clone(), handler).build();
    let running = service(backend, Duration::from_secs(10), sub).await;
    eventually("g5 handled", async || {
        jobs(log).iter().any(|job| job.n == 5)
    })
    .await;
    // Deletes are confirmed before the group goes on, so g5's is the only one that may lag.
    tokio::time::sleep(Duration::from_millis(500)).await;
    running.stop().await.unwrap();
}

async fn send_group<T: Transport>(backend: &Backend<T>, queue: &SqsQueue, bodies: &[String]) {
    let publisher = backend.broker.publisher(queue.clone());
    for body in bodies {
        publisher
            .raw(body.clone())
            .group_id("g")
            .send()
            .await
            .unwrap();
    }
}

fn job_bodies(count: u32) -> Vec<String> {
    (1..=count)
        .map(|n| serde_json::to_string(&Job::new("g", n)).unwrap())
        .collect()
}

/// `(n, receive_count)` of each handler call, in call order.
fn calls(log: &common::engine::Log) -> Vec<(u32, u32)> {
    log.lock()
        .unwrap()
        .iter()
        .map(|seen| (seen.job.n, seen.receive_count))
        .collect()
}

fn attribute(message: &ReceivedMessage, name: &str) -> Option<String> {
    message.message_attributes.get(name)?.string_value.clone()
}

async fn a_fifo_message_failing_twice_is_retried_in_place_and_its_group_stays_whole_and_in_order<
    T: Transport,
>(
    backend: Backend<T>,
) {
    let dlq = backend.name("dlq.fifo");
    let queue = SqsQueue::new(backend.name("ledger.fifo"))
        .create_if_missing()
        .dead_letter(&dlq, 3)
        .retry(quick_retries());
    send_group(&backend, &queue, &job_bodies(5)).await;
    let failures = Arc::new(AtomicU32::new(0));
    let (handler, log) = Scripted::new(move |job, _| {
        if job.n == 2 && failures.fetch_add(1, Ordering::SeqCst) < 2 {
            return Err(HandlerOutcome::retry());
        }
        Ok(())
    });
    until_g5_handled(&backend, &queue, handler, &log).await;

    assert_eq!(
        calls(&log),
        [(1, 1), (2, 1), (2, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
        "g2 retried in place twice; g3..g5 waited and were never received again"
    );
    let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
    assert_eq!(backend.left(&url).await, (0, 0, 0), "every message deleted");
    let dlq_url = backend.transport.get_queue_url(&dlq).await.unwrap();
    assert_eq!(
        backend.left(&dlq_url).await,
        (0, 0, 0),
        "nothing dead-lettered"
    );
}

async fn a_fifo_message_that_always_fails_is_dead_lettered_alone_after_exactly_its_attempts<
    T: Transport,
>(
    backend: Backend<T>,
) {
    let dlq = backend.name("dlq.fifo");
    let queue = SqsQueue::new(backend.name("ledger.fifo"))
        .create_if_missing()
        .dead_letter(&dlq, 3)
        .retry(quick_retries());
    send_group(&backend, &queue, &job_bodies(5)).await;
    let (handler, log) = Scripted::new(|job, _| match job.n {
        2 => Err(HandlerOutcome::retry()),
        _ => Ok(()),
    });
    until_g5_handled(&backend, &queue, handler, &log).await;

    assert_eq!(
        calls(&log),
        [(1, 1), (2, 1), (2, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
        "g2 had exactly 3 attempts, then the group went on in order"
    );
    let g2_id = log.lock().unwrap()[1].message_id.clone();
    let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
    assert_eq!(backend.left(&url).await, (0, 0, 0));
    let dlq_url = backend.transport.get_queue_url(&dlq).await.unwrap();
    assert_eq!(
        backend.left(&dlq_url).await,
        (1, 0, 0),
        "only g2 is dead-lettered"
    );
    let dead = backend.drain(&dlq_url, 1).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    let dead = &dead[0];
    assert_eq!(
        serde_json::from_str::<Job>(&dead.body).unwrap(),
        Job::new("g", 2)
    );
    assert_eq!(dead.group_id(), Some("g"));
    assert_eq!(attribute(dead, ORIGINAL_MESSAGE_ID_HEADER), Some(g2_id));
    assert_eq!(
        attribute(dead, SOURCE_QUEUE_HEADER).as_deref(),
        Some(queue.name())
    );
    assert_eq!(attribute(dead, ATTEMPTS_HEADER).as_deref(), Some("3"));
    let reason = attribute(dead, DEAD_LETTER_REASON_HEADER).unwrap();
    assert!(reason.contains("after 3 attempts"), "{reason}");
}

/// A FIFO queue whose `RedrivePolicy` sends to a FIFO dead-letter queue after 3 receives.
async fn queue_with_redrive<T: Transport>(backend: &Backend<T>) -> (SqsQueue, String) {
    let dlq_url = backend.queue("redrive-dlq.fifo", &[]).await;
    let arn = backend.arn(&dlq_url).await;
    let policy =
        serde_json::json!({ "deadLetterTargetArn": arn, "maxReceiveCount": 3 }).to_string();
    backend
        .queue("redriven.fifo", &[("RedrivePolicy", &policy)])
        .await;
    let queue = SqsQueue::new(backend.name("redriven.fifo")).retry(quick_retries());
    (queue, dlq_url)
}

async fn the_queues_redrive_policy_sets_the_attempts_and_dead_letter_queue_when_the_subscription_has_none<
    T: Transport,
>(
    backend: Backend<T>,
) {
    let (queue, dlq_url) = queue_with_redrive(&backend).await;
    send_group(&backend, &queue, &job_bodies(5)).await;
    let (handler, log) = Scripted::new(|job, _| match job.n {
        2 => Err(HandlerOutcome::retry()),
        _ => Ok(()),
    });
    until_g5_handled(&backend, &queue, handler, &log).await;

    assert_eq!(
        calls(&log),
        [(1, 1), (2, 1), (2, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
        "maxReceiveCount 3 of the queue's policy: 3 attempts in place, then the group goes on"
    );
    let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
    assert_eq!(backend.left(&url).await, (0, 0, 0), "the source is empty");
    assert_eq!(backend.left(&dlq_url).await, (1, 0, 0), "only g2");
    let dead = backend.drain(&dlq_url, 1).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(
        serde_json::from_str::<Job>(&dead[0].body).unwrap(),
        Job::new("g", 2)
    );
    assert_eq!(attribute(&dead[0], ATTEMPTS_HEADER).as_deref(), Some("3"));
}

async fn undecodable_fifo_messages_go_to_the_queues_dead_letter_queue_and_the_valid_rest_is_handled<
    T: Transport,
>(
    backend: Backend<T>,
) {
    let (queue, dlq_url) = queue_with_redrive(&backend).await;
    let mut bodies = job_bodies(5);
    bodies[1] = "not json (g2)".to_owned();
    bodies[2] = "not json (g3)".to_owned();
    send_group(&backend, &queue, &bodies).await;
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    until_g5_handled(&backend, &queue, handler, &log).await;

    assert_eq!(
        calls(&log),
        [(1, 1), (4, 1), (5, 1)],
        "the valid g4 and g5 are handled, once, in order"
    );
    let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
    assert_eq!(backend.left(&url).await, (0, 0, 0), "the source is empty");
    assert_eq!(backend.left(&dlq_url).await, (2, 0, 0), "g2 and g3");
    let dead = backend.drain(&dlq_url, 2).await;
    let mut dead_bodies: Vec<&str> = dead.iter().map(|m| m.body.as_str()).collect();
    dead_bodies.sort_unstable();
    assert_eq!(dead_bodies, ["not json (g2)", "not json (g3)"]);
}

async fn a_handler_failing_for_ten_seconds_is_attempted_a_few_times_not_hundreds<T: Transport>(
    backend: Backend<T>,
) {
    let queue = SqsQueue::new(backend.name("flaky"))
        .create_if_missing()
        .dead_letter(backend.name("flaky-dlq"), 1000);
    backend
        .broker
        .publisher(queue.clone())
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    let first_call: Arc<Mutex<Option<Instant>>> = Arc::default();
    let acked = Arc::new(AtomicBool::new(false));
    let (handler, log) = Scripted::new({
        let acked = acked.clone();
        move |_, _| {
            let started = *first_call.lock().unwrap().get_or_insert_with(Instant::now);
            if started.elapsed() < Duration::from_secs(10) {
                return Err(HandlerOutcome::retry());
            }
            acked.store(true, Ordering::SeqCst);
            Ok(())
        }
    });
    let before = backend.broker.api_calls();
    let running = service(
        &backend,
        Duration::from_secs(10),
        subscriber(queue.clone(), handler).build(),
    )
    .await;
    let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
    eventually("acked after the outage", async || {
        acked.load(Ordering::SeqCst)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    running.stop().await.unwrap();
    let spent = backend.broker.api_calls() - before;

    // Backoff from 1 s doubling, jittered down to half: attempts near 0, 1, 3, 7 and 15 s at the
    // latest, so 4 to 6 attempts cover a 10 s outage. Without backoff it would be hundreds.
    let attempts = log.lock().unwrap().len();
    assert!(
        (3..=7).contains(&attempts),
        "{attempts} attempts: {spent:?}"
    );
    assert!(
        spent.change_message_visibility_batch <= 8,
        "one visibility change per retry: {spent:?}"
    );
    assert_eq!(backend.left(&url).await, (0, 0, 0), "handled and deleted");
}

async fn shutdown_with_a_long_poll_in_flight_leaves_no_message_hidden<T: Transport + Clone>(
    backend: Backend<T>,
) {
    let backend = backend.recorded();
    // One handler slot and two pollers receiving one message each: one runs, the other waits for
    // the slot, and the next long poll is in flight, empty, when shutdown comes. The running one
    // (7 s) outlasts the first half of the 10 s budget, in which the stop still starts held
    // messages, so the waiting one is given back. The long poll (20 s) outlasts the budget: the
    // stop gives it up to end in time, and a server that goes on with it (LocalStack) hands it
    // the message released, hidden for the receive's visibility (10 s), not the queue's 60 s.
    let queue = SqsQueue::new(backend.name("poll-at-shutdown"))
        .create_if_missing()
        .concurrency(1)
        .batch_size(1)
        .pollers(2)
        .wait(Duration::from_secs(20))
        .visibility_timeout(Duration::from_secs(60));
    let publisher = backend.broker.publisher(queue.clone());
    for n in 1..=2 {
        publisher.message(&Job::new("-", n)).send().await.unwrap();
    }
    let started = Arc::new(AtomicU32::new(0));
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    // The handler is slow: it runs for 7 s of whichever clock the backend uses.
    let slow = SlowThen {
        inner: handler,
        started: started.clone(),
    };
    let running = service(
        &backend,
        Duration::from_secs(10),
        subscriber(queue.clone(), slow).build(),
    )
    .await;
    eventually("one running", async || started.load(Ordering::SeqCst) == 1).await;
    // Both messages are held and the next long poll has started.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stopping = Instant::now();
    running.stop().await.unwrap();
    let returned = Instant::now();
    // Within the 10 s budget, though the long poll had 19.5 s to go.
    assert!(
        returned - stopping <= Duration::from_secs(10) + Duration::from_millis(500),
        "the stop took {:?}",
        returned - stopping
    );
    let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
    let received_by_service = backend.transport.hooks().receipts();
    let (back, taken_by_the_poll_given_up) = released_and_back(&backend, &url, returned).await;
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "only one ran; the other waited for the slot"
    );
    // Every receive the service made of it was released: it comes with one receive more (and
    // one for the poll given up, if that took it).
    let by_service = received_by_service[&back[0].message_id].len();
    assert_eq!(
        back[0].receive_count(),
        Some(by_service as u32 + taken_by_the_poll_given_up + 1)
    );
    let back: Vec<Job> = back
        .iter()
        .map(|m| serde_json::from_str(&m.body).unwrap())
        .collect();
    // A standard queue hands them out in no set order: the one that comes back is the one that
    // did not run.
    let ran = jobs(&log)[0].n;
    assert_eq!(
        back,
        [Job::new("-", 3 - ran)],
        "the waiting message is visible again within the receive's visibility, not hidden for its 60 s visibility timeout"
    );
}

/// Checks that right after a stop returned (at `returned`) the queue at `url` holds one message,
/// released by the stop: visible, or in flight because a long poll the stop gave up took it at
/// the server (LocalStack goes on with one; the account's takes nothing once given up); and that
/// it is visible again within the receive's visibility, far under the queue's 60 s. Returns it,
/// and 1 when the poll given up took it (a receive more), else 0.
async fn released_and_back<T: Transport>(
    backend: &Backend<T>,
    url: &str,
    returned: Instant,
) -> (Vec<ReceivedMessage>, u32) {
    let (visible, in_flight, delayed) = backend.left(url).await;
    assert_eq!(
        (visible + in_flight, delayed),
        (1, 0),
        "right after run returned, the message the stop released is the one left"
    );
    let taken_by_the_poll_given_up = u32::from(in_flight == 1);
    if backend.kind == Kind::InProcess {
        assert_eq!(taken_by_the_poll_given_up, 0, "visible at once");
    }
    // Room for a loaded machine.
    let patience = rust_stream::RECEIVE_VISIBILITY_TIMEOUT + Duration::from_secs(5);
    let mut back = Vec::new();
    while back.is_empty() && returned.elapsed() < patience {
        back = backend.drain(url, 1).await;
    }
    assert_eq!(
        back.len(),
        1,
        "visible again {:?} after run returned, not after the 60 s visibility timeout: {back:?}",
        returned.elapsed()
    );
    (back, taken_by_the_poll_given_up)
}

/// A handler that counts its calls, works for 7 s, then lets the scripted one answer.
struct SlowThen<H> {
    inner: H,
    started: Arc<AtomicU32>,
}

impl<H: Handle<Job>> Handle<Job> for SlowThen<H> {
    async fn handle(
        &self,
        job: &Job,
        outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.started.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(7)).await;
        self.inner.handle(job, outs, ctx).await
    }
}

async fn a_handler_outliving_the_shutdown_timeout_is_not_running_when_run_returns<
    T: Transport + Clone,
>(
    backend: Backend<T>,
) {
    let backend = backend.recorded();
    let queue = SqsQueue::new(backend.name("overrun"))
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(60));
    backend
        .broker
        .publisher(queue.clone())
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    /// Set while the handler's future is alive; cleared when it is dropped (cancelled) or done.
    struct Endless {
        running: Arc<AtomicBool>,
        finished: Arc<AtomicBool>,
    }
    struct Alive(Arc<AtomicBool>);
    impl Drop for Alive {
        fn drop(&mut self) {
            self.0.store(false, Ordering::SeqCst);
        }
    }
    impl Handle<Job> for Endless {
        async fn handle(&self, _: &Job, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
            self.running.store(true, Ordering::SeqCst);
            let _alive = Alive(self.running.clone());
            tokio::time::sleep(Duration::from_secs(3600)).await;
            self.finished.store(true, Ordering::SeqCst);
            Ok(())
        }
    }
    let running_flag = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let handler = Endless {
        running: running_flag.clone(),
        finished: finished.clone(),
    };
    let running = service(
        &backend,
        Duration::from_secs(2),
        subscriber(queue.clone(), handler).build(),
    )
    .await;
    eventually("the handler runs", async || {
        running_flag.load(Ordering::SeqCst)
    })
    .await;
    let stopping = Instant::now();
    running.stop().await.unwrap();
    let returned = Instant::now();
    assert!(
        !running_flag.load(Ordering::SeqCst),
        "the handler was cancelled before run returned"
    );
    assert!(!finished.load(Ordering::SeqCst));
    // Within the 2 s budget, though a 20 s long poll was in flight.
    assert!(
        returned - stopping <= Duration::from_millis(2500),
        "the stop took {:?}",
        returned - stopping
    );
    let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
    let received_by_service = backend.transport.hooks().receipts();
    let (back, taken_by_the_poll_given_up) = released_and_back(&backend, &url, returned).await;
    // The stop gives up the long poll before it releases the message, so the service received it
    // once; the poll given up may take it at the server (one receive more, not the service's).
    let by_service = received_by_service[&back[0].message_id].len();
    assert_eq!(by_service, 1);
    assert_eq!(
        back[0].receive_count(),
        Some(by_service as u32 + taken_by_the_poll_given_up + 1)
    );
}

async fn dead_letter_works_on_a_queue_that_already_exists_without_a_redrive_policy<T: Transport>(
    backend: Backend<T>,
) {
    // Both queues exist before the service starts, and the source has no RedrivePolicy: only the
    // subscription's `.dead_letter(..)` says where failed messages go, and after how many attempts.
    let dlq_url = backend.queue("existing-dlq", &[]).await;
    backend.queue("existing", &[]).await;
    let queue = SqsQueue::new(backend.name("existing"))
        .dead_letter(backend.name("existing-dlq"), 2)
        .retry(quick_retries());
    backend
        .broker
        .publisher(queue.clone())
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    let (handler, log) = Scripted::new(|_, _| Err(HandlerOutcome::retry()));
    let sub = subscriber(queue.clone(), handler).build();
    let running = service(&backend, Duration::from_secs(10), sub).await;
    let mut dead = Vec::new();
    for _ in 0..30 {
        dead = backend.drain(&dlq_url, 1).await;
        if !dead.is_empty() {
            break;
        }
    }
    running.stop().await.unwrap();
    assert_eq!(
        dead.len(),
        1,
        "dead-lettered by the subscription's declaration"
    );
    assert_eq!(attribute(&dead[0], ATTEMPTS_HEADER).as_deref(), Some("2"));
    assert_eq!(
        calls(&log),
        [(1, 1), (1, 2)],
        "two attempts on a standard queue: two receives"
    );
    let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
    assert_eq!(backend.left(&url).await, (0, 0, 0));
}
