//! The inbox's cost (`--only inbox`): consuming on LocalStack with a handler that posts one ledger
//! row to PostgreSQL, with the inbox (`PostgresStore`, the row written in the inbox's
//! transaction) and without it (the handler's own `BEGIN`, `INSERT`, `COMMIT` on a pool of the
//! same size), in one run, the two taking turns, and the database round trips each message cost,
//! counted by a TCP proxy in this process between the pools and PostgreSQL.
//!
//! What the proxy counts, on the client's side of each connection (after its startup and
//! authentication, which are not counted): every read that carries at least one `Sync` or
//! simple `Query` message is one **round trip**, as the client then waits for the server's
//! `ReadyForQuery` before it goes on (a statement sqlx has prepared on the connection is one
//! `Bind`/`Execute`/`Sync`; a new one is a `Parse`/`Describe`/`Sync` first; `BEGIN`, `COMMIT`,
//! `ROLLBACK` and sqlx's ping of a connection going back to its pool are simple queries). Two
//! messages a client wrote together without waiting (a queued `ROLLBACK` sent with the next
//! statement) land in one read and count once, as they cost one wait. The `Sync` and `Query`
//! messages themselves are counted beside it.
//!
//! Each run gets a fresh standard queue of orders, filled by the plain publisher, and a ledger
//! (and inbox) emptied before it; the pool is warmed (every connection opened) before the count
//! starts. Every message must be posted exactly once in each run; a run that posted fewer or
//! more rows fails the benchmark.

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rust_stream::inbox::Inbox;
use rust_stream::prelude::*;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::testing::TestApp;
use rust_stream::transport::layer::Hooked;
use serde::Serialize;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgSslMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::deletes::{CountingDeletes, Deleted};
use crate::localstack::{plain_client, Queues};
use crate::options::Options;
use crate::orders::{Order, Workload};
use crate::report::thousands;
use crate::Fallible;

/// Pollers of the subscription: LocalStack's receives, not the handlers, would bound one.
const POLLERS: usize = 2;

/// Handlers at once, and connections in each pool: a claim holds its connection for the
/// handler's duration, so more handlers than connections would only wait for one.
const CONCURRENCY: usize = 10;

/// Long-poll wait of the subscription: short, so that stopping after a run is quick.
const WAIT: Duration = Duration::from_secs(1);

/// How long one run may take.
const PATIENCE: Duration = Duration::from_secs(300);

const LEDGER: &str = "CREATE TABLE ledger (order_id bigint NOT NULL, cents bigint NOT NULL)";
const POST: &str = "INSERT INTO ledger (order_id, cents) VALUES ($1, $2)";

/// The section's figures.
#[derive(Debug, Serialize)]
pub struct InboxReport {
    pub endpoint: String,
    pub messages: u64,
    pub pollers: usize,
    pub concurrency: usize,
    /// Without the inbox, then with it.
    pub rows: Vec<InboxRow>,
    /// With over without: the median runs' msg/s.
    pub ratio: f64,
    /// With minus without: the median runs' round trips a message.
    pub extra_round_trips: f64,
}

#[derive(Debug, Serialize)]
pub struct InboxRow {
    pub how: &'static str,
    /// The median run's.
    pub msgs_per_sec: f64,
    pub round_trips_per_message: f64,
    pub syncs_and_queries_per_message: f64,
    /// Every run's, in the order run.
    pub runs_msgs_per_sec: Vec<f64>,
    pub runs_round_trips_per_message: Vec<f64>,
}

/// Which side of the comparison a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The handler's own transaction on the pool.
    Plain,
    /// The inbox's transaction, from `ctx.transaction::<PostgresStore>()`.
    Inbox,
}

impl Side {
    fn label(self) -> &'static str {
        match self {
            Self::Plain => "without the inbox (the handler's own transaction)",
            Self::Inbox => "with the inbox (PostgresStore)",
        }
    }
}

/// One run's figures.
struct Run {
    msgs_per_sec: f64,
    round_trips: f64,
    syncs_and_queries: f64,
}

pub async fn run(endpoint: &str, postgres_url: &str, options: &Options) -> Fallible<InboxReport> {
    let messages = options.inbox_messages;
    let client = plain_client(endpoint).await;
    let transport = SqsBroker::aws()
        .endpoint(endpoint)
        .region("us-east-1")
        .test_credentials()
        .transport()
        .await?;
    let mut queues = Queues::new(client, endpoint, "bench-inbox")?;

    let direct = PgConnectOptions::from_str(postgres_url)?.ssl_mode(PgSslMode::Disable);
    let admin = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(direct.clone())
        .await?;
    let schema = format!("bench_inbox_{}", std::process::id());
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
    )))
    .execute(&admin)
    .await?;
    let proxy = CountingProxy::start(direct.get_host(), direct.get_port()).await?;
    let through_proxy = direct
        .clone()
        .host("127.0.0.1")
        .port(proxy.address.port())
        .options([("search_path", schema.as_str())]);
    // As `PostgresStore::connect` makes its pool: no test before each acquire.
    let pool = PgPoolOptions::new()
        .max_connections(CONCURRENCY as u32)
        .test_before_acquire(false)
        .connect_with(through_proxy)
        .await?;
    let store = PostgresStore::new(pool.clone()).await?;
    sqlx::query(LEDGER).execute(&pool).await?;

    let repeats = options.localstack_repeats;
    let (mut plain, mut inbox) = (Vec::new(), Vec::new());
    for repeat in 0..repeats {
        // Taking turns, each going first every other repeat.
        let order = if repeat % 2 == 0 {
            [Side::Plain, Side::Inbox]
        } else {
            [Side::Inbox, Side::Plain]
        };
        for side in order {
            let (name, url) = queues.filled(Workload::Standard, messages).await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "TRUNCATE {schema}.ledger, {schema}.rust_stream_inbox"
            )))
            .execute(&admin)
            .await?;
            warm(&pool).await?;
            let run = consume(&transport, &name, side, &pool, &store, &proxy, messages).await?;
            queues.delete(&url).await?;
            let (rows, orders): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT count(*), count(DISTINCT order_id) FROM {schema}.ledger"
            )))
            .fetch_one(&admin)
            .await?;
            // Without the inbox a redelivered order posts twice, as it would in such a service.
            let exact = side == Side::Plain || rows == orders;
            if orders != messages as i64 || !exact {
                return Err(format!(
                    "{}: {messages} orders consumed, the ledger holds {rows} rows of {orders} orders",
                    side.label()
                )
                .into());
            }
            eprintln!(
                "inbox {:?}, run {}: {} msg/s, {:.2} round trips a message ({:.2} Sync/Query)",
                side,
                repeat + 1,
                thousands(run.msgs_per_sec as u64),
                run.round_trips,
                run.syncs_and_queries
            );
            match side {
                Side::Plain => plain.push(run),
                Side::Inbox => inbox.push(run),
            }
        }
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&admin)
        .await?;
    let (plain, inbox) = (row(Side::Plain, plain), row(Side::Inbox, inbox));
    Ok(InboxReport {
        endpoint: endpoint.to_owned(),
        messages,
        pollers: POLLERS,
        concurrency: CONCURRENCY,
        ratio: inbox.msgs_per_sec / plain.msgs_per_sec,
        extra_round_trips: inbox.round_trips_per_message - plain.round_trips_per_message,
        rows: vec![plain, inbox],
    })
}

/// The row of one side: its median run by speed, and every run.
fn row(side: Side, mut runs: Vec<Run>) -> InboxRow {
    let runs_msgs_per_sec = runs.iter().map(|run| run.msgs_per_sec).collect();
    let runs_round_trips_per_message = runs.iter().map(|run| run.round_trips).collect();
    runs.sort_by(|a, b| a.msgs_per_sec.total_cmp(&b.msgs_per_sec));
    let median = runs.swap_remove(runs.len() / 2);
    InboxRow {
        how: side.label(),
        msgs_per_sec: median.msgs_per_sec,
        round_trips_per_message: median.round_trips,
        syncs_and_queries_per_message: median.syncs_and_queries,
        runs_msgs_per_sec,
        runs_round_trips_per_message,
    }
}

/// Opens every connection of the pool (its startup and first queries are not what a message
/// costs), then gives them back.
async fn warm(pool: &PgPool) -> Fallible<()> {
    let mut held = Vec::new();
    for _ in 0..CONCURRENCY {
        let mut connection = pool.acquire().await?;
        sqlx::query("SELECT 1").execute(&mut *connection).await?;
        held.push(connection);
    }
    drop(held);
    // The pool pings each connection as it comes back: let those finish before the count.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

/// Consumes the queue with a subscriber of `side` from its start until the last message is
/// deleted, counting the database's round trips meanwhile.
async fn consume(
    transport: &rust_stream::aws::AwsTransport,
    queue: &str,
    side: Side,
    pool: &PgPool,
    store: &PostgresStore,
    proxy: &CountingProxy,
    messages: u64,
) -> Fallible<Run> {
    let deleted = Arc::new(Deleted::default());
    let broker = SqsBroker::with_transport(Hooked::new(
        transport.clone(),
        CountingDeletes::new(deleted.clone()),
    ));
    let queue = SqsQueue::new(queue)
        .pollers(POLLERS)
        .concurrency(CONCURRENCY)
        .wait(WAIT);
    let subscription = match side {
        Side::Plain => subscriber(queue, PostOwn(pool.clone())).build(),
        Side::Inbox => subscriber(queue, PostInInbox)
            .idempotent(Inbox::new(store.clone()))
            .build(),
    };
    let app = RustStream::new(AppInfo::new("bench-inbox", "0")).with_broker(broker, |b| {
        b.include(subscription);
    });
    let counted = proxy.counts.snapshot();
    let started = Instant::now();
    let running = TestApp::spawn(app).await?;
    let done = deleted.wait_for(messages, PATIENCE).await?;
    let (round_trips, syncs_and_queries) = proxy.counts.since(counted);
    running.stop().await?;
    Ok(Run {
        msgs_per_sec: messages as f64 / (done - started).as_secs_f64(),
        round_trips: round_trips as f64 / messages as f64,
        syncs_and_queries: syncs_and_queries as f64 / messages as f64,
    })
}

/// Posts the order in a transaction of its own: the handler a service without the inbox writes.
struct PostOwn(PgPool);

impl Handle<Order> for PostOwn {
    async fn handle(
        &self,
        order: &Order,
        _: &(),
        _: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let retry = |_: sqlx::Error| HandlerOutcome::retry();
        let mut transaction = self.0.begin().await.map_err(retry)?;
        sqlx::query(POST)
            .bind(order.id as i64)
            .bind(order.cents as i64)
            .execute(&mut *transaction)
            .await
            .map_err(retry)?;
        transaction.commit().await.map_err(retry)?;
        Ok(())
    }
}

/// Posts the order in the inbox's transaction.
struct PostInInbox;

impl Handle<Order> for PostInInbox {
    async fn handle(
        &self,
        order: &Order,
        _: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let mut transaction = ctx
            .transaction::<PostgresStore>()
            .await
            .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
        sqlx::query(POST)
            .bind(order.id as i64)
            .bind(order.cents as i64)
            .execute(&mut **transaction)
            .await
            .map_err(|_| HandlerOutcome::retry())?;
        Ok(())
    }
}

/// Round trips and `Sync`/`Query` messages the clients have sent through the proxy.
#[derive(Debug, Default)]
struct Counts {
    round_trips: AtomicU64,
    syncs_and_queries: AtomicU64,
}

impl Counts {
    fn snapshot(&self) -> (u64, u64) {
        (
            self.round_trips.load(Ordering::SeqCst),
            self.syncs_and_queries.load(Ordering::SeqCst),
        )
    }

    fn since(&self, (round_trips, syncs_and_queries): (u64, u64)) -> (u64, u64) {
        let (now_trips, now_messages) = self.snapshot();
        (now_trips - round_trips, now_messages - syncs_and_queries)
    }
}

/// A TCP proxy to PostgreSQL that reads the protocol's frames on the client's side: see the
/// [module docs](self).
struct CountingProxy {
    address: SocketAddr,
    counts: Arc<Counts>,
}

impl CountingProxy {
    async fn start(host: &str, port: u16) -> Fallible<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let upstream = format!("{host}:{port}");
        let shared = counts.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (upstream, counts) = (upstream.clone(), shared.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&upstream).await {
                        let _ = relay(client, server, counts).await;
                    }
                });
            }
        });
        Ok(Self { address, counts })
    }
}

/// Copies both ways until either side closes, counting what the client sends.
async fn relay(client: TcpStream, server: TcpStream, counts: Arc<Counts>) -> std::io::Result<()> {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let answers = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    });
    let mut frames = Frames::default();
    let mut buffer = vec![0_u8; 64 * 1024];
    loop {
        let read = client_read.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        let ends = frames.read(&buffer[..read]);
        if ends > 0 {
            counts.round_trips.fetch_add(1, Ordering::Relaxed);
            counts.syncs_and_queries.fetch_add(ends, Ordering::Relaxed);
        }
        server_write.write_all(&buffer[..read]).await?;
    }
    let _ = server_write.shutdown().await;
    answers.abort();
    Ok(())
}

/// Where the client's byte stream is in PostgreSQL's frontend protocol: its untyped startup
/// messages (an `SSLRequest` or `GSSENCRequest`, then the `StartupMessage`: a length, then a
/// code), then typed messages (a type byte, then a length that counts itself).
#[derive(Debug, Default)]
struct Frames {
    started: bool,
    header: Vec<u8>,
    /// Bytes of the current message's body still to pass.
    skip: usize,
}

/// Codes of the startup requests the server answers with one byte, after which the client
/// sends another untyped message.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

impl Frames {
    /// Passes `bytes`; answers how many `Sync` and `Query` messages began in them.
    fn read(&mut self, mut bytes: &[u8]) -> u64 {
        let mut ends = 0;
        while !bytes.is_empty() {
            if self.skip > 0 {
                let passed = self.skip.min(bytes.len());
                self.skip -= passed;
                bytes = &bytes[passed..];
                continue;
            }
            let wanted = if self.started { 5 } else { 8 };
            let taken = (wanted - self.header.len()).min(bytes.len());
            self.header.extend_from_slice(&bytes[..taken]);
            bytes = &bytes[taken..];
            if self.header.len() < wanted {
                break;
            }
            let word = |at: usize| {
                u32::from_be_bytes([
                    self.header[at],
                    self.header[at + 1],
                    self.header[at + 2],
                    self.header[at + 3],
                ]) as usize
            };
            if self.started {
                if matches!(self.header[0], b'S' | b'Q') {
                    ends += 1;
                }
                self.skip = word(1).saturating_sub(4);
            } else {
                let (length, code) = (word(0), word(4) as u32);
                self.started = !matches!(code, SSL_REQUEST | GSSENC_REQUEST);
                self.skip = length.saturating_sub(8);
            }
            self.header.clear();
        }
        ends
    }
}

#[cfg(test)]
mod tests {
    use super::Frames;

    fn typed(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut message = vec![kind];
        message.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        message.extend_from_slice(body);
        message
    }

    #[test]
    fn frames_count_syncs_and_queries_after_the_startup_across_reads() {
        let mut stream = Vec::new();
        stream.extend_from_slice(&8_u32.to_be_bytes());
        stream.extend_from_slice(&super::SSL_REQUEST.to_be_bytes());
        // A StartupMessage holding an 'S' and a 'Q' that must not count.
        let startup = b"\0\x03\0\0user\0SQ\0\0";
        stream.extend_from_slice(&(startup.len() as u32 + 4).to_be_bytes());
        stream.extend_from_slice(startup);
        stream.extend(typed(b'Q', b"BEGIN\0"));
        stream.extend(typed(b'B', b"SQSQ"));
        stream.extend(typed(b'E', b"\0\0\0\0\0"));
        stream.extend(typed(b'S', b""));
        for split in 1..stream.len() {
            let mut frames = Frames::default();
            let ends = frames.read(&stream[..split]) + frames.read(&stream[split..]);
            assert_eq!(ends, 2, "split at {split}");
        }
    }
}
