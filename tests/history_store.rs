//! The [`HistoryStore`] contract (issue 23, item 4), one set of cases run on every store: the
//! in-process store on a paused clock, SQLite on a file of its own a case, and PostgreSQL in a
//! schema of its own a case (at `RUST_STREAM_POSTGRES_URL`; skipped, loudly, when it is unset,
//! and failing under `CI=true`). The cases:
//!
//! - a confirmed key answers [`Reservation::Sent`] with the send's message id, per destination;
//! - a cancelled key (a failed send) is free at once;
//! - a pending key answers [`Reservation::Pending`] until its lease passes, then is taken over,
//!   and the dead sender's ticket neither confirms nor frees it any more;
//! - a sent key is free again once its duration passes, and `sweep_history` deletes expired
//!   keys, oldest first, up to its limit;
//! - two stores on the same data (two replicas) race 2 × 8 tasks over the same 100 keys, one send
//!   in ten failing (cancelled, tried again): every key is sent exactly once.

mod common;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use common::stores::{postgres_pool, postgres_schema, Schema, TempFile};
use rust_stream::store::history::{HistoryKey, HistoryStore, Reservation, SentRecord, Ticket};
use rust_stream::store::memory::MemoryStore;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::store::sqlite::SqliteStore;
use sqlx::postgres::PgConnectOptions;

/// A lease and a duration long enough for any case that does not test them.
const LEASE: Duration = Duration::from_secs(30);
const DURATION: Duration = Duration::from_secs(3600);

/// A store under test.
trait Fixture: Clone + Send + Sync + 'static {
    type Store: HistoryStore;

    /// The store.
    fn store(&self) -> Self::Store;

    /// Another store on the same data, as a second replica of the service would open.
    fn replica(&self) -> impl Future<Output = Self::Store> + Send;

    /// Removes what the case left behind, once it passed.
    fn finish(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

fn key(n: u32) -> HistoryKey {
    HistoryKey::new("scrapes", format!("player-{n}"))
}

fn sent(n: u32) -> SentRecord {
    SentRecord {
        message_id: format!("message-{n}"),
        sequence_number: n.is_multiple_of(2).then(|| format!("{n:020}")),
    }
}

async fn reserved<S: HistoryStore>(store: &S, key: &HistoryKey, lease: Duration) -> Ticket {
    match store.reserve(key, lease).await.unwrap() {
        Reservation::Reserved(ticket) => ticket,
        other => panic!("{key:?} is {other:?}, not free"),
    }
}

/// Reserve, confirm: the key answers the send's message id and sequence number, for its
/// destination only.
async fn a_confirmed_key_answers_its_send<F: Fixture>(fixture: F) {
    let store = fixture.store();
    for n in [1, 2] {
        let ticket = reserved(&store, &key(n), LEASE).await;
        assert!(store
            .confirm(&key(n), &ticket, &sent(n), DURATION)
            .await
            .unwrap());
    }
    for n in [1, 2] {
        assert_eq!(
            store.reserve(&key(n), LEASE).await.unwrap(),
            Reservation::Sent(sent(n))
        );
    }
    // The same key sent to another queue is another key.
    let elsewhere = HistoryKey::new("audit", key(1).key);
    let ticket = reserved(&store, &elsewhere, LEASE).await;
    store.cancel(&elsewhere, &ticket).await.unwrap();
}

/// A failed send cancels its reservation: the key is free at once, for the retry.
async fn a_cancelled_key_is_free_at_once<F: Fixture>(fixture: F) {
    let store = fixture.store();
    let ticket = reserved(&store, &key(1), LEASE).await;
    store.cancel(&key(1), &ticket).await.unwrap();
    let ticket = reserved(&store, &key(1), LEASE).await;
    assert!(store
        .confirm(&key(1), &ticket, &sent(1), DURATION)
        .await
        .unwrap());
    // Cancelling a sent key (a stale ticket) changes nothing.
    store.cancel(&key(1), &ticket).await.unwrap();
    assert_eq!(
        store.reserve(&key(1), LEASE).await.unwrap(),
        Reservation::Sent(sent(1))
    );
}

/// A key reserved by a send that never confirms (its process died) is pending until the lease
/// passes, then the next reservation takes it over; the dead send's ticket no longer counts.
async fn a_pending_key_is_taken_over_once_its_lease_passes<F: Fixture>(fixture: F) {
    let (store, replica) = (fixture.store(), fixture.replica().await);
    let lease = Duration::from_secs(1);
    let dead = reserved(&store, &key(1), lease).await;
    assert_eq!(
        replica.reserve(&key(1), LEASE).await.unwrap(),
        Reservation::Pending
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let alive = reserved(&replica, &key(1), LEASE).await;
    assert_ne!(dead, alive);
    // The dead send comes back: it neither confirms nor frees the key.
    assert!(!store
        .confirm(&key(1), &dead, &sent(9), DURATION)
        .await
        .unwrap());
    store.cancel(&key(1), &dead).await.unwrap();
    assert_eq!(
        store.reserve(&key(1), LEASE).await.unwrap(),
        Reservation::Pending
    );
    assert!(replica
        .confirm(&key(1), &alive, &sent(1), DURATION)
        .await
        .unwrap());
    assert_eq!(
        store.reserve(&key(1), LEASE).await.unwrap(),
        Reservation::Sent(sent(1))
    );
}

/// A sent key is kept for its duration, then free; `sweep_history` deletes expired keys (sent or
/// pending), up to its limit.
async fn expired_keys_are_free_and_swept<F: Fixture>(fixture: F) {
    let store = fixture.store();
    let short = Duration::from_secs(1);
    for (n, duration) in [(1, short), (2, short), (3, DURATION)] {
        let ticket = reserved(&store, &key(n), LEASE).await;
        assert!(store
            .confirm(&key(n), &ticket, &sent(n), duration)
            .await
            .unwrap());
    }
    // Pending, with a short lease: expired too, once it passes.
    let _dead = reserved(&store, &key(4), short).await;
    assert_eq!(store.sweep_history(10).await.unwrap(), 0);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Expired, not swept: the reservation takes the key over.
    let ticket = reserved(&store, &key(1), LEASE).await;
    assert!(store
        .confirm(&key(1), &ticket, &sent(11), DURATION)
        .await
        .unwrap());
    // Keys 2 and 4 are the ones expired now.
    assert_eq!(store.sweep_history(1).await.unwrap(), 1);
    assert_eq!(store.sweep_history(10).await.unwrap(), 1);
    assert_eq!(store.sweep_history(10).await.unwrap(), 0);
    for n in [2, 4] {
        let ticket = reserved(&store, &key(n), LEASE).await;
        store.cancel(&key(n), &ticket).await.unwrap();
    }
    assert_eq!(
        store.reserve(&key(1), LEASE).await.unwrap(),
        Reservation::Sent(sent(11))
    );
    assert_eq!(
        store.reserve(&key(3), LEASE).await.unwrap(),
        Reservation::Sent(sent(3))
    );
}

/// Two stores on the same data race 2 × 8 tasks over the same 100 keys, all in the same order so
/// that they meet on every key; one send in ten fails (cancelled, and its task tries the key
/// again last). Every key is sent exactly once.
async fn two_replicas_racing_send_each_key_once<F: Fixture>(fixture: F) {
    const KEYS: u32 = 100;
    const TASKS_A_REPLICA: u64 = 8;
    let stores = [fixture.store(), fixture.replica().await];
    let sends = Arc::new(std::sync::Mutex::new(vec![0_u32; KEYS as usize]));
    let mut tasks = Vec::new();
    for (replica, store) in stores.iter().enumerate() {
        for task in 0..TASKS_A_REPLICA {
            let (store, sends) = (store.clone(), sends.clone());
            let mut rng = fastrand::Rng::with_seed(replica as u64 * TASKS_A_REPLICA + task);
            tasks.push(tokio::spawn(async move {
                let mut order: Vec<u32> = (0..KEYS).rev().collect();
                while let Some(n) = order.pop() {
                    match store.reserve(&key(n), LEASE).await.unwrap() {
                        Reservation::Reserved(ticket) => {
                            // The send: it takes a moment, and one in ten fails.
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            if rng.u8(..10) == 0 {
                                store.cancel(&key(n), &ticket).await.unwrap();
                                order.insert(0, n);
                            } else {
                                sends.lock().unwrap()[n as usize] += 1;
                                assert!(store
                                    .confirm(&key(n), &ticket, &sent(n), DURATION)
                                    .await
                                    .unwrap());
                            }
                        }
                        Reservation::Sent(record) => assert_eq!(record, sent(n)),
                        Reservation::Pending => {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                            order.insert(0, n);
                        }
                    }
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*sends.lock().unwrap(), vec![1; KEYS as usize]);
}

/// Runs each case on one store: `$fixture` is an `async fn(&str) -> Option<F>` given the case's
/// name (`None`: the store is not available here, and the case is skipped).
macro_rules! contract {
    ($store:ident, $fixture:path, #[$runtime:meta]) => {
        mod $store {
            contract!(@cases $fixture, #[$runtime],
                a_confirmed_key_answers_its_send,
                a_cancelled_key_is_free_at_once,
                a_pending_key_is_taken_over_once_its_lease_passes,
                expired_keys_are_free_and_swept,
                two_replicas_racing_send_each_key_once,
            );
        }
    };
    (@cases $fixture:path, #[$runtime:meta], $($case:ident),* $(,)?) => {
        $(
            #[$runtime]
            async fn $case() {
                if let Some(fixture) = $fixture(stringify!($case)).await {
                    super::$case(fixture.clone()).await;
                    super::Fixture::finish(&fixture).await;
                }
            }
        )*
    };
}

contract!(memory, super::memory, #[tokio::test(start_paused = true)]);
contract!(sqlite, super::sqlite, #[tokio::test(flavor = "multi_thread", worker_threads = 2)]);
contract!(postgres, super::postgres, #[tokio::test(flavor = "multi_thread", worker_threads = 2)]);

// --- The in-process store ---------------------------------------------------------------------

#[derive(Clone, Default)]
struct Memory(MemoryStore);

async fn memory(_case: &str) -> Option<Memory> {
    Some(Memory::default())
}

impl Fixture for Memory {
    type Store = MemoryStore;

    fn store(&self) -> MemoryStore {
        self.0.clone()
    }

    /// In one process, another publisher shares the store.
    async fn replica(&self) -> MemoryStore {
        self.0.clone()
    }
}

// --- SQLite -----------------------------------------------------------------------------------

#[derive(Clone)]
struct Sqlite {
    store: SqliteStore,
    file: Arc<TempFile>,
}

async fn sqlite(case: &str) -> Option<Sqlite> {
    let file = Arc::new(TempFile::new("history", case));
    let store = SqliteStore::open(&file.0).await.unwrap();
    Some(Sqlite { store, file })
}

impl Fixture for Sqlite {
    type Store = SqliteStore;

    fn store(&self) -> SqliteStore {
        self.store.clone()
    }

    /// Another pool on the same file, as a second process would open.
    async fn replica(&self) -> SqliteStore {
        SqliteStore::open(&self.file.0).await.unwrap()
    }
}

// --- PostgreSQL -------------------------------------------------------------------------------

#[derive(Clone)]
struct Postgres {
    store: PostgresStore,
    options: PgConnectOptions,
    schema: Schema,
}

async fn postgres(case: &str) -> Option<Postgres> {
    let (options, schema) = postgres_schema("history", case).await?;
    let store = PostgresStore::new(postgres_pool(&options).await)
        .await
        .unwrap();
    Some(Postgres {
        store,
        options,
        schema,
    })
}

impl Fixture for Postgres {
    type Store = PostgresStore;

    fn store(&self) -> PostgresStore {
        self.store.clone()
    }

    /// Another pool on the same database and schema, as a second replica would open.
    async fn replica(&self) -> PostgresStore {
        PostgresStore::new(postgres_pool(&self.options).await)
            .await
            .unwrap()
    }

    async fn finish(&self) {
        self.schema.drop_it().await;
    }
}

/// A database an older release migrated (schema version 1: the inbox only) gains the command
/// history and the outbox when this release opens it, and keeps its inbox rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_migrates_a_version_1_database_to_the_history() {
    let Some((options, schema)) = postgres_schema("history", "migrate").await else {
        return;
    };
    let pool = postgres_pool(&options).await;
    let store = PostgresStore::new(pool.clone()).await.unwrap();
    // Back to what version 1 left: no history table (nor the tables of later versions: the
    // outbox's, versions 3 and 4), one version row.
    sqlx::raw_sql(
        "DROP TABLE rust_stream_history; DROP TABLE rust_stream_outbox;
         DROP TABLE rust_stream_outbox_keys;
         DELETE FROM rust_stream_schema WHERE version > 1;
         INSERT INTO rust_stream_inbox (consumer, idempotency_key, claimed_at, expires_at)
         VALUES ('payments', 'p-1', now(), now() + interval '1 day')",
    )
    .execute(&pool)
    .await
    .unwrap();
    drop(store);
    let store = PostgresStore::new(pool.clone()).await.unwrap();
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM rust_stream_schema ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(versions, [1, 2, 3, rust_stream::store::SCHEMA_VERSION]);
    let inbox: i64 = sqlx::query_scalar("SELECT count(*) FROM rust_stream_inbox")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(inbox, 1);
    let ticket = reserved(&store, &key(1), LEASE).await;
    assert!(store
        .confirm(&key(1), &ticket, &sent(1), DURATION)
        .await
        .unwrap());
    schema.drop_it().await;
}
