//! The third seed's HTTP queue API (FMQ's routes, parameters, payloads and status codes), served
//! over any [`SqsBroker`]: the in-process account, Amazon SQS or LocalStack, through
//! [`broker.operations()`](crate::operations). `rust-stream serve` runs it; a service embeds
//! [`QueueApi::router`] beside its own routes.
//!
//! ```no_run
//! use rust_stream::http::queue::QueueApi;
//! use rust_stream::SqsBroker;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let broker = SqsBroker::from_env_or_in_process().await?;
//! let api = QueueApi::new(&broker)
//!     .tokens(["a-long-random-token"])
//!     .queue_prefix("jobs-")
//!     .allowed_origins(["https://ops.example.com"]);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! api.serve(listener).await?;
//! # Ok(())
//! # }
//! ```
//!
//! | route | answers |
//! | --- | --- |
//! | `POST /queue/{queue}/push(?hashCode=H&expiresIn=S)` | one message (a JSON value) or one a element (a JSON array): `201` `{"ids": [..]}`; `204` when `hashCode` was pushed within its `expiresIn` (300 s) |
//! | `POST /queue/{queue}/pop(?expiresIn=S)` | `200` one `{"_id", "payload", "attempts", "expiryDate"}`, invisible for `expiresIn` (300 s); `204` when none |
//! | `POST /queue/{queue}/pop/{amount}(?expiresIn=S)` | `200` up to `amount` of them, as an array; `204` when none |
//! | `POST /queue/{queue}/ack` with `{"id": [..]}` | `204`: each deleted |
//! | `POST /queue/{queue}/ping(?expiresIn=S)` with `{"id": [..]}` | `200` `{"expiryDate"}`: each invisible for `expiresIn` (300 s) more |
//! | `GET /queue/{queue}/peek(?filter=F&amount=N&offset=N)` | `200` up to `amount` (100) after `offset` that `filter` ([`filter`]) matches, taking none; `204` when none |
//! | `GET /queue/{queue}/size` | `200` `{"size"}`: visible, in flight and delayed |
//! | `GET /healthz` | `200` `{"status": "ok"}`, without a token |
//!
//! **Who may call.** With [`tokens`](QueueApi::tokens), every
//! route but `/healthz` takes `authorization: Bearer <token>` (any of them: rotate by serving
//! the old and the new together); without, anyone who reaches the port may push, pop and ack
//! every queue the server's credentials reach, so `rust-stream serve` then listens on
//! `127.0.0.1` only. A request whose `Origin` is not one of the
//! [`allowed_origins`](QueueApi::allowed_origins) is refused `403` before any work, and a `POST`
//! with a body must be `application/json` (`415` otherwise), which makes a browser ask first
//! (a preflight, answered as CORS says): a page on another origin cannot make an operator's
//! browser push, pop or ack. [`queue_prefix`](QueueApi::queue_prefix) and
//! [`queues`](QueueApi::queues) confine the API to a namespace: a name outside it answers `404`
//! without a call.
//!
//! **Bounds** ([`Limits`]): the body's bytes (`413`), the messages of a push and the amount of a
//! pop (`400`), a `hashCode`'s length and duration (`400`), requests served at once (`503`
//! beyond, at once) and a request's deadline (`503`), each refusal naming its setting in
//! `limit`; and what the server holds in memory ([`QueueApi::in_memory`]): the `hashCode`s of
//! its own history, by count as well as by time (past the bound the oldest is forgotten, see
//! [`Limits::hash_codes`]), the queues it has created or found, and, without an
//! [`id_key`](QueueApi::id_key), the receipt handles of what it popped.
//!
//! Beyond the seed's codes: `400` for a request at fault (a body or parameter that does not parse,
//! an unsupported filter operator, a queue name SQS refuses, a bound passed) and `404` for an
//! `ack` or `ping` naming ids this server did not hand out, or a queue outside its namespace;
//! `401`, `403` and `415` as above; `409` for a peek on SQS without
//! [`peek_on_sqs`](QueueApi::peek_on_sqs); `413` for a body over its bound; `500` when the
//! backend fails; `503` when busy, past the deadline, or while another push of the same
//! `hashCode` is still under way after the history's wait. Each carries
//! `{"error": "what was wrong and what to do"}`. Every refusal before a call is counted by reason
//! (`rust_stream.http.refused`); every ack is logged with its queue and message id, and a pop
//! handing out a message's last attempt before the dead queue is logged as a warning.
//!
//! **The dead queue.** A push to a queue that does not exist creates it, and `<queue>-dead`
//! beside it, with SQS's `RedrivePolicy` (`maxReceiveCount` 5): the receive after a message's
//! fifth pop moves it to `<queue>-dead` atomically, on SQS as on the in-process account, and a
//! server that dies mid-request never holds a message SQS does not. A queue that already exists
//! is served as it is (without a policy, nothing moves).
//!
//! **Ids.** With an [`id_key`](QueueApi::id_key) shared by the replicas, a popped message's
//! `_id` carries its receipt handle, signed, so its `ack` and `ping` work on any replica (and
//! `messageId` beside it is its SQS message id). Without, `_id` is the SQS message id and this
//! server keeps the receipt handle it was popped with, so an `ack` or `ping` goes to the server
//! that popped it (replicas then need sticky sessions for those two routes; pop, push, peek and
//! size go anywhere).
//!
//! **Command history.** A push's `hashCode` is kept in the project's command history
//! ([`History`], per queue: the key is the queue and the hash), the one publishers'
//! [`once`](crate::publish::Outgoing::once) sends use. By default it is a
//! [`MemoryStore`] of this server's; [`QueueApi::history`] gives it a store replicas share
//! (`PostgresStore`), so a hash pushed through one replica is ignored by the others within its
//! duration. The server's own holds at most [`Limits::hash_codes`] hashes, forgetting the
//! oldest first. A push reserves the hash, sends, then confirms the hash for its `expiresIn`, or
//! frees it when the send failed, so the client's retry is stored. A push finding the hash pushed
//! answers `204`; one finding it held by another push under way waits for that push's outcome
//! (the history's [`wait`](crate::publish::History::wait), 5 s): `204` once it was stored,
//! stored itself when that push failed, `503` when it is still under way. A server killed
//! mid-push leaves the hash pending until the history's lease (60 s by default) passes.
//!
//! The files: `access.rs` (tokens, origins, content type, CORS, the counts), `names.rs` (the
//! namespace), `api.rs` (the settings, [`Limits`] and the state the routes share), `routes.rs`
//! (the handlers), `handles.rs` (the receipt handles kept for ack and ping), `params.rs` (query
//! parameters), `error.rs` (the answers' errors), [`filter`] (peek's filter); this file builds
//! the router from them.
//!
//! [`SqsBroker`]: crate::SqsBroker
//! [`History`]: crate::publish::History
//! [`MemoryStore`]: crate::store::memory::MemoryStore

mod access;
mod api;
mod error;
pub mod filter;
mod handles;
mod names;
mod params;
mod routes;

use std::sync::Arc;

use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{BoxError, Router};
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::ServiceBuilder;

pub use api::{InMemory, Limits, QueueApi, DEFAULT_PEEK_AMOUNT, HISTORY_LEASE, MAX_ATTEMPTS};
pub use filter::FilterError;
pub use names::DEAD_QUEUE_SUFFIX;
pub use params::DEFAULT_EXPIRES_IN;

use error::refusal;

impl QueueApi {
    /// The routes, with the access checks, CORS, the bounds and the request metric, to serve or
    /// to merge into a service's own router.
    pub fn router(self) -> Router {
        let access = Arc::new(self.inner.access.clone());
        let limits = self.inner.limits;
        let bounded = ServiceBuilder::new()
            .layer(HandleErrorLayer::new(overloaded))
            .load_shed()
            // One semaphore for every route (`Router::layer` wraps each route on its own).
            .layer(GlobalConcurrencyLimitLayer::new(
                limits.concurrent_requests.max(1),
            ))
            .timeout(limits.request_deadline);
        Router::new()
            .route("/queue/{queue}/push", post(routes::push))
            .route("/queue/{queue}/pop", post(routes::pop_one))
            .route("/queue/{queue}/pop/{amount}", post(routes::pop_many))
            .route("/queue/{queue}/ack", post(routes::ack))
            .route("/queue/{queue}/ping", post(routes::ping))
            .route("/queue/{queue}/peek", get(routes::peek))
            .route("/queue/{queue}/size", get(routes::size))
            .fallback(routes::not_found)
            .with_state(self)
            .layer(DefaultBodyLimit::max(limits.body_bytes))
            .layer(bounded)
            .route("/healthz", get(routes::healthz))
            .layer(axum::middleware::from_fn_with_state(access, access::guard))
    }

    /// Serves the routes on `listener` until the process ends (or the future is dropped).
    ///
    /// # Errors
    ///
    /// When accepting connections fails for good.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }
}

/// The answer of a request the bounds stopped: busy (`503` at once, with `Retry-After`) or past
/// its deadline (`503`).
async fn overloaded(error: BoxError) -> Response {
    let (reason, limit, why) = if error.is::<tower::timeout::error::Elapsed>() {
        (
            "deadline",
            "REQUEST_DEADLINE_SECONDS",
            "the request took longer than this server's deadline (REQUEST_DEADLINE_SECONDS) and \
             was stopped: what it popped is visible again at its expiry; retry",
        )
    } else if error.is::<tower::load_shed::error::Overloaded>() {
        (
            "busy",
            "MAX_CONCURRENT_REQUESTS",
            "the server is serving as many requests as it takes at once \
             (MAX_CONCURRENT_REQUESTS): retry shortly",
        )
    } else {
        ("limit", "", "the request was stopped")
    };
    crate::metrics::http_refused(reason);
    let mut response = refusal(
        StatusCode::SERVICE_UNAVAILABLE,
        Some(limit).filter(|limit| !limit.is_empty()),
        why,
    );
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}
