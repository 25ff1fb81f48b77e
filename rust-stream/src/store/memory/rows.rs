//! The in-process store's outbox state: committed rows by id and by when the relay may read them,
//! the keys of scheduled rows, and the signal a commit changes. The store's shared state holds
//! them (`mod.rs`); the outbox's operations (`outbox.rs`) read and change them.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use tokio::sync::watch;
use tokio::time::Instant;

use crate::store::{OutboxRow, SCHEDULE_KEY_RETENTION};

/// The outbox's committed rows, and what it knows of its schedule keys.
#[derive(Default)]
pub(super) struct Rows {
    pub(super) by_id: BTreeMap<i64, Stored>,
    /// Each waiting row by when the relay may read it, then id.
    pub(super) by_ready: BTreeSet<(Instant, i64)>,
    /// The id the last committed row got: ids follow commits.
    pub(super) last_id: i64,
    /// Each schedule key of a destination, (destination, key), and where its row is.
    pub(super) keys: HashMap<(String, String), KeyState>,
    /// Keys sent or cancelled, oldest first: forgotten after [`SCHEDULE_KEY_RETENTION`].
    pub(super) finished: VecDeque<(Instant, (String, String))>,
}

/// A committed row, with its times by tokio's clock.
pub(super) struct Stored {
    pub(super) row: OutboxRow,
    pub(super) due: Instant,
    pub(super) ready: Instant,
}

/// Where the row of a schedule key is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyState {
    /// Written by transaction `tx`, not yet committed.
    Writing { tx: u64 },
    /// Written and then cancelled by transaction `tx`, not yet committed: its commit writes
    /// nothing.
    WrittenCancelled { tx: u64 },
    /// Committed, waiting as row `id`.
    Pending { id: i64 },
    /// Row `id`, cancelled by transaction `tx`, not yet committed: the relay does not read it.
    Cancelling { id: i64, tx: u64 },
    /// Row `id`, read by the relay's round under way.
    InFlight { id: i64 },
    /// Sent at this time.
    Sent { at: Instant },
    /// Cancelled at this time.
    Cancelled { at: Instant },
}

/// The signal a commit changes: [`OutboxStore::commits`].
pub(super) struct CommitSignal(watch::Sender<u64>);

impl Default for CommitSignal {
    fn default() -> Self {
        Self(watch::channel(0).0)
    }
}

impl CommitSignal {
    /// A receiver that sees each later commit.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }

    pub(super) fn bump(&self) {
        self.0
            .send_modify(|commits| *commits = commits.wrapping_add(1));
    }
}

impl Rows {
    /// Forgets the keys sent or cancelled longer than [`SCHEDULE_KEY_RETENTION`] ago (unless
    /// written again since).
    pub(super) fn forget_old_keys(&mut self, now: Instant) {
        while let Some((at, _)) = self.finished.front() {
            if now.duration_since(*at) < SCHEDULE_KEY_RETENTION {
                break;
            }
            let (at, key) = self.finished.pop_front().expect("just seen");
            if matches!(
                self.keys.get(&key),
                Some(KeyState::Sent { at: when } | KeyState::Cancelled { at: when }) if *when == at
            ) {
                self.keys.remove(&key);
            }
        }
    }

    pub(super) fn finish_key(&mut self, key: (String, String), state: KeyState, now: Instant) {
        self.keys.insert(key.clone(), state);
        self.finished.push_back((now, key));
    }

    pub(super) fn remove(&mut self, id: i64) -> Option<Stored> {
        let stored = self.by_id.remove(&id)?;
        self.by_ready.remove(&(stored.ready, id));
        Some(stored)
    }
}
