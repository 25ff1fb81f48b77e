//! The command history a publisher keeps in a store, so that replicas sending the same command
//! (the same key) within a duration send it once: the [`HistoryStore`] contract.
//!
//! A send with a key goes through three steps, none of which holds a database transaction open
//! across the SQS call:
//!
//! 1. [`reserve`](HistoryStore::reserve): the key is written as *pending*, under a [`Ticket`] of
//!    this send's, for a short lease. A key already sent within its duration answers
//!    [`Reservation::Sent`] (the send is skipped); a key another send has reserved answers
//!    [`Reservation::Pending`].
//! 2. The message is sent.
//! 3. [`confirm`](HistoryStore::confirm): the key is marked *sent*, with the message's id, for the
//!    duration the publisher asked for. Or, when the send failed, [`cancel`](HistoryStore::cancel):
//!    the key is free again, so a retry sends.
//!
//! A process killed between 1 and 3 leaves the key pending; when its lease passes, the next
//! `reserve` takes it over, so a crash never loses a send: at worst (a kill after the send and
//! before its `confirm`) the message is sent twice. Expired keys, sent or pending, are deleted by
//! [`sweep_history`](HistoryStore::sweep_history) in batches.
//!
//! Every store of this crate keeps it: [`MemoryStore`](super::memory::MemoryStore) on tokio's
//! clock, `SqliteStore` and `PostgresStore` in a table `rust_stream_history` (schema version 2)
//! on the database's clock. The publisher's side is [`History`](crate::publish::History).

use std::fmt;
use std::future::Future;
use std::time::Duration;

use super::StoreError;

/// A key in the history: where the message goes, and the command's own key. The same key sent
/// to two queues is two keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HistoryKey {
    /// The queue the message goes to, as the broker names it (`topic:NAME` for an SNS topic).
    pub destination: String,
    /// The command's key: a hash of the payload, a business id.
    pub key: String,
}

impl HistoryKey {
    /// The key `key` of sends to `destination`.
    pub fn new(destination: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            destination: destination.into(),
            key: key.into(),
        }
    }
}

/// One send's hold on a pending key: only the send holding it confirms or cancels the key, so
/// a send whose lease passed (and whose key another send took over) changes nothing.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Ticket(String);

impl Ticket {
    /// A new ticket, unique across processes (a UUID).
    pub fn new() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    /// The ticket as text, as a database store keeps it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Ticket {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ticket({})", self.0)
    }
}

/// What the send of a key was answered: kept with the key so that a skipped send answers with
/// the original's message id, as SQS answers a deduplicated FIFO send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentRecord {
    /// The message id SQS gave the send.
    pub message_id: String,
    /// Its FIFO sequence number.
    pub sequence_number: Option<String>,
}

/// What reserving a key found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reservation {
    /// The key is this send's, pending under the ticket until it is confirmed or cancelled, or
    /// its lease passes.
    Reserved(Ticket),
    /// The key was sent within its duration: skip this send.
    Sent(SentRecord),
    /// Another send holds the key and its lease has not passed: it is being sent right now (or
    /// its sender died, and the lease frees it). Ask again later.
    Pending,
}

/// A store that keeps a command history: see the [module docs](self).
///
/// Times are the store's: the database's clock for a database store, so that replicas whose
/// clocks disagree agree on when a key expires.
pub trait HistoryStore: Clone + Send + Sync + 'static {
    /// Reserves `key` for a send, pending for `lease`: when it is free, when its duration has
    /// passed, or when another send's lease on it has passed (that send is taken for dead).
    fn reserve(
        &self,
        key: &HistoryKey,
        lease: Duration,
    ) -> impl Future<Output = Result<Reservation, StoreError>> + Send;

    /// Marks `key` sent (answered `sent`) for `duration`, if `ticket` still holds it; answers
    /// whether it did. `false` means the lease passed first and another send may have taken the
    /// key over.
    fn confirm(
        &self,
        key: &HistoryKey,
        ticket: &Ticket,
        sent: &SentRecord,
        duration: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Frees `key`, if `ticket` still holds it: its send failed, so the next send of the key
    /// goes out.
    fn cancel(
        &self,
        key: &HistoryKey,
        ticket: &Ticket,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes up to `limit` keys whose duration (or, pending, whose lease) has passed; answers
    /// how many it deleted (fewer than `limit`: none are left for now).
    fn sweep_history(&self, limit: u32) -> impl Future<Output = Result<u64, StoreError>> + Send;
}
