//! The FIFO contract, end to end through handlers, on the in-process broker and a paused clock.
//!
//! Each group's messages are handled in the order sent, one at a time, while groups run in
//! parallel and a slow group holds up nobody. A failed message (retry, `retry_after`, a panic, a
//! failed dead-letter send or output) is retried in place after its backoff while the rest of its
//! group waits, held, never received again. Dead-lettered and undecodable messages, and messages
//! out of attempts, let their group go on; without a dead-letter queue an undecodable message
//! holds its group. A property test runs random scripts of outcomes over many groups and checks
//! every message ends exactly once and each group's order holds.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use common::engine::Job;
use proptest::prelude::*;
use rust_stream::account::Account;
use rust_stream::engine::transport::{ReceivedMessage, SendMessage};
use rust_stream::prelude::*;
use rust_stream::publish::Publisher;
use rust_stream::testing::{eventually, eventually_within, TestApp};
use rust_stream::{
    Subscriber, ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER, ORIGINAL_MESSAGE_ID_HEADER,
    SOURCE_QUEUE_HEADER,
};
use tokio::time::{sleep, Instant};

const QUEUE: &str = "jobs.fifo";
const DEAD_LETTERS: &str = "jobs-dlq.fifo";

// ---------------------------------------------------------------------------------------------
// A handler that works for a while, records what it saw, and settles as its script says.

/// How a scripted handler call ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Ack,
    Retry,
    RetryAfter(Duration),
    Panic,
    DeadLetter(String),
}

impl Step {
    fn is_final(&self) -> bool {
        matches!(self, Step::Ack | Step::DeadLetter(_))
    }
}

/// Which call of its message this is.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    /// 1 for the handler's first call for this message id, 2 for the second, ...
    n: u32,
}

#[derive(Debug, Clone)]
enum Event {
    Start {
        job: Job,
        message_id: String,
        receive_count: u32,
        at: Instant,
    },
    End {
        job: Job,
        step: Step,
        at: Instant,
    },
}

#[derive(Debug, Default)]
struct Record {
    events: Vec<Event>,
    calls_by_message: HashMap<String, u32>,
    /// Handler calls running now, by group.
    running: HashMap<String, usize>,
    max_in_one_group: usize,
    max_groups_at_once: usize,
}

type Shared = Arc<Mutex<Record>>;

fn lock(record: &Shared) -> MutexGuard<'_, Record> {
    // A scripted panic never happens while the lock is held; a failed assertion may.
    record.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The record, once the service has stopped.
fn take(record: &Shared) -> Record {
    std::mem::take(&mut *lock(record))
}

/// Counts a call as running until it returns or unwinds.
struct Running {
    record: Shared,
    group: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut record = lock(&self.record);
        let count = record.running.get_mut(&self.group).expect("counted");
        *count -= 1;
        if *count == 0 {
            record.running.remove(&self.group);
        }
    }
}

/// Records each call, works for the scripted time (tokio time, so overlaps would show), then
/// settles as scripted. With `echo`, an ack of a call it picks also publishes the job there.
struct Probe<F> {
    record: Shared,
    script: F,
    echo: Option<(Publisher, Pick)>,
}

/// Which acks publish an echo.
type Pick = fn(&Job, Attempt) -> bool;

fn probe<F>(script: F) -> (Probe<F>, Shared)
where
    F: Fn(&Job, Attempt) -> (Duration, Step) + Send + Sync + 'static,
{
    let record = Shared::default();
    let probe = Probe {
        record: record.clone(),
        script,
        echo: None,
    };
    (probe, record)
}

impl<F> Handle<Job> for Probe<F>
where
    F: Fn(&Job, Attempt) -> (Duration, Step) + Send + Sync + 'static,
{
    async fn handle(
        &self,
        job: &Job,
        _outs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let attempt = {
            let mut record = lock(&self.record);
            let calls = record
                .calls_by_message
                .entry(ctx.message_id().to_owned())
                .or_default();
            *calls += 1;
            let n = *calls;
            let in_group = record.running.entry(job.group.clone()).or_default();
            *in_group += 1;
            let in_group = *in_group;
            record.max_in_one_group = record.max_in_one_group.max(in_group);
            record.max_groups_at_once = record.max_groups_at_once.max(record.running.len());
            record.events.push(Event::Start {
                job: job.clone(),
                message_id: ctx.message_id().to_owned(),
                receive_count: ctx.receive_count(),
                at: Instant::now(),
            });
            Attempt { n }
        };
        let _running = Running {
            record: self.record.clone(),
            group: job.group.clone(),
        };
        let (work, step) = (self.script)(job, attempt);
        sleep(work).await;
        lock(&self.record).events.push(Event::End {
            job: job.clone(),
            step: step.clone(),
            at: Instant::now(),
        });
        match step {
            Step::Ack => {
                if let Some((echo, pick)) = &self.echo {
                    if pick(job, attempt) {
                        ctx.publish(echo.message(job).group_id(&job.group));
                    }
                }
                Ok(())
            }
            Step::Retry => Err(HandlerOutcome::retry()),
            Step::RetryAfter(delay) => Err(HandlerOutcome::retry_after(delay)),
            Step::DeadLetter(reason) => Err(HandlerOutcome::dead_letter(reason)),
            Step::Panic => panic!("scripted panic in {}/{}", job.group, job.n),
        }
    }
}

impl Record {
    /// `(n, receive_count)` of each call for `group`, in call order.
    fn calls(&self, group: &str) -> Vec<(u32, u32)> {
        self.events
            .iter()
            .filter_map(|event| match event {
                Event::Start {
                    job, receive_count, ..
                } if job.group == group => Some((job.n, *receive_count)),
                _ => None,
            })
            .collect()
    }

    /// When each call for `group` started, in call order.
    fn starts(&self, group: &str) -> Vec<(u32, Instant)> {
        self.events
            .iter()
            .filter_map(|event| match event {
                Event::Start { job, at, .. } if job.group == group => Some((job.n, *at)),
                _ => None,
            })
            .collect()
    }

    /// The jobs acknowledged, with when, in order.
    fn acked(&self) -> Vec<(Job, Instant)> {
        self.ended(|step| *step == Step::Ack)
    }

    fn ended(&self, which: impl Fn(&Step) -> bool) -> Vec<(Job, Instant)> {
        self.events
            .iter()
            .filter_map(|event| match event {
                Event::End { job, step, at } if which(step) => Some((job.clone(), *at)),
                _ => None,
            })
            .collect()
    }

    fn acked_in(&self, group: &str) -> Vec<u32> {
        self.acked()
            .into_iter()
            .filter(|(job, _)| job.group == group)
            .map(|(job, _)| job.n)
            .collect()
    }

    fn message_id(&self, wanted: &Job) -> String {
        self.events
            .iter()
            .find_map(|event| match event {
                Event::Start {
                    job, message_id, ..
                } if job == wanted => Some(message_id.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{wanted:?} was never handled"))
    }
}

// ---------------------------------------------------------------------------------------------
// Setting up and looking in.

async fn start(broker: &SqsBroker, subscriber: Subscriber) -> TestApp {
    let app = RustStream::new(AppInfo::new("engine-fifo", "0")).with_broker(broker.clone(), |b| {
        b.include(subscriber);
    });
    TestApp::spawn(app).await.expect("the app starts")
}

async fn send_jobs(publisher: &Publisher, jobs: impl IntoIterator<Item = Job>) {
    for job in jobs {
        publisher
            .message(&job)
            .group_id(&job.group)
            .send()
            .await
            .expect("send");
    }
}

fn group(name: &str, count: u32) -> impl Iterator<Item = Job> + '_ {
    (1..=count).map(move |n| Job::new(name, n))
}

fn body(job: &Job) -> String {
    serde_json::to_string(job).expect("a job encodes")
}

/// Waits, in steps of 50 ms of tokio time, until `condition` holds.
async fn until<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    for _ in 0..36_000 {
        if condition().await {
            return;
        }
        sleep(Duration::from_millis(50)).await;
    }
    panic!("waited 30 minutes of tokio time for {what}");
}

async fn is_empty(account: &Account, name: &str) -> bool {
    let url = account.get_queue_url(name).await.expect("queue exists");
    let counts = account.counts(&url).await.expect("counts");
    counts.visible + counts.in_flight + counts.delayed == 0
}

async fn visible(account: &Account, name: &str) -> usize {
    let url = account.get_queue_url(name).await.expect("queue exists");
    account.counts(&url).await.expect("counts").visible
}

/// Every message of a queue, received and deleted, in the order received.
async fn drain(account: &Account, name: &str) -> Vec<ReceivedMessage> {
    let url = account.get_queue_url(name).await.expect("queue exists");
    let mut all = Vec::new();
    loop {
        let batch = common::receive(account, &url, 10).await;
        if batch.is_empty() {
            return all;
        }
        common::delete_all(account, &url, &batch).await;
        all.extend(batch);
    }
}

fn reason(message: &ReceivedMessage) -> Option<&str> {
    message
        .message_attributes
        .get(DEAD_LETTER_REASON_HEADER)?
        .string_value
        .as_deref()
}

// ---------------------------------------------------------------------------------------------
// 1. Order, exclusivity and parallelism.

#[tokio::test(start_paused = true)]
async fn each_group_is_handled_in_order_one_message_at_a_time_while_groups_run_in_parallel() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE).create_if_missing();
    let publisher = broker.publisher(queue.clone());
    let groups = ["a", "b", "c", "d"];
    for n in 1..=6 {
        send_jobs(&publisher, groups.iter().map(|g| Job::new(g, n))).await;
    }
    let (handler, record) = probe(|_, _| (Duration::from_millis(200), Step::Ack));
    let running = start(&broker, subscriber(queue, handler).concurrency(3).build()).await;
    eventually("24 jobs acked", async || lock(&record).acked().len() == 24).await;
    running.stop().await.unwrap();

    let record = take(&record);
    for g in groups {
        assert_eq!(
            record.calls(g),
            (1..=6).map(|n| (n, 1)).collect::<Vec<_>>(),
            "group {g} is handled once each, in the order sent"
        );
    }
    assert_eq!(
        record.max_in_one_group, 1,
        "two calls of one group overlapped"
    );
    assert!(
        record.max_groups_at_once > 1,
        "groups never ran in parallel: at most {} at once",
        record.max_groups_at_once
    );
    assert!(
        record.max_groups_at_once <= 3,
        "concurrency 3 was exceeded: {} groups ran at once",
        record.max_groups_at_once
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_group_does_not_hold_up_the_others() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE).create_if_missing();
    let publisher = broker.publisher(queue.clone());
    // The slow group is sent first, so it is the oldest group of every receive.
    send_jobs(&publisher, group("slow", 3)).await;
    send_jobs(&publisher, group("fast-1", 5)).await;
    send_jobs(&publisher, group("fast-2", 5)).await;
    let (handler, record) = probe(|job, _| {
        let work = if job.group == "slow" { 60_000 } else { 100 };
        (Duration::from_millis(work), Step::Ack)
    });
    let began = Instant::now();
    let running = start(&broker, subscriber(queue, handler).concurrency(4).build()).await;
    eventually_within("13 jobs acked", Duration::from_secs(3600), async || {
        lock(&record).acked().len() == 13
    })
    .await;
    running.stop().await.unwrap();

    let record = take(&record);
    let acked = record.acked();
    let first_slow = acked
        .iter()
        .find(|(job, _)| job.group == "slow")
        .map(|(_, at)| *at)
        .expect("slow acked");
    let last_fast = acked
        .iter()
        .filter(|(job, _)| job.group != "slow")
        .map(|(_, at)| *at)
        .max()
        .expect("fast acked");
    assert!(
        last_fast < first_slow,
        "the fast groups waited for the slow one: last fast at {:?}, first slow at {:?}",
        last_fast - began,
        first_slow - began
    );
    assert!(
        last_fast - began < Duration::from_secs(3),
        "the fast groups took {:?}",
        last_fast - began
    );
    for g in ["slow", "fast-1", "fast-2"] {
        let count = if g == "slow" { 3 } else { 5 };
        assert_eq!(record.acked_in(g), (1..=count).collect::<Vec<_>>(), "{g}");
    }
    // 3 minutes of work on a 30 s visibility timeout: the heartbeat kept every message held.
    assert_eq!(
        record.calls("slow"),
        vec![(1, 1), (2, 1), (3, 1)],
        "a slow group's held messages timed out and came back"
    );
    assert_eq!(record.max_in_one_group, 1);
}

// ---------------------------------------------------------------------------------------------
// 2. A failure mid-batch releases the rest of the group with the failed message.

/// Sends g1..g5 and h1..h3 (one receive gets them all), runs until all are acked, and returns
/// the record and the `ChangeMessageVisibilityBatch` calls made.
async fn fail_g2_once(failure: Step) -> (Record, u64) {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE).create_if_missing();
    let publisher = broker.publisher(queue.clone());
    send_jobs(&publisher, group("g", 5)).await;
    send_jobs(&publisher, group("h", 3)).await;
    let (handler, record) = probe(move |job, attempt| {
        let step = if job.group == "g" && job.n == 2 && attempt.n == 1 {
            failure.clone()
        } else {
            Step::Ack
        };
        (Duration::from_millis(10), step)
    });
    let before = broker.api_calls().change_message_visibility_batch;
    let running = start(&broker, subscriber(queue, handler).batch_size(10).build()).await;
    until("all acked and deleted", || async {
        lock(&record).acked().len() == 8 && is_empty(&account, QUEUE).await
    })
    .await;
    let releases = broker.api_calls().change_message_visibility_batch - before;
    running.stop().await.unwrap();
    (take(&record), releases)
}

/// The starts of g2's first and second calls.
fn g2_retry_gap(record: &Record) -> Duration {
    let g2: Vec<Instant> = record
        .starts("g")
        .into_iter()
        .filter(|(n, _)| *n == 2)
        .map(|(_, at)| at)
        .collect();
    g2[1] - g2[0]
}

#[tokio::test(start_paused = true)]
async fn a_retried_message_is_retried_in_place_while_the_rest_of_its_group_waits_held() {
    let (record, releases) = fail_g2_once(Step::Retry).await;
    assert_eq!(
        record.calls("g"),
        vec![(1, 1), (2, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
        "g3..g5 wait for g2, which is retried in place: nothing is received again"
    );
    assert_eq!(record.acked_in("g"), vec![1, 2, 3, 4, 5]);
    assert_eq!(
        record.calls("h"),
        vec![(1, 1), (2, 1), (3, 1)],
        "another group of the same receive goes on"
    );
    assert_eq!(releases, 0, "nothing goes back to the queue");
    let gap = g2_retry_gap(&record);
    assert!(
        gap >= Duration::from_millis(500) && gap <= Duration::from_millis(1100),
        "the default backoff waits 0.5-1 s before the first retry: {gap:?}"
    );
    assert_eq!(record.max_in_one_group, 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_is_retried_in_place_and_the_service_goes_on() {
    let (record, releases) = fail_g2_once(Step::Panic).await;
    assert_eq!(
        record.calls("g"),
        vec![(1, 1), (2, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
    );
    assert_eq!(record.acked_in("g"), vec![1, 2, 3, 4, 5]);
    assert_eq!(record.acked_in("h"), vec![1, 2, 3]);
    assert_eq!(releases, 0);
    assert!(g2_retry_gap(&record) >= Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn a_panic_does_not_stop_the_service_from_taking_new_messages() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE).create_if_missing();
    let publisher = broker.publisher(queue.clone());
    let (handler, record) = probe(|job, attempt| {
        let step = if job.n % 2 == 0 && attempt.n == 1 {
            Step::Panic
        } else {
            Step::Ack
        };
        (Duration::from_millis(10), step)
    });
    let running = start(&broker, subscriber(queue, handler).build()).await;
    for n in 1..=6 {
        sleep(Duration::from_secs(1)).await;
        send_jobs(&publisher, [Job::new("g", n)]).await;
    }
    eventually("g1..g6 acked", async || lock(&record).acked().len() == 6).await;
    running.stop().await.unwrap();
    let record = take(&record);
    assert_eq!(record.acked_in("g"), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(record.max_in_one_group, 1);
    assert_eq!(
        record.ended(|step| *step == Step::Panic).len(),
        3,
        "each even job panicked once"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_holds_the_group_in_place_for_the_delay_while_other_groups_go_on() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE).create_if_missing();
    let publisher = broker.publisher(queue.clone());
    send_jobs(&publisher, group("g", 5)).await;
    let (handler, record) = probe(|job, attempt| {
        let step = if job.group == "g" && job.n == 2 && attempt.n == 1 {
            Step::RetryAfter(Duration::from_secs(30))
        } else {
            Step::Ack
        };
        (Duration::from_millis(10), step)
    });
    let before = broker.api_calls().change_message_visibility_batch;
    let running = start(&broker, subscriber(queue, handler).batch_size(10).build()).await;
    eventually("g2 asked to retry later", async || {
        !lock(&record)
            .ended(|step| matches!(step, Step::RetryAfter(_)))
            .is_empty()
    })
    .await;
    let failed_at = lock(&record).ended(|step| matches!(step, Step::RetryAfter(_)))[0].1;
    // Another group, sent during the delay, is handled at once.
    let mut sent_h = Vec::new();
    for n in 1..=5 {
        sleep(Duration::from_secs(5)).await;
        sent_h.push(Instant::now());
        send_jobs(&publisher, [Job::new("h", n)]).await;
    }
    eventually("g and h acked", async || lock(&record).acked().len() == 10).await;
    let releases = broker.api_calls().change_message_visibility_batch - before;
    running.stop().await.unwrap();

    let record = take(&record);
    assert_eq!(
        record.calls("g"),
        vec![(1, 1), (2, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
        "g2 waits in place; the rest of g is never received again"
    );
    let g_starts = record.starts("g");
    let back_at = g_starts[2].1;
    assert!(
        back_at >= failed_at + Duration::from_secs(30),
        "g2 came back {:?} after asking for 30 s",
        back_at - failed_at
    );
    assert!(
        back_at <= failed_at + Duration::from_secs(31),
        "g2 came back only {:?} after asking for 30 s",
        back_at - failed_at
    );
    for (n, at) in &g_starts[2..] {
        assert!(*at >= back_at, "g{n} was handled before g2 came back");
    }
    let h_starts = record.starts("h");
    assert_eq!(h_starts.len(), 5);
    for ((n, at), sent) in h_starts.iter().zip(&sent_h) {
        assert!(
            *at < failed_at + Duration::from_secs(30),
            "h{n} waited for g's delay"
        );
        assert!(
            *at - *sent < Duration::from_secs(1),
            "h{n} was handled {:?} after it was sent",
            *at - *sent
        );
    }
    // The only visibility changes are the heartbeat's: it keeps the held group from timing out
    // during the 30 s wait (visibility 30 s, extended when half is left), about every 15 s.
    assert!(
        (1..=3).contains(&releases),
        "the group is held and extended, not released: {releases} calls"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. Dead-lettering, by the handler and by the queue's redrive.

fn with_dead_letters(max_receive_count: u32) -> SqsQueue {
    SqsQueue::new(QUEUE)
        .create_if_missing()
        .dead_letter(DEAD_LETTERS, max_receive_count)
}

#[tokio::test(start_paused = true)]
async fn a_dead_lettered_message_moves_to_the_dead_letter_queue_and_its_group_goes_on() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = with_dead_letters(5);
    let publisher = broker.publisher(queue.clone());
    send_jobs(&publisher, group("g", 5)).await;
    let (handler, record) = probe(|job, _| {
        let step = if job.n == 2 {
            Step::DeadLetter("bad".into())
        } else {
            Step::Ack
        };
        (Duration::from_millis(10), step)
    });
    let running = start(&broker, subscriber(queue, handler).build()).await;
    until("g1, g3..g5 acked; g2 dead-lettered", || async {
        lock(&record).acked().len() == 4
            && is_empty(&account, QUEUE).await
            && visible(&account, DEAD_LETTERS).await == 1
    })
    .await;
    running.stop().await.unwrap();

    let record = take(&record);
    assert_eq!(
        record.calls("g"),
        vec![(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
        "the group goes on after a dead-lettered message, without releasing anything"
    );
    assert_eq!(record.acked_in("g"), vec![1, 3, 4, 5]);
    assert_eq!(record.max_in_one_group, 1);
    let dead = drain(&account, DEAD_LETTERS).await;
    assert_eq!(dead.len(), 1);
    let dead = &dead[0];
    assert_eq!(dead.body, body(&Job::new("g", 2)));
    assert_eq!(dead.group_id(), Some("g"));
    assert_eq!(reason(dead), Some("bad"));
    assert_eq!(
        dead.dedup_id(),
        Some(record.message_id(&Job::new("g", 2)).as_str()),
        "the copy is deduplicated by the original's message id"
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_out_of_attempts_is_dead_lettered_alone_and_its_group_goes_on() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = with_dead_letters(2).visibility_timeout(Duration::from_secs(2));
    let publisher = broker.publisher(queue.clone());
    send_jobs(&publisher, group("g", 3)).await;
    let (handler, record) = probe(|job, _| {
        let step = if job.n == 1 { Step::Retry } else { Step::Ack };
        (Duration::from_millis(10), step)
    });
    // A batch of 10: g2 and g3 arrive with g1 and wait behind it, held, while it is retried.
    let running = start(&broker, subscriber(queue, handler).batch_size(10).build()).await;
    until("g2, g3 acked; g1 dead-lettered", || async {
        lock(&record).acked().len() == 2
            && is_empty(&account, QUEUE).await
            && visible(&account, DEAD_LETTERS).await == 1
    })
    .await;
    running.stop().await.unwrap();

    let record = take(&record);
    assert_eq!(
        record.calls("g"),
        vec![(1, 1), (1, 1), (2, 1), (3, 1)],
        "g1 has its 2 attempts in place, then the group goes on in order, never received again"
    );
    assert_eq!(record.max_in_one_group, 1);
    let dead = drain(&account, DEAD_LETTERS).await;
    assert_eq!(dead.len(), 1, "only g1 goes to the dead-letter queue");
    assert_eq!(dead[0].body, body(&Job::new("g", 1)));
    assert_eq!(dead[0].group_id(), Some("g"));
    let original = record.message_id(&Job::new("g", 1));
    let attribute = |name: &str| {
        dead[0]
            .message_attributes
            .get(name)
            .and_then(|value| value.string_value.clone())
    };
    assert_eq!(attribute(ORIGINAL_MESSAGE_ID_HEADER), Some(original));
    assert_eq!(attribute(SOURCE_QUEUE_HEADER).as_deref(), Some(QUEUE));
    assert_eq!(attribute(ATTEMPTS_HEADER).as_deref(), Some("2"));
    let why = reason(&dead[0]).expect("a reason");
    assert!(
        why.contains("asked to retry") && why.contains("after 2 attempts"),
        "{why}"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Undecodable bodies.

#[tokio::test(start_paused = true)]
async fn an_undecodable_message_is_dead_lettered_with_the_decode_error_and_its_group_goes_on() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = with_dead_letters(5);
    let publisher = broker.publisher(queue.clone());
    send_jobs(&publisher, [Job::new("g", 1)]).await;
    publisher
        .raw("not json")
        .group_id("g")
        .send()
        .await
        .unwrap();
    send_jobs(&publisher, [Job::new("g", 3), Job::new("g", 4)]).await;
    let (handler, record) = probe(|_, _| (Duration::from_millis(10), Step::Ack));
    let running = start(&broker, subscriber(queue, handler).build()).await;
    until("g1, g3, g4 acked; the bad one dead-lettered", || async {
        lock(&record).acked().len() == 3
            && is_empty(&account, QUEUE).await
            && visible(&account, DEAD_LETTERS).await == 1
    })
    .await;
    running.stop().await.unwrap();

    let record = take(&record);
    assert_eq!(record.calls("g"), vec![(1, 1), (3, 1), (4, 1)]);
    assert_eq!(record.max_in_one_group, 1);
    let dead = drain(&account, DEAD_LETTERS).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].body, "not json");
    assert_eq!(dead[0].group_id(), Some("g"));
    let why = reason(&dead[0]).expect("a reason");
    assert!(
        why.contains("body is not a valid") && why.contains("Job"),
        "the reason names the decode error: {why}"
    );
}

#[tokio::test(start_paused = true)]
async fn without_a_dead_letter_queue_an_undecodable_message_is_retried_in_place_with_backoff_and_holds_its_group(
) {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE)
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(5));
    let publisher = broker.publisher(queue.clone());
    publisher
        .raw("not json")
        .group_id("g")
        .send()
        .await
        .unwrap();
    send_jobs(&publisher, [Job::new("g", 2), Job::new("g", 3)]).await;
    send_jobs(&publisher, group("h", 2)).await;
    let (handler, record) = probe(|_, _| (Duration::from_millis(10), Step::Ack));
    let running = start(&broker, subscriber(queue, handler).build()).await;
    sleep(Duration::from_secs(60)).await;
    running.stop().await.unwrap();

    {
        let record = lock(&record);
        assert_eq!(record.acked_in("h"), vec![1, 2], "other groups go on");
        assert_eq!(
            record.calls("g"),
            vec![],
            "nothing of the group is handled before its undecodable head"
        );
    }
    // Let the last release's visibility end, then look.
    sleep(Duration::from_secs(6)).await;
    let url = account.get_queue_url(QUEUE).await.unwrap();
    let left = common::receive(&account, &url, 10).await;
    assert_eq!(
        common::bodies(&left),
        vec![
            "not json",
            &body(&Job::new("g", 2)),
            &body(&Job::new("g", 3))
        ],
        "the undecodable message is not deleted and still heads its group"
    );
    assert_eq!(
        left[0].receive_count(),
        Some(2),
        "retried in place for 60 s, released once at shutdown, received here: no receive churn"
    );
}

// ---------------------------------------------------------------------------------------------
// Failures on the way to settling keep the group's order too.

#[tokio::test(start_paused = true)]
async fn a_dead_letter_that_cannot_be_sent_is_retried_in_place_before_the_rest_of_its_group() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = with_dead_letters(5);
    let (handler, record) = probe(|job, attempt| {
        let step = if job.n == 2 && attempt.n == 1 {
            Step::DeadLetter("bad".into())
        } else {
            Step::Ack
        };
        (Duration::from_millis(10), step)
    });
    let running = start(&broker, subscriber(queue, handler).build()).await;
    // The service has resolved both queues; now the dead-letter queue goes away.
    until("queues created", || async {
        account.get_queue_url(DEAD_LETTERS).await.is_ok()
            && account.get_queue_url(QUEUE).await.is_ok()
    })
    .await;
    sleep(Duration::from_secs(1)).await;
    let dlq_url = account.get_queue_url(DEAD_LETTERS).await.unwrap();
    account.delete_queue(&dlq_url).await.unwrap();
    // All five in one go, so one receive gets them all.
    let url = account.get_queue_url(QUEUE).await.unwrap();
    for job in group("g", 5) {
        account
            .send_message(
                &url,
                SendMessage::new(body(&job))
                    .group_id("g")
                    .dedup_id(format!("g-{}", job.n)),
            )
            .await
            .unwrap();
    }
    until("g acked", || async {
        lock(&record).acked().len() == 5 && is_empty(&account, QUEUE).await
    })
    .await;
    running.stop().await.unwrap();

    let record = take(&record);
    assert_eq!(
        record.calls("g"),
        vec![(1, 1), (2, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
        "g2, whose dead-letter copy could not be sent, was retried in place before g3..g5"
    );
    assert_eq!(record.max_in_one_group, 1);
    assert_eq!(record.acked_in("g"), vec![1, 2, 3, 4, 5]);
}

#[tokio::test(start_paused = true)]
async fn an_output_that_cannot_be_sent_is_retried_in_place_before_the_rest_of_its_group() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE).create_if_missing();
    let echo = broker.publisher(SqsQueue::new("echo.fifo").create_if_missing());
    // Resolve (and create) the output queue, then take it away so every output fails.
    echo.raw("{}").group_id("x").send().await.unwrap();
    let echo_url = account.get_queue_url("echo.fifo").await.unwrap();
    account.delete_queue(&echo_url).await.unwrap();
    let (mut handler, record) = probe(|_, _| (Duration::from_millis(10), Step::Ack));
    // Only g2's first handling publishes, so only its ack fails.
    handler.echo = Some((echo, |job, attempt| job.n == 2 && attempt.n == 1));
    let publisher = broker.publisher(queue.clone());
    send_jobs(&publisher, group("g", 5)).await;
    let running = start(&broker, subscriber(queue, handler).build()).await;
    until("g acked", || async {
        lock(&record).acked().len() >= 5 && is_empty(&account, QUEUE).await
    })
    .await;
    running.stop().await.unwrap();

    let record = take(&record);
    assert_eq!(
        record.calls("g"),
        vec![(1, 1), (2, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
        "g2, whose output could not be sent, was retried in place before g3..g5"
    );
    assert_eq!(record.max_in_one_group, 1);
}

// ---------------------------------------------------------------------------------------------
// 5. Random scripts over many groups.

/// One message of a case: its group, the pause before it is sent, and what each handling of it
/// does (beyond the script, it is acked).
#[derive(Debug, Clone)]
struct Planned {
    group: u8,
    gap_ms: u64,
    script: Vec<(Step, u64)>,
}

impl Planned {
    /// How its handling ends: the first ack or dead-letter of its script, and on which call.
    fn end(&self) -> (Step, u32) {
        self.script
            .iter()
            .position(|(step, _)| step.is_final())
            .map_or((Step::Ack, self.script.len() as u32 + 1), |i| {
                (self.script[i].0.clone(), i as u32 + 1)
            })
    }
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => Just(Step::Ack),
        3 => Just(Step::Retry),
        2 => (1u64..=4).prop_map(|s| Step::RetryAfter(Duration::from_secs(s))),
        2 => Just(Step::Panic),
        2 => Just(Step::DeadLetter("scripted".to_owned())),
    ]
}

fn planned() -> impl Strategy<Value = Planned> {
    (
        0u8..8,
        prop_oneof![3 => Just(0u64), 1 => 1u64..2_000],
        proptest::collection::vec((step(), 0u64..300), 0..4),
    )
        .prop_map(|(group, gap_ms, script)| Planned {
            group,
            gap_ms,
            script,
        })
}

fn job_of(index: usize, planned: &Planned) -> Job {
    Job::new(&format!("g{}", planned.group), index as u32)
}

async fn random_scripts(
    plan: Vec<Planned>,
    concurrency: usize,
    batch_size: usize,
) -> Result<(), TestCaseError> {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    // Held-back messages collect receives too; 100 is well above what any case can reach
    // (at most 3 failures for each of 9 messages ahead in a batch, plus its own).
    let queue = with_dead_letters(100);
    let publisher = broker.publisher(queue.clone());
    let scripts: HashMap<u32, Vec<(Step, u64)>> = plan
        .iter()
        .enumerate()
        .map(|(i, p)| (i as u32, p.script.clone()))
        .collect();
    let (handler, record) =
        probe(
            move |job, attempt| match scripts[&job.n].get(attempt.n as usize - 1) {
                Some((step, work_ms)) => (Duration::from_millis(*work_ms), step.clone()),
                None => (Duration::from_millis(10), Step::Ack),
            },
        );
    // The queues exist before the service starts.
    send_jobs(&publisher, [Job::new("warm-up", 0)]).await;
    drain(&account, QUEUE).await;
    let running = start(
        &broker,
        subscriber(queue, handler)
            .concurrency(concurrency)
            .batch_size(batch_size)
            .build(),
    )
    .await;
    for (i, p) in plan.iter().enumerate() {
        sleep(Duration::from_millis(p.gap_ms)).await;
        send_jobs(&publisher, [job_of(i, p)]).await;
    }
    let dead_count = plan
        .iter()
        .filter(|p| matches!(p.end().0, Step::DeadLetter(_)))
        .count();
    let finals = plan.len();
    until("every message acked or dead-lettered", || async {
        lock(&record).ended(Step::is_final).len() >= finals
            && is_empty(&account, QUEUE).await
            && visible(&account, DEAD_LETTERS).await >= dead_count
    })
    .await;
    running.stop().await.unwrap();

    let record = take(&record);
    prop_assert_eq!(
        record.max_in_one_group,
        1,
        "two calls of one group overlapped"
    );
    // Per group, calls alternate start and end: none overlapped, even across receives.
    let mut open: HashMap<String, Job> = HashMap::new();
    for event in &record.events {
        match event {
            Event::Start { job, .. } => {
                let before = open.insert(job.group.clone(), job.clone());
                prop_assert!(before.is_none(), "{:?} started while {:?} ran", job, before);
            }
            Event::End { job, .. } => {
                let running = open.remove(&job.group);
                prop_assert_eq!(running.as_ref(), Some(job));
            }
        }
    }
    // Each message ends once, as its script says, and is not handled after it ended; nothing of
    // a group is handled before every earlier message of the group has ended.
    let mut ended: HashSet<u32> = HashSet::new();
    let mut calls: HashMap<u32, u32> = HashMap::new();
    for event in &record.events {
        match event {
            Event::Start { job, .. } => {
                prop_assert!(!ended.contains(&job.n), "{:?} handled after it ended", job);
                for (i, p) in plan.iter().enumerate().take(job.n as usize) {
                    let earlier = job_of(i, p);
                    prop_assert!(
                        earlier.group != job.group || ended.contains(&earlier.n),
                        "{:?} handled before {:?} of its group ended",
                        job,
                        earlier
                    );
                }
                *calls.entry(job.n).or_default() += 1;
            }
            Event::End { job, step, .. } if step.is_final() => {
                prop_assert!(ended.insert(job.n), "{:?} ended twice", job);
                let (want, on_call) = plan[job.n as usize].end();
                prop_assert_eq!(step, &want, "{:?}", job);
                prop_assert_eq!(calls[&job.n], on_call, "{:?}", job);
            }
            Event::End { .. } => {}
        }
    }
    prop_assert_eq!(ended.len(), plan.len(), "messages never ended");
    // Per group, the acked sequence is the sent order without the dead-lettered messages, and
    // the dead-letter queue holds exactly those, each once, in order, in their group.
    let dead = drain(&account, DEAD_LETTERS).await;
    let mut dead_by_group: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for message in &dead {
        let job: Job = serde_json::from_str(&message.body).expect("a job");
        prop_assert_eq!(message.group_id(), Some(job.group.as_str()));
        prop_assert_eq!(reason(message), Some("scripted"));
        let original = record.message_id(&job);
        prop_assert_eq!(
            message.dedup_id(),
            Some(original.as_str()),
            "the copy is deduplicated by the original's message id"
        );
        dead_by_group.entry(job.group).or_default().push(job.n);
    }
    let mut groups: BTreeMap<String, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
    for (i, p) in plan.iter().enumerate() {
        let job = job_of(i, p);
        let (acked, dead) = groups.entry(job.group).or_default();
        match p.end().0 {
            Step::Ack => acked.push(job.n),
            _ => dead.push(job.n),
        }
    }
    for (group, (acked, dead)) in &groups {
        prop_assert_eq!(&record.acked_in(group), acked, "acked order of {}", group);
        let got = dead_by_group.remove(group).unwrap_or_default();
        prop_assert_eq!(&got, dead, "dead letters of {}", group);
    }
    prop_assert!(
        dead_by_group.is_empty(),
        "unexpected dead letters: {:?}",
        dead_by_group
    );
    prop_assert!(is_empty(&account, QUEUE).await);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_message_ends_once_and_each_group_keeps_its_order_whatever_its_handlers_do(
        plan in proptest::collection::vec(planned(), 1..=60),
        concurrency in 1usize..=6,
        batch_size in 1usize..=10,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(random_scripts(plan, concurrency, batch_size))?;
    }
}
