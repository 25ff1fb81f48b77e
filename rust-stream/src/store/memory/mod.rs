//! An [`InboxStore`] and [`OutboxStore`](super::OutboxStore) in the process, on tokio's clock: for tests and
//! examples, where a paused clock lets a test pass a key's retention without waiting.
//!
//! It keeps SQL's semantics where the inbox and the outbox rely on them: a held key makes a
//! second claim wait (up to its [`wait`](super::ClaimSettings::wait)), a commit makes the key,
//! the handler's writes and its outbox rows visible together, and a transaction dropped without
//! commit releases the key and leaves no row. The handler's writes are actions given to
//! [`MemoryTransaction::on_commit`], run at the commit. A transaction of the service's own,
//! outside any handler (an HTTP endpoint that writes to the outbox), is
//! [`MemoryStore::begin`], then [`MemoryStore::commit`].
//!
//! It keeps a publisher's [command history](super::history) too, on the same clock: a paused
//! clock passes a key's duration, or a dead sender's lease, without waiting. Its keys may be
//! bounded by count as well as by time ([`MemoryStore::history_capacity`]), so a server
//! deduplicating its clients' keys holds a known amount of memory however many keys they send.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::history::{HistoryKey, HistoryStore, Reservation, SentRecord, Ticket};
use super::{Claim, ClaimSettings, InboxKey, InboxStore, NewOutboxRow, StoreError};

pub mod outbox;
mod rows;

use rows::{CommitSignal, Rows};

/// An in-process [`InboxStore`]: see the [module docs](self). Clones share the store.
///
/// ```
/// use rust_stream::store::memory::MemoryStore;
/// use rust_stream::store::{Claim, ClaimSettings, InboxKey, InboxStore};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), rust_stream::store::StoreError> {
/// let store = MemoryStore::new();
/// let key = InboxKey::new("payments.fifo", "payment-7");
/// let settings = ClaimSettings {
///     wait: Duration::from_secs(1),
///     lease: Duration::from_secs(60),
///     retention: Duration::from_secs(3600),
/// };
///
/// let Claim::Claimed(mut transaction) = store.claim(&key, settings).await? else { unreachable!() };
/// transaction.on_commit(|| { /* the handler's own write: post payment-7 */ });
/// store.complete(transaction, &key, None).await?;
///
/// // The same key again: done, so its handler does not run a second time.
/// assert!(matches!(store.claim(&key, settings).await?, Claim::Completed(None)));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    keys: Mutex<Keys>,
    /// Woken whenever a held key is completed or released.
    changed: Notify,
    /// The outbox's committed rows and the keys of its scheduled ones.
    outbox: Mutex<Rows>,
    /// Changed at each commit that changes the outbox, for its relay to wake on.
    commits: CommitSignal,
    /// The number the next transaction gets, which tells a transaction's own writes apart.
    next_transaction: std::sync::atomic::AtomicU64,
    /// The relay's lease: one relay at a time reads rows.
    relay: Arc<tokio::sync::Mutex<()>>,
    /// The command history: its own lock, as no operation spans both.
    history: Mutex<HistoryKeys>,
}

/// The command history's keys, with the order they were reserved in, so that past its capacity
/// the oldest is evicted first.
struct HistoryKeys {
    /// Each key once in memory, shared with `order`.
    by_key: HashMap<Arc<HistoryKey>, HistoryEntry>,
    /// Each reservation's number and key, oldest first. A key removed since (cancelled, swept,
    /// evicted) or reserved again (a newer number) is skipped when evicting and dropped when
    /// this grows past twice the keys held, so it stays in proportion to `by_key`.
    order: VecDeque<(u64, Arc<HistoryKey>)>,
    /// The number the next reservation gets.
    next: u64,
    /// The most keys held; `usize::MAX` unless [`MemoryStore::history_capacity`] set one.
    capacity: usize,
    /// Keys evicted before their duration (or lease) passed since the last warning, and when
    /// that was: logged at most once a minute.
    evicted_early: u64,
    warned: Option<Instant>,
}

impl Default for HistoryKeys {
    fn default() -> Self {
        Self {
            by_key: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
            capacity: usize::MAX,
            evicted_early: 0,
            warned: None,
        }
    }
}

/// How often, at most, evicting unexpired history keys is logged.
const EVICTION_WARNING: Duration = Duration::from_secs(60);

impl HistoryKeys {
    /// Holds `entry` under `key` as its newest reservation, then evicts the oldest keys past the
    /// capacity.
    fn insert(&mut self, key: &HistoryKey, state: HistoryState, expires_at: Instant) {
        let number = self.next;
        self.next += 1;
        let key = Arc::new(key.clone());
        self.by_key.insert(
            key.clone(),
            HistoryEntry {
                state,
                expires_at,
                number,
            },
        );
        self.order.push_back((number, key));
        let now = Instant::now();
        while self.by_key.len() > self.capacity {
            let Some((number, oldest)) = self.order.pop_front() else {
                break;
            };
            if self
                .by_key
                .get(&oldest)
                .is_some_and(|entry| entry.number == number)
            {
                if let Some(entry) = self.by_key.remove(&oldest) {
                    if entry.expires_at > now {
                        self.evicted_early += 1;
                    }
                }
            }
        }
        if self.order.len() > 2 * self.by_key.len() + 64 {
            let by_key = &self.by_key;
            self.order.retain(|(number, key)| {
                by_key.get(key).is_some_and(|entry| entry.number == *number)
            });
        }
        self.warn_of_evictions(now);
    }

    fn warn_of_evictions(&mut self, now: Instant) {
        if self.evicted_early == 0
            || self
                .warned
                .is_some_and(|warned| now.duration_since(warned) < EVICTION_WARNING)
        {
            return;
        }
        tracing::warn!(
            evicted = self.evicted_early,
            capacity = self.capacity,
            "the in-memory command history is full: its oldest keys were forgotten before their \
             duration passed, so a send (a push's hashCode) of one of them now goes out again; \
             raise its capacity or keep the history in a database"
        );
        self.evicted_early = 0;
        self.warned = Some(now);
    }
}

/// A key of the command history: pending under a ticket until `expires_at` (its lease), or sent
/// and kept until `expires_at` (its duration); `number` is its reservation's, in
/// [`HistoryKeys::order`].
struct HistoryEntry {
    state: HistoryState,
    expires_at: Instant,
    number: u64,
}

enum HistoryState {
    Pending(Ticket),
    Sent(SentRecord),
}

impl HistoryEntry {
    /// Whether the send under `ticket` holds the key pending.
    fn is_held_by(&self, ticket: &Ticket) -> bool {
        matches!(&self.state, HistoryState::Pending(held) if held == ticket)
    }
}

#[derive(Default)]
struct Keys {
    by_key: HashMap<InboxKey, Entry>,
    /// The number the next claim holds its key by.
    next_claim: u64,
}

enum Entry {
    /// A claim's open transaction holds the key.
    Held {
        claim: u64,
        retention: std::time::Duration,
    },
    /// Completed; kept until `expires_at`.
    Completed {
        recorded: Option<String>,
        expires_at: Instant,
    },
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.keys();
        let held = keys
            .by_key
            .values()
            .filter(|entry| matches!(entry, Entry::Held { .. }))
            .count();
        f.debug_struct("MemoryStore")
            .field("held", &held)
            .field("completed", &(keys.by_key.len() - held))
            .finish()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A transaction of the service's own, outside any inbox claim: write to the outbox through
    /// it, then [`commit`](Self::commit) it (dropping it rolls it back).
    pub fn begin(&self) -> MemoryTransaction {
        MemoryTransaction {
            store: self.clone(),
            claimed: None,
            on_commit: Vec::new(),
            on_rollback: Vec::new(),
            serial: self.next_serial(),
            settled: false,
        }
    }

    /// Commits a transaction from [`begin`](Self::begin): its writes run and its outbox rows
    /// become visible to the relay, together.
    pub fn commit(&self, mut transaction: MemoryTransaction) {
        transaction.settled = true;
        // Under the keys' lock, as an inbox commit runs its writes: one commit at a time.
        let _keys = self.keys();
        for write in std::mem::take(&mut transaction.on_commit) {
            write();
        }
    }

    /// How many keys are completed and not yet swept.
    pub fn completed(&self) -> usize {
        self.keys()
            .by_key
            .values()
            .filter(|entry| matches!(entry, Entry::Completed { .. }))
            .count()
    }

    /// How many keys the command history holds, pending or sent, expired or not, until swept
    /// (or evicted: never more than its [capacity](Self::history_capacity)).
    pub fn history_len(&self) -> usize {
        self.history().by_key.len()
    }

    /// Keeps at most `capacity` keys in the command history (at least 1), evicting the oldest
    /// first (the key reserved longest ago, whether or not its duration has passed); by default
    /// there is no bound but time (each key's duration, then the sweep). Clones share the store,
    /// and so the capacity.
    ///
    /// **What eviction means.** A key evicted before its duration passed is forgotten: the next
    /// send of it goes out again, a duplicate the history would otherwise have skipped. So the
    /// history skips a repeated key only while fewer than `capacity` other keys were reserved
    /// since it was: set the capacity above the distinct keys sent within the longest duration.
    /// A key evicted while its send is under way (`capacity` newer reservations during one send)
    /// is not confirmed: a concurrent send of it may go out too, as when a lease passes. Each
    /// early eviction is counted, and logged as a warning at most once a minute.
    #[must_use]
    pub fn history_capacity(self, capacity: usize) -> Self {
        self.history().capacity = capacity.max(1);
        self
    }

    fn history(&self) -> MutexGuard<'_, HistoryKeys> {
        // As for the keys: each change is one insert or remove.
        self.shared
            .history
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn keys(&self) -> MutexGuard<'_, Keys> {
        // A panic while the lock is held leaves the map whole (each change is one insert or
        // remove), so a poisoned lock is still good to use.
        self.shared
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn next_serial(&self) -> u64 {
        self.shared
            .next_transaction
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// Frees `key` if `claim` still holds it.
    fn release_claim(&self, key: &InboxKey, claim: u64) {
        let mut keys = self.keys();
        if matches!(keys.by_key.get(key), Some(Entry::Held { claim: held, .. }) if *held == claim) {
            keys.by_key.remove(key);
        }
        drop(keys);
        self.shared.changed.notify_waiters();
    }
}

/// An open transaction of a [`MemoryStore`]: an inbox claim's, whose key is held until it is
/// completed, released or dropped, or one of the service's own from [`MemoryStore::begin`].
pub struct MemoryTransaction {
    store: MemoryStore,
    /// The claimed key and the claim's number; `None` for a transaction of the service's own.
    claimed: Option<(InboxKey, u64)>,
    on_commit: Vec<Box<dyn FnOnce() + Send>>,
    /// Undoes what the transaction marked in the store before its commit (a schedule key taken,
    /// a row being cancelled), newest first, when it rolls back.
    on_rollback: Vec<Box<dyn FnOnce() + Send>>,
    /// Its number: what tells its own marks apart from another transaction's.
    serial: u64,
    settled: bool,
}

impl fmt::Debug for MemoryTransaction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTransaction")
            .field("key", &self.key())
            .field("on_commit", &self.on_commit.len())
            .finish_non_exhaustive()
    }
}

impl MemoryTransaction {
    /// Runs `write` when the transaction commits, with the key's completion (never, if it rolls
    /// back): the in-process stand-in for the handler's own writes. It runs under the store's
    /// lock, so it must not use the store.
    pub fn on_commit(&mut self, write: impl FnOnce() + Send + 'static) {
        self.on_commit.push(Box::new(write));
    }

    /// The key this transaction holds: `None` for one from [`MemoryStore::begin`].
    pub fn key(&self) -> Option<&InboxKey> {
        self.claimed.as_ref().map(|(key, _)| key)
    }
}

impl Drop for MemoryTransaction {
    fn drop(&mut self) {
        if !self.settled {
            for undo in std::mem::take(&mut self.on_rollback).into_iter().rev() {
                undo();
            }
        }
        if let (false, Some((key, claim))) = (self.settled, &self.claimed) {
            self.store.release_claim(key, *claim);
        }
    }
}

impl InboxStore for MemoryStore {
    type Transaction = MemoryTransaction;

    const OUTBOX_IN_TRANSACTION: bool = true;

    fn write_outbox(
        &self,
        transaction: &mut MemoryTransaction,
        row: NewOutboxRow<'_>,
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send {
        // The inbox's transaction is the outbox's connection: one transaction commits both.
        crate::store::OutboxStore::write(self, transaction, row)
    }

    async fn claim(
        &self,
        key: &InboxKey,
        settings: ClaimSettings,
    ) -> Result<Claim<MemoryTransaction>, StoreError> {
        let deadline = Instant::now() + settings.wait;
        loop {
            // Registered before the lock is let go, so a release between the two is not missed.
            let changed = self.shared.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut keys = self.keys();
                match keys.by_key.get(key) {
                    Some(Entry::Completed {
                        recorded,
                        expires_at,
                    }) if *expires_at > Instant::now() => {
                        return Ok(Claim::Completed(recorded.clone()));
                    }
                    Some(Entry::Held { .. }) => {}
                    // Free, or completed longer ago than its retention: as good as swept.
                    _ => {
                        let claim = keys.next_claim;
                        keys.next_claim += 1;
                        keys.by_key.insert(
                            key.clone(),
                            Entry::Held {
                                claim,
                                retention: settings.retention,
                            },
                        );
                        return Ok(Claim::Claimed(MemoryTransaction {
                            store: self.clone(),
                            claimed: Some((key.clone(), claim)),
                            on_commit: Vec::new(),
                            on_rollback: Vec::new(),
                            serial: self.next_serial(),
                            settled: false,
                        }));
                    }
                }
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return Ok(Claim::Busy);
            }
        }
    }

    async fn complete(
        &self,
        mut transaction: MemoryTransaction,
        key: &InboxKey,
        recorded: Option<&str>,
    ) -> Result<(), StoreError> {
        debug_assert_eq!(
            transaction.key(),
            Some(key),
            "a transaction completes its own key"
        );
        transaction.settled = true;
        let Some((held_key, held_claim)) = transaction.claimed.clone() else {
            // A transaction of the service's own holds no key: committing it is all there is.
            self.commit(transaction);
            return Ok(());
        };
        let mut keys = self.keys();
        let retention = match keys.by_key.get(&held_key) {
            Some(Entry::Held { claim, retention }) if *claim == held_claim => *retention,
            // Only a claim's own transaction removes its hold, and it has not: unreachable, but
            // a commit of a key it does not hold must not happen either.
            _ => return Ok(()),
        };
        for write in std::mem::take(&mut transaction.on_commit) {
            write();
        }
        keys.by_key.insert(
            held_key,
            Entry::Completed {
                recorded: recorded.map(str::to_owned),
                expires_at: Instant::now() + retention,
            },
        );
        drop(keys);
        self.shared.changed.notify_waiters();
        Ok(())
    }

    async fn release(&self, transaction: MemoryTransaction) -> Result<(), StoreError> {
        drop(transaction);
        Ok(())
    }

    async fn sweep(&self, limit: u32) -> Result<u64, StoreError> {
        let now = Instant::now();
        let mut keys = self.keys();
        let expired: Vec<InboxKey> = keys
            .by_key
            .iter()
            .filter(|(_, entry)| matches!(entry, Entry::Completed { expires_at, .. } if *expires_at <= now))
            .map(|(key, _)| key.clone())
            .take(limit as usize)
            .collect();
        for key in &expired {
            keys.by_key.remove(key);
        }
        Ok(expired.len() as u64)
    }
}

impl HistoryStore for MemoryStore {
    async fn reserve(&self, key: &HistoryKey, lease: Duration) -> Result<Reservation, StoreError> {
        let now = Instant::now();
        let mut history = self.history();
        match history.by_key.get(key) {
            Some(entry) if entry.expires_at > now => Ok(match &entry.state {
                HistoryState::Pending(_) => Reservation::Pending,
                HistoryState::Sent(sent) => Reservation::Sent(sent.clone()),
            }),
            // Free, sent longer ago than its duration, or held by a send whose lease passed.
            _ => {
                let ticket = Ticket::new();
                history.insert(key, HistoryState::Pending(ticket.clone()), now + lease);
                Ok(Reservation::Reserved(ticket))
            }
        }
    }

    async fn confirm(
        &self,
        key: &HistoryKey,
        ticket: &Ticket,
        sent: &SentRecord,
        duration: Duration,
    ) -> Result<bool, StoreError> {
        let mut history = self.history();
        match history.by_key.get_mut(key) {
            Some(entry) if entry.is_held_by(ticket) => {
                entry.state = HistoryState::Sent(sent.clone());
                entry.expires_at = Instant::now() + duration;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn cancel(&self, key: &HistoryKey, ticket: &Ticket) -> Result<(), StoreError> {
        let mut history = self.history();
        if history
            .by_key
            .get(key)
            .is_some_and(|entry| entry.is_held_by(ticket))
        {
            history.by_key.remove(key);
        }
        Ok(())
    }

    async fn sweep_history(&self, limit: u32) -> Result<u64, StoreError> {
        let now = Instant::now();
        let mut history = self.history();
        let mut expired: Vec<(Instant, Arc<HistoryKey>)> = history
            .by_key
            .iter()
            .filter(|(_, entry)| entry.expires_at <= now)
            .map(|(key, entry)| (entry.expires_at, key.clone()))
            .collect();
        // Oldest first, as the database stores delete them.
        expired.sort();
        expired.truncate(limit as usize);
        for (_, key) in &expired {
            history.by_key.remove(key);
        }
        Ok(expired.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    const SETTINGS: ClaimSettings = ClaimSettings {
        wait: Duration::from_secs(2),
        lease: Duration::from_secs(60),
        retention: Duration::from_secs(3600),
    };

    fn key() -> InboxKey {
        InboxKey::new("payments", "payment-1")
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_transaction_releases_its_key_and_its_writes_never_run() {
        let store = MemoryStore::new();
        let posted = Arc::new(AtomicU32::new(0));
        let Claim::Claimed(mut transaction) = store.claim(&key(), SETTINGS).await.unwrap() else {
            panic!("a free key is claimed");
        };
        let counter = posted.clone();
        transaction.on_commit(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        drop(transaction);
        assert_eq!(posted.load(Ordering::SeqCst), 0);
        assert!(matches!(
            store.claim(&key(), SETTINGS).await.unwrap(),
            Claim::Claimed(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_claim_waits_for_the_first_and_finds_it_completed() {
        let store = MemoryStore::new();
        let Claim::Claimed(transaction) = store.claim(&key(), SETTINGS).await.unwrap() else {
            panic!("a free key is claimed");
        };
        let second = tokio::spawn({
            let store = store.clone();
            async move { store.claim(&key(), SETTINGS).await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        store
            .complete(transaction, &key(), Some("[]"))
            .await
            .unwrap();
        assert!(matches!(
            second.await.unwrap(),
            Claim::Completed(Some(recorded)) if recorded == "[]"
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_held_past_the_wait_is_busy() {
        let store = MemoryStore::new();
        let _held = store.claim(&key(), SETTINGS).await.unwrap();
        let started = Instant::now();
        assert!(matches!(
            store.claim(&key(), SETTINGS).await.unwrap(),
            Claim::Busy
        ));
        assert_eq!(started.elapsed(), SETTINGS.wait);
    }

    async fn send(store: &MemoryStore, key: &HistoryKey) -> Reservation {
        let reservation = store.reserve(key, Duration::from_secs(60)).await.unwrap();
        if let Reservation::Reserved(ticket) = &reservation {
            let sent = SentRecord {
                message_id: format!("id-{}", key.key),
                sequence_number: None,
            };
            let hour = Duration::from_secs(3600);
            assert!(store.confirm(key, ticket, &sent, hour).await.unwrap());
        }
        reservation
    }

    #[tokio::test(start_paused = true)]
    async fn a_history_past_its_capacity_forgets_its_oldest_keys_first() {
        let store = MemoryStore::new().history_capacity(1_000);
        let key = |n: usize| HistoryKey::new("scrape", format!("hash-{n}"));
        for n in 0..100_000 {
            assert!(matches!(
                send(&store, &key(n)).await,
                Reservation::Reserved(_)
            ));
            assert!(store.history_len() <= 1_000, "{} keys", store.history_len());
        }
        assert_eq!(store.history_len(), 1_000);
        // Stale reservations are dropped as they go: the order stays in proportion.
        assert!(store.history().order.len() <= 2 * 1_000 + 64 + 1);
        // The newest 1,000 are still skipped; the one before them was forgotten, so it goes out
        // again (and, reserved anew, evicts the oldest of the rest).
        assert!(matches!(
            send(&store, &key(99_000)).await,
            Reservation::Sent(_)
        ));
        assert!(matches!(
            send(&store, &key(98_999)).await,
            Reservation::Reserved(_)
        ));
        assert!(matches!(
            send(&store, &key(99_000)).await,
            Reservation::Reserved(_)
        ));
        assert!(matches!(
            send(&store, &key(99_999)).await,
            Reservation::Sent(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_history_without_a_capacity_keeps_every_key_until_its_duration() {
        let store = MemoryStore::new();
        for n in 0..5_000 {
            send(&store, &HistoryKey::new("scrape", format!("hash-{n}"))).await;
        }
        assert_eq!(store.history_len(), 5_000);
        tokio::time::advance(Duration::from_secs(3600)).await;
        while store.sweep_history(500).await.unwrap() > 0 {}
        assert_eq!(store.history_len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn completed_keys_expire_after_their_retention_and_are_swept() {
        let store = MemoryStore::new();
        for n in 0..3 {
            let key = InboxKey::new("payments", format!("payment-{n}"));
            let Claim::Claimed(transaction) = store.claim(&key, SETTINGS).await.unwrap() else {
                panic!("a free key is claimed");
            };
            store.complete(transaction, &key, None).await.unwrap();
        }
        assert_eq!(store.sweep(10).await.unwrap(), 0);
        tokio::time::advance(SETTINGS.retention).await;
        assert_eq!(store.sweep(2).await.unwrap(), 2);
        assert_eq!(store.sweep(2).await.unwrap(), 1);
        assert_eq!(store.completed(), 0);
    }
}
