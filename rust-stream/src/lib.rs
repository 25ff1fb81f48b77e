//! rust-stream: services that consume and publish Amazon SQS messages, and an in-process SQS
//! account that keeps SQS's semantics so the same service is tested without a network.
//!
//! # The smallest service
//!
//! ```
//! use rust_stream::prelude::*;
//!
//! #[derive(serde::Deserialize)]
//! struct Order {
//!     id: u64,
//!     customer: String,
//! }
//!
//! /// Reads `orders.fifo`: the orders of one customer are one group, handled in order.
//! struct Fulfil;
//!
//! impl Handle<Order> for Fulfil {
//!     fn handle(&self, order: &Order, _outs: &(), _ctx: &mut Context<'_>) -> impl Future<Output = Result<(), HandlerOutcome>> {
//!         tracing::info!(order.id, order.customer, "order fulfilled");
//!         ready(Ok(()))
//!     }
//! }
//!
//! fn service(broker: SqsBroker) -> impl App {
//!     RustStream::new(AppInfo::new("fulfillment", "0.1.0")).with_broker(broker, |b| {
//!         b.include(subscriber(SqsQueue::new("orders.fifo").create_if_missing(), Fulfil).build());
//!     })
//! }
//! # let _ = service(SqsBroker::in_process());
//! ```
//!
//! # A tour, bottom-up
//!
//! The crate is built in layers; each module imports only from its own layer or those listed
//! before it (the README's "Layout" table is the list a test checks).
//!
//! 0. Leaves: [`codec`] ([`Codec`], the default [`Json`]); [`outcome`] ([`HandlerOutcome`]: ack,
//!    retry, retry after a delay, dead-letter); [`state`] (shared [`State`]); [`retry`]
//!    ([`RetryPolicy`], the backoff every failure waits; on FIFO a failed message is retried in
//!    place, holding its group); [`describe`] (a message type's [`Payload`](describe::Payload));
//!    [`record`] (what the engine did with each message, for tests).
//! 1. [`model`]: Amazon SQS as data: error kinds, requests and responses, the
//!    [`rules`](model::rules) both backends honour, and [`SqsQueue`] and [`SnsTopic`], a queue and
//!    a topic as an app declares them.
//! 2. [`metrics`] and [`propagation`]: metric names, and traces that join across services
//!    (publishes carry the W3C trace context; each message's `process` span continues it, feature
//!    `opentelemetry`).
//! 3. [`transport`]: the [`Transport`](transport::Transport) seam to a queue service (and its
//!    SNS topics),
//!    [`Hooked`](transport::layer::Hooked) (a transport that changes a few calls of another, by
//!    [hooks](transport::layer::Hooks)), and the [`meter`](transport::meter) that counts every call
//!    ([`ApiCalls`]).
//! 4. The backends: [`account`], the in-process SQS account (SQS semantics on tokio's clock, for
//!    tests, with SNS topics that deliver into its queues), and [`aws`], Amazon SQS and SNS over aws-sdk-sqs and aws-sdk-sns (feature `aws`).
//! 5. The app contract: [`health`] ([`App::health`], for liveness and readiness probes),
//!    [`broker`] (the [`Broker`] trait and what it is given: [`AppInfo`], [`AppContext`]), and
//!    [`app`] ([`RustStream`], [`App::run`] until a signal or a [`ShutdownHandle`], then a
//!    graceful stop).
//! 6. The client a broker shares among publishers and consumers: queues and SNS topics resolved
//!    once, one batcher per queue or topic and action (send, delete, change visibility, publish),
//!    leases (internal).
//! 7. The handler API: [`publish`] ([`Publisher`], [`Output`]: one message or a batch, FIFO groups,
//!    deduplication ids, headers; to a queue, or to a topic with [`SqsBroker::topic`]), [`context`] ([`Context`], the message in hand), [`middleware`]
//!    (layers around handlers, at the app's or a subscription's scope) and [`handler`]
//!    (the [`Handle`] trait and [`subscriber`](fn@subscriber); the
//!    [`#[subscriber]`](macro@subscriber) attribute writes both from an `async fn`), and
//!    [`routing`]: several subscribers of one queue, each message to the one of its type.
//! 8. [`engine`]: the consumer: the app's topic subscriptions found or made at start, then receive,
//!    dispatch, settle, extend visibility.
//! 9. [`sqs`] and [`asyncapi`]: [`SqsBroker`], over the account or Amazon SQS
//!    ([`SqsBroker::from_env`], or whichever the environment names with
//!    [`SqsBroker::from_env_or_in_process`]), and the app's AsyncAPI 3.0 document
//!    ([`App::asyncapi`]).
//! 10. This page, [`prelude`], and `testing` (feature `testing`): run a service in a test and
//!     wait for what it does, in process and on a LocalStack the kit starts.
//!
//! # Guides
//!
//! The repository's `docs/` folder has a guide per topic, each opening with an example that runs
//! as a test: FIFO queues and ordering (`docs/fifo.md`), retries and dead letters
//! (`docs/retries.md`), testing a service (`docs/testing.md`), observability
//! (`docs/observability.md`), running on AWS (`docs/aws.md`), SNS topics, fan-out and filter
//! policies (`docs/sns.md`), several message types on one queue routed to their handlers
//! (`docs/routing.md`, [`routing`]), middleware around handlers (`docs/middleware.md`), and
//! performance and cost (`docs/performance.md`).
//!
//! # Features
//!
//! | Name | Description | Default |
//! | --- | --- | --- |
//! | `aws` | [`SqsBroker::from_env`], [`SqsBroker::from_env_or_in_process`] and [`SqsBroker::aws`]: Amazon SQS and SNS over aws-sdk-sqs and aws-sdk-sns | yes |
//! | `macros` | [`#[subscriber]`](macro@subscriber): handlers as plain `async fn`s | yes |
//! | `opentelemetry` | trace context across services: publishes inject the current span's OpenTelemetry context as `traceparent`/`tracestate` attributes, and `process` spans continue it, through `tracing-opentelemetry` 0.34 (opentelemetry 0.33); see [`propagation`] | no |
//! | `schemars` | JSON Schemas of message payloads in the [`asyncapi`] document, for types that implement `schemars::JsonSchema` | no |
//! | `testing` | the `testing` module: run a service in a test and wait for what it does, or call a handler with a `TestContext`; run the same test on a LocalStack it installs and starts itself (no Docker) | no |
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub, missing_debug_implementations)]
#![deny(unused_must_use)]
#![doc(test(attr(deny(warnings), allow(dead_code))))]

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
pub mod account;
pub mod app;
pub mod asyncapi;
#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub mod aws;
pub mod batch;
pub mod broker;
pub(crate) mod client;
pub mod codec;
pub mod context;
pub mod describe;
pub mod engine;
pub mod handler;
pub mod health;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod inbox;
pub mod metrics;
pub mod middleware;
pub mod model;
pub mod operations;
pub mod outbox;
pub mod outcome;
pub mod prelude;
pub mod propagation;
pub mod publish;
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub mod record;
pub mod retry;
pub mod routing;
pub mod sqs;
pub mod state;
pub mod store;
pub(crate) mod task;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod transport;
pub mod worker;

pub use app::{
    App, AppContext, AppInfo, Inspect, QueueLoad, Readiness, RunError, RustStream, Service,
    Shutdown, ShutdownHandle, DEFAULT_SHUTDOWN_TIMEOUT,
};
pub use broker::{Broker, Include};
pub use codec::{Codec, DecodeError, EncodeError, Json};
pub use context::{Context, SnsNotification};
pub use engine::settle::{
    ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER, ORIGINAL_MESSAGE_ID_HEADER, SOURCE_QUEUE_HEADER,
};
pub use handler::{subscriber, Handle, Subscriber, SubscriberBuilder};
pub use model::{SnsTopic, TopicSubscription};
pub use outcome::{HandlerOutcome, IntoOutcome};
pub use publish::{
    Outgoing, Output, Outputs, PublishError, PublishedMessage, Publisher, PARTITION_KEY_HEADER,
};
pub use retry::RetryPolicy;
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use rust_stream_macros::subscriber;
#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub use sqs::ConnectError;
pub use sqs::{ConfigError, ConfigErrors, SqsBroker, SqsQueue, RECEIVE_VISIBILITY_TIMEOUT};
pub use state::{State, States};
pub use transport::meter::ApiCalls;

// Every Rust block of the README and of the guides in `docs/` is a doc test, so what a reader
// copies compiles, and runs, as shown (blocks that need the network are `no_run`: compiled only).
// Each file needs the features its blocks use; `cargo test --workspace` turns all of them on.
#[cfg(all(doctest, feature = "aws", feature = "macros"))]
#[doc = include_str!("../../README.md")]
mod readme {}

#[cfg(all(doctest, feature = "testing", feature = "macros"))]
mod guides {
    #[doc = include_str!("../../docs/fifo.md")]
    mod fifo {}

    #[doc = include_str!("../../docs/retries.md")]
    mod retries {}

    #[doc = include_str!("../../docs/batching.md")]
    mod batching {}

    #[doc = include_str!("../../docs/exactly-once.md")]
    mod exactly_once {}

    #[doc = include_str!("../../docs/testing.md")]
    mod testing {}

    #[doc = include_str!("../../docs/observability.md")]
    mod observability {}

    #[doc = include_str!("../../docs/operations.md")]
    mod operations {}

    #[cfg(feature = "aws")]
    #[doc = include_str!("../../docs/aws.md")]
    mod aws {}

    #[doc = include_str!("../../docs/performance.md")]
    mod performance {}

    #[doc = include_str!("../../docs/sns.md")]
    mod sns {}

    #[doc = include_str!("../../docs/routing.md")]
    mod routing {}

    #[doc = include_str!("../../docs/bad-input.md")]
    mod bad_input {}

    #[doc = include_str!("../../docs/middleware.md")]
    mod middleware {}
}
