//! `#[subscriber(.., batch(..))]` functions running on the in-process broker: a call gets the
//! batch the engine gathered, each message is settled by its own outcome (an ack sends what the
//! handler published for it, a retry brings it back alone), `Err` fails every message of the
//! call, and `max` and `window` given as expressions reach the app's checks at start.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rust_stream::handler::batch::{BatchContext, BatchOutcome};
use rust_stream::prelude::*;
use rust_stream::testing::{Settled, TestApp};
use rust_stream::{ConfigError, Output, RunError, State};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Posting {
    n: u32,
    cents: i64,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Receipt {
    n: u32,
    ledger: String,
    attempt: u32,
}

/// Shared state: the ledger's name.
#[derive(Clone)]
struct Ledger(&'static str);

/// Shared state: how many calls a handler had.
#[derive(Clone, Default)]
struct Calls(Arc<AtomicU32>);

fn queue(name: &str) -> SqsQueue {
    SqsQueue::new(name).create_if_missing()
}

/// Sends the postings one by one, and gives their message ids in order.
async fn send(broker: &SqsBroker, queue_name: &str, postings: &[Posting]) -> Vec<String> {
    let publisher = broker.publisher(queue(queue_name));
    let mut ids = Vec::new();
    for posting in postings {
        let sent = publisher
            .message(posting)
            .send()
            .await
            .expect("send a posting");
        ids.push(sent.message_id);
    }
    ids
}

fn postings(count: u32) -> Vec<Posting> {
    (1..=count)
        .map(|n| Posting {
            n,
            cents: i64::from(n) * 100,
        })
        .collect()
}

/// Posts a batch of postings: a receipt for each, except that a posting of 0 cents the ledger
/// takes only on a second try.
#[subscriber(
    queue("postings"),
    batch(max = 10, window = 100ms),
    outputs(receipts = queue("receipts")),
)]
async fn post(
    postings: &[Posting],
    State(ledger): State<Ledger>,
    receipts: &Output<Receipt>,
    ctx: &mut BatchContext<'_>,
) -> BatchOutcome {
    let mut outcome = BatchOutcome::ack();
    for (index, posting) in postings.iter().enumerate() {
        let attempt = ctx[index].attempt();
        if posting.cents == 0 && attempt == 1 {
            outcome.set(index, HandlerOutcome::retry_after(Duration::from_secs(1)));
            continue;
        }
        ctx[index].publish(receipts.message(&Receipt {
            n: posting.n,
            ledger: ledger.0.to_owned(),
            attempt,
        }));
    }
    outcome
}

#[tokio::test(start_paused = true)]
async fn each_message_of_a_macro_written_batch_is_settled_by_its_outcome_with_its_outputs() {
    let broker = SqsBroker::in_process();
    let recorder = broker.recorder();
    let mut sent = postings(6);
    sent[2].cents = 0;
    // Sent before the app starts, so its first receive takes all six, in one call.
    let ids = send(&broker, "postings", &sent).await;
    let app = RustStream::new(AppInfo::new("ledger", "0.1.0"))
        .with_state(Ledger("main"))
        .with_broker(broker.clone(), |b| {
            b.include(post);
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    running.drain().await;
    running.stop().await.expect("the app ran");

    let calls: Vec<Vec<String>> = recorder
        .batches("postings")
        .into_iter()
        .map(|batch| batch.message_ids)
        .collect();
    assert_eq!(calls, [ids.clone(), vec![ids[2].clone()]]);
    let handled = recorder.handled("postings");
    for (index, id) in ids.iter().enumerate() {
        let settled: Vec<Settled> = handled
            .iter()
            .filter(|h| &h.message_id == id)
            .map(|h| h.settled)
            .collect();
        let expected = if index == 2 {
            vec![Settled::Retried, Settled::Acked]
        } else {
            vec![Settled::Acked]
        };
        assert_eq!(settled, expected, "posting {}", index + 1);
    }
    // A receipt for each acked message; none for the retried try of posting 3.
    let receipts: Vec<Receipt> = recorder.published_as("receipts");
    let mut by_posting: Vec<(u32, u32)> = receipts.iter().map(|r| (r.n, r.attempt)).collect();
    by_posting.sort_unstable();
    assert_eq!(by_posting, [(1, 1), (2, 1), (3, 2), (4, 1), (5, 1), (6, 1)]);
    assert!(receipts.iter().all(|r| r.ledger == "main"));
}

/// Fails its first call whole, with its own error; then takes every posting.
#[subscriber(queue("refused"), batch(max = 5, window = 1s))]
async fn refuse_once(postings: &[Posting], calls: State<Calls>) -> Result<(), String> {
    if calls.0 .0.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(format!(
            "the ledger is down for {} postings",
            postings.len()
        ));
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn an_err_fails_every_message_of_the_call_and_each_comes_back() {
    let broker = SqsBroker::in_process();
    let recorder = broker.recorder();
    let ids = send(&broker, "refused", &postings(3)).await;
    let calls = Calls::default();
    let app = RustStream::new(AppInfo::new("ledger", "0.1.0"))
        .with_state(calls.clone())
        .with_broker(broker.clone(), |b| {
            b.include(refuse_once);
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    running.drain().await;
    running.stop().await.expect("the app ran");

    let batches = recorder.batches("refused");
    assert_eq!(batches[0].message_ids, ids, "one call of the three");
    let handled = recorder.handled("refused");
    for id in &ids {
        let settled: Vec<Settled> = handled
            .iter()
            .filter(|h| &h.message_id == id)
            .map(|h| h.settled)
            .collect();
        assert_eq!(settled, [Settled::Retried, Settled::Acked]);
    }

    // The function as written, called from a test: it returns what the body returns.
    let fresh = Calls::default();
    let returned = refuse_once::call(&postings(2), State(fresh.clone())).await;
    assert_eq!(
        returned,
        Err("the ledger is down for 2 postings".to_owned())
    );
    assert_eq!(refuse_once::call(&[], State(fresh)).await, Ok(()));
}

/// Set from configuration, say: the macro cannot see their values, the app checks them at start.
const NO_MESSAGES: usize = 0;
const TOO_LONG: Duration = Duration::from_secs(600);

#[subscriber(queue("misconfigured"), batch(max = NO_MESSAGES, window = TOO_LONG))]
async fn misconfigured(_postings: &[Posting]) {}

#[tokio::test(start_paused = true)]
async fn max_and_window_written_as_expressions_are_checked_when_the_app_starts() {
    let app = RustStream::new(AppInfo::new("ledger", "0.1.0")).with_broker(
        SqsBroker::in_process(),
        |b| {
            b.include(misconfigured);
        },
    );
    let error = app
        .run_until(std::future::pending())
        .await
        .expect_err("the batch's max and window are out of range");
    let RunError::Config(problems) = &error else {
        panic!("a setting problem, not {error}");
    };
    assert!(
        problems
            .0
            .iter()
            .any(|problem| matches!(problem, ConfigError::BatchMax { got: 0, .. })),
        "{error}"
    );
    assert!(
        problems.0.iter().any(|problem| matches!(
            problem,
            ConfigError::BatchWindow { got, .. } if *got == TOO_LONG
        )),
        "{error}"
    );
}

/// `.on(queue)` keeps the attribute's batch: the call still gets every message of the receive.
#[tokio::test(start_paused = true)]
async fn a_batch_subscriber_mounted_on_another_queue_keeps_its_batch() {
    let broker = SqsBroker::in_process();
    let recorder = broker.recorder();
    let ids = send(&broker, "postings-eu", &postings(4)).await;
    let app = RustStream::new(AppInfo::new("ledger", "0.1.0"))
        .with_state(Ledger("eu"))
        .with_broker(broker.clone(), |b| {
            b.include(post.on(queue("postings-eu")));
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    running.drain().await;
    running.stop().await.expect("the app ran");

    let calls: Vec<Vec<String>> = recorder
        .batches("postings-eu")
        .into_iter()
        .map(|batch| batch.message_ids)
        .collect();
    assert_eq!(calls, [ids]);
    assert_eq!(recorder.published("receipts").len(), 4);
}
