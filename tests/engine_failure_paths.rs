//! Failure paths that only a transport wrapper can produce, on the in-process account and a paused
//! clock: deletes that fail for good on a FIFO queue, values that used to panic the engine, a
//! server answering more messages than asked, and transport calls that panic.

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::engine::{jobs, Faulty, Job, Scripted};
use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, eventually_within, TestApp};
use rust_stream::Subscriber;
use tokio::time::sleep;

async fn start(broker: &SqsBroker, sub: Subscriber) -> TestApp {
    TestApp::spawn(
        RustStream::new(AppInfo::new("failure-paths", "0")).with_broker(broker.clone(), |b| {
            b.include(sub);
        }),
    )
    .await
    .expect("the app starts")
}

async fn is_empty(account: &Account, name: &str) -> bool {
    let url = account.get_queue_url(name).await.unwrap();
    let counts = account.counts(&url).await.unwrap();
    counts.visible + counts.in_flight + counts.delayed == 0
}

/// What a handler saw, in order: `Start` (with the message id, and when) and `Done` of each call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Start(Job, String, tokio::time::Instant),
    Done(Job),
}

/// A handler that records its calls and works 50 ms (of tokio time) in each.
struct Recorder {
    events: Arc<Mutex<Vec<Event>>>,
}

impl Handle<Job> for Recorder {
    async fn handle(&self, job: &Job, _: &(), ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        self.events.lock().unwrap().push(Event::Start(
            job.clone(),
            ctx.message_id().to_owned(),
            tokio::time::Instant::now(),
        ));
        sleep(Duration::from_millis(50)).await;
        self.events.lock().unwrap().push(Event::Done(job.clone()));
        Ok(())
    }
}

/// A FIFO lane deletes its run together; when deletes fail for good, the messages whose deletes
/// were not confirmed come back after their visibility timeout and are handled again, in order,
/// before anything of their group the lane had not reached: the replay contract of `docs/fifo.md`.
#[tokio::test(start_paused = true)]
async fn fifo_deletes_that_fail_for_good_are_replayed_in_order_before_the_rest_of_their_group() {
    let account = Account::new();
    let faulty = Faulty::default();
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let queue = SqsQueue::new("ledger.fifo")
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(2));
    let publisher = broker.publisher(queue.clone());
    let groups = ["a", "b", "c"];
    for n in 1..=5 {
        for group in groups {
            publisher
                .message(&Job::new(group, n))
                .group_id(group)
                .send()
                .await
                .unwrap();
        }
    }
    // The first three deletes fail for good (a receipt handle SQS refuses): each of those
    // messages comes back after its visibility timeout and is handled again.
    faulty.permanent_delete_failures.store(3, Ordering::SeqCst);
    let events = Arc::new(Mutex::new(Vec::new()));
    let recorder = Recorder {
        events: events.clone(),
    };
    let batch = 10;
    let running = start(
        &broker,
        subscriber(queue, recorder).batch_size(batch).build(),
    )
    .await;
    eventually_within(
        "`ledger.fifo` drained",
        Duration::from_millis(100 * 600),
        async || is_empty(&account, "ledger.fifo").await,
    )
    .await;
    running.stop().await.unwrap();

    let events = events.lock().unwrap().clone();
    let mut completed: HashMap<&str, Vec<u32>> = HashMap::new();
    let mut redelivered = 0;
    let mut calls = Vec::new();
    for event in &events {
        match event {
            Event::Start(job, message_id, at) => {
                calls.push(common::engine::Call {
                    group: job.group.clone(),
                    n: job.n,
                    message_id: message_id.clone(),
                    at: *at,
                });
                // Every first start follows the sent order.
                let done = completed.get(job.group.as_str()).map_or(0, Vec::len) as u32;
                if job.n <= done {
                    redelivered += 1;
                } else {
                    assert_eq!(job.n, done + 1, "{job:?} started out of order: {events:?}");
                }
            }
            Event::Done(job) => {
                let group = completed
                    .entry(groups.iter().find(|g| **g == job.group).unwrap())
                    .or_default();
                if !group.contains(&job.n) {
                    group.push(job.n);
                }
            }
        }
    }
    for group in groups {
        assert_eq!(
            completed[group],
            [1, 2, 3, 4, 5],
            "first completions of {group} in sent order"
        );
    }
    let failed = faulty.failed_for_good.lock().unwrap().clone();
    assert_eq!(failed.len(), 3, "three deletes failed for good");
    if let Some(breach) = common::engine::replay_breach(&calls, &failed, batch) {
        panic!("{breach}: {events:?}");
    }
    assert_eq!(
        redelivered, 3,
        "each undeleted message came back once: {events:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retry_after_duration_max_is_capped_not_a_panic() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new("capped").create_if_missing();
    let publisher = broker.publisher(queue.clone());
    let (handler, log) = Scripted::new(|job, _| match job.n {
        1 => Err(HandlerOutcome::retry_after(Duration::MAX)),
        _ => Ok(()),
    });
    let running = start(&broker, subscriber(queue, handler).build()).await;
    publisher.message(&Job::new("-", 1)).send().await.unwrap();
    eventually("job 1 handled", async || jobs(&log).len() == 1).await;
    publisher.message(&Job::new("-", 2)).send().await.unwrap();
    eventually("the service goes on", async || jobs(&log).len() == 2).await;
    running.stop().await.unwrap();
    let url = account.get_queue_url("capped").await.unwrap();
    let counts = account.counts(&url).await.unwrap();
    assert_eq!(
        (counts.visible, counts.in_flight),
        (0, 1),
        "job 1 waits out the 12-hour cap, kept, not lost"
    );
    sleep(Duration::from_secs(12 * 3600)).await;
    assert_eq!(account.counts(&url).await.unwrap().visible, 1);
}

#[tokio::test(start_paused = true)]
async fn a_server_answering_more_messages_than_asked_does_not_stop_the_poller() {
    let account = Account::new();
    let faulty = Faulty::default();
    faulty.greedy.store(true, Ordering::SeqCst);
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let queue = SqsQueue::new("greedy").create_if_missing();
    let publisher = broker.publisher(queue.clone());
    for n in 1..=30 {
        publisher.message(&Job::new("-", n)).send().await.unwrap();
    }
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    // Room for 2 at a time; every receive answers up to 10: the extras go back at once.
    let sub = subscriber(queue, handler)
        .concurrency(1)
        .batch_size(1)
        .build();
    let running = start(&broker, sub).await;
    eventually("all 30 handled", async || {
        let mut handled: Vec<u32> = jobs(&log).iter().map(|job| job.n).collect();
        handled.sort_unstable();
        handled.dedup();
        handled.len() == 30
    })
    .await;
    running.stop().await.unwrap();
    assert!(is_empty(&account, "greedy").await);
}

#[tokio::test(start_paused = true)]
async fn transport_calls_that_panic_are_retried_and_the_service_goes_on() {
    let account = Account::new();
    let faulty = Faulty::default();
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let queue = SqsQueue::new("panicky.fifo").create_if_missing();
    let publisher = broker.publisher(queue.clone());
    for n in 1..=5 {
        publisher
            .message(&Job::new("g", n))
            .group_id("g")
            .send()
            .await
            .unwrap();
    }
    faulty.receive_panics.store(2, Ordering::SeqCst);
    faulty.delete_panics.store(2, Ordering::SeqCst);
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let running = start(&broker, subscriber(queue, handler).build()).await;
    eventually_within(
        "`panicky.fifo` drained",
        Duration::from_millis(100 * 600),
        async || is_empty(&account, "panicky.fifo").await,
    )
    .await;
    let stopped = tokio::time::Instant::now();
    running.stop().await.unwrap();
    // The wrapper does not say its receives are cancel-safe, so shutdown lets the long poll in
    // flight finish (20 s); a wedged lane would hold it to the 30 s shutdown timeout.
    assert!(
        stopped.elapsed() <= Duration::from_secs(21),
        "no wedged lane holds the shutdown: {:?}",
        stopped.elapsed()
    );
    assert_eq!(faulty.receive_panics.load(Ordering::SeqCst), 0);
    assert_eq!(faulty.delete_panics.load(Ordering::SeqCst), 0);
    let handled: Vec<u32> = jobs(&log).iter().map(|job| job.n).collect();
    assert_eq!(handled, [1, 2, 3, 4, 5], "once each, in order");
}

#[tokio::test(start_paused = true)]
async fn an_empty_short_poll_backs_off_instead_of_spinning() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = SqsQueue::new("quiet")
        .create_if_missing()
        .wait(Duration::ZERO);
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let running = start(&broker, subscriber(queue.clone(), handler).build()).await;
    sleep(Duration::from_secs(1)).await;
    let before = broker.api_calls().receive_message;
    sleep(Duration::from_secs(60)).await;
    let receives = broker.api_calls().receive_message - before;
    // Backing off from 100 ms to 2 s: about 30 receives a minute once at the cap, not thousands.
    assert!((20..=80).contains(&receives), "{receives} receives in 60 s");
    broker
        .publisher(queue)
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    eventually("a message is still picked up", async || {
        jobs(&log).len() == 1
    })
    .await;
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_startup_stops_the_consumers_it_had_started() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let first = SqsQueue::new("first").create_if_missing();
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let (missing, _) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("half-started", "0")).with_broker(broker.clone(), |b| {
        b.include(subscriber(first.clone(), handler).build());
        b.include(subscriber("never-created", missing).build());
    });
    let error = TestApp::spawn(app).await.unwrap_err();
    assert!(
        matches!(error.broker_error(), Some(rust_stream::sqs::StartError::QueueMissing { queue }) if queue == "never-created"),
        "{error}"
    );
    // The first subscription had started; it must not go on consuming after `run` returned.
    let receives = broker.api_calls().receive_message;
    broker
        .publisher(first)
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    sleep(Duration::from_secs(60)).await;
    assert!(
        jobs(&log).is_empty(),
        "a consumer outlived the failed start"
    );
    assert_eq!(broker.api_calls().receive_message, receives);
    let url = account.get_queue_url("first").await.unwrap();
    assert_eq!(account.counts(&url).await.unwrap().visible, 1);
}

#[test]
fn a_queue_redrive_policy_that_disagrees_with_the_subscription_is_a_warning_naming_both() {
    let logged = common::logged_while(|| async {
        let account = Account::new();
        let dlq = account.create_standard_queue("old-dlq").await.unwrap();
        let arn = account
            .get_queue_attributes(&dlq, &["QueueArn"])
            .await
            .unwrap()["QueueArn"]
            .clone();
        let policy = format!(r#"{{"deadLetterTargetArn":"{arn}","maxReceiveCount":3}}"#);
        let mut attributes = rust_stream::transport::QueueAttributes::new();
        attributes.insert("RedrivePolicy".into(), policy);
        account.create_queue("payments", attributes).await.unwrap();
        let broker = SqsBroker::with_account(&account);
        let (handler, _) = Scripted::new(|_, _| Ok(()));
        let queue = SqsQueue::new("payments")
            .dead_letter("new-dlq", 5)
            .create_if_missing();
        start(&broker, subscriber(queue, handler).build())
            .await
            .stop()
            .await
            .unwrap();
    });
    let warning = |about: &str| {
        logged
            .lines()
            .find(|line| line.contains(about))
            .unwrap_or_else(|| panic!("no warning about {about:?} in:\n{logged}"))
            .to_owned()
    };
    let other_queue = warning("names another dead-letter queue");
    for named in ["new-dlq", "old-dlq"] {
        assert!(
            other_queue.contains(named),
            "{named} missing from: {other_queue}"
        );
    }
    // The queue's count (3) would move messages before the subscription's 5 attempts, counting
    // receives that were no attempt: the warning names the count to set, 5 + the margin.
    let tight = warning("leaves no room for receives that are no attempt");
    for named in [
        "maxReceiveCount (3)",
        "Set maxReceiveCount to 15",
        "attempts=5",
    ] {
        assert!(tight.contains(named), "{named} missing from: {tight}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_copy_fits_its_queue_and_never_overwrites_the_senders_attributes() {
    use rust_stream::transport::{MessageAttributeValue, QueueAttributes, SendMessage};
    use rust_stream::{DEAD_LETTER_REASON_HEADER, ORIGINAL_MESSAGE_ID_HEADER, SOURCE_QUEUE_HEADER};

    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let mut small = QueueAttributes::new();
    small.insert("MaximumMessageSize".into(), "2048".into());
    let dlq = account
        .create_queue("small-dlq", small.clone())
        .await
        .unwrap();
    // A dead-letter queue must take what its source takes.
    let url = account.create_queue("sources", small).await.unwrap();
    // One message with room in the dead-letter queue for the original id but not for the rest of
    // rust-stream's attributes; one that carries the sender's own value under one of their names.
    let full = format!(
        "{{\"group\":\"-\",\"n\":1,\"pad\":\"{}\"}}",
        "x".repeat(1940)
    );
    account
        .send_message(&url, SendMessage::new(full.clone()))
        .await
        .unwrap();
    let mine = SendMessage::new(r#"{"group":"-","n":2}"#).attribute(
        SOURCE_QUEUE_HEADER,
        MessageAttributeValue::string("the sender's"),
    );
    account.send_message(&url, mine).await.unwrap();
    let (handler, _) = Scripted::new(|_, _| Err(HandlerOutcome::dead_letter("refused")));
    let queue = SqsQueue::new("sources").dead_letter("small-dlq", 3);
    let running = start(&broker, subscriber(queue, handler).build()).await;
    let mut dead = Vec::new();
    for _ in 0..600 {
        dead.extend(common::receive(&account, &dlq, 10).await);
        if dead.len() == 2 {
            break;
        }
        sleep(Duration::from_millis(100)).await;
    }
    running.stop().await.unwrap();
    assert_eq!(dead.len(), 2, "both copies reached the dead-letter queue");
    let by_n = |n: &str| {
        dead.iter()
            .find(|m| m.body.contains(&format!("\"n\":{n}")))
            .unwrap()
    };
    let big = by_n("1");
    assert_eq!(big.body, full);
    let size = big.body.len()
        + big
            .message_attributes
            .iter()
            .map(|(k, v)| {
                k.len() + v.data_type.len() + v.string_value.as_ref().map_or(0, String::len)
            })
            .sum::<usize>();
    assert!(
        size <= 2048,
        "the copy fits the dead-letter queue: {size} bytes"
    );
    assert!(
        big.message_attributes
            .contains_key(ORIGINAL_MESSAGE_ID_HEADER),
        "what fits is kept, the original id first"
    );
    assert!(
        !big.message_attributes
            .contains_key(DEAD_LETTER_REASON_HEADER),
        "what does not fit is left out"
    );
    let kept = by_n("2").message_attributes[SOURCE_QUEUE_HEADER]
        .string_value
        .clone();
    assert_eq!(kept.as_deref(), Some("the sender's"));
}

/// Records each call, and works 40 s in the first.
struct SlowFirst {
    events: Arc<Mutex<Vec<Event>>>,
}

impl Handle<Job> for SlowFirst {
    async fn handle(&self, job: &Job, _: &(), ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        let first = {
            let mut events = self.events.lock().unwrap();
            events.push(Event::Start(
                job.clone(),
                ctx.message_id().to_owned(),
                tokio::time::Instant::now(),
            ));
            events.len() == 1
        };
        if first {
            sleep(Duration::from_secs(40)).await;
        }
        self.events.lock().unwrap().push(Event::Done(job.clone()));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_message_received_again_replaces_its_waiting_copy_in_the_lane() {
    // The heartbeat cannot extend anything, so the group times out while g1 runs and the queue
    // hands g1, g2 and g3 out again. The waiting g2 and g3 are replaced by their new receipts
    // (the old ones can no longer delete them): each is handled once and deleted.
    let account = Account::new();
    let faulty = Faulty::default();
    faulty.visibility_fails.store(true, Ordering::SeqCst);
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let queue = SqsQueue::new("again.fifo")
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(10));
    let publisher = broker.publisher(queue.clone());
    for n in 1..=3 {
        publisher
            .message(&Job::new("g", n))
            .group_id("g")
            .send()
            .await
            .unwrap();
    }
    let events = Arc::new(Mutex::new(Vec::new()));
    let handler = SlowFirst {
        events: events.clone(),
    };
    let running = start(&broker, subscriber(queue, handler).build()).await;
    eventually_within(
        "`again.fifo` drained",
        Duration::from_millis(100 * 1200),
        async || is_empty(&account, "again.fifo").await,
    )
    .await;
    running.stop().await.unwrap();
    let started: Vec<u32> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|event| match event {
            Event::Start(job, ..) => Some(job.n),
            Event::Done(_) => None,
        })
        .collect();
    assert_eq!(
        started,
        [1, 1, 2, 3],
        "g1 ran again (its first run outlived its visibility), g2 and g3 once each"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_queue_that_takes_smaller_messages_than_its_source_keeps_the_app_from_starting(
) {
    use rust_stream::transport::QueueAttributes;

    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let mut small = QueueAttributes::new();
    small.insert("MaximumMessageSize".into(), "262144".into());
    account.create_queue("old-dlq", small).await.unwrap();
    account.create_standard_queue("payments").await.unwrap();
    let (handler, log) = Scripted::new(|_, _| Ok(()));
    let queue = SqsQueue::new("payments").dead_letter("old-dlq", 3);
    let refused = TestApp::spawn(
        RustStream::new(AppInfo::new("failure-paths", "0")).with_broker(broker.clone(), |b| {
            b.include(subscriber(queue, handler).build());
        }),
    )
    .await
    .expect_err("a copy of a large message could never be sent");
    let message = refused.to_string();
    for named in ["old-dlq", "payments", "262144", "1048576"] {
        assert!(message.contains(named), "{named} missing from: {message}");
    }
    assert!(
        matches!(
            refused.broker_error(),
            Some(rust_stream::sqs::StartError::DeadLetterTooSmall { .. })
        ),
        "{refused:?}"
    );
    assert!(log.lock().unwrap().is_empty());
}

/// The replay check the FIFO tests use can fail: a later message of the group run between a
/// failed delete and its replay, a replay that never came, and more run between them than a run
/// holds are each a breach, while a replay right after its run is not.
#[tokio::test(start_paused = true)]
async fn the_replay_check_finds_each_kind_of_breach() {
    use common::engine::{replay_breach, Call};
    let start = tokio::time::Instant::now();
    let call = |n: u32, at_ms: u64| Call {
        group: "g".into(),
        n,
        message_id: format!("m{n}"),
        at: start + Duration::from_millis(at_ms),
    };
    // 1 and 2 ran; 1's delete failed at 100 ms.
    let failed = [("m1".to_owned(), start + Duration::from_millis(100))];
    let replayed = [
        call(1, 0),
        call(2, 50),
        call(1, 5_000),
        call(2, 5_050),
        call(3, 5_100),
    ];
    assert_eq!(replay_breach(&replayed, &failed, 10), None);
    let later_first = [call(1, 0), call(2, 50), call(3, 200), call(1, 5_000)];
    assert!(replay_breach(&later_first, &failed, 10).is_some_and(|b| b.contains("g/3 ran after")));
    let never = [call(1, 0), call(2, 50)];
    assert!(replay_breach(&never, &failed, 10).is_some_and(|b| b.contains("never handled again")));
    assert!(replay_breach(&replayed, &failed, 1).is_some_and(|b| b.contains("more than its run")));
}

/// How many times `queue`'s recorder and metrics counted a message of it as acked.
fn acked(recorder: &rust_stream::testing::Recorder, queue: &str) -> (usize, Option<f64>) {
    let recorded = recorder
        .handled(queue)
        .iter()
        .filter(|handled| handled.settled == rust_stream::testing::Settled::Acked)
        .count();
    let metric = common::gauges::prometheus()
        .render()
        .lines()
        .filter(|line| line.starts_with("rust_stream_messages_settled{"))
        .filter(|line| line.contains(&format!("messaging_destination_name=\"{queue}\"")))
        .filter(|line| line.contains("rust_stream_outcome=\"acked\""))
        .find_map(|line| line.rsplit(' ').next()?.parse().ok());
    (recorded, metric)
}

/// A message is counted as acked once its delete succeeded: one whose delete failed for good is
/// not (it comes back, is handled again, and counts when that delete succeeds).
#[tokio::test(start_paused = true)]
async fn a_delete_that_fails_for_good_is_not_counted_as_acked() {
    common::gauges::prometheus();
    let account = Account::new();
    let faulty = Faulty::default();
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let recorder = broker.recorder();
    let queue = SqsQueue::new("receipts")
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(30));
    faulty.permanent_delete_failures.store(1, Ordering::SeqCst);
    let events = Arc::new(Mutex::new(Vec::new()));
    let handler = Recorder {
        events: events.clone(),
    };
    let running = start(&broker, subscriber(queue.clone(), handler).build()).await;
    broker
        .publisher(queue)
        .message(&Job::new("-", 1))
        .send()
        .await
        .unwrap();
    eventually("the delete failed for good", async || {
        !faulty.failed_for_good.lock().unwrap().is_empty()
    })
    .await;
    // Handled once, its delete refused: nothing is acked while it waits to come back.
    assert_eq!(acked(&recorder, "receipts").0, 0);
    eventually_within("`receipts` drained", Duration::from_secs(120), async || {
        is_empty(&account, "receipts").await
    })
    .await;
    running.stop().await.unwrap();
    let calls = events
        .lock()
        .unwrap()
        .iter()
        .filter(|event| matches!(event, Event::Start(..)))
        .count();
    assert_eq!(calls, 2, "handled again after its visibility timeout");
    assert_eq!(acked(&recorder, "receipts"), (1, Some(1.0)));
}

/// On FIFO a lane's acked messages wait in its run until their delete call is answered; one
/// whose delete failed for good is replayed, and each message counts as acked once.
#[tokio::test(start_paused = true)]
async fn a_fifo_message_replayed_after_its_delete_failed_counts_as_acked_once() {
    common::gauges::prometheus();
    let account = Account::new();
    let faulty = Faulty::default();
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let recorder = broker.recorder();
    let queue = SqsQueue::new("ledger-once.fifo")
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(2));
    let publisher = broker.publisher(queue.clone());
    for n in 1..=3 {
        publisher
            .message(&Job::new("a", n))
            .group_id("a")
            .send()
            .await
            .unwrap();
    }
    faulty.permanent_delete_failures.store(1, Ordering::SeqCst);
    let events = Arc::new(Mutex::new(Vec::new()));
    let handler = Recorder {
        events: events.clone(),
    };
    let running = start(&broker, subscriber(queue, handler).build()).await;
    eventually_within(
        "`ledger-once.fifo` drained",
        Duration::from_secs(120),
        async || is_empty(&account, "ledger-once.fifo").await,
    )
    .await;
    running.stop().await.unwrap();
    let calls = events
        .lock()
        .unwrap()
        .iter()
        .filter(|event| matches!(event, Event::Start(..)))
        .count();
    assert_eq!(faulty.failed_for_good.lock().unwrap().len(), 1);
    assert!(
        calls > 3,
        "the message whose delete failed ran again: {calls} calls"
    );
    assert_eq!(acked(&recorder, "ledger-once.fifo"), (3, Some(3.0)));
}
