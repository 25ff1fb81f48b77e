//! The backlog gauges (`rust_stream.queue.*`): what a subscribed queue and its dead-letter queue
//! hold, sampled with one `GetQueueAttributes` call a queue an interval, equal to the in-process
//! account's counts as a backlog drains; the oldest message's age while nothing is received; the
//! off switch and a refused interval; and a live leg on LocalStack.

mod common;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::engine::Job;
use common::gauges::{gauge, prometheus};
use rust_stream::account::{Account, QueueCounts};
use rust_stream::metrics::{
    QUEUE_DEAD_LETTER, QUEUE_DELAYED, QUEUE_IN_FLIGHT, QUEUE_OLDEST_AGE, QUEUE_VISIBLE,
};
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::transport::layer::{Action, Hooked, Hooks};
use rust_stream::transport::TransportError;
use rust_stream::{ConfigError, Context, Handle, HandlerOutcome, RunError};
use tokio::time::{sleep, Instant};

/// The sampling interval of these tests.
const INTERVAL: Duration = Duration::from_secs(2);

/// A handler that takes `took` a message, dead-letters every tenth, and never returns when
/// `took` is `None`.
struct Slow {
    took: Option<Duration>,
}

impl Handle<Job> for Slow {
    async fn handle(
        &self,
        job: &Job,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        match self.took {
            Some(took) => sleep(took).await,
            None => std::future::pending().await,
        }
        if job.n.is_multiple_of(10) {
            return Err(HandlerOutcome::dead_letter("every tenth"));
        }
        Ok(())
    }
}

/// One `GetQueueAttributes` call as the account answered it: when, which queue (its URL), and
/// the account's own counts of that queue at that instant.
type Sample = (Instant, String, QueueCounts);

/// Records every `GetQueueAttributes` call with the account's true counts when it answered.
#[derive(Clone)]
struct Sampled {
    account: Account,
    samples: Arc<Mutex<Vec<Sample>>>,
}

impl Hooks for Sampled {
    fn around<R: Send>(
        &self,
        action: Action,
        queue: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
        let (account, samples, queue) =
            (self.account.clone(), self.samples.clone(), queue.to_owned());
        async move {
            let answer = call.await;
            if action == Action::GetQueueAttributes {
                let counts = account.counts(&queue).await.expect("the queue exists");
                samples
                    .lock()
                    .unwrap()
                    .push((Instant::now(), queue, counts));
            }
            answer
        }
    }
}

async fn fill(account: &Account, queue: &str, jobs: u32) {
    let publisher = SqsBroker::with_account(account).publisher(queue);
    let batch = (0..jobs).map(|n| publisher.message(&Job::new("-", n)));
    for sent in publisher.send_batch(batch).await {
        sent.unwrap();
    }
}

/// Lets every task run until all wait for a later time (the clock is paused).
async fn settle() {
    sleep(Duration::from_millis(1)).await;
}

/// The last sample of `url` and how many there were.
fn last_of(samples: &Mutex<Vec<Sample>>, url: &str) -> (Instant, QueueCounts, usize) {
    let samples = samples.lock().unwrap();
    let of: Vec<&Sample> = samples
        .iter()
        .filter(|(_, queue, _)| queue == url)
        .collect();
    let (at, _, counts) = of.last().expect("sampled");
    (*at, *counts, of.len())
}

#[tokio::test(start_paused = true)]
async fn the_gauges_equal_the_accounts_counts_within_an_interval_while_a_backlog_drains() {
    prometheus();
    let account = Account::new();
    let (name, dlq) = ("drains", "drains-dlq");
    let queue = SqsQueue::new(name)
        .create_if_missing()
        .dead_letter(dlq, 1)
        .concurrency(4)
        .pollers(1)
        .batch_size(4);
    // Made before the app, so that the backlog is there at the first sample.
    SqsBroker::with_account(&account)
        .operations()
        .create_queue(name, &rust_stream::operations::QueueSpec::new())
        .await
        .unwrap();
    fill(&account, name, 120).await;
    let samples = Arc::new(Mutex::new(Vec::new()));
    let hooks = Sampled {
        account: account.clone(),
        samples: samples.clone(),
    };
    let broker =
        SqsBroker::with_transport(Hooked::new(account.clone(), hooks)).backlog_interval(INTERVAL);
    let app = RustStream::new(AppInfo::new("backlog", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(
                queue,
                Slow {
                    took: Some(Duration::from_millis(500)),
                },
            )
            .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    settle().await;
    let started = Instant::now();
    let url = account.get_queue_url(name).await.unwrap();
    let dlq_url = account.get_queue_url(dlq).await.unwrap();
    // Startup resolved the queues with calls of its own, and the first sample was taken as the
    // app began to consume: what follows are the interval's samples.
    let calls_at_start = broker.api_calls().get_queue_attributes;
    let (_, _, samples_at_start) = last_of(&samples, &url);

    let mut seen_backlog = Vec::new();
    // 120 messages at 8 a second: about 15 s, then some intervals of an empty queue.
    for round in 1..=12u32 {
        sleep(INTERVAL).await;
        let (at, counts, samples_of_queue) = last_of(&samples, &url);
        assert!(
            at.elapsed() < INTERVAL,
            "round {round}: a sample within the last interval"
        );
        assert_eq!(
            samples_of_queue - samples_at_start,
            round as usize,
            "one sample an interval"
        );
        let shown = |metric| gauge(metric, name).expect("the gauge is set");
        assert_eq!(shown(QUEUE_VISIBLE), counts.visible as f64, "round {round}");
        assert_eq!(
            shown(QUEUE_IN_FLIGHT),
            counts.in_flight as f64,
            "round {round}"
        );
        assert_eq!(shown(QUEUE_DELAYED), counts.delayed as f64, "round {round}");
        let (_, dead, _) = last_of(&samples, &dlq_url);
        let dead_letter = gauge(QUEUE_DEAD_LETTER, dlq).expect("the dead-letter gauge is set");
        assert_eq!(
            dead_letter,
            (dead.visible + dead.in_flight + dead.delayed) as f64
        );
        seen_backlog.push(counts.visible);
    }
    assert!(
        seen_backlog.windows(2).all(|w| w[0] >= w[1]) && seen_backlog[0] >= 80,
        "the gauge followed the drain: {seen_backlog:?}"
    );
    // Drained: nothing waits, and the twelve dead-lettered messages are in the dead-letter queue.
    assert_eq!(account.counts(&url).await.unwrap(), QueueCounts::default());
    assert_eq!(gauge(QUEUE_VISIBLE, name), Some(0.0));
    assert_eq!(gauge(QUEUE_IN_FLIGHT, name), Some(0.0));
    assert_eq!(gauge(QUEUE_OLDEST_AGE, name), Some(0.0));
    assert_eq!(gauge(QUEUE_DEAD_LETTER, dlq), Some(12.0));
    // What the signals cost: one call a queue (the queue, its dead-letter queue) an interval.
    let intervals = (started.elapsed().as_secs_f64() / INTERVAL.as_secs_f64()).floor() as u64;
    assert_eq!(intervals, 12);
    assert_eq!(
        broker.api_calls().get_queue_attributes - calls_at_start,
        2 * intervals,
        "exactly one GetQueueAttributes a queue an interval"
    );
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_oldest_age_grows_by_the_interval_while_nothing_is_received() {
    prometheus();
    let account = Account::new();
    let name = "stuck";
    // One handler that never returns, and room for one batch more: the rest waits, unreceived.
    let queue = SqsQueue::new(name)
        .create_if_missing()
        .dead_letter("stuck-dlq", 3)
        .concurrency(1)
        .pollers(1)
        .batch_size(1)
        .timeout(Duration::from_secs(3600));
    let broker = SqsBroker::with_account(&account).backlog_interval(INTERVAL);
    broker
        .operations()
        .create_queue(name, &rust_stream::operations::QueueSpec::new())
        .await
        .unwrap();
    fill(&account, name, 10).await;
    let app = RustStream::new(AppInfo::new("backlog", "0")).with_broker(broker, |b| {
        b.include(subscriber(queue, Slow { took: None }).build());
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    // The receives end within the first intervals; from then on the age grows by one interval
    // each sample (an age at receive is wall-clock time less `SentTimestamp`, which the account
    // stamps on the paused clock: a few real milliseconds here).
    settle().await;
    sleep(INTERVAL * 2).await;
    let before = gauge(QUEUE_OLDEST_AGE, name).expect("the gauge is set");
    assert!(
        before >= INTERVAL.as_secs_f64(),
        "nothing received for an interval or more: {before}"
    );
    for round in 1..=5 {
        sleep(INTERVAL).await;
        let age = gauge(QUEUE_OLDEST_AGE, name).expect("the gauge is set");
        let grown = before + f64::from(round) * INTERVAL.as_secs_f64();
        assert!(
            (age - grown).abs() < 1e-6,
            "round {round}: {age} s, not {grown} s"
        );
    }
    assert_eq!(
        gauge(QUEUE_VISIBLE, name),
        Some(8.0),
        "one handled, one held"
    );
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_backlog_gauges_no_call_samples_the_queues() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account).no_backlog_gauges();
    let queue = SqsQueue::new("unsampled").create_if_missing();
    let app = RustStream::new(AppInfo::new("backlog", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(
                queue,
                Slow {
                    took: Some(Duration::ZERO),
                },
            )
            .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    settle().await;
    let at_start = broker.api_calls().get_queue_attributes;
    sleep(rust_stream::metrics::DEFAULT_BACKLOG_INTERVAL * 3).await;
    assert_eq!(broker.api_calls().get_queue_attributes, at_start);
    running.stop().await.unwrap();

    // And with the default, one call a minute.
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new("sampled").create_if_missing();
    let app = RustStream::new(AppInfo::new("backlog", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(
                queue,
                Slow {
                    took: Some(Duration::ZERO),
                },
            )
            .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    settle().await;
    let at_start = broker.api_calls().get_queue_attributes;
    sleep(rust_stream::metrics::DEFAULT_BACKLOG_INTERVAL * 3).await;
    assert_eq!(broker.api_calls().get_queue_attributes, at_start + 3);
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_backlog_interval_under_a_second_keeps_the_app_from_starting() {
    let broker = SqsBroker::in_process().backlog_interval(Duration::from_millis(10));
    let app = RustStream::new(AppInfo::new("backlog", "0")).with_broker(broker, |b| {
        b.include(
            subscriber(
                SqsQueue::new("fast").create_if_missing(),
                Slow { took: None },
            )
            .build(),
        );
    });
    let Err(RunError::Config(problems)) = TestApp::spawn(app).await else {
        panic!("the app must not start");
    };
    assert!(
        problems
            .0
            .iter()
            .any(|problem| matches!(problem, ConfigError::BacklogInterval { .. })),
        "{problems}"
    );
}

#[tokio::test]
async fn live_the_gauges_show_localstacks_counts_at_one_call_a_queue_an_interval() {
    let Some(backend) = common::backend::Backend::live().await else {
        return;
    };
    prometheus();
    let url = backend.queue("backlog-live", &[]).await;
    let dlq_url = backend.queue("backlog-live-dlq", &[]).await;
    let (name, dlq) = (
        backend.name("backlog-live"),
        backend.name("backlog-live-dlq"),
    );
    let publisher = backend.broker.publisher(name.as_str());
    for sent in publisher
        .send_batch((0..6).map(|n| publisher.message(&Job::new("-", n))))
        .await
    {
        sent.unwrap();
    }
    let to_dlq = backend.broker.publisher(dlq.as_str());
    for sent in to_dlq
        .send_batch((0..2).map(|n| to_dlq.message(&Job::new("-", n))))
        .await
    {
        sent.unwrap();
    }
    // One handler that never returns and room for one message more: four stay visible.
    let queue = SqsQueue::new(name.clone())
        .dead_letter(dlq.clone(), 3)
        .concurrency(1)
        .pollers(1)
        .batch_size(1)
        .wait(Duration::from_secs(1))
        .timeout(Duration::from_secs(60));
    let interval = Duration::from_secs(1);
    let broker = backend.broker.clone().backlog_interval(interval);
    let app = RustStream::new(AppInfo::new("backlog", "0"))
        .shutdown_timeout(Duration::from_secs(3))
        .with_broker(broker.clone(), |b| {
            b.include(subscriber(queue, Slow { took: None }).build());
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    // The receives settle within a few seconds; then the gauges show what LocalStack says.
    let counts = |attributes: &rust_stream::transport::QueueAttributes, name: &str| -> f64 {
        attributes[name].parse().unwrap()
    };
    let mut agreed = false;
    for _ in 0..20 {
        tokio::time::sleep(interval).await;
        use rust_stream::transport::Transport;
        let names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ];
        let now = backend
            .transport
            .get_queue_attributes(&url, &names)
            .await
            .unwrap();
        let dead = backend
            .transport
            .get_queue_attributes(&dlq_url, &names)
            .await
            .unwrap();
        let expected = (
            counts(&now, names[0]),
            counts(&now, names[1]),
            counts(&now, names[2]),
            counts(&dead, names[0]),
        );
        let shown = (
            gauge(QUEUE_VISIBLE, &name).unwrap_or(-1.0),
            gauge(QUEUE_IN_FLIGHT, &name).unwrap_or(-1.0),
            gauge(QUEUE_DELAYED, &name).unwrap_or(-1.0),
            gauge(QUEUE_DEAD_LETTER, &dlq).unwrap_or(-1.0),
        );
        if expected == (4.0, 2.0, 0.0, 2.0) && shown == expected {
            agreed = true;
            break;
        }
    }
    assert!(
        agreed,
        "the gauges came to show LocalStack's counts: 4 visible, 2 in flight, 2 dead-lettered"
    );
    // What the signals cost, over real time: two queues, one call each an interval (a tick may
    // fall either side of the window's ends).
    let before = broker.api_calls().get_queue_attributes;
    tokio::time::sleep(interval * 5).await;
    let calls = broker.api_calls().get_queue_attributes - before;
    assert!((8..=12).contains(&calls), "{calls} calls in five intervals");
    running.stop().await.unwrap();
}
