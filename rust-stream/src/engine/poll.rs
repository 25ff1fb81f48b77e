//! The intake: the subscription's pollers long-poll the queue and feed the dispatcher, never
//! holding more messages than it has room for.
//!
//! [`Intake`] is what the pollers share: the queue's URL and the receive's settings, the count of
//! receives in flight (which a stop waits for), and the subscription's health probe. Each poller
//! is a loop over it ([`Intake::poll`]). A poller takes room for a whole batch from the
//! [`Dispatcher`] before it receives (on FIFO also waiting until fewer lanes run than the handler
//! slots: there a receive brings runs of a group's messages, which wait in its lane, so room is
//! counted in groups and what is received is what can run), and hands back what the receive did
//! not fill, so a full pipeline stops receiving instead of piling up messages that would time
//! out. For each message it opens a lease, wraps delivery, lease and room in a [`Held`], and
//! dispatches it.
//! A failed receive backs off with jitter, from 1 s to 30 s, and so does an empty short poll
//! (`wait` of 0); neither loops tight.
//!
//! **How many receive at once** follows the demand ([`Turns`]): the subscription's `pollers` are
//! the most, and one of them always receives (one long poll out when the queue is idle, as a
//! single poller had). A receive that comes back full while a handler slot is free lets one more
//! poller receive, up to the most; one that comes back empty, or fails, retires its poller's
//! turn, down to the one. Under a backlog that the handlers keep up with, the receives in flight
//! so double each round trip until they reach the most; once the queue is drained the extra long
//! polls come back empty and stop, and an idle queue costs one long poll per `wait`. Partial
//! receives change nothing: the receives in flight then bring what arrives, no more are needed
//! and fewer would leave it waiting. Every poller is a task from the start; one without a turn
//! waits for one and costs nothing else.
//!
//! The room follows the turns too: the intake keeps a batch of the dispatcher's room aside for
//! each poller without a turn, so the consumer holds at most what the handlers work through plus
//! a batch per poller *with a turn*, as it did with that many fixed pollers. Handlers that fall
//! behind (no slot free when a full receive comes back) so stop the growth, and what is held for
//! them with it, however large `pollers` is.
//!
//! At shutdown no new receive starts. One in flight is given up when the stop says so (on a
//! backend whose abandoned receive takes nothing, the account, at once). A server hands messages
//! to a long poll even after its caller stopped listening, so every receive asks for a short
//! visibility ([`RECEIVE_VISIBILITY_TIMEOUT`](crate::RECEIVE_VISIBILITY_TIMEOUT), 10 s at most,
//! extended by the heartbeat while the message is held): what a receive given up takes is hidden
//! that long at most. What a receive in flight returns before it is given up is handled like the
//! rest: run while the stop still starts attempts, else parked for the stop's final release.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, SemaphorePermit};
use tracing::Instrument;

use super::dispatch::Dispatcher;
use super::held::{Held, HeldLease};
use super::settle::Settler;
use super::shared::{CallLatency, Shared, Tasks};
use crate::client::lease::Leases;
use crate::client::Client;
use crate::handler::context::Delivery;
use crate::health::SubscriptionProbe;
use crate::metrics::SubscriptionMetrics;
use crate::model::queue::ConsumerSettings;
use crate::model::rules::ErrorKind;
use crate::retry::backoff;
use crate::task::CatchUnwind;
use crate::transport::{ReceiveMessage, ReceivedMessage, TransportError};

/// The system attributes a delivery reads (`Delivery::new`, the message-age metric, the trace's
/// X-Ray header) from a FIFO queue; asking for `All` would have each message carry the rest too,
/// built and copied for nobody.
const FIFO_ATTRIBUTES: [&str; 6] = [
    "AWSTraceHeader",
    "ApproximateReceiveCount",
    "SentTimestamp",
    "MessageGroupId",
    "MessageDeduplicationId",
    "SequenceNumber",
];

/// The same from a standard queue: SQS gives a standard queue's messages no deduplication id
/// and no sequence number, so they are not asked for; a group id it gives (a fair queue's
/// messages carry one).
const STANDARD_ATTRIBUTES: [&str; 4] = [
    "AWSTraceHeader",
    "ApproximateReceiveCount",
    "SentTimestamp",
    "MessageGroupId",
];

/// How long past its long poll a receive may take before the engine gives it up.
pub(crate) const RECEIVE_MARGIN: Duration = Duration::from_secs(10);

/// How long a stop waits at least for a receive in flight over a network before it may give it up:
/// long enough for a receive that is answering to answer, so that what it brings is handled or
/// released rather than hidden; short enough that an idle service stops in about this long,
/// whatever its long poll.
pub(crate) const STOP_RECEIVE_GRACE: Duration = Duration::from_secs(1);

/// The fewest pollers that receive: one long poll is always out, so a message sent to an idle
/// queue is received at once, as with a single poller.
pub(crate) const MIN_POLLERS: usize = 1;

/// Counts a receive in flight while it lives, in the intake's count and its gauge.
struct Receiving<'a>(&'a Intake);

impl<'a> Receiving<'a> {
    fn new(intake: &'a Intake) -> Self {
        intake.receiving.fetch_add(1, Ordering::AcqRel);
        intake.metrics.receiving.increment(1.0);
        Self(intake)
    }
}

impl Drop for Receiving<'_> {
    fn drop(&mut self) {
        self.0.receiving.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.receiving.decrement(1.0);
    }
}

/// Which pollers may receive now: a permit each, between [`MIN_POLLERS`] and the subscription's
/// `pollers`. A poller takes a permit before it takes room and keeps it from receive to receive
/// (through its back-offs) until it retires, so the receives in flight never outnumber the
/// permits.
struct Turns {
    permits: Semaphore,
    /// The permits there are, held or not.
    active: AtomicUsize,
    max: usize,
    /// A batch of the dispatcher's room for each poller without a turn, kept from the pollers
    /// (taken when the intake starts).
    reserve: Mutex<Option<OwnedSemaphorePermit>>,
}

impl Turns {
    fn new(max: usize) -> Self {
        let min = MIN_POLLERS.min(max);
        Self {
            permits: Semaphore::new(min),
            active: AtomicUsize::new(min),
            max,
            reserve: Mutex::new(None),
        }
    }

    fn reserve(&self) -> std::sync::MutexGuard<'_, Option<OwnedSemaphorePermit>> {
        self.reserve.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One more poller may receive, with a batch of room back from the reserve, unless the most
    /// already do; the new count when it grew.
    fn grow(&self, batch: usize) -> Option<usize> {
        let grown = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |active| {
                (active < self.max).then_some(active + 1)
            })
            .ok()?;
        if let Some(reserve) = self.reserve().as_mut() {
            drop(reserve.split(batch));
        }
        self.permits.add_permits(1);
        Some(grown + 1)
    }

    /// Retires `turn` unless only the fewest pollers receive, its unused `room` (a whole batch:
    /// the receive brought nothing) going to the reserve; the new count when it shrank, else the
    /// turn and the room back.
    fn shrink<'a>(
        &self,
        turn: SemaphorePermit<'a>,
        room: OwnedSemaphorePermit,
    ) -> Result<usize, Kept<'a>> {
        let Ok(before) = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |active| {
                (active > MIN_POLLERS).then(|| active - 1)
            })
        else {
            return Err((turn, room));
        };
        turn.forget();
        match self.reserve().as_mut() {
            Some(reserve) => reserve.merge(room),
            None => drop(room),
        }
        Ok(before - 1)
    }
}

/// A turn and its room, kept by a poller that could not retire.
type Kept<'a> = (SemaphorePermit<'a>, OwnedSemaphorePermit);

/// What a receive says about the demand: see [`Turns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Demand {
    /// It came back full: one more poller may receive.
    More,
    /// Partial: as many as now.
    Same,
    /// It came back empty, or failed: one fewer.
    Fewer,
}

/// One subscription's intake: what its pollers share.
pub(crate) struct Intake {
    client: Arc<Client>,
    url: Arc<str>,
    /// The queue's name, shared by every delivery.
    queue: Arc<str>,
    fifo: bool,
    /// The subscription's visibility timeout: a receive asks for it, at most
    /// `RECEIVE_VISIBILITY_TIMEOUT` unless SQS lately answered slowly (see [`CallLatency`]); a
    /// lease keeps what its receive asked for until the heartbeat extends it.
    visibility: Duration,
    latency: Arc<CallLatency>,
    batch_size: usize,
    wait: Duration,
    /// Whether a body may be an SNS notification envelope to unwrap (the queue has an enveloped
    /// topic subscription).
    reads_envelopes: bool,
    /// Receives in flight, which a stop waits for on a network backend.
    receiving: AtomicUsize,
    /// How many pollers may receive now.
    turns: Turns,
    /// What the subscription tells the app's health.
    probe: Arc<SubscriptionProbe>,
    metrics: Arc<SubscriptionMetrics>,
    leases: Arc<Leases>,
    tasks: Tasks,
    dispatcher: Arc<Dispatcher>,
    /// Releases what a receive brought beyond what was asked for.
    settler: Arc<Settler>,
    /// The rate limit and backpressure switch asked before each receive.
    flow: crate::model::flow::Flow,
    /// One poller at a time asks the flow: a rate limit shared with others serves its waiters in
    /// turn, and the subscription's pollers are one of them, not one each.
    admitting: tokio::sync::Mutex<()>,
    /// The per-key in-flight limit, when the subscription has one.
    keys: Option<Arc<super::keys::KeyLimits>>,
}

impl Intake {
    /// An intake that receives from the queue at `shared`'s URL and hands what it receives to
    /// `dispatcher`.
    pub(crate) fn new(
        shared: &Shared,
        client: Arc<Client>,
        settings: &ConsumerSettings,
        probe: Arc<SubscriptionProbe>,
        dispatcher: Arc<Dispatcher>,
        settler: Arc<Settler>,
    ) -> Self {
        let keys = settings.flow.per_key.as_ref().map(|per_key| {
            // Those waiting for their keys have room of their own, a handler slot's each.
            super::keys::KeyLimits::new(
                per_key,
                settings.concurrency,
                dispatcher.clone(),
                shared.tasks.clone(),
            )
        });
        Self {
            client,
            url: shared.url.clone(),
            queue: shared.queue.clone(),
            fifo: shared.fifo,
            visibility: shared.visibility,
            latency: shared.latency.clone(),
            batch_size: settings.batch_size,
            wait: settings.wait,
            reads_envelopes: settings.reads_envelopes,
            receiving: AtomicUsize::new(0),
            turns: Turns::new(settings.pollers),
            probe,
            metrics: shared.metrics.clone(),
            leases: shared.leases.clone(),
            tasks: shared.tasks.clone(),
            dispatcher,
            settler,
            flow: (*settings.flow).clone(),
            admitting: tokio::sync::Mutex::new(()),
            keys,
        }
    }

    /// How many receives are in flight.
    pub(crate) fn receiving(&self) -> usize {
        self.receiving.load(Ordering::Acquire)
    }

    /// The visibility timeout a receive asks for now.
    pub(crate) fn visibility(&self) -> Duration {
        crate::model::queue::receive_visibility(self.visibility, self.latency.reserve())
    }

    /// Starts the subscription's pollers: all of them tasks, the fewest with a turn, the room of
    /// the others set aside.
    pub(crate) async fn start(self: &Arc<Self>) {
        let without_turn = self.turns.max - self.turns.active.load(Ordering::Acquire);
        if without_turn > 0 {
            // Nothing is held yet: taken at once.
            *self.turns.reserve() = self.dispatcher.room(without_turn * self.batch_size).await;
        }
        self.metrics
            .pollers
            .set(self.turns.active.load(Ordering::Acquire) as f64);
        for _ in 0..self.turns.max {
            self.tasks.spawn(self.clone().poll());
        }
    }

    /// A turn to receive; `None` once the stop has begun.
    async fn turn(&self) -> Option<SemaphorePermit<'_>> {
        tokio::select! {
            biased;
            () = self.tasks.stopping().cancelled() => None,
            turn = self.turns.permits.acquire() => turn.ok(),
        }
    }

    /// How many messages the next receive may ask for, up to `want`, once the flow lets it be
    /// made (a token for each under a rate limit, none while the backpressure is tripped); `None`
    /// once the stop has begun.
    async fn admit(&self, want: usize) -> Option<usize> {
        // Most subscriptions have no limit: their receives take no lock and wait for nothing.
        if self.flow.rate_limit.is_none() && self.flow.backpressure.is_none() {
            return Some(want);
        }
        tokio::select! {
            biased;
            () = self.tasks.stopping().cancelled() => None,
            admitted = async {
                let _turn = self.admitting.lock().await;
                self.flow.admit(want).await
            } => Some(admitted),
        }
    }

    /// Another poller's turn, after a full receive while a handler slot is free.
    fn grow(&self) {
        if self.dispatcher.idle_slots() == 0 {
            return;
        }
        if let Some(active) = self.turns.grow(self.batch_size) {
            self.metrics.pollers.set(active as f64);
        }
    }

    /// Retires `turn` (with `room`, untouched by an empty or failed receive) unless only the
    /// fewest pollers receive; the turn and the room back when it did not.
    fn retire<'a>(
        &self,
        turn: SemaphorePermit<'a>,
        room: OwnedSemaphorePermit,
    ) -> Result<(), Kept<'a>> {
        let active = self.turns.shrink(turn, room)?;
        self.metrics.pollers.set(active as f64);
        Ok(())
    }

    /// One receive loop, until shutdown.
    pub(crate) async fn poll(self: Arc<Self>) {
        let batch_size = self.batch_size;
        let wait = self.wait;
        let mut failures = 0;
        let mut empty = 0;
        // Kept from receive to receive until the poller retires, so its back-off (kept here)
        // spaces its own receives rather than passing the turn to a poller that has none.
        let mut turn = None;
        loop {
            // The turn first: a poller waiting for one holds no room the others could use.
            let turn_now = match turn.take() {
                Some(turn) => turn,
                None => match self.turn().await {
                    Some(turn) => turn,
                    None => return,
                },
            };
            let Some(room) = self.dispatcher.room(batch_size).await else {
                return;
            };
            // The limits act here, before the receive: what a receive brings is run at once, so
            // nothing received waits for them with its lease running.
            let Some(asked) = self.admit(batch_size).await else {
                return;
            };
            // The visibility is always sent, so the held messages' leases match it whatever the
            // queue's default is now; short, so a receive given up hides what it took briefly.
            let visibility = self.visibility();
            let mut request = ReceiveMessage::new(asked as i32)
                .wait_time_seconds(wait.as_secs() as i32)
                .visibility_timeout(visibility.as_secs() as i32)
                .system_attribute_names(
                    if self.fifo {
                        &FIFO_ATTRIBUTES[..]
                    } else {
                        &STANDARD_ATTRIBUTES[..]
                    }
                    .iter()
                    .copied(),
                );
            if self.fifo {
                // A receive the SDK retries after a lost answer then gets the same messages back,
                // instead of leaving them (and their groups) invisible for a visibility timeout.
                request = request.receive_request_attempt_id(uuid::Uuid::new_v4().to_string());
            }
            let span = tracing::debug_span!(
                "receive",
                messaging.system = "aws_sqs",
                messaging.destination.name = %self.queue,
                messaging.operation.type = "receive",
                messaging.batch.message_count = tracing::field::Empty,
            );
            let Some(received) = self.receive(request).instrument(span.clone()).await else {
                return;
            };
            let mut room = room;
            self.flow.unused(
                asked.saturating_sub(received.as_ref().map_or(0, |messages| messages.len())),
            );
            let demand = match &received {
                Ok(messages) if messages.len() >= batch_size => Demand::More,
                Ok(messages) if !messages.is_empty() => Demand::Same,
                _ => Demand::Fewer,
            };
            let delay = match received {
                Ok(messages) => {
                    failures = 0;
                    self.probe.received(messages.len());
                    self.metrics.received(&messages);
                    span.record("messaging.batch.message_count", messages.len());
                    if messages.is_empty() && wait.is_zero() {
                        empty += 1;
                        Some(backoff(
                            empty,
                            Duration::from_millis(100),
                            Duration::from_secs(2),
                        ))
                    } else {
                        empty = 0;
                        self.take(messages, visibility, &mut room).await;
                        None
                    }
                }
                Err(error) => {
                    failures += 1;
                    self.probe.receive_failed();
                    let delay = backoff(failures, Duration::from_secs(1), Duration::from_secs(30));
                    tracing::warn!(
                        messaging.destination.name = %self.queue,
                        error = %error,
                        retry_in_ms = delay.as_millis() as u64,
                        "receive failed"
                    );
                    Some(delay)
                }
            };
            let kept = match demand {
                Demand::More => {
                    drop(room);
                    self.grow();
                    turn_now
                }
                Demand::Same => {
                    drop(room);
                    turn_now
                }
                // Retired, the poller waits for a turn again: no back-off of its own.
                Demand::Fewer => match self.retire(turn_now, room) {
                    Ok(()) => continue,
                    Err((turn, room)) => {
                        drop(room);
                        turn
                    }
                },
            };
            // The last turn is held through the back-off, so no other poller takes it and
            // receives at once.
            if let Some(delay) = delay {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = self.tasks.stopping().cancelled() => return,
                }
            }
            turn = Some(kept);
        }
    }

    /// One receive; `None` when the stop gave it up: at once on a backend whose abandoned receive
    /// takes nothing, else when the stop says so (what it takes then is hidden for the receive's
    /// short visibility).
    async fn receive(
        &self,
        request: ReceiveMessage,
    ) -> Option<Result<Vec<ReceivedMessage>, TransportError>> {
        // A transport that panics fails this receive, not the poller; one that does not answer
        // within the long poll and a margin is given up, whatever the transport's own timeouts.
        let deadline = self.wait + RECEIVE_MARGIN;
        let receive = async {
            tokio::time::timeout(
                deadline,
                CatchUnwind::new(self.client.transport().receive_message(&self.url, request)),
            )
            .await
            .unwrap_or_else(|_| Ok(Err(crate::client::batch::unanswered_within(deadline))))
            .unwrap_or_else(|panic| {
                Err(TransportError::service(
                    ErrorKind::InternalError,
                    format!("the receive panicked: {panic}"),
                ))
            })
        };
        let _receiving = Receiving::new(self);
        let given_up = if self.client.transport().abandoned_receive_takes_nothing() {
            self.tasks.stopping()
        } else {
            // Over a network the stop waits for it a moment, and while it holds messages to
            // release: see `Consumer::stop`.
            self.tasks.give_up_receives()
        };
        tokio::select! {
            biased;
            () = given_up.cancelled() => None,
            received = receive => Some(received),
        }
    }

    /// Gives back messages whose key is full (see `keys`): no attempt, hidden for a while that
    /// grows with each receive of theirs.
    async fn give_back_full(&self, full: Vec<Held>) {
        self.settler.count_unstarted(&full);
        let mut by_delay: std::collections::BTreeMap<u64, Vec<Held>> = Default::default();
        for held in full {
            let delay = super::keys::key_full_delay(held.delivery.receive_count);
            by_delay.entry(delay.as_secs()).or_default().push(held);
        }
        for (seconds, held) in by_delay {
            tracing::debug!(
                messaging.destination.name = %self.queue,
                messages = held.len(),
                hidden_s = seconds,
                "their keys are at their in-flight limit; given back"
            );
            self.settler.release(held, seconds as i32).await;
        }
    }

    /// Opens a lease for each received message and dispatches it; parks what arrived once a stop
    /// no longer starts attempts, and releases at once what did not fit the room taken (a server
    /// answering more than was asked). `visibility` is what the receive asked for.
    async fn take(
        &self,
        mut messages: Vec<ReceivedMessage>,
        visibility: Duration,
        room: &mut tokio::sync::OwnedSemaphorePermit,
    ) {
        let mut extra = Vec::new();
        let mut late = Vec::new();
        let mut taken = Vec::with_capacity(messages.len());
        let mut full = Vec::new();
        // Every lease opens before any message runs: a handler that takes its time in its first
        // poll must not start the later messages' visibility clocks late. The delivery has no
        // use for the receipt handle: the lease takes it.
        let leased = self.leases.open_all(
            messages.iter_mut().map(|message| {
                (
                    std::mem::take(&mut message.receipt_handle),
                    message.message_id.clone(),
                    message.group_id().map(str::to_owned),
                )
            }),
            visibility,
        );
        for (message, lease) in messages.drain(..).zip(leased) {
            let key = self.keys.as_ref().and_then(|keys| keys.key_of(&message));
            let Some(permit) = room.split(1) else {
                tracing::warn!(
                    messaging.destination.name = %self.queue,
                    messaging.message.id = %message.message_id,
                    "the receive returned more messages than asked for; releasing the extra one"
                );
                extra.push(lease);
                continue;
            };
            let held = Held {
                delivery: Arc::new(Delivery::new(&self.queue, message, self.reads_envelopes)),
                lease: HeldLease(lease),
                _room: permit,
                span: tracing::Span::none(),
                key: None,
            };
            if self.tasks.no_new_attempts().is_cancelled() {
                late.push(held);
            } else if let Some(keys) = &self.keys {
                full.extend(keys.admit(held, key));
            } else {
                taken.push(held);
            }
        }
        // While recent handlers were quick, here, as far as their first poll takes them (a
        // microsecond each); otherwise in tasks of their own (on FIFO, their groups' lanes), so a
        // handler that blocks or computes in its first poll does not hold up this poller. Before
        // the calls below: the messages taken do not wait for a release's answer.
        ReceivedMessage::give_back_list(messages);
        self.dispatcher.dispatch_received(taken).await;
        if !extra.is_empty() {
            self.settler.release_leases(extra, 0).await;
        }
        if !late.is_empty() {
            self.dispatcher.park_unstarted(late);
        }
        if !full.is_empty() {
            self.give_back_full(full).await;
        }
    }
}
