//! rust-stream: services that consume and publish Amazon SQS messages, and an in-process SQS
//! account that keeps SQS's semantics so the same service is tested without a network.
//!
//! # A tour
//!
//! - [`account`]: the in-process SQS account. Queues, visibility, receive counts, redrive,
//!   FIFO groups held while in flight, 5-minute deduplication, delays, limits and errors, all on
//!   tokio's clock so a paused test advances time at will.
//! - [`engine::transport`]: the wire-neutral requests, responses and errors every backend speaks,
//!   shaped like the SQS API.
//! - [`sqs::rules`]: the SQS limits and validators, and [`ErrorKind`](sqs::rules::ErrorKind), the
//!   error kinds both backends report.
//!
//! ```
//! use rust_stream::account::Account;
//! use rust_stream::engine::transport::{ReceiveMessage, SendMessage};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), rust_stream::engine::transport::TransportError> {
//! let account = Account::new();
//! let orders = account.create_standard_queue("orders").await?;
//! account.send_message(&orders, SendMessage::new(r#"{"id":1}"#)).await?;
//! let received = account.receive_message(&orders, ReceiveMessage::new(10)).await?;
//! account.delete_message(&orders, &received[0].receipt_handle).await?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
#![deny(unused_must_use)]
#![doc(test(attr(deny(warnings))))]

pub mod account;
pub mod engine;
pub mod sqs;
