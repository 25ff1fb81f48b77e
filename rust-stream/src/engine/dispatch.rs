//! Dispatch: the [`Dispatcher`] runs what the intake received. It owns the pipeline's room (the
//! subscription's [`capacity`], taken by the intake before each receive), the handler slots, the
//! FIFO group lanes and the room lent by groups resting between retries in place, and the messages
//! a stop will not start, parked for its final release.
//!
//! A message reaches the dispatcher as a [`Held`] from the intake. On a standard queue it waits for
//! a handler slot in its receive's task (in a task a worker thread, at most, while recent handlers
//! held their thread long), beside the other messages of that receive. On a FIFO queue it joins
//! its group's *lane* ([`Lanes`]): its held messages in sequence order, run one at a time by a
//! task of the lane's own (`lane.rs`, where everything that holds a FIFO group back lives), so a
//! group is never handled out of order or twice at once by this consumer. Either way the attempt runs the handler here (panic catch,
//! timeout, cancellation at shutdown, the decode-failure path) and gives a [`Verdict`], which the
//! [`Settler`] turns into what to do [`Next`].

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use super::attempt::{self, InFlight};
use super::batches::{Batches, Item};
use super::held::Held;
use super::lanes::Lanes;
use super::payload;
use super::settle::{Deleting, Next, Settler, Verdict};
use super::shared::{guarded_part, Shared, Tasks};
use crate::client::lease::Leases;
use crate::client::Client;
use crate::handler::context::Message;
use crate::handler::{ErasedHandler, Handled, Handler};
use crate::metrics::SubscriptionMetrics;
use crate::model::queue::ConsumerSettings;
use crate::model::rules::MAX_BATCH_ENTRIES;
use crate::propagation;
use crate::state::States;
use crate::task::poll_once;
use crate::task::CatchUnwind;

/// How many messages a consumer holds at most: one batch per poller beyond what its handlers work
/// through. A standard queue's handlers take a message each; a FIFO queue's take a lane each, and a
/// receive hands out a run of one group's messages (up to a batch), so there each handler slot has
/// room for a batch. Counting FIFO room in messages would hold two or three groups at a time and
/// leave the other handler slots idle (and a delete call per message or two).
///
/// A batch handler's call takes up to its batch's `max` messages a slot, so that is its room a
/// slot (the pollers' batches on top fill the next calls while these run).
fn capacity(settings: &ConsumerSettings, fifo: bool, batch_max: Option<usize>) -> usize {
    let per_slot = match batch_max {
        Some(max) => max,
        None if fifo => settings.batch_size,
        None => 1,
    };
    settings.concurrency * per_slot + settings.pollers * settings.batch_size
}

/// How many FIFO lanes may run before the intake waits to take new groups: one a handler slot,
/// as a slot works through one lane at a time; for a batch handler, whose call takes runs of many
/// lanes, as many as its calls can take messages (each lane gives a call one at least).
fn lane_limit(concurrency: usize, batch_max: Option<usize>) -> usize {
    concurrency.saturating_mul(batch_max.unwrap_or(1))
}

/// How long a handler's first poll may hold its thread before a standard receive's messages are
/// spread over the worker threads: below it, the handover to another task costs more than running
/// the receive's messages side by side in one.
const SPREAD_AT: Duration = Duration::from_micros(100);

/// The longest first poll of the handlers of recent receives, in nanoseconds, which says whether a
/// standard receive's messages run in one task (first the poller's) or spread over the worker
/// threads, and whether a FIFO receive's new lanes start in the poller's task or each in its own
/// ([`SPREAD_AT`]); a standard receive's part and a FIFO lane each note their longest when they end.
/// A poll past the threshold raises it to at least four times the threshold at once; otherwise it
/// falls an eighth of the way to each receive's longest. So one handler that blocks its thread
/// spreads the next ten receives or so, and a consumer spreads its first receives until its
/// handlers have shown themselves quick.
struct PollCost(AtomicU64);

impl PollCost {
    fn new() -> Self {
        Self(AtomicU64::new(nanos(SPREAD_AT * 4)))
    }

    fn spread(&self) -> bool {
        self.0.load(Ordering::Relaxed) >= nanos(SPREAD_AT)
    }

    /// Counts a receive's part whose handlers' longest first poll took `longest` nanoseconds.
    fn note(&self, longest: u64) {
        // The closure always answers, so the update cannot fail.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |recent| {
                Some(if longest >= nanos(SPREAD_AT) {
                    longest.max(nanos(SPREAD_AT * 4))
                } else if longest >= recent {
                    longest
                } else {
                    recent - (recent - longest) / 8
                })
            });
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// What the messages of a standard receive's task share: their deletes, settled and not yet
/// handed to the deleter, and their handlers' longest first poll.
struct Part {
    deletes: Mutex<Vec<Deleting>>,
    longest_poll: AtomicU64,
    /// The part's messages: what a poll's deletes are sized for.
    messages: usize,
}

impl Part {
    fn new(messages: usize) -> Self {
        Self {
            deletes: Mutex::new(Vec::new()),
            longest_poll: AtomicU64::new(0),
            messages,
        }
    }

    fn push(&self, deleting: Deleting) {
        let mut deletes = self.deletes.lock().unwrap_or_else(PoisonError::into_inner);
        // Sized once a poll, not grown a delete at a time.
        if deletes.capacity() == 0 {
            deletes.reserve_exact(self.messages);
        }
        deletes.push(deleting);
    }

    fn take(&self) -> Vec<Deleting> {
        std::mem::take(&mut *self.deletes.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn polled_for(&self, first_poll: Duration) {
        self.longest_poll
            .fetch_max(nanos(first_poll), Ordering::Relaxed);
    }
}

/// How the subscription's handler is called.
pub(super) enum Calls {
    /// A message a call, in its receive's task or its lane.
    One(Arc<dyn ErasedHandler>),
    /// Runs gathered into batch calls.
    Batch(Arc<Batches>),
}

/// Runs one subscription's received messages: handler slots, FIFO lanes, the room they hold.
pub(crate) struct Dispatcher {
    /// The queue's name, as the `process` span and the logs name it.
    pub(super) queue: Arc<str>,
    fifo: bool,
    pub(super) calls: Calls,
    /// The handler's name, as the `process` span records it: a `#[subscriber]` function's name.
    handler_name: String,
    states: Arc<States>,
    handler_timeout: Option<Duration>,
    /// How many handler slots: it bounds the groups resting between retries.
    pub(super) concurrency: usize,
    /// On FIFO the intake takes new groups only while fewer lanes run; see [`lane_limit`].
    lane_limit: usize,
    /// Room for held messages; see [`capacity`].
    pub(super) capacity: Arc<Semaphore>,
    /// Handler slots.
    running: Arc<Semaphore>,
    pub(super) lanes: Lanes,
    /// How many handled messages of a group a lane deletes together, at most.
    pub(super) delete_run: usize,
    /// FIFO groups resting between retries that lent their room to the pollers.
    pub(super) lent_groups: AtomicUsize,
    /// Lent room taken back from rests that ended while it was in use: the intake withdraws it
    /// before its next receive.
    pub(super) owed_room: AtomicUsize,
    /// Messages a stop did not start, released once no receive is in flight.
    parked: Mutex<Vec<Held>>,
    pub(super) leases: Arc<Leases>,
    pub(super) metrics: Arc<SubscriptionMetrics>,
    pub(super) tasks: Tasks,
    pub(super) settler: Arc<Settler>,
    /// The worker threads of the runtime the consumer started on: a standard receive's messages
    /// run in at most this many tasks.
    worker_threads: usize,
    /// Whether a standard receive's messages are spread over the worker threads.
    poll_cost: PollCost,
}

impl Dispatcher {
    /// A dispatcher over `lanes` (made by the caller, which wires the FIFO deleter to their
    /// counts) that settles through `settler`.
    pub(crate) fn new(
        shared: &Shared,
        settings: &ConsumerSettings,
        (handler, client): (Handler, Arc<Client>),
        handler_name: String,
        states: Arc<States>,
        lanes: Lanes,
        settler: Arc<Settler>,
    ) -> Self {
        let running = Arc::new(Semaphore::new(settings.concurrency));
        let batch_max = handler.batch_limits().map(|limits| limits.max);
        let calls = match handler {
            Handler::One(handler) => Calls::One(handler),
            Handler::Batch(handler, limits) => Calls::Batch(Arc::new(Batches::new(
                shared,
                client,
                (handler, limits),
                handler_name.clone(),
                states.clone(),
                settings.handler_timeout,
                running.clone(),
            ))),
        };
        Self {
            queue: shared.queue.clone(),
            fifo: shared.fifo,
            calls,
            handler_name,
            states,
            handler_timeout: settings.handler_timeout,
            concurrency: settings.concurrency,
            lane_limit: lane_limit(settings.concurrency, batch_max),
            capacity: Arc::new(Semaphore::new(capacity(settings, shared.fifo, batch_max))),
            running,
            lanes,
            delete_run: settings.delete_run,
            lent_groups: AtomicUsize::new(0),
            owed_room: AtomicUsize::new(0),
            parked: Mutex::new(Vec::new()),
            leases: shared.leases.clone(),
            metrics: shared.metrics.clone(),
            tasks: shared.tasks.clone(),
            settler,
            worker_threads: tokio::runtime::Handle::try_current()
                .map_or(1, |runtime| runtime.metrics().num_workers().max(1)),
            poll_cost: PollCost::new(),
        }
    }

    /// Room for a receive of `batch` messages, taken before the receive; `None` once the stop has
    /// begun. On FIFO it also waits until fewer lanes are active than the handler slots: a
    /// receive there may bring up to a batch of new groups, so the groups held are about the
    /// groups that can run.
    pub(crate) async fn room(&self, batch: usize) -> Option<OwnedSemaphorePermit> {
        let room = loop {
            // Biased: once shutdown has begun, no new receive may start.
            let mut room = tokio::select! {
                biased;
                () = self.tasks.stopping().cancelled() => return None,
                room = self.capacity.clone().acquire_many_owned(batch as u32) => room.ok()?,
            };
            // Room owed by ended rests is withdrawn first, so the loan does not outlive them.
            let paid = self
                .owed_room
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |owed| {
                    (owed > 0).then(|| owed.saturating_sub(batch))
                })
                .map_or(0, |owed| owed.min(batch));
            if paid == 0 {
                break room;
            }
            if let Some(withdrawn) = room.split(paid) {
                withdrawn.forget();
            }
        };
        if self.fifo {
            tokio::select! {
                biased;
                () = self.tasks.stopping().cancelled() => return None,
                () = self.lanes.counts().below(self.lane_limit) => {}
            }
        }
        Some(room)
    }

    /// Hands a receive's messages on: on a standard queue to handler slots, in one task, or in as
    /// many tasks as the runtime has worker threads (at most) while recent handlers held their
    /// thread long ([`PollCost`]); on FIFO each to its group's lane, a task a lane. (From the
    /// poller that received them, [`dispatch_received`](Self::dispatch_received): while handlers
    /// are quick, the poller's own task runs them as far as their first poll goes.)
    ///
    /// A standard receive's task runs its messages side by side, each taking a handler slot of
    /// its own, attempted and settled by itself as it finishes: a slow handler holds up neither
    /// its batch-mates' deletes nor their room, a panic in one part is caught there and loses none
    /// of the others, and a stop parks what did not start. A task a message cost a spawn, its
    /// wake-ups, a hand-over across threads and an allocation above a kilobyte each (above 1,008
    /// bytes glibc's allocator first consolidates its free lists), most of the engine's own cost a
    /// message; a receive spread over the worker threads costs a task and hand-overs a thread
    /// (13–17 % on two threads for handlers that take a microsecond), which only handlers that hold
    /// their thread repay. Quick handlers still use every core: each poller is a task of its own.
    /// A handler that blocks its thread holds up the others of its task until the consumer has
    /// seen it do so (use `spawn_blocking` for blocking work, as anywhere in tokio).
    pub(crate) fn dispatch(self: &Arc<Self>, held: Vec<Held>) {
        if self.fifo {
            for group in self.join_lanes(held) {
                self.tasks.spawn(self.clone().run_lane(group));
            }
            return;
        }
        let mut tasks = if self.poll_cost.spread() {
            self.worker_threads.min(held.len())
        } else {
            1
        };
        let mut rest = held;
        while tasks > 1 {
            let later = rest.split_off(rest.len().div_ceil(tasks));
            self.spawn_part(rest);
            rest = later;
            tasks -= 1;
        }
        if !rest.is_empty() {
            self.spawn_part(rest);
        }
    }

    /// Hands on a receive's messages from the poller that received them, as
    /// [`dispatch`](Self::dispatch) does, except that a standard receive run in one task is run
    /// first in the poller's own, as far as its first poll takes it ([`Tasks::start_here`]): a
    /// receive whose quick handlers all finish at once (and whose delete is answered at once)
    /// then costs no task, no wake-up and no hand-over to another thread; the rest of one that
    /// waits goes on in a task of its own, and the poller receives again.
    pub(crate) async fn dispatch_received(self: &Arc<Self>, held: Vec<Held>) {
        if held.is_empty() || self.poll_cost.spread() {
            return self.dispatch(held);
        }
        if self.fifo {
            for group in self.join_lanes(held) {
                self.tasks.start_here(self.clone().run_lane(group)).await;
            }
            return;
        }
        self.tasks.start_here(self.clone().part(held)).await;
    }

    /// Puts each of a FIFO receive's messages in its group's lane, all of them before any lane
    /// runs (so a lane finds its group's whole share of the receive); the groups whose lanes are
    /// new and need a task.
    fn join_lanes(&self, held: Vec<Held>) -> Vec<String> {
        held.into_iter()
            .filter_map(|held| self.lanes.join(held, &self.leases))
            .collect()
    }

    /// Tells the [`PollCost`] a receive's part's or a FIFO lane's longest first poll of a
    /// handler.
    pub(super) fn note_poll_cost(&self, longest: Duration) {
        self.poll_cost.note(nanos(longest));
    }

    /// Runs `part` of a standard receive's messages side by side in a task of its own.
    fn spawn_part(self: &Arc<Self>, part: Vec<Held>) {
        self.tasks.spawn(self.clone().part(part));
    }

    /// Runs `part` of a standard receive's messages side by side, and deletes what they settled.
    async fn part(self: Arc<Self>, part: Vec<Held>) {
        let dispatcher = &self;
        let shared = Part::new(part.len());
        // One after another while each is done at once, then the rest side by side (every
        // wake polls the ones not done, at most a receive's ten).
        let mut runs = std::pin::pin!(crate::task::side_by_side(part, |held| {
            guarded_part(dispatcher.run_standard(held, &shared))
        }));
        // The deletes of the messages settled in one poll go to the deleter together, at
        // the end of that poll: nothing waits for another message. A full call's worth,
        // the whole receive settled at once, is called from here once every message is
        // done: no hand-over, and nothing left to wait for it.
        let mut full = None;
        std::future::poll_fn(|cx| {
            let polled = runs.as_mut().poll(cx);
            let settled = shared.take();
            if polled.is_ready() && settled.len() == MAX_BATCH_ENTRIES {
                full = Some(settled);
            } else {
                dispatcher.settler.delete_all(settled);
            }
            polled
        })
        .await;
        if let Some(full) = full {
            dispatcher.settler.delete_full(full).await;
        }
        dispatcher
            .poll_cost
            .note(shared.longest_poll.load(Ordering::Relaxed));
    }

    /// One standard message: a handler slot, its attempt, and its settling; its delete, if it
    /// is to be deleted, goes to `part`, for its task to hand over.
    async fn run_standard(&self, mut held: Held, part: &Part) {
        let (verdict, attempts) = match &self.calls {
            Calls::One(_) => {
                // Releases are boxed: they are rare here, and their state would make every
                // message's part larger.
                let Some(slot) = self.slot().await else {
                    self.settler.count_given_back(&held, 1);
                    return self.park(vec![held]);
                };
                let attempts = self.settler.attempts(&held, 1);
                self.open_process_span(&mut held, attempts);
                let (verdict, first_poll) = self.process(&held, attempts).await;
                drop(slot);
                part.polled_for(first_poll);
                (verdict, attempts)
            }
            Calls::Batch(batches) => {
                let attempts = self.settler.attempts(&held, 1);
                self.open_process_span(&mut held, attempts);
                let item = Item {
                    delivery: held.delivery.clone(),
                    attempts,
                    span: held.span.clone(),
                };
                match Box::pin(batches.attempt(vec![item])).await {
                    Some(mut verdicts) => (verdicts.pop().expect("a verdict a message"), attempts),
                    None => {
                        self.settler.count_given_back(&held, 1);
                        return self.park(vec![held]);
                    }
                }
            }
        };
        let span = held.span.clone();
        // A standard queue retries by a visibility change, never in place.
        let settled = self
            .settler
            .settle(held, verdict, (attempts, 1))
            .instrument(span.clone());
        match settled.await {
            Next::GoBack(held, seconds) => {
                Box::pin(self.settler.release(vec![held], seconds).instrument(span)).await;
            }
            Next::Again(held, _) => {
                Box::pin(self.settler.release(vec![held], 0).instrument(span)).await;
            }
            Next::Delete(deleting) => part.push(deleting),
            Next::Done => {}
        }
    }

    /// Keeps messages received after the stop stopped starting attempts for its final release;
    /// none of them had an attempt in this receive.
    pub(crate) fn park_unstarted(&self, late: Vec<Held>) {
        self.settler.count_unstarted(&late);
        self.park(late);
    }

    /// The messages a stop did not start, for its final release.
    pub(crate) fn take_parked(&self) -> Vec<Held> {
        std::mem::take(&mut *self.parked.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Handler slots free now: the intake lets another poller receive only while some are.
    pub(crate) fn idle_slots(&self) -> usize {
        self.running.available_permits()
    }

    /// A handler slot, or `None` once a stop no longer starts attempts.
    pub(super) async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        if self.tasks.no_new_attempts().is_cancelled() {
            return None;
        }
        // A free slot is taken without waiting (and without registering for shutdown).
        if let Ok(slot) = self.running.clone().try_acquire_owned() {
            return Some(slot);
        }
        // Biased: once attempts stop a free slot must not start another handler.
        tokio::select! {
            biased;
            () = self.tasks.no_new_attempts().cancelled() => None,
            slot = self.running.clone().acquire_owned() => slot.ok(),
        }
    }

    /// Keeps messages a stop will not start (held, and extended) until its final release, which
    /// comes once every receive in flight has answered: a long poll still open would otherwise
    /// take back what was just released, a second receive for nothing.
    pub(super) fn park(&self, held: Vec<Held>) {
        self.parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(held);
    }

    /// Opens the `process` span of `held`'s attempt number `attempts` (as the retry policy counts
    /// them: [`Settler::attempts`]); with the `opentelemetry` feature it continues the trace the
    /// message carries. Its fields cost nothing when the span is disabled.
    pub(super) fn open_process_span(&self, held: &mut Held, attempts: u32) {
        let delivery = &held.delivery;
        let incoming = propagation::incoming(
            delivery.message_attributes(),
            delivery.aws_trace_header.as_deref(),
        );
        let span = tracing::info_span!(
            "process",
            messaging.system = "aws_sqs",
            messaging.destination.name = %self.queue,
            messaging.operation.type = "process",
            messaging.message.id = %delivery.message_id,
            sqs.group_id = delivery.group_id.as_deref(),
            sqs.receive_count = delivery.receive_count,
            rust_stream.handler = %self.handler_name,
            rust_stream.attempt = attempts,
            rust_stream.outcome = tracing::field::Empty,
            traceparent = incoming.as_deref(),
        );
        #[cfg(feature = "opentelemetry")]
        if !span.is_disabled() {
            propagation::continue_trace(
                &span,
                delivery.message_attributes(),
                delivery.aws_trace_header.as_deref(),
            );
        }
        held.span = span;
    }

    /// Decodes and handles one message in its `process` span, for its attempt number `attempts`,
    /// and says how to settle it, and how long the handler's first poll held the thread (on a
    /// paused clock, no time); counted in the subscription's metrics (handlers running, the
    /// attempt's duration and how it ended).
    pub(super) async fn process(&self, held: &Held, attempts: u32) -> (Verdict, Duration) {
        let started = tokio::time::Instant::now();
        let running = InFlight::new(&self.metrics, 1);
        let (verdict, first_poll) = self.attempt(held, attempts, started).await;
        drop(running);
        let took = started.elapsed();
        self.metrics.processed(attempt::counted(&verdict), took);
        (verdict, first_poll.unwrap_or(took))
    }

    /// Decodes and handles one message, and says how to settle it, and how long the handler's
    /// first poll took when it was not ready at once. The handler runs in the caller's task,
    /// behind a panic catch, and is dropped (cancelled) when it outlives the handler timeout, or
    /// the shutdown timeout. A handler that is ready at its first poll costs no timer, no wait on
    /// the shutdown signal and no second reading of the clock.
    async fn attempt(
        &self,
        held: &Held,
        attempts: u32,
        started: tokio::time::Instant,
    ) -> (Verdict, Option<Duration>) {
        let delivery = &held.delivery;
        let span = &held.span;
        let mut started = started;
        let mut fetched = false;
        if delivery.large.is_some() {
            let failed = payload::fetch(&self.settler.client, delivery, &self.metrics)
                .instrument(span.clone())
                .await;
            if let Some(verdict) = failed {
                return (verdict, Some(Duration::ZERO));
            }
            // The fetch waited; the handler's poll is what holds the thread.
            started = tokio::time::Instant::now();
            fetched = true;
        }
        let Calls::One(handler) = &self.calls else {
            unreachable!("a batch subscription's messages run in batch calls, not one by one");
        };
        let mut call = CatchUnwind::new(
            handler
                .clone()
                .call(
                    Message::new(delivery.clone(), attempts),
                    self.states.clone(),
                    self.tasks.stopping().clone(),
                )
                .instrument(span.clone()),
        );
        let mut first_poll = None;
        let handled = match poll_once(&mut call).await {
            Some(handled) => {
                if fetched {
                    first_poll = Some(started.elapsed());
                }
                handled
            }
            // Boxed: the wait's state (timers, the shutdown signal) would otherwise make every
            // message's task larger, while a handler ready at once needs none of it.
            None => {
                first_poll = Some(started.elapsed());
                match Box::pin(attempt::wait_for_handler(
                    call,
                    self.handler_timeout,
                    &self.tasks,
                    span,
                ))
                .await
                {
                    Ok(handled) => handled,
                    Err(dropped) => return (dropped.verdict(), first_poll),
                }
            }
        };
        let _entered = span.enter();
        let verdict = match handled {
            Ok(Handled::Done { outcome, staged }) => attempt::verdict(outcome, staged),
            Ok(Handled::Undecodable(error)) => attempt::undecodable(&error, &self.metrics),
            Err(panic) => {
                tracing::error!(panic = %panic, "handler panicked");
                attempt::panicked(&panic)
            }
        };
        (verdict, first_poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receives_spread_until_handlers_show_themselves_quick_and_again_at_one_long_poll() {
        let cost = PollCost::new();
        assert!(cost.spread(), "a new consumer spreads its first receives");
        let quick = nanos(Duration::from_micros(2));
        let mut receives = 0;
        while cost.spread() {
            cost.note(quick);
            receives += 1;
            assert!(receives <= 20, "quick handlers never stopped the spreading");
        }
        assert!(
            receives >= 5,
            "one quick receive is not enough to stop: {receives}"
        );
        cost.note(nanos(SPREAD_AT));
        assert!(cost.spread(), "one poll of the threshold spreads at once");
        cost.note(quick);
        assert!(cost.spread(), "and keeps spreading for a while");
        let part = Part::new(2);
        part.polled_for(Duration::from_micros(3));
        part.polled_for(Duration::from_micros(1));
        assert_eq!(part.longest_poll.load(Ordering::Relaxed), 3_000);
    }
}
