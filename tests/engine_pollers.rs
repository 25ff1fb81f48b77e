//! The pollers follow the demand (`engine::poll`): under a backlog the receives in flight grow to
//! the subscription's `pollers` and no further; once the queue is drained they come back down to
//! one, and an idle queue costs one long poll per wait; handlers that fall behind stop the growth
//! and bound what is held for them. Read through the
//! `rust_stream.pollers.active` and `rust_stream.receives.in_flight` gauges and through a
//! transport that counts the receives it answers, every call taking 20 ms of the paused clock.

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::engine::{Job, Log, Scripted};
use common::gauges::{gauge, prometheus};
use rust_stream::account::Account;
use rust_stream::metrics::{POLLERS_ACTIVE, RECEIVES_IN_FLIGHT};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::layer::{Action, Hooked, Hooks};
use rust_stream::transport::TransportError;
use rust_stream::{Context, Handle, HandlerOutcome};
use tokio::time::sleep;

/// The round trip of every call.
const ROUND_TRIP: Duration = Duration::from_millis(20);

/// What the transport saw of the receives.
#[derive(Debug, Default)]
struct Receives {
    in_flight: AtomicUsize,
    most_in_flight: AtomicUsize,
    answered: AtomicUsize,
}

impl Receives {
    /// Starts counting the most in flight again from now.
    fn reset_most(&self) {
        self.most_in_flight
            .store(self.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

/// Every call takes [`ROUND_TRIP`]; receives are counted.
#[derive(Debug, Clone, Default)]
struct Delayed(Arc<Receives>);

impl Hooks for Delayed {
    fn around<R: Send>(
        &self,
        action: Action,
        _queue: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
        let receives = (action == Action::ReceiveMessage).then(|| self.0.clone());
        async move {
            if let Some(receives) = &receives {
                let now = receives.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                receives.most_in_flight.fetch_max(now, Ordering::SeqCst);
            }
            sleep(ROUND_TRIP / 2).await;
            let answer = call.await;
            sleep(ROUND_TRIP / 2).await;
            if let Some(receives) = &receives {
                receives.in_flight.fetch_sub(1, Ordering::SeqCst);
                receives.answered.fetch_add(1, Ordering::SeqCst);
            }
            answer
        }
    }
}

async fn fill(account: &Account, queue: &SqsQueue, jobs: u32) {
    let publisher = SqsBroker::with_account(account).publisher(queue.clone());
    let batch = (0..jobs).map(|n| publisher.message(&Job::new("-", n)));
    for sent in publisher.send_batch(batch).await {
        sent.unwrap();
    }
}

/// Starts `queue`'s subscriber, whose handler returns at once, over the delayed account.
async fn start(account: &Account, queue: SqsQueue) -> (TestApp, Arc<Receives>, Log) {
    let hooks = Delayed::default();
    let receives = hooks.0.clone();
    let broker = SqsBroker::with_transport(Hooked::new(account.clone(), hooks));
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("pollers", "0")).with_broker(broker, |b| {
        b.include(subscriber(queue, handler).build());
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    (running, receives, log)
}

#[tokio::test(start_paused = true)]
async fn receives_in_flight_grow_to_the_most_under_a_backlog_and_come_back_to_one() {
    prometheus();
    const POLLERS: usize = 8;
    let account = Account::new();
    // Room for every poller's batch beside the handlers: what bounds the receives is `pollers`.
    let queue = SqsQueue::new("backlog")
        .create_if_missing()
        .concurrency(100)
        .pollers(POLLERS);
    fill(&account, &queue, 3_000).await;
    let (running, receives, log) = start(&account, queue).await;

    for round in 0..2 {
        // Under the backlog: up to the most, and never past it.
        let mut most_active = 0.0f64;
        eventually("the backlog is handled", async || {
            most_active = most_active.max(gauge(POLLERS_ACTIVE, "backlog").unwrap_or(0.0));
            log.lock().unwrap().len() >= 3_000 * (round + 1)
        })
        .await;
        assert_eq!(most_active, POLLERS as f64, "round {round}");
        assert_eq!(
            receives.most_in_flight.load(Ordering::SeqCst),
            POLLERS,
            "round {round}"
        );

        // Drained: the extra long polls come back empty after their 20 s and stop.
        sleep(Duration::from_secs(25)).await;
        assert_eq!(gauge(POLLERS_ACTIVE, "backlog"), Some(1.0), "round {round}");
        assert_eq!(gauge(RECEIVES_IN_FLIGHT, "backlog"), Some(1.0));
        receives.reset_most();
        let before = receives.answered.load(Ordering::SeqCst);
        sleep(Duration::from_secs(60)).await;
        let idle = receives.answered.load(Ordering::SeqCst) - before;
        assert!((3..=4).contains(&idle), "{idle} long polls in 60 s idle");
        assert_eq!(receives.most_in_flight.load(Ordering::SeqCst), 1);

        // A new backlog: up again.
        if round == 0 {
            fill(&account, &SqsQueue::new("backlog"), 3_000).await;
            receives.reset_most();
        }
    }
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_idle_queue_at_default_settings_costs_one_long_poll_per_wait() {
    prometheus();
    let account = Account::new();
    let queue = SqsQueue::new("idle").create_if_missing();
    let (running, receives, log) = start(&account, queue.clone()).await;
    sleep(Duration::from_secs(1)).await;
    let before = receives.answered.load(Ordering::SeqCst);
    sleep(Duration::from_secs(100)).await;
    let polls = receives.answered.load(Ordering::SeqCst) - before;
    assert!((5..=6).contains(&polls), "{polls} long polls in 100 s");
    assert_eq!(receives.most_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(gauge(POLLERS_ACTIVE, "idle"), Some(1.0));

    // A few messages (no full receive) are taken by the one long poll, at once.
    fill(&account, &queue, 3).await;
    eventually("3 handled", async || log.lock().unwrap().len() == 3).await;
    assert_eq!(receives.most_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(gauge(POLLERS_ACTIVE, "idle"), Some(1.0));
    running.stop().await.unwrap();
}

/// Takes a second a job.
struct Slow;

impl Handle<Job> for Slow {
    async fn handle(&self, _: &Job, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        sleep(Duration::from_secs(1)).await;
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn handlers_that_fall_behind_stop_the_pollers_growing_and_what_is_held_with_them() {
    prometheus();
    let account = Account::new();
    // Default settings: concurrency 10, batch 10, up to 16 pollers.
    let queue = SqsQueue::new("slow").create_if_missing();
    fill(&account, &queue, 500).await;
    let hooks = Delayed::default();
    let receives = hooks.0.clone();
    let broker = SqsBroker::with_transport(Hooked::new(account.clone(), hooks));
    let app = RustStream::new(AppInfo::new("pollers", "0")).with_broker(broker, |b| {
        b.include(subscriber(queue, Slow).build());
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let url = account.get_queue_url("slow").await.unwrap();
    // The first full receive finds every handler idle and lets a second poller receive; from
    // then on the handlers are busy whenever a receive comes back, and none more does.
    for _ in 0..30 {
        sleep(Duration::from_secs(1)).await;
        let held = account.counts(&url).await.unwrap().in_flight;
        assert!(
            held <= 10 + 2 * 10,
            "{held} held: the handlers' 10 and two batches"
        );
        assert_eq!(gauge(POLLERS_ACTIVE, "slow"), Some(2.0));
    }
    assert_eq!(receives.most_in_flight.load(Ordering::SeqCst), 2);
    running.stop().await.unwrap();
}
