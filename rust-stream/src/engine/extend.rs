//! The visibility heartbeat: the [`Heartbeat`] keeps every message the consumer holds from timing
//! out, from its receive until it is settled.
//!
//! The intake opens a lease (see [`lease`](crate::client::lease)) for each message it receives,
//! hidden for the receive's short visibility
//! ([`RECEIVE_VISIBILITY_TIMEOUT`](crate::RECEIVE_VISIBILITY_TIMEOUT), 10 s at most); while the
//! dispatcher and the settler work on it, the heartbeat extends, in batched
//! `ChangeMessageVisibilityBatch` calls, every lease with less than half of the visibility last
//! asked for left, to the subscription's visibility timeout, so nothing this consumer holds times
//! out into another consumer's hands. A message settled within half the receive's visibility so
//! costs no extension, and one held longer its first at that point. While SQS answers extensions
//! slowly, they are sent earlier, as [`CallLatency`] says. It stops
//! extending at the 12-hour cap with a warning, and has the [`Settler`] release the leases whose
//! holder went away without settling them (an engine task that panicked). `mod.rs` starts it with
//! the consumer and stops it after the stop's final release.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::MutexGuard;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::settle::Settler;
use super::shared::{guarded, CallLatency, Shared};
use crate::client::batch::{Batcher, VisibilityBatch};
use crate::client::lease::{Lease, LeaseState, Leases};

/// Whether a lease's delete has been on its way for long enough to be waited for with an
/// extension: since the last round, or so long that the lease would lapse before the next. A
/// delete still waiting in a FIFO lane's run is not on its way: its lease is extended as a
/// message in hand is.
fn delete_is_slow(tick: Duration, lease: &Lease, now: Instant) -> bool {
    let Some(since) = lease.deleting_since() else {
        return true;
    };
    now.saturating_duration_since(since) >= tick
        || lease.lapses_at().saturating_duration_since(now) <= tick
}

/// A consumer's running heartbeat.
pub(crate) struct Heartbeat {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Heartbeat {
    /// Starts extending the consumer's leases through `visibility_batcher`; orphaned ones are
    /// released through `settler`.
    pub(crate) fn start(
        shared: &Shared,
        visibility_batcher: Batcher<VisibilityBatch>,
        settler: Arc<Settler>,
    ) -> Self {
        let stop = CancellationToken::new();
        let beat = Arc::new(Beat {
            queue: shared.queue.clone(),
            visibility: shared.visibility,
            latency: shared.latency.clone(),
            leases: shared.leases.clone(),
            visibility_batcher,
            settler,
            stop: stop.clone(),
        });
        let task = tokio::spawn(guarded(beat.run()));
        Self { stop, task }
    }

    /// Stops it, once every message is settled or released, and waits for its last round.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// What the heartbeat's rounds read and call.
struct Beat {
    /// The queue's name, as the logs name it.
    queue: Arc<str>,
    /// The subscription's visibility timeout: what an extension asks for.
    visibility: Duration,
    /// How slowly extensions have lately been answered: an extension is sent at least its
    /// reserve ahead of the end, and each round's answer time is noted in it. Its tick is how
    /// often the heartbeat looks (a quarter of the receive's visibility on a quick line).
    latency: Arc<CallLatency>,
    leases: Arc<Leases>,
    visibility_batcher: Batcher<VisibilityBatch>,
    settler: Arc<Settler>,
    /// Every message is settled or released: no round follows.
    stop: CancellationToken,
}

impl Beat {
    /// Extends due leases, and releases orphaned ones, until the heartbeat is stopped. Each round
    /// runs in a task of its own, with a deadline below the visibility it protects: a stalled call
    /// delays only the leases it carries (locked meanwhile, so later rounds pass them by), never
    /// the next round, and a round that panics is logged and followed by the next.
    async fn run(self: Arc<Self>) {
        let tick = self.latency.tick();
        let rounds = tokio_util::task::TaskTracker::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                () = self.stop.cancelled() => break,
            }
            let beat = self.clone();
            rounds.spawn(guarded(async move { beat.extend_due().await }));
        }
        rounds.close();
        rounds.wait().await;
    }

    /// Extends, in batched calls, every lease with less than half of the visibility last asked for
    /// left (a lease whose delete is slow to be answered included) to the subscription's
    /// visibility timeout, and releases the orphaned ones.
    async fn extend_due(&self) {
        let held = self.leases.all();
        let orphans: Vec<Arc<Lease>> = held
            .iter()
            .filter(|lease| lease.is_orphaned())
            .cloned()
            .collect();
        if !orphans.is_empty() {
            tracing::warn!(
                messaging.destination.name = %self.queue,
                orphans = orphans.len(),
                "releasing messages whose engine task ended without settling them"
            );
            self.settler.release_leases(orphans, 0).await;
        }
        let now = Instant::now();
        let reserve = self.latency.reserve();
        let mut due: Vec<(&Arc<Lease>, MutexGuard<'_, LeaseState>, i32)> = Vec::new();
        for lease in &held {
            if lease.is_orphaned() {
                continue;
            }
            // A lease being settled, or in a round still in flight, is locked: it is not due here.
            let Some(mut state) = lease.try_state() else {
                continue;
            };
            let settled = lease.is_settled() && !lease.is_deleting();
            // Half of what was last asked for; on a slow line, enough for the slowest answer.
            let ahead = (lease.window() / 2).max(reserve);
            if settled || state.capped || lease.visible_at().saturating_duration_since(now) > ahead
            {
                continue;
            }
            if lease.is_deleting() && !delete_is_slow(self.latency.tick(), lease, now) {
                // Its delete is on its way and will most likely be answered before the next
                // round: an extension now would cost a call, and fail once the delete is in.
                continue;
            }
            if lease.has_lapsed() {
                if lease.tell_lapse_once() {
                    tracing::warn!(
                        messaging.destination.name = %self.queue,
                        messaging.message.id = %lease.message_id,
                        "the message's visibility ended before it was extended: it may be received again and handled twice"
                    );
                }
                continue;
            }
            let to_cap = lease.time_to_cap_at(now);
            let seconds = self.visibility.as_secs().min(to_cap.as_secs()) as i32;
            if seconds == 0 {
                // Less than a second to the cap: a change of 0 would release a running message.
                state.capped = true;
                continue;
            }
            due.push((lease, state, seconds));
        }
        if due.is_empty() {
            return;
        }
        let entries = due
            .iter()
            .map(|(lease, _, seconds)| (Arc::clone(lease), *seconds))
            .collect();
        let answers = self.visibility_batcher.submit(entries).await;
        self.latency.record(now.elapsed());
        for ((lease, mut state, seconds), answer) in due.into_iter().zip(answers) {
            match answer {
                Ok(()) => {
                    lease.set_window(now, Duration::from_secs(seconds as u64));
                    if (seconds as u64) < self.visibility.as_secs() {
                        state.capped = true;
                        tracing::warn!(
                            messaging.destination.name = %self.queue,
                            messaging.message.id = %lease.message_id,
                            "message reached the 12-hour visibility cap; it becomes visible again when the cap ends"
                        );
                    }
                }
                // Its delete was answered meanwhile: nothing is left to extend.
                Err(_) if lease.is_settled() && !lease.is_deleting() => {}
                Err(error) => tracing::warn!(
                    messaging.destination.name = %self.queue,
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
    use crate::engine::shared::tick;

    #[test]
    fn the_heartbeat_ticks_within_a_quarter_of_the_timeout() {
        assert_eq!(tick(Duration::from_secs(30)), Duration::from_millis(7500));
        assert_eq!(tick(Duration::from_secs(1)), Duration::from_millis(250));
        assert_eq!(tick(Duration::from_secs(3600)), Duration::from_secs(10));
    }

    /// A FIFO message acked while later messages of its run still run waits for the run's
    /// delete call, which may come after its visibility timeout: it is extended when due, as
    /// a message in hand is, not held back as a delete about to be answered. (A property-test
    /// case lost such a message's visibility with 0.5 s left, and handled it again.)
    #[tokio::test(start_paused = true)]
    async fn a_delete_waiting_in_a_run_is_extended_when_due_and_one_on_its_way_is_waited_for() {
        let visibility = Duration::from_secs(10);
        let leases = Arc::new(Leases::default());
        let lease = leases.open("r".into(), "m".into(), Some("g".into()), visibility);
        tokio::time::advance(Duration::from_secs(6)).await;
        let in_flight = leases.claim_for_delete(&lease).await.expect("unsettled");
        in_flight.wait_in_run();
        tokio::time::advance(Duration::from_millis(500)).await;
        // 3.5 s left, more than a tick beyond the lapse margin, claimed half a second ago.
        let now = Instant::now();
        let tick = tick(visibility);
        assert!(delete_is_slow(tick, &lease, now), "waits in a run");
        in_flight.sent();
        assert!(
            !delete_is_slow(tick, &lease, now),
            "sent just now: the answer is waited for"
        );
        tokio::time::advance(tick).await;
        assert!(
            delete_is_slow(tick, &lease, Instant::now()),
            "sent a tick ago"
        );
    }
}
