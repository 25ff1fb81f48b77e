//! The receipt handles of the messages this server popped, by queue and message id: what an
//! `ack` or `ping` of an id acts with. Kept until a popped message's expiry passes by
//! [`HANDLE_GRACE`], swept as pops add to them.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How long after its expiry a popped message's receipt handle is kept for a late `ack`.
const HANDLE_GRACE: Duration = Duration::from_secs(3600);

/// Receipt handles by queue and message id.
#[derive(Debug, Default)]
pub(super) struct Handles {
    held: Mutex<HashMap<(String, String), Held>>,
}

#[derive(Debug)]
struct Held {
    receipt_handle: String,
    expires: Instant,
}

impl Handles {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps the handles of `popped` (message id, receipt handle) for `expires`, dropping those
    /// long expired.
    pub(super) fn keep(
        &self,
        queue: &str,
        popped: impl IntoIterator<Item = (String, String)>,
        expires: Duration,
    ) {
        let now = Instant::now();
        let mut held = self.lock();
        held.retain(|_, held| held.expires + HANDLE_GRACE > now);
        for (id, receipt_handle) in popped {
            held.insert(
                (queue.to_owned(), id),
                Held {
                    receipt_handle,
                    expires: now + expires,
                },
            );
        }
    }

    /// The receipt handles of `ids`, and the ids this server holds none for.
    pub(super) fn of(&self, queue: &str, ids: &[String]) -> (Vec<(String, String)>, Vec<String>) {
        let held = self.lock();
        let mut known = Vec::new();
        let mut unknown = Vec::new();
        for id in ids {
            match held.get(&(queue.to_owned(), id.clone())) {
                Some(entry) => known.push((id.clone(), entry.receipt_handle.clone())),
                None => unknown.push(id.clone()),
            }
        }
        (known, unknown)
    }

    /// Forgets the handles of `ids` (acked).
    pub(super) fn forget<'a>(&self, queue: &str, ids: impl IntoIterator<Item = &'a String>) {
        let mut held = self.lock();
        for id in ids {
            held.remove(&(queue.to_owned(), id.clone()));
        }
    }

    /// Marks `ids` as expiring `expires` from now (pinged).
    pub(super) fn extended<'a>(
        &self,
        queue: &str,
        ids: impl IntoIterator<Item = &'a String>,
        expires: Duration,
    ) {
        let until = Instant::now() + expires;
        let mut held = self.lock();
        for id in ids {
            if let Some(entry) = held.get_mut(&(queue.to_owned(), id.clone())) {
                entry.expires = until;
            }
        }
    }
}
