//! What a publish can fail with: [`PublishError`].

use std::sync::Arc;

use crate::codec::EncodeError;
use crate::model::rules::ErrorKind;
use crate::model::ConfigError;
use crate::store::StoreError;
use crate::transport::TransportError;

/// Why a publish failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The value could not be encoded.
    #[error(transparent)]
    Encode(EncodeError),
    /// The message breaks an SQS rule, or SQS refused it.
    #[error("publishing to `{queue}`: {error}")]
    Rejected {
        /// The queue.
        queue: String,
        /// What SQS (or the check before it) said.
        error: TransportError,
    },
    /// A batch holds a message for another queue than its publisher's.
    #[error(
        "a batch for `{queue}` holds a message for `{message_queue}`: send that message with a \
         publisher for `{message_queue}`"
    )]
    OtherQueue {
        /// The batch's queue: that of the publisher sending it.
        queue: String,
        /// The queue the message was made for.
        message_queue: String,
    },
    /// A message for a FIFO queue names no group, and its publisher or broker refuses to send
    /// such a message to the group `"default"` (`strict_groups()`).
    #[error(
        "a message for the FIFO queue `{queue}` names no message group, and strict groups are on: \
         give it `.group_id(..)` (or a `partition_key` header); a handler's output takes its \
         input's group when the input comes from a FIFO queue"
    )]
    NoGroup {
        /// The queue.
        queue: String,
    },
    /// The broker's queue-name prefix or suffix makes the queue's name one SQS refuses; found
    /// before the network.
    #[error(transparent)]
    Config(ConfigError),
    /// A typed message for a queue routed by type has no room left for its type header: it
    /// carries 10 attributes already, the most SQS takes. Found before the network.
    #[error(
        "a message for `{queue}`, which routes by message type, carries {attributes} attributes \
         and has no room for its type header `{header}` (SQS takes at most 10): drop or merge \
         one, or set `{header}` yourself in place of one"
    )]
    NoRoomForType {
        /// The queue.
        queue: String,
        /// The type header's name.
        header: String,
        /// How many attributes the message carries.
        attributes: usize,
    },
    /// The publisher belongs to no broker.
    #[error(
        "publisher for `{queue}` is not bound to a broker: declare it as a subscriber's output, \
         or make it with `broker.publisher(..)`"
    )]
    Unbound {
        /// The queue.
        queue: String,
    },
    /// A message has a [`once`](crate::Outgoing::once) step, and its publisher keeps no command
    /// history. Found before the network.
    #[error(
        "a message for `{queue}` is sent `.once(..)`, but its publisher keeps no command history: \
         make it with `.with_history(History::new(store))`"
    )]
    NoHistory {
        /// The queue.
        queue: String,
    },
    /// A handler's output (given to [`Context::publish`](crate::Context::publish)) has a
    /// [`once`] step: outputs are sent by the engine, which does not consult a
    /// command history.
    ///
    /// [`once`]: crate::Outgoing::once
    #[error(
        "a handler's output for `{queue}` is sent `.once(..)`, which only a publisher's own sends \
         honour: drop `.once(..)` and give the subscription an inbox (`idempotent(..)`), which \
         sends a handled message's outputs once, or send it with `publisher.send()`"
    )]
    OnceInOutput {
        /// The queue.
        queue: String,
    },
    /// The command history's store failed; nothing was sent.
    #[error("publishing to `{queue}`: nothing was sent, as the command history failed: {error}")]
    History {
        /// The queue.
        queue: String,
        /// What the store said.
        error: Arc<StoreError>,
    },
    /// Another send of the message's key held it for longer than the history's
    /// [`wait`](crate::publish::History::wait); nothing was sent.
    #[error(
        "publishing to `{queue}`: another send of key `{key}` is under way (or its sender died, \
         and its lease has not passed yet); nothing was sent: try again later, or raise the \
         history's `wait`"
    )]
    InFlight {
        /// The queue.
        queue: String,
        /// The message's key.
        key: String,
    },
}

impl PublishError {
    /// How a refusal of a message for the queue or topic `name` (by SQS or SNS, or by the check
    /// before the call) is told.
    pub(crate) fn rejected(name: &str) -> impl Fn(TransportError) -> Self + '_ {
        |error| Self::Rejected {
            queue: name.to_owned(),
            error,
        }
    }

    /// The SQS error kind, when SQS (or the check before it) refused the message.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Rejected { error, .. } => error.kind(),
            _ => None,
        }
    }
}
