//! Where a message is sent: a [`Destination`], an SQS queue or an SNS topic, with the facts a
//! message's FIFO steps read of either (FIFO or not, deduplicated by content or not) and the rules
//! a message is checked against before the network.
//!
//! A publisher holds one; the client chooses the call (`SendMessageBatch` for a queue,
//! `PublishBatch` for a topic) from it, so nothing above the client asks which of the two it has
//! in order to send.

use super::error::{ErrorKind, TransportError};
use super::queue::SqsQueue;
use super::rules;
use super::sns_topic::SnsTopic;
use super::topic::{check_publish, Publish, PublishTarget, Published, MAX_MAXIMUM_MESSAGE_SIZE};
use super::wire::{SendMessage, SentMessage};

/// Where a publisher sends: an SQS queue, or an SNS topic that delivers to the queues subscribed
/// to it.
///
/// ```
/// use rust_stream::model::{Destination, SnsTopic, SqsQueue};
///
/// let orders = Destination::from(SqsQueue::new("orders.fifo"));
/// let posted = Destination::from(SnsTopic::new("posted.fifo").content_based_deduplication(true));
/// assert!(orders.is_fifo() && !orders.deduplicates_by_content());
/// assert!(posted.is_fifo() && posted.deduplicates_by_content());
/// assert_eq!(posted.name(), "posted.fifo");
/// assert!(posted.topic().is_some() && posted.queue().is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Destination {
    /// An SQS queue: messages go out in `SendMessageBatch` calls.
    Queue(SqsQueue),
    /// An SNS topic: messages go out in `PublishBatch` calls.
    Topic(SnsTopic),
}

impl Destination {
    /// The queue's or the topic's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Queue(queue) => queue.name(),
            Self::Topic(topic) => topic.name(),
        }
    }

    /// Whether it is FIFO (its name ends in `.fifo`): a message then needs a group, and a
    /// deduplication id unless [`deduplicates_by_content`](Self::deduplicates_by_content).
    pub fn is_fifo(&self) -> bool {
        match self {
            Self::Queue(queue) => queue.is_fifo(),
            Self::Topic(topic) => topic.is_fifo(),
        }
    }

    /// Whether it deduplicates messages without a deduplication id by their content, as declared.
    pub fn deduplicates_by_content(&self) -> bool {
        match self {
            Self::Queue(queue) => queue.content_based_dedup,
            Self::Topic(topic) => topic.deduplicates_by_content(),
        }
    }

    /// The queue, when it is one.
    pub fn queue(&self) -> Option<&SqsQueue> {
        match self {
            Self::Queue(queue) => Some(queue),
            Self::Topic(_) => None,
        }
    }

    /// The topic, when it is one.
    pub fn topic(&self) -> Option<&SnsTopic> {
        match self {
            Self::Topic(topic) => Some(topic),
            Self::Queue(_) => None,
        }
    }

    /// Whether `other` is the same place: of the same kind and name (settings apart).
    pub(crate) fn is_same_place(&self, other: &Destination) -> bool {
        self.topic().is_some() == other.topic().is_some() && self.name() == other.name()
    }

    /// Its name among queues and topics both: a topic's prefixed `topic:` (`:` is in no queue's
    /// name, so a queue and a topic of one name never meet).
    pub(crate) fn unique_name(&self) -> String {
        match self {
            Self::Queue(queue) => queue.name.clone(),
            Self::Topic(topic) => format!("topic:{}", topic.name),
        }
    }

    /// Checks a message against every rule of the destination as declared, before the network:
    /// SQS's for a queue (against the 1 MiB every queue could take: the queue's own
    /// `MaximumMessageSize` is checked once it is resolved); SNS's for a topic (against the largest
    /// size any topic takes, its attributes read once it is resolved), which also has no delay.
    pub(crate) fn check_message(&self, message: &SendMessage) -> Result<(), TransportError> {
        match self {
            Self::Queue(queue) => queue.check_message(message, rules::MAX_MESSAGE_SIZE, None),
            Self::Topic(topic) => {
                if message.delay_seconds.is_some() {
                    return Err(TransportError::service(
                        ErrorKind::InvalidParameter,
                        format!(
                            "topic `{}`: SNS delivers at once and takes no delay; remove the \
                             `delay(..)` step, give the subscribed queue a DelaySeconds, or write \
                             the message to an outbox, which schedules it (docs/scheduling.md)",
                            topic.name
                        ),
                    ));
                }
                let target = PublishTarget::new(&topic.name)
                    .content_based_dedup(topic.deduplicates_by_content())
                    .maximum_message_size(MAX_MAXIMUM_MESSAGE_SIZE);
                check_publish(&Publish::from(message.clone()), target).map(drop)
            }
        }
    }
}

impl From<SqsQueue> for Destination {
    fn from(queue: SqsQueue) -> Self {
        Self::Queue(queue)
    }
}

impl From<SnsTopic> for Destination {
    fn from(topic: SnsTopic) -> Self {
        Self::Topic(topic)
    }
}

/// The publish a message for a topic becomes: its body, attributes, group and deduplication id (a
/// topic has no delay, which `Destination::check_message` refuses).
impl From<SendMessage> for Publish {
    fn from(message: SendMessage) -> Self {
        Self {
            message: message.body,
            subject: None,
            message_attributes: message.message_attributes,
            group_id: message.group_id,
            dedup_id: message.dedup_id,
        }
    }
}

/// What a topic's publish answers, as a queue's send answers it: the same three facts.
impl From<Published> for SentMessage {
    fn from(published: Published) -> Self {
        Self {
            message_id: published.message_id,
            sequence_number: published.sequence_number,
            duplicate: published.duplicate,
        }
    }
}
