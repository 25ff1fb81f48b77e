//! The relay: the [`Worker`] that sends what an outbox's committed transactions wrote, in each
//! destination's commit order (each FIFO group's, and scheduled rows when due), and deletes it
//! once sent. `mod.rs` has the writing side and re-exports the relay.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::model::{SnsTopic, SqsQueue};
use crate::publish::{recorded, Outgoing, Publisher};
use crate::store::{Backlog, Due, OutboxRow, OutboxStore, StoreError};
use crate::worker::{Worker, WorkerContext};

/// How many rows a relay reads in one round unless [`Relay::batch_size`] says otherwise.
pub const DEFAULT_BATCH_SIZE: u32 = 500;

/// How far apart a relay starts rounds that find less than a full batch, unless
/// [`Relay::poll_interval`] says otherwise. A round's rows go out in calls of 10 packed by
/// group, and a round's last call is seldom full: at a thousand events a second a round every
/// 100 ms sends about 0.105 calls an event (every 50 ms, 0.11–0.115) and keeps commit → visible
/// under 150 ms at the 99th percentile on a local LocalStack (`docs/benchmarks.md`).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// How long a relay may hold the outbox's lease without a word before the store takes it back
/// (a relay that hangs), unless [`Relay::lease_timeout`] says otherwise: above the 20 s a send
/// is retried for.
pub const DEFAULT_LEASE_TIMEOUT: Duration = Duration::from_secs(60);

/// How old the oldest row may get before the app stops being ready, unless
/// [`Relay::unready_after`] says otherwise.
pub const DEFAULT_UNREADY_AFTER: Duration = Duration::from_secs(60);

/// How long a relay waits before its next round after its store failed.
const STORE_RETRY: Duration = Duration::from_secs(1);

/// Sends what an outbox's committed transactions wrote, in order, and deletes it once sent: a
/// [`Worker`] of the app (`b.worker(broker.relay(store))`). Made by
/// [`SqsBroker::relay`](crate::SqsBroker::relay); see the [module docs](crate::outbox).
pub struct Relay<S> {
    store: S,
    core: Arc<Client>,
    name: String,
    batch_size: u32,
    poll_interval: Duration,
    lease_timeout: Duration,
    unready_after: Duration,
}

impl<S> std::fmt::Debug for Relay<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relay")
            .field("name", &self.name)
            .field("batch_size", &self.batch_size)
            .field("poll_interval", &self.poll_interval)
            .finish_non_exhaustive()
    }
}

impl<S: OutboxStore> Relay<S> {
    pub(crate) fn new(store: S, core: Arc<Client>) -> Self {
        Self {
            store,
            core,
            name: "outbox".to_owned(),
            batch_size: DEFAULT_BATCH_SIZE,
            poll_interval: DEFAULT_POLL_INTERVAL,
            lease_timeout: DEFAULT_LEASE_TIMEOUT,
            unready_after: DEFAULT_UNREADY_AFTER,
        }
    }

    /// Names the relay in health reports and metrics (default `outbox`): for an app with
    /// several outboxes.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Reads up to `rows` rows a round (default [`DEFAULT_BATCH_SIZE`], at least 1): more fills
    /// more `SendMessageBatch` calls of 10 when many groups are busy.
    pub fn batch_size(mut self, rows: u32) -> Self {
        self.batch_size = rows.max(1);
        self
    }

    /// Starts a round at most every `interval` while rounds find less than a full batch
    /// (default [`DEFAULT_POLL_INTERVAL`]): the most a committed row waits to be read, beyond
    /// the round under way.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long the relay may hold the outbox's lease without a word before the store takes it
    /// back (default [`DEFAULT_LEASE_TIMEOUT`]); keep it above the 20 s a send is retried for.
    pub fn lease_timeout(mut self, timeout: Duration) -> Self {
        self.lease_timeout = timeout;
        self
    }

    /// How old the oldest waiting row may get before the app is no longer ready (default
    /// [`DEFAULT_UNREADY_AFTER`]).
    pub fn unready_after(mut self, age: Duration) -> Self {
        self.unready_after = age;
        self
    }
}

/// What a relay keeps between rounds: the publishers it made, and the groups held behind a row
/// that failed.
#[derive(Default)]
struct RelayState {
    publishers: HashMap<(String, bool), Publisher>,
    /// Groups (destination, group) whose oldest row failed: only that row goes until it is sent.
    held: HashSet<(String, String)>,
}

/// What one round did.
enum Round {
    /// Another relay holds the lease.
    Standby,
    /// The rows read, sent and deleted.
    Relayed {
        read: usize,
        backlog: Backlog,
        failed: usize,
    },
}

impl<S: OutboxStore> Relay<S> {
    /// The publisher of `destination` (a topic's when `topic`), made once, bound to the broker.
    fn publisher(&self, state: &mut RelayState, destination: &str, topic: bool) -> Publisher {
        state
            .publishers
            .entry((destination.to_owned(), topic))
            .or_insert_with(|| {
                let publisher = if topic {
                    Publisher::for_topic(SnsTopic::new(destination))
                } else {
                    Publisher::new(SqsQueue::new(destination))
                };
                publisher.bind(&self.core);
                publisher
            })
            .clone()
    }

    /// One round: the lease, the oldest rows, their sends, the delete of those sent.
    async fn round(&self, state: &mut RelayState) -> Result<Round, StoreError> {
        let Some(leased) = self
            .store
            .lease(self.batch_size, self.lease_timeout)
            .await?
        else {
            return Ok(Round::Standby);
        };
        let read_at = tokio::time::Instant::now();
        let read = leased.rows.len();
        let backlog = leased.backlog;
        crate::metrics::outbox_backlog(&self.name, backlog.rows, backlog.oldest_age);
        crate::metrics::outbox_waiting_scheduled(&self.name, backlog.scheduled);
        let scheduled: HashMap<i64, Due> = leased
            .rows
            .iter()
            .filter(|row| row.due.scheduled)
            .map(|row| (row.id, row.due))
            .collect();
        let (sendable, mut failed) = self.sendable(state, leased.rows);
        let mut sent = Vec::new();
        let mut sends = Vec::new();
        for ((destination, topic), rows) in sendable {
            let publisher = self.publisher(state, &destination, topic);
            sends.push(async move {
                let (ids, outgoings): (Vec<_>, Vec<_>) = rows.into_iter().unzip();
                let answers = publisher.send_batch(outgoings).await;
                (ids, answers)
            });
        }
        // A group with a row that failed this round stays held, even if a later row of it went
        // in the same call before SQS failed the earlier one.
        let mut failed_groups = HashSet::new();
        for (rows, answers) in futures_util::future::join_all(sends).await {
            for ((id, destination, group), answer) in rows.into_iter().zip(answers) {
                match answer {
                    Ok(_) => {
                        if let Some(due) = scheduled.get(&id) {
                            crate::metrics::outbox_lateness(
                                &self.name,
                                lateness(*due, read_at.elapsed()),
                            );
                        }
                        sent.push(id);
                        if let Some(group) = group {
                            let key = (destination, group);
                            if !failed_groups.contains(&key) {
                                state.held.remove(&key);
                            }
                        }
                    }
                    Err(error) => {
                        failed += 1;
                        tracing::warn!(outbox.row = id, messaging.destination.name = %destination, error = %error, "the outbox could not send a row; it stays, and holds its group, until it is sent");
                        if let Some(group) = group {
                            failed_groups.insert((destination.clone(), group.clone()));
                            state.held.insert((destination, group));
                        }
                    }
                }
            }
        }
        crate::metrics::outbox_relayed(&self.name, sent.len(), failed);
        self.store.finish(leased.lease, &sent).await?;
        Ok(Round::Relayed {
            read,
            backlog,
            failed,
        })
    }

    /// The rows of a round as messages to send, by destination, each group's in order: a held
    /// group sends only its oldest row. Answers how many could not be made into messages (they
    /// stay, and hold their group).
    #[allow(clippy::type_complexity)]
    fn sendable(
        &self,
        state: &mut RelayState,
        rows: Vec<OutboxRow>,
    ) -> (
        Vec<(
            (String, bool),
            Vec<((i64, String, Option<String>), Outgoing)>,
        )>,
        usize,
    ) {
        let mut by_destination: Vec<((String, bool), Vec<_>)> = Vec::new();
        let mut seen_held: HashSet<(String, String)> = HashSet::new();
        let mut unreadable = 0;
        for row in rows {
            let group_key = row
                .group_id
                .clone()
                .map(|group| (row.destination.clone(), group));
            if let Some(key) = &group_key {
                if state.held.contains(key) && !seen_held.insert(key.clone()) {
                    continue;
                }
            }
            let mut topic_of_row = false;
            let replayed = recorded::replay_with(&row.message, |to, topic| {
                topic_of_row = topic;
                Some(self.publisher(state, to, topic))
            });
            let outgoing = match replayed.map(|mut outgoings| outgoings.pop()) {
                Ok(Some(outgoing)) => outgoing,
                Ok(None) => {
                    unreadable += 1;
                    tracing::error!(
                        outbox.row = row.id,
                        "an outbox row holds no message; it stays for a person to look at"
                    );
                    continue;
                }
                Err(error) => {
                    unreadable += 1;
                    tracing::error!(outbox.row = row.id, error = %error, "an outbox row cannot be read; it stays, and holds its group, for a person to look at");
                    if let Some(key) = group_key {
                        state.held.insert(key);
                    }
                    continue;
                }
            };
            // Read before it is due (a standard queue's row within SQS's 900 s): SQS keeps it
            // invisible for the rest, rounded up to the second so that it is never early.
            let outgoing = if row.due.until.is_zero() {
                outgoing
            } else {
                outgoing.delay(row.due.until)
            };
            let destination = (row.destination.clone(), topic_of_row);
            let entry = (row.id, row.destination, row.group_id);
            match by_destination
                .iter_mut()
                .find(|(existing, _)| *existing == destination)
            {
                Some((_, rows)) => rows.push((entry, outgoing)),
                None => by_destination.push((destination, vec![(entry, outgoing)])),
            }
        }
        (by_destination, unreadable)
    }
}

/// How late a scheduled row became visible: its lateness when read (or, read early, the part of
/// a second its `DelaySeconds` was rounded up by), and the time from the read to its send.
fn lateness(due: Due, since_read: Duration) -> Duration {
    let at_read = if due.until.is_zero() {
        due.past
    } else {
        let whole =
            Duration::from_secs(due.until.as_secs() + u64::from(due.until.subsec_nanos() > 0));
        whole - due.until
    };
    at_read + since_read
}

impl<S: OutboxStore> Worker for Relay<S> {
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn run(self, context: WorkerContext) {
        let mut state = RelayState::default();
        let mut commits = self.store.commits();
        loop {
            let started = tokio::time::Instant::now();
            // Seen before the round reads: a commit during it wakes the wait after it.
            if let Some(commits) = &mut commits {
                commits.borrow_and_update();
            }
            let mut idle_until_next = None;
            let wait = match self.round(&mut state).await {
                Ok(Round::Standby) => {
                    context
                        .probe()
                        .report(true, "standing by: another relay holds the outbox");
                    self.poll_interval
                }
                Ok(Round::Relayed {
                    read,
                    backlog,
                    failed,
                }) => {
                    let oldest = backlog.oldest_age.unwrap_or_default();
                    let keeping_up = oldest < self.unready_after;
                    context.probe().report(
                        keeping_up,
                        format!(
                            "{} rows waiting, the oldest for {} ms; {failed} failed in the last round",
                            backlog.rows,
                            oldest.as_millis()
                        ),
                    );
                    // Rounds start a poll interval apart, however long a round took: a row
                    // committed during a slow round is read as soon as it ends, not an interval
                    // later.
                    if read as u32 >= self.batch_size && failed == 0 {
                        Duration::ZERO
                    } else {
                        // Nothing was ready: nothing is left behind either (rows of a held
                        // group, a failed send), so the relay may sleep until a commit.
                        if read == 0 {
                            idle_until_next = Some(backlog.next_in);
                        }
                        self.poll_interval.saturating_sub(started.elapsed())
                    }
                }
                Err(error) => {
                    tracing::warn!(outbox = %self.name, error = %error, "the outbox relay cannot reach its store; it tries again");
                    context
                        .probe()
                        .report(false, format!("cannot reach the store: {error}"));
                    STORE_RETRY
                }
            };
            tokio::select! {
                () = context.shutdown().requested() => break,
                () = tokio::time::sleep(wait) => {}
            }
            // A store that signals its commits (the in-process one) needs no polling while
            // nothing is due: the relay sleeps until a commit or its next scheduled row, so a
            // paused clock passes days of schedule in as many rounds as there are due times.
            if let (Some(commits), Some(next_in)) = (&mut commits, idle_until_next) {
                let next = async {
                    match next_in {
                        Some(next_in) => {
                            tokio::time::sleep(next_in.saturating_sub(started.elapsed())).await;
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = context.shutdown().requested() => break,
                    _ = commits.changed() => {}
                    () = next => {}
                }
            }
        }
    }
}
