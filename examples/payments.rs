//! Effectively once on the embedded default: a payments service whose handler posts each payment
//! to a ledger table in SQLite inside its inbox, so copies of a payment post once.
//!
//! Three copies of payment `pay-1` are sent (a producer that retried), and one of `pay-2`. The
//! handler posts to the ledger in the inbox's transaction and publishes `PaymentPosted`; the
//! inbox commits the posting with the payment's key, so the two extra copies of `pay-1` are acked
//! without running the handler, and their recorded `PaymentPosted` is sent again as it was. The
//! service then prints the ledger: two postings.
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
use rust_stream::prelude::*;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::Output;
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

/// Posts a payment to the ledger, in the inbox's transaction.
#[subscriber(
    SqsQueue::new("payments").create_if_missing(),
    idempotent = inbox(),
    outputs(posted = SqsQueue::new("payments-posted").create_if_missing())
)]
async fn post(
    payment: &Payment,
    ctx: &mut Context<'_>,
    posted: &Output<PaymentPosted>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let mut transaction = ctx.transaction::<SqliteStore>().await?;
    sqlx::query("INSERT INTO ledger (payment, account, cents) VALUES (?, ?, ?)")
        .bind(&payment.id)
        .bind(&payment.account)
        .bind(payment.cents)
        .execute(&mut **transaction)
        .await?;
    drop(transaction);
    tracing::info!(payment = %payment.id, cents = payment.cents, "payment posted");
    ctx.publish(posted.message(&PaymentPosted {
        id: payment.id.clone(),
        cents: payment.cents,
    }));
    Ok(())
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
    let app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(broker.clone(), |b| {
        b.include(post);
    });
    let readiness = app.readiness();
    let payments = broker.publisher("payments");
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
        // Every copy handled: the payments queue holds nothing, visible or in flight.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
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
