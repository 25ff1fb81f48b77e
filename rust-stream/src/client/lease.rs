//! A held message's claim on its visibility.
//!
//! Every message a consumer holds (running, waiting behind its FIFO group, retrying in place, or
//! prefetched) has a [`Lease`] in the consumer's [`Leases`]. A lease whose visibility has ended
//! (by this consumer's clock, less a margin for the receive's latency) has *lapsed*: the message
//! may have been received again, by this consumer or another, and its old receipt handle is never
//! used for a visibility change again. SQS refuses a superseded receipt handle; LocalStack applies
//! it to the newer receive, and a stale release there made a FIFO group receivable while one of
//! its messages was in flight.
//!
//! A lease is settled exactly once: by a delete, a release, or by being forgotten when a newer
//! receive of the same message replaced it. [`Lease::claim`] waits for an extension in flight, so
//! no extension ever reaches a message after it was settled. A lease whose holder went away
//! without settling it (a panic in an engine task) is *orphaned*: the heartbeat releases it on its
//! next tick instead of extending it, so it is neither lost nor hidden for long.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::MutexGuard;
use tokio::time::Instant;

use crate::model::rules::MAX_VISIBILITY_TIMEOUT_SECONDS;

/// The longest a message may stay invisible after its receive.
pub(crate) const VISIBILITY_CAP: Duration =
    Duration::from_secs(MAX_VISIBILITY_TIMEOUT_SECONDS as u64);

/// How much earlier than the consumer's own clock says SQS may count a message's 12-hour cap:
/// SQS starts it when it answers the receive, before the answer arrives.
const CAP_MARGIN: Duration = Duration::from_secs(5);

/// One held message's claim on its visibility.
#[derive(Debug)]
pub(crate) struct Lease {
    id: u64,
    pub(crate) receipt_handle: String,
    pub(crate) message_id: String,
    /// Its FIFO message group; `None` on a standard queue.
    pub(crate) group_id: Option<String>,
    pub(crate) received_at: Instant,
    settled: AtomicBool,
    /// Settled by a delete whose answer has not come: still extended, so a slow delete does not
    /// let the message time out into another consumer's hands.
    deleting: AtomicBool,
    /// When the delete was submitted: nanoseconds after `received_at`; [`NOT_SENT`] while it
    /// waits in a FIFO lane's run for the run's call.
    deleting_since_ns: AtomicU64,
    orphaned: AtomicBool,
    /// When its visibility ends, as this consumer last set it: nanoseconds after `received_at`.
    /// Atomic, so the batcher reads it without the state lock an extension holds.
    visible_for_ns: AtomicU64,
    /// The visibility last asked for, in nanoseconds: the receive's, then each extension's. The
    /// heartbeat extends the lease once less than half of it is left.
    window_ns: AtomicU64,
    /// How long before `visible_for_ns` the lease counts as lapsed.
    lapse_margin: Duration,
    /// The lapse was logged.
    lapse_told: AtomicBool,
    /// Held by the heartbeat across an extension, and by a claim while it settles.
    state: tokio::sync::Mutex<LeaseState>,
}

#[derive(Debug)]
pub(crate) struct LeaseState {
    /// The 12-hour cap was reached; no more extensions.
    pub(crate) capped: bool,
}

/// The margin before a lease's visibility ends at which it counts as lapsed: the server's clock
/// started the visibility when it answered the receive, a little before this consumer read it.
/// `deleting_since_ns` of a delete that waits in a run, not yet sent.
const NOT_SENT: u64 = u64::MAX;

fn lapse_margin(visibility: Duration) -> Duration {
    (visibility / 10).min(Duration::from_millis(500))
}

impl Lease {
    /// Whether its holder dropped it unsettled, for the heartbeat to release.
    pub(crate) fn is_orphaned(&self) -> bool {
        self.orphaned.load(Ordering::Acquire)
    }

    /// Whether it is settled by a delete whose answer has not come: still to be extended.
    pub(crate) fn is_deleting(&self) -> bool {
        self.deleting.load(Ordering::Acquire)
    }

    /// When its delete was submitted (meaningful while [`is_deleting`](Self::is_deleting));
    /// `None` while the delete waits in a FIFO lane's run, not yet on its way.
    pub(crate) fn deleting_since(&self) -> Option<Instant> {
        match self.deleting_since_ns.load(Ordering::Acquire) {
            NOT_SENT => None,
            nanos => Some(self.received_at + Duration::from_nanos(nanos)),
        }
    }

    /// Its state, for an extension, unless a settle or another extension holds it.
    pub(crate) fn try_state(&self) -> Option<MutexGuard<'_, LeaseState>> {
        self.state.try_lock().ok()
    }

    /// `true` the first time only: the lapse is logged once.
    pub(crate) fn tell_lapse_once(&self) -> bool {
        !self.lapse_told.swap(true, Ordering::AcqRel)
    }

    /// When the message's visibility ends, as this consumer last set it.
    pub(crate) fn visible_at(&self) -> Instant {
        self.received_at + Duration::from_nanos(self.visible_for_ns.load(Ordering::Acquire))
    }

    fn set_visible_at(&self, at: Instant) {
        let nanos = at.saturating_duration_since(self.received_at).as_nanos();
        self.visible_for_ns
            .store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::Release);
    }

    /// The visibility last asked for: the receive's, then each extension's.
    pub(crate) fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns.load(Ordering::Acquire))
    }

    /// The message is hidden for `window` from `at`: a receive's, or an answered extension's.
    pub(crate) fn set_window(&self, at: Instant, window: Duration) {
        self.window_ns.store(
            u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        self.set_visible_at(at + window);
    }

    /// Whether the visibility has ended (or ends within the margin): its receipt handle is not
    /// used for a visibility change any more.
    pub(crate) fn has_lapsed(&self) -> bool {
        Instant::now() >= self.lapses_at()
    }

    /// When the lease counts as lapsed: its visibility's end, less the margin.
    pub(crate) fn lapses_at(&self) -> Instant {
        self.visible_at()
            .checked_sub(self.lapse_margin)
            .unwrap_or_else(|| self.visible_at())
    }

    /// Where the message stands in the order this consumer received messages: within a FIFO
    /// group, its place in the group's order.
    pub(crate) fn received_order(&self) -> u64 {
        self.id
    }

    /// Claims the message for settling: `false` when it was already settled (by shutdown, say).
    pub(crate) async fn claim(&self) -> bool {
        // Free unless an extension is in flight: then the wait, boxed so that its state does not
        // make every settling future larger.
        let _extension_done = match self.state.try_lock() {
            Ok(free) => free,
            Err(_) => Box::pin(self.state.lock()).await,
        };
        !self.settled.swap(true, Ordering::AcqRel)
    }

    /// Opened after `other`: leases are numbered as they open, so of two receives of one
    /// message the later has the higher number, whichever reaches a FIFO lane first.
    pub(crate) fn opened_after(&self, other: &Lease) -> bool {
        self.id > other.id
    }

    pub(crate) fn is_settled(&self) -> bool {
        self.settled.load(Ordering::Acquire)
    }

    /// Marks a lease whose holder dropped it unsettled, for the heartbeat to release.
    pub(crate) fn orphan(&self) {
        if !self.is_settled() {
            self.orphaned.store(true, Ordering::Release);
        }
    }

    /// How long until the 12-hour cap: no visibility may reach past it. SQS counts the cap from
    /// its receive, a little before this consumer opened the lease, so a margin is kept.
    pub(crate) fn time_to_cap(&self) -> Duration {
        self.time_to_cap_at(Instant::now())
    }

    pub(crate) fn time_to_cap_at(&self, now: Instant) -> Duration {
        (self.received_at + VISIBILITY_CAP - CAP_MARGIN).saturating_duration_since(now)
    }

    /// A visibility change of `delay`, in SQS's whole seconds (rounded up), short of the cap.
    pub(crate) fn visibility_seconds(&self, delay: Duration) -> i32 {
        let wanted = delay
            .as_secs()
            .saturating_add(u64::from(delay.subsec_nanos() > 0));
        let seconds = wanted.min(self.time_to_cap().as_secs());
        i32::try_from(seconds).unwrap_or(MAX_VISIBILITY_TIMEOUT_SECONDS)
    }
}

/// The held leases by id.
type LeaseMap = HashMap<u64, Arc<Lease>, BuildHasherDefault<LeaseIdHasher>>;

/// Hashes lease ids, which this consumer hands out in sequence: a multiplication spreads them,
/// and SipHash's defence against chosen keys (the default, at twice the cost of an insert and a
/// remove per message) would guard against nothing here.
#[derive(Debug, Default, Clone, Copy)]
struct LeaseIdHasher(u64);

impl Hasher for LeaseIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(byte));
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The leases a consumer holds: every message it received and has not settled.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    held: Mutex<LeaseMap>,
    next_id: AtomicU64,
    /// Set to the number held at each change (the `rust_stream.messages.held` metric).
    counted_by: Option<metrics::Gauge>,
    /// Woken each time the last lease ends.
    emptied: tokio::sync::Notify,
}

impl Leases {
    /// Leases whose number is kept in `gauge`.
    pub(crate) fn counted_by(gauge: metrics::Gauge) -> Self {
        Self {
            counted_by: Some(gauge),
            ..Self::default()
        }
    }

    /// Opens the lease of a message just received. Leases open in the order of the receives and,
    /// within one, of its messages: see [`Lease::received_order`]. (The engine opens a receive's
    /// together: [`open_all`](Self::open_all).)
    #[cfg(test)]
    pub(crate) fn open(
        &self,
        receipt_handle: String,
        message_id: String,
        group_id: Option<String>,
        visibility: Duration,
    ) -> Arc<Lease> {
        let mut opened = self.open_all(
            [(receipt_handle, message_id, group_id)].into_iter(),
            visibility,
        );
        opened.pop().expect("a lease for the one message")
    }

    /// Opens the leases of a receive's messages (receipt handle, message id, FIFO group), in
    /// their order, at one reading of the clock and under one lock.
    pub(crate) fn open_all(
        &self,
        messages: impl ExactSizeIterator<Item = (String, String, Option<String>)>,
        visibility: Duration,
    ) -> Vec<Arc<Lease>> {
        let now = Instant::now();
        let mut opened = Vec::with_capacity(messages.len());
        for (receipt_handle, message_id, group_id) in messages {
            let lease = Arc::new(Lease {
                id: self.next_id.fetch_add(1, Ordering::Relaxed),
                receipt_handle,
                message_id,
                group_id,
                received_at: now,
                settled: AtomicBool::new(false),
                deleting: AtomicBool::new(false),
                deleting_since_ns: AtomicU64::new(0),
                orphaned: AtomicBool::new(false),
                visible_for_ns: AtomicU64::new(0),
                window_ns: AtomicU64::new(0),
                lapse_margin: lapse_margin(visibility),
                lapse_told: AtomicBool::new(false),
                state: tokio::sync::Mutex::new(LeaseState { capped: false }),
            });
            lease.set_window(now, visibility);
            opened.push(lease);
        }
        let mut held = self.lock();
        held.extend(opened.iter().map(|lease| (lease.id, lease.clone())));
        self.count(&held);
        opened
    }

    /// Claims a lease for settling and forgets it: `false` when it was settled already.
    pub(crate) async fn claim(&self, lease: &Lease) -> bool {
        let claimed = lease.claim().await;
        if claimed {
            let mut held = self.lock();
            held.remove(&lease.id);
            self.count(&held);
        }
        claimed
    }

    /// Claims a lease for its delete: `None` when it was settled already. Until the guard is
    /// dropped (the delete answered) the lease stays held and the heartbeat goes on extending it.
    pub(crate) async fn claim_for_delete(
        self: &Arc<Self>,
        lease: &Arc<Lease>,
    ) -> Option<DeleteInFlight> {
        if !lease.claim().await {
            return None;
        }
        let since = Instant::now().saturating_duration_since(lease.received_at);
        lease.deleting_since_ns.store(
            u64::try_from(since.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Release,
        );
        lease.deleting.store(true, Ordering::Release);
        Some(DeleteInFlight {
            leases: self.clone(),
            lease: lease.clone(),
        })
    }

    /// Settles a lease without a call: a newer receive of its message replaced it, and the old
    /// receipt handle is no longer the one to use.
    pub(crate) fn forget(&self, lease: &Lease) {
        lease.settled.store(true, Ordering::Release);
        let mut held = self.lock();
        held.remove(&lease.id);
        self.count(&held);
    }

    fn count(&self, held: &LeaseMap) {
        if let Some(gauge) = &self.counted_by {
            gauge.set(held.len() as f64);
        }
        if held.is_empty() {
            self.emptied.notify_waiters();
        }
    }

    /// Ends once no lease is held (at once when none is).
    pub(crate) async fn emptied(&self) {
        loop {
            // Registered before the look, so a lease ending in between is not missed.
            let emptied = self.emptied.notified();
            tokio::pin!(emptied);
            emptied.as_mut().enable();
            if self.lock().is_empty() {
                return;
            }
            emptied.await;
        }
    }

    pub(crate) fn all(&self) -> Vec<Arc<Lease>> {
        self.lock().values().cloned().collect()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LeaseMap> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A lease whose delete is on its way: held (and extended) until this is dropped, whatever
/// becomes of the delete.
#[derive(Debug)]
pub(crate) struct DeleteInFlight {
    leases: Arc<Leases>,
    lease: Arc<Lease>,
}

impl DeleteInFlight {
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The delete waits in a FIFO lane's run for the run's call: until [`sent`](Self::sent),
    /// the heartbeat extends the lease as it extends a message in hand, however long the run
    /// waits (a later message of the run may take longer than the visibility timeout).
    pub(crate) fn wait_in_run(&self) {
        self.lease
            .deleting_since_ns
            .store(NOT_SENT, Ordering::Release);
    }

    /// The delete is on its way now.
    pub(crate) fn sent(&self) {
        let since = Instant::now().saturating_duration_since(self.lease.received_at);
        self.lease.deleting_since_ns.store(
            u64::try_from(since.as_nanos()).unwrap_or(NOT_SENT - 1),
            Ordering::Release,
        );
    }
}

impl Drop for DeleteInFlight {
    fn drop(&mut self) {
        self.lease.deleting.store(false, Ordering::Release);
        let mut held = self.leases.lock();
        held.remove(&self.lease.id);
        self.leases.count(&held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn visibility_changes_round_up_to_seconds_and_stop_at_the_cap() {
        let leases = Leases::default();
        let lease = leases.open("r".into(), "m".into(), None, Duration::from_secs(30));
        assert_eq!(lease.visibility_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(lease.visibility_seconds(Duration::MAX), 43_195);
        tokio::time::advance(Duration::from_secs(43_000)).await;
        assert_eq!(lease.visibility_seconds(Duration::from_secs(3600)), 195);
        assert!(leases.claim(&lease).await);
        assert!(!leases.claim(&lease).await, "a lease settles once");
        assert!(leases.is_empty());
    }
}
