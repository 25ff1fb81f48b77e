//! The FIFO contract through batch handlers, as a property test on the in-process broker and a
//! paused clock (the batch twin of `tests/engine_fifo.rs`'s property test).
//!
//! Each case sends messages of up to 8 groups, with gaps, to a FIFO queue read by a batch handler
//! with random settings (concurrency, receive batch size, pollers, the batch's `max` and `window`,
//! the dead-letter queue's `max_receive_count`). Each message has a script of outcomes by its
//! attempt (ack, retry, `retry_after`, dead-letter, or a panic of the whole call). Every case
//! checks:
//!
//! - **nothing lost**: every message is acked or dead-lettered, exactly once, and the queue ends
//!   empty;
//! - **order**: no call holds a message of a group while an earlier message of that group is
//!   neither settled by its verdict (acked or dead-lettered) nor before it in the same call; per
//!   group the settlements the recorder counts (once each message's delete succeeded) follow the
//!   sent order; a call holds each group's messages in order;
//! - **one call of a group at a time**: no two calls running at once hold the same group;
//! - **dead-lettering per policy**: every dead-letter copy is the script's (reason `scripted`) or a
//!   message out of attempts (its attempts header at least `max_receive_count`); a message whose
//!   script never dead-letters is never dead-lettered as `scripted`;
//! - **attempts**: no message is handled at an attempt past `max_receive_count`.
//!
//! `PROPTEST_CASES` sets the number of cases (default 256).

mod common;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use common::drain;
use common::engine::Job;
use common::property::{cases, run_case};
use proptest::prelude::*;
use rust_stream::account::Account;
use rust_stream::handler::batch::{BatchContext, BatchOutcome, HandleBatch};
use rust_stream::prelude::*;
use rust_stream::testing::{Recorder, Settled, TestApp};
use rust_stream::{ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER};
use tokio::time::sleep;

const QUEUE: &str = "postings.fifo";
const DEAD_LETTERS: &str = "postings-dlq.fifo";

/// How an attempt at a message ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Ack,
    Retry,
    RetryAfter(Duration),
    DeadLetter,
    /// The whole call panics.
    Panic,
}

#[derive(Debug, Clone)]
struct Planned {
    group: u8,
    gap_ms: u64,
    /// The step of each attempt, from the first; past the end, ack.
    script: Vec<Step>,
}

impl Planned {
    fn step(&self, attempt: u32) -> Step {
        self.script
            .get(attempt as usize - 1)
            .cloned()
            .unwrap_or(Step::Ack)
    }
}

#[derive(Debug, Clone)]
struct Case {
    plan: Vec<Planned>,
    concurrency: usize,
    batch_size: usize,
    pollers: usize,
    max: usize,
    window_ms: u64,
    work_ms: u64,
    max_receive_count: u32,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => Just(Step::Ack),
        3 => Just(Step::Retry),
        2 => (1u64..=4).prop_map(|s| Step::RetryAfter(Duration::from_secs(s))),
        2 => Just(Step::DeadLetter),
        1 => Just(Step::Panic),
    ]
}

fn planned() -> impl Strategy<Value = Planned> {
    (
        0u8..8,
        prop_oneof![3 => Just(0u64), 1 => 1u64..2_000],
        proptest::collection::vec(step(), 0..4),
    )
        .prop_map(|(group, gap_ms, script)| Planned {
            group,
            gap_ms,
            script,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        proptest::collection::vec(planned(), 1..=60),
        1usize..=4,
        1usize..=10,
        1usize..=3,
        prop_oneof![1 => 1usize..=5, 2 => 5usize..=25],
        prop_oneof![1 => Just(0u64), 2 => 1u64..=500],
        prop_oneof![3 => 0u64..=200, 1 => 10_000u64..=15_000],
        prop_oneof![1 => 2u32..=4, 1 => Just(100u32)],
    )
        .prop_map(
            |(
                plan,
                concurrency,
                batch_size,
                pollers,
                max,
                window_ms,
                work_ms,
                max_receive_count,
            )| {
                Case {
                    plan,
                    concurrency,
                    batch_size,
                    pollers,
                    max,
                    window_ms,
                    work_ms,
                    max_receive_count,
                }
            },
        )
}

/// What the probe saw break, and what runs now.
#[derive(Debug, Default)]
struct Watch {
    violations: Vec<String>,
    /// Groups in calls running now.
    running: HashSet<String>,
    calls: usize,
    /// Jobs whose attempt ended them, as the probe's verdicts settle them: acked, or
    /// dead-lettered (by the script, or out of attempts). The recorder counts a settled message
    /// only once its delete is answered, which on FIFO comes with its lane's run, after later
    /// messages of the group may have run.
    ended: HashSet<u32>,
}

/// A batch handler that checks the order contract at each call, works for a while (tokio time,
/// so overlaps would show), then settles each message as its script says for its attempt.
struct Probe {
    plan: Arc<Vec<Planned>>,
    watch: Arc<Mutex<Watch>>,
    work: Duration,
    max_receive_count: u32,
}

/// Takes a call's groups off the running ones however the call ends.
struct Running {
    watch: Arc<Mutex<Watch>>,
    groups: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        for group in &self.groups {
            watch.running.remove(group);
        }
    }
}

/// Per job (its index), whether it was settled as acked or dead-lettered.
fn settled(recorder: &Recorder) -> HashMap<u32, Vec<Settled>> {
    let mut settled: HashMap<u32, Vec<Settled>> = HashMap::new();
    for handled in recorder.handled(QUEUE) {
        let job: Job = serde_json::from_str(&handled.body).expect("a job");
        settled.entry(job.n).or_default().push(handled.settled);
    }
    settled
}

impl HandleBatch<Job> for Probe {
    async fn handle(&self, jobs: &[Job], _: &(), ctx: &mut BatchContext<'_>) -> BatchOutcome {
        let done = self
            .watch
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ended
            .clone();
        let mut groups: Vec<String> = jobs.iter().map(|job| job.group.clone()).collect();
        groups.dedup();
        {
            let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
            watch.calls += 1;
            let mut in_call: HashSet<u32> = HashSet::new();
            for (index, job) in jobs.iter().enumerate() {
                for earlier in 0..job.n {
                    let same_group = self.plan[earlier as usize].group.to_string() == job.group;
                    if same_group && !done.contains(&earlier) && !in_call.contains(&earlier) {
                        watch.violations.push(format!(
                            "job {} of group {} ran before job {earlier} was settled: call {jobs:?}",
                            job.n, job.group
                        ));
                    }
                }
                in_call.insert(job.n);
                if ctx[index].attempt() > self.max_receive_count {
                    watch.violations.push(format!(
                        "job {} handled at attempt {} past {}",
                        job.n,
                        ctx[index].attempt(),
                        self.max_receive_count
                    ));
                }
            }
            let distinct: HashSet<&String> = groups.iter().collect();
            if distinct.len() != groups.len() {
                watch
                    .violations
                    .push(format!("a group's messages are not together in {jobs:?}"));
            }
            for group in &distinct {
                if !watch.running.insert((*group).clone()) {
                    watch
                        .violations
                        .push(format!("two calls at once hold group {group}"));
                }
            }
        }
        let _running = Running {
            watch: self.watch.clone(),
            groups,
        };
        sleep(self.work).await;
        let mut outcome = BatchOutcome::ack();
        let mut panics = false;
        for (index, job) in jobs.iter().enumerate() {
            let settle = match self.plan[job.n as usize].step(ctx[index].attempt()) {
                Step::Ack => HandlerOutcome::ack(),
                Step::Retry => HandlerOutcome::retry(),
                Step::RetryAfter(delay) => HandlerOutcome::retry_after(delay),
                Step::DeadLetter => HandlerOutcome::dead_letter("scripted"),
                Step::Panic => {
                    panics = true;
                    HandlerOutcome::ack()
                }
            };
            outcome.set(index, settle);
        }
        // Each group's lane settles its messages of the call in order until one does not go
        // forward (a failure with attempts left): its later ones run again. A panic fails all.
        let mut watch = self.watch.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stopped: HashSet<&str> = HashSet::new();
        for (index, job) in jobs.iter().enumerate() {
            if stopped.contains(job.group.as_str()) {
                continue;
            }
            let step = if panics {
                Step::Retry
            } else {
                self.plan[job.n as usize].step(ctx[index].attempt())
            };
            let ends = matches!(step, Step::Ack | Step::DeadLetter)
                || ctx[index].attempt() >= self.max_receive_count;
            if ends {
                watch.ended.insert(job.n);
            } else {
                stopped.insert(&job.group);
            }
        }
        drop(watch);
        assert!(!panics, "scripted panic");
        outcome
    }
}

/// A dead-letter copy's reason and attempts headers.
type DeadLetterCopy = (Option<String>, Option<u32>);

async fn scripted_batches(case: Case) -> Result<(), TestCaseError> {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let recorder = broker.recorder();
    let queue = SqsQueue::new(QUEUE)
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(10))
        .dead_letter(DEAD_LETTERS, case.max_receive_count);
    let plan = Arc::new(case.plan.clone());
    let watch = Arc::new(Mutex::new(Watch::default()));
    let probe = Probe {
        plan: plan.clone(),
        watch: watch.clone(),
        work: Duration::from_millis(case.work_ms),
        max_receive_count: case.max_receive_count,
    };
    let app = RustStream::new(AppInfo::new("batch-fifo", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(queue.clone(), probe)
                .concurrency(case.concurrency)
                .batch_size(case.batch_size)
                .pollers(case.pollers)
                .timeout(Duration::from_secs(60))
                .batch(case.max, Duration::from_millis(case.window_ms))
                .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let publisher = broker.publisher(queue);
    for (n, planned) in plan.iter().enumerate() {
        sleep(Duration::from_millis(planned.gap_ms)).await;
        // `n` is the job's index in the case's plan: its place in the sent order.
        let job = Job::new(&planned.group.to_string(), n as u32);
        publisher
            .message(&job)
            .group_id(&job.group)
            .send()
            .await
            .expect("send");
    }
    // Done when the queue stays empty (every message deleted, after its ack or its dead-letter
    // copy) on three looks in a row; a case that never gets there fails at the case's bound.
    let url = account.get_queue_url(QUEUE).await.expect("queue exists");
    let mut empty_looks = 0;
    while empty_looks < 3 {
        sleep(Duration::from_millis(200)).await;
        empty_looks = if common::left(&account, &url).await == (0, 0, 0) {
            empty_looks + 1
        } else {
            0
        };
    }
    running.stop().await.unwrap();

    let watch = std::mem::take(&mut *watch.lock().unwrap());
    prop_assert!(
        watch.violations.is_empty(),
        "{:#?}",
        &watch.violations[..watch.violations.len().min(5)]
    );
    let settled = settled(&recorder);
    let dead = drain(&account, DEAD_LETTERS).await;
    let mut copies: HashMap<u32, Vec<DeadLetterCopy>> = HashMap::new();
    for message in &dead {
        let job: Job = serde_json::from_str(&message.body).expect("a job");
        let attribute = |name: &str| {
            message
                .message_attributes
                .get(name)
                .and_then(|value| value.string_value.clone())
        };
        copies.entry(job.n).or_default().push((
            attribute(DEAD_LETTER_REASON_HEADER),
            attribute(ATTEMPTS_HEADER).and_then(|a| a.parse().ok()),
        ));
    }
    let mut last_in_group: HashMap<u8, u32> = HashMap::new();
    let mut order: Vec<(usize, u32)> = Vec::new();
    for (position, handled) in recorder.handled(QUEUE).iter().enumerate() {
        if handled.settled != Settled::Retried {
            let job: Job = serde_json::from_str(&handled.body).expect("a job");
            order.push((position, job.n));
        }
    }
    for (_, n) in &order {
        let group = plan[*n as usize].group;
        if let Some(before) = last_in_group.insert(group, *n) {
            prop_assert!(
                before < *n,
                "job {n} settled after job {before} of its group"
            );
        }
    }
    for (n, planned) in plan.iter().enumerate() {
        let n = n as u32;
        let ends: Vec<&Settled> = settled
            .get(&n)
            .map(|ends| {
                ends.iter()
                    .filter(|end| **end != Settled::Retried)
                    .collect()
            })
            .unwrap_or_default();
        prop_assert_eq!(ends.len(), 1, "job {} ended {:?}", n, ends);
        let copies = copies.get(&n).cloned().unwrap_or_default();
        match ends[0] {
            Settled::Acked => prop_assert!(copies.is_empty(), "job {} acked and dead-lettered", n),
            _ => {
                prop_assert_eq!(copies.len(), 1, "job {} dead-lettered {:?}", n, copies);
                match &copies[0] {
                    (Some(reason), _) if reason == "scripted" => prop_assert!(
                        planned.script.contains(&Step::DeadLetter),
                        "job {} dead-lettered by a script without a dead-letter",
                        n
                    ),
                    (_, Some(attempts)) => prop_assert!(
                        *attempts >= case.max_receive_count,
                        "job {} dead-lettered after {} attempts",
                        n,
                        attempts
                    ),
                    other => prop_assert!(false, "job {}: a copy {:?}", n, other),
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn batch_handlers_keep_every_group_in_order_and_lose_nothing_whatever_each_message_does(
        case in case(),
    ) {
        run_case(scripted_batches(case))?;
    }
}
