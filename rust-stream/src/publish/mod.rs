//! Publishing: a [`Publisher`] for a queue or an SNS topic, the [`Outgoing`] message with its steps
//! (`group_id`, `dedup_id`, `delay`, `header`, `header_number`, `header_binary`), sent one at a
//! time or many at once ([`Publisher::send_batch`]), and a subscriber's typed [`Output`]s.
//!
//! ```no_run
//! use rust_stream::SqsBroker;
//!
//! # async fn place(broker: SqsBroker) -> Result<(), rust_stream::PublishError> {
//! let orders = broker.publisher("orders.fifo");
//! orders.message(&serde_json::json!({"id": 1})).group_id("customer-7").send().await?;
//! # Ok(()) }
//! ```
//!
//! On a FIFO queue a message's group is its `group_id` step, else its [`PARTITION_KEY_HEADER`]
//! header, else (for a handler's output, when its input came from a FIFO queue) the input's group,
//! else `"default"`, unless the publisher or its broker refuses that with `strict_groups()`
//! ([`PublishError::NoGroup`]); its deduplication id is its `dedup_id` step, else a new UUID (unique
//! across processes), unless the queue was declared with content-based deduplication. Sends are
//! batched (up to 10 messages and 1 MiB per `SendMessageBatch`: on a standard queue after a short
//! linger, on a FIFO queue with whatever arrived while the group's previous call was out) without
//! reordering a group's messages, and every rule SQS would check is checked before the network,
//! the queue's own `MaximumMessageSize` included. With the `opentelemetry` feature every send also
//! carries the W3C trace context of the span it was made in, where the message has room for it
//! ([`propagation`](crate::propagation)).
//!
//! A publisher for a topic ([`SqsBroker::topic`](crate::SqsBroker::topic)) is the same type with
//! the same steps, its [`Destination`](crate::model::Destination) a topic rather than a queue: the same group and deduplication rules on a FIFO topic, its publishes checked
//! against every SNS rule (the topic's `MaximumMessageSize`, its attributes, FIFO or not, with
//! content-based deduplication or not, read from the topic once) before the network and sent in
//! `PublishBatch` calls of up to 10, each FIFO group in order. SNS has no delay: a `delay` step is
//! refused.
//!
//! Its parts: [`Publisher`] (its own module, `publisher`), a message's send (`send`; the message
//! itself, [`Outgoing`], stands beneath the client in [`handler`](crate::handler), where a
//! handler stages it), many at once (`batch`), [`PublishError`] (`error`), a subscriber's typed
//! [`Output`]s (`output`), and the command history ([`history`]).
//!
//! [`PARTITION_KEY_HEADER`]: crate::PARTITION_KEY_HEADER
//! [`PublishError::NoGroup`]: crate::PublishError::NoGroup

mod batch;
mod error;
pub mod history;
mod output;
mod publisher;
pub(crate) mod recorded;
mod send;

pub use crate::handler::outgoing::{Outgoing, PublishedMessage};
pub use error::PublishError;
pub use history::History;
pub use output::{Output, OutputTarget, Outputs};
pub use publisher::Publisher;

#[cfg(test)]
mod tests;
