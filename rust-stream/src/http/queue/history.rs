//! The command history of the HTTP queue API's pushes: a push with a `hashCode` is stored once
//! while its hash is in the history (for the push's `expiresIn`, 300 s by default), and ignored
//! otherwise, so replicas pushing the same command at once store one message.
//!
//! [`CommandHistory`] is the seam a store takes; [`MemoryHistory`], the one the API uses unless
//! told otherwise, keeps it in this process (so it holds across the pushes this server answers,
//! not across replicas: replicas that must agree share a store behind the trait). A push goes
//! through three steps and holds nothing across the SQS call: [`reserve`](CommandHistory::reserve)
//! the hash, send, then [`confirm`](CommandHistory::confirm) it for its duration, or
//! [`cancel`](CommandHistory::cancel) it when the send failed, so that the client's retry is
//! stored rather than ignored (a failed push never leaves its hash behind to swallow the retry).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// A future a [`CommandHistory`] answers with.
pub type HistoryFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, HistoryError>> + Send + 'a>>;

/// Why a command history could not answer (a store out of reach).
#[derive(Debug, thiserror::Error)]
#[error("the command history failed: {0}")]
pub struct HistoryError(pub String);

/// What reserving a hash found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The hash is this push's until it confirms or cancels it (or `lease` passes): push.
    Reserved(u64),
    /// The hash was pushed within its duration: ignore this push.
    Pushed,
    /// Another push holds the hash right now: ignore this one (that push stores the message, or
    /// fails and tells its own client to retry).
    Pending,
}

/// Where a push's `hashCode` is remembered: see [the module](self). Keys are per queue.
pub trait CommandHistory: Send + Sync + 'static {
    /// Reserves `hash` of `queue` for a push, for at most `lease` (a push that dies holding it
    /// frees it then).
    fn reserve<'a>(
        &'a self,
        queue: &'a str,
        hash: &'a str,
        lease: Duration,
    ) -> HistoryFuture<'a, Reservation>;

    /// Marks `hash` pushed for `duration` from now, if `ticket` still holds it.
    fn confirm<'a>(
        &'a self,
        queue: &'a str,
        hash: &'a str,
        ticket: u64,
        duration: Duration,
    ) -> HistoryFuture<'a, ()>;

    /// Frees `hash`, if `ticket` still holds it: its push failed.
    fn cancel<'a>(&'a self, queue: &'a str, hash: &'a str, ticket: u64) -> HistoryFuture<'a, ()>;
}

/// A hash's state in a [`MemoryHistory`].
#[derive(Debug, Clone, Copy)]
enum Entry {
    Pending { ticket: u64, until: Instant },
    Pushed { until: Instant },
}

impl Entry {
    fn until(self) -> Instant {
        match self {
            Self::Pending { until, .. } | Self::Pushed { until } => until,
        }
    }
}

/// A command history in this process's memory, on tokio's clock. Cheap to clone (clones share
/// it). Expired hashes are dropped as new ones come.
#[derive(Debug, Clone, Default)]
pub struct MemoryHistory {
    inner: Arc<Mutex<MemoryState>>,
}

#[derive(Debug, Default)]
struct MemoryState {
    entries: HashMap<(String, String), Entry>,
    next_ticket: u64,
}

impl MemoryHistory {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// The hashes held now, pending or pushed (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.state().entries.len()
    }

    /// Whether it holds no hash.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        // A panic elsewhere while holding the lock leaves the map whole (every change is one
        // insert or remove), so its contents are still good.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl CommandHistory for MemoryHistory {
    fn reserve<'a>(
        &'a self,
        queue: &'a str,
        hash: &'a str,
        lease: Duration,
    ) -> HistoryFuture<'a, Reservation> {
        let now = Instant::now();
        let mut state = self.state();
        state.entries.retain(|_, entry| entry.until() > now);
        let key = (queue.to_owned(), hash.to_owned());
        let answer = match state.entries.get(&key) {
            Some(Entry::Pushed { .. }) => Reservation::Pushed,
            Some(Entry::Pending { .. }) => Reservation::Pending,
            None => {
                state.next_ticket += 1;
                let ticket = state.next_ticket;
                state.entries.insert(
                    key,
                    Entry::Pending {
                        ticket,
                        until: now + lease,
                    },
                );
                Reservation::Reserved(ticket)
            }
        };
        Box::pin(std::future::ready(Ok(answer)))
    }

    fn confirm<'a>(
        &'a self,
        queue: &'a str,
        hash: &'a str,
        ticket: u64,
        duration: Duration,
    ) -> HistoryFuture<'a, ()> {
        let mut state = self.state();
        let key = (queue.to_owned(), hash.to_owned());
        if let Some(entry) = state.entries.get_mut(&key) {
            if matches!(*entry, Entry::Pending { ticket: held, .. } if held == ticket) {
                *entry = Entry::Pushed {
                    until: Instant::now() + duration,
                };
            }
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn cancel<'a>(&'a self, queue: &'a str, hash: &'a str, ticket: u64) -> HistoryFuture<'a, ()> {
        let mut state = self.state();
        let key = (queue.to_owned(), hash.to_owned());
        if matches!(
            state.entries.get(&key),
            Some(Entry::Pending { ticket: held, .. }) if *held == ticket
        ) {
            state.entries.remove(&key);
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_hash_is_pushed_once_within_its_duration_and_again_after_it() {
        let history = MemoryHistory::new();
        let lease = Duration::from_secs(30);
        let Reservation::Reserved(ticket) = history.reserve("q", "h", lease).await.unwrap() else {
            panic!("a new hash is reserved");
        };
        assert_eq!(
            history.reserve("q", "h", lease).await.unwrap(),
            Reservation::Pending
        );
        assert!(matches!(
            history.reserve("other", "h", lease).await.unwrap(),
            Reservation::Reserved(_)
        ));
        history
            .confirm("q", "h", ticket, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(
            history.reserve("q", "h", lease).await.unwrap(),
            Reservation::Pushed
        );
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(matches!(
            history.reserve("q", "h", lease).await.unwrap(),
            Reservation::Reserved(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_or_abandoned_hash_is_free_again() {
        let history = MemoryHistory::new();
        let lease = Duration::from_secs(30);
        let Reservation::Reserved(ticket) = history.reserve("q", "h", lease).await.unwrap() else {
            panic!("a new hash is reserved");
        };
        // Another ticket's cancel changes nothing.
        history.cancel("q", "h", ticket + 1).await.unwrap();
        assert_eq!(
            history.reserve("q", "h", lease).await.unwrap(),
            Reservation::Pending
        );
        history.cancel("q", "h", ticket).await.unwrap();
        let Reservation::Reserved(_) = history.reserve("q", "h", lease).await.unwrap() else {
            panic!("a cancelled hash is free");
        };
        tokio::time::advance(Duration::from_secs(31)).await;
        assert!(matches!(
            history.reserve("q", "h", lease).await.unwrap(),
            Reservation::Reserved(_)
        ));
    }
}
