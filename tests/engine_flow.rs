//! The engine's flow of messages: the bounded pipeline and handler concurrency, settlement
//! batching and per-entry failures, visibility extension (FIFO lanes and the 12-hour cap
//! included), graceful shutdown, and backing off a failing receive. Every test runs a service on
//! the in-process account on a paused clock.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::attributes;
use common::engine::{Faulty, Job};
use common::recording::Recorder;
use rust_stream::account::{Account, QueueCounts};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, eventually_within, TestApp};
use rust_stream::transport::{ReceiveMessage, ReceivedMessage, SendMessage};
use rust_stream::{Service, Subscriber};
use tokio::sync::Semaphore;
use tokio::time::{sleep, Instant};

const fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

const HOUR: u64 = 3600;

/// How long one handler call holds its message.
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// Until the test opens the gate for it ([`Probe::open`]).
    Gate,
    /// For this long of tokio time.
    For(Duration),
    /// For this long, blocking its thread (as a handler that computes does).
    Block(Duration),
}

/// One handler call as the handler saw it.
#[derive(Debug, Clone)]
struct Call {
    job: Job,
    message_id: String,
    receive_count: u32,
    started: Instant,
}

/// What the test sees of a [`Slow`] handler: its calls, how many run now and at most at once.
#[derive(Debug)]
struct Probe {
    calls: Mutex<Vec<Call>>,
    running: AtomicUsize,
    most: AtomicUsize,
    finished: AtomicUsize,
    gate: Semaphore,
}

impl Probe {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn started(&self) -> usize {
        self.calls.lock().unwrap().len()
    }

    fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }

    fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }

    /// Lets `n` gated handler calls return.
    fn open(&self, n: usize) {
        self.gate.add_permits(n);
    }

    /// The job numbers handled, sorted.
    fn numbers(&self) -> Vec<u32> {
        let mut numbers: Vec<u32> = self.calls().iter().map(|call| call.job.n).collect();
        numbers.sort_unstable();
        numbers
    }
}

/// A handler that holds each message as `hold` says (by job and receive count), then acks.
struct Slow<F> {
    probe: Arc<Probe>,
    hold: F,
}

fn slow<F>(hold: F) -> (Slow<F>, Arc<Probe>)
where
    F: Fn(&Job, u32) -> Hold + Send + Sync + 'static,
{
    let probe = Arc::new(Probe {
        calls: Mutex::default(),
        running: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        gate: Semaphore::new(0),
    });
    (
        Slow {
            probe: probe.clone(),
            hold,
        },
        probe,
    )
}

impl<F> Handle<Job> for Slow<F>
where
    F: Fn(&Job, u32) -> Hold + Send + Sync + 'static,
{
    async fn handle(
        &self,
        job: &Job,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let probe = &self.probe;
        probe.calls.lock().unwrap().push(Call {
            job: job.clone(),
            message_id: ctx.message_id().to_owned(),
            receive_count: ctx.sqs().receive_count(),
            started: Instant::now(),
        });
        let now = probe.running.fetch_add(1, Ordering::SeqCst) + 1;
        probe.most.fetch_max(now, Ordering::SeqCst);
        match (self.hold)(job, ctx.sqs().receive_count()) {
            Hold::Gate => probe.gate.acquire().await.expect("never closed").forget(),
            Hold::For(duration) => sleep(duration).await,
            Hold::Block(duration) => std::thread::sleep(duration),
        }
        probe.running.fetch_sub(1, Ordering::SeqCst);
        probe.finished.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn body(job: &Job) -> String {
    serde_json::to_string(job).unwrap()
}

/// Creates a standard queue holding jobs `0..jobs` of group "s".
async fn standard_queue(account: &Account, name: &str, jobs: u32) -> String {
    let url = account.create_standard_queue(name).await.unwrap();
    for n in 0..jobs {
        account
            .send_message(&url, SendMessage::new(body(&Job::new("s", n))))
            .await
            .unwrap();
    }
    url
}

/// Creates a FIFO queue holding jobs `0..jobs` of each group, in order.
async fn fifo_queue(account: &Account, name: &str, groups: &[&str], jobs: u32) -> String {
    let url = account
        .create_queue(name, attributes(&[("FifoQueue", "true")]))
        .await
        .unwrap();
    for n in 0..jobs {
        for group in groups {
            let message = SendMessage::new(body(&Job::new(group, n)))
                .group_id(*group)
                .dedup_id(format!("{group}-{n}"));
            account.send_message(&url, message).await.unwrap();
        }
    }
    url
}

fn service(broker: SqsBroker, shutdown_timeout: Duration, sub: Subscriber) -> Service<SqsBroker> {
    RustStream::new(AppInfo::new("flow", "0"))
        .shutdown_timeout(shutdown_timeout)
        .with_broker(broker, |b| {
            b.include(sub);
        })
}

async fn counts(account: &Account, url: &str) -> QueueCounts {
    account.counts(url).await.unwrap()
}

async fn is_empty(account: &Account, url: &str) -> bool {
    let counts = counts(account, url).await;
    counts.visible + counts.in_flight + counts.delayed == 0
}

/// Waits, in 10 ms steps of tokio time, until the queue holds no message at all.
async fn until_empty(account: &Account, url: &str) {
    for _ in 0..60_000 {
        if is_empty(account, url).await {
            return;
        }
        sleep(Duration::from_millis(10)).await;
    }
    panic!("the queue never emptied: {:?}", counts(account, url).await);
}

// 1. The bounded pipeline.

#[tokio::test(start_paused = true)]
async fn a_blocked_pipeline_holds_no_more_than_concurrency_plus_a_batch_per_poller() {
    const CONCURRENCY: usize = 3;
    const BATCH: usize = 5;
    const POLLERS: usize = 2;
    const BOUND: usize = CONCURRENCY + POLLERS * BATCH;
    let account = Account::new();
    let url = standard_queue(&account, "pipeline", 60).await;
    let (handler, probe) = slow(|_, _| Hold::Gate);
    let sub = subscriber("pipeline", handler)
        .concurrency(CONCURRENCY)
        .batch_size(BATCH)
        .pollers(POLLERS)
        .build();
    let running = TestApp::spawn(service(SqsBroker::with_account(&account), secs(30), sub))
        .await
        .expect("the app starts");

    // Everything blocked for two minutes, several visibility timeouts of the queue's 30 s.
    let mut most_in_flight = 0;
    for _ in 0..12 {
        sleep(secs(10)).await;
        let in_flight = counts(&account, &url).await.in_flight;
        most_in_flight = most_in_flight.max(in_flight);
        assert!(in_flight <= BOUND, "{in_flight} in flight, bound {BOUND}");
        assert_eq!(probe.running(), CONCURRENCY, "handlers running");
    }
    assert!(
        most_in_flight > CONCURRENCY,
        "the pollers prefetch beyond the running handlers: {most_in_flight}"
    );
    assert_eq!(probe.started(), CONCURRENCY, "no handler started twice");

    // One handler at a time returns; the pipeline refills but never past the bound.
    for _ in 0..60 {
        probe.open(1);
        sleep(Duration::from_millis(200)).await;
        let in_flight = counts(&account, &url).await.in_flight;
        assert!(in_flight <= BOUND, "{in_flight} in flight, bound {BOUND}");
        assert!(probe.running() <= CONCURRENCY);
    }
    eventually("60 jobs finished", async || probe.finished() == 60).await;
    until_empty(&account, &url).await;
    assert_eq!(probe.most(), CONCURRENCY);
    assert_eq!(
        probe.numbers(),
        (0..60).collect::<Vec<_>>(),
        "each job once"
    );
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_subscription_runs_exactly_its_concurrency_of_handlers_at_once() {
    let account = Account::new();
    let url = standard_queue(&account, "busy", 40).await;
    let (handler, probe) = slow(|_, _| Hold::For(secs(1)));
    // Three pollers prefetch up to 34 messages: far more than may run.
    let sub = subscriber("busy", handler)
        .concurrency(4)
        .pollers(3)
        .build();
    let running = TestApp::spawn(service(SqsBroker::with_account(&account), secs(30), sub))
        .await
        .expect("the app starts");
    eventually("40 jobs finished", async || probe.finished() == 40).await;
    until_empty(&account, &url).await;
    assert_eq!(probe.most(), 4, "handlers at once");
    assert_eq!(
        probe.numbers(),
        (0..40).collect::<Vec<_>>(),
        "each job once"
    );
    running.stop().await.unwrap();
}

/// A standard receive's messages share a task once its handlers have shown themselves quick, yet
/// a new consumer's handlers that block their thread still run on every core: the two messages of
/// its first receive, each blocking for half a second, run at once on a runtime of two worker
/// threads. In real time:
/// the paused clock runs on one thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receives_handlers_that_block_their_thread_run_at_once_on_two_worker_threads() {
    let account = Account::new();
    let url = standard_queue(&account, "compute", 2).await;
    let (handler, probe) = slow(|_, _| Hold::Block(Duration::from_millis(500)));
    let recorder = Recorder::default();
    let broker = SqsBroker::with_transport(recorder.over(account.clone()));
    // One poller: both messages come in one receive.
    let sub = subscriber("compute", handler).pollers(1).build();
    let running = TestApp::spawn(service(broker, secs(30), sub))
        .await
        .expect("the app starts");
    until_empty(&account, &url).await;
    running.stop().await.unwrap();
    assert_eq!(probe.numbers(), [0, 1], "each message handled once");
    assert_eq!(
        probe.most(),
        2,
        "the two handlers ran one after the other, not at once"
    );
    assert_eq!(
        recorder.received_more_than_once(),
        0,
        "messages received twice"
    );
}

/// The same on FIFO: a new consumer's first receive brings two groups, whose handlers block their
/// thread for half a second each; the two groups' lanes run at once on a runtime of two worker
/// threads, not one after the other in the poller's task. In real time, as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_fifo_groups_whose_handlers_block_their_thread_run_at_once_on_two_worker_threads() {
    let account = Account::new();
    let url = fifo_queue(&account, "compute.fifo", &["a", "b"], 1).await;
    let (handler, probe) = slow(|_, _| Hold::Block(Duration::from_millis(500)));
    // One poller: both groups come in one receive.
    let sub = subscriber("compute.fifo", handler).pollers(1).build();
    let running = TestApp::spawn(service(SqsBroker::with_account(&account), secs(30), sub))
        .await
        .expect("the app starts");
    until_empty(&account, &url).await;
    running.stop().await.unwrap();
    assert_eq!(probe.finished(), 2, "each group's message handled");
    assert_eq!(
        probe.most(),
        2,
        "the two groups' handlers ran one after the other, not at once"
    );
}

// 2. Settlement batching and per-entry failures.

#[tokio::test(start_paused = true)]
async fn acking_a_hundred_messages_takes_about_ten_delete_calls() {
    let account = Account::new();
    let url = standard_queue(&account, "acks", 100).await;
    let broker = SqsBroker::with_account(&account);
    let (handler, probe) = slow(|_, _| Hold::For(Duration::ZERO));
    let sub = subscriber("acks", handler).build();
    let running = TestApp::spawn(service(broker.clone(), secs(30), sub))
        .await
        .expect("the app starts");
    eventually("100 jobs finished", async || probe.finished() == 100).await;
    until_empty(&account, &url).await;
    running.stop().await.unwrap();
    let calls = broker.api_calls();
    assert!(
        (10..=15).contains(&calls.delete_message_batch),
        "100 deletes in batches of up to 10: {calls:?}"
    );
    assert_eq!(probe.started(), 100);
}

#[tokio::test(start_paused = true)]
async fn a_delete_waits_out_the_broker_linger_for_company() {
    let account = Account::new();
    let url = standard_queue(&account, "linger", 3).await;
    // The longest linger a broker takes.
    let broker = SqsBroker::with_account(&account).batch_linger(secs(1));
    let (handler, probe) = slow(|_, _| Hold::For(Duration::ZERO));
    let sub = subscriber("linger", handler).build();
    let running = TestApp::spawn(service(broker.clone(), secs(30), sub))
        .await
        .expect("the app starts");
    eventually("3 jobs finished", async || probe.finished() == 3).await;
    let acked = Instant::now();

    sleep(Duration::from_millis(500)).await;
    assert_eq!(
        broker.api_calls().delete_message_batch,
        0,
        "still lingering"
    );
    assert_eq!(counts(&account, &url).await.in_flight, 3);

    until_empty(&account, &url).await;
    let waited = acked.elapsed();
    assert!(waited >= Duration::from_millis(900), "{waited:?}");
    assert!(waited <= Duration::from_millis(1100), "{waited:?}");
    assert_eq!(
        broker.api_calls().delete_message_batch,
        1,
        "one call for all"
    );
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn deletes_failing_on_the_service_side_are_retried_until_they_succeed() {
    let account = Account::new();
    let url = standard_queue(&account, "flaky", 10).await;
    let faulty = Faulty::default();
    // Every entry of the first call fails, and two of the second.
    faulty.transient_delete_failures.store(12, Ordering::SeqCst);
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let (handler, probe) = slow(|_, _| Hold::For(Duration::ZERO));
    let sub = subscriber("flaky", handler)
        .visibility_timeout(secs(10))
        .build();
    let running = TestApp::spawn(service(broker.clone(), secs(30), sub))
        .await
        .expect("the app starts");
    until_empty(&account, &url).await;
    // Several visibility timeouts later, nothing came back.
    sleep(secs(60)).await;
    running.stop().await.unwrap();

    assert_eq!(faulty.transient_delete_failures.load(Ordering::SeqCst), 0);
    assert!(broker.api_calls().delete_message_batch >= 2, "retried");
    assert_eq!(
        probe.numbers(),
        (0..10).collect::<Vec<_>>(),
        "each job once"
    );
    assert!(probe.calls().iter().all(|call| call.receive_count == 1));
}

/// Runs a consumer of `messages` messages on queue `name` (one poller when `one_poller`) whose
/// first `messages` delete entries fail for good, until every message was handled twice and the
/// queue is empty, a minute more, and the stop; answers the handler's probe and the broker.
async fn deletes_failing_for_good(
    name: &str,
    messages: u32,
    one_poller: bool,
) -> (Arc<Probe>, SqsBroker) {
    let account = Account::new();
    let url = standard_queue(&account, name, messages).await;
    let faulty = Faulty::default();
    faulty
        .permanent_delete_failures
        .store(messages as usize, Ordering::SeqCst);
    let (handler, probe) = slow(|_, _| Hold::For(Duration::ZERO));
    let mut sub = subscriber(name, handler).visibility_timeout(secs(10));
    if one_poller {
        sub = sub.pollers(1);
    }
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let running = TestApp::spawn(service(broker.clone(), secs(30), sub.build()))
        .await
        .expect("the app starts");
    eventually("handled twice", async || {
        probe.started() == 2 * messages as usize
    })
    .await;
    until_empty(&account, &url).await;
    sleep(secs(60)).await;
    running.stop().await.unwrap();
    assert_eq!(faulty.permanent_delete_failures.load(Ordering::SeqCst), 0);
    (probe, broker)
}

#[tokio::test(start_paused = true)]
async fn a_delete_that_fails_for_good_leaves_the_message_to_come_back_and_be_handled_again() {
    let (probe, _) = deletes_failing_for_good("stubborn", 1, false).await;
    let calls = probe.calls();
    assert_eq!(calls.len(), 2, "not lost, and handled no third time");
    assert_eq!(calls[0].receive_count, 1);
    assert_eq!(calls[1].receive_count, 2);
    let gap = calls[1].started - calls[0].started;
    assert!(
        gap >= secs(10),
        "back after its visibility timeout: {gap:?}"
    );
}

/// A receive whose ten messages settle at once makes its delete call from its own task (no
/// hand-over to the deleter): when that call fails for good, every message still comes back after
/// its visibility timeout and is handled again, once.
#[tokio::test(start_paused = true)]
async fn a_full_receives_delete_that_fails_for_good_leaves_every_message_to_come_back() {
    let (probe, broker) = deletes_failing_for_good("stubborn-ten", 10, true).await;
    let calls = probe.calls();
    assert_eq!(calls.len(), 20, "not lost, and handled no third time");
    for number in 0..10 {
        let counts: Vec<u32> = calls
            .iter()
            .filter(|call| call.job.n == number)
            .map(|call| call.receive_count)
            .collect();
        assert_eq!(counts, [1, 2], "message {number}");
    }
    assert_eq!(
        broker.api_calls().delete_message_batch,
        2,
        "one full call a receive"
    );
}

// 3. Visibility extension.

#[tokio::test(start_paused = true)]
async fn a_handler_slower_than_half_its_visibility_timeout_keeps_its_message() {
    let account = Account::new();
    let url = standard_queue(&account, "slow", 1).await;
    let recording = Recorder::default();
    let broker = SqsBroker::with_transport(recording.over(account.clone()));
    let (handler, probe) = slow(|_, _| Hold::For(secs(35)));
    let sub = subscriber("slow", handler)
        .visibility_timeout(secs(10))
        .build();
    let running = TestApp::spawn(service(broker.clone(), secs(30), sub))
        .await
        .expect("the app starts");
    eventually_within("handled", Duration::from_secs(3600), async || {
        probe.finished() == 1
    })
    .await;
    until_empty(&account, &url).await;

    let calls = probe.calls();
    assert_eq!(calls.len(), 1, "not redelivered while running");
    assert_eq!(calls[0].receive_count, 1);
    let extended = recording.visibility_changes_of(&calls[0].message_id);
    // 35 s in 10 s windows: at least three extensions.
    assert!(extended.len() >= 3, "{extended:?}");
    assert!(extended.iter().all(|&(seconds, ok)| ok && seconds == 10));

    let settled = broker.api_calls();
    sleep(secs(300)).await;
    assert_eq!(
        broker.api_calls().change_message_visibility_batch,
        settled.change_message_visibility_batch
    );
    assert_eq!(probe.started(), 1);
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_held_rest_of_a_fifo_group_is_extended_behind_its_slow_message() {
    let account = Account::new();
    let url = fifo_queue(&account, "lane.fifo", &["g"], 4).await;
    let recording = Recorder::default();
    let (handler, probe) =
        slow(|job, _| Hold::For(if job.n == 0 { secs(35) } else { Duration::ZERO }));
    let sub = subscriber("lane.fifo", handler)
        .visibility_timeout(secs(10))
        .build();
    let running = TestApp::spawn(service(
        SqsBroker::with_transport(recording.over(account.clone())),
        secs(30),
        sub,
    ))
    .await
    .expect("the app starts");
    eventually_within("4 jobs finished", Duration::from_secs(3600), async || {
        probe.finished() == 4
    })
    .await;
    until_empty(&account, &url).await;
    sleep(secs(120)).await;
    running.stop().await.unwrap();

    let calls = probe.calls();
    let order: Vec<u32> = calls.iter().map(|call| call.job.n).collect();
    assert_eq!(order, [0, 1, 2, 3], "in order, each once");
    assert!(
        calls.iter().all(|call| call.receive_count == 1),
        "{calls:?}"
    );
    for call in &calls[1..] {
        let extended = recording.visibility_changes_of(&call.message_id);
        assert!(
            extended.len() >= 3,
            "job {} waited 35 s behind job 0: {extended:?}",
            call.job.n
        );
    }
    assert_eq!(recording.failed_visibility_changes(), 0);
}

#[tokio::test(start_paused = true)]
async fn no_visibility_change_reaches_a_message_after_it_is_settled() {
    let account = Account::new();
    let url = standard_queue(&account, "settled", 10).await;
    let recording = Recorder::default();
    let broker = SqsBroker::with_transport(recording.over(account.clone()));
    // Handlers end at staggered times, between heartbeats and on them.
    let (handler, probe) = slow(|job, _| Hold::For(Duration::from_millis(1500) * job.n));
    let sub = subscriber("settled", handler)
        .visibility_timeout(secs(4))
        .build();
    let running = TestApp::spawn(service(broker.clone(), secs(30), sub))
        .await
        .expect("the app starts");
    eventually("10 jobs finished", async || probe.finished() == 10).await;
    until_empty(&account, &url).await;
    let settled = broker.api_calls();
    sleep(secs(300)).await;
    running.stop().await.unwrap();

    assert!(
        settled.change_message_visibility_batch > 0,
        "slow handlers were extended"
    );
    assert_eq!(
        broker.api_calls().change_message_visibility_batch,
        settled.change_message_visibility_batch,
        "no extension once all are acked"
    );
    assert_eq!(recording.visibility_changes_after_delete(), []);
    assert_eq!(recording.failed_visibility_changes(), 0);
    assert_eq!(
        probe.numbers(),
        (0..10).collect::<Vec<_>>(),
        "each job once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_handler_past_the_twelve_hour_cap_sees_its_message_delivered_again() {
    let account = Account::new();
    let url = standard_queue(&account, "marathon", 1).await;
    let recording = Recorder::default();
    let (handler, probe) = slow(|_, receive_count| {
        Hold::For(if receive_count == 1 {
            secs(13 * HOUR)
        } else {
            Duration::ZERO
        })
    });
    let sub = subscriber("marathon", handler)
        .visibility_timeout(secs(HOUR))
        .build();
    let running = TestApp::spawn(service(
        SqsBroker::with_transport(recording.over(account.clone())),
        secs(30),
        sub,
    ))
    .await
    .expect("the app starts");
    eventually("started", async || probe.started() == 1).await;
    sleep(secs(13 * HOUR + 60)).await;
    until_empty(&account, &url).await;
    running.stop().await.unwrap();

    let calls = probe.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert_eq!(calls[1].receive_count, 2);
    let gap = calls[1].started - calls[0].started;
    assert!(
        gap >= secs(12 * HOUR - 60) && gap <= secs(12 * HOUR + 60),
        "delivered again when the cap ends: {gap:?}"
    );
    assert_eq!(probe.finished(), 2);
    // Extended up to the cap, never past it (SQS would refuse).
    let extended = recording.visibility_changes_of(&calls[0].message_id);
    assert!(extended.len() >= 20, "{}", extended.len());
    assert_eq!(recording.failed_visibility_changes(), 0);
}

// 4. Graceful shutdown.

#[tokio::test(start_paused = true)]
async fn stopping_lets_a_running_handler_finish_and_acks_its_message() {
    let account = Account::new();
    let url = standard_queue(&account, "finish", 1).await;
    let (handler, probe) = slow(|_, _| Hold::For(secs(10)));
    let sub = subscriber("finish", handler).build();
    let running = TestApp::spawn(service(SqsBroker::with_account(&account), secs(30), sub))
        .await
        .expect("the app starts");
    eventually("started", async || probe.started() == 1).await;
    let asked = Instant::now();
    running.stop().await.unwrap();
    let took = asked.elapsed();

    assert!(
        took >= Duration::from_millis(9900) && took < secs(30),
        "{took:?}"
    );
    assert_eq!(probe.finished(), 1);
    assert!(is_empty(&account, &url).await, "acked and deleted");
}

#[tokio::test(start_paused = true)]
async fn a_stop_starts_prefetched_messages_for_half_its_budget_and_then_releases_the_rest() {
    let account = Account::new();
    let url = standard_queue(&account, "prefetched", 5).await;
    let (handler, probe) = slow(|_, _| Hold::For(secs(10)));
    let sub = subscriber("prefetched", handler).concurrency(1).build();
    let running = TestApp::spawn(service(SqsBroker::with_account(&account), secs(30), sub))
        .await
        .expect("the app starts");
    eventually("started", async || probe.started() == 1).await;
    assert_eq!(counts(&account, &url).await.in_flight, 5, "all prefetched");

    let asked = Instant::now();
    let stop = tokio::spawn(running.stop());
    // The first ends at 10 s, and the second starts: within the first half (15 s) of the budget.
    sleep(secs(14)).await;
    assert_eq!(
        probe.started(),
        2,
        "a held message starts while the stop lets it"
    );
    let during = counts(&account, &url).await;
    assert_eq!(
        (during.visible, during.in_flight),
        (0, 4),
        "nothing given back yet"
    );

    stop.await.unwrap().unwrap();
    let took = asked.elapsed();
    assert!(
        took >= secs(19) && took <= secs(21),
        "the second finished: {took:?}"
    );
    let after = counts(&account, &url).await;
    assert_eq!(
        (after.visible, after.in_flight),
        (3, 0),
        "the rest released"
    );
    assert_eq!(
        probe.started(),
        2,
        "nothing started after the first half of the budget"
    );
    assert_eq!(probe.finished(), 2);
    let left = account
        .receive_message(&url, ReceiveMessage::new(10))
        .await
        .unwrap();
    // Received once by the service, now a second time.
    let receive_counts: Vec<_> = left.iter().map(ReceivedMessage::receive_count).collect();
    assert_eq!(receive_counts, [Some(2); 3]);
}

#[tokio::test(start_paused = true)]
async fn a_stop_starts_held_fifo_messages_only_in_the_first_half_of_its_budget_and_in_order() {
    let groups = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let account = Account::new();
    let url = fifo_queue(&account, "groups.fifo", &groups, 3).await;
    let (handler, probe) = slow(|_, _| Hold::For(secs(10)));
    let sub = subscriber("groups.fifo", handler)
        .concurrency(groups.len())
        .pollers(3)
        .build();
    let running = TestApp::spawn(service(SqsBroker::with_account(&account), secs(30), sub))
        .await
        .expect("the app starts");
    eventually("every group started", async || {
        probe.started() == groups.len()
    })
    .await;
    let held = counts(&account, &url).await.in_flight;
    assert!(
        held > groups.len(),
        "later messages wait in their lanes: {held}"
    );
    let asked = Instant::now();
    running.stop().await.unwrap();

    let calls = probe.calls();
    // The first messages end at 10 s and the second ones of the held groups start then; the third
    // ones would start at 20 s, past the first half of the 30 s budget.
    assert!(
        calls.iter().all(|call| call.started <= asked + secs(15)),
        "{calls:?}"
    );
    assert!(probe.started() > groups.len(), "{calls:?}");
    assert!(calls.iter().all(|call| call.job.n < 2), "{calls:?}");
    assert_eq!(
        probe.finished(),
        probe.started(),
        "every started one finished"
    );
    for group in groups {
        let order: Vec<u32> = calls
            .iter()
            .filter(|call| call.job.group == group)
            .map(|call| call.job.n)
            .collect();
        assert_eq!(
            order,
            (0..order.len() as u32).collect::<Vec<_>>(),
            "{group}"
        );
    }
    let after = counts(&account, &url).await;
    assert_eq!(
        (after.visible, after.in_flight),
        (24 - probe.finished(), 0),
        "the rest released"
    );
}

#[tokio::test(start_paused = true)]
async fn a_handler_outliving_the_shutdown_timeout_is_cancelled_before_its_message_is_released() {
    let account = Account::new();
    let url = standard_queue(&account, "overrun", 1).await;
    let (handler, probe) = slow(|_, _| Hold::For(secs(60)));
    let sub = subscriber("overrun", handler)
        .visibility_timeout(secs(30))
        .build();
    let running = TestApp::spawn(service(SqsBroker::with_account(&account), secs(5), sub))
        .await
        .expect("the app starts");
    eventually("started", async || probe.started() == 1).await;
    let asked = Instant::now();
    running.stop().await.unwrap();
    let took = asked.elapsed();

    // The whole stop fits its 5 s budget: handlers are cancelled with a fifth of it left.
    assert!(took >= secs(4) && took <= secs(5), "{took:?}");
    let after = counts(&account, &url).await;
    assert_eq!((after.visible, after.in_flight), (1, 0), "released");
    // The handler was cancelled before its message was released: it never finishes, so it
    // cannot run beside another consumer's copy of the message, nor ack it.
    sleep(secs(90)).await;
    assert_eq!(probe.finished(), 0, "{:?}", probe.calls());
    assert_eq!(counts(&account, &url).await.visible, 1);
}

// 5. A failing receive.

#[tokio::test(start_paused = true)]
async fn a_failing_receive_backs_off_instead_of_spinning_and_recovers() {
    let account = Account::new();
    let url = standard_queue(&account, "vanishing", 0).await;
    let broker = SqsBroker::with_account(&account);
    let (handler, probe) = slow(|_, _| Hold::For(Duration::ZERO));
    let sub = subscriber("vanishing", handler).build();
    let running = TestApp::spawn(service(broker.clone(), secs(30), sub))
        .await
        .expect("the app starts");
    sleep(secs(1)).await;
    account.delete_queue(&url).await.unwrap();
    sleep(secs(1)).await;

    let before = broker.api_calls().receive_message;
    sleep(secs(60)).await;
    let failed = broker.api_calls().receive_message - before;
    assert!((1..=30).contains(&failed), "{failed} receives in 60 s");
    assert!(
        !running.is_finished(),
        "a failing receive does not stop the service"
    );

    // The name is free again a minute after the delete; the service picks the queue back up.
    let url = standard_queue(&account, "vanishing", 1).await;
    eventually("handled on the new queue", async || probe.finished() == 1).await;
    until_empty(&account, &url).await;
    running.stop().await.unwrap();
}
