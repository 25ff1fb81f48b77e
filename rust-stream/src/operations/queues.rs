//! The operations' handle ([`Operations`]), their errors, and the ones on whole queues: list with
//! counts and dead-letter relations, one queue's size, create, purge, send.

use std::sync::Arc;

use serde::Serialize;

use crate::client::Client;
use crate::model::rules::{self, QueueAttribute};
use crate::model::{ConfigError, SqsQueue};
use crate::transport::{SendMessage, SentMessage, TransportError};

/// The operations of one broker: see [the module](crate::operations). Cheap to clone; made by
/// [`SqsBroker::operations`](crate::SqsBroker::operations).
#[derive(Clone)]
pub struct Operations {
    pub(super) client: Arc<Client>,
}

impl std::fmt::Debug for Operations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operations").finish_non_exhaustive()
    }
}

/// Why an operation did not run, or stopped. Each names the queue.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperationError {
    /// The backend refused or failed a call about the queue (it does not exist, SQS is out of
    /// reach, a purge came within 60 s of the last one, ...).
    #[error("{}", about(.queue, .source))]
    Queue {
        /// The queue.
        queue: String,
        /// What the backend answered.
        #[source]
        source: TransportError,
    },
    /// The backend refused or failed the listing of queues.
    #[error("listing the queues{}: {source}", prefixed(.prefix))]
    Listing {
        /// The names' prefix listed.
        prefix: String,
        /// What the backend answered.
        #[source]
        source: TransportError,
    },
    /// The broker cannot name the queue (its prefix or suffix makes a name SQS refuses).
    #[error("queue `{queue}`: {source}")]
    Naming {
        /// The queue as given.
        queue: String,
        /// Why.
        #[source]
        source: Box<ConfigError>,
    },
    /// A peek on SQS that would change what it looks at: see [`PeekRisk`].
    #[error(
        "peek refused on queue `{queue}`: {risk}; pass `force` (`--force` on the command line) to \
         peek anyway"
    )]
    PeekRefused {
        /// The queue.
        queue: String,
        /// What the peek would do to it.
        risk: PeekRisk,
    },
    /// A purge whose confirmation is not the queue's name.
    #[error(
        "purge of queue `{queue}` not confirmed{}: pass the queue's name again \
         (`--yes-i-mean {queue}`) to delete every message in it",
        given_note(.given)
    )]
    PurgeNotConfirmed {
        /// The queue.
        queue: String,
        /// What was passed instead of its name.
        given: String,
    },
    /// A delete by filter with no filter: every message would go; a purge does that, with its
    /// confirmation.
    #[error(
        "delete from queue `{queue}` chooses no message: name the messages (`--id ID`, or a \
         filter); to delete every message, purge the queue"
    )]
    NothingChosen {
        /// The queue.
        queue: String,
    },
    /// No message of this id was found in the queue.
    #[error(
        "no message `{message_id}` in queue `{queue}` (deleted, moved, or not visible to a peek); \
         list its messages with a peek"
    )]
    MessageNotFound {
        /// The queue.
        queue: String,
        /// The id looked for.
        message_id: String,
    },
    /// A redrive rate that is not a positive number of messages a second.
    #[error(
        "redrive from `{queue}`: rate {rate} is not a positive number of messages a second; pass \
         e.g. 50, or no rate for as fast as the queue takes them"
    )]
    InvalidRate {
        /// The dead-letter queue.
        queue: String,
        /// The rate given.
        rate: f64,
    },
    // Not `Send`: a public item of that name makes rustc write the marker trait as
    // `std::marker::Send` in the errors of every crate that depends on this one.
    /// A message SQS refused, or that was refused before any call because SQS would (a FIFO
    /// queue's message without a group, an empty body, ...).
    #[error("send to queue `{queue}`: {source}")]
    SendRefused {
        /// The queue.
        queue: String,
        /// Why.
        #[source]
        source: TransportError,
    },
}

/// What a peek on SQS would do to the queue it looks at, and so why it is refused unless forced.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PeekRisk {
    /// A FIFO queue: the receive a peek is on SQS holds each peeked message's group (its later
    /// messages wait while the peek runs) and raises each peeked message's receive count.
    Fifo,
    /// A queue with a `RedrivePolicy`: each peek raises the peeked messages' receive counts
    /// toward its `maxReceiveCount`, and a message past it is moved to the dead-letter queue by
    /// the peek's own receive.
    RedrivePolicy {
        /// The policy's dead-letter queue.
        dead_letter_queue: String,
        /// Its `maxReceiveCount`.
        max_receive_count: u32,
    },
}

impl std::fmt::Display for PeekRisk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Fifo => f.write_str(
                "it is a FIFO queue, and SQS has no peek: a peek is a receive, which holds each \
                 peeked message's group while it runs and raises the message's receive count",
            ),
            Self::RedrivePolicy {
                dead_letter_queue,
                max_receive_count,
            } => write!(
                f,
                "it has a RedrivePolicy (to `{dead_letter_queue}` after {max_receive_count} \
                 receives), and SQS has no peek: a peek is a receive, so each one raises the \
                 peeked messages' receive counts toward {max_receive_count} and can move a \
                 message to `{dead_letter_queue}`"
            ),
        }
    }
}

/// The prefix of a listing, when there is one.
fn prefixed(prefix: &str) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!(" whose names start with `{prefix}`")
    }
}

/// A backend's answer, with the queue's name in front unless the answer names it already.
fn about(queue: &str, source: &TransportError) -> String {
    let answer = source.to_string();
    if answer.contains(&format!("`{queue}`")) {
        answer
    } else {
        format!("queue `{queue}`: {answer}")
    }
}

/// What a purge was confirmed with, when it was something.
fn given_note(given: &str) -> String {
    if given.is_empty() {
        String::new()
    } else {
        format!(" (the confirmation was `{given}`, not the queue's name)")
    }
}

/// A queue as [`Operations::queues`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct QueueInfo {
    /// Its name.
    pub name: String,
    /// Its URL.
    pub url: String,
    /// Whether it is a FIFO queue.
    pub fifo: bool,
    /// `ApproximateNumberOfMessages`: receivable now.
    pub visible: u64,
    /// `ApproximateNumberOfMessagesNotVisible`: received, not yet deleted.
    pub in_flight: u64,
    /// `ApproximateNumberOfMessagesDelayed`.
    pub delayed: u64,
    /// Where its `RedrivePolicy` moves a message, and after how many receives.
    pub dead_letter: Option<DeadLetterTarget>,
    /// The listed queues whose `RedrivePolicy` names this one: the sources of a dead-letter
    /// queue.
    pub dead_letter_sources: Vec<String>,
}

/// How [`Operations::create_queue`] makes a queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct QueueSpec {
    fifo: bool,
    content_based_dedup: bool,
    high_throughput: bool,
    dead_letter: Option<(String, u32)>,
    visibility_timeout: Option<std::time::Duration>,
}

impl QueueSpec {
    /// A standard queue with SQS's defaults (FIFO anyway when its name ends in `.fifo`).
    pub fn new() -> Self {
        Self::default()
    }

    /// A FIFO queue (its name must end in `.fifo`).
    pub fn fifo(mut self) -> Self {
        self.fifo = true;
        self
    }

    /// FIFO deduplication by the body's SHA-256 when a send gives no deduplication id.
    pub fn content_based_dedup(mut self) -> Self {
        self.content_based_dedup = true;
        self
    }

    /// FIFO high throughput: `DeduplicationScope=messageGroup` and
    /// `FifoThroughputLimit=perMessageGroupId` (the quota per message group, deduplication
    /// within it).
    pub fn high_throughput(mut self) -> Self {
        self.high_throughput = true;
        self
    }

    /// A `RedrivePolicy`: SQS moves a message to `queue` on its receive after
    /// `max_receive_count` receives.
    pub fn dead_letter(mut self, queue: impl Into<String>, max_receive_count: u32) -> Self {
        self.dead_letter = Some((queue.into(), max_receive_count));
        self
    }

    /// The queue's `VisibilityTimeout` (whole seconds).
    pub fn visibility_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.visibility_timeout = Some(timeout);
        self
    }
}

/// A queue's `RedrivePolicy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterTarget {
    /// The dead-letter queue's name.
    pub queue: String,
    /// The receives after which SQS moves a message there.
    pub max_receive_count: u32,
}

/// What a queue's attributes say about its dead-letter queue.
pub(super) fn redrive_target(
    attributes: &crate::transport::QueueAttributes,
) -> Option<DeadLetterTarget> {
    let value = attributes.get("RedrivePolicy")?;
    match rules::parse_queue_attribute("RedrivePolicy", value) {
        Ok(QueueAttribute::RedrivePolicy(Some(policy))) => Some(DeadLetterTarget {
            queue: policy.target_name().to_owned(),
            max_receive_count: policy.max_receive_count,
        }),
        _ => None,
    }
}

/// A count attribute, 0 when absent.
pub(super) fn count(attributes: &crate::transport::QueueAttributes, name: &str) -> u64 {
    attributes
        .get(name)
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// The queue name a URL ends in.
fn name_of(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

impl Operations {
    /// The operations of the broker whose client this is.
    pub(crate) fn new(client: Arc<Client>) -> Self {
        Self { client }
    }

    /// `queue` as the broker names it (its prefix and suffix).
    pub(super) fn named(&self, queue: &str) -> Result<String, OperationError> {
        self.client
            .naming()
            .name(queue)
            .map_err(|source| OperationError::Naming {
                queue: queue.to_owned(),
                source: Box::new(source),
            })
    }

    /// The URL of a queue named as the broker names it, resolved once by the broker.
    pub(super) async fn url_of(&self, name: &str) -> Result<String, OperationError> {
        self.client
            .resolved(&SqsQueue::new(name))
            .await
            .map(|resolved| resolved.url)
            .map_err(|source| at(name, source))
    }

    /// The queues whose names start with `prefix` (after the broker's own prefix), sorted by
    /// name, each with its counts, its dead-letter queue and, for a dead-letter queue, the listed
    /// queues that name it. One `ListQueues` and one `GetQueueAttributes` a queue; a queue
    /// deleted between the two is left out.
    ///
    /// # Errors
    ///
    /// [`OperationError::Listing`] when the backend refuses the listing;
    /// [`OperationError::Queue`] when it refuses a queue's attributes.
    pub async fn queues(&self, prefix: &str) -> Result<Vec<QueueInfo>, OperationError> {
        let prefix = format!("{}{prefix}", self.client.naming().prefix);
        let urls = self
            .client
            .transport()
            .list_queues(&prefix)
            .await
            .map_err(|source| OperationError::Listing {
                prefix: prefix.clone(),
                source,
            })?;
        let mut queues = Vec::with_capacity(urls.len());
        for url in urls {
            match self.describe(url).await {
                Ok(queue) => queues.push(queue),
                // Deleted between the listing and its attributes.
                Err(OperationError::Queue { source, .. })
                    if source.kind() == Some(rules::ErrorKind::QueueDoesNotExist) => {}
                Err(error) => return Err(error),
            }
        }
        let sources: Vec<(String, String)> = queues
            .iter()
            .filter_map(|queue| {
                Some((
                    queue.dead_letter.as_ref()?.queue.clone(),
                    queue.name.clone(),
                ))
            })
            .collect();
        for (target, source) in sources {
            if let Some(dlq) = queues.iter_mut().find(|queue| queue.name == target) {
                dlq.dead_letter_sources.push(source);
            }
        }
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(queues)
    }

    /// One queue with its counts (its size: visible, in flight and delayed messages) and its
    /// dead-letter queue; its [`dead_letter_sources`](QueueInfo::dead_letter_sources) are what
    /// only a listing finds, and are empty here.
    ///
    /// # Errors
    ///
    /// [`OperationError::Queue`] when it does not exist or its attributes cannot be read.
    pub async fn queue(&self, queue: &str) -> Result<QueueInfo, OperationError> {
        let name = self.named(queue)?;
        let url = self.url_of(&name).await?;
        self.describe(url).await
    }

    /// What a queue's attributes say of it.
    async fn describe(&self, url: String) -> Result<QueueInfo, OperationError> {
        let name = name_of(&url).to_owned();
        let attributes = self
            .client
            .transport()
            .get_queue_attributes(&url, &["All"])
            .await
            .map_err(|source| at(&name, source))?;
        Ok(QueueInfo {
            fifo: rules::is_fifo_name(&name),
            visible: count(&attributes, "ApproximateNumberOfMessages"),
            in_flight: count(&attributes, "ApproximateNumberOfMessagesNotVisible"),
            delayed: count(&attributes, "ApproximateNumberOfMessagesDelayed"),
            dead_letter: redrive_target(&attributes),
            dead_letter_sources: Vec::new(),
            name,
            url,
        })
    }

    /// Creates `queue` as `spec` says (FIFO when its name ends in `.fifo`), or finds it when it
    /// exists with the same attributes; returns its URL. A dead-letter queue it names must exist.
    ///
    /// # Errors
    ///
    /// [`OperationError::Queue`] when SQS refuses the name or the attributes (a `.fifo` name
    /// without FIFO, an existing queue with other attributes, a dead-letter queue that does not
    /// exist or is of the other type).
    pub async fn create_queue(
        &self,
        queue: &str,
        spec: &QueueSpec,
    ) -> Result<String, OperationError> {
        let name = self.named(queue)?;
        let mut attributes = crate::transport::QueueAttributes::new();
        if spec.fifo || rules::is_fifo_name(&name) {
            attributes.insert("FifoQueue".into(), "true".into());
        }
        if spec.content_based_dedup {
            attributes.insert("ContentBasedDeduplication".into(), "true".into());
        }
        if spec.high_throughput {
            for (name, value) in crate::model::queue::HIGH_THROUGHPUT_FIFO {
                attributes.insert(name.into(), value.into());
            }
        }
        if let Some(timeout) = spec.visibility_timeout {
            attributes.insert("VisibilityTimeout".into(), timeout.as_secs().to_string());
        }
        if let Some((dead_letter, max_receive_count)) = &spec.dead_letter {
            let dead_letter = self.named(dead_letter)?;
            let url = self
                .client
                .transport()
                .get_queue_url(&dead_letter)
                .await
                .map_err(|source| at(&dead_letter, source))?;
            let arn = self
                .client
                .transport()
                .get_queue_attributes(&url, &["QueueArn"])
                .await
                .map_err(|source| at(&dead_letter, source))?
                .get("QueueArn")
                .cloned()
                .unwrap_or_default();
            let policy = serde_json::json!({
                "deadLetterTargetArn": arn,
                "maxReceiveCount": max_receive_count,
            });
            attributes.insert("RedrivePolicy".into(), policy.to_string());
        }
        let url = self
            .client
            .transport()
            .create_queue(&name, attributes)
            .await
            .map_err(|source| at(&name, source))?;
        tracing::info!(messaging.destination.name = %name, operation = "create", "queue created");
        Ok(url)
    }

    /// Deletes every message of `queue`, in flight or not, once `confirmation` is the queue's
    /// name again (as given, before the broker's prefix): a purge cannot be undone.
    ///
    /// # Errors
    ///
    /// [`OperationError::PurgeNotConfirmed`] before any call when the confirmation differs;
    /// [`OperationError::Queue`] when the queue does not exist or was purged less than 60 s ago
    /// (`PurgeQueueInProgress`).
    pub async fn purge(&self, queue: &str, confirmation: &str) -> Result<(), OperationError> {
        if confirmation != queue {
            return Err(OperationError::PurgeNotConfirmed {
                queue: queue.to_owned(),
                given: confirmation.to_owned(),
            });
        }
        let name = self.named(queue)?;
        let url = self.url_of(&name).await?;
        self.client
            .transport()
            .purge_queue(&url)
            .await
            .map_err(|source| at(&name, source))?;
        tracing::warn!(
            messaging.destination.name = %name,
            operation = "purge",
            "queue purged: every message in it deleted"
        );
        Ok(())
    }

    /// Sends one message to `queue` through the broker's sender. A FIFO queue's message needs a
    /// group; without a deduplication id, one the queue does not deduplicate by content gets a
    /// fresh one, as the library's publisher gives it (each send is a message of its own).
    ///
    /// # Errors
    ///
    /// [`OperationError::SendRefused`] for a message SQS would refuse, or its refusal;
    /// [`OperationError::Queue`] when a FIFO queue's attributes cannot be read.
    pub async fn send(
        &self,
        queue: &str,
        mut message: SendMessage,
    ) -> Result<SentMessage, OperationError> {
        let name = self.named(queue)?;
        self.fresh_dedup_ids(&name, std::slice::from_mut(&mut message))
            .await?;
        self.client
            .send(&SqsQueue::new(&name), message)
            .await
            .map_err(|source| OperationError::SendRefused {
                queue: name,
                source,
            })
    }

    /// Sends `messages` to `queue` through the broker's batcher, in `SendMessageBatch` calls of
    /// up to 10, and answers each in the order given: a message's id, or why it was not stored
    /// (SQS's refusal, or on a FIFO queue an earlier message of its group that was). Others may
    /// be stored beside a failed one: each answer is its message's own. On a FIFO queue that does
    /// not deduplicate by content, a message without a deduplication id gets a fresh one.
    ///
    /// # Errors
    ///
    /// [`OperationError::Naming`] for a name SQS would refuse, before any call; the queue's
    /// failure when its attributes cannot be read (a FIFO queue's messages without ids).
    pub async fn send_many(
        &self,
        queue: &str,
        mut messages: Vec<SendMessage>,
    ) -> Result<Vec<Result<SentMessage, OperationError>>, OperationError> {
        let name = self.named(queue)?;
        self.fresh_dedup_ids(&name, &mut messages).await?;
        let target = SqsQueue::new(&name);
        Ok(self
            .client
            .send_many(&target, messages)
            .await
            .into_iter()
            .map(|answer| {
                answer.map_err(|source| OperationError::SendRefused {
                    queue: name.clone(),
                    source,
                })
            })
            .collect())
    }

    /// On a FIFO queue that does not deduplicate by content, a fresh deduplication id for each
    /// message that has none, as the library's publisher gives.
    async fn fresh_dedup_ids(
        &self,
        name: &str,
        messages: &mut [SendMessage],
    ) -> Result<(), OperationError> {
        if !rules::is_fifo_name(name) || messages.iter().all(|m| m.dedup_id.is_some()) {
            return Ok(());
        }
        let resolved = self
            .client
            .resolved(&SqsQueue::new(name))
            .await
            .map_err(|source| at(name, source))?;
        if resolved.content_based_dedup == Some(false) {
            for message in messages.iter_mut().filter(|m| m.dedup_id.is_none()) {
                message.dedup_id = Some(uuid::Uuid::new_v4().to_string());
            }
        }
        Ok(())
    }
}

/// A backend's answer about `queue`, as an operation's error.
pub(super) fn at(queue: &str, source: TransportError) -> OperationError {
    OperationError::Queue {
        queue: queue.to_owned(),
        source,
    }
}
