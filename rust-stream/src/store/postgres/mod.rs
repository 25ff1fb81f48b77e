//! The inbox's and the outbox's store on PostgreSQL: one database shared by every replica of a
//! service, so a message delivered twice, to two replicas at once, still runs its handler once,
//! and the replicas' relays send each committed outbox row once, in order.
//!
//! # How a claim works
//!
//! A claim opens a transaction and inserts the key's row, already marked completed (its
//! `expires_at` is the claim's time plus the retention); the handler writes its own rows in the
//! same transaction, and [`complete`](InboxStore::complete) commits the lot. Until the commit no
//! other transaction sees the row, and a second claim of the key blocks on it in the database
//! (a unique index waits for the inserting transaction): when the first commits, the second finds
//! the key completed; when it rolls back, the second claims it. A key whose retention has passed
//! but which no [`sweep`](InboxStore::sweep) has deleted yet is taken over by the next claim, in
//! the same statement.
//!
//! On the wire, with a warm connection, a message costs **five round trips**: the `BEGIN` (one
//! simple query, which also sets the claim's timeouts), the claim's `INSERT .. ON CONFLICT`, the
//! handler's own statement (one, say), the `COMMIT` (with an `UPDATE` before it when there are
//! outputs to record: six), and the `Sync` sqlx sends to test every connection as it goes back to
//! the pool, which keeps the connection from the next claim until it is answered. The same handler
//! on a transaction of its own costs four (`BEGIN`, its statement, `COMMIT`, the `Sync`): the
//! inbox costs one round trip a message. (sqlx sends `BEGIN` as soon as the transaction is opened
//! and waits for its answer; it cannot ride with the next statement.) A duplicate costs a
//! `SELECT` of what was recorded and a `ROLLBACK` instead of the handler's statements. The
//! benchmark counts them (`cargo run --release --example bench -- --only inbox`, through a
//! proxy between the pool and the server; `docs/benchmarks.md`, "The inbox's cost"): 5.00 and
//! 4.00 a message, the inbox consuming at 0.91x the speed without it on LocalStack.
//!
//! # Guarantees
//!
//! - The handler's writes and the key are committed together or not at all.
//! - A claim waits for another attempt holding the key at most [`ClaimSettings::wait`] (the
//!   transaction's `lock_timeout` while it claims), then answers [`Claim::Busy`]. The handler's own
//!   statements run under the connection's `lock_timeout` again.
//! - A claim's transaction left idle longer than [`ClaimSettings::lease`] (its client hung or
//!   lost) is rolled back by the server (`idle_in_transaction_session_timeout`, which closes that
//!   connection), so the key is free for a retry.
//! - Times are the database's (`now()`), so replicas whose clocks disagree agree on expiry. A
//!   key's retention counts from the start of the transaction that claimed it.
//! - Two replicas starting at once migrate the schema one after the other (a transaction-scoped
//!   advisory lock, per schema), and a database migrated by a newer release is refused with
//!   [`StoreError::NewerSchema`].
//!
//! # The command history
//!
//! The store keeps a publisher's [command history](super::history) too, in
//! `rust_stream_history`: a reservation is one `INSERT .. ON CONFLICT DO UPDATE` that takes a free
//! or expired key (a second replica's blocks on the first's row for as long as that statement
//! runs, then finds it), a confirmation or a cancellation one `UPDATE` or `DELETE` under the
//! reservation's ticket, each in a transaction of its own on the pool: no connection is held
//! while the message goes to SQS. Times are the database's, as for the inbox.
//!
//! # Limits
//!
//! - A claim holds one of the pool's connections until it completes or is released: the pool's
//!   size bounds how many handlers run at once.
//! - The transaction is `READ COMMITTED` whatever the database's default (a claim that waited must
//!   see the commit it waited for); a handler that needs more takes row locks
//!   (`SELECT .. FOR UPDATE`).
//! - If the connection fails while `COMMIT` is under way, [`complete`](InboxStore::complete)
//!   answers an error though the server may have committed; the message's retry then finds its key
//!   completed, so the handler still ran once.
//! # The outbox
//!
//! [`write`](super::OutboxStore::write) inserts a row (`rust_stream_outbox`) through the caller's
//! connection, in its transaction. A row of a FIFO group first takes a transaction-scoped advisory
//! lock on its destination and group, held to the commit: two transactions that write to one
//! group commit one after the other, so the later one's row gets the larger id, and the relay,
//! which reads a group's rows due at once in id order, sends them in commit order. Transactions
//! on different groups do not wait for each other (unless their hashes collide, which only makes
//! one wait). A scheduled row carries its due time and its key (`docs/scheduling.md`); a key a
//! waiting row holds is refused without an error in the caller's transaction, which stays usable.
//!
//! A relay's round is one transaction: a `pg_try_advisory_xact_lock` that only one relay of the
//! database gets (the others stand by until their next round), the rows it may send read in the
//! same statement through the `(ready_at, due_at, id)` index (rows due in days cost it nothing),
//! a lock on those rows (`FOR UPDATE SKIP LOCKED`: a row a cancel holds is left with the rest of
//! its group), then, once they are sent, their `DELETE` and the commit. A relay that dies mid-round
//! loses the lock with its connection, and one that hangs has its transaction rolled back by the
//! server after the lease timeout (`idle_in_transaction_session_timeout`); either way the next
//! round reads the same rows and sends them again, with the same deduplication ids. The outbox's
//! times are the process's clock, not the database's: `docs/scheduling.md`, "The stores".
//!
//! - The tables are found through the connection's `search_path`, as any unqualified name: a
//!   service that keeps them in a schema of their own sets the search path on the pool's
//!   connections ([`PgConnectOptions::options`]).

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, Postgres};
use sqlx::{AssertSqlSafe, Row};

use super::history::{HistoryKey, HistoryStore, Reservation, SentRecord, Ticket};
use super::{
    pending, retention_millis, timeout_millis, Claim, ClaimSettings, InboxKey, InboxStore,
    Migration, StoreError, WaitingCount,
};

mod outbox;

/// The schema, step by step (see [`Migration`]).
pub(super) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        statements: "
        CREATE TABLE rust_stream_schema (
            version bigint PRIMARY KEY,
            applied_at timestamptz NOT NULL DEFAULT now()
        );
        CREATE TABLE rust_stream_inbox (
            consumer text NOT NULL,
            idempotency_key text NOT NULL,
            recorded text,
            claimed_at timestamptz NOT NULL,
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (consumer, idempotency_key)
        );
        CREATE INDEX rust_stream_inbox_expires_at ON rust_stream_inbox (expires_at);
    ",
    },
    Migration {
        version: 2,
        statements: HISTORY_SCHEMA,
    },
    Migration {
        version: 3,
        statements: "
        CREATE TABLE rust_stream_outbox (
            id bigserial PRIMARY KEY,
            destination text NOT NULL,
            group_id text,
            message text NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now()
        );
    ",
    },
    Migration {
        version: 4,
        statements: SCHEDULE_SCHEMA,
    },
];

/// Scheduled rows (schema version 4), as on SQLite: a row is due at `due_at` and the relay may
/// read it from `ready_at` (earlier on a queue that takes `DelaySeconds`); rows written before
/// this version are due when they were written. Both are the outbox's clock
/// (`outbox_now_millis`), not the database's. `rust_stream_outbox_keys` remembers the keys
/// sent or cancelled, for [`SCHEDULE_KEY_RETENTION`](super::SCHEDULE_KEY_RETENTION). The index
/// on `(ready_at, due_at, id)` keeps a round's read to the rows it may send, however many wait
/// for later.
const SCHEDULE_SCHEMA: &str = "
    ALTER TABLE rust_stream_outbox
        ADD COLUMN due_at timestamptz NOT NULL DEFAULT now(),
        ADD COLUMN ready_at timestamptz NOT NULL DEFAULT now(),
        ADD COLUMN scheduled boolean NOT NULL DEFAULT false,
        ADD COLUMN schedule_key text;
    UPDATE rust_stream_outbox SET due_at = created_at, ready_at = created_at;
    CREATE INDEX rust_stream_outbox_ready ON rust_stream_outbox (ready_at, due_at, id);
    CREATE UNIQUE INDEX rust_stream_outbox_key ON rust_stream_outbox (destination, schedule_key)
        WHERE schedule_key IS NOT NULL;
    CREATE TABLE rust_stream_outbox_keys (
        destination text NOT NULL,
        schedule_key text NOT NULL,
        sent boolean NOT NULL,
        finished_at timestamptz NOT NULL,
        PRIMARY KEY (destination, schedule_key)
    );
    CREATE INDEX rust_stream_outbox_keys_finished_at ON rust_stream_outbox_keys (finished_at);
";

/// The command history (schema version 2): a key is pending while `ticket` is set (its lease
/// ends at `expires_at`), sent once `message_id` is (kept until `expires_at`).
const HISTORY_SCHEMA: &str = "
    CREATE TABLE rust_stream_history (
        destination text NOT NULL,
        history_key text NOT NULL,
        ticket text,
        message_id text,
        sequence_number text,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (destination, history_key)
    );
    CREATE INDEX rust_stream_history_expires_at ON rust_stream_history (expires_at);
";

/// Reserves a key: inserts it pending, or takes over a row whose duration or lease has passed.
/// Returns a row when the key is this send's. Its own statement, so its own transaction: two
/// replicas reserving at once meet on the primary key, and the second sees the first's row.
const HISTORY_RESERVE: &str = "
    INSERT INTO rust_stream_history AS history (destination, history_key, ticket, expires_at)
    VALUES ($1, $2, $3, now() + $4::float8 * interval '1 millisecond')
    ON CONFLICT (destination, history_key) DO UPDATE
        SET ticket = EXCLUDED.ticket, message_id = NULL, sequence_number = NULL,
            expires_at = EXCLUDED.expires_at
        WHERE history.expires_at <= now()
    RETURNING 1";

/// What holds a key the reservation could not take.
const HISTORY_HELD: &str = "
    SELECT message_id, sequence_number FROM rust_stream_history
    WHERE destination = $1 AND history_key = $2 AND expires_at > now()";

const HISTORY_CONFIRM: &str = "
    UPDATE rust_stream_history
    SET ticket = NULL, message_id = $4, sequence_number = $5,
        expires_at = now() + $6::float8 * interval '1 millisecond'
    WHERE destination = $1 AND history_key = $2 AND ticket = $3";

const HISTORY_CANCEL: &str = "
    DELETE FROM rust_stream_history WHERE destination = $1 AND history_key = $2 AND ticket = $3";

/// Oldest first, through the `expires_at` index; rows a reservation is taking over are skipped.
const HISTORY_SWEEP: &str = "
    DELETE FROM rust_stream_history WHERE (destination, history_key) IN (
        SELECT destination, history_key FROM rust_stream_history
        WHERE expires_at <= now()
        ORDER BY expires_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED)";

/// The first half of the advisory lock a migration holds (the second is a hash of the schema it
/// migrates): any constant of this crate's own ("rs", then 1).
const MIGRATION_LOCK: i32 = 0x7273_0001;

/// Claims a key: inserts it, or takes over a row whose retention has passed. Returns a row when
/// the key is this transaction's, none when another attempt completed it. The `RETURNING`
/// clause runs once the row is this transaction's (after any wait), and puts back the
/// `lock_timeout` the connection had before the claim, for the handler's statements.
const CLAIM: &str = "
    INSERT INTO rust_stream_inbox AS inbox (consumer, idempotency_key, claimed_at, expires_at)
    VALUES ($1, $2, now(), now() + $3::float8 * interval '1 millisecond')
    ON CONFLICT (consumer, idempotency_key) DO UPDATE
        SET recorded = NULL, claimed_at = EXCLUDED.claimed_at, expires_at = EXCLUDED.expires_at
        WHERE inbox.expires_at <= now()
    RETURNING set_config('lock_timeout', current_setting('rust_stream.lock_timeout'), true)";

/// What a completed key recorded. A statement of its own, so it reads a snapshot taken after
/// the claim's wait: it sees the commit it waited for.
const COMPLETED: &str = "
    SELECT recorded FROM rust_stream_inbox
    WHERE consumer = $1 AND idempotency_key = $2 AND expires_at > now()";

const RECORD: &str = "
    UPDATE rust_stream_inbox SET recorded = $3 WHERE consumer = $1 AND idempotency_key = $2";

/// Oldest first, through the `expires_at` index; rows a claim is taking over are skipped.
const SWEEP: &str = "
    DELETE FROM rust_stream_inbox WHERE (consumer, idempotency_key) IN (
        SELECT consumer, idempotency_key FROM rust_stream_inbox
        WHERE expires_at <= now()
        ORDER BY expires_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED)";

/// How many times a claim tries again when the row it found completed was swept before it could
/// read it (its retention passed in between): more is not expected, but a loop must end.
const CLAIM_ATTEMPTS: usize = 3;

/// SQLSTATE `lock_not_available`: the claim waited `lock_timeout` for another attempt.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// An [`InboxStore`] on PostgreSQL: see the [module docs](self). Clones share the pool.
///
/// ```no_run
/// use rust_stream::store::postgres::PostgresStore;
/// use rust_stream::store::{Claim, ClaimSettings, InboxKey, InboxStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = PostgresStore::connect("postgres://payments@db.internal/payments").await?;
/// let key = InboxKey::new("payments.fifo", "payment-7");
/// let settings = ClaimSettings {
///     wait: Duration::from_secs(5),
///     lease: Duration::from_secs(60),
///     retention: Duration::from_secs(14 * 24 * 3600),
/// };
///
/// match store.claim(&key, settings).await? {
///     Claim::Claimed(mut transaction) => {
///         // The handler's own write, in the claim's transaction.
///         sqlx::query("INSERT INTO payments (id, cents) VALUES ($1, $2)")
///             .bind("payment-7")
///             .bind(1250_i64)
///             .execute(&mut *transaction)
///             .await?;
///         store.complete(transaction, &key, None).await?;
///     }
///     Claim::Completed(_) => { /* a duplicate: already posted */ }
///     Claim::Busy => { /* another replica is posting it: let the message come back */ }
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct PostgresStore {
    pool: PgPool,
    /// The outbox's rows waiting for later, as last counted.
    waiting: WaitingCount,
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host/database`) and creates or
    /// migrates the store's tables.
    ///
    /// The pool has sqlx's defaults (10 connections, so 10 claims open at once), except that it
    /// does not test a connection before handing it out, which would cost every claim a round
    /// trip: sqlx already tests each connection when it comes back to the pool, and a connection
    /// that died while idle fails one claim, whose message comes back. For other settings, build
    /// the pool yourself and use [`new`](Self::new).
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        super::held(async move {
            let options: PgConnectOptions = url.parse()?;
            let pool = PgPoolOptions::new()
                .test_before_acquire(false)
                .connect_with(options)
                .await?;
            Self::new(pool).await
        })
        .await
    }

    /// The store on `pool`, once it has created or migrated the store's tables.
    pub async fn new(pool: PgPool) -> Result<Self, StoreError> {
        super::held(async move {
            migrate(&pool).await?;
            Ok(Self {
                pool,
                waiting: WaitingCount::default(),
            })
        })
        .await
    }

    /// The pool the store claims in, for the service's own queries outside the inbox.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

/// Brings the schema to this release's version, in one transaction that holds an advisory lock
/// for the schema, so replicas starting together migrate one after the other.
async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    let mut transaction = pool.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext(coalesce(current_schema(), '')))")
        .bind(MIGRATION_LOCK)
        .execute(&mut *transaction)
        .await?;
    // Two statements: one that named a missing table would not be planned at all.
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('rust_stream_schema') IS NOT NULL")
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
        sqlx::query("INSERT INTO rust_stream_schema (version) VALUES ($1)")
            .bind(migration.version)
            .execute(&mut *transaction)
            .await?;
    }
    transaction.commit().await?;
    Ok(())
}

fn is_lock_timeout(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|error| error.code())
        .is_some_and(|code| code == LOCK_NOT_AVAILABLE)
}

impl super::SqlStore for PostgresStore {
    type Database = sqlx::Postgres;

    fn pool(&self) -> &sqlx::Pool<sqlx::Postgres> {
        &self.pool
    }
}

impl InboxStore for PostgresStore {
    type Transaction = sqlx::Transaction<'static, Postgres>;

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
            // One simple query, so one round trip, whatever it holds. The connection's own
            // `lock_timeout` is kept aside for `CLAIM` to put back.
            let begin = format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; \
                 SELECT set_config('rust_stream.lock_timeout', current_setting('lock_timeout'), true); \
                 SET LOCAL lock_timeout = {}; \
                 SET LOCAL idle_in_transaction_session_timeout = {}",
                timeout_millis(settings.wait),
                timeout_millis(settings.lease),
            );
            let mut transaction = self.pool.begin_with(AssertSqlSafe(begin)).await?;
            for _ in 0..CLAIM_ATTEMPTS {
                let claimed = sqlx::query(CLAIM)
                    .bind(&key.consumer)
                    .bind(&key.key)
                    .bind(retention_millis(settings.retention))
                    .fetch_optional(&mut *transaction)
                    .await;
                match claimed {
                    Ok(Some(_)) => return Ok(Claim::Claimed(transaction)),
                    Ok(None) => {}
                    // Dropping the transaction rolls it back: sqlx queues the `ROLLBACK` and sends it
                    // as the connection goes back to the pool.
                    Err(error) if is_lock_timeout(&error) => return Ok(Claim::Busy),
                    Err(error) => return Err(error.into()),
                }
                let completed = sqlx::query(COMPLETED)
                    .bind(&key.consumer)
                    .bind(&key.key)
                    .fetch_optional(&mut *transaction)
                    .await?;
                if let Some(row) = completed {
                    let recorded: Option<String> = row.try_get(0)?;
                    transaction.rollback().await?;
                    return Ok(Claim::Completed(recorded));
                }
            }
            Ok(Claim::Busy)
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
            let deleted = sqlx::query(SWEEP)
                .bind(i64::from(limit))
                .execute(&self.pool)
                .await?;
            Ok(deleted.rows_affected())
        })
        .await
    }
}

impl HistoryStore for PostgresStore {
    async fn reserve(&self, key: &HistoryKey, lease: Duration) -> Result<Reservation, StoreError> {
        super::held(async move {
            for _ in 0..CLAIM_ATTEMPTS {
                let ticket = Ticket::new();
                let reserved = sqlx::query(HISTORY_RESERVE)
                    .bind(&key.destination)
                    .bind(&key.key)
                    .bind(ticket.as_str())
                    .bind(retention_millis(lease))
                    .fetch_optional(&self.pool)
                    .await?;
                if reserved.is_some() {
                    return Ok(Reservation::Reserved(ticket));
                }
                let held = sqlx::query(HISTORY_HELD)
                    .bind(&key.destination)
                    .bind(&key.key)
                    .fetch_optional(&self.pool)
                    .await?;
                // No row: it expired (or was swept) between the two statements; reserve again.
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
