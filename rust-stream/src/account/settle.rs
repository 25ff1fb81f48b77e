//! What ends or extends a receive on one queue of the account: `DeleteMessage` and
//! `ChangeMessageVisibility` by receipt handle, and a dead letter's arrival from its source queue.
//!
//! These stand beside [`queue`](super::queue), which stores and hands out messages; here a
//! receipt handle is resolved to the message it names (a stale handle deletes nothing, as SQS's),
//! and each change goes through the queue's own state transitions.

use std::sync::Arc;
use std::time::Duration;

use super::fifo::{Dedup, DedupId, GroupName};
use super::ids::{Key, MessageId, Moment};
use super::message::{parse_receipt_handle, State, Stored};
use super::queue::{visibility_cap, Queue};
use crate::model::rules::{self, fail, ErrorKind};
use crate::transport::TransportError;

impl Queue {
    /// Finds the message a receipt handle names: `Ok(None)` when it is gone (deleted, moved,
    /// purged), `Ok(Some((key, true)))` when the handle is the latest receive's.
    fn resolve(&self, receipt_handle: &str) -> Result<Option<(Key, bool)>, TransportError> {
        match parse_receipt_handle(receipt_handle) {
            Some((incarnation, key, count)) if incarnation == self.incarnation => Ok(self
                .messages
                .get(key)
                .map(|m| (key, m.receive_count == count))),
            _ => fail(
                ErrorKind::ReceiptHandleIsInvalid,
                format!(
                    "receipt handle `{receipt_handle}` was not issued by queue `{}`; use the handle its receive returned",
                    self.name
                ),
            ),
        }
    }

    /// `DeleteMessage`. Deleting twice succeeds; a handle superseded by a later receive succeeds
    /// without deleting, as SQS documents, so the newer receiver keeps the message. On a FIFO
    /// queue a handle expires with its visibility: once the message is visible again (timed out,
    /// or released), its delete is refused, as SQS refuses it, and the message stays.
    /// The message deleted, if one was: its caller frees it once the queue's lock is released.
    pub(super) fn delete(
        &mut self,
        receipt_handle: &str,
    ) -> Result<Option<Stored>, TransportError> {
        if let Some((key, true)) = self.resolve(receipt_handle)? {
            if self.config.fifo && !matches!(self.stored(key).state, State::InFlight { .. }) {
                return fail(
                    ErrorKind::InvalidParameterValue,
                    format!(
                        "Value {receipt_handle} for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired \
                         (its visibility timeout ended on FIFO queue `{}`); receive the message again to delete it",
                        self.name
                    ),
                );
            }
            return Ok(self.remove(key));
        }
        Ok(None)
    }

    /// `ChangeMessageVisibility`: 0 releases the message now; the total time invisible since its
    /// receive is capped at 12 hours.
    pub(super) fn change_visibility(
        &mut self,
        receipt_handle: &str,
        timeout: i32,
        now: Moment,
    ) -> Result<(), TransportError> {
        let timeout = rules::check_range(
            "VisibilityTimeout",
            timeout,
            0,
            rules::MAX_VISIBILITY_TIMEOUT_SECONDS,
        )?;
        let found = self.resolve(receipt_handle)?;
        let received_at = match found.map(|(key, latest)| (key, latest, self.stored(key).state)) {
            Some((key, true, State::InFlight { received_at, .. })) => (key, received_at),
            _ => {
                return fail(
                    ErrorKind::MessageNotInflight,
                    format!(
                        "the message of receipt handle `{receipt_handle}` is not in flight on queue `{}` \
                         (deleted, timed out, or received again since)",
                        self.name
                    ),
                )
            }
        };
        let (key, received_at) = received_at;
        let until = now + Duration::from_secs(timeout.into());
        let cap = visibility_cap(received_at);
        if until > cap {
            return fail(
                ErrorKind::InvalidParameterValue,
                format!(
                    "VisibilityTimeout {timeout} would keep the message invisible past 12 hours after its receive; \
                     at most {} seconds remain",
                    cap.saturating_since(now).as_secs()
                ),
            );
        }
        let state = if timeout == 0 {
            State::Visible
        } else {
            State::InFlight { until, received_at }
        };
        self.set_state(key, state);
        Ok(())
    }

    /// Takes a dead-lettered message (and the id it keeps) from another queue, available at once.
    pub(super) fn accept_dead_letter(
        &mut self,
        id: MessageId,
        mut message: Stored,
        source_arn: &Arc<str>,
        now: Moment,
    ) {
        message.forget_receives();
        let sent = message.sent();
        let extra = message.extra.get_or_insert_with(Box::default);
        extra.dead_letter_source_arn = Some(source_arn.clone());
        extra.message_id = Some(id);
        if self.config.fifo {
            // SQS resets the enqueue time on a FIFO dead-letter queue; a standard one keeps the
            // original, so the message expires on its first send's clock.
            extra.sent = Some(sent);
            message.stored_at = now;
            // A FIFO dead-letter queue takes only FIFO messages, which have a group.
            message.fifo.get_or_insert_with(|| {
                Arc::new(Dedup {
                    group: GroupName::from("default"),
                    id: DedupId::Text(Box::from("")),
                    key: 0,
                    expires: now,
                    per_group: false,
                })
            });
        } else {
            extra.group_id = None;
        }
        self.store(message, 0, now);
    }
}
