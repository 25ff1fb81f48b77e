//! Bad input, on both backends: every row of the table in `docs/bad-input.md` is one scenario
//! here, run on the in-process account (paused clock) and on LocalStack (real time), so a failing
//! row is reported by its name (`configuration::live::batch_size_0`).
//!
//! - **Configuration**: the app refuses to start with a typed [`ConfigError`] (one, of the
//!   expected variant) whose message names the offending value and the limit or the fix; the
//!   broker made no SQS call, and a broker over SQS at a closed port (127.0.0.1:9) answers the
//!   same error, not a connection error: the check comes before the network.
//! - **Publishing**: the send fails with [`PublishError::Rejected`] carrying the SQS
//!   [`ErrorKind`], its message names the queue, the offending value and the limit or fix; no SQS
//!   call was made, and the closed port answers the same. Two inputs SQS accepts are rows too, with
//!   what they become.
//! - **SNS publishes** (`sns_publishing`): a topic publisher (`broker.topic(..)`) refuses a
//!   publish breaking an SNS rule with [`PublishError::Rejected`] carrying SNS's [`ErrorKind`],
//!   naming the topic and the fix, sent alone or in a batch, with no call at all (the closed
//!   port answers the same); a message over the topic's own size is refused once the topic is
//!   looked up, still without a `PublishBatch`.
//! - **SNS at start** (`sns_at_start`): a missing topic or subscription the app may not make, or
//!   a queue `Policy` it cannot add to, is a typed [`RunError`]; these need the network, so they
//!   have no closed-port leg.
//! - **Received messages**: garbage (not JSON, the wrong shape, huge, odd attributes) never
//!   reaches the handler, never crashes the consumer and is never deleted: it is dead-lettered
//!   whole with its reason, or, without a dead-letter queue, retried with backoff and left on
//!   the queue. On a queue subscribed to a topic (`sns_received`), a broken notification
//!   envelope, or a published message not of the handler's type, is dead-lettered as the
//!   envelope it came in.

#[macro_use]
mod common;

use std::time::Duration;

use common::backend::Backend;
use common::engine::{jobs, Job, Scripted};
use rust_stream::model::rules::ErrorKind;
use rust_stream::prelude::*;
use rust_stream::sqs::StartError;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::{MessageAttributeValue, ReceivedMessage, Transport};
use rust_stream::{
    ApiCalls, ConfigError, ConfigErrors, Outgoing, PublishError, Publisher, RetryPolicy, RunError,
    SnsTopic, Subscriber, TopicSubscription, DEAD_LETTER_REASON_HEADER,
};

/// A broker over SQS at a port nothing listens on: any call it made would fail to connect, so an
/// error other than a connection error came before the network.
async fn unreachable() -> SqsBroker {
    SqsBroker::aws()
        .endpoint("http://127.0.0.1:9")
        .region("us-east-1")
        .test_credentials()
        .connect()
        .await
        .expect("an endpoint, a region and test credentials are a complete configuration")
}

/// The brokers a refusal is checked on: the backend's, and one at a closed port.
async fn brokers<T: Transport>(backend: &Backend<T>) -> [(SqsBroker, &'static str); 2] {
    [
        (backend.broker.clone(), "the backend"),
        (unreachable().await, "a closed port"),
    ]
}

/// The control of every "before the network" check: at the closed port, a valid start and a
/// valid send do reach for the network, and fail to connect.
#[tokio::test]
async fn valid_input_at_the_closed_port_fails_to_connect() {
    let broker = unreachable().await;
    let (handler, _) = Scripted::new(|_, _| Ok(()));
    let app = RustStream::new(AppInfo::new("bad-input", "0")).with_broker(broker.clone(), |b| {
        b.include(subscriber(SqsQueue::new("orders"), handler).build());
    });
    // Together: each waits out the SDK's retries.
    let (sent, started) = tokio::join!(
        broker.publisher("events").raw("valid").send(),
        app.run_until(std::future::pending()),
    );
    let sent = sent.unwrap_err();
    assert!(
        sent.to_string().contains("SQS unreachable")
            && sent
                .to_string()
                .contains("(calling SQS at http://127.0.0.1:9 in region us-east-1)"),
        "a connection error that names the endpoint and region: {sent}"
    );
    let started = started.unwrap_err();
    assert!(
        !matches!(started, RunError::Config(_)) && started.to_string().contains("SQS unreachable"),
        "a connection error: {started}"
    );
    assert!(
        broker.api_calls().get_queue_url >= 2,
        "{:?}",
        broker.api_calls()
    );
}

mod configuration {
    use super::*;

    /// A broker whose batch linger would have lone deletes wait near a visibility timeout: the
    /// app refuses to start, before any call.
    #[tokio::test]
    async fn batch_linger_over_a_second() {
        let broker = SqsBroker::in_process().batch_linger(Duration::from_secs(2));
        let (handler, log) = Scripted::new(|_, _| Ok(()));
        let app =
            RustStream::new(AppInfo::new("bad-input", "0")).with_broker(broker.clone(), |b| {
                b.include(subscriber(SqsQueue::new("orders"), handler).build());
            });
        let error = app.run_until(std::future::pending()).await.unwrap_err();
        let RunError::Config(ConfigErrors(problems)) = &error else {
            panic!("expected a configuration error, got: {error}")
        };
        assert!(
            matches!(problems.as_slice(), [ConfigError::BatchLinger { .. }]),
            "{problems:#?}"
        );
        let text = problems[0].to_string();
        for needle in [
            "batch linger 2s",
            "at most 1s",
            "`SqsBroker::batch_linger(..)`",
        ] {
            assert!(text.contains(needle), "`{needle}` missing in: {text}");
        }
        assert_eq!(broker.api_calls(), ApiCalls::default());
        assert!(log.lock().unwrap().is_empty());
    }

    /// The warnings logged while an app on the in-process broker with `queue` starts and stops.
    fn warnings_of(queue: SqsQueue) -> Vec<String> {
        let logged = common::logged_while(|| async {
            let (handler, _) = Scripted::new(|_, _| Ok(()));
            let running = rust_stream::testing::TestApp::spawn(
                RustStream::new(AppInfo::new("bad-input", "0")).with_broker(
                    SqsBroker::in_process(),
                    |b| {
                        b.include(subscriber(queue, handler).build());
                    },
                ),
            )
            .await
            .expect("it starts");
            running.stop().await.unwrap();
        });
        logged
            .lines()
            .filter(|line| line.contains("WARN"))
            .map(str::to_owned)
            .collect()
    }

    /// A FIFO subscription without a handler timeout starts, with a warning.
    #[test]
    fn a_fifo_subscription_without_a_handler_timeout_is_a_warning() {
        let warnings = warnings_of(SqsQueue::new("orders.fifo").create_if_missing());
        let warning = warnings
            .iter()
            .find(|line| line.contains("no handler timeout"))
            .unwrap_or_else(|| panic!("no warning in: {warnings:#?}"));
        assert!(
            warning.contains("`.timeout(..)`") && warning.contains("12-hour cap"),
            "{warning}"
        );
        let with_timeout = warnings_of(
            SqsQueue::new("orders.fifo")
                .create_if_missing()
                .timeout(Duration::from_secs(60)),
        );
        assert!(
            !with_timeout
                .iter()
                .any(|line| line.contains("no handler timeout")),
            "{with_timeout:#?}"
        );
    }

    /// Settings that work, but badly, start with a warning that says what to change.
    #[test]
    fn a_visibility_timeout_under_five_seconds_is_a_warning() {
        let logged = common::logged_while(|| async {
            let broker = SqsBroker::in_process();
            let (handler, _) = Scripted::new(|_, _| Ok(()));
            let queue = SqsQueue::new("orders")
                .create_if_missing()
                .visibility_timeout(Duration::from_secs(1));
            let running = rust_stream::testing::TestApp::spawn(
                RustStream::new(AppInfo::new("bad-input", "0")).with_broker(broker, |b| {
                    b.include(subscriber(queue, handler).build());
                }),
            )
            .await
            .expect("it starts");
            running.stop().await.unwrap();
        });
        let warning = logged
            .lines()
            .find(|line| line.contains("WARN") && line.contains("visibility timeout this short"))
            .unwrap_or_else(|| panic!("no warning in:\n{logged}"));
        assert!(
            warning.contains("at least 5 s") && warning.contains("visibility_timeout_s=1"),
            "{warning}"
        );
    }

    /// A long poll no shorter than the SQS client's attempt timeout would be cut every time, so
    /// the start is refused before any call. The in-process account bounds no attempt, so this
    /// row is the aws transport's alone; a wait a second shorter starts (and fails to connect).
    #[tokio::test]
    async fn wait_not_shorter_than_the_attempt_timeout() {
        let broker_with = |attempt_timeout| async move {
            SqsBroker::aws()
                .endpoint("http://127.0.0.1:9")
                .region("us-east-1")
                .test_credentials()
                .attempt_timeout(attempt_timeout)
                .connect()
                .await
                .expect("a complete configuration")
        };
        let start = |broker: SqsBroker, wait| async move {
            let (handler, _) = Scripted::new(|_, _| Ok(()));
            RustStream::new(AppInfo::new("bad-input", "0"))
                .with_broker(broker, |b| {
                    b.include(subscriber(SqsQueue::new("orders").wait(wait), handler).build());
                })
                .run_until(std::future::pending())
                .await
                .unwrap_err()
        };

        let broker = broker_with(Duration::from_secs(5)).await;
        let error = start(broker.clone(), Duration::from_secs(5)).await;
        let RunError::Config(ConfigErrors(problems)) = &error else {
            panic!("expected a configuration error, got: {error}")
        };
        assert!(
            matches!(
                problems.as_slice(),
                [ConfigError::WaitPastAttemptTimeout { .. }]
            ),
            "{problems:#?}"
        );
        let text = problems[0].to_string();
        for needle in [
            "wait 5s",
            "attempt timeout 5s",
            "`.wait(..)`",
            "`attempt_timeout(..)`",
        ] {
            assert!(text.contains(needle), "`{needle}` missing in: {text}");
        }
        assert_eq!(
            broker.api_calls(),
            ApiCalls::default(),
            "refused before any SQS call"
        );

        let error = start(
            broker_with(Duration::from_secs(5)).await,
            Duration::from_secs(4),
        )
        .await;
        assert!(
            !matches!(error, RunError::Config(_)) && error.to_string().contains("SQS unreachable"),
            "a wait under the attempt timeout starts, and fails to connect: {error}"
        );
    }

    /// Starts an app subscribed to `queue` on each broker and asserts the start fails with exactly
    /// one problem, `expected`, saying `says`, before any SQS call.
    async fn refused_at_start<T: Transport>(
        backend: &Backend<T>,
        queue: SqsQueue,
        expected: fn(&ConfigError) -> bool,
        says: &[&str],
    ) {
        refused_at_start_of(backend, &[queue], &[], expected, says).await;
    }

    /// Starts an app with a subscription of each of `queues` on each broker, after making a
    /// publisher of each of `published` there, and asserts the start fails with exactly one
    /// problem, `expected`, saying `says`, before any SQS call.
    async fn refused_at_start_of<T: Transport>(
        backend: &Backend<T>,
        queues: &[SqsQueue],
        published: &[SqsQueue],
        expected: fn(&ConfigError) -> bool,
        says: &[&str],
    ) {
        for (broker, on) in brokers(backend).await {
            let _publishers: Vec<Publisher> = published
                .iter()
                .map(|queue| broker.publisher(queue.clone()))
                .collect();
            let mut logs = Vec::new();
            let app =
                RustStream::new(AppInfo::new("bad-input", "0")).with_broker(broker.clone(), |b| {
                    for queue in queues {
                        let (handler, log) = Scripted::new(|_, _| Ok(()));
                        logs.push(log);
                        b.include(subscriber(queue.clone(), handler).build());
                    }
                });
            let error = app.run_until(std::future::pending()).await.unwrap_err();
            assert_refused(&error, &broker, on, expected, says);
            assert!(logs.iter().all(|log| log.lock().unwrap().is_empty()));
        }
    }

    /// Asserts `error` is exactly one problem, `expected`, saying `says`, and that `broker` made
    /// no SQS call.
    fn assert_refused(
        error: &RunError,
        broker: &SqsBroker,
        on: &str,
        expected: fn(&ConfigError) -> bool,
        says: &[&str],
    ) {
        let RunError::Config(ConfigErrors(problems)) = error else {
            panic!("on {on}: expected a configuration error, got: {error}")
        };
        assert_eq!(problems.len(), 1, "on {on}: one problem: {problems:#?}");
        let problem = &problems[0];
        assert!(
            expected(problem),
            "on {on}: unexpected variant: {problem:?}"
        );
        let text = problem.to_string();
        for needle in says {
            assert!(
                text.contains(needle),
                "on {on}: `{needle}` missing in: {text}"
            );
        }
        assert_eq!(
            broker.api_calls(),
            ApiCalls::default(),
            "on {on}: refused before any SQS call"
        );
    }

    /// A batch handler that acks.
    struct AckAll;

    impl rust_stream::handler::batch::HandleBatch<Job> for AckAll {
        async fn handle(
            &self,
            _: &[Job],
            _: &(),
            _: &mut rust_stream::handler::batch::BatchContext<'_>,
        ) -> rust_stream::handler::batch::BatchOutcome {
            rust_stream::handler::batch::BatchOutcome::ack()
        }
    }

    /// Starts an app with a batch handler of `max` messages and `window` on each broker, and
    /// asserts the start fails with exactly one problem, `expected`, saying `says`, before any SQS
    /// call.
    async fn batch_refused_at_start<T: Transport>(
        backend: &Backend<T>,
        (max, window): (usize, Duration),
        expected: fn(&ConfigError) -> bool,
        says: &[&str],
    ) {
        for (broker, on) in brokers(backend).await {
            let app =
                RustStream::new(AppInfo::new("bad-input", "0")).with_broker(broker.clone(), |b| {
                    b.include(subscriber("postings", AckAll).batch(max, window).build());
                });
            let error = app.run_until(std::future::pending()).await.unwrap_err();
            assert_refused(&error, &broker, on, expected, says);
        }
    }

    async fn batch_of_0_messages<T: Transport>(backend: Backend<T>) {
        batch_refused_at_start(
            &backend,
            (0, Duration::from_millis(100)),
            |problem| matches!(problem, ConfigError::BatchMax { got: 0, .. }),
            &["batch of 0 messages", "1..=1000", "`.batch(0, ..)`"],
        )
        .await;
    }

    async fn batch_of_1001_messages<T: Transport>(backend: Backend<T>) {
        batch_refused_at_start(
            &backend,
            (1001, Duration::from_millis(100)),
            |problem| matches!(problem, ConfigError::BatchMax { got: 1001, .. }),
            &["queue `postings`", "batch of 1001 messages", "1..=1000"],
        )
        .await;
    }

    /// A single handler of any JSON value.
    struct AnyValue;

    impl Handle<serde_json::Value> for AnyValue {
        async fn handle(
            &self,
            _: &serde_json::Value,
            _: &(),
            _: &mut Context<'_>,
        ) -> Result<(), HandlerOutcome> {
            Ok(())
        }
    }

    async fn batch_handler_on_a_routed_queue<T: Transport>(backend: Backend<T>) {
        for (broker, on) in brokers(&backend).await {
            let app =
                RustStream::new(AppInfo::new("bad-input", "0")).with_broker(broker.clone(), |b| {
                    b.include(subscriber("events", AnyValue).build());
                    b.include(
                        subscriber("events", AckAll)
                            .batch(10, Duration::from_millis(100))
                            .build(),
                    );
                });
            let error = app.run_until(std::future::pending()).await.unwrap_err();
            assert_refused(
                &error,
                &broker,
                on,
                |problem| matches!(problem, ConfigError::RoutedBatchHandler { .. }),
                &[
                    "queue `events`",
                    "`AckAll` is a batch handler",
                    "one message a call",
                ],
            );
        }
    }

    async fn batch_handler_with_an_inbox<T: Transport>(backend: Backend<T>) {
        for (broker, on) in brokers(&backend).await {
            let app =
                RustStream::new(AppInfo::new("bad-input", "0")).with_broker(broker.clone(), |b| {
                    b.include(
                        subscriber("payments", AckAll)
                            .idempotent(rust_stream::inbox::Inbox::new(
                                rust_stream::store::memory::MemoryStore::new(),
                            ))
                            .batch(10, Duration::from_millis(100))
                            .build(),
                    );
                });
            let error = app.run_until(std::future::pending()).await.unwrap_err();
            assert_refused(
                &error,
                &broker,
                on,
                |problem| matches!(problem, ConfigError::IdempotentBatch { .. }),
                &[
                    "`AckAll` on queue `payments`",
                    "batch handler with an inbox (`idempotent(..)`)",
                    "drop `idempotent(..)`",
                ],
            );
        }
    }

    async fn batch_window_over_5_minutes<T: Transport>(backend: Backend<T>) {
        batch_refused_at_start(
            &backend,
            (10, Duration::from_secs(301)),
            |problem| matches!(problem, ConfigError::BatchWindow { .. }),
            &["window of 301s", "300s", "`.batch(.., window)`"],
        )
        .await;
    }

    /// One row: `name: queue => variant, [what the message says];`.
    macro_rules! rows {
        ($($name:ident: $queue:expr => $variant:pat, [$($says:expr),* $(,)?];)*) => {
            $(
                async fn $name<T: Transport>(backend: Backend<T>) {
                    refused_at_start(
                        &backend,
                        $queue,
                        |problem| matches!(problem, $variant),
                        &[$($says),*],
                    )
                    .await;
                }
            )*
            both_backends!(
                $($name,)*
                batch_of_0_messages,
                batch_of_1001_messages,
                batch_window_over_5_minutes,
                batch_handler_on_a_routed_queue,
                batch_handler_with_an_inbox,
                topic_declared_with_two_content_based_deduplications,
                queue_subscribed_to_a_topic_in_two_declarations_that_disagree,
            );
        };
    }

    fn long(n: usize) -> String {
        "q".repeat(n)
    }

    /// `ledger` subscribed to `topic`.
    fn subscribed_to(topic: impl Into<SnsTopic>) -> SqsQueue {
        SqsQueue::new("ledger").subscribed_to(TopicSubscription::new(topic))
    }

    /// `ledger` subscribed to `posted` with this filter policy on the message attributes.
    fn policy(json: &str) -> SqsQueue {
        SqsQueue::new("ledger").subscribed_to(TopicSubscription::new("posted").filter_policy(json))
    }

    /// `ledger` subscribed to `posted` with this filter policy on the message body.
    fn body_policy(json: &str) -> SqsQueue {
        SqsQueue::new("ledger")
            .subscribed_to(TopicSubscription::new("posted").filter_policy_on_body(json))
    }

    /// A policy of `keys` keys, each with `values` values.
    fn policy_of(keys: usize, values: usize) -> String {
        let values: Vec<String> = (0..values).map(|v| format!("\"v{v}\"")).collect();
        let keys: Vec<String> = (0..keys)
            .map(|k| format!("\"k{k}\": [{}]", values.join(",")))
            .collect();
        format!("{{{}}}", keys.join(","))
    }

    /// Two subscriptions of one app declare their topic with content-based deduplication on and
    /// off: the start is refused naming both.
    async fn topic_declared_with_two_content_based_deduplications<T: Transport>(
        backend: Backend<T>,
    ) {
        let posted = |dedup| SnsTopic::new("posted.fifo").content_based_deduplication(dedup);
        refused_at_start_of(
            &backend,
            &[
                SqsQueue::new("ledger.fifo").subscribed_to(posted(true)),
                SqsQueue::new("risk.fifo").subscribed_to(posted(false)),
            ],
            &[],
            |problem| {
                matches!(problem, ConfigError::ConflictingTopicDeclarations { setting, .. } if *setting == "content-based deduplication")
            },
            &[
                "topic `posted.fifo`",
                "the subscription of `ledger.fifo`",
                "the subscription of `risk.fifo`",
            ],
        )
        .await;
    }

    /// A publisher and a subscription declare one queue's subscription to a topic with raw
    /// delivery on and off; SNS would keep one of them (and refuse the other): the start is
    /// refused naming both.
    async fn queue_subscribed_to_a_topic_in_two_declarations_that_disagree<T: Transport>(
        backend: Backend<T>,
    ) {
        refused_at_start_of(
            &backend,
            &[subscribed_to("posted")],
            &[SqsQueue::new("ledger")
                .subscribed_to(TopicSubscription::new("posted").raw_message_delivery(true))],
            |problem| {
                matches!(problem, ConfigError::ConflictingSubscriptions { setting, .. } if *setting == "raw message delivery")
            },
            &[
                "queue `ledger`'s subscription to topic `posted`",
                "the subscription of `ledger`",
                "a publisher made with `broker.publisher(..)`",
            ],
        )
        .await;
    }

    fn retry(initial: Duration, max: Duration) -> SqsQueue {
        SqsQueue::new("orders").retry(RetryPolicy::exponential(initial, max))
    }

    const HOUR: u64 = 3600;

    rows! {
        queue_name_of_81_characters: SqsQueue::new(long(81))
            => ConfigError::QueueName { .. }, ["81 characters", "1 to 80"];
        fifo_queue_name_of_81_characters_with_its_suffix: SqsQueue::new(format!("{}.fifo", long(76)))
            => ConfigError::QueueName { .. }, ["81 characters", "counted in the 80"];
        queue_name_with_a_bad_character: SqsQueue::new("orders!")
            => ConfigError::QueueName { .. }, ["`orders!`", "letters, digits, `-` and `_`"];
        queue_name_with_a_space: SqsQueue::new("my orders")
            => ConfigError::QueueName { .. }, ["`my orders`", "letters, digits, `-` and `_`"];
        empty_queue_name: SqsQueue::new("")
            => ConfigError::QueueName { .. }, ["0 characters", "1 to 80"];
        queue_name_that_is_only_the_fifo_suffix: SqsQueue::new(".fifo")
            => ConfigError::QueueName { .. }, ["`.fifo`", "1 to 80"];
        fifo_suffix_in_capitals: SqsQueue::new("orders.FIFO")
            => ConfigError::QueueName { .. }, ["`orders.FIFO`", "end a FIFO queue's name in `.fifo`"];
        dead_letter_queue_name_with_a_bad_character: SqsQueue::new("orders").dead_letter("orders dlq", 3)
            => ConfigError::QueueName { .. }, ["`orders dlq`", "letters, digits, `-` and `_`"];
        wait_of_21_seconds: SqsQueue::new("orders").wait(Duration::from_secs(21))
            => ConfigError::Wait { .. }, ["21s", "20 s", "`.wait(..)`"];
        wait_of_duration_max: SqsQueue::new("orders").wait(Duration::MAX)
            => ConfigError::Wait { .. }, ["20 s", "`.wait(..)`"];
        sub_second_wait: SqsQueue::new("orders").wait(Duration::from_millis(500))
            => ConfigError::Wait { .. }, ["500ms", "whole number of seconds", "`.wait(..)`"];
        fractional_wait: SqsQueue::new("orders").wait(Duration::from_millis(1500))
            => ConfigError::Wait { .. }, ["1.5s", "whole number of seconds"];
        batch_size_0: SqsQueue::new("orders").batch_size(0)
            => ConfigError::BatchSize { got: 0, .. }, ["batch size 0", "1..=10", "`.batch_size(..)`"];
        batch_size_11: SqsQueue::new("orders").batch_size(11)
            => ConfigError::BatchSize { got: 11, .. }, ["batch size 11", "1..=10"];
        batch_size_usize_max: SqsQueue::new("orders").batch_size(usize::MAX)
            => ConfigError::BatchSize { .. }, [&usize::MAX.to_string(), "1..=10"];
        delete_run_0: SqsQueue::new("orders.fifo").delete_run(0)
            => ConfigError::DeleteRun { got: 0, .. }, ["delete run 0", "1..=10", "`.delete_run(..)`"];
        delete_run_11: SqsQueue::new("orders.fifo").delete_run(11)
            => ConfigError::DeleteRun { got: 11, .. }, ["delete run 11", "1..=10", "up to 10 messages"];
        sub_second_visibility_timeout: SqsQueue::new("orders").visibility_timeout(Duration::from_millis(500))
            => ConfigError::VisibilityTimeout { .. }, ["500ms", "1 s..=12 h", "`.visibility_timeout(..)`"];
        fractional_visibility_timeout: SqsQueue::new("orders").visibility_timeout(Duration::from_millis(1500))
            => ConfigError::VisibilityTimeout { .. }, ["1.5s", "whole number of seconds"];
        zero_visibility_timeout: SqsQueue::new("orders").visibility_timeout(Duration::ZERO)
            => ConfigError::VisibilityTimeout { .. }, ["0ns", "1 s..=12 h"];
        visibility_timeout_over_12_hours: SqsQueue::new("orders").visibility_timeout(Duration::from_secs(12 * HOUR + 1))
            => ConfigError::VisibilityTimeout { .. }, ["43201s", "1 s..=12 h"];
        visibility_timeout_of_duration_max: SqsQueue::new("orders").visibility_timeout(Duration::MAX)
            => ConfigError::VisibilityTimeout { .. }, ["1 s..=12 h"];
        fifo_queue_with_a_standard_dead_letter_queue: SqsQueue::new("orders.fifo").dead_letter("orders-dlq", 3)
            => ConfigError::DeadLetterType { .. }, ["`orders-dlq`", "a FIFO queue needs a `.fifo` dead-letter queue"];
        standard_queue_with_a_fifo_dead_letter_queue: SqsQueue::new("orders").dead_letter("orders-dlq.fifo", 3)
            => ConfigError::DeadLetterType { .. }, ["`orders-dlq.fifo`", "a standard queue a standard one"];
        queue_as_its_own_dead_letter_queue: SqsQueue::new("orders").dead_letter("orders", 3)
            => ConfigError::DeadLetterType { .. }, ["must be another queue"];
        max_receive_count_0: SqsQueue::new("orders").dead_letter("orders-dlq", 0)
            => ConfigError::MaxReceiveCount { got: 0, .. }, ["max receive count 0", "1..=1000", "`.dead_letter(..)`"];
        max_receive_count_1001: SqsQueue::new("orders").dead_letter("orders-dlq", 1001)
            => ConfigError::MaxReceiveCount { got: 1001, .. }, ["1001", "1..=1000"];
        max_receive_count_u32_max: SqsQueue::new("orders").dead_letter("orders-dlq", u32::MAX)
            => ConfigError::MaxReceiveCount { .. }, [&u32::MAX.to_string(), "1..=1000"];
        retry_with_a_zero_first_delay: retry(Duration::ZERO, Duration::from_secs(1))
            => ConfigError::Retry { .. }, ["the first delay is 0", "at least 1 ms", "`.retry(..)`"];
        retry_with_the_longest_delay_shorter_than_the_first: retry(Duration::from_secs(10), Duration::from_secs(1))
            => ConfigError::Retry { .. }, ["1s is shorter than the first 10s", "make the longest at least the first"];
        retry_longer_than_12_hours: retry(Duration::from_secs(1), Duration::from_secs(12 * HOUR + 1))
            => ConfigError::Retry { .. }, ["43201s", "keep it within 12 h"];
        retry_of_duration_max: retry(Duration::MAX, Duration::MAX)
            => ConfigError::Retry { .. }, ["12-hour", "keep it within 12 h"];
        concurrency_0: SqsQueue::new("orders").concurrency(0)
            => ConfigError::Concurrency { got: 0, .. }, ["concurrency 0", "1..=100000", "`.concurrency(..)`"];
        concurrency_usize_max: SqsQueue::new("orders").concurrency(usize::MAX)
            => ConfigError::Concurrency { .. }, [&usize::MAX.to_string(), "1..=100000"];
        pollers_0: SqsQueue::new("orders").pollers(0)
            => ConfigError::Pollers { got: 0, .. }, ["0 pollers", "1..=1000", "`.pollers(..)`"];
        pollers_usize_max: SqsQueue::new("orders").pollers(usize::MAX)
            => ConfigError::Pollers { .. }, [&usize::MAX.to_string(), "1..=1000"];
        handler_timeout_0: SqsQueue::new("orders").timeout(Duration::ZERO)
            => ConfigError::HandlerTimeout { .. }, ["timeout of 0", "`.timeout(..)`"];
        content_based_dedup_on_a_standard_queue: SqsQueue::new("orders").content_based_dedup()
            => ConfigError::ContentBasedDedup { .. }, ["needs a FIFO queue", "`.fifo`"];
        topic_name_of_257_characters: subscribed_to("t".repeat(257))
            => ConfigError::TopicName { .. }, ["(257 characters)", "1 to 256"];
        fifo_topic_name_of_257_characters_with_its_suffix: SqsQueue::new("ledger.fifo").subscribed_to(SnsTopic::new(format!("{}.fifo", "t".repeat(252))))
            => ConfigError::TopicName { .. }, ["(257 characters)", "counted in the 256"];
        topic_name_with_a_space: subscribed_to("payments posted")
            => ConfigError::TopicName { .. }, ["`payments posted`", "letters, digits, `-` and `_`"];
        empty_topic_name: subscribed_to("")
            => ConfigError::TopicName { .. }, ["(0 characters)", "1 to 256"];
        topic_name_that_is_only_the_fifo_suffix: SqsQueue::new("ledger.fifo").subscribed_to(SnsTopic::new(".fifo"))
            => ConfigError::TopicName { .. }, ["`.fifo`", "1 to 256"];
        fifo_topic_suffix_in_capitals: subscribed_to("posted.FIFO")
            => ConfigError::TopicName { .. }, ["`posted.FIFO`", "letters, digits, `-` and `_`"];
        content_based_deduplication_on_a_standard_topic: subscribed_to(SnsTopic::new("posted").content_based_deduplication(true))
            => ConfigError::TopicContentBasedDedup { .. }, ["topic `posted`", "needs a FIFO topic", "`.content_based_deduplication(true)`"];
        fifo_queue_subscribed_to_a_standard_topic: SqsQueue::new("ledger.fifo").subscribed_to(SnsTopic::new("posted"))
            => ConfigError::FifoQueueOnStandardTopic { .. }, ["`ledger.fifo` is FIFO", "`posted` is standard", "subscribe it to a FIFO topic"];
        queue_subscribed_to_a_topic_twice_with_different_settings: subscribed_to("posted").subscribed_to(TopicSubscription::new("posted").raw_message_delivery(true))
            => ConfigError::SubscribedTwice { .. }, ["`posted` twice", "give `.subscribed_to(..)` the topic once"];
        filter_policy_over_256_kib: policy(&format!(r#"{{"kind": ["{}"]}}"#, "k".repeat(262_144)))
            => ConfigError::FilterPolicy { .. }, ["queue `ledger`, subscribed to topic `posted`", "262158 bytes", "more than SNS's 262144", "`.filter_policy(..)`"];
        filter_policy_that_is_not_json: policy(r#"{"kind": ["#)
            => ConfigError::FilterPolicy { .. }, ["not valid JSON"];
        filter_policy_that_is_not_an_object: policy(r#"["card"]"#)
            => ConfigError::FilterPolicy { .. }, ["must be a JSON object", "an array"];
        filter_policy_key_without_an_array: policy(r#"{"kind": "card"}"#)
            => ConfigError::FilterPolicy { .. }, ["key `kind` must be given an array of values"];
        filter_policy_nested_in_the_attribute_scope: policy(r#"{"payment": {"currency": ["EUR"]}}"#)
            => ConfigError::FilterPolicy { .. }, ["key `payment` holds nested keys", "set the scope to MessageBody"];
        filter_policy_key_with_an_empty_array: body_policy(r#"{"payment": {"currency": []}}"#)
            => ConfigError::FilterPolicy { .. }, ["key `payment.currency` has an empty array", "`.filter_policy_on_body(..)`"];
        filter_policy_value_that_is_an_array: policy(r#"{"kind": [["card"]]}"#)
            => ConfigError::FilterPolicy { .. }, ["key `kind` has an array among its values"];
        filter_policy_operator_object_with_two_operators: policy(r#"{"kind": [{"prefix": "c", "suffix": "d"}]}"#)
            => ConfigError::FilterPolicy { .. }, ["operator object with 2 keys", "one operator per object"];
        filter_policy_unknown_operator: policy(r#"{"kind": [{"contains": "ar"}]}"#)
            => ConfigError::FilterPolicy { .. }, ["unknown operator `contains`"];
        filter_policy_operator_given_the_wrong_kind_of_value: policy(r#"{"kind": [{"prefix": 5}]}"#)
            => ConfigError::FilterPolicy { .. }, ["`prefix` takes"];
        filter_policy_anything_but_with_a_pattern_it_does_not_take: policy(r#"{"kind": [{"anything-but": {"numeric": [">", 5]}}]}"#)
            => ConfigError::FilterPolicy { .. }, ["`anything-but` accepts"];
        filter_policy_malformed_numeric_expression: policy(r#"{"amount": [{"numeric": [">", "ten"]}]}"#)
            => ConfigError::FilterPolicy { .. }, ["key `amount`: bad numeric expression"];
        filter_policy_number_over_a_billion: policy(r#"{"amount": [{"numeric": [">", 2000000000]}]}"#)
            => ConfigError::FilterPolicy { .. }, ["key `amount` has number 2000000000", "-1000000000 to 1000000000"];
        filter_policy_malformed_cidr: policy(r#"{"source_ip": [{"cidr": "10.0.0.0/33"}]}"#)
            => ConfigError::FilterPolicy { .. }, ["`10.0.0.0/33` is not an IP network"];
        filter_policy_with_six_keys: policy(&policy_of(6, 1))
            => ConfigError::FilterPolicy { .. }, ["6 keys", "more than SNS's 5"];
        filter_policy_with_151_combinations: policy(&policy_of(2, 13))
            => ConfigError::FilterPolicy { .. }, ["169 combinations", "more than SNS's 150"];
    }
}

mod publishing {
    use super::*;

    /// Sends the message `build` makes on each broker and asserts it is refused with `kind`,
    /// saying `says` and naming the queue, before any SQS call.
    async fn refused_before_sending<T: Transport>(
        backend: &Backend<T>,
        queue: SqsQueue,
        build: fn(&Publisher) -> Outgoing,
        kind: ErrorKind,
        says: &[&str],
    ) {
        for (broker, on) in brokers(backend).await {
            let publisher = broker.publisher(queue.clone());
            let error = build(&publisher).send().await.unwrap_err();
            let PublishError::Rejected {
                queue: named,
                error: cause,
            } = &error
            else {
                panic!("on {on}: expected a rejection, got: {error}")
            };
            assert_eq!(named, queue.name(), "on {on}");
            assert_eq!(cause.kind(), Some(kind), "on {on}: {error}");
            let text = error.to_string();
            let shown: String = text.chars().take(400).collect();
            assert!(
                text.contains(&format!("`{}`", queue.name())),
                "on {on}: the queue is named in: {shown}"
            );
            for needle in says {
                assert!(
                    text.contains(needle),
                    "on {on}: `{needle}` missing in: {shown}"
                );
            }
            assert_eq!(
                broker.api_calls(),
                ApiCalls::default(),
                "on {on}: refused before any SQS call"
            );
        }
    }

    /// One row: `name: queue, |publisher| message => kind, [what the message says];`.
    macro_rules! rows {
        ($($name:ident: $queue:expr, $build:expr => $kind:ident, [$($says:expr),* $(,)?];)*) => {
            $(
                async fn $name<T: Transport>(backend: Backend<T>) {
                    refused_before_sending(
                        &backend,
                        SqsQueue::from($queue),
                        $build,
                        ErrorKind::$kind,
                        &[$($says),*],
                    )
                    .await;
                }
            )*
            both_backends!(
                $($name,)*
                a_fifo_message_without_a_group_id_is_sent_in_the_default_group,
                a_group_id_on_a_standard_queue_is_accepted,
            );
        };
    }

    const MIB: usize = 1_048_576;

    fn eleven_headers(publisher: &Publisher) -> Outgoing {
        (0..11).fold(publisher.raw("x"), |message, n| {
            message.header(format!("h{n}"), "v")
        })
    }

    rows! {
        empty_body: "events", |p| p.raw("")
            => MissingParameter, ["body is empty", "at least 1 character"];
        body_of_one_byte_over_1_mib: "events", |p| p.raw("x".repeat(MIB + 1))
            => InvalidParameterValue, ["1048577 bytes", "at most 1048576"];
        body_with_a_control_character: "events", |p| p.raw("a\u{1}b")
            => InvalidMessageContents, ["U+0001", "base64"];
        body_with_a_nul: "events", |p| p.raw("a\u{0}b")
            => InvalidMessageContents, ["U+0000", "base64"];
        body_with_a_non_xml_character: "events", |p| p.raw("a\u{FFFE}b")
            => InvalidMessageContents, ["U+FFFE", "base64"];
        body_and_attributes_together_over_1_mib: "events", |p| p.raw("x".repeat(MIB - 10)).header("trace", "y".repeat(100))
            => InvalidParameterValue, ["body and attributes", "at most 1048576"];
        eleven_attributes: "events", eleven_headers
            => InvalidParameterValue, ["11 attributes", "at most 10"];
        attribute_name_with_the_reserved_aws_prefix: "events", |p| p.raw("x").header("AWS.trace", "v")
            => InvalidParameterValue, ["`AWS.trace`", "reserves"];
        attribute_name_with_the_reserved_amazon_prefix_in_lower_case: "events", |p| p.raw("x").header("amazon.trace", "v")
            => InvalidParameterValue, ["`amazon.trace`", "reserves"];
        attribute_name_ending_with_a_dot: "events", |p| p.raw("x").header("trace.", "v")
            => InvalidParameterValue, ["`trace.`", "start or end with `.`"];
        attribute_name_starting_with_a_dot: "events", |p| p.raw("x").header(".trace", "v")
            => InvalidParameterValue, ["`.trace`", "start or end with `.`"];
        attribute_name_with_two_dots_in_a_row: "events", |p| p.raw("x").header("trace..id", "v")
            => InvalidParameterValue, ["`trace..id`", "`..`"];
        attribute_name_of_257_characters: "events", |p| p.raw("x").header("n".repeat(257), "v")
            => InvalidParameterValue, ["1 to 256 characters"];
        attribute_name_with_a_space: "events", |p| p.raw("x").header("trace id", "v")
            => InvalidParameterValue, ["`trace id`", "only letters, digits"];
        number_attribute_that_is_not_a_number: "events", |p| p.raw("x").header_number("amount", "12abc")
            => InvalidParameterValue, ["`amount`", "`12abc`", "not a number"];
        number_attribute_that_is_nan: "events", |p| p.raw("x").header_number("amount", f64::NAN)
            => InvalidParameterValue, ["`NaN`", "not a number"];
        number_attribute_of_39_digits: "events", |p| p.raw("x").header_number("amount", i128::MAX)
            => InvalidParameterValue, [&i128::MAX.to_string(), "up to 38 digits"];
        empty_string_attribute: "events", |p| p.raw("x").header("trace", "")
            => InvalidParameterValue, ["`trace`", "non-empty string"];
        empty_binary_attribute: "events", |p| p.raw("x").header_binary("signature", Vec::new())
            => InvalidParameterValue, ["`signature`", "non-empty binary"];
        string_attribute_with_a_control_character: "events", |p| p.raw("x").header("trace", "a\u{7}b")
            => InvalidParameterValue, ["`trace`", "U+0007"];
        per_message_delay_on_a_fifo_queue: "orders.fifo", |p| p.raw("x").group_id("g").delay(Duration::from_secs(5))
            => InvalidParameterValue, ["FIFO", "(5)", "the queue's DelaySeconds"];
        delay_of_15_minutes_and_1_second: "events", |p| p.raw("x").delay(Duration::from_secs(901))
            => InvalidParameterValue, ["DelaySeconds 901", "at most 15 minutes", "outbox", "`.deliver_at(..)`"];
        delay_of_duration_max: "events", |p| p.raw("x").delay(Duration::MAX)
            => InvalidParameterValue, ["DelaySeconds 2147483647", "at most 15 minutes"];
        group_id_of_129_characters: "orders.fifo", |p| p.raw("x").group_id("g".repeat(129))
            => InvalidParameterValue, ["MessageGroupId", "(129 characters)", "1 to 128"];
        empty_group_id: "orders.fifo", |p| p.raw("x").group_id("")
            => InvalidParameterValue, ["MessageGroupId", "(0 characters)", "1 to 128"];
        group_id_with_a_space: "orders.fifo", |p| p.raw("x").group_id("customer 7")
            => InvalidParameterValue, ["`customer 7`", "ASCII punctuation"];
        group_id_with_a_non_ascii_letter: "orders.fifo", |p| p.raw("x").group_id("zoë")
            => InvalidParameterValue, ["`zoë`", "ASCII punctuation"];
        bad_group_id_on_a_standard_queue: "events", |p| p.raw("x").group_id("customer 7")
            => InvalidParameterValue, ["MessageGroupId", "`customer 7`"];
        dedup_id_of_129_characters: "orders.fifo", |p| p.raw("x").group_id("g").dedup_id("d".repeat(129))
            => InvalidParameterValue, ["MessageDeduplicationId", "(129 characters)", "1 to 128"];
        dedup_id_with_a_tab: "orders.fifo", |p| p.raw("x").group_id("g").dedup_id("a\tb")
            => InvalidParameterValue, ["MessageDeduplicationId", "ASCII punctuation"];
        dedup_id_on_a_standard_queue: "events", |p| p.raw("x").dedup_id("d-1")
            => InvalidParameterValue, ["standard queue", "MessageDeduplicationId", "remove it"];
    }

    /// SQS needs a group on every FIFO message; the publisher gives one rather than fail: the
    /// `partition_key` header, else `default`.
    async fn a_fifo_message_without_a_group_id_is_sent_in_the_default_group<T: Transport>(
        backend: Backend<T>,
    ) {
        let url = backend.queue("groupless.fifo", &[]).await;
        let publisher = backend.broker.publisher(backend.name("groupless.fifo"));
        publisher.raw("no group").send().await.unwrap();
        publisher
            .raw("keyed")
            .header(rust_stream::PARTITION_KEY_HEADER, "customer-7")
            .send()
            .await
            .unwrap();
        let got = backend.drain(&url, 2).await;
        let groups: Vec<(&str, Option<&str>)> = got
            .iter()
            .map(|m| (m.body.as_str(), m.group_id()))
            .collect();
        assert_eq!(
            groups,
            [("no group", Some("default")), ("keyed", Some("customer-7"))]
        );
    }

    /// SQS takes a group id on a standard queue (fair queues); it is checked (a bad one is a row
    /// above) and sent.
    async fn a_group_id_on_a_standard_queue_is_accepted<T: Transport>(backend: Backend<T>) {
        let url = backend.queue("grouped", &[]).await;
        let publisher = backend.broker.publisher(backend.name("grouped"));
        publisher
            .raw("grouped")
            .group_id("tenant-1")
            .send()
            .await
            .unwrap();
        let got = backend.drain(&url, 1).await;
        assert_eq!(common::bodies(&got), ["grouped"]);
    }
}

mod sns_publishing {
    use super::*;
    use rust_stream::model::subscription::TopicAttributes;

    /// Asserts `error` is a rejection of a publish to `topic` with `kind`, naming the topic and
    /// saying `says`.
    fn assert_rejected(
        error: &PublishError,
        topic: &str,
        kind: ErrorKind,
        says: &[&str],
        on: &str,
    ) {
        let PublishError::Rejected {
            queue: named,
            error: cause,
        } = error
        else {
            panic!("on {on}: expected a rejection, got: {error}")
        };
        assert_eq!(named, topic, "on {on}");
        assert_eq!(cause.kind(), Some(kind), "on {on}: {error}");
        let text = error.to_string();
        let shown: String = text.chars().take(400).collect();
        assert!(
            text.contains(&format!("`{topic}`")),
            "on {on}: the topic is named in: {shown}"
        );
        for needle in says {
            assert!(
                text.contains(needle),
                "on {on}: `{needle}` missing in: {shown}"
            );
        }
    }

    /// Publishes the message `build` makes through a publisher for `topic` on each broker, alone
    /// and in a batch, and asserts both are refused with `kind`, saying `says` and naming the
    /// topic, before any call (no `PublishBatch`, nor a look-up of the topic).
    async fn refused_before_publishing<T: Transport>(
        backend: &Backend<T>,
        topic: SnsTopic,
        build: fn(&Publisher) -> Outgoing,
        kind: ErrorKind,
        says: &[&str],
    ) {
        for (broker, on) in brokers(backend).await {
            let publisher = broker.topic(topic.clone());
            let error = build(&publisher).send().await.unwrap_err();
            assert_rejected(&error, topic.name(), kind, says, on);
            let batch = publisher.send_batch([build(&publisher)]).await;
            let [Err(error)] = batch.as_slice() else {
                panic!("on {on}: expected one refusal, got: {batch:?}")
            };
            assert_rejected(error, topic.name(), kind, says, on);
            assert_eq!(
                broker.api_calls(),
                ApiCalls::default(),
                "on {on}: refused before any SNS or SQS call"
            );
        }
    }

    /// One row: `name: topic, |publisher| message => kind, [what the message says];`.
    macro_rules! rows {
        ($($name:ident: $topic:expr, $build:expr => $kind:ident, [$($says:expr),* $(,)?];)*) => {
            $(
                async fn $name<T: Transport>(backend: Backend<T>) {
                    refused_before_publishing(
                        &backend,
                        SnsTopic::new($topic),
                        $build,
                        ErrorKind::$kind,
                        &[$($says),*],
                    )
                    .await;
                }
            )*
            both_backends!(
                $($name,)*
                message_over_the_topics_maximum_message_size,
                fifo_publish_without_a_group_id_with_strict_groups,
                fifo_publish_without_a_group_id_is_published_in_the_default_group,
                topic_that_does_not_exist,
                publisher_declaring_content_based_dedup_for_a_fifo_topic_without_it,
            );
        };
    }

    const MIB: usize = 1_048_576;

    rows! {
        empty_message: "payments", |p| p.raw("")
            => InvalidParameter, ["Empty message", "at least 1 byte"];
        message_over_1_mib: "payments", |p| p.raw("x".repeat(MIB + 1))
            => InvalidParameter, ["Message too long", "1048577 bytes", "at most 1048576"];
        attribute_name_with_the_reserved_aws_prefix: "payments", |p| p.raw("x").header("AWS.trace", "v")
            => InvalidParameterValue, ["`AWS.trace`", "reserves"];
        attribute_name_with_a_space: "payments", |p| p.raw("x").header("trace id", "v")
            => InvalidParameterValue, ["`trace id`", "only letters, digits"];
        number_attribute_that_is_not_a_number: "payments", |p| p.raw("x").header_number("amount", "12abc")
            => InvalidParameterValue, ["'amount'", "`12abc`", "not a decimal number"];
        empty_string_attribute: "payments", |p| p.raw("x").header("trace", "")
            => InvalidParameterValue, ["'trace'", "non-empty string"];
        string_attribute_outside_the_basic_multilingual_plane: "payments", |p| p.raw("x").header("card", "\u{1F4B3}")
            => InvalidParameterValue, ["'card'", "U+1F4B3", "Basic Multilingual Plane"];
        dedup_id_on_a_standard_topic: "payments", |p| p.raw("x").dedup_id("d-1")
            => InvalidParameter, ["standard topic", "MessageDeduplicationId", "remove it or use a FIFO topic"];
        delay_on_a_topic: "payments", |p| p.raw("x").delay(Duration::from_secs(5))
            => InvalidParameter, ["takes no delay", "remove the `delay(..)` step"];
        delay_on_a_fifo_topic: "payments.fifo", |p| p.raw("x").group_id("g").delay(Duration::from_secs(5))
            => InvalidParameter, ["takes no delay", "remove the `delay(..)` step"];
        group_id_of_129_characters: "payments.fifo", |p| p.raw("x").group_id("g".repeat(129))
            => InvalidParameter, ["MessageGroupId", "(129 characters)", "1 to 128"];
        empty_group_id: "payments.fifo", |p| p.raw("x").group_id("")
            => InvalidParameter, ["MessageGroupId", "(0 characters)", "1 to 128"];
        group_id_with_a_space: "payments.fifo", |p| p.raw("x").group_id("customer 7")
            => InvalidParameter, ["`customer 7`", "ASCII punctuation"];
        group_id_with_a_non_ascii_letter: "payments.fifo", |p| p.raw("x").group_id("zoë")
            => InvalidParameter, ["`zoë`", "ASCII punctuation"];
        bad_group_id_on_a_standard_topic: "payments", |p| p.raw("x").group_id("customer 7")
            => InvalidParameter, ["MessageGroupId", "`customer 7`"];
        dedup_id_of_129_characters: "payments.fifo", |p| p.raw("x").group_id("g").dedup_id("d".repeat(129))
            => InvalidParameter, ["MessageDeduplicationId", "(129 characters)", "1 to 128"];
        dedup_id_with_a_tab: "payments.fifo", |p| p.raw("x").group_id("g").dedup_id("a\tb")
            => InvalidParameter, ["MessageDeduplicationId", "ASCII punctuation"];
    }

    /// Over the topic's own `MaximumMessageSize` (256 KiB unless set) but within the 1 MiB any
    /// topic takes: only the topic knows its limit, so the publish is refused once the topic is
    /// looked up, before any `PublishBatch`. (At a closed port the look-up fails to connect: this
    /// row needs the network.)
    async fn message_over_the_topics_maximum_message_size<T: Transport>(backend: Backend<T>) {
        let name = backend.name("payments");
        let publisher = backend
            .broker
            .topic(SnsTopic::new(name.as_str()).create_if_missing());
        let error = publisher
            .raw("x".repeat(256 * 1024 + 1))
            .send()
            .await
            .unwrap_err();
        assert_rejected(
            &error,
            &name,
            ErrorKind::InvalidParameter,
            &[
                "Message too long",
                "262145 bytes",
                "at most 262144 (MaximumMessageSize)",
            ],
            "the backend",
        );
        assert_eq!(backend.broker.api_calls().publish_batch, 0);
        publisher.raw("x".repeat(256 * 1024)).send().await.unwrap();
        assert_eq!(
            backend.broker.api_calls().publish_batch,
            1,
            "its limit is taken"
        );
    }

    /// A publish to a FIFO topic needs a group (SNS answers `InvalidParameter` without one): with
    /// `strict_groups()` the publisher refuses it, before any call.
    async fn fifo_publish_without_a_group_id_with_strict_groups<T: Transport>(backend: Backend<T>) {
        for (broker, on) in brokers(&backend).await {
            let publisher = broker.topic("payments.fifo").strict_groups();
            let error = publisher.raw("x").send().await.unwrap_err();
            assert!(
                matches!(&error, PublishError::NoGroup { queue } if queue == "payments.fifo"),
                "on {on}: {error:?}"
            );
            assert!(
                error.to_string().contains("give it `.group_id(..)`"),
                "on {on}: {error}"
            );
            assert_eq!(broker.api_calls(), ApiCalls::default(), "on {on}");
        }
    }

    /// Without strict groups, the publisher gives a FIFO publish a group rather than fail, as it
    /// does a FIFO queue's message (row 69): the `partition_key` header, else `default`; and a
    /// deduplication id when the topic does not deduplicate by content (row 127).
    async fn fifo_publish_without_a_group_id_is_published_in_the_default_group<T: Transport>(
        backend: Backend<T>,
    ) {
        let name = backend.name("payments.fifo");
        let publisher = backend
            .broker
            .topic(SnsTopic::new(name.as_str()).create_if_missing());
        let sent = publisher.raw("no group").send().await.unwrap();
        assert!(sent.sequence_number.is_some(), "{sent:?}");
        assert_eq!(backend.broker.api_calls().publish_batch, 1);
    }

    /// Row 127 as a topic publisher meets it: declared with content-based deduplication, for a
    /// FIFO topic that has none, a publish without a deduplication id is refused once the topic
    /// is looked up (its own attribute decides), before any `PublishBatch`.
    async fn publisher_declaring_content_based_dedup_for_a_fifo_topic_without_it<T: Transport>(
        backend: Backend<T>,
    ) {
        let name = backend.name("plain.fifo");
        let attributes = TopicAttributes::from([("FifoTopic".to_owned(), "true".to_owned())]);
        backend
            .transport
            .create_topic(&name, attributes)
            .await
            .unwrap();
        let queue = backend.name("ledger");
        backend.queue("ledger", &[]).await;
        backend
            .broker
            .publisher(queue.as_str())
            .raw("start")
            .send()
            .await
            .unwrap();
        let publisher = backend
            .broker
            .topic(SnsTopic::new(name.as_str()).content_based_deduplication(true));
        let error = publisher.raw("x").group_id("g").send().await.unwrap_err();
        assert_rejected(
            &error,
            &name,
            ErrorKind::InvalidParameter,
            &[
                "FIFO without ContentBasedDeduplication",
                "give each publish a MessageDeduplicationId",
            ],
            "the backend",
        );
        assert_eq!(backend.broker.api_calls().publish_batch, 0);
        let with_id = publisher
            .raw("x")
            .group_id("g")
            .dedup_id("d-1")
            .send()
            .await;
        assert!(with_id.is_ok(), "{with_id:?}");
    }

    /// A topic publisher for a topic that does not exist and is not declared
    /// `create_if_missing`: its publishes are refused with `NotFound`, saying how to fix it; no
    /// `PublishBatch` is made.
    async fn topic_that_does_not_exist<T: Transport>(backend: Backend<T>) {
        let name = backend.name("refunds");
        // The broker knows its account and region once it has resolved a queue.
        let queue = backend.name("ledger");
        backend.queue("ledger", &[]).await;
        backend
            .broker
            .publisher(queue.as_str())
            .raw("start")
            .send()
            .await
            .unwrap();
        let publisher = backend.broker.topic(name.as_str());
        let error = publisher.raw("x").send().await.unwrap_err();
        assert_rejected(
            &error,
            &name,
            ErrorKind::NotFound,
            &["does not exist", ".create_if_missing()"],
            "the backend",
        );
        assert_eq!(backend.broker.api_calls().publish_batch, 0);
    }
}

mod sns_at_start {
    use super::*;
    use rust_stream::model::subscription::TopicAttributes;

    /// Starts an app with a subscription of `queue` on the backend's broker: the start's error.
    async fn start_error<T: Transport>(backend: &Backend<T>, queue: SqsQueue) -> RunError {
        let (handler, log) = Scripted::new(|_, _| Ok(()));
        let app = RustStream::new(AppInfo::new("bad-input", "0")).with_broker(
            backend.broker.clone(),
            |b| {
                b.include(subscriber(queue, handler).build());
            },
        );
        let error = match TestApp::spawn(app).await {
            Ok(running) => {
                running.stop().await.unwrap();
                panic!("the app started")
            }
            Err(error) => error,
        };
        assert!(log.lock().unwrap().is_empty(), "nothing was handled");
        error
    }

    /// Row 138: a queue subscribed to a topic that does not exist, not declared
    /// `create_if_missing`.
    async fn topic_that_does_not_exist<T: Transport>(backend: Backend<T>) {
        let topic = backend.name("refunds");
        let queue = SqsQueue::new(backend.name("ledger"))
            .create_if_missing()
            .subscribed_to(SnsTopic::new(topic.as_str()));
        let error = start_error(&backend, queue).await;
        assert!(
            matches!(error.broker_error(), Some(StartError::TopicMissing { topic: named }) if *named == topic),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(&format!("SnsTopic::new(\"{topic}\").create_if_missing()")),
            "{text}"
        );
        assert_eq!(backend.broker.api_calls().subscribe, 0);
    }

    /// Row 139: a queue declared `subscribed_to` an existing topic but not subscribed to it, and
    /// not declared `create_if_missing`: the app may not subscribe it.
    async fn subscription_missing_on_a_queue_the_app_may_not_change<T: Transport>(
        backend: Backend<T>,
    ) {
        backend.queue("ledger", &[]).await;
        let queue_name = backend.name("ledger");
        let topic = backend.name("payments");
        let topic_arn = backend
            .transport
            .create_topic(&topic, TopicAttributes::new())
            .await
            .unwrap();
        let queue = SqsQueue::new(queue_name.as_str()).subscribed_to(SnsTopic::new(topic.as_str()));
        let error = start_error(&backend, queue).await;
        assert!(
            matches!(error.broker_error(), Some(StartError::SubscriptionMissing { queue, topic: named }) if *queue == queue_name && *named == topic),
            "{error:?}"
        );
        let text = error.to_string();
        for needle in ["subscribe it", "queue Policy", ".create_if_missing()"] {
            assert!(text.contains(needle), "`{needle}` missing in: {text}");
        }
        let subscriptions = backend
            .transport
            .list_subscriptions_by_topic(&topic_arn)
            .await
            .unwrap();
        assert!(
            subscriptions.is_empty(),
            "nothing subscribed: {subscriptions:?}"
        );
        assert_eq!(backend.broker.api_calls().subscribe, 0);
    }

    /// Row 141: a queue whose `Policy` is not a JSON object, when the app must add the statement
    /// letting its topic send to it. Both backends take such a `Policy` at `CreateQueue`; AWS
    /// documents the attribute as a policy document and may refuse one that is not (not checked
    /// here), so there the row is a guard for a policy the app cannot parse.
    async fn queue_policy_that_is_not_json<T: Transport>(backend: Backend<T>) {
        backend.queue("ledger", &[("Policy", "not json")]).await;
        let queue_name = backend.name("ledger");
        let queue = SqsQueue::new(queue_name.as_str())
            .create_if_missing()
            .subscribed_to(SnsTopic::new(backend.name("payments")).create_if_missing());
        let error = start_error(&backend, queue).await;
        let Some(StartError::Queue {
            queue,
            error: cause,
        }) = error.broker_error()
        else {
            panic!("{error:?}")
        };
        assert_eq!(*queue, queue_name);
        assert_eq!(
            cause.kind(),
            Some(ErrorKind::InvalidAttributeValue),
            "{error}"
        );
        assert!(
            error.to_string().contains("Policy is not a JSON object")
                && error.to_string().contains("fix the policy"),
            "{error}"
        );
        assert_eq!(backend.broker.api_calls().subscribe, 0);
    }

    both_backends!(
        topic_that_does_not_exist,
        subscription_missing_on_a_queue_the_app_may_not_change,
        queue_policy_that_is_not_json,
    );
}

mod sns_received {
    use super::*;
    use rust_stream::model::subscription::TopicAttributes;

    /// A queue with a dead-letter queue, subscribed (enveloped) to a topic, with its app running.
    struct Enveloped {
        running: TestApp,
        log: common::engine::Log,
        topic: Publisher,
        topic_arn: String,
        queue: Publisher,
        dead_letters: String,
    }

    /// Makes the topic, starts an app whose queue the app subscribes to it, enveloped.
    async fn enveloped<T: Transport>(backend: &Backend<T>) -> Enveloped {
        let topic = backend.name("payments");
        let topic_arn = backend
            .transport
            .create_topic(&topic, TopicAttributes::new())
            .await
            .unwrap();
        let queue = SqsQueue::new(backend.name("enveloped"))
            .create_if_missing()
            .visibility_timeout(backend.short())
            .wait(Duration::from_secs(1))
            .retry(RetryPolicy::exponential(
                Duration::from_secs(1),
                Duration::from_secs(4),
            ))
            .dead_letter(backend.name("enveloped-dlq"), 3)
            .subscribed_to(SnsTopic::new(topic.as_str()));
        let (handler, log) = Scripted::new(|_, _| Ok(()));
        let running = TestApp::spawn(
            RustStream::new(AppInfo::new("bad-input", "0"))
                .shutdown_timeout(Duration::from_secs(5))
                .with_broker(backend.broker.clone(), |b| {
                    b.include(subscriber(queue.clone(), handler).build());
                }),
        )
        .await
        .expect("the app starts");
        let dead_letters = backend
            .transport
            .get_queue_url(&backend.name("enveloped-dlq"))
            .await
            .unwrap();
        Enveloped {
            running,
            log,
            topic: backend.broker.topic(topic.as_str()),
            topic_arn,
            queue: backend.broker.publisher(queue),
            dead_letters,
        }
    }

    impl Enveloped {
        /// Publishes a valid job through the topic, waits until it is handled and the bad
        /// delivery dead-lettered; stops the app. Asserts the handler saw only the job and the
        /// letter's reason says `reason`. Returns the letter.
        async fn dead_letter<T: Transport>(
            self,
            backend: &Backend<T>,
            reason: &str,
        ) -> ReceivedMessage {
            self.topic.message(&Job::new("g", 1)).send().await.unwrap();
            eventually("the valid job handled", async || {
                !jobs(&self.log).is_empty()
            })
            .await;
            let dead = backend.drain(&self.dead_letters, 1).await;
            self.running.drain().await;
            self.running.stop().await.unwrap();
            assert_eq!(
                jobs(&self.log),
                [Job::new("g", 1)],
                "the handler saw only the job"
            );
            assert_eq!(dead.len(), 1, "the bad delivery is dead-lettered, once");
            let letter = dead.into_iter().next().unwrap();
            let said = letter
                .message_attributes
                .get(DEAD_LETTER_REASON_HEADER)
                .and_then(|why| why.string_value.clone())
                .unwrap_or_default();
            assert!(said.contains(reason), "the reason says `{reason}`: {said}");
            assert!(said.contains("Job`"), "the reason names the type: {said}");
            letter
        }
    }

    /// The head of a notification envelope from `topic_arn`, without `Message`.
    fn envelope_head(topic_arn: &str) -> String {
        format!(
            r#""Type":"Notification","MessageId":"0f9e7a44-0000-4000-8000-00000000000b","TopicArn":"{topic_arn}","Timestamp":"2026-12-02T04:00:00.000Z""#
        )
    }

    /// Row 133: an envelope (sent to the queue as SNS would) without its `Message`.
    async fn envelope_without_its_message<T: Transport>(backend: Backend<T>) {
        let subscribed = enveloped(&backend).await;
        let broken = format!("{{{}}}", envelope_head(&subscribed.topic_arn));
        subscribed.queue.raw(broken.as_str()).send().await.unwrap();
        let letter = subscribed
            .dead_letter(
                &backend,
                "the SNS notification envelope's `Message` is invalid: it is missing",
            )
            .await;
        assert_eq!(letter.body, broken, "the letter is the envelope as it came");
    }

    /// Row 134: an envelope whose `Binary` attribute's value is not base64.
    async fn envelope_with_an_attribute_that_is_not_base64<T: Transport>(backend: Backend<T>) {
        let subscribed = enveloped(&backend).await;
        let broken = format!(
            r#"{{{},"Message":"{{\"group\":\"g\",\"n\":2}}","MessageAttributes":{{"digest":{{"Type":"Binary","Value":"not base64!"}}}}}}"#,
            envelope_head(&subscribed.topic_arn)
        );
        subscribed.queue.raw(broken.as_str()).send().await.unwrap();
        let letter = subscribed
            .dead_letter(&backend, "`MessageAttributes.digest.Value` is invalid")
            .await;
        assert_eq!(letter.body, broken, "the letter is the envelope as it came");
    }

    /// Row 135: a message published through the topic that is not the handler's type: the
    /// letter is the envelope SNS delivered.
    async fn published_message_that_is_not_the_handlers_type<T: Transport>(backend: Backend<T>) {
        let subscribed = enveloped(&backend).await;
        subscribed
            .topic
            .raw(r#"{"group":7,"n":1}"#)
            .header("kind", "card")
            .send()
            .await
            .unwrap();
        let letter = subscribed.dead_letter(&backend, "invalid type").await;
        let envelope: serde_json::Value = serde_json::from_str(&letter.body).unwrap();
        assert_eq!(envelope["Type"], "Notification", "{}", letter.body);
        assert_eq!(
            envelope["Message"], r#"{"group":7,"n":1}"#,
            "{}",
            letter.body
        );
        assert_eq!(
            envelope["MessageAttributes"]["kind"]["Value"], "card",
            "{}",
            letter.body
        );
    }

    both_backends!(
        envelope_without_its_message,
        envelope_with_an_attribute_that_is_not_base64,
        published_message_that_is_not_the_handlers_type,
    );
}

mod received {
    use super::*;

    /// The queue of a received-garbage row, with a dead-letter queue or without.
    fn queue<T: Transport>(backend: &Backend<T>, dead_letter: bool) -> SqsQueue {
        let queue = SqsQueue::new(backend.name("garbage"))
            .create_if_missing()
            .visibility_timeout(backend.short())
            // Short long polls: shutdown waits for the one in flight.
            .wait(Duration::from_secs(1))
            .retry(RetryPolicy::exponential(
                Duration::from_secs(1),
                Duration::from_secs(4),
            ));
        if dead_letter {
            queue.dead_letter(backend.name("garbage-dlq"), 3)
        } else {
            queue
        }
    }

    async fn start<T: Transport>(backend: &Backend<T>, sub: Subscriber) -> TestApp {
        TestApp::spawn(
            RustStream::new(AppInfo::new("bad-input", "0"))
                .shutdown_timeout(Duration::from_secs(5))
                .with_broker(backend.broker.clone(), |b| {
                    b.include(sub);
                }),
        )
        .await
        .expect("the app starts")
    }

    /// Sends `garbage` (with `attributes`) and then a valid job to a queue with a dead-letter
    /// queue; runs the consumer until the job is handled and the garbage dead-lettered. Asserts
    /// the handler saw only the job, the dead-letter queue holds the garbage unchanged with a
    /// reason naming `reason`, and the source queue is left empty. Returns the dead letter.
    async fn dead_lettered<T: Transport>(
        backend: &Backend<T>,
        garbage: String,
        attributes: &[(&str, MessageAttributeValue)],
        reason: &str,
    ) -> ReceivedMessage {
        let queue = queue(backend, true);
        let (handler, log) = Scripted::new(|_, _| Ok(()));
        let running = start(backend, subscriber(queue.clone(), handler).build()).await;
        let publisher = backend.broker.publisher(queue.clone());
        let mut message = publisher.raw(garbage.clone());
        for (name, value) in attributes {
            message = match value.data_type.as_str() {
                "Binary" => message.header_binary(*name, value.binary_value.clone().unwrap()),
                "Number" => message.header_number(*name, value.string_value.clone().unwrap()),
                _ => message.header(*name, value.string_value.clone().unwrap()),
            };
        }
        message.send().await.unwrap();
        publisher.message(&Job::new("g", 1)).send().await.unwrap();
        eventually("the valid job handled", async || !jobs(&log).is_empty()).await;
        let dlq_url = backend
            .transport
            .get_queue_url(&backend.name("garbage-dlq"))
            .await
            .unwrap();
        let dead = backend.drain(&dlq_url, 1).await;
        // Nothing visible, in flight or delayed is left on the source queue.
        running.drain().await;
        running.stop().await.unwrap();

        assert_eq!(
            jobs(&log),
            [Job::new("g", 1)],
            "the handler saw only the job"
        );
        assert_eq!(dead.len(), 1, "the garbage is dead-lettered, once");
        let letter = dead.into_iter().next().unwrap();
        assert!(
            letter.body == garbage,
            "the dead letter's body is the garbage, unchanged"
        );
        for (name, value) in attributes {
            assert_eq!(
                letter.message_attributes.get(*name),
                Some(value),
                "the sender's attribute `{name}` is kept as sent"
            );
        }
        if let Some(why) = letter.message_attributes.get(DEAD_LETTER_REASON_HEADER) {
            let why = why.string_value.as_deref().unwrap_or_default();
            assert!(why.contains(reason), "the reason names `{reason}`: {why}");
        }
        letter
    }

    fn reason_of(letter: &ReceivedMessage) -> Option<&str> {
        letter
            .message_attributes
            .get(DEAD_LETTER_REASON_HEADER)?
            .string_value
            .as_deref()
    }

    async fn body_that_is_not_json<T: Transport>(backend: Backend<T>) {
        let letter = dead_lettered(&backend, "not json".into(), &[], "expected").await;
        assert!(
            reason_of(&letter).is_some(),
            "a small letter has its reason"
        );
    }

    async fn json_of_the_wrong_shape<T: Transport>(backend: Backend<T>) {
        let letter = dead_lettered(&backend, r#"{"id":1}"#.into(), &[], "missing field").await;
        assert!(reason_of(&letter).is_some());
    }

    async fn json_null<T: Transport>(backend: Backend<T>) {
        let letter = dead_lettered(&backend, "null".into(), &[], "invalid type: null").await;
        assert!(reason_of(&letter).is_some());
    }

    /// A body of SQS's largest size: the dead letter keeps it whole, even though rust-stream's
    /// own headers no longer fit beside it.
    async fn body_of_the_largest_size_sqs_takes<T: Transport>(backend: Backend<T>) {
        let huge = format!("[{}]", "7,".repeat(1_048_576 / 2 - 2) + "7");
        assert_eq!(huge.len(), 1_048_575);
        let letter = dead_lettered(&backend, huge, &[], "").await;
        assert_eq!(letter.body.len(), 1_048_575);
    }

    /// Attributes of types a header is not: a binary `partition_key`, a `rust_stream.attempts`
    /// that is text. The letter keeps them as sent; the engine's own are not forced over them.
    async fn garbage_with_attributes_of_unexpected_types<T: Transport>(backend: Backend<T>) {
        let attributes = [
            (
                rust_stream::PARTITION_KEY_HEADER,
                MessageAttributeValue::binary([0xff, 0x00]),
            ),
            (
                rust_stream::ATTEMPTS_HEADER,
                MessageAttributeValue::string("many"),
            ),
            ("amount", MessageAttributeValue::number("-1e3")),
        ];
        dead_lettered(&backend, "<order/>".into(), &attributes, "expected").await;
    }

    /// A valid body with attributes of unexpected types is handled: a binary attribute is not a
    /// header, the handler finds it among the attributes.
    async fn valid_job_with_attributes_of_unexpected_types<T: Transport>(backend: Backend<T>) {
        let queue = queue(&backend, true);
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (handler, log) = Scripted::new({
            let seen = seen.clone();
            move |_, ctx| {
                seen.lock().unwrap().push((
                    ctx.header("signature").map(str::to_owned),
                    ctx.header(rust_stream::ATTEMPTS_HEADER).map(str::to_owned),
                    ctx.attributes()
                        .get("signature")
                        .and_then(|value| value.binary_value.clone()),
                ));
                Ok(())
            }
        });
        let running = start(&backend, subscriber(queue.clone(), handler).build()).await;
        backend
            .broker
            .publisher(queue.clone())
            .message(&Job::new("g", 1))
            .header_binary("signature", [1, 2, 3])
            .header(rust_stream::ATTEMPTS_HEADER, "many")
            .send()
            .await
            .unwrap();
        eventually("the job handled", async || !jobs(&log).is_empty()).await;
        running.drain().await;
        running.stop().await.unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            [(None, Some("many".to_owned()), Some(vec![1, 2, 3]))]
        );
        assert_eq!(jobs(&log).len(), 1, "handled once");
    }

    /// Without a dead-letter queue, garbage is retried by the backoff (1 s, 2 s, 4 s ...) and
    /// stays on the queue: never deleted, never handled, and the consumer keeps handling the rest.
    async fn garbage_without_a_dead_letter_queue_is_retried_and_kept<T: Transport>(
        backend: Backend<T>,
    ) {
        let queue = queue(&backend, false);
        let (handler, log) = Scripted::new(|_, _| Ok(()));
        let running = start(&backend, subscriber(queue.clone(), handler).build()).await;
        let publisher = backend.broker.publisher(queue.clone());
        publisher.raw("not json").send().await.unwrap();
        publisher.message(&Job::new("g", 1)).send().await.unwrap();
        eventually("the valid job handled", async || !jobs(&log).is_empty()).await;
        // Received at about 0, 1 and 3 s: three attempts within 4.5 s.
        tokio::time::sleep(Duration::from_millis(4500)).await;
        running.stop().await.unwrap();
        assert_eq!(
            jobs(&log),
            [Job::new("g", 1)],
            "the handler saw only the job"
        );
        let url = backend.transport.get_queue_url(queue.name()).await.unwrap();
        // Released at shutdown, or visible again within its backoff.
        let left = backend.drain(&url, 1).await;
        assert_eq!(common::bodies(&left), ["not json"], "the garbage is kept");
        let receives = left[0].receive_count().unwrap();
        assert!(
            (3..=6).contains(&receives),
            "retried by the backoff, not in a loop: received {receives} times"
        );
    }

    both_backends!(
        body_that_is_not_json,
        json_of_the_wrong_shape,
        json_null,
        body_of_the_largest_size_sqs_takes,
        garbage_with_attributes_of_unexpected_types,
        valid_job_with_attributes_of_unexpected_types,
        garbage_without_a_dead_letter_queue_is_retried_and_kept,
    );
}

/// `retry_after` with no delay would spin a FIFO group (and bring a standard message straight
/// back): it waits the shortest retry instead.
#[test]
fn retry_after_zero_waits_the_shortest_retry() {
    assert_eq!(
        HandlerOutcome::retry_after(Duration::ZERO),
        HandlerOutcome::retry_after(rust_stream::outcome::SHORTEST_RETRY_AFTER)
    );
    assert_eq!(
        HandlerOutcome::retry_after(Duration::from_secs(3)),
        HandlerOutcome::RetryAfter(Duration::from_secs(3))
    );
    assert_eq!(
        HandlerOutcome::retry_after(Duration::ZERO),
        HandlerOutcome::RetryAfter(Duration::from_millis(100))
    );
}

/// A publisher that declares `.content_based_dedup()` for a FIFO queue that does not deduplicate
/// by content would have SQS refuse every message it sends without an id: each is refused before
/// the send, naming the fix, and nothing is sent.
#[tokio::test(start_paused = true)]
async fn a_publisher_declaring_content_based_dedup_for_a_queue_without_it_sends_nothing() {
    let account = rust_stream::account::Account::new();
    account.create_fifo_queue("plain.fifo").await.unwrap();
    let broker = SqsBroker::with_account(&account);
    let refused = broker
        .publisher(SqsQueue::new("plain.fifo").content_based_dedup())
        .raw("ledger line")
        .group_id("g")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        refused.kind(),
        Some(ErrorKind::InvalidParameterValue),
        "{refused}"
    );
    let text = refused.to_string();
    for needle in [
        "plain.fifo",
        "without ContentBasedDeduplication",
        "MessageDeduplicationId",
    ] {
        assert!(text.contains(needle), "`{needle}` missing in: {text}");
    }
    assert_eq!(broker.api_calls().send_message_batch, 0, "nothing was sent");
    let url = account.get_queue_url("plain.fifo").await.unwrap();
    assert_eq!(account.counts(&url).await.unwrap().visible, 0);
}
