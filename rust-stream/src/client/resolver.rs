//! How a broker finds its queues and topics, each once: the [`Resolver`] owns what it learned
//! (each queue's URL and limits, each topic's ARN and attributes, queue ARNs, the backend's account
//! and region) and the calls that learn it. Queues are here; topics and ARNs in
//! [`topic_lookup`](super::topic_lookup), why in [`topic`](super::topic).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use super::topic::{Home, ResolvedTopic};
use crate::model::declare;
use crate::model::rules::ErrorKind;
use crate::model::SqsQueue;
use crate::transport::{QueueAttributes, SharedTransport, TransportError};

/// What a broker learns of a queue once.
#[derive(Debug, Clone)]
pub(crate) struct Resolved {
    pub(crate) url: String,
    /// The queue's `MaximumMessageSize`: SQS refuses a larger message to this queue even when it
    /// is within the 1 MiB every queue could take.
    pub(crate) maximum_message_size: usize,
    /// The queue's `ContentBasedDeduplication`, when it could be read: SQS takes a FIFO message
    /// without a deduplication id only when it is on, whatever the declaration says.
    pub(crate) content_based_dedup: Option<bool>,
}

/// The queues and topics a broker resolved, each behind its own cell, and how it resolves more.
pub(crate) struct Resolver {
    pub(super) transport: SharedTransport,
    /// The broker's declarations, which say how a queue or topic it creates is made.
    declarations: Arc<Mutex<declare::Registry>>,
    /// Queues by name, each resolved once behind its own cell: a slow lookup of one queue holds up
    /// no other, and callers asking for the same queue at once share one lookup.
    queues: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Resolved>>>>,
    /// Topics by name, each resolved once behind its own cell, as queues are.
    pub(super) topics: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<ResolvedTopic>>>>,
    /// Queue ARNs by URL, read once: a subscription's endpoint, and a queue policy's resource.
    pub(super) queue_arns: Mutex<HashMap<String, String>>,
    /// The account and region of the backend, from the first ARN read: what a topic's ARN is
    /// built from (SNS has no `GetTopicArn`).
    pub(super) home: OnceLock<Home>,
}

impl Resolver {
    /// A resolver over `transport` that knows nothing yet, creating what it creates as
    /// `declarations` describe it.
    pub(crate) fn new(
        transport: SharedTransport,
        declarations: Arc<Mutex<declare::Registry>>,
    ) -> Self {
        Self {
            transport,
            declarations,
            queues: Mutex::default(),
            topics: Mutex::default(),
            queue_arns: Mutex::default(),
            home: OnceLock::new(),
        }
    }

    /// The broker's declarations.
    pub(super) fn declarations(&self) -> MutexGuard<'_, declare::Registry> {
        self.declarations
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue's URL and `MaximumMessageSize`, looked up once, as `merge` describes it for a
    /// creation. A failed lookup is not kept, so the next caller tries again.
    pub(crate) async fn resolved_as(
        &self,
        queue: &SqsQueue,
        merge: fn(&declare::Registry, &SqsQueue) -> SqsQueue,
    ) -> Result<Resolved, TransportError> {
        let cell = self.cell(&queue.name);
        if let Some(resolved) = cell.get() {
            return Ok(resolved.clone());
        }
        let queue = merge(&self.declarations(), queue);
        cell.get_or_try_init(|| self.look_up(&queue)).await.cloned()
    }

    /// The cell a queue is resolved in, made on first use.
    fn cell(&self, name: &str) -> Arc<tokio::sync::OnceCell<Resolved>> {
        self.queues
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    async fn look_up(&self, queue: &SqsQueue) -> Result<Resolved, TransportError> {
        let url = match self.transport.get_queue_url(&queue.name).await {
            Ok(url) => url,
            Err(error)
                if queue.create_if_missing
                    && error.kind() == Some(ErrorKind::QueueDoesNotExist) =>
            {
                self.create(queue).await?
            }
            Err(error) => return Err(error),
        };
        self.describe(queue, url).await
    }

    /// Creates a queue declared `create_if_missing`, with its type, deduplication and throughput
    /// settings, visibility timeout and redrive policy.
    async fn create(&self, queue: &SqsQueue) -> Result<String, TransportError> {
        let mut attributes = type_attributes(queue);
        if let Some(timeout) = queue.consumer.visibility_timeout {
            attributes.insert("VisibilityTimeout".into(), timeout.as_secs().to_string());
        }
        if let (Some(dead_letter), Some(policy)) = (queue.dead_letter_queue(), &queue.dead_letter) {
            // A RedrivePolicy names its target by ARN, so the dead-letter queue must exist first.
            // It is resolved in its own cell, so a subscription or publisher of it shares this
            // lookup and the queue is made once.
            let dead_letter_url = self
                .cell(&dead_letter.name)
                .get_or_try_init(|| self.look_up_plain(&dead_letter))
                .await?
                .url
                .clone();
            let arn = self
                .transport
                .get_queue_attributes(&dead_letter_url, &["QueueArn"])
                .await?;
            let arn = arn.get("QueueArn").cloned().unwrap_or_default();
            // The consumer dead-letters by its own count; SQS's redrive is the backstop for what
            // the consumer never sees fail (crashes), so it leaves room for receives that were no
            // attempt.
            let max_receive_count = crate::retry::redrive_backstop(policy.max_receive_count);
            let redrive = serde_json::json!({ "deadLetterTargetArn": arn, "maxReceiveCount": max_receive_count });
            attributes.insert("RedrivePolicy".into(), redrive.to_string());
        }
        let url = self.transport.create_queue(&queue.name, attributes).await?;
        tracing::info!(messaging.destination.name = %queue.name, "queue created");
        Ok(url)
    }

    /// Finds a queue, or creates it with only its type attributes (a dead-letter queue, whose
    /// declaration carries its source's type and throughput).
    async fn look_up_plain(&self, queue: &SqsQueue) -> Result<Resolved, TransportError> {
        let url = match self.transport.get_queue_url(&queue.name).await {
            Err(error)
                if queue.create_if_missing
                    && error.kind() == Some(ErrorKind::QueueDoesNotExist) =>
            {
                self.transport
                    .create_queue(&queue.name, type_attributes(queue))
                    .await?
            }
            found => found?,
        };
        self.describe(queue, url).await
    }

    /// Reads what sends to the queue must respect besides the rules every queue shares.
    async fn describe(&self, queue: &SqsQueue, url: String) -> Result<Resolved, TransportError> {
        let mut content_based_dedup = None;
        let maximum_message_size = match self
            .transport
            .get_queue_attributes(&url, &["MaximumMessageSize", "ContentBasedDeduplication"])
            .await
        {
            Ok(attributes) => {
                if queue.is_fifo() {
                    content_based_dedup = Some(
                        attributes
                            .get("ContentBasedDeduplication")
                            .is_some_and(|on| on == "true"),
                    );
                }
                attributes
                    .get("MaximumMessageSize")
                    .and_then(|size| size.parse().ok())
                    .unwrap_or(crate::model::rules::MAX_MESSAGE_SIZE)
            }
            // A publisher may be allowed to send but not to read attributes (an IAM policy without
            // sqs:GetQueueAttributes); SQS still enforces the queue's limit on each send. An error
            // code this crate does not know is taken alike: it is as likely a credential's.
            Err(error)
                if matches!(error, TransportError::Other { .. })
                    || error.kind() == Some(ErrorKind::AccessDenied) =>
            {
                tracing::warn!(
                    messaging.destination.name = %queue.name,
                    error = %error,
                    "cannot read the queue's MaximumMessageSize; messages are checked against 1 MiB \
                     before sending and SQS refuses any over the queue's own limit"
                );
                crate::model::rules::MAX_MESSAGE_SIZE
            }
            Err(error) => return Err(error),
        };
        Ok(Resolved {
            url,
            maximum_message_size,
            content_based_dedup,
        })
    }

    /// The queues resolved so far, by name, with their URLs.
    pub(crate) fn resolved_queues(&self) -> Vec<(String, String)> {
        let queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
        let mut resolved: Vec<(String, String)> = queues
            .iter()
            .filter_map(|(name, cell)| Some((name.clone(), cell.get()?.url.clone())))
            .collect();
        resolved.sort();
        resolved
    }
}

/// The attributes a queue is created with for its type, as declared: FIFO, and on a FIFO queue
/// content-based deduplication and high throughput.
fn type_attributes(queue: &SqsQueue) -> QueueAttributes {
    let mut attributes = QueueAttributes::new();
    if queue.is_fifo() {
        attributes.insert("FifoQueue".into(), "true".into());
        if queue.content_based_dedup {
            attributes.insert("ContentBasedDeduplication".into(), "true".into());
        }
        if queue.high_throughput {
            for (name, value) in crate::model::queue::HIGH_THROUGHPUT_FIFO {
                attributes.insert(name.into(), value.into());
            }
        }
    }
    attributes
}
