//! [`StartError`]: why the consumer could not start an app's subscriptions on SQS (and SNS), as
//! [`RunError::Broker`] carries it.

use crate::app::RunError;
use crate::model::rules::ErrorKind;
use crate::model::TransportError;

/// Why [`SqsBroker`](crate::SqsBroker) could not start an app's subscriptions: what SQS or SNS
/// refused, or a queue, topic or subscription that is missing or cannot work. An app's run
/// answers it as [`RunError::Broker`], read back with
/// [`RunError::broker_error`](crate::RunError::broker_error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A queue the service needs does not exist.
    #[error(
        "queue `{queue}` does not exist; create it, or declare it with `.create_if_missing()`"
    )]
    QueueMissing {
        /// The queue.
        queue: String,
    },
    /// SQS refused a startup call for a queue.
    #[error("queue `{queue}`: {error}")]
    Queue {
        /// The queue.
        queue: String,
        /// What SQS said.
        error: TransportError,
    },
    /// An existing queue's attribute contradicts its declaration in a way that would break it.
    #[error("queue `{queue}` has {attribute}={actual:?} but is declared with {attribute}={declared}; change the queue or the declaration")]
    QueueAttribute {
        /// The queue.
        queue: String,
        /// The SQS attribute.
        attribute: &'static str,
        /// What the declaration needs.
        declared: String,
        /// What the queue has.
        actual: String,
    },
    /// The dead-letter queue takes smaller messages than the queue it serves: a copy of a large
    /// message could never be sent, and the message would be held (on FIFO, with its group) for
    /// ever.
    #[error(
        "dead-letter queue `{dead_letter}` has MaximumMessageSize {dead_letter_maximum} but queue `{queue}` takes messages \
         up to {queue_maximum} bytes; set the dead-letter queue's MaximumMessageSize to at least {queue_maximum}"
    )]
    DeadLetterTooSmall {
        /// The queue consumed.
        queue: String,
        /// Its dead-letter queue.
        dead_letter: String,
        /// The queue's `MaximumMessageSize`.
        queue_maximum: usize,
        /// The dead-letter queue's `MaximumMessageSize`.
        dead_letter_maximum: usize,
    },
    /// A FIFO queue's `RedrivePolicy` names a dead-letter queue the consumer cannot reach, and
    /// the subscription declares none: a message out of attempts could only be left to SQS's
    /// redrive, which on FIFO moves the rest of its group with it (every release raises their
    /// receive counts too).
    #[error(
        "queue `{queue}`: its RedrivePolicy names dead-letter queue `{dead_letter}`, which cannot be reached ({error}); \
         on a FIFO queue a message out of attempts must be moved by the consumer, alone: grant access to it, or \
         declare a reachable one with `.dead_letter(..)`"
    )]
    DeadLetterUnreachable {
        /// The queue consumed.
        queue: String,
        /// The dead-letter queue of its policy.
        dead_letter: String,
        /// Why it could not be reached.
        error: TransportError,
    },
    /// A topic the app's queues are subscribed to does not exist, and is not declared
    /// `create_if_missing`.
    #[error(
        "topic `{topic}` does not exist; create it, or declare it with `.create_if_missing()` \
         (`SnsTopic::new(\"{topic}\").create_if_missing()`)"
    )]
    TopicMissing {
        /// The topic.
        topic: String,
    },
    /// SNS refused a startup call for a topic (or one of its subscriptions).
    #[error("topic `{topic}`: {error}")]
    Topic {
        /// The topic.
        topic: String,
        /// What SNS said.
        error: TransportError,
    },
    /// A queue is declared `subscribed_to` a topic but is not subscribed to it, and the app may
    /// not subscribe it: the queue is not declared `create_if_missing`.
    #[error(
        "queue `{queue}` is not subscribed to topic `{topic}`: subscribe it (protocol sqs, the \
         queue's ARN as endpoint, and a queue Policy letting the topic sqs:SendMessage to it), or \
         declare the queue `.create_if_missing()` for the app to do both"
    )]
    SubscriptionMissing {
        /// The queue.
        queue: String,
        /// The topic.
        topic: String,
    },
}

impl StartError {
    /// What a failed startup call for `queue` means: the queue is missing, or SQS refused.
    pub(crate) fn from_transport(queue: String, error: TransportError) -> Self {
        if error.kind() == Some(ErrorKind::QueueDoesNotExist) {
            Self::QueueMissing { queue }
        } else {
            Self::Queue { queue, error }
        }
    }
}

impl From<StartError> for RunError {
    fn from(error: StartError) -> Self {
        Self::broker(error)
    }
}
