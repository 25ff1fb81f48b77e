//! The outbox (issue 23, item 3) on both SQS backends, with each store: the in-process store,
//! SQLite and PostgreSQL. These tests produce the failures the outbox exists for:
//!
//! - transactions that commit and transactions that roll back, interleaved: every committed
//!   event is delivered, no rolled-back one is, each account's events in commit order, none twice;
//! - on PostgreSQL, writers of one account racing each other: delivery order is commit order (the
//!   ledger's sequence, taken after the outbox's write), and two relays at once send no row twice;
//! - a relay that sent its rows and died before deleting them (its `finish` fails): the next
//!   round sends them again with the same deduplication ids, and the FIFO queue stores them once;
//!   on a standard queue the consumer's inbox takes the copies' idempotency key and acks them
//!   without running;
//! - a destination that does not exist yet: the rows stay, the app is not ready, and once the
//!   queue is there they go, in order;
//! - a handler that posts in the inbox's transaction and writes its event to the outbox there;
//! - a message its destination would refuse is refused at the write, before anything is written.

mod common;

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::inbox::{Inbox, Key};
use rust_stream::outbox::{Outbox, OutboxError, Relay};
use rust_stream::prelude::*;
use rust_stream::store::memory::MemoryStore;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::store::{Cancellation, Leased, NewOutboxRow, OutboxStore, StoreError};
use rust_stream::testing::{
    eventually, eventually_within, on_each_backend, on_each_backend_in_real_time, Backend, TestApp,
};
use rust_stream::transport::ReceivedMessage;
use rust_stream::IDEMPOTENCY_KEY_HEADER;
use rust_stream::{Publisher, Subscriber};
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Event {
    id: String,
    account: String,
}

/// How long a test waits for the relay: long enough for LocalStack under load.
const PATIENCE: Duration = Duration::from_secs(60);

/// A store to run the outbox on, and how a transaction of the service's own writes to it.
trait Fixture: Send + Sync + 'static {
    type Store: OutboxStore;

    fn store(&self) -> Self::Store;

    /// One transaction that writes `events` to `outbox`, then commits or rolls back.
    async fn transact(&self, outbox: &Outbox<Self::Store>, events: &[Event], commit: bool);

    /// How many rows wait in the outbox.
    async fn waiting(&self) -> usize;
}

struct Memory(MemoryStore);

impl Fixture for Memory {
    type Store = MemoryStore;

    fn store(&self) -> MemoryStore {
        self.0.clone()
    }

    async fn transact(&self, outbox: &Outbox<MemoryStore>, events: &[Event], commit: bool) {
        let mut transaction = self.0.begin();
        for event in events {
            send(outbox, event, &mut transaction).await;
        }
        if commit {
            self.0.commit(transaction);
        }
    }

    async fn waiting(&self) -> usize {
        self.0.outbox_rows().len()
    }
}

/// The fixture of a database store: its pool's transaction writes the events, its table counts
/// what waits. One body for both stores, whose pools differ in type only.
macro_rules! database_fixture {
    ($fixture:ident, $store:ty) => {
        impl Fixture for $fixture {
            type Store = $store;

            fn store(&self) -> $store {
                self.store.clone()
            }

            async fn transact(&self, outbox: &Outbox<$store>, events: &[Event], commit: bool) {
                let mut transaction = self.store.pool().begin().await.unwrap();
                for event in events {
                    send(outbox, event, &mut transaction).await;
                }
                if commit {
                    transaction.commit().await.unwrap();
                } else {
                    transaction.rollback().await.unwrap();
                }
            }

            async fn waiting(&self) -> usize {
                let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM rust_stream_outbox")
                    .fetch_one(self.store.pool())
                    .await
                    .unwrap();
                rows as usize
            }
        }
    };
}

struct Sqlite {
    store: SqliteStore,
    path: std::path::PathBuf,
}

impl Drop for Sqlite {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.path.display()));
        }
    }
}

async fn sqlite() -> Sqlite {
    let path = std::env::temp_dir().join(format!(
        "rust-stream-outbox-{}-{:08x}.db",
        std::process::id(),
        fastrand::u32(..)
    ));
    Sqlite {
        store: SqliteStore::open(&path).await.unwrap(),
        path,
    }
}

database_fixture!(Sqlite, SqliteStore);

struct Postgres {
    store: PostgresStore,
}

/// A PostgreSQL store in a schema of its own (the server is shared by tests running at once),
/// or `None` (skipped, failing under CI) without a server.
async fn postgres(case: &str) -> Option<Postgres> {
    let url = rust_stream::testing::live_postgres_url("an outbox test on PostgreSQL")?;
    let admin = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let schema = format!("outbox_{:.40}_{:08x}", case, fastrand::u32(..));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await
        .unwrap();
    let options = PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let pool = PgPoolOptions::new()
        .max_connections(12)
        .connect_with(options)
        .await
        .unwrap();
    Some(Postgres {
        store: PostgresStore::new(pool).await.unwrap(),
    })
}

database_fixture!(Postgres, PostgresStore);

/// Writes `event` to `outbox`, in its account's group, through `connection`.
async fn send<S: OutboxStore>(outbox: &Outbox<S>, event: &Event, connection: &mut S::Connection) {
    outbox
        .message(event)
        .group_id(&event.account)
        .send(connection)
        .await
        .expect("the event is written");
}

/// The FIFO queue the events go to.
fn posted(backend: &Backend) -> SqsQueue {
    SqsQueue::new(backend.queue_name("posted.fifo")).create_if_missing()
}

/// An app that runs only `relay`, and the outbox's publisher declared on its broker.
async fn relaying<S: OutboxStore>(backend: &Backend, relay: Relay<S>) -> TestApp {
    let app =
        RustStream::new(AppInfo::new("outbox", "0")).with_broker(backend.broker().clone(), |b| {
            b.worker(relay);
        });
    TestApp::spawn(app).await.expect("the app starts")
}

/// The events the messages carry, each account's in the order stored.
fn events_of(messages: &[ReceivedMessage]) -> Vec<Event> {
    messages
        .iter()
        .map(|message| serde_json::from_str(&message.body).expect("an event"))
        .collect()
}

fn by_account(events: &[Event]) -> HashMap<String, Vec<String>> {
    let mut accounts: HashMap<String, Vec<String>> = HashMap::new();
    for event in events {
        accounts
            .entry(event.account.clone())
            .or_default()
            .push(event.id.clone());
    }
    accounts
}

/// 60 transactions of 1–3 events over 5 accounts, every fifth rolled back: what commits is
/// delivered once, each account in commit order, and nothing rolled back is.
async fn committed_events_are_delivered_in_commit_order_and_rolled_back_ones_never<F: Fixture>(
    backend: &Backend,
    fixture: F,
) {
    let queue = posted(backend);
    let outbox = Outbox::new(fixture.store(), backend.broker().publisher(queue.clone()));
    let running = relaying(backend, backend.broker().relay(fixture.store())).await;
    let mut committed = Vec::new();
    for transaction in 0..60 {
        let events: Vec<Event> = (0..1 + transaction % 3)
            .map(|n| Event {
                id: format!("t{transaction}-e{n}"),
                account: format!("account-{}", (transaction + n) % 5),
            })
            .collect();
        let commit = transaction % 5 != 4;
        fixture.transact(&outbox, &events, commit).await;
        if commit {
            committed.extend(events);
        }
    }
    eventually_within("the outbox is relayed", PATIENCE, async || {
        fixture.waiting().await == 0
    })
    .await;
    running.stop().await.unwrap();

    let delivered = events_of(&common::taken_from(backend, queue.name()).await);
    assert_eq!(delivered.len(), committed.len(), "{delivered:?}");
    assert_eq!(
        by_account(&delivered),
        by_account(&committed),
        "each account's events, in commit order, none rolled back, none twice"
    );
}

#[test]
fn committed_events_are_delivered_in_commit_order_from_the_memory_store() {
    on_each_backend(async |backend| {
        committed_events_are_delivered_in_commit_order_and_rolled_back_ones_never(
            &backend,
            Memory(MemoryStore::new()),
        )
        .await;
    });
}

#[test]
fn committed_events_are_delivered_in_commit_order_from_sqlite() {
    on_each_backend_in_real_time(async |backend| {
        committed_events_are_delivered_in_commit_order_and_rolled_back_ones_never(
            &backend,
            sqlite().await,
        )
        .await;
    });
}

#[test]
fn committed_events_are_delivered_in_commit_order_from_postgres() {
    on_each_backend_in_real_time(async |backend| {
        let Some(fixture) = postgres("commit_order").await else {
            return;
        };
        committed_events_are_delivered_in_commit_order_and_rolled_back_ones_never(
            &backend, fixture,
        )
        .await;
    });
}

/// Writers of the same accounts racing each other on PostgreSQL, each transaction taking its
/// account's next ledger sequence *after* its outbox write, so the ledger's sequence is the
/// order the account's transactions committed in; two relays at once. Delivered: each account
/// in ledger order, every committed event once, no rolled-back one.
#[test]
fn racing_writers_and_two_relays_on_postgres_keep_commit_order() {
    on_each_backend_in_real_time(async |backend| {
        let Some(fixture) = postgres("racing").await else {
            return;
        };
        let store = fixture.store();
        sqlx::query(
            "CREATE TABLE ledger (account text, seq bigint, event text, PRIMARY KEY (account, seq))",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let queue = posted(&backend);
        let outbox = Outbox::new(store.clone(), backend.broker().publisher(queue.clone()));
        let first = relaying(
            &backend,
            backend.broker().relay(store.clone()).batch_size(20),
        )
        .await;
        let second = relaying(
            &backend,
            backend.broker().relay(store.clone()).batch_size(20),
        )
        .await;
        let writers: Vec<_> = (0..6)
            .map(|writer| {
                let (store, outbox) = (store.clone(), outbox.clone());
                tokio::spawn(async move {
                    for n in 0..25 {
                        let event = Event {
                            id: format!("w{writer}-{n}"),
                            account: format!("account-{}", (writer + n) % 3),
                        };
                        let mut transaction = store.pool().begin().await.unwrap();
                        send(&outbox, &event, &mut transaction).await;
                        // Taken after the outbox's write: it waits for the account's earlier
                        // transaction to commit only if the outbox serializes the group.
                        sqlx::query(
                            "INSERT INTO ledger (account, seq, event)
                             SELECT $1, coalesce(max(seq), 0) + 1, $2 FROM ledger WHERE account = $1",
                        )
                        .bind(&event.account)
                        .bind(&event.id)
                        .execute(&mut *transaction)
                        .await
                        .expect("the ledger takes the account's next sequence");
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..5))).await;
                        if n % 7 == 3 {
                            transaction.rollback().await.unwrap();
                        } else {
                            transaction.commit().await.unwrap();
                        }
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.await.unwrap();
        }
        eventually_within("the outbox is relayed", PATIENCE, async || {
            fixture.waiting().await == 0
        })
        .await;
        first.stop().await.unwrap();
        second.stop().await.unwrap();

        let ledger: Vec<(String, String)> =
            sqlx::query_as("SELECT account, event FROM ledger ORDER BY account, seq")
                .fetch_all(store.pool())
                .await
                .unwrap();
        let mut expected: HashMap<String, Vec<String>> = HashMap::new();
        for (account, event) in ledger {
            expected.entry(account).or_default().push(event);
        }
        let delivered = events_of(&common::taken_from(&backend, queue.name()).await);
        assert_eq!(
            by_account(&delivered),
            expected,
            "each account in commit order, each committed event once"
        );
    });
}

/// A store whose first `finish` fails after the rows were sent: a relay that died between its
/// sends and its delete.
#[derive(Clone)]
struct FirstFinishFails {
    inner: MemoryStore,
    failed: Arc<AtomicU32>,
}

impl OutboxStore for FirstFinishFails {
    type Connection = <MemoryStore as OutboxStore>::Connection;
    type Lease = <MemoryStore as OutboxStore>::Lease;

    async fn write(
        &self,
        connection: &mut Self::Connection,
        row: NewOutboxRow<'_>,
    ) -> Result<(), StoreError> {
        self.inner.write(connection, row).await
    }

    async fn lease(
        &self,
        limit: u32,
        lease_timeout: Duration,
    ) -> Result<Option<Leased<Self::Lease>>, StoreError> {
        self.inner.lease(limit, lease_timeout).await
    }

    async fn finish(&self, lease: Self::Lease, sent: &[i64]) -> Result<(), StoreError> {
        if !sent.is_empty() && self.failed.fetch_add(1, Ordering::SeqCst) == 0 {
            // The lease goes with the dead relay; its rows stay.
            drop(lease);
            return Err(StoreError::NewerSchema {
                found: 0,
                supported: 0,
            });
        }
        self.inner.finish(lease, sent).await
    }

    async fn cancel(
        &self,
        connection: &mut Self::Connection,
        destination: &str,
        key: &str,
    ) -> Result<Cancellation, StoreError> {
        self.inner.cancel(connection, destination, key).await
    }

    fn commits(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.inner.commits()
    }
}

#[test]
fn rows_sent_again_after_a_failed_delete_are_stored_once_on_fifo() {
    on_each_backend(async |backend| {
        let store = FirstFinishFails {
            inner: MemoryStore::new(),
            failed: Arc::default(),
        };
        let queue = posted(&backend);
        let outbox = Outbox::new(store.clone(), backend.broker().publisher(queue.clone()));
        let mut transaction = store.inner.begin();
        for n in 0..12 {
            let event = Event {
                id: format!("e{n}"),
                account: format!("account-{}", n % 2),
            };
            send(&outbox, &event, &mut transaction).await;
        }
        store.inner.commit(transaction);
        let running = relaying(&backend, backend.broker().relay(store.clone())).await;
        eventually_within("the outbox is relayed", PATIENCE, async || {
            store.inner.outbox_rows().is_empty()
        })
        .await;
        running.stop().await.unwrap();

        assert!(
            store.failed.load(Ordering::SeqCst) >= 2,
            "the rows were sent twice"
        );
        let delivered = common::taken_from(&backend, queue.name()).await;
        assert_eq!(
            delivered.len(),
            12,
            "each stored once: {:?}",
            bodies(&delivered)
        );
        let keys: std::collections::HashSet<_> = delivered
            .iter()
            .map(|message| header(message, IDEMPOTENCY_KEY_HEADER))
            .collect();
        assert_eq!(keys.len(), 12, "each row has a key of its own");
    });
}

fn bodies(messages: &[ReceivedMessage]) -> Vec<&str> {
    messages
        .iter()
        .map(|message| message.body.as_str())
        .collect()
}

fn header(message: &ReceivedMessage, name: &str) -> String {
    message
        .message_attributes
        .get(name)
        .and_then(|value| value.string_value.clone())
        .unwrap_or_else(|| panic!("the message has no `{name}` header: {message:?}"))
}

/// Counts each event it handles, in the inbox's transaction.
#[derive(Clone, Default)]
struct Count(Arc<Mutex<Vec<String>>>);

impl Handle<Event> for Count {
    async fn handle(
        &self,
        event: &Event,
        _: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let mut transaction = ctx
            .transaction::<MemoryStore>()
            .await
            .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
        let (seen, id) = (self.0.clone(), event.id.clone());
        transaction.on_commit(move || seen.lock().unwrap().push(id));
        Ok(())
    }
}

/// On a standard queue a resent row is a second message; the consumer's inbox, keyed by the
/// row's idempotency key (`Key::Delivered` reads it first), acks it without running.
#[test]
fn rows_sent_again_to_a_standard_queue_run_the_consumer_once_through_its_inbox() {
    on_each_backend(async |backend| {
        let store = FirstFinishFails {
            inner: MemoryStore::new(),
            failed: Arc::default(),
        };
        let events = SqsQueue::new(backend.queue_name("events"))
            .create_if_missing()
            .wait(Duration::from_secs(1));
        let outbox = Outbox::new(store.clone(), backend.broker().publisher(events.clone()));
        let mut transaction = store.inner.begin();
        for n in 0..5 {
            let event = Event {
                id: format!("e{n}"),
                account: "account-1".into(),
            };
            outbox.message(&event).send(&mut transaction).await.unwrap();
        }
        store.inner.commit(transaction);
        let count = Count::default();
        let consumer: Subscriber = subscriber(events.clone(), count.clone())
            .idempotent(Inbox::new(MemoryStore::new()).key(Key::Delivered))
            .build();
        let app = RustStream::new(AppInfo::new("outbox", "0")).with_broker(
            backend.broker().clone(),
            |b| {
                b.include(consumer);
                b.worker(backend.broker().relay(store.clone()));
            },
        );
        let running = TestApp::spawn(app).await.unwrap();
        eventually_within("the outbox is relayed", PATIENCE, async || {
            store.inner.outbox_rows().is_empty()
        })
        .await;
        running.drain().await;
        running.stop().await.unwrap();

        assert!(
            store.failed.load(Ordering::SeqCst) >= 2,
            "the rows were sent twice"
        );
        let mut seen = count.0.lock().unwrap().clone();
        seen.sort();
        assert_eq!(
            seen,
            ["e0", "e1", "e2", "e3", "e4"],
            "each event handled once"
        );
    });
}

/// A destination that does not exist: the rows stay and the app is not ready (its relay's
/// oldest row is past `unready_after`); once the queue exists they go, in order.
#[test]
fn rows_for_a_missing_queue_wait_until_it_exists_and_then_go_in_order() {
    on_each_backend(async |backend| {
        let store = MemoryStore::new();
        let name = backend.queue_name("later.fifo");
        // Not `create_if_missing`: the relay's sends fail until the test creates it.
        let outbox = Outbox::new(store.clone(), Publisher::new(SqsQueue::new(name.clone())));
        let mut transaction = store.begin();
        for n in 0..4 {
            let event = Event {
                id: format!("e{n}"),
                account: "account-1".into(),
            };
            send(&outbox, &event, &mut transaction).await;
        }
        store.commit(transaction);
        let relay = backend
            .broker()
            .relay(store.clone())
            .poll_interval(Duration::from_millis(200))
            .unready_after(Duration::from_millis(500));
        let app = RustStream::new(AppInfo::new("outbox", "0")).with_broker(
            backend.broker().clone(),
            |b| {
                b.worker(relay);
            },
        );
        let health = app.health();
        let running = TestApp::spawn(app).await.unwrap();
        eventually_within("the relay reports the stuck rows", PATIENCE, async || {
            let report = health.report();
            let worker = &report.workers[0];
            !worker.ready && worker.status.contains("4 rows waiting")
        })
        .await;
        assert!(
            !health.is_ready(),
            "an outbox that cannot drain is not ready"
        );
        assert_eq!(store.outbox_rows().len(), 4, "nothing is dropped");

        create_fifo_queue(&backend, &name).await;
        eventually_within("the outbox is relayed", PATIENCE, async || {
            store.outbox_rows().is_empty()
        })
        .await;
        eventually("the app is ready again", async || health.is_ready()).await;
        running.stop().await.unwrap();

        let delivered = events_of(&common::taken_from(&backend, &name).await);
        let ids: Vec<_> = delivered.iter().map(|event| event.id.as_str()).collect();
        assert_eq!(ids, ["e0", "e1", "e2", "e3"]);
    });
}

async fn create_fifo_queue(backend: &Backend, name: &str) {
    let attributes = common::attributes(&[("FifoQueue", "true")]);
    match (backend.account(), backend.endpoint()) {
        (Some(account), _) => {
            account.create_queue(name, attributes).await.unwrap();
        }
        (None, Some(endpoint)) => {
            use rust_stream::transport::Transport;
            rust_stream::aws::AwsTransport::local(endpoint, "us-east-1")
                .create_queue(name, attributes)
                .await
                .unwrap();
        }
        (None, None) => unreachable!(),
    }
}

/// Posts each payment in the inbox's transaction and writes its `Event` to the outbox in the
/// same transaction: both or neither.
#[derive(Clone)]
struct PostAndAnnounce {
    outbox: Outbox<MemoryStore>,
    ledger: Arc<Mutex<Vec<String>>>,
}

impl Handle<Event> for PostAndAnnounce {
    async fn handle(
        &self,
        payment: &Event,
        _: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let mut transaction = ctx
            .transaction::<MemoryStore>()
            .await
            .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
        let (ledger, id) = (self.ledger.clone(), payment.id.clone());
        transaction.on_commit(move || ledger.lock().unwrap().push(id));
        let announced = Event {
            id: format!("posted-{}", payment.id),
            account: payment.account.clone(),
        };
        self.outbox
            .message(&announced)
            .group_id(&payment.account)
            .send(&mut transaction)
            .await
            .map_err(|error| HandlerOutcome::failed(error.to_string()))?;
        if ctx.attempt() == 1 && payment.id == "p1" {
            // The bank timed out after the posting: the transaction rolls back, the outbox row too.
            return Err(HandlerOutcome::failed("the bank timed out"));
        }
        Ok(())
    }
}

#[test]
fn a_handler_writes_its_event_to_the_outbox_in_the_inbox_transaction() {
    on_each_backend(async |backend| {
        let store = MemoryStore::new();
        let queue = posted(&backend);
        let payments = SqsQueue::new(backend.queue_name("payments.fifo"))
            .create_if_missing()
            .retry(rust_stream::RetryPolicy::fixed(Duration::from_millis(500)))
            .wait(Duration::from_secs(1));
        let handler = PostAndAnnounce {
            outbox: Outbox::new(store.clone(), backend.broker().publisher(queue.clone())),
            ledger: Arc::default(),
        };
        let consumer: Subscriber = subscriber(payments.clone(), handler.clone())
            .idempotent(Inbox::new(store.clone()).key(Key::json_pointer("/id")))
            .build();
        let app = RustStream::new(AppInfo::new("payments", "0")).with_broker(
            backend.broker().clone(),
            |b| {
                b.include(consumer);
                b.worker(backend.broker().relay(store.clone()));
            },
        );
        let running = TestApp::spawn(app).await.unwrap();
        let publisher = backend.broker().publisher(payments.clone());
        for id in ["p0", "p1", "p2"] {
            let payment = Event {
                id: id.into(),
                account: "account-1".into(),
            };
            publisher
                .message(&payment)
                .group_id("account-1")
                .dedup_id(id)
                .send()
                .await
                .unwrap();
        }
        running.drain().await;
        eventually_within("the outbox is relayed", PATIENCE, async || {
            store.outbox_rows().is_empty()
        })
        .await;
        running.stop().await.unwrap();

        assert_eq!(*handler.ledger.lock().unwrap(), ["p0", "p1", "p2"]);
        let delivered = events_of(&common::taken_from(&backend, queue.name()).await);
        let ids: Vec<_> = delivered.iter().map(|event| event.id.as_str()).collect();
        assert_eq!(
            ids,
            ["posted-p0", "posted-p1", "posted-p2"],
            "the failed attempt's event was rolled back with its posting"
        );
    });
}

#[tokio::test]
async fn a_message_its_destination_would_refuse_is_refused_before_anything_is_written() {
    let store = MemoryStore::new();
    let outbox = Outbox::new(store.clone(), Publisher::new("events"));
    let mut transaction = store.begin();
    let error = outbox
        .raw("x".repeat(1024 * 1024 + 1))
        .send(&mut transaction)
        .await
        .unwrap_err();
    assert!(matches!(error, OutboxError::Publish(_)), "{error}");
    assert!(
        error.to_string().contains("events"),
        "names the queue: {error}"
    );
    let mut headers = outbox.raw("{}");
    for n in 0..10 {
        headers = headers.header(format!("h{n}"), "v");
    }
    // Ten headers of its own leave no room for the row's idempotency key.
    let error = headers.send(&mut transaction).await.unwrap_err();
    assert!(matches!(error, OutboxError::Publish(_)), "{error}");
    store.commit(transaction);
    assert!(store.outbox_rows().is_empty(), "nothing was written");
}

// ---------------------------------------------------------------------------------------------
// Issue 34 (review 2026-12-06, N3/R2): a round's rows of one group are one submission of more
// than 10, two calls on one in-order shard. Through an outage that outlasts the first call's 20 s
// of retries but not the second's, the second call's rows used to be stored ahead of the first's.

/// The stored order of 15 rows of one group, each committed in its own transaction, relayed
/// through an outage of `length` that starts with the relay's first send.
async fn relayed_through_an_outage(length: Duration) -> Vec<u32> {
    use common::fifo_sends::{stored, SendFaults};
    use rust_stream::account::Account;
    use rust_stream::transport::layer::Hooked;

    #[derive(Serialize, Deserialize)]
    struct Row {
        n: u32,
    }
    let account = Account::new();
    let faults = SendFaults::of("events.fifo");
    let broker = SqsBroker::with_transport(Hooked::new(account.clone(), faults.clone()));
    let store = MemoryStore::new();
    let queue = SqsQueue::new("events.fifo").create_if_missing();
    let outbox = Outbox::new(store.clone(), broker.publisher(queue));
    for n in 1..=15 {
        let mut transaction = store.begin();
        outbox
            .message(&Row { n })
            .group_id("acct-7")
            .send(&mut transaction)
            .await
            .unwrap();
        store.commit(transaction);
    }
    faults.outage_from_next_call(length);
    let app = RustStream::new(AppInfo::new("outbox", "0")).with_broker(broker.clone(), |b| {
        b.worker(broker.relay(store.clone()));
    });
    let running = TestApp::spawn(app).await.unwrap();
    eventually_within("every row relayed", Duration::from_secs(600), async || {
        store.outbox_rows().is_empty()
    })
    .await;
    running.stop().await.unwrap();
    stored(&account, "events.fifo")
        .await
        .iter()
        .map(|body| serde_json::from_str::<Row>(body).unwrap().n)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_groups_rows_are_stored_in_commit_order_once_each_through_an_outage_of_any_length() {
    for seconds in [5, 15, 19, 22, 25, 30, 38, 45, 60] {
        let order = relayed_through_an_outage(Duration::from_secs(seconds)).await;
        assert_eq!(
            order,
            (1..=15).collect::<Vec<_>>(),
            "outage of {seconds} s: every row relayed once, in commit order"
        );
    }
}
