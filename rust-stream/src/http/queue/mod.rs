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
//! pop (`400`), a `hashCode`'s duration, requests served at once (`503` beyond, at once) and a
//! request's deadline (`503`), each refusal naming its setting in `limit`.
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
//! duration. A push reserves the hash, sends, then confirms the hash for its `expiresIn`, or frees
//! it when the send failed, so the client's retry is stored. A push finding the hash pushed
//! answers `204`; one finding it held by another push under way waits for that push's outcome
//! (the history's [`wait`](History::wait), 5 s): `204` once it was stored, stored itself when
//! that push failed, `503` when it is still under way. A server killed mid-push leaves the hash
//! pending until the history's lease (60 s by default) passes.
//!
//! The files: `access.rs` (tokens, origins, content type, CORS, the counts), `names.rs` (the
//! namespace), `limits` here ([`Limits`]), `routes.rs` (the handlers), `handles.rs` (the
//! receipt handles kept for ack and ping), `params.rs` (query parameters), `error.rs` (the
//! answers' errors), [`filter`] (peek's filter).

mod access;
mod error;
pub mod filter;
mod handles;
mod names;
mod params;
mod routes;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{BoxError, Router};
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::ServiceBuilder;

pub use filter::FilterError;

use access::Access;
use error::{refusal, ApiError};
use handles::Handles;
use names::Namespace;
use params::missing;

use crate::operations::{Operations, QueueSpec};
use crate::publish::History;
use crate::sqs::SqsBroker;
use crate::store::memory::MemoryStore;
use crate::transport::SendMessage;

/// What a queue's dead queue is called: the queue's name with this after it.
pub const DEAD_QUEUE_SUFFIX: &str = "-dead";

/// The pops after which a message moves to the dead queue (the seed's 5 attempts).
pub const MAX_ATTEMPTS: u32 = 5;

/// `expiresIn` when a request gives none: 300 s, as the seed.
pub const DEFAULT_EXPIRES_IN: Duration = Duration::from_secs(300);

/// `amount` of a peek that gives none.
pub const DEFAULT_PEEK_AMOUNT: usize = 100;

/// How long a push holds its `hashCode` while it sends, in the history [`QueueApi::new`] makes: a
/// server that dies mid-push frees it then.
pub const HISTORY_LEASE: Duration = Duration::from_secs(60);

/// The server's bounds on what one request may ask and on its own memory; each refusal names
/// its setting (the variable `rust-stream serve` reads it from). [`Limits::default`] holds the
/// defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// `MAX_BODY_BYTES`: a request's body, in bytes (`413` beyond). Default 1 MiB: a push of
    /// 1,000 messages of 1 KiB.
    pub body_bytes: usize,
    /// `MAX_PUSH_ITEMS`: the messages of one push (`400` beyond). Default 1,000 (100 calls
    /// of `SendMessageBatch`' 10 at most).
    pub push_items: usize,
    /// `MAX_POP_AMOUNT`: the `amount` of one pop (`400` beyond). Default 100.
    pub pop_amount: usize,
    /// `MAX_HASH_DURATION`: the longest `expiresIn` of a push with a `hashCode`, so the
    /// history's keys leave memory (`400` beyond). Default 24 h.
    pub hash_duration: Duration,
    /// `MAX_CONCURRENT_REQUESTS`: requests served at once; one more is refused `503` at once
    /// rather than queued. Default 256.
    pub concurrent_requests: usize,
    /// `REQUEST_DEADLINE_SECONDS`: how long a request may take before it is answered `503`
    /// (and its calls dropped). Default 30 s, longer than a pop's wait (≤ 20 s) and its calls.
    pub request_deadline: Duration,
    /// `MAX_ENSURED_QUEUES`: the queue names a server remembers having created or found (past
    /// it, it forgets them all and looks again). Default 10,000.
    pub ensured_queues: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_bytes: 1024 * 1024,
            push_items: 1_000,
            pop_amount: 100,
            hash_duration: Duration::from_secs(24 * 3600),
            concurrent_requests: 256,
            request_deadline: Duration::from_secs(30),
            ensured_queues: 10_000,
        }
    }
}

/// The seed's HTTP queue API over one broker: see [the module](self). Cheap to clone.
#[derive(Clone)]
pub struct QueueApi {
    inner: Arc<Inner>,
}

struct Inner {
    operations: Operations,
    history: History,
    access: Access,
    namespace: Namespace,
    limits: Limits,
    peek_on_sqs: bool,
    pop_wait: Duration,
    /// Receipt handles of the messages this server popped.
    handles: Handles,
    /// Queues this server created or found, with their dead queues.
    ensured: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for QueueApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueApi")
            .field("allowed_origins", &self.inner.access.origins)
            .field("tokens", &self.inner.access.tokens.len())
            .field("queue_prefix", &self.inner.namespace.prefix)
            .field("queues", &self.inner.namespace.allowed)
            .field("limits", &self.inner.limits)
            .field("peek_on_sqs", &self.inner.peek_on_sqs)
            .field("pop_wait", &self.inner.pop_wait)
            .field("signed_ids", &self.inner.handles.is_signed())
            .finish_non_exhaustive()
    }
}

impl QueueApi {
    /// The API over `broker`'s queues (its name prefix and suffix apply), with the command
    /// history in a [`MemoryStore`] of its own (lease [`HISTORY_LEASE`]), no token required,
    /// no CORS origin allowed (a request with an `Origin` is refused), every queue name served,
    /// the default [`Limits`], peeks on SQS refused, and pops that wait up to 1 s for a message.
    pub fn new(broker: &SqsBroker) -> Self {
        Self {
            inner: Arc::new(Inner {
                operations: broker.operations(),
                history: History::new(MemoryStore::new()).lease(HISTORY_LEASE),
                access: Access::default(),
                namespace: Namespace::default(),
                limits: Limits::default(),
                peek_on_sqs: false,
                pop_wait: Duration::from_secs(1),
                handles: Handles::default(),
                ensured: Mutex::new(HashSet::new()),
            }),
        }
    }

    fn configure(mut self, change: impl FnOnce(&mut Inner)) -> Self {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => change(inner),
            // Configured after a clone: the clone keeps its own settings.
            None => {
                let inner = &*self.inner;
                let mut copy = Inner {
                    operations: inner.operations.clone(),
                    history: inner.history.clone(),
                    access: inner.access.clone(),
                    namespace: inner.namespace.clone(),
                    limits: inner.limits,
                    peek_on_sqs: inner.peek_on_sqs,
                    pop_wait: inner.pop_wait,
                    handles: inner.handles.fresh(),
                    ensured: Mutex::new(HashSet::new()),
                };
                change(&mut copy);
                self.inner = Arc::new(copy);
            }
        }
        self
    }

    /// Keeps pushes' `hashCode`s in `history` instead of this server's memory: a
    /// `History::new(PostgresStore)` that replicas share makes a hash pushed through one ignored
    /// by all within its duration. Its [`lease`](History::lease) is how long a push holds a hash
    /// while it sends (keep it longer than a push takes; [`HISTORY_LEASE`] is the default's);
    /// its [`wait`](History::wait) how long a push finding the hash held by another waits for
    /// that push's outcome before answering `503`. A store that cannot be reached makes pushes
    /// with a `hashCode` answer `500`.
    #[must_use]
    pub fn history(self, history: History) -> Self {
        self.configure(|inner| inner.history = history)
    }

    /// Requires `authorization: Bearer <token>` with one of `tokens` on every route but
    /// `/healthz` (`401` otherwise). Several serve together, to rotate one without a gap; empty
    /// entries are left out, and none at all requires none (then keep the port private).
    #[must_use]
    pub fn tokens<S: AsRef<str>>(self, tokens: impl IntoIterator<Item = S>) -> Self {
        let tokens: Vec<[u8; 32]> = tokens
            .into_iter()
            .map(|token| token.as_ref().trim().to_owned())
            .filter(|token| !token.is_empty())
            .map(|token| Access::digest(&token))
            .collect();
        self.configure(|inner| inner.access.tokens = tokens)
    }

    /// Serves only queues whose names start with `prefix` (and their dead queues): any other
    /// name answers `404` without a call.
    #[must_use]
    pub fn queue_prefix(self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into().trim().to_owned();
        self.configure(|inner| inner.namespace.prefix = prefix)
    }

    /// Serves only these queues (and their dead queues): any other name answers `404` without
    /// a call. Empty entries are left out, and none at all serves every name (within the
    /// [`queue_prefix`](Self::queue_prefix)).
    #[must_use]
    pub fn queues<S: AsRef<str>>(self, queues: impl IntoIterator<Item = S>) -> Self {
        let queues: Vec<String> = queues
            .into_iter()
            .map(|queue| queue.as_ref().trim().to_owned())
            .filter(|queue| !queue.is_empty())
            .collect();
        self.configure(|inner| inner.namespace.allowed = queues)
    }

    /// Browsers on these origins may call the API (CORS); `*` allows any. A request whose
    /// `Origin` is another is refused `403` before any work. Empty entries are left out, so
    /// `ALLOWED_ORIGINS` split on commas can be passed as it is.
    #[must_use]
    pub fn allowed_origins<S: AsRef<str>>(self, origins: impl IntoIterator<Item = S>) -> Self {
        let origins: Vec<String> = origins
            .into_iter()
            .map(|origin| origin.as_ref().trim().trim_end_matches('/').to_owned())
            .filter(|origin| !origin.is_empty())
            .collect();
        self.configure(|inner| inner.access.origins = origins)
    }

    /// Makes what a pop hands out work on any replica given the same `key`: each `_id` carries
    /// the message's receipt handle, signed with HMAC-SHA256 under `key` (so a client cannot
    /// forge one, nor use one on another queue), and the server keeps nothing for `ack` and
    /// `ping`. The pop's answer then also holds `messageId`, the SQS message id (what `peek`
    /// shows as `_id`). Use 32 random bytes or more, the same on every replica; rotating it
    /// makes the ids handed out before unknown (`404`; those messages come back at their
    /// expiry). Without a key, `_id` is the message id and only the popping server can ack it.
    #[must_use]
    pub fn id_key(self, key: impl AsRef<[u8]>) -> Self {
        let handles = Handles::signed(key.as_ref());
        self.configure(|inner| inner.handles = handles)
    }

    /// The server's bounds (see [`Limits`]).
    #[must_use]
    pub fn limits(self, limits: Limits) -> Self {
        self.configure(|inner| inner.limits = limits)
    }

    /// Whether a peek on Amazon SQS runs anyway. SQS has no peek: there it is a receive that
    /// makes what it saw visible again at once, and each one counts as a receive toward the
    /// queue's 5 (a message peeked 5 times moves to `<queue>-dead` at its next receive). Off by
    /// default (a peek on SQS answers `409`); the in-process account peeks for real either way.
    #[must_use]
    pub fn peek_on_sqs(self, allowed: bool) -> Self {
        self.configure(|inner| inner.peek_on_sqs = allowed)
    }

    /// How long a pop waits for a message before answering `204` (at most 20 s): SQS's long poll,
    /// which asks every server, where a wait of 0 samples a few and may miss a message.
    #[must_use]
    pub fn pop_wait(self, wait: Duration) -> Self {
        self.configure(|inner| inner.pop_wait = wait.min(Duration::from_secs(20)))
    }

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

impl QueueApi {
    /// Creates `queue` and its dead queue with the redrive policy, once per server; an existing
    /// queue is served as it is.
    async fn ensure(&self, queue: &str) -> Result<(), crate::operations::OperationError> {
        if self.lock_ensured().contains(queue) {
            return Ok(());
        }
        let operations = &self.inner.operations;
        let dead = format!("{queue}{DEAD_QUEUE_SUFFIX}");
        match operations.queue(queue).await {
            Ok(_) => {}
            Err(error) if missing(&error) => {
                operations.create_queue(&dead, &QueueSpec::new()).await?;
                operations
                    .create_queue(queue, &QueueSpec::new().dead_letter(&dead, MAX_ATTEMPTS))
                    .await?;
            }
            Err(error) => return Err(error),
        }
        let mut ensured = self.lock_ensured();
        // Bounded: past it the server forgets and looks each queue up once again.
        if ensured.len() >= self.inner.limits.ensured_queues {
            ensured.clear();
        }
        ensured.insert(queue.to_owned());
        Ok(())
    }

    fn lock_ensured(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner
            .ensured
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Sends the bodies in `SendMessageBatch` calls of up to 10: the message ids in the order given,
/// or the failure naming which items were stored and which were not.
async fn send_all(
    api: &QueueApi,
    queue: &str,
    bodies: Vec<String>,
) -> Result<Vec<String>, ApiError> {
    api.ensure(queue).await?;
    let total = bodies.len();
    let answers = api
        .inner
        .operations
        .send_many(queue, bodies.into_iter().map(SendMessage::new).collect())
        .await?;
    let mut ids = Vec::with_capacity(total);
    let mut failed = Vec::new();
    let mut first_error = None;
    for (at, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(sent) => ids.push(sent.message_id),
            Err(error) => {
                failed.push(at);
                first_error.get_or_insert(error);
            }
        }
    }
    let Some(error) = first_error else {
        return Ok(ids);
    };
    if ids.is_empty() {
        return Err(error.into());
    }
    Err(ApiError::Backend(format!(
        "{error}; {} of the {total} messages were stored (ids {}), the items at {failed:?} (from \
         0) were not: push those again",
        ids.len(),
        ids.join(", ")
    )))
}
