//! The command line, read by hand from `std::env::args`.

use std::path::PathBuf;

use crate::memory::MemoryCase;
use crate::orders::Workload;

pub const USAGE: &str = "\
usage: cargo run --release --example bench -- [options]

Where it runs (neither: in process, and on LocalStack too when RUST_STREAM_LIVE_ENDPOINT is set):
  --in-process               the in-process sections
  --localstack URL           the LocalStack sections, on the SQS endpoint URL
                             (`scripts/localstack.sh start` starts one and prints its URL)

What it runs:
  --only LIST                only these sections, comma-separated: throughput, latency, memory,
                             localstack, real-latency (every SQS call delayed; only when named),
                             inbox (LocalStack and PostgreSQL, with and without the inbox; only
                             when named), cpu (CPU time a message, on LocalStack when it has
                             an endpoint and on the account at --round-trip-ms; only when named)
  --postgres URL             the PostgreSQL of the inbox section (RUST_STREAM_POSTGRES_URL)
  --quick                    smaller counts, for a first look or a test (the options below win)
  --messages N               orders a throughput row consumes (400,000; quick 20,000)
  --backlogs LIST            instead, a row at each of these backlogs, comma-separated (write
                             counts without commas or with `_`: 100_000,1_000_000)
  --worker-threads LIST      tokio worker threads of the runtime each throughput row runs on,
                             comma-separated for a row at each (the CPUs)
  --workloads LIST           throughput workloads, comma-separated: standard, fifo-100, fifo-10000
                             (all three)
  --settings LIST            throughput settings, comma-separated: default, high (both), layer
                             (default with one no-op middleware layer; only when named)
  --throughput-repeats N     runs of each throughput row, each in a fresh process, taken in turn
                             with the other rows; the row shows the medians (3; quick 1)
  --memory-messages N        messages queued for the memory rows (1,000,000; quick 100,000)
  --latency-rate N           messages a second in the latency rows, a multiple of 1,000 (10,000)
  --latency-secs S           how long each latency row publishes (3; quick 1)
  --localstack-messages N    messages each LocalStack run consumes or publishes (5,000; quick 500)
  --round-trip-ms N          the round trip of every SQS call in real-latency (20)
  --round-trip-messages N    messages each real-latency row consumes or publishes (10,000;
                             quick 1,000; one hot FIFO group a tenth)
  --localstack-repeats N     runs of each LocalStack row and of its limit, alternating; the row
                             shows the medians (3; quick 1); the inbox section's too
  --cpu-instructions         the cpu section's LocalStack rows also under callgrind (valgrind):
                             instructions a message
  --cpu-instructions-messages N
                             messages of the smaller callgrind run; the other runs twice as many
                             (500)
  --inbox-messages N         messages each run of the inbox section consumes (3,000; quick 300)
  --outbox-rate N            events a second the outbox section commits (1,000)
  --outbox-seconds S         how long it commits them (10; quick 2)
  --outbox-receive-during    the outbox section's receive loops run while the events are
                             committed (by default they drain the queue once all are relayed)

Output:
  --json PATH                where the JSON goes (target/bench.json)
  -h, --help                 this text
";

/// The sections of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Throughput,
    Latency,
    Memory,
    LocalStack,
    /// Every SQS call delayed by a round trip; run only when named in `--only`.
    RealLatency,
    /// The inbox's cost on LocalStack and PostgreSQL; run only when named in `--only`.
    Inbox,
    /// The outbox's commit → visible latency and calls, on LocalStack and PostgreSQL; run only
    /// when named in `--only`.
    Outbox,
    /// CPU time a message, each side in a process of its own; run only when named in `--only`.
    Cpu,
}

impl Section {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "throughput" => Some(Self::Throughput),
            "latency" => Some(Self::Latency),
            "memory" => Some(Self::Memory),
            "localstack" => Some(Self::LocalStack),
            "real-latency" => Some(Self::RealLatency),
            "inbox" => Some(Self::Inbox),
            "outbox" => Some(Self::Outbox),
            "cpu" => Some(Self::Cpu),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub struct Options {
    pub sections: Vec<Section>,
    /// The endpoint of the LocalStack sections.
    pub localstack: Option<String>,
    /// Orders a throughput row consumes (`--messages`, or each of `--backlogs`): a row at each.
    pub messages: Vec<u64>,
    /// Worker threads of the runtime a throughput row runs on: a row at each.
    pub worker_threads: Vec<usize>,
    pub workloads: Vec<Workload>,
    pub settings: Vec<Settings>,
    pub memory_messages: u64,
    pub latency_rate: u64,
    pub latency_secs: f64,
    pub localstack_messages: u64,
    pub localstack_repeats: usize,
    /// The PostgreSQL of the inbox section.
    pub postgres: Option<String>,
    /// Messages each run of the inbox section consumes.
    pub inbox_messages: u64,
    /// Events a second the outbox section commits, and for how long.
    pub outbox_rate: u64,
    pub outbox_seconds: u64,
    /// Whether the outbox section receives while it commits, on the same LocalStack.
    pub outbox_receive_during: bool,
    /// Runs of each throughput row, each in a child process of its own.
    pub throughput_repeats: usize,
    pub round_trip_ms: u64,
    pub round_trip_messages: u64,
    pub json: PathBuf,
    /// Set in the child processes that measure memory: the one thing the process does.
    pub memory_probe: Option<MemoryCase>,
    /// Set in the child processes that run throughput rows: they run here and print them.
    pub throughput_child: bool,
    /// Set in the child processes of the cpu section: the job, as JSON.
    pub cpu_child: Option<String>,
    /// Whether the cpu section also counts instructions under callgrind, and its smaller count.
    pub cpu_instructions: bool,
    pub cpu_instructions_messages: u64,
}

/// What the command line asked for, or why it cannot be run.
pub enum Parsed {
    Run(Box<Options>),
    Help,
}

impl Options {
    /// Reads `args` (without the program name); `live_endpoint` is RUST_STREAM_LIVE_ENDPOINT.
    /// `postgres_url` is RUST_STREAM_POSTGRES_URL.
    pub fn parse(
        args: impl IntoIterator<Item = String>,
        live_endpoint: Option<String>,
        postgres_url: Option<String>,
    ) -> Result<Parsed, String> {
        let mut args = args.into_iter();
        let mut in_process = false;
        let mut localstack = None;
        let mut only: Option<Vec<Section>> = None;
        let mut quick = false;
        let (mut messages, mut memory_messages, mut latency_rate) = (None, None, None);
        let (mut latency_secs, mut localstack_messages, mut localstack_repeats) =
            (None, None, None);
        let (mut round_trip_ms, mut round_trip_messages) = (None, None);
        let (mut postgres, mut inbox_messages) = (postgres_url, None);
        let (mut outbox_rate, mut outbox_seconds) = (None, None);
        let mut outbox_receive_during = false;
        let mut json = PathBuf::from("target/bench.json");
        let mut memory_probe = None;
        let (mut throughput_repeats, mut throughput_child) = (None, false);
        let (mut worker_threads, mut workloads, mut settings) = (None, None, None);
        let (mut cpu_child, mut cpu_instructions, mut cpu_instructions_messages) =
            (None, false, None);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "-h" | "--help" => return Ok(Parsed::Help),
                "--in-process" => in_process = true,
                "--quick" => quick = true,
                "--localstack" => localstack = Some(value()?),
                "--only" => {
                    let list = value()?;
                    let sections = list
                        .split(',')
                        .map(|name| {
                            Section::parse(name.trim())
                                .ok_or_else(|| format!("--only: no section named {name:?}"))
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    only = Some(sections);
                }
                "--messages" => messages = Some(vec![count(&arg, &value()?)?]),
                "--backlogs" => {
                    messages = Some(list(&arg, &value()?, |raw| count(&arg, raw))?);
                }
                "--worker-threads" => {
                    worker_threads = Some(list(&arg, &value()?, |raw| {
                        count(&arg, raw).map(|n| n as usize)
                    })?)
                }
                "--workloads" => {
                    workloads = Some(list(&arg, &value()?, |name| {
                        Workload::parse(name)
                            .ok_or_else(|| format!("--workloads: no workload named {name:?}"))
                    })?)
                }
                "--settings" => {
                    settings = Some(list(&arg, &value()?, |name| {
                        Settings::parse(name)
                            .ok_or_else(|| format!("--settings: no settings named {name:?}"))
                    })?)
                }
                "--memory-messages" => memory_messages = Some(count(&arg, &value()?)?),
                "--latency-rate" => {
                    let rate = count(&arg, &value()?)?;
                    if rate % 1000 != 0 {
                        return Err(format!("--latency-rate {rate}: a multiple of 1,000"));
                    }
                    latency_rate = Some(rate);
                }
                "--latency-secs" => {
                    let raw = value()?;
                    let seconds: f64 = raw
                        .parse()
                        .map_err(|_| format!("--latency-secs {raw:?}: a number of seconds"))?;
                    if !(seconds >= 0.01 && seconds.is_finite()) {
                        return Err(format!("--latency-secs {raw}: at least 0.01"));
                    }
                    latency_secs = Some(seconds);
                }
                "--localstack-messages" => localstack_messages = Some(count(&arg, &value()?)?),
                "--localstack-repeats" => localstack_repeats = Some(count(&arg, &value()?)?),
                "--postgres" => postgres = Some(value()?),
                "--inbox-messages" => inbox_messages = Some(count(&arg, &value()?)?),
                "--outbox-rate" => outbox_rate = Some(count(&arg, &value()?)?),
                "--outbox-seconds" => outbox_seconds = Some(count(&arg, &value()?)?),
                "--outbox-receive-during" => outbox_receive_during = true,
                "--throughput-repeats" => throughput_repeats = Some(count(&arg, &value()?)?),
                "--throughput-child" => throughput_child = true,
                "--cpu-child" => cpu_child = Some(value()?),
                "--cpu-instructions" => cpu_instructions = true,
                "--cpu-instructions-messages" => {
                    cpu_instructions_messages = Some(count(&arg, &value()?)?)
                }
                "--round-trip-ms" => round_trip_ms = Some(count(&arg, &value()?)?),
                "--round-trip-messages" => round_trip_messages = Some(count(&arg, &value()?)?),
                "--json" => json = PathBuf::from(value()?),
                "--memory-probe" => {
                    let name = value()?;
                    memory_probe = Some(
                        MemoryCase::parse(&name)
                            .ok_or_else(|| format!("--memory-probe: no case named {name:?}"))?,
                    );
                }
                other => return Err(format!("unknown option {other:?}")),
            }
        }

        let neither = !in_process && localstack.is_none();
        if neither {
            localstack = live_endpoint.filter(|endpoint| !endpoint.is_empty());
        }
        let mut sections = Vec::new();
        if in_process || neither {
            sections.extend([Section::Throughput, Section::Latency, Section::Memory]);
        }
        if localstack.is_some() {
            sections.push(Section::LocalStack);
        }
        if let Some(only) = only {
            // Named only: it runs in real time, a minute or two.
            if only.contains(&Section::RealLatency) {
                sections.push(Section::RealLatency);
            }
            // Named only: each row runs its sides in child processes, a few minutes.
            if only.contains(&Section::Cpu) {
                sections.push(Section::Cpu);
            }
            // Named only: they need a PostgreSQL beside LocalStack.
            for (section, name) in [(Section::Inbox, "inbox"), (Section::Outbox, "outbox")] {
                if !only.contains(&section) {
                    continue;
                }
                if localstack.is_none() {
                    return Err(format!(
                        "--only {name} needs --localstack URL (or RUST_STREAM_LIVE_ENDPOINT)"
                    ));
                }
                if postgres.as_deref().is_none_or(str::is_empty) {
                    return Err(format!(
                        "--only {name} needs --postgres URL (or RUST_STREAM_POSTGRES_URL; \
                         `scripts/postgres.sh start` starts one and prints it)"
                    ));
                }
                sections.push(section);
            }
            if only.contains(&Section::LocalStack) && localstack.is_none() {
                return Err(
                    "--only localstack needs --localstack URL (or RUST_STREAM_LIVE_ENDPOINT)"
                        .to_owned(),
                );
            }
            sections.retain(|section| only.contains(section));
        }
        Ok(Parsed::Run(Box::new(Self {
            sections,
            localstack,
            messages: messages.unwrap_or_else(|| vec![if quick { 20_000 } else { 400_000 }]),
            worker_threads: worker_threads.unwrap_or_else(|| {
                vec![std::thread::available_parallelism().map_or(1, usize::from)]
            }),
            workloads: workloads.unwrap_or_else(|| Workload::THROUGHPUT.to_vec()),
            settings: settings.unwrap_or_else(|| vec![Settings::Default, Settings::High]),
            memory_messages: memory_messages.unwrap_or(if quick { 100_000 } else { 1_000_000 }),
            latency_rate: latency_rate.unwrap_or(10_000),
            latency_secs: latency_secs.unwrap_or(if quick { 1.0 } else { 3.0 }),
            localstack_messages: localstack_messages.unwrap_or(if quick { 500 } else { 5_000 }),
            localstack_repeats: localstack_repeats.unwrap_or(if quick { 1 } else { 3 }) as usize,
            postgres,
            inbox_messages: inbox_messages.unwrap_or(if quick { 300 } else { 3_000 }),
            outbox_rate: outbox_rate.unwrap_or(1_000),
            outbox_seconds: outbox_seconds.unwrap_or(if quick { 2 } else { 10 }),
            outbox_receive_during,
            throughput_repeats: throughput_repeats.unwrap_or(if quick { 1 } else { 3 }) as usize,
            round_trip_ms: round_trip_ms.unwrap_or(20),
            round_trip_messages: round_trip_messages.unwrap_or(if quick { 1_000 } else { 10_000 }),
            json,
            memory_probe,
            throughput_child,
            cpu_child,
            cpu_instructions,
            cpu_instructions_messages: cpu_instructions_messages.unwrap_or(500),
        })))
    }

    pub fn runs(&self, section: Section) -> bool {
        self.sections.contains(&section)
    }
}

/// A comma-separated list, each item read by `item`.
fn list<T>(
    option: &str,
    raw: &str,
    item: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let items: Vec<T> = raw
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(item)
        .collect::<Result<_, _>>()?;
    if items.is_empty() {
        return Err(format!("{option}: an empty list"));
    }
    Ok(items)
}

/// The subscription's settings in a throughput row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settings {
    /// As `SqsQueue` comes: concurrency 10, up to 16 pollers.
    Default,
    /// `concurrency = 100`, 4 pollers.
    High,
    /// As `Default`, with one middleware layer that does nothing: what a layer costs.
    Layer,
}

impl Settings {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "default" => Some(Self::Default),
            "high" => Some(Self::High),
            "layer" => Some(Self::Layer),
            _ => None,
        }
    }
}

/// A count of at least 1, `_` and `,` allowed between digits.
fn count(option: &str, raw: &str) -> Result<u64, String> {
    raw.replace(['_', ','], "")
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{option} {raw:?}: a count of at least 1"))
}
