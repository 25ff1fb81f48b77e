//! The inbox's and the outbox's store on SQLite, the embedded default: one file, no server, for a
//! service that runs as one process.
//!
//! # How a claim works
//!
//! A claim begins a transaction with `BEGIN IMMEDIATE`, which takes the database's write lock at
//! once, and inserts the key's row, already marked completed (its `expires_at` is the claim's
//! time plus the retention); the handler writes its own rows in the same transaction, and
//! [`complete`](InboxStore::complete) commits the lot. A key found completed is answered
//! [`Claim::Completed`] and the transaction rolled back; a key whose retention has passed but which
//! no [`sweep`](InboxStore::sweep) has deleted yet is taken over in the same statement.
//!
//! # Guarantees
//!
//! - The handler's writes and the key are committed together or not at all.
//! - A commit is durable before [`complete`](InboxStore::complete) returns: the file is opened with
//!   `synchronous = FULL`, which syncs the write-ahead log at every commit. With `NORMAL`, a power
//!   cut could undo the last commits after the inbox had acked their messages to SQS, so a
//!   payment would be lost while its message is gone; `FULL` costs a sync a message.
//! - A claim waits for the write lock at most [`ClaimSettings::wait`] (SQLite's busy timeout,
//!   which each claim sets on its connection together with its `BEGIN`), then answers
//!   [`Claim::Busy`].
//! - Times are SQLite's clock (milliseconds since the Unix epoch): the host's, one process.
//!
//! # The command history
//!
//! The store keeps a publisher's [command history](super::history) too, in
//! `rust_stream_history`: a reservation, a confirmation and a cancellation are each one statement,
//! a write transaction of its own, so none holds the write lock while the message goes to SQS.
//! Each waits for the write lock like any write (the connection's busy timeout): behind a
//! handler that holds an inbox claim on the same file, for that handler's duration. A handler
//! with the inbox that publishes with a history on the same file waits for its own claim until
//! the busy timeout fails the send: give the history a file of its own there.
//!
//! # Limits
//!
//! - **SQLite lets one transaction write at a time, and a claim holds the write lock from its
//!   `BEGIN` to its commit or rollback: handlers that use the inbox run one at a time over the
//!   whole file**, whatever the service's concurrency. The others wait in line, each holding one
//!   of the pool's connections, and answer [`Claim::Busy`] after their `wait`: throughput is about
//!   one handler's duration plus a synced commit, a message. (Taking the lock at `BEGIN` is what
//!   makes waiting work at all: a transaction that read first and wrote later could not wait for
//!   the lock, it would fail.) Reads outside the inbox's transactions go on meanwhile (the file is
//!   in WAL mode). For handlers that must run side by side, or several replicas, use PostgreSQL.
//! - [`ClaimSettings::lease`] is not enforced by SQLite: in one process, the engine's handler
//!   timeout drops a hung handler's transaction, which rolls it back, and a process that dies
//!   releases its lock with it.
//! - The outbox: SQLite has one writer at a time, so rows get their ids in commit order. One relay
//!   at a time reads them: the lease is a lock of the [`SqliteStore`] (and its clones), so a
//!   second store opened on the same file, or a second process, would relay the same rows again
//!   (their deduplication ids make a FIFO queue store them once; a standard queue's consumer needs
//!   the inbox). A relay's delete of the rows it sent waits for the write lock, as a sweep does,
//!   and so does its mark of the scheduled rows (with a key) it read, which a cancel after the
//!   mark finds being sent (`docs/scheduling.md`, "The stores"). The outbox's times are the
//!   process's clock, not SQLite's.
//! - A claim leaves its `wait` as the busy timeout of the connection it used; a pool shared with
//!   the service's own writes outside the inbox should set theirs as they need.

use std::path::Path;
use std::time::Duration;

use sqlx::sqlite::{
    Sqlite, SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{AssertSqlSafe, Row};
use std::sync::Arc;
use tokio::sync::OwnedMutexGuard;

use super::history::{HistoryKey, HistoryStore, Reservation, SentRecord, Ticket};
use super::{
    pending, retention_millis, timeout_millis, Claim, ClaimSettings, InboxKey, InboxStore,
    Migration, StoreError, WaitingCount,
};

mod outbox;

/// The schema, step by step (see [`Migration`]). Times are milliseconds since the Unix epoch.
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        statements: "
        CREATE TABLE rust_stream_schema (
            version INTEGER PRIMARY KEY,
            applied_at INTEGER NOT NULL
        ) STRICT;
        CREATE TABLE rust_stream_inbox (
            consumer TEXT NOT NULL,
            idempotency_key TEXT NOT NULL,
            recorded TEXT,
            claimed_at INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            PRIMARY KEY (consumer, idempotency_key)
        ) STRICT;
        CREATE INDEX rust_stream_inbox_expires_at ON rust_stream_inbox (expires_at);
    ",
    },
    Migration {
        version: 2,
        statements: HISTORY_SCHEMA,
    },
    Migration {
        version: 3,
        // AUTOINCREMENT: an id is never given twice, even after the largest row was relayed.
        statements: "
        CREATE TABLE rust_stream_outbox (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            destination TEXT NOT NULL,
            group_id TEXT,
            message TEXT NOT NULL,
            created_at INTEGER NOT NULL
        ) STRICT;
    ",
    },
    Migration {
        version: 4,
        statements: SCHEDULE_SCHEMA,
    },
];

/// Scheduled rows (schema version 4). A row is due at `due_at` and the relay may read it from
/// `ready_at` (earlier on a queue that takes `DelaySeconds`); rows written before this version
/// are due when they were written. `relaying` marks a keyed row the relay's round has read, so a
/// cancel after the read answers it sent. `rust_stream_outbox_keys` remembers the keys sent or
/// cancelled, for [`SCHEDULE_KEY_RETENTION`](super::SCHEDULE_KEY_RETENTION). The index on
/// `(ready_at, due_at, id)` keeps a round's read to the rows it may send, however many wait for
/// later.
const SCHEDULE_SCHEMA: &str = "
    ALTER TABLE rust_stream_outbox ADD COLUMN due_at INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE rust_stream_outbox ADD COLUMN ready_at INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE rust_stream_outbox ADD COLUMN scheduled INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE rust_stream_outbox ADD COLUMN schedule_key TEXT;
    ALTER TABLE rust_stream_outbox ADD COLUMN relaying INTEGER NOT NULL DEFAULT 0;
    UPDATE rust_stream_outbox SET due_at = created_at, ready_at = created_at;
    CREATE INDEX rust_stream_outbox_ready ON rust_stream_outbox (ready_at, due_at, id);
    CREATE UNIQUE INDEX rust_stream_outbox_key ON rust_stream_outbox (destination, schedule_key)
        WHERE schedule_key IS NOT NULL;
    CREATE TABLE rust_stream_outbox_keys (
        destination TEXT NOT NULL,
        schedule_key TEXT NOT NULL,
        sent INTEGER NOT NULL,
        finished_at INTEGER NOT NULL,
        PRIMARY KEY (destination, schedule_key)
    ) STRICT;
    CREATE INDEX rust_stream_outbox_keys_finished_at ON rust_stream_outbox_keys (finished_at);
";

/// The command history (schema version 2): a key is pending while `ticket` is set (its lease
/// ends at `expires_at`), sent once `message_id` is (kept until `expires_at`).
const HISTORY_SCHEMA: &str = "
    CREATE TABLE rust_stream_history (
        destination TEXT NOT NULL,
        history_key TEXT NOT NULL,
        ticket TEXT,
        message_id TEXT,
        sequence_number TEXT,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (destination, history_key)
    ) STRICT;
    CREATE INDEX rust_stream_history_expires_at ON rust_stream_history (expires_at);
";

/// Reserves a key: inserts it pending, or takes over a row whose duration or lease has passed;
/// changes no row when the key is held. One statement, so one write transaction.
const HISTORY_RESERVE: &str = "
    INSERT INTO rust_stream_history (destination, history_key, ticket, expires_at)
    VALUES (?1, ?2, ?3, CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?4)
    ON CONFLICT (destination, history_key) DO UPDATE
        SET ticket = excluded.ticket, message_id = NULL, sequence_number = NULL,
            expires_at = excluded.expires_at
        WHERE rust_stream_history.expires_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// What holds a key the reservation could not take.
const HISTORY_HELD: &str = "
    SELECT message_id, sequence_number FROM rust_stream_history
    WHERE destination = ?1 AND history_key = ?2
      AND expires_at > CAST(unixepoch('subsec') * 1000 AS INTEGER)";

const HISTORY_CONFIRM: &str = "
    UPDATE rust_stream_history
    SET ticket = NULL, message_id = ?4, sequence_number = ?5,
        expires_at = CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?6
    WHERE destination = ?1 AND history_key = ?2 AND ticket = ?3";

const HISTORY_CANCEL: &str = "
    DELETE FROM rust_stream_history WHERE destination = ?1 AND history_key = ?2 AND ticket = ?3";

/// Oldest first, through the `expires_at` index.
const HISTORY_SWEEP: &str = "
    DELETE FROM rust_stream_history WHERE rowid IN (
        SELECT rowid FROM rust_stream_history
        WHERE expires_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER)
        ORDER BY expires_at
        LIMIT ?1)";

/// How many times a reservation tries again when the row that held its key expired between its
/// two statements: more is not expected, but a loop must end.
const RESERVE_ATTEMPTS: usize = 3;

/// Claims a key: inserts it, or takes over a row whose retention has passed; changes no row when
/// the key is completed. SQLite's `'now'` is the same throughout one statement.
const CLAIM: &str = "
    INSERT INTO rust_stream_inbox (consumer, idempotency_key, claimed_at, expires_at)
    VALUES (?1, ?2, CAST(unixepoch('subsec') * 1000 AS INTEGER),
            CAST(unixepoch('subsec') * 1000 AS INTEGER) + ?3)
    ON CONFLICT (consumer, idempotency_key) DO UPDATE
        SET recorded = NULL, claimed_at = excluded.claimed_at, expires_at = excluded.expires_at
        WHERE rust_stream_inbox.expires_at <= excluded.claimed_at";

const COMPLETED: &str = "
    SELECT recorded FROM rust_stream_inbox WHERE consumer = ?1 AND idempotency_key = ?2";

const RECORD: &str = "
    UPDATE rust_stream_inbox SET recorded = ?3 WHERE consumer = ?1 AND idempotency_key = ?2";

/// Oldest first, through the `expires_at` index.
const SWEEP: &str = "
    DELETE FROM rust_stream_inbox WHERE rowid IN (
        SELECT rowid FROM rust_stream_inbox
        WHERE expires_at <= CAST(unixepoch('subsec') * 1000 AS INTEGER)
        ORDER BY expires_at
        LIMIT ?1)";

/// How long a sweep waits for the write lock (an open claim holds it for its handler's
/// duration) before it fails with the database's busy error.
const SWEEP_WAIT: Duration = Duration::from_secs(5);

/// How long opening the store waits for the write lock to migrate.
const MIGRATION_WAIT: Duration = Duration::from_secs(30);

/// How much longer than its `wait` a claim gives the pool and SQLite together: SQLite's busy
/// timeout answers first, this ends a claim that waited for a pool connection as well.
const POOL_GRACE: Duration = Duration::from_millis(100);

/// SQLite's primary result code `SQLITE_BUSY` (the low byte of the extended codes sqlx reports).
const SQLITE_BUSY: i32 = 5;

/// An [`InboxStore`] on SQLite: see the [module docs](self). Clones share the pool.
///
/// ```
/// use rust_stream::store::sqlite::SqliteStore;
/// use rust_stream::store::{Claim, ClaimSettings, InboxKey, InboxStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("rust-stream-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// # let path = dir.join("inbox.db");
/// let store = SqliteStore::open(&path).await?;
/// sqlx::query("CREATE TABLE IF NOT EXISTS payments (id TEXT PRIMARY KEY, cents INTEGER)")
///     .execute(store.pool())
///     .await?;
/// let key = InboxKey::new("payments.fifo", "payment-7");
/// let settings = ClaimSettings {
///     wait: Duration::from_secs(5),
///     lease: Duration::from_secs(60),
///     retention: Duration::from_secs(14 * 24 * 3600),
/// };
///
/// if let Claim::Claimed(mut transaction) = store.claim(&key, settings).await? {
///     // The handler's own write, in the claim's transaction.
///     sqlx::query("INSERT INTO payments (id, cents) VALUES (?1, ?2)")
///         .bind("payment-7")
///         .bind(1250_i64)
///         .execute(&mut *transaction)
///         .await?;
///     store.complete(transaction, &key, None).await?;
/// }
/// assert!(matches!(store.claim(&key, settings).await?, Claim::Completed(None)));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    /// The outbox relay's lease, in the one process that uses the file.
    relay: Arc<tokio::sync::Mutex<()>>,
    /// The outbox's rows waiting for later, as last counted.
    waiting: WaitingCount,
}

impl SqliteStore {
    /// Opens the database file at `path`, creating it if missing, in WAL mode with
    /// `synchronous = FULL` (see the [module docs](self)), and creates or migrates the store's
    /// tables. The pool has sqlx's defaults otherwise (10 connections).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        super::held(async move {
            let options = SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full);
            let pool = SqlitePoolOptions::new().connect_with(options).await?;
            Self::new(pool).await
        })
        .await
    }

    /// The store on `pool`, once it has created or migrated the store's tables. The pool's
    /// connections are used as configured: give them a file (each connection to `:memory:` is a
    /// database of its own), WAL mode and `synchronous = FULL` as [`open`](Self::open) does.
    pub async fn new(pool: SqlitePool) -> Result<Self, StoreError> {
        super::held(async move {
            migrate(&pool).await?;
            Ok(Self {
                pool,
                relay: Arc::default(),
                waiting: WaitingCount::default(),
            })
        })
        .await
    }

    /// The pool the store claims in, for the service's own queries outside the inbox.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// `BEGIN IMMEDIATE` after setting the connection's busy timeout to `wait`: one call to SQLite,
/// so the write lock is waited for as long as the caller chose.
fn begin_immediate(wait: Duration) -> AssertSqlSafe<String> {
    AssertSqlSafe(format!(
        "PRAGMA busy_timeout = {}; BEGIN IMMEDIATE",
        timeout_millis(wait)
    ))
}

/// Brings the schema to this release's version, in one transaction that holds the write lock,
/// so two processes opening the file together migrate one after the other.
async fn migrate(pool: &SqlitePool) -> Result<(), StoreError> {
    let mut transaction = pool.begin_with(begin_immediate(MIGRATION_WAIT)).await?;
    // Two statements: one that named a missing table would not be prepared at all.
    let exists: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master
                        WHERE type = 'table' AND name = 'rust_stream_schema')",
    )
    .fetch_one(&mut *transaction)
    .await?;
    let found: i64 = if exists {
        sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM rust_stream_schema")
            .fetch_one(&mut *transaction)
            .await?
    } else {
        0
    };
    for migration in pending(MIGRATIONS, found)? {
        sqlx::raw_sql(migration.statements)
            .execute(&mut *transaction)
            .await?;
        sqlx::query(
            "INSERT INTO rust_stream_schema (version, applied_at)
             VALUES (?1, CAST(unixepoch('subsec') * 1000 AS INTEGER))",
        )
        .bind(migration.version)
        .execute(&mut *transaction)
        .await?;
    }
    transaction.commit().await?;
    Ok(())
}

fn is_busy(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|error| error.code())
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == SQLITE_BUSY)
}

impl super::SqlStore for SqliteStore {
    type Database = sqlx::Sqlite;

    fn pool(&self) -> &sqlx::Pool<sqlx::Sqlite> {
        &self.pool
    }
}

impl InboxStore for SqliteStore {
    type Transaction = sqlx::Transaction<'static, Sqlite>;

    const OUTBOX_IN_TRANSACTION: bool = true;

    fn write_outbox(
        &self,
        transaction: &mut Self::Transaction,
        row: super::NewOutboxRow<'_>,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send {
        // The inbox's transaction is the outbox's connection: one commit keeps both.
        super::OutboxStore::write(self, &mut **transaction, row)
    }

    async fn claim(
        &self,
        key: &InboxKey,
        settings: ClaimSettings,
    ) -> Result<Claim<Self::Transaction>, StoreError> {
        super::held(async move {
            let begun = tokio::time::timeout(
                settings.wait + POOL_GRACE,
                self.pool.begin_with(begin_immediate(settings.wait)),
            )
            .await;
            let mut transaction = match begun {
                Ok(Ok(transaction)) => transaction,
                Ok(Err(error)) if is_busy(&error) => return Ok(Claim::Busy),
                Ok(Err(error)) => return Err(error.into()),
                Err(_elapsed) => return Ok(Claim::Busy),
            };
            let claimed = sqlx::query(CLAIM)
                .bind(&key.consumer)
                .bind(&key.key)
                .bind(retention_millis(settings.retention))
                .execute(&mut *transaction)
                .await?;
            if claimed.rows_affected() == 1 {
                return Ok(Claim::Claimed(transaction));
            }
            // The write lock is this transaction's: the row the claim could not take is there, and
            // alive.
            let recorded: Option<String> = sqlx::query_scalar(COMPLETED)
                .bind(&key.consumer)
                .bind(&key.key)
                .fetch_one(&mut *transaction)
                .await?;
            transaction.rollback().await?;
            Ok(Claim::Completed(recorded))
        })
        .await
    }

    async fn complete(
        &self,
        mut transaction: Self::Transaction,
        key: &InboxKey,
        recorded: Option<&str>,
    ) -> Result<(), StoreError> {
        super::held(async move {
            // The claim wrote the key as completed; only what is recorded beside it is new.
            if let Some(recorded) = recorded {
                sqlx::query(RECORD)
                    .bind(&key.consumer)
                    .bind(&key.key)
                    .bind(recorded)
                    .execute(&mut *transaction)
                    .await?;
            }
            transaction.commit().await?;
            Ok(())
        })
        .await
    }

    async fn release(&self, transaction: Self::Transaction) -> Result<(), StoreError> {
        super::held(async move {
            transaction.rollback().await?;
            Ok(())
        })
        .await
    }

    async fn sweep(&self, limit: u32) -> Result<u64, StoreError> {
        super::held(async move {
            let mut transaction = self.pool.begin_with(begin_immediate(SWEEP_WAIT)).await?;
            let deleted = sqlx::query(SWEEP)
                .bind(i64::from(limit))
                .execute(&mut *transaction)
                .await?;
            transaction.commit().await?;
            Ok(deleted.rows_affected())
        })
        .await
    }
}

/// The SQLite relay's lease: the store's relay lock, held until the relay finishes, and the
/// keyed rows its round marked read.
#[derive(Debug)]
pub struct SqliteLease {
    _held: OwnedMutexGuard<()>,
    marked: Vec<i64>,
}

impl HistoryStore for SqliteStore {
    async fn reserve(&self, key: &HistoryKey, lease: Duration) -> Result<Reservation, StoreError> {
        super::held(async move {
            for _ in 0..RESERVE_ATTEMPTS {
                let ticket = Ticket::new();
                let reserved = sqlx::query(HISTORY_RESERVE)
                    .bind(&key.destination)
                    .bind(&key.key)
                    .bind(ticket.as_str())
                    .bind(retention_millis(lease))
                    .execute(&self.pool)
                    .await?;
                if reserved.rows_affected() == 1 {
                    return Ok(Reservation::Reserved(ticket));
                }
                let held = sqlx::query(HISTORY_HELD)
                    .bind(&key.destination)
                    .bind(&key.key)
                    .fetch_optional(&self.pool)
                    .await?;
                if let Some(row) = held {
                    let message_id: Option<String> = row.try_get(0)?;
                    return Ok(match message_id {
                        Some(message_id) => Reservation::Sent(SentRecord {
                            message_id,
                            sequence_number: row.try_get(1)?,
                        }),
                        None => Reservation::Pending,
                    });
                }
            }
            Ok(Reservation::Pending)
        })
        .await
    }

    async fn confirm(
        &self,
        key: &HistoryKey,
        ticket: &Ticket,
        sent: &SentRecord,
        duration: Duration,
    ) -> Result<bool, StoreError> {
        super::held(async move {
            let confirmed = sqlx::query(HISTORY_CONFIRM)
                .bind(&key.destination)
                .bind(&key.key)
                .bind(ticket.as_str())
                .bind(&sent.message_id)
                .bind(&sent.sequence_number)
                .bind(retention_millis(duration))
                .execute(&self.pool)
                .await?;
            Ok(confirmed.rows_affected() == 1)
        })
        .await
    }

    async fn cancel(&self, key: &HistoryKey, ticket: &Ticket) -> Result<(), StoreError> {
        super::held(async move {
            sqlx::query(HISTORY_CANCEL)
                .bind(&key.destination)
                .bind(&key.key)
                .bind(ticket.as_str())
                .execute(&self.pool)
                .await?;
            Ok(())
        })
        .await
    }

    async fn sweep_history(&self, limit: u32) -> Result<u64, StoreError> {
        super::held(async move {
            let deleted = sqlx::query(HISTORY_SWEEP)
                .bind(i64::from(limit))
                .execute(&self.pool)
                .await?;
            Ok(deleted.rows_affected())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_migrations_go_up_to_the_schema_version() {
        super::super::assert_migrates_to_the_schema_version(super::MIGRATIONS);
    }
}
