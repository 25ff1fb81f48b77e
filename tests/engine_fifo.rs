//! The FIFO contract, end to end through handlers, on the in-process broker and a paused clock.
//!
//! Each group's messages are handled in the order sent, one at a time, while groups run in
//! parallel and a slow group holds up nobody. A failed message (retry, `retry_after`, a panic, a
//! failed output) is retried in place after its backoff while the rest of its
//! group waits, held, never received again. Dead-lettered and undecodable messages, and messages
//! out of attempts, let their group go on; without a dead-letter queue an undecodable message
//! holds its group.
//!
//! A property test runs random scripts of outcomes over many groups, with several pollers, a
//! dead-letter queue whose `max_receive_count` is sometimes small enough to send messages out of
//! attempts, and, in two cases of three, transport faults under the service (deletes failing for a
//! while or for good, panicking deletes and receives, failing receives, visibility changes failing
//! for a while). Each case must finish within an hour of tokio time (a hang fails the case), and
//! checks: every message is acked or dead-lettered at least once; per group the first completions
//! follow the sent order; each dead-letter copy is the script's, a message out of its attempts or
//! the queue's redrive, and a message its script dead-letters is never acked. With a sound
//! transport it checks exactly: one call of a group at a time, each message ends once, after
//! exactly the calls its script and the policy allow, and the dead-letter queue holds exactly the
//! dead-lettered messages, in order. `PROPTEST_CASES` sets the number of cases (default 256).

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use common::drain;
use common::engine::{Faulty, Job};
use common::property::{cases, run_case};
use proptest::prelude::*;
use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::publish::Publisher;
use rust_stream::testing::{eventually, eventually_within, Settled, TestApp};
use rust_stream::transport::{ReceiveMessage, ReceivedMessage, SendMessage};
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
                receive_count: ctx.sqs().receive_count(),
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

/// Sends `per_group` jobs to each of `groups` groups (`g0`, `g1`, ...), interleaved; returns the
/// groups' names.
async fn send_backlog(publisher: &Publisher, groups: usize, per_group: u32) -> Vec<String> {
    let names: Vec<String> = (0..groups).map(|g| format!("g{g}")).collect();
    for n in 1..=per_group {
        send_jobs(publisher, names.iter().map(|g| Job::new(g, n))).await;
    }
    names
}

/// Each group's jobs 1..=`per_group` were handled once each, in the order sent.
fn assert_each_group_in_order(record: &Record, groups: &[impl AsRef<str>], per_group: u32) {
    for g in groups {
        let g = g.as_ref();
        assert_eq!(
            record.calls(g),
            (1..=per_group).map(|n| (n, 1)).collect::<Vec<_>>(),
            "group {g} is handled once each, in the order sent"
        );
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
    assert_each_group_in_order(&record, &groups, 6);
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

/// A receive hands out a run of one group's messages, so a consumer whose room were counted in
/// messages would hold two or three groups and leave most handler slots idle: room is counted in
/// groups, and with a backlog of 20 in each of 10 groups, all 10 run at once on concurrency 10.
#[tokio::test(start_paused = true)]
async fn groups_with_a_backlog_fill_every_handler_slot() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE).create_if_missing();
    let publisher = broker.publisher(queue.clone());
    let groups = send_backlog(&publisher, 10, 20).await;
    let (handler, record) = probe(|_, _| (Duration::from_millis(100), Step::Ack));
    let running = start(&broker, subscriber(queue, handler).concurrency(10).build()).await;
    eventually("200 jobs acked", async || {
        lock(&record).acked().len() == 200
    })
    .await;
    running.stop().await.unwrap();

    let record = take(&record);
    assert_eq!(
        record.max_groups_at_once, 10,
        "every handler slot runs a group while ten groups wait"
    );
    assert_eq!(
        record.max_in_one_group, 1,
        "two calls of one group overlapped"
    );
    assert_each_group_in_order(&record, &groups, 20);
}

/// Lanes whose deletes one call confirmed go on in step, and their next deletes share the next
/// call: ten groups held at once (20 messages each) take about a tenth of a call per delete, where
/// a call per delete would be 200, while every group is still handled in order. On two threads in
/// real time, where lanes drift apart unless the deleter keeps them in step (on one thread they
/// never drift).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deletes_of_groups_handled_in_step_share_calls_and_each_group_stays_in_order() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE).create_if_missing();
    let publisher = broker.publisher(queue.clone());
    let groups = send_backlog(&publisher, 10, 20).await;
    let (handler, record) = probe(|_, _| (Duration::ZERO, Step::Ack));
    let before = broker.api_calls();
    let running = start(&broker, subscriber(queue, handler).build()).await;
    eventually("200 jobs acked", async || {
        lock(&record).acked().len() == 200
    })
    .await;
    until("every delete answered", async || {
        is_empty(&account, QUEUE).await
    })
    .await;
    running.stop().await.unwrap();

    let deletes = (broker.api_calls() - before).delete_message_batch;
    assert!(
        (20..=50).contains(&deletes),
        "{deletes} delete calls for 200 messages of ten groups at a time"
    );
    let record = take(&record);
    assert_each_group_in_order(&record, &groups, 20);
}

/// Sends `count` messages of one group, runs one poller over them with handlers that work 10 ms
/// each and the given `delete_run`, and says what the drain cost, what the handlers saw and the
/// group's name. One poller: further pollers would each add a long poll that waits out the drained
/// queue, a cost of the pollers (tests/engine_pollers.rs), not of the lane.
async fn drain_one_hot_group(
    count: u32,
    delete_run: usize,
) -> (rust_stream::ApiCalls, Record, Vec<String>) {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new(QUEUE).create_if_missing();
    let publisher = broker.publisher(queue.clone());
    let groups = send_backlog(&publisher, 1, count).await;
    let (handler, record) = probe(|_, _| (Duration::from_millis(10), Step::Ack));
    let before = broker.api_calls();
    let subscription = subscriber(queue, handler)
        .pollers(1)
        .delete_run(delete_run)
        .build();
    let running = start(&broker, subscription).await;
    until("every message deleted", async || {
        is_empty(&account, QUEUE).await
    })
    .await;
    running.stop().await.unwrap();
    (broker.api_calls() - before, take(&record), groups)
}

/// One hot group (one merchant, one ledger account) costs a delete call a run, not one a message:
/// its lane works through what a receive brought and deletes it in one call, so 200 messages take
/// 20 delete calls (a call per delete would be 200) and 20 receives, and stay in order. Each
/// handler works 10 ms, so the run is not deleted early for its age.
#[tokio::test(start_paused = true)]
async fn a_hot_group_deletes_each_run_in_one_call_and_stays_in_order() {
    let (calls, record, groups) = drain_one_hot_group(200, 10).await;
    assert_eq!(
        calls.delete_message_batch, 20,
        "one delete call a run of 10: {calls:?}"
    );
    let per_message = calls.messaging() as f64 / 200.0;
    assert!(
        per_message <= 0.21,
        "{per_message} calls a message for one hot group: {calls:?}"
    );
    assert_each_group_in_order(&record, &groups, 200);
}

/// `.delete_run(1)` confirms each delete before the group's next message: one delete call a
/// message, still in order.
#[tokio::test(start_paused = true)]
async fn a_delete_run_of_one_confirms_each_delete_before_the_next_message() {
    let (calls, record, groups) = drain_one_hot_group(30, 1).await;
    assert_eq!(
        calls.delete_message_batch, 30,
        "a delete call a message: {calls:?}"
    );
    assert_each_group_in_order(&record, &groups, 30);
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
async fn a_dead_letter_copy_that_cannot_be_sent_is_retried_alone_before_the_rest_of_its_group() {
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
    // The copy keeps failing for a minute, then the dead-letter queue is back.
    sleep(Duration::from_secs(60)).await;
    assert_eq!(
        record.lock().unwrap().calls("g"),
        vec![(1, 1), (2, 1)],
        "nothing behind g2 ran while its copy could not be sent, and its handler did not run again"
    );
    let dlq_url = account.create_fifo_queue(DEAD_LETTERS).await.unwrap();
    until("g settled", || async {
        lock(&record).acked().len() == 4 && is_empty(&account, QUEUE).await
    })
    .await;
    running.stop().await.unwrap();

    let record = take(&record);
    assert_eq!(
        record.calls("g"),
        vec![(1, 1), (2, 1), (3, 1), (4, 1), (5, 1)],
        "g2, whose dead-letter copy could not be sent at first, was moved once it could be, \
         without running its handler again, before g3..g5"
    );
    assert_eq!(record.max_in_one_group, 1);
    assert_eq!(record.acked_in("g"), vec![1, 3, 4, 5]);
    let dead = account
        .receive_message(&dlq_url, ReceiveMessage::new(10))
        .await
        .unwrap();
    let dead: Vec<Job> = dead
        .iter()
        .map(|m| serde_json::from_str(&m.body).unwrap())
        .collect();
    assert_eq!(dead, [Job::new("g", 2)]);
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
// 5. Random scripts over many groups, with transport faults, several pollers and redrive.

/// One message of a case: its group, the pause before it is sent, and what each handling of it
/// does (beyond the script, it is acked).
#[derive(Debug, Clone)]
struct Planned {
    group: u8,
    gap_ms: u64,
    script: Vec<(Step, u64)>,
}

/// How a message must end by its script and the subscription's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Acked,
    /// Its script dead-letters it.
    DeadLettered,
    /// It fails `max_receive_count` times before its script acks or dead-letters it.
    OutOfAttempts,
}

impl Planned {
    /// The index of the script's first ack or dead-letter (its length when it has none: the
    /// call after the script acks).
    fn final_index(&self) -> usize {
        self.script
            .iter()
            .position(|(step, _)| step.is_final())
            .unwrap_or(self.script.len())
    }

    /// What the `call`th handling does (1 for the first). A call after the final step repeats
    /// it: the handler is idempotent, as at-least-once delivery asks, so a message delivered again
    /// after it ended ends the same way.
    fn step(&self, call: u32) -> (Duration, Step) {
        let index = (call as usize - 1).min(self.final_index());
        match self.script.get(index) {
            Some((step, work_ms)) => (Duration::from_millis(*work_ms), step.clone()),
            None => (Duration::from_millis(10), Step::Ack),
        }
    }

    /// How it ends, and after how many calls, when nothing but the handler fails.
    fn end(&self, max_receive_count: u32) -> (Ending, u32) {
        let index = self.final_index();
        let calls = index as u32 + 1;
        if calls > max_receive_count {
            return (Ending::OutOfAttempts, max_receive_count);
        }
        match self.script.get(index) {
            Some((Step::DeadLetter(_), _)) => (Ending::DeadLettered, calls),
            _ => (Ending::Acked, calls),
        }
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
    planned_in(0u8..8)
}

/// Mostly one hot group sent in bursts, so its lane works through runs of up to a batch and
/// deletes each run together; now and then another group beside it.
fn planned_hot() -> impl Strategy<Value = Planned> {
    planned_in(prop_oneof![5 => Just(0u8), 1 => 1u8..3])
}

fn planned_in(group: impl Strategy<Value = u8>) -> impl Strategy<Value = Planned> {
    (
        group,
        prop_oneof![3 => Just(0u64), 1 => 1u64..2_000],
        // Now and then a call outlives the visibility timeout (10 s): the heartbeat must keep it.
        proptest::collection::vec(
            (step(), prop_oneof![9 => 0u64..300, 1 => 10_000u64..20_000]),
            0..4,
        ),
    )
        .prop_map(|(group, gap_ms, script)| Planned {
            group,
            gap_ms,
            script,
        })
}

/// A failure of the transport under the service, injected during a case.
#[derive(Debug, Clone)]
enum TransportFault {
    /// The next `n` deletes fail service-side (the batcher retries them).
    TransientDeletes(usize),
    /// The next `n` deletes fail for good: the message comes back after its visibility timeout.
    PermanentDeletes(usize),
    /// The next delete call panics.
    DeletePanic,
    /// The next receive call panics.
    ReceivePanic,
    /// The next `n` receives fail, as with the network down.
    ReceiveFailures(usize),
    /// Every visibility change fails for a while: held messages time out and are received again,
    /// possibly while their first handling still runs.
    VisibilityOutage(Duration),
    /// The next `n` receives, deletes and visibility changes each sleep this long before they
    /// reach the account; one of 5 s or more takes half a message's 10 s visibility.
    SlowCalls(usize, Duration),
}

fn transport_fault() -> impl Strategy<Value = TransportFault> {
    prop_oneof![
        (1usize..=6).prop_map(TransportFault::TransientDeletes),
        (1usize..=3).prop_map(TransportFault::PermanentDeletes),
        Just(TransportFault::DeletePanic),
        Just(TransportFault::ReceivePanic),
        (1usize..=4).prop_map(TransportFault::ReceiveFailures),
        (5u64..=30).prop_map(|s| TransportFault::VisibilityOutage(Duration::from_secs(s))),
        ((1usize..=6), (50u64..=8_000))
            .prop_map(|(n, ms)| TransportFault::SlowCalls(n, Duration::from_millis(ms))),
    ]
}

impl TransportFault {
    /// Injects the fault; an outage lasts until this returns.
    async fn inject(&self, faulty: &Faulty) {
        use std::sync::atomic::Ordering::SeqCst;
        match self {
            Self::TransientDeletes(n) => {
                faulty.transient_delete_failures.fetch_add(*n, SeqCst);
            }
            Self::PermanentDeletes(n) => {
                faulty.permanent_delete_failures.fetch_add(*n, SeqCst);
            }
            Self::DeletePanic => {
                faulty.delete_panics.fetch_add(1, SeqCst);
            }
            Self::ReceivePanic => {
                faulty.receive_panics.fetch_add(1, SeqCst);
            }
            Self::ReceiveFailures(n) => {
                faulty.receive_failures.fetch_add(*n, SeqCst);
            }
            Self::SlowCalls(n, by) => {
                *faulty.slow_by.lock().unwrap() = *by;
                faulty.slow_calls.fetch_add(*n, SeqCst);
            }
            Self::VisibilityOutage(length) => {
                faulty.visibility_fails.store(true, SeqCst);
                sleep(*length).await;
                faulty.visibility_fails.store(false, SeqCst);
            }
        }
    }
}

/// One generated case: the messages, the subscription's settings, and the transport's faults
/// (each at a time after the service started).
#[derive(Debug, Clone)]
struct Case {
    plan: Vec<Planned>,
    concurrency: usize,
    batch_size: usize,
    pollers: usize,
    /// The dead-letter queue's `max_receive_count`, declared and the queue's redrive policy.
    max_receive_count: u32,
    faults: Vec<(u64, TransportFault)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![
            3 => proptest::collection::vec(planned(), 1..=60),
            1 => proptest::collection::vec(planned_hot(), 10..=60),
        ],
        1usize..=6,
        1usize..=10,
        1usize..=3,
        // Small counts send messages out of attempts; 100 is more than any script fails.
        prop_oneof![1 => 2u32..=4, 1 => Just(100u32)],
        prop_oneof![
            1 => Just(Vec::new()),
            2 => proptest::collection::vec((0u64..5_000, transport_fault()), 1..=4),
        ],
    )
        .prop_map(
            |(plan, concurrency, batch_size, pollers, max_receive_count, faults)| Case {
                plan,
                concurrency,
                batch_size,
                pollers,
                max_receive_count,
                faults,
            },
        )
}

fn job_of(index: usize, planned: &Planned) -> Job {
    Job::new(&format!("g{}", planned.group), index as u32)
}

async fn random_scripts(case: Case) -> Result<(), TestCaseError> {
    random_scripts_over(case, Faulty::default()).await
}

/// [`random_scripts`] with the faults injected through `faulty`, which the caller keeps to see
/// which were met.
async fn random_scripts_over(case: Case, faulty: Faulty) -> Result<(), TestCaseError> {
    let Case {
        plan,
        concurrency,
        batch_size,
        pollers,
        max_receive_count,
        faults,
    } = case;
    let clean = faults.is_empty();
    let account = Account::new();
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let recorder = broker.recorder();
    let queue = with_dead_letters(max_receive_count).visibility_timeout(Duration::from_secs(10));
    let publisher = broker.publisher(queue.clone());
    let scripts: Arc<Vec<Planned>> = Arc::new(plan.clone());
    let (handler, record) = probe(move |job, attempt| scripts[job.n as usize].step(attempt.n));
    // The queues exist before the service starts.
    send_jobs(&publisher, [Job::new("warm-up", 0)]).await;
    drain(&account, QUEUE).await;
    let running = start(
        &broker,
        subscriber(queue, handler)
            .concurrency(concurrency)
            .batch_size(batch_size)
            .pollers(pollers)
            .build(),
    )
    .await;
    let injector = tokio::spawn({
        let faulty = faulty.clone();
        let mut faults = faults.clone();
        faults.sort_by_key(|(at_ms, _)| *at_ms);
        async move {
            let from = Instant::now();
            for (at_ms, fault) in faults {
                tokio::time::sleep_until(from + Duration::from_millis(at_ms)).await;
                fault.inject(&faulty).await;
            }
        }
    });
    for (i, p) in plan.iter().enumerate() {
        sleep(Duration::from_millis(p.gap_ms)).await;
        send_jobs(&publisher, [job_of(i, p)]).await;
    }
    injector.await.expect("the faults are injected");
    // Done when the queue stays empty (every message deleted, after its ack or its dead-letter
    // copy, or moved by the redrive) with no handler running, on three looks in a row.
    let mut empty_looks = 0;
    while empty_looks < 3 {
        sleep(Duration::from_millis(200)).await;
        let idle = lock(&record).running.is_empty();
        empty_looks = if idle && is_empty(&account, QUEUE).await {
            empty_looks + 1
        } else {
            0
        };
    }
    running.stop().await.unwrap();

    let record = take(&record);
    let dead = drain(&account, DEAD_LETTERS).await;
    let ends: Vec<(Ending, u32)> = plan.iter().map(|p| p.end(max_receive_count)).collect();
    let jobs: Vec<Job> = plan.iter().enumerate().map(|(i, p)| job_of(i, p)).collect();

    // The engine's settlements: per message, the first that ended it (acked or dead-lettered,
    // counted once its delete succeeded), and whether it was ever acked. A message whose delete
    // failed for good settles when its replay is deleted, after the rest of its run: the replay
    // contract below checks its order instead.
    let replayed: HashSet<String> = faulty
        .failed_for_good
        .lock()
        .unwrap()
        .iter()
        .map(|(message_id, _)| message_id.clone())
        .collect();
    let mut first_completions: Vec<u32> = Vec::new();
    let mut completions: HashMap<u32, usize> = HashMap::new();
    let mut acked: HashSet<u32> = HashSet::new();
    for handled in recorder.handled(QUEUE) {
        if handled.settled == Settled::Retried {
            continue;
        }
        let job: Job = serde_json::from_str(&handled.body).expect("a job");
        if handled.settled == Settled::Acked {
            acked.insert(job.n);
        }
        let count = completions.entry(job.n).or_default();
        if *count == 0 && !replayed.contains(&handled.message_id) {
            first_completions.push(job.n);
        }
        *count += 1;
    }
    // The dead-letter queue's copies, by message.
    let mut copies: HashMap<u32, Vec<&ReceivedMessage>> = HashMap::new();
    for message in &dead {
        let job: Job = serde_json::from_str(&message.body).expect("a job");
        prop_assert_eq!(message.group_id(), Some(job.group.as_str()));
        copies.entry(job.n).or_default().push(message);
    }

    // At least once: every message was acked or dead-lettered, by the engine or the redrive.
    for job in &jobs {
        prop_assert!(
            completions.contains_key(&job.n) || copies.contains_key(&job.n),
            "{:?} was lost",
            job
        );
    }
    // Per group, the first completions follow the sent order.
    let mut last_in_group: HashMap<&str, u32> = HashMap::new();
    for n in &first_completions {
        let job = &jobs[*n as usize];
        if let Some(before) = last_in_group.insert(job.group.as_str(), *n) {
            prop_assert!(
                before < *n,
                "{:?} completed before {} of its group: {:?}",
                job,
                before,
                first_completions
            );
        }
    }
    // Dead-lettering per policy: a copy is the script's dead-letter, a message out of its
    // attempts (by the engine's count), or the queue's redrive of a message received too often.
    for (n, messages) in &copies {
        let (ending, _) = ends[*n as usize];
        for message in messages {
            let attribute = |name: &str| {
                message
                    .message_attributes
                    .get(name)
                    .and_then(|value| value.string_value.clone())
            };
            match reason(message) {
                Some("scripted") => prop_assert!(
                    plan[*n as usize]
                        .script
                        .iter()
                        .any(|(step, _)| matches!(step, Step::DeadLetter(_))),
                    "{:?} dead-lettered by a script that has no dead-letter",
                    jobs[*n as usize]
                ),
                Some(why) => {
                    let attempts: u32 = attribute(ATTEMPTS_HEADER)
                        .and_then(|a| a.parse().ok())
                        .expect("the attempts of a dead-letter copy");
                    prop_assert!(
                        attempts >= max_receive_count
                            && why.ends_with(&format!("(after {attempts} attempts)")),
                        "{:?} dead-lettered after {} attempts of {}: {}",
                        jobs[*n as usize],
                        attempts,
                        max_receive_count,
                        why
                    );
                    prop_assert!(
                        !clean || ending == Ending::OutOfAttempts,
                        "{:?} out of attempts, expected {:?}",
                        jobs[*n as usize],
                        ending
                    );
                }
                None => {
                    prop_assert!(
                        message.attributes.contains_key("DeadLetterQueueSourceArn"),
                        "{:?} in the dead-letter queue, moved by neither the engine nor the redrive",
                        jobs[*n as usize]
                    );
                    prop_assert!(
                        !clean,
                        "{:?} moved by the redrive with no transport fault",
                        jobs[*n as usize]
                    );
                }
            }
        }
        prop_assert!(
            ending != Ending::DeadLettered || !acked.contains(n),
            "{:?} acked, but its script dead-letters it",
            jobs[*n as usize]
        );
    }
    for (n, (ending, calls)) in ends.iter().enumerate() {
        let n = n as u32;
        if *ending == Ending::DeadLettered {
            prop_assert!(!acked.contains(&n), "{:?} acked", jobs[n as usize]);
        }
        if *ending == Ending::OutOfAttempts && acked.contains(&n) {
            // Only a copy received again while another ran can pass the count of calls.
            prop_assert!(!clean);
            let made = record.calls_by_message[&record.message_id(&jobs[n as usize])];
            prop_assert!(
                made > *calls,
                "{:?} acked within its attempts",
                jobs[n as usize]
            );
        }
    }
    prop_assert!(is_empty(&account, QUEUE).await);
    // The replay contract, where faults make no copy run beside another (a visibility outage
    // does): a message whose delete failed for good is handled again, before anything of its
    // group its lane had not reached.
    let outage = faults
        .iter()
        .any(|(_, fault)| matches!(fault, TransportFault::VisibilityOutage(_)));
    if !outage {
        let calls: Vec<common::engine::Call> = record
            .events
            .iter()
            .filter_map(|event| match event {
                Event::Start {
                    job,
                    message_id,
                    at,
                    ..
                } => Some(common::engine::Call {
                    group: job.group.clone(),
                    n: job.n,
                    message_id: message_id.clone(),
                    at: *at,
                }),
                Event::End { .. } => None,
            })
            .collect();
        let failed = faulty.failed_for_good.lock().unwrap().clone();
        if let Some(breach) = common::engine::replay_breach(&calls, &failed, batch_size) {
            return Err(TestCaseError::fail(breach));
        }
    }

    if !clean {
        return Ok(());
    }
    // With a sound transport, exactly: one handling of a group at a time, each message ends once,
    // as its script and the policy say, and after exactly its calls.
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
    // Nothing of a group is handled before every earlier message of the group has had its last
    // call, and no message is called after it.
    let mut ended: HashSet<u32> = HashSet::new();
    let mut calls: HashMap<u32, u32> = HashMap::new();
    for event in &record.events {
        match event {
            Event::Start { job, .. } => {
                prop_assert!(!ended.contains(&job.n), "{:?} handled after it ended", job);
                for earlier in jobs.iter().take(job.n as usize) {
                    prop_assert!(
                        earlier.group != job.group || ended.contains(&earlier.n),
                        "{:?} handled before {:?} of its group ended",
                        job,
                        earlier
                    );
                }
            }
            Event::End { job, step, .. } => {
                let made = calls.entry(job.n).or_default();
                *made += 1;
                let (ending, last_call) = ends[job.n as usize];
                if *made == last_call {
                    ended.insert(job.n);
                    let want = match ending {
                        Ending::Acked => step == &Step::Ack,
                        Ending::DeadLettered => matches!(step, Step::DeadLetter(_)),
                        Ending::OutOfAttempts => !step.is_final(),
                    };
                    prop_assert!(want, "{:?} ended with {:?}, not {:?}", job, step, ending);
                }
            }
        }
    }
    for (job, (_, last_call)) in jobs.iter().zip(&ends) {
        prop_assert_eq!(calls.get(&job.n), Some(last_call), "calls of {:?}", job);
        prop_assert_eq!(completions.get(&job.n), Some(&1), "{:?} ended once", job);
    }
    // Per group, the acked sequence is the sent order without the dead-lettered messages, and
    // the dead-letter queue holds exactly those, each once, in order, in their group.
    let mut dead_by_group: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for message in &dead {
        let job: Job = serde_json::from_str(&message.body).expect("a job");
        let original = record.message_id(&job);
        prop_assert_eq!(
            message.dedup_id(),
            Some(original.as_str()),
            "the copy is deduplicated by the original's message id"
        );
        if ends[job.n as usize].0 == Ending::OutOfAttempts {
            let attempts = message
                .message_attributes
                .get(ATTEMPTS_HEADER)
                .and_then(|value| value.string_value.clone());
            prop_assert_eq!(attempts, Some(max_receive_count.to_string()));
        } else {
            prop_assert_eq!(reason(message), Some("scripted"));
        }
        dead_by_group.entry(job.group).or_default().push(job.n);
    }
    let mut groups: BTreeMap<String, (Vec<u32>, Vec<u32>)> = BTreeMap::new();
    for (job, (ending, _)) in jobs.iter().zip(&ends) {
        let (acked, dead) = groups.entry(job.group.clone()).or_default();
        match ending {
            Ending::Acked => acked.push(job.n),
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
    Ok(())
}

/// The property test's slow calls are met, not only drawn: six calls, each 6 s late (more than
/// half of the 10 s visibility), from the start, while 40 messages of 4 groups run scripts that
/// retry and dead-letter; the property's checks hold.
#[test]
fn slow_calls_are_met_and_ridden_out() {
    let plan: Vec<Planned> = (0..40)
        .map(|n| Planned {
            group: u8::try_from(n % 4).unwrap(),
            gap_ms: 50,
            script: match n % 5 {
                0 => vec![(Step::Retry, 10), (Step::Ack, 0)],
                1 => vec![(Step::DeadLetter("scripted".to_owned()), 0)],
                _ => vec![(Step::Ack, 100)],
            },
        })
        .collect();
    let faulty = Faulty::default();
    let case = Case {
        plan,
        concurrency: 3,
        batch_size: 5,
        pollers: 2,
        max_receive_count: 100,
        faults: vec![(0, TransportFault::SlowCalls(6, Duration::from_secs(6)))],
    };
    run_case(random_scripts_over(case, faulty.clone())).unwrap();
    assert_eq!(
        faulty.slowed.load(std::sync::atomic::Ordering::SeqCst),
        6,
        "every slow call drawn was made"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn every_message_ends_at_least_once_in_group_order_and_per_policy_whatever_its_handlers_and_transport_do(
        case in case(),
    ) {
        run_case(random_scripts(case))?;
    }
}
