//! FIFO bookkeeping: message groups held while in flight, the ready-group index, and the
//! 5-minute windows that deduplicate sends and receive attempts.
//!
//! A group is *ready* when none of its messages is in flight and its first message is visible.
//! Ready groups sit in one ordered index keyed by the sequence number of their first message, so a
//! receive takes the oldest ready group in O(log groups) without looking at the others; a group
//! whose head is held or delayed is simply not in the index.

use std::borrow::Borrow;
use std::collections::hash_map::Entry;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

use tokio::time::Instant;

use super::ids::{Key, Moment};

/// The messages of one group, in storage order, and how many of them are in flight.
#[derive(Debug, Default)]
pub(super) struct Group {
    /// Every stored message of the group (visible, delayed or in flight), by sequence. A deque:
    /// messages join at the end, and leave from the front or near it (the group's received
    /// messages are its first ones).
    pub(super) keys: VecDeque<Key>,
    /// While non-zero, no receive gets this group.
    pub(super) in_flight: usize,
    /// The head under which the group sits in the ready index, if it does.
    ready_at: Option<Key>,
}

/// The hash of the account's FIFO maps (rustc's FxHash): their keys are the application's group
/// and deduplication ids, and SipHash's resistance to chosen keys cost more than the rest of a
/// lookup.
pub(super) type FastHash = rustc_hash::FxBuildHasher;

/// A group's name, interned per queue: one allocation that the group's messages share, behind a
/// thin pointer (a queue keeps one per message).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct GroupName(Arc<Box<str>>);

impl From<&str> for GroupName {
    fn from(name: &str) -> Self {
        Self(Arc::new(Box::from(name)))
    }
}

impl Deref for GroupName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

// Hashes and compares as the `str` (the derives go through `Box<str>` to `str`), so a map keyed
// by names is searched with a `&str`.
impl Borrow<str> for GroupName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// The FIFO state of a queue.
#[derive(Debug, Default)]
pub(super) struct Fifo {
    pub(super) groups: HashMap<GroupName, Group, FastHash>,
    /// Ready groups by the sequence of their first message: the oldest is served first.
    ready: BTreeSet<(Key, GroupName)>,
    /// Deduplication ids (or body digests) seen in the last 5 minutes, with the original's
    /// message id and sequence.
    pub(super) dedup: DedupWindow,
}

/// A deduplication id (or body digest), the message first sent with it and its group. One
/// allocation, shared by the window and the stored message (which reports the id and the group).
#[derive(Debug)]
pub(super) struct Dedup {
    pub(super) group: GroupName,
    pub(super) id: DedupId,
    /// The original message's key in the queue whose window holds the entry (its id derives
    /// from it).
    pub(super) key: Key,
    pub(super) expires: Moment,
    /// Whether the id is scoped to the group (the queue deduplicated per group when it was sent).
    pub(super) per_group: bool,
}

/// A deduplication id: the 16 bytes of a UUID when it is one written as publishers generate them
/// (lowercase, hyphenated), so it takes no allocation of its own; the text otherwise. Each id
/// has one form, so comparing forms compares the ids.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum DedupId {
    Uuid([u64; 2]),
    Text(Box<str>),
}

impl DedupId {
    pub(super) fn new(id: String) -> Self {
        if id.len() == 36 {
            if let Ok(uuid) = uuid::Uuid::try_parse(&id) {
                let mut buffer = uuid::Uuid::encode_buffer();
                if *uuid.hyphenated().encode_lower(&mut buffer) == *id {
                    let bits = uuid.as_u128();
                    return Self::Uuid([(bits >> 64) as u64, bits as u64]);
                }
            }
        }
        Self::Text(id.into_boxed_str())
    }

    pub(super) fn text(&self) -> String {
        match self {
            Self::Uuid([high, low]) => {
                let bits = (u128::from(*high) << 64) | u128::from(*low);
                let mut buffer = uuid::Uuid::encode_buffer();
                // Written in place, not through `fmt`: a FIFO receive writes one a message.
                uuid::Uuid::from_u128(bits)
                    .hyphenated()
                    .encode_lower(&mut buffer)
                    .to_owned()
            }
            Self::Text(text) => text.to_string(),
        }
    }
}

/// A window entry, equal to another with the same id in the same scope.
#[derive(Debug)]
struct ById(Arc<Dedup>);

impl ById {
    fn scope(&self) -> Option<&GroupName> {
        self.0.per_group.then_some(&self.0.group)
    }
}

impl PartialEq for ById {
    fn eq(&self, other: &Self) -> bool {
        self.scope() == other.scope() && self.0.id == other.0.id
    }
}

impl Eq for ById {}

impl Hash for ById {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.scope().hash(state);
        self.0.id.hash(state);
    }
}

/// The deduplication ids of the last 5 minutes. An expired entry counts as gone at once, and is
/// dropped when the set is full: one sweep of the set each time it would grow, so each entry
/// costs O(1) amortised to forget, and no second index keeps the entries in expiry order (a
/// queued FIFO message costs 8 to 16 bytes less).
#[derive(Debug, Default)]
pub(super) struct DedupWindow {
    live: HashSet<ById, FastHash>,
}

impl DedupWindow {
    /// The live entry with the id (and scope) of `candidate`.
    pub(super) fn get(&self, candidate: &Arc<Dedup>, now: Moment) -> Option<&Arc<Dedup>> {
        self.live
            .get(&ById(candidate.clone()))
            .map(|entry| &entry.0)
            .filter(|entry| entry.expires > now)
    }

    /// Remembers an entry until its `expires`, in place of an expired one with its id.
    pub(super) fn insert(&mut self, entry: Arc<Dedup>, now: Moment) {
        if self.live.len() >= self.live.capacity() {
            self.live.retain(|live| live.0.expires > now);
            // Still over half full: grow now, so the next sweep is as many inserts away as
            // this one's entries.
            if self.live.len() > self.live.capacity() / 2 {
                self.live.reserve(self.live.capacity());
            }
        }
        self.live.replace(ById(entry));
    }
}

impl Group {
    /// Adds a message stored after every other of the group.
    pub(super) fn push(&mut self, key: Key) {
        debug_assert!(self.keys.back().is_none_or(|&last| last < key));
        self.keys.push_back(key);
    }

    /// Removes a message of the group. The group's received messages are its first ones, so
    /// the one removed is almost always the first, found without a search.
    pub(super) fn remove(&mut self, key: Key) {
        if self.keys.front() == Some(&key) {
            self.keys.pop_front();
        } else if let Ok(at) = self.keys.binary_search(&key) {
            self.keys.remove(at);
        }
    }

    /// The group's message at `at` in storage order.
    pub(super) fn key_at(&self, at: usize) -> Option<Key> {
        self.keys.get(at).copied()
    }
}

impl Fifo {
    /// The queue's interned name for a group, when it has the group.
    pub(super) fn interned(&self, name: &str) -> Option<GroupName> {
        self.groups
            .get_key_value(name)
            .map(|(interned, _)| interned.clone())
    }

    /// Adds a message stored after every other to its group, creating the group if it is new;
    /// returns the group's interned name.
    pub(super) fn join(&mut self, name: GroupName, key: Key) -> GroupName {
        match self.groups.entry(name) {
            Entry::Occupied(mut group) => {
                group.get_mut().push(key);
                group.key().clone()
            }
            Entry::Vacant(group) => {
                let name = group.key().clone();
                group.insert(Group::default()).push(key);
                name
            }
        }
    }

    /// The oldest ready group.
    pub(super) fn first_ready(&self) -> Option<GroupName> {
        self.ready.first().map(|(_, name)| name.clone())
    }

    /// Re-files a group in the ready index after any change to it; drops it when empty.
    /// `head_visible` says whether a message (by key) is visible now.
    pub(super) fn refresh(&mut self, name: &GroupName, head_visible: impl Fn(Key) -> bool) {
        let Some(group) = self.groups.get_mut(name) else {
            return;
        };
        let want = match group.keys.front() {
            Some(&head) if group.in_flight == 0 && head_visible(head) => Some(head),
            _ => None,
        };
        if group.ready_at != want {
            if let Some(old) = group.ready_at {
                self.ready.remove(&(old, name.clone()));
            }
            if let Some(head) = want {
                self.ready.insert((head, name.clone()));
            }
            group.ready_at = want;
        }
        if group.keys.is_empty() {
            self.groups.remove(name);
        }
    }

    /// Forgets every message (purge); deduplication ids stay remembered.
    pub(super) fn clear_messages(&mut self) {
        self.groups.clear();
        self.ready.clear();
    }
}

/// A map whose entries expire a fixed time after insertion, pruned in insertion order so that
/// each entry costs O(1) amortised to forget.
#[derive(Debug)]
pub(super) struct Window<K, V> {
    entries: HashMap<K, (V, Instant)>,
    expiries: VecDeque<(Instant, K)>,
}

impl<K, V> Default for Window<K, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            expiries: VecDeque::new(),
        }
    }
}

impl<K: Clone + Eq + Hash, V> Window<K, V> {
    /// The live entry for `key`.
    pub(super) fn get(&mut self, key: &K, now: Instant) -> Option<&V> {
        self.prune(now);
        self.entries.get(key).map(|(value, _)| value)
    }

    /// Remembers `key` until `expires`; `expires` must not be earlier than any earlier insert's.
    pub(super) fn insert(&mut self, key: K, value: V, expires: Instant) {
        self.expiries.push_back((expires, key.clone()));
        self.entries.insert(key, (value, expires));
    }

    fn prune(&mut self, now: Instant) {
        while let Some((expires, _)) = self.expiries.front() {
            if *expires > now {
                break;
            }
            let (expires, key) = self.expiries.pop_front().expect("front exists");
            // A key re-inserted later has a later expiry and must survive this one.
            if self.entries.get(&key).is_some_and(|(_, at)| *at == expires) {
                self.entries.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_window_forgets_entries_when_they_expire_but_keeps_a_later_reinsert() {
        let start = Instant::now();
        let mut window = Window::default();
        window.insert("a", 1, start + Duration::from_secs(10));
        window.insert("b", 2, start + Duration::from_secs(12));
        assert_eq!(window.get(&"a", start + Duration::from_secs(9)), Some(&1));
        assert_eq!(window.get(&"a", start + Duration::from_secs(10)), None);
        assert_eq!(window.get(&"b", start + Duration::from_secs(10)), Some(&2));
        window.insert("b", 3, start + Duration::from_secs(20));
        assert_eq!(window.get(&"b", start + Duration::from_secs(15)), Some(&3));
        assert_eq!(window.get(&"b", start + Duration::from_secs(20)), None);
    }

    #[test]
    fn a_group_is_ready_only_when_nothing_is_in_flight_and_its_head_is_visible() {
        let mut fifo = Fifo::default();
        let name = fifo.join(GroupName::from("g"), 3);
        fifo.join(GroupName::from("g"), 5);
        assert!(Arc::ptr_eq(&fifo.interned("g").unwrap().0, &name.0));
        fifo.refresh(&name, |_| true);
        assert_eq!(fifo.first_ready().as_deref(), Some("g"));
        fifo.groups.get_mut(&name).unwrap().in_flight = 1;
        fifo.refresh(&name, |_| true);
        assert_eq!(fifo.first_ready(), None);
        fifo.groups.get_mut(&name).unwrap().in_flight = 0;
        fifo.refresh(&name, |key| key != 3);
        assert_eq!(
            fifo.first_ready(),
            None,
            "a delayed head keeps the group back"
        );
        fifo.groups.get_mut(&name).unwrap().keys.clear();
        fifo.refresh(&name, |_| true);
        assert!(fifo.groups.is_empty());
    }
}
