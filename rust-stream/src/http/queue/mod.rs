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
//! let api = QueueApi::new(&broker).allowed_origins(["https://ops.example.com"]);
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:8080").await?;
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
//!
//! Beyond the seed's codes: `400` for a request at fault (a body or parameter that does not parse,
//! an unsupported filter operator, a queue name SQS refuses) and `404` for an `ack` or `ping`
//! naming ids this server did not hand out; `409` for a peek on SQS without
//! [`peek_on_sqs`](QueueApi::peek_on_sqs); `500` when the backend fails. Each carries
//! `{"error": "what was wrong and what to do"}`.
//!
//! **The dead queue.** A push to a queue that does not exist creates it, and `<queue>-dead`
//! beside it, with SQS's `RedrivePolicy` (`maxReceiveCount` 5): the receive after a message's
//! fifth pop moves it to `<queue>-dead` atomically, on SQS as on the in-process account, and a
//! server that dies mid-request never holds a message SQS does not. A queue that already exists
//! is served as it is (without a policy, nothing moves).
//!
//! **Ids.** A popped message's `_id` is its SQS message id; this server keeps the receipt handle
//! it was popped with, so an `ack` or `ping` goes to the server that popped it (replicas behind a
//! load balancer need sticky sessions for those two routes; pop, push, peek and size go anywhere).
//!
//! **Command history.** A push's `hashCode` is kept in the project's command history
//! ([`History`], per queue: the key is the queue and the hash), the one publishers'
//! [`once`](crate::publish::Outgoing::once) sends use. By default it is a
//! [`MemoryStore`] of this server's; [`QueueApi::history`] gives it a store replicas share
//! (`PostgresStore`), so a hash pushed through one replica is ignored by the others within its
//! duration. A push reserves the hash (a push finding it pushed, or being pushed by another
//! request, answers `204`), sends, then confirms the hash for its `expiresIn`, or frees it when the
//! send failed, so the client's retry is stored. A server killed mid-push leaves the hash pending
//! until the history's lease (60 s by default) passes.

pub mod filter;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::{MatchedPath, Path, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

pub use filter::FilterError;

use crate::model::envelope::format_timestamp;
use crate::model::rules::{self, ErrorKind};
use crate::operations::{Message, OperationError, Operations, Peek, QueueSpec};
use crate::publish::History;
use crate::sqs::SqsBroker;
use crate::store::history::{HistoryKey, Reservation};
use crate::store::memory::MemoryStore;
use crate::transport::{ReceivedMessage, SendMessage, SentMessage};

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

/// How long after its expiry a popped message's receipt handle is kept for a late `ack`.
const HANDLE_GRACE: Duration = Duration::from_secs(3600);

/// The longest queue name served: SQS's 80 less the dead queue's suffix.
const MAX_NAME: usize = rules::MAX_QUEUE_NAME_LEN - DEAD_QUEUE_SUFFIX.len();

/// The seed's HTTP queue API over one broker: see [the module](self). Cheap to clone.
#[derive(Clone)]
pub struct QueueApi {
    inner: Arc<Inner>,
}

struct Inner {
    operations: Operations,
    history: History,
    allowed_origins: Vec<String>,
    peek_on_sqs: bool,
    pop_wait: Duration,
    /// Receipt handles of the messages this server popped, by queue and message id.
    handles: Mutex<HashMap<(String, String), Held>>,
    /// Queues this server created or found, with their dead queues.
    ensured: Mutex<HashSet<String>>,
}

struct Held {
    receipt_handle: String,
    expires: tokio::time::Instant,
}

impl std::fmt::Debug for QueueApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueApi")
            .field("allowed_origins", &self.inner.allowed_origins)
            .field("peek_on_sqs", &self.inner.peek_on_sqs)
            .field("pop_wait", &self.inner.pop_wait)
            .finish_non_exhaustive()
    }
}

impl QueueApi {
    /// The API over `broker`'s queues (its name prefix and suffix apply), with the command
    /// history in a [`MemoryStore`] of its own (lease [`HISTORY_LEASE`]), no CORS origin
    /// allowed, peeks on SQS refused, and pops that wait up to 1 s for a message.
    pub fn new(broker: &SqsBroker) -> Self {
        Self {
            inner: Arc::new(Inner {
                operations: broker.operations(),
                history: History::new(MemoryStore::new()).lease(HISTORY_LEASE),
                allowed_origins: Vec::new(),
                peek_on_sqs: false,
                pop_wait: Duration::from_secs(1),
                handles: Mutex::new(HashMap::new()),
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
                    allowed_origins: inner.allowed_origins.clone(),
                    peek_on_sqs: inner.peek_on_sqs,
                    pop_wait: inner.pop_wait,
                    handles: Mutex::new(HashMap::new()),
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
    /// its [`wait`](History::wait) does not apply (a hash another push holds answers `204` at
    /// once). A store that cannot be reached makes pushes with a `hashCode` answer `500`.
    #[must_use]
    pub fn history(self, history: History) -> Self {
        self.configure(|inner| inner.history = history)
    }

    /// Browsers on these origins may call the API (CORS); `*` allows any. Empty entries are
    /// left out, so `ALLOWED_ORIGINS` split on commas can be passed as it is.
    #[must_use]
    pub fn allowed_origins<S: AsRef<str>>(self, origins: impl IntoIterator<Item = S>) -> Self {
        let origins: Vec<String> = origins
            .into_iter()
            .map(|origin| origin.as_ref().trim().trim_end_matches('/').to_owned())
            .filter(|origin| !origin.is_empty())
            .collect();
        self.configure(|inner| inner.allowed_origins = origins)
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

    /// The routes, with CORS and the request metric, to serve or to merge into a service's own
    /// router.
    pub fn router(self) -> Router {
        let origins = Arc::new(self.inner.allowed_origins.clone());
        Router::new()
            .route("/queue/{queue}/push", post(push))
            .route("/queue/{queue}/pop", post(pop_one))
            .route("/queue/{queue}/pop/{amount}", post(pop_many))
            .route("/queue/{queue}/ack", post(ack))
            .route("/queue/{queue}/ping", post(ping))
            .route("/queue/{queue}/peek", get(peek))
            .route("/queue/{queue}/size", get(size))
            .fallback(not_found)
            .with_state(self)
            .layer(axum::middleware::from_fn_with_state(
                origins,
                cors_and_count,
            ))
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

/// Why a request was not served; each answers with its status and `{"error": ...}`.
#[derive(Debug, thiserror::Error)]
enum ApiError {
    /// The request is at fault: `400`.
    #[error("{0}")]
    BadRequest(String),
    /// Ids this server holds no receipt handle for: `404`.
    #[error(
        "{} of the ids were not popped from queue `{queue}` by this server, or were acked \
         already: ack and ping the ids a pop of this server returned",
        .ids.len()
    )]
    UnknownIds { queue: String, ids: Vec<String> },
    /// A peek on SQS without [`QueueApi::peek_on_sqs`]: `409`.
    #[error("{0}")]
    PeekRefused(String),
    /// The backend failed: `500`. No message is lost: what was taken is visible again.
    #[error("{0}")]
    Backend(String),
    /// Some entries of an ack or ping failed at the backend: `500`.
    #[error("queue `{queue}`: {} of the ids failed; retry them", .failed.len())]
    Failed {
        queue: String,
        failed: Vec<(String, String)>,
    },
}

impl From<OperationError> for ApiError {
    fn from(error: OperationError) -> Self {
        match &error {
            OperationError::Naming { .. } => Self::BadRequest(error.to_string()),
            OperationError::SendRefused { source, .. }
                if !source.is_retryable() && is_sender(source) =>
            {
                Self::BadRequest(error.to_string())
            }
            _ => Self::Backend(error.to_string()),
        }
    }
}

fn is_sender(error: &crate::transport::TransportError) -> bool {
    error.kind().is_some_and(ErrorKind::sender_fault)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let reason = self.to_string();
        let (status, body) = match self {
            Self::BadRequest(_) => (StatusCode::BAD_REQUEST, json!({ "error": reason })),
            Self::UnknownIds { ids, .. } => (
                StatusCode::NOT_FOUND,
                json!({ "error": reason, "unknown": ids }),
            ),
            Self::PeekRefused(_) => (StatusCode::CONFLICT, json!({ "error": reason })),
            Self::Backend(_) => {
                tracing::warn!(error = %reason, "queue API request failed at the backend");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({ "error": reason }),
                )
            }
            Self::Failed { failed, .. } => {
                let failed: Vec<Value> = failed
                    .into_iter()
                    .map(|(id, why)| json!({ "id": id, "error": why }))
                    .collect();
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({ "error": reason, "failed": failed }),
                )
            }
        };
        (status, Json(body)).into_response()
    }
}

/// A queue name this API serves: SQS's characters, short enough for its dead queue's name.
fn checked(queue: &str) -> Result<&str, ApiError> {
    let fits = !queue.is_empty()
        && queue.len() <= MAX_NAME
        && queue
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if fits {
        Ok(queue)
    } else {
        Err(ApiError::BadRequest(format!(
            "queue name `{queue}`: use 1 to {MAX_NAME} letters, digits, `-` and `_` (SQS's 80 \
             less `{DEAD_QUEUE_SUFFIX}` for its dead queue; FIFO queues are not served here)"
        )))
    }
}

/// The query's parameters, by name (the last of a repeated one).
fn parameters(uri: &Uri) -> HashMap<String, String> {
    form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
}

/// A whole number parameter, or `default` when absent.
fn number(
    parameters: &HashMap<String, String>,
    name: &str,
    default: u64,
    max: u64,
) -> Result<u64, ApiError> {
    let Some(text) = parameters.get(name) else {
        return Ok(default);
    };
    match text.trim().parse::<u64>() {
        Ok(value) if value <= max => Ok(value),
        _ => Err(ApiError::BadRequest(format!(
            "`{name}` is `{text}`: pass a whole number from 0 to {max}"
        ))),
    }
}

/// `expiresIn` as a visibility timeout: 0 to 12 h, 300 s when absent.
fn visibility(parameters: &HashMap<String, String>) -> Result<Duration, ApiError> {
    number(
        parameters,
        "expiresIn",
        DEFAULT_EXPIRES_IN.as_secs(),
        rules::MAX_VISIBILITY_TIMEOUT_SECONDS.unsigned_abs().into(),
    )
    .map(Duration::from_secs)
}

/// Milliseconds since the epoch, `after` from now, as the seed's `expiryDate`.
fn expiry_date(after: Duration) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_timestamp(u64::try_from((now + after).as_millis()).unwrap_or(u64::MAX))
}

/// Whether an operation failed because the queue does not exist (yet).
fn missing(error: &OperationError) -> bool {
    matches!(error, OperationError::Queue { source, .. }
        if source.kind() == Some(ErrorKind::QueueDoesNotExist))
}

impl QueueApi {
    /// Creates `queue` and its dead queue with the redrive policy, once per server; an existing
    /// queue is served as it is.
    async fn ensure(&self, queue: &str) -> Result<(), OperationError> {
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
        self.lock_ensured().insert(queue.to_owned());
        Ok(())
    }

    fn lock_ensured(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.inner
            .ensured
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_handles(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Held>> {
        self.inner
            .handles
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Takes up to `amount` messages for `expires`, keeping their receipt handles; on a failure
    /// midway, what was taken is made visible again before the error answers.
    async fn pop(
        &self,
        queue: &str,
        amount: usize,
        expires: Duration,
    ) -> Result<Vec<Value>, ApiError> {
        let operations = &self.inner.operations;
        let mut taken: Vec<ReceivedMessage> = Vec::new();
        let mut wait = self.inner.pop_wait;
        while taken.len() < amount {
            let want = (amount - taken.len()).min(rules::MAX_BATCH_ENTRIES);
            match operations.receive(queue, want, expires, wait).await {
                Ok(received) if received.is_empty() => break,
                Ok(received) => taken.extend(received),
                Err(error) if missing(&error) && taken.is_empty() => return Ok(Vec::new()),
                Err(error) => {
                    let handles: Vec<String> =
                        taken.iter().map(|m| m.receipt_handle.clone()).collect();
                    if let Err(release) = operations.extend(queue, &handles, Duration::ZERO).await {
                        tracing::warn!(
                            messaging.destination.name = queue,
                            error = %release,
                            "popped messages not made visible again; they are once their expiry passes"
                        );
                    }
                    return Err(error.into());
                }
            }
            // Later receives take what is there now.
            wait = Duration::ZERO;
        }
        let now = tokio::time::Instant::now();
        let mut handles = self.lock_handles();
        handles.retain(|_, held| held.expires + HANDLE_GRACE > now);
        let expiry = expiry_date(expires);
        Ok(taken
            .into_iter()
            .map(|message| {
                let shown = json!({
                    "_id": message.message_id,
                    "payload": filter::payload(&message.body),
                    "attempts": message.receive_count().unwrap_or(1),
                    "expiryDate": expiry,
                });
                handles.insert(
                    (queue.to_owned(), message.message_id),
                    Held {
                        receipt_handle: message.receipt_handle,
                        expires: now + expires,
                    },
                );
                shown
            })
            .collect())
    }

    /// The receipt handles of `ids`, and the ids this server holds none for.
    fn handles_of(&self, queue: &str, ids: &[String]) -> (Vec<(String, String)>, Vec<String>) {
        let handles = self.lock_handles();
        let mut known = Vec::new();
        let mut unknown = Vec::new();
        for id in ids {
            match handles.get(&(queue.to_owned(), id.clone())) {
                Some(held) => known.push((id.clone(), held.receipt_handle.clone())),
                None => unknown.push(id.clone()),
            }
        }
        (known, unknown)
    }
}

/// The ids of an ack or ping body: `{"id": ["..", ..]}` (one id as a string is taken too).
fn ids_of(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let refused = |why: &str| {
        ApiError::BadRequest(format!(
            "{why}: send a JSON body {{\"id\": [\"<_id>\", ...]}} with the ids pops returned"
        ))
    };
    let value: Value = serde_json::from_slice(body).map_err(|_| refused("the body is not JSON"))?;
    let ids = match value.get("id") {
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| id.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| refused("`id` holds something other than strings"))?,
        Some(Value::String(id)) => vec![id.clone()],
        _ => return Err(refused("no `id` array")),
    };
    if ids.is_empty() {
        return Err(refused("`id` is empty"));
    }
    Ok(ids)
}

async fn push(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    uri: Uri,
    body: Bytes,
) -> Result<Response, ApiError> {
    let queue = checked(&queue)?;
    let parameters = parameters(&uri);
    let duration = Duration::from_secs(number(
        &parameters,
        "expiresIn",
        DEFAULT_EXPIRES_IN.as_secs(),
        u64::from(u32::MAX),
    )?);
    let value: Value = serde_json::from_slice(&body).map_err(|error| {
        ApiError::BadRequest(format!(
            "the body is not JSON ({error}): push a JSON value (one message) or an array (one \
             message each)"
        ))
    })?;
    let payloads = match value {
        Value::Array(items) if items.is_empty() => {
            return Err(ApiError::BadRequest(
                "the body is an empty array: push at least one message".into(),
            ))
        }
        Value::Array(items) => items,
        one => vec![one],
    };
    let bodies: Vec<String> = payloads.iter().map(Value::to_string).collect();
    // Refused before anything is sent, so a push many is stored whole or not at all by size.
    if let Some((index, body)) = bodies
        .iter()
        .enumerate()
        .find(|(_, body)| body.len() > rules::MAX_MESSAGE_SIZE)
    {
        return Err(ApiError::BadRequest(format!(
            "message {index} is {} bytes as JSON; SQS takes at most {} a message",
            body.len(),
            rules::MAX_MESSAGE_SIZE
        )));
    }
    let hash = parameters
        .get("hashCode")
        .filter(|hash| !hash.is_empty())
        .map(|hash| HistoryKey::new(queue, hash.as_str()));
    let ticket = match &hash {
        None => None,
        Some(key) => match api.inner.history.reserve_once(key).await.map_err(|error| {
            ApiError::Backend(format!(
                "the command history failed ({error}): nothing was pushed; retry"
            ))
        })? {
            Reservation::Reserved(ticket) => Some(ticket),
            Reservation::Sent(_) | Reservation::Pending => {
                tracing::debug!(messaging.destination.name = queue, hash_code = %key.key, "push ignored: its hashCode is in the command history");
                return Ok(StatusCode::NO_CONTENT.into_response());
            }
        },
    };
    let sent = send_all(&api, queue, bodies).await;
    if let (Some(key), Some(ticket)) = (&hash, &ticket) {
        // The first message's id stands for the push (the history keeps one); a failed push is
        // freed, so the client's retry is stored: anything sent before the failure may be stored
        // twice by it, never lost.
        let first = sent
            .as_ref()
            .ok()
            .and_then(|ids| ids.first())
            .map(|id| SentMessage {
                message_id: id.clone(),
                sequence_number: None,
                duplicate: false,
            });
        api.inner
            .history
            .settle(key, ticket, first.as_ref(), duration)
            .await;
    }
    let ids = sent?;
    Ok((StatusCode::CREATED, Json(json!({ "ids": ids }))).into_response())
}

/// Sends each body in order; the message ids, or the failure naming what was stored first.
async fn send_all(
    api: &QueueApi,
    queue: &str,
    bodies: Vec<String>,
) -> Result<Vec<String>, ApiError> {
    api.ensure(queue).await?;
    let mut ids = Vec::with_capacity(bodies.len());
    let total = bodies.len();
    for body in bodies {
        match api
            .inner
            .operations
            .send(queue, SendMessage::new(body))
            .await
        {
            Ok(sent) => ids.push(sent.message_id),
            Err(error) if ids.is_empty() => return Err(error.into()),
            Err(error) => {
                return Err(ApiError::Backend(format!(
                    "{error}; {} of the {total} messages were stored first (ids {}): push the \
                     rest again",
                    ids.len(),
                    ids.join(", ")
                )))
            }
        }
    }
    Ok(ids)
}

async fn pop_one(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let queue = checked(&queue)?;
    let expires = visibility(&parameters(&uri))?;
    Ok(match api.pop(queue, 1, expires).await?.pop() {
        Some(message) => Json(message).into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    })
}

async fn pop_many(
    State(api): State<QueueApi>,
    Path((queue, amount)): Path<(String, String)>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let queue = checked(&queue)?;
    let amount = match amount.parse::<usize>() {
        Ok(amount) if amount > 0 => amount,
        _ => {
            return Err(ApiError::BadRequest(format!(
                "amount `{amount}`: pass a whole number of messages, 1 or more"
            )))
        }
    };
    let expires = visibility(&parameters(&uri))?;
    let messages = api.pop(queue, amount, expires).await?;
    Ok(if messages.is_empty() {
        StatusCode::NO_CONTENT.into_response()
    } else {
        Json(messages).into_response()
    })
}

async fn ack(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let queue = checked(&queue)?;
    let ids = ids_of(&body)?;
    let (known, unknown) = api.handles_of(queue, &ids);
    let handles: Vec<String> = known.iter().map(|(_, handle)| handle.clone()).collect();
    let failed = if handles.is_empty() {
        Vec::new()
    } else {
        api.inner.operations.delete(queue, &handles).await?
    };
    {
        let mut held = api.lock_handles();
        for (id, handle) in &known {
            if !failed.iter().any(|(failed, _)| failed == handle) {
                held.remove(&(queue.to_owned(), id.clone()));
            }
        }
    }
    answer(queue, &known, failed, unknown)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The error for an ack's or ping's ids that failed or were unknown, if any.
fn answer(
    queue: &str,
    known: &[(String, String)],
    failed: Vec<(String, crate::transport::BatchFailure)>,
    unknown: Vec<String>,
) -> Result<(), ApiError> {
    if !failed.is_empty() {
        let failed = failed
            .into_iter()
            .filter_map(|(handle, failure)| {
                let (id, _) = known.iter().find(|(_, known)| *known == handle)?;
                Some((id.clone(), failure.message))
            })
            .collect();
        return Err(ApiError::Failed {
            queue: queue.to_owned(),
            failed,
        });
    }
    if !unknown.is_empty() {
        return Err(ApiError::UnknownIds {
            queue: queue.to_owned(),
            ids: unknown,
        });
    }
    Ok(())
}

async fn ping(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    uri: Uri,
    body: Bytes,
) -> Result<Response, ApiError> {
    let queue = checked(&queue)?;
    let expires = visibility(&parameters(&uri))?;
    let ids = ids_of(&body)?;
    let (known, unknown) = api.handles_of(queue, &ids);
    let handles: Vec<String> = known.iter().map(|(_, handle)| handle.clone()).collect();
    let failed = if handles.is_empty() {
        Vec::new()
    } else {
        api.inner
            .operations
            .extend(queue, &handles, expires)
            .await?
    };
    {
        let until = tokio::time::Instant::now() + expires;
        let mut held = api.lock_handles();
        for (id, _) in &known {
            if let Some(entry) = held.get_mut(&(queue.to_owned(), id.clone())) {
                entry.expires = until;
            }
        }
    }
    answer(queue, &known, failed, unknown)?;
    Ok(Json(json!({ "expiryDate": expiry_date(expires) })).into_response())
}

async fn peek(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let queue = checked(&queue)?;
    let parameters = parameters(&uri);
    let amount = number(&parameters, "amount", DEFAULT_PEEK_AMOUNT as u64, 10_000)?;
    let offset = number(&parameters, "offset", 0, u64::from(u32::MAX))?;
    let mut request = Peek::new()
        .amount(usize::try_from(amount).unwrap_or(usize::MAX))
        .offset(usize::try_from(offset).unwrap_or(usize::MAX));
    if let Some(text) = parameters.get("filter").filter(|text| !text.is_empty()) {
        request =
            request.filter(filter::parse(text).map_err(|e| ApiError::BadRequest(e.to_string()))?);
    }
    if api.inner.peek_on_sqs {
        request = request.force();
    }
    let messages = match api.inner.operations.peek(queue, &request).await {
        Ok(messages) => messages,
        Err(error) if missing(&error) => Vec::new(),
        Err(error @ OperationError::PeekRefused { .. }) => {
            return Err(ApiError::PeekRefused(format!(
                "{error}; here, start the server with PEEK_ON_SQS=true (QueueApi::peek_on_sqs) \
                 to peek on SQS, where each peek counts as one of a message's \
                 {MAX_ATTEMPTS} attempts"
            )))
        }
        Err(error) => return Err(error.into()),
    };
    if messages.is_empty() {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    Ok(Json(messages.iter().map(shown).collect::<Vec<_>>()).into_response())
}

/// A peeked message as the seed shows it: `attempts` once popped, `expiryDate` while in flight.
fn shown(message: &Message) -> Value {
    let mut shown = filter::document(message);
    if shown.get("attempts").and_then(Value::as_u64) == Some(0) {
        if let Some(fields) = shown.as_object_mut() {
            fields.remove("attempts");
        }
    }
    if let (Some(ms), Some(fields)) = (
        message
            .visible_in_ms
            .filter(|_| message.state == "in flight"),
        shown.as_object_mut(),
    ) {
        fields.insert(
            "expiryDate".into(),
            Value::String(expiry_date(Duration::from_millis(ms))),
        );
    }
    shown
}

async fn size(
    State(api): State<QueueApi>,
    Path(queue): Path<String>,
) -> Result<Response, ApiError> {
    let queue = checked(&queue)?;
    let size = match api.inner.operations.queue(queue).await {
        Ok(info) => info.visible + info.in_flight + info.delayed,
        Err(error) if missing(&error) => 0,
        Err(error) => return Err(error.into()),
    };
    Ok(Json(json!({ "size": size })).into_response())
}

async fn not_found(uri: Uri) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({
            "error": format!(
                "no route `{}`: the API's routes start with /queue/<name>/ (push, pop, pop/<amount>, \
                 ack, ping, peek, size)",
                uri.path()
            )
        })),
    )
        .into_response()
}

/// CORS for the allowed origins (a preflight answered here, the others' answers marked), and
/// the request counted by route and status.
async fn cors_and_count(
    State(origins): State<Arc<Vec<String>>>,
    request: Request,
    next: Next,
) -> Response {
    let origin = request
        .headers()
        .get(header::ORIGIN)
        .and_then(|origin| origin.to_str().ok())
        .map(str::to_owned);
    let allowed = origin
        .as_deref()
        .filter(|origin| {
            origins
                .iter()
                .any(|allowed| allowed == "*" || allowed == origin)
        })
        .and_then(|origin| HeaderValue::from_str(origin).ok());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let preflight = request.method() == Method::OPTIONS
        && request
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    let mut response = if preflight {
        let mut response = StatusCode::NO_CONTENT.into_response();
        if allowed.is_some() {
            let headers = response.headers_mut();
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_METHODS,
                HeaderValue::from_static("GET, POST, OPTIONS"),
            );
            let asked = request
                .headers()
                .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                .cloned()
                .unwrap_or_else(|| HeaderValue::from_static("content-type"));
            headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
            headers.insert(
                header::ACCESS_CONTROL_MAX_AGE,
                HeaderValue::from_static("600"),
            );
        }
        response
    } else {
        next.run(request).await
    };
    let headers = response.headers_mut();
    if let Some(origin) = allowed {
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
    if !origins.is_empty() {
        headers.append(header::VARY, HeaderValue::from_static("origin"));
    }
    crate::metrics::http_request(route, response.status().as_u16());
    response
}
