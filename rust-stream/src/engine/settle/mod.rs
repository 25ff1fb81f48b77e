//! Settling: the [`Settler`] turns a handler's [`Verdict`] into a delete, a retry, or a move to
//! the dead-letter queue, each through the batcher, and tells the dispatcher what the message's
//! lane does [`Next`]; the [retry decision](crate::retry) says which after a failure.
//!
//! A message reaches the settler as a [`Held`] from the dispatcher, with the verdict of its
//! attempt, and leaves it deleted, given back (released, hidden for a retry delay), or handed back
//! to its lane to run again. The settler owns what settling needs: the client (outputs,
//! dead-letter copies, a test's recorder), the queue's deleter and visibility batcher, where
//! failed messages go and after how many attempts, and the tallies of what this consumer gave back
//! (the intake and the dispatcher report those) from which it counts attempts: on a standard queue
//! SQS's receive count less the receives given back unstarted, on FIFO only the attempts this
//! process made. Every release goes through it too: the dispatcher's, the heartbeat's (orphans)
//! and the stop's.
//!
//! Nothing is ever deleted before it is safe: an ack deletes only after the handler's outputs
//! were sent, a dead-letter deletes only after the copy reached the dead-letter queue (so a crash
//! in between duplicates rather than loses), and any failure on the way is retried like a failed
//! handler. On a FIFO queue a settled message's delete is not submitted at once: it joins its
//! lane's [`Run`](super::lane::Run), the messages of the group handled since the lane's last
//! delete call, which the lane deletes in one call (`lane.rs` says when) and waits for before it
//! rests, gives the group back, stops or ends. A message whose delete was not confirmed comes back after its visibility
//! timeout, with its group held meanwhile, and is handled again before anything later of its
//! group: the replay `docs/fifo.md` describes.
//!
//! The settler is one type over four files: this one decides (settle, retry, delete, the counts
//! of attempts), `outputs.rs` sends what an acked handler staged, `dead_letter.rs` moves a message
//! to the dead-letter queue, and `release.rs` gives messages back by a visibility change.

mod dead_letter;
mod outputs;
mod release;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

use super::held::Held;
use super::shared::{Shared, Tasks};
use crate::client::batch::{Answered, Batcher, Call, DeleteBatch, VisibilityBatch};
use crate::client::lease::{DeleteInFlight, Lease, Leases};
use crate::client::Client;
use crate::metrics::SubscriptionMetrics;
use crate::publish::{Outgoing, Publisher};
use crate::record::{Event, Settled};
use crate::retry::{self, AfterFailure, MessageTally, Retries};

/// A settled message on its way out: what its delete needs until answered. The delivery is let go
/// as the message is settled, in the task that used it, not in the batcher's task that reads the
/// answer.
pub(crate) struct Deleting {
    /// Held, and extended, until the delete is answered.
    pub(super) lease: DeleteInFlight,
    /// Its place in the pipeline, given back once the delete is answered.
    _room: OwnedSemaphorePermit,
    pub(super) span: tracing::Span,
    /// How the message is counted (the metric, a test's recorder) once its delete succeeds: a
    /// message whose delete fails comes back and is handled again, and counts when that delete
    /// succeeds, once.
    pub(super) counted: Counted,
}

/// How a deleted message is counted, built as it is settled and counted once its delete
/// succeeds.
#[derive(Debug)]
pub(super) struct Counted {
    settled: Settled,
    /// The recorder's event, built only when a test records; boxed, so that a receive's list of
    /// deletes stays under a kilobyte (glibc merges its free lists for larger allocations).
    event: Option<Box<Event>>,
}

impl Counted {
    /// Counts the message as settled: its delete succeeded.
    pub(super) fn count(self, metrics: &SubscriptionMetrics, client: &Client) {
        metrics.settled(self.settled);
        if let Some(event) = self.event {
            client.record(|| *event);
        }
    }
}

impl std::fmt::Debug for Deleting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deleting")
            .field("message_id", &self.lease.lease().message_id)
            .finish_non_exhaustive()
    }
}

impl Deleting {
    fn new(held: Held, lease: DeleteInFlight, counted: Counted) -> Self {
        let Held {
            delivery,
            lease: _,
            _room,
            span,
            key,
        } = held;
        drop(delivery);
        // Its key's next message may run now, not once the delete is answered.
        drop(key);
        Self {
            lease,
            _room,
            span,
            counted,
        }
    }
}

/// How to settle a handled message.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Send the staged outputs, then delete.
    Ack { staged: Vec<Outgoing> },
    /// The attempt failed; retry or dead-letter as the retry decision says. `asked` is the delay
    /// a handler's `retry_after` asked for.
    Failed {
        reason: String,
        asked: Option<Duration>,
    },
    /// Send it to the dead-letter queue, then delete; `undecodable` when its body did not decode.
    DeadLetter { reason: String, undecodable: bool },
    /// The handler was cancelled at the shutdown timeout: release it.
    Cancelled,
}

/// How an attempt ended, as the `process` span's `rust_stream.outcome` field says; the
/// `rust_stream.messages.settled` metric counts the settled ones under the label of the same name
/// (an undecodable message as `dead_lettered`, a release not at all).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acked,
    Retried,
    DeadLettered,
    /// Dead-lettered because its body did not decode.
    Undecodable,
    /// Given back to the queue untouched (the handler was cancelled at shutdown).
    Released,
}

impl Outcome {
    /// The field's value.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Acked => "acked",
            Self::Retried => "retried",
            Self::DeadLettered => "dead_lettered",
            Self::Undecodable => "undecodable",
            Self::Released => "released",
        }
    }

    /// How a test's recorder and the metrics count it, when they do.
    fn settled(self) -> Option<Settled> {
        match self {
            Self::Acked => Some(Settled::Acked),
            Self::Retried => Some(Settled::Retried),
            Self::DeadLettered | Self::Undecodable => Some(Settled::DeadLettered),
            Self::Released => None,
        }
    }
}

/// What the message's lane does next.
#[derive(Debug)]
pub(crate) enum Next {
    /// The message is settled; go on with the group.
    Done,
    /// Run the message again after this delay, holding its group (FIFO).
    Again(Held, Duration),
    /// The message goes back to the queue undeleted, hidden for this many seconds. On FIFO the
    /// rest of its group goes back behind it, in the same call and hidden as long: nothing later
    /// in a group may become visible while an earlier message still is in flight (SQS would hold
    /// the group anyway; LocalStack hands the later message out).
    GoBack(Held, i32),
    /// Settled, to be deleted: on FIFO its delete joins the lane's [`Run`](super::lane::Run); on
    /// a standard queue its receive's task hands it to [`Settler::delete_all`] with the others
    /// it settled in the same poll.
    Delete(Deleting),
}

/// Who deletes a settled message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deletes {
    /// The settler, through the queue's deleter: the server's consumer.
    Own,
    /// The Lambda event source mapping, which deletes every message of an event that the
    /// function's answer does not name as failed: the settler only counts it.
    #[cfg_attr(not(feature = "lambda"), allow(dead_code))]
    ByEventSourceMapping,
}

/// Settles one subscription's messages: what a lapin `Acker` is to one delivery, for every message
/// the consumer holds.
pub(crate) struct Settler {
    pub(super) client: Arc<Client>,
    /// The queue's name, as events and dead-letter copies carry it.
    queue: Arc<str>,
    /// The queue's URL, for the delete calls a receive's task or a FIFO lane fills itself
    /// ([`Self::delete_full`], [`Self::delete_run`]).
    pub(super) url: Arc<str>,
    fifo: bool,
    /// The visibility of received messages: a retry in place must leave room for one more run
    /// before the 12-hour cap.
    visibility: Duration,
    dead_letter: Option<Publisher>,
    retries: Retries,
    pub(super) deleter: Batcher<DeleteBatch>,
    visibility_batcher: Batcher<VisibilityBatch>,
    deletes: Deletes,
    leases: Arc<Leases>,
    /// On a standard queue, receives this consumer gave back without an attempt, taken off
    /// SQS's receive count.
    unstarted: MessageTally,
    /// On a FIFO queue, the attempts this consumer made at a message in receives it gave back
    /// (retries in place, then a release or a stop): its count of attempts starts from them.
    made: MessageTally,
    pub(super) metrics: Arc<SubscriptionMetrics>,
    /// A delete nobody awaits counts as a task; a dead-letter copy is not tried again once a stop
    /// no longer starts attempts.
    tasks: Tasks,
}

impl Settler {
    /// A settler that deletes through `deleter` (on FIFO the subscription's own, which keeps its
    /// lanes' deletes together), and dead-letters to `dead_letter` as `retries` decides.
    pub(crate) fn new(
        shared: &Shared,
        client: Arc<Client>,
        dead_letter: Option<Publisher>,
        retries: Retries,
        deleter: Batcher<DeleteBatch>,
        visibility_batcher: Batcher<VisibilityBatch>,
        deletes: Deletes,
    ) -> Self {
        Self {
            client,
            queue: shared.queue.clone(),
            url: shared.url.clone(),
            fifo: shared.fifo,
            visibility: shared.visibility,
            dead_letter,
            retries,
            deleter,
            visibility_batcher,
            deletes,
            leases: shared.leases.clone(),
            unstarted: MessageTally::default(),
            made: MessageTally::default(),
            metrics: shared.metrics.clone(),
            tasks: shared.tasks.clone(),
        }
    }

    /// Notes messages given back before their first attempt in this receive: SQS counted the
    /// receive, but it was no attempt.
    pub(crate) fn count_unstarted<'a>(&self, unstarted: impl IntoIterator<Item = &'a Held>) {
        // A FIFO count of attempts counts attempts only: there is nothing to note.
        if self.fifo {
            return;
        }
        self.unstarted.note_all(
            unstarted
                .into_iter()
                .map(|held| held.delivery.message_id.as_str()),
        );
    }

    /// Notes what this consumer must remember of a message it gives back before its attempt
    /// number `next` in this receive (1 before any): on a FIFO queue the attempts it made, on a
    /// standard queue a receive without an attempt (each attempt there is a receive of its own).
    pub(crate) fn count_given_back(&self, held: &Held, next: u32) {
        let id = &held.delivery.message_id;
        if self.fifo {
            self.made.add(id, next.saturating_sub(1));
        } else if next <= 1 {
            self.unstarted.note(id);
        }
    }

    /// Which attempt at `held` its attempt number `local` in this receive (1 for the first) is,
    /// as the retry policy counts them: the one count the handler ([`Context::attempt`]), the
    /// `process` span and the retry decision all see.
    ///
    /// On a standard queue each attempt is a receive: SQS's receive count, less the receives
    /// this consumer gave back without an attempt. On a FIFO queue failures are retried in place,
    /// and a stop gives back a group's messages it did not start, each a receive SQS counts, in
    /// whichever process: only the attempts this consumer made count, in this receive and in
    /// those it gave back. Attempts an earlier process made are not known here, so a message
    /// that crashes its consumers is left to the queue's redrive, `n + 10` receives
    /// ([`redrive_backstop`](crate::retry::redrive_backstop)).
    ///
    /// [`Context::attempt`]: crate::Context::attempt
    pub(crate) fn attempts(&self, held: &Held, local: u32) -> u32 {
        let id = &held.delivery.message_id;
        if self.fifo {
            return self.made.count(id).saturating_add(local.max(1));
        }
        retry::attempts(
            held.delivery
                .receive_count
                .saturating_sub(self.unstarted.count(id)),
            local,
        )
    }

    /// Settles `held` as the verdict says. `attempts` is its attempt number as the retry policy
    /// counts them ([`attempts`](Self::attempts)), `attempt` this consumer's since it received it
    /// (1 for the first).
    pub(crate) async fn settle(
        &self,
        held: Held,
        verdict: Verdict,
        (attempts, attempt): (u32, u32),
    ) -> Next {
        // Every path but a plain ack is boxed: their state (sends, above all) would make the
        // future of every message's settling, and of the task that runs it, kilobytes larger,
        // to be allocated and moved for each message; they allocate only when taken.
        let next = match verdict {
            Verdict::Ack { staged } => {
                let published = if staged.is_empty() {
                    Ok(())
                } else {
                    Box::pin(self.publish_staged(staged)).await
                };
                match published {
                    Ok(()) => self.delete(held, Outcome::Acked).await,
                    Err(error) => {
                        let reason = format!("an output could not be sent: {error}");
                        Box::pin(self.failed(held, attempts, None, reason)).await
                    }
                }
            }
            Verdict::Failed { reason, asked } => {
                Box::pin(self.failed(held, attempts, asked, reason)).await
            }
            Verdict::DeadLetter {
                reason,
                undecodable,
            } if self.retries.can_dead_letter => {
                let outcome = if undecodable {
                    Outcome::Undecodable
                } else {
                    Outcome::DeadLettered
                };
                Box::pin(self.dead_letter(held, reason, attempts, outcome)).await
            }
            Verdict::DeadLetter { reason, .. } => {
                tracing::error!(
                    messaging.message.id = %held.delivery.message_id,
                    reason = %reason,
                    "the message should be dead-lettered, but the subscription has no dead-letter queue; \
                     it is retried instead (declare `.dead_letter(..)`)"
                );
                Box::pin(self.failed(held, attempts, None, reason)).await
            }
            Verdict::Cancelled => {
                self.record_settled(&held, Outcome::Released);
                Next::GoBack(held, 0)
            }
        };
        // Going back to the queue, the message leaves this receive with `attempt` attempts made.
        if let Next::GoBack(held, _) = &next {
            self.count_given_back(held, attempt.saturating_add(1));
        }
        next
    }

    /// After a failed attempt: the retry decision says retry (in place on FIFO, by a visibility
    /// change on a standard queue), dead-letter, or leave it to the queue's redrive.
    /// `attempts` counts the message's attempts so far.
    async fn failed(
        &self,
        held: Held,
        attempts: u32,
        asked: Option<Duration>,
        reason: String,
    ) -> Next {
        match self.retries.after_failure(attempts, asked) {
            AfterFailure::DeadLetter => {
                let reason = format!("{reason} (after {attempts} attempts)");
                self.dead_letter(held, reason, attempts, Outcome::DeadLettered)
                    .await
            }
            AfterFailure::RetryAfter(delay) => self.retry(held, delay, attempts, &reason).await,
            AfterFailure::LeaveToRedrive(delay) => {
                self.record_settled(&held, Outcome::Retried);

                tracing::warn!(
                    messaging.message.id = %held.delivery.message_id,
                    attempts,
                    reason = %reason,
                    "message has had its attempts; released for the queue's redrive policy to move it"
                );
                let seconds = held.lease.visibility_seconds(delay);
                Next::GoBack(held, seconds)
            }
        }
    }

    /// Records how an attempt ended in its `process` span, counts it, and tells a test's
    /// recorder, if there is one. A message settled for good (acked, dead-lettered) is counted
    /// only once its delete succeeds ([`delete`](Self::delete)).
    fn record_settled(&self, held: &Held, outcome: Outcome) {
        held.span.record("rust_stream.outcome", outcome.as_str());
        let Some(settled) = outcome.settled() else {
            return;
        };
        self.metrics.settled(settled);
        self.client.record(|| self.settled_event(held, settled));
    }

    /// A test recorder's event for `held` settled as `settled`.
    fn settled_event(&self, held: &Held, settled: Settled) -> Event {
        Event::Settled {
            queue: self.queue.to_string(),
            message_id: held.delivery.message_id.clone(),
            body: held.delivery.body.clone(),
            settled,
        }
    }

    async fn retry(&self, held: Held, delay: Duration, attempts: u32, reason: &str) -> Next {
        self.record_settled(&held, Outcome::Retried);
        tracing::warn!(
            messaging.message.id = %held.delivery.message_id,
            attempts,
            retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            reason = %reason,
            "message failed; it will be retried"
        );
        // On FIFO the consumer keeps the group and waits, unless the wait and one more run would
        // pass the 12-hour cap: then the group goes back to the queue, in order.
        let room = held.lease.time_to_cap().saturating_sub(self.visibility);
        if self.fifo && delay < room {
            return Next::Again(held, delay);
        }
        let seconds = held.lease.visibility_seconds(delay);
        Next::GoBack(held, seconds)
    }

    /// Deletes a settled message. Its delete is handed back ([`Next::Delete`]): on FIFO to its
    /// lane, which deletes its run together ([`Run`](super::lane::Run)); on a standard queue to
    /// the task that runs its receive, which hands the deletes of the messages it settled in one
    /// poll to [`delete_all`](Self::delete_all) together. The message is counted as `outcome`
    /// (acked, dead-lettered) once its delete succeeds, not before: until then it may come back
    /// and be handled again.
    async fn delete(&self, held: Held, outcome: Outcome) -> Next {
        held.span.record("rust_stream.outcome", outcome.as_str());
        let Some(in_flight) = self.leases.claim_for_delete(&held.lease).await else {
            return Next::Done;
        };
        let settled = outcome.settled().unwrap_or(Settled::Acked);
        let counted = Counted {
            settled,
            event: self
                .client
                .is_recording()
                .then(|| Box::new(self.settled_event(&held, settled))),
        };
        let held = Deleting::new(held, in_flight, counted);
        if self.deletes == Deletes::ByEventSourceMapping {
            // Reported as a success, the mapping deletes it: counted now, as nothing here learns
            // whether that delete succeeds.
            held.counted.count(&self.metrics, &self.client);
            return Next::Done;
        }
        if self.fifo {
            held.lease.wait_in_run();
        }
        Next::Delete(held)
    }

    /// Deletes settled messages of a standard queue (up to 10) in one submission to the
    /// deleter: the caller goes on at once and nothing waits for the answer; each message keeps
    /// its room in the pipeline until its delete is answered, and counts once it succeeds.
    pub(crate) fn delete_all(&self, deleting: Vec<Deleting>) {
        if deleting.is_empty() {
            return;
        }
        let (leases, then) = self.deleted(deleting);
        self.deleter.submit_then(leases, then);
    }

    /// Deletes settled messages of a standard queue that fill a call (10) in one call made by
    /// the caller, not handed to the deleter: a receive whose messages all settled at once
    /// costs no hand-over to the deleter's task, and its entries are made and freed on one
    /// thread. The call is the deleter's own (`Call`: its retries, deadlines and answers); it
    /// needs no company, being full.
    pub(crate) async fn delete_full(&self, deleting: Vec<Deleting>) {
        let (leases, then) = self.deleted(deleting);
        let mut call = Call::<DeleteBatch>::new();
        call.push_then(leases, then);
        call.run(self.client.transport().clone(), self.url.clone(), || {})
            .await;
    }

    /// The leases to delete of `deleting`, and what reads their answers: each message keeps its
    /// room until its delete is answered, and counts once it succeeds.
    fn deleted(
        &self,
        deleting: Vec<Deleting>,
    ) -> (
        Vec<Arc<Lease>>,
        impl FnOnce(&mut Answered<'_, DeleteBatch>) + Send + 'static,
    ) {
        // Shutdown waits for the answer as it waits for a task.
        let pending = self.tasks.token();
        let (metrics, client) = (self.metrics.clone(), self.client.clone());
        let leases = deleting
            .iter()
            .map(|held| held.lease.lease().clone())
            .collect();
        (leases, move |answers: &mut Answered<'_, DeleteBatch>| {
            for (held, answer) in deleting.into_iter().zip(answers) {
                // Its room goes back as it is dropped, here.
                match answer {
                    Ok(()) => held.counted.count(&metrics, &client),
                    Err(error) => {
                        // Not deleted: it comes back after its visibility timeout and is handled
                        // again.
                        let _entered = held.span.enter();
                        tracing::warn!(messaging.message.id = %held.lease.lease().message_id, error = %error, "delete failed");
                    }
                }
            }
            drop(pending);
        })
    }
}
