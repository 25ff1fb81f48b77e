//! The kill suites of `tests/fault_kills.rs` on the in-process account, on the in-memory store
//! and, for the inbox, on PostgreSQL (issue 23: the same suites on the in-process account).
//!
//! A SIGKILL cannot reach a store that lives in the test's memory, so each app runs on a tokio
//! runtime of its own, the in-process stand-in for a process, and is killed by cutting its line
//! to SQS (no call it makes afterwards arrives, no answer reaches it) and shutting its runtime
//! down without waiting for its work: every task stops at its next await and is dropped. The
//! app's graceful stop never runs (the stop its dropped run spawns lands on the dead runtime), so
//! the messages it held come back only once their visibility runs out, as after a real kill: each
//! run checks, kill by kill, that all kills but one left messages of the killed app's own in
//! flight (the inbox) or a transaction open (the outbox's writer). A `MemoryTransaction`
//! dropped open rolls back, as a database's transaction does when its connection dies. A fresh
//! app (a new broker over the same `Account`, the same store) takes over, as a restarted
//! process finds the same SQS and the same database. The account spawns no task, so nothing of it
//! dies with an app.
//!
//! - **Kills with an inbox**: 2,000 payments in 20 FIFO groups, and 2,000 on a standard queue,
//!   each also sent 1–3 extra times (on FIFO, odd copies with the original's deduplication id,
//!   dropped by the account within its five minutes, even ones with their own, as copies sent
//!   after the window are stored); the handler posts each to a ledger in the inbox's
//!   transaction; the consumer is killed at five seeded points (by payments posted) and started
//!   again each time: every payment posted exactly once (the ledger's total is the expected
//!   total, none twice), and on FIFO each group's postings in the order sent. Both on the
//!   in-memory store and on PostgreSQL (a ledger table in a schema of the run's own, written
//!   through the inbox's transaction): each app opens its pool on its runtime, so a kill closes
//!   its connections and PostgreSQL rolls back what they held open, which the run checks.
//! - **Kills of an outbox**: 10,000 events over 50 accounts, each in a transaction with its
//!   ledger row, one in ten rolled back on purpose, written through the outbox by an app that
//!   also relays, beside a second app that only relays (the store's lease lets one relay read at a
//!   time). The writer is killed at five seeded points (by events committed) and the relaying
//!   replica once, while SQS is out of their reach in bursts (every call of theirs fails as
//!   unavailable, as the process suite's proxy refuses connections), so that rows pile up and a
//!   relay reads several of an account at once. In the FIFO queue: every committed event once
//!   (0 lost, 0 duplicates stored), no rolled-back one (0 phantoms), each account's events in
//!   commit order.
//!
//! In real time, as the clocks of several runtimes cannot be paused together. `FAULT_SEED=N`
//! replays a run's kill points and outages.

mod common;

use std::collections::HashSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::backend::Backend;
use common::kills::{self, InboxFigures, OutboxFigures, SplitMix};
use common::stores::{postgres_pool, postgres_schema, Schema};
use rust_stream::account::Account;
use rust_stream::inbox::{Inbox, Key, Transaction};
use rust_stream::outbox::Outbox;
use rust_stream::prelude::*;
use rust_stream::store::memory::{MemoryStore, MemoryTransaction};
use rust_stream::store::postgres::PostgresStore;
use rust_stream::store::InboxStore;
use rust_stream::transport::layer::{Action, Hooked, Hooks};
use rust_stream::transport::{
    BatchResult, ChangeVisibilityEntry, DeleteEntry, ReceiveMessage, ReceivedMessage, Transport,
    TransportError,
};
use rust_stream::ShutdownHandle;
use serde::{Deserialize, Serialize};
use sqlx::postgres::{PgConnectOptions, PgPool, Postgres};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

/// How long any one phase of a run (a kill point reached, a queue drained, an app stopped) may
/// take before the test fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// The input queue's visibility timeout, in seconds: short, so that a killed consumer's messages
/// come back soon (a live one's heartbeat extends them at half of it).
const VISIBILITY: &str = "2";

/// What a database's round trip takes, here a timer's tick: the handler and the writer hold
/// their transaction open across it, so kills land in open transactions too, and the writer's
/// 10,000 events take long enough for five kills to land among them.
const ROUND_TRIP: Duration = Duration::from_millis(1);

// ---------------------------------------------------------------------------------------------
// The tests
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn fifo_payments_with_copies_killed_five_times_in_process_post_exactly_once_in_order() {
    let figures = inbox_kill_run(&MemoryLedger::default(), "inbox-kills.fifo", 20, 100).await;
    figures.print("FIFO on the in-memory store");
    figures.assert_exactly_once();
    figures.assert_in_order();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn standard_payments_with_copies_killed_five_times_in_process_post_exactly_once() {
    let figures = inbox_kill_run(&MemoryLedger::default(), "inbox-kills", 20, 100).await;
    figures.print("standard on the in-memory store");
    figures.assert_exactly_once();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn fifo_payments_with_copies_killed_five_times_in_process_on_postgres_post_exactly_once_in_order(
) {
    let Some(ledger) = PostgresLedger::new("fifo").await else {
        return;
    };
    let figures = inbox_kill_run(&ledger, "inbox-kills.fifo", 20, 100).await;
    figures.print("FIFO on PostgreSQL");
    figures.assert_exactly_once();
    figures.assert_in_order();
    ledger.schema.drop_it().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn standard_payments_with_copies_killed_five_times_in_process_on_postgres_post_exactly_once()
{
    let Some(ledger) = PostgresLedger::new("standard").await else {
        return;
    };
    let figures = inbox_kill_run(&ledger, "inbox-kills", 20, 100).await;
    figures.print("standard on PostgreSQL");
    figures.assert_exactly_once();
    ledger.schema.drop_it().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn outbox_events_killed_five_times_in_process_arrive_once_in_commit_order() {
    let figures = outbox_kill_run(10_000, 50).await;
    common::report(format_args!(
        "in process, on the in-memory store: {figures:?}"
    ));
    assert_eq!(figures.lost, 0, "committed events never delivered");
    assert_eq!(figures.phantoms, 0, "rolled-back events delivered");
    assert_eq!(figures.duplicates, 0, "events stored twice");
    assert_eq!(
        figures.order_violations, 0,
        "events out of their account's commit order"
    );
    assert!(figures.faults > 0, "no call failed in an outage");
}

// ---------------------------------------------------------------------------------------------
// The in-process "process"
// ---------------------------------------------------------------------------------------------

/// An app on a tokio runtime of its own: what a process is to `tests/fault_kills.rs`. Dropped (a
/// test that panics), its runtime is shut down as by [`kill`](Self::kill).
struct Process {
    runtime: Option<Runtime>,
    line: Line,
    stop: ShutdownHandle,
    exit: JoinHandle<Result<(), String>>,
}

impl Process {
    /// Makes an app with `start` on a new runtime, so that whatever it spawns or connects, then
    /// or later, is the runtime's (a database pool opened there dies with it), and runs the future
    /// the app's `start` returns there. The app reaches SQS through the [`Line`] it is given.
    fn start<S, F>(start: impl FnOnce(Line) -> S) -> Self
    where
        S: Future<Output = (ShutdownHandle, F)>,
        F: Future<Output = Result<(), String>> + Send + 'static,
    {
        let line = Line::default();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the app");
        let (stop, run) = tokio::task::block_in_place(|| runtime.block_on(start(line.clone())));
        let exit = runtime.spawn(run);
        Self {
            runtime: Some(runtime),
            line,
            stop,
            exit,
        }
    }

    /// The kill: the app's line to SQS is cut, and its runtime stops polling, each task dropped
    /// at its next await. This waits until the runtime's workers have dropped every task (as the
    /// process suite reaps a killed process before it starts the next), never for a task to
    /// finish.
    fn kill(mut self) {
        // Before the runtime: its workers poll a few more tasks while they shut down, and tasks
        // dropped meanwhile free room that a poller still running would fill, receiving messages
        // for handlers that never run (a thousand in a few milliseconds, measured), which no
        // process does after SIGKILL.
        self.line.cut.store(true, Ordering::SeqCst);
        let runtime = self.runtime.take().expect("the app runs");
        tokio::task::block_in_place(|| runtime.shutdown_timeout(PATIENCE));
    }

    /// Stops the app as SIGTERM does, and waits for it to exit.
    async fn terminate(self) -> Result<(), String> {
        self.stop.shutdown();
        self.exit().await
    }

    /// Waits for the app's run to end by itself, then for its runtime to stop.
    async fn exit(mut self) -> Result<(), String> {
        let exit = tokio::time::timeout(PATIENCE, &mut self.exit)
            .await
            .unwrap_or_else(|_| panic!("the app did not exit within {PATIENCE:?}"))
            .map_err(|error| error.to_string())
            .and_then(|exit| exit);
        let runtime = self.runtime.take().expect("the app runs");
        tokio::task::block_in_place(|| runtime.shutdown_timeout(PATIENCE));
        exit
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A process's line to SQS, cut when it is killed: a call made after that never completes, and
/// the answer to one in progress never arrives, as with the requests of a killed process. It
/// also keeps the receipt handles of the messages this process holds (received, not yet deleted
/// or released), so a kill's evidence is its own, not what earlier kills left in flight.
#[derive(Clone, Default)]
struct Line {
    cut: Arc<AtomicBool>,
    held: Arc<Mutex<HashSet<String>>>,
}

impl Line {
    /// How many messages this process holds.
    fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    /// Forgets the handles of `entries` that `result` answers as done.
    fn let_go<'a>(
        &self,
        handles: impl IntoIterator<Item = (&'a str, &'a str)>,
        result: &BatchResult<()>,
    ) {
        let handles: std::collections::HashMap<&str, &str> = handles.into_iter().collect();
        let mut held = self.held.lock().unwrap();
        for (id, ()) in &result.successful {
            if let Some(handle) = handles.get(id.as_ref()) {
                held.remove(*handle);
            }
        }
    }
}

impl Hooks for Line {
    fn around<R: Send>(
        &self,
        _: Action,
        _: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
        let cut = self.cut.clone();
        async move {
            if cut.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            let answer = call.await;
            if cut.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            answer
        }
    }

    async fn receive_message(
        &self,
        inner: &impl Transport,
        url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let received = inner.receive_message(url, request).await?;
        self.held.lock().unwrap().extend(
            received
                .iter()
                .map(|message| message.receipt_handle.clone()),
        );
        Ok(received)
    }

    async fn delete_message_batch(
        &self,
        inner: &impl Transport,
        url: &str,
        entries: Vec<DeleteEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        let handles: Vec<(String, String)> = entries
            .iter()
            .map(|entry| (entry.id.to_string(), entry.receipt_handle.clone()))
            .collect();
        let result = inner.delete_message_batch(url, entries).await?;
        self.let_go(
            handles
                .iter()
                .map(|(id, handle)| (id.as_str(), handle.as_str())),
            &result,
        );
        Ok(result)
    }

    async fn change_message_visibility_batch(
        &self,
        inner: &impl Transport,
        url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        // Only a release (visibility 0) lets a message go; an extension keeps it held.
        let released: Vec<(String, String)> = entries
            .iter()
            .filter(|entry| entry.visibility_timeout == 0)
            .map(|entry| (entry.id.to_string(), entry.receipt_handle.clone()))
            .collect();
        let result = inner.change_message_visibility_batch(url, entries).await?;
        self.let_go(
            released
                .iter()
                .map(|(id, handle)| (id.as_str(), handle.as_str())),
            &result,
        );
        Ok(result)
    }
}

/// Waits until `condition` holds, failing with `what` after [`PATIENCE`].
async fn wait_until(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !condition().await {
        assert!(Instant::now() < deadline, "not {what} within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The kill run with an inbox
// ---------------------------------------------------------------------------------------------

/// A payment: the `seq`-th of its `group` (on FIFO, its message group); `id` names it across its
/// copies (the inbox's key).
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Payment {
    group: String,
    seq: u32,
    id: String,
    amount: i64,
}

/// Where the consumers keep their inbox's keys and post each payment in the inbox's
/// transaction, and how the run reads the postings back: [`MemoryLedger`] or
/// [`PostgresLedger`].
trait Ledger: Clone + Send + Sync + 'static {
    /// The inbox's store.
    type Store: InboxStore;

    /// The store an app opens on its runtime when it starts, as a process opens its database.
    async fn open(&self) -> Self::Store;

    /// Posts `payment` in the inbox's `transaction`: it commits with the payment's key, or not
    /// at all.
    fn post(
        &self,
        payment: &Payment,
        transaction: &mut Transaction<<Self::Store as InboxStore>::Transaction>,
    ) -> impl Future<Output = Result<(), String>> + Send;

    /// Postings, and distinct payments posted.
    async fn posted(&self) -> (usize, usize);

    /// Every posting, in commit order.
    async fn postings(&self) -> Vec<Payment>;

    /// Waits until nothing of a killed app holds a transaction open.
    async fn killed(&self);
}

/// The ledger beside a [`MemoryStore`]: a write queued with `on_commit` lands when the inbox
/// commits, and a `MemoryTransaction` dropped open takes it along, rolled back.
#[derive(Clone, Default)]
struct MemoryLedger {
    store: MemoryStore,
    postings: Arc<Mutex<Vec<Payment>>>,
}

impl Ledger for MemoryLedger {
    type Store = MemoryStore;

    async fn open(&self) -> MemoryStore {
        self.store.clone()
    }

    async fn post(
        &self,
        payment: &Payment,
        transaction: &mut Transaction<MemoryTransaction>,
    ) -> Result<(), String> {
        let (postings, posting) = (self.postings.clone(), payment.clone());
        transaction.on_commit(move || postings.lock().unwrap().push(posting));
        Ok(())
    }

    async fn posted(&self) -> (usize, usize) {
        let postings = self.postings.lock().unwrap();
        let distinct: HashSet<&str> = postings.iter().map(|posting| posting.id.as_str()).collect();
        (postings.len(), distinct.len())
    }

    async fn postings(&self) -> Vec<Payment> {
        self.postings.lock().unwrap().clone()
    }

    /// A killed app's transactions were dropped with its tasks.
    async fn killed(&self) {}
}

/// A ledger table in a schema of the run's own on PostgreSQL, beside the [`PostgresStore`]'s
/// tables. Each app opens a pool of its own on its runtime, its connections named after the
/// schema: they close when the runtime drops them, and PostgreSQL rolls back what they held open,
/// as when a process dies.
#[derive(Clone)]
struct PostgresLedger {
    /// How an app connects: to the run's schema, named after it.
    apps: PgConnectOptions,
    /// The test's own pool, on the test's runtime, to read the ledger with.
    reader: PgPool,
    schema: Schema,
}

impl PostgresLedger {
    /// A new schema for `case` with an empty ledger; `None` (with the kit's loud note, or a
    /// failure under CI) when no PostgreSQL was started.
    async fn new(case: &str) -> Option<Self> {
        let (options, schema) = postgres_schema("kills", case).await?;
        let reader = postgres_pool(&options).await;
        // `posted` numbers the inserts: a group's payments are posted one after the other, so
        // within a group it is their commit order.
        sqlx::query(
            "CREATE TABLE ledger (posted bigserial PRIMARY KEY, id text NOT NULL, \
             grp text NOT NULL, seq int NOT NULL, amount bigint NOT NULL)",
        )
        .execute(&reader)
        .await
        .expect("create the ledger");
        Some(Self {
            apps: options.application_name(&schema.name),
            reader,
            schema,
        })
    }

    /// The apps' connections PostgreSQL still serves.
    async fn apps_connected(&self, pool: &PgPool) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
            .bind(&self.schema.name)
            .fetch_one(pool)
            .await
            .expect("count the apps' connections")
    }
}

impl Ledger for PostgresLedger {
    type Store = PostgresStore;

    async fn open(&self) -> PostgresStore {
        let store = PostgresStore::new(postgres_pool(&self.apps).await)
            .await
            .expect("open the store");
        // The pool is the runtime's, and [`killed`](Ledger::killed) finds its connections.
        assert!(self.apps_connected(store.pool()).await > 0);
        store
    }

    async fn post(
        &self,
        payment: &Payment,
        transaction: &mut Transaction<sqlx::Transaction<'static, Postgres>>,
    ) -> Result<(), String> {
        sqlx::query("INSERT INTO ledger (id, grp, seq, amount) VALUES ($1, $2, $3, $4)")
            .bind(&payment.id)
            .bind(&payment.group)
            .bind(payment.seq as i32)
            .bind(payment.amount)
            .execute(&mut ***transaction)
            .await
            .map(drop)
            .map_err(|error| error.to_string())
    }

    async fn posted(&self) -> (usize, usize) {
        let (postings, distinct): (i64, i64) =
            sqlx::query_as("SELECT count(*), count(DISTINCT id) FROM ledger")
                .fetch_one(&self.reader)
                .await
                .expect("count the postings");
        (postings as usize, distinct as usize)
    }

    async fn postings(&self) -> Vec<Payment> {
        let rows: Vec<(String, i32, String, i64)> =
            sqlx::query_as("SELECT grp, seq, id, amount FROM ledger ORDER BY posted")
                .fetch_all(&self.reader)
                .await
                .expect("read the ledger");
        rows.into_iter()
            .map(|(group, seq, id, amount)| Payment {
                group,
                seq: seq as u32,
                id,
                amount,
            })
            .collect()
    }

    /// The killed app's connections close as its runtime drops them, each open transaction
    /// rolled back by PostgreSQL; a connection that outlived the runtime fails the run here.
    async fn killed(&self) {
        wait_until("every connection of the killed app closed", async || {
            self.apps_connected(&self.reader).await == 0
        })
        .await;
    }
}

/// The handler: posts each payment in the inbox's transaction, and counts its runs.
#[derive(Clone)]
struct Post<L> {
    ledger: L,
    runs: Arc<AtomicUsize>,
}

/// The messages the consumers received a second time or later: most after a kill, once their
/// visibility ran out (the inbox acks those whose payment was posted without running the
/// handler, so the handler cannot count them).
#[derive(Clone, Default)]
struct Redelivered(Arc<Mutex<HashSet<String>>>);

impl Hooks for Redelivered {
    async fn receive_message(
        &self,
        inner: &impl Transport,
        url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        let received = inner.receive_message(url, request).await?;
        self.0.lock().unwrap().extend(
            received
                .iter()
                .filter(|message| message.receive_count() > Some(1))
                .map(|message| message.message_id.clone()),
        );
        Ok(received)
    }
}

impl<L: Ledger> Handle<Payment> for Post<L> {
    async fn handle(
        &self,
        payment: &Payment,
        _: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let mut transaction = ctx
            .transaction::<L::Store>()
            .await
            .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
        self.ledger
            .post(payment, &mut transaction)
            .await
            .map_err(HandlerOutcome::failed)?;
        tokio::time::sleep(ROUND_TRIP).await;
        Ok(())
    }
}

/// The consumer app on `account`: [`Post`] behind an inbox in `store`, keyed by the payment's id.
fn consumer<L: Ledger>(
    (account, redelivered, line): (&Account, &Redelivered, &Line),
    queue: &str,
    concurrency: usize,
    store: L::Store,
    post: &Post<L>,
) -> (
    ShutdownHandle,
    impl Future<Output = Result<(), String>> + Send + 'static,
) {
    // Short long polls, so that the last stop does not wait on one.
    let queue = SqsQueue::new(queue)
        .concurrency(concurrency)
        .wait(Duration::from_secs(1));
    let inbox = Inbox::new(store).key(Key::json_pointer("/id"));
    let mounted = subscriber(queue, post.clone()).idempotent(inbox).build();
    let app = RustStream::new(AppInfo::new("in-process-kills", "0.1.0")).with_broker(
        SqsBroker::with_transport(Hooked::new(
            Hooked::new(account.clone(), redelivered.clone()),
            line.clone(),
        )),
        |b| {
            b.include(mounted);
        },
    );
    let stop = app.shutdown_handle();
    (stop, async move {
        app.run().await.map_err(|error| error.to_string())
    })
}

/// Sends `groups * per_group` payments, then 1–3 extra copies of each, kills the consumer at five
/// seeded points (by payments posted to `ledger`), starting a new one each time, lets the last one
/// finish and reads the ledger.
async fn inbox_kill_run<L: Ledger>(
    ledger: &L,
    base: &str,
    groups: u32,
    per_group: u32,
) -> InboxFigures {
    const KILLS: usize = 5;
    let started = Instant::now();
    let seed = kills::seed(&format!("in-process kills with an inbox ({base})"));
    let mut random = SplitMix(seed);
    let backend = Backend::in_process();
    let fifo = base.ends_with(".fifo");
    let input = backend
        .queue(base, &[("VisibilityTimeout", VISIBILITY)])
        .await;

    // Every payment once, the groups interleaved; then the extra copies, in the same order.
    let publisher = backend.broker.publisher(SqsQueue::new(backend.name(base)));
    let kills::SentPayments {
        payments,
        expected_total,
        copies,
    } = kills::send_payments_with_copies(&publisher, fifo, groups, per_group, &mut random).await;

    let total = payments.len();
    let post = Post {
        ledger: ledger.clone(),
        runs: Arc::default(),
    };
    let redelivered = Redelivered::default();
    let queue = backend.name(base);
    let (account, redelivered_by, queue, post_by) =
        (&backend.transport, &redelivered, &queue, &post);
    let start = move |line: Line| async move {
        let store = post_by.ledger.open().await;
        consumer(
            (account, redelivered_by, &line),
            queue,
            groups as usize,
            store,
            post_by,
        )
    };
    let points = random.kill_points(50, total - 50, KILLS);
    common::report(format_args!(
        "in-process kills with an inbox ({base}): killed after {points:?} payments posted"
    ));
    let mut held_at_kills = Vec::new();
    let mut consumer = Process::start(start);
    for point in &points {
        // Each consumer posts something of its own before it is killed, so no kill lands on one
        // that has not started consuming.
        let (postings_before, _) = ledger.posted().await;
        wait_until(&format!("{point} payments posted"), async || {
            let (postings, distinct) = ledger.posted().await;
            postings > postings_before && distinct >= *point
        })
        .await;
        tokio::time::sleep(Duration::from_millis(random.next() % 50)).await;
        let line = consumer.line.clone();
        consumer.kill();
        // Nothing runs on behalf of the killed consumer now: what it held stays in flight until
        // its visibility runs out. Counted from its own line, as the queue's in-flight count
        // also holds what earlier kills left.
        held_at_kills.push(line.held());
        ledger.killed().await;
        consumer = Process::start(start);
    }
    wait_until("every payment posted", async || {
        ledger.posted().await.1 >= total
    })
    .await;
    wait_until_empty(&backend, &input).await;
    consumer
        .terminate()
        .await
        .expect("the last consumer stops cleanly");
    common::report(format_args!(
        "in-process kills with an inbox ({base}): messages the killed consumer held (left in \
         flight) at each kill {held_at_kills:?}"
    ));
    // Evidence per kill, not per run: all but one kill (a kill may land between two receives)
    // left messages of the killed consumer's own in flight, so the run's figures come from kills
    // that cut work in hand.
    let with_work = held_at_kills.iter().filter(|held| **held > 0).count();
    assert!(
        with_work >= KILLS - 1,
        "only {with_work} of {KILLS} kills left a message in flight: {held_at_kills:?}"
    );

    let postings = ledger.postings().await;
    let distinct: HashSet<&str> = postings.iter().map(|posting| posting.id.as_str()).collect();
    let redelivered = redelivered.0.lock().unwrap().len();
    assert!(
        redelivered > 0,
        "no message was received again after a kill"
    );
    let handler_runs = post.runs.load(Ordering::SeqCst);
    assert!(
        handler_runs > postings.len(),
        "no kill landed in a handler's open transaction"
    );
    InboxFigures {
        kills: "in-process kills",
        seed,
        payments: total,
        copies,
        handler_runs,
        redelivered,
        missing: total - distinct.len(),
        posted_twice: postings.len() - distinct.len(),
        total: postings.iter().map(|posting| posting.amount).sum(),
        expected_total,
        order_violations: fifo.then(|| {
            kills::postings_out_of_order(
                postings
                    .iter()
                    .map(|posting| (posting.group.clone(), posting.seq as i32)),
            )
        }),
        elapsed: started.elapsed(),
    }
}

/// Waits until the queue holds nothing, visible, in flight or delayed.
async fn wait_until_empty(backend: &Backend<Account>, url: &str) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = backend.left(url).await;
        if left == (0, 0, 0) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the queue is not empty after {PATIENCE:?}: (visible, in flight, delayed) {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The outbox's kill run
// ---------------------------------------------------------------------------------------------

/// An event: the `id`-th written, for `account` (its FIFO group).
#[derive(Debug, Serialize, Deserialize)]
struct Posted {
    id: i64,
    account: String,
}

/// SQS out of the producers' reach while `down` is set: each of their calls fails as
/// unavailable, as the process suite's proxy refuses connections.
#[derive(Clone, Default)]
struct Outage {
    down: Arc<AtomicBool>,
    failed: Arc<AtomicU64>,
}

impl Hooks for Outage {
    fn around<R: Send>(
        &self,
        _: Action,
        _: &str,
        call: impl Future<Output = Result<R, TransportError>> + Send,
    ) -> impl Future<Output = Result<R, TransportError>> + Send {
        let down = self.down.load(Ordering::SeqCst);
        if down {
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
        async move {
            if down {
                return Err(TransportError::Unavailable {
                    message: "SQS is out of reach (an injected outage)".into(),
                });
            }
            call.await
        }
    }
}

/// The outbox run's ledger: `(id, account)` of each committed event, in commit order.
type EventLedger = Arc<Mutex<Vec<(i64, String)>>>;

/// What the writers began and ended, to tell the transactions a kill left open.
#[derive(Clone, Default)]
struct Transactions {
    begun: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
}

/// An app that relays the outbox in `store` to `queue` and, when `write`, writes events
/// `0..events` after the last committed one, as `examples/outbox_producer.rs` does: one
/// transaction each with its ledger row, every event whose number ends in 7 rolled back. A writer
/// stops once everything is written and the outbox is empty; a relay alone runs until stopped.
fn producer(
    (account, outage, line): (&Account, &Outage, &Line),
    queue: &str,
    store: &MemoryStore,
    ledger: &EventLedger,
    transactions: &Transactions,
    (events, accounts, write): (i64, i64, bool),
) -> (
    ShutdownHandle,
    impl Future<Output = Result<(), String>> + Send + 'static,
) {
    let broker = SqsBroker::with_transport(Hooked::new(
        Hooked::new(account.clone(), outage.clone()),
        line.clone(),
    ));
    let outbox = Outbox::new(store.clone(), broker.publisher(SqsQueue::new(queue)));
    let app = RustStream::new(AppInfo::new("outbox-producer", "0.1.0")).with_broker(
        broker.clone(),
        |b| {
            b.worker(broker.relay(store.clone()).batch_size(100));
        },
    );
    let stop = app.shutdown_handle();
    let (finished, store, ledger, transactions) = (
        stop.clone(),
        store.clone(),
        ledger.clone(),
        transactions.clone(),
    );
    let run = async move {
        let running = tokio::spawn(app.run());
        if write {
            let next = ledger
                .lock()
                .unwrap()
                .iter()
                .map(|(id, _)| id + 1)
                .max()
                .unwrap_or(0);
            for id in next..events {
                let event = Posted {
                    id,
                    account: format!("account-{:02}", id % accounts),
                };
                transactions.begun.fetch_add(1, Ordering::SeqCst);
                let mut transaction = store.begin();
                let (ledger, row) = (ledger.clone(), (event.id, event.account.clone()));
                transaction.on_commit(move || ledger.lock().unwrap().push(row));
                outbox
                    .message(&event)
                    .group_id(&event.account)
                    .send(&mut transaction)
                    .await
                    .map_err(|error| error.to_string())?;
                tokio::time::sleep(ROUND_TRIP).await;
                if id % 10 == 7 {
                    drop(transaction);
                } else {
                    store.commit(transaction);
                }
                transactions.ended.fetch_add(1, Ordering::SeqCst);
            }
            while !store.outbox_rows().is_empty() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            finished.shutdown();
        }
        running
            .await
            .map_err(|error| error.to_string())?
            .map_err(|error| error.to_string())
    };
    (stop, run)
}

/// Writes `events` over `accounts` through the outbox, killing the writer at five seeded points
/// (by events committed) and the relaying replica once while SQS is out of their reach in bursts,
/// and reads the queue against the ledger.
async fn outbox_kill_run(events: i64, accounts: i64) -> OutboxFigures {
    const KILLS: usize = 5;
    let started = Instant::now();
    let seed = kills::seed("in-process kills of an outbox");
    let mut random = SplitMix(seed);
    let backend = Backend::in_process();
    let queue = backend.queue("outbox-kills.fifo", &[]).await;
    let name = backend.name("outbox-kills.fifo");
    let store = MemoryStore::new();
    let ledger = EventLedger::default();
    let transactions = Transactions::default();
    let outage = Outage::default();
    let start = |write: bool| {
        let (account, outage, name, store, ledger, transactions) = (
            &backend.transport,
            &outage,
            &name,
            &store,
            &ledger,
            &transactions,
        );
        move |line: Line| async move {
            producer(
                (account, outage, &line),
                name,
                store,
                ledger,
                transactions,
                (events, accounts, write),
            )
        }
    };
    let expected = (0..events).filter(|id| id % 10 != 7).count();
    let points = random.kill_points(200, expected - 800, KILLS);
    common::report(format_args!(
        "in-process kills of an outbox: the writer killed after {points:?} events committed"
    ));
    // Outages in bursts, for as long as the writer runs.
    let writing = Arc::new(AtomicBool::new(true));
    let outages = tokio::spawn({
        let (down, writing) = (outage.down.clone(), writing.clone());
        let mut random = SplitMix(seed ^ 0x5eed);
        async move {
            while writing.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(300 + random.next() % 700)).await;
                down.store(true, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100 + random.next() % 300)).await;
                down.store(false, Ordering::SeqCst);
            }
        }
    });
    let mut writer = Process::start(start(true));
    let mut replica = Some(Process::start(start(false)));
    let mut open_at_kills = Vec::new();
    for (kill, point) in points.iter().enumerate() {
        wait_until(&format!("{point} events committed"), async || {
            ledger.lock().unwrap().len() >= *point
        })
        .await;
        tokio::time::sleep(Duration::from_millis(random.next() % 50)).await;
        writer.kill();
        open_at_kills.push(
            transactions.begun.load(Ordering::SeqCst) - transactions.ended.load(Ordering::SeqCst),
        );
        // What the killed writer left open never ends: count from here.
        transactions
            .ended
            .store(transactions.begun.load(Ordering::SeqCst), Ordering::SeqCst);
        writer = Process::start(start(true));
        if let (2, Some(relaying)) = (kill, replica.take()) {
            relaying.kill();
            replica = Some(Process::start(start(false)));
        }
    }
    // What is left to write after the last kill takes most of a minute on a quiet machine, more
    // than one phase's patience under load: it is waited for a thousand events at a time, so a
    // writer that stalls fails the run and one slowed by a loaded machine does not.
    let mut committed = points.last().copied().unwrap_or(0);
    while committed < expected {
        committed = (committed + 1_000).min(expected);
        wait_until(&format!("{committed} events committed"), async || {
            ledger.lock().unwrap().len() >= committed
        })
        .await;
    }
    // The writer exits once everything is written and the outbox is empty.
    writer.exit().await.expect("the writer finishes cleanly");
    writing.store(false, Ordering::SeqCst);
    outages.await.expect("the outages");
    if let Some(relaying) = replica {
        relaying
            .terminate()
            .await
            .expect("the relaying replica stops cleanly");
    }
    common::report(format_args!(
        "in-process kills of an outbox: transactions left open by each kill {open_at_kills:?}"
    ));
    // Evidence per kill: all but one kill of the writer landed with a transaction open.
    let mid_transaction = open_at_kills.iter().filter(|open| **open > 0).count();
    assert!(
        mid_transaction >= KILLS - 1,
        "only {mid_transaction} of {KILLS} kills landed in an open transaction: {open_at_kills:?}"
    );

    let mut ledger = ledger.lock().unwrap().clone();
    ledger.sort_unstable();
    assert_eq!(
        ledger.len(),
        expected,
        "the ledger holds every committed event"
    );
    let received = backend.take_all(&queue, ledger.len()).await;
    let delivered: Vec<(i64, String)> = received
        .iter()
        .map(|message| {
            let event: Posted = serde_json::from_str(&message.body).expect("an event");
            (event.id, event.account)
        })
        .collect();
    OutboxFigures::count(
        seed,
        &ledger,
        &delivered,
        outage.failed.load(Ordering::SeqCst),
        started.elapsed(),
    )
}
