//! The PostgreSQL store's outbox: rows written under their group's lock, scheduled rows by when
//! the relay may read them, the round's locks, and cancels (see the [module docs](super)).

use std::time::Duration;

use sqlx::postgres::Postgres;
use sqlx::{AssertSqlSafe, Row};

use super::PostgresStore;
use crate::store::{
    self, millis, outbox_now_millis, outbox_times, retention_millis, timeout_millis, Backlog,
    Cancellation, Due, Leased, NewOutboxRow, OutboxRow, OutboxStore, StoreError,
    SCHEDULE_KEY_RETENTION,
};

/// The first half of the advisory lock that a writer of an outbox row of a FIFO group holds to
/// its commit (the second is a hash of the destination and the group), so that two transactions
/// writing to one group commit one after the other and their rows' ids follow their commits.
const OUTBOX_GROUP_LOCK: i32 = 0x7273_0010;

/// The first half of the advisory lock a relay holds for one round (the second is a hash of
/// the schema): one relay at a time reads and deletes rows.
const OUTBOX_RELAY_LOCK: i32 = 0x7273_0011;

/// An outbox row of a FIFO group, written once the group's lock is this transaction's (the CTE
/// takes it before the row, and with it its id, is made). Times are milliseconds of the
/// outbox's clock. A key another waiting row holds writes nothing and answers no row (an error
/// would abort the caller's transaction); one a transaction not yet committed is writing waits
/// for it.
const WRITE_GROUPED: &str = "
    WITH serialized AS (SELECT pg_advisory_xact_lock($1, hashtext($2 || '/' || $3)))
    INSERT INTO rust_stream_outbox
        (destination, group_id, message, due_at, ready_at, scheduled, schedule_key)
    SELECT $2, $3, $4, to_timestamp($5::float8 / 1000), to_timestamp($6::float8 / 1000), $7, $8
    FROM serialized
    ON CONFLICT (destination, schedule_key) WHERE schedule_key IS NOT NULL DO NOTHING
    RETURNING id";

const WRITE: &str = "
    INSERT INTO rust_stream_outbox
        (destination, group_id, message, due_at, ready_at, scheduled, schedule_key)
    VALUES ($1, NULL, $2, to_timestamp($3::float8 / 1000), to_timestamp($4::float8 / 1000), $5, $6)
    ON CONFLICT (destination, schedule_key) WHERE schedule_key IS NOT NULL DO NOTHING
    RETURNING id";

/// The relay's round: its lock if no other relay holds it, then the rows it may send at `$3`
/// (milliseconds), earliest due first, ties in commit order, through the `(ready_at, due_at,
/// id)` index, which skips the rows waiting for later. One row with `held` false when another
/// relay has the lock, one with no id when nothing is ready.
///
/// An unscheduled row is due when it was written, and a writer of a group reads the clock
/// before it waits for the group's lock, so a row committed later may carry an earlier time:
/// it counts as due no earlier than the group's unscheduled rows before it (`after`), so that
/// they go in commit order.
const LEASE: &str = "
    WITH lease AS (
        SELECT pg_try_advisory_xact_lock($1, hashtext(coalesce(current_schema(), ''))) AS held
    )
    SELECT lease.held, rows.id, rows.destination, rows.group_id, rows.message, rows.due_ms,
           rows.scheduled, rows.schedule_key
    FROM lease LEFT JOIN LATERAL (
        SELECT * FROM (
            SELECT id, destination, group_id, message, scheduled, schedule_key,
                   (extract(epoch FROM due_at) * 1000)::bigint AS due_ms,
                   CASE WHEN scheduled THEN due_at
                        ELSE max(due_at) FILTER (WHERE NOT scheduled)
                             OVER (PARTITION BY destination, group_id ORDER BY id)
                   END AS after
            FROM rust_stream_outbox
            WHERE lease.held AND ready_at <= to_timestamp($3::float8 / 1000)
        ) ready
        ORDER BY after, id
        LIMIT $2
    ) rows ON true";

/// Locks the rows a round read (window functions and `FOR UPDATE` do not go in one statement),
/// answering those it locked: a row another transaction holds is being cancelled, and the round
/// leaves it and the rest of its group until that transaction ends.
const LOCK_READ: &str = "
    SELECT id FROM rust_stream_outbox WHERE id = ANY($1) FOR UPDATE SKIP LOCKED";

/// The backlog at `$1` (milliseconds), from the `ready_at` index: the rows the relay may send
/// (counted), the earliest of them and the next row waiting for later.
const BACKLOG: &str = "
    SELECT (SELECT count(*) FROM rust_stream_outbox
            WHERE ready_at <= to_timestamp($1::float8 / 1000)) AS ready,
           (SELECT (extract(epoch FROM min(ready_at)) * 1000)::bigint
            FROM rust_stream_outbox) AS first_ready,
           (SELECT (extract(epoch FROM min(ready_at)) * 1000)::bigint FROM rust_stream_outbox
            WHERE ready_at > to_timestamp($1::float8 / 1000)) AS next_ready";

/// The rows waiting for later at `$1`: a walk of the index's later part, so counted now and
/// then ([`WaitingCount`]).
const WAITING: &str = "
    SELECT count(*) FROM rust_stream_outbox WHERE ready_at > to_timestamp($1::float8 / 1000)";

/// Remembers the keys of the sent rows before they are deleted, at `$2` (milliseconds).
const REMEMBER_SENT: &str = "
    INSERT INTO rust_stream_outbox_keys (destination, schedule_key, sent, finished_at)
    SELECT destination, schedule_key, true, to_timestamp($2::float8 / 1000)
    FROM rust_stream_outbox
    WHERE id = ANY($1) AND schedule_key IS NOT NULL
    ON CONFLICT (destination, schedule_key) DO UPDATE
        SET sent = true, finished_at = EXCLUDED.finished_at";

/// Forgets keys finished at or before `$1` (milliseconds).
const FORGET_KEYS: &str = "
    DELETE FROM rust_stream_outbox_keys WHERE finished_at <= to_timestamp($1::float8 / 1000)";

const DELETE_SENT: &str = "DELETE FROM rust_stream_outbox WHERE id = ANY($1)";

/// Cancels a waiting keyed row. A row a relay's round has read is locked by it: the delete
/// waits for the round, then finds the row gone (sent) or still there (not sent: cancelled).
const CANCEL: &str = "
    DELETE FROM rust_stream_outbox WHERE destination = $1 AND schedule_key = $2 RETURNING id";

const REMEMBER_CANCELLED: &str = "
    INSERT INTO rust_stream_outbox_keys (destination, schedule_key, sent, finished_at)
    VALUES ($1, $2, false, to_timestamp($3::float8 / 1000))
    ON CONFLICT (destination, schedule_key) DO UPDATE
        SET sent = false, finished_at = EXCLUDED.finished_at";

/// A key sent (true) or cancelled (false) after `$3` (milliseconds).
const FINISHED: &str = "
    SELECT sent FROM rust_stream_outbox_keys
    WHERE destination = $1 AND schedule_key = $2 AND finished_at > to_timestamp($3::float8 / 1000)";

impl OutboxStore for PostgresStore {
    type Connection = sqlx::PgConnection;
    type Lease = sqlx::Transaction<'static, Postgres>;

    async fn write(
        &self,
        connection: &mut sqlx::PgConnection,
        row: NewOutboxRow<'_>,
    ) -> Result<(), StoreError> {
        store::held(async move {
            let (_, due, ready) = outbox_times(&row);
            let scheduled = !row.due_in.is_zero();
            let written = match row.group_id {
                Some(group_id) => {
                    sqlx::query(WRITE_GROUPED)
                        .bind(OUTBOX_GROUP_LOCK)
                        .bind(row.destination)
                        .bind(group_id)
                        .bind(row.message)
                        .bind(due)
                        .bind(ready)
                        .bind(scheduled)
                        .bind(row.schedule_key)
                        .fetch_optional(connection)
                        .await?
                }
                None => {
                    sqlx::query(WRITE)
                        .bind(row.destination)
                        .bind(row.message)
                        .bind(due)
                        .bind(ready)
                        .bind(scheduled)
                        .bind(row.schedule_key)
                        .fetch_optional(connection)
                        .await?
                }
            };
            match written {
                Some(_) => Ok(()),
                None => Err(StoreError::ScheduleKeyInUse {
                    destination: row.destination.to_owned(),
                    key: row.schedule_key.unwrap_or_default().to_owned(),
                }),
            }
        })
        .await
    }

    async fn lease(
        &self,
        limit: u32,
        lease_timeout: Duration,
    ) -> Result<Option<Leased<Self::Lease>>, StoreError> {
        store::held(async move {
            // A relay that hangs holding the lock is rolled back by the server, which frees it.
            let begin = format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; \
                 SET LOCAL idle_in_transaction_session_timeout = {}",
                timeout_millis(lease_timeout),
            );
            let mut transaction = self.pool.begin_with(AssertSqlSafe(begin)).await?;
            let now = outbox_now_millis();
            let found = sqlx::query(LEASE)
                .bind(OUTBOX_RELAY_LOCK)
                .bind(i64::from(limit))
                .bind(now)
                .fetch_all(&mut *transaction)
                .await?;
            let held = match found.first() {
                Some(first) => first.try_get::<bool, _>("held")?,
                None => false,
            };
            if !held {
                transaction.rollback().await?;
                return Ok(None);
            }
            let mut read = Vec::with_capacity(found.len());
            for row in &found {
                let Some(id) = row.try_get::<Option<i64>, _>("id")? else {
                    continue;
                };
                let due: i64 = row.try_get("due_ms")?;
                read.push(OutboxRow {
                    id,
                    destination: row.try_get("destination")?,
                    group_id: row.try_get("group_id")?,
                    message: row.try_get("message")?,
                    due: Due {
                        scheduled: row.try_get("scheduled")?,
                        until: millis(due - now),
                        past: millis(now - due),
                    },
                    schedule_key: row.try_get("schedule_key")?,
                });
            }
            if !read.is_empty() {
                let ids: Vec<i64> = read.iter().map(|row| row.id).collect();
                let locked: Vec<i64> = sqlx::query_scalar(LOCK_READ)
                    .bind(&ids)
                    .fetch_all(&mut *transaction)
                    .await?;
                // A row being cancelled holds its group: what follows it waits for the cancel's
                // transaction, which may roll back.
                let mut blocked: Vec<(String, Option<String>)> = Vec::new();
                read.retain(|row| {
                    let group = (row.destination.clone(), row.group_id.clone());
                    if row.group_id.is_some() && blocked.contains(&group) {
                        return false;
                    }
                    if locked.contains(&row.id) {
                        return true;
                    }
                    blocked.push(group);
                    false
                });
            }
            let backlog = sqlx::query(BACKLOG)
                .bind(now)
                .fetch_one(&mut *transaction)
                .await?;
            let first_ready: Option<i64> = backlog.try_get("first_ready")?;
            let next_ready: Option<i64> = backlog.try_get("next_ready")?;
            let scheduled = match self.waiting.fresh() {
                Some(waiting) => waiting,
                None => {
                    let waiting: i64 = sqlx::query_scalar(WAITING)
                        .bind(now)
                        .fetch_one(&mut *transaction)
                        .await?;
                    self.waiting.counted(waiting as u64)
                }
            };
            let backlog = Backlog {
                rows: backlog.try_get::<i64, _>("ready")? as u64,
                oldest_age: first_ready
                    .filter(|ready| *ready <= now)
                    .map(|ready| millis(now - ready)),
                scheduled,
                next_in: next_ready.map(|ready| millis(ready - now)),
            };
            Ok(Some(Leased {
                lease: transaction,
                rows: read,
                backlog,
            }))
        })
        .await
    }

    async fn finish(&self, mut lease: Self::Lease, sent: &[i64]) -> Result<(), StoreError> {
        store::held(async move {
            if !sent.is_empty() {
                let now = outbox_now_millis();
                sqlx::query(REMEMBER_SENT)
                    .bind(sent)
                    .bind(now)
                    .execute(&mut *lease)
                    .await?;
                sqlx::query(FORGET_KEYS)
                    .bind(now - retention_millis(SCHEDULE_KEY_RETENTION))
                    .execute(&mut *lease)
                    .await?;
                sqlx::query(DELETE_SENT)
                    .bind(sent)
                    .execute(&mut *lease)
                    .await?;
            }
            lease.commit().await?;
            Ok(())
        })
        .await
    }

    async fn cancel(
        &self,
        connection: &mut sqlx::PgConnection,
        destination: &str,
        key: &str,
    ) -> Result<Cancellation, StoreError> {
        store::held(async move {
            let cancelled: Option<i64> = sqlx::query_scalar(CANCEL)
                .bind(destination)
                .bind(key)
                .fetch_optional(&mut *connection)
                .await?;
            let now = outbox_now_millis();
            if cancelled.is_some() {
                sqlx::query(REMEMBER_CANCELLED)
                    .bind(destination)
                    .bind(key)
                    .bind(now)
                    .execute(&mut *connection)
                    .await?;
                return Ok(Cancellation::Cancelled);
            }
            let finished: Option<bool> = sqlx::query_scalar(FINISHED)
                .bind(destination)
                .bind(key)
                .bind(now - retention_millis(SCHEDULE_KEY_RETENTION))
                .fetch_optional(&mut *connection)
                .await?;
            Ok(Cancellation::of_finished_key(finished))
        })
        .await
    }
}
