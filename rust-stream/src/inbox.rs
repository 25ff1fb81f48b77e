//! Effectively-once handling: an inbox that remembers which messages a subscription has handled,
//! in the same database transaction as the handler's own writes.
//!
//! SQS delivers at least once: a standard queue may deliver a message twice, a FIFO queue drops a
//! duplicate send only within five minutes, and a consumer stopped between its database commit
//! and its `DeleteMessage` gets the message again. A subscription made
//! [`idempotent`](crate::SubscriberBuilder::idempotent) runs each message's handler inside a
//! claim on the message's key in an [`InboxStore`]:
//!
//! 1. Before the handler runs, the key is claimed in a new transaction. Another attempt that holds
//!    the key (a duplicate handled by another replica right now) makes the claim wait for it, up
//!    to [`Inbox::wait`]; then the message is retried later.
//! 2. The handler gets the transaction from [`Context::transaction`] and writes its own rows in it.
//! 3. When it acks, the key is marked completed, with its outputs recorded beside it, and the
//!    transaction commits: the handler's writes and the key become visible together. Then its
//!    outputs are sent and the message deleted, as for any handler.
//! 4. When it fails, panics or times out, the transaction rolls back: its writes are undone and
//!    the key is free for the retry, which runs the handler again. A failed attempt never marks
//!    the key, so a retry is never acked without being handled.
//! 5. A message whose key is already completed is acked without running the handler, and the
//!    outputs recorded with the key are sent again as they were, with their original
//!    deduplication ids (so a FIFO queue stores them once within its five minutes) and
//!    [`IDEMPOTENCY_KEY_HEADER`] headers (so an inbox downstream handles them once, however
//!    late).
//!
//! Which key: [`Key::Delivered`] by default, the producer's [`IDEMPOTENCY_KEY_HEADER`] else the
//! message id. Never, unless asked for ([`Key::DeduplicationId`]), a FIFO deduplication id: SQS
//! forgets one after five minutes and stores a later send with it as a new message, which an
//! inbox keying by it for a week would ack unhandled.
//!
//! ```
//! use rust_stream::inbox::{Inbox, Key};
//! use rust_stream::store::memory::MemoryStore;
//! use rust_stream::{subscriber, Context, Handle, HandlerOutcome};
//!
//! #[derive(serde::Deserialize)]
//! struct Payment { id: String, cents: i64 }
//!
//! struct Post;
//!
//! impl Handle<Payment> for Post {
//!     async fn handle(&self, payment: &Payment, _: &(), ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
//!         let mut transaction = ctx
//!             .transaction::<MemoryStore>()
//!             .await
//!             .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
//!         let cents = payment.cents;
//!         transaction.on_commit(move || { /* post `cents` to the ledger */ let _ = cents; });
//!         Ok(())
//!     }
//! }
//!
//! let store = MemoryStore::new();
//! let payments = subscriber("payments", Post)
//!     .idempotent(Inbox::new(store).key(Key::json_pointer("/id")))
//!     .build();
//! # let _ = payments;
//! ```
//!
//! What it guarantees: a message's handler writes, in the store's database, at most once per key
//! within the key's [retention](Inbox::retention), and at least once (the message is not deleted
//! before they commit). What it does not: effects outside the transaction (an HTTP call, an email)
//! happen once per attempt that reaches them; a duplicate arriving after the retention is handled
//! again.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::handler::context::Context;
use crate::handler::middleware::{Call, Layers, Message, Middleware, Next, Outcomes};
use crate::model::SqsQueue;
use crate::outbox::{OutboxError, PreparedRow};
use crate::outcome::HandlerOutcome;
use crate::publish::recorded;
use crate::publish::Outgoing;
use crate::publish::Publisher;
use crate::store::sweeper::Sweeper;
use crate::store::{Claim, ClaimSettings, InboxKey, InboxStore};
use crate::subscriber::{OneAtATime, SubscriberBuilder};

/// The header whose value a message's [`Key::Delivered`] key is, when it has one: what a
/// producer sets to make copies of one message (its retries, a relay's resends) one key. Defined
/// beside the publisher, which sets it on outputs, below the inbox that reads it.
use crate::model::headers::IDEMPOTENCY_KEY_HEADER;

/// How long a completed key is kept unless [`Inbox::retention`] says otherwise: a week.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// How long a claim waits for another attempt holding its key unless [`Inbox::wait`] says
/// otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// How long a claim's transaction may sit idle beyond the handler timeout before the database
/// rolls it back, and how long when the subscription has no handler timeout.
const LEASE_MARGIN: Duration = Duration::from_secs(30);
const LEASE_WITHOUT_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// Which key identifies a message to the inbox: copies of a message with one key are handled
/// once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Key {
    /// The message's [`IDEMPOTENCY_KEY_HEADER`] header when it has one, else its SQS message id.
    /// One key for the redeliveries of a send, and on FIFO for the sends SQS itself stores once
    /// (those within its five-minute deduplication window). A second send SQS stores is a
    /// second key, whatever its deduplication id: on a queue with content-based deduplication,
    /// the same body sent ten minutes later is a new event. Copies the library makes of one
    /// message carry the header (an [outbox](crate::outbox)'s resends, a handler's outputs, a
    /// redrive's copies), so they are one key whenever they are sent; give other producers the
    /// header, or take a [business key](Key::json_pointer).
    #[default]
    Delivered,
    /// The SQS message id: redeliveries of one send only.
    MessageId,
    /// The message's FIFO deduplication id, else (a standard queue's message has none) its SQS
    /// message id. An explicit choice that **merges sends for the whole [retention](Inbox::retention)**,
    /// not SQS's five minutes: every later send with an id the inbox has completed is acked
    /// without running. On a queue or topic with content-based deduplication the id is the body's
    /// SHA-256, so every later message with the same body is dropped for as long as the key is
    /// kept (a repeated command, a periodic reading); take it only when producers choose ids that
    /// name one event each.
    DeduplicationId,
    /// The value of a header (a `String` or `Number` message attribute).
    Header(String),
    /// The value at an [RFC 6901](https://www.rfc-editor.org/rfc/rfc6901) JSON pointer into the
    /// body (`"/payment/id"`): a string as it is, a number or boolean as its JSON text. Made by
    /// [`Key::json_pointer`].
    JsonPointer(String),
}

impl Key {
    /// The value at `pointer` in the message's JSON body: a business key such as
    /// `"/payment_id"`.
    pub fn json_pointer(pointer: impl Into<String>) -> Self {
        Self::JsonPointer(pointer.into())
    }

    /// `message`'s key, or why it has none.
    fn of(&self, message: &Message) -> Result<String, String> {
        match self {
            // Never the deduplication id: SQS forgets it after five minutes, the inbox keeps a
            // key for its retention, so keying by it would drop sends SQS stored as new (N1).
            Self::Delivered => Ok(message
                .header(IDEMPOTENCY_KEY_HEADER)
                .unwrap_or(message.message_id())
                .to_owned()),
            Self::MessageId => Ok(message.message_id().to_owned()),
            Self::DeduplicationId => Ok(message
                .sqs()
                .dedup_id()
                .unwrap_or(message.message_id())
                .to_owned()),
            Self::Header(name) => message
                .header(name)
                .map(str::to_owned)
                .ok_or_else(|| format!("the message has no `{name}` header, the inbox's key")),
            Self::JsonPointer(pointer) => {
                let body: serde_json::Value =
                    serde_json::from_str(message.body()).map_err(|error| {
                        format!("the body is not JSON, so it has no key at `{pointer}`: {error}")
                    })?;
                match body.pointer(pointer) {
                    Some(serde_json::Value::String(key)) => Ok(key.clone()),
                    Some(value @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => {
                        Ok(value.to_string())
                    }
                    Some(other) => Err(format!(
                        "the body's `{pointer}` is {other}, not a string or number the inbox can key by"
                    )),
                    None => Err(format!("the body has nothing at `{pointer}`, the inbox's key")),
                }
            }
        }
    }
}

/// A subscription's inbox: its store and how it keys and keeps messages. Given to
/// [`SubscriberBuilder::idempotent`]; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Inbox<S> {
    store: S,
    key: Key,
    wait: Duration,
    retention: Duration,
}

impl<S: InboxStore> Inbox<S> {
    /// An inbox in `store`, keying messages by [`Key::Delivered`], keeping keys for
    /// [`DEFAULT_RETENTION`] and waiting [`DEFAULT_WAIT`] for a held key.
    pub fn new(store: S) -> Self {
        Self {
            store,
            key: Key::Delivered,
            wait: DEFAULT_WAIT,
            retention: DEFAULT_RETENTION,
        }
    }

    /// Keys messages by `key`.
    pub fn key(mut self, key: Key) -> Self {
        self.key = key;
        self
    }

    /// Keeps a completed key for `retention`: a copy of the message arriving later is handled
    /// again. Keep it longer than a message can stay in the queue and its dead-letter queue
    /// (SQS keeps messages up to 14 days) if a redriven copy must not post twice.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// Waits up to `wait` for another attempt that holds the key (a copy being handled by
    /// another replica) before retrying the message later.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }
}

impl<H, O, C> SubscriberBuilder<H, O, C, OneAtATime> {
    /// Handles each message effectively once through `inbox`: its handler runs inside a claim on
    /// the message's key and writes in the claim's transaction ([`Context::transaction`]); a
    /// copy whose key is completed is acked without running it. The inbox runs inside every
    /// other layer, next to the handler. See [`inbox`](crate::inbox).
    pub fn idempotent<S: InboxStore>(self, inbox: Inbox<S>) -> Self {
        self.innermost(move |queue: &SqsQueue, outputs: &[Publisher]| {
            let lease = queue
                .consumer
                .handler_timeout
                .map_or(LEASE_WITHOUT_TIMEOUT, |timeout| timeout + LEASE_MARGIN);
            Layers::of(InboxLayer {
                settings: ClaimSettings {
                    wait: inbox.wait,
                    lease,
                    retention: inbox.retention,
                },
                store: inbox.store,
                key: inbox.key,
                outputs: outputs.into(),
                sweeps: Arc::new(Sweeper::default()),
            })
        })
    }
}

/// The inbox as a layer around one subscription's handler.
struct InboxLayer<S> {
    store: S,
    key: Key,
    settings: ClaimSettings,
    /// The subscription's outputs: recorded outputs are sent again through them.
    outputs: Arc<[Publisher]>,
    sweeps: Arc<Sweeper>,
}

impl<S: InboxStore> InboxLayer<S> {
    /// Deletes expired keys in the background, at most once a minute, 500 at a time.
    fn sweep_when_due(&self) {
        let store = self.store.clone();
        self.sweeps.when_due("inbox keys", move |limit| {
            let store = store.clone();
            async move { store.sweep(limit).await }
        });
    }
}

impl<S: InboxStore> Middleware for InboxLayer<S> {
    async fn call(&self, mut call: Call, next: Next) -> Outcomes {
        let message = &call.messages()[0];
        let key = match self.key.of(message) {
            Ok(key) => InboxKey::new(message.queue(), key),
            Err(reason) => {
                return Outcomes::all(HandlerOutcome::dead_letter(format!(
                    "no idempotency key: {reason}"
                )))
            }
        };
        self.sweep_when_due();
        let claim = match self.store.claim(&key, self.settings).await {
            Ok(claim) => claim,
            Err(error) => {
                tracing::warn!(inbox.key = %key.key, error = %error, "the inbox could not claim the message's key; it is retried");
                return Outcomes::all(HandlerOutcome::retry());
            }
        };
        let transaction = match claim {
            Claim::Claimed(transaction) => transaction,
            Claim::Busy => {
                tracing::info!(inbox.key = %key.key, "another attempt holds the message's key; it is retried");
                return Outcomes::all(HandlerOutcome::retry());
            }
            Claim::Completed(recorded) => return self.already_handled(&key, recorded),
        };
        let slot = InboxTransaction::new(transaction);
        call.insert(InboxTransaction::<S::Transaction>(slot.0.clone()));
        let outcomes = next.run(call).await;
        // The handler has returned, so its guard is gone, unless it kept one past its return.
        let Some(transaction) = slot.take() else {
            tracing::error!(inbox.key = %key.key, "the handler kept the inbox's transaction past its return; the message is retried");
            return Outcomes::all(HandlerOutcome::retry());
        };
        if *outcomes.outcome_of(0) != HandlerOutcome::Ack {
            self.roll_back(transaction, &key).await;
            return outcomes;
        }
        let mut transaction = transaction;
        let mut outcomes = outcomes;
        if let Err(reason) = self.write_scheduled(&mut transaction, &mut outcomes).await {
            tracing::warn!(inbox.key = %key.key, error = %reason, "the handler's transaction is rolled back and the message retried");
            self.roll_back(transaction, &key).await;
            return Outcomes::all(HandlerOutcome::failed(reason));
        }
        let recorded = recorded::record(outcomes.published(0));
        match self
            .store
            .complete(transaction, &key, recorded.as_deref())
            .await
        {
            Ok(()) => outcomes,
            Err(error) => {
                tracing::warn!(inbox.key = %key.key, error = %error, "the inbox could not commit the handler's transaction; the message is retried");
                Outcomes::all(HandlerOutcome::retry())
            }
        }
    }
}

impl<S: InboxStore> InboxLayer<S> {
    /// Rolls back a failed attempt's transaction: its writes are undone, its key free again.
    async fn roll_back(&self, transaction: S::Transaction, key: &InboxKey) {
        if let Err(error) = self.store.release(transaction).await {
            tracing::warn!(inbox.key = %key.key, error = %error, "the inbox could not roll back the failed attempt's transaction; the database rolls it back when the connection closes");
        }
    }

    /// Writes the handler's outputs whose schedule SQS cannot keep itself
    /// ([`Outgoing::needs_outbox`]: a delay beyond 900 s, any on a FIFO queue or a topic) as rows
    /// of the store's outbox in `transaction`, and takes them out of `outcomes`: they commit with
    /// the key or not at all, the store's relay sends them when due, and a duplicate of the
    /// message does not send them again (they are not among the outputs recorded with the key).
    ///
    /// # Errors
    ///
    /// Why an output could not be written, the message to fail the attempt with: a store that
    /// keeps no outbox in the inbox's transaction refuses such an output as a send refuses it
    /// (its delay is out of SQS's range, pointing to the outbox); a schedule out of the outbox's
    /// range; the store's failure.
    async fn write_scheduled(
        &self,
        transaction: &mut S::Transaction,
        outcomes: &mut Outcomes,
    ) -> Result<(), String> {
        let Some(published) = outcomes.published_mut(0) else {
            return Ok(());
        };
        if !published.iter().any(Outgoing::needs_outbox) {
            return Ok(());
        }
        let (scheduled, now): (Vec<Outgoing>, Vec<Outgoing>) = std::mem::take(published)
            .into_iter()
            .partition(Outgoing::needs_outbox);
        *published = now;
        for outgoing in scheduled {
            let name = outgoing.destination().name().to_owned();
            if !S::OUTBOX_IN_TRANSACTION {
                // The send's own refusal, before any call: one message, one path.
                let refusal = match outgoing.into_request() {
                    Err(error) => error.to_string(),
                    Ok(_) => format!("queue `{name}`: SQS cannot keep this output's delay"),
                };
                return Err(format!(
                    "an output could not be sent: {refusal} (this inbox's store keeps no outbox in its transaction)"
                ));
            }
            let prepared = PreparedRow::new(outgoing).map_err(|error| {
                format!("an output to `{name}` could not be scheduled: {error}")
            })?;
            self.store
                .write_outbox(transaction, prepared.row(None))
                .await
                .map_err(|error| {
                    let error = OutboxError::from_write(error);
                    format!("an output to `{name}` could not be scheduled: {error}")
                })?;
            prepared.written();
        }
        Ok(())
    }

    /// A copy of a message whose key is completed: acked, with the recorded outputs sent again.
    fn already_handled(&self, key: &InboxKey, recorded: Option<String>) -> Outcomes {
        let outputs = match recorded
            .as_deref()
            .map(|text| recorded::replay(text, &self.outputs))
        {
            None => Vec::new(),
            Some(Ok(outputs)) => outputs,
            Some(Err(error)) => {
                tracing::error!(inbox.key = %key.key, error = %error, "the message was handled before, and its recorded outputs cannot be sent again; it is dead-lettered for a person to reconcile");
                return Outcomes::all(HandlerOutcome::dead_letter(format!(
                    "handled before (inbox key `{}`), and its recorded outputs cannot be sent again: {error}",
                    key.key
                )));
            }
        };
        tracing::info!(
            inbox.key = %key.key,
            outputs = outputs.len(),
            "handled before: acked without running the handler, its recorded outputs sent again"
        );
        crate::metrics::inbox_duplicate(&key.consumer);
        Outcomes::handled([(HandlerOutcome::Ack, outputs)], Vec::new())
    }
}

/// The claim's transaction, shared between the inbox and the handler for the length of the call.
pub(crate) struct InboxTransaction<T>(Arc<AsyncMutex<Option<T>>>);

impl<T> InboxTransaction<T> {
    /// `transaction`, as the inbox lends it to a handler: what a `TestContext` is given.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn new(transaction: T) -> Self {
        Self(Arc::new(AsyncMutex::new(Some(transaction))))
    }

    /// The transaction back, when no guard of the handler's holds it any more (and nobody took
    /// it before): what the inbox does after the handler returns.
    fn take(&self) -> Option<T> {
        self.0.try_lock().ok().and_then(|mut slot| slot.take())
    }
}

/// The inbox's open transaction for the message being handled, from [`Context::transaction`]:
/// it derefs to the store's transaction type (`sqlx::Transaction` for the database stores,
/// [`MemoryTransaction`](crate::store::memory::MemoryTransaction) in the process). Write the
/// handler's rows through it; the inbox commits or rolls back after the handler returns, so
/// drop it before then (never keep it past the handler's return).
pub struct Transaction<T: 'static>(OwnedMutexGuard<Option<T>>);

impl<T> fmt::Debug for Transaction<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("inbox::Transaction(..)")
    }
}

impl<T> Deref for Transaction<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0
            .as_ref()
            .expect("the inbox takes its transaction back only after the handler returns")
    }
}

impl<T> DerefMut for Transaction<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.0
            .as_mut()
            .expect("the inbox takes its transaction back only after the handler returns")
    }
}

/// Why a handler has no inbox transaction.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransactionError {
    /// The subscription has no inbox of that store type.
    #[error(
        "this message has no inbox transaction of `{store}`: mount its subscription with \
         `.idempotent(Inbox::new(store))` on a store of that type"
    )]
    NoInbox {
        /// The store type asked for.
        store: &'static str,
    },
}

impl Context<'_> {
    /// The inbox's open transaction for this message, when its subscription is
    /// [`idempotent`](crate::SubscriberBuilder::idempotent) with a store of type `S`: the
    /// handler's writes in it commit together with the message's key, or not at all. See
    /// [`inbox`](crate::inbox).
    pub async fn transaction<S: InboxStore>(
        &self,
    ) -> Result<Transaction<S::Transaction>, TransactionError> {
        let shared = self.extension::<InboxTransaction<S::Transaction>>().ok_or(
            TransactionError::NoInbox {
                store: std::any::type_name::<S>(),
            },
        )?;
        Ok(Transaction(shared.0.clone().lock_owned().await))
    }

    /// Takes the inbox transaction of store type `S` out of the context, once the handler has
    /// returned: what the inbox does to commit it (see `testing::TestContext::transaction`).
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn take_transaction<S: InboxStore>(&self) -> Option<S::Transaction> {
        self.extension::<InboxTransaction<S::Transaction>>()?.take()
    }
}
