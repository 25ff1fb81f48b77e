//! Messages due at any time through the outbox (issue 39), on the in-process account, on a
//! paused clock: days of schedule pass in seconds. The scenarios run on the in-process store,
//! SQLite and PostgreSQL (at `RUST_STREAM_POSTGRES_URL`), and each database store opens a store
//! the release before wrote.
//!
//! - 10,000 messages scheduled over three days, on a standard and a FIFO queue, some cancelled
//!   and some rolled back: none lost, none visible before it is due, none cancelled or rolled
//!   back delivered, each FIFO group in due order;
//! - a cancel committed before the relay's round: never sent; after: answered as sent;
//! - a reschedule (cancel and write again under the key, in one transaction);
//! - a FIFO group's unscheduled messages written after a scheduled one go at once;
//! - bad inputs: a due time in the past, too far ahead, a key in use;
//! - a handler's output due in three days, written to the outbox in its inbox's transaction:
//!   sent then, never from a failed attempt; refused where nothing keeps it (no inbox);
//!   on SQLite, written in the inbox's own transaction;
//! - the schedule's metrics: scheduled, waiting, cancelled, lateness.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rust_stream::account::Account;
use rust_stream::outbox::{Outbox, OutboxError, DEFAULT_POLL_INTERVAL, MAX_SCHEDULE};
use rust_stream::prelude::*;
use rust_stream::store::memory::MemoryStore;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::store::{Cancellation, OutboxStore};
use rust_stream::testing::{hold_the_clock, Settled, TestApp};
use rust_stream::transport::{DeleteEntry, ReceiveMessage};
use rust_stream::{Output, Publisher};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reminder {
    n: u32,
    /// Milliseconds after the test's start it is due.
    due_ms: u64,
    group: String,
}

/// What a consumer saw: each message's body and when it was received, after the test's start.
type Seen = Arc<Mutex<Vec<(Duration, Reminder)>>>;

/// Receives `queue` for good (long polls, deletes what it received), noting when each message
/// came.
fn consume(account: &Account, queue: &str, start: Instant) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let (account, queue, log) = (account.clone(), queue.to_owned(), seen.clone());
    let task = tokio::spawn(async move {
        let url = loop {
            match account.get_queue_url(&queue).await {
                Ok(url) => break url,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        loop {
            let received = account
                .receive_message(&url, ReceiveMessage::new(10).wait_time_seconds(20))
                .await
                .expect("receive");
            let now = start.elapsed();
            let mut entries = Vec::new();
            for (n, message) in received.into_iter().enumerate() {
                let reminder: Reminder = serde_json::from_str(&message.body).expect("a reminder");
                log.lock().unwrap().push((now, reminder));
                entries.push(DeleteEntry {
                    id: n.to_string().into(),
                    receipt_handle: message.receipt_handle,
                });
            }
            if !entries.is_empty() {
                account
                    .delete_message_batch(&url, entries)
                    .await
                    .expect("delete");
            }
        }
    });
    (seen, task)
}

/// An app that runs only the relay of `store`, starting a round every `poll_interval` while
/// rounds find little.
async fn relaying<S: OutboxStore>(
    broker: &SqsBroker,
    store: &S,
    poll_interval: Duration,
) -> TestApp {
    let app = RustStream::new(AppInfo::new("scheduling", "0")).with_broker(broker.clone(), |b| {
        b.worker(broker.relay(store.clone()).poll_interval(poll_interval));
    });
    TestApp::spawn(app).await.expect("the app starts")
}

fn reminder(n: u32, due: Duration, group: &str) -> Reminder {
    Reminder {
        n,
        due_ms: due.as_millis() as u64,
        group: group.to_owned(),
    }
}

#[tokio::test(start_paused = true)]
async fn ten_thousand_messages_over_three_days_none_lost_none_early_none_cancelled_fifo_in_due_order(
) {
    let wall = std::time::Instant::now();
    let start = Instant::now();
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let store = MemoryStore::new();
    let standard = Outbox::new(
        store.clone(),
        broker.publisher(SqsQueue::new("reminders").create_if_missing()),
    );
    let fifo = Outbox::new(
        store.clone(),
        broker.publisher(SqsQueue::new("dunning.fifo").create_if_missing()),
    );
    let mut random = fastrand::Rng::with_seed(39);
    let mut expected: HashMap<u32, Reminder> = HashMap::new();
    let mut cancelled = HashSet::new();
    let mut rolled_back = HashSet::new();
    for n in 0..10_000u32 {
        let on_fifo = n % 2 == 1;
        // One FIFO message in eight is due at once, among the group's scheduled ones.
        let due = if on_fifo && n % 16 == 1 {
            Duration::ZERO
        } else {
            Duration::from_millis(random.u64(0..3 * DAY.as_millis() as u64))
        };
        let group = format!("account-{}", n % 40);
        let body = reminder(n, due, &group);
        let outbox = if on_fifo { &fifo } else { &standard };
        let mut transaction = store.begin();
        let mut message = outbox
            .message(&body)
            .delay(due)
            .schedule_key(format!("r-{n}"));
        if on_fifo {
            message = message.group_id(&group);
        }
        message.send(&mut transaction).await.unwrap();
        if n % 17 == 3 {
            rolled_back.insert(n);
            drop(transaction);
            continue;
        }
        store.commit(transaction);
        expected.insert(n, body);
    }
    // One in eleven cancelled, each in a transaction of its own, before the relay starts.
    let to_cancel: Vec<u32> = (0..10_000u32)
        .filter(|n| n % 11 == 7 && expected.contains_key(n))
        .collect();
    for n in to_cancel {
        let outbox = if n % 2 == 1 { &fifo } else { &standard };
        let mut transaction = store.begin();
        assert_eq!(
            outbox
                .cancel(&mut transaction, &format!("r-{n}"))
                .await
                .unwrap(),
            Cancellation::Cancelled
        );
        store.commit(transaction);
        expected.remove(&n);
        cancelled.insert(n);
    }
    let (seen_standard, standard_consumer) = consume(&account, "reminders", start);
    let (seen_fifo, fifo_consumer) = consume(&account, "dunning.fifo", start);
    let running = relaying(&broker, &store, DEFAULT_POLL_INTERVAL).await;
    tokio::time::sleep(3 * DAY + HOUR).await;
    running.stop().await.unwrap();
    standard_consumer.abort();
    fifo_consumer.abort();

    let mut seen: Vec<(Duration, Reminder)> = seen_standard.lock().unwrap().clone();
    seen.extend(seen_fifo.lock().unwrap().iter().cloned());
    let mut delivered: BTreeMap<u32, usize> = BTreeMap::new();
    let mut lateness = Vec::new();
    for (at, reminder) in &seen {
        *delivered.entry(reminder.n).or_default() += 1;
        let due = Duration::from_millis(reminder.due_ms);
        assert!(
            *at >= due,
            "message {} was visible {:?} before it was due",
            reminder.n,
            due - *at
        );
        lateness.push(*at - due);
    }
    let lost: Vec<u32> = expected
        .keys()
        .filter(|n| !delivered.contains_key(n))
        .copied()
        .collect();
    assert!(lost.is_empty(), "{} lost: {lost:?}", lost.len());
    let wrongly: Vec<&u32> = delivered
        .keys()
        .filter(|n| cancelled.contains(n) || rolled_back.contains(n))
        .collect();
    assert!(
        wrongly.is_empty(),
        "cancelled or rolled back, yet delivered: {wrongly:?}"
    );
    assert!(
        delivered.values().all(|copies| *copies == 1),
        "each delivered once"
    );
    assert_eq!(delivered.len(), expected.len());
    // Each FIFO group in due order, ties in commit order (the writes' order, `n`).
    let mut groups: HashMap<String, Vec<(u64, u32)>> = HashMap::new();
    for (_, reminder) in seen_fifo.lock().unwrap().iter() {
        groups
            .entry(reminder.group.clone())
            .or_default()
            .push((reminder.due_ms, reminder.n));
    }
    assert_eq!(groups.len(), 20, "the FIFO queue's 20 groups");
    for (group, order) in &groups {
        assert!(
            order.windows(2).all(|pair| pair[0] <= pair[1]),
            "group {group} in due order: {order:?}"
        );
    }
    lateness.sort();
    let p99 = lateness[lateness.len() * 99 / 100];
    let max = *lateness.last().unwrap();
    println!(
        "{} delivered over 3 days of paused clock in {:?}: lateness p50 {:?}, p99 {p99:?}, max {max:?}",
        seen.len(),
        wall.elapsed(),
        lateness[lateness.len() / 2]
    );
    assert!(
        max <= Duration::from_secs(1),
        "visible within a second of due: p99 {p99:?}, max {max:?}"
    );
}

/// A store the scenarios below run on: the in-process one, SQLite and PostgreSQL, each with its
/// own kind of transaction. The database stores' calls hold a paused clock still while the
/// database answers, as the stores' own do: a transaction begun without it lets the clock jump
/// to the relay's next round meanwhile.
trait Store: OutboxStore {
    type Tx: Send;
    /// What keeps the store's database for the case, and ends with it.
    type Guard: Send;
    /// `None` when the store's server is not there (the case is skipped, said so).
    async fn open(case: &str) -> Option<(Self, Self::Guard)>;
    async fn close(guard: Self::Guard);
    async fn begin(&self) -> Self::Tx;
    fn connection(transaction: &mut Self::Tx) -> &mut Self::Connection;
    async fn commit(&self, transaction: Self::Tx);
    /// How many rows wait in the outbox.
    async fn waiting(&self) -> usize;
    /// How often the scenarios' relay starts a round on this store while rounds find little.
    const POLL_INTERVAL: Duration;
}

/// The database stores' relay polls, each round a real query while the paused clock stands
/// still: at the default 100 ms an hour of schedule is 36,000 rounds, 15–30 s of real time, and
/// the scenarios pass about ten hours on each database. Every wait they assert across, from a
/// commit or a due time to its send, is a second or more, so a round every 500 ms still falls
/// within it (at 2 s the one-second ones fail).
const DATABASE_POLL_INTERVAL: Duration = Duration::from_millis(500);

impl Store for MemoryStore {
    type Tx = rust_stream::store::memory::MemoryTransaction;
    type Guard = ();
    async fn open(_: &str) -> Option<(Self, ())> {
        Some((MemoryStore::new(), ()))
    }
    async fn close((): ()) {}
    async fn begin(&self) -> Self::Tx {
        MemoryStore::begin(self)
    }
    fn connection(transaction: &mut Self::Tx) -> &mut Self::Connection {
        transaction
    }
    async fn commit(&self, transaction: Self::Tx) {
        MemoryStore::commit(self, transaction);
    }
    async fn waiting(&self) -> usize {
        self.outbox_rows().len()
    }
    // Its relay sleeps until a commit or a due time: polling costs nothing.
    const POLL_INTERVAL: Duration = DEFAULT_POLL_INTERVAL;
}

impl Store for SqliteStore {
    type Tx = sqlx::Transaction<'static, sqlx::Sqlite>;
    type Guard = common::stores::TempFile;
    async fn open(case: &str) -> Option<(Self, Self::Guard)> {
        let file = common::stores::TempFile::new("scheduling", case);
        Some((SqliteStore::open(&file.0).await.unwrap(), file))
    }
    async fn close(_file: Self::Guard) {}
    async fn begin(&self) -> Self::Tx {
        hold_the_clock(self.pool().begin()).await.unwrap()
    }
    fn connection(transaction: &mut Self::Tx) -> &mut Self::Connection {
        transaction
    }
    async fn commit(&self, transaction: Self::Tx) {
        hold_the_clock(transaction.commit()).await.unwrap();
    }
    async fn waiting(&self) -> usize {
        let rows: i64 = hold_the_clock(
            sqlx::query_scalar("SELECT count(*) FROM rust_stream_outbox").fetch_one(self.pool()),
        )
        .await
        .unwrap();
        rows as usize
    }
    const POLL_INTERVAL: Duration = DATABASE_POLL_INTERVAL;
}

impl Store for PostgresStore {
    type Tx = sqlx::Transaction<'static, sqlx::Postgres>;
    type Guard = common::stores::Schema;
    async fn open(case: &str) -> Option<(Self, Self::Guard)> {
        let (options, schema) =
            hold_the_clock(common::stores::postgres_schema("scheduling", case)).await?;
        let pool = hold_the_clock(common::stores::postgres_pool(&options)).await;
        Some((PostgresStore::new(pool).await.unwrap(), schema))
    }
    async fn close(schema: Self::Guard) {
        hold_the_clock(schema.drop_it()).await;
    }
    async fn begin(&self) -> Self::Tx {
        hold_the_clock(self.pool().begin()).await.unwrap()
    }
    fn connection(transaction: &mut Self::Tx) -> &mut Self::Connection {
        transaction
    }
    async fn commit(&self, transaction: Self::Tx) {
        hold_the_clock(transaction.commit()).await.unwrap();
    }
    async fn waiting(&self) -> usize {
        let rows: i64 = hold_the_clock(
            sqlx::query_scalar("SELECT count(*) FROM rust_stream_outbox").fetch_one(self.pool()),
        )
        .await
        .unwrap();
        rows as usize
    }
    const POLL_INTERVAL: Duration = DATABASE_POLL_INTERVAL;
}

/// Runs the scenario `$case` (generic over the store) on the in-process store, on SQLite and on
/// PostgreSQL (at `RUST_STREAM_POSTGRES_URL`, in a schema of its own).
macro_rules! on_each_store {
    ($case:ident) => {
        mod $case {
            #[tokio::test(start_paused = true)]
            async fn in_process() {
                super::$case::<rust_stream::store::memory::MemoryStore>().await;
            }
            #[tokio::test(start_paused = true)]
            async fn sqlite() {
                super::$case::<rust_stream::store::sqlite::SqliteStore>().await;
            }
            #[tokio::test(start_paused = true)]
            async fn postgres() {
                super::$case::<rust_stream::store::postgres::PostgresStore>().await;
            }
        }
    };
}

/// A FIFO outbox on an in-process account with its relay and a consumer running.
struct Fixture<S: Store> {
    store: S,
    outbox: Outbox<S>,
    seen: Seen,
    start: Instant,
    running: TestApp,
    consumer: tokio::task::JoinHandle<()>,
    guard: S::Guard,
}

impl<S: Store> Fixture<S> {
    /// `None` when the store's server is not there.
    async fn new(queue: &str) -> Option<Self> {
        let start = Instant::now();
        let account = Account::new();
        let broker = SqsBroker::with_account(&account);
        let (store, guard) = S::open(&queue.replace('.', "_")).await?;
        let outbox = Outbox::new(
            store.clone(),
            broker.publisher(SqsQueue::new(queue).create_if_missing()),
        );
        let running = relaying(&broker, &store, S::POLL_INTERVAL).await;
        let (seen, consumer) = consume(&account, queue, start);
        Some(Self {
            store,
            outbox,
            seen,
            start,
            running,
            consumer,
            guard,
        })
    }

    /// Writes `n` due in `delay` under key `r-n`, in a transaction of its own.
    async fn schedule(&self, n: u32, delay: Duration) {
        let mut transaction = self.store.begin().await;
        self.outbox
            .message(&reminder(n, self.start.elapsed() + delay, "g"))
            .group_id("g")
            .delay(delay)
            .schedule_key(format!("r-{n}"))
            .send(S::connection(&mut transaction))
            .await
            .unwrap();
        self.store.commit(transaction).await;
    }

    async fn cancel(&self, n: u32) -> Cancellation {
        let mut transaction = self.store.begin().await;
        let answer = self
            .outbox
            .cancel(S::connection(&mut transaction), &format!("r-{n}"))
            .await
            .unwrap();
        self.store.commit(transaction).await;
        answer
    }

    fn delivered(&self) -> Vec<u32> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(_, reminder)| reminder.n)
            .collect()
    }

    async fn stop(self) {
        self.running.stop().await.unwrap();
        self.consumer.abort();
        S::close(self.guard).await;
    }
}

on_each_store!(
    a_cancel_committed_before_the_relays_round_is_never_sent_and_one_after_is_reported_sent
);
async fn a_cancel_committed_before_the_relays_round_is_never_sent_and_one_after_is_reported_sent<
    S: Store,
>() {
    let Some(fixture) = Fixture::<S>::new("dunning.fifo").await else {
        return;
    };
    fixture.schedule(1, HOUR).await;
    fixture.schedule(2, HOUR).await;
    tokio::time::sleep(HOUR - Duration::from_millis(1)).await;
    assert_eq!(fixture.cancel(1).await, Cancellation::Cancelled);
    tokio::time::sleep(HOUR).await;
    assert_eq!(fixture.delivered(), [2], "the cancelled one never sent");
    assert_eq!(fixture.cancel(2).await, Cancellation::AlreadySent);
    assert_eq!(fixture.cancel(1).await, Cancellation::AlreadyCancelled);
    assert_eq!(fixture.cancel(3).await, Cancellation::NotFound);
    assert_eq!(fixture.store.waiting().await, 0);
    fixture.stop().await;
}

on_each_store!(a_schedule_or_a_cancel_rolled_back_changes_nothing);
async fn a_schedule_or_a_cancel_rolled_back_changes_nothing<S: Store>() {
    let Some(fixture) = Fixture::<S>::new("dunning.fifo").await else {
        return;
    };
    // A schedule rolled back: never sent.
    let mut transaction = fixture.store.begin().await;
    fixture
        .outbox
        .message(&reminder(1, HOUR, "g"))
        .group_id("g")
        .delay(HOUR)
        .schedule_key("r-1")
        .send(S::connection(&mut transaction))
        .await
        .unwrap();
    drop(transaction);
    // A cancel rolled back: the message stays scheduled, and its key taken.
    fixture.schedule(2, HOUR).await;
    let mut transaction = fixture.store.begin().await;
    assert_eq!(
        fixture
            .outbox
            .cancel(S::connection(&mut transaction), "r-2")
            .await
            .unwrap(),
        Cancellation::Cancelled
    );
    drop(transaction);
    let mut transaction = fixture.store.begin().await;
    let taken = fixture
        .outbox
        .message(&reminder(3, HOUR, "g"))
        .group_id("g")
        .schedule_key("r-2")
        .send(S::connection(&mut transaction))
        .await
        .unwrap_err();
    assert!(
        matches!(&taken, OutboxError::ScheduleKeyInUse { key, .. } if key == "r-2"),
        "{taken}"
    );
    drop(transaction);
    tokio::time::sleep(2 * HOUR).await;
    assert_eq!(fixture.delivered(), [2]);
    assert_eq!(fixture.cancel(1).await, Cancellation::NotFound);
    fixture.stop().await;
}

on_each_store!(a_reschedule_is_a_cancel_and_a_write_of_the_key_in_one_transaction);
async fn a_reschedule_is_a_cancel_and_a_write_of_the_key_in_one_transaction<S: Store>() {
    let Some(fixture) = Fixture::<S>::new("dunning.fifo").await else {
        return;
    };
    fixture.schedule(1, HOUR).await;
    let mut transaction = fixture.store.begin().await;
    assert_eq!(
        fixture
            .outbox
            .cancel(S::connection(&mut transaction), "r-1")
            .await
            .unwrap(),
        Cancellation::Cancelled
    );
    fixture
        .outbox
        .message(&reminder(1, 3 * HOUR, "g"))
        .group_id("g")
        .delay(3 * HOUR)
        .schedule_key("r-1")
        .send(S::connection(&mut transaction))
        .await
        .unwrap();
    // Until it commits, the relay sends neither the old due time's message nor the new.
    tokio::time::sleep(2 * HOUR).await;
    assert!(fixture.delivered().is_empty(), "moved, not sent at 1 h");
    fixture.store.commit(transaction).await;
    tokio::time::sleep(HOUR - Duration::from_millis(1)).await;
    assert!(fixture.delivered().is_empty(), "not before 3 h");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(fixture.delivered(), [1], "once, at 3 h");
    assert_eq!(fixture.store.waiting().await, 0);
    fixture.stop().await;
}

on_each_store!(a_fifo_groups_messages_go_in_due_order_and_its_unscheduled_ones_at_once);
async fn a_fifo_groups_messages_go_in_due_order_and_its_unscheduled_ones_at_once<S: Store>() {
    let Some(fixture) = Fixture::<S>::new("dunning.fifo").await else {
        return;
    };
    fixture.schedule(1, 2 * HOUR).await;
    // Written after, due before: goes first.
    fixture.schedule(2, HOUR).await;
    // Unscheduled, written after both: due at its commit, so it goes at once.
    fixture.schedule(3, Duration::ZERO).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(fixture.delivered(), [3]);
    tokio::time::sleep(3 * HOUR).await;
    assert_eq!(fixture.delivered(), [3, 2, 1]);
    let seen = fixture.seen.lock().unwrap().clone();
    for (at, reminder) in &seen {
        assert!(
            *at >= Duration::from_millis(reminder.due_ms),
            "{reminder:?} at {at:?}"
        );
    }
    fixture.stop().await;
}

on_each_store!(on_a_standard_queue_a_message_is_sent_early_and_visible_within_the_second_after_due);
async fn on_a_standard_queue_a_message_is_sent_early_and_visible_within_the_second_after_due<
    S: Store,
>() {
    let Some(fixture) = Fixture::<S>::new("reminders").await else {
        return;
    };
    let delay = Duration::from_millis(10 * 60 * 1000 + 250);
    let mut transaction = fixture.store.begin().await;
    fixture
        .outbox
        .message(&reminder(1, delay, "g"))
        .delay(delay)
        .send(S::connection(&mut transaction))
        .await
        .unwrap();
    fixture.store.commit(transaction).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        fixture.store.waiting().await,
        0,
        "due within 15 minutes: sent at once, with DelaySeconds"
    );
    assert!(fixture.delivered().is_empty());
    tokio::time::sleep(delay).await;
    let seen = fixture.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].0 >= delay && seen[0].0 <= delay + Duration::from_secs(1),
        "visible at {:?}, due at {delay:?}",
        seen[0].0
    );
    fixture.stop().await;
}

#[tokio::test(start_paused = true)]
async fn bad_schedules_are_typed_errors_and_write_nothing() {
    let store = MemoryStore::new();
    let outbox = Outbox::new(store.clone(), Publisher::new("reminders"));
    let mut transaction = store.begin();
    let past = outbox
        .raw("x")
        .deliver_at(SystemTime::now() - Duration::from_secs(120))
        .send(&mut transaction)
        .await
        .unwrap_err();
    assert!(
        matches!(past, OutboxError::DueInThePast { by } if by >= Duration::from_secs(120)),
        "{past}"
    );
    assert!(past.to_string().contains("in the past"), "{past}");
    let far = outbox
        .raw("x")
        .delay(MAX_SCHEDULE + Duration::from_secs(1))
        .send(&mut transaction)
        .await
        .unwrap_err();
    assert!(matches!(far, OutboxError::DueTooFar { .. }), "{far}");
    assert!(far.to_string().contains("beyond"), "{far}");
    store.commit(transaction);
    assert!(store.outbox_rows().is_empty(), "nothing written");

    // A moment ago is now: written, due at once.
    let mut transaction = store.begin();
    outbox
        .raw("now")
        .deliver_at(SystemTime::now() - Duration::from_secs(10))
        .send(&mut transaction)
        .await
        .unwrap();
    // A key is one waiting message's, even within the transaction that wrote it.
    outbox
        .raw("a")
        .delay(HOUR)
        .schedule_key("k")
        .send(&mut transaction)
        .await
        .unwrap();
    let reused = outbox
        .raw("b")
        .delay(HOUR)
        .schedule_key("k")
        .send(&mut transaction)
        .await
        .unwrap_err();
    assert!(
        matches!(&reused, OutboxError::ScheduleKeyInUse { destination, key } if destination == "reminders" && key == "k"),
        "{reused}"
    );
    store.commit(transaction);
    let rows = store.outbox_rows();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(!rows[0].due.scheduled, "a moment ago is due at once");
    // Another outbox's destination keeps keys of its own.
    let other = Outbox::new(store.clone(), Publisher::new("letters"));
    let mut transaction = store.begin();
    other
        .raw("c")
        .delay(HOUR)
        .schedule_key("k")
        .send(&mut transaction)
        .await
        .unwrap();
    store.commit(transaction);
}

/// The line of `name` (dotted) whose labels hold `label`, from the binary's recorder.
fn metric(name: &str, label: &str) -> Option<f64> {
    let text = common::gauges::prometheus().render();
    let metric = name.replace('.', "_");
    text.lines()
        .filter(|line| line.starts_with(&format!("{metric}{{")) && line.contains(label))
        .find_map(|line| line.rsplit(' ').next()?.parse().ok())
}

#[tokio::test(start_paused = true)]
async fn the_schedule_is_measured_scheduled_waiting_cancelled_and_lateness() {
    use rust_stream::metrics::{OUTBOX_CANCELLED, OUTBOX_SCHEDULED, OUTBOX_SCHEDULED_WAITING};
    common::gauges::prometheus();
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let store = MemoryStore::new();
    let outbox = Outbox::new(
        store.clone(),
        broker.publisher(SqsQueue::new("metered.fifo").create_if_missing()),
    );
    for n in 0..3 {
        let mut transaction = store.begin();
        outbox
            .message(&reminder(n, HOUR, "g"))
            .group_id("g")
            .delay(HOUR)
            .schedule_key(format!("r-{n}"))
            .send(&mut transaction)
            .await
            .unwrap();
        store.commit(transaction);
    }
    let mut transaction = store.begin();
    let _ = outbox.cancel(&mut transaction, "r-0").await.unwrap();
    store.commit(transaction);
    let app = RustStream::new(AppInfo::new("scheduling", "0")).with_broker(broker.clone(), |b| {
        b.worker(broker.relay(store.clone()).name("metered"));
    });
    let running = TestApp::spawn(app).await.unwrap();
    tokio::time::sleep(HOUR / 2).await;
    let destination = "\"metered.fifo\"";
    assert_eq!(metric(OUTBOX_SCHEDULED, destination), Some(3.0));
    assert_eq!(metric(OUTBOX_CANCELLED, destination), Some(1.0));
    assert_eq!(
        metric(OUTBOX_SCHEDULED_WAITING, "\"metered\""),
        Some(2.0),
        "two waiting for their due time"
    );
    tokio::time::sleep(HOUR).await;
    running.stop().await.unwrap();
    assert_eq!(metric(OUTBOX_SCHEDULED_WAITING, "\"metered\""), Some(0.0));
    assert_eq!(
        metric("rust_stream.outbox.lateness_count", "\"metered\""),
        Some(2.0),
        "each scheduled message sent measured once"
    );
    let late = metric("rust_stream.outbox.lateness_sum", "\"metered\"").unwrap();
    assert!(
        (0.0..=2.0).contains(&late),
        "two sends, each within a second: {late}"
    );
}

/// The SQLite schema of the release before scheduled messages (versions 1 to 3), as it wrote it.
const SQLITE_SCHEMA_3: &str = "
    CREATE TABLE rust_stream_schema (
        version INTEGER PRIMARY KEY,
        applied_at INTEGER NOT NULL
    ) STRICT;
    CREATE TABLE rust_stream_inbox (
        consumer TEXT NOT NULL,
        idempotency_key TEXT NOT NULL,
        recorded TEXT,
        claimed_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (consumer, idempotency_key)
    ) STRICT;
    CREATE INDEX rust_stream_inbox_expires_at ON rust_stream_inbox (expires_at);
    CREATE TABLE rust_stream_history (
        destination TEXT NOT NULL,
        history_key TEXT NOT NULL,
        ticket TEXT,
        message_id TEXT,
        sequence_number TEXT,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (destination, history_key)
    ) STRICT;
    CREATE INDEX rust_stream_history_expires_at ON rust_stream_history (expires_at);
    CREATE TABLE rust_stream_outbox (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        destination TEXT NOT NULL,
        group_id TEXT,
        message TEXT NOT NULL,
        created_at INTEGER NOT NULL
    ) STRICT;
    INSERT INTO rust_stream_schema (version, applied_at) VALUES (1, 0), (2, 0), (3, 0);
";

#[tokio::test(start_paused = true)]
async fn a_sqlite_outbox_written_before_scheduling_opens_migrated_and_its_rows_are_relayed() {
    let file = common::stores::TempFile::new("scheduling", "migration");
    let start = Instant::now();
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    // The rows the previous release's outbox wrote, unrelayed when it stopped: encoded as any
    // store's outbox encodes them, inserted as that release inserted them.
    let encoder = MemoryStore::new();
    let outbox = Outbox::new(
        encoder.clone(),
        broker.publisher(SqsQueue::new("dunning.fifo").create_if_missing()),
    );
    let mut transaction = encoder.begin();
    for n in 1..=3 {
        outbox
            .message(&reminder(n, Duration::ZERO, "g"))
            .group_id("g")
            .send(&mut transaction)
            .await
            .unwrap();
    }
    encoder.commit(transaction);
    // Written on a runtime of its own: this one's paused clock would time the pool out.
    let (path, rows) = (file.0.clone(), encoder.outbox_rows());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let options = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true);
            let pool = sqlx::SqlitePool::connect_with(options).await.unwrap();
            sqlx::raw_sql(SQLITE_SCHEMA_3).execute(&pool).await.unwrap();
            for row in rows {
                sqlx::query(
                    "INSERT INTO rust_stream_outbox (destination, group_id, message, created_at)
                     VALUES (?1, ?2, ?3, CAST(unixepoch('subsec') * 1000 AS INTEGER))",
                )
                .bind(&row.destination)
                .bind(&row.group_id)
                .bind(&row.message)
                .execute(&pool)
                .await
                .unwrap();
            }
            pool.close().await;
        })
    })
    .join()
    .unwrap();
    let store = SqliteStore::open(&file.0).await.unwrap();
    let running = relaying(&broker, &store, <SqliteStore as Store>::POLL_INTERVAL).await;
    let (seen, consumer) = consume(&account, "dunning.fifo", start);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let delivered: Vec<u32> = seen.lock().unwrap().iter().map(|(_, r)| r.n).collect();
    assert_eq!(delivered, [1, 2, 3], "relayed in their order");
    // And the migrated store schedules.
    let outbox = Outbox::new(
        store.clone(),
        broker.publisher(SqsQueue::new("dunning.fifo").create_if_missing()),
    );
    let mut transaction = Store::begin(&store).await;
    outbox
        .message(&reminder(4, HOUR, "g"))
        .group_id("g")
        .delay(HOUR)
        .schedule_key("r-4")
        .send(&mut *transaction)
        .await
        .unwrap();
    Store::commit(&store, transaction).await;
    tokio::time::sleep(HOUR + Duration::from_secs(1)).await;
    let delivered: Vec<u32> = seen.lock().unwrap().iter().map(|(_, r)| r.n).collect();
    assert_eq!(delivered, [1, 2, 3, 4]);
    running.stop().await.unwrap();
    consumer.abort();
}

/// The PostgreSQL schema of the release before scheduled messages (versions 1 to 3), as it wrote
/// it.
const POSTGRES_SCHEMA_3: &str = "
    CREATE TABLE rust_stream_schema (
        version bigint PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE rust_stream_inbox (
        consumer text NOT NULL,
        idempotency_key text NOT NULL,
        recorded text,
        claimed_at timestamptz NOT NULL,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (consumer, idempotency_key)
    );
    CREATE INDEX rust_stream_inbox_expires_at ON rust_stream_inbox (expires_at);
    CREATE TABLE rust_stream_history (
        destination text NOT NULL,
        history_key text NOT NULL,
        ticket text,
        message_id text,
        sequence_number text,
        expires_at timestamptz NOT NULL,
        PRIMARY KEY (destination, history_key)
    );
    CREATE INDEX rust_stream_history_expires_at ON rust_stream_history (expires_at);
    CREATE TABLE rust_stream_outbox (
        id bigserial PRIMARY KEY,
        destination text NOT NULL,
        group_id text,
        message text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    );
    INSERT INTO rust_stream_schema (version) VALUES (1), (2), (3);
";

#[tokio::test(start_paused = true)]
async fn a_postgres_outbox_written_before_scheduling_opens_migrated_and_its_rows_are_relayed() {
    let Some((options, schema)) =
        hold_the_clock(common::stores::postgres_schema("scheduling", "migration")).await
    else {
        return;
    };
    let start = Instant::now();
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    // The rows the previous release's outbox wrote, unrelayed when it stopped: encoded as any
    // store's outbox encodes them, inserted as that release inserted them.
    let encoder = MemoryStore::new();
    let outbox = Outbox::new(
        encoder.clone(),
        broker.publisher(SqsQueue::new("dunning.fifo").create_if_missing()),
    );
    let mut transaction = encoder.begin();
    for n in 1..=3 {
        outbox
            .message(&reminder(n, Duration::ZERO, "g"))
            .group_id("g")
            .send(&mut transaction)
            .await
            .unwrap();
    }
    encoder.commit(transaction);
    let pool = hold_the_clock(common::stores::postgres_pool(&options)).await;
    hold_the_clock(sqlx::raw_sql(POSTGRES_SCHEMA_3).execute(&pool))
        .await
        .unwrap();
    for row in encoder.outbox_rows() {
        hold_the_clock(
            sqlx::query(
                "INSERT INTO rust_stream_outbox (destination, group_id, message) VALUES ($1, $2, $3)",
            )
            .bind(&row.destination)
            .bind(&row.group_id)
            .bind(&row.message)
            .execute(&pool),
        )
        .await
        .unwrap();
    }
    let store = PostgresStore::new(pool).await.unwrap();
    let running = relaying(&broker, &store, <PostgresStore as Store>::POLL_INTERVAL).await;
    let (seen, consumer) = consume(&account, "dunning.fifo", start);
    // Their due times are the database's clock at their write, which a paused clock may lag by
    // the real time the setup took.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let delivered: Vec<u32> = seen.lock().unwrap().iter().map(|(_, r)| r.n).collect();
    assert_eq!(delivered, [1, 2, 3], "relayed in their order");
    // And the migrated store schedules.
    let outbox = Outbox::new(
        store.clone(),
        broker.publisher(SqsQueue::new("dunning.fifo").create_if_missing()),
    );
    let mut transaction = Store::begin(&store).await;
    outbox
        .message(&reminder(4, HOUR, "g"))
        .group_id("g")
        .delay(HOUR)
        .schedule_key("r-4")
        .send(&mut *transaction)
        .await
        .unwrap();
    Store::commit(&store, transaction).await;
    tokio::time::sleep(HOUR + Duration::from_secs(1)).await;
    let delivered: Vec<u32> = seen.lock().unwrap().iter().map(|(_, r)| r.n).collect();
    assert_eq!(delivered, [1, 2, 3, 4]);
    running.stop().await.unwrap();
    consumer.abort();
    hold_the_clock(schema.drop_it()).await;
}

/// An unscheduled row is due when it is written, and a writer reads the clock before it waits for
/// SQLite's write lock: a row committed second may carry the earlier time. The group's rows still
/// go in commit order. In real time: the second writer must read its clock while the first holds
/// the lock.
#[tokio::test]
async fn a_groups_unscheduled_rows_go_in_commit_order_though_a_later_commit_read_the_clock_first() {
    let file = common::stores::TempFile::new("scheduling", "commit-order");
    let store = SqliteStore::open(&file.0).await.unwrap();
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let outbox = Outbox::new(
        store.clone(),
        broker.publisher(SqsQueue::new("ledger.fifo").create_if_missing()),
    );
    sqlx::query("CREATE TABLE ledger (entry INTEGER)")
        .execute(store.pool())
        .await
        .unwrap();
    // The first transaction takes the write lock with a row of its own.
    let mut first = store.pool().begin().await.unwrap();
    sqlx::query("INSERT INTO ledger (entry) VALUES (1)")
        .execute(&mut *first)
        .await
        .unwrap();
    // The second reads the clock and waits for the lock.
    let second = tokio::spawn({
        let (store, outbox) = (store.clone(), outbox.clone());
        async move {
            let mut second = store.pool().begin().await.unwrap();
            outbox
                .message(&reminder(2, Duration::ZERO, "g"))
                .group_id("g")
                .send(&mut *second)
                .await
                .unwrap();
            second.commit().await.unwrap();
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!second.is_finished(), "the second waits for the write lock");
    outbox
        .message(&reminder(1, Duration::ZERO, "g"))
        .group_id("g")
        .send(&mut *first)
        .await
        .unwrap();
    first.commit().await.unwrap();
    second.await.unwrap();
    let start = Instant::now();
    let running = relaying(&broker, &store, DEFAULT_POLL_INTERVAL).await;
    let (seen, consumer) = consume(&account, "ledger.fifo", start);
    while seen.lock().unwrap().len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let delivered: Vec<u32> = seen.lock().unwrap().iter().map(|(_, r)| r.n).collect();
    assert_eq!(delivered, [1, 2], "in commit order");
    running.stop().await.unwrap();
    consumer.abort();
}

/// A handler that publishes, at each attempt, a reminder due `due` later (its `n` the attempt),
/// and fails its first attempt after publishing when `fail_first`.
#[derive(Clone)]
struct Remind {
    due: Duration,
    fail_first: bool,
    runs: Arc<std::sync::atomic::AtomicU32>,
}

impl Remind {
    fn new(due: Duration) -> Self {
        Self {
            due,
            fail_first: false,
            runs: Arc::default(),
        }
    }

    fn runs(&self) -> u32 {
        self.runs.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Handle<Reminder, Output<Reminder>> for Remind {
    async fn handle(
        &self,
        order: &Reminder,
        reminders: &Output<Reminder>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let attempt = ctx.attempt();
        let output = reminder(attempt, self.due, &order.group);
        ctx.publish(
            reminders
                .message(&output)
                .group_id(&order.group)
                .delay(self.due),
        );
        if self.fail_first && attempt == 1 {
            return Err(HandlerOutcome::failed("fails after publishing"));
        }
        Ok(())
    }
}

/// The `orders` queue: retried a second after a failure.
fn orders() -> SqsQueue {
    SqsQueue::new("orders")
        .create_if_missing()
        .retry(rust_stream::RetryPolicy::fixed(Duration::from_secs(1)))
}

/// An app whose `orders` subscription runs `remind` with `to` as its output, behind an inbox
/// in `store` when there is one, and the store's relay.
async fn reminding(
    broker: &SqsBroker,
    remind: &Remind,
    to: &str,
    store: Option<&MemoryStore>,
) -> TestApp {
    let output = Output::<Reminder>::new(SqsQueue::new(to).create_if_missing());
    let app = RustStream::new(AppInfo::new("scheduling", "0")).with_broker(broker.clone(), |b| {
        let subscription = subscriber(orders(), remind.clone()).outputs(output);
        match store {
            Some(store) => {
                b.include(
                    subscription
                        .idempotent(rust_stream::inbox::Inbox::new(store.clone()))
                        .build(),
                );
                b.worker(broker.relay(store.clone()));
            }
            None => {
                b.include(subscription.build());
            }
        }
    });
    TestApp::spawn(app).await.expect("the app starts")
}

/// Sends the order, keyed `order-1` for an inbox.
async fn place_order(broker: &SqsBroker) {
    broker
        .publisher(orders())
        .message(&reminder(0, Duration::ZERO, "acct-7"))
        .header(rust_stream::IDEMPOTENCY_KEY_HEADER, "order-1")
        .send()
        .await
        .expect("the order is sent");
}

#[tokio::test(start_paused = true)]
async fn a_handlers_output_due_in_three_days_arrives_then_and_not_earlier() {
    for to in ["reminders", "dunning.fifo"] {
        let start = Instant::now();
        let account = Account::new();
        let broker = SqsBroker::with_account(&account);
        let store = MemoryStore::new();
        let remind = Remind::new(3 * DAY);
        let running = reminding(&broker, &remind, to, Some(&store)).await;
        let (seen, consumer) = consume(&account, to, start);
        place_order(&broker).await;
        // A copy of the order, acked by the inbox without running the handler, writes no row.
        tokio::time::sleep(Duration::from_secs(5)).await;
        place_order(&broker).await;

        tokio::time::sleep(3 * DAY - HOUR).await;
        assert_eq!(store.completed(), 1, "{to}: the order was handled, once");
        assert_eq!(
            store.outbox_rows().len(),
            1,
            "{to}: its output waits in the outbox"
        );
        // A standard queue's row goes up to 900 s early, delayed by SQS for the rest.
        tokio::time::sleep(HOUR - Duration::from_secs(60)).await;
        assert!(
            seen.lock().unwrap().is_empty(),
            "{to}: nothing before it is due"
        );

        tokio::time::sleep(Duration::from_secs(120)).await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{to}: the output arrived once: {seen:?}");
        let (at, output) = &seen[0];
        assert!(
            *at >= 3 * DAY && *at < 3 * DAY + Duration::from_secs(60),
            "{to}: due at 3 days, visible at {at:?}"
        );
        assert_eq!((output.n, output.group.as_str()), (1, "acct-7"));
        assert_eq!(remind.runs(), 1);
        assert!(
            store.outbox_rows().is_empty(),
            "{to}: the row is sent and gone"
        );
        consumer.abort();
        running.stop().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_failed_attempts_scheduled_output_is_rolled_back_and_never_sent() {
    let start = Instant::now();
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let store = MemoryStore::new();
    let remind = Remind {
        fail_first: true,
        ..Remind::new(3 * DAY)
    };
    let running = reminding(&broker, &remind, "reminders", Some(&store)).await;
    let (seen, consumer) = consume(&account, "reminders", start);
    place_order(&broker).await;

    tokio::time::sleep(4 * DAY).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(remind.runs(), 2, "the failed attempt, then the acked one");
    let attempts: Vec<u32> = seen.iter().map(|(_, output)| output.n).collect();
    assert_eq!(attempts, [2], "only the acked attempt's output is sent");
    assert!(seen[0].0 >= 3 * DAY, "{:?}", seen[0].0);
    consumer.abort();
    running.stop().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_handlers_output_beyond_sqs_delays_is_refused_without_an_outbox_and_nothing_sent() {
    // A delay beyond 900 s on a standard queue, any delay on a FIFO queue: SQS keeps neither.
    for (to, due) in [
        ("reminders", 3 * DAY),
        ("dunning.fifo", Duration::from_secs(60)),
    ] {
        let start = Instant::now();
        let account = Account::new();
        let broker = SqsBroker::with_account(&account);
        let recorder = broker.recorder();
        let remind = Remind::new(due);
        let running = reminding(&broker, &remind, to, None).await;
        let (seen, consumer) = consume(&account, to, start);
        place_order(&broker).await;

        // The recorder notes every send, delayed or not: none was made.
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(
            remind.runs() >= 2,
            "{to}: the attempt failed and was retried"
        );
        assert!(recorder.published(to).is_empty(), "{to}: no output sent");
        assert!(seen.lock().unwrap().is_empty(), "{to}: no output sent");
        let settled: Vec<Settled> = recorder
            .handled("orders")
            .iter()
            .map(|handled| handled.settled)
            .collect();
        assert!(
            !settled.is_empty() && settled.iter().all(|s| *s == Settled::Retried),
            "{to}: never acked: {settled:?}"
        );
        consumer.abort();
        running.stop().await.unwrap();
    }
}

/// On SQLite, the inbox's transaction also writes the outbox: a handler's output due in three
/// days is a row of the outbox committed with the inbox's key, none before the commit, nothing
/// sent now.
#[tokio::test]
async fn an_inbox_on_sqlite_writes_a_scheduled_output_in_its_own_transaction() {
    let path = std::env::temp_dir().join(format!(
        "rust-stream-scheduled-output-{}-{:08x}.db",
        std::process::id(),
        fastrand::u32(..)
    ));
    let store = SqliteStore::open(&path).await.unwrap();
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let recorder = broker.recorder();
    let remind = Remind::new(3 * DAY);
    let app = RustStream::new(AppInfo::new("scheduling", "0")).with_broker(broker.clone(), |b| {
        b.include(
            subscriber(orders(), remind.clone())
                .outputs(Output::<Reminder>::new(
                    SqsQueue::new("reminders").create_if_missing(),
                ))
                .idempotent(rust_stream::inbox::Inbox::new(store.clone()))
                .build(),
        );
    });
    let running = TestApp::spawn(app).await.expect("the app starts");
    place_order(&broker).await;
    let count = async |query: &str| -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(query.to_owned()))
            .fetch_one(store.pool())
            .await
            .unwrap()
    };
    rust_stream::testing::eventually("the attempt committed", async || {
        count("SELECT count(*) FROM rust_stream_inbox").await == 1
    })
    .await;
    running.stop().await.unwrap();

    assert_eq!(remind.runs(), 1, "one attempt, committed");
    assert_eq!(
        count("SELECT count(*) FROM rust_stream_outbox").await,
        1,
        "the output is an outbox row of the inbox's transaction"
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM rust_stream_outbox WHERE due_at >= created_at + 3 * 86400 * 1000"
        )
        .await,
        1,
        "due three days after its write"
    );
    assert!(
        recorder.published("reminders").is_empty(),
        "nothing sent now"
    );
    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}
