//! What the engine did with each message, told to a recorder when a test asked for one
//! (`testing::Recorder`, feature `testing`); without one, nothing is kept.

/// How a subscription settled one attempt at a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settled {
    /// Handled: its outputs were sent and it was deleted.
    Acked,
    /// Failed; it will be attempted again.
    Retried,
    /// Moved to the dead-letter queue.
    DeadLettered,
}

/// One thing the engine did.
#[derive(Debug, Clone)]
pub(crate) enum Event {
    /// An attempt at a message ended.
    Settled {
        queue: String,
        message_id: String,
        body: String,
        settled: Settled,
    },
    /// A handler's output was sent.
    Published { queue: String, body: String },
    /// A message was moved to its dead-letter queue.
    DeadLettered {
        queue: String,
        message_id: String,
        reason: String,
    },
}

/// Where events go.
pub(crate) trait Record: Send + Sync + 'static {
    fn record(&self, event: Event);
    /// The recorder itself, so the broker hands the same one to every caller.
    fn as_any(&self) -> &dyn std::any::Any;
}
