//! The outbox's cost (`--only outbox`): how long a committed event takes to be visible in its
//! queue, and how many SQS calls its relay makes an event, on LocalStack and PostgreSQL.
//!
//! Writers commit events at a fixed rate (`--outbox-rate`, 1,000 a second by default) for
//! `--outbox-seconds`, each in a transaction of its own that writes a ledger row and the event
//! through the outbox (`PostgresStore`), over 50 accounts (a FIFO group each). The app's relay
//! sends them to a FIFO queue. Plain aws-sdk-sqs loops receive and delete them: once every event
//! is relayed, or with `--outbox-receive-during` while they are committed. **Commit → visible**
//! is the time SQS stored an event (its `SentTimestamp`, when a message becomes receivable) less
//! the wall-clock time its `COMMIT` returned, both this machine's clock (the LocalStack runs
//! here): its p50, p99 and max; it does not depend on how fast the loops receive. **Calls an
//! event** are the relay's broker's `SendMessageBatch` calls over the events.
//!
//! The limits beside them: the relay's own poll interval (a committed row waits up to one before
//! it is read: no relay can show a commit sooner than a read finds it), and what this LocalStack
//! stores at most, measured in the same run: plain aws-sdk-sqs loops, as many as the writers,
//! sending the same events to a fresh FIFO queue in full calls of 10, as fast as it answers.
//! LocalStack's cost is a call's more than a message's, and on a machine of two cores it shares
//! them with PostgreSQL, the writers and the relay: receive loops running beside the relay take
//! calls from the same LocalStack that real SQS would serve apart, which is why they wait by
//! default.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
const RECEIVERS: usize = 8;

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
    /// Whether the receive loops ran while the events were committed.
    pub received_during: bool,
    /// The limit: events a second, and calls a second, that plain loops sending full calls of
    /// 10 stored on this LocalStack.
    pub plain_events_per_sec: f64,
    pub plain_calls_per_sec: f64,
}

impl OutboxReport {
    /// The section as markdown.
    pub fn table(&self) -> String {
        format!(
            "\nThe outbox, on LocalStack ({}) and PostgreSQL: {} events committed at {} a second \
             (asked: {}), each its own transaction (a ledger row and the event), over {ACCOUNTS} \
             accounts (FIFO groups), relayed to a FIFO queue and received by {RECEIVERS} plain \
             receive loops. Commit → visible: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (the \
             relay polls every {:.0} ms; the receive loops ran {}). The relay's SendMessageBatch \
             calls an event: {:.3}. The limit, this LocalStack's own: plain loops sending full \
             calls of 10 stored {} events a second ({:.0} calls a second).\n",
            self.endpoint,
            thousands(self.events),
            thousands(self.committed_rate as u64),
            thousands(self.target_rate),
            self.p50_ms,
            self.p99_ms,
            self.max_ms,
            self.poll_interval_ms,
            if self.received_during {
                "while the events were committed"
            } else {
                "once every event was relayed"
            },
            self.calls_per_event,
            thousands(self.plain_events_per_sec as u64),
            self.plain_calls_per_sec,
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

    // Milliseconds since 1970: commits by this process's wall clock, arrivals by SQS's.
    let committed: Arc<Mutex<HashMap<u64, f64>>> = Arc::default();
    let arrived: Arc<Mutex<HashMap<u64, f64>>> = Arc::default();
    let start_receivers = || -> Vec<_> {
        (0..RECEIVERS)
            .map(|_| {
                let (client, url, arrived) = (client.clone(), url.clone(), arrived.clone());
                tokio::spawn(async move { receive(client, url, arrived, events).await })
            })
            .collect()
    };
    let during = options.outbox_receive_during;
    let mut receivers = if during {
        start_receivers()
    } else {
        Vec::new()
    };
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
    if !during {
        while outbox_rows(&store).await? > 0 {
            if Instant::now() > deadline {
                return Err(
                    format!("the relay did not empty the outbox within {PATIENCE:?}").into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        receivers = start_receivers();
    }
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
    // What a run leaves in LocalStack stays in its memory: the next run's would pause for it.
    client.delete_queue().queue_url(&url).send().await?;
    let (plain_events_per_sec, plain_calls_per_sec) = plain_limit(&client, events).await?;

    let (committed, arrived) = (committed.lock().unwrap(), arrived.lock().unwrap());
    let mut latencies: Vec<f64> = committed
        .iter()
        .map(|(id, at)| (arrived[id] - at).max(0.0))
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
        received_during: during,
        plain_events_per_sec,
        plain_calls_per_sec,
    };
    eprintln!(
        "outbox: {} events at {:.0}/s; commit → visible p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {:.3} SendMessageBatch calls an event; the limit: plain loops store {:.0} events/s ({:.0} calls/s)",
        report.events, report.committed_rate, report.p50_ms, report.p99_ms, report.max_ms, report.calls_per_event, report.plain_events_per_sec, report.plain_calls_per_sec
    );
    Ok(report)
}

/// Rows still in the outbox.
async fn outbox_rows(store: &PostgresStore) -> Fallible<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM rust_stream_outbox")
            .fetch_one(store.pool())
            .await?,
    )
}

/// This LocalStack's own limit: `events` (at most 5,000) sent by [`WRITERS`] plain loops to a
/// fresh FIFO queue in full calls of 10, each loop its own accounts' events in order, as fast as
/// it answers. Events a second and calls a second.
async fn plain_limit(client: &aws_sdk_sqs::Client, events: u64) -> Fallible<(f64, f64)> {
    let events = events.min(5_000);
    let url = client
        .create_queue()
        .queue_name(format!("bench-outbox-plain-{}.fifo", std::process::id()))
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await?
        .queue_url()
        .unwrap_or_default()
        .to_owned();
    let started = Instant::now();
    let mut loops = Vec::new();
    for share in 0..WRITERS {
        let (client, url) = (client.clone(), url.clone());
        let ids: Vec<u64> = (0..events)
            .filter(|id| (id % ACCOUNTS) % WRITERS == share)
            .collect();
        loops.push(tokio::spawn(async move {
            let mut calls = 0u64;
            for call in ids.chunks(10) {
                let entries = call
                    .iter()
                    .enumerate()
                    .map(|(n, &id)| {
                        let account = format!("account-{}", id % ACCOUNTS);
                        let body = serde_json::to_string(&Event {
                            id,
                            account: account.clone(),
                        })
                        .expect("an event encodes");
                        aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
                            .id(n.to_string())
                            .message_body(body)
                            .message_group_id(account)
                            .message_deduplication_id(id.to_string())
                            .build()
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let answer = client
                    .send_message_batch()
                    .queue_url(&url)
                    .set_entries(Some(entries))
                    .send()
                    .await?;
                if let Some(failed) = answer.failed().first() {
                    return Err(format!("a plain send failed: {failed:?}").into());
                }
                calls += 1;
            }
            Fallible::Ok(calls)
        }));
    }
    let mut calls = 0;
    for task in loops {
        calls += task.await??;
    }
    let took = started.elapsed().as_secs_f64();
    client.delete_queue().queue_url(&url).send().await?;
    Ok((events as f64 / took, calls as f64 / took))
}

/// Wall-clock milliseconds since 1970, as SQS stamps `SentTimestamp`.
fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64() * 1000.0)
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
    committed: &Mutex<HashMap<u64, f64>>,
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
        committed.lock().unwrap().insert(id, now_ms());
    }
    Ok(())
}

/// Receives and deletes until `events` have arrived, stamping each.
async fn receive(
    client: aws_sdk_sqs::Client,
    url: String,
    arrived: Arc<Mutex<HashMap<u64, f64>>>,
    events: u64,
) -> Fallible<()> {
    while (arrived.lock().unwrap().len() as u64) < events {
        let received = client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .message_system_attribute_names(
                aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp,
            )
            .send()
            .await?;
        let messages = received.messages();
        if messages.is_empty() {
            continue;
        }
        let mut delete = client.delete_message_batch().queue_url(&url);
        for (n, message) in messages.iter().enumerate() {
            let body: serde_json::Value = serde_json::from_str(message.body().unwrap_or("{}"))?;
            let sent = message
                .attributes()
                .and_then(|attributes| {
                    attributes.get(&aws_sdk_sqs::types::MessageSystemAttributeName::SentTimestamp)
                })
                .and_then(|millis| millis.parse::<f64>().ok());
            if let (Some(id), Some(sent)) = (body["id"].as_u64(), sent) {
                arrived.lock().unwrap().entry(id).or_insert(sent);
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
