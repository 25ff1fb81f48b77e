//! What a message costs in CPU: process CPU time (user + sys, `getrusage(RUSAGE_SELF)`) per
//! message of the consuming and of the publishing side, through rust-stream and through a plain
//! loop, on LocalStack and on the in-process account with every call delayed by a round trip.
//!
//! Each measured run is a child process of its own (this binary run again with `--cpu-child`),
//! which does nothing but the one side of the one row, so that only that side's CPU is counted:
//!
//! - **On LocalStack** the parent creates the queue and, for a consume row, fills it with the
//!   plain publisher before the child starts; the child builds its client, reads its CPU time,
//!   consumes (or publishes) every message, reads its CPU time again the moment the last delete
//!   (or send) is answered, prints the difference and exits without stopping anything, so no
//!   long poll of an emptied queue is waited out or counted. LocalStack's own CPU is not counted
//!   (another process).
//! - **On the in-process account** the account is in the child: it fills the queue without delay
//!   and reads its CPU time after that, so the count is the consume and the account's part of it
//!   (the account answers both sides' calls alike), each call delayed by the round trip.
//!
//! The plain loops are the end-to-end benchmark's: ReceiveMessage of 10, decode each body with
//! serde_json, DeleteMessageBatch ([`PLAIN_LOOPS`] loops at once); SendMessageBatch of 10 from
//! [`PLAIN_LOOPS`] loops. rust-stream consumes with one `#[subscriber]` at default settings (the
//! same decoding) and publishes with one `send_batch`. Each row runs `--localstack-repeats` times
//! a side, the sides taking turns, and shows the medians.
//!
//! With `--cpu-instructions` the LocalStack rows are also run under callgrind (valgrind), each
//! side at `--cpu-instructions-messages` and at twice that, and the difference over the extra
//! messages is the instructions a message costs that side's process, its start-up and client
//! left out. The profiles stay in the temporary directory (their paths are printed), for
//! `callgrind_annotate`.

use std::future::Future;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};
use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::transport::layer::Hooked;
use rust_stream::transport::{DeleteEntry, ReceiveMessage, SendBatchEntry, SendMessage, Transport};
use serde::{Deserialize, Serialize};

use crate::deletes::{CountingDeletes, Deleted};
use crate::localstack::{plain_client, Queues};
use crate::options::Options;
use crate::orders::{publish_orders, service, Order, Workload};
use crate::real_latency::RoundTrip;
use crate::report::{load_average, rate, table, thousands, utc_now};
use crate::Fallible;

/// The workloads of every table: standard, and FIFO over 50 groups.
const WORKLOADS: [Workload; 2] = [Workload::Standard, Workload::Fifo { groups: 50 }];

/// Plain loops at once, receiving or sending: on LocalStack as many as the harness ran;
/// at a 20 ms round trip the count that reached the engine's speed in the real-latency rows.
const PLAIN_LOOPS_LOCALSTACK: u64 = 4;
const PLAIN_LOOPS_DELAYED: u64 = 16;

/// The long poll of the plain consume loops; the child exits once its last delete is answered,
/// so the wait is never waited out.
const PLAIN_WAIT_SECONDS: i32 = 1;

/// Messages per `send_batch` while the in-process account is filled (without delay).
const FILL_CHUNK: u64 = 10_000;

/// How long one child may take.
const PATIENCE: Duration = Duration::from_secs(600);

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Consume,
    Publish,
}

/// Where the queue is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    LocalStack,
    /// The in-process account, every call delayed by `--round-trip-ms`.
    Delayed,
}

/// Which side of a row a child runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Engine,
    Plain,
}

/// What a child is asked to do, passed as one JSON argument after `--cpu-child`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    direction: Direction,
    backend: Backend,
    side: Side,
    /// `standard` or `fifo-50`.
    workload: String,
    messages: u64,
    /// On LocalStack: the endpoint, and the queue's name and URL, made by the parent.
    endpoint: Option<String>,
    queue_name: Option<String>,
    queue_url: Option<String>,
    round_trip_ms: u64,
}

/// What a child measured, printed as its last line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Measured {
    pub user_us: u64,
    pub sys_us: u64,
    pub wall_us: u64,
}

impl Measured {
    fn cpu_us(&self) -> u64 {
        self.user_us + self.sys_us
    }
}

/// Process CPU time so far, user and system, in microseconds: every thread of the process.
fn cpu_now() -> (u64, u64) {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes a whole `rusage` to the pointer it is given, a valid, aligned
    // and writable `MaybeUninit<rusage>` here; it fails only for a bad `who`, and RUSAGE_SELF is
    // good, so on 0 the value is initialised.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return (0, 0);
        }
        usage.assume_init()
    };
    let micros = |time: libc::timeval| time.tv_sec as u64 * 1_000_000 + time.tv_usec as u64;
    (micros(usage.ru_utime), micros(usage.ru_stime))
}

/// A stopwatch of the process's CPU and of the wall clock.
struct Counting {
    cpu: (u64, u64),
    wall: Instant,
}

impl Counting {
    fn start() -> Self {
        Self {
            cpu: cpu_now(),
            wall: Instant::now(),
        }
    }

    fn stop(self) -> Measured {
        let (user, sys) = cpu_now();
        Measured {
            user_us: user - self.cpu.0,
            sys_us: sys - self.cpu.1,
            wall_us: self.wall.elapsed().as_micros() as u64,
        }
    }
}

/// The CPU rows, each beside its plain loop.
#[derive(Debug, Serialize)]
pub struct CpuReport {
    pub round_trip_ms: u64,
    pub rows: Vec<CpuRow>,
}

#[derive(Debug, Serialize)]
pub struct CpuRow {
    pub backend: Backend,
    pub direction: Direction,
    pub workload: String,
    pub messages: u64,
    /// Plain loops at once.
    pub plain_loops: u64,
    /// CPU (user + sys) a message, the median run's.
    pub cpu_us_per_message: f64,
    pub plain_cpu_us_per_message: f64,
    /// `cpu_us_per_message / plain_cpu_us_per_message`.
    pub ratio: f64,
    /// Each run's CPU a message, in the order run (the sides took turns).
    pub runs_cpu_us: Vec<f64>,
    pub plain_runs_cpu_us: Vec<f64>,
    /// Of the median runs: user and system time a message, and the rate.
    pub user_us_per_message: f64,
    pub sys_us_per_message: f64,
    pub plain_user_us_per_message: f64,
    pub plain_sys_us_per_message: f64,
    pub msgs_per_sec: f64,
    pub plain_msgs_per_sec: f64,
    /// Instructions a message (callgrind, the difference between a run of N and one of 2N),
    /// with `--cpu-instructions`.
    pub instructions_per_message: Option<f64>,
    pub plain_instructions_per_message: Option<f64>,
    /// The load average before and after the row's runs.
    pub load_at_start: String,
    pub load_at_end: String,
    pub started: String,
}

/// Every row: on LocalStack when it has an endpoint, and on the delayed account.
pub async fn run(options: &Options) -> Fallible<CpuReport> {
    let mut rows = Vec::new();
    if let Some(endpoint) = &options.localstack {
        let client = plain_client(endpoint).await;
        let mut queues = Queues::new(client, endpoint, "cpu")?;
        for direction in [Direction::Consume, Direction::Publish] {
            for workload in WORKLOADS {
                let row =
                    localstack_row(endpoint, &mut queues, direction, workload, options).await?;
                rows.push(row);
            }
        }
    }
    for direction in [Direction::Consume, Direction::Publish] {
        for workload in WORKLOADS {
            rows.push(delayed_row(direction, workload, options)?);
        }
    }
    Ok(CpuReport {
        round_trip_ms: options.round_trip_ms,
        rows,
    })
}

async fn localstack_row(
    endpoint: &str,
    queues: &mut Queues,
    direction: Direction,
    workload: Workload,
    options: &Options,
) -> Fallible<CpuRow> {
    let messages = options.localstack_messages;
    let (started, load_at_start) = (utc_now(), load_average());
    let mut runs = Runs::default();
    // A queue of its own for each run, filled (for a consume row) by this process.
    let mut one = async |side: Side, messages: u64, instructions: bool| -> Fallible<Measured> {
        let (name, url) = match direction {
            Direction::Consume => queues.filled(workload, messages).await?,
            Direction::Publish => queues.empty(workload).await?,
        };
        let job = Job {
            direction,
            backend: Backend::LocalStack,
            side,
            workload: workload.name(),
            messages,
            endpoint: Some(endpoint.to_owned()),
            queue_name: Some(name),
            queue_url: Some(url.clone()),
            round_trip_ms: 0,
        };
        let measured = if instructions {
            callgrind(&job)
        } else {
            child(&job)
        };
        queues.delete(&url).await?;
        measured
    };
    for _ in 0..options.localstack_repeats {
        for side in [Side::Plain, Side::Engine] {
            let measured = one(side, messages, false).await?;
            runs.push(side, measured);
        }
    }
    let mut instructions = [None, None];
    if options.cpu_instructions {
        let few = options.cpu_instructions_messages;
        for (at, side) in [Side::Engine, Side::Plain].into_iter().enumerate() {
            let once = one(side, few, true).await?.user_us;
            let twice = one(side, 2 * few, true).await?.user_us;
            instructions[at] = Some(twice.saturating_sub(once) as f64 / few as f64);
        }
    }
    let mut row = runs.row(
        Backend::LocalStack,
        direction,
        workload,
        messages,
        PLAIN_LOOPS_LOCALSTACK,
    );
    [
        row.instructions_per_message,
        row.plain_instructions_per_message,
    ] = instructions;
    row.started = started;
    row.load_at_start = load_at_start;
    row.load_at_end = load_average();
    print_row(&row);
    Ok(row)
}

fn delayed_row(direction: Direction, workload: Workload, options: &Options) -> Fallible<CpuRow> {
    let messages = options.round_trip_messages;
    let (started, load_at_start) = (utc_now(), load_average());
    let mut runs = Runs::default();
    for _ in 0..options.localstack_repeats {
        for side in [Side::Plain, Side::Engine] {
            let job = Job {
                direction,
                backend: Backend::Delayed,
                side,
                workload: workload.name(),
                messages,
                endpoint: None,
                queue_name: None,
                queue_url: None,
                round_trip_ms: options.round_trip_ms,
            };
            runs.push(side, child(&job)?);
        }
    }
    let mut row = runs.row(
        Backend::Delayed,
        direction,
        workload,
        messages,
        PLAIN_LOOPS_DELAYED,
    );
    row.started = started;
    row.load_at_start = load_at_start;
    row.load_at_end = load_average();
    print_row(&row);
    Ok(row)
}

fn print_row(row: &CpuRow) {
    eprintln!(
        "cpu {:?} {:?} {}: {:.1} µs a message, plain {:.1} µs ({:.2}x); runs {:?}, plain {:?}",
        row.backend,
        row.direction,
        row.workload,
        row.cpu_us_per_message,
        row.plain_cpu_us_per_message,
        row.ratio,
        row.runs_cpu_us,
        row.plain_runs_cpu_us
    );
}

/// Each side's runs.
#[derive(Default)]
struct Runs {
    engine: Vec<(Measured, u64)>,
    plain: Vec<(Measured, u64)>,
}

impl Runs {
    fn push(&mut self, side: Side, measured: Measured) {
        match side {
            Side::Engine => self.engine.push((measured, 0)),
            Side::Plain => self.plain.push((measured, 0)),
        }
    }

    fn row(
        self,
        backend: Backend,
        direction: Direction,
        workload: Workload,
        messages: u64,
        plain_loops: u64,
    ) -> CpuRow {
        let per = |us: u64| us as f64 / messages as f64;
        let runs = |side: &[(Measured, u64)]| {
            side.iter()
                .map(|(run, _)| per(run.cpu_us()))
                .collect::<Vec<_>>()
        };
        let median = |side: &[(Measured, u64)]| {
            let mut sorted: Vec<&Measured> = side.iter().map(|(run, _)| run).collect();
            sorted.sort_by_key(|run| run.cpu_us());
            sorted[sorted.len() / 2].clone()
        };
        let (engine, plain) = (median(&self.engine), median(&self.plain));
        let rate = |run: &Measured| messages as f64 / (run.wall_us as f64 / 1e6);
        CpuRow {
            backend,
            direction,
            workload: workload.label(),
            messages,
            plain_loops,
            cpu_us_per_message: per(engine.cpu_us()),
            plain_cpu_us_per_message: per(plain.cpu_us()),
            ratio: engine.cpu_us() as f64 / plain.cpu_us() as f64,
            runs_cpu_us: runs(&self.engine),
            plain_runs_cpu_us: runs(&self.plain),
            user_us_per_message: per(engine.user_us),
            sys_us_per_message: per(engine.sys_us),
            plain_user_us_per_message: per(plain.user_us),
            plain_sys_us_per_message: per(plain.sys_us),
            msgs_per_sec: rate(&engine),
            plain_msgs_per_sec: rate(&plain),
            instructions_per_message: None,
            plain_instructions_per_message: None,
            load_at_start: String::new(),
            load_at_end: String::new(),
            started: String::new(),
        }
    }
}

/// Runs `job` in a fresh child process and reads what it measured.
fn child(job: &Job) -> Fallible<Measured> {
    let output = Command::new(std::env::current_exe()?)
        .args(["--cpu-child", &serde_json::to_string(job)?])
        .stderr(Stdio::inherit())
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!("the CPU run {job:?} failed ({}): {stdout}", output.status).into());
    }
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .map_err(|error| format!("the CPU child printed {last:?}: {error}").into())
}

/// Runs `job` in a child under callgrind; the instructions of the whole process come back as
/// `user_us` (the other fields are 0).
fn callgrind(job: &Job) -> Fallible<Measured> {
    // Kept, named for the run, for `callgrind_annotate`: where the instructions go.
    let out = std::env::temp_dir().join(format!(
        "bench-cpu-{}-{:?}-{:?}-{}-{}.callgrind",
        std::process::id(),
        job.direction,
        job.side,
        job.workload,
        job.messages
    ));
    let output = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(std::env::current_exe()?)
        .args(["--cpu-child", &serde_json::to_string(job)?])
        .stderr(Stdio::null())
        .output()
        .map_err(|error| format!("valgrind (--cpu-instructions needs it): {error}"))?;
    if !output.status.success() {
        return Err(format!("the callgrind run {job:?} failed ({})", output.status).into());
    }
    let profile = std::fs::read_to_string(&out)?;
    eprintln!("callgrind profile: {}", out.display());
    let total = profile
        .lines()
        .find_map(|line| {
            line.strip_prefix("totals:")
                .or(line.strip_prefix("summary:"))
        })
        .and_then(|count| count.trim().parse::<u64>().ok())
        .ok_or("a callgrind profile without its total")?;
    Ok(Measured {
        user_us: total,
        sys_us: 0,
        wall_us: 0,
    })
}

/// In a child: runs the job, prints what it measured, and exits at once (whatever still runs,
/// such as a plain loop's long poll of the emptied queue, is not waited for).
pub async fn child_here(job: &str) -> Fallible<()> {
    let job: Job = serde_json::from_str(job)?;
    crate::record_no_spans()?;
    let workload = Workload::parse(&job.workload)
        .or(match job.workload.as_str() {
            "fifo-50" => Some(Workload::Fifo { groups: 50 }),
            _ => None,
        })
        .ok_or_else(|| format!("no workload named {:?}", job.workload))?;
    let measured = match job.backend {
        Backend::LocalStack => on_localstack(&job, workload).await?,
        Backend::Delayed => on_delayed_account(&job, workload).await?,
    };
    println!("{}", serde_json::to_string(&measured)?);
    std::process::exit(0);
}

async fn on_localstack(job: &Job, workload: Workload) -> Fallible<Measured> {
    let (Some(endpoint), Some(name), Some(url)) = (&job.endpoint, &job.queue_name, &job.queue_url)
    else {
        return Err("a LocalStack job without its queue".into());
    };
    match job.side {
        Side::Plain => {
            let client = plain_client(endpoint).await;
            sdk_plain(job, workload, client, url).await
        }
        Side::Engine => {
            let transport = SqsBroker::aws()
                .endpoint(endpoint)
                .region("us-east-1")
                .test_credentials()
                .transport()
                .await?;
            engine(job, workload, transport, SqsQueue::new(name)).await
        }
    }
}

async fn on_delayed_account(job: &Job, workload: Workload) -> Fallible<Measured> {
    let account = Account::new();
    let round_trip = Duration::from_millis(job.round_trip_ms);
    let queue = workload.queue();
    let url = if workload.is_fifo() {
        account.create_fifo_queue(queue.name()).await?
    } else {
        account.create_standard_queue(queue.name()).await?
    };
    if job.direction == Direction::Consume {
        let publisher = SqsBroker::with_account(&account).publisher(queue.clone());
        publish_orders(&publisher, workload, 0..job.messages, FILL_CHUNK).await?;
    }
    let delayed = Hooked::new(account, RoundTrip(round_trip));
    match job.side {
        Side::Plain => account_plain(job, workload, Arc::new(delayed), &url).await,
        Side::Engine => engine(job, workload, delayed, queue).await,
    }
}

/// rust-stream's side: a `#[subscriber]` at default settings until the last delete is answered,
/// or one `send_batch` of every message.
async fn engine(
    job: &Job,
    workload: Workload,
    transport: impl Transport,
    queue: SqsQueue,
) -> Fallible<Measured> {
    match job.direction {
        Direction::Consume => {
            let deleted = Arc::new(Deleted::default());
            let broker = SqsBroker::with_transport(Hooked::new(
                transport,
                CountingDeletes::new(deleted.clone()),
            ));
            let counting = Counting::start();
            let running = TestApp::spawn(service(broker, queue)).await?;
            deleted.wait_for(job.messages, PATIENCE).await?;
            let measured = counting.stop();
            // Not stopped: the process exits as soon as it has printed this.
            std::mem::forget(running);
            Ok(measured)
        }
        Direction::Publish => {
            let broker = SqsBroker::with_transport(transport);
            let publisher = broker.publisher(queue);
            let orders = orders(workload, job.messages);
            let counting = Counting::start();
            let batch = orders
                .iter()
                .map(|order| workload.outgoing(&publisher, order));
            for result in publisher.send_batch(batch).await {
                result?;
            }
            Ok(counting.stop())
        }
    }
}

fn orders(workload: Workload, messages: u64) -> Vec<Order> {
    (0..messages)
        .map(|id| Order::new(id, workload.customers(), 0))
        .collect()
}

/// The plain side over the delayed account: [`PLAIN_LOOPS_DELAYED`] loops through the
/// transport's calls as they are.
async fn account_plain<T: Transport + 'static>(
    job: &Job,
    workload: Workload,
    transport: Arc<T>,
    url: &str,
) -> Fallible<Measured> {
    let url: Arc<str> = url.into();
    match job.direction {
        Direction::Consume => {
            consume_loops(job.messages, PLAIN_LOOPS_DELAYED, move || {
                let (transport, url) = (transport.clone(), url.clone());
                async move {
                    let received = transport
                        .receive_message(
                            &url,
                            ReceiveMessage::new(10).wait_time_seconds(PLAIN_WAIT_SECONDS),
                        )
                        .await?;
                    let mut entries = Vec::with_capacity(received.len());
                    for (index, message) in received.into_iter().enumerate() {
                        decode(&message.body)?;
                        entries.push(DeleteEntry {
                            id: index.to_string().into(),
                            receipt_handle: message.receipt_handle,
                        });
                    }
                    if entries.is_empty() {
                        return Ok(0);
                    }
                    let answer = transport.delete_message_batch(&url, entries).await?;
                    if let Some(failed) = answer.failed.first() {
                        return Err(format!("delete failed: {failed:?}").into());
                    }
                    Ok(answer.successful.len() as u64)
                }
            })
            .await
        }
        Direction::Publish => {
            publish_loops(workload, job.messages, PLAIN_LOOPS_DELAYED, move |batch| {
                let entries = batch
                    .iter()
                    .enumerate()
                    .map(|(index, order)| {
                        let message = SendMessage::new(order.body());
                        let message = if workload.is_fifo() {
                            message
                                .group_id(order.customer.clone())
                                .dedup_id(order.id.to_string())
                        } else {
                            message
                        };
                        SendBatchEntry::new(index.to_string(), message)
                    })
                    .collect();
                let (transport, url) = (transport.clone(), url.clone());
                async move {
                    let answer = transport.send_message_batch(&url, entries).await?;
                    match answer.failed.first() {
                        Some(failed) => Err(format!("send failed: {failed:?}").into()),
                        None => Ok(()),
                    }
                }
            })
            .await
        }
    }
}

/// The plain side on LocalStack: [`PLAIN_LOOPS_LOCALSTACK`] loops of aws-sdk-sqs calls, as a
/// program without rust-stream makes them.
async fn sdk_plain(
    job: &Job,
    workload: Workload,
    client: aws_sdk_sqs::Client,
    url: &str,
) -> Fallible<Measured> {
    let url: Arc<str> = url.into();
    match job.direction {
        Direction::Consume => {
            consume_loops(job.messages, PLAIN_LOOPS_LOCALSTACK, move || {
                let received = client
                    .receive_message()
                    .queue_url(&*url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(PLAIN_WAIT_SECONDS)
                    .send();
                let (client, url) = (client.clone(), url.clone());
                async move {
                    let received = received.await?;
                    let mut entries = Vec::new();
                    for (index, message) in received.messages().iter().enumerate() {
                        decode(message.body().unwrap_or_default())?;
                        entries.push(
                            DeleteMessageBatchRequestEntry::builder()
                                .id(index.to_string())
                                .receipt_handle(message.receipt_handle().unwrap_or_default())
                                .build()?,
                        );
                    }
                    if entries.is_empty() {
                        return Ok(0);
                    }
                    let answer = client
                        .delete_message_batch()
                        .queue_url(&*url)
                        .set_entries(Some(entries))
                        .send()
                        .await?;
                    if let Some(failed) = answer.failed().first() {
                        return Err(format!("delete failed: {failed:?}").into());
                    }
                    Ok(answer.successful().len() as u64)
                }
            })
            .await
        }
        Direction::Publish => {
            publish_loops(
                workload,
                job.messages,
                PLAIN_LOOPS_LOCALSTACK,
                move |batch| {
                    let entries = batch
                        .iter()
                        .enumerate()
                        .map(|(index, order)| {
                            let entry = SendMessageBatchRequestEntry::builder()
                                .id(index.to_string())
                                .message_body(order.body());
                            let entry = if workload.is_fifo() {
                                entry
                                    .message_group_id(&order.customer)
                                    .message_deduplication_id(order.id.to_string())
                            } else {
                                entry
                            };
                            entry.build()
                        })
                        .collect::<Result<Vec<_>, _>>();
                    let sent = entries.map(|entries| {
                        client
                            .send_message_batch()
                            .queue_url(&*url)
                            .set_entries(Some(entries))
                            .send()
                    });
                    async move {
                        let answer = sent?.await?;
                        match answer.failed().first() {
                            Some(failed) => Err(format!("send failed: {failed:?}").into()),
                            None => Ok(()),
                        }
                    }
                },
            )
            .await
        }
    }
}

/// Decodes a body as the subscriber does.
fn decode(body: &str) -> Fallible<()> {
    let order: Order = serde_json::from_str(body)?;
    std::hint::black_box(&order);
    Ok(())
}

/// `loops` loops at once, each running `step` (a receive, the decoding, a delete: the messages
/// deleted) until `messages` were deleted; the CPU counted from the first step until the step
/// that deleted the last one was answered. The other loops may be in a long poll then: not
/// waited for.
async fn consume_loops<F, Step>(messages: u64, loops: u64, step: F) -> Fallible<Measured>
where
    F: Fn() -> Step + Clone + Send + 'static,
    Step: Future<Output = Fallible<u64>> + Send + 'static,
{
    let deleted = Arc::new(AtomicU64::new(0));
    let done = Arc::new(OnceLock::<Fallible<Measured>>::new());
    let finished = Arc::new(tokio::sync::Notify::new());
    let counting = Arc::new(Counting::start());
    for _ in 0..loops {
        let (step, deleted, done, finished, counting) = (
            step.clone(),
            deleted.clone(),
            done.clone(),
            finished.clone(),
            counting.clone(),
        );
        tokio::spawn(async move {
            while deleted.load(Ordering::SeqCst) < messages {
                match step().await {
                    Ok(count) => {
                        if deleted.fetch_add(count, Ordering::SeqCst) + count >= messages {
                            let _ = done.set(Ok(counting.stop_shared()));
                            finished.notify_one();
                        }
                    }
                    Err(error) => {
                        let _ = done.set(Err(error));
                        finished.notify_one();
                        return;
                    }
                }
            }
        });
    }
    let waiting = finished.notified();
    if done.get().is_none() {
        tokio::time::timeout(PATIENCE, waiting).await?;
    }
    match done.get().ok_or("no last delete")? {
        Ok(measured) => Ok(measured.clone()),
        Err(error) => Err(error.to_string().into()),
    }
}

/// `loops` loops at once, each sending its share of `messages` orders through `send`, 10 a call
/// (on FIFO a group's orders all in one loop's share, in order); the CPU counted from the first
/// send until the last was answered. The orders are made before the count starts; each is
/// encoded in the count.
async fn publish_loops<F, Sent>(
    workload: Workload,
    messages: u64,
    loops: u64,
    send: F,
) -> Fallible<Measured>
where
    F: Fn(&[Order]) -> Sent + Clone + Send + 'static,
    Sent: Future<Output = Fallible<()>> + Send + 'static,
{
    let shares: Vec<Vec<Order>> = (0..loops)
        .map(|share| {
            (0..messages)
                .filter(|id| (id % workload.customers()) % loops == share)
                .map(|id| Order::new(id, workload.customers(), 0))
                .collect()
        })
        .collect();
    let counting = Counting::start();
    let mut tasks = Vec::new();
    for orders in shares {
        let send = send.clone();
        tasks.push(tokio::spawn(async move {
            for batch in orders.chunks(10) {
                send(batch).await?;
            }
            Fallible::Ok(())
        }));
    }
    for task in tasks {
        tokio::time::timeout(PATIENCE, task).await???;
    }
    Ok(counting.stop())
}

impl Counting {
    /// [`stop`](Self::stop) through a shared reference: the loop that answers the last delete
    /// reads the clock.
    fn stop_shared(&self) -> Measured {
        Self {
            cpu: self.cpu,
            wall: self.wall,
        }
        .stop()
    }
}

impl CpuReport {
    /// The table, in markdown.
    pub fn tables(&self) -> String {
        let mut out = format!(
            "\nCPU a message (user + sys of the measured process only, getrusage; the median of the runs, the sides taking turns; on the account every call takes {} ms):\n\n",
            self.round_trip_ms
        );
        let rows = self
            .rows
            .iter()
            .map(|row| {
                let runs = |runs: &[f64]| {
                    runs.iter()
                        .map(|us| format!("{us:.1}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let instructions = match (
                    row.instructions_per_message,
                    row.plain_instructions_per_message,
                ) {
                    (Some(engine), Some(plain)) => format!(
                        "{} / {} ({:.2}×)",
                        thousands(engine as u64),
                        thousands(plain as u64),
                        engine / plain
                    ),
                    _ => "–".to_owned(),
                };
                vec![
                    match row.backend {
                        Backend::LocalStack => "LocalStack".to_owned(),
                        Backend::Delayed => format!("account, {} ms a call", self.round_trip_ms),
                    },
                    format!(
                        "{} {}",
                        match row.direction {
                            Direction::Consume => "consume",
                            Direction::Publish => "publish",
                        },
                        row.workload
                    ),
                    thousands(row.messages),
                    format!(
                        "{:.1} ({:.1} + {:.1})",
                        row.cpu_us_per_message, row.user_us_per_message, row.sys_us_per_message
                    ),
                    format!(
                        "{:.1} ({:.1} + {:.1})",
                        row.plain_cpu_us_per_message,
                        row.plain_user_us_per_message,
                        row.plain_sys_us_per_message
                    ),
                    format!("{:.2}×", row.ratio),
                    format!(
                        "{} / {}",
                        rate(row.msgs_per_sec),
                        rate(row.plain_msgs_per_sec)
                    ),
                    format!(
                        "{} / {}",
                        runs(&row.runs_cpu_us),
                        runs(&row.plain_runs_cpu_us)
                    ),
                    instructions,
                    format!("{} → {}", row.load_at_start, row.load_at_end),
                ]
            })
            .collect();
        out += &table(
            &[
                "backend",
                "row",
                "messages",
                "µs/msg (user + sys)",
                "plain µs/msg",
                "ratio",
                "msg/s / plain",
                "runs µs/msg / plain",
                "instructions/msg / plain",
                "load",
            ],
            rows,
        );
        out
    }
}
