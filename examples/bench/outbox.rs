//! The outbox's cost (`--only outbox`): how long a committed event takes to be visible in its
//! queue, and how many SQS calls its relay makes an event, on LocalStack and PostgreSQL.
//!
//! Writers commit events at a fixed rate (`--outbox-rate`, 1,000 a second by default) for
//! `--outbox-seconds`, each in a transaction of its own that writes a ledger row and the event
//! through the outbox (`PostgresStore`), over 50 accounts (a FIFO group each). The app's relay
//! sends them to a FIFO queue. Plain aws-sdk-sqs loops (four, long-polling, as a consumer would)
//! receive and delete them, stamping each event's arrival. **Commit → visible** is an event's
//! arrival less the instant its `COMMIT` returned, both on one clock in this process: its p50,
//! p99 and max. **Calls an event** are the relay's broker's `SendMessageBatch` calls over the
//! events. The limit beside them is the relay's own poll interval (a committed row waits up to
//! one before it is read): no relay can show a commit sooner than a read finds it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rust_stream::outbox::Outbox;
use rust_stream::prelude::*;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::testing::TestApp;
use serde::Serialize;

use crate::localstack::plain_client;
use crate::options::Options;
use crate::report::thousands;
use crate::Fallible;

/// Accounts the events go over: a FIFO group each.
const ACCOUNTS: u64 = 50;

/// Writers committing at once: each transaction takes a few round trips, so one writer could not
/// keep the rate.
const WRITERS: u64 = 16;

/// Receive loops of the consumer.
const RECEIVERS: usize = 4;

/// How long the consumer waits for the last events after the writers stop.
const PATIENCE: Duration = Duration::from_secs(120);

/// The section's figures.
#[derive(Debug, Serialize)]
pub struct OutboxReport {
    pub endpoint: String,
    /// Events a second the writers were asked for, and what they committed.
    pub target_rate: u64,
    pub committed_rate: f64,
    pub events: u64,
    /// Commit → visible in the queue, in milliseconds.
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The relay's poll interval: a committed row waits up to this before a round reads it.
    pub poll_interval_ms: f64,
    /// `SendMessageBatch` calls of the relay, an event.
    pub calls_per_event: f64,
}

impl OutboxReport {
    /// The section as markdown.
    pub fn table(&self) -> String {
        format!(
            "\nThe outbox, on LocalStack ({}) and PostgreSQL: {} events committed at {} a second \
             (asked: {}), each its own transaction (a ledger row and the event), over {ACCOUNTS} \
             accounts (FIFO groups), relayed to a FIFO queue and received by {RECEIVERS} plain \
             receive loops. Commit → visible: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (the \
             relay polls every {:.0} ms). The relay's SendMessageBatch calls an event: {:.3}.\n",
            self.endpoint,
            thousands(self.events),
            thousands(self.committed_rate as u64),
            thousands(self.target_rate),
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.poll_interval_ms,
            self.calls_per_event,
        )
    }
}

/// An event: its number, for its arrival to be matched with its commit.
#[derive(Serialize)]
struct Event {
    id: u64,
    account: String,
}

pub async fn run(endpoint: &str, postgres: &str, options: &Options) -> Fallible<OutboxReport> {
    let rate = options.outbox_rate;
    let events = rate * options.outbox_seconds;
    let broker = SqsBroker::aws()
        .endpoint(endpoint)
        .region("us-east-1")
        .test_credentials()
        .connect()
        .await?;
    let queue_name = format!("bench-outbox-{}.fifo", std::process::id());
    let queue = SqsQueue::new(queue_name.clone()).create_if_missing();
    let store = fresh_store(postgres).await?;
    let outbox = Outbox::new(store.clone(), broker.publisher(queue.clone()));
    let relay = broker.relay(store.clone());
    let poll_interval = rust_stream::outbox::DEFAULT_POLL_INTERVAL;
    let app = RustStream::new(AppInfo::new("bench-outbox", "0")).with_broker(broker.clone(), |b| {
        b.worker(relay);
    });
    let running = TestApp::spawn(app).await?;
    // The queue exists once the relay's publisher resolved it: make it so before the clock runs.
    broker
        .publisher(queue.clone())
        .raw("{\"id\":-1}")
        .group_id("warm-up")
        .send()
        .await?;
    let client = plain_client(endpoint).await;
    let url = client
        .get_queue_url()
        .queue_name(&queue_name)
        .send()
        .await?
        .queue_url()
        .unwrap_or_default()
        .to_owned();

    let committed: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let arrived: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let receivers: Vec<_> = (0..RECEIVERS)
        .map(|_| {
            let (client, url, arrived) = (client.clone(), url.clone(), arrived.clone());
            tokio::spawn(async move { receive(client, url, arrived, events).await })
        })
        .collect();
    let calls_before = broker.api_calls().send_message_batch;
    let started = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let (store, outbox, committed) = (store.clone(), outbox.clone(), committed.clone());
            tokio::spawn(async move {
                write(writer, rate, events, started, &store, &outbox, &committed).await
            })
        })
        .collect();
    for writer in writers {
        writer.await??;
    }
    let writing = started.elapsed();
    let deadline = Instant::now() + PATIENCE;
    while arrived.lock().unwrap().len() < events as usize {
        if Instant::now() > deadline {
            return Err(format!(
                "only {} of {events} events arrived within {PATIENCE:?}",
                arrived.lock().unwrap().len()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for receiver in receivers {
        receiver.abort();
    }
    let calls = broker.api_calls().send_message_batch - calls_before;
    running.stop().await?;

    let (committed, arrived) = (committed.lock().unwrap(), arrived.lock().unwrap());
    let mut latencies: Vec<f64> = committed
        .iter()
        .map(|(id, at)| arrived[id].saturating_duration_since(*at).as_secs_f64() * 1000.0)
        .collect();
    latencies.sort_by(f64::total_cmp);
    let at = |quantile: f64| latencies[((latencies.len() - 1) as f64 * quantile) as usize];
    let report = OutboxReport {
        endpoint: endpoint.to_owned(),
        target_rate: rate,
        committed_rate: events as f64 / writing.as_secs_f64(),
        events,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        poll_interval_ms: poll_interval.as_secs_f64() * 1000.0,
        calls_per_event: calls as f64 / events as f64,
    };
    eprintln!(
        "outbox: {} events at {:.0}/s; commit → visible p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {:.3} SendMessageBatch calls an event",
        report.events, report.committed_rate, report.p50_ms, report.p99_ms, report.max_ms, report.calls_per_event
    );
    Ok(report)
}

/// A store in a schema of this run's own, with its ledger table.
async fn fresh_store(postgres: &str) -> Fallible<PostgresStore> {
    let schema = format!("bench_outbox_{}", std::process::id());
    let admin = sqlx::PgPool::connect(postgres).await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
    )))
    .execute(&admin)
    .await?;
    let separator = if postgres.contains('?') { '&' } else { '?' };
    let url = format!("{postgres}{separator}options[search_path]={schema}");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(WRITERS as u32 + 4)
        .connect(&url)
        .await?;
    sqlx::query("CREATE TABLE ledger (id bigint PRIMARY KEY, account text NOT NULL)")
        .execute(&pool)
        .await?;
    Ok(PostgresStore::new(pool).await?)
}

/// The writer `writer`'s share of the events: event `n` is due at `started + n / rate`.
async fn write(
    writer: u64,
    rate: u64,
    events: u64,
    started: Instant,
    store: &PostgresStore,
    outbox: &Outbox<PostgresStore>,
    committed: &Mutex<HashMap<u64, Instant>>,
) -> Fallible<()> {
    for id in (writer..events).step_by(WRITERS as usize) {
        let due = started + Duration::from_secs_f64(id as f64 / rate as f64);
        tokio::time::sleep_until(due.into()).await;
        let event = Event {
            id,
            account: format!("account-{}", id % ACCOUNTS),
        };
        let mut transaction = store.pool().begin().await?;
        sqlx::query("INSERT INTO ledger (id, account) VALUES ($1, $2)")
            .bind(id as i64)
            .bind(&event.account)
            .execute(&mut *transaction)
            .await?;
        outbox
            .message(&event)
            .group_id(&event.account)
            .send(&mut *transaction)
            .await?;
        transaction.commit().await?;
        committed.lock().unwrap().insert(id, Instant::now());
    }
    Ok(())
}

/// Receives and deletes until `events` have arrived, stamping each.
async fn receive(
    client: aws_sdk_sqs::Client,
    url: String,
    arrived: Arc<Mutex<HashMap<u64, Instant>>>,
    events: u64,
) -> Fallible<()> {
    while (arrived.lock().unwrap().len() as u64) < events {
        let received = client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await?;
        let now = Instant::now();
        let messages = received.messages();
        if messages.is_empty() {
            continue;
        }
        let mut delete = client.delete_message_batch().queue_url(&url);
        for (n, message) in messages.iter().enumerate() {
            let body: serde_json::Value = serde_json::from_str(message.body().unwrap_or("{}"))?;
            if let Some(id) = body["id"].as_u64() {
                arrived.lock().unwrap().entry(id).or_insert(now);
            }
            delete = delete.entries(
                aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                    .id(n.to_string())
                    .receipt_handle(message.receipt_handle().unwrap_or_default())
                    .build()?,
            );
        }
        delete.send().await?;
    }
    Ok(())
}
