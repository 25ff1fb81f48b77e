//! A queue's stored messages by key.
//!
//! Keys are handed out in increasing order and never reused, so the messages sit in key order in a
//! deque of small fixed-size chunks: finding one is an index, there is no hash table and no
//! per-message allocation, and the oldest key is at the front. A chunk is freed as soon as its
//! last message goes, so a message that stays for long (in flight again and again, or delayed)
//! keeps at most one chunk of its neighbours' slots alive, never the messages stored after it.

use std::collections::VecDeque;

use super::ids::Key;

/// Slots per chunk: small, so that a long-lived message pins little, and large enough that the
/// deque's pointer per chunk costs under a byte a message.
const CHUNK: usize = 16;

struct Chunk<T> {
    slots: [Option<T>; CHUNK],
    live: usize,
}

impl<T> Chunk<T> {
    fn new() -> Box<Self> {
        Box::new(Self {
            slots: [const { None }; CHUNK],
            live: 0,
        })
    }
}

/// The stored messages of one queue (`T`: what is stored of a message), by key.
pub(super) struct Messages<T> {
    /// The key of the first slot of `chunks[0]`.
    base: Key,
    /// One past the highest key ever inserted: the next insert's key is at least this.
    end: Key,
    /// `None` where every message of a chunk is gone.
    chunks: VecDeque<Option<Box<Chunk<T>>>>,
    len: usize,
}

impl<T> std::fmt::Debug for Messages<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Messages")
            .field("len", &self.len)
            .field("keys", &(self.base..self.end))
            .finish()
    }
}

impl<T> Messages<T> {
    /// An empty store whose first key will be at least `first`.
    pub(super) fn new(first: Key) -> Self {
        Self {
            base: first,
            end: first,
            chunks: VecDeque::new(),
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn place(&self, key: Key) -> Option<(usize, usize)> {
        let index = usize::try_from(key.checked_sub(self.base)?).ok()?;
        Some((index / CHUNK, index % CHUNK))
    }

    pub(super) fn get(&self, key: Key) -> Option<&T> {
        let (chunk, slot) = self.place(key)?;
        self.chunks.get(chunk)?.as_ref()?.slots[slot].as_ref()
    }

    pub(super) fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let (chunk, slot) = self.place(key)?;
        self.chunks.get_mut(chunk)?.as_mut()?.slots[slot].as_mut()
    }

    /// Stores a message under a key higher than any stored before.
    pub(super) fn insert(&mut self, key: Key, message: T) {
        assert!(key >= self.end, "keys are inserted in increasing order");
        let (chunk, slot) = self.place(key).expect("a new key is past the base");
        if self.chunks.len() <= chunk {
            self.chunks.resize_with(chunk + 1, || None);
        }
        let chunk = self.chunks[chunk].get_or_insert_with(Chunk::new);
        chunk.slots[slot] = Some(message);
        chunk.live += 1;
        self.len += 1;
        self.end = key + 1;
    }

    pub(super) fn remove(&mut self, key: Key) -> Option<T> {
        let (index, slot) = self.place(key)?;
        let chunk = self.chunks.get_mut(index)?;
        let message = chunk.as_mut()?.slots[slot].take()?;
        self.len -= 1;
        if chunk.as_mut().is_some_and(|c| {
            c.live -= 1;
            c.live == 0
        }) {
            *chunk = None;
            // Drop empty chunks at the front, but not the one new keys still go to.
            while matches!(self.chunks.front(), Some(None)) && self.base + CHUNK as Key <= self.end
            {
                self.chunks.pop_front();
                self.base += CHUNK as Key;
            }
        }
        Some(message)
    }

    /// The lowest stored key.
    pub(super) fn first(&self) -> Option<Key> {
        self.chunks.iter().enumerate().find_map(|(index, chunk)| {
            let slot = chunk.as_ref()?.slots.iter().position(Option::is_some)?;
            Some(self.base + (index * CHUNK + slot) as Key)
        })
    }

    /// The stored keys and messages, in key order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Key, &T)> + '_ {
        let base = self.base;
        self.chunks
            .iter()
            .enumerate()
            .filter_map(|(index, chunk)| Some((index, chunk.as_ref()?)))
            .flat_map(move |(index, chunk)| {
                chunk
                    .slots
                    .iter()
                    .enumerate()
                    .filter_map(move |(slot, message)| {
                        Some((base + (index * CHUNK + slot) as Key, message.as_ref()?))
                    })
            })
    }

    pub(super) fn clear(&mut self) {
        self.chunks.clear();
        self.base = self.end;
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::account::fifo::Dedup;
    use crate::account::ids::Moment;
    use crate::account::message::Stored;

    fn message(body: &str) -> Stored {
        let origin = tokio::time::Instant::now();
        Stored::new(body.into(), None, None, Moment::since(origin, origin))
    }

    #[test]
    fn messages_are_found_by_key_in_key_order_across_chunks_and_freed_chunks() {
        let mut messages = Messages::new(1);
        let keys = 1..=(3 * CHUNK as Key + 5);
        for key in keys.clone() {
            messages.insert(key, message(&key.to_string()));
        }
        assert_eq!(messages.len(), keys.clone().count());
        // Empty the first chunk and a middle one, and leave one message in between.
        for key in (1..=CHUNK as Key).chain(CHUNK as Key + 2..=2 * CHUNK as Key + 3) {
            assert!(messages.remove(key).is_some());
        }
        assert!(messages.remove(1).is_none(), "a removed message is gone");
        assert_eq!(messages.first(), Some(CHUNK as Key + 1));
        assert_eq!(
            messages.get(2 * CHUNK as Key + 4).map(|m| &*m.body),
            Some(&*(2 * CHUNK + 4).to_string())
        );
        assert!(messages.get(0).is_none() && messages.get(1_000).is_none());
        assert!(messages.remove(CHUNK as Key + 1).is_some());
        assert_eq!(messages.first(), Some(2 * CHUNK as Key + 4));
        let next = 3 * CHUNK as Key + 6;
        messages.insert(next, message("next"));
        assert_eq!(messages.get(next).map(|m| &*m.body), Some("next"));
        messages.clear();
        assert_eq!((messages.len(), messages.first()), (0, None));
        messages.insert(next + 1, message("after the purge"));
        assert_eq!(messages.first(), Some(next + 1));
    }

    #[test]
    fn stored_messages_and_their_deduplication_entries_stay_small() {
        // A queue keeps one `Stored` a message (and a FIFO queue one `Dedup`, behind an `Arc`
        // whose counts take 16 more): these bound the memory a queued message costs (the target:
        // at most 234 bytes a queued 100-byte standard message, 300 on FIFO).
        assert!(
            std::mem::size_of::<Stored>() <= 72,
            "{}",
            std::mem::size_of::<Stored>()
        );
        assert!(
            std::mem::size_of::<Dedup>() <= 56,
            "{}",
            std::mem::size_of::<Dedup>()
        );
    }
}
