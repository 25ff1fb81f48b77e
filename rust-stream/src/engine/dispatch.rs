//! Dispatch: the [`Dispatcher`] runs what the intake received. It owns the pipeline's room (the
//! subscription's [`capacity`], taken by the intake before each receive), the handler slots, the
//! FIFO group lanes and the groups resting between retries in place, and the messages a stop will
//! not start, parked for its final release.
//!
//! A message reaches the dispatcher as a [`Held`] from the intake. On a standard queue it waits for
//! a handler slot in a task of its own. On a FIFO queue each group has a *lane*
//! ([`Lanes`]): its held messages in sequence order, run one at a time, so a group is never
//! handled out of order or twice at once by this consumer; a lane is a task. Either way the
//! attempt runs the handler (panic catch, timeout, cancellation at shutdown, the decode-failure
//! path) and gives a [`Verdict`], which the [`Settler`] turns into what to do [`Next`]. A message
//! that fails on FIFO is run again in its lane after its retry delay, while the rest of its group
//! waits behind it, held and extended; the lane moves on once the message is acked or
//! dead-lettered, and deletes what it handled in runs ([`Run`]): together, before it ends, rests,
//! gives the group back or stops. Everything that holds a FIFO group back (its lane, its rest
//! between retries, the rest of the group let go or given back behind a message) is here. Groups
//! are independent: a slow or failing lane holds up nobody else.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::Instrument;

use super::attempt::{self, InFlight};
use super::batches::{Batches, Item};
use super::held::Held;
use super::lanes::{Lanes, Resting};
use super::settle::{Next, Run, Settler, Verdict};
use super::shared::{Shared, Tasks};
use crate::client::lease::Leases;
use crate::client::Client;
use crate::context::Message;
use crate::handler::{ErasedHandler, Handled, Handler};
use crate::metrics::SubscriptionMetrics;
use crate::model::queue::ConsumerSettings;
use crate::propagation;
use crate::state::States;
use crate::task::poll_once;
use crate::task::CatchUnwind;

/// How many FIFO groups, per handler slot, may rest between retries in place, lending their room
/// to the pollers; a group that fails while this many rest goes back to the queue, hidden for its
/// retry delay. A consumer so holds at most its capacity plus this many groups' runs a slot (a
/// batch each): with the defaults, 110 + 40 × 10 messages.
pub(crate) const MAX_LENT_GROUPS_PER_SLOT: usize = 4;

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

/// How a lane's attempt ended.
enum Step {
    /// Settled (deleted, or its delete in the run; dead-lettered), or let go: the lane goes on
    /// with its next message.
    Forward,
    /// The stop parked the group.
    Parked,
    /// The message did not go forward: run it again after the delay (`Ok`), or it went back to
    /// the queue hidden for these seconds (`Err`). `attempt` is its attempt number in this
    /// receive, `span` the span of the attempt.
    Stopped {
        held: Held,
        attempt: u32,
        retry: Result<Duration, i32>,
        span: tracing::Span,
    },
}

/// How the subscription's handler is called.
enum Calls {
    /// A message a call, in the message's task or lane.
    One(Arc<dyn ErasedHandler>),
    /// Runs gathered into batch calls.
    Batch(Arc<Batches>),
}

/// Runs one subscription's received messages: handler slots, FIFO lanes, the room they hold.
pub(crate) struct Dispatcher {
    /// The queue's name, as the `process` span and the logs name it.
    queue: Arc<str>,
    fifo: bool,
    calls: Calls,
    /// The handler's name, as the `process` span records it: a `#[subscriber]` function's name.
    handler_name: String,
    states: Arc<States>,
    handler_timeout: Option<Duration>,
    /// How many handler slots: it bounds the groups resting between retries.
    concurrency: usize,
    /// On FIFO the intake takes new groups only while fewer lanes run; see [`lane_limit`].
    lane_limit: usize,
    /// Room for held messages; see [`capacity`].
    capacity: Arc<Semaphore>,
    /// Handler slots.
    running: Arc<Semaphore>,
    lanes: Lanes,
    /// How many handled messages of a group a lane deletes together, at most.
    delete_run: usize,
    /// FIFO groups resting between retries that lent their room to the pollers.
    lent_groups: AtomicUsize,
    /// Lent room taken back from rests that ended while it was in use: the intake withdraws it
    /// before its next receive.
    owed_room: AtomicUsize,
    /// Messages a stop did not start, released once no receive is in flight.
    parked: Mutex<Vec<Held>>,
    leases: Arc<Leases>,
    metrics: Arc<SubscriptionMetrics>,
    tasks: Tasks,
    settler: Arc<Settler>,
}

/// A FIFO lane resting between retries; see [`Dispatcher::rest`].
struct Rest<'a> {
    dispatcher: &'a Dispatcher,
    _counted: Resting<'a>,
    /// Room lent to the pollers, taken back when the rest ends.
    lent: usize,
}

impl Drop for Rest<'_> {
    /// Takes the lent room back before the next attempt (or as the lane stops). What is free now
    /// is withdrawn at once and the rest is owed: the intake pays it before its next receive.
    /// Waiting for it here could wait for good, since room the lane's own group took while it
    /// rested (a newer receive of its message, once its lease lapsed) is freed only as this lane
    /// goes on.
    fn drop(&mut self) {
        self.dispatcher.take_back(self.lent);
        self.dispatcher.lent_groups.fetch_sub(1, Ordering::AcqRel);
        self.dispatcher.metrics.resting.decrement(1.0);
    }
}

/// Ends a lane whose task unwinds, so the group is not marked running for ever; what was
/// waiting in it is orphaned, and released by the heartbeat.
struct LaneTask<'a> {
    dispatcher: &'a Dispatcher,
    group: &'a str,
    finished: bool,
}

impl Drop for LaneTask<'_> {
    fn drop(&mut self) {
        if !self.finished {
            drop(self.dispatcher.lanes.end(self.group));
        }
    }
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

    /// Hands a received message to a handler slot in a task of its own, or to its group's lane
    /// on FIFO.
    pub(crate) fn dispatch(self: &Arc<Self>, held: Held) {
        if !self.fifo {
            let dispatcher = self.clone();
            let work = async move {
                let mut held = held;
                let (verdict, attempts) = match &dispatcher.calls {
                    Calls::One(_) => {
                        // Releases are boxed: they are rare here, and their state would make
                        // every message's task larger.
                        let Some(slot) = dispatcher.slot().await else {
                            dispatcher.settler.count_given_back(&held, 1);
                            return dispatcher.park(vec![held]);
                        };
                        let attempts = dispatcher.settler.attempts(&held, 1);
                        dispatcher.open_process_span(&mut held, attempts);
                        let verdict = dispatcher.process(&held, attempts).await;
                        drop(slot);
                        (verdict, attempts)
                    }
                    Calls::Batch(batches) => {
                        let attempts = dispatcher.settler.attempts(&held, 1);
                        dispatcher.open_process_span(&mut held, attempts);
                        let item = Item {
                            delivery: held.delivery.clone(),
                            attempts,
                            span: held.span.clone(),
                        };
                        match Box::pin(batches.attempt(vec![item])).await {
                            Some(mut verdicts) => {
                                (verdicts.pop().expect("a verdict a message"), attempts)
                            }
                            None => {
                                dispatcher.settler.count_given_back(&held, 1);
                                return dispatcher.park(vec![held]);
                            }
                        }
                    }
                };
                let span = held.span.clone();
                // A standard queue retries by a visibility change, never in place.
                let settled = dispatcher
                    .settler
                    .settle(held, verdict, (attempts, 1))
                    .instrument(span.clone());
                match settled.await {
                    Next::GoBack(held, seconds) => {
                        Box::pin(
                            dispatcher
                                .settler
                                .release(vec![held], seconds)
                                .instrument(span),
                        )
                        .await;
                    }
                    Next::Again(held, _) => {
                        Box::pin(dispatcher.settler.release(vec![held], 0).instrument(span)).await;
                    }
                    // A standard queue's deletes never join a run.
                    Next::Done | Next::Delete(_) => {}
                }
            };
            self.tasks.spawn(work);
            return;
        }
        if let Some(group) = self.lanes.join(held, &self.leases) {
            let dispatcher = self.clone();
            self.tasks
                .spawn(async move { dispatcher.run_lane(group).await });
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
    async fn slot(&self) -> Option<OwnedSemaphorePermit> {
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

    /// Works through one group's lane until it is empty, deleting what it handled in runs
    /// ([`Run`]).
    async fn run_lane(self: Arc<Self>, group: String) {
        let mut task = LaneTask {
            dispatcher: &self,
            group: &group,
            finished: false,
        };
        let mut run = Run::new(self.delete_run);
        loop {
            // The run is deleted once nothing more waits (the lane then ends, and the group is
            // received again only after its deletes are answered), or once it is due.
            if !run.is_empty() {
                if self.lanes.waiting(&group) == 0 {
                    // Nothing left to handle: the intake may take another group meanwhile.
                    let _finishing = self.lanes.counts().finishing();
                    self.delete_run(&mut run, &group).await;
                } else if run.is_due() {
                    self.delete_run(&mut run, &group).await;
                }
            }
            let Some(mut held) = self.lanes.next(&group) else {
                break;
            };
            let mut attempt = 1;
            loop {
                let step = match &self.calls {
                    Calls::One(_) => self.attempt_in_lane(held, attempt, &group, &mut run).await,
                    Calls::Batch(batches) => {
                        Box::pin(self.attempt_run_in_lane(batches, held, attempt, &group, &mut run))
                            .await
                    }
                };
                let (again, delay_or_seconds, span) = match step {
                    Step::Parked => return,
                    Step::Forward => break,
                    Step::Stopped {
                        held,
                        attempt: made,
                        retry,
                        span,
                    } => {
                        attempt = made;
                        (held, retry, span)
                    }
                };
                held = again;
                // Whatever the group does now (rest, go back), the run before the message is
                // deleted first; a delete not confirmed lets the group go, to come back behind it.
                if !self.delete_run(&mut run, &group).await {
                    span.in_scope(|| {
                        tracing::warn!(
                            messaging.destination.name = %self.queue,
                            sqs.group_id = %group,
                            "an earlier message's delete failed; the message is left to come back behind it, with the rest of its group"
                        );
                    });
                    // A retry in place would have been the next attempt in this receive; a
                    // message given back was counted as such by the settler already.
                    if delay_or_seconds.is_ok() {
                        self.settler
                            .count_given_back(&held, attempt.saturating_add(1));
                    }
                    self.leases.forget(&held.lease);
                    break;
                }
                match delay_or_seconds {
                    Ok(delay) => {
                        // The attempt is settled: its span ends here, not after the backoff.
                        held.span = tracing::Span::none();
                        drop(span);
                        attempt = attempt.saturating_add(1);
                        let Some(resting) = self.rest(1 + self.lanes.waiting(&group)) else {
                            // More groups rest than may borrow room: this one goes back whole,
                            // hidden for the delay, so it holds neither room nor memory while it
                            // waits, and comes back in order (its next receive counts as the
                            // attempt after this one).
                            let seconds = held.lease.visibility_seconds(delay);
                            self.settler.count_given_back(&held, attempt);
                            let rest = self.lanes.take_rest(&group);
                            self.settler.count_unstarted(&rest);
                            let mut all = vec![held];
                            all.extend(rest);
                            self.settler.release(all, seconds).await;
                            break;
                        };
                        let rested = tokio::select! {
                            biased;
                            () = self.tasks.stopping().cancelled() => false,
                            () = tokio::time::sleep(delay) => true,
                        };
                        drop(resting);
                        if !rested {
                            self.settler.count_given_back(&held, attempt);
                            return self.park_group(held, &group, &mut run).await;
                        }
                    }
                    Err(seconds) => {
                        // What follows in the group may not run before the message that goes
                        // back, so it goes back behind it, in the same call.
                        let rest = self.lanes.take_rest(&group);
                        if !rest.is_empty() {
                            self.settler.count_unstarted(&rest);
                            // In the span of the attempt that stopped the group: it is why.
                            span.in_scope(|| {
                                tracing::warn!(
                                    messaging.destination.name = %self.queue,
                                    sqs.group_id = %group,
                                    held_back = rest.len(),
                                    "releasing the rest of the group behind the message"
                                );
                            });
                        }
                        let mut all = vec![held];
                        all.extend(rest);
                        self.settler.release(all, seconds).instrument(span).await;
                        break;
                    }
                }
            }
        }
        task.finished = true;
    }

    /// Runs the lane's message `held`, its attempt number `attempt` in this receive, in a handler
    /// slot, and settles it.
    async fn attempt_in_lane(
        &self,
        mut held: Held,
        attempt: u32,
        group: &str,
        run: &mut Run,
    ) -> Step {
        let Some(slot) = self.slot().await else {
            // Shutdown: the message and the rest of its group go back, in order.
            self.settler.count_given_back(&held, attempt);
            self.park_group(held, group, run).await;
            return Step::Parked;
        };
        if held.lease.has_lapsed() {
            // SQS may have handed the message to another consumer: this one must not run it, nor
            // anything behind it. Its attempts in this receive (retries in place) still count.
            drop(slot);
            self.settler.count_given_back(&held, attempt);
            self.delete_run(run, group).await;
            self.let_lapsed_go(held, group);
            return Step::Forward;
        }
        let attempts = self.settler.attempts(&held, attempt);
        self.open_process_span(&mut held, attempts);
        let started = tokio::time::Instant::now();
        let verdict = self.process(&held, attempts).await;
        drop(slot);
        self.settle_in_lane(held, verdict, (attempts, attempt), started, run)
            .await
            .unwrap_or(Step::Forward)
    }

    /// Runs the lane's message `held` (its attempt number `attempt` in this receive) and the
    /// group's next messages behind it, up to the batch's `max`, in a batch call, and settles
    /// them in order until one does not go forward: the later ones go back into the lane,
    /// uncounted, to run again after it (see [`batch`](crate::batch)).
    async fn attempt_run_in_lane(
        &self,
        batches: &Arc<Batches>,
        held: Held,
        attempt: u32,
        group: &str,
        run: &mut Run,
    ) -> Step {
        if self.tasks.no_new_attempts().is_cancelled() {
            self.settler.count_given_back(&held, attempt);
            self.park_group(held, group, run).await;
            return Step::Parked;
        }
        if held.lease.has_lapsed() {
            self.settler.count_given_back(&held, attempt);
            self.delete_run(run, group).await;
            self.let_lapsed_go(held, group);
            return Step::Forward;
        }
        // A lapsed message stops the run: it is handled (let go) as the lane's next; so does one
        // that runs alone, after a call that failed as a whole.
        let followers = if batches.runs_alone(&held.delivery) {
            Vec::new()
        } else {
            self.lanes
                .take_next(group, batches.max().saturating_sub(1), |next| {
                    !next.lease.has_lapsed() && !batches.runs_alone(&next.delivery)
                })
        };
        let mut members = Vec::with_capacity(1 + followers.len());
        for (mut member, made) in
            std::iter::once((held, attempt)).chain(followers.into_iter().map(|held| (held, 1)))
        {
            let attempts = self.settler.attempts(&member, made);
            self.open_process_span(&mut member, attempts);
            members.push((member, attempts, made));
        }
        let items = members
            .iter()
            .map(|(member, attempts, _)| Item {
                delivery: member.delivery.clone(),
                attempts: *attempts,
                span: member.span.clone(),
            })
            .collect();
        let started = tokio::time::Instant::now();
        let Some(verdicts) = batches.attempt(items).await else {
            // Shutdown: the run and the rest of its group go back, in order; none of it started.
            let mut members = members.into_iter().map(|(member, _, made)| (member, made));
            let (first, made) = members.next().expect("a run has its first message");
            self.lanes
                .put_back(group, members.map(|(member, _)| member).collect());
            self.settler.count_given_back(&first, made);
            self.park_group(first, group, run).await;
            return Step::Parked;
        };
        let mut settling = members.into_iter().zip(verdicts);
        while let Some(((member, attempts, made), verdict)) = settling.next() {
            let Some(stopped) = self
                .settle_in_lane(member, verdict, (attempts, made), started, run)
                .await
            else {
                continue;
            };
            // Nothing later of the group may count as handled before this message: what the
            // call did with them is not settled, and they run again after it.
            let later: Vec<Held> = settling
                .map(|((mut member, ..), _)| {
                    member.span = tracing::Span::none();
                    member
                })
                .collect();
            if !later.is_empty() {
                if let Step::Stopped { span, .. } = &stopped {
                    span.in_scope(|| {
                        tracing::info!(
                            messaging.destination.name = %self.queue,
                            sqs.group_id = %group,
                            held_back = later.len(),
                            "the later messages of the group in the batch run again after this one"
                        );
                    });
                }
                self.lanes.put_back(group, later);
            }
            return stopped;
        }
        Step::Forward
    }

    /// Settles a lane's attempt at `held` (begun at `started`), adding its delete to the lane's
    /// run; `None` when the lane goes forward, else how the message stopped it.
    async fn settle_in_lane(
        &self,
        held: Held,
        verdict: Verdict,
        (attempts, attempt): (u32, u32),
        started: tokio::time::Instant,
        run: &mut Run,
    ) -> Option<Step> {
        let span = held.span.clone();
        let next = self
            .settler
            .settle(held, verdict, (attempts, attempt))
            .instrument(span.clone())
            .await;
        let (held, retry) = match next {
            Next::Done => return None,
            Next::Delete(deleting) => {
                run.push(deleting, started);
                return None;
            }
            Next::Again(again, delay) => (again, Ok(delay)),
            Next::GoBack(back, seconds) => (back, Err(seconds)),
        };
        Some(Step::Stopped {
            held,
            attempt,
            retry,
            span,
        })
    }

    /// Deletes the lane's run ([`Settler::delete_run`]); when a delete was not confirmed, its
    /// message may still be in flight, so the rest of the group is let go without a call, to come
    /// back behind it when its visibility ends. Whether every delete was confirmed.
    async fn delete_run(&self, run: &mut Run, group: &str) -> bool {
        if run.is_empty() {
            return true;
        }
        if self.settler.delete_run(run).await {
            return true;
        }
        let rest = self.lanes.take_rest(group);
        if !rest.is_empty() {
            tracing::warn!(
                messaging.destination.name = %self.queue,
                sqs.group_id = %group,
                held_back = rest.len(),
                "the rest of the group is left to come back behind the message whose delete failed"
            );
            self.let_go(rest);
        }
        false
    }

    /// Parks a message and every message waiting behind it in its group for the stop's final
    /// release, once the lane's run before it is deleted (if a delete of it failed, they are let
    /// go instead, to come back behind it); those behind it were never attempted. The caller
    /// counted `held` as given back.
    async fn park_group(&self, held: Held, group: &str, run: &mut Run) {
        if !self.delete_run(run, group).await {
            self.leases.forget(&held.lease);
            return;
        }
        let rest = self.lanes.take_rest(group);
        self.settler.count_unstarted(&rest);
        let mut all = vec![held];
        all.extend(rest);
        self.park(all);
    }

    /// Keeps messages a stop will not start (held, and extended) until its final release, which
    /// comes once every receive in flight has answered: a long poll still open would otherwise
    /// take back what was just released, a second receive for nothing.
    fn park(&self, held: Vec<Held>) {
        self.parked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(held);
    }

    /// A message whose lease lapsed before its attempt: SQS may have handed it (and so its group)
    /// to another consumer. It is let go without a call (its old receipt handle is not used), and
    /// so is the rest of its group: released now, it could become visible while the message is
    /// still in flight (its visibility may have been extended by a call whose answer was lost).
    fn let_lapsed_go(&self, held: Held, group: &str) {
        tracing::warn!(
            messaging.destination.name = %self.queue,
            messaging.message.id = %held.delivery.message_id,
            sqs.group_id = %group,
            "the message's visibility ended before its attempt; it is left to SQS, with the rest of its group"
        );
        self.leases.forget(&held.lease);
        self.let_go(self.lanes.take_rest(group));
    }

    /// Lets unstarted messages go without a call: they are no longer extended, and come back
    /// when their visibility ends. For the rest of a FIFO group whose earlier message may still
    /// be in flight: SQS keeps such a group from every receive until that message is visible,
    /// and hands the group back in order when both are (as LocalStack does only for visibility
    /// that ends, not for a release).
    fn let_go(&self, unstarted: Vec<Held>) {
        self.settler.count_unstarted(&unstarted);
        for held in unstarted {
            self.leases.forget(&held.lease);
        }
    }

    /// Counts a FIFO lane as resting between retries of its message, which holds `held` messages
    /// (the message and those behind it), until [`Rest::end`]. Their room is lent to the pollers
    /// meanwhile, so resting groups never stop this consumer from receiving healthy ones. At most
    /// [`MAX_LENT_GROUPS_PER_SLOT`] groups a handler slot rest at once, which bounds what the
    /// consumer holds: `None` when that many do, and the group must go back to the queue instead.
    fn rest(&self, held: usize) -> Option<Rest<'_>> {
        let limit = MAX_LENT_GROUPS_PER_SLOT.saturating_mul(self.concurrency);
        self.lent_groups
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |lent| {
                (lent < limit).then_some(lent + 1)
            })
            .ok()?;
        self.capacity.add_permits(held);
        self.metrics.resting.increment(1.0);
        Some(Rest {
            dispatcher: self,
            // Other lanes' deletes do not wait for this one while it rests.
            _counted: self.lanes.counts().resting(),
            lent: held,
        })
    }

    /// Withdraws `lent` permits of room lent by a rest: those free now at once, the others owed
    /// until the intake's next receive.
    fn take_back(&self, lent: usize) {
        let withdrawn = self.capacity.forget_permits(lent);
        if withdrawn < lent {
            self.owed_room.fetch_add(lent - withdrawn, Ordering::AcqRel);
        }
    }

    /// Opens the `process` span of `held`'s attempt number `attempts` (as the retry policy counts
    /// them: [`Settler::attempts`]); with the `opentelemetry` feature it continues the trace the
    /// message carries. Its fields cost nothing when the span is disabled.
    fn open_process_span(&self, held: &mut Held, attempts: u32) {
        let delivery = &held.delivery;
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
            traceparent = propagation::traceparent(delivery.message_attributes()),
        );
        #[cfg(feature = "opentelemetry")]
        if !span.is_disabled() {
            propagation::continue_trace(&span, delivery.message_attributes());
        }
        held.span = span;
    }

    /// Decodes and handles one message in its `process` span, for its attempt number `attempts`,
    /// and says how to settle it; counted in the subscription's metrics (handlers running, the
    /// attempt's duration and how it ended).
    async fn process(&self, held: &Held, attempts: u32) -> Verdict {
        let started = tokio::time::Instant::now();
        let running = InFlight::new(&self.metrics, 1);
        let verdict = self.attempt(held, attempts).await;
        drop(running);
        self.metrics
            .processed(attempt::counted(&verdict), started.elapsed());
        verdict
    }

    /// Decodes and handles one message, and says how to settle it. The handler runs in the
    /// caller's task, behind a panic catch, and is dropped (cancelled) when it outlives the handler
    /// timeout, or the shutdown timeout. A handler that is ready at its first poll costs no timer
    /// and no wait on the shutdown signal.
    async fn attempt(&self, held: &Held, attempts: u32) -> Verdict {
        let delivery = &held.delivery;
        let span = &held.span;
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
        let handled = match poll_once(&mut call).await {
            Some(handled) => handled,
            // Boxed: the wait's state (timers, the shutdown signal) would otherwise make every
            // message's task larger, while a handler ready at once needs none of it.
            None => match Box::pin(attempt::wait_for_handler(
                call,
                self.handler_timeout,
                &self.tasks,
                span,
            ))
            .await
            {
                Ok(handled) => handled,
                Err(dropped) => return dropped.verdict(),
            },
        };
        let _entered = span.enter();
        match handled {
            Ok(Handled::Done { outcome, staged }) => attempt::verdict(outcome, staged),
            Ok(Handled::Undecodable(error)) => attempt::undecodable(&error, &self.metrics),
            Err(panic) => {
                tracing::error!(panic = %panic, "handler panicked");
                attempt::panicked(&panic)
            }
        }
    }
}
