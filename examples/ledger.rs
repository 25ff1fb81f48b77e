//! A ledger that posts in bulk: the same 600 postings, over 30 accounts of a FIFO queue (one group
//! an account), booked once by a handler of one posting a call and once by a batch handler, each
//! against its own store whose every write is one round trip (a database `INSERT`).
//!
//! The batch handler writes a whole batch in one round trip and settles each posting on its own:
//! a posting to a frozen account is dead-lettered alone, and the rest of its batch is booked. Both
//! runs end with the same balances and the same postings dead-lettered; the batch run makes far
//! fewer round trips.
//!
//! ```sh
//! cargo run --example ledger
//! ```
//!
//! It prints one line per run and exits non-zero if the balances differ or the batch handler
//! does not save at least 5× the round trips.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::handler::batch::{BatchContext, BatchOutcome, HandleBatch};
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::Subscriber;
use serde::{Deserialize, Serialize};

/// A posting: `cents` to `account`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Posting {
    id: u32,
    account: String,
    cents: i64,
}

/// The postings sent: 20 to each of 30 accounts; account `acct-13` is frozen.
const ACCOUNTS: u32 = 30;
const PER_ACCOUNT: u32 = 20;
const FROZEN: &str = "acct-13";

/// A ledger store: balances, and how many round trips were made to it. Each write is one round
/// trip of 2 ms, whatever it carries, as a database `INSERT … VALUES (..), (..)` is.
#[derive(Clone, Default)]
struct Store {
    balances: Arc<Mutex<BTreeMap<String, i64>>>,
    round_trips: Arc<AtomicUsize>,
}

impl Store {
    /// Books `postings` in one round trip; says for each whether it was booked, or why not.
    async fn insert(&self, postings: &[&Posting]) -> Vec<Result<(), String>> {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let mut balances = self.balances.lock().unwrap();
        postings
            .iter()
            .map(|posting| {
                if posting.account == FROZEN {
                    return Err(format!("account {} is frozen", posting.account));
                }
                *balances.entry(posting.account.clone()).or_default() += posting.cents;
                Ok(())
            })
            .collect()
    }
}

/// Books one posting a call: a round trip a posting.
struct PostOne(Store);

impl Handle<Posting> for PostOne {
    async fn handle(
        &self,
        posting: &Posting,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        match self.0.insert(&[posting]).await.remove(0) {
            Ok(()) => Ok(()),
            Err(refused) => Err(HandlerOutcome::dead_letter(refused)),
        }
    }
}

/// Books a batch in one round trip, and settles each posting by what the store said of it.
struct PostBatch(Store);

impl HandleBatch<Posting> for PostBatch {
    async fn handle(
        &self,
        postings: &[Posting],
        _outs: &(),
        _ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        let all: Vec<&Posting> = postings.iter().collect();
        self.0
            .insert(&all)
            .await
            .into_iter()
            .map(|booked| match booked {
                Ok(()) => HandlerOutcome::ack(),
                Err(refused) => HandlerOutcome::dead_letter(refused),
            })
            .collect()
    }
}

/// What one run came to.
struct Run {
    round_trips: usize,
    balances: BTreeMap<String, i64>,
    dead_lettered: Vec<String>,
}

/// Sends the postings, runs `subscription` over them on a fresh in-process broker until every
/// posting is booked or dead-lettered, and says what it came to.
async fn run(
    queue: &SqsQueue,
    subscription: impl FnOnce(SqsQueue) -> Subscriber,
    store: &Store,
) -> Run {
    let broker = SqsBroker::in_process();
    let recorder = broker.recorder();
    let publisher = broker.publisher(queue.clone());
    for n in 0..PER_ACCOUNT {
        for account in 0..ACCOUNTS {
            let posting = Posting {
                id: n * ACCOUNTS + account,
                account: format!("acct-{account}"),
                cents: i64::from(n + 1) * 100,
            };
            publisher
                .message(&posting)
                .group_id(&posting.account)
                .send()
                .await
                .expect("the in-process queue takes the posting");
        }
    }
    let app = RustStream::new(AppInfo::new("ledger", "0.1.0")).with_broker(broker, |b| {
        b.include(subscription(queue.clone()));
    });
    let running = TestApp::spawn(app).await.expect("the ledger starts");
    running.drain().await;
    running.stop().await.expect("the ledger stops");
    let mut dead_lettered: Vec<String> = recorder
        .dead_lettered(queue.name())
        .into_iter()
        .map(|dead| dead.reason)
        .collect();
    dead_lettered.sort();
    Run {
        round_trips: store.round_trips.load(Ordering::Relaxed),
        balances: store.balances.lock().unwrap().clone(),
        dead_lettered,
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::ERROR)
        .init();
    let queue = SqsQueue::new("ledger-postings.fifo")
        .create_if_missing()
        .dead_letter("ledger-postings-dlq.fifo", 3);

    let one_store = Store::default();
    let one = run(
        &queue,
        |queue| {
            subscriber(queue, PostOne(one_store.clone()))
                .concurrency(10)
                .build()
        },
        &one_store,
    )
    .await;
    println!(
        "one posting a call: {} round trips, {} postings dead-lettered",
        one.round_trips,
        one.dead_lettered.len()
    );

    let batch_store = Store::default();
    let batch = run(
        &queue,
        |queue| {
            subscriber(queue, PostBatch(batch_store.clone()))
                .concurrency(2)
                .batch(50, Duration::from_millis(50))
                .build()
        },
        &batch_store,
    )
    .await;
    println!(
        "a batch a call: {} round trips, {} postings dead-lettered",
        batch.round_trips,
        batch.dead_lettered.len()
    );

    let same = one.balances == batch.balances && one.dead_lettered == batch.dead_lettered;
    let saved = one.round_trips as f64 / batch.round_trips.max(1) as f64;
    println!(
        "same balances and dead letters: {same}; the batch handler made {saved:.1}x fewer round trips"
    );
    if same && saved >= 5.0 && one.dead_lettered.len() == PER_ACCOUNT as usize {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
