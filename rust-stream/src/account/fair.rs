//! A model of SQS fair queues: which visible message of a standard queue a receive takes next.
//!
//! On SQS a standard queue whose messages carry a `MessageGroupId` is a *fair queue*: each group
//! is a tenant, and a tenant that takes a disproportionate share of the consumers' capacity (a
//! *noisy neighbour*) has its messages passed over while other tenants' are waiting, so their
//! dwell time stays low. AWS documents the detection ("How Amazon SQS fair queues work"): a tenant
//! is noisy when it holds more than 10 % of the queue's in-flight messages and at least 30 of its
//! own, or when its recent share of the consumers' processing time passes 10 %.
//!
//! **The model**, as this account keeps it:
//!
//! - A group is *noisy* while it has at least [`NOISY_MIN_IN_FLIGHT`] messages in flight and
//!   more than a tenth of the queue's in-flight messages. A message without a group is a tenant of
//!   its own, never noisy (as on SQS, where one message cannot make 30 in flight).
//! - A receive takes the oldest visible message of a group that is not noisy (or of no group);
//!   only when every visible message is a noisy group's does it take one of those, from the noisy
//!   group with the fewest in flight first (as AWS documents), oldest first within it.
//! - Noisiness is decided again for every message a receive takes, from the counts of that
//!   moment, with no memory: a noisy group's share falls as its messages settle and the quiet
//!   ones are taken, and once it is no longer noisy its oldest messages come first again. So a
//!   noisy group keeps about `max(30, a tenth of the in-flight)` messages in flight while others
//!   wait. SQS's detection has memory (a tenant stays noisy until its backlog is drained or it
//!   sends nothing for 5 minutes), is approximate, and also weighs processing time; none of that
//!   is modelled, nor the `…InQuietGroups` and `ApproximateNumberOfNoisyGroups` metrics.
//! - Without noisy groups a receive takes the oldest visible messages, as it always did: a
//!   standard queue without group ids, and any queue whose groups stay under the thresholds,
//!   behaves exactly as before. No order is promised either way (it is a standard queue).
//!
//! **Its cost.** Every count is kept as messages change state; a receive looks at the oldest
//! message without a group, the oldest group with visible messages, and the groups with 30 or
//! more in flight from the largest down while they are noisy (at most nine can be: each holds
//! more than a tenth), so it never walks the backlog.

use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap};

use super::fifo::{FastHash, GroupName};
use super::ids::Key;

/// The fewest in-flight messages of a noisy group (AWS: "at least 30 of its own messages in
/// flight").
pub(super) const NOISY_MIN_IN_FLIGHT: usize = 30;

/// A noisy group holds more than `1 / NOISY_SHARE` of the queue's in-flight messages (AWS: "more
/// than 10 %").
const NOISY_SHARE: usize = 10;

/// One group's (tenant's) visible messages and how many it has in flight.
#[derive(Debug, Default)]
struct Tenant {
    visible: BTreeSet<Key>,
    in_flight: usize,
}

/// A standard queue's visible messages and its groups' in-flight counts.
#[derive(Debug, Default)]
pub(super) struct Fair {
    /// Visible messages without a group, by storage order.
    ungrouped: BTreeSet<Key>,
    /// Groups with visible or in-flight messages.
    groups: HashMap<GroupName, Tenant, FastHash>,
    /// Groups with visible messages, by their oldest one.
    ready: BTreeSet<(Key, GroupName)>,
    /// Groups with at least [`NOISY_MIN_IN_FLIGHT`] in flight, by that count: the only ones that
    /// can be noisy.
    crowded: BTreeSet<(usize, GroupName)>,
}

impl Fair {
    /// A message became visible.
    pub(super) fn insert(&mut self, key: Key, group: Option<&GroupName>) {
        let Some(group) = group else {
            self.ungrouped.insert(key);
            return;
        };
        let tenant = self.groups.entry(group.clone()).or_default();
        let old_first = tenant.visible.first().copied();
        tenant.visible.insert(key);
        if old_first.is_none_or(|first| key < first) {
            if let Some(first) = old_first {
                self.ready.remove(&(first, group.clone()));
            }
            self.ready.insert((key, group.clone()));
        }
    }

    /// A visible message was taken, hidden or removed.
    pub(super) fn remove(&mut self, key: Key, group: Option<&GroupName>) {
        let Some(group) = group else {
            self.ungrouped.remove(&key);
            return;
        };
        let Entry::Occupied(mut entry) = self.groups.entry(group.clone()) else {
            return;
        };
        let tenant = entry.get_mut();
        let was_first = tenant.visible.first() == Some(&key);
        tenant.visible.remove(&key);
        if was_first {
            self.ready.remove(&(key, group.clone()));
            if let Some(&first) = tenant.visible.first() {
                self.ready.insert((first, group.clone()));
            }
        }
        if tenant.visible.is_empty() && tenant.in_flight == 0 {
            entry.remove();
        }
    }

    /// A message of `group` entered (`true`) or left the in-flight state.
    pub(super) fn in_flight(&mut self, group: Option<&GroupName>, entered: bool) {
        let Some(group) = group else { return };
        let tenant = self.groups.entry(group.clone()).or_default();
        let old = tenant.in_flight;
        tenant.in_flight = if entered { old + 1 } else { old - 1 };
        let new = tenant.in_flight;
        let forget = tenant.visible.is_empty() && new == 0;
        if old >= NOISY_MIN_IN_FLIGHT {
            self.crowded.remove(&(old, group.clone()));
        }
        if new >= NOISY_MIN_IN_FLIGHT {
            self.crowded.insert((new, group.clone()));
        }
        if forget {
            self.groups.remove(group);
        }
    }

    /// The groups noisy while the queue has `in_flight` messages in flight, most in flight first.
    fn noisy(&self, in_flight: usize) -> impl Iterator<Item = (usize, &GroupName)> {
        self.crowded
            .iter()
            .rev()
            .take_while(move |(own, _)| own * NOISY_SHARE > in_flight)
            .map(|(own, group)| (*own, group))
    }

    fn is_noisy(&self, group: &GroupName, in_flight: usize) -> bool {
        self.groups.get(group).is_some_and(|tenant| {
            tenant.in_flight >= NOISY_MIN_IN_FLIGHT && tenant.in_flight * NOISY_SHARE > in_flight
        })
    }

    /// The visible message a receive takes next while the queue has `in_flight` messages in
    /// flight (see the module's model).
    pub(super) fn next(&self, in_flight: usize) -> Option<Key> {
        let ungrouped = self.ungrouped.first().copied();
        let oldest_of = |grouped: Option<Key>| match (ungrouped, grouped) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if self.noisy(in_flight).next().is_none() {
            return oldest_of(self.ready.first().map(|&(key, _)| key));
        }
        // Skips at most the nine noisy groups: each sits in `ready` once.
        let quiet = self
            .ready
            .iter()
            .find(|(_, group)| !self.is_noisy(group, in_flight))
            .map(|&(key, _)| key);
        oldest_of(quiet).or_else(|| {
            self.noisy(in_flight)
                .filter_map(|(own, group)| Some((own, *self.groups[group].visible.first()?)))
                .min()
                .map(|(_, key)| key)
        })
    }

    /// How many groups are noisy while the queue has `in_flight` messages in flight.
    #[cfg(test)]
    fn noisy_groups(&self, in_flight: usize) -> usize {
        self.noisy(in_flight).count()
    }

    pub(super) fn clear(&mut self) {
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str) -> GroupName {
        GroupName::from(name)
    }

    #[test]
    fn without_a_noisy_group_the_oldest_visible_message_comes_first() {
        let mut fair = Fair::default();
        let (a, b) = (group("a"), group("b"));
        fair.insert(3, Some(&a));
        fair.insert(1, None);
        fair.insert(2, Some(&b));
        assert_eq!(fair.next(0), Some(1));
        fair.remove(1, None);
        assert_eq!(fair.next(0), Some(2));
        fair.remove(2, Some(&b));
        assert_eq!(fair.next(0), Some(3));
        fair.remove(3, Some(&a));
        assert_eq!(fair.next(0), None);
        assert!(fair.groups.is_empty() && fair.ready.is_empty());
    }

    #[test]
    fn a_group_with_30_and_over_a_tenth_in_flight_is_passed_over_while_others_wait() {
        let mut fair = Fair::default();
        let (noisy, quiet) = (group("noisy"), group("quiet"));
        for _ in 0..30 {
            fair.in_flight(Some(&noisy), true);
        }
        fair.insert(1, Some(&noisy));
        fair.insert(2, Some(&quiet));
        fair.insert(3, None);
        // 30 of 300 in flight is a tenth, not more: not noisy.
        assert_eq!(fair.noisy_groups(300), 0);
        assert_eq!(fair.next(300), Some(1));
        // 30 of 299 is more than a tenth.
        assert_eq!(fair.noisy_groups(299), 1);
        assert_eq!(fair.next(299), Some(2));
        fair.remove(2, Some(&quiet));
        assert_eq!(
            fair.next(299),
            Some(3),
            "a message without a group is quiet"
        );
        fair.remove(3, None);
        assert_eq!(fair.next(299), Some(1), "only the noisy group's are left");
        // 29 in flight: under the floor, whatever its share.
        fair.in_flight(Some(&noisy), false);
        fair.insert(4, Some(&quiet));
        assert_eq!(fair.noisy_groups(29), 0);
        assert_eq!(fair.next(29), Some(1));
    }

    #[test]
    fn among_noisy_groups_the_one_with_fewest_in_flight_comes_first() {
        let mut fair = Fair::default();
        let (big, small) = (group("big"), group("small"));
        for _ in 0..50 {
            fair.in_flight(Some(&big), true);
        }
        for _ in 0..40 {
            fair.in_flight(Some(&small), true);
        }
        fair.insert(1, Some(&big));
        fair.insert(2, Some(&small));
        assert_eq!(fair.noisy_groups(90), 2);
        assert_eq!(fair.next(90), Some(2));
    }
}
