//! The inbox on its database stores inside `on_each_backend`, both legs (issue 41, item 5): the
//! in-process leg on a paused clock, where every store call used to fail with `PoolTimedOut` (the
//! clock jumped to sqlx's acquire timeout while the database answered), and the live leg on
//! LocalStack. Three copies of one payment (three sends SQS stores as three messages) and a
//! second payment make two ledger rows, written in the inbox's transaction: on SQLite (a file of
//! the leg's own) and on PostgreSQL (a schema of the leg's own, at `RUST_STREAM_POSTGRES_URL`;
//! skipped, loudly, when it is unset, and failing under `CI=true`). One handler serves both,
//! generic over `SqlStore`, as `docs/exactly-once.md` says to write it.

mod common;

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use common::stores::{postgres_schema, TempFile};
use rust_stream::inbox::{Inbox, Key};
use rust_stream::outbox::{Outbox, OutboxError};
use rust_stream::prelude::*;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::store::{InboxStore, SqlStore};
use rust_stream::testing::{hold_the_clock, on_each_backend, Backend, TestApp};
use sqlx::postgres::PgPoolOptions;

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
    cents: i64,
}

/// The service's own writes, on any SQL store: the documented way to write a handler once for
/// SQLite and PostgreSQL (`docs/exactly-once.md`).
trait Ledger: SqlStore {
    /// Posts a payment in `transaction`, the inbox's.
    fn post(
        transaction: &mut sqlx::Transaction<'static, Self::Database>,
        payment: &Payment,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// One impl per store, the same SQL: SQLite reads PostgreSQL's `$1` placeholders.
macro_rules! ledger_on {
    ($($store:ty),*) => {$(
        impl Ledger for $store {
            async fn post(
                transaction: &mut sqlx::Transaction<'static, Self::Database>,
                payment: &Payment,
            ) -> Result<(), sqlx::Error> {
                sqlx::query("INSERT INTO ledger (id, cents) VALUES ($1, $2)")
                    .bind(&payment.id)
                    .bind(payment.cents)
                    .execute(&mut **transaction)
                    .await?;
                Ok(())
            }
        }
    )*};
}

ledger_on!(SqliteStore, PostgresStore);

/// Posts a payment to the ledger, in the inbox's transaction: one handler for both stores.
struct Post<S>(PhantomData<S>);

impl<S> Clone for Post<S> {
    fn clone(&self) -> Self {
        Self(PhantomData)
    }
}

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
            .map_err(HandlerOutcome::failed)
    }
}

/// The outbox writes in the inbox's transaction on any [`SqlStore`], as the guide says: a check
/// that this compiles (`tests/outbox.rs` runs the outbox on each store).
#[allow(dead_code)]
async fn announce<S: SqlStore>(
    outbox: &Outbox<S>,
    transaction: &mut rust_stream::inbox::Transaction<<S as InboxStore>::Transaction>,
    payment: &str,
) -> Result<(), OutboxError> {
    outbox.message(payment).send(&mut ***transaction).await
}

/// Runs the payments service with the inbox on `store`, sends `pay-1` three times and `pay-2`
/// once, and waits until the queue is drained.
async fn three_copies_and_one<S: InboxStore, H: Handle<Payment> + Clone>(
    backend: &Backend,
    store: S,
    post: H,
) {
    let payments = SqsQueue::new(backend.queue_name("payments"))
        .create_if_missing()
        .visibility_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(20));
    let subscription = subscriber(payments.clone(), post)
        .idempotent(Inbox::new(store).key(Key::json_pointer("/id")))
        .build();
    let app =
        RustStream::new(AppInfo::new("payments", "0")).with_broker(backend.broker().clone(), |b| {
            b.include(subscription);
        });
    let running = TestApp::spawn(app).await.expect("the app starts");
    let publisher = backend.broker().publisher(payments);
    for body in [
        r#"{"id":"pay-1","cents":120}"#,
        r#"{"id":"pay-1","cents":120}"#,
        r#"{"id":"pay-2","cents":80}"#,
        r#"{"id":"pay-1","cents":120}"#,
    ] {
        publisher.raw(body).send().await.unwrap();
    }
    running.drain().await;
    running.stop().await.unwrap();
}

/// The leg's name as a schema's or file's: `in_process`, `live`.
fn leg(backend: &Backend) -> String {
    backend.kind().name().replace('-', "_")
}

const LEDGER: &str = "CREATE TABLE ledger (id TEXT PRIMARY KEY, cents BIGINT NOT NULL)";
const POSTED: &str = "SELECT id, cents FROM ledger ORDER BY id";

fn posted_once() -> Vec<(String, i64)> {
    vec![("pay-1".to_owned(), 120), ("pay-2".to_owned(), 80)]
}

#[test]
fn the_inbox_on_sqlite_posts_each_payment_once_on_each_backend() {
    on_each_backend(async |backend| {
        let file = TempFile::new("inbox_backends", &leg(&backend));
        let store = SqliteStore::open(&file.0).await.expect("the store opens");
        hold_the_clock(sqlx::query(LEDGER).execute(store.pool()))
            .await
            .unwrap();
        three_copies_and_one(&backend, store.clone(), Post::<SqliteStore>(PhantomData)).await;
        let posted: Vec<(String, i64)> =
            hold_the_clock(sqlx::query_as(POSTED).fetch_all(store.pool()))
                .await
                .unwrap();
        assert_eq!(
            posted,
            posted_once(),
            "on the {} leg",
            backend.kind().name()
        );
    });
}

#[test]
fn the_inbox_on_postgres_posts_each_payment_once_on_each_backend() {
    on_each_backend(async |backend| {
        let Some((options, schema)) =
            hold_the_clock(postgres_schema("inbox_backends", &leg(&backend))).await
        else {
            return;
        };
        // A lazy pool, so that the store's own migration opens the first connection.
        let pool = PgPoolOptions::new()
            .test_before_acquire(false)
            .connect_lazy_with(options);
        let store = PostgresStore::new(pool).await.expect("the store migrates");
        hold_the_clock(sqlx::query(LEDGER).execute(store.pool()))
            .await
            .unwrap();
        three_copies_and_one(&backend, store.clone(), Post::<PostgresStore>(PhantomData)).await;
        let posted: Vec<(String, i64)> =
            hold_the_clock(sqlx::query_as(POSTED).fetch_all(store.pool()))
                .await
                .unwrap();
        assert_eq!(
            posted,
            posted_once(),
            "on the {} leg",
            backend.kind().name()
        );
        hold_the_clock(schema.drop_it()).await;
    });
}
