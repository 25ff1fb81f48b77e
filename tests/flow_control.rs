//! Flow control acts on receiving (`rust_stream::flow`): a rate limit holds a backlog's handling
//! to its rate with every message received once (no lease runs out while a message waits for the
//! limit), a named limit shared by a subscription and a publisher holds both together to it, and
//! a tripped backpressure switch makes no receive until it is released while what is held keeps
//! its visibility. In process on a paused clock; receives are read through a recorder over the
//! account.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::engine::{Handled, Job};
use common::recording::{Call, Recorder};
use rust_stream::account::Account;
use rust_stream::flow::{Backpressure, InFlightKey, RateLimit};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, eventually_within, TestApp};
use rust_stream::{ConfigError, PublishError, RunError};
use tokio::sync::Semaphore;
use tokio::time::{sleep, Instant};

const fn secs(seconds: u64) -> Duration {
    Duration::from_secs(seconds)
}

async fn fill(account: &Account, queue: &str, jobs: u32) {
    let publisher =
        SqsBroker::with_account(account).publisher(SqsQueue::new(queue).create_if_missing());
    let batch = (0..jobs).map(|n| publisher.message(&Job::new("-", n)));
    for sent in publisher.send_batch(batch).await {
        sent.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_of_50_holds_a_backlog_to_50_a_second_with_no_lease_lapsing() {
    let account = Account::new();
    fill(&account, "charges", 10_000).await;
    let recorder = Recorder::default();
    let broker = SqsBroker::with_transport(recorder.over(account.clone()));
    let handled = Handled {
        takes: Duration::from_millis(150),
        ..Handled::default()
    };
    // A message held past half its visibility would be extended: none is, as nothing received
    // waits for the limit.
    let queue = SqsQueue::new("charges")
        .visibility_timeout(secs(5))
        .concurrency(50)
        .rate_limit(50);
    let app = RustStream::new(AppInfo::new("flow", "0")).with_broker(broker, |b| {
        b.include(subscriber(queue, handled.clone()).build());
    });
    let started = Instant::now();
    let running = TestApp::spawn(app).await.expect("the app starts");
    sleep(secs(60) + Duration::from_millis(500)).await;
    running.stop().await.unwrap();

    let at = handled.at.lock().unwrap().clone();
    let mut per_second = [0usize; 60];
    for instant in &at {
        let second = (*instant - started).as_secs() as usize;
        if second < 60 {
            per_second[second] += 1;
        }
    }
    common::report(format_args!("handled a second: {per_second:?}"));
    for (second, handled) in per_second.iter().enumerate() {
        assert!(
            (45..=55).contains(handled),
            "second {second}: {handled} handled, not 50 ± 5: {per_second:?}"
        );
    }
    let total: usize = per_second.iter().sum();
    assert!((2_950..=3_050).contains(&total), "{total} in 60 s");
    assert_eq!(recorder.received_more_than_once(), 0, "a lease ran out");
    let extended = recorder
        .calls()
        .iter()
        .filter(|call| matches!(call, Call::ChangeVisibility { .. }))
        .count();
    assert_eq!(extended, 0, "a message waited with its lease running");
    // Each receive asked for what the limit had: a batch of 10 every 200 ms.
    let calls = recorder.receive_calls();
    assert!((295..=320).contains(&calls), "{calls} receives");
}

#[tokio::test(start_paused = true)]
async fn a_named_limit_holds_a_subscription_and_a_publisher_together_to_its_rate() {
    let account = Account::new();
    fill(&account, "refunds", 2_000).await;
    let broker = SqsBroker::with_account(&account);
    let card_network = RateLimit::new("card-network", 20);
    let handled = Handled::default();
    let app = RustStream::new(AppInfo::new("flow", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber("refunds", handled.clone())
                .rate_limit(card_network.clone())
                .build(),
        );
    });
    let publisher = broker
        .publisher(SqsQueue::new("charges").create_if_missing())
        .rate_limit(card_network);
    let running = TestApp::spawn(app).await.expect("the app starts");
    let sent = Arc::new(Mutex::new(0usize));
    let sending = tokio::spawn({
        let sent = sent.clone();
        async move {
            for n in 0.. {
                publisher.message(&Job::new("-", n)).send().await.unwrap();
                *sent.lock().unwrap() += 1;
            }
        }
    });
    sleep(secs(30)).await;
    sending.abort();
    let (sent, handled_now) = (*sent.lock().unwrap(), handled.count());
    running.stop().await.unwrap();
    common::report(format_args!("in 30 s: {sent} sent, {handled_now} handled"));
    // 20 a second between them, with the burst (10) on top; waiters are served in turn, so the
    // publisher's single sends get a turn between the receives' batches.
    assert!(
        (590..=630).contains(&(sent + handled_now)),
        "{sent} sent + {handled_now} handled"
    );
    assert!(
        sent >= 20 && handled_now >= 100,
        "both go on: {sent}, {handled_now}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_tripped_backpressure_makes_no_receive_until_released_and_nothing_held_lapses() {
    let account = Account::new();
    fill(&account, "orders", 200).await;
    let recorder = Recorder::default();
    let broker = SqsBroker::with_transport(recorder.over(account.clone()));
    let gate = Arc::new(Semaphore::new(0));
    let handled = Handled {
        gate: Some(gate.clone()),
        ..Handled::default()
    };
    let circuit = Backpressure::new();
    let queue = SqsQueue::new("orders")
        .visibility_timeout(secs(30))
        .backpressure(&circuit);
    let app = RustStream::new(AppInfo::new("flow", "0")).with_broker(broker, |b| {
        b.include(subscriber(queue, handled.clone()).build());
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let url = account.get_queue_url("orders").await.unwrap();
    eventually("the handlers hold messages", async || {
        account.counts(&url).await.unwrap().in_flight > 0
    })
    .await;
    circuit.trip();
    // Any receive out when it tripped has answered by now.
    sleep(secs(25)).await;
    let before = recorder.receive_calls();
    let held = account.counts(&url).await.unwrap().in_flight;
    assert!(held > 0);
    // Held through ten visibility timeouts, then handled: room frees, and still no receive.
    sleep(secs(300)).await;
    gate.add_permits(10_000);
    eventually("what was held is handled", async || handled.count() >= held).await;
    sleep(secs(60)).await;
    assert_eq!(recorder.receive_calls(), before, "a receive while tripped");
    assert_eq!(handled.count(), held, "only what was held ran");
    assert_eq!(
        recorder.received_more_than_once(),
        0,
        "a held message lapsed"
    );

    circuit.release();
    eventually("the rest is handled once released", async || {
        handled.count() == 200
    })
    .await;
    assert!(recorder.receive_calls() > before);
    assert_eq!(recorder.received_more_than_once(), 0);
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_that_cannot_work_is_refused_before_any_call() {
    let broker = SqsBroker::in_process();
    let app = RustStream::new(AppInfo::new("flow", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber("orders", Handled::default())
                .rate_limit(0)
                .build(),
        );
        b.include(
            subscriber("charges", Handled::default())
                .rate_limit(RateLimit::new("bank", 5).per(Duration::ZERO))
                .build(),
        );
    });
    let Err(RunError::Config(problems)) = TestApp::spawn(app).await else {
        panic!("the app started");
    };
    let shown = problems.to_string();
    assert_eq!(problems.0.len(), 2, "{shown}");
    assert!(shown.contains("rate limit `orders`: 0 messages"), "{shown}");
    assert!(
        shown.contains("rate limit `bank`: a period of zero"),
        "{shown}"
    );
    assert_eq!(broker.api_calls(), Default::default());

    let publisher = broker
        .publisher(SqsQueue::new("charges").create_if_missing())
        .rate_limit(RateLimit::new("ses", 14).burst(0));
    let refused = publisher.raw("{}").send().await.unwrap_err();
    assert!(
        matches!(&refused, PublishError::Config(ConfigError::RateLimit { limit, .. }) if limit == "ses"),
        "{refused}"
    );
    assert_eq!(broker.api_calls(), Default::default());
}

/// Records when each tenant's message started, from the send, and how many of a tenant ran at
/// once at most.
#[derive(Clone, Default)]
struct Tenants {
    /// Per tenant: the times in queue of its messages (send to start).
    waited: Arc<Mutex<std::collections::HashMap<String, Vec<Duration>>>>,
    running: Arc<Mutex<std::collections::HashMap<String, usize>>>,
    most_running: Arc<Mutex<std::collections::HashMap<String, usize>>>,
    sent_at: Arc<Mutex<Option<Instant>>>,
}

impl Tenants {
    fn quiet_waits(&self) -> Vec<Duration> {
        let mut waits: Vec<Duration> = self
            .waited
            .lock()
            .unwrap()
            .iter()
            .filter(|(tenant, _)| tenant.as_str() != "noisy")
            .flat_map(|(_, waits)| waits.clone())
            .collect();
        waits.sort();
        waits
    }
}

impl Handle<Job> for Tenants {
    async fn handle(&self, job: &Job, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        let tenant = job.group.clone();
        let sent_at = self.sent_at.lock().unwrap().expect("sent before");
        self.waited
            .lock()
            .unwrap()
            .entry(tenant.clone())
            .or_default()
            .push(sent_at.elapsed());
        {
            let mut running = self.running.lock().unwrap();
            let now = running.entry(tenant.clone()).or_default();
            *now += 1;
            let mut most = self.most_running.lock().unwrap();
            let most = most.entry(tenant.clone()).or_default();
            *most = (*most).max(*now);
        }
        sleep(Duration::from_millis(100)).await;
        *self.running.lock().unwrap().get_mut(&tenant).unwrap() -= 1;
        Ok(())
    }
}

/// 99 quiet tenants with 20 messages each and, when `noisy`, one tenant with 90 % of all the
/// messages (19,800), interleaved as they arrive; the quiet tenants' times in queue, sorted.
async fn quiet_times_in_queue(noisy: bool, per_key: Option<usize>) -> (Vec<Duration>, Tenants) {
    const QUIET: u32 = 99;
    const EACH: u32 = 20;
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new("tenants").create_if_missing();
    let publisher = broker.publisher(queue.clone());
    let quiet =
        (0..EACH).flat_map(|n| (0..QUIET).map(move |tenant| (format!("quiet-{tenant}"), n)));
    let mut messages = Vec::new();
    for (at, (tenant, n)) in quiet.enumerate() {
        if noisy {
            // 9 of the noisy tenant's for each quiet one.
            for k in 0..9 {
                messages.push(
                    publisher
                        .message(&Job::new("noisy", (at * 9 + k) as u32))
                        .header("tenant", "noisy"),
                );
            }
        }
        messages.push(
            publisher
                .message(&Job::new(&tenant, n))
                .header("tenant", &tenant),
        );
    }
    let total = messages.len();
    let tenants = Tenants::default();
    *tenants.sent_at.lock().unwrap() = Some(Instant::now());
    for sent in publisher.send_batch(messages).await {
        sent.unwrap();
    }
    let mut queue = queue.concurrency(20);
    if let Some(most) = per_key {
        queue = queue.max_in_flight_per(InFlightKey::header("tenant"), most);
    }
    let broker_calls = broker.clone();
    let app = RustStream::new(AppInfo::new("flow", "0")).with_broker(broker, |b| {
        b.include(subscriber(queue, tenants.clone()).build());
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let quiet_messages = (QUIET * EACH) as usize;
    // Without the limit the quiet ones wait for 19,800 messages at 20 at once (99 s).
    eventually_within(
        "every quiet message is handled",
        Duration::from_secs(300),
        async || tenants.quiet_waits().len() >= quiet_messages,
    )
    .await;
    let calls = broker_calls.api_calls();
    running.stop().await.unwrap();
    common::report(format_args!(
        "{total} messages, noisy {noisy}, per key {per_key:?}: until the quiet ones were handled, \
         {} receives, {} visibility change calls",
        calls.receive_message, calls.change_message_visibility_batch
    ));
    (tenants.quiet_waits(), tenants)
}

/// The `p`th percentile of sorted durations.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

#[tokio::test(start_paused = true)]
async fn a_noisy_tenant_does_not_delay_the_quiet_ones_beyond_twice_their_time_alone() {
    let (alone, _) = quiet_times_in_queue(false, Some(2)).await;
    let (shared, tenants) = quiet_times_in_queue(true, Some(2)).await;
    let (unlimited, _) = quiet_times_in_queue(true, None).await;
    let p99 = |waits: &[Duration]| percentile(waits, 99);
    common::report(format_args!(
        "quiet p99 in queue: alone {:?}, beside the noisy tenant {:?}, without the limit {:?}",
        p99(&alone),
        p99(&shared),
        p99(&unlimited)
    ));
    assert!(
        p99(&shared) <= p99(&alone) * 2,
        "p99 {:?} beside the noisy tenant, {:?} alone",
        p99(&shared),
        p99(&alone)
    );
    // Without the limit the noisy tenant takes the handler slots: the test can tell.
    assert!(p99(&unlimited) > p99(&alone) * 2);
    let most = tenants.most_running.lock().unwrap().clone();
    assert!(most.values().all(|&most| most <= 2), "{most:?}");
}

/// One noisy group with 90 % of `total` messages (when `noisy`) and 99 quiet groups with the
/// rest, sent at once in the order they arrive (nine noisy for each quiet one), each with its
/// group as `MessageGroupId` when `group_ids`; then read straight off the account by a consumer
/// of 100 at once (ten pollers receiving 10, each batch taking 100 ms, then deleted). The quiet
/// messages' dwell times (send to receive), sorted, and the noisy ones received meanwhile.
async fn quiet_dwell_on_the_account(
    total: usize,
    noisy: bool,
    group_ids: bool,
) -> (Vec<Duration>, usize) {
    use rust_stream::transport::{DeleteEntry, ReceiveMessage, SendBatchEntry, SendMessage};

    const QUIET: usize = 99;
    let account = Account::new();
    let url = account
        .create_queue("fair", Default::default())
        .await
        .unwrap();
    let quiet_total = total / 10;
    let tenants = (0..quiet_total).flat_map(|at| {
        let noisy_ones = if noisy { 9 } else { 0 };
        std::iter::repeat_n("noisy".to_owned(), noisy_ones).chain([format!("quiet-{}", at % QUIET)])
    });
    let sent_at = Instant::now();
    let messages: Vec<SendMessage> = tenants
        .map(|tenant| {
            let message = SendMessage::new(tenant.clone());
            if group_ids {
                message.group_id(tenant)
            } else {
                message
            }
        })
        .collect();
    for chunk in messages.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(id, message)| SendBatchEntry {
                id: id.to_string().into(),
                message: message.clone(),
            })
            .collect();
        let sent = account.send_message_batch(&url, entries).await.unwrap();
        assert!(sent.failed.is_empty());
    }
    let dwell = Arc::new(Mutex::new(Vec::with_capacity(quiet_total)));
    let noisy_received = Arc::new(Mutex::new(0usize));
    let mut pollers = tokio::task::JoinSet::new();
    for _ in 0..10 {
        let (account, url) = (account.clone(), url.clone());
        let (dwell, noisy_received) = (dwell.clone(), noisy_received.clone());
        pollers.spawn(async move {
            while dwell.lock().unwrap().len() < quiet_total {
                let receive = ReceiveMessage::new(10).wait_time_seconds(1);
                let received = account.receive_message(&url, receive).await.unwrap();
                for message in &received {
                    if message.body == "noisy" {
                        *noisy_received.lock().unwrap() += 1;
                    } else {
                        dwell.lock().unwrap().push(sent_at.elapsed());
                    }
                }
                sleep(Duration::from_millis(100)).await;
                let entries: Vec<DeleteEntry> = received
                    .into_iter()
                    .enumerate()
                    .map(|(id, message)| DeleteEntry {
                        id: id.to_string().into(),
                        receipt_handle: message.receipt_handle,
                    })
                    .collect();
                if !entries.is_empty() {
                    account.delete_message_batch(&url, entries).await.unwrap();
                }
            }
        });
    }
    pollers.join_all().await;
    let mut dwell = dwell.lock().unwrap().clone();
    dwell.sort();
    let noisy_received = *noisy_received.lock().unwrap();
    (dwell, noisy_received)
}

#[tokio::test(start_paused = true)]
async fn a_fair_queue_keeps_the_quiet_groups_dwell_within_twice_their_time_alone() {
    const TOTAL: usize = 100_000;
    let wall = std::time::Instant::now();
    let (alone, _) = quiet_dwell_on_the_account(TOTAL, false, true).await;
    let (fair, noisy_meanwhile) = quiet_dwell_on_the_account(TOTAL, true, true).await;
    let (unfair, _) = quiet_dwell_on_the_account(TOTAL, true, false).await;
    let p99 = |dwell: &[Duration]| percentile(dwell, 99);
    common::report(format_args!(
        "{TOTAL} messages, 90 % one group's: quiet p99 dwell alone {:?}, beside the noisy group \
         {:?} ({noisy_meanwhile} noisy received meanwhile), without group ids {:?}; {:?} of wall \
         time",
        p99(&alone),
        p99(&fair),
        p99(&unfair),
        wall.elapsed()
    ));
    assert_eq!(alone.len(), TOTAL / 10);
    assert!(
        p99(&fair) <= p99(&alone) * 2,
        "quiet p99 {:?} beside the noisy group, {:?} alone",
        p99(&fair),
        p99(&alone)
    );
    // Passed over, not starved: the noisy group keeps some of the consumer meanwhile.
    assert!(noisy_meanwhile > 0);
    // The same load without group ids is served oldest first: the model is what keeps the quiet
    // ones low.
    assert!(
        p99(&unfair) > p99(&alone) * 2,
        "quiet p99 {:?} without group ids, {:?} alone",
        p99(&unfair),
        p99(&alone)
    );
}
