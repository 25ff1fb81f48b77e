//! Handler faults, drawn at random, on both backends (the in-process account on a paused clock,
//! LocalStack in real time). Each attempt at a message succeeds, returns its own error (`Err(e)`),
//! returns `HandlerOutcome::Failed`, panics, outlives the subscription's `timeout`, or never returns
//! at all, as drawn from a seeded RNG before the run. On a FIFO queue of three groups and on a
//! standard queue, each with a `RetryPolicy` and a dead-letter queue after 3 attempts:
//!
//! - the service keeps running: its run has not ended after every fault, and messages sent after
//!   the faults are handled;
//! - each message ends handled, on the attempt of its first drawn success, or, when its three draws
//!   are all faults, dead-lettered with `rust_stream.attempts` 3 and its last fault as the reason;
//!   no message is attempted more often than that;
//! - a handler that outlives its timeout, or never returns, is cancelled: it never completes and no
//!   call is left running;
//! - on FIFO, per group, the first completions follow the sent order, and no message starts before
//!   every earlier message of its group was acked or dead-lettered;
//! - the source queues end empty (visible + in flight + delayed = 0) and the dead-letter queues
//!   hold exactly the dead-lettered messages.
//!
//! The seed is printed; `RUST_STREAM_FAULT_SEED=<u64> cargo test --test fault_handlers` replays a
//! run (the default seed is fixed, so CI runs the same draws each time).

#[macro_use]
mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::backend::Backend;
use common::engine::Job;
use rust_stream::prelude::*;
use rust_stream::testing::{eventually_within, Recorder, Settled, TestApp};
use rust_stream::transport::{ReceivedMessage, Transport};
use rust_stream::{
    IntoOutcome, RetryPolicy, ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER,
    ORIGINAL_MESSAGE_ID_HEADER,
};

both_backends!(
    drawn_handler_faults_on_a_fifo_queue_end_each_message_handled_or_dead_lettered_in_group_order,
    drawn_handler_faults_on_a_standard_queue_end_each_message_handled_or_dead_lettered,
);

/// The environment variable that overrides the seed.
const SEED_VAR: &str = "RUST_STREAM_FAULT_SEED";
const DEFAULT_SEED: u64 = 0x5eed_f417;

/// Messages with drawn faults, sent before any fault happened.
const FAULTY_MESSAGES: u32 = 30;
/// FIFO groups; later messages, one per group, are sent once every faulty message has ended.
const GROUPS: u32 = 3;
const MAX_ATTEMPTS: u32 = 3;
/// The subscription's handler timeout. A successful attempt returns at its first poll, so even a
/// loaded machine does not make it time out.
const TIMEOUT: Duration = Duration::from_secs(1);
/// How long an overrunning handler would take if nothing cancelled it.
const OVERRUN: Duration = Duration::from_secs(60);
/// Patience for the whole run to settle; no real time on the paused clock.
const PATIENCE: Duration = Duration::from_secs(90);

/// What one attempt at a message does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Success,
    /// Returns an error of its own, as a handler returning `Result<(), E: Display>` does.
    Error,
    /// Returns `HandlerOutcome::Failed`.
    Failed,
    Panic,
    /// Would succeed, long after its timeout.
    Overrun,
    /// Never returns.
    Hang,
}

const FAULTS: [Fault; 5] = [
    Fault::Error,
    Fault::Failed,
    Fault::Panic,
    Fault::Overrun,
    Fault::Hang,
];

impl Fault {
    /// What the dead-letter reason says when this fault was the last attempt.
    fn reason(self) -> &'static str {
        match self {
            Fault::Success => unreachable!("a success is not dead-lettered"),
            Fault::Error => "drawn error",
            Fault::Failed => "drawn failure",
            Fault::Panic => "the handler panicked: drawn panic",
            Fault::Overrun | Fault::Hang => "the handler did not finish within its timeout",
        }
    }
}

/// How a message must end, by its draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Handled { on_attempt: u32 },
    DeadLettered { last: Fault },
}

/// What each attempt at each message does, drawn before the run.
#[derive(Debug)]
struct Plan {
    /// Per message number, the fault of each attempt.
    draws: Vec<Vec<Fault>>,
}

impl Plan {
    /// Four in ten attempts succeed; the rest are each kind of fault alike. So that every kind is
    /// tried on every seed, the first attempts of five messages are the five kinds, in drawn order.
    /// The later messages always succeed.
    fn draw(seed: u64) -> Self {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut draws: Vec<Vec<Fault>> = (0..FAULTY_MESSAGES)
            .map(|_| {
                (0..MAX_ATTEMPTS)
                    .map(|_| match rng.u8(0..10) {
                        0..4 => Fault::Success,
                        _ => FAULTS[rng.usize(..FAULTS.len())],
                    })
                    .collect()
            })
            .collect();
        let mut kinds = FAULTS;
        rng.shuffle(&mut kinds);
        let mut picks: Vec<usize> = (0..draws.len()).collect();
        rng.shuffle(&mut picks);
        for (kind, n) in kinds.into_iter().zip(picks) {
            draws[n][0] = kind;
        }
        draws.extend((0..GROUPS).map(|_| vec![Fault::Success]));
        Self { draws }
    }

    fn messages(&self) -> u32 {
        self.draws.len() as u32
    }

    /// The fault of the `attempt`th call (1 for the first); a call past the draws succeeds, and
    /// the test fails on the count of calls.
    fn fault(&self, n: u32, attempt: u32) -> Fault {
        self.draws[n as usize]
            .get(attempt as usize - 1)
            .copied()
            .unwrap_or(Fault::Success)
    }

    fn end(&self, n: u32) -> End {
        let draws = &self.draws[n as usize];
        match draws.iter().position(|fault| *fault == Fault::Success) {
            Some(i) => End::Handled {
                on_attempt: i as u32 + 1,
            },
            None => End::DeadLettered {
                last: *draws.last().expect("at least one draw"),
            },
        }
    }

    fn attempts(&self, n: u32) -> u32 {
        match self.end(n) {
            End::Handled { on_attempt } => on_attempt,
            End::DeadLettered { .. } => MAX_ATTEMPTS,
        }
    }
}

fn job(n: u32) -> Job {
    Job::new(&format!("g{}", n % GROUPS), n)
}

/// The seed of this run: the environment's, or the fixed default.
fn seed() -> u64 {
    match std::env::var(SEED_VAR) {
        Ok(value) => value
            .parse()
            .unwrap_or_else(|_| panic!("{SEED_VAR}={value:?} is not a u64")),
        Err(_) => DEFAULT_SEED,
    }
}

// ---------------------------------------------------------------------------------------------
// The handler: does what the plan drew for each attempt.

struct Drawn {
    plan: Arc<Plan>,
    /// Calls so far, per message number.
    calls: Mutex<BTreeMap<u32, u32>>,
    /// Calls started and not yet returned, unwound or cancelled.
    alive: Arc<AtomicUsize>,
    /// Set if an overrunning call ever completed, which a cancelled call cannot.
    overran: AtomicBool,
    /// On FIFO, check at each start that the group's earlier messages had their last call.
    fifo: bool,
    /// Messages whose last call (the plan's) returned, unwound or was cancelled. The recorder
    /// is no witness here: it counts a FIFO message settled once its lane's run is deleted,
    /// after later messages of its group may have run.
    last_call_over: Arc<Mutex<BTreeSet<u32>>>,
    /// Starts that came before an earlier message of their group had its last call.
    out_of_order: Mutex<Vec<String>>,
}

/// Notes a message's last call as over when the call's future returns, unwinds or is dropped.
struct LastCall(Arc<Mutex<BTreeSet<u32>>>, u32);

impl Drop for LastCall {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(self.1);
    }
}

/// Counts a call as alive until its future returns, unwinds or is dropped by a cancel.
struct Alive(Arc<AtomicUsize>);

impl Alive {
    fn new(alive: &Arc<AtomicUsize>) -> Self {
        alive.fetch_add(1, Ordering::SeqCst);
        Self(alive.clone())
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A handler's own error type.
#[derive(Debug)]
struct DrawnError(u32);

impl std::fmt::Display for DrawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "drawn error on message {}", self.0)
    }
}

impl Handle<Job> for Drawn {
    async fn handle(&self, job: &Job, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        let attempt = {
            let mut calls = self.calls.lock().unwrap();
            let calls = calls.entry(job.n).or_default();
            *calls += 1;
            *calls
        };
        if self.fifo {
            let over = self.last_call_over.lock().unwrap().clone();
            for earlier in (0..job.n).filter(|m| m % GROUPS == job.n % GROUPS) {
                if !over.contains(&earlier) {
                    self.out_of_order.lock().unwrap().push(format!(
                        "{job:?} (attempt {attempt}) started before message {earlier} of its group had its last call"
                    ));
                }
            }
        }
        let _last = (attempt == self.plan.attempts(job.n))
            .then(|| LastCall(self.last_call_over.clone(), job.n));
        let _alive = Alive::new(&self.alive);
        match self.plan.fault(job.n, attempt) {
            Fault::Success => Ok(()),
            // What a handler returning `Result<(), DrawnError>` gives the engine.
            Fault::Error => Err(Err::<(), _>(DrawnError(job.n)).into_outcome()),
            Fault::Failed => Err(HandlerOutcome::failed(format!(
                "drawn failure on message {}",
                job.n
            ))),
            Fault::Panic => panic!("drawn panic on message {}", job.n),
            Fault::Overrun => {
                tokio::time::sleep(OVERRUN).await;
                self.overran.store(true, Ordering::SeqCst);
                Ok(())
            }
            Fault::Hang => std::future::pending().await,
        }
    }
}

/// Per message number, the attempt that settled it for good (acked or dead-lettered) first, with
/// its position among all such settlements of the queue.
fn finally_settled(recorder: &Recorder, queue: &str) -> BTreeMap<u32, (usize, Settled)> {
    let mut settled = BTreeMap::new();
    for handled in recorder.handled(queue) {
        if handled.settled == Settled::Retried {
            continue;
        }
        let job: Job = serde_json::from_str(&handled.body).expect("a job");
        let position = settled.len();
        settled.entry(job.n).or_insert((position, handled.settled));
    }
    settled
}

// ---------------------------------------------------------------------------------------------
// The scenarios.

async fn drawn_handler_faults_on_a_fifo_queue_end_each_message_handled_or_dead_lettered_in_group_order<
    T: Transport,
>(
    backend: Backend<T>,
) {
    run_drawn_faults(&backend, "faults.fifo").await;
}

async fn drawn_handler_faults_on_a_standard_queue_end_each_message_handled_or_dead_lettered<
    T: Transport,
>(
    backend: Backend<T>,
) {
    run_drawn_faults(&backend, "faults").await;
}

async fn run_drawn_faults<T: Transport>(backend: &Backend<T>, base: &str) {
    let seed = seed();
    common::report(format_args!(
        "handler faults on {base} ({:?}): seed {seed} (set {SEED_VAR} to replay)",
        backend.kind
    ));
    let plan = Arc::new(Plan::draw(seed));
    let fifo = base.ends_with(".fifo");
    let dlq_base = if fifo {
        "faults-dlq.fifo"
    } else {
        "faults-dlq"
    };
    let queue = SqsQueue::new(backend.name(base))
        .create_if_missing()
        .retry(
            RetryPolicy::exponential(Duration::from_millis(100), Duration::from_millis(400))
                .seeded(seed),
        )
        .dead_letter(backend.name(dlq_base), MAX_ATTEMPTS)
        .timeout(TIMEOUT)
        // Stopping lets the long poll in flight end: a short one keeps LocalStack's run short.
        .wait(Duration::from_secs(1));
    let name = queue.name().to_owned();
    let recorder = backend.broker.recorder();
    let handler = Arc::new(Drawn {
        plan: plan.clone(),
        calls: Mutex::default(),
        alive: Arc::default(),
        overran: AtomicBool::new(false),
        fifo,
        last_call_over: Arc::default(),
        out_of_order: Mutex::default(),
    });
    let app = RustStream::new(AppInfo::new("handler-faults", "0")).with_broker(
        backend.broker.clone(),
        |b| {
            b.include(subscriber(queue.clone(), handler.clone()).build());
        },
    );
    let running = TestApp::spawn(app).await.expect("the service starts");

    let publisher = backend.broker.publisher(queue.clone());
    let send = async |numbers: std::ops::Range<u32>| {
        for n in numbers {
            let job = job(n);
            let message = publisher.message(&job);
            let message = if fifo {
                message.group_id(&job.group)
            } else {
                message
            };
            message.send().await.expect("send");
        }
    };
    let settled_count = async |count: u32| {
        let settled = finally_settled(&recorder, &name).len() as u32;
        if settled >= count {
            Ok(())
        } else {
            Err(format!("{settled} of {count} settled"))
        }
    };

    send(0..FAULTY_MESSAGES).await;
    eventually_within("every faulty message settled", PATIENCE, async || {
        settled_count(FAULTY_MESSAGES).await
    })
    .await;
    assert!(
        !running.is_finished(),
        "the service's run ended under handler faults"
    );
    send(FAULTY_MESSAGES..plan.messages()).await;
    eventually_within("the later messages settled", PATIENCE, async || {
        settled_count(plan.messages()).await
    })
    .await;
    running.drain().await;
    let source = running
        .queues()
        .await
        .into_iter()
        .find(|load| load.queue == name)
        .expect("the app reports its queue");
    assert_eq!(
        (source.visible, source.in_flight, source.delayed),
        (0, 0, 0),
        "the source queue ends empty"
    );
    assert!(!running.is_finished(), "the service still runs at the end");
    running.stop().await.expect("the service stops cleanly");

    assert_eq!(
        handler.alive.load(Ordering::SeqCst),
        0,
        "a timed-out or hanging call is still running"
    );
    assert!(
        !handler.overran.load(Ordering::SeqCst),
        "a call that outlived its timeout completed: it was not cancelled"
    );

    // Each message was attempted exactly as its draws say, and settled once, as they say.
    let calls = handler.calls.lock().unwrap().clone();
    let handled = recorder.handled(&name);
    let mut message_ids: HashMap<u32, String> = HashMap::new();
    let mut settlements: BTreeMap<u32, Vec<Settled>> = BTreeMap::new();
    for attempt in &handled {
        let job: Job = serde_json::from_str(&attempt.body).expect("a job");
        message_ids.insert(job.n, attempt.message_id.clone());
        settlements.entry(job.n).or_default().push(attempt.settled);
    }
    let mut dead_expected: BTreeMap<u32, Fault> = BTreeMap::new();
    for n in 0..plan.messages() {
        let want_calls = plan.attempts(n);
        assert_eq!(
            calls.get(&n).copied(),
            Some(want_calls),
            "calls of message {n}, drawn {:?}",
            plan.draws[n as usize]
        );
        let mut want = vec![Settled::Retried; want_calls as usize - 1];
        match plan.end(n) {
            End::Handled { .. } => want.push(Settled::Acked),
            End::DeadLettered { last } => {
                want.push(Settled::DeadLettered);
                dead_expected.insert(n, last);
            }
        }
        assert_eq!(
            settlements.get(&n),
            Some(&want),
            "settlements of message {n}, drawn {:?}",
            plan.draws[n as usize]
        );
    }
    let recorded_dead: BTreeSet<String> = recorder
        .dead_lettered(&name)
        .into_iter()
        .map(|dead| dead.message_id)
        .collect();
    let want_dead: BTreeSet<String> = dead_expected
        .keys()
        .map(|n| message_ids[n].clone())
        .collect();
    assert_eq!(recorded_dead, want_dead, "the dead-lettered messages");

    // The dead-letter queue holds exactly those, each with its attempts and last fault.
    let dlq_url = backend
        .transport
        .get_queue_url(&backend.name(dlq_base))
        .await
        .unwrap();
    let copies = backend.take_all(&dlq_url, dead_expected.len()).await;
    let mut copied: BTreeMap<u32, &ReceivedMessage> = BTreeMap::new();
    for copy in &copies {
        let job: Job = serde_json::from_str(&copy.body).expect("a job");
        assert!(
            copied.insert(job.n, copy).is_none(),
            "message {} dead-lettered twice",
            job.n
        );
    }
    assert_eq!(
        copied.keys().collect::<Vec<_>>(),
        dead_expected.keys().collect::<Vec<_>>(),
        "the dead-letter queue's messages"
    );
    for (n, last) in &dead_expected {
        let copy = copied[n];
        let attribute = |name: &str| {
            copy.message_attributes
                .get(name)
                .and_then(|value| value.string_value.clone())
        };
        assert_eq!(
            attribute(ATTEMPTS_HEADER),
            Some(MAX_ATTEMPTS.to_string()),
            "{n}"
        );
        assert_eq!(
            attribute(ORIGINAL_MESSAGE_ID_HEADER).as_ref(),
            Some(&message_ids[n])
        );
        let reason = attribute(DEAD_LETTER_REASON_HEADER).expect("a reason");
        assert!(
            reason.contains(last.reason())
                && reason.ends_with(&format!("(after {MAX_ATTEMPTS} attempts)")),
            "message {n}, last fault {last:?}: {reason}"
        );
        if fifo {
            assert_eq!(copy.group_id(), Some(job(*n).group.as_str()));
        }
    }

    if fifo {
        assert_eq!(
            handler.out_of_order.lock().unwrap().as_slice(),
            &[] as &[String],
            "no message starts before its group's earlier ones had their last call"
        );
        let settled = finally_settled(&recorder, &name);
        for group in 0..GROUPS {
            let mut firsts: Vec<(usize, u32)> = settled
                .iter()
                .filter(|(n, _)| *n % GROUPS == group)
                .map(|(n, (position, _))| (*position, *n))
                .collect();
            firsts.sort_unstable();
            let order: Vec<u32> = firsts.into_iter().map(|(_, n)| n).collect();
            let sent: Vec<u32> = (0..plan.messages())
                .filter(|n| n % GROUPS == group)
                .collect();
            assert_eq!(order, sent, "first completions of group g{group}");
        }
    }

    let mut tried: BTreeMap<Fault, u32> = BTreeMap::new();
    for (n, count) in &calls {
        for attempt in 1..=*count {
            *tried.entry(plan.fault(*n, attempt)).or_default() += 1;
        }
    }
    for kind in FAULTS {
        assert!(tried.contains_key(&kind), "{kind:?} was never tried");
    }
    common::report(format_args!(
        "handler faults on {base} ({:?}): attempts by kind {tried:?}; {} handled, {} dead-lettered, 0 lost",
        backend.kind,
        plan.messages() as usize - dead_expected.len(),
        dead_expected.len()
    ));
}
