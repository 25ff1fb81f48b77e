//! Network faults, live: a service consuming a FIFO queue (several groups) and a standard queue,
//! and publishing to both, talks to LocalStack through a fault-injecting proxy that, period after
//! period, refuses connections, stalls them, cuts requests and responses in the middle, and
//! answers HTTP 500 and throttling errors.
//!
//! It proves that the consumer and the publisher recover by themselves after each fault (the
//! stall only through the transport's attempt timeout: the proxy never lets a stalled connection
//! go) and back off meanwhile (the requests of each faulty period are counted: no tight loop);
//! that every published message is handled (nothing lost, no send fails); that no FIFO message is
//! stored twice (a send whose response was cut is retried with the same deduplication id, so a
//! body never gets a second message id); and that per group the first completions come in the
//! order sent. And that a FIFO run whose deletes fail (every `DeleteMessageBatch` answered HTTP
//! 500 past the batcher's retries) is replayed in order before anything later of its group.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::backend::Backend;
use common::engine::{Job, Log, Scripted};
use common::proxy::{Fault, Proxy};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually_within, live_endpoint, TestApp};
use rust_stream::transport::Transport;
use rust_stream::Publisher;

/// How long each fault lasts: longer than the SDK's retries ride out once its retry quota is
/// spent, so the library's own retries are what a send recovers by.
const FAULT_PERIOD: Duration = Duration::from_secs(5);
/// How long a cut response may be kept on waiting for it to hit a FIFO send and a FIFO receive.
/// The FIFO consumer receives only when it has room, and while every answer is cut its held
/// messages wait for deletes the batcher retries for up to 20 s; once those give up, the groups
/// are released, room frees and the next receive is cut. So the bound is past those 20 s.
const LONGEST_FAULT_PERIOD: Duration = Duration::from_secs(45);
/// Each SQS call attempt's bound, so that a stalled connection is given up; longer than the long
/// poll below.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(5);
/// The subscriptions' long poll.
const WAIT: Duration = Duration::from_secs(1);
/// How long a FIFO message whose receive answer was lost stays invisible.
const VISIBILITY: Duration = Duration::from_secs(5);
/// How long, after a fault ends, the service may take to publish and handle again: a stalled
/// call's attempt timeout, a hidden FIFO message's visibility timeout, plus the backoffs, with
/// room for a loaded 2-core machine.
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
/// FIFO groups published concurrently, each in order.
const GROUPS: usize = 4;
/// The pause between two sends of one publishing task.
const PACE: Duration = Duration::from_millis(100);
/// At most this many requests may reach the proxy per second of a fault. The service has about
/// eight callers of SQS (a poller per subscription; per queue a send, a delete and a visibility
/// batcher), each waiting out a jittered backoff before it tries again: the SDK's between its
/// attempts, then the engine's (receives from 1 s, batched calls from 50 ms doubling to 2 s). So
/// they make some ten requests a second during a fault (measured: 1 to 15), while a retry loop
/// without backoff makes hundreds: a refusal, a 500 or a throttling answer takes well under a
/// millisecond on loopback. 40 tells the two apart with room for unlucky jitter.
const MAX_REQUESTS_PER_FAULTY_SECOND: f64 = 40.0;

/// A message's identity: its group and its number in the group.
type Key = (String, u32);

fn key(job: &Job) -> Key {
    (job.group.clone(), job.n)
}

/// The sends of the publishing tasks, in the order each task made them.
#[derive(Default)]
struct Sent {
    fifo: Vec<Job>,
    standard: Vec<Job>,
    failures: Vec<String>,
}

type SharedSent = Arc<Mutex<Sent>>;

/// Sends `group`'s messages one after another until told to stop, recording each answer.
async fn publish(
    publisher: Publisher,
    group: String,
    fifo: bool,
    sent: SharedSent,
    stop: Arc<AtomicBool>,
) {
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let job = Job::new(&group, n);
        let mut message = publisher.message(&job);
        if fifo {
            message = message.group_id(&group);
        }
        match message.send().await {
            Ok(_) => {
                let mut sent = sent.lock().unwrap();
                if fifo {
                    sent.fifo.push(job);
                } else {
                    sent.standard.push(job);
                }
            }
            Err(error) => sent
                .lock()
                .unwrap()
                .failures
                .push(format!("{group}/{n}: {error}")),
        }
        tokio::time::sleep(PACE).await;
    }
}

/// How far the run has got: sends answered (per FIFO group) and messages handled, per queue.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Progress {
    fifo_sent: BTreeMap<String, usize>,
    standard_sent: usize,
    fifo_handled: usize,
    standard_handled: usize,
}

impl Progress {
    fn of(sent: &SharedSent, fifo: &Log, standard: &Log) -> Self {
        let sent = sent.lock().unwrap();
        let mut fifo_sent = BTreeMap::new();
        for job in &sent.fifo {
            *fifo_sent.entry(job.group.clone()).or_default() += 1;
        }
        Self {
            fifo_sent,
            standard_sent: sent.standard.len(),
            fifo_handled: fifo.lock().unwrap().len(),
            standard_handled: standard.lock().unwrap().len(),
        }
    }

    /// Whether every publishing task had a send answered, and both queues' consumers handled
    /// more, since `earlier`. Every publisher, not only one: a send still retrying when the next
    /// fault starts would ride out two faults in a row, longer than the 20 s a send is retried.
    fn beyond(&self, earlier: &Self) -> bool {
        (0..GROUPS).all(|group| {
            let group = format!("g{group}");
            self.fifo_sent.get(&group).copied().unwrap_or(0)
                > earlier.fifo_sent.get(&group).copied().unwrap_or(0)
        }) && self.standard_sent > earlier.standard_sent
            && self.fifo_handled > earlier.fifo_handled
            && self.standard_handled > earlier.standard_handled
    }
}

/// What one fault period did.
struct Period {
    fault: Fault,
    requests: u64,
    injected: u64,
    seconds: f64,
    recovered_in: Duration,
}

/// An SQS client configuration that talks to LocalStack through the fault proxy.
fn through(proxy: &Proxy) -> rust_stream::aws::AwsBrokerBuilder {
    SqsBroker::aws()
        .endpoint(proxy.url())
        .region("us-east-1")
        .test_credentials()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_rides_out_network_faults_without_loss_duplicates_or_reordering() {
    let Some(endpoint) = live_endpoint("fault_network (network faults through a proxy)") else {
        return;
    };
    // Queues are looked at directly, past the proxy.
    let direct = Backend::live().await.expect("the live endpoint is named");
    let proxy = Proxy::start(&endpoint).await;
    let broker = through(&proxy)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .connect()
        .await
        .expect("a complete configuration");

    // Room for more than the groups hold, so the poller keeps receiving while every group is busy
    // (and faults hit FIFO receives, not only the deletes the groups wait on).
    let fifo_queue = SqsQueue::new(direct.name("ledger.fifo"))
        .create_if_missing()
        .concurrency(GROUPS * 10)
        .wait(WAIT)
        .visibility_timeout(VISIBILITY);
    let standard_queue = SqsQueue::new(direct.name("events"))
        .create_if_missing()
        .wait(WAIT)
        .visibility_timeout(VISIBILITY);
    let (fifo_handler, fifo_log) = Scripted::new(|_, _| Ok(()));
    let (standard_handler, standard_log) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("fault-network", "0.0.0"))
        .shutdown_timeout(Duration::from_secs(10))
        .with_broker(broker.clone(), |b| {
            b.include(subscriber(fifo_queue.clone(), fifo_handler).build());
            b.include(subscriber(standard_queue.clone(), standard_handler).build());
        });
    let running = TestApp::spawn(app).await.expect("the service starts");

    let sent = SharedSent::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut publishers = Vec::new();
    for group in 0..GROUPS {
        publishers.push(tokio::spawn(publish(
            broker.publisher(fifo_queue.clone()),
            format!("g{group}"),
            true,
            sent.clone(),
            stop.clone(),
        )));
    }
    publishers.push(tokio::spawn(publish(
        broker.publisher(standard_queue.clone()),
        "standard".to_owned(),
        false,
        sent.clone(),
        stop.clone(),
    )));

    let progress = || Progress::of(&sent, &fifo_log, &standard_log);
    let warm = progress();
    eventually_within(
        "the service publishes and handles before any fault",
        RECOVERY_LIMIT,
        async || progress().beyond(&warm),
    )
    .await;

    let mut periods = Vec::new();
    for fault in Fault::ALL {
        let before = proxy.counts();
        let started = Instant::now();
        proxy.set(Some(fault));
        tokio::time::sleep(FAULT_PERIOD).await;
        // A cut response is kept on until it has hit the cases the claims rest on: a FIFO send
        // SQS stored but whose answer was lost (retried with the same deduplication id), and a
        // FIFO receive whose messages were lost on the way (they come back in order).
        while fault == Fault::CutResponse
            && started.elapsed() < LONGEST_FAULT_PERIOD
            && !["SendMessageBatch", "ReceiveMessage"]
                .iter()
                .all(|operation| {
                    proxy.hits().iter().any(|(hit, _)| {
                        hit.fault == fault
                            && hit.operation == *operation
                            && hit.queue == fifo_queue.name()
                    })
                })
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        proxy.set(None);
        let seconds = started.elapsed().as_secs_f64();
        let during = proxy.counts().since(&before);
        let ended = Instant::now();
        let at_end = progress();
        eventually_within(
            &format!("publishing and consuming go on after the {fault} fault"),
            RECOVERY_LIMIT,
            async || progress().beyond(&at_end),
        )
        .await;
        periods.push(Period {
            fault,
            requests: during.requests,
            injected: during.faults_of(fault),
            seconds,
            recovered_in: ended.elapsed(),
        });
    }

    stop.store(true, Ordering::SeqCst);
    for publisher in publishers {
        publisher.await.expect("a publishing task");
    }
    let (fifo_sent, standard_sent, failures) = {
        let sent = sent.lock().unwrap();
        (
            sent.fifo.clone(),
            sent.standard.clone(),
            sent.failures.clone(),
        )
    };
    let handled = |log: &Log| -> HashSet<Key> {
        log.lock()
            .unwrap()
            .iter()
            .map(|seen| key(&seen.job))
            .collect()
    };
    // Shown only if the test fails: how each period went before the final wait.
    for period in &periods {
        println!(
            "{}: {} injected, {} requests in {:.1} s, recovered in {:.1} s",
            period.fault,
            period.injected,
            period.requests,
            period.seconds,
            period.recovered_in.as_secs_f64()
        );
    }
    eventually_within(
        "every sent message is handled",
        RECOVERY_LIMIT,
        async || {
            let fifo = handled(&fifo_log);
            let standard = handled(&standard_log);
            // Per group, how many are missing and the first of them, so a stuck group shows.
            let mut missing: BTreeMap<&str, (usize, u32)> = BTreeMap::new();
            for job in fifo_sent.iter().filter(|job| !fifo.contains(&key(job))) {
                missing.entry(&job.group).or_insert((0, job.n)).0 += 1;
            }
            for job in standard_sent
                .iter()
                .filter(|job| !standard.contains(&key(job)))
            {
                missing.entry("standard").or_insert((0, job.n)).0 += 1;
            }
            if missing.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "not handled yet, per group (count, first): {missing:?}"
                ))
            }
        },
    )
    .await;

    // Everything handled was deleted: nothing visible, in flight or delayed on either queue. The
    // service still runs: a message handled once may come back (its delete's answer was lost, or
    // it expired while its group waited) and is handled and deleted again.
    for queue in [&fifo_queue, &standard_queue] {
        let url = direct.transport.get_queue_url(queue.name()).await.unwrap();
        eventually_within(
            &format!("`{}` ends empty", queue.name()),
            RECOVERY_LIMIT,
            async || {
                let counts = direct
                    .transport
                    .get_queue_attributes(
                        &url,
                        &[
                            "ApproximateNumberOfMessages",
                            "ApproximateNumberOfMessagesNotVisible",
                            "ApproximateNumberOfMessagesDelayed",
                        ],
                    )
                    .await
                    .unwrap();
                let left: u64 = counts
                    .values()
                    .map(|count| count.parse::<u64>().unwrap())
                    .sum();
                if left == 0 {
                    Ok(())
                } else {
                    Err(counts)
                }
            },
        )
        .await;
    }

    running.stop().await.expect("the service stops cleanly");

    let fifo_handled = fifo_log.lock().unwrap().clone();
    let standard_handled = standard_log.lock().unwrap().clone();
    let fifo_seen = handled(&fifo_log);
    let standard_seen = handled(&standard_log);
    let lost = fifo_sent
        .iter()
        .filter(|job| !fifo_seen.contains(&key(job)))
        .count()
        + standard_sent
            .iter()
            .filter(|job| !standard_seen.contains(&key(job)))
            .count();

    // A body stored twice in the FIFO queue comes with two message ids; a redelivery of one
    // stored message keeps its id.
    let mut ids_of: HashMap<Key, HashSet<&str>> = HashMap::new();
    for seen in &fifo_handled {
        ids_of
            .entry(key(&seen.job))
            .or_default()
            .insert(&seen.message_id);
    }
    let stored_twice: Vec<&Key> = ids_of
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|(job, _)| job)
        .collect();

    // Per group, the first completion of each message, in the order they came.
    let fifo_sent_keys: HashSet<Key> = fifo_sent.iter().map(key).collect();
    let mut first_completions: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    let mut completed = HashSet::new();
    for seen in &fifo_handled {
        if fifo_sent_keys.contains(&key(&seen.job)) && completed.insert(key(&seen.job)) {
            first_completions
                .entry(&seen.job.group)
                .or_default()
                .push(seen.job.n);
        }
    }
    let mut sent_order: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for job in &fifo_sent {
        sent_order.entry(&job.group).or_default().push(job.n);
    }
    let order_violations = sent_order
        .iter()
        .filter(|(group, order)| first_completions.get(*group) != Some(*order))
        .count();

    // Handled though its send was answered with an error: stored after all.
    let unreported = fifo_seen.difference(&fifo_sent_keys).count()
        + standard_seen
            .difference(&standard_sent.iter().map(key).collect())
            .count();
    let fifo_redeliveries = fifo_handled.len() - fifo_seen.len();
    let standard_duplicates = standard_handled.len() - standard_seen.len();
    let totals = proxy.counts();
    // Written past libtest's capture, so the figures show in every test run's output.
    let mut report = String::new();
    macro_rules! say {
        ($($arg:tt)*) => {{
            report.push_str(&format!($($arg)*));
            report.push('\n');
        }};
    }
    say!(
        "network faults: {} requests through the proxy, {} passed",
        totals.requests,
        totals.passed
    );
    let hits = proxy.hits();
    let fifo_name = fifo_queue.name();
    let hit = |fault: Fault, operation: &str, queue: &str| {
        hits.iter()
            .filter(|(hit, _)| {
                hit.fault == fault && hit.operation == operation && hit.queue == queue
            })
            .map(|(_, count)| count)
            .sum::<u64>()
    };
    for period in &periods {
        say!(
            "  {:<12} {:>3} injected, {:>3} requests in {:.1} s ({:.1}/s), recovered in {:.1} s",
            period.fault.to_string(),
            period.injected,
            period.requests,
            period.seconds,
            period.requests as f64 / period.seconds,
            period.recovered_in.as_secs_f64(),
        );
        let mut by_operation: BTreeMap<String, u64> = BTreeMap::new();
        for (hit, count) in hits.iter().filter(|(hit, _)| hit.fault == period.fault) {
            let queue = if hit.queue == fifo_name {
                " (FIFO)"
            } else {
                ""
            };
            *by_operation
                .entry(format!("{}{queue}", hit.operation))
                .or_default() += count;
        }
        say!(
            "               {}",
            by_operation
                .iter()
                .map(|(operation, count)| format!("{operation} {count}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    say!(
        "  faults injected in all: {}",
        Fault::ALL
            .iter()
            .map(|fault| format!("{fault} {}", totals.faults_of(*fault)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    say!(
        "  sent: {} FIFO over {GROUPS} groups, {} standard; publish failures: {}",
        fifo_sent.len(),
        standard_sent.len(),
        failures.len()
    );
    say!(
        "  messages lost: {lost}; FIFO duplicates stored: {}; order violations: {order_violations}; \
         handled though their send failed: {unreported}",
        stored_twice.len()
    );
    say!(
        "  redeliveries: FIFO {fifo_redeliveries}, standard {standard_duplicates} (at least once)"
    );

    common::report(report.trim_end());

    for period in &periods {
        assert!(
            period.injected > 0,
            "the {} period injected nothing: no request reached the proxy",
            period.fault
        );
        let rate = period.requests as f64 / period.seconds;
        assert!(
            rate <= MAX_REQUESTS_PER_FAULTY_SECOND,
            "{} requests a second during the {} fault: a retry loop without backoff",
            rate,
            period.fault
        );
    }
    // The cases the claims rest on happened.
    assert!(
        hit(Fault::CutResponse, "SendMessageBatch", fifo_name) > 0,
        "no FIFO send had its response cut"
    );
    assert!(
        hit(Fault::CutResponse, "ReceiveMessage", fifo_name) > 0,
        "no FIFO receive had its response cut"
    );
    assert!(
        failures.is_empty(),
        "sends failed instead of riding out the faults: {failures:#?}"
    );
    assert_eq!(lost, 0, "sent messages never handled");
    assert!(
        stored_twice.is_empty(),
        "FIFO messages stored twice (one body, two message ids): {stored_twice:?}"
    );
    assert_eq!(
        order_violations, 0,
        "per group, first completions differ from the sent order:\nsent {sent_order:?}\nfirst completions {first_completions:?}"
    );
}

/// A visibility change is tried once per call by the SDK, so the engine alone decides what is
/// repeated: an extension whose answer was lost, never a release (a repeat with the old receipt
/// handle could reach a newer receive of the message). A delete keeps the SDK's retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_does_not_repeat_a_visibility_change_itself() {
    let Some(endpoint) = live_endpoint("fault_network (SDK attempts per call)") else {
        return;
    };
    let direct = Backend::live().await.expect("the live endpoint is named");
    let proxy = Proxy::start(&endpoint).await;
    let transport = through(&proxy)
        .transport()
        .await
        .expect("a complete configuration");
    let url = direct
        .transport
        .create_queue(&direct.name("attempts"), Default::default())
        .await
        .expect("the queue is created");
    proxy.set(Some(Fault::ServerError));

    let before = proxy.counts();
    let change = transport
        .change_message_visibility_batch(
            &url,
            vec![rust_stream::transport::ChangeVisibilityEntry {
                id: "0".into(),
                receipt_handle: "a-receipt-handle".into(),
                visibility_timeout: 0,
            }],
        )
        .await;
    let visibility_requests = proxy.counts().since(&before).requests;

    let before = proxy.counts();
    let delete = transport
        .delete_message_batch(
            &url,
            vec![rust_stream::transport::DeleteEntry {
                id: "0".into(),
                receipt_handle: "a-receipt-handle".into(),
            }],
        )
        .await;
    let delete_requests = proxy.counts().since(&before).requests;
    proxy.set(None);

    assert!(
        change.is_err() && delete.is_err(),
        "every answer is HTTP 500"
    );
    assert_eq!(
        visibility_requests, 1,
        "a ChangeMessageVisibilityBatch went {visibility_requests} times"
    );
    assert!(
        delete_requests > 1,
        "a DeleteMessageBatch keeps the SDK's retries: {delete_requests} requests"
    );
}

/// The replay contract of `docs/fifo.md` on LocalStack: a lane deletes its group's run in one
/// call; while every `DeleteMessageBatch` is answered HTTP 500 (longer than the batcher's 20 s of
/// retries), the run's deletes fail, its messages come back after their visibility timeout and
/// are handled again, in order, and the later messages of the group, sent meanwhile, run only
/// after them. So the handler's calls are the run, then rounds that each start again from the
/// group's first undeleted message and go on in order (a replay may bring the later messages
/// along, in the same run, after it), the last ending with the later messages: a later message
/// never runs before a replay of the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_run_whose_deletes_fail_is_replayed_in_order_on_localstack() {
    let Some(endpoint) = live_endpoint("fault_network (a FIFO run's deletes failing)") else {
        return;
    };
    let direct = Backend::live().await.expect("the live endpoint is named");
    let proxy = Proxy::start(&endpoint).await;
    let broker = through(&proxy)
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .connect()
        .await
        .expect("a complete configuration");
    let queue = SqsQueue::new(direct.name("run.fifo"))
        .create_if_missing()
        .wait(WAIT)
        .visibility_timeout(VISIBILITY);
    let publisher = broker.publisher(queue.clone());
    for n in 1..=5 {
        publisher
            .message(&Job::new("g", n))
            .group_id("g")
            .send()
            .await
            .expect("sent");
    }
    proxy.set_for("DeleteMessageBatch", Some(Fault::ServerError));
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("fault-network-run", "0.0.0"))
        .shutdown_timeout(Duration::from_secs(10))
        .with_broker(broker.clone(), |b| {
            b.include(subscriber(queue.clone(), handler).build());
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let calls =
        |log: &Log| -> Vec<u32> { log.lock().unwrap().iter().map(|seen| seen.job.n).collect() };
    eventually_within("the run handled", Duration::from_secs(30), async || {
        calls(&log).len() >= 5
    })
    .await;
    // Later messages of the group, sent while the run's deletes fail: SQS holds the group while
    // the run is in flight.
    for n in 6..=8 {
        publisher
            .message(&Job::new("g", n))
            .group_id("g")
            .send()
            .await
            .expect("sent");
    }
    // Past the batcher's 20 s of retries: the run's deletes are answered as failed.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let failed_deletes = proxy.counts().faults_of(Fault::ServerError);
    proxy.set_for("DeleteMessageBatch", None);
    eventually_within(
        "the later messages handled",
        Duration::from_secs(60),
        async || calls(&log).last() == Some(&8),
    )
    .await;
    // Nothing comes back once the deletes pass: everything handled was deleted.
    tokio::time::sleep(VISIBILITY * 2).await;
    running.stop().await.unwrap();

    let calls = calls(&log);
    assert!(failed_deletes > 1, "the deletes were answered HTTP 500");
    // Rounds: each starts where n falls back.
    let mut rounds: Vec<Vec<u32>> = Vec::new();
    for &n in &calls {
        match rounds.last_mut() {
            Some(round) if round.last().is_some_and(|last| n > *last) => round.push(n),
            _ => rounds.push(vec![n]),
        }
    }
    assert_eq!(
        rounds[0],
        [1, 2, 3, 4, 5],
        "the run first, in order: {calls:?}"
    );
    assert!(rounds.len() >= 2, "the run was replayed: {calls:?}");
    for round in &rounds {
        let from_the_first: Vec<u32> = (1..=round.len() as u32).collect();
        assert_eq!(
            round, &from_the_first,
            "each round starts from the group's first undeleted message and goes on in order, so nothing later ran before a replay: {calls:?}"
        );
    }
    assert_eq!(
        rounds.last().unwrap().len(),
        8,
        "the last round ends with the later messages, and nothing came back after: {calls:?}"
    );
}
