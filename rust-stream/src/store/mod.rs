//! Where the inbox keeps what it knows about each message it has handled, and where the outbox
//! keeps the messages a transaction publishes until they are sent: the [`InboxStore`] and
//! [`OutboxStore`] contracts, and the stores that keep both.
//!
//! SQS delivers at least once, so a consumer that must act exactly once (post a payment, ship
//! an order) remembers which messages it has already acted on. The inbox does so by *claiming* a
//! message's key in a store before its handler runs. The claim is a database transaction: the
//! handler writes its own rows in it, and the key is marked done in the same commit, so either
//! both happen or neither does. A duplicate delivery finds the key done and is acked without
//! running the handler again; a failed or panicking attempt rolls the transaction back, which
//! releases the key for its retry.
//!
//! The stores:
//!
//! - [`memory::MemoryStore`]: in the process, on tokio's clock, for tests (a paused clock expires
//!   its keys without waiting); the handler's "writes" are actions run on commit.
//! - `postgres::PostgresStore` (feature `postgres`): PostgreSQL, shared by every replica of a
//!   service; the handler gets a `sqlx::Transaction<'static, sqlx::Postgres>`.
//! - `sqlite::SqliteStore` (feature `sqlite`): SQLite, the embedded default: a file, no server, one
//!   process; the handler gets a `sqlx::Transaction<'static, sqlx::Sqlite>`.
//!
//! The outbox is the other half: a transaction that commits a ledger row also writes the event
//! that announces it, as a row of the same database ([`OutboxStore::write`]); a relay sends the
//! committed rows in order and deletes them ([`OutboxStore::lease`], [`OutboxStore::finish`]).
//! A rolled-back transaction leaves no row, so nothing is published for it; a committed one
//! leaves a row that stays until it is sent. See [`outbox`](crate::outbox).
//!
//! Each database store creates its tables on first use and records the schema version it wrote,
//! so a later release can migrate them (and an older one refuses a newer schema). Their tables
//! are named `rust_stream_*`: `rust_stream_inbox` holds the keys, `rust_stream_outbox` the
//! messages waiting to be relayed, `rust_stream_schema` one row for each schema version applied.
//!
//! The same stores keep the command history publishers consult ([`history`], the
//! [`HistoryStore`](history::HistoryStore) contract): keys of sends made within a duration, so
//! that replicas sending the same command send it once. Its table is `rust_stream_history`.

use std::future::Future;
use std::time::Duration;

pub mod history;
pub mod memory;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub mod sqlite;
pub(crate) mod sweeper;

/// How long of real time one database call may hold a paused clock still: a call that waits for
/// something only the clock can bring (a pool connection held by a handler that sleeps on
/// tokio's clock) lets the clock go on after this, so such a test ends with the call's own
/// timeout instead of hanging.
#[cfg(feature = "testing")]
const HOLD_AT_MOST: Duration = Duration::from_secs(10);

/// Awaits `work`, which waits for a database's answer, with a paused tokio clock held still
/// meanwhile (built with the `testing` feature, on a current-thread runtime; elsewhere it is
/// `work.await`).
///
/// Why: a paused clock jumps to the next timer whenever every task waits, and a task waiting for
/// a database waits for a socket or for sqlx's SQLite thread, which tokio cannot see. The jump
/// fires sqlx's pool acquire timeout (or a claim's own) at once, so every call failed with
/// `PoolTimedOut`. tokio holds its paused clock while a `spawn_blocking` task runs, so
/// a blocking task that waits for `work` to end (at most [`HOLD_AT_MOST`]) keeps time from
/// passing while the database answers, as it would not pass in real time either.
#[cfg_attr(
    not(any(feature = "testing", feature = "postgres", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) async fn hold_the_clock<F: Future>(work: F) -> F::Output {
    #[cfg(feature = "testing")]
    return hold_the_clock_at_most(HOLD_AT_MOST, work).await;
    #[cfg(not(feature = "testing"))]
    work.await
}

/// [`hold_the_clock`], letting the clock go on after `limit` of real time: for a wait that may
/// well be for something only the clock brings (a lock held by a transaction that sleeps on it).
#[cfg_attr(
    not(any(feature = "testing", feature = "postgres", feature = "sqlite")),
    allow(dead_code)
)]
pub(crate) async fn hold_the_clock_at_most<F: Future>(
    #[cfg_attr(not(feature = "testing"), allow(unused_variables))] limit: Duration,
    work: F,
) -> F::Output {
    #[cfg(feature = "testing")]
    {
        use tokio::runtime::{Handle, RuntimeFlavor};
        // Only a current-thread runtime has a clock to pause.
        let paused_kind = Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::CurrentThread);
        if paused_kind {
            let (done, finished) = std::sync::mpsc::channel::<()>();
            // Ends when `done` is dropped: when `work` ends, or this future is dropped with it.
            drop(tokio::task::spawn_blocking(move || {
                let _ = finished.recv_timeout(limit);
            }));
            let output = work.await;
            drop(done);
            return output;
        }
    }
    work.await
}

/// A database store's call, with a paused clock held still while the database answers
/// ([`hold_the_clock`]).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
async fn held<T>(work: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    hold_the_clock(work).await
}

/// The key the inbox claims for one message: which consumer handles it, and the message's
/// idempotency key (by default its `rust_stream.idempotency_key` header, else its message id; or
/// a key the inbox was told to take). Two subscriptions that consume the same message keep
/// separate keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InboxKey {
    /// The consumer the key belongs to: the subscription's queue name.
    pub consumer: String,
    /// The message's idempotency key.
    pub key: String,
}

impl InboxKey {
    /// The key `key` of `consumer`.
    pub fn new(consumer: impl Into<String>, key: impl Into<String>) -> Self {
        Self {
            consumer: consumer.into(),
            key: key.into(),
        }
    }
}

/// How a claim is made: how long to wait for another attempt that holds the key, how long the
/// claim may stay open, and how long a completed key is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClaimSettings {
    /// How long a claim waits for another attempt that holds the key to commit or roll back
    /// before it answers [`Claim::Busy`].
    pub wait: Duration,
    /// How long the claim's transaction may sit open waiting for its client (the handler's
    /// timeout and a margin): a database store has the server roll back a transaction idle for
    /// longer, so a client that hangs or loses its connection frees the key. (In the process, the
    /// engine's handler timeout drops the transaction, which frees it.)
    pub lease: Duration,
    /// How long the key is kept once completed: a duplicate delivered later is handled again.
    pub retention: Duration,
}

/// What claiming a key found.
#[derive(Debug)]
pub enum Claim<T> {
    /// The key is this attempt's, held by `T`, the open transaction: the handler runs, and
    /// [`InboxStore::complete`] commits its writes with the key, or
    /// [`InboxStore::release`] (or dropping `T`) rolls both back.
    Claimed(T),
    /// An earlier attempt completed the key; what it recorded with it (the inbox's record of the
    /// handler's outputs, to send again), if anything.
    Completed(Option<String>),
    /// Another attempt held the key for longer than [`ClaimSettings::wait`]: try again later.
    Busy,
}

/// A store the inbox claims keys in: see the [module docs](self).
///
/// Every method's transaction is the one [`claim`](Self::claim) opened; dropping it without
/// [`complete`](Self::complete) rolls it back, so a handler that panics or times out (whose
/// future is dropped) releases its key.
pub trait InboxStore: Clone + Send + Sync + 'static {
    /// The open transaction a claim holds, which the handler writes its own rows in.
    type Transaction: Send + 'static;

    /// Opens a transaction and claims `key` in it. When another attempt holds the key, waits up to
    /// `settings.wait` for it to commit (then [`Claim::Completed`]) or roll back (then the claim
    /// is this attempt's).
    fn claim(
        &self,
        key: &InboxKey,
        settings: ClaimSettings,
    ) -> impl Future<Output = Result<Claim<Self::Transaction>, StoreError>> + Send;

    /// Marks `key` completed, with `recorded` beside it, and commits `transaction`: the handler's
    /// writes and the key together. An error means nothing was committed.
    fn complete(
        &self,
        transaction: Self::Transaction,
        key: &InboxKey,
        recorded: Option<&str>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Rolls `transaction` back: the handler's writes are undone and the key is free again.
    fn release(
        &self,
        transaction: Self::Transaction,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Deletes up to `limit` completed keys whose retention has passed; answers how many it
    /// deleted (fewer than `limit`: none are left for now).
    fn sweep(&self, limit: u32) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Whether the store keeps an outbox that [`write_outbox`](Self::write_outbox) writes in the
    /// claim's transaction, scheduled rows included: the in-process, SQLite and PostgreSQL stores
    /// do. Not by default.
    const OUTBOX_IN_TRANSACTION: bool = false;

    /// Writes `row` to the store's outbox through `transaction`, the claim's, as
    /// [`OutboxStore::write`] does: what the inbox does with a handler's output whose delay SQS
    /// cannot keep itself (beyond 900 s, or on a FIFO queue or a topic), so that the store's
    /// relay sends it when due, and only if the handler's transaction commits. By default the
    /// store keeps no such outbox ([`OUTBOX_IN_TRANSACTION`](Self::OUTBOX_IN_TRANSACTION) is
    /// false) and this answers [`StoreError::NoOutboxInTransaction`].
    fn write_outbox(
        &self,
        transaction: &mut Self::Transaction,
        row: NewOutboxRow<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (transaction, row);
        std::future::ready(Err(StoreError::NoOutboxInTransaction))
    }
}

/// A store on a SQL database, SQLite or PostgreSQL: what a service written once for both names
/// as its bound, so that one handler runs on `SqliteStore` locally and `PostgresStore` in
/// production, chosen by configuration.
///
/// It ties the store's types together: the inbox's transaction is a `sqlx::Transaction` of
/// [`Database`](Self::Database), and the outbox writes through that database's connection, so
/// generic code can write the outbox row in the inbox's transaction (`send(&mut ***transaction)`)
/// and mount [`Inbox::new(store)`](crate::inbox::Inbox::new) for any `S: SqlStore`. The service's
/// own statements stay its own: sqlx cannot bind a value for a database it does not know, so a
/// service puts its writes behind a trait of its own (`trait Ledger: SqlStore`) with one impl per
/// store, usually the same SQL twice (SQLite reads PostgreSQL's `$1` placeholders). See
/// `docs/exactly-once.md`, "SQLite locally, PostgreSQL in production", and
/// `tests/inbox_backends.rs`, which runs one such handler on both.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "postgres", feature = "sqlite"))))]
pub trait SqlStore:
    InboxStore<Transaction = sqlx::Transaction<'static, Self::Database>>
    + OutboxStore<Connection = <Self::Database as sqlx::Database>::Connection>
{
    /// sqlx's database: `sqlx::Sqlite` or `sqlx::Postgres`.
    type Database: sqlx::Database;

    /// The pool the store claims in, for the service's own queries outside the inbox (creating
    /// its tables, reads).
    fn pool(&self) -> &sqlx::Pool<Self::Database>;
}

/// A message written to an outbox, as the store keeps it until the relay sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxRow {
    /// The row's place in the outbox: rows are relayed in this order, which within one group of
    /// one destination is the order their transactions committed in.
    pub id: i64,
    /// The declared name of the queue or topic it goes to.
    pub destination: String,
    /// Its message group, on a FIFO destination: a store keeps the rows of one group of one
    /// destination in commit order (see [`OutboxStore::write`]).
    pub group_id: Option<String>,
    /// The message itself, as the outbox encoded it: body, group, deduplication id, headers.
    pub message: String,
    /// When it is due, by the store's clock, as the store read it: see [`Due`].
    pub due: Due,
    /// The key it was scheduled under ([`NewOutboxRow::schedule_key`]), which a transaction
    /// cancels it by.
    pub schedule_key: Option<String>,
}

/// When an outbox row is due, as a store read it: how far ahead or behind its store's clock.
///
/// A row written without a due time is due when it is written; the relay reads a row once it is
/// due, or, where its message may ride SQS's `DelaySeconds` (a standard queue), up to
/// [`NewOutboxRow::send_early`] before, and sends it with the delay left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Due {
    /// Whether the row was written with a due time of its own (`deliver_at`, `delay`), not
    /// due at once: only these count in the schedule's metrics.
    pub scheduled: bool,
    /// How long until it is due, when it was read (zero once due).
    pub until: Duration,
    /// How long it had been due, when it was read (zero when not yet due).
    pub past: Duration,
}

/// What [`OutboxStore::write`] is given: a row without its id, which the store assigns.
#[derive(Clone, Copy, Debug)]
pub struct NewOutboxRow<'a> {
    /// See [`OutboxRow::destination`].
    pub destination: &'a str,
    /// See [`OutboxRow::group_id`].
    pub group_id: Option<&'a str>,
    /// See [`OutboxRow::message`].
    pub message: &'a str,
    /// How long after the write the row is due: zero (due at once, in commit order), or the
    /// delay of a scheduled message.
    pub due_in: Duration,
    /// How long before it is due the relay may send it, with SQS's `DelaySeconds` for the rest:
    /// up to 900 s on a standard queue, zero where a message cannot be delayed (a FIFO queue, a
    /// topic).
    pub send_early: Duration,
    /// A key to cancel the row by ([`OutboxStore::cancel`]), unique among the destination's
    /// rows waiting to be sent.
    pub schedule_key: Option<&'a str>,
}

/// What [`OutboxStore::cancel`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a cancel may find its message already sent"]
pub enum Cancellation {
    /// The row was waiting: once the transaction commits it is never sent (a rollback keeps it).
    Cancelled,
    /// The row was sent, or is being sent by the relay's round under way: it may well be
    /// delivered.
    AlreadySent,
    /// The row was cancelled before.
    AlreadyCancelled,
    /// No row of the destination has that key: never scheduled (or not committed yet), or sent
    /// or cancelled longer ago than the store remembers keys
    /// ([`SCHEDULE_KEY_RETENTION`]).
    NotFound,
}

impl Cancellation {
    /// What a cancel answers for a key no waiting row holds, from the remembered keys' table:
    /// `Some(sent)` for a key sent (`true`) or cancelled (`false`) within the retention.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    fn of_finished_key(sent: Option<bool>) -> Self {
        match sent {
            Some(true) => Cancellation::AlreadySent,
            Some(false) => Cancellation::AlreadyCancelled,
            None => Cancellation::NotFound,
        }
    }
}

/// How long a store remembers the key of a scheduled row once it was sent or cancelled, so that
/// [`OutboxStore::cancel`] can answer [`Cancellation::AlreadySent`] or
/// [`Cancellation::AlreadyCancelled`]: seven days.
pub const SCHEDULE_KEY_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// How much waits in an outbox: what the relay reports as metrics and readiness.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// Committed rows not yet relayed.
    pub rows: u64,
    /// How long the oldest of them has waited, by the store's clock; `None` when there is none.
    /// A scheduled row waits from when the relay may send it, not from its write.
    pub oldest_age: Option<Duration>,
    /// Rows scheduled for later, not yet for the relay to send (the database stores count them
    /// at most every 10 s, and answer their last count meanwhile).
    pub scheduled: u64,
    /// How long until the next scheduled row is for the relay to send, when the store can tell
    /// (the in-process store, whose relay sleeps until then instead of polling).
    pub next_in: Option<Duration>,
}

/// The rows a relay took under its lease: [`OutboxStore::finish`] deletes those it sent and
/// gives the lease up.
#[derive(Debug)]
pub struct Leased<L> {
    /// The lease itself: while it is held no other relay of the same outbox reads rows.
    pub lease: L,
    /// The committed rows due (or, where they may go early, due within their
    /// [`send_early`](NewOutboxRow::send_early)), earliest due first, ties in commit order, at
    /// most the number asked for.
    pub rows: Vec<OutboxRow>,
    /// The whole outbox's backlog when the rows were read.
    pub backlog: Backlog,
}

/// A store the [outbox](crate::outbox) writes its messages in, in the caller's own transaction,
/// and its relay reads them from.
///
/// The contract:
///
/// - [`write`](Self::write) inserts a row through the caller's connection, so it commits or rolls
///   back with the caller's own writes. Rows of one group of one destination get ids in the
///   order their transactions commit: a store serializes such writers (PostgreSQL by a lock on
///   the group held to the commit; SQLite and the in-process store have one writer at a time).
/// - [`lease`](Self::lease) gives the outbox to one relay at a time, across processes where the
///   store is shared, and reads the oldest committed rows; another relay gets `None` meanwhile.
/// - [`finish`](Self::finish) deletes the rows the relay sent and gives the lease up. A relay that
///   dies holding the lease loses it (its connection closes, or its transaction times out):
///   the next relay reads the same rows and sends them again, with the same deduplication ids.
pub trait OutboxStore: Clone + Send + Sync + 'static {
    /// What a row is written through: the caller's open transaction, as the store's database
    /// types it (`sqlx::PgConnection` or `sqlx::SqliteConnection`, which a `sqlx::Transaction`
    /// derefs to; the in-process store's [`MemoryTransaction`](memory::MemoryTransaction)).
    type Connection: Send + ?Sized;
    /// A relay's hold on the outbox, from [`lease`](Self::lease) to [`finish`](Self::finish).
    type Lease: Send + 'static;

    /// Writes `row` through `connection`, in its transaction: visible to the relay once that
    /// transaction commits, never if it rolls back.
    fn write(
        &self,
        connection: &mut Self::Connection,
        row: NewOutboxRow<'_>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Takes the outbox's lease and reads up to `limit` of its oldest committed rows; `None`
    /// while another relay holds the lease. The lease lapses by itself after `lease_timeout`
    /// without a call (a relay that hangs).
    fn lease(
        &self,
        limit: u32,
        lease_timeout: Duration,
    ) -> impl Future<Output = Result<Option<Leased<Self::Lease>>, StoreError>> + Send;

    /// Deletes the rows `sent` (ids the lease read) and gives the lease up. An error means the
    /// rows may still be there: the next lease reads them again.
    fn finish(
        &self,
        lease: Self::Lease,
        sent: &[i64],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Cancels the row of `destination` scheduled under `key`, through `connection`, in its
    /// transaction: once it commits the row is never sent. A row the relay has read in a round
    /// under way is [`Cancellation::AlreadySent`], as is one sent since.
    fn cancel(
        &self,
        connection: &mut Self::Connection,
        destination: &str,
        key: &str,
    ) -> impl Future<Output = Result<Cancellation, StoreError>> + Send;

    /// A signal that changes whenever a transaction commits rows to this outbox, for a store that
    /// can give one (the in-process store): its relay then sleeps until a commit or the next
    /// scheduled row instead of polling. `None` (the default): the relay polls.
    fn commits(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// What went wrong in a store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database answered with an error, or could not be reached.
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    #[error("the store's database failed: {0}")]
    Database(#[from] sqlx::Error),
    /// A scheduled row's key is taken: another row of the same destination waits under it (or
    /// is being written under it by a transaction not yet committed). Cancel that one first, in
    /// the same transaction, to reschedule.
    #[error(
        "the schedule key `{key}` of `{destination}` is taken by a message waiting to be sent: \
         cancel it first (in the same transaction, to reschedule it) or choose another key"
    )]
    ScheduleKeyInUse {
        /// The destination.
        destination: String,
        /// The key.
        key: String,
    },
    /// A handler's output was to be written to the outbox in the inbox's transaction of a store
    /// that keeps no outbox there ([`InboxStore::OUTBOX_IN_TRANSACTION`] is false).
    #[error(
        "this inbox's store keeps no outbox in its transaction: a handler's output due later \
         than SQS can delay it needs a store that does (the in-process, SQLite or PostgreSQL store)"
    )]
    NoOutboxInTransaction,
    /// The database's tables were written by a newer rust-stream than this one.
    #[error(
        "the database's rust-stream tables are at schema version {found}, newer than this \
         release's {supported}: run the newer release, or point this one at another database"
    )]
    NewerSchema {
        /// The version the database records.
        found: i64,
        /// The newest version this release knows.
        supported: i64,
    },
}

/// The schema version this release's database stores migrate to: what `rust_stream_schema`
/// records last (1: the inbox; 2: the producers' command history; 3: the outbox; 4: scheduled
/// outbox rows).
pub const SCHEMA_VERSION: i64 = 4;

/// One step of a database store's schema: the statements that take it from the version before to
/// `version`. Each store keeps its own list, oldest first; a release that adds tables (the outbox)
/// appends a step.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
struct Migration {
    version: i64,
    statements: &'static str,
}

/// The steps of `migrations` a database at schema version `found` (0: none yet) still needs, or
/// [`StoreError::NewerSchema`] when a newer release wrote it.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn pending(
    migrations: &'static [Migration],
    found: i64,
) -> Result<&'static [Migration], StoreError> {
    let supported = migrations.last().map_or(0, |migration| migration.version);
    if found > supported {
        return Err(StoreError::NewerSchema { found, supported });
    }
    Ok(&migrations[migrations.partition_point(|migration| migration.version <= found)..])
}

/// The outbox's clock in the database stores: milliseconds since the Unix epoch, the host's
/// clock as read once in the process and advanced by tokio's clock since, which the in-process
/// store and the relay keep time by. In a service that is the host's time; under a paused clock
/// a schedule of days passes without waiting, and every store of the process (one reopened too)
/// reads the same time. The inbox and the command history keep the database's own clock.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn outbox_now_millis() -> i64 {
    static ANCHOR: std::sync::OnceLock<(i64, std::time::Instant)> = std::sync::OnceLock::new();
    let (epoch_millis, anchor) = *ANCHOR.get_or_init(|| {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (since_epoch.as_millis() as i64, std::time::Instant::now())
    });
    // Each runtime's tokio clock maps to the epoch the same way, a paused one behind or ahead.
    let now = tokio::time::Instant::now().into_std();
    match now.checked_duration_since(anchor) {
        Some(after) => epoch_millis + after.as_millis() as i64,
        None => epoch_millis - anchor.duration_since(now).as_millis() as i64,
    }
}

/// How often a database store counts its outbox's rows waiting for later
/// ([`Backlog::scheduled`]): a walk of its index's later part (33 ms at a million rows on SQLite,
/// `docs/scheduling.md`), too much for each round of a relay.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
const RECOUNT_WAITING: Duration = Duration::from_secs(10);

/// A database store's last count of the outbox's rows waiting for later, and when it was made,
/// shared by the store's clones: counted again once older than [`RECOUNT_WAITING`].
#[cfg(any(feature = "postgres", feature = "sqlite"))]
#[derive(Clone, Debug, Default)]
struct WaitingCount(std::sync::Arc<std::sync::Mutex<Option<(tokio::time::Instant, u64)>>>);

#[cfg(any(feature = "postgres", feature = "sqlite"))]
impl WaitingCount {
    /// The last count, unless it is due again.
    fn fresh(&self) -> Option<u64> {
        let last = *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        last.filter(|(at, _)| at.elapsed() < RECOUNT_WAITING)
            .map(|(_, waiting)| waiting)
    }

    /// Keeps `waiting`, counted now, and answers it.
    fn counted(&self, waiting: u64) -> u64 {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((tokio::time::Instant::now(), waiting));
        waiting
    }
}

/// `duration` in whole milliseconds, rounded up (a row is never read before it is due), at most
/// a century ([`retention_millis`]).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn ceil_millis(duration: Duration) -> i64 {
    let millis = duration.as_nanos().div_ceil(1_000_000);
    retention_millis(Duration::from_millis(millis.min(u64::MAX as u128) as u64))
}

/// A signed difference of the outbox's clock in milliseconds as a duration, zero when negative.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn millis(difference: i64) -> Duration {
    Duration::from_millis(u64::try_from(difference).unwrap_or(0))
}

/// When a database store's new outbox row is due and may be read, by [`outbox_now_millis`]: its
/// write time, its due time and its ready time.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn outbox_times(row: &NewOutboxRow<'_>) -> (i64, i64, i64) {
    let now = outbox_now_millis();
    let due = now.saturating_add(ceil_millis(row.due_in));
    let ready = due
        .saturating_sub(row.send_early.as_millis() as i64)
        .max(now);
    (now, due, ready)
}

/// `duration` in whole milliseconds, at least 1 and at most `i32::MAX`: the range of the
/// databases' timeout settings, where 0 would mean "no timeout" rather than "do not wait".
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn timeout_millis(duration: Duration) -> i64 {
    duration.as_millis().clamp(1, i32::MAX as u128) as i64
}

/// A retention in whole milliseconds, for adding to a database's clock: at most a century, so the
/// sum stays within both databases' range of times.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn retention_millis(retention: Duration) -> i64 {
    const CENTURY_MILLIS: u128 = 100 * 366 * 24 * 3600 * 1000;
    retention.as_millis().min(CENTURY_MILLIS) as i64
}

/// Asserts that `migrations` go up one step after another to [`SCHEMA_VERSION`]: what each
/// database store's list must do for [`pending`] to find its steps.
#[cfg(all(test, any(feature = "postgres", feature = "sqlite")))]
fn assert_migrates_to_the_schema_version(migrations: &[Migration]) {
    let versions: Vec<i64> = migrations.iter().map(|step| step.version).collect();
    assert!(
        versions.windows(2).all(|pair| pair[0] < pair[1]),
        "{versions:?}"
    );
    assert_eq!(versions.last(), Some(&SCHEMA_VERSION));
}
