//! A producer process to kill: the service the fault suite (`tests/fault_kills.rs`) kills with
//! SIGKILL while it writes, and cuts off from SQS, to prove that the outbox loses no committed
//! event, sends no rolled-back one, keeps each account's events in commit order and stores none
//! twice.
//!
//! It writes events `0..OUTBOX_EVENTS`, one transaction each, over `OUTBOX_ACCOUNTS` accounts
//! (event `n` is account `n % OUTBOX_ACCOUNTS`): the ledger row `(id, account)` and the event,
//! through the outbox, in the same transaction; every event whose number ends in 7 is rolled back
//! on purpose. Restarted, it goes on after the last committed event. Its app runs the outbox's
//! relay, which sends the committed events to `OUTBOX_QUEUE` (a FIFO queue, one group an
//! account). Once every event is written and the outbox is empty it stops and exits 0. With
//! `OUTBOX_WRITE=0` it only relays, until SIGTERM: a second replica beside the first. With
//! `OUTBOX_DELAY_MAX_MS` above 0 each event is scheduled: written with `.delay(d)`, `d` from 0 to
//! that many milliseconds (the same for an event on every run of a seed), and carries its due
//! time (`due_us`, microseconds since the epoch) in its body.
//!
//! Configured by the environment:
//!
//! | Variable | Meaning | Default |
//! | --- | --- | --- |
//! | `OUTBOX_POSTGRES_URL` | the database of the ledger and the outbox (`?options[search_path]=..` for a schema of its own) | this or the next |
//! | `OUTBOX_SQLITE_PATH` | the same on the SQLite file at this path (the embedded store: one process, so no second replica) | |
//! | `OUTBOX_LEDGER_TABLE` | the ledger table (it must exist: `id bigint PRIMARY KEY, account text`) | `outbox_ledger` |
//! | `OUTBOX_QUEUE` | the FIFO queue the events go to (it must exist) | required |
//! | `OUTBOX_EVENTS` | how many events to write | 10000 |
//! | `OUTBOX_ACCOUNTS` | how many accounts they go over | 50 |
//! | `OUTBOX_WRITE` | `0`: relay only | `1` |
//! | `OUTBOX_DELAY_MAX_MS` | schedule each event up to this far ahead (`0`: at once) | `0` |
//! | `OUTBOX_DELAY_SEED` | the seed of the events' delays | `0` |
//!
//! and SQS as `SqsBroker::from_env` reads it (`AWS_ENDPOINT_URL`, `AWS_REGION`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`).

use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rust_stream::outbox::Outbox;
use rust_stream::prelude::*;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::store::OutboxStore;
use serde::Serialize;

/// An event: the `id`-th written, for `account` (its FIFO group), due at `due_us`
/// (microseconds since the epoch) when scheduled.
#[derive(Debug, Serialize)]
struct Posted {
    id: i64,
    account: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    due_us: Option<u64>,
}

/// The delay of event `id` on a run of `seed`: up to `max_ms` milliseconds, from a SplitMix64
/// step, so a restarted producer schedules an event as its killed run would have.
fn delay_of(seed: u64, id: i64, max_ms: u64) -> Duration {
    let mut z = (seed ^ id as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    Duration::from_millis((z ^ (z >> 31)) % (max_ms + 1))
}

/// The host's clock read once and advanced by the monotonic clock since, as the outbox keeps its
/// own: an event's due time read from it just before the outbox reads its own is the outbox's
/// (whole milliseconds, each of its two parts rounded down) to within 2 ms and the moment between
/// the two reads, so the test can check the due order.
struct Clock {
    epoch: SystemTime,
    started: Instant,
}

impl Clock {
    fn now(&self) -> Duration {
        let now = self.epoch + self.started.elapsed();
        now.duration_since(UNIX_EPOCH).expect("a clock after 1970")
    }
}

fn setting(name: &str, default: Option<&str>) -> Result<String, String> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Ok(value),
        _ => default
            .map(str::to_owned)
            .ok_or_else(|| format!("set {name}")),
    }
}

fn number(name: &str, default: &str) -> Result<i64, String> {
    setting(name, Some(default))?
        .parse()
        .map_err(|error| format!("{name}: {error}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(false)
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("outbox_producer: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Where the ledger and the outbox are.
enum Database {
    Postgres(PostgresStore),
    Sqlite(SqliteStore),
}

/// Writes the events and waits for the relay, on `store`'s database: one body for both stores,
/// whose pools differ in type only. Every event's ledger row and outbox message are one
/// transaction, committed or, for every tenth, rolled back.
macro_rules! produce {
    ($store:expr, $broker:expr, $publisher:expr, $settings:expr) => {{
        let store = $store;
        let (ledger, events, accounts, write, (delay_max_ms, delay_seed)) = $settings;
        let clock = Clock {
            epoch: SystemTime::now(),
            started: Instant::now(),
        };
        let outbox = Outbox::new(store.clone(), $publisher);
        let (stop, running) = start(&$broker, &store);
        if write {
            let next: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT coalesce(max(id) + 1, 0) FROM {ledger}"
            )))
            .fetch_one(store.pool())
            .await
            .map_err(|error| error.to_string())?;
            let insert = format!("INSERT INTO {ledger} (id, account) VALUES ($1, $2)");
            for id in next..events {
                let account = format!("account-{:02}", id % accounts);
                let mut transaction = store.pool().begin().await.map_err(|e| e.to_string())?;
                sqlx::query(sqlx::AssertSqlSafe(insert.as_str()))
                    .bind(id)
                    .bind(&account)
                    .execute(&mut *transaction)
                    .await
                    .map_err(|error| error.to_string())?;
                // The due time read just before the outbox reads its clock for the row.
                let delay = (delay_max_ms > 0).then(|| delay_of(delay_seed, id, delay_max_ms));
                let event = Posted {
                    id,
                    account,
                    due_us: delay.map(|delay| (clock.now() + delay).as_micros() as u64),
                };
                let message = outbox.message(&event).group_id(&event.account);
                let message = match delay {
                    Some(delay) => message.delay(delay),
                    None => message,
                };
                message
                    .send(&mut *transaction)
                    .await
                    .map_err(|error| error.to_string())?;
                if id % 10 == 7 {
                    transaction.rollback().await.map_err(|e| e.to_string())?;
                } else {
                    transaction.commit().await.map_err(|e| e.to_string())?;
                }
            }
            loop {
                let waiting: i64 = sqlx::query_scalar("SELECT count(*) FROM rust_stream_outbox")
                    .fetch_one(store.pool())
                    .await
                    .map_err(|error| error.to_string())?;
                if waiting == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            stop.shutdown();
        }
        finish(running).await
    }};
}

async fn run() -> Result<(), String> {
    let ledger = setting("OUTBOX_LEDGER_TABLE", Some("outbox_ledger"))?;
    let queue = setting("OUTBOX_QUEUE", None)?;
    let events = number("OUTBOX_EVENTS", "10000")?;
    let accounts = number("OUTBOX_ACCOUNTS", "50")?;
    let write = setting("OUTBOX_WRITE", Some("1"))? != "0";
    let delay_max_ms = number("OUTBOX_DELAY_MAX_MS", "0")? as u64;
    let delay_seed = number("OUTBOX_DELAY_SEED", "0")? as u64;

    let broker = SqsBroker::from_env()
        .await
        .map_err(|error| error.to_string())?;
    let database = match (
        setting("OUTBOX_POSTGRES_URL", Some("")),
        setting("OUTBOX_SQLITE_PATH", Some("")),
    ) {
        (Ok(url), _) if !url.is_empty() => Database::Postgres(
            PostgresStore::connect(&url)
                .await
                .map_err(|error| error.to_string())?,
        ),
        (_, Ok(path)) if !path.is_empty() => Database::Sqlite(
            SqliteStore::open(&path)
                .await
                .map_err(|error| error.to_string())?,
        ),
        _ => return Err("set OUTBOX_POSTGRES_URL or OUTBOX_SQLITE_PATH".into()),
    };
    let publisher = broker.publisher(SqsQueue::new(queue));
    let settings = (ledger, events, accounts, write, (delay_max_ms, delay_seed));
    match database {
        Database::Postgres(store) => produce!(store, broker, publisher, settings),
        Database::Sqlite(store) => produce!(store, broker, publisher, settings),
    }
}

/// Starts the app that relays `store`'s outbox through `broker`.
fn start<S: OutboxStore>(
    broker: &SqsBroker,
    store: &S,
) -> (
    rust_stream::ShutdownHandle,
    tokio::task::JoinHandle<Result<(), rust_stream::RunError>>,
) {
    let app = RustStream::new(AppInfo::new("outbox_producer", "0.1.0")).with_broker(
        broker.clone(),
        |b| {
            b.worker(broker.relay(store.clone()).batch_size(100));
        },
    );
    let stop = app.shutdown_handle();
    (stop, tokio::spawn(app.run()))
}

async fn finish(
    running: tokio::task::JoinHandle<Result<(), rust_stream::RunError>>,
) -> Result<(), String> {
    running
        .await
        .map_err(|error| error.to_string())?
        .map_err(|error| error.to_string())
}
