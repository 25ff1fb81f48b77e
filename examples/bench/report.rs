//! What a run found: the rows of each table, the machine and the date, printed as markdown tables
//! and written as JSON.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use rust_stream::ApiCalls;
use serde::{Deserialize, Serialize};

use crate::Fallible;

#[derive(Debug, Serialize)]
pub struct Report {
    /// When the run started, UTC.
    pub date: String,
    /// The command that ran it.
    pub command: String,
    /// `release`, or `debug` (whose figures mean little).
    pub profile: &'static str,
    pub machine: Machine,
    pub throughput: Vec<ThroughputRow>,
    pub latency: Vec<LatencyRow>,
    pub memory: Vec<MemoryRow>,
    pub localstack: Option<LocalStackReport>,
    /// Every SQS call delayed by a set round trip: `--only real-latency`.
    pub real_latency: Option<RealLatencyReport>,
    /// The inbox's cost on LocalStack and PostgreSQL: `--only inbox`.
    pub inbox: Option<crate::inbox::InboxReport>,
    /// The outbox's latency and calls on LocalStack and PostgreSQL: `--only outbox`.
    pub outbox: Option<crate::outbox::OutboxReport>,
    /// CPU time a message beside the plain loop's: `--only cpu`.
    pub cpu: Option<crate::cpu::CpuReport>,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    /// /proc/loadavg's 1, 5 and 15 minute averages when the run started and when it ended.
    pub load_at_start: String,
    pub load_at_end: String,
}

impl Machine {
    pub fn now() -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|line| line.starts_with("model name"))
                    .and_then(|line| line.split(':').nth(1))
                    .map(|model| model.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let load = load_average();
        Self {
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            cpu_model,
            load_at_start: load.clone(),
            load_at_end: load,
        }
    }
}

/// /proc/loadavg's first three fields.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|load| {
            load.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "unknown".to_owned())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ThroughputRow {
    pub workload: String,
    pub settings: String,
    pub messages: u64,
    /// Worker threads of the tokio runtime the row (and its limit) ran on.
    pub worker_threads: usize,
    pub msgs_per_sec: f64,
    /// The same bodies through a tokio mpsc channel, decoded with serde_json (median of 5 runs).
    pub limit_msgs_per_sec: f64,
    /// `msgs_per_sec / limit_msgs_per_sec`.
    pub ratio: f64,
    /// Each run's ratio in the order run, each run in a fresh process; the row's figures are
    /// the median run's.
    #[serde(default)]
    pub run_ratios: Vec<f64>,
    /// How fast the orders were pre-published (`send_batch`, 10,000 at a time).
    pub published_msgs_per_sec: f64,
    /// Receive, delete and visibility calls per message consumed.
    pub api_calls_per_message: f64,
    /// Heap allocations in the whole process per message consumed, from the subscriber's start
    /// until the last delete.
    pub allocations_per_message: f64,
    /// The same for the channel limit, while it is drained.
    pub limit_allocations_per_message: f64,
}

#[derive(Debug, Serialize)]
pub struct LatencyRow {
    pub workload: String,
    /// Messages a second, `rate / 1000` each millisecond.
    pub rate: u64,
    pub seconds: f64,
    /// Latencies measured (the first tenth, a warm-up, left out).
    pub messages: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// The same through a tokio mpsc channel.
    pub limit_p50_us: u64,
    pub limit_p99_us: u64,
    pub limit_max_us: u64,
}

#[derive(Debug, Serialize)]
pub struct MemoryRow {
    pub workload: String,
    pub messages: u64,
    pub body_bytes: u64,
    /// Growth of the resident set per queued message.
    pub bytes_per_message: f64,
    /// `bytes_per_message - body_bytes`.
    pub beyond_body: f64,
    /// The same bodies waiting in a tokio mpsc channel.
    pub limit_bytes_per_message: f64,
    /// `bytes_per_message / limit_bytes_per_message`.
    pub ratio: f64,
}

#[derive(Debug, Serialize)]
pub struct LocalStackReport {
    pub endpoint: String,
    pub consume: Vec<ConsumeRow>,
    pub publish: Vec<PublishRow>,
    /// Single sends at a steady pace, each timed from call to answer.
    pub paced: Vec<PacedRow>,
}

#[derive(Debug, Serialize)]
pub struct ConsumeRow {
    pub workload: String,
    pub pollers: usize,
    pub concurrency: usize,
    pub messages: u64,
    pub msgs_per_sec: f64,
    /// As many plain receive + delete-batch loops as pollers.
    pub limit_msgs_per_sec: f64,
    pub ratio: f64,
    pub calls_per_message: CallsPerMessage,
    pub limit_calls_per_message: CallsPerMessage,
    /// Every run's speed, in the order run; the row shows the median.
    pub runs_msgs_per_sec: Vec<f64>,
    pub limit_runs_msgs_per_sec: Vec<f64>,
}

/// A paced sender's latency: one `send()` at a time at a steady rate, each timed from call to
/// answer, beside a plain `SendMessage` each at the same pace.
#[derive(Debug, Serialize)]
pub struct PacedRow {
    pub workload: String,
    pub sends: u64,
    pub per_sec: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub limit_p50_ms: f64,
    pub limit_p99_ms: f64,
    pub limit_max_ms: f64,
    pub calls_per_message: CallsPerMessage,
}

#[derive(Debug, Serialize)]
pub struct PublishRow {
    pub workload: String,
    /// How the messages are handed to the publisher: one `send_batch`, or a `send()` each from
    /// many tasks.
    pub how: String,
    pub messages: u64,
    pub msgs_per_sec: f64,
    /// Four plain `SendMessageBatch` loops.
    pub limit_msgs_per_sec: f64,
    pub ratio: f64,
    pub calls_per_message: CallsPerMessage,
    pub limit_calls_per_message: CallsPerMessage,
    /// Every run's speed, in the order run; the row shows the median.
    pub runs_msgs_per_sec: Vec<f64>,
    pub limit_runs_msgs_per_sec: Vec<f64>,
}

/// In process with every SQS call taking a set round trip: the engine at default settings beside
/// the best plain loop.
#[derive(Debug, Serialize)]
pub struct RealLatencyReport {
    /// The round trip of every call.
    pub round_trip_ms: u64,
    pub consume: Vec<RealLatencyRow>,
    pub publish: Vec<RealLatencyRow>,
}

#[derive(Debug, Serialize)]
pub struct RealLatencyRow {
    pub workload: String,
    /// The settings (consume) or how the messages were handed over (publish).
    pub how: String,
    pub messages: u64,
    pub msgs_per_sec: f64,
    /// The best point of `sweep`.
    pub limit_msgs_per_sec: f64,
    /// How many plain loops the best point ran.
    pub limit_loops: u64,
    /// `msgs_per_sec / limit_msgs_per_sec`.
    pub ratio: f64,
    pub calls_per_message: CallsPerMessage,
    pub limit_calls_per_message: CallsPerMessage,
    /// The plain loop at each number of loops.
    pub sweep: Vec<SweepPoint>,
}

/// One run of the plain loop: `loops` at once.
#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    pub loops: u64,
    pub messages: u64,
    pub msgs_per_sec: f64,
    pub calls_per_message: CallsPerMessage,
}

impl SweepPoint {
    pub fn of(loops: u64, messages: u64, figures: &crate::real_latency::Figures) -> Self {
        Self {
            loops,
            messages,
            msgs_per_sec: figures.msgs_per_sec,
            calls_per_message: figures.calls.clone(),
        }
    }
}

/// API calls per message by action.
#[derive(Debug, Clone, Serialize)]
pub struct CallsPerMessage {
    pub send: f64,
    pub receive: f64,
    pub delete: f64,
    pub change_visibility: f64,
    /// The four above together.
    pub total: f64,
    /// Calls to find or create the queue (GetQueueUrl, GetQueueAttributes, CreateQueue), in all.
    pub startup_calls: u64,
}

impl CallsPerMessage {
    pub fn of(calls: ApiCalls, messages: u64) -> Self {
        let per = |count: u64| count as f64 / messages as f64;
        Self {
            send: per(calls.send_message_batch),
            receive: per(calls.receive_message),
            delete: per(calls.delete_message_batch),
            change_visibility: per(calls.change_message_visibility_batch),
            total: per(calls.messaging()),
            startup_calls: calls.get_queue_url + calls.get_queue_attributes + calls.create_queue,
        }
    }

    /// `0.100 (r 0.100 + d 0.100)`: the total, and the actions that were called.
    fn summary(&self) -> String {
        let parts: Vec<String> = [
            ("s", self.send),
            ("r", self.receive),
            ("d", self.delete),
            ("v", self.change_visibility),
        ]
        .into_iter()
        .filter(|&(_, per)| per > 0.0)
        .map(|(action, per)| format!("{action} {per:.3}"))
        .collect();
        format!("{:.3} ({})", self.total, parts.join(" + "))
    }
}

impl Report {
    pub fn write_json(&self, path: &Path) -> Fallible<()> {
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, serde_json::to_string_pretty(self)? + "\n")?;
        Ok(())
    }

    /// The tables, in markdown.
    pub fn tables(&self) -> String {
        let mut out = String::new();
        let machine = &self.machine;
        let _ = writeln!(
            out,
            "rust-stream benchmark, {}: {} CPUs ({}), load {} at the start, {} at the end ({} build)",
            self.date,
            machine.cpus,
            machine.cpu_model,
            machine.load_at_start,
            machine.load_at_end,
            self.profile
        );
        let _ = writeln!(out, "`{}`", self.command);
        if self.profile != "release" {
            let _ = writeln!(
                out,
                "\nA debug build: these figures say little; run with `--release`."
            );
        }
        if !self.throughput.is_empty() {
            let _ = writeln!(
                out,
                "\nIn process: a backlog of orders of 100 bytes pre-published, then consumed by one `#[subscriber]` (serde decode, ack) until the last is deleted, on a runtime of the worker threads shown. Limit: the same bodies through a tokio mpsc channel, decoded with serde_json on the same runtime (median of 5 runs). Each row ran as often as its runs show (the lowest and highest ratio beside the median), each run in a fresh process, taking turns with the other rows; the figures are the median run's.\n"
            );
            let rows = self
                .throughput
                .iter()
                .map(|row| {
                    vec![
                        row.workload.clone(),
                        row.settings.clone(),
                        thousands(row.messages),
                        row.worker_threads.to_string(),
                        rate(row.msgs_per_sec),
                        rate(row.limit_msgs_per_sec),
                        ratio_with_runs(row.ratio, &row.run_ratios),
                        format!("{:.3}", row.api_calls_per_message),
                        format!(
                            "{:.1} ({:.1})",
                            row.allocations_per_message, row.limit_allocations_per_message
                        ),
                    ]
                })
                .collect();
            out += &table(
                &[
                    "workload",
                    "settings",
                    "backlog",
                    "worker threads",
                    "rust-stream msg/s",
                    "limit: mpsc + serde_json msg/s",
                    "ratio",
                    "calls/msg",
                    "allocations/msg (limit)",
                ],
                rows,
            );
        }
        if let Some(first) = self.latency.first() {
            let _ = writeln!(
                out,
                "\nIn process: latency publish → handled, each message sent on its own at {} msg/s ({} a millisecond) for {} s, default settings, first tenth left out. Limit: the same through a tokio mpsc channel.\n",
                thousands(first.rate),
                first.rate / 1000,
                first.seconds
            );
            let rows = self
                .latency
                .iter()
                .map(|row| {
                    vec![
                        row.workload.clone(),
                        micros(row.p50_us),
                        micros(row.p99_us),
                        micros(row.max_us),
                        micros(row.limit_p50_us),
                        micros(row.limit_p99_us),
                        format!("{:.1}x", row.p99_us as f64 / row.limit_p99_us.max(1) as f64),
                    ]
                })
                .collect();
            out += &table(
                &[
                    "workload",
                    "p50",
                    "p99",
                    "max",
                    "limit p50",
                    "limit p99",
                    "p99 / limit p99",
                ],
                rows,
            );
        }
        if let Some(first) = self.memory.first() {
            let _ = writeln!(
                out,
                "\nIn process: resident memory per queued message, {} messages of {} bytes waiting (each case in a fresh process). Limit: the same bodies in a tokio mpsc channel.\n",
                thousands(first.messages),
                first.body_bytes
            );
            let rows = self
                .memory
                .iter()
                .map(|row| {
                    vec![
                        row.workload.clone(),
                        format!("{:.0} B", row.bytes_per_message),
                        format!("{:.0} B", row.beyond_body),
                        format!("{:.0} B", row.limit_bytes_per_message),
                        format!("{:.2}x", row.ratio),
                    ]
                })
                .collect();
            out += &table(
                &[
                    "workload",
                    "per message",
                    "beyond the body",
                    "limit: mpsc",
                    "ratio",
                ],
                rows,
            );
        }
        if let Some(live) = &self.localstack {
            if let Some(first) = live.consume.first() {
                let _ = writeln!(
                    out,
                    "\nLocalStack ({}): consume {} pre-filled messages, concurrency {}, until the last is deleted; the median of {} runs, alternating with the limit's. Limit: as many plain aws-sdk-sqs loops as pollers (ReceiveMessage of 10, DeleteMessageBatch). Calls per message: s send, r receive, d delete, v visibility.\n",
                    live.endpoint,
                    thousands(first.messages),
                    first.concurrency,
                    first.runs_msgs_per_sec.len()
                );
                let rows = live
                    .consume
                    .iter()
                    .map(|row| {
                        vec![
                            row.workload.clone(),
                            row.pollers.to_string(),
                            rate(row.msgs_per_sec),
                            rate(row.limit_msgs_per_sec),
                            format!("{:.2}x", row.ratio),
                            row.calls_per_message.summary(),
                            row.limit_calls_per_message.summary(),
                        ]
                    })
                    .collect();
                out += &table(
                    &[
                        "workload",
                        "pollers",
                        "rust-stream msg/s",
                        "limit msg/s",
                        "ratio",
                        "calls/msg",
                        "limit calls/msg",
                    ],
                    rows,
                );
            }
            if let Some(first) = live.publish.first() {
                let _ = writeln!(
                    out,
                    "\nLocalStack: publish {} messages with one `send_batch`, or with a `send()` each from {} tasks at once, each awaiting its send before its next (a service publishing as it answers requests); the median of {} runs. Limit: 4 plain SendMessageBatch loops of 10 at once, each FIFO group in one loop (one hot group: one loop).\n",
                    thousands(first.messages),
                    crate::localstack::SENDING_TASKS,
                    first.runs_msgs_per_sec.len()
                );
                let rows = live
                    .publish
                    .iter()
                    .map(|row| {
                        vec![
                            row.workload.clone(),
                            row.how.clone(),
                            rate(row.msgs_per_sec),
                            rate(row.limit_msgs_per_sec),
                            format!("{:.2}x", row.ratio),
                            row.calls_per_message.summary(),
                            row.limit_calls_per_message.summary(),
                        ]
                    })
                    .collect();
                out += &table(
                    &[
                        "workload",
                        "how",
                        "rust-stream msg/s",
                        "limit msg/s",
                        "ratio",
                        "calls/msg",
                        "limit calls/msg",
                    ],
                    rows,
                );
            }
            if let Some(first) = live.paced.first() {
                let _ = writeln!(
                    out,
                    "\nLocalStack: {} single sends at {} a second, each from its own task and timed from the call to its answer. Limit: a plain SendMessage each at the same pace.\n",
                    thousands(first.sends),
                    first.per_sec
                );
                let rows = live
                    .paced
                    .iter()
                    .map(|row| {
                        vec![
                            row.workload.clone(),
                            format!("{:.1} / {:.1} / {:.1}", row.p50_ms, row.p99_ms, row.max_ms),
                            format!(
                                "{:.1} / {:.1} / {:.1}",
                                row.limit_p50_ms, row.limit_p99_ms, row.limit_max_ms
                            ),
                            row.calls_per_message.summary(),
                        ]
                    })
                    .collect();
                out += &table(
                    &[
                        "workload",
                        "rust-stream p50 / p99 / max ms",
                        "limit p50 / p99 / max ms",
                        "calls/msg",
                    ],
                    rows,
                );
            }
        }
        if let Some(real) = &self.real_latency {
            out += &real.tables();
        }
        if let Some(inbox) = &self.inbox {
            let runs = inbox
                .rows
                .first()
                .map_or(0, |row| row.runs_msgs_per_sec.len());
            let _ = writeln!(
                out,
                "\nThe inbox's cost, on LocalStack ({}) and PostgreSQL: consume {} pre-filled messages ({} pollers, concurrency {}, a pool of {} connections), each posting one ledger row; the median of {runs} runs a side, the sides taking turns. Round trips: reads of the client's stream carrying a Sync or a simple Query, counted by a proxy between the pool and the server. With over without: {:.2}x; {:+.2} round trips a message.\n",
                inbox.endpoint,
                thousands(inbox.messages),
                inbox.pollers,
                inbox.concurrency,
                inbox.concurrency,
                inbox.ratio,
                inbox.extra_round_trips
            );
            let rows = inbox
                .rows
                .iter()
                .map(|row| {
                    let runs: Vec<String> =
                        row.runs_msgs_per_sec.iter().map(|&run| rate(run)).collect();
                    vec![
                        row.how.to_owned(),
                        rate(row.msgs_per_sec),
                        format!("{:.2}", row.round_trips_per_message),
                        format!("{:.2}", row.syncs_and_queries_per_message),
                        runs.join(", "),
                    ]
                })
                .collect();
            out += &table(
                &[
                    "handler",
                    "msg/s",
                    "round trips/msg",
                    "Sync+Query/msg",
                    "runs msg/s",
                ],
                rows,
            );
        }
        if let Some(outbox) = &self.outbox {
            out += &outbox.table();
        }
        if let Some(cpu) = &self.cpu {
            out += &cpu.tables();
        }
        out
    }
}

impl RealLatencyReport {
    fn tables(&self) -> String {
        let mut out = String::new();
        let sweep = |row: &RealLatencyRow| {
            row.sweep
                .iter()
                .map(|point| format!("{}: {}", point.loops, rate(point.msgs_per_sec)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let rows = |rows: &[RealLatencyRow]| {
            rows.iter()
                .map(|row| {
                    vec![
                        row.workload.clone(),
                        row.how.clone(),
                        rate(row.msgs_per_sec),
                        format!("{} ({})", rate(row.limit_msgs_per_sec), row.limit_loops),
                        format!("{:.2}x", row.ratio),
                        row.calls_per_message.summary(),
                        row.limit_calls_per_message.summary(),
                        sweep(row),
                    ]
                })
                .collect()
        };
        let headers = |first: &'static str| {
            [
                "workload",
                first,
                "rust-stream msg/s",
                "best plain loop msg/s (loops)",
                "ratio",
                "calls/msg",
                "limit calls/msg",
                "plain loop by loops",
            ]
        };
        if let Some(first) = self.consume.first() {
            let _ = writeln!(
                out,
                "\nIn process, every SQS call taking {} ms (a delaying hook over the account): consume {} pre-filled messages (one hot FIFO group: fewer) at default settings until the last is deleted. Limit: the best of 1–16 plain loops (ReceiveMessage of 10, decode, DeleteMessageBatch) over the same delayed account. Calls per message: s send, r receive, d delete, v visibility.\n",
                self.round_trip_ms,
                thousands(first.messages)
            );
            out += &table(&headers("settings"), rows(&self.consume));
        }
        if let Some(first) = self.publish.first() {
            let _ = writeln!(
                out,
                "\nIn process, every SQS call taking {} ms: publish {} messages (one hot FIFO group: a tenth). Limit: the best of 1–16 plain loops of SendMessageBatch of 10 at once, each FIFO group in one loop.\n",
                self.round_trip_ms,
                thousands(first.messages)
            );
            out += &table(&headers("published with"), rows(&self.publish));
        }
        out
    }
}

/// A markdown table, its columns padded to line up.
pub fn table(headers: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| format!("{cell}{}", " ".repeat(width - cell.chars().count())))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(headers.iter().map(|h| (*h).to_owned()).collect());
    out += &line(widths.iter().map(|&width| "-".repeat(width)).collect());
    for row in rows {
        out += &line(row);
    }
    out
}

/// `0.079x`, or with more than one run `0.079x (0.061–0.090, 3 runs)`.
fn ratio_with_runs(ratio: f64, runs: &[f64]) -> String {
    let low = runs.iter().copied().fold(f64::INFINITY, f64::min);
    let high = runs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if runs.len() < 2 {
        format!("{ratio:.3}x")
    } else {
        format!("{ratio:.3}x ({low:.3}–{high:.3}, {} runs)", runs.len())
    }
}

pub fn rate(per_sec: f64) -> String {
    thousands(per_sec.round() as u64)
}

fn micros(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else {
        format!("{us} µs")
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// The current time, UTC, as `2026-11-30 09:40 UTC`.
pub fn utc_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
