//! A message the consumer holds: its delivery, its lease, its room in the pipeline and the span
//! of its current attempt. Every part of the engine passes this value on: the intake makes it,
//! the dispatcher runs it (in one of its receive's tasks, or in its group's lane), the settler ends it
//! (deleted, given back, or let go), and what a stop does not start waits in the dispatcher for
//! the stop's final release.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;

use crate::client::lease::Lease;
use crate::handler::context::Delivery;

/// A message this consumer holds.
///
/// Dropped without being settled (an engine task that panicked), its lease is orphaned and the
/// heartbeat releases it: a message is never held for ever by a task that is gone.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) delivery: Arc<Delivery>,
    pub(crate) lease: HeldLease,
    /// Its place in the subscription's capacity, given back when it is settled.
    pub(crate) _room: OwnedSemaphorePermit,
    /// The `process` span of its current attempt (none before the first): what the engine logs
    /// about the message until the attempt is settled goes inside it.
    pub(crate) span: tracing::Span,
    /// Its place among its key's running messages, under a per-key in-flight limit; boxed, as
    /// few subscriptions set one and a receive's list of held messages is to stay under a
    /// kilobyte (see the size test below).
    pub(crate) key: Option<Box<KeyHold>>,
}

/// What keeps count of a key's running messages (`keys::KeyLimits`): told when one is let go.
pub(crate) trait KeyCount: Send + Sync {
    /// A message of `key` was let go (settled, given back, or dropped).
    fn let_go(self: Arc<Self>, key: &Arc<str>);
}

/// A held message's place among its key's running ones, given back when the message is let go:
/// the key's next waiting message then runs.
pub(crate) struct KeyHold {
    pub(crate) count: Arc<dyn KeyCount>,
    pub(crate) key: Arc<str>,
}

impl std::fmt::Debug for KeyHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("KeyHold").field(&self.key).finish()
    }
}

impl Drop for KeyHold {
    fn drop(&mut self) {
        self.count.clone().let_go(&self.key);
    }
}

/// A held message's lease, orphaned if dropped unsettled. The lease rather than the whole
/// [`Held`] carries this, so that a settled message can give up its delivery before its delete
/// is answered.
#[derive(Debug)]
pub(crate) struct HeldLease(pub(crate) Arc<Lease>);

impl std::ops::Deref for HeldLease {
    type Target = Arc<Lease>;

    fn deref(&self) -> &Arc<Lease> {
        &self.0
    }
}

impl Drop for HeldLease {
    fn drop(&mut self) {
        self.0.orphan();
    }
}

#[cfg(test)]
mod tests {
    use super::Held;
    use crate::engine::settle::Deleting;
    use crate::model::rules::MAX_BATCH_ENTRIES;

    /// A receive's lists of held messages and of their deletes are each one allocation; glibc
    /// merges all its fast free lists before it hands out a chunk of 1,024 bytes or more (one
    /// asked for 1,000 bytes stays under, with its header), and on a large backlog those lists'
    /// chunks lie all over the heap.
    #[test]
    fn a_receives_lists_of_held_messages_and_deletes_stay_under_a_kilobyte() {
        assert!(
            std::mem::size_of::<Held>() * MAX_BATCH_ENTRIES <= 1000,
            "{} bytes a held message",
            std::mem::size_of::<Held>()
        );
        assert!(
            std::mem::size_of::<Deleting>() * MAX_BATCH_ENTRIES <= 1000,
            "{} bytes a delete",
            std::mem::size_of::<Deleting>()
        );
    }
}
