//! Dispatch: handler slots, FIFO group lanes, the panic catch and the decode-failure path.
//!
//! On a standard queue each message waits for a handler slot on its own. On a FIFO queue each
//! group has a *lane*: its held messages in sequence order, run one at a time, so a group is never
//! handled out of order or twice at once by this consumer, even on a server that hands out a
//! released message while others of its group are still in flight. Groups are independent: a
//! slow or failing lane holds up nobody else.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError};

use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use super::settle::Verdict;
use super::Consumer;
use crate::context::Delivery;
use crate::engine::extend::Lease;
use crate::handler::Handled;
use crate::outcome::HandlerOutcome;

/// A message this consumer holds.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) delivery: Arc<Delivery>,
    pub(crate) lease: Arc<Lease>,
    /// Its place in the subscription's capacity, given back when it is settled.
    pub(crate) _room: OwnedSemaphorePermit,
}

/// A FIFO group's held messages, by sequence number.
#[derive(Debug, Default)]
pub(crate) struct Lane {
    pending: BTreeMap<(u128, String), Held>,
    /// A task is working through the lane.
    running: bool,
}

impl Lane {
    /// Takes every message still waiting in the lane.
    pub(crate) fn take_rest(&mut self) -> Vec<Held> {
        std::mem::take(&mut self.pending).into_values().collect()
    }
}

impl Consumer {
    /// Hands a received message to a handler slot, or to its group's lane on FIFO.
    pub(crate) fn dispatch(self: &Arc<Self>, held: Held) {
        if !self.fifo {
            let consumer = self.clone();
            self.spawn(async move {
                // Biased: once shutdown has begun a free slot must not start another handler.
                let slot = tokio::select! {
                    biased;
                    () = consumer.stopping() => return consumer.release(vec![held.lease], 0).await,
                    slot = consumer.running.clone().acquire_owned() => slot.expect("never closed"),
                };
                let verdict = consumer.process(&held).await;
                drop(slot);
                consumer.settle(held, verdict, Vec::new).await;
            });
            return;
        }
        let group = held.delivery.group_id.clone().unwrap_or_default();
        let sequence = held
            .delivery
            .sequence_number
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or(u128::MAX);
        let start = {
            let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
            let lane = lanes.entry(group.clone()).or_default();
            lane.pending
                .insert((sequence, held.delivery.message_id.clone()), held);
            !std::mem::replace(&mut lane.running, true)
        };
        if start {
            let consumer = self.clone();
            self.spawn(async move { consumer.run_lane(group).await });
        }
    }

    /// Works through one group's lane until it is empty.
    async fn run_lane(self: Arc<Self>, group: String) {
        loop {
            let next = {
                let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
                let lane = lanes
                    .get_mut(&group)
                    .expect("a running lane stays until its task ends");
                match lane.pending.pop_first() {
                    Some((_, held)) => held,
                    None => {
                        lanes.remove(&group);
                        return;
                    }
                }
            };
            // Biased: a lane whose message finished after shutdown began has a free slot at
            // once, and must release the rest of its group rather than start the next.
            let slot = tokio::select! {
                biased;
                () = self.stopping() => {
                    let mut rest = self.take_lane(&group);
                    rest.insert(0, next);
                    self.release(rest.into_iter().map(|held| held.lease).collect(), 0).await;
                    continue;
                }
                slot = self.running.clone().acquire_owned() => slot.expect("never closed"),
            };
            let verdict = self.process(&next).await;
            drop(slot);
            // A released message takes the rest of its group with it, so the group comes back
            // whole and in order; a settled one lets the group go on.
            self.settle(next, verdict, || self.take_lane(&group)).await;
        }
    }

    fn take_lane(&self, group: &str) -> Vec<Held> {
        let mut lanes = self.lanes.lock().unwrap_or_else(PoisonError::into_inner);
        lanes
            .get_mut(group)
            .map(Lane::take_rest)
            .unwrap_or_default()
    }

    /// Decodes and handles one message in a task of its own, and says how to settle it.
    pub(crate) async fn process(&self, held: &Held) -> Verdict {
        let delivery = &held.delivery;
        let span = tracing::info_span!(
            "process",
            messaging.system = "aws_sqs",
            messaging.destination.name = %self.queue.name,
            messaging.operation.type = "process",
            messaging.message.id = %delivery.message_id,
            sqs.group_id = delivery.group_id.as_deref(),
            sqs.receive_count = delivery.receive_count,
        );
        let call = self
            .handler
            .clone()
            .call(delivery.clone(), self.states.clone())
            .instrument(span.clone());
        let handled = tokio::spawn(call).await;
        let _entered = span.enter();
        match handled {
            Ok(Handled::Done { outcome, staged }) => self.verdict(outcome, staged, &held.lease),
            Ok(Handled::Undecodable(error)) => {
                tracing::error!(error = %error, "message body does not decode");
                match &self.dead_letter {
                    Some(_) => Verdict::DeadLetter {
                        reason: error.to_string(),
                    },
                    // Without a dead-letter queue of ours, let it come back at the visibility
                    // timeout's pace so the queue's redrive policy can act.
                    None => self.lapse(),
                }
            }
            Err(join) => {
                let reason = join
                    .try_into_panic()
                    .ok()
                    .and_then(|panic| {
                        panic
                            .downcast_ref::<&str>()
                            .map(|s| (*s).to_owned())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                    })
                    .unwrap_or_else(|| "the handler task was cancelled".to_owned());
                tracing::error!(panic = %reason, "handler panicked; the message will be retried");
                Verdict::Release { seconds: 0 }
            }
        }
    }

    fn verdict(
        &self,
        outcome: HandlerOutcome,
        staged: Vec<crate::publish::Outgoing>,
        lease: &Lease,
    ) -> Verdict {
        match outcome {
            HandlerOutcome::Ack => Verdict::Ack { staged },
            HandlerOutcome::Retry => {
                tracing::warn!("handler asked to retry");
                Verdict::Release { seconds: 0 }
            }
            HandlerOutcome::RetryAfter(delay) => {
                let wanted = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
                let seconds = wanted.min(lease.seconds_to_cap());
                tracing::warn!(retry_in_s = seconds, "handler asked to retry later");
                Verdict::Release {
                    seconds: seconds as i32,
                }
            }
            HandlerOutcome::DeadLetter(reason) => match &self.dead_letter {
                Some(_) => Verdict::DeadLetter { reason },
                None => {
                    tracing::error!(
                        reason = %reason,
                        "handler asked to dead-letter, but the subscription has no dead-letter queue; \
                         the message comes back at its visibility timeout (declare `.dead_letter(..)`)"
                    );
                    self.lapse()
                }
            },
        }
    }

    /// Lets the message come back when a full visibility timeout has passed.
    fn lapse(&self) -> Verdict {
        Verdict::Release {
            seconds: self.visibility.as_secs() as i32,
        }
    }
}
