//! Throughput and latency on the in-process account, each beside a tokio mpsc channel carrying the
//! same bodies to a task that decodes them with serde_json: what a queue in the same process
//! could cost at the least.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rust_stream::account::Account;
use rust_stream::prelude::*;
use rust_stream::testing::TestApp;
use rust_stream::transport::layer::Hooked;
use tokio::sync::mpsc;

use crate::allocations;
use crate::deletes::{CountingDeletes, Deleted};
use crate::options::{Options, Settings};
use crate::orders::{
    layered_service, publish_orders, service, since_epoch_us, Order, Workload, PROBE,
};
use crate::report::{thousands, LatencyRow, ThroughputRow};
use crate::Fallible;

/// The latency workloads.
const LATENCY_WORKLOADS: [Workload; 2] = [Workload::Standard, Workload::Fifo { groups: 100 }];

/// Messages per `send_batch` while pre-publishing.
const PUBLISH_CHUNK: u64 = 10_000;

impl Settings {
    fn apply(self, queue: SqsQueue) -> SqsQueue {
        match self {
            Self::Default | Self::Layer => queue,
            Self::High => queue.concurrency(100).pollers(4),
        }
    }

    /// The name `--settings` reads.
    fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::High => "high",
            Self::Layer => "layer",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Default => "default (concurrency 10, up to 16 pollers)",
            Self::High => "concurrency 100, 4 pollers",
            Self::Layer => "default, one no-op middleware layer",
        }
    }
}

/// Runs every throughput row `options.throughput_repeats` times, each run in a fresh child
/// process and the rows taking turns, and keeps each row's median run.
///
/// A fresh process per run because what one row leaves in the heap changes the next: after a row
/// at a 1,000,000 backlog the allocator's free lists span hundreds of megabytes, and rows that
/// followed it in the same process ran at about half their speed.
pub fn throughput(options: &Options) -> Fallible<Vec<ThroughputRow>> {
    let mut cases = Vec::new();
    for &threads in &options.worker_threads {
        for &workload in &options.workloads {
            for &messages in &options.messages {
                for &settings in &options.settings {
                    cases.push((threads, workload, messages, settings));
                }
            }
        }
    }
    let mut runs: Vec<Vec<ThroughputRow>> = vec![Vec::new(); cases.len()];
    for _ in 0..options.throughput_repeats {
        for (case, &(threads, workload, messages, settings)) in cases.iter().enumerate() {
            runs[case].push(child(threads, workload, messages, settings)?);
        }
    }
    Ok(runs.into_iter().map(median_run).collect())
}

/// The run of median ratio, carrying every run's ratio in the order run.
fn median_run(mut runs: Vec<ThroughputRow>) -> ThroughputRow {
    let ratios: Vec<f64> = runs.iter().map(|run| run.ratio).collect();
    runs.sort_by(|a, b| a.ratio.total_cmp(&b.ratio));
    let mut median = runs.swap_remove(runs.len() / 2);
    median.run_ratios = ratios;
    median
}

/// Runs this binary as a child that measures one row, and reads the row it printed.
fn child(
    threads: usize,
    workload: Workload,
    messages: u64,
    settings: Settings,
) -> Fallible<ThroughputRow> {
    let output = Command::new(std::env::current_exe()?)
        .args(["--in-process", "--only", "throughput", "--throughput-child"])
        .args(["--worker-threads", &threads.to_string()])
        .args(["--workloads", &workload.name()])
        .args(["--backlogs", &messages.to_string()])
        .args(["--settings", settings.name()])
        .stderr(Stdio::inherit())
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the throughput run of {} failed ({}): {stdout}",
            workload.label(),
            output.status
        )
        .into());
    }
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last)
        .map_err(|error| format!("the throughput child printed {last:?}: {error}").into())
}

/// In a child: the rows asked for, run here, each printed as a line of JSON.
pub async fn throughput_here(options: &Options) -> Fallible<()> {
    crate::record_no_spans()?;
    for row in rows_here(options).await? {
        println!("{}", serde_json::to_string(&row)?);
    }
    Ok(())
}

/// Consumes each backlog of pre-published orders per workload, settings and worker-thread
/// count, with the channel limit measured just before each workload's engine runs at that
/// backlog, on the same runtime.
async fn rows_here(options: &Options) -> Fallible<Vec<ThroughputRow>> {
    let mut rows = Vec::new();
    for &threads in &options.worker_threads {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?;
        for &workload in &options.workloads {
            for &messages in &options.messages {
                // `BENCH_NO_LIMIT=1` leaves the limit out: an instruction count of the engine's
                // rows alone (`valgrind --tool=callgrind`), which no machine load changes.
                let (limit, limit_allocations) = if std::env::var_os("BENCH_NO_LIMIT").is_some() {
                    (f64::NAN, f64::NAN)
                } else {
                    on(&runtime, channel_throughput(workload, messages)).await?
                };
                eprintln!(
                    "throughput {}, {} orders, {threads} worker threads: limit {} msg/s, {:.1} allocations a message",
                    workload.label(),
                    thousands(messages),
                    thousands(limit as u64),
                    limit_allocations
                );
                for &settings in &options.settings {
                    let run = on(&runtime, engine_throughput(workload, settings, messages)).await?;
                    eprintln!(
                        "throughput {}, {} orders, {threads} worker threads, {}: {} msg/s ({:.3}x the limit), {:.1} allocations a message",
                        workload.label(),
                        thousands(messages),
                        settings.label(),
                        thousands(run.msgs_per_sec as u64),
                        run.msgs_per_sec / limit,
                        run.allocations_per_message
                    );
                    rows.push(ThroughputRow {
                        workload: workload.label(),
                        settings: settings.label().to_owned(),
                        messages,
                        worker_threads: threads,
                        msgs_per_sec: run.msgs_per_sec,
                        limit_msgs_per_sec: limit,
                        ratio: run.msgs_per_sec / limit,
                        run_ratios: Vec::new(),
                        published_msgs_per_sec: run.published_per_sec,
                        api_calls_per_message: run.calls_per_message,
                        allocations_per_message: run.allocations_per_message,
                        limit_allocations_per_message: limit_allocations,
                    });
                }
            }
        }
        // Its workers are idle; shutting down in the background never blocks this task.
        runtime.shutdown_background();
    }
    Ok(rows)
}

/// Runs `work` on `runtime` (a row's own, of the worker threads asked for) and waits for it here.
async fn on<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    work: impl std::future::Future<Output = Fallible<T>> + Send + 'static,
) -> Fallible<T> {
    runtime.spawn(work).await?
}

struct EngineThroughput {
    msgs_per_sec: f64,
    published_per_sec: f64,
    calls_per_message: f64,
    allocations_per_message: f64,
}

/// Pre-publishes `messages` orders to a fresh account, then times the subscriber from its start
/// until the last order is deleted.
async fn engine_throughput(
    workload: Workload,
    settings: Settings,
    messages: u64,
) -> Fallible<EngineThroughput> {
    let account = Account::new();
    let deleted = Arc::new(Deleted::default());
    let broker = SqsBroker::with_transport(Hooked::new(
        account.clone(),
        CountingDeletes::new(deleted.clone()),
    ));
    let queue = workload.queue();
    let publisher = broker.publisher(queue.clone());

    let publishing = Instant::now();
    publish_orders(&publisher, workload, 0..messages, PUBLISH_CHUNK).await?;
    let published_in = publishing.elapsed();
    let url = account.get_queue_url(queue.name()).await?;
    let counts = account.counts(&url).await?;
    assert_eq!(counts.visible as u64, messages, "every order waits");

    PROBE.reset(false);
    let before = broker.api_calls();
    let allocated_before = allocations::so_far();
    let started = Instant::now();
    let queue = settings.apply(queue);
    let running = match settings {
        Settings::Layer => TestApp::spawn(layered_service(broker.clone(), queue)).await?,
        Settings::Default | Settings::High => {
            TestApp::spawn(service(broker.clone(), queue)).await?
        }
    };
    let done = deleted.wait_for(messages, patience(messages)).await?;
    let took = done - started;
    let allocated = allocations::so_far() - allocated_before;
    let calls = broker.api_calls() - before;
    running.stop().await?;
    assert!(
        PROBE.handled() >= messages,
        "{} of {messages} handled",
        PROBE.handled()
    );
    Ok(EngineThroughput {
        msgs_per_sec: messages as f64 / took.as_secs_f64(),
        published_per_sec: messages as f64 / published_in.as_secs_f64(),
        calls_per_message: calls.messaging() as f64 / messages as f64,
        allocations_per_message: allocated as f64 / messages as f64,
    })
}

/// Runs of the channel limit per workload: it takes a fraction of a second, so one run is at the
/// mercy of whatever else the machine does in that moment; the median of these is the limit.
const LIMIT_RUNS: usize = 5;

/// The limit: the same bodies waiting in an unbounded tokio mpsc channel, taken by a task that
/// decodes each as the subscriber does; the median of [`LIMIT_RUNS`] runs, and the allocations a
/// message of the last run.
async fn channel_throughput(workload: Workload, messages: u64) -> Fallible<(f64, f64)> {
    let mut runs = Vec::new();
    let mut allocations = 0.0;
    for _ in 0..LIMIT_RUNS {
        let (run, allocated) = channel_throughput_once(workload, messages).await?;
        runs.push(run);
        allocations = allocated;
    }
    runs.sort_by(f64::total_cmp);
    Ok((runs[LIMIT_RUNS / 2], allocations))
}

async fn channel_throughput_once(workload: Workload, messages: u64) -> Fallible<(f64, f64)> {
    let (sender, mut receiver) = mpsc::unbounded_channel::<String>();
    for id in 0..messages {
        sender.send(Order::new(id, workload.customers(), 0).body())?;
    }
    drop(sender);
    let allocated_before = allocations::so_far();
    let started = Instant::now();
    let taken = tokio::spawn(async move {
        let mut taken = 0u64;
        while let Some(body) = receiver.recv().await {
            let order: Order = serde_json::from_str(&body).expect("an order decodes");
            std::hint::black_box(&order);
            taken += 1;
        }
        taken
    })
    .await?;
    let took = started.elapsed();
    let allocated = allocations::so_far() - allocated_before;
    assert_eq!(taken, messages);
    Ok((
        messages as f64 / took.as_secs_f64(),
        allocated as f64 / messages as f64,
    ))
}

/// Latency publish → handled at `options.latency_rate` for `options.latency_secs`, on the engine
/// (default settings) and through the channel.
pub async fn latency(options: &Options) -> Fallible<Vec<LatencyRow>> {
    let per_tick = (options.latency_rate / 1000).max(1);
    let duration = Duration::from_secs_f64(options.latency_secs);
    let mut rows = Vec::new();
    for workload in LATENCY_WORKLOADS {
        let limit = channel_latency(workload, per_tick, duration).await?;
        let engine = engine_latency(workload, per_tick, duration).await?;
        eprintln!(
            "latency {}: p50 {} us, p99 {} us (limit p50 {} us, p99 {} us)",
            workload.label(),
            engine.p50_us,
            engine.p99_us,
            limit.p50_us,
            limit.p99_us
        );
        rows.push(LatencyRow {
            workload: workload.label(),
            rate: per_tick * 1000,
            seconds: options.latency_secs,
            messages: engine.count,
            p50_us: engine.p50_us,
            p99_us: engine.p99_us,
            max_us: engine.max_us,
            limit_p50_us: limit.p50_us,
            limit_p99_us: limit.p99_us,
            limit_max_us: limit.max_us,
        });
    }
    Ok(rows)
}

/// Percentiles of the latencies measured, the first tenth (warm-up) left out.
struct Percentiles {
    count: u64,
    p50_us: u64,
    p99_us: u64,
    max_us: u64,
}

impl Percentiles {
    fn of(latencies: Vec<(u64, u64)>, sent: u64) -> Fallible<Self> {
        let warm_up = sent / 10;
        let mut measured: Vec<u64> = latencies
            .into_iter()
            .filter(|&(id, _)| id >= warm_up)
            .map(|(_, latency)| latency)
            .collect();
        if measured.is_empty() {
            return Err("no latency measured".into());
        }
        measured.sort_unstable();
        let at =
            |quantile: f64| measured[((measured.len() - 1) as f64 * quantile).round() as usize];
        Ok(Self {
            count: measured.len() as u64,
            p50_us: at(0.50),
            p99_us: at(0.99),
            max_us: at(1.0),
        })
    }
}

/// Calls `emit` with ids 0, 1, ...: `per_tick` of them each millisecond, for `duration`.
/// Returns how many it emitted.
async fn paced(per_tick: u64, duration: Duration, mut emit: impl FnMut(u64)) -> u64 {
    let mut ticks = tokio::time::interval(Duration::from_millis(1));
    let mut id = 0;
    for _ in 0..duration.as_millis() {
        ticks.tick().await;
        for _ in 0..per_tick {
            emit(id);
            id += 1;
        }
    }
    id
}

/// Each order sent on its own (`send()`, batched by the publisher with the others of its
/// millisecond) to a running subscriber with default settings, stamped just before it is encoded.
async fn engine_latency(
    workload: Workload,
    per_tick: u64,
    duration: Duration,
) -> Fallible<Percentiles> {
    let broker = SqsBroker::in_process();
    let queue = workload.queue();
    PROBE.reset(true);
    let running = TestApp::spawn(service(broker.clone(), queue.clone())).await?;
    let publisher = broker.publisher(queue);
    let mut sends = Vec::new();
    let sent = paced(per_tick, duration, |id| {
        let order = Order::stamped(id, workload.customers());
        sends.push(tokio::spawn(workload.outgoing(&publisher, &order).send()));
    })
    .await;
    for send in sends {
        send.await??;
    }
    PROBE.wait_handled(sent, Duration::from_secs(60)).await?;
    running.stop().await?;
    Percentiles::of(PROBE.take_latencies(), sent)
}

/// The limit: the same stamped bodies through an unbounded channel to a task that decodes them.
async fn channel_latency(
    workload: Workload,
    per_tick: u64,
    duration: Duration,
) -> Fallible<Percentiles> {
    let (sender, mut receiver) = mpsc::unbounded_channel::<String>();
    let taking = tokio::spawn(async move {
        let mut latencies = Vec::new();
        while let Some(body) = receiver.recv().await {
            let order: Order = serde_json::from_str(&body).expect("an order decodes");
            latencies.push((order.id, since_epoch_us().saturating_sub(order.sent_us)));
        }
        latencies
    });
    let sent = paced(per_tick, duration, |id| {
        let order = Order::stamped(id, workload.customers());
        sender.send(order.body()).expect("the taker runs");
    })
    .await;
    drop(sender);
    Percentiles::of(taking.await?, sent)
}

/// How long a throughput run may take before the benchmark gives up on it: at least 1,000 msg/s.
fn patience(messages: u64) -> Duration {
    Duration::from_secs(60 + messages / 1_000)
}
