//! Operations on LocalStack: rolling restarts during a FIFO backlog, and stalled calls through
//! the fault proxy. The in-process twins, with more cases and a paused clock, are in
//! `tests/engine_operations.rs`; these show the same on a real server over real connections.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::backend::Backend;
use common::engine::Job;
use common::proxy::{Fault, Proxy};
use rust_stream::prelude::*;
use rust_stream::testing::{live_endpoint, TestApp};
use rust_stream::transport::Transport;

/// (app, job, receive count, started, finished)
type Calls = Arc<Mutex<Vec<(usize, Job, u32, Instant, Option<Instant>)>>>;

struct Worker {
    app: usize,
    calls: Calls,
    work: fn(&Job) -> Duration,
}

impl Handle<Job> for Worker {
    async fn handle(&self, job: &Job, _: &(), ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        let index = {
            let mut calls = self.calls.lock().unwrap();
            calls.push((
                self.app,
                job.clone(),
                ctx.sqs().receive_count(),
                Instant::now(),
                None,
            ));
            calls.len() - 1
        };
        tokio::time::sleep((self.work)(job)).await;
        self.calls.lock().unwrap()[index].4 = Some(Instant::now());
        Ok(())
    }
}

async fn start(broker: &SqsBroker, queue: SqsQueue, worker: Worker) -> TestApp {
    start_with(broker, queue, worker, rust_stream::DEFAULT_SHUTDOWN_TIMEOUT).await
}

async fn start_with(
    broker: &SqsBroker,
    queue: SqsQueue,
    worker: Worker,
    budget: Duration,
) -> TestApp {
    TestApp::spawn(
        RustStream::new(AppInfo::new("live-operations", "0"))
            .shutdown_timeout(budget)
            .with_broker(broker.clone(), |b| {
                b.include(subscriber(queue, worker).build());
            }),
    )
    .await
    .expect("the app starts")
}

/// Visible + in flight + delayed.
async fn left<T: Transport>(backend: &Backend<T>, url: &str) -> u64 {
    let (visible, in_flight, delayed) = backend.left(url).await;
    visible + in_flight + delayed
}

/// First completions per group, in the order they completed.
fn first_completions(
    calls: &[(usize, Job, u32, Instant, Option<Instant>)],
) -> BTreeMap<String, Vec<u32>> {
    let mut done: Vec<_> = calls.iter().filter(|call| call.4.is_some()).collect();
    done.sort_by_key(|call| call.4);
    let mut seen = std::collections::HashSet::new();
    let mut groups: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (_, job, ..) in done {
        if seen.insert((job.group.clone(), job.n)) {
            groups.entry(job.group.clone()).or_default().push(job.n);
        }
    }
    groups
}

const GROUPS: u32 = 4;
const PER_GROUP: u32 = 40;
const RESTARTS: usize = 6;

/// A FIFO backlog consumed by `RESTARTS + 1` apps one after another, each stopped gracefully
/// after 2 s with a stop budget of `budget`; the last runs until the queue is empty. Nothing may
/// reach the dead-letter queue.
async fn rolling_restarts(
    backend: &Backend<rust_stream::aws::AwsTransport>,
    existing: bool,
    budget: Duration,
) {
    let base = if existing {
        "restarts-old"
    } else {
        "restarts-new"
    };
    let dlq_name = backend.name(&format!("{base}-dlq.fifo"));
    let queue_name = backend.name(&format!("{base}.fifo"));
    // Short long polls: a stop waits for the one in flight.
    let mut queue = SqsQueue::new(&queue_name)
        .dead_letter(&dlq_name, 3)
        .wait(Duration::from_secs(1));
    if existing {
        // An existing queue whose redrive moves a message on its fourth receive.
        let dlq = backend.queue(&format!("{base}-dlq.fifo"), &[]).await;
        let arn = backend
            .transport
            .get_queue_attributes(&dlq, &["QueueArn"])
            .await
            .unwrap()["QueueArn"]
            .clone();
        let policy = format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":3}}"#);
        backend
            .queue(
                &format!("{base}.fifo"),
                &[("RedrivePolicy", policy.as_str())],
            )
            .await;
    } else {
        queue = queue.create_if_missing();
        // The first start creates the queue, with its redrive backstop.
        let app = start(
            &backend.broker,
            queue.clone(),
            Worker {
                app: 0,
                calls: Calls::default(),
                work: |_| Duration::ZERO,
            },
        )
        .await;
        app.stop().await.unwrap();
        let url = backend.transport.get_queue_url(&queue_name).await.unwrap();
        let redrive = backend
            .transport
            .get_queue_attributes(&url, &["RedrivePolicy"])
            .await
            .unwrap()["RedrivePolicy"]
            .clone();
        assert!(redrive.contains("13"), "maxReceiveCount 3 + 10: {redrive}");
    }
    let publisher = backend.broker.publisher(queue.clone());
    for n in 1..=PER_GROUP {
        for g in 0..GROUPS {
            let group = format!("g{g}");
            publisher
                .message(&Job::new(&group, n))
                .group_id(&group)
                .send()
                .await
                .unwrap();
        }
    }
    let url = backend.transport.get_queue_url(&queue_name).await.unwrap();
    let calls = Calls::default();
    for app in 0..=RESTARTS {
        let running = start_with(
            &backend.broker,
            queue.clone(),
            Worker {
                app,
                calls: calls.clone(),
                work: |_| Duration::from_millis(300),
            },
            budget,
        )
        .await;
        if app < RESTARTS {
            tokio::time::sleep(Duration::from_secs(2)).await;
        } else {
            backend.until_empty(&url, Duration::from_secs(120)).await;
        }
        running.stop().await.unwrap();
    }
    let dlq = backend.transport.get_queue_url(&dlq_name).await.unwrap();
    assert_eq!(left(backend, &dlq).await, 0, "nothing dead-lettered");
    assert_eq!(left(backend, &url).await, 0, "the backlog was consumed");
    let calls = calls.lock().unwrap().clone();
    let completions = first_completions(&calls);
    for g in 0..GROUPS {
        let expected: Vec<u32> = (1..=PER_GROUP).collect();
        assert_eq!(
            completions.get(&format!("g{g}")),
            Some(&expected),
            "group g{g}: every message, first completions in order"
        );
    }
    let apps: std::collections::BTreeSet<usize> = calls.iter().map(|call| call.0).collect();
    let most_receives = calls.iter().map(|call| call.2).max().unwrap_or(0);
    common::report(format!(
        "rolling restarts on LocalStack ({} queue, stop budget {budget:?}): {} handler calls over {} apps, \
         most receives of one message {most_receives}",
        if existing { "existing, redrive 3" } else { "created, redrive 13" },
        calls.len(),
        apps.len(),
    ));
    assert!(
        apps.len() >= 3,
        "the backlog was worked on across restarts: {apps:?}"
    );
    if !existing {
        // The short budget left held messages unstarted at some stops: they were given back and
        // counted receives at SQS, which the redrive's margin absorbed.
        assert!(most_receives > 1, "no stop gave anything back");
    }
}

/// On a queue the subscription creates (`maxReceiveCount` 3 + 10) with a 1 s stop budget, so that
/// stops give back what they could not start; and on an existing queue whose redrive moves a
/// message on its fourth receive, with the default budget, whose first half starts what is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_rolling_restarts_dead_letter_nothing_on_localstack() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    rolling_restarts(&backend, false, Duration::from_secs(1)).await;
    rolling_restarts(&backend, true, rust_stream::DEFAULT_SHUTDOWN_TIMEOUT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_delete_then_a_stalled_extension_let_no_message_run_twice_on_localstack() {
    let Some(endpoint) = live_endpoint("live_operations (stalls through a proxy)") else {
        return;
    };
    // Queues are filled and looked at directly, past the proxy.
    let direct = Backend::live().await.expect("the live endpoint is named");
    let proxy = Proxy::start(&endpoint).await;
    let broker = SqsBroker::aws()
        .endpoint(proxy.url())
        .region("us-east-1")
        .test_credentials()
        .connect()
        .await
        .expect("a complete configuration");
    let queue = SqsQueue::new(direct.name("stalls.fifo"))
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(30))
        .wait(Duration::from_secs(1));
    let publisher = direct.broker.publisher(queue.clone());
    for n in 1..=2 {
        for group in ["a", "b", "c", "d"] {
            publisher
                .message(&Job::new(group, n))
                .group_id(group)
                .send()
                .await
                .unwrap();
        }
    }
    let calls = Calls::default();
    // Group a's delete comes first, and stalls; the others end a second or more later.
    proxy.stall_next("DeleteMessageBatch");
    let running = start(
        &broker,
        queue.clone(),
        Worker {
            app: 0,
            calls: calls.clone(),
            work: |job| Duration::from_secs(40 + u64::from(job.group.as_bytes()[0] - b'a')),
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(45)).await;
    // While the second messages run, one extension stalls.
    proxy.stall_next("ChangeMessageVisibilityBatch");
    let url = direct.transport.get_queue_url(queue.name()).await.unwrap();
    direct.until_empty(&url, Duration::from_secs(150)).await;
    running.stop().await.unwrap();
    let calls = calls.lock().unwrap().clone();
    let stalls: u64 = proxy
        .hits()
        .iter()
        .filter(|(hit, _)| hit.fault == Fault::Stall)
        .map(|(_, count)| count)
        .sum();
    common::report(format!(
        "stalls on LocalStack: {stalls} calls stalled, {} handler calls, receive counts {:?}",
        calls.len(),
        calls.iter().map(|call| call.2).collect::<Vec<_>>()
    ));
    assert_eq!(
        stalls,
        2,
        "one delete and one extension stalled: {:?}",
        proxy.hits()
    );
    assert_eq!(left(&direct, &url).await, 0, "every message deleted");
    assert_eq!(calls.len(), 8, "each message handled once: {calls:?}");
    assert!(calls.iter().all(|call| call.2 == 1), "{calls:?}");
    let completions = first_completions(&calls);
    for group in ["a", "b", "c", "d"] {
        assert_eq!(completions.get(group), Some(&vec![1, 2]), "{group}");
    }
}

/// One handler call of [`Deploy`]: (app, job, receive count, `ctx.attempt()`, finished).
type DeployCalls = Arc<Mutex<Vec<(usize, u32, u32, u32, Option<Instant>)>>>;

/// Apps before the deploy hold the group's head in a long job (each stop cancels it); the
/// deploy's app fails each message but the first once, then succeeds.
struct Deploy {
    app: usize,
    deployed: bool,
    calls: DeployCalls,
}

impl Handle<Job> for Deploy {
    async fn handle(&self, job: &Job, _: &(), ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        let (index, first_here) = {
            let mut calls = self.calls.lock().unwrap();
            let first_here = !calls
                .iter()
                .any(|call| call.0 == self.app && call.1 == job.n);
            calls.push((
                self.app,
                job.n,
                ctx.sqs().receive_count(),
                ctx.attempt(),
                None,
            ));
            (calls.len() - 1, first_here)
        };
        if !self.deployed {
            tokio::time::sleep(Duration::from_secs(1_000)).await;
        }
        self.calls.lock().unwrap()[index].4 = Some(Instant::now());
        if job.n >= 2 && first_here {
            return Err(HandlerOutcome::retry());
        }
        Ok(())
    }
}

/// The LocalStack twin of `tests/engine_operations.rs`'s
/// `restarts_during_a_long_head_then_one_failure_each_dead_letter_nothing`: six apps, each with a
/// broker and connections of its own (nothing shared but the queue), stopped while the group's
/// head runs a long job, so each stop gives back the five behind it unstarted (SQS counts a
/// receive each); then the deploy's app fails each message once. Nothing is dead-lettered, each
/// message is handled at attempts 1 and 2, first completions in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_during_a_long_head_then_one_failure_each_dead_letter_nothing_on_localstack() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let endpoint = live_endpoint("live test").expect("a live backend has an endpoint");
    let queue_name = backend.name("deploy.fifo");
    let dlq_name = backend.name("deploy-dlq.fifo");
    let queue = SqsQueue::new(&queue_name)
        .create_if_missing()
        .dead_letter(&dlq_name, 3)
        .wait(Duration::from_secs(1))
        .retry(rust_stream::RetryPolicy::fixed(Duration::from_millis(200)));
    let calls = DeployCalls::default();
    let app = |index: usize| {
        let broker = SqsBroker::with_transport(rust_stream::aws::AwsTransport::local(
            &endpoint,
            "us-east-1",
        ));
        let worker = Deploy {
            app: index,
            deployed: index == RESTARTS,
            calls: calls.clone(),
        };
        TestApp::spawn(
            RustStream::new(AppInfo::new("live-deploy", "0"))
                .shutdown_timeout(Duration::from_secs(2))
                .with_broker(broker, |b| {
                    b.include(subscriber(queue.clone(), worker).build());
                }),
        )
    };
    // The first start creates the queues (`maxReceiveCount` 3 + 10).
    let creating = app(usize::MAX).await.expect("the app starts");
    creating.stop().await.unwrap();
    let publisher = backend.broker.publisher(queue.clone());
    for n in 1..=6 {
        publisher
            .message(&Job::new("g", n))
            .group_id("g")
            .send()
            .await
            .unwrap();
    }
    let url = backend.transport.get_queue_url(&queue_name).await.unwrap();
    for index in 0..RESTARTS {
        let running = app(index).await.expect("the app starts");
        // Until the head runs, then a moment more.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !calls.lock().unwrap().iter().any(|call| call.0 == index) && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        running.stop().await.unwrap();
    }
    let running = app(RESTARTS).await.expect("the app starts");
    backend.until_empty(&url, Duration::from_secs(120)).await;
    running.stop().await.unwrap();

    let dlq = backend.transport.get_queue_url(&dlq_name).await.unwrap();
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        left(&backend, &dlq).await,
        0,
        "nothing dead-lettered: {calls:?}"
    );
    assert_eq!(left(&backend, &url).await, 0, "the group was consumed");
    assert!(
        calls
            .iter()
            .filter(|call| call.0 < RESTARTS)
            .all(|call| call.1 == 1),
        "only the head started before the deploy: {calls:?}"
    );
    let mut deployed: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
    for call in calls.iter().filter(|call| call.0 == RESTARTS) {
        deployed.entry(call.1).or_default().push((call.2, call.3));
    }
    // SQS counted the receives the stops gave back (more than the 3 attempts allowed, for every
    // message); the attempts count only attempts.
    let attempts: BTreeMap<u32, Vec<u32>> = deployed
        .iter()
        .map(|(n, calls)| (*n, calls.iter().map(|call| call.1).collect()))
        .collect();
    let mut expected = BTreeMap::from([(1, vec![1])]);
    for n in 2..=6 {
        expected.insert(n, vec![1, 2]);
    }
    assert_eq!(attempts, expected, "the deploy's calls: {deployed:?}");
    assert!(
        deployed.values().flatten().all(|call| call.0 > 3),
        "each message given back more often than its attempts: {deployed:?}"
    );
    let mut done: Vec<_> = calls.iter().filter(|call| call.4.is_some()).collect();
    done.sort_by_key(|call| call.4);
    let mut order = Vec::new();
    for call in done {
        if !order.contains(&call.1) {
            order.push(call.1);
        }
    }
    assert_eq!(order, [1, 2, 3, 4, 5, 6], "first completions in order");
}
