//! Messages handed over by an event source mapping (the Lambda host, [`crate::lambda`]) rather
//! than received by the engine's own pollers: each event's messages run through the same parts
//! as the server's (the dispatcher's attempt: decode, middleware, handler, panic catch, timeout;
//! a batch subscription's calls; the settler: outputs, dead-letter copies, retry decisions,
//! releases), and the event's answer names the messages that failed.
//!
//! What differs is who receives and who deletes. The mapping received the messages, and deletes
//! every one the answer does not name, so the settler only counts what it settles
//! ([`Deletes::ByEventSourceMapping`]). A message to retry is given back as on a standard queue
//! (a visibility change to its retry delay) and named failed; on FIFO no retry happens in place,
//! as the event is answered once: the message and the later messages of its group in the event
//! are given back together, hidden as long, and named failed, the rule `docs/batching.md` states
//! for batch handlers. Nothing extends what the event holds: the function's timeout bounds it.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::future::join_all;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::batches::Item;
use super::dispatch::{Calls, Dispatcher};
use super::held::{Held, HeldLease};
use super::parts::Parts;
use super::settle::{Deletes, Next, Settler, Verdict};
use crate::app::RunError;
use crate::client::Client;
use crate::handler::context::Delivery;
use crate::model::wire::ReceivedMessage;
use crate::model::SqsQueue;
use crate::retry::MessageTally;
use crate::state::States;
use crate::subscriber::Subscriber;

/// How one of an event's messages ended, for the event's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// Acked or dead-lettered: the mapping deletes it.
    Done,
    /// To be retried (given back, hidden for its delay): the answer names it.
    Failed,
}

/// Where an event's messages came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// An SQS queue: each message has a receipt handle, and one to retry is given back by a
    /// visibility change.
    Queue,
    /// An SNS topic's notification, which has no receipt handle: one to retry is only named
    /// failed (Lambda then invokes the function again with the event).
    Topic,
}

/// One subscription fed by an event source mapping.
pub(crate) struct EventConsumer {
    parts: Parts,
    /// Receives of a message this instance gave back without an attempt: not attempts. Another
    /// instance does not know them, and counts them as attempts.
    unstarted: MessageTally,
}

impl std::fmt::Debug for EventConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventConsumer")
            .field("queue", &self.parts.queue.name)
            .finish_non_exhaustive()
    }
}

impl EventConsumer {
    /// Builds the subscription's parts as the server's consumer does, its settler leaving the
    /// deletes to the mapping.
    pub(crate) async fn build(
        client: &Arc<Client>,
        subscriber: Subscriber,
        states: Arc<States>,
    ) -> Result<Self, RunError> {
        let parts = Parts::build(client, subscriber, states, Deletes::ByEventSourceMapping).await?;
        Ok(Self {
            parts,
            unstarted: MessageTally::default(),
        })
    }

    /// The subscription's queue.
    pub(crate) fn queue(&self) -> &SqsQueue {
        &self.parts.queue
    }

    /// Handles an event's messages of this subscription's queue, in the event's order: how each
    /// ended, in the same order.
    pub(crate) async fn handle(
        &self,
        messages: Vec<ReceivedMessage>,
        source: Source,
    ) -> Vec<Settled> {
        let count = messages.len();
        if count == 0 {
            return Vec::new();
        }
        let held = self.hold(messages).await;
        let dispatcher = &self.parts.dispatcher;
        if !self.parts.shared.fifo {
            let settled = match &dispatcher.calls {
                Calls::One(_) => {
                    join_all(held.into_iter().map(|held| self.one(held, source))).await
                }
                Calls::Batch(batches) => {
                    let runs = chunks(held, batches.max());
                    let answers = join_all(runs.into_iter().map(|run| self.run(run, source))).await;
                    answers.into_iter().flatten().collect()
                }
            };
            return settled;
        }
        // FIFO: each group in the event's order, one message (or one batch call) at a time;
        // groups side by side, as lanes run.
        let mut groups: Vec<(Option<String>, Members)> = Vec::new();
        for (index, held) in held.into_iter().enumerate() {
            let group = held.delivery.group_id.clone();
            match groups.iter_mut().find(|(id, _)| *id == group) {
                Some((_, members)) => members.push((index, held)),
                None => groups.push((group, vec![(index, held)])),
            }
        }
        let answers = join_all(
            groups
                .into_iter()
                .map(|(_, members)| self.group(members, source)),
        )
        .await;
        let mut settled = vec![Settled::Failed; count];
        for (index, answer) in answers.into_iter().flatten() {
            settled[index] = answer;
        }
        settled
    }

    /// Opens a lease for each message with the event's receipt handle (the settler's releases
    /// change the visibility through it) and makes it a held message, as the intake does.
    async fn hold(&self, messages: Vec<ReceivedMessage>) -> Vec<Held> {
        let shared = &self.parts.shared;
        let reads_envelopes = self.parts.queue.consumer.reads_envelopes;
        // The event's messages take no room from anyone: each is given a permit of its own.
        let room = Arc::new(Semaphore::new(messages.len()));
        let mut permits: OwnedSemaphorePermit = room
            .acquire_many_owned(messages.len() as u32)
            .await
            .expect("a semaphore of its own is never closed");
        let mut messages = messages;
        let leases = shared.leases.open_all(
            messages.iter_mut().map(|message| {
                (
                    std::mem::take(&mut message.receipt_handle),
                    message.message_id.clone(),
                    message.group_id().map(str::to_owned),
                )
            }),
            shared.visibility,
        );
        messages
            .into_iter()
            .zip(leases)
            .map(|(message, lease)| Held {
                delivery: Arc::new(Delivery::new(&shared.queue, message, reads_envelopes)),
                lease: HeldLease(lease),
                _room: permits.split(1).expect("a permit a message"),
                span: tracing::Span::none(),
                key: None,
            })
            .collect()
    }

    /// Which attempt this delivery is: each is a receive of the mapping's, as on a standard
    /// queue (the event is answered once, so no attempt is made in place), less the receives
    /// this instance gave back unstarted (the later messages of a failed FIFO group).
    fn attempts(&self, held: &Held) -> u32 {
        let id = &held.delivery.message_id;
        crate::retry::attempts(
            held.delivery
                .receive_count
                .saturating_sub(self.unstarted.count(id)),
            1,
        )
    }

    /// A single handler's attempt at one message, settled.
    async fn one(&self, mut held: Held, source: Source) -> Settled {
        let dispatcher: &Dispatcher = &self.parts.dispatcher;
        let attempts = self.attempts(&held);
        let slot = dispatcher.slot().await;
        dispatcher.open_process_span(&mut held, attempts);
        let (verdict, _) = dispatcher.process(&held, attempts).await;
        drop(slot);
        self.settle_alone(held, verdict, attempts, source).await
    }

    /// A batch handler's call over `run` (at most its `max` messages), each settled in order.
    async fn run(&self, run: Vec<Held>, source: Source) -> Vec<Settled> {
        let (run, verdicts) = self.call(run).await;
        let mut settled = Vec::with_capacity(run.len());
        for ((held, attempts), verdict) in run.into_iter().zip(verdicts) {
            settled.push(self.settle_alone(held, verdict, attempts, source).await);
        }
        settled
    }

    /// Opens each message's `process` span and makes the batch call: a verdict a message.
    async fn call(&self, run: Vec<Held>) -> (Vec<(Held, u32)>, Vec<Verdict>) {
        let dispatcher = &self.parts.dispatcher;
        let Calls::Batch(batches) = &dispatcher.calls else {
            unreachable!("only a batch subscription's runs are called together")
        };
        let run: Vec<(Held, u32)> = run
            .into_iter()
            .map(|mut held| {
                let attempts = self.attempts(&held);
                dispatcher.open_process_span(&mut held, attempts);
                (held, attempts)
            })
            .collect();
        let items = run
            .iter()
            .map(|(held, attempts)| Item {
                delivery: held.delivery.clone(),
                attempts: *attempts,
                span: held.span.clone(),
            })
            .collect();
        // `None` only once a stop no longer starts attempts, which nothing asks of this consumer.
        let verdicts = batches
            .attempt(items)
            .await
            .unwrap_or_else(|| run.iter().map(|_| Verdict::Cancelled).collect());
        (run, verdicts)
    }

    /// A FIFO group's messages of the event, in order: once one fails, the later ones do not run
    /// and go back with it, in one call, hidden as long; not having run, they are noted as
    /// given back unstarted, so the receive it cost them is no attempt.
    async fn group(&self, members: Vec<(usize, Held)>, source: Source) -> Vec<(usize, Settled)> {
        let dispatcher = &self.parts.dispatcher;
        let mut settled = Vec::with_capacity(members.len());
        let mut members: VecDeque<(usize, Held)> = members.into();
        let mut failed: Option<(usize, Held, i32)> = None;
        while failed.is_none() {
            match &dispatcher.calls {
                Calls::One(_) => {
                    let Some((index, mut held)) = members.pop_front() else {
                        break;
                    };
                    let attempts = self.attempts(&held);
                    let slot = dispatcher.slot().await;
                    dispatcher.open_process_span(&mut held, attempts);
                    let (verdict, _) = dispatcher.process(&held, attempts).await;
                    drop(slot);
                    match self.settle(held, verdict, attempts).await {
                        Ok(()) => settled.push((index, Settled::Done)),
                        Err((held, seconds)) => failed = Some((index, held, seconds)),
                    }
                }
                Calls::Batch(batches) => {
                    let mut run = Vec::new();
                    let mut indices = Vec::new();
                    while run.len() < batches.max() {
                        let Some((index, held)) = members.pop_front() else {
                            break;
                        };
                        indices.push(index);
                        run.push(held);
                    }
                    if run.is_empty() {
                        break;
                    }
                    let (run, verdicts) = self.call(run).await;
                    let mut settling = indices.into_iter().zip(run.into_iter().zip(verdicts));
                    for (index, ((held, attempts), verdict)) in settling.by_ref() {
                        match self.settle(held, verdict, attempts).await {
                            Ok(()) => settled.push((index, Settled::Done)),
                            Err((held, seconds)) => {
                                failed = Some((index, held, seconds));
                                break;
                            }
                        }
                    }
                    // What the call did with the later ones is not settled: they go back
                    // behind the failed one, with the group's rest, in order.
                    let later: Vec<(usize, Held)> = settling
                        .map(|(index, ((held, _), _))| (index, held))
                        .collect();
                    for member in later.into_iter().rev() {
                        members.push_front(member);
                    }
                }
            }
        }
        let Some((index, first, seconds)) = failed else {
            return settled;
        };
        settled.push((index, Settled::Failed));
        let mut back = vec![first];
        for (index, held) in members {
            settled.push((index, Settled::Failed));
            self.unstarted.note(&held.delivery.message_id);
            back.push(held);
        }
        self.give_back(back, seconds, source).await;
        settled
    }

    /// Settles `held` as the server's settler does, mapped to what the event's answer can say:
    /// done, or failed, to be given back hidden for the seconds it says (which the rest of its
    /// FIFO group in the event takes too, in the same call).
    async fn settle(&self, held: Held, verdict: Verdict, attempts: u32) -> Result<(), (Held, i32)> {
        let settler: &Settler = &self.parts.settler;
        match settler.settle(held, verdict, (attempts, 1)).await {
            Next::Done => Ok(()),
            // Not reached: the event source mapping deletes what the answer does not name.
            Next::Delete(deleting) => {
                settler.delete_all(vec![deleting]);
                Ok(())
            }
            Next::GoBack(held, seconds) => Err((held, seconds)),
            // A retry in place (FIFO) becomes a visibility change: the event is answered once.
            Next::Again(held, delay) => {
                let seconds = held.lease.visibility_seconds(delay);
                Err((held, seconds))
            }
        }
    }

    /// Settles `held` alone: given back at once when it failed.
    async fn settle_alone(
        &self,
        held: Held,
        verdict: Verdict,
        attempts: u32,
        source: Source,
    ) -> Settled {
        match self.settle(held, verdict, attempts).await {
            Ok(()) => Settled::Done,
            Err((held, seconds)) => {
                self.give_back(vec![held], seconds, source).await;
                Settled::Failed
            }
        }
    }

    /// Gives messages back to their queue, hidden for `seconds`, through the settler's release;
    /// a topic's notification has nothing to give back, and its lease just ends.
    async fn give_back(&self, held: Vec<Held>, seconds: i32, source: Source) {
        match source {
            Source::Queue => self.parts.settler.release(held, seconds).await,
            Source::Topic => {
                for held in held {
                    self.parts.shared.leases.forget(&held.lease);
                }
            }
        }
    }
}

/// A FIFO group's messages of an event, each with its place in the event.
type Members = Vec<(usize, Held)>;

/// `held` in runs of at most `max`, in order.
fn chunks(held: Vec<Held>, max: usize) -> Vec<Vec<Held>> {
    let mut runs: Vec<Vec<Held>> = Vec::new();
    for held in held {
        match runs.last_mut() {
            Some(run) if run.len() < max.max(1) => run.push(held),
            _ => runs.push(vec![held]),
        }
    }
    runs
}
