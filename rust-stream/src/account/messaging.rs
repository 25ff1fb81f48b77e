//! The account's message operations: send, receive, delete and change visibility, each a method
//! of [`Account`] named and shaped like the SQS action.

use std::sync::Arc;
use std::time::Duration;

use super::queue::Take;
use super::received::Wanted;
use super::Account;

use crate::model::rules::{self};
use crate::transport::{
    BatchResult, ChangeVisibilityEntry, DeleteEntry, PeekMessages, PeekedMessage, ReceiveMessage,
    ReceivedMessage, SendBatchEntry, SendMessage, SentMessage, TransportError,
};

impl Account {
    /// `SendMessage`.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`; `MissingParameter` (empty body, FIFO without group id);
    /// `InvalidMessageContents`; `InvalidParameterValue` (size, ids, delay, attributes, a FIFO
    /// message without deduplication id on a queue without content-based deduplication).
    pub async fn send_message(
        &self,
        queue_url: &str,
        message: SendMessage,
    ) -> Result<SentMessage, TransportError> {
        let now = self.now();
        let slot = self.slot(queue_url)?;
        let sent = slot.lock_at(now.moment).send(message, now)?;
        slot.notify.notify_waiters();
        Ok(sent)
    }

    /// `SendMessageBatch`: entries are stored in request order; each succeeds or fails alone.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`; `EmptyBatchRequest`, `TooManyEntriesInBatchRequest`,
    /// `InvalidBatchEntryId`, `BatchEntryIdsNotDistinct`, `BatchRequestTooLong` for the whole batch.
    pub async fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> Result<BatchResult<SentMessage>, TransportError> {
        rules::check_send_batch(&entries).map_err(TransportError::unsent)?;
        let now = self.now();
        let slot = self.slot(queue_url)?;
        let mut queue = slot.lock_at(now.moment);
        let mut result = BatchResult::default();
        for entry in entries {
            match queue.send(entry.message, now) {
                Ok(sent) => result.successful.push((entry.id, sent)),
                Err(error) => result.failed.push(error.into_batch_failure(entry.id)),
            }
        }
        drop(queue);
        slot.notify.notify_waiters();
        Ok(result)
    }

    /// `ReceiveMessage`: long-polls up to the wait time and returns as soon as any message is
    /// available, or empty at the wait's end.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist` (also when the queue is deleted during the wait);
    /// `InvalidParameterValue` for out-of-range parameters; `InvalidAttributeName`.
    pub async fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let (max, wait, visibility) = rules::check_receive(
            request.max_number_of_messages,
            request.wait_time_seconds,
            request.visibility_timeout,
            request.receive_request_attempt_id.as_deref(),
        )
        .map_err(TransportError::unsent)?;
        rules::check_system_attribute_names(&request.system_attribute_names)
            .map_err(TransportError::unsent)?;
        let wanted = Wanted::new(&request);
        let mut deadline = None;
        loop {
            let slot = self.slot(queue_url)?;
            // Registered before looking, so a send between the look and the wait still wakes us.
            let notified = slot.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let now = self.now();
            // The locks are held in this block only, never across the wait.
            let next_timer = {
                let mut queue = slot.lock();
                let redrive = queue.config.redrive.clone();
                let dlq = redrive.as_ref().and_then(|policy| {
                    let state = self.state();
                    let dlq = state.queues.get(policy.target_name())?;
                    (dlq.fifo == slot.fifo).then(|| dlq.clone())
                });
                // A receive may move messages to the dead-letter queue, so it holds that queue's lock
                // too, taken in the account's order (the newer queue first).
                let mut dlq_queue = None;
                if let Some(dlq) = dlq.as_ref().filter(|dlq| !Arc::ptr_eq(dlq, &slot)) {
                    if dlq.incarnation < slot.incarnation {
                        dlq_queue = Some(dlq.lock());
                    } else {
                        drop(queue);
                        dlq_queue = Some(dlq.lock());
                        queue = slot.lock();
                        if queue.config.redrive != redrive {
                            continue; // changed while unlocked: look again
                        }
                    }
                }
                queue.advance(now.moment);
                let deadline = *deadline.get_or_insert_with(|| {
                    now.instant
                        + Duration::from_secs(wait.unwrap_or(queue.config.wait_time_seconds).into())
                });
                let take = Take {
                    max,
                    visibility: visibility.unwrap_or(queue.config.visibility_timeout),
                    redrive_at: dlq
                        .as_ref()
                        .and(redrive.as_ref())
                        .map(|policy| policy.max_receive_count),
                    wanted: &wanted,
                };
                let (received, dead) = queue.receive(&take, now);
                let next_timer = queue
                    .next_timer()
                    .map(|moment| moment.to_instant(self.inner.started));
                if let (false, Some(dlq), Some(policy)) = (dead.is_empty(), &dlq, &redrive) {
                    let source_arn = queue.arn.clone();
                    let target = match &mut dlq_queue {
                        Some(other) => &mut **other,
                        None => &mut *queue, // the queue is its own dead-letter queue
                    };
                    for (id, message) in dead {
                        tracing::warn!(
                            messaging.message.id = %id,
                            messaging.destination.name = %target.name,
                            max_receive_count = policy.max_receive_count,
                            "message moved to its dead-letter queue"
                        );
                        target.accept_dead_letter(id, message, &source_arn, now.moment);
                    }
                    drop(dlq_queue);
                    dlq.notify.notify_waiters();
                }
                drop(queue);
                if !received.is_empty() || now.instant >= deadline {
                    return Ok(received.into_messages(&wanted, self.inner.epoch_ms_at_start));
                }
                // Nothing received: nothing kept across the wait either.
                debug_assert!(received.is_empty());
                next_timer.map_or(deadline, |t| t.min(deadline))
            };
            // Boxed: the timer's state would make every receive's future larger (it is allocated
            // per call), while a receive that finds messages never waits.
            Box::pin(async {
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep_until(next_timer) => {}
                }
            })
            .await;
        }
    }

    /// A look at up to `request.max` of the queue's messages in storage order (on FIFO, each
    /// group's in its order), after skipping `request.offset`, that changes nothing: no receive
    /// is counted, no visibility or group hold changes, and no receipt handle is handed out (each
    /// message's is empty). Every system and message attribute is returned, with each message's
    /// state (visible, in flight or delayed, and until when). SQS has no such call.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`.
    pub async fn peek_messages(
        &self,
        queue_url: &str,
        request: PeekMessages,
    ) -> Result<Vec<PeekedMessage>, TransportError> {
        let everything = ReceiveMessage::new(10);
        let wanted = Wanted::new(&everything);
        let now = self.now();
        let slot = self.slot(queue_url)?;
        let (peeked, states) =
            slot.lock_at(now.moment)
                .peek(request.offset, request.max, &wanted, now.moment);
        Ok(peeked
            .into_messages(&wanted, self.inner.epoch_ms_at_start)
            .into_iter()
            .zip(states)
            .map(|(mut message, state)| {
                message.receipt_handle.clear();
                PeekedMessage { message, state }
            })
            .collect())
    }

    /// `DeleteMessage`. Deleting a deleted message succeeds, so retries are safe.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`; `ReceiptHandleIsInvalid` for a handle this queue did not issue.
    pub async fn delete_message(
        &self,
        queue_url: &str,
        receipt_handle: &str,
    ) -> Result<(), TransportError> {
        let now = self.now();
        let slot = self.slot(queue_url)?;
        // Freed here, once the lock (a temporary of the statement) is released.
        let deleted = slot.lock_at(now.moment).delete(receipt_handle)?;
        drop(deleted);
        // Deleting a FIFO group's last in-flight message frees the group for waiting receivers.
        slot.notify.notify_waiters();
        Ok(())
    }

    /// `DeleteMessageBatch`.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist` and the batch-level errors; per-entry errors are in the result.
    pub async fn delete_message_batch(
        &self,
        queue_url: &str,
        mut entries: Vec<DeleteEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        rules::check_batch_ids(entries.iter().map(|e| e.id.as_ref()))
            .map_err(TransportError::unsent)?;
        let now = self.now();
        let slot = self.slot(queue_url)?;
        let mut result = BatchResult {
            successful: Vec::with_capacity(entries.len()),
            failed: Vec::new(),
        };
        let mut deleted = Vec::with_capacity(entries.len());
        let mut queue = slot.lock_at(now.moment);
        for entry in &mut entries {
            let id = std::mem::take(&mut entry.id);
            match queue.delete(&entry.receipt_handle) {
                Ok(message) => {
                    deleted.extend(message);
                    result.successful.push((id, ()));
                }
                Err(error) => result.failed.push(error.into_batch_failure(id)),
            }
        }
        drop(queue);
        // Freed once the lock is released: the queue's other callers wait for its work only, not
        // for the allocator's.
        drop((deleted, entries));
        slot.notify.notify_waiters();
        Ok(result)
    }

    /// `ChangeMessageVisibility`: 0 releases the message at once.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist`; `ReceiptHandleIsInvalid`; `MessageNotInflight`;
    /// `InvalidParameterValue` past the 12-hour cap or outside 0..=43200.
    pub async fn change_message_visibility(
        &self,
        queue_url: &str,
        receipt_handle: &str,
        visibility_timeout: i32,
    ) -> Result<(), TransportError> {
        let now = self.now();
        let slot = self.slot(queue_url)?;
        slot.lock_at(now.moment).change_visibility(
            receipt_handle,
            visibility_timeout,
            now.moment,
        )?;
        slot.notify.notify_waiters();
        Ok(())
    }

    /// `ChangeMessageVisibilityBatch`.
    ///
    /// # Errors
    ///
    /// `QueueDoesNotExist` and the batch-level errors; per-entry errors are in the result.
    pub async fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        rules::check_batch_ids(entries.iter().map(|e| e.id.as_ref()))
            .map_err(TransportError::unsent)?;
        let now = self.now();
        let slot = self.slot(queue_url)?;
        let mut queue = slot.lock_at(now.moment);
        let mut result = BatchResult::default();
        for entry in entries {
            match queue.change_visibility(
                &entry.receipt_handle,
                entry.visibility_timeout,
                now.moment,
            ) {
                Ok(()) => result.successful.push((entry.id, ())),
                Err(error) => result.failed.push(error.into_batch_failure(entry.id)),
            }
        }
        drop(queue);
        slot.notify.notify_waiters();
        Ok(result)
    }
}
