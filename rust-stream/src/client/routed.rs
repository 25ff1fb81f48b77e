//! The queues that an app on a broker routes by type: a typed message sent to one carries the
//! type header, so the routing subscriber on the other end can tell its type.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};

/// The queues routed by type, by the name the broker gives them.
#[derive(Debug, Default)]
pub(crate) struct RoutedQueues {
    queues: Mutex<HashSet<String>>,
    /// Whether `queues` holds any: a typed send to a broker that routes nothing (most) takes no
    /// lock to learn it.
    any: AtomicBool,
}

impl RoutedQueues {
    /// Notes that `queue` is routed by type.
    pub(crate) fn add(&self, queue: &str) {
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(queue.to_owned());
        self.any.store(true, Ordering::Release);
    }

    /// Whether `queue` is routed by type.
    pub(crate) fn contains(&self, queue: &str) -> bool {
        if !self.any.load(Ordering::Acquire) {
            return false;
        }
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(queue)
    }
}
