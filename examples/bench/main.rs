//! The end-to-end benchmark of rust-stream: what the library does per message, each figure beside
//! its limit, the limit measured in the same run, so that a loaded machine still gives true
//! ratios.
//!
//! ```sh
//! # Everything in process, full size (400,000 orders a throughput row, 1,000,000 queued for
//! # memory): a few minutes.
//! cargo run --release --example bench
//! # The same, smaller: well under a minute.
//! cargo run --release --example bench -- --quick
//! # In process and on LocalStack (the project's script starts one and prints its URL).
//! LOCALSTACK_PORT=4566 scripts/localstack.sh start
//! cargo run --release --example bench -- --in-process --localstack http://127.0.0.1:4566
//! # One section only, written where you say.
//! cargo run --release --example bench -- --only latency --json /tmp/latency.json
//! # Throughput at two backlogs, on one and on two worker threads.
//! cargo run --release --example bench -- --in-process --only throughput \
//!     --backlogs 100_000,1_000_000 --worker-threads 1,2 --workloads standard,fifo-100
//! # Every SQS call taking 20 ms, default settings beside the best plain loop.
//! cargo run --release --example bench -- --in-process --only real-latency
//! # CPU a message, each side in its own process, beside the plain loop.
//! cargo run --release --example bench -- --only cpu --localstack http://127.0.0.1:4566
//! # The inbox's cost: LocalStack and PostgreSQL (`scripts/postgres.sh start` prints a URL).
//! cargo run --release --example bench -- --only inbox --localstack http://127.0.0.1:4566 \
//!     --postgres postgres://postgres@127.0.0.1:5433/postgres
//! ```
//!
//! What it measures, each against its limit:
//!
//! - **Throughput, in process**: N orders (100-byte JSON, default 400,000) pre-published to a
//!   queue of the in-process account, then consumed by one `#[subscriber]` that decodes (serde)
//!   and acks, timed from its start until the last order is deleted: a standard queue, and FIFO
//!   over 100 and over 10,000 groups, each at default settings and at `concurrency = 100` with 4
//!   pollers. Limit: the same bodies waiting in a tokio mpsc channel, taken by a task that
//!   decodes each with serde_json (the median of 5 runs, as one takes a fraction of a second).
//!   Each row and its limit run on a tokio runtime of their own (`--worker-threads`, default
//!   the CPUs), at each backlog asked for (`--backlogs`). Each row runs 3 times
//!   (`--throughput-repeats`), each run in a fresh process, the rows taking turns, and shows its
//!   median run: a row run after a large backlog's in the same process inherits its heap.
//! - **Latency, in process**: publish → handled, p50 and p99, at a fixed rate (10,000 msg/s: 10
//!   single `send()`s each millisecond) for a few seconds, stamped in the body and read in the
//!   handler against one `Instant`, on a multi-thread runtime in real time. Limit: the same
//!   through a tokio mpsc channel.
//! - **Memory, in process**: resident memory per queued message with 1,000,000 messages of 100
//!   bytes waiting, standard and FIFO, each in a fresh child process (the resident set before
//!   and after publishing, over the count). Limit: the same bodies waiting in a tokio mpsc
//!   channel.
//! - **On LocalStack** (`--localstack URL`, or RUST_STREAM_LIVE_ENDPOINT): consume 5,000
//!   pre-filled messages, standard and FIFO over 50 groups, with 1 and 4 pollers; publish 5,000
//!   with one `send_batch`; msgs/s and API calls per message by action (the broker's
//!   `api_calls()`). Limit: a plain aws-sdk-sqs loop in the same run (ReceiveMessage of 10 +
//!   DeleteMessageBatch, as many loops as pollers; SendMessageBatch of 10 from 4 loops at once).
//!   Each row is the median of 3 runs, alternating with its limit's. Then 2,000 FIFO single
//!   sends at 100 a second over 50 groups, each timed from call to answer (p50, p99, max),
//!   beside a plain SendMessage each at the same pace.
//! - **At real network latency** (`--only real-latency`, not in the default set: it runs in real
//!   time, a minute or two): every SQS call of the in-process account delayed by a set round trip
//!   (`--round-trip-ms`, default 20); consume standard, FIFO over 50 groups and FIFO over one
//!   hot group, publish standard and FIFO (one `send_batch`, and a `send()` each all at once),
//!   at default settings; msgs/s and API calls per message by action. Limit: the best of 1, 2,
//!   4, 8 and 16 plain loops over the same delayed account (ReceiveMessage of 10 + decode +
//!   DeleteMessageBatch; SendMessageBatch of 10).
//! - **The inbox's cost** (`--only inbox`, not in the default set: it needs a PostgreSQL): consume
//!   3,000 pre-filled messages on LocalStack with a handler that posts one ledger row to
//!   PostgreSQL, with the inbox (`PostgresStore`) and without it (the handler's own
//!   transaction), taking turns, 3 runs each; msgs/s, and database round trips a message counted
//!   by a TCP proxy in the process between the pool and PostgreSQL (`inbox.rs` says what it
//!   counts). The inbox's limit is the run without it.
//! - **The outbox's latency** (`--only outbox`, not in the default set: it needs a PostgreSQL):
//!   events committed at `--outbox-rate` a second (1,000), each its own transaction through the
//!   outbox, relayed to a FIFO queue on LocalStack and received by plain loops: commit → visible
//!   p50 and p99, and the relay's calls an event (`outbox.rs`).
//!
//! - **CPU a message** (`--only cpu`, not in the default set): process CPU time (user + sys) a
//!   message of the consuming and of the publishing side, standard and FIFO over 50 groups, on
//!   LocalStack (with `--localstack URL`) and on the in-process account with every call taking
//!   `--round-trip-ms`, each side in a process of its own beside a plain aws-sdk-sqs loop
//!   (`cpu.rs` says what is counted); with `--cpu-instructions` also instructions a message under
//!   callgrind.
//!
//! It prints markdown tables (with the date, the machine and its load at the start and the end)
//! and writes the same as JSON (`--json PATH`, default `target/bench.json`). `--help` lists the
//! options. docs/performance.md says what each row compares.

mod allocations;
mod cpu;
mod deletes;
mod in_process;
mod inbox;
mod localstack;
mod memory;
mod options;
mod orders;
mod outbox;
mod real_latency;
mod report;

use std::process::ExitCode;

use options::{Options, Parsed, Section, USAGE};
use report::{load_average, utc_now, Machine, Report};

/// Every allocation counted, so a row can say what a message costs in allocations.
#[global_allocator]
static ALLOCATOR: allocations::Counting = allocations::Counting;

/// What the benchmark's steps return: any failure ends the run with its message.
pub type Fallible<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let live_endpoint = std::env::var(rust_stream::testing::LIVE_ENDPOINT_VAR).ok();
    let postgres_url = std::env::var(rust_stream::testing::POSTGRES_URL_VAR).ok();
    let options = match Options::parse(args.clone(), live_endpoint, postgres_url) {
        Ok(Parsed::Run(options)) => *options,
        Ok(Parsed::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(error) => {
            eprintln!("error: {error}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let outcome = match options.memory_probe {
        Some(case) => memory::probe(case, options.memory_messages).await,
        None if options.cpu_child.is_some() => {
            cpu::child_here(options.cpu_child.as_deref().unwrap_or_default()).await
        }
        None if options.throughput_child => in_process::throughput_here(&options).await,
        None => run(&options, &args).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Installs a tracing dispatcher that records nothing, so a measured process costs what it costs
/// in a service built with rust-stream's default features (without tracing's `log` feature) or
/// running a subscriber. This workspace has the feature on (sqlx asks for it, for the benchmark's
/// Postgres rows), and with it and no dispatcher every disabled span, the SDK's and the engine's,
/// evaluates its fields and asks `log` on each enter and exit.
pub fn record_no_spans() -> Fallible<()> {
    tracing::subscriber::set_global_default(tracing::subscriber::NoSubscriber::default())?;
    Ok(())
}

/// Runs the sections asked for, then prints and writes the report.
async fn run(options: &Options, args: &[String]) -> Fallible<()> {
    let mut report = Report {
        date: utc_now(),
        command: format!("cargo run --release --example bench -- {}", args.join(" "))
            .trim_end()
            .to_owned(),
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        machine: Machine::now(),
        throughput: Vec::new(),
        latency: Vec::new(),
        memory: Vec::new(),
        localstack: None,
        real_latency: None,
        inbox: None,
        outbox: None,
        cpu: None,
    };
    if options.runs(Section::Throughput) {
        report.throughput = in_process::throughput(options)?;
    }
    if options.runs(Section::Latency) {
        report.latency = in_process::latency(options).await?;
    }
    if options.runs(Section::Memory) {
        report.memory = memory::measure(options)?;
    }
    if let (true, Some(endpoint)) = (options.runs(Section::LocalStack), &options.localstack) {
        report.localstack = Some(localstack::run(endpoint, options).await?);
    }
    if options.runs(Section::RealLatency) {
        report.real_latency = Some(real_latency::run(options).await?);
    }
    if let (true, Some(endpoint), Some(postgres)) = (
        options.runs(Section::Inbox),
        &options.localstack,
        &options.postgres,
    ) {
        report.inbox = Some(inbox::run(endpoint, postgres, options).await?);
    }
    if let (true, Some(endpoint), Some(postgres)) = (
        options.runs(Section::Outbox),
        &options.localstack,
        &options.postgres,
    ) {
        report.outbox = Some(outbox::run(endpoint, postgres, options).await?);
    }
    if options.runs(Section::Cpu) {
        report.cpu = Some(cpu::run(options).await?);
    }
    report.machine.load_at_end = load_average();
    println!("{}", report.tables());
    report.write_json(&options.json)?;
    eprintln!("written to {}", options.json.display());
    Ok(())
}
