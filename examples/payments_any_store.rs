//! One handler for SQLite locally and PostgreSQL in production, picked by configuration: a
//! payments service whose handler posts each payment to a ledger table inside its inbox, written
//! once, generic over `rust_stream::store::SqlStore`.
//!
//! The service's own statement sits behind its `Ledger` trait, with one impl per store (the same
//! SQL: SQLite reads PostgreSQL's `$1`); the handler and the app are generic over `S: Ledger`, and
//! `main` opens `PostgresStore` when `DATABASE_URL` names a server, else a `SqliteStore` file.
//! Three copies of `pay-1` and one `pay-2` post twice in all.
//!
//! ```sh
//! cargo run --example payments_any_store
//! DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo run --example payments_any_store
//! ```
//!
//! It runs on the in-process broker by default, and on AWS when the environment names it
//! (`AWS_ENDPOINT_URL` for LocalStack). The SQLite file is `rust-stream-payments-any.sqlite` under
//! the system's temporary directory, created afresh each run; on PostgreSQL the example keeps to
//! a schema of its own, dropped at the end. See `docs/exactly-once.md`, "SQLite locally,
//! PostgreSQL in production".

use std::future::Future;
use std::marker::PhantomData;
use std::process::ExitCode;
use std::time::Duration;

use rust_stream::inbox::{Inbox, Key};
use rust_stream::prelude::*;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::store::SqlStore;
use serde::{Deserialize, Serialize};

/// A payment to post.
#[derive(Debug, Serialize, Deserialize)]
struct Payment {
    id: String,
    cents: i64,
}

/// The service's own statements, on either database.
trait Ledger: SqlStore {
    /// Posts `payment` in `transaction`, the inbox's.
    fn post(
        transaction: &mut sqlx::Transaction<'static, Self::Database>,
        payment: &Payment,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Creates the ledger table and reads the postings back: the same SQL on both.
    fn postings(&self) -> impl Future<Output = Result<Vec<(String, i64)>, sqlx::Error>> + Send;
}

macro_rules! ledger_on {
    ($($store:ty),*) => {$(
        impl Ledger for $store {
            async fn post(
                transaction: &mut sqlx::Transaction<'static, Self::Database>,
                payment: &Payment,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("INSERT INTO ledger (payment, cents) VALUES ($1, $2)")
                    .bind(&payment.id)
                    .bind(payment.cents)
                    .execute(&mut **transaction)
                    .await?;
                Ok(())
            }

            async fn postings(&self) -> Result<Vec<(String, i64)>, sqlx::Error> {
                sqlx::query_as("SELECT payment, cents FROM ledger ORDER BY payment")
                    .fetch_all(self.pool())
                    .await
            }
        }
    )*};
}

ledger_on!(SqliteStore, PostgresStore);

/// Posts a payment to the ledger in the inbox's transaction: one handler for both stores.
struct Post<S>(PhantomData<S>);

impl<S: Ledger> Handle<Payment> for Post<S> {
    async fn handle(
        &self,
        payment: &Payment,
        _: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let mut transaction = ctx
            .transaction::<S>()
            .await
            .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
        S::post(&mut transaction, payment)
            .await
            .map_err(HandlerOutcome::failed)?;
        tracing::info!(payment.id, payment.cents, "payment posted");
        Ok(())
    }
}

/// Runs the service on `store` until the payments sent are handled, and prints the ledger.
async fn run_on<S: Ledger>(store: S) -> Result<(), Box<dyn std::error::Error>> {
    let broker = SqsBroker::from_env_or_in_process().await?;
    let queue = SqsQueue::new("payments-any-store").create_if_missing();
    let payments = subscriber(queue.clone(), Post::<S>(PhantomData))
        .idempotent(Inbox::new(store.clone()).key(Key::json_pointer("/id")))
        .build();
    let app = RustStream::new(AppInfo::new("payments", "0.1.0")).with_broker(broker.clone(), |b| {
        b.include(payments);
    });
    let readiness = app.readiness();
    let publisher = broker.publisher(queue);
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
                cents,
            };
            if let Err(error) = publisher.message(&payment).send().await {
                tracing::error!(%error, "a payment was not sent");
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Some(Ok(queues)) = readiness.queues().await else {
                continue;
            };
            if queues
                .iter()
                .filter(|load| load.consumed)
                .all(|load| load.visible + load.in_flight + load.delayed == 0)
            {
                return;
            }
        }
        tracing::error!("the payments were not all handled within 60 s");
    };
    app.run_until(sent).await?;
    let ledger = store.postings().await?;
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

const LEDGER: &str = "CREATE TABLE ledger (payment TEXT NOT NULL, cents BIGINT NOT NULL)";

/// SQLite locally, PostgreSQL where `DATABASE_URL` names one.
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    match std::env::var("DATABASE_URL") {
        Ok(url) => {
            // A schema of this run's own, so that runs on one server keep apart.
            let schema = format!("payments_any_{}", std::process::id());
            let admin = sqlx::PgPool::connect(&url).await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
                .execute(&admin)
                .await?;
            let options = url
                .parse::<sqlx::postgres::PgConnectOptions>()?
                .options([("search_path", schema.as_str())]);
            let pool = sqlx::postgres::PgPoolOptions::new()
                .test_before_acquire(false)
                .connect_with(options)
                .await?;
            sqlx::query(LEDGER).execute(&pool).await?;
            tracing::info!(%schema, "on PostgreSQL");
            let ran = run_on(PostgresStore::new(pool).await?).await;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
                .execute(&admin)
                .await?;
            ran
        }
        Err(_) => {
            let path = std::env::temp_dir().join("rust-stream-payments-any.sqlite");
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
            }
            let store = SqliteStore::open(&path).await?;
            sqlx::query(LEDGER).execute(store.pool()).await?;
            tracing::info!(path = %path.display(), "on SQLite");
            run_on(store).await
        }
    }
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
