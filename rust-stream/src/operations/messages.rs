//! A queue's messages one call at a time, as a client outside the engine takes them: receive
//! with a visibility timeout ([`Operations::receive`]), delete ([`Operations::delete`]) and
//! extend ([`Operations::extend`]) by receipt handle. With [`Operations::send`] and
//! [`Operations::queue`] (its size) they are what a queue served over HTTP needs (push, pop,
//! ack, ping, size).

use std::time::Duration;

use super::queues::{at, OperationError, Operations};
use crate::model::entry_id::entry_id;
use crate::model::rules::{self, MAX_VISIBILITY_TIMEOUT_SECONDS};
use crate::transport::{
    BatchFailure, ChangeVisibilityEntry, DeleteEntry, ReceiveMessage, ReceivedMessage,
};

/// Whole seconds of a visibility timeout, within SQS's 12 hours.
fn seconds(timeout: Duration) -> i32 {
    i32::try_from(timeout.as_secs())
        .unwrap_or(i32::MAX)
        .min(MAX_VISIBILITY_TIMEOUT_SECONDS)
}

impl Operations {
    /// Takes up to `max` of `queue`'s messages (at most 10 a call), each invisible to others for
    /// `visibility` unless deleted or extended; waits up to `wait` (at most 20 s) for the first.
    /// Each comes with every system and message attribute.
    ///
    /// # Errors
    ///
    /// [`OperationError::Queue`] when the queue does not exist or the receive fails.
    pub async fn receive(
        &self,
        queue: &str,
        max: usize,
        visibility: Duration,
        wait: Duration,
    ) -> Result<Vec<ReceivedMessage>, OperationError> {
        let name = self.named(queue)?;
        let url = self.url_of(&name).await?;
        let max = i32::try_from(max.clamp(1, rules::MAX_BATCH_ENTRIES)).unwrap_or(10);
        let wait = i32::try_from(wait.as_secs().min(20)).unwrap_or(20);
        let request = ReceiveMessage::new(max)
            .wait_time_seconds(wait)
            .visibility_timeout(seconds(visibility));
        self.client
            .transport()
            .receive_message(&url, request)
            .await
            .map_err(|source| at(&name, source))
    }

    /// Deletes the messages these receipt handles name (ten a call). Each handle's outcome is
    /// its own: the failures are returned, by handle, with why.
    ///
    /// # Errors
    ///
    /// [`OperationError::Queue`] when the queue does not exist or a call fails as a whole.
    pub async fn delete(
        &self,
        queue: &str,
        receipt_handles: &[String],
    ) -> Result<Vec<(String, BatchFailure)>, OperationError> {
        let name = self.named(queue)?;
        let url = self.url_of(&name).await?;
        let mut failed = Vec::new();
        for chunk in receipt_handles.chunks(rules::MAX_BATCH_ENTRIES) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(index, handle)| DeleteEntry {
                    id: entry_id(index),
                    receipt_handle: handle.clone(),
                })
                .collect();
            let result = self
                .client
                .transport()
                .delete_message_batch(&url, entries)
                .await
                .map_err(|source| at(&name, source))?;
            failed.extend(by_handle(chunk, result.failed));
        }
        Ok(failed)
    }

    /// Keeps the messages these receipt handles name invisible for `visibility` from now (ten a
    /// call; 0 makes them visible at once); the failures are returned, by handle, with why.
    ///
    /// # Errors
    ///
    /// [`OperationError::Queue`] when the queue does not exist or a call fails as a whole.
    pub async fn extend(
        &self,
        queue: &str,
        receipt_handles: &[String],
        visibility: Duration,
    ) -> Result<Vec<(String, BatchFailure)>, OperationError> {
        let name = self.named(queue)?;
        let url = self.url_of(&name).await?;
        let mut failed = Vec::new();
        for chunk in receipt_handles.chunks(rules::MAX_BATCH_ENTRIES) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(index, handle)| ChangeVisibilityEntry {
                    id: entry_id(index),
                    receipt_handle: handle.clone(),
                    visibility_timeout: seconds(visibility),
                })
                .collect();
            let result = self
                .client
                .transport()
                .change_message_visibility_batch(&url, entries)
                .await
                .map_err(|source| at(&name, source))?;
            failed.extend(by_handle(chunk, result.failed));
        }
        Ok(failed)
    }
}

/// A batch's failures by the receipt handle of their entry (the entry ids are indexes).
fn by_handle(
    handles: &[String],
    failures: Vec<BatchFailure>,
) -> impl Iterator<Item = (String, BatchFailure)> + '_ {
    failures.into_iter().filter_map(move |failure| {
        let index: usize = failure.id.parse().ok()?;
        Some((handles.get(index)?.clone(), failure))
    })
}
