//! Effectively once on the embedded default: a payments service whose handler posts each payment
//! to a ledger table in SQLite inside its inbox, so copies of a payment post once, and announces
//! each posting through the outbox in the same transaction, so it is announced if and only if it
//! committed.
//!
//! Three copies of payment `pay-1` are sent (a producer that retried), and one of `pay-2`. The
//! handler posts to the ledger and writes `PaymentPosted` to the outbox, both in the inbox's
//! transaction; the inbox commits them with the payment's key, so the two extra copies of `pay-1`
//! are acked without running the handler. The app's relay sends the committed `PaymentPosted`
//! events to `payments-posted`, where a second subscriber logs each. The service then prints the
//! ledger: two postings, two announcements.
//!
//! ```sh
//! cargo run --example payments
//! ```
//!
//! It runs on the in-process broker by default, and on AWS when the environment names it
//! (`AWS_ENDPOINT_URL` for LocalStack, or `AWS_PROFILE`/`AWS_ACCESS_KEY_ID`). The ledger and the
//! inbox's keys are in `rust-stream-payments.sqlite` under the system's temporary directory,
//! created afresh each run. See `docs/exactly-once.md`.

use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::Duration;

use rust_stream::inbox::{Inbox, Key};
use rust_stream::outbox::Outbox;
use rust_stream::prelude::*;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::State;
use serde::{Deserialize, Serialize};

/// A payment to post.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Payment {
    id: String,
    account: String,
    cents: i64,
}

/// What the service publishes once a payment is posted.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct PaymentPosted {
    id: String,
    cents: i64,
}

/// The store: opened in `main`, before the app is built.
static STORE: OnceLock<SqliteStore> = OnceLock::new();

/// The inbox of `post`: keyed by the payment's own id, as copies are distinct sends.
fn inbox() -> Inbox<SqliteStore> {
    Inbox::new(STORE.get().expect("opened in main").clone()).key(Key::json_pointer("/id"))
}

/// The queue the postings are announced on.
fn posted_queue() -> SqsQueue {
    SqsQueue::new("payments-posted").create_if_missing()
}

/// Posts a payment to the ledger and announces it through the outbox, both in the inbox's
/// transaction: the posting, its announcement and the payment's key commit together.
#[subscriber(SqsQueue::new("payments").create_if_missing(), idempotent = inbox())]
async fn post(
    payment: &Payment,
    State(announcements): State<Outbox<SqliteStore>>,
    ctx: &mut Context<'_>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut transaction = ctx.transaction::<SqliteStore>().await?;
    sqlx::query("INSERT INTO ledger (payment, account, cents) VALUES (?, ?, ?)")
        .bind(&payment.id)
        .bind(&payment.account)
        .bind(payment.cents)
        .execute(&mut **transaction)
        .await?;
    let posted = PaymentPosted {
        id: payment.id.clone(),
        cents: payment.cents,
    };
    announcements
        .message(&posted)
        .send(&mut transaction)
        .await?;
    tracing::info!(payment = %payment.id, cents = payment.cents, "payment posted");
    Ok(())
}

/// What a downstream service would do with an announcement: here, log it.
#[subscriber(posted_queue())]
async fn announced(posted: &PaymentPosted) -> HandlerOutcome {
    tracing::info!(payment = %posted.id, cents = posted.cents, "posting announced");
    HandlerOutcome::ack()
}

/// Sends the payments (three copies of `pay-1`), waits until the service has handled every copy,
/// and prints the ledger.
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::temp_dir().join("rust-stream-payments.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let store = SqliteStore::open(&path).await?;
    sqlx::query(
        "CREATE TABLE ledger (payment TEXT NOT NULL, account TEXT NOT NULL, cents INTEGER NOT NULL)",
    )
    .execute(store.pool())
    .await?;
    STORE.set(store.clone()).expect("opened once");

    let broker = SqsBroker::from_env_or_in_process().await?;
    let announcements = Outbox::new(store.clone(), broker.publisher(posted_queue()));
    let app = RustStream::new(AppInfo::new("payments", "0.1.0"))
        .with_state(announcements)
        .with_broker(broker.clone(), |b| {
            b.include(post);
            b.include(announced);
            b.worker(broker.relay(store.clone()));
        });
    let readiness = app.readiness();
    let payments = broker.publisher("payments");
    let relayed = store.clone();
    let sent = async move {
        if !readiness.consuming().await {
            return;
        }
        for (id, cents) in [
            ("pay-1", 1250),
            ("pay-1", 1250),
            ("pay-1", 1250),
            ("pay-2", 990),
        ] {
            let payment = Payment {
                id: id.into(),
                account: "acct-7".into(),
                cents,
            };
            if let Err(error) = payments.message(&payment).send().await {
                tracing::error!(%error, "a payment was not sent");
                return;
            }
        }
        // Every copy handled and every announcement relayed and handled: the outbox is empty,
        // then the queues hold nothing, visible or in flight.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let waiting: Result<i64, _> =
                sqlx::query_scalar("SELECT count(*) FROM rust_stream_outbox")
                    .fetch_one(relayed.pool())
                    .await;
            if !matches!(waiting, Ok(0)) {
                continue;
            }
            let Some(Ok(queues)) = readiness.queues().await else {
                continue;
            };
            let handled = queues
                .iter()
                .filter(|load| load.consumed)
                .all(|load| load.visible + load.in_flight + load.delayed == 0);
            if handled {
                return;
            }
        }
        tracing::error!("the payments were not all handled within 60 s");
    };
    app.run_until(sent).await?;

    let ledger: Vec<(String, i64)> =
        sqlx::query_as("SELECT payment, cents FROM ledger ORDER BY rowid")
            .fetch_all(store.pool())
            .await?;
    let total: i64 = ledger.iter().map(|(_, cents)| cents).sum();
    tracing::info!(
        postings = ledger.len(),
        total_cents = total,
        ?ledger,
        "the ledger"
    );
    if ledger.len() != 2 {
        return Err(
            format!("expected 2 postings (pay-1 once, pay-2 once), found {ledger:?}").into(),
        );
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
