//! One FIFO group's lane, from its first message to its end: the task that works through the
//! group's held messages one at a time ([`Dispatcher::run_lane`]), the run of deletes it gathers
//! ([`Run`]), its rest between retries in place (room lent to the pollers meanwhile), and what
//! holds or gives up the group: the rest of it parked at a stop, let go behind a message whose
//! lease lapsed or whose delete was not confirmed, or released behind a message that goes back.
//!
//! Everything a lane does to hold its group back is here. The table of lanes it runs in, and the
//! counts the deleter and the intake read, are in `lanes.rs`; a release of what the heartbeat or
//! the stop gives back keeps each group's order in `settle/release.rs`. The dispatcher
//! (`dispatch.rs`) starts a lane's task when a message opens a new lane, and lends it what every
//! attempt needs (handler slots, the `process` span, the call); the settler (`settle/`) settles
//! each attempt and says what the lane does [`Next`]. A lane settles its messages in order, adds
//! each delete to its run, and deletes the run in one call ([`Settler::delete_run`]) before it
//! rests, gives the group back, stops or ends. Groups are independent: a slow or failing lane holds
//! up nobody else.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::batches::{Batches, Item};
use super::dispatch::{Calls, Dispatcher};
use super::held::Held;
use super::lanes::Resting;
use super::settle::{Deleting, Next, Settler, Verdict};
use crate::client::batch::{Call, DeleteBatch};
use crate::model::rules::MAX_BATCH_ENTRIES;

/// How many FIFO groups, per handler slot, may rest between retries in place, lending their room
/// to the pollers; a group that fails while this many rest goes back to the queue, hidden for its
/// retry delay. A consumer so holds at most its capacity plus this many groups' runs a slot (a
/// batch each): with the defaults, 110 + 40 × 10 messages.
pub(crate) const MAX_LENT_GROUPS_PER_SLOT: usize = 4;

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
/// gone), when it is as long as the subscription's `delete_run` (10 by default: a full call),
/// when it has been in handlers for [`RUN_DELETE_WITHIN`] since its first message began, and
/// before the lane rests between retries, gives the group back, lets it go or parks it at a stop.
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
    /// The longest first poll of the lane's handlers so far: what the dispatcher's
    /// [`PollCost`](super::dispatch) is told when the lane ends.
    pub(super) longest_poll: Duration,
}

impl Run {
    /// An empty run of at most `longest` messages (1 confirms each delete before the next).
    pub(crate) fn new(longest: usize) -> Self {
        Self {
            deletes: Vec::new(),
            since: None,
            longest: longest.clamp(1, MAX_BATCH_ENTRIES),
            longest_poll: Duration::ZERO,
        }
    }

    /// Whether the run has nothing to delete.
    pub(crate) fn is_empty(&self) -> bool {
        self.deletes.is_empty()
    }

    /// Whether the run fills a call: its delete needs no company, and the lane makes it itself.
    pub(crate) fn is_full(&self) -> bool {
        self.deletes.len() == MAX_BATCH_ENTRIES
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
        // Room for a whole run at once: growing a run a message at a time moved it each time.
        if self.deletes.capacity() == 0 {
            self.deletes.reserve_exact(self.longest);
        }
        self.deletes.push(deleting);
    }
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
    /// Works through one group's lane until it is empty, deleting what it handled in runs
    /// ([`Run`]).
    pub(super) async fn run_lane(self: Arc<Self>, group: String) {
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
        self.note_poll_cost(run.longest_poll);
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
        let (verdict, first_poll) = self.process(&held, attempts).await;
        drop(slot);
        run.longest_poll = run.longest_poll.max(first_poll);
        self.settle_in_lane(held, verdict, (attempts, attempt), started, run)
            .await
            .unwrap_or(Step::Forward)
    }

    /// Runs the lane's message `held` (its attempt number `attempt` in this receive) and the
    /// group's next messages behind it, up to the batch's `max`, in a batch call, and settles
    /// them in order until one does not go forward: the later ones go back into the lane,
    /// uncounted, to run again after it (see [`batch`](crate::handler::batch)).
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
            self.lanes.put_back(
                group,
                members.map(|(member, _)| member).collect(),
                &self.leases,
            );
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
                self.lanes.put_back(group, later, &self.leases);
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
        // A full run's call is the lane's own ([`Settler::delete_run`]): the deleter's calls
        // are not to wait for it.
        let _calling = run.is_full().then(|| self.lanes.counts().calling());
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
    /// (the message and those behind it), until the [`Rest`] is dropped. Their room is lent to
    /// the pollers meanwhile, so resting groups never stop this consumer from receiving healthy
    /// ones. At most [`MAX_LENT_GROUPS_PER_SLOT`] groups a handler slot rest at once, which
    /// bounds what the consumer holds: `None` when that many do, and the group must go back to
    /// the queue instead.
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
}

impl Settler {
    /// Deletes a FIFO lane's run in one call (up to 10) and waits for the answers; the run is
    /// empty after. A full run's call is made here, by the lane's task: it needs no company, so
    /// it costs no hand-over to the deleter's task and back. Whether every delete was confirmed:
    /// when one was not, its message may still be in flight, and nothing later of its group may
    /// be given back before it comes back (the lane lets the rest of its group go).
    pub(crate) async fn delete_run(&self, run: &mut Run) -> bool {
        run.since = None;
        let full = run.is_full();
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
            if full {
                Call::<DeleteBatch>::answers(
                    leases,
                    self.client.transport().clone(),
                    self.url.clone(),
                )
                .await
            } else {
                self.deleter.submit(leases).await
            }
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
}
