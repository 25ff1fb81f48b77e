//! Queue names chosen at run time (issue 19, item 1), on both backends: one `#[subscriber]`
//! handler mounted with `.on(..)` on queues named per run, two apps at once with no cross-talk
//! and the attribute's settings kept; and a broker's queue-name prefix applied to every queue it
//! resolves (subscription, dead-letter queue, output, publisher, creation, health, AsyncAPI) and
//! to the topics its queues are subscribed to, with a prefix SQS or SNS would refuse found before
//! any network call.
//!
//! The live twins are what the newcomer's review met (two live tests on the macro's fixed names
//! took each other's messages): `both_backends!` runs the scenarios of this file side by side,
//! as libtest runs tests in parallel, on one LocalStack.

#[macro_use]
mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::backend::{Backend, Kind};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::Transport;
use rust_stream::{ConfigError, Output, PublishError, RetryPolicy, RunError, State};
use serde::{Deserialize, Serialize};

both_backends!(
    two_apps_share_a_handler_on_queues_named_per_run_first,
    two_apps_share_a_handler_on_queues_named_per_run_second,
    a_prefix_names_every_queue_the_broker_resolves,
);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Job {
    id: String,
}

/// One attempt a handler made: the app that made it, the queue it read, the job id and its
/// receive count.
type Attempt = (String, String, String, u32);

/// What the handlers saw, shared by the apps of a test: each app's own tag, and every attempt,
/// in order.
#[derive(Clone, Default)]
struct Seen {
    app: String,
    attempts: Arc<Mutex<Vec<Attempt>>>,
}

impl Seen {
    fn seen(&self) -> Vec<Attempt> {
        self.attempts.lock().unwrap().clone()
    }
}

/// Works a job. A job whose id starts with `flaky` fails its first attempt; one whose id starts
/// with `poison` fails every attempt, so it is dead-lettered after the attribute's 2.
#[subscriber(
    "jobs",
    concurrency = 4,
    wait = Duration::from_secs(1),
    retry = RetryPolicy::fixed(Duration::from_secs(1)),
    dead_letter("jobs-dlq", 2),
    outputs(done = SqsQueue::new("jobs-done").create_if_missing())
)]
async fn work(
    job: &Job,
    State(seen): State<Seen>,
    done: &Output<Job>,
    ctx: &mut Context<'_>,
) -> HandlerOutcome {
    let attempt = ctx.sqs().receive_count();
    seen.attempts.lock().unwrap().push((
        seen.app.clone(),
        ctx.queue().to_owned(),
        job.id.clone(),
        attempt,
    ));
    if job.id.starts_with("poison") || (job.id.starts_with("flaky") && attempt == 1) {
        return HandlerOutcome::failed("not this time");
    }
    ctx.publish(done.message(job));
    HandlerOutcome::ack()
}

/// `.on(queue)` replaces the attribute's first argument whole, the queue's own settings with it,
/// and keeps every setting after it; where both set one, the attribute's wins.
#[test]
fn on_replaces_the_queue_and_keeps_the_attributes_settings() {
    let mounted = work.on(SqsQueue::new("jobs-eu")
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(45))
        .concurrency(99));
    assert_eq!(
        mounted.queue(),
        &SqsQueue::new("jobs-eu")
            .create_if_missing()
            .visibility_timeout(Duration::from_secs(45))
            .concurrency(4)
            .wait(Duration::from_secs(1))
            .retry(RetryPolicy::fixed(Duration::from_secs(1)))
            .dead_letter("jobs-dlq", 2)
    );
    let fixed: rust_stream::Subscriber = work.into();
    assert_eq!(
        fixed.queue(),
        &SqsQueue::new("jobs")
            .concurrency(4)
            .wait(Duration::from_secs(1))
            .retry(RetryPolicy::fixed(Duration::from_secs(1)))
            .dead_letter("jobs-dlq", 2)
    );
}

/// One app, tagged `app`, running `work` on `queue` through `.on(..)`.
async fn work_on(broker: SqsBroker, queue: &str, seen: &Seen) -> TestApp {
    let queue = SqsQueue::new(queue).create_if_missing();
    TestApp::spawn(
        RustStream::new(AppInfo::new("names", "0.0.0"))
            .shutdown_timeout(Duration::from_secs(3))
            .with_state(seen.clone())
            .with_broker(broker, |b| {
                b.include(work.on(queue));
            }),
    )
    .await
    .expect("the app starts")
}

/// What a queue holds, read to its end: the job ids, sorted.
async fn job_ids<T: Transport>(transport: &T, queue: &str) -> Vec<String> {
    let url = transport.get_queue_url(queue).await.unwrap();
    let mut ids = Vec::new();
    loop {
        let received = transport
            .receive_message(&url, rust_stream::transport::ReceiveMessage::new(10))
            .await
            .unwrap();
        if received.is_empty() {
            break;
        }
        for message in received {
            let job: Job = serde_json::from_str(&message.body).unwrap();
            ids.push(job.id);
        }
    }
    ids.sort_unstable();
    ids
}

/// Two apps at once on one broker, the same handler on two queues named at run time with
/// `.on(..)`: each handles exactly its own queue's jobs, and retries and dead-letters them as the
/// attribute says. The broker's prefix (this run's) keeps the attribute's dead-letter queue and
/// output apart from other runs' and from the test running beside this one.
async fn two_apps_on_their_own_queues<T: Transport>(backend: Backend<T>, tag: &str) {
    let prefix = format!("{}-", backend.name(tag));
    let broker = backend.broker.clone().queue_name_prefix(&prefix);
    let seen = Seen::default();
    let queue_of = |side: &str| backend.name(&format!("jobs-{side}"));
    let left = work_on(
        broker.clone(),
        &queue_of("left"),
        &Seen {
            app: "left".into(),
            ..seen.clone()
        },
    )
    .await;
    let right = work_on(
        broker.clone(),
        &queue_of("right"),
        &Seen {
            app: "right".into(),
            ..seen.clone()
        },
    )
    .await;
    let ids = |side: &str, of: &[&str]| -> Vec<String> {
        of.iter().map(|id| format!("{id}-{side}")).collect()
    };
    for side in ["left", "right"] {
        let publisher = broker.publisher(queue_of(side));
        for id in ids(side, &["1", "2", "3", "flaky", "poison"]) {
            publisher.message(&Job { id }).send().await.unwrap();
        }
    }
    eventually("both poisons tried twice", async || {
        seen.seen()
            .iter()
            .filter(|(_, _, id, _)| id.starts_with("poison"))
            .count()
            == 4
    })
    .await;
    left.drain().await;
    right.drain().await;
    left.stop().await.unwrap();
    right.stop().await.unwrap();
    let seen = seen.seen();
    for side in ["left", "right"] {
        let own: Vec<_> = seen.iter().filter(|(app, ..)| app == side).collect();
        let queue = format!("{prefix}{}", queue_of(side));
        assert!(
            own.iter()
                .all(|(_, read, id, _)| *read == queue && id.ends_with(side)),
            "the {side} app read another queue or another app's jobs: {seen:?}"
        );
        // The attribute's retry and dead-letter settings hold on the queue named at run time.
        let attempts = |id: &str| -> Vec<u32> {
            own.iter()
                .filter(|(_, _, seen_id, _)| seen_id.starts_with(id))
                .map(|(.., attempt)| *attempt)
                .collect()
        };
        for id in ["1", "2", "3"] {
            assert_eq!(attempts(id), [1], "{seen:?}");
        }
        assert_eq!(attempts("flaky"), [1, 2], "{seen:?}");
        assert_eq!(
            attempts("poison"),
            [1, 2],
            "dead-lettered after 2: {seen:?}"
        );
    }
    // The attribute's dead-letter queue and output, shared by the two apps, named for this run.

    let both = |of: &[&str]| {
        let mut all = [ids("left", of), ids("right", of)].concat();
        all.sort_unstable();
        all
    };
    assert_eq!(
        job_ids(&backend.transport, &format!("{prefix}jobs-dlq")).await,
        both(&["poison"])
    );
    assert_eq!(
        job_ids(&backend.transport, &format!("{prefix}jobs-done")).await,
        both(&["1", "2", "3", "flaky"])
    );
}

async fn two_apps_share_a_handler_on_queues_named_per_run_first<T: Transport>(backend: Backend<T>) {
    two_apps_on_their_own_queues(backend, "first").await;
}

async fn two_apps_share_a_handler_on_queues_named_per_run_second<T: Transport>(
    backend: Backend<T>,
) {
    two_apps_on_their_own_queues(backend, "second").await;
}

/// Pays a payment into the ledger; a payment of 0 is refused and dead-lettered at once.
#[subscriber(
    SqsQueue::new("pay.fifo").create_if_missing(),
    wait = Duration::from_secs(1),
    timeout = Duration::from_secs(10),
    dead_letter("pay-dlq.fifo", 3),
    outputs(ledger = SqsQueue::new("ledger.fifo").create_if_missing())
)]
async fn pay(job: &Job, ledger: &Output<Job>, ctx: &mut Context<'_>) -> HandlerOutcome {
    if job.id == "0" {
        return HandlerOutcome::dead_letter("nothing to pay");
    }
    ctx.publish(ledger.message(job).group_id("ledger"));
    HandlerOutcome::ack()
}

/// With a prefix, every queue the broker resolves carries it: the subscription's, its
/// dead-letter queue's, its output's, a publisher's; the queues created, the health report and
/// the AsyncAPI document show those names.
async fn a_prefix_names_every_queue_the_broker_resolves<T: Transport>(backend: Backend<T>) {
    let prefix = format!("{}-", backend.name("env"));
    let named = |name: &str| format!("{prefix}{name}");
    let broker = backend.broker.clone().queue_name_prefix(&prefix);
    let recorder = broker.recorder();
    let app = RustStream::new(AppInfo::new("payments", "0.0.0"))
        .shutdown_timeout(Duration::from_secs(3))
        .with_broker(broker.clone(), |b| {
            b.include(pay);
        });
    let document = app.asyncapi();
    let channels: Vec<&String> = document["channels"]
        .as_object()
        .expect("channels")
        .keys()
        .collect();
    let mut expected = vec![
        named("ledger.fifo"),
        named("pay-dlq.fifo"),
        named("pay.fifo"),
    ];
    expected.sort_unstable();
    let mut channels: Vec<String> = channels.into_iter().cloned().collect();
    channels.sort_unstable();
    assert_eq!(channels, expected, "{document:#}");
    let health = app.health();
    let running = TestApp::spawn(app).await.expect("the app starts");
    assert_eq!(
        health
            .report()
            .subscriptions
            .iter()
            .map(|subscription| subscription.queue.clone())
            .collect::<Vec<_>>(),
        [named("pay.fifo")]
    );
    let payments = broker.publisher("pay.fifo");
    assert_eq!(payments.destination().name(), named("pay.fifo"));
    for id in ["1", "0", "2"] {
        payments
            .message(&Job { id: id.to_owned() })
            .group_id("customer")
            .send()
            .await
            .unwrap();
    }
    eventually("the ledger has both payments", async || {
        recorder.published(&named("ledger.fifo")).len() == 2
    })
    .await;
    running.drain().await;
    running.stop().await.unwrap();
    assert_eq!(recorder.handled(&named("pay.fifo")).len(), 3);
    assert_eq!(recorder.dead_lettered(&named("pay.fifo")).len(), 1);
    for queue in ["pay.fifo", "pay-dlq.fifo", "ledger.fifo"] {
        if let Err(error) = backend.transport.get_queue_url(&named(queue)).await {
            panic!("`{}` was not created: {error}", named(queue));
        }
        // A fresh account shows that the name as declared was never made.
        if backend.kind == Kind::InProcess {
            assert!(
                backend.transport.get_queue_url(queue).await.is_err(),
                "{queue}"
            );
        }
    }
}

/// A prefix SQS would refuse is found before any network call: the app's start names each queue
/// it would rename and the fix, and a publisher's sends refuse with the same error.
#[tokio::test(start_paused = true)]
async fn a_prefix_sqs_refuses_is_found_before_any_call() {
    let broker = SqsBroker::in_process().queue_name_prefix("staging.");
    let app = RustStream::new(AppInfo::new("payments", "0.0.0")).with_broker(broker.clone(), |b| {
        b.include(pay);
    });
    let Err(RunError::Config(problems)) = TestApp::spawn(app).await.map(drop) else {
        panic!("the app started with a prefix SQS refuses");
    };
    let renamed: Vec<&str> = problems
        .0
        .iter()
        .filter_map(|problem| match problem {
            ConfigError::QueueNaming { queue, .. } => Some(queue.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        renamed,
        ["pay.fifo", "pay-dlq.fifo", "ledger.fifo"],
        "{problems}"
    );
    let shown = problems.to_string();
    assert!(shown.contains("`staging.pay.fifo`"), "{shown}");
    assert!(shown.contains("queue_name_prefix"), "{shown}");
    let error = broker
        .publisher("pay.fifo")
        .message(&Job { id: "1".into() })
        .group_id("customer")
        .send()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, PublishError::Config(ConfigError::QueueNaming { queue, .. }) if queue == "pay.fifo"),
        "{error:?}"
    );
    assert_eq!(broker.api_calls(), rust_stream::ApiCalls::default());
}

/// A prefix that takes one of the app's names past SQS's 80 characters names that queue and by
/// how much to shorten; the others start nothing either.
#[tokio::test(start_paused = true)]
async fn a_prefix_that_makes_a_name_too_long_says_by_how_much() {
    let broker = SqsBroker::in_process().queue_name_prefix("p".repeat(69));
    let app = RustStream::new(AppInfo::new("payments", "0.0.0")).with_broker(broker.clone(), |b| {
        b.include(pay);
    });
    let Err(RunError::Config(problems)) = TestApp::spawn(app).await.map(drop) else {
        panic!("the app started with names over 80 characters");
    };
    // `pay.fifo` and `ledger.fifo` fit in 80 with 69 before them; `pay-dlq.fifo` does not.
    assert_eq!(problems.0.len(), 1, "{problems}");
    let shown = problems.to_string();
    assert!(shown.contains("queue `pay-dlq.fifo`"), "{shown}");
    assert!(shown.contains("81 characters, over SQS's 80"), "{shown}");
    assert!(shown.contains("by 1"), "{shown}");
    assert_eq!(broker.api_calls(), rust_stream::ApiCalls::default());
}

/// A prefix is added to the topics an app's queues are subscribed to as to the queues: one SNS
/// refuses (a character) names the topic and the fix, and one that takes a topic's name past
/// SNS's 256 characters says by how much; both before any call.
#[tokio::test(start_paused = true)]
async fn a_prefix_sns_refuses_in_a_topic_name_is_found_before_any_call() {
    let start = |prefix: String, topic: String| async move {
        let broker = SqsBroker::in_process().queue_name_prefix(prefix);
        let queue = SqsQueue::new("ledger").subscribed_to(rust_stream::SnsTopic::new(topic));
        let app =
            RustStream::new(AppInfo::new("payments", "0.0.0")).with_broker(broker.clone(), |b| {
                b.include(subscriber(queue, Ignore).build());
            });
        let Err(RunError::Config(problems)) = TestApp::spawn(app).await.map(drop) else {
            panic!("the app started with a topic name SNS refuses");
        };
        assert_eq!(broker.api_calls(), rust_stream::ApiCalls::default());
        problems
    };

    let problems = start("staging.".into(), "posted".into()).await;
    let topics: Vec<&str> = problems
        .0
        .iter()
        .filter_map(|problem| match problem {
            ConfigError::TopicNaming { topic, .. } => Some(topic.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(topics, ["posted"], "{problems}");
    let shown = problems.to_string();
    for needle in ["`staging.posted`", "SNS refuses", "queue_name_prefix"] {
        assert!(shown.contains(needle), "`{needle}` missing in: {shown}");
    }

    // 250 + 8 characters: within SQS's 80 for the queue, over SNS's 256 for the topic.
    let problems = start("staging-".into(), "t".repeat(250)).await;
    assert_eq!(problems.0.len(), 1, "{problems}");
    let shown = problems.to_string();
    for needle in ["258 characters, over SNS's 256", "by 2"] {
        assert!(shown.contains(needle), "`{needle}` missing in: {shown}");
    }
}

/// Takes every message.
struct Ignore;

impl Handle<serde_json::Value> for Ignore {
    async fn handle(
        &self,
        _: &serde_json::Value,
        _: &(),
        _: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        Ok(())
    }
}

/// A clone of a broker configured apart leaves its original as it was: the clone's prefix,
/// strict groups and type header are its own, and the original (and a publisher made from it
/// before) still sends to the unprefixed queue, to the group `"default"`.
#[tokio::test(start_paused = true)]
async fn a_clone_configured_apart_leaves_its_original_as_it_was() {
    let account = rust_stream::account::Account::new();
    let original = SqsBroker::with_account(&account);
    let made_before = original.publisher(SqsQueue::new("jobs.fifo").create_if_missing());
    let clone = original
        .clone()
        .queue_name_prefix("blue-")
        .strict_groups()
        .batch_linger(Duration::from_millis(50))
        .type_header("kind");
    assert!(
        format!("{original:?}").contains("linger: 5ms"),
        "{original:?}"
    );
    assert!(format!("{clone:?}").contains("linger: 50ms"), "{clone:?}");

    // The original names no prefix and lets a FIFO message without a group go to "default".
    let job = Job { id: "1".into() };
    made_before
        .message(&job)
        .send()
        .await
        .expect("the original's publisher");
    original
        .publisher(SqsQueue::new("jobs.fifo"))
        .message(&job)
        .dedup_id("2")
        .send()
        .await
        .expect("a publisher made from the original after the clone was configured");
    // The clone refuses it before any call, and names the prefixed queue.
    let refused = clone
        .publisher(SqsQueue::new("jobs.fifo").create_if_missing())
        .message(&job)
        .send()
        .await
        .unwrap_err();
    assert!(matches!(refused, PublishError::NoGroup { .. }), "{refused}");
    clone
        .publisher(SqsQueue::new("jobs.fifo").create_if_missing())
        .message(&job)
        .group_id("g")
        .send()
        .await
        .expect("the clone's publisher with a group");

    let unprefixed = account.queue_url_for("jobs.fifo");
    let prefixed = account.queue_url_for("blue-jobs.fifo");
    assert_eq!(
        account
            .counts(&unprefixed)
            .await
            .expect("the original's queue")
            .visible,
        2
    );
    assert_eq!(
        account
            .counts(&prefixed)
            .await
            .expect("the clone's queue")
            .visible,
        1
    );
}
