//! A publisher's command history: [`Outgoing::once`](super::Outgoing::once) gives a send a key
//! and a duration, and a send whose key was sent within its duration, by this process or any
//! replica sharing the store, is skipped. It works on standard queues, which have no deduplication
//! of their own, and on FIFO queues beyond their five-minute window.
//!
//! ```
//! use std::time::Duration;
//!
//! use rust_stream::prelude::*;
//! use rust_stream::publish::History;
//! use rust_stream::store::memory::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), rust_stream::PublishError> {
//! let broker = SqsBroker::in_process();
//! let scrapes = broker
//!     .publisher(SqsQueue::new("player-scrapes").create_if_missing())
//!     .with_history(History::new(MemoryStore::new()));
//!
//! let first = scrapes.raw("zezima").once("zezima", Duration::from_secs(300)).send().await?;
//! let second = scrapes.raw("zezima").once("zezima", Duration::from_secs(300)).send().await?;
//! assert!(!first.duplicate);
//! assert!(second.duplicate, "skipped: the key was sent less than 300 s ago");
//! assert_eq!(second.message_id, first.message_id, "answered with the original's id");
//! assert_eq!(broker.api_calls().send_message_batch, 1);
//! # Ok(())
//! # }
//! ```
//!
//! Each send with a key [reserves](HistoryStore::reserve) it (pending, for [`History::lease`]),
//! sends, then [confirms](HistoryStore::confirm) it sent for the send's duration, or, when the
//! send failed, [cancels](HistoryStore::cancel) it so that a retry goes out. A send that finds
//! its key pending (another replica is sending it right now) waits for that send, up to
//! [`History::wait`], and is then skipped (it was sent) or sent (it failed), or answers
//! [`PublishError::InFlight`](crate::PublishError::InFlight). A process killed between the
//! reservation and the confirmation leaves its key pending until the lease passes, then the next
//! send of the key goes out: a crash may send a command twice, never lose it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::history::{HistoryKey, HistoryStore, Reservation, SentRecord, Ticket};
use crate::store::sweeper::Sweeper;
use crate::store::StoreError;
use crate::transport::SentMessage;

/// How long a reserved key stays pending unless [`History::lease`] says otherwise.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long a send waits for another send of its key unless [`History::wait`] says otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(5);

/// The first and the longest pause between two looks at a key another send holds.
const FIRST_LOOK: Duration = Duration::from_millis(10);
const LONGEST_LOOK: Duration = Duration::from_millis(200);

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A [`HistoryStore`] behind a pointer, so that a [`Publisher`](crate::Publisher) of any store is
/// one type.
trait ErasedStore: Send + Sync + 'static {
    fn reserve<'a>(&'a self, key: &'a HistoryKey, lease: Duration) -> Boxed<'a, Reservation>;
    fn confirm<'a>(
        &'a self,
        key: &'a HistoryKey,
        ticket: &'a Ticket,
        sent: &'a SentRecord,
        duration: Duration,
    ) -> Boxed<'a, bool>;
    fn cancel<'a>(&'a self, key: &'a HistoryKey, ticket: &'a Ticket) -> Boxed<'a, ()>;
    fn sweep(&self, sweeper: &Arc<Sweeper>);
}

impl<S: HistoryStore> ErasedStore for S {
    fn reserve<'a>(&'a self, key: &'a HistoryKey, lease: Duration) -> Boxed<'a, Reservation> {
        Box::pin(HistoryStore::reserve(self, key, lease))
    }

    fn confirm<'a>(
        &'a self,
        key: &'a HistoryKey,
        ticket: &'a Ticket,
        sent: &'a SentRecord,
        duration: Duration,
    ) -> Boxed<'a, bool> {
        Box::pin(HistoryStore::confirm(self, key, ticket, sent, duration))
    }

    fn cancel<'a>(&'a self, key: &'a HistoryKey, ticket: &'a Ticket) -> Boxed<'a, ()> {
        Box::pin(HistoryStore::cancel(self, key, ticket))
    }

    fn sweep(&self, sweeper: &Arc<Sweeper>) {
        let store = self.clone();
        sweeper.when_due("command history keys", move |limit| {
            let store = store.clone();
            async move { store.sweep_history(limit).await }
        });
    }
}

/// Where a publisher keeps its command history, and how long a send holds a key: given to
/// [`Publisher::with_history`](crate::Publisher::with_history). See the [module docs](self). Clones
/// share the store.
#[derive(Clone)]
pub struct History {
    store: Arc<dyn ErasedStore>,
    lease: Duration,
    wait: Duration,
    sweeper: Arc<Sweeper>,
}

impl fmt::Debug for History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("History")
            .field("lease", &self.lease)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

impl History {
    /// A command history in `store` ([`MemoryStore`](crate::store::memory::MemoryStore),
    /// `SqliteStore`, `PostgresStore`: every replica that must send a key once shares it), with
    /// a lease of [`DEFAULT_LEASE`] and a wait of [`DEFAULT_WAIT`]. Keys past their duration are
    /// deleted in the background, at most once a minute, 500 at a time.
    pub fn new<S: HistoryStore>(store: S) -> Self {
        Self {
            store: Arc::new(store),
            lease: DEFAULT_LEASE,
            wait: DEFAULT_WAIT,
            sweeper: Arc::default(),
        }
    }

    /// How long a send holds its key pending before it is confirmed: a sender that dies (or
    /// hangs) in between frees the key when this passes. Keep it longer than a send can take
    /// (the SDK's retries included): a send confirmed after its lease passed may have been sent
    /// by another replica too, which is logged.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long a send that finds its key pending (another send of it under way) waits for that
    /// send to be confirmed or cancelled before it answers
    /// [`PublishError::InFlight`](crate::PublishError::InFlight).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Reserves `key`, waiting up to [`wait`](Self::wait) while another send holds it: the
    /// ticket to send under, or the answer of the send that was made.
    pub(crate) async fn reserve(
        &self,
        key: &HistoryKey,
        queue: &str,
        topic: bool,
    ) -> Result<Held, Refused> {
        let deadline = Instant::now() + self.wait;
        let mut pause = FIRST_LOOK;
        loop {
            let reservation = self.reserve_once(key).await.map_err(Refused::Store)?;
            match reservation {
                Reservation::Reserved(ticket) => return Ok(Held::Reserved(ticket)),
                Reservation::Sent(sent) => {
                    crate::metrics::history_skipped(queue, topic);
                    tracing::debug!(
                        messaging.destination.name = %queue,
                        history.key = %key.key,
                        messaging.message.id = %sent.message_id,
                        "sent before, within its duration: skipped"
                    );
                    return Ok(Held::Sent(SentMessage {
                        message_id: sent.message_id,
                        sequence_number: sent.sequence_number,
                        duplicate: true,
                    }));
                }
                Reservation::Pending => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Refused::InFlight);
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(LONGEST_LOOK);
        }
    }

    /// Reserves `key` for [`lease`](Self::lease), without waiting for another send holding it
    /// (the answer is [`Reservation::Pending`] then), and sweeps expired keys when due: one look
    /// at the history, for a caller that answers a pending key itself (the HTTP queue API's
    /// push ignores it).
    pub(crate) async fn reserve_once(&self, key: &HistoryKey) -> Result<Reservation, StoreError> {
        self.store.sweep(&self.sweeper);
        self.store.reserve(key, self.lease).await
    }

    /// Records how the send under `ticket` ended: sent, answered `sent` (kept for `duration`), or
    /// failed, `None` (the key freed). A store that cannot be reached leaves the key pending until
    /// its lease passes.
    pub(crate) async fn settle(
        &self,
        key: &HistoryKey,
        ticket: &Ticket,
        sent: Option<&SentMessage>,
        duration: Duration,
    ) {
        match sent {
            Some(sent) => {
                let record = SentRecord {
                    message_id: sent.message_id.clone(),
                    sequence_number: sent.sequence_number.clone(),
                };
                match self.store.confirm(key, ticket, &record, duration).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(
                        history.key = %key.key,
                        messaging.message.id = %sent.message_id,
                        lease_ms = self.lease.as_millis() as u64,
                        "the key's lease passed (or a bounded store evicted it) before its send \
                         was confirmed: another send of it may have gone out too; lengthen the \
                         history's lease (or raise the store's capacity)"
                    ),
                    Err(error) => tracing::warn!(
                        history.key = %key.key,
                        messaging.message.id = %sent.message_id,
                        error = %error,
                        "sent, but the command history could not mark the key sent: it stays \
                         pending until its lease passes, and a send of it after that goes out again"
                    ),
                }
            }
            None => {
                if let Err(error) = self.store.cancel(key, ticket).await {
                    tracing::warn!(
                        history.key = %key.key,
                        error = %error,
                        "the send failed and the command history could not free its key: it is \
                         freed when its lease passes"
                    );
                }
            }
        }
    }
}

/// Why a reservation gave a send no answer.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The store failed.
    Store(StoreError),
    /// Another send held the key for longer than the history's wait.
    InFlight,
}

/// What a reservation gave a send.
pub(crate) enum Held {
    /// Send, under this ticket.
    Reserved(Ticket),
    /// Skip: this is what the send of the key was answered, marked a duplicate.
    Sent(SentMessage),
}
