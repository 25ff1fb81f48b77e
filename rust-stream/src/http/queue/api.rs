//! The API's settings and state: [`QueueApi`], its [`Limits`] and constants, and the sends and
//! queue set-up the routes share.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::access::Access;
use super::error::ApiError;
use super::handles::Handles;
use super::names::{Namespace, DEAD_QUEUE_SUFFIX};
use super::params::missing;

use crate::operations::{Operations, QueueSpec};
use crate::publish::History;
use crate::sqs::SqsBroker;
use crate::store::memory::MemoryStore;
use crate::transport::SendMessage;

/// The pops after which a message moves to the dead queue (the seed's 5 attempts).
pub const MAX_ATTEMPTS: u32 = 5;

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
    /// `MAX_HASH_DURATION_SECONDS`: the longest `expiresIn` of a push with a `hashCode`, so
    /// the history's keys leave memory (`400` beyond). Default 24 h.
    pub hash_duration: Duration,
    /// `MAX_HASH_CODES`: the `hashCode`s the server's own command history holds (the one
    /// [`QueueApi::new`] makes, not a store given to [`QueueApi::history`]). Past it the
    /// oldest is forgotten first, even before its `expiresIn` passed: a push repeating a
    /// forgotten hash is stored again. So the history ignores a repeat only while fewer than
    /// this many other hashes were pushed since; keep it above the distinct hashes pushed
    /// within the longest `expiresIn`, or share a PostgreSQL history. Default 100,000: about
    /// 45 MB with 64-byte hashes (measured), under 70 MB with
    /// [`hash_code_bytes`](Self::hash_code_bytes)' 256.
    pub hash_codes: usize,
    /// `MAX_HASH_CODE_BYTES`: the longest `hashCode`, in bytes (`400` beyond), so each key the
    /// history holds is small. Default 256: a SHA-512 in hex is 128.
    pub hash_code_bytes: usize,
    /// `MAX_CONCURRENT_REQUESTS`: requests served at once; one more is refused `503` at once
    /// rather than queued. Default 256.
    pub concurrent_requests: usize,
    /// `REQUEST_DEADLINE_SECONDS`: how long a request may take before it is answered `503`
    /// (and its calls dropped). Default 30 s, longer than a pop's wait (≤ 20 s) and its calls.
    pub request_deadline: Duration,
    /// `MAX_ENSURED_QUEUES`: the queue names a server remembers having created or found (past
    /// it, it forgets them all and looks each up again at its next push). Default 10,000.
    pub ensured_queues: usize,
    /// `MAX_RECEIPT_HANDLES`: the receipt handles a server without an
    /// [`id_key`](QueueApi::id_key) keeps for `ack` and `ping` (each until an hour after its
    /// message's expiry). Past it, those expiring soonest are forgotten: an `ack` of one answers
    /// `404` and the message comes back at its expiry, popped again (never lost). Default
    /// 100,000; with an `id_key` none is kept.
    pub receipt_handles: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            body_bytes: 1024 * 1024,
            push_items: 1_000,
            pop_amount: 100,
            hash_duration: Duration::from_secs(24 * 3600),
            hash_codes: 100_000,
            hash_code_bytes: 256,
            concurrent_requests: 256,
            request_deadline: Duration::from_secs(30),
            ensured_queues: 10_000,
            receipt_handles: 100_000,
        }
    }
}

/// What a server holds in memory, to watch its bounds ([`QueueApi::in_memory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct InMemory {
    /// The `hashCode`s in the server's own command history, pending or pushed, until they
    /// expire and are swept or are evicted ([`Limits::hash_codes`] at most); `None` when the
    /// history is a store given to [`QueueApi::history`].
    pub hash_codes: Option<usize>,
    /// The queue names the server remembers having created or found
    /// ([`Limits::ensured_queues`] at most).
    pub queues: usize,
    /// The receipt handles kept for `ack` and `ping` without an [`id_key`](QueueApi::id_key)
    /// ([`Limits::receipt_handles`] at most); 0 with one.
    pub receipt_handles: usize,
}

/// The seed's HTTP queue API over one broker: see [the module](super). Cheap to clone.
#[derive(Clone)]
pub struct QueueApi {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) operations: Operations,
    pub(super) history: History,
    /// The store under `history` when it is the server's own (bounded by
    /// [`Limits::hash_codes`]), not one given to [`QueueApi::history`].
    pub(super) own_history: Option<MemoryStore>,
    pub(super) access: Access,
    pub(super) namespace: Namespace,
    pub(super) limits: Limits,
    pub(super) peek_on_sqs: bool,
    pub(super) pop_wait: Duration,
    /// Receipt handles of the messages this server popped.
    pub(super) handles: Handles,
    /// Queues this server created or found, with their dead queues.
    pub(super) ensured: Mutex<HashSet<String>>,
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
    /// history in a [`MemoryStore`] of its own (lease [`HISTORY_LEASE`], at most
    /// [`Limits::hash_codes`] keys), no token required, no CORS origin allowed (a request with
    /// an `Origin` is refused), every queue name served, the default [`Limits`], peeks on SQS
    /// refused, and pops that wait up to 1 s for a message.
    pub fn new(broker: &SqsBroker) -> Self {
        let limits = Limits::default();
        let (history, own_history) = own_history(&limits);
        Self {
            inner: Arc::new(Inner {
                operations: broker.operations(),
                history,
                own_history: Some(own_history),
                access: Access::default(),
                namespace: Namespace::default(),
                limits,
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
                    own_history: inner.own_history.clone(),
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
        self.configure(|inner| {
            inner.history = history;
            inner.own_history = None;
        })
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

    /// The server's bounds (see [`Limits`]). The server's own command history starts again,
    /// empty, with room for [`Limits::hash_codes`] (a store given to [`history`](Self::history)
    /// is kept).
    #[must_use]
    pub fn limits(self, limits: Limits) -> Self {
        self.configure(|inner| {
            inner.limits = limits;
            if inner.own_history.is_some() {
                let (history, store) = own_history(&limits);
                inner.history = history;
                inner.own_history = Some(store);
            }
        })
    }

    /// What this server holds in memory now (each bounded by its [`Limits`]).
    pub fn in_memory(&self) -> InMemory {
        InMemory {
            hash_codes: self
                .inner
                .own_history
                .as_ref()
                .map(MemoryStore::history_len),
            queues: self.lock_ensured().len(),
            receipt_handles: self.inner.handles.held(),
        }
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
}

/// The command history a server keeps in its own memory, holding at most `limits.hash_codes`.
fn own_history(limits: &Limits) -> (History, MemoryStore) {
    let store = MemoryStore::new().history_capacity(limits.hash_codes);
    (History::new(store.clone()).lease(HISTORY_LEASE), store)
}

impl QueueApi {
    /// Creates `queue` and its dead queue with the redrive policy, once per server; an existing
    /// queue is served as it is.
    pub(super) async fn ensure(
        &self,
        queue: &str,
    ) -> Result<(), crate::operations::OperationError> {
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
pub(super) async fn send_all(
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
