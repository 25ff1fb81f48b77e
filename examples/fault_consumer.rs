//! A consumer process to kill: the service the fault suite (`tests/fault_kills.rs`) kills with
//! SIGKILL and stops with SIGTERM under load, to prove that nothing is lost, that each FIFO group
//! keeps its order through a crash, and that a graceful stop settles or releases everything.
//!
//! It is a plain `RustStream` service on SQS (`SqsBroker::from_env`, so never the in-process
//! account: another process must see its queues). Its one handler reads a job `{"group", "seq"}`,
//! appends `start GROUP SEQ MESSAGE_ID RECEIVE_COUNT` to a journal file, waits the handler delay,
//! appends `done GROUP SEQ MESSAGE_ID RECEIVE_COUNT` and syncs the file, then publishes an output
//! naming the input and returns: the message is deleted only after its `done` line is on disk and
//! its output sent. A kill between the `done` line and the delete therefore shows as a second
//! `done` line of the same message (a re-delivery), never as a message without one (a loss).
//!
//! Configured by the environment:
//!
//! | Variable | Meaning | Default |
//! | --- | --- | --- |
//! | `FAULT_QUEUE` | the queue to consume (it must exist; FIFO when the name ends in `.fifo`) | required |
//! | `FAULT_OUTPUT_QUEUE` | where each handled job's output goes (it must exist) | required |
//! | `FAULT_JOURNAL` | the journal file, appended to | required |
//! | `FAULT_HANDLER_DELAY_MS` | how long a handler works between its two lines | 0 |
//! | `FAULT_CONCURRENCY` | handlers at once | 10 |
//! | `FAULT_POLLERS` | receive loops | 1 |
//! | `FAULT_BATCH_SIZE` | messages per receive | 10 |
//! | `FAULT_WAIT_SECONDS` | long poll of a receive | 20 |
//! | `FAULT_VISIBILITY_SECONDS` | visibility timeout of received messages | the queue's |
//! | `FAULT_SHUTDOWN_SECONDS` | the stop's budget (`RustStream::shutdown_timeout`) | 25 |
//! | `FAULT_DEAD_LETTER_QUEUE` | when set, the subscription's dead-letter queue (it must exist), which a job goes to after `FAULT_ATTEMPTS` attempts | unset |
//! | `FAULT_ATTEMPTS` | the attempts a job gets before it is dead-lettered, with `FAULT_DEAD_LETTER_QUEUE` | 3 |
//! | `FAULT_FAIL_FIRST_CALLS` | how many of each job's first handler calls in this process fail (after the `start` line, with no `done` line) | 0 |
//! | `FAULT_INBOX_POSTGRES_URL` | when set, the handler posts each job to a ledger table in PostgreSQL inside an inbox ([`rust_stream::inbox`]) keyed by the job's `id`: copies of a job post once | unset |
//! | `FAULT_INBOX_SQLITE_PATH` | the same inbox mode on the SQLite file at this path (the embedded store: one process at a time) | unset |
//! | `FAULT_PAYLOAD_BUCKET` | when set, the broker's [large payloads](rust_stream::model::large_payload) bucket: bodies over 256 KiB it sends go there, and pointers it receives are read from S3 | unset |
//! | `FAULT_LEDGER_TABLE` | the ledger table of the inbox mode (it must exist: `job text, grp text, seq int, amount bigint`, and a `posted` column numbering the postings in commit order: `bigserial` on PostgreSQL, `INTEGER PRIMARY KEY` on SQLite) | `fault_ledger` |
//!
//! and SQS as `SqsBroker::from_env` reads it (`AWS_ENDPOINT_URL`, `AWS_REGION`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`). It runs until SIGTERM or SIGINT:
//!
//! ```sh
//! scripts/localstack.sh start   # prints the endpoint
//! AWS_ENDPOINT_URL=http://127.0.0.1:4566 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test \
//!   AWS_SECRET_ACCESS_KEY=test FAULT_QUEUE=jobs.fifo FAULT_OUTPUT_QUEUE=jobs-done.fifo \
//!   FAULT_JOURNAL=/tmp/journal cargo run --example fault_consumer
//! ```
//!
//! With `--asyncapi` it prints its AsyncAPI document (for the queues `FAULT_QUEUE` and
//! `FAULT_OUTPUT_QUEUE` name) and exits, without connecting.

#[path = "common/asyncapi.rs"]
mod asyncapi;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rust_stream::inbox::{Inbox, Key};
use rust_stream::model::large_payload::LargePayloads;
use rust_stream::prelude::*;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::store::sqlite::SqliteStore;
use rust_stream::{Output, State, IDEMPOTENCY_KEY_HEADER};
use serde::{Deserialize, Serialize};

/// A unit of work: the `seq`-th job of its `group` (on FIFO, its message group). `id` names the
/// job across copies of it (the inbox's key); `amount` is what the inbox mode posts.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Job {
    group: String,
    seq: u32,
    #[serde(default)]
    id: String,
    #[serde(default)]
    amount: i64,
    /// A job whose handler fails until it comes back as a redriven dead letter (a redrive's copy
    /// carries [`IDEMPOTENCY_KEY_HEADER`], which the jobs sent do not): with
    /// `FAULT_DEAD_LETTER_QUEUE`, dead-lettered for a redrive to bring back.
    #[serde(default)]
    poison: bool,
}

/// The output of a handled job: which input it came from.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Done {
    group: String,
    seq: u32,
    input: String,
}

/// The journal file, shared by every handler.
#[derive(Clone)]
struct Journal(Arc<Mutex<File>>);

impl Journal {
    fn open(path: &str) -> std::io::Result<Self> {
        let file = File::options().create(true).append(true).open(path)?;
        Ok(Self(Arc::new(Mutex::new(file))))
    }

    /// Appends one line; `durable` also waits until it is on disk. The file is written off the
    /// runtime's threads, since a sync may take milliseconds.
    async fn append(&self, line: String, durable: bool) -> std::io::Result<()> {
        let file = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
            // One write of the whole line, so a kill leaves no line half written in the middle.
            file.write_all(line.as_bytes())?;
            if durable {
                file.sync_data()?;
            }
            Ok(())
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

/// How long a handler works.
#[derive(Clone)]
struct HandlerDelay(Duration);

/// How many of each job's first calls in this process fail, and the calls so far by message.
#[derive(Clone)]
struct FailFirst {
    calls: u32,
    made: Arc<Mutex<HashMap<String, u32>>>,
}

impl FailFirst {
    /// Counts a call of `message_id`: whether it is one of those that fail.
    fn fails(&self, message_id: &str) -> bool {
        if self.calls == 0 {
            return false;
        }
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        let made = made.entry(message_id.to_owned()).or_default();
        *made += 1;
        *made <= self.calls
    }
}

/// Handles a job: `start` line, the work, durable `done` line, then the output; the engine
/// deletes the job only after all of it.
#[subscriber(input_queue(), outputs(done = output_queue()))]
async fn work(
    job: &Job,
    ctx: &mut Context<'_>,
    State(journal): State<Journal>,
    State(delay): State<HandlerDelay>,
    State(fail_first): State<FailFirst>,
    done: &Output<Done>,
) -> Result<(), std::io::Error> {
    let record = |event: &str| {
        format!(
            "{event} {} {} {} {}\n",
            job.group,
            job.seq,
            ctx.message_id(),
            ctx.sqs().receive_count()
        )
    };
    // The start line is a hint for the test (which handlers were running); only the done line
    // must survive a crash of the machine, so only it is synced.
    journal.append(record("start"), false).await?;
    if !delay.0.is_zero() {
        tokio::time::sleep(delay.0).await;
    }
    if job.poison && ctx.header(IDEMPOTENCY_KEY_HEADER).is_none() {
        return Err(std::io::Error::other(
            "a poison job fails until it is redriven from the dead-letter queue",
        ));
    }
    if fail_first.fails(ctx.message_id()) {
        return Err(std::io::Error::other(
            "this call fails on purpose (FAULT_FAIL_FIRST_CALLS)",
        ));
    }
    journal.append(record("done"), true).await?;
    let output = Done {
        group: job.group.clone(),
        seq: job.seq,
        input: ctx.message_id().to_owned(),
    };
    let mut message = done.message(&output);
    if done.publisher().destination().is_fifo() {
        // Deduplicated by the input: a re-delivered job's output is stored once.
        message = message
            .group_id(job.group.clone())
            .dedup_id(ctx.message_id().to_owned());
    }
    ctx.publish(message);
    Ok(())
}

/// Where the inbox mode keeps its keys and its ledger.
#[derive(Clone)]
enum Ledger {
    Postgres(PostgresStore),
    Sqlite(SqliteStore),
}

/// The inbox mode's handler: as [`work`], with the job posted to the ledger table in the
/// inbox's transaction between the two lines, so that it commits with the job's key.
#[derive(Clone)]
struct Post {
    /// `INSERT INTO <FAULT_LEDGER_TABLE> ..`, in SQL both databases take.
    insert: Arc<str>,
    sqlite: bool,
}

impl Post {
    /// Posts `job` in the inbox's transaction.
    async fn post(&self, job: &Job, ctx: &Context<'_>) -> Result<(), String> {
        let insert = sqlx::AssertSqlSafe(self.insert.to_string());
        if self.sqlite {
            let mut transaction = ctx
                .transaction::<SqliteStore>()
                .await
                .map_err(|error| error.to_string())?;
            sqlx::query(insert)
                .bind(&job.id)
                .bind(&job.group)
                .bind(job.seq as i32)
                .bind(job.amount)
                .execute(&mut **transaction)
                .await
                .map_err(|error| error.to_string())?;
        } else {
            let mut transaction = ctx
                .transaction::<PostgresStore>()
                .await
                .map_err(|error| error.to_string())?;
            sqlx::query(insert)
                .bind(&job.id)
                .bind(&job.group)
                .bind(job.seq as i32)
                .bind(job.amount)
                .execute(&mut **transaction)
                .await
                .map_err(|error| error.to_string())?;
        }
        Ok(())
    }
}

impl Handle<Job, Output<Done>> for Post {
    async fn handle(
        &self,
        job: &Job,
        done: &Output<Done>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let failed = |error: &dyn std::fmt::Display| HandlerOutcome::failed(error.to_string());
        let (Some(State(journal)), Some(State(delay))) =
            (ctx.state::<Journal>(), ctx.state::<HandlerDelay>())
        else {
            return Err(failed(&"the app carries the journal and the delay"));
        };
        let record = |event: &str| {
            format!(
                "{event} {} {} {} {}\n",
                job.group,
                job.seq,
                ctx.message_id(),
                ctx.sqs().receive_count()
            )
        };
        journal
            .append(record("start"), false)
            .await
            .map_err(|error| failed(&error))?;
        self.post(job, ctx).await.map_err(|error| failed(&error))?;
        if !delay.0.is_zero() {
            tokio::time::sleep(delay.0).await;
        }
        journal
            .append(record("done"), true)
            .await
            .map_err(|error| failed(&error))?;
        let mut message = done.message(&Done {
            group: job.group.clone(),
            seq: job.seq,
            input: ctx.message_id().to_owned(),
        });
        if done.publisher().destination().is_fifo() {
            message = message
                .group_id(job.group.clone())
                .dedup_id(ctx.message_id().to_owned());
        }
        ctx.publish(message);
        Ok(())
    }
}

/// The consumed queue, with the settings the environment gives.
fn input_queue() -> SqsQueue {
    let mut queue = SqsQueue::new(required("FAULT_QUEUE"))
        .concurrency(setting("FAULT_CONCURRENCY", 10))
        .pollers(setting("FAULT_POLLERS", 1))
        .batch_size(setting("FAULT_BATCH_SIZE", 10))
        .delete_run(setting("FAULT_DELETE_RUN", 10))
        .wait(Duration::from_secs(setting("FAULT_WAIT_SECONDS", 20)));
    if let Some(seconds) = optional("FAULT_VISIBILITY_SECONDS") {
        queue = queue.visibility_timeout(Duration::from_secs(seconds));
    }
    if let Some(dead_letter) = optional::<String>("FAULT_DEAD_LETTER_QUEUE") {
        queue = queue.dead_letter(dead_letter, setting("FAULT_ATTEMPTS", 3));
    }
    queue
}

fn output_queue() -> SqsQueue {
    SqsQueue::new(required("FAULT_OUTPUT_QUEUE"))
}

/// A variable the example cannot run without; its absence ends the process with a message.
fn required(name: &str) -> String {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => value,
        _ => exit_with(&format!("{name} is not set; see the example's docs")),
    }
}

fn optional<T: FromStr>(name: &str) -> Option<T> {
    let value = std::env::var(name).ok().filter(|value| !value.is_empty())?;
    match value.parse() {
        Ok(parsed) => Some(parsed),
        Err(_) => exit_with(&format!("{name}={value:?} is not a valid number")),
    }
}

fn setting<T: FromStr>(name: &str, default: T) -> T {
    optional(name).unwrap_or(default)
}

fn exit_with(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(2)
}

/// The service on `broker`, with the state `app` carries: [`work`], or [`Post`] behind an inbox
/// in `inbox`.
fn service(app: RustStream, broker: SqsBroker, inbox: Option<Ledger>) -> impl App {
    app.with_broker(broker, |b| {
        let Some(ledger) = inbox else {
            b.include(work);
            return;
        };
        let table = std::env::var("FAULT_LEDGER_TABLE").unwrap_or_else(|_| "fault_ledger".into());
        let post = Post {
            insert: format!("INSERT INTO {table} (job, grp, seq, amount) VALUES ($1, $2, $3, $4)")
                .into(),
            sqlite: matches!(ledger, Ledger::Sqlite(_)),
        };
        let mounted = subscriber(input_queue(), post).outputs(Output::<Done>::new(output_queue()));
        let key = Key::json_pointer("/id");
        b.include(match ledger {
            Ledger::Postgres(store) => mounted.idempotent(Inbox::new(store).key(key)).build(),
            Ledger::Sqlite(store) => mounted.idempotent(Inbox::new(store).key(key)).build(),
        });
    })
}

fn info() -> AppInfo {
    AppInfo::new("fault-consumer", "0.1.0")
}

#[tokio::main]
async fn main() -> ExitCode {
    if asyncapi::requested() {
        asyncapi::print(&service(
            RustStream::new(info()),
            SqsBroker::in_process(),
            None,
        ));
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(false)
        .init();
    let journal = match Journal::open(&required("FAULT_JOURNAL")) {
        Ok(journal) => journal,
        Err(error) => exit_with(&format!("cannot open the journal: {error}")),
    };
    let delay = HandlerDelay(Duration::from_millis(setting("FAULT_HANDLER_DELAY_MS", 0)));
    let fail_first = FailFirst {
        calls: setting("FAULT_FAIL_FIRST_CALLS", 0),
        made: Arc::default(),
    };
    let broker = match SqsBroker::from_env().await {
        Ok(broker) => broker,
        Err(error) => exit_with(&error.to_string()),
    };
    let broker = match optional::<String>("FAULT_PAYLOAD_BUCKET") {
        Some(bucket) => broker.large_payloads(LargePayloads::new(bucket)),
        None => broker,
    };
    let inbox = match (
        optional::<String>("FAULT_INBOX_POSTGRES_URL"),
        optional::<String>("FAULT_INBOX_SQLITE_PATH"),
    ) {
        (Some(url), _) => match PostgresStore::connect(&url).await {
            Ok(store) => Some(Ledger::Postgres(store)),
            Err(error) => exit_with(&format!("the inbox's PostgreSQL at {url}: {error}")),
        },
        (None, Some(path)) => match SqliteStore::open(&path).await {
            Ok(store) => Some(Ledger::Sqlite(store)),
            Err(error) => exit_with(&format!("the inbox's SQLite file {path}: {error}")),
        },
        (None, None) => None,
    };
    let app = service(
        RustStream::new(info())
            .shutdown_timeout(Duration::from_secs(setting(
                "FAULT_SHUTDOWN_SECONDS",
                rust_stream::DEFAULT_SHUTDOWN_TIMEOUT.as_secs(),
            )))
            .with_state(journal)
            .with_state(delay)
            .with_state(fail_first),
        broker,
        inbox,
    );
    match app.run().await {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
