//! Operating queues and dead letters: what an operator does by hand, as a library API over any
//! broker ([`SqsBroker::operations`](crate::SqsBroker::operations)), on the in-process account
//! and on Amazon SQS alike. The `rust-stream` command line wraps it; an HTTP face can too.
//!
//! - [`Operations::queues`]: queues by prefix with their counts and dead-letter relations.
//! - [`Operations::peek`] and [`Operations::show`]: a look at messages without taking them
//!   ([`peek`] says what that means on each backend, and when SQS refuses it).
//! - [`Operations::redrive`]: dead-letter copies back to their source queues or to a named one,
//!   FIFO-aware, rate-limited, with a dry run and an [`AuditRecord`] per message ([`redrive`]).
//! - [`Operations::create_queue`]: a queue as a [`QueueSpec`] says, with its dead-letter queue.
//! - [`Operations::purge`]: every message of a queue gone, once its name is confirmed.
//! - [`Operations::send`]: one message, with a group and a deduplication id on FIFO;
//!   [`Operations::receive`], [`Operations::delete`] and [`Operations::extend`]: messages taken
//!   with a visibility timeout, deleted and kept by receipt handle; [`Operations::queue`]: one
//!   queue's size.
//!
//! Every call goes through the broker's own transport and queue resolution (its name prefix and
//! suffix apply to the names given here), so [`SqsBroker::api_calls`](crate::SqsBroker::api_calls)
//! counts what an operation costs. The names a dead-letter copy carries
//! ([`SOURCE_QUEUE_HEADER`](crate::SOURCE_QUEUE_HEADER)) are already the broker's and are used as
//! they are.

mod messages;
pub mod peek;
mod queues;
pub mod redrive;
mod report;

pub use peek::{AttributeText, DeadLetterOrigin, Message, MessageFilter, Peek, SQS_PEEK_HOLD};
pub use queues::{DeadLetterTarget, OperationError, Operations, PeekRisk, QueueInfo, QueueSpec};
pub use redrive::{AuditRecord, CameBack, Left, Redrive, RedriveReport};
