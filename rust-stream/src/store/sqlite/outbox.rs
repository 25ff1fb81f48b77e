//! The SQLite store's outbox: scheduled rows by when the relay may read them, the relay's marks
//! of the keyed rows it read, and cancels (see the [module docs](super)).

use std::time::Duration;

use sqlx::sqlite::{Sqlite, SqlitePool};
use sqlx::Row;

use super::{begin_immediate, SqliteLease, SqliteStore};
use crate::store::{
    self, millis, outbox_now_millis, outbox_times, retention_millis, Backlog, Cancellation, Due,
    Leased, NewOutboxRow, OutboxRow, OutboxStore, StoreError, SCHEDULE_KEY_RETENTION,
};

/// Times are the outbox's clock (`?4`, see [`outbox_now_millis`]).
const WRITE: &str = "
    INSERT INTO rust_stream_outbox
        (destination, group_id, message, created_at, due_at, ready_at, scheduled, schedule_key)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

/// The rows the relay may send at `?1`, earliest due first, ties in commit order: through the
/// `(ready_at, due_at, id)` index, which skips the rows waiting for later.
///
/// An unscheduled row is due when it was written, and a writer reads the clock before it waits
/// for the write lock, so a group's row committed later may carry an earlier time: such a row
/// counts as due no earlier than the group's unscheduled rows before it (`after`), so that they
/// go in commit order.
const LEASE: &str = "
    SELECT id, destination, group_id, message, due_at, scheduled, schedule_key FROM (
        SELECT id, destination, group_id, message, due_at, scheduled, schedule_key,
               CASE WHEN scheduled THEN due_at
                    ELSE max(CASE WHEN scheduled THEN NULL ELSE due_at END)
                         OVER (PARTITION BY destination, group_id ORDER BY id)
               END AS after
        FROM rust_stream_outbox
        WHERE ready_at <= ?1)
    ORDER BY after, id
    LIMIT ?2";

/// The backlog at `?1`, each figure from the `ready_at` index: the rows the relay may send
/// (counted), the earliest of them, and the next row waiting for later.
const BACKLOG: &str = "
    SELECT (SELECT count(*) FROM rust_stream_outbox WHERE ready_at <= ?1) AS ready,
           (SELECT min(ready_at) FROM rust_stream_outbox) AS first_ready,
           (SELECT min(ready_at) FROM rust_stream_outbox WHERE ready_at > ?1) AS next_ready";

/// The rows waiting for later at `?1`: a walk of the index's later part, so counted now and
/// then ([`WaitingCount`]).
const WAITING: &str = "SELECT count(*) FROM rust_stream_outbox WHERE ready_at > ?1";

/// Marks the keyed rows a round read (ids as a JSON array), answering those still there: a
/// cancel committed since the read deleted the others, which the round then leaves.
const MARK_RELAYING: &str = "
    UPDATE rust_stream_outbox SET relaying = 1
    WHERE id IN (SELECT value FROM json_each(?1))
    RETURNING id";

const UNMARK_RELAYING: &str = "
    UPDATE rust_stream_outbox SET relaying = 0 WHERE id IN (SELECT value FROM json_each(?1))";

/// Remembers the keys of the sent rows (ids as a JSON array) before they are deleted.
const REMEMBER_SENT: &str = "
    INSERT INTO rust_stream_outbox_keys (destination, schedule_key, sent, finished_at)
    SELECT destination, schedule_key, 1, ?2 FROM rust_stream_outbox
    WHERE id IN (SELECT value FROM json_each(?1)) AND schedule_key IS NOT NULL
    ON CONFLICT (destination, schedule_key) DO UPDATE
        SET sent = 1, finished_at = excluded.finished_at";

/// Forgets keys finished at or before `?1`.
const FORGET_KEYS: &str = "DELETE FROM rust_stream_outbox_keys WHERE finished_at <= ?1";

/// Cancels a waiting keyed row (not one the relay has read).
const CANCEL: &str = "
    DELETE FROM rust_stream_outbox
    WHERE destination = ?1 AND schedule_key = ?2 AND relaying = 0
    RETURNING id";

const REMEMBER_CANCELLED: &str = "
    INSERT INTO rust_stream_outbox_keys (destination, schedule_key, sent, finished_at)
    VALUES (?1, ?2, 0, ?3)
    ON CONFLICT (destination, schedule_key) DO UPDATE
        SET sent = 0, finished_at = excluded.finished_at";

/// A keyed row the relay has read, still there.
const RELAYING: &str = "
    SELECT EXISTS (SELECT 1 FROM rust_stream_outbox
                   WHERE destination = ?1 AND schedule_key = ?2 AND relaying = 1)";

/// A key sent (1) or cancelled (0) since `?3`.
const FINISHED: &str = "
    SELECT sent FROM rust_stream_outbox_keys
    WHERE destination = ?1 AND schedule_key = ?2 AND finished_at > ?3";

/// The ids come as one JSON array: one statement whatever their number.
const DELETE_SENT: &str = "
    DELETE FROM rust_stream_outbox WHERE id IN (SELECT value FROM json_each(?1))";

/// How long the relay waits for the write lock to mark the rows it read, or delete those it sent.
const RELAY_WAIT: Duration = Duration::from_secs(5);

/// How long of real time the relay's wait for the write lock holds a paused clock still.
const HOLD_FOR_THE_LOCK: Duration = Duration::from_millis(100);

/// A write transaction for the relay (`BEGIN IMMEDIATE`, waiting up to [`RELAY_WAIT`] for the
/// lock), with a paused clock held still as for every call of the store
/// ([`hold_the_clock`](store::hold_the_clock)), but only for [`HOLD_FOR_THE_LOCK`]: the
/// transaction that holds the lock may be waiting for time to pass (a test's reschedule held
/// open across hours of paused clock), and holding the clock longer would have the two wait for
/// each other until the busy timeout, round after round, where in real time the hours pass and
/// the transaction ends.
async fn write_lock(pool: &SqlitePool) -> Result<sqlx::Transaction<'static, Sqlite>, StoreError> {
    let begun = store::hold_the_clock_at_most(
        HOLD_FOR_THE_LOCK,
        pool.begin_with(begin_immediate(RELAY_WAIT)),
    );
    Ok(begun.await?)
}

fn is_unique_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|error| error.is_unique_violation())
}

impl SqliteStore {
    /// The relay's read: up to `limit` rows it may send now, each with its due time, and the
    /// backlog.
    async fn read(&self, limit: u32) -> Result<(Vec<(OutboxRow, i64)>, Backlog), StoreError> {
        let now = outbox_now_millis();
        let found = sqlx::query(LEASE)
            .bind(now)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        let mut read = Vec::with_capacity(found.len());
        for row in &found {
            let due: i64 = row.try_get("due_at")?;
            let row = OutboxRow {
                id: row.try_get("id")?,
                destination: row.try_get("destination")?,
                group_id: row.try_get("group_id")?,
                message: row.try_get("message")?,
                due: Due {
                    scheduled: row.try_get("scheduled")?,
                    until: millis(due - now),
                    past: millis(now - due),
                },
                schedule_key: row.try_get("schedule_key")?,
            };
            read.push((row, due));
        }
        let backlog = sqlx::query(BACKLOG).bind(now).fetch_one(&self.pool).await?;
        let first_ready: Option<i64> = backlog.try_get("first_ready")?;
        let next_ready: Option<i64> = backlog.try_get("next_ready")?;
        let backlog = Backlog {
            rows: backlog.try_get::<i64, _>("ready")? as u64,
            oldest_age: first_ready
                .filter(|ready| *ready <= now)
                .map(|ready| millis(now - ready)),
            scheduled: match self.waiting.fresh() {
                Some(waiting) => waiting,
                None => {
                    let waiting: i64 = sqlx::query_scalar(WAITING)
                        .bind(now)
                        .fetch_one(&self.pool)
                        .await?;
                    self.waiting.counted(waiting as u64)
                }
            },
            next_in: next_ready.map(|ready| millis(ready - now)),
        };
        Ok((read, backlog))
    }
}

impl OutboxStore for SqliteStore {
    type Connection = sqlx::SqliteConnection;
    type Lease = SqliteLease;

    async fn write(
        &self,
        connection: &mut sqlx::SqliteConnection,
        row: NewOutboxRow<'_>,
    ) -> Result<(), StoreError> {
        store::held(async move {
            let (now, due, ready) = outbox_times(&row);
            let scheduled = !row.due_in.is_zero();
            let written = sqlx::query(WRITE)
                .bind(row.destination)
                .bind(row.group_id)
                .bind(row.message)
                .bind(now)
                .bind(due)
                .bind(ready)
                .bind(scheduled)
                .bind(row.schedule_key)
                .execute(connection)
                .await;
            match written {
                Err(error) if is_unique_violation(&error) => Err(StoreError::ScheduleKeyInUse {
                    destination: row.destination.to_owned(),
                    key: row.schedule_key.unwrap_or_default().to_owned(),
                }),
                Err(error) => Err(error.into()),
                Ok(_) => Ok(()),
            }
        })
        .await
    }

    async fn lease(
        &self,
        limit: u32,
        _lease_timeout: Duration,
    ) -> Result<Option<Leased<SqliteLease>>, StoreError> {
        // One process: a relay that hangs is dropped by its app's shutdown, which frees the lock.
        let Ok(held) = self.relay.clone().try_lock_owned() else {
            return Ok(None);
        };
        let (mut read, backlog) = store::held(self.read(limit)).await?;
        let keyed: Vec<i64> = read
            .iter()
            .filter(|(row, _)| row.schedule_key.is_some())
            .map(|(row, _)| row.id)
            .collect();
        let mut marked = Vec::new();
        if !keyed.is_empty() {
            // The mark waits for any transaction that holds the write lock, a cancel among them:
            // one committed deleted its row, which the round then leaves (and a cancel after the
            // mark finds the row being sent); one rolled back leaves it to be marked and sent.
            let ids = serde_json::to_string(&keyed).expect("ids are numbers");
            let mut transaction = write_lock(&self.pool).await?;
            marked = store::held(async move {
                let marked: Vec<i64> = sqlx::query_scalar(MARK_RELAYING)
                    .bind(ids)
                    .fetch_all(&mut *transaction)
                    .await?;
                transaction.commit().await?;
                Ok(marked)
            })
            .await?;
            read.retain(|(row, _)| row.schedule_key.is_none() || marked.contains(&row.id));
            // The wait may have been long: what is due is told from now.
            let now = outbox_now_millis();
            for (row, due) in &mut read {
                row.due.until = millis(*due - now);
                row.due.past = millis(now - *due);
            }
        }
        Ok(Some(Leased {
            lease: SqliteLease {
                _held: held,
                marked,
            },
            rows: read.into_iter().map(|(row, _)| row).collect(),
            backlog,
        }))
    }

    async fn finish(&self, lease: SqliteLease, sent: &[i64]) -> Result<(), StoreError> {
        let unsent: Vec<i64> = lease
            .marked
            .iter()
            .copied()
            .filter(|id| !sent.contains(id))
            .collect();
        if sent.is_empty() && unsent.is_empty() {
            return Ok(());
        }
        let mut transaction = write_lock(&self.pool).await?;
        store::held(async move {
            let now = outbox_now_millis();
            let ids = serde_json::to_string(sent).expect("ids are numbers");
            if !lease.marked.is_empty() {
                sqlx::query(REMEMBER_SENT)
                    .bind(&ids)
                    .bind(now)
                    .execute(&mut *transaction)
                    .await?;
                sqlx::query(FORGET_KEYS)
                    .bind(now - retention_millis(SCHEDULE_KEY_RETENTION))
                    .execute(&mut *transaction)
                    .await?;
            }
            sqlx::query(DELETE_SENT)
                .bind(ids)
                .execute(&mut *transaction)
                .await?;
            if !unsent.is_empty() {
                sqlx::query(UNMARK_RELAYING)
                    .bind(serde_json::to_string(&unsent).expect("ids are numbers"))
                    .execute(&mut *transaction)
                    .await?;
            }
            transaction.commit().await?;
            drop(lease);
            Ok(())
        })
        .await
    }

    async fn cancel(
        &self,
        connection: &mut sqlx::SqliteConnection,
        destination: &str,
        key: &str,
    ) -> Result<Cancellation, StoreError> {
        store::held(async move {
            let now = outbox_now_millis();
            let cancelled: Option<i64> = sqlx::query_scalar(CANCEL)
                .bind(destination)
                .bind(key)
                .fetch_optional(&mut *connection)
                .await?;
            if cancelled.is_some() {
                sqlx::query(REMEMBER_CANCELLED)
                    .bind(destination)
                    .bind(key)
                    .bind(now)
                    .execute(&mut *connection)
                    .await?;
                return Ok(Cancellation::Cancelled);
            }
            let relaying: bool = sqlx::query_scalar(RELAYING)
                .bind(destination)
                .bind(key)
                .fetch_one(&mut *connection)
                .await?;
            if relaying {
                return Ok(Cancellation::AlreadySent);
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
