//! The in-process store's outbox: committed rows by id and by when the relay may read them, and
//! the keys of scheduled rows, on tokio's clock (a paused clock passes a three-day schedule
//! without waiting).
//!
//! A transaction's marks (a schedule key taken, a row being cancelled) are made when it writes,
//! as a database's row locks are, so a second writer of a key finds it taken and the relay never
//! reads a row whose cancel is still to commit; a rollback undoes them.

use std::sync::MutexGuard;
use std::time::Duration;

use tokio::sync::{watch, OwnedMutexGuard};
use tokio::time::Instant;

use super::rows::{KeyState, Rows, Stored};
use super::{MemoryStore, MemoryTransaction, Shared};
use crate::store::{
    Backlog, Cancellation, Due, Leased, NewOutboxRow, OutboxRow, OutboxStore, StoreError,
};

fn lock(shared: &Shared) -> MutexGuard<'_, Rows> {
    // Each change is made whole under the lock: a poisoned lock still holds whole rows.
    shared
        .outbox
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MemoryStore {
    /// The outbox's committed rows not yet relayed (scheduled ones included), oldest first.
    pub fn outbox_rows(&self) -> Vec<OutboxRow> {
        lock(&self.shared)
            .by_id
            .values()
            .map(|stored| stored.row.clone())
            .collect()
    }
}

/// The in-process relay's lease: the store's relay lock, held until the relay finishes.
#[derive(Debug)]
pub struct MemoryLease {
    _held: OwnedMutexGuard<()>,
    store: MemoryStore,
    /// The keys of the rows this lease read: back to waiting unless sent.
    in_flight: Vec<((String, String), i64)>,
}

impl Drop for MemoryLease {
    fn drop(&mut self) {
        if self.in_flight.is_empty() {
            return;
        }
        let mut rows = lock(&self.store.shared);
        for (key, id) in self.in_flight.drain(..) {
            if rows.keys.get(&key) == Some(&KeyState::InFlight { id }) {
                rows.keys.insert(key, KeyState::Pending { id });
            }
        }
    }
}

impl OutboxStore for MemoryStore {
    type Connection = MemoryTransaction;
    type Lease = MemoryLease;

    async fn write(
        &self,
        connection: &mut MemoryTransaction,
        row: NewOutboxRow<'_>,
    ) -> Result<(), StoreError> {
        let tx = connection.serial;
        let key = row
            .schedule_key
            .map(|key| (row.destination.to_owned(), key.to_owned()));
        if let Some(key) = &key {
            let mut rows = lock(&self.shared);
            let previous = rows.keys.get(key).copied();
            match previous {
                None | Some(KeyState::Sent { .. } | KeyState::Cancelled { .. }) => {}
                // Rescheduling: cancelled earlier in this same transaction.
                Some(KeyState::Cancelling { tx: by, .. }) if by == tx => {}
                Some(_) => {
                    return Err(StoreError::ScheduleKeyInUse {
                        destination: key.0.clone(),
                        key: key.1.clone(),
                    })
                }
            }
            rows.keys.insert(key.clone(), KeyState::Writing { tx });
            let (shared, key) = (self.shared.clone(), key.clone());
            connection.on_rollback.push(Box::new(move || {
                let mut rows = lock(&shared);
                match previous {
                    Some(state) => rows.keys.insert(key, state),
                    None => rows.keys.remove(&key),
                };
            }));
        }
        let shared = self.shared.clone();
        let (destination, group_id, message) = (
            row.destination.to_owned(),
            row.group_id.map(str::to_owned),
            row.message.to_owned(),
        );
        let scheduled = !row.due_in.is_zero();
        let written = Instant::now();
        let due_scheduled = written.checked_add(row.due_in);
        let send_early = row.send_early;
        // The row gets its id, and an unscheduled row its due time, when it commits: ids and
        // due times follow commits, so a group's unscheduled rows go in commit order. The
        // outbox's lock is not the keys' lock the commit holds.
        connection.on_commit(move || {
            let mut rows = lock(&shared);
            let now = Instant::now();
            if let Some(key) = &key {
                if rows.keys.get(key) == Some(&KeyState::WrittenCancelled { tx }) {
                    rows.finish_key(key.clone(), KeyState::Cancelled { at: now }, now);
                    drop(rows);
                    shared.commits.bump();
                    return;
                }
            }
            rows.last_id += 1;
            let id = rows.last_id;
            // A schedule past tokio's clock's range is as good as never; the outbox refuses
            // schedules that far before writing.
            let due = if scheduled {
                due_scheduled.unwrap_or(now + Duration::from_secs(100 * 365 * 24 * 3600))
            } else {
                now
            };
            let ready = due
                .checked_sub(send_early)
                .map_or(now, |ready| ready.max(now));
            let row = OutboxRow {
                id,
                destination,
                group_id,
                message,
                due: Due {
                    scheduled,
                    ..Due::default()
                },
                schedule_key: key.as_ref().map(|(_, key)| key.clone()),
            };
            rows.by_id.insert(id, Stored { row, due, ready });
            rows.by_ready.insert((ready, id));
            if let Some(key) = key {
                rows.keys.insert(key, KeyState::Pending { id });
            }
            drop(rows);
            shared.commits.bump();
        });
        Ok(())
    }

    async fn lease(
        &self,
        limit: u32,
        _lease_timeout: Duration,
    ) -> Result<Option<Leased<MemoryLease>>, StoreError> {
        // In one process a relay that hangs is dropped by its app's shutdown, which frees the
        // lock: there is nothing to time out.
        let Ok(held) = self.shared.relay.clone().try_lock_owned() else {
            return Ok(None);
        };
        let now = Instant::now();
        let mut rows = lock(&self.shared);
        rows.forget_old_keys(now);
        let mut ready: Vec<(Instant, i64)> = rows
            .by_ready
            .range(..=(now, i64::MAX))
            .map(|(_, id)| (rows.by_id[id].due, *id))
            .collect();
        // Earliest due first, ties in commit order: a group's rows in due order, and its
        // unscheduled ones (due at their commit) in commit order.
        ready.sort_unstable();
        let backlog = Backlog {
            rows: ready.len() as u64,
            oldest_age: rows
                .by_ready
                .first()
                .filter(|(ready, _)| *ready <= now)
                .map(|(ready, _)| now.duration_since(*ready)),
            scheduled: (rows.by_ready.len() - ready.len()) as u64,
            next_in: rows
                .by_ready
                .range((now, i64::MAX)..)
                .find(|(ready, _)| *ready > now)
                .map(|(ready, _)| ready.duration_since(now)),
        };
        let mut taken = Vec::new();
        let mut in_flight = Vec::new();
        // A group whose row is being cancelled waits for that transaction: its later rows may
        // not go ahead of a row that might stay.
        let mut blocked: Vec<(String, String)> = Vec::new();
        for (due, id) in ready {
            if taken.len() >= limit as usize {
                break;
            }
            let stored = &rows.by_id[&id];
            let group = stored
                .row
                .group_id
                .as_ref()
                .map(|group| (stored.row.destination.clone(), group.clone()));
            if group.as_ref().is_some_and(|group| blocked.contains(group)) {
                continue;
            }
            let key = stored
                .row
                .schedule_key
                .as_ref()
                .map(|key| (stored.row.destination.clone(), key.clone()));
            // A keyed row goes only while its key is its own and waiting: not while a
            // transaction cancels (or reschedules) it.
            if let Some(key) = &key {
                if rows.keys.get(key) != Some(&KeyState::Pending { id }) {
                    blocked.extend(group);
                    continue;
                }
            }
            let mut row = stored.row.clone();
            row.due.until = due.saturating_duration_since(now);
            row.due.past = now.saturating_duration_since(due);
            taken.push(row);
            if let Some(key) = key {
                rows.keys.insert(key.clone(), KeyState::InFlight { id });
                in_flight.push((key, id));
            }
        }
        drop(rows);
        Ok(Some(Leased {
            lease: MemoryLease {
                _held: held,
                store: self.clone(),
                in_flight,
            },
            rows: taken,
            backlog,
        }))
    }

    async fn finish(&self, lease: MemoryLease, sent: &[i64]) -> Result<(), StoreError> {
        let mut rows = lock(&self.shared);
        let now = Instant::now();
        for id in sent {
            if let Some(stored) = rows.remove(*id) {
                if let Some(key) = stored.row.schedule_key {
                    rows.finish_key(
                        (stored.row.destination, key),
                        KeyState::Sent { at: now },
                        now,
                    );
                }
            }
        }
        drop(rows);
        // Its other rows' keys go back to waiting.
        drop(lease);
        Ok(())
    }

    async fn cancel(
        &self,
        connection: &mut MemoryTransaction,
        destination: &str,
        key: &str,
    ) -> Result<Cancellation, StoreError> {
        let tx = connection.serial;
        let key = (destination.to_owned(), key.to_owned());
        let mut rows = lock(&self.shared);
        let previous = rows.keys.get(&key).copied();
        let (marked, answer) = match previous {
            Some(KeyState::Pending { id }) => {
                (KeyState::Cancelling { id, tx }, Cancellation::Cancelled)
            }
            Some(KeyState::Writing { tx: by }) if by == tx => {
                (KeyState::WrittenCancelled { tx }, Cancellation::Cancelled)
            }
            Some(KeyState::InFlight { .. } | KeyState::Sent { .. }) => {
                return Ok(Cancellation::AlreadySent)
            }
            // Another transaction's cancel not yet committed is answered as if it had: a
            // database would make this one wait for it.
            Some(
                KeyState::Cancelled { .. }
                | KeyState::Cancelling { .. }
                | KeyState::WrittenCancelled { .. },
            ) => return Ok(Cancellation::AlreadyCancelled),
            // Another transaction's write is not visible until it commits.
            Some(KeyState::Writing { .. }) | None => return Ok(Cancellation::NotFound),
        };
        rows.keys.insert(key.clone(), marked);
        drop(rows);
        let previous = previous.expect("matched above");
        let shared = self.shared.clone();
        let undo_key = key.clone();
        connection.on_rollback.push(Box::new(move || {
            lock(&shared).keys.insert(undo_key, previous);
            // The relay may be waiting for this row's group.
            shared.commits.bump();
        }));
        if let KeyState::Cancelling { id, .. } = marked {
            let shared = self.shared.clone();
            connection.on_commit(move || {
                let mut rows = lock(&shared);
                let now = Instant::now();
                rows.remove(id);
                // A reschedule in the same transaction writes the key again after this.
                rows.finish_key(key, KeyState::Cancelled { at: now }, now);
                drop(rows);
                shared.commits.bump();
            });
        }
        Ok(answer)
    }

    fn commits(&self) -> Option<watch::Receiver<u64>> {
        Some(self.shared.commits.subscribe())
    }
}
