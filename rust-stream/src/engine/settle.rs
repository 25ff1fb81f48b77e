//! Settling: a handler's verdict becomes a delete, a visibility change, or a move to the
//! dead-letter queue, each through the batcher.
//!
//! Nothing is ever deleted before it is safe: an ack deletes only after the handler's outputs
//! were sent, a dead-letter deletes only after the copy reached the dead-letter queue (so a crash
//! in between duplicates rather than loses), and any failure on the way releases the message
//! instead.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::dispatch::Held;
use super::extend::Lease;
use super::Consumer;
use crate::engine::transport::{MessageAttributeValue, SendMessage};
use crate::publish::{Outgoing, PublishError};
use crate::sqs::rules::MAX_MESSAGE_ATTRIBUTES;

/// The header a dead-lettered message carries its reason in.
pub const DEAD_LETTER_REASON_HEADER: &str = "dead_letter_reason";

/// How to settle a handled message.
#[derive(Debug)]
pub(crate) enum Verdict {
    /// Send the staged outputs, then delete.
    Ack { staged: Vec<Outgoing> },
    /// Make it visible again after `seconds` (0: now).
    Release { seconds: i32 },
    /// Send it to the dead-letter queue, then delete.
    DeadLetter { reason: String },
}

impl Consumer {
    /// Settles `held` as the verdict says. Whenever it is released, for the verdict or because
    /// its ack or dead-letter failed on the way, `rest` takes the later messages of its FIFO group,
    /// which are released with it in the same call: a group that went on past a message
    /// released alone would be handled out of order.
    pub(crate) async fn settle(
        self: &Arc<Self>,
        held: Held,
        verdict: Verdict,
        rest: impl FnOnce() -> Vec<Held>,
    ) {
        let message_id = held.delivery.message_id.clone();
        match verdict {
            Verdict::Ack { staged } => match self.publish_staged(staged).await {
                Ok(()) => self.delete(held).await,
                Err(error) => {
                    tracing::error!(
                        messaging.message.id = %message_id,
                        error = %error,
                        "an output could not be sent; the message will be retried"
                    );
                    self.release_with_rest(held, rest(), 0).await;
                }
            },
            Verdict::Release { seconds } => self.release_with_rest(held, rest(), seconds).await,
            Verdict::DeadLetter { reason } => {
                match self.send_to_dead_letter(&held, &reason).await {
                    Ok(()) => {
                        tracing::warn!(messaging.message.id = %message_id, reason = %reason, "message dead-lettered");
                        self.delete(held).await;
                    }
                    Err(error) => {
                        tracing::error!(
                            messaging.message.id = %message_id,
                            error = %error,
                            "could not send the message to its dead-letter queue; it will be retried"
                        );
                        self.release_with_rest(held, rest(), 0).await;
                    }
                }
            }
        }
    }

    async fn release_with_rest(&self, held: Held, rest: Vec<Held>, seconds: i32) {
        if !rest.is_empty() {
            tracing::warn!(
                messaging.message.id = %held.delivery.message_id,
                held_back = rest.len(),
                "releasing the rest of the group after its failed message"
            );
        }
        let leases = std::iter::once(held)
            .chain(rest)
            .map(|held| held.lease)
            .collect();
        self.release(leases, seconds).await;
    }

    /// Sends what the handler published, in order, grouped by queue.
    async fn publish_staged(&self, staged: Vec<Outgoing>) -> Result<(), PublishError> {
        let mut by_queue: BTreeMap<String, (crate::sqs::SqsQueue, Vec<SendMessage>)> =
            BTreeMap::new();
        for outgoing in staged {
            let (publisher, message) = outgoing.into_request()?;
            let queue = publisher.queue().clone();
            by_queue
                .entry(queue.name.clone())
                .or_insert_with(|| (queue, Vec::new()))
                .1
                .push(message);
        }
        for (queue, messages) in by_queue.into_values() {
            for answer in self.core.send_many(&queue, messages).await {
                answer?;
            }
        }
        Ok(())
    }

    /// Copies a message to the dead-letter queue: same body and headers, the reason added, and on
    /// FIFO the same group with the original message id as deduplication id.
    async fn send_to_dead_letter(&self, held: &Held, reason: &str) -> Result<(), PublishError> {
        let Some(dead_letter) = &self.dead_letter else {
            unreachable!("a dead-letter verdict needs a dead-letter queue")
        };
        let delivery = &held.delivery;
        let mut message = SendMessage::new(delivery.body.clone());
        message.message_attributes = delivery.attributes.clone();
        if message.message_attributes.len() < MAX_MESSAGE_ATTRIBUTES {
            let reason: String = reason.chars().take(1024).collect();
            message.message_attributes.insert(
                DEAD_LETTER_REASON_HEADER.to_owned(),
                MessageAttributeValue::string(reason),
            );
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
        self.core.send(dead_letter.queue(), message).await.map(drop)
    }

    /// Deletes a settled message. The delete is batched with others while the caller goes on (a
    /// FIFO lane moves to its next message), so a group's deletes share calls; the message keeps
    /// its room in the pipeline until the delete is answered.
    async fn delete(self: &Arc<Self>, held: Held) {
        if !held.lease.claim().await {
            return;
        }
        self.leases.close(&held.lease);
        let deleter = self.deleter.clone();
        self.spawn(async move {
            let lease = &held.lease;
            if let Err(error) = deleter.submit_one(lease.receipt_handle.clone()).await {
                // Not deleted: it comes back after its visibility timeout and is handled again.
                tracing::warn!(messaging.message.id = %lease.message_id, error = %error, "delete failed");
            }
        });
    }

    /// Sets the visibility of messages in one call per 10 (a FIFO group's rest rides with its
    /// failed message); leases already settled are skipped.
    pub(crate) async fn release(&self, leases: Vec<Arc<Lease>>, seconds: i32) {
        let mut claimed = Vec::new();
        for lease in leases {
            if lease.claim().await {
                self.leases.close(&lease);
                claimed.push(lease);
            }
        }
        if claimed.is_empty() {
            return;
        }
        let entries = claimed
            .iter()
            .map(|lease| (lease.receipt_handle.clone(), seconds))
            .collect();
        let answers = self.visibility_batcher.submit(entries).await;
        for (lease, answer) in claimed.iter().zip(answers) {
            match answer {
                Ok(()) => {
                    tracing::debug!(messaging.message.id = %lease.message_id, visibility_s = seconds, "released")
                }
                // Not released: it comes back when its current visibility ends.
                Err(error) => {
                    tracing::warn!(messaging.message.id = %lease.message_id, error = %error, "release failed")
                }
            }
        }
    }
}
