//! The [`InboxStore`] contract (issue 23), one set of cases run on every store: the in-process
//! store on a paused clock, SQLite on a file of its own a test, and PostgreSQL in a schema of its
//! own a test (at `RUST_STREAM_POSTGRES_URL`; skipped, loudly, when it is unset, and failing under
//! `CI=true`).
//!
//! Each store comes with the handler's own write, made in a claim's transaction, and a way to
//! count those writes that were committed: in process, an action run on commit and a counter; in
//! SQL, a row in a `ledger` table and `SELECT count(*)`. The cases:
//!
//! - claim, write, complete: the key is completed with what was recorded, the write is there once;
//! - a dropped transaction, and a released one, free the key and undo the write;
//! - a second claim waits for the first: it finds the key completed when the first commits, and
//!   claims it when the first rolls back, never while the first holds it;
//! - a claim held longer than the second's `wait` makes it [`Claim::Busy`];
//! - once its retention passes a key is claimable again, and `sweep` deletes such keys, oldest
//!   first, up to its limit;
//! - two stores on the same data (two replicas) race 16 tasks over the same 200 keys, one handler
//!   in ten failing: each key's handler write is committed exactly once.
//!
//! The database stores also record their schema version, migrate together when two start at once,
//! and refuse a database a newer release migrated.

mod common;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::stores::{postgres_pool, postgres_schema, Schema, TempFile};
use rust_stream::store::memory::{MemoryStore, MemoryTransaction};
use rust_stream::store::postgres::PostgresStore;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::store::{Claim, ClaimSettings, InboxKey, InboxStore, StoreError, SCHEMA_VERSION};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::SqlitePool;
use tokio::time::Instant;

/// Settings for cases that do not test them: wait long enough for any other claim in the test.
const SETTINGS: ClaimSettings = ClaimSettings {
    wait: Duration::from_secs(10),
    lease: Duration::from_secs(60),
    retention: Duration::from_secs(3600),
};

type Transaction<F> = <<F as Fixture>::Store as InboxStore>::Transaction;

/// A store under test, the handler's write it makes in a claim's transaction, and a count of
/// those writes that were committed.
trait Fixture: Clone + Send + Sync + 'static {
    type Store: InboxStore;

    /// The store.
    fn store(&self) -> Self::Store;

    /// Another store on the same data, as a second replica of the service would open.
    fn replica(&self) -> impl Future<Output = Self::Store> + Send;

    /// The handler's write for `key`, in `transaction`.
    fn write(
        &self,
        transaction: &mut Transaction<Self>,
        key: &InboxKey,
    ) -> impl Future<Output = ()> + Send;

    /// How many of `key`'s writes were committed, and of all keys' (`None`).
    fn written(&self, key: Option<&InboxKey>) -> impl Future<Output = u64> + Send;

    /// Removes what the case left behind, once it passed.
    fn finish(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

fn key(n: u32) -> InboxKey {
    InboxKey::new("payments.fifo", format!("payment-{n}"))
}

async fn claimed<S: InboxStore>(
    store: &S,
    key: &InboxKey,
    settings: ClaimSettings,
) -> S::Transaction {
    match store.claim(key, settings).await.unwrap() {
        Claim::Claimed(transaction) => transaction,
        Claim::Completed(recorded) => panic!("{key:?} is completed ({recorded:?}), not free"),
        Claim::Busy => panic!("{key:?} is busy, not free"),
    }
}

fn describe<T>(claim: &Claim<T>) -> String {
    match claim {
        Claim::Claimed(_) => "Claimed".to_owned(),
        Claim::Completed(recorded) => format!("Completed({recorded:?})"),
        Claim::Busy => "Busy".to_owned(),
    }
}

/// Claim, write, complete: a second claim finds the key completed with what was recorded.
async fn completed_keys_answer_what_was_recorded<F: Fixture>(fixture: F) {
    let store = fixture.store();
    let mut transaction = claimed(&store, &key(1), SETTINGS).await;
    fixture.write(&mut transaction, &key(1)).await;
    store
        .complete(transaction, &key(1), Some(r#"[{"queue":"ledger"}]"#))
        .await
        .unwrap();
    let transaction = claimed(&store, &key(2), SETTINGS).await;
    store.complete(transaction, &key(2), None).await.unwrap();

    let again = store.claim(&key(1), SETTINGS).await.unwrap();
    assert!(
        matches!(&again, Claim::Completed(Some(recorded)) if recorded == r#"[{"queue":"ledger"}]"#),
        "{}",
        describe(&again)
    );
    let again = store.claim(&key(2), SETTINGS).await.unwrap();
    assert!(
        matches!(again, Claim::Completed(None)),
        "{}",
        describe(&again)
    );
    // Another consumer of the same message keeps its own key.
    let other = InboxKey::new("audit", key(1).key);
    let transaction = claimed(&store, &other, SETTINGS).await;
    store.release(transaction).await.unwrap();
    assert_eq!(fixture.written(Some(&key(1))).await, 1);
    assert_eq!(fixture.written(None).await, 1);
}

/// A transaction dropped without completing (a panicking or timed-out handler) frees the key, and
/// its write never lands.
async fn a_dropped_transaction_frees_the_key_and_undoes_the_write<F: Fixture>(fixture: F) {
    let store = fixture.store();
    let mut transaction = claimed(&store, &key(1), SETTINGS).await;
    fixture.write(&mut transaction, &key(1)).await;
    drop(transaction);
    let mut transaction = claimed(&store, &key(1), SETTINGS).await;
    assert_eq!(fixture.written(Some(&key(1))).await, 0);
    fixture.write(&mut transaction, &key(1)).await;
    store.complete(transaction, &key(1), None).await.unwrap();
    assert_eq!(fixture.written(Some(&key(1))).await, 1);
}

/// `release` is a rollback: the key is free and the write undone.
async fn a_released_transaction_frees_the_key_and_undoes_the_write<F: Fixture>(fixture: F) {
    let store = fixture.store();
    let mut transaction = claimed(&store, &key(1), SETTINGS).await;
    fixture.write(&mut transaction, &key(1)).await;
    store.release(transaction).await.unwrap();
    assert_eq!(fixture.written(Some(&key(1))).await, 0);
    let transaction = claimed(&store, &key(1), SETTINGS).await;
    store.complete(transaction, &key(1), None).await.unwrap();
    assert_eq!(fixture.written(None).await, 0);
}

/// A second claim (from another replica) waits while the first holds the key, and finds it
/// completed when the first commits.
async fn a_second_claim_waits_and_finds_the_key_completed<F: Fixture>(fixture: F) {
    let (store, replica) = (fixture.store(), fixture.replica().await);
    let mut transaction = claimed(&store, &key(1), SETTINGS).await;
    let second = tokio::spawn(async move { replica.claim(&key(1), SETTINGS).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !second.is_finished(),
        "the second claim answered while the first held the key"
    );
    fixture.write(&mut transaction, &key(1)).await;
    store
        .complete(transaction, &key(1), Some("sent"))
        .await
        .unwrap();
    let second = second.await.unwrap();
    assert!(
        matches!(&second, Claim::Completed(Some(recorded)) if recorded == "sent"),
        "{}",
        describe(&second)
    );
    assert_eq!(fixture.written(Some(&key(1))).await, 1);
}

/// A second claim that waited for a first that rolled back claims the key.
async fn a_second_claim_waits_and_claims_a_released_key<F: Fixture>(fixture: F) {
    let (store, replica) = (fixture.store(), fixture.replica().await);
    let mut transaction = claimed(&store, &key(1), SETTINGS).await;
    fixture.write(&mut transaction, &key(1)).await;
    let second = tokio::spawn({
        let fixture = fixture.clone();
        async move {
            let mut transaction = claimed(&replica, &key(1), SETTINGS).await;
            fixture.write(&mut transaction, &key(1)).await;
            replica.complete(transaction, &key(1), None).await.unwrap();
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !second.is_finished(),
        "the second claim answered while the first held the key"
    );
    store.release(transaction).await.unwrap();
    second.await.unwrap();
    assert_eq!(fixture.written(Some(&key(1))).await, 1);
}

/// A claim held longer than a second claim's `wait` makes the second [`Claim::Busy`], after
/// about its `wait`.
async fn a_claim_held_past_the_wait_is_busy<F: Fixture>(fixture: F) {
    let (store, replica) = (fixture.store(), fixture.replica().await);
    let transaction = claimed(&store, &key(1), SETTINGS).await;
    let wait = Duration::from_millis(400);
    let started = Instant::now();
    let second = replica
        .claim(&key(1), ClaimSettings { wait, ..SETTINGS })
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(matches!(second, Claim::Busy), "{}", describe(&second));
    assert!(
        waited >= wait.mul_f32(0.9) && waited < wait + Duration::from_secs(1),
        "a claim with a wait of {wait:?} answered after {waited:?}"
    );
    store.release(transaction).await.unwrap();
    let transaction = claimed(&replica, &key(1), SETTINGS).await;
    replica.complete(transaction, &key(1), None).await.unwrap();
}

/// A completed key whose retention has passed is claimed again (taken over if not yet swept),
/// and `sweep` deletes such keys up to its limit.
async fn keys_past_their_retention_are_claimable_and_swept<F: Fixture>(fixture: F) {
    let store = fixture.store();
    let short = ClaimSettings {
        retention: Duration::from_secs(1),
        ..SETTINGS
    };
    for (n, settings) in [(1, short), (2, short), (3, SETTINGS)] {
        let mut transaction = claimed(&store, &key(n), settings).await;
        fixture.write(&mut transaction, &key(n)).await;
        store.complete(transaction, &key(n), None).await.unwrap();
    }
    assert!(matches!(
        store.claim(&key(1), short).await.unwrap(),
        Claim::Completed(None)
    ));
    assert_eq!(store.sweep(10).await.unwrap(), 0);

    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Expired, not swept: the claim takes the key over.
    let mut transaction = claimed(&store, &key(1), SETTINGS).await;
    fixture.write(&mut transaction, &key(1)).await;
    store.complete(transaction, &key(1), None).await.unwrap();
    assert_eq!(fixture.written(Some(&key(1))).await, 2);
    assert!(matches!(
        store.claim(&key(1), SETTINGS).await.unwrap(),
        Claim::Completed(None)
    ));
    // Key 2 is the only one expired now.
    assert_eq!(store.sweep(1).await.unwrap(), 1);
    assert_eq!(store.sweep(10).await.unwrap(), 0);
    let transaction = claimed(&store, &key(2), SETTINGS).await;
    store.release(transaction).await.unwrap();
    assert!(matches!(
        store.claim(&key(3), SETTINGS).await.unwrap(),
        Claim::Completed(None)
    ));
}

/// Two stores on the same data (two replicas) race 2 × 8 tasks over the same 200 keys, all in the
/// same order so that they meet on every key; one handler in ten fails (releases its claim, and its
/// task tries the key again last). Every key's write is committed exactly once.
async fn two_replicas_racing_complete_each_key_once<F: Fixture>(fixture: F) {
    const KEYS: u32 = 200;
    const TASKS_A_REPLICA: u64 = 8;
    let stores = [fixture.store(), fixture.replica().await];
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (replica, store) in stores.iter().enumerate() {
        for task in 0..TASKS_A_REPLICA {
            let (store, fixture) = (store.clone(), fixture.clone());
            let mut rng = fastrand::Rng::with_seed(replica as u64 * TASKS_A_REPLICA + task);
            tasks.push(tokio::spawn(async move {
                let mut tally = Tally::default();
                let mut order: Vec<u32> = (0..KEYS).rev().collect();
                while let Some(n) = order.pop() {
                    match store.claim(&key(n), SETTINGS).await.unwrap() {
                        Claim::Claimed(mut transaction) => {
                            tally.claimed += 1;
                            fixture.write(&mut transaction, &key(n)).await;
                            // A handler that takes a moment: the others wait on its key.
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            if rng.u8(..10) == 0 {
                                tally.released += 1;
                                store.release(transaction).await.unwrap();
                                order.insert(0, n);
                            } else {
                                store.complete(transaction, &key(n), None).await.unwrap();
                            }
                        }
                        Claim::Completed(_) => tally.completed += 1,
                        Claim::Busy => {
                            tally.busy += 1;
                            order.insert(0, n);
                        }
                    }
                }
                tally
            }));
        }
    }
    let mut tally = Tally::default();
    for task in tasks {
        let task = task.await.unwrap();
        tally.claimed += task.claimed;
        tally.released += task.released;
        tally.completed += task.completed;
        tally.busy += task.busy;
    }
    let elapsed = started.elapsed();
    eprintln!(
        "race: {KEYS} keys, 2 replicas x {TASKS_A_REPLICA} tasks in {elapsed:?}: {} claimed ({} of \
         them released), {} found completed, {} busy",
        tally.claimed, tally.released, tally.completed, tally.busy
    );
    assert_eq!(tally.claimed - tally.released, KEYS);
    assert_eq!(fixture.written(None).await, u64::from(KEYS));
    for n in 0..KEYS {
        assert_eq!(fixture.written(Some(&key(n))).await, 1, "{:?}", key(n));
    }
}

/// What one task of the race saw.
#[derive(Default)]
struct Tally {
    claimed: u32,
    released: u32,
    completed: u32,
    busy: u32,
}

/// Runs each case on one store: `$fixture` is an `async fn(&str) -> Option<F>` given the case's
/// name (`None`: the store is not available here, and the case is skipped).
macro_rules! contract {
    ($store:ident, $fixture:path, #[$runtime:meta]) => {
        mod $store {
            contract!(@cases $fixture, #[$runtime],
                completed_keys_answer_what_was_recorded,
                a_dropped_transaction_frees_the_key_and_undoes_the_write,
                a_released_transaction_frees_the_key_and_undoes_the_write,
                a_second_claim_waits_and_finds_the_key_completed,
                a_second_claim_waits_and_claims_a_released_key,
                a_claim_held_past_the_wait_is_busy,
                keys_past_their_retention_are_claimable_and_swept,
                two_replicas_racing_complete_each_key_once,
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
struct Memory {
    store: MemoryStore,
    ledger: Arc<Mutex<HashMap<InboxKey, u64>>>,
}

async fn memory(_case: &str) -> Option<Memory> {
    Some(Memory::default())
}

impl Fixture for Memory {
    type Store = MemoryStore;

    fn store(&self) -> MemoryStore {
        self.store.clone()
    }

    /// In one process, another consumer shares the store.
    async fn replica(&self) -> MemoryStore {
        self.store.clone()
    }

    async fn write(&self, transaction: &mut MemoryTransaction, key: &InboxKey) {
        let (ledger, key) = (self.ledger.clone(), key.clone());
        transaction.on_commit(move || *ledger.lock().unwrap().entry(key).or_default() += 1);
    }

    async fn written(&self, key: Option<&InboxKey>) -> u64 {
        let ledger = self.ledger.lock().unwrap();
        match key {
            Some(key) => ledger.get(key).copied().unwrap_or(0),
            None => ledger.values().sum(),
        }
    }
}

// --- SQLite -----------------------------------------------------------------------------------

/// A database file of the case's own, removed when the last clone goes.
#[derive(Clone)]
struct Sqlite {
    store: SqliteStore,
    file: Arc<TempFile>,
}

const LEDGER: &str = "CREATE TABLE ledger (consumer TEXT NOT NULL, idempotency_key TEXT NOT NULL)";

async fn sqlite(case: &str) -> Option<Sqlite> {
    let file = Arc::new(TempFile::new("inbox", case));
    let store = SqliteStore::open(&file.0).await.unwrap();
    sqlx::query(LEDGER).execute(store.pool()).await.unwrap();
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

    async fn write(&self, transaction: &mut Transaction<Self>, key: &InboxKey) {
        sqlx::query("INSERT INTO ledger (consumer, idempotency_key) VALUES (?1, ?2)")
            .bind(&key.consumer)
            .bind(&key.key)
            .execute(&mut **transaction)
            .await
            .unwrap();
    }

    async fn written(&self, key: Option<&InboxKey>) -> u64 {
        let count: i64 = match key {
            Some(key) => sqlx::query_scalar(WRITTEN)
                .bind(&key.consumer)
                .bind(&key.key)
                .fetch_one(self.store.pool())
                .await
                .unwrap(),
            None => sqlx::query_scalar(ALL_WRITTEN)
                .fetch_one(self.store.pool())
                .await
                .unwrap(),
        };
        count as u64
    }
}

/// The ledger's rows for `key`, or all its rows (`None`); the same SQL on both databases.
const WRITTEN: &str = "SELECT count(*) FROM ledger WHERE consumer = $1 AND idempotency_key = $2";
const ALL_WRITTEN: &str = "SELECT count(*) FROM ledger";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_records_its_schema_version_and_refuses_a_newer_one() {
    let fixture = sqlite("schema").await.unwrap();
    let pool: &SqlitePool = fixture.store.pool();
    let version: i64 = sqlx::query_scalar("SELECT max(version) FROM rust_stream_schema")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    // Opening it again, twice at once (two processes starting), finds it migrated.
    let (a, b) = tokio::join!(
        SqliteStore::open(&fixture.file.0),
        SqliteStore::open(&fixture.file.0)
    );
    a.unwrap();
    b.unwrap();
    sqlx::query("INSERT INTO rust_stream_schema (version, applied_at) VALUES (99, 0)")
        .execute(pool)
        .await
        .unwrap();
    match SqliteStore::open(&fixture.file.0).await {
        Err(StoreError::NewerSchema { found, supported }) => {
            assert_eq!((found, supported), (99, SCHEMA_VERSION));
        }
        other => panic!("a newer schema was not refused: {other:?}"),
    }
}

// --- PostgreSQL -------------------------------------------------------------------------------

/// A store in a schema of the case's own: the pool's connections find their tables there
/// (`search_path`).
#[derive(Clone)]
struct Postgres {
    store: PostgresStore,
    options: PgConnectOptions,
    schema: Schema,
}

async fn postgres(case: &str) -> Option<Postgres> {
    let (options, schema) = postgres_schema("inbox", case).await?;
    let store = PostgresStore::new(postgres_pool(&options).await)
        .await
        .unwrap();
    sqlx::query(LEDGER).execute(store.pool()).await.unwrap();
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

    async fn write(&self, transaction: &mut Transaction<Self>, key: &InboxKey) {
        sqlx::query("INSERT INTO ledger (consumer, idempotency_key) VALUES ($1, $2)")
            .bind(&key.consumer)
            .bind(&key.key)
            .execute(&mut **transaction)
            .await
            .unwrap();
    }

    async fn written(&self, key: Option<&InboxKey>) -> u64 {
        let count: i64 = match key {
            Some(key) => sqlx::query_scalar(WRITTEN)
                .bind(&key.consumer)
                .bind(&key.key)
                .fetch_one(self.store.pool())
                .await
                .unwrap(),
            None => sqlx::query_scalar(ALL_WRITTEN)
                .fetch_one(self.store.pool())
                .await
                .unwrap(),
        };
        count as u64
    }

    async fn finish(&self) {
        self.schema.drop_it().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_records_its_schema_version_and_refuses_a_newer_one() {
    let Some((options, schema)) = postgres_schema("inbox", "schema").await else {
        return;
    };
    // Two replicas starting at once on an empty schema: one migrates, the other finds it done.
    let (a, b) = tokio::join!(
        async { PostgresStore::new(postgres_pool(&options).await).await },
        async { PostgresStore::new(postgres_pool(&options).await).await },
    );
    let store = a.unwrap();
    b.unwrap();
    let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM rust_stream_schema")
        .fetch_all(store.pool())
        .await
        .unwrap();
    assert_eq!(versions, [1, 2, 3, SCHEMA_VERSION]);
    sqlx::query("INSERT INTO rust_stream_schema (version) VALUES (99)")
        .execute(store.pool())
        .await
        .unwrap();
    match PostgresStore::new(postgres_pool(&options).await).await {
        Err(StoreError::NewerSchema { found, supported }) => {
            assert_eq!((found, supported), (99, SCHEMA_VERSION));
        }
        other => panic!("a newer schema was not refused: {other:?}"),
    }
    schema.drop_it().await;
}

/// A claim whose transaction sits idle longer than its lease (a hung handler) is rolled back by
/// the server, which frees the key well before the second claim's `wait`; the hung handler's
/// completion then fails, committing nothing. The handler's own statements run under the
/// connection's `lock_timeout`, not the claim's `wait`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_rolls_back_a_claim_idle_past_its_lease() {
    let Some(fixture) = postgres("lease").await else {
        return;
    };
    let store = fixture.store();
    let settings = ClaimSettings {
        wait: Duration::from_millis(200),
        lease: Duration::from_millis(500),
        ..SETTINGS
    };
    let mut hung = claimed(&store, &key(1), settings).await;
    let lock_timeout: String = sqlx::query_scalar("SELECT current_setting('lock_timeout')")
        .fetch_one(&mut *hung)
        .await
        .unwrap();
    assert_eq!(
        lock_timeout, "0",
        "the claim's wait leaked into the handler's transaction"
    );
    fixture.write(&mut hung, &key(1)).await;

    let started = Instant::now();
    let transaction = claimed(&store, &key(1), SETTINGS).await;
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "the key was freed after {waited:?}, not at the lease's end"
    );
    store.complete(transaction, &key(1), None).await.unwrap();
    assert!(store.complete(hung, &key(1), None).await.is_err());
    assert_eq!(fixture.written(Some(&key(1))).await, 0);
    fixture.finish().await;
}

/// Not a check but a measurement, run by hand: ten claims and completions on one warm
/// connection, between two marker queries (`SELECT 'inbox round trips: start'` and `.. end`), to
/// count in the server's log (`log_statement = all`) or through a proxy that counts round trips.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored against a server that logs its statements"]
async fn postgres_round_trips_of_ten_claims() {
    let Some((options, schema)) = postgres_schema("inbox", "round_trips").await else {
        return;
    };
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options)
        .await
        .unwrap();
    let store = PostgresStore::new(pool.clone()).await.unwrap();
    // Warm: the connection has prepared every statement once.
    for n in 0..2 {
        let transaction = claimed(&store, &key(1000 + n), SETTINGS).await;
        store
            .complete(transaction, &key(1000 + n), Some("[]"))
            .await
            .unwrap();
        let _ = store.claim(&key(1000 + n), SETTINGS).await.unwrap();
    }
    sqlx::raw_sql("SELECT 'inbox round trips: start'")
        .execute(&pool)
        .await
        .unwrap();
    for n in 0..10 {
        let transaction = claimed(&store, &key(n), SETTINGS).await;
        store.complete(transaction, &key(n), None).await.unwrap();
    }
    sqlx::raw_sql("SELECT 'inbox round trips: end'")
        .execute(&pool)
        .await
        .unwrap();
    schema.drop_it().await;
}
