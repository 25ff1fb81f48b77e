//! FIFO lanes: the [`Dispatcher`](super::dispatch::Dispatcher)'s table of group lanes. Each
//! message group this consumer holds messages of has one lane, its held messages ([`Held`]) in
//! sequence order, worked through by one task at a time (`lane.rs`: what that task does, and
//! everything else that holds the group back). Beside the table, [`LaneCounts`] says how
//! many lanes may have a delete coming: the FIFO deleter (wired to it by `parts.rs`) waits for those,
//! and the dispatcher gives the intake room for new groups only while fewer lanes run than the
//! handler slots.
//!
//! The table keeps two invariants. A lane exists exactly while a task works through it: the
//! message that starts a lane gets told to start its task, and the task removes the lane in the
//! same step that finds it empty, so a message joining a moment later starts a new one. And a
//! message is in a lane at most once: a newer receive of it (SQS may hand a message out again)
//! replaces the older, whose lease is forgotten, since only the newest receipt handle settles it.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

use super::held::Held;
use crate::client::lease::Leases;

/// A lane's messages, by sequence number (unique in a FIFO queue, and the same for a newer
/// receive of the message); the message id tells apart messages without one.
type Pending = BTreeMap<(u128, Option<String>), Held>;

/// Lanes by group, hashed with FxHash: a lane is looked up three times a message, and SipHash's
/// defence against chosen keys (a publisher's group ids) would cost a third of that here for
/// nothing: the table holds only the groups of the messages this consumer holds, a bounded few.
type LaneTable = HashMap<String, Pending, rustc_hash::FxBuildHasher>;

/// The lanes of one FIFO subscription, by group.
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    table: Mutex<LaneTable>,
    counts: Arc<LaneCounts>,
    /// The lists of lanes that ended empty, for new lanes: a lane's list is over a kilobyte once
    /// it holds a message, and a request for that much makes glibc's allocator sort all its
    /// recently freed small blocks first, for each new lane.
    spare: Mutex<Vec<Pending>>,
}

/// The most [`Lanes::spare`] keeps.
const SPARE_LANES: usize = 16;

/// How many lanes run and are not resting (waiting out a retry delay): what the deleter reads to
/// know how many deletes may come at once, and the pollers to know whether to take new groups;
/// [`left`](Self::left) tells them when that number falls.
#[derive(Debug, Default)]
pub(crate) struct LaneCounts {
    running: AtomicUsize,
    resting: AtomicUsize,
    /// Lanes with nothing left to handle, waiting for their run's delete before they end.
    finishing: AtomicUsize,
    /// Lanes deleting a full run in a call of their own, not through the deleter.
    calling: AtomicUsize,
    left: Arc<Notify>,
}

impl LaneCounts {
    /// Notified whenever the number of [`active`](Self::active) lanes falls.
    pub(crate) fn left(&self) -> &Arc<Notify> {
        &self.left
    }

    /// Lanes that may submit a delete soon.
    pub(crate) fn active(&self) -> usize {
        let resting = self.resting.load(Ordering::Acquire);
        self.running.load(Ordering::Acquire).saturating_sub(resting)
    }

    /// Lanes that may submit a delete to the deleter soon: the [`active`](Self::active) ones
    /// but those deleting a full run in a call of their own, which the deleter's calls are not
    /// to wait for.
    pub(crate) fn deleting_soon(&self) -> usize {
        self.active()
            .saturating_sub(self.calling.load(Ordering::Acquire))
    }

    /// Returns once fewer than `limit` lanes are active and not finishing: a FIFO poller receives
    /// only while a group it brings would find a handler slot soon, so the consumer holds about as
    /// many groups as it runs, not groups that wait for a slot while other consumers could have
    /// them. A lane waiting for its run's delete before it ends needs no slot, so the next group
    /// is received meanwhile: at a real round trip that overlaps one group's delete with the next
    /// group's receive.
    pub(crate) async fn below(&self, limit: usize) {
        loop {
            // Made before the count is read, so a lane ending after the read still wakes us.
            let left = self.left.notified();
            tokio::pin!(left);
            left.as_mut().enable();
            let finishing = self.finishing.load(Ordering::Acquire);
            if self.active().saturating_sub(finishing) < limit {
                return;
            }
            left.await;
        }
    }

    /// Counts a lane as resting until the guard is dropped.
    pub(crate) fn resting(&self) -> Resting<'_> {
        self.resting.fetch_add(1, Ordering::AcqRel);
        self.left.notify_waiters();
        Resting(self)
    }

    /// Counts a lane as finishing (nothing left to handle, its run's delete on its way) until the
    /// guard is dropped. It still counts as [`active`](Self::active): the deleter waits for its
    /// run as for any other.
    pub(crate) fn finishing(&self) -> Finishing<'_> {
        self.finishing.fetch_add(1, Ordering::AcqRel);
        self.left.notify_waiters();
        Finishing(self)
    }

    /// Counts a lane as deleting a full run in a call of its own until the guard is dropped: a
    /// call of the deleter that waits for company stops waiting for this lane.
    pub(crate) fn calling(&self) -> Calling<'_> {
        self.calling.fetch_add(1, Ordering::AcqRel);
        self.left.notify_waiters();
        Calling(self)
    }

    fn ended(&self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        self.left.notify_waiters();
    }
}

/// A lane waiting for its last run's delete; see [`LaneCounts::finishing`].
pub(crate) struct Finishing<'a>(&'a LaneCounts);

impl Drop for Finishing<'_> {
    fn drop(&mut self) {
        self.0.finishing.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A lane deleting a full run in a call of its own; see [`LaneCounts::calling`].
pub(crate) struct Calling<'a>(&'a LaneCounts);

impl Drop for Calling<'_> {
    fn drop(&mut self) {
        self.0.calling.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A lane waiting out a retry delay; see [`LaneCounts::resting`].
pub(crate) struct Resting<'a>(&'a LaneCounts);

impl Drop for Resting<'_> {
    fn drop(&mut self) {
        self.0.resting.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Lanes {
    pub(crate) fn counts(&self) -> &Arc<LaneCounts> {
        &self.counts
    }

    /// Puts a message in its group's lane; the group when the lane is new and needs a task.
    pub(crate) fn join(&self, held: Held, leases: &Leases) -> Option<String> {
        let key = Self::key(&held);
        let group = held.delivery.group_id.as_deref().unwrap_or_default();
        let mut table = self.lock();
        // The group's name is copied only for a new lane, not for every message of a running one.
        let (pending, started) = match table.get_mut(group) {
            Some(pending) => (pending, None),
            None => {
                self.counts.running.fetch_add(1, Ordering::AcqRel);
                let spare = self.spare().pop().unwrap_or_default();
                let pending = table.entry(group.to_owned()).or_insert(spare);
                (pending, Some(group.to_owned()))
            }
        };
        keep_newest(pending, key, held, leases);
        started
    }

    /// The lane's next message; when there is none the lane ends, in the same step.
    pub(crate) fn next(&self, group: &str) -> Option<Held> {
        let mut table = self.lock();
        let pending = table.get_mut(group)?;
        let next = pending.pop_first().map(|(_, held)| held);
        if next.is_none() {
            let emptied = table.remove(group);
            drop(table);
            self.counts.ended();
            // Emptied by `pop_first`, the list keeps its storage.
            let mut spare = self.spare();
            if spare.len() < SPARE_LANES {
                spare.extend(emptied);
            }
        }
        next
    }

    /// Takes the lane's next messages, in order, while `joins` takes them and at most `most`;
    /// the lane goes on, even if they were all it had (a batch handler's lane hands them to the
    /// call with the message it runs).
    pub(crate) fn take_next(
        &self,
        group: &str,
        most: usize,
        joins: impl Fn(&Held) -> bool,
    ) -> Vec<Held> {
        let mut table = self.lock();
        let Some(pending) = table.get_mut(group) else {
            return Vec::new();
        };
        let mut taken = Vec::new();
        while taken.len() < most {
            match pending.first_entry() {
                Some(next) if joins(next.get()) => taken.push(next.remove()),
                _ => break,
            }
        }
        taken
    }

    /// Puts messages taken from the running lane of `group` back in it, in their order: a batch
    /// call's later messages of a group, to run again after the one that failed. A message that
    /// SQS gave again meanwhile (its visibility lapsed) joined the lane after it was taken: that
    /// newer receive stays ([`keep_newest`]).
    pub(crate) fn put_back(&self, group: &str, held: Vec<Held>, leases: &Leases) {
        let mut table = self.lock();
        let Some(pending) = table.get_mut(group) else {
            // The lane runs while its task puts messages back; were it gone, the heartbeat
            // releases them, as orphans.
            tracing::error!(
                sqs.group_id = %group,
                messages = held.len(),
                "messages put back in a lane that ended; they are released"
            );
            return;
        };
        for held in held {
            keep_newest(pending, Self::key(&held), held, leases);
        }
    }

    /// Where a message goes in its lane: by its sequence number, or last by its id when it has
    /// none.
    fn key(held: &Held) -> (u128, Option<String>) {
        match held.delivery.sequence_number.as_deref().map(str::parse) {
            Some(Ok(sequence)) => (sequence, None),
            _ => (u128::MAX, Some(held.delivery.message_id.clone())),
        }
    }

    /// How many messages wait in the lane behind the one running.
    pub(crate) fn waiting(&self, group: &str) -> usize {
        self.lock().get(group).map_or(0, BTreeMap::len)
    }

    /// Takes every message still waiting in the lane; the lane goes on (empty).
    pub(crate) fn take_rest(&self, group: &str) -> Vec<Held> {
        self.lock()
            .get_mut(group)
            .map(|pending| std::mem::take(pending).into_values().collect())
            .unwrap_or_default()
    }

    /// Ends the lane, returning what was still waiting in it.
    pub(crate) fn end(&self, group: &str) -> Vec<Held> {
        let Some(pending) = self.lock().remove(group) else {
            return Vec::new();
        };
        self.counts.ended();
        pending.into_values().collect()
    }

    fn lock(&self) -> MutexGuard<'_, LaneTable> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn spare(&self) -> MutexGuard<'_, Vec<Pending>> {
        self.spare.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Places `held` in a lane's list at `key`, keeping a message there at most once: of two
/// receives of it, the newer (the later lease) stays, whichever came first, and the other's lease
/// is forgotten, since only the newest receipt handle settles the message. A message joining
/// while an older receive of it waits replaces it; one put back while a newer receive of it joined
/// gives way.
fn keep_newest(pending: &mut Pending, key: (u128, Option<String>), held: Held, leases: &Leases) {
    match pending.entry(key) {
        Entry::Vacant(place) => {
            place.insert(held);
        }
        Entry::Occupied(mut place) => {
            let older = if held.lease.opened_after(&place.get().lease) {
                place.insert(held)
            } else {
                held
            };
            leases.forget(&older.lease);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Lanes, SPARE_LANES};
    use crate::client::lease::Leases;
    use crate::engine::held::{Held, HeldLease};
    use crate::handler::context::Delivery;
    use crate::model::wire::{
        MessageAttributes, ReceivedMessage, SystemAttribute, SystemAttributes,
    };

    fn held(leases: &Leases, group: &str, sequence: u64) -> Held {
        received(leases, group, sequence, &format!("r{sequence}"))
    }

    /// Message `sequence` of `group`, received with `receipt_handle`.
    fn received(leases: &Leases, group: &str, sequence: u64, receipt_handle: &str) -> Held {
        let mut attributes = SystemAttributes::new();
        attributes.insert(SystemAttribute::MessageGroupId.name(), group);
        attributes.insert_number(SystemAttribute::SequenceNumber, sequence, 20);
        let message = ReceivedMessage {
            message_id: format!("m{sequence}"),
            receipt_handle: receipt_handle.to_owned(),
            body: String::new(),
            attributes,
            message_attributes: MessageAttributes::new(),
        };
        let lease = leases.open(
            message.receipt_handle.clone(),
            message.message_id.clone(),
            Some(group.to_owned()),
            Duration::from_secs(30),
        );
        Held {
            delivery: Arc::new(Delivery::new(&Arc::from("q.fifo"), message, false)),
            lease: HeldLease(lease),
            _room: Arc::new(tokio::sync::Semaphore::new(1))
                .try_acquire_owned()
                .expect("a free permit"),
            span: tracing::Span::none(),
            key: None,
        }
    }

    /// A lane that ends empty leaves its list for the next new lane, and the lanes keep no more
    /// than [`SPARE_LANES`] of them however many end; a new lane still starts (and runs its
    /// messages in order) with no spare.
    #[test]
    fn an_ended_lanes_list_goes_to_the_next_new_lane() {
        let (lanes, leases) = (Lanes::default(), Leases::default());
        assert_eq!(
            lanes.join(held(&leases, "a", 2), &leases).as_deref(),
            Some("a")
        );
        assert_eq!(
            lanes.join(held(&leases, "a", 1), &leases),
            None,
            "the lane runs"
        );
        let order: Vec<_> = std::iter::from_fn(|| lanes.next("a"))
            .map(|held| held.delivery.message_id.clone())
            .collect();
        assert_eq!(order, ["m1", "m2"]);
        assert_eq!(lanes.spare().len(), 1, "the ended lane's list is kept");
        assert_eq!(
            lanes.join(held(&leases, "b", 3), &leases).as_deref(),
            Some("b")
        );
        assert!(lanes.spare().is_empty(), "and taken by the next new lane");

        let groups: Vec<String> = (0..SPARE_LANES + 5).map(|n| format!("g{n}")).collect();
        for (n, group) in groups.iter().enumerate() {
            assert!(lanes
                .join(held(&leases, group, 10 + n as u64), &leases)
                .is_some());
        }
        for group in &groups {
            assert!(lanes.next(group).is_some());
            assert!(lanes.next(group).is_none(), "the lane ends");
        }
        assert_eq!(lanes.spare().len(), SPARE_LANES);
    }

    /// A batch call's later messages go back in the lane after the one that failed; one that
    /// SQS gave again while it was out of the lane (its visibility lapsed) has joined with its
    /// new receipt handle. That newer receive stays, and the put-back one's lease is forgotten:
    /// the lane holds no stale handle to delete with, and the newer lease is not dropped (which
    /// would orphan it, and the heartbeat would release the message to come a third time).
    #[test]
    fn a_put_back_message_received_again_meanwhile_keeps_its_newer_receive() {
        let (lanes, leases) = (Lanes::default(), Leases::default());
        assert!(lanes.join(held(&leases, "a", 1), &leases).is_some());
        assert!(lanes.join(held(&leases, "a", 2), &leases).is_none());
        let taken = lanes.take_next("a", 2, |_| true);
        assert_eq!(taken.len(), 2);
        let again = received(&leases, "a", 2, "r2-again");
        let newer = again.lease.0.clone();
        assert!(lanes.join(again, &leases).is_none(), "the lane runs");
        let older = taken[1].lease.0.clone();

        lanes.put_back("a", taken, &leases);

        // Kept until the end: a held message dropped orphans its lease.
        let lane: Vec<Held> = std::iter::from_fn(|| lanes.next("a")).collect();
        let order: Vec<_> = lane
            .iter()
            .map(|held| held.lease.receipt_handle.as_str())
            .collect();
        assert_eq!(
            order,
            ["r1", "r2-again"],
            "in order, the newer receive of 2"
        );
        assert!(older.is_settled(), "the older receive's lease is forgotten");
        assert!(
            !newer.is_orphaned(),
            "the newer receive's lease is not orphaned"
        );
    }
}
