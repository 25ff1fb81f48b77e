//! The settler's move to the dead-letter queue: a copy of the message (its body and attributes,
//! plus rust-stream's own where they fit), sent until it is taken, and only then the delete, so a
//! crash in between duplicates rather than loses.

use super::{Next, Outcome, Settler};
use crate::engine::held::Held;
use crate::model::headers::{
    ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER, LINKED_TRACEPARENT_HEADER,
    ORIGINAL_MESSAGE_ID_HEADER, SOURCE_QUEUE_HEADER,
};
use crate::model::rules::{self, MAX_MESSAGE_ATTRIBUTES, MAX_MESSAGE_SIZE};
use crate::model::Destination;
use crate::propagation::TraceHeaders;
use crate::publish::{PublishError, Publisher};
use crate::record::Event;
use crate::transport::{MessageAttributeValue, SendMessage, SentMessage};

/// The longest reason a dead-letter copy carries.
const MAX_REASON_CHARS: usize = 1024;

impl Settler {
    /// Moves a message to the dead-letter queue: the copy first, then the delete.
    pub(super) async fn dead_letter(
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
        // The copy keeps the original's trace (its traceparent among its attributes, and its
        // X-Ray header), and names the attempt it failed in (its `process` span) as the link a
        // redrive gives the next attempt: a link an earlier redrive left is this failure's now.
        message.aws_trace_header = delivery.aws_trace_header.clone();
        message.message_attributes.remove(LINKED_TRACEPARENT_HEADER);
        let failed_in = TraceHeaders::of(&held.span)
            .map(|trace| MessageAttributeValue::string(trace.traceparent()));
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
        let ours = ours
            .into_iter()
            .chain(failed_in.map(|value| (LINKED_TRACEPARENT_HEADER, value)));
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
            .send_copies(dead_letter, vec![message])
            .await
            .pop()
            .expect("one answer per message")
            .map_err(PublishError::rejected(&dead_letter.name))
    }
}
