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
//! lane's [`Run`], the messages of the group handled since the lane's last delete call, which the
//! lane deletes in one call (see [`Run`] for when) and waits for before it rests, gives the group
//! back, stops or ends. A message whose delete was not confirmed comes back after its visibility
//! timeout, with its group held meanwhile, and is handled again before anything later of its
//! group: the replay `docs/fifo.md` describes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;

use super::held::Held;
use super::shared::{Shared, Tasks};
use crate::client::batch::{Batcher, DeleteBatch, VisibilityBatch};
use crate::client::lease::{DeleteInFlight, Lease, Leases};
use crate::client::Client;
use crate::metrics::SubscriptionMetrics;
use crate::model::headers::{
    ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER, ORIGINAL_MESSAGE_ID_HEADER, SOURCE_QUEUE_HEADER,
};
use crate::model::rules::{self, MAX_BATCH_ENTRIES, MAX_MESSAGE_ATTRIBUTES, MAX_MESSAGE_SIZE};
use crate::model::Destination;
use crate::publish::{Outgoing, PublishError, Publisher};
use crate::record::{Event, Settled};
use crate::retry::{self, AfterFailure, MessageTally, Retries};
use crate::transport::{MessageAttributeValue, SendMessage, SentMessage};

/// A settled message on its way out: what its delete needs until answered. The delivery is let go
/// as the message is settled, in the task that used it, not in the batcher's task that reads the
/// answer.
pub(crate) struct Deleting {
    /// Held, and extended, until the delete is answered.
    lease: DeleteInFlight,
    /// Its place in the pipeline, given back once the delete is answered.
    _room: OwnedSemaphorePermit,
    span: tracing::Span,
    /// How the message is counted (the metric, a test's recorder) once its delete succeeds: a
    /// message whose delete fails comes back and is handled again, and counts when that delete
    /// succeeds, once.
    counted: Counted,
}

/// How a deleted message is counted, built as it is settled and counted once its delete
/// succeeds.
#[derive(Debug)]
struct Counted {
    settled: Settled,
    /// The recorder's event, built only when a test records.
    event: Option<Event>,
}

impl Counted {
    /// Counts the message as settled: its delete succeeded.
    fn count(self, metrics: &SubscriptionMetrics, client: &Client) {
        metrics.settled(self.settled);
        if let Some(event) = self.event {
            client.record(|| event);
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
        } = held;
        drop(delivery);
        Self {
            lease,
            _room,
            span,
            counted,
        }
    }
}

/// How long a FIFO lane's run may have been in handlers, from its first message's attempt on,
/// before the lane deletes it ahead of its next message: long against a quick handler, so a busy
/// group's run of 10 goes in one call, and short enough that a consumer killed mid-run handles
/// again only what it handled in about a second (plus the attempt it was in). A handler slower
/// than that has each message deleted before the next starts.
pub(crate) const RUN_DELETE_WITHIN: Duration = Duration::from_secs(1);

/// A FIFO lane's run: the messages of its group it handled since its last delete call, each
/// claimed for its delete (held, and extended if need be, until the delete is answered) and
/// holding its room. The lane deletes them together ([`Settler::delete_run`]) when nothing more of
/// the group waits in it (before the lane ends, so the group is received again only once they are
/// gone), when it is as long as the subscription's `delete_run` (10 by default: a full call), when it has been in handlers for [`RUN_DELETE_WITHIN`] since its first message began, and before the
/// lane rests between retries, gives the group back, lets it go or parks it at a stop.
///
/// So a busy group costs one `DeleteMessageBatch` a run, not one a message, and a delete never
/// holds up the group's next handler. The price is the replay: a delete that is not confirmed
/// leaves its message to come back after its visibility timeout, once the run's later messages
/// were handled; SQS holds the group while it is in flight and hands it out first when it is
/// visible, so it is handled again before anything later of its group.
pub(crate) struct Run {
    deletes: Vec<Deleting>,
    /// When the handling of the first of `deletes` began.
    since: Option<tokio::time::Instant>,
    /// How many are deleted together at most: the subscription's `delete_run`.
    longest: usize,
}

impl Run {
    /// An empty run of at most `longest` messages (1 confirms each delete before the next).
    pub(crate) fn new(longest: usize) -> Self {
        Self {
            deletes: Vec::new(),
            since: None,
            longest: longest.clamp(1, MAX_BATCH_ENTRIES),
        }
    }

    /// Whether the run has nothing to delete.
    pub(crate) fn is_empty(&self) -> bool {
        self.deletes.is_empty()
    }

    /// Whether the run is to be deleted before the lane's next message, whatever follows it: it
    /// is as long as it may be, or its first message waited long enough.
    pub(crate) fn is_due(&self) -> bool {
        self.deletes.len() >= self.longest
            || self
                .since
                .is_some_and(|since| since.elapsed() >= RUN_DELETE_WITHIN)
    }

    /// Adds a settled message's delete ([`Next::Delete`]); its attempt began at `started`.
    pub(crate) fn push(&mut self, deleting: Deleting, started: tokio::time::Instant) {
        self.since.get_or_insert(started);
        self.deletes.push(deleting);
    }
}

/// The longest reason a dead-letter copy carries.
const MAX_REASON_CHARS: usize = 1024;

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
    /// Settled on FIFO: its delete joins the lane's [`Run`].
    Delete(Deleting),
}

/// Settles one subscription's messages: what a lapin `Acker` is to one delivery, for every message
/// the consumer holds.
pub(crate) struct Settler {
    client: Arc<Client>,
    /// The queue's name, as events and dead-letter copies carry it.
    queue: Arc<str>,
    fifo: bool,
    /// The visibility of received messages: a retry in place must leave room for one more run
    /// before the 12-hour cap.
    visibility: Duration,
    dead_letter: Option<Publisher>,
    retries: Retries,
    deleter: Batcher<DeleteBatch>,
    visibility_batcher: Batcher<VisibilityBatch>,
    leases: Arc<Leases>,
    /// On a standard queue, receives this consumer gave back without an attempt, taken off
    /// SQS's receive count.
    unstarted: MessageTally,
    /// On a FIFO queue, the attempts this consumer made at a message in receives it gave back
    /// (retries in place, then a release or a stop): its count of attempts starts from them.
    made: MessageTally,
    metrics: Arc<SubscriptionMetrics>,
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
    ) -> Self {
        Self {
            client,
            queue: shared.queue.clone(),
            fifo: shared.fifo,
            visibility: shared.visibility,
            dead_letter,
            retries,
            deleter,
            visibility_batcher,
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

    /// Moves a message to the dead-letter queue: the copy first, then the delete.
    async fn dead_letter(
        &self,
        held: Held,
        reason: String,
        attempts: u32,
        outcome: Outcome,
    ) -> Next {
        let mut tries = 0;
        let sent = loop {
            let error = match self.send_to_dead_letter(&held, &reason, attempts).await {
                Ok(sent) => break sent,
                Err(error) => error,
            };
            // Only the copy is tried again: the handler has had its say, and running it again
            // would repeat its side effects. The message stays held (and extended) meanwhile; on
            // FIFO its group waits, as nothing behind it may run before it is moved.
            tries += 1;
            let delay = self.retries.policy.delay(tries);
            tracing::warn!(
                messaging.message.id = %held.delivery.message_id,
                tries,
                retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error = %error,
                "the dead-letter copy could not be sent; the copy is tried again"
            );
            let room = held.lease.time_to_cap().saturating_sub(self.visibility);
            let waited = delay < room
                && tokio::select! {
                    biased;
                    () = self.tasks.no_new_attempts().cancelled() => false,
                    () = tokio::time::sleep(delay) => true,
                };
            if !waited {
                // A stop, or the 12-hour cap: it goes back, and is moved when it comes back.
                return Next::GoBack(held, 0);
            }
        };
        // The attempt's outcome is decided: the span says so on this line already, though the
        // message is counted dead-lettered only once its delete succeeds.
        held.span.record("rust_stream.outcome", outcome.as_str());
        tracing::warn!(
            messaging.message.id = %held.delivery.message_id,
            dead_letter.message_id = %sent.message_id,
            attempts,
            reason = %reason,
            "message dead-lettered"
        );
        self.client.record(|| Event::DeadLettered {
            queue: self.queue.to_string(),
            message_id: held.delivery.message_id.clone(),
            reason: reason.clone(),
        });
        self.delete(held, outcome).await
    }

    /// Sends what the handler published, in order, grouped by queue or topic, each through the
    /// broker its publisher belongs to (the subscription's own when the publisher is not bound,
    /// which names its queue or topic as it names every other).
    async fn publish_staged(&self, staged: Vec<Outgoing>) -> Result<(), PublishError> {
        // Keyed by kind (queues first), broker and name, so each destination's messages go out
        // together, in the order staged.
        type ByDestination =
            BTreeMap<(bool, usize, String), (Arc<Client>, Destination, Vec<SendMessage>)>;
        let mut by_destination = ByDestination::new();
        for outgoing in staged {
            let (publisher, message) = outgoing.into_request()?;
            let (client, destination) = match publisher.core() {
                Some(client) => (client, publisher.destination().clone()),
                None => {
                    let mut problems = Vec::new();
                    let named = self
                        .client
                        .naming()
                        .destination(publisher.destination(), &mut problems);
                    if let Some(problem) = problems.pop() {
                        return Err(PublishError::Config(problem));
                    }
                    (self.client.clone(), named)
                }
            };
            let key = (
                destination.topic().is_some(),
                Arc::as_ptr(&client) as usize,
                destination.name().to_owned(),
            );
            by_destination
                .entry(key)
                .or_insert_with(|| (client, destination, Vec::new()))
                .2
                .push(message);
        }
        for (client, destination, messages) in by_destination.into_values() {
            let bodies = self.recorded_bodies(&messages);
            let answers = client.send_to(&destination, messages).await;
            self.check_sent(destination.name(), answers, bodies)?;
        }
        Ok(())
    }

    /// The bodies of messages about to be sent, kept for a test's recorder only.
    fn recorded_bodies(&self, messages: &[SendMessage]) -> Option<Vec<String>> {
        self.client.is_recording().then(|| {
            messages
                .iter()
                .map(|message| message.body.clone())
                .collect()
        })
    }

    /// The first refusal among the answers of a send to the queue or topic `name`, and each
    /// message sent told to the recorder.
    fn check_sent(
        &self,
        name: &str,
        answers: Vec<Result<SentMessage, crate::transport::TransportError>>,
        bodies: Option<Vec<String>>,
    ) -> Result<(), PublishError> {
        for (index, answer) in answers.into_iter().enumerate() {
            answer.map_err(PublishError::rejected(name))?;
            if let Some(bodies) = &bodies {
                self.client.record(|| Event::Published {
                    queue: name.to_owned(),
                    body: bodies[index].clone(),
                });
            }
        }
        Ok(())
    }

    /// Copies a message to the dead-letter queue: same body and attributes, plus rust-stream's
    /// own (original message id, source queue, attempts, reason) where they fit; on FIFO the same
    /// group, deduplicated by the original message id.
    async fn send_to_dead_letter(
        &self,
        held: &Held,
        reason: &str,
        attempts: u32,
    ) -> Result<SentMessage, PublishError> {
        let Some(Destination::Queue(dead_letter)) =
            self.dead_letter.as_ref().map(Publisher::destination)
        else {
            unreachable!("a dead-letter decision needs a dead-letter queue")
        };
        let delivery = &held.delivery;
        let mut message = SendMessage::new(delivery.body.clone());
        message.message_attributes = delivery.attributes.clone();
        let reason: String = reason.chars().take(MAX_REASON_CHARS).collect();
        let ours = [
            (
                ORIGINAL_MESSAGE_ID_HEADER,
                MessageAttributeValue::string(delivery.message_id.clone()),
            ),
            (
                DEAD_LETTER_REASON_HEADER,
                MessageAttributeValue::string(reason),
            ),
            (
                SOURCE_QUEUE_HEADER,
                MessageAttributeValue::string(&*self.queue),
            ),
            (
                ATTEMPTS_HEADER,
                MessageAttributeValue::number(attempts.to_string()),
            ),
        ];
        // The copy must fit the dead-letter queue's own MaximumMessageSize, or it would be refused
        // for ever; the original already fits its queue's.
        let maximum = self
            .client
            .resolved(dead_letter)
            .await
            .map_or(MAX_MESSAGE_SIZE, |resolved| resolved.maximum_message_size);
        for (name, value) in ours {
            // The user's attributes are never overwritten, and the copy stays within SQS's limits
            // (count and size); the log line of the move carries the ids whatever fits.
            if message.message_attributes.len() >= MAX_MESSAGE_ATTRIBUTES
                || message.message_attributes.contains_key(name)
            {
                continue;
            }
            message.message_attributes.insert(name.to_owned(), value);
            if rules::message_size(&message) > maximum {
                message.message_attributes.remove(name);
            }
        }
        if self.fifo {
            message.group_id = Some(
                delivery
                    .group_id
                    .clone()
                    .unwrap_or_else(|| "default".to_owned()),
            );
            message.dedup_id = Some(delivery.message_id.clone());
        }
        self.client
            .send(dead_letter, message)
            .await
            .map_err(PublishError::rejected(&dead_letter.name))
    }

    /// Deletes a settled message. On FIFO its delete is handed back to its lane, which deletes its
    /// run together ([`Run`]); on a standard queue the caller goes on at once, nothing waits for
    /// the answer, and the message keeps its room in the pipeline until the delete is answered.
    /// The message is counted as `outcome` (acked, dead-lettered) once its delete succeeds, not
    /// before: until then it may come back and be handled again.
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
                .then(|| self.settled_event(&held, settled)),
        };
        let held = Deleting::new(held, in_flight, counted);
        if self.fifo {
            held.lease.wait_in_run();
            return Next::Delete(held);
        }
        // Shutdown waits for the answer as it waits for a task.
        let pending = self.tasks.token();
        let (metrics, client) = (self.metrics.clone(), self.client.clone());
        self.deleter
            .submit_one_then(held.lease.lease().clone(), move |answer| {
                {
                    // Its room goes back only now, at the end of this block.
                    let held = held;
                    match answer {
                        Ok(()) => held.counted.count(&metrics, &client),
                        Err(error) => {
                            // Not deleted: it comes back after its visibility timeout and is
                            // handled again.
                            let _entered = held.span.enter();
                            tracing::warn!(messaging.message.id = %held.lease.lease().message_id, error = %error, "delete failed");
                        }
                    }
                }
                drop(pending);
            });
        Next::Done
    }

    /// Deletes a FIFO lane's run in one call (up to 10; more in calls of 10, in order) and waits
    /// for the answers; the run is empty after. Whether every delete was confirmed: when one was
    /// not, its message may still be in flight, and nothing later of its group may be given back
    /// before it comes back (the lane lets the rest of its group go).
    pub(crate) async fn delete_run(&self, run: &mut Run) -> bool {
        run.since = None;
        let deletes = std::mem::take(&mut run.deletes);
        if deletes.is_empty() {
            return true;
        }
        for deleting in &deletes {
            deleting.lease.sent();
        }
        // A run of one (a quiet group) needs no list.
        let answers = if let [only] = deletes.as_slice() {
            vec![self.deleter.submit_one(only.lease.lease().clone()).await]
        } else {
            let leases = deletes
                .iter()
                .map(|deleting| deleting.lease.lease().clone())
                .collect();
            self.deleter.submit(leases).await
        };
        let mut confirmed = true;
        for (deleting, answer) in deletes.into_iter().zip(answers) {
            if let Err(error) = answer {
                confirmed = false;
                let _entered = deleting.span.enter();
                tracing::warn!(
                    messaging.message.id = %deleting.lease.lease().message_id,
                    error = %error,
                    "delete failed; the message comes back after its visibility timeout and is handled again, before anything later of its group"
                );
            } else {
                deleting.counted.count(&self.metrics, &self.client);
            }
            // Its lease and room go back only now, with the answer.
        }
        confirmed
    }

    /// Sets the visibility of held messages, in one call per 10; each message's own events are
    /// logged in its `process` span, if it had an attempt.
    pub(crate) async fn release(&self, held: Vec<Held>, seconds: i32) {
        let leases = held
            .iter()
            .map(|held| (held.lease.clone(), held.span.clone()))
            .collect();
        self.release_in_spans(leases, seconds).await;
    }

    /// Sets the visibility of messages in one call per 10; leases already settled are skipped.
    pub(crate) async fn release_leases(&self, leases: Vec<Arc<Lease>>, seconds: i32) {
        let leases = leases
            .into_iter()
            .map(|lease| (lease, tracing::Span::none()))
            .collect();
        self.release_in_spans(leases, seconds).await;
    }

    /// On FIFO each group's messages go in one call, in the group's order, and a group's messages
    /// behind one whose lease lapsed are let go without a call: a release must never make a
    /// message visible while an earlier one of its group may still be in flight. SQS would keep
    /// the group from receives meanwhile; LocalStack hands the released message out, out of order.
    async fn release_in_spans(&self, leases: Vec<(Arc<Lease>, tracing::Span)>, seconds: i32) {
        let mut claimed = Vec::new();
        for (lease, span) in leases {
            if self.leases.claim(&lease).await {
                claimed.push((lease, span));
            }
        }
        if claimed.is_empty() {
            return;
        }
        let answers = if self.fifo {
            let groups = in_group_order(std::mem::take(&mut claimed));
            let calls = groups.iter().map(|group| {
                let entries = group
                    .iter()
                    .map(|(lease, _)| (lease.clone(), seconds))
                    .collect();
                self.visibility_batcher.submit(entries)
            });
            let answers = futures_util::future::join_all(calls).await;
            claimed = groups.into_iter().flatten().collect();
            answers.into_iter().flatten().collect()
        } else {
            let entries = claimed
                .iter()
                .map(|(lease, _)| (lease.clone(), seconds))
                .collect();
            self.visibility_batcher.submit(entries).await
        };
        for ((lease, span), answer) in claimed.iter().zip(answers) {
            let _entered = span.enter();
            match answer {
                Ok(()) => {
                    tracing::debug!(messaging.message.id = %lease.message_id, visibility_s = seconds, "released")
                }
                // Its visibility had ended: it is visible already, or received again.
                Err(_) if lease.has_lapsed() => {
                    tracing::debug!(messaging.message.id = %lease.message_id, "not released: its visibility had ended")
                }
                // Not released: it comes back when its current visibility ends.
                Err(error) => {
                    tracing::warn!(messaging.message.id = %lease.message_id, error = %error, "release failed")
                }
            }
        }
    }
}

/// Claimed FIFO leases by group, each group in its order and cut before the first lease that
/// lapsed: that message may be in flight still, so neither it nor anything behind it is released
/// (their leases are claimed already: they are let go, and come back when their visibility
/// ends).
fn in_group_order(
    claimed: Vec<(Arc<Lease>, tracing::Span)>,
) -> Vec<Vec<(Arc<Lease>, tracing::Span)>> {
    let mut groups: Vec<Vec<(Arc<Lease>, tracing::Span)>> = Vec::new();
    let mut index: HashMap<Option<String>, usize> = HashMap::new();
    for (lease, span) in claimed {
        let at = *index.entry(lease.group_id.clone()).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[at].push((lease, span));
    }
    for group in &mut groups {
        group.sort_by_key(|(lease, _)| lease.received_order());
        if let Some(lapsed) = group.iter().position(|(lease, _)| lease.has_lapsed()) {
            for (lease, span) in group.drain(lapsed..) {
                let _entered = span.enter();
                tracing::debug!(
                    messaging.message.id = %lease.message_id,
                    "not released: its visibility, or an earlier one's of its group, had ended"
                );
            }
        }
    }
    groups.retain(|group| !group.is_empty());
    groups
}
