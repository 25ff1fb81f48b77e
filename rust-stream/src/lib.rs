//! rust-stream: services that consume and publish Amazon SQS messages, and an in-process SQS
//! account that keeps SQS's semantics so the same service is tested without a network.
//!
//! The guides go further than this page, each opening with an example; they are listed in one
//! index, [`docs/README.md`](https://github.com/rust-stream/rust-stream/blob/main/docs/README.md).
//!
//! # Build an app
//!
//! An app is a [`RustStream`] named by its [`AppInfo`], given a broker and the subscribers it
//! includes. [`App::run`] runs it until SIGINT or SIGTERM (or a [`ShutdownHandle`]), then stops
//! within one budget: nothing new starts, running handlers finish, held messages are given back.
//! The broker is an [`SqsBroker`]: [`SqsBroker::in_process`] for tests and local runs,
//! `SqsBroker::from_env` for Amazon SQS and `SqsBroker::from_env_or_in_process` for whichever
//! the environment names (feature `aws`).
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
//! # Handle messages
//!
//! A handler implements [`Handle`], or is an `async fn` under the
//! [`#[subscriber]`](macro@subscriber) attribute, which writes the impl (feature `macros`).
//! [`subscriber`](fn@subscriber) mounts it on an [`SqsQueue`], whose settings say how the queue
//! is read: concurrency, a dead-letter queue, the [`RetryPolicy`]. Beside the message a handler
//! may take the [`Context`] (ids, group, headers, attempt, publishing), [`State`] and its
//! [`Output`]s, and it settles the message with a [`HandlerOutcome`]: ack, retry, retry after a
//! delay, dead-letter. On a FIFO queue a failure is retried in place and holds its group.
//!
//! Beyond one message a call: [`batch`](handler::batch) handlers take a slice and settle each message on its
//! own; [`middleware`](handler::middleware) runs around handlers at the app's or a subscription's scope; [`routing`]
//! hands each message type of a queue to its own handler; the [`inbox`] handles each message
//! effectively once in your database's transaction ([`store`] holds its keys).
//!
//! # Publish
//!
//! [`SqsBroker::publisher`] and [`SqsBroker::topic`] give a [`Publisher`] for a queue or an SNS
//! topic ([`SnsTopic`]): one message or a batch, FIFO groups and deduplication ids, headers,
//! sends batched ten to a call. A handler publishes through its outputs or its context, so what it
//! sends goes out before its message is deleted. The [`outbox`] publishes what a transaction
//! committed. The message attributes rust-stream writes itself are in [`model::headers`].
//!
//! # Test
//!
//! The in-process [`account`] keeps SQS's semantics (visibility, receive counts, redrive, FIFO
//! groups, deduplication, SNS topics) on tokio's clock, so a test on a paused clock waits out a
//! five-minute backoff in microseconds. The `testing` module (feature `testing`) runs a service in
//! a test and waits for what it does (`TestApp`), calls a handler as a function (`TestContext`),
//! and runs one test body on both the account and a LocalStack it starts (`on_each_backend`);
//! [`record`] is what the engine did with each message.
//!
//! # Operate
//!
//! [`App::health`] reads liveness and readiness ([`health`]; over HTTP with the feature `http`);
//! [`metrics`] and the `process` span follow OpenTelemetry's messaging conventions, and
//! [`propagation`] carries a trace across services (feature `opentelemetry`);
//! [`App::asyncapi`] writes the app's [`asyncapi`] document; [`SqsBroker::api_calls`] counts the
//! SQS calls ([`ApiCalls`]); [`SqsBroker::operations`] lists queues, peeks, redrives dead letters
//! and purges ([`operations`]), as the `rust-stream` command line does.
//!
//! How the modules stand on each other is in the repository's `ARCHITECTURE.md`, whose layer
//! table a test checks.
//!
//! # Features
//!
//! | Name | Description | Default |
//! | --- | --- | --- |
//! | `aws` | `SqsBroker::from_env`, `SqsBroker::from_env_or_in_process` and `SqsBroker::aws`: Amazon SQS and SNS over aws-sdk-sqs and aws-sdk-sns | yes |
//! | `macros` | [`#[subscriber]`](macro@subscriber): handlers as plain `async fn`s | yes |
//! | `testing` | the `testing` module: run a service in a test and wait for what it does, or call a handler with a `TestContext`; run the same test on a LocalStack it installs and starts itself (no Docker) | no |
//! | `lambda` | the `lambda` module: the same app served as an AWS Lambda function (SQS and SNS events, `batchItemFailures`), over lambda_runtime and aws_lambda_events; with `testing`, `testing::lambda`, a simulator of the SQS event source mapping (and, with `http`, of the Lambda Runtime API); see `docs/lambda.md` | no |
//! | `http` | the `http` module: `/healthz`, `/readyz` and `/metrics` probes, the HTTP queue API | no |
//! | `sqlite` | the inbox, outbox and command history on SQLite (`store::sqlite`) | no |
//! | `postgres` | the same on PostgreSQL (`store::postgres`) | no |
//! | `opentelemetry` | trace context across services: publishes inject the current span's OpenTelemetry context as `traceparent`/`tracestate` attributes (and X-Ray's `AWSTraceHeader` with `SqsBroker::aws_trace_header`), `process` spans continue either, batch calls and redriven messages link to theirs, through `tracing-opentelemetry` 0.34 (opentelemetry 0.33); see [`propagation`] | no |
//! | `schemars` | JSON Schemas of message payloads in the [`asyncapi`] document, for types that implement `schemars::JsonSchema` | no |
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
pub mod broker;
pub(crate) mod client;
pub mod codec;
pub mod describe;
pub mod engine;
pub mod handler;
pub mod health;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod inbox;
#[cfg(feature = "lambda")]
#[cfg_attr(docsrs, doc(cfg(feature = "lambda")))]
pub mod lambda;
pub mod metrics;
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
pub mod subscriber;
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
pub use handler::context::{Context, SnsNotification, SqsMessage};
pub use handler::Handle;
pub use model::flow;
pub use model::headers::{
    ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER, EXTENDED_PAYLOAD_SIZE, IDEMPOTENCY_KEY_HEADER,
    LEGACY_PAYLOAD_SIZE, LINKED_TRACEPARENT_HEADER, ORIGINAL_MESSAGE_ID_HEADER,
    PARTITION_KEY_HEADER, PAYLOAD_SHA256_HEADER, SOURCE_QUEUE_HEADER, TRACEPARENT_HEADER,
    TRACESTATE_HEADER, TYPE_HEADER,
};
pub use model::{SnsTopic, TopicSubscription};
pub use outcome::{HandlerOutcome, IntoOutcome};
pub use publish::{Outgoing, Output, Outputs, PublishError, PublishedMessage, Publisher};
pub use retry::RetryPolicy;
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use rust_stream_macros::subscriber;
#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub use sqs::ConnectError;
pub use sqs::{ConfigError, ConfigErrors, SqsBroker, SqsQueue, RECEIVE_VISIBILITY_TIMEOUT};
pub use state::{State, States};
pub use subscriber::{subscriber, Subscriber, SubscriberBuilder};
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

    #[cfg(feature = "aws")]
    #[doc = include_str!("../../docs/handlers.md")]
    mod handlers {}

    #[doc = include_str!("../../docs/reliability.md")]
    mod reliability {}

    #[doc = include_str!("../../docs/benchmarks.md")]
    mod benchmarks {}

    #[doc = include_str!("../../docs/large-payloads.md")]
    mod large_payloads {}

    #[doc = include_str!("../../docs/flow-control.md")]
    mod flow_control {}

    #[doc = include_str!("../../docs/scheduling.md")]
    mod scheduling {}

    #[doc = include_str!("../../docs/README.md")]
    mod index {}
}
