//! The same service on the server path and on the Lambda path (issue 38), on both backends: the
//! in-process account on a paused clock, then LocalStack. The Lambda path runs the app's
//! [`LambdaHost`] under the simulated event source mapping (`rust_stream::testing::lambda`),
//! which reads the queue in batches, invokes the host with each SQS event and deletes what its
//! answer does not name in `batchItemFailures`, as AWS's mapping does.
//!
//! - the named FIFO case: 10 messages over 3 groups, the 4th message of group B fails: A and C
//!   are deleted, B is released from its 4th message, and runs again from it;
//! - a standard queue: a failed message is released alone, the rest deleted, outputs sent only
//!   for the acked attempts; the same with a batch handler, in calls of up to its `max`;
//! - a panic fails its message (and on FIFO its group's later ones) and loses nothing;
//! - a body that does not decode and a `dead_letter` outcome are copied to the dead-letter queue
//!   and reported a success;
//! - `retry_after` hides the message for its delay (a visibility change) and reports a failure;
//! - the inbox: copies of one message are handled once; an outbox write in the inbox's
//!   transaction commits with the attempt and rolls back with a failed one;
//! - the mapping's deletes and visibility changes are what AWS's mapping would make: one delete
//!   a message, none of its own visibility changes; the function's own visibility changes are one
//!   call a failed group;
//! - an SNS-to-Lambda event, in process;
//! - on LocalStack, the compiled `examples/lambda_payments.rs` started as Lambda starts it,
//!   against the simulated Runtime API, with its cold start and per-event round trip printed
//!   beside the server path's.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::handler::batch::{BatchContext, BatchOutcome, HandleBatch};
use rust_stream::lambda::LambdaHost;
use rust_stream::prelude::*;
use rust_stream::testing::lambda::{EventSourceMapping, MappingCounts, MappingSettings};
use rust_stream::testing::{on_each_backend, Backend, BackendKind, Settled, TestApp};
use rust_stream::transport::ReceivedMessage;
use rust_stream::{Output, RetryPolicy, Subscriber, DEAD_LETTER_REASON_HEADER};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Posting {
    group: String,
    n: u32,
}

fn posting(group: &str, n: u32) -> Posting {
    Posting {
        group: group.to_owned(),
        n,
    }
}

/// Where the service runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `App::run`'s pollers (`TestApp`).
    Server,
    /// The Lambda host under the simulated event source mapping.
    Lambda,
}

const PATHS: [Path; 2] = [Path::Server, Path::Lambda];

/// What the handler saw of one attempt: group, n, attempt, when.
type Seen = (String, u32, u32, Instant);

/// How the script settles an attempt.
#[derive(Debug, Clone)]
enum Step {
    Settle(HandlerOutcome),
    Panic,
}

/// A handler that records each attempt, settles it as `script` says, and publishes the posting
/// to its output when it acks.
struct Teller<F> {
    seen: Arc<Mutex<Vec<Seen>>>,
    script: F,
}

impl<F> Handle<Posting, Output<Posting>> for Teller<F>
where
    F: Fn(&Posting, u32) -> Step + Send + Sync + 'static,
{
    async fn handle(
        &self,
        posting: &Posting,
        booked: &Output<Posting>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let attempt = ctx.attempt();
        self.seen
            .lock()
            .unwrap()
            .push((posting.group.clone(), posting.n, attempt, Instant::now()));
        match (self.script)(posting, attempt) {
            Step::Panic => panic!("scripted panic at {}{}", posting.group, posting.n),
            Step::Settle(HandlerOutcome::Ack) => {
                let message = booked.message(posting);
                let message = match ctx.sqs().group_id() {
                    Some(group) => message.group_id(group),
                    None => message,
                };
                ctx.publish(message);
                Ok(())
            }
            Step::Settle(outcome) => Err(outcome),
        }
    }
}

/// Every call a batch handler got: group, n and attempt of each message.
type Calls = Arc<Mutex<Vec<Vec<(String, u32, u32)>>>>;

/// A batch handler that records each call and settles each message as `script` says.
struct Ledger<F> {
    calls: Calls,
    script: F,
}

impl<F> HandleBatch<Posting> for Ledger<F>
where
    F: Fn(&Posting, u32) -> HandlerOutcome + Send + Sync + 'static,
{
    async fn handle(
        &self,
        postings: &[Posting],
        _outs: &(),
        ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        let seen: Vec<_> = postings
            .iter()
            .enumerate()
            .map(|(index, p)| (p.group.clone(), p.n, ctx[index].attempt()))
            .collect();
        self.calls.lock().unwrap().push(seen.clone());
        let mut outcome = BatchOutcome::ack();
        for (index, posting) in postings.iter().enumerate() {
            outcome.set(index, (self.script)(posting, seen[index].2));
        }
        outcome
    }
}

/// Runs `subscriber` on `path` until `expected` messages of `queue` are settled for good: on the
/// server until its queues drain, on Lambda until the mapping deleted that many. The mapping
/// and the function's own `ChangeMessageVisibilityBatch` calls, on Lambda.
async fn serve(
    backend: &Backend,
    path: Path,
    subscriber: Subscriber,
    queue: &str,
    expected: u64,
) -> Option<(EventSourceMapping, u64)> {
    let app = RustStream::new(AppInfo::new("lambda-paths", "0")).with_broker(
        backend.broker().clone(),
        |b| {
            b.include(subscriber);
        },
    );
    match path {
        Path::Server => {
            let running = TestApp::spawn(app).await.expect("the app starts");
            running.drain().await;
            running.stop().await.unwrap();
            None
        }
        Path::Lambda => {
            let host = LambdaHost::new(app).await.expect("the host starts");
            let mapping = EventSourceMapping::new(
                backend.broker(),
                queue,
                MappingSettings {
                    batch_size: 10,
                    window: Duration::from_millis(500),
                    max_concurrency: 2,
                },
            )
            .await
            .expect("the queue exists");
            let before = backend.broker().api_calls().change_message_visibility_batch;
            let done = mapping
                .run_until(&host, Duration::from_secs(120), |counts| {
                    counts.deleted >= expected
                })
                .await;
            assert!(done, "not all deleted in time: {:?}", mapping.counts());
            let changes = backend.broker().api_calls().change_message_visibility_batch - before;
            Some((mapping, changes))
        }
    }
}

/// `postings` sent in order, each in its group on a FIFO queue; their message ids.
async fn send(backend: &Backend, queue: &SqsQueue, postings: &[Posting]) -> Vec<String> {
    let publisher = backend.broker().publisher(queue.clone());
    let mut ids = Vec::new();
    for posting in postings {
        let message = publisher.message(posting);
        let message = if queue.is_fifo() {
            message.group_id(&posting.group)
        } else {
            message
        };
        ids.push(message.send().await.expect("send").message_id);
    }
    ids
}

fn teller<F>(script: F) -> (Teller<F>, Arc<Mutex<Vec<Seen>>>)
where
    F: Fn(&Posting, u32) -> Step + Send + Sync + 'static,
{
    let seen = Arc::default();
    (
        Teller {
            seen: Arc::clone(&seen),
            script,
        },
        seen,
    )
}

/// A queue of this leg, with a dead-letter queue after 5 receives, and its output queue.
fn queues(backend: &Backend, path: Path, base: &str) -> (SqsQueue, String, SqsQueue) {
    let fifo = if base.ends_with(".fifo") { ".fifo" } else { "" };
    let stem = base.trim_end_matches(".fifo");
    let name = |what: &str| backend.queue_name(&format!("{stem}-{what}-{path:?}{fifo}"));
    let dead_letters = name("dlq");
    let queue = SqsQueue::new(name("in"))
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(30))
        .dead_letter(dead_letters.clone(), 5)
        .retry(RetryPolicy::exponential(
            Duration::from_secs(1),
            Duration::from_secs(2),
        ));
    let booked = SqsQueue::new(name("booked")).create_if_missing();
    (queue, dead_letters, booked)
}

/// The named case: 10 messages over 3 groups, the 4th message of group B fails once.
#[test]
fn the_4th_message_of_group_b_fails_a_and_c_are_deleted_and_b_is_released_from_it() {
    on_each_backend(async |backend| {
        for path in PATHS {
            let (queue, _, _) = queues(&backend, path, "postings.fifo");
            let sent = [
                posting("A", 1),
                posting("B", 1),
                posting("C", 1),
                posting("A", 2),
                posting("B", 2),
                posting("C", 2),
                posting("A", 3),
                posting("B", 3),
                posting("B", 4),
                posting("B", 5),
            ];
            let calls: Calls = Arc::default();
            let handler = Ledger {
                calls: Arc::clone(&calls),
                script: |posting: &Posting, attempt| {
                    if posting.group == "B" && posting.n == 4 && attempt == 1 {
                        HandlerOutcome::failed("the ledger refused B4")
                    } else {
                        HandlerOutcome::ack()
                    }
                },
            };
            let ids = send(&backend, &queue, &sent).await;
            let subscriber = subscriber(queue.clone(), handler)
                .batch(10, Duration::from_millis(500))
                .build();
            let lambda = serve(&backend, path, subscriber, queue.name(), 10).await;

            let calls = calls.lock().unwrap().clone();
            let flat: Vec<_> = calls.iter().flatten().cloned().collect();
            // Each message acked once; B4 tried twice, B5 never before B4's success.
            let b4 = |attempt: u32| flat.iter().position(|s| *s == ("B".to_owned(), 4, attempt));
            let b4_ok = b4(2).unwrap_or_else(|| panic!("{path:?}: B4 again: {calls:?}"));
            assert!(b4(1).unwrap() < b4_ok, "{path:?}");
            let last_b5 = flat
                .iter()
                .rposition(|s| s.0 == "B" && s.1 == 5)
                .expect("B5 handled");
            assert!(last_b5 > b4_ok, "{path:?}: B5 settled before B4: {calls:?}");
            for p in sent.iter().filter(|p| p.group != "B") {
                let handled = flat.iter().filter(|s| s.0 == p.group && s.1 == p.n).count();
                assert_eq!(handled, 1, "{path:?}: {p:?} handled once: {calls:?}");
            }
            let Some((mapping, changes)) = lambda else {
                continue;
            };
            // The first event had all 10: A and C deleted, B released from its 4th message.
            let invocations = mapping.invocations();
            assert_eq!(invocations[0].message_ids.len(), 10, "{invocations:?}");
            let mut failed = invocations[0].failed.clone();
            failed.sort();
            let mut b45 = vec![ids[8].clone(), ids[9].clone()];
            b45.sort();
            assert_eq!(failed, b45, "{invocations:?}");
            // What AWS's mapping would call: a delete for each message, each batch's deletes
            // in one call, no visibility change; the function hid B4 and B5 in one call.
            let counts = mapping.counts();
            assert_eq!(
                counts,
                MappingCounts {
                    invocations: 2,
                    records: 12,
                    deleted: 10,
                    failed: 2,
                    delete_calls: 2,
                    visibility_changes: 0,
                },
                "{invocations:?}"
            );
            assert_eq!(changes, 1, "the function's visibility changes");
        }
    });
}

/// A standard queue: the failed message is released alone, the rest deleted; outputs go out for
/// the acked attempts only.
#[test]
fn a_standard_batch_deletes_the_rest_and_releases_the_failed_message_alone() {
    on_each_backend(async |backend| {
        for path in PATHS {
            let (queue, _, booked) = queues(&backend, path, "payments");
            let sent: Vec<_> = (1..=5).map(|n| posting("S", n)).collect();
            let (handler, seen) = teller(|posting, attempt| {
                Step::Settle(if posting.n == 3 && attempt == 1 {
                    HandlerOutcome::failed("the bank is down")
                } else {
                    HandlerOutcome::ack()
                })
            });
            let ids = send(&backend, &queue, &sent).await;
            let subscriber = subscriber(queue.clone(), handler)
                .outputs(Output::<Posting>::new(booked.clone()))
                .build();
            let lambda = serve(&backend, path, subscriber, queue.name(), 5).await;

            let seen = seen.lock().unwrap().clone();
            assert_eq!(seen.len(), 6, "{path:?}: {seen:?}");
            assert_eq!(
                seen.iter()
                    .filter(|s| s.1 == 3)
                    .map(|s| s.2)
                    .collect::<Vec<_>>(),
                [1, 2],
                "{path:?}"
            );
            let outputs = common::held_by(&backend, booked.name()).await;
            let mut booked_n: Vec<u32> = outputs
                .iter()
                .map(|m| serde_json::from_str::<Posting>(&m.body).unwrap().n)
                .collect();
            booked_n.sort_unstable();
            assert_eq!(booked_n, [1, 2, 3, 4, 5], "{path:?}: one output an ack");
            let Some((mapping, changes)) = lambda else {
                continue;
            };
            let invocations = mapping.invocations();
            let first_failed: Vec<_> = invocations.iter().flat_map(|i| i.failed.clone()).collect();
            assert_eq!(first_failed, [ids[2].clone()], "{invocations:?}");
            let counts = mapping.counts();
            assert_eq!(counts.deleted, 5);
            assert_eq!(counts.failed, 1);
            assert_eq!(counts.records, 6);
            assert_eq!(counts.visibility_changes, 0);
            assert_eq!(
                changes, 1,
                "the function hid the failed message for its retry"
            );
        }
    });
}

/// A panic fails its message, and on FIFO the later ones of its group in the event; nothing is
/// lost and each message is acked once.
#[test]
fn a_panic_fails_its_message_and_the_rest_of_its_group_and_loses_nothing() {
    on_each_backend(async |backend| {
        for path in PATHS {
            let (queue, _, booked) = queues(&backend, path, "panics.fifo");
            let sent = [
                posting("P", 1),
                posting("Q", 1),
                posting("P", 2),
                posting("P", 3),
                posting("Q", 2),
            ];
            let (handler, seen) = teller(|posting, attempt| {
                if posting.group == "P" && posting.n == 2 && attempt == 1 {
                    Step::Panic
                } else {
                    Step::Settle(HandlerOutcome::ack())
                }
            });
            let ids = send(&backend, &queue, &sent).await;
            let subscriber = subscriber(queue.clone(), handler)
                .outputs(Output::<Posting>::new(booked.clone()))
                .build();
            let lambda = serve(&backend, path, subscriber, queue.name(), 5).await;

            let seen = seen.lock().unwrap().clone();
            let at = |group: &str, n: u32, attempt: u32| {
                seen.iter()
                    .position(|s| s.0 == group && s.1 == n && s.2 == attempt)
                    .unwrap_or_else(|| panic!("{path:?}: {group}{n} #{attempt}: {seen:?}"))
            };
            assert!(at("P", 2, 1) < at("P", 2, 2));
            assert!(
                at("P", 2, 2) < at("P", 3, 1),
                "{path:?}: P3 after P2: {seen:?}"
            );
            assert_eq!(seen.len(), 6, "{path:?}: {seen:?}");
            let Some((mapping, _)) = lambda else {
                continue;
            };
            let invocations = mapping.invocations();
            let mut failed = invocations[0].failed.clone();
            failed.sort();
            let mut p23 = vec![ids[2].clone(), ids[3].clone()];
            p23.sort();
            assert_eq!(failed, p23, "{invocations:?}");
            assert_eq!(mapping.counts().deleted, 5);
        }
    });
}

/// A body that does not decode and a `dead_letter` outcome: copied to the dead-letter queue with
/// the reason, and reported a success (the mapping deletes them).
#[test]
fn undecodable_and_dead_lettered_messages_are_copied_then_reported_a_success() {
    on_each_backend(async |backend| {
        for path in PATHS {
            let (queue, dead_letters, booked) = queues(&backend, path, "poison");
            let (handler, seen) = teller(|posting, _| {
                Step::Settle(if posting.n == 2 {
                    HandlerOutcome::dead_letter("no such account")
                } else {
                    HandlerOutcome::ack()
                })
            });
            let publisher = backend.broker().publisher(queue.clone());
            let bad = publisher
                .raw("not a posting")
                .send()
                .await
                .unwrap()
                .message_id;
            send(&backend, &queue, &[posting("D", 1), posting("D", 2)]).await;
            let recorder = backend.broker().recorder();
            let subscriber = subscriber(queue.clone(), handler)
                .outputs(Output::<Posting>::new(booked.clone()))
                .build();
            let lambda = serve(&backend, path, subscriber, queue.name(), 3).await;

            assert_eq!(seen.lock().unwrap().len(), 2, "{path:?}");
            let copies = common::held_by(&backend, &dead_letters).await;
            let reason = |message: &ReceivedMessage| {
                message.message_attributes[DEAD_LETTER_REASON_HEADER]
                    .string_value
                    .clone()
                    .unwrap()
            };
            let mut reasons: Vec<String> = copies.iter().map(reason).collect();
            reasons.sort();
            assert_eq!(reasons.len(), 2, "{path:?}: {reasons:?}");
            assert!(reasons[0].contains("Posting"), "{reasons:?}");
            assert_eq!(reasons[1], "no such account");
            assert!(copies.iter().any(|m| m.body == "not a posting"));
            let dead = recorder.dead_lettered(queue.name());
            assert!(dead.iter().any(|d| d.message_id == bad), "{path:?}");
            let handled = recorder.handled(queue.name());
            assert_eq!(
                handled
                    .iter()
                    .filter(|h| h.settled == Settled::DeadLettered)
                    .count(),
                2,
                "{path:?}"
            );
            let Some((mapping, changes)) = lambda else {
                continue;
            };
            let counts = mapping.counts();
            assert_eq!((counts.deleted, counts.failed), (3, 0), "{counts:?}");
            assert_eq!(changes, 0);
        }
    });
}

/// `retry_after`: hidden for its delay (on Lambda by the function's visibility change), then
/// handled again no sooner.
#[test]
fn retry_after_hides_the_message_for_its_delay_and_reports_a_failure() {
    on_each_backend(async |backend| {
        for path in PATHS {
            let (queue, _, booked) = queues(&backend, path, "later");
            let (handler, seen) = teller(|_, attempt| {
                Step::Settle(if attempt == 1 {
                    HandlerOutcome::retry_after(Duration::from_secs(4))
                } else {
                    HandlerOutcome::ack()
                })
            });
            let ids = send(&backend, &queue, &[posting("R", 1)]).await;
            let subscriber = subscriber(queue.clone(), handler)
                .outputs(Output::<Posting>::new(booked.clone()))
                .build();
            let lambda = serve(&backend, path, subscriber, queue.name(), 1).await;

            let seen = seen.lock().unwrap().clone();
            assert_eq!(seen.len(), 2, "{path:?}: {seen:?}");
            let waited = seen[1].3 - seen[0].3;
            assert!(
                waited >= Duration::from_secs(4) && waited < Duration::from_secs(10),
                "{path:?}: {waited:?}"
            );
            let Some((mapping, changes)) = lambda else {
                continue;
            };
            assert_eq!(mapping.invocations()[0].failed, [ids[0].clone()]);
            assert_eq!(changes, 1);
            if backend.kind() == BackendKind::InProcess {
                assert_eq!(mapping.counts().invocations, 2);
            }
        }
    });
}

#[derive(Debug, Serialize)]
struct Payment {
    id: u64,
    account: String,
    amount_cents: i64,
    flaky: bool,
}

/// The compiled function (`examples/lambda_payments.rs`), started as Lambda starts it with
/// `AWS_LAMBDA_RUNTIME_API` naming the simulator's Runtime API, serves the mapping over LocalStack:
/// the named FIFO case through real processes and HTTP. Its cold start and each invocation's
/// round trip are printed (docs/lambda.md has them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compiled_function_serves_the_mapping_through_the_runtime_api() {
    use rust_stream::testing::lambda::RuntimeApi;
    use rust_stream::testing::{live_broker, live_endpoint, QueueNames};

    let Some(endpoint) = live_endpoint("the Lambda Runtime API leg") else {
        return;
    };
    let names = QueueNames::new();
    let (payments, booked) = (
        names.queue_name("payments.fifo"),
        names.queue_name("payments-booked.fifo"),
    );
    let broker = live_broker(&endpoint).await;
    let queue = SqsQueue::new(&payments).create_if_missing().dead_letter(
        format!("{}-dlq.fifo", payments.trim_end_matches(".fifo")),
        5,
    );
    let publisher = broker.publisher(queue.clone());
    let mut ids = Vec::new();
    for (account, n) in [
        ("A", 1),
        ("B", 1),
        ("C", 1),
        ("A", 2),
        ("B", 2),
        ("C", 2),
        ("A", 3),
        ("B", 3),
        ("B", 4),
        ("B", 5),
    ] {
        let n: u64 = n;
        let payment = Payment {
            id: n + 100 * u64::from(account.as_bytes()[0]),
            account: account.to_owned(),
            amount_cents: 100,
            flaky: account == "B" && n == 4,
        };
        let sent = publisher.message(&payment).group_id(account).send().await;
        ids.push(sent.expect("send").message_id);
    }
    let api = RuntimeApi::start().await.expect("the Runtime API serves");
    let program = common::process::example_binary("lambda_payments");
    api.start_instance(
        &program,
        [
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("PAYMENTS_QUEUE", payments.as_str()),
            ("BOOKED_QUEUE", booked.as_str()),
        ],
    )
    .expect("the function starts");
    let mapping = EventSourceMapping::new(
        &broker,
        &payments,
        MappingSettings {
            batch_size: 10,
            window: Duration::from_millis(500),
            max_concurrency: 1,
        },
    )
    .await
    .expect("the queue exists");
    let done = mapping
        .run_until(&api, Duration::from_secs(120), |counts| {
            counts.deleted >= 10
        })
        .await;
    assert!(
        done,
        "{:?}; init errors: {:?}",
        mapping.counts(),
        api.init_errors()
    );
    let invocations = mapping.invocations();
    assert_eq!(invocations[0].message_ids.len(), 10, "{invocations:?}");
    let mut failed = invocations[0].failed.clone();
    failed.sort();
    let mut b45 = vec![ids[8].clone(), ids[9].clone()];
    b45.sort();
    assert_eq!(failed, b45, "A and C deleted, B released from its 4th");
    let counts = mapping.counts();
    assert_eq!(
        (counts.deleted, counts.failed, counts.visibility_changes),
        (10, 2, 0)
    );
    let live = rust_stream::aws::AwsTransport::local(&endpoint, "us-east-1");
    let outputs = common::receive_all_of(&live, &booked, true).await;
    assert_eq!(outputs.len(), 10, "one booking a payment");
    let cold = api.cold_start().expect("the first event was answered");
    eprintln!("cold start: {cold:?}");

    // Each invocation's round trip, one message an event, as the mapping sees it.
    let rounds = 50;
    for n in 0..rounds {
        let payment = Payment {
            id: 10_000 + n,
            account: format!("R{}", n % 5),
            amount_cents: 1,
            flaky: false,
        };
        publisher
            .message(&payment)
            .group_id(&payment.account)
            .send()
            .await
            .expect("send");
    }
    let single = EventSourceMapping::new(
        &broker,
        &payments,
        MappingSettings {
            batch_size: 1,
            window: Duration::ZERO,
            max_concurrency: 1,
        },
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let mut invoked = Duration::ZERO;
    for _ in 0..rounds {
        let timed = Timed {
            inner: &api,
            spent: Mutex::new(Duration::ZERO),
        };
        single.poll_once(&timed).await;
        invoked += *timed.spent.lock().unwrap();
    }
    let counts = single.counts();
    assert_eq!(counts.deleted, rounds, "{counts:?}");
    eprintln!(
        "per event (1 message): invocation round trip {:?} on average; {:?} an event with the mapping's receive and delete",
        invoked / rounds as u32,
        started.elapsed() / rounds as u32
    );
}

/// A function timed: how long its invocations took, the Runtime API's round trip included.
struct Timed<'a> {
    inner: &'a dyn rust_stream::testing::lambda::Function,
    spent: Mutex<Duration>,
}

impl rust_stream::testing::lambda::Function for Timed<'_> {
    fn invoke(
        &self,
        event: serde_json::Value,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<serde_json::Value, String>> + Send + '_>,
    > {
        Box::pin(async move {
            let started = std::time::Instant::now();
            let answer = self.inner.invoke(event).await;
            *self.spent.lock().unwrap() += started.elapsed();
            answer
        })
    }
}

/// The server path's numbers beside the Lambda ones above, on LocalStack with a handler that
/// publishes one output as the example's does: from the app's start (queues resolved or created,
/// as the function's init does) to its first message handled, then publish → handled a message,
/// one at a time. Printed for docs/lambda.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_path_start_and_per_message_latency_for_comparison() {
    use rust_stream::testing::{live_broker, live_endpoint, QueueNames};

    let Some(endpoint) = live_endpoint("the server path's numbers") else {
        return;
    };
    let names = QueueNames::new();
    let broker = live_broker(&endpoint).await;
    let queue = SqsQueue::new(names.queue_name("server-payments.fifo"))
        .create_if_missing()
        .dead_letter(names.queue_name("server-payments-dlq.fifo"), 5);
    let booked = SqsQueue::new(names.queue_name("server-booked.fifo")).create_if_missing();
    let (handler, seen) = teller(|_, _| Step::Settle(HandlerOutcome::ack()));
    let publisher = broker.publisher(queue.clone());
    publisher
        .message(&posting("S", 0))
        .group_id("S")
        .send()
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let app = RustStream::new(AppInfo::new("server-path", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(queue.clone(), handler)
                .outputs(Output::<Posting>::new(booked.clone()))
                .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let handled = |count: usize| {
        let seen = seen.clone();
        async move {
            while seen.lock().unwrap().len() < count {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), handled(1))
        .await
        .expect("the first message is handled");
    let first = started.elapsed();
    let rounds: u32 = 50;
    let started = std::time::Instant::now();
    for n in 1..=rounds {
        publisher
            .message(&posting(&format!("S{}", n % 5), n))
            .group_id(format!("S{}", n % 5))
            .send()
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(30), handled(1 + n as usize))
            .await
            .expect("handled");
    }
    eprintln!(
        "server: start to first message handled {first:?}; publish → handled {:?} a message, one at a time",
        started.elapsed() / rounds
    );
    running.stop().await.unwrap();
}

/// The inbox on both paths: three copies of one posting (the same key, three sends) are handled
/// once and all three deleted; each copy sends the outputs recorded with the key again, as they
/// were (on a FIFO output, deduplicated), on both paths alike.
#[test]
fn the_inbox_handles_copies_of_one_message_once_on_both_paths() {
    use rust_stream::inbox::{Inbox, Key};
    use rust_stream::store::memory::MemoryStore;

    on_each_backend(async |backend| {
        for path in PATHS {
            let (queue, _, booked) = queues(&backend, path, "copies");
            let (handler, seen) = teller(|_, _| Step::Settle(HandlerOutcome::ack()));
            send(
                &backend,
                &queue,
                &[posting("I", 7), posting("I", 7), posting("I", 7)],
            )
            .await;
            let subscriber = subscriber(queue.clone(), handler)
                .outputs(Output::<Posting>::new(booked.clone()))
                .idempotent(Inbox::new(MemoryStore::new()).key(Key::json_pointer("/n")))
                .build();
            let lambda = serve(&backend, path, subscriber, queue.name(), 3).await;

            assert_eq!(seen.lock().unwrap().len(), 1, "{path:?}: handled once");
            let outputs = common::held_by(&backend, booked.name()).await;
            assert_eq!(
                outputs.len(),
                3,
                "{path:?}: the recorded output, sent for each copy"
            );
            assert!(
                outputs.iter().all(|m| m.body == outputs[0].body),
                "{path:?}: {outputs:?}"
            );
            if let Some((mapping, _)) = lambda {
                let counts = mapping.counts();
                assert_eq!((counts.deleted, counts.failed), (3, 0), "{counts:?}");
            }
        }
    });
}

/// An SNS-to-Lambda event: each notification runs the subscription whose queue is subscribed to
/// its topic, read as that queue reads an envelope (the message, its attributes as headers); a
/// failure fails the invocation, which Lambda then retries.
#[tokio::test(start_paused = true)]
async fn an_sns_event_runs_the_subscriptions_of_queues_subscribed_to_its_topic() {
    use rust_stream::lambda::SnsEvent;

    let broker = SqsBroker::in_process();
    let queue = SqsQueue::new("notified")
        .create_if_missing()
        .subscribed_to(SnsTopic::new("postings").create_if_missing());
    let booked = SqsQueue::new("notified-booked").create_if_missing();
    let (handler, seen) = teller({
        move |posting: &Posting, _| {
            if posting.n == 2 {
                Step::Settle(HandlerOutcome::failed("refused"))
            } else {
                Step::Settle(HandlerOutcome::ack())
            }
        }
    });
    let app = RustStream::new(AppInfo::new("sns-lambda", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(queue.clone(), handler)
                .outputs(Output::<Posting>::new(booked.clone()))
                .build(),
        );
    });
    let host = LambdaHost::new(app).await.expect("the host starts");
    let event = |n: u32| -> SnsEvent {
        serde_json::from_value(serde_json::json!({
            "Records": [{
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": "arn:aws:sns:us-east-1:000000000000:postings:1",
                "Sns": {
                    "Type": "Notification",
                    "MessageId": format!("sns-{n}"),
                    "TopicArn": "arn:aws:sns:us-east-1:000000000000:postings",
                    "Subject": null,
                    "Message": serde_json::to_string(&posting("N", n)).unwrap(),
                    "Timestamp": "2026-12-06T16:00:00.000Z",
                    "SignatureVersion": "1",
                    "Signature": "",
                    "SigningCertUrl": "",
                    "UnsubscribeUrl": "",
                    "MessageAttributes": {
                        "tenant": { "Type": "String", "Value": "acme" }
                    }
                }
            }]
        }))
        .expect("an SNS event")
    };
    host.handle_sns(event(1))
        .await
        .expect("a handled notification");
    let failed = host.handle_sns(event(2)).await;
    assert!(
        failed.is_err(),
        "a failed notification fails the invocation"
    );
    // The handler read the published message inside each envelope.
    let seen: Vec<u32> = seen.lock().unwrap().iter().map(|s| s.1).collect();
    assert_eq!(seen, [1, 2]);
}

/// A batch handler on a standard queue: an event's messages in calls of up to the batch's `max`;
/// the failed message is released alone, the rest deleted, on both paths.
#[test]
fn a_batch_handler_on_a_standard_queue_fails_only_its_failed_message() {
    on_each_backend(async |backend| {
        for path in PATHS {
            let (queue, _, _) = queues(&backend, path, "standard-batches");
            let sent: Vec<_> = (1..=7).map(|n| posting("S", n)).collect();
            let calls: Calls = Arc::default();
            let handler = Ledger {
                calls: Arc::clone(&calls),
                script: |posting: &Posting, attempt| {
                    if posting.n == 5 && attempt == 1 {
                        HandlerOutcome::failed("refused")
                    } else {
                        HandlerOutcome::ack()
                    }
                },
            };
            let ids = send(&backend, &queue, &sent).await;
            let subscriber = subscriber(queue.clone(), handler)
                .batch(4, Duration::from_millis(200))
                .build();
            let lambda = serve(&backend, path, subscriber, queue.name(), 7).await;

            let calls = calls.lock().unwrap().clone();
            assert!(
                calls.iter().all(|call| call.len() <= 4),
                "{path:?}: {calls:?}"
            );
            let flat: Vec<_> = calls.iter().flatten().collect();
            assert_eq!(flat.len(), 8, "{path:?}: {calls:?}");
            for n in 1..=7 {
                let acked = flat
                    .iter()
                    .filter(|s| s.1 == n && !(n == 5 && s.2 == 1))
                    .count();
                assert_eq!(acked, 1, "{path:?}: S{n} acked once: {calls:?}");
            }
            let Some((mapping, changes)) = lambda else {
                continue;
            };
            let failed: Vec<_> = mapping
                .invocations()
                .iter()
                .flat_map(|i| i.failed.clone())
                .collect();
            assert_eq!(failed, [ids[4].clone()]);
            assert_eq!(mapping.counts().deleted, 7);
            assert_eq!(changes, 1);
        }
    });
}

/// A handler that posts in the inbox's transaction and writes its event to the outbox there.
#[derive(Clone)]
struct PostAndAnnounce {
    outbox: rust_stream::outbox::Outbox<rust_stream::store::memory::MemoryStore>,
}

impl Handle<Posting> for PostAndAnnounce {
    async fn handle(
        &self,
        incoming: &Posting,
        _: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let mut transaction = ctx
            .transaction::<rust_stream::store::memory::MemoryStore>()
            .await
            .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
        self.outbox
            .message(&posting("posted", incoming.n))
            .send(&mut transaction)
            .await
            .map_err(|error| HandlerOutcome::failed(error.to_string()))?;
        if ctx.attempt() == 1 && incoming.n == 2 {
            // The bank timed out after the write: the transaction rolls back, the outbox row too.
            return Err(HandlerOutcome::failed("the bank timed out"));
        }
        Ok(())
    }
}

/// The outbox on both paths: a handler's outbox write commits with the inbox's transaction, and
/// a failed attempt's write rolls back with it (the relay, a worker, does not run on Lambda: the
/// rows wait in the store for it).
#[test]
fn an_outbox_write_commits_with_the_attempt_and_rolls_back_with_a_failed_one() {
    use rust_stream::inbox::{Inbox, Key};
    use rust_stream::outbox::Outbox;
    use rust_stream::store::memory::MemoryStore;

    on_each_backend(async |backend| {
        for path in PATHS {
            let (queue, _, booked) = queues(&backend, path, "announce");
            let store = MemoryStore::new();
            let handler = PostAndAnnounce {
                outbox: Outbox::new(store.clone(), backend.broker().publisher(booked.clone())),
            };
            send(
                &backend,
                &queue,
                &[posting("O", 1), posting("O", 2), posting("O", 3)],
            )
            .await;
            let subscriber = subscriber(queue.clone(), handler)
                .idempotent(Inbox::new(store.clone()).key(Key::json_pointer("/n")))
                .build();
            serve(&backend, path, subscriber, queue.name(), 3).await;

            // A row holds the messages of one transaction.
            let mut written: Vec<u32> = store
                .outbox_rows()
                .iter()
                .flat_map(|row| {
                    let messages: Vec<serde_json::Value> =
                        serde_json::from_str(&row.message).unwrap();
                    messages
                })
                .map(|message| {
                    let body = message["body"].as_str().expect("a body").to_owned();
                    serde_json::from_str::<Posting>(&body).unwrap().n
                })
                .collect();
            written.sort_unstable();
            assert_eq!(written, [1, 2, 3], "{path:?}: one row an acked posting");
        }
    });
}
