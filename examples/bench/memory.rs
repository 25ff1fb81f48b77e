//! Resident memory per queued message: each case in a fresh child process (this same binary, run
//! with `--memory-probe CASE`), so that no earlier run's freed heap is counted or reused, reading
//! the process's resident set before and after the messages are queued.

use std::process::Command;

use rust_stream::account::Account;
use rust_stream::prelude::*;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::options::Options;
use crate::orders::{publish_orders, Order, Workload, BODY_BYTES};
use crate::report::{thousands, MemoryRow};
use crate::Fallible;

/// Messages queued before the first reading, so the queue, its batcher and the account's maps
/// exist by then and only the messages' own cost is measured.
const WARM_UP: u64 = 1_000;

/// Messages per `send_batch`: small, so the batch in hand adds little to the second reading.
const PUBLISH_CHUNK: u64 = 1_000;

/// What a child process measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryCase {
    /// A standard queue of the in-process account.
    Standard,
    /// A FIFO queue of the in-process account, over 100 groups.
    Fifo,
    /// The limit: an unbounded tokio mpsc channel of the bodies.
    Channel,
}

impl MemoryCase {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "standard" => Some(Self::Standard),
            "fifo" => Some(Self::Fifo),
            "channel" => Some(Self::Channel),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Standard => "standard",
            Self::Fifo => "fifo",
            Self::Channel => "channel",
        }
    }

    fn workload(self) -> Option<Workload> {
        match self {
            Self::Standard => Some(Workload::Standard),
            Self::Fifo => Some(Workload::Fifo { groups: 100 }),
            Self::Channel => None,
        }
    }
}

/// What a child prints: its resident set before and after queueing `messages`.
#[derive(Debug, Serialize, Deserialize)]
struct Reading {
    messages: u64,
    resident_before_kib: u64,
    resident_after_kib: u64,
}

impl Reading {
    fn bytes_per_message(&self) -> f64 {
        let grown = self.resident_after_kib as f64 - self.resident_before_kib as f64;
        grown * 1024.0 / self.messages as f64
    }
}

/// Measures the account's standard and FIFO queues and the channel, each in its own process.
pub fn measure(options: &Options) -> Fallible<Vec<MemoryRow>> {
    let limit = child(MemoryCase::Channel, options.memory_messages)?.bytes_per_message();
    eprintln!("memory: limit {limit:.0} B a message");
    let mut rows = Vec::new();
    for case in [MemoryCase::Standard, MemoryCase::Fifo] {
        let workload = case.workload().expect("a queue");
        let bytes = child(case, options.memory_messages)?.bytes_per_message();
        eprintln!(
            "memory {}: {bytes:.0} B a message ({:.2}x the limit)",
            workload.label(),
            bytes / limit
        );
        rows.push(MemoryRow {
            workload: workload.label(),
            messages: options.memory_messages,
            body_bytes: BODY_BYTES as u64,
            bytes_per_message: bytes,
            beyond_body: bytes - BODY_BYTES as f64,
            limit_bytes_per_message: limit,
            ratio: bytes / limit,
        });
    }
    Ok(rows)
}

/// Runs this binary as a probe of `case` and reads what it printed.
fn child(case: MemoryCase, messages: u64) -> Fallible<Reading> {
    let output = Command::new(std::env::current_exe()?)
        .args(["--memory-probe", case.name()])
        .args(["--memory-messages", &messages.to_string()])
        .output()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "the {} memory probe failed ({}): {stdout}{}",
            case.name(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).map_err(|error| {
        format!("the {} memory probe printed {last:?}: {error}", case.name()).into()
    })
}

/// In the child: queues `messages` bodies after a warm-up, printing the readings as JSON.
pub async fn probe(case: MemoryCase, messages: u64) -> Fallible<()> {
    let (before, after) = match case.workload() {
        Some(workload) => queue_in_account(workload, messages).await?,
        None => queue_in_channel(messages)?,
    };
    let reading = Reading {
        messages,
        resident_before_kib: before,
        resident_after_kib: after,
    };
    println!("{}", serde_json::to_string(&reading)?);
    Ok(())
}

async fn queue_in_account(workload: Workload, messages: u64) -> Fallible<(u64, u64)> {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let queue = workload.queue();
    let publisher = broker.publisher(queue.clone());
    publish_orders(&publisher, workload, 0..WARM_UP, PUBLISH_CHUNK).await?;
    let before = resident_kib()?;
    publish_orders(
        &publisher,
        workload,
        WARM_UP..WARM_UP + messages,
        PUBLISH_CHUNK,
    )
    .await?;
    let after = resident_kib()?;
    let url = account.get_queue_url(queue.name()).await?;
    let waiting = account.counts(&url).await?.visible as u64;
    if waiting != WARM_UP + messages {
        return Err(format!(
            "{waiting} messages wait, not {}",
            thousands(WARM_UP + messages)
        )
        .into());
    }
    Ok((before, after))
}

fn queue_in_channel(messages: u64) -> Fallible<(u64, u64)> {
    let (sender, receiver) = mpsc::unbounded_channel::<String>();
    for id in 0..WARM_UP {
        sender.send(Order::new(id, 100, 0).body())?;
    }
    let before = resident_kib()?;
    for id in WARM_UP..WARM_UP + messages {
        sender.send(Order::new(id, 100, 0).body())?;
    }
    let after = resident_kib()?;
    assert_eq!(receiver.len() as u64, WARM_UP + messages);
    Ok((before, after))
}

/// The process's resident set (`VmRSS` of /proc/self/status, the resident pages of
/// /proc/self/statm in KiB).
fn resident_kib() -> Fallible<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|line| line.starts_with("VmRSS:"))
        .ok_or("no VmRSS in /proc/self/status")?;
    let kib = line
        .trim_start_matches("VmRSS:")
        .trim()
        .trim_end_matches("kB")
        .trim();
    Ok(kib.parse()?)
}
