//! A simulator of Lambda's SQS event source mapping (features `testing` and `lambda`), to run an
//! app's Lambda path in tests: [`EventSourceMapping`] reads a queue of the in-process account or
//! of LocalStack in batches, as AWS's mapping does, hands each batch to a [`Function`] as an SQS
//! event, and then deletes what the answer does not name in `batchItemFailures`.
//!
//! What it models of AWS's mapping: a batch of up to `batch_size` messages, gathered within the
//! batching window (the receives of up to 10 it takes); up to `max_concurrency` batches in flight
//! at once, each in a function instance of its own; on a FIFO queue one batch a group at a time
//! (SQS itself gives no receive a group whose messages are in flight); a function error fails the
//! whole batch, and so does an answer naming a message that was not in it; the failed messages
//! are left alone (no visibility change: they come back when their visibility ends, or sooner if
//! the function changed it). What it counts ([`MappingCounts`]) is what AWS's mapping would call.
//!
//! A function is invoked in process ([`LambdaHost`](crate::lambda::LambdaHost) is a [`Function`]) or through the Lambda
//! Runtime API, as AWS invokes it: [`RuntimeApi`] (feature `http` too) serves the API on
//! loopback and starts the compiled function as a child process with `AWS_LAMBDA_RUNTIME_API`
//! pointing at it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::encodings::Base64Data;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage, SqsMessageAttribute};

use crate::client::Client;
use crate::model::entry_id::entry_id;
use crate::model::wire::{DeleteEntry, ReceiveMessage, ReceivedMessage};
use crate::transport::TransportError;
use crate::SqsBroker;

mod function;
#[cfg(feature = "http")]
mod runtime_api;

pub use function::Function;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use runtime_api::{ColdStart, RuntimeApi};

/// How the mapping reads its queue: AWS's `BatchSize`, `MaximumBatchingWindowInSeconds` and
/// `ScalingConfig.MaximumConcurrency`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MappingSettings {
    /// The most messages an event has (AWS: 1–10,000; on FIFO at most 10).
    pub batch_size: usize,
    /// How long a batch is gathered after its first message, when it is not full.
    pub window: Duration,
    /// How many batches are in flight at once (AWS: at least 2).
    pub max_concurrency: usize,
}

impl Default for MappingSettings {
    /// AWS's defaults: batches of 10, no window, concurrency of 2 here (AWS scales up to 1,000).
    fn default() -> Self {
        Self {
            batch_size: 10,
            window: Duration::ZERO,
            max_concurrency: 2,
        }
    }
}

/// What the mapping did, as AWS's mapping would call SQS and the function.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MappingCounts {
    /// Invocations of the function.
    pub invocations: u64,
    /// Messages handed to the function, over all invocations.
    pub records: u64,
    /// Messages the mapping deleted (every message of an answered batch not named failed).
    pub deleted: u64,
    /// Messages the answers named failed, or of batches that failed whole.
    pub failed: u64,
    /// `DeleteMessageBatch` calls the mapping made.
    pub delete_calls: u64,
    /// Visibility changes the mapping made: none, as AWS's mapping leaves a failed message to
    /// its visibility timeout (a function may change it itself).
    pub visibility_changes: u64,
}

/// One invocation the mapping made: the messages of its event and those it then left (named
/// failed, or the whole batch after a function error).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Invocation {
    /// The event's message ids, in its order.
    pub message_ids: Vec<String>,
    /// The ids it did not delete.
    pub failed: Vec<String>,
}

#[derive(Debug, Default)]
struct Counts {
    invocations_made: std::sync::Mutex<Vec<Invocation>>,
    invocations: AtomicU64,
    records: AtomicU64,
    deleted: AtomicU64,
    failed: AtomicU64,
    delete_calls: AtomicU64,
}

/// A simulated SQS event source mapping over one queue.
pub struct EventSourceMapping {
    client: Arc<Client>,
    queue: String,
    url: String,
    arn: String,
    settings: MappingSettings,
    counts: Counts,
}

impl std::fmt::Debug for EventSourceMapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSourceMapping")
            .field("queue", &self.queue)
            .field("settings", &self.settings)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl EventSourceMapping {
    /// A mapping over the queue `queue` (which must exist) of `broker`'s account or server.
    pub async fn new(
        broker: &SqsBroker,
        queue: &str,
        settings: MappingSettings,
    ) -> Result<Self, TransportError> {
        let client = broker.client().clone();
        let url = client.transport().get_queue_url(queue).await?;
        Ok(Self {
            client,
            queue: queue.to_owned(),
            url,
            arn: format!("arn:aws:sqs:us-east-1:000000000000:{queue}"),
            settings,
            counts: Counts::default(),
        })
    }

    /// What the mapping did so far.
    pub fn counts(&self) -> MappingCounts {
        let read = |counter: &AtomicU64| counter.load(Ordering::Acquire);
        MappingCounts {
            invocations: read(&self.counts.invocations),
            records: read(&self.counts.records),
            deleted: read(&self.counts.deleted),
            failed: read(&self.counts.failed),
            delete_calls: read(&self.counts.delete_calls),
            visibility_changes: 0,
        }
    }

    /// Every invocation so far, in the order they were answered.
    pub fn invocations(&self) -> Vec<Invocation> {
        self.counts
            .invocations_made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Polls until `done` says so, with up to `max_concurrency` batches in flight, each
    /// gathered, invoked and settled as AWS's mapping does; `timeout` bounds the whole run.
    /// Whether `done` said so in time.
    pub async fn run_until(
        &self,
        function: &dyn Function,
        timeout: Duration,
        done: impl Fn(&MappingCounts) -> bool + Sync,
    ) -> bool {
        let until = tokio::time::Instant::now() + timeout;
        let poller = || async {
            while !done(&self.counts()) && tokio::time::Instant::now() < until {
                if self.poll_once(function).await == 0 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        futures_util::future::join_all((0..self.settings.max_concurrency.max(1)).map(|_| poller()))
            .await;
        done(&self.counts())
    }

    /// One batch: gathered (up to `batch_size`, within the window), handed to `function` as an
    /// SQS event, then settled. How many messages it had (0 when the queue had none).
    pub async fn poll_once(&self, function: &dyn Function) -> usize {
        let batch = self.gather().await;
        if batch.is_empty() {
            return 0;
        }
        let count = batch.len();
        self.counts.invocations.fetch_add(1, Ordering::AcqRel);
        self.counts
            .records
            .fetch_add(count as u64, Ordering::AcqRel);
        let event = self.event(&batch);
        let answer = function
            .invoke(serde_json::to_value(event).expect("an SQS event serializes"))
            .await;
        let failed = match answer.map(|answer| {
            serde_json::from_value::<Option<SqsBatchResponse>>(answer)
                .map_err(|error| error.to_string())
        }) {
            Ok(Ok(response)) => {
                let failures: Vec<String> = response
                    .map(|response| {
                        response
                            .batch_item_failures
                            .into_iter()
                            .map(|failure| failure.item_identifier)
                            .collect()
                    })
                    .unwrap_or_default();
                // AWS fails the whole batch when a named message was not in it.
                if failures
                    .iter()
                    .all(|id| batch.iter().any(|message| &message.message_id == id))
                {
                    failures
                } else {
                    tracing::warn!(
                        "the answer names a message not in the batch: the whole batch failed"
                    );
                    batch
                        .iter()
                        .map(|message| message.message_id.clone())
                        .collect()
                }
            }
            Ok(Err(error)) | Err(error) => {
                tracing::warn!(error = %error, "the function failed: the whole batch failed");
                batch
                    .iter()
                    .map(|message| message.message_id.clone())
                    .collect()
            }
        };
        self.counts
            .failed
            .fetch_add(failed.len() as u64, Ordering::AcqRel);
        self.counts
            .invocations_made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Invocation {
                message_ids: batch
                    .iter()
                    .map(|message| message.message_id.clone())
                    .collect(),
                failed: failed.clone(),
            });
        let deletes: Vec<DeleteEntry> = batch
            .iter()
            .filter(|message| !failed.contains(&message.message_id))
            .enumerate()
            .map(|(index, message)| DeleteEntry {
                id: entry_id(index),
                receipt_handle: message.receipt_handle.clone(),
            })
            .collect();
        for chunk in deletes.chunks(10) {
            self.counts.delete_calls.fetch_add(1, Ordering::AcqRel);
            match self
                .client
                .transport()
                .delete_message_batch(&self.url, chunk.to_vec())
                .await
            {
                Ok(result) => {
                    self.counts
                        .deleted
                        .fetch_add(result.successful.len() as u64, Ordering::AcqRel);
                }
                Err(error) => tracing::warn!(error = %error, "the mapping's delete failed"),
            }
        }
        count
    }

    /// Receives up to `batch_size` messages: the first receive waits up to a second for one,
    /// later ones gather more until the batch is full or the window has passed.
    async fn gather(&self) -> Vec<ReceivedMessage> {
        let size = self.settings.batch_size.max(1);
        let mut batch = Vec::new();
        let mut closes = None;
        loop {
            let want = (size - batch.len()).min(10) as i32;
            let mut request = ReceiveMessage::new(want);
            request.wait_time_seconds = Some(if batch.is_empty() { 1 } else { 0 });
            let received = match self
                .client
                .transport()
                .receive_message(&self.url, request)
                .await
            {
                Ok(received) => received,
                Err(error) => {
                    tracing::warn!(error = %error, "the mapping's receive failed");
                    Vec::new()
                }
            };
            if !received.is_empty() && closes.is_none() {
                closes = Some(tokio::time::Instant::now() + self.settings.window);
            }
            let got = received.len();
            batch.extend(received);
            let Some(closes) = closes else {
                return batch;
            };
            if batch.len() >= size || tokio::time::Instant::now() >= closes {
                return batch;
            }
            if got == 0 {
                tokio::time::sleep(Duration::from_millis(50).min(self.settings.window)).await;
            }
        }
    }

    /// The SQS event AWS would send for `batch`.
    fn event(&self, batch: &[ReceivedMessage]) -> SqsEvent {
        let mut event = SqsEvent::default();
        event.records = batch
            .iter()
            .map(|message| {
                let mut record = SqsMessage::default();
                record.message_id = Some(message.message_id.clone());
                record.receipt_handle = Some(message.receipt_handle.clone());
                record.body = Some(message.body.clone());
                record.attributes = message
                    .attributes
                    .iter()
                    .map(|(name, value)| (name.to_owned(), value.to_owned()))
                    .collect();
                record.message_attributes = message
                    .message_attributes
                    .iter()
                    .map(|(name, value)| {
                        let mut attribute = SqsMessageAttribute::default();
                        attribute.data_type = Some(value.data_type.clone());
                        attribute.string_value = value.string_value.clone();
                        attribute.binary_value = value.binary_value.clone().map(|bytes| {
                            let mut binary = Base64Data::default();
                            binary.0 = bytes;
                            binary
                        });
                        (name.clone(), attribute)
                    })
                    .collect();
                record.event_source = Some("aws:sqs".to_owned());
                record.event_source_arn = Some(self.arn.clone());
                record.aws_region = Some("us-east-1".to_owned());
                record
            })
            .collect();
        event
    }

    /// The queue the mapping reads.
    pub fn queue(&self) -> &str {
        &self.queue
    }
}
