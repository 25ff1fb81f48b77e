//! Batch handlers (issue 22, item 1) on both backends: the in-process account on a paused clock,
//! then LocalStack.
//!
//! - the named FIFO case: 10 messages over 3 groups in one batch, the 4th message of group B
//!   fails: A and C are deleted, B runs again from its 4th message, and B5 is never settled (nor
//!   handled in a call without B4 before it) until B4 succeeds;
//! - a standard queue: batches fill up to their `max` within the window, a failed message is
//!   retried alone by its visibility while the rest of its batch is deleted;
//! - a panic in a batch handler retries every message of the call and loses none;
//! - a message the outcome dead-letters carries the usual attributes and its reason, a message
//!   out of attempts in a batch is dead-lettered alone and its group goes on;
//! - a message whose body does not decode never reaches the handler and is dead-lettered with
//!   the decode error;
//! - `Recorder::batches` shows what each call got.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::handler::batch::{BatchContext, BatchOutcome, HandleBatch};
use rust_stream::prelude::*;
use rust_stream::publish::{Outgoing, Publisher};
use rust_stream::testing::{eventually, on_each_backend, Backend, BackendKind, Settled, TestApp};
use rust_stream::transport::ReceivedMessage;
use rust_stream::{
    RetryPolicy, Subscriber, ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER,
    ORIGINAL_MESSAGE_ID_HEADER, SOURCE_QUEUE_HEADER,
};
use serde::{Deserialize, Serialize};

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

/// One message of one call, as the handler saw it: `group`, `n`, attempt.
type Seen = (String, u32, u32);

/// Every call a handler got, in order, shared with the test.
type Calls = Arc<Mutex<Vec<Vec<Seen>>>>;

/// How the script settles a message.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    Settle(HandlerOutcome),
    /// The whole call panics.
    Panic,
}

/// A batch handler that records each call and settles each message as `script` says for its
/// posting and attempt.
struct Ledger<F> {
    calls: Calls,
    script: F,
}

impl<F> HandleBatch<Posting> for Ledger<F>
where
    F: Fn(&Posting, u32) -> Step + Send + Sync + 'static,
{
    async fn handle(
        &self,
        postings: &[Posting],
        _outs: &(),
        ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        assert_eq!(ctx.len(), postings.len());
        let seen = seen_in(postings, ctx);
        self.calls.lock().unwrap().push(seen.clone());
        let mut outcome = BatchOutcome::ack();
        for (index, posting) in postings.iter().enumerate() {
            match (self.script)(posting, seen[index].2) {
                Step::Panic => panic!("scripted panic at {}{}", posting.group, posting.n),
                Step::Settle(settled) => {
                    outcome.set(index, settled);
                }
            }
        }
        outcome
    }
}

/// Each message of a call as the handler saw it, in order.
fn seen_in(postings: &[Posting], ctx: &BatchContext<'_>) -> Vec<Seen> {
    postings
        .iter()
        .enumerate()
        .map(|(index, posting)| (posting.group.clone(), posting.n, ctx[index].attempt()))
        .collect()
}

fn ledger<F>(script: F) -> (Ledger<F>, Calls)
where
    F: Fn(&Posting, u32) -> Step + Send + Sync + 'static,
{
    let calls = Arc::default();
    (
        Ledger {
            calls: Arc::clone(&calls),
            script,
        },
        calls,
    )
}

async fn start(backend: &Backend, subscriber: Subscriber) -> TestApp {
    let app = RustStream::new(AppInfo::new("batch-handlers", "0")).with_broker(
        backend.broker().clone(),
        |b| {
            b.include(subscriber);
        },
    );
    TestApp::spawn(app).await.expect("the app starts")
}

fn fifo_queue(backend: &Backend) -> (SqsQueue, String) {
    let dead_letters = backend.queue_name("postings-dlq.fifo");
    let queue = SqsQueue::new(backend.queue_name("postings.fifo"))
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(30))
        .dead_letter(dead_letters.clone(), 3);
    (queue, dead_letters)
}

/// `posting` as a message of `publisher`, in its group on a FIFO `queue`.
fn message_of(publisher: &Publisher, queue: &SqsQueue, posting: &Posting) -> Outgoing {
    let message = publisher.message(posting);
    if queue.is_fifo() {
        message.group_id(&posting.group)
    } else {
        message
    }
}

/// Sends the postings, one at a time and in order (each in its group on a FIFO queue).
async fn send(backend: &Backend, queue: &SqsQueue, postings: &[Posting]) -> Vec<String> {
    let publisher = backend.broker().publisher(queue.clone());
    let mut ids = Vec::new();
    for posting in postings {
        let sent = message_of(&publisher, queue, posting).send().await;
        ids.push(sent.expect("send").message_id);
    }
    ids
}

/// The named case of the issue, with the groups' messages interleaved as sent.
#[test]
fn the_4th_message_of_group_b_fails_a_and_c_are_deleted_and_b_runs_again_from_it() {
    on_each_backend(async |backend| {
        let (queue, _) = fifo_queue(&backend);
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
        let recorder = backend.broker().recorder();
        let (handler, calls) = ledger(|posting, attempt| {
            Step::Settle(if posting.group == "B" && posting.n == 4 && attempt == 1 {
                HandlerOutcome::failed("the ledger refused B4")
            } else {
                HandlerOutcome::ack()
            })
        });
        // The messages are sent before the app starts, so its first receive takes all 10.
        let ids = send(&backend, &queue, &sent).await;
        let running = start(
            &backend,
            subscriber(queue.clone(), handler)
                .batch(10, Duration::from_secs(2))
                .build(),
        )
        .await;
        running.drain().await;
        running.stop().await.unwrap();

        let calls = calls.lock().unwrap().clone();
        let id_of = |group: &str, n: u32| {
            let at = sent
                .iter()
                .position(|p| p.group == group && p.n == n)
                .unwrap();
            ids[at].clone()
        };
        // B5 is in no call without B4 before it, until B4 succeeded; and every call holds each
        // group's messages in order.
        let mut b4_done = false;
        for call in &calls {
            for group in ["A", "B", "C"] {
                let ns: Vec<u32> = call.iter().filter(|s| s.0 == group).map(|s| s.1).collect();
                assert!(
                    ns.windows(2).all(|w| w[0] < w[1]),
                    "{group} out of order in {call:?}"
                );
            }
            let b4 = call.iter().position(|s| s.0 == "B" && s.1 == 4);
            let b5 = call.iter().position(|s| s.0 == "B" && s.1 == 5);
            if let Some(b5) = b5 {
                assert!(
                    b4_done || b4.is_some_and(|b4| b4 < b5),
                    "B5 ran before B4 succeeded: {calls:?}"
                );
            }
            if b4.is_some_and(|b4| call[b4].2 >= 2) {
                b4_done = true;
            }
        }
        // Each message is settled once as acked, B4 once retried before; B5's ack comes after
        // B4's, and nothing else of B runs again.
        let handled = recorder.handled(queue.name());
        let settled_of = |id: &str| -> Vec<Settled> {
            handled
                .iter()
                .filter(|h| h.message_id == id)
                .map(|h| h.settled)
                .collect()
        };
        for posting in &sent {
            let id = id_of(&posting.group, posting.n);
            let expected = if posting.group == "B" && posting.n == 4 {
                vec![Settled::Retried, Settled::Acked]
            } else {
                vec![Settled::Acked]
            };
            assert_eq!(settled_of(&id), expected, "{posting:?}");
        }
        let position = |id: String| {
            handled
                .iter()
                .position(|h| h.message_id == id && h.settled == Settled::Acked)
                .unwrap()
        };
        assert!(position(id_of("B", 4)) < position(id_of("B", 5)));
        let runs_of = |group: &str, n: u32| {
            calls
                .iter()
                .flatten()
                .filter(|s| s.0 == group && s.1 == n)
                .count()
        };
        for n in 1..=3 {
            assert_eq!(runs_of("A", n), 1);
            assert_eq!(runs_of("B", n), 1, "B{n} ran again");
        }
        assert_eq!(runs_of("B", 4), 2);
        // B4's second run is its attempt 2; B5 run again after it is still its attempt 1.
        let attempts_of = |n: u32| -> Vec<u32> {
            calls
                .iter()
                .flatten()
                .filter(|s| s.0 == "B" && s.1 == n)
                .map(|s| s.2)
                .collect()
        };
        assert_eq!(attempts_of(4), [1, 2]);
        assert!(attempts_of(5).iter().all(|attempt| *attempt == 1));
        if backend.kind() == BackendKind::InProcess {
            // One receive of 10, one call of 10; then B4 and B5, again in one call.
            let sizes: Vec<usize> = recorder
                .batches(queue.name())
                .iter()
                .map(|b| b.len())
                .collect();
            assert_eq!(sizes, [10, 2]);
            assert_eq!(calls[1], [("B".to_owned(), 4, 2), ("B".to_owned(), 5, 1)]);
        }
    });
}

#[test]
fn a_standard_queue_fills_batches_within_the_window_and_retries_only_the_failed_message() {
    on_each_backend(async |backend| {
        let queue = SqsQueue::new(backend.queue_name("postings"))
            .create_if_missing()
            .visibility_timeout(Duration::from_secs(30));
        let recorder = backend.broker().recorder();
        let (handler, calls) = ledger(|posting, attempt| {
            Step::Settle(if posting.n == 7 && attempt == 1 {
                HandlerOutcome::retry_after(Duration::from_secs(1))
            } else {
                HandlerOutcome::ack()
            })
        });
        let running = start(
            &backend,
            subscriber(queue.clone(), handler)
                .batch(10, Duration::from_millis(500))
                .concurrency(2)
                .build(),
        )
        .await;
        let sent: Vec<Posting> = (1..=25).map(|n| posting("-", n)).collect();
        let publisher = backend.broker().publisher(queue.clone());
        publisher
            .send_batch(
                sent.iter()
                    .map(|p| publisher.message(p))
                    .collect::<Vec<_>>(),
            )
            .await
            .into_iter()
            .for_each(|sent| {
                sent.expect("send");
            });
        running.drain().await;
        running.stop().await.unwrap();

        let calls = calls.lock().unwrap().clone();
        let batches = recorder.batches(queue.name());
        assert_eq!(batches.len(), calls.len());
        assert!(
            batches.iter().all(|b| (1..=10).contains(&b.len())),
            "{batches:?}"
        );
        // Every message once, the failed one twice: 26 messages in far fewer calls.
        assert_eq!(calls.iter().map(Vec::len).sum::<usize>(), 26, "{calls:?}");
        assert!(calls.len() <= 13, "{} calls for 26 messages", calls.len());
        for n in 1..=25 {
            let runs = calls.iter().flatten().filter(|s| s.1 == n).count();
            assert_eq!(runs, if n == 7 { 2 } else { 1 }, "posting {n}");
        }
        let handled = recorder.handled(queue.name());
        assert_eq!(
            handled
                .iter()
                .filter(|h| h.settled == Settled::Acked)
                .count(),
            25
        );
        assert_eq!(
            handled
                .iter()
                .filter(|h| h.settled == Settled::Retried)
                .count(),
            1
        );
    });
}

#[test]
fn a_panic_in_a_batch_handler_retries_every_message_of_the_call_and_loses_none() {
    on_each_backend(async |backend| {
        let (queue, _) = fifo_queue(&backend);
        let sent = [
            posting("A", 1),
            posting("B", 1),
            posting("A", 2),
            posting("B", 2),
        ];
        let recorder = backend.broker().recorder();
        let (handler, calls) = ledger(|posting, attempt| {
            if posting.group == "B" && posting.n == 2 && attempt == 1 {
                Step::Panic
            } else {
                Step::Settle(HandlerOutcome::ack())
            }
        });
        let ids = send(&backend, &queue, &sent).await;
        let running = start(
            &backend,
            subscriber(queue.clone(), handler)
                .batch(10, Duration::from_secs(2))
                .build(),
        )
        .await;
        running.drain().await;
        running.stop().await.unwrap();

        let handled = recorder.handled(queue.name());
        for id in &ids {
            let settled: Vec<Settled> = handled
                .iter()
                .filter(|h| &h.message_id == id)
                .map(|h| h.settled)
                .collect();
            assert_eq!(settled.last(), Some(&Settled::Acked), "{id}: {settled:?}");
            assert!(
                !settled[..settled.len() - 1].contains(&Settled::Acked)
                    && !settled.contains(&Settled::DeadLettered),
                "{id}: {settled:?}"
            );
        }
        // Every message of the call that panicked ran next in a call of its own: B2, the poison,
        // panicked there again and was counted (retried) alone, then succeeded.
        let calls = calls.lock().unwrap().clone();
        let panicked = calls
            .iter()
            .position(|call| call.iter().any(|s| s.0 == "B" && s.1 == 2))
            .unwrap();
        for seen in &calls[panicked] {
            let next = calls[panicked + 1..]
                .iter()
                .find(|call| call.iter().any(|s| s.0 == seen.0 && s.1 == seen.1))
                .expect("it ran again");
            assert_eq!(next.len(), 1, "{seen:?} ran next in {next:?}: {calls:?}");
        }
        let b2 = &ids[3];
        let b2_settled: Vec<Settled> = handled
            .iter()
            .filter(|h| &h.message_id == b2)
            .map(|h| h.settled)
            .collect();
        assert_eq!(b2_settled, [Settled::Retried, Settled::Acked]);
    });
}

#[test]
fn per_message_dead_letters_carry_their_reason_and_a_message_out_of_attempts_goes_alone() {
    on_each_backend(async |backend| {
        let (queue, dead_letters) = fifo_queue(&backend);
        let sent = [
            posting("A", 1),
            posting("A", 2),
            posting("A", 3),
            posting("B", 1),
            posting("B", 2),
        ];
        let recorder = backend.broker().recorder();
        let (handler, _calls) = ledger(|posting, _attempt| {
            Step::Settle(match (posting.group.as_str(), posting.n) {
                ("A", 2) => HandlerOutcome::dead_letter("A2 names no account"),
                // Always fails: out of its 3 attempts, it is dead-lettered and B2 goes on.
                ("B", 1) => HandlerOutcome::retry(),
                _ => HandlerOutcome::ack(),
            })
        });
        let ids = send(&backend, &queue, &sent).await;
        let running = start(
            &backend,
            subscriber(queue.clone(), handler)
                .batch(10, Duration::from_millis(200))
                .retry(RetryPolicy::exponential(
                    Duration::from_millis(200),
                    Duration::from_secs(1),
                ))
                .build(),
        )
        .await;
        running.drain().await;
        running.stop().await.unwrap();

        let copies = common::held_by(&backend, &dead_letters).await;
        assert_eq!(copies.len(), 2, "{copies:?}");
        let attribute = |message: &ReceivedMessage, name: &str| {
            message
                .message_attributes
                .get(name)
                .and_then(|v| v.string_value.clone())
        };
        let a2 = copies
            .iter()
            .find(|m| attribute(m, ORIGINAL_MESSAGE_ID_HEADER).as_deref() == Some(ids[1].as_str()))
            .expect("A2's copy");
        assert_eq!(
            attribute(a2, DEAD_LETTER_REASON_HEADER).as_deref(),
            Some("A2 names no account")
        );
        assert_eq!(
            attribute(a2, SOURCE_QUEUE_HEADER).as_deref(),
            Some(queue.name())
        );
        assert_eq!(attribute(a2, ATTEMPTS_HEADER).as_deref(), Some("1"));
        let b1 = copies
            .iter()
            .find(|m| attribute(m, ORIGINAL_MESSAGE_ID_HEADER).as_deref() == Some(ids[3].as_str()))
            .expect("B1's copy");
        assert_eq!(attribute(b1, ATTEMPTS_HEADER).as_deref(), Some("3"));
        // Every other message was acked, each once; B2 after B1 was dead-lettered.
        let handled = recorder.handled(queue.name());
        for at in [0, 2, 4] {
            let acks = handled
                .iter()
                .filter(|h| h.message_id == ids[at] && h.settled == Settled::Acked)
                .count();
            assert_eq!(acks, 1, "{:?}", sent[at]);
        }
        let dead = recorder.dead_lettered(queue.name());
        assert_eq!(dead.len(), 2);
        let b1_dead = handled
            .iter()
            .position(|h| h.message_id == ids[3] && h.settled == Settled::DeadLettered)
            .unwrap();
        let b2_acked = handled
            .iter()
            .position(|h| h.message_id == ids[4] && h.settled == Settled::Acked)
            .unwrap();
        assert!(b1_dead < b2_acked);
    });
}

#[test]
fn a_message_that_does_not_decode_never_reaches_the_batch_handler() {
    on_each_backend(async |backend| {
        let (queue, dead_letters) = fifo_queue(&backend);
        let recorder = backend.broker().recorder();
        let (handler, calls) = ledger(|_, _| Step::Settle(HandlerOutcome::ack()));
        let publisher = backend.broker().publisher(queue.clone());
        let good = publisher
            .message(&posting("A", 1))
            .group_id("A")
            .send()
            .await
            .unwrap()
            .message_id;
        let bad = publisher
            .raw("not a posting")
            .group_id("A")
            .send()
            .await
            .unwrap()
            .message_id;
        let after = publisher
            .message(&posting("A", 3))
            .group_id("A")
            .send()
            .await
            .unwrap()
            .message_id;
        let running = start(
            &backend,
            subscriber(queue.clone(), handler)
                .batch(10, Duration::from_secs(1))
                .build(),
        )
        .await;
        running.drain().await;
        running.stop().await.unwrap();

        let seen: Vec<String> = recorder
            .batches(queue.name())
            .into_iter()
            .flat_map(|b| b.message_ids)
            .collect();
        assert!(
            !seen.contains(&bad),
            "the undecodable message reached the handler"
        );
        assert!(seen.contains(&good) && seen.contains(&after));
        assert_eq!(calls.lock().unwrap().iter().flatten().count(), 2);
        let copies = common::held_by(&backend, &dead_letters).await;
        assert_eq!(copies.len(), 1);
        assert_eq!(copies[0].body, "not a posting");
        let reason = copies[0].message_attributes[DEAD_LETTER_REASON_HEADER]
            .string_value
            .clone()
            .unwrap();
        assert!(reason.contains("Posting"), "{reason}");
    });
}

/// Sends `postings` in batches of 10 (each in its group on a FIFO queue), before any consumer runs.
async fn send_backlog(backend: &Backend, queue: &SqsQueue, postings: &[Posting]) {
    let publisher = backend.broker().publisher(queue.clone());
    for chunk in postings.chunks(10) {
        let messages: Vec<_> = chunk
            .iter()
            .map(|posting| message_of(&publisher, queue, posting))
            .collect();
        for sent in publisher.send_batch(messages).await {
            sent.expect("send");
        }
    }
}

/// Consumes a backlog of `MESSAGES` messages over `groups` groups with a batch handler and counts
/// the SQS calls it took (receives, deletes, visibility changes), from after the backlog was sent
/// until the consumer stopped, its last receives included: each of the pollers that ran ends on
/// an empty receive, about 16 calls, which the backlog is long enough to spread thin.
async fn consume_costs<const MESSAGES: u32>(
    backend: &Backend,
    queue: SqsQueue,
    groups: u32,
) -> f64 {
    let postings: Vec<Posting> = (0..MESSAGES)
        .map(|n| posting(&format!("g{}", n % groups), n))
        .collect();
    send_backlog(backend, &queue, &postings).await;
    let recorder = backend.broker().recorder();
    let before = backend.broker().api_calls();
    let (handler, calls) = ledger(|_, _| Step::Settle(HandlerOutcome::ack()));
    let running = start(
        backend,
        subscriber(queue.clone(), handler)
            .batch(50, Duration::from_millis(100))
            .concurrency(4)
            .build(),
    )
    .await;
    eventually("every message settled", async || {
        recorder.handled(queue.name()).len() >= MESSAGES as usize
    })
    .await;
    running.stop().await.unwrap();
    let used = backend.broker().api_calls() - before;
    let handled = recorder.handled(queue.name());
    assert_eq!(
        handled.len(),
        MESSAGES as usize,
        "each message handled once"
    );
    assert!(handled.iter().all(|h| h.settled == Settled::Acked));
    let calls = calls.lock().unwrap().len();
    let per_message = used.messaging() as f64 / f64::from(MESSAGES);
    eprintln!(
        "{} ({:?}): {MESSAGES} messages in {calls} handler calls, {used:?} = {per_message:.3} SQS calls a message",
        queue.name(),
        backend.kind()
    );
    per_message
}

#[test]
fn consuming_with_a_batch_handler_costs_at_most_021_sqs_calls_a_message() {
    on_each_backend(async |backend| {
        let standard = SqsQueue::new(backend.queue_name("cost"))
            .create_if_missing()
            .visibility_timeout(Duration::from_secs(60));
        let per_message = consume_costs::<4000>(&backend, standard, 1).await;
        assert!(
            per_message <= 0.21,
            "standard: {per_message:.3} calls a message"
        );
        let fifo = SqsQueue::new(backend.queue_name("cost.fifo"))
            .create_if_missing()
            .visibility_timeout(Duration::from_secs(60));
        let per_message = consume_costs::<2000>(&backend, fifo, 20).await;
        assert!(
            per_message <= 0.21,
            "FIFO: {per_message:.3} calls a message"
        );
    });
}

/// A batch handler that sleeps while its batch holds the slow posting.
struct SlowOnce {
    calls: Calls,
}

impl HandleBatch<Posting> for SlowOnce {
    async fn handle(
        &self,
        postings: &[Posting],
        _outs: &(),
        ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        self.calls.lock().unwrap().push(seen_in(postings, ctx));
        if postings
            .iter()
            .enumerate()
            .any(|(index, p)| p.n == 2 && ctx[index].attempt() == 1)
        {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        BatchOutcome::ack()
    }
}

#[test]
fn a_batch_call_past_the_handler_timeout_is_cancelled_and_its_messages_retried_each_alone() {
    on_each_backend(async |backend| {
        let queue = SqsQueue::new(backend.queue_name("slow-postings"))
            .create_if_missing()
            .visibility_timeout(Duration::from_secs(30));
        let recorder = backend.broker().recorder();
        let calls = Calls::default();
        let sent: Vec<Posting> = (1..=3).map(|n| posting("-", n)).collect();
        let ids = send(&backend, &queue, &sent).await;
        let running = start(
            &backend,
            subscriber(
                queue.clone(),
                SlowOnce {
                    calls: calls.clone(),
                },
            )
            .timeout(Duration::from_secs(1))
            .retry(RetryPolicy::fixed(Duration::from_secs(1)))
            .batch(10, Duration::from_millis(500))
            .build(),
        )
        .await;
        running.drain().await;
        running.stop().await.unwrap();

        let handled = recorder.handled(queue.name());
        for id in &ids {
            let settled: Vec<Settled> = handled
                .iter()
                .filter(|h| &h.message_id == id)
                .map(|h| h.settled)
                .collect();
            assert_eq!(settled.last(), Some(&Settled::Acked), "{id}: {settled:?}");
        }
        let calls = calls.lock().unwrap().clone();
        let slow = calls
            .iter()
            .position(|call| call.iter().any(|s| s.1 == 2))
            .unwrap();
        // Every message of the call that timed out was retried (attempt 2), in a call of its own.
        for seen in &calls[slow] {
            let again = calls[slow + 1..]
                .iter()
                .find(|call| call.iter().any(|s| s.1 == seen.1))
                .expect("retried");
            assert_eq!(again.len(), 1, "{calls:?}");
            assert_eq!(again[0].2, 2, "{calls:?}");
        }
    });
}
