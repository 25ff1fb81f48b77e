//! Leases and the visibility heartbeat.
//!
//! Every message a consumer holds (running, waiting behind its FIFO group, or prefetched) has a
//! [`Lease`]. The heartbeat extends, in batched `ChangeMessageVisibilityBatch` calls, every lease
//! whose visibility has less than half of the timeout left, so nothing this consumer holds times
//! out into another consumer's hands; it stops at the 12-hour cap with a warning.
//!
//! A lease's lock decides who touches the message: the heartbeat holds it across its call, and
//! settling claims it (marking it settled) before its delete or release, so no extension ever
//! reaches a message after it was settled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use super::Consumer;
use crate::sqs::rules::MAX_VISIBILITY_TIMEOUT_SECONDS;

/// The longest a message may stay invisible after its receive.
const VISIBILITY_CAP: Duration = Duration::from_secs(MAX_VISIBILITY_TIMEOUT_SECONDS as u64);

/// One held message's claim on its visibility.
#[derive(Debug)]
pub(crate) struct Lease {
    id: u64,
    pub(crate) receipt_handle: String,
    pub(crate) message_id: String,
    pub(crate) received_at: Instant,
    state: Arc<tokio::sync::Mutex<LeaseState>>,
}

#[derive(Debug)]
struct LeaseState {
    settled: bool,
    visible_at: Instant,
    /// The 12-hour cap was reached; no more extensions.
    capped: bool,
}

impl Lease {
    /// Claims the message for settling: `false` when it was already settled (by shutdown, say).
    pub(crate) async fn claim(&self) -> bool {
        let mut state = self.state.lock().await;
        !std::mem::replace(&mut state.settled, true)
    }

    /// Seconds left before the 12-hour cap, for a `retry_after` that must not pass it.
    pub(crate) fn seconds_to_cap(&self) -> u64 {
        (self.received_at + VISIBILITY_CAP)
            .saturating_duration_since(Instant::now())
            .as_secs()
    }
}

/// The leases a consumer holds.
#[derive(Debug, Default)]
pub(crate) struct Leases {
    held: Mutex<HashMap<u64, Arc<Lease>>>,
    next_id: AtomicU64,
}

impl Leases {
    pub(crate) fn open(
        &self,
        receipt_handle: String,
        message_id: String,
        visibility: Duration,
    ) -> Arc<Lease> {
        let now = Instant::now();
        let lease = Arc::new(Lease {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            receipt_handle,
            message_id,
            received_at: now,
            state: Arc::new(tokio::sync::Mutex::new(LeaseState {
                settled: false,
                visible_at: now + visibility,
                capped: false,
            })),
        });
        self.lock().insert(lease.id, lease.clone());
        lease
    }

    /// Forgets a lease once its message is settled.
    pub(crate) fn close(&self, lease: &Lease) {
        self.lock().remove(&lease.id);
    }

    pub(crate) fn all(&self) -> Vec<Arc<Lease>> {
        self.lock().values().cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Lease>>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How often the heartbeat looks: often enough to catch a lease well before half its timeout.
fn tick(visibility: Duration) -> Duration {
    (visibility / 4).clamp(Duration::from_millis(100), Duration::from_secs(10))
}

impl Consumer {
    /// Extends due leases until the consumer has stopped and let go of every message.
    pub(crate) async fn heartbeat(self: Arc<Self>) {
        let tick = tick(self.visibility);
        loop {
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                () = self.released_all() => return,
            }
            self.extend_due().await;
        }
    }

    /// Extends, in batched calls, every lease with less than half its timeout left.
    async fn extend_due(&self) {
        let now = Instant::now();
        let half = self.visibility / 2;
        let mut due: Vec<(Arc<Lease>, OwnedMutexGuard<LeaseState>, i32)> = Vec::new();
        for lease in self.leases.all() {
            // A lease being settled is locked; it needs no extension.
            let Ok(state) = lease.state.clone().try_lock_owned() else {
                continue;
            };
            if state.settled
                || state.capped
                || state.visible_at.saturating_duration_since(now) > half
            {
                continue;
            }
            let to_cap = (lease.received_at + VISIBILITY_CAP).saturating_duration_since(now);
            let seconds = self.visibility.as_secs().min(to_cap.as_secs()) as i32;
            due.push((lease, state, seconds));
        }
        if due.is_empty() {
            return;
        }
        let entries = due
            .iter()
            .map(|(lease, _, seconds)| (lease.receipt_handle.clone(), *seconds))
            .collect();
        let answers = self.visibility_batcher.submit(entries).await;
        for ((lease, mut state, seconds), answer) in due.into_iter().zip(answers) {
            match answer {
                Ok(()) => {
                    state.visible_at = now + Duration::from_secs(seconds as u64);
                    if (seconds as u64) < self.visibility.as_secs() {
                        state.capped = true;
                        tracing::warn!(
                            messaging.destination.name = %self.queue.name,
                            messaging.message.id = %lease.message_id,
                            "message reached the 12-hour visibility cap; it becomes visible again when the cap ends"
                        );
                    }
                }
                Err(error) => tracing::warn!(
                    messaging.destination.name = %self.queue.name,
                    messaging.message.id = %lease.message_id,
                    error = %error,
                    "could not extend the message's visibility"
                ),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_ticks_within_a_quarter_of_the_timeout() {
        assert_eq!(tick(Duration::from_secs(30)), Duration::from_millis(7500));
        assert_eq!(tick(Duration::from_secs(1)), Duration::from_millis(250));
        assert_eq!(tick(Duration::from_secs(3600)), Duration::from_secs(10));
    }
}
