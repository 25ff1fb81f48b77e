//! Payment batch files through S3: a bank's 5 MiB file of payments goes through a FIFO queue
//! whose messages SQS caps at 1 MiB, its body in an S3 bucket and a pointer in the message, in the
//! form every AWS extended client reads.
//!
//! The service declares the bucket and the queue `create_if_missing`, sends three files for one
//! bank (one of 5 MiB, two small), and a subscriber books each file's payments, in the order the
//! files were sent. The large file costs one `PutObject` and one `GetObject`; the small ones none.
//!
//! ```sh
//! cargo run --example payment_files
//! ```
//!
//! It runs on the in-process broker (SQS and S3 in process) by default, and on AWS when the
//! environment names it (`AWS_ENDPOINT_URL` for LocalStack, or `AWS_PROFILE`/`AWS_ACCESS_KEY_ID`).
//! It prints a line per file booked and exits non-zero if a file is missing, out of order or
//! changed, or if the S3 calls are not one put and one get.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::model::large_payload::LargePayloads;
use rust_stream::prelude::*;
use rust_stream::State;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// A bank's batch file: its number and its payments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PaymentFile {
    bank: String,
    number: u32,
    payments: Vec<Payment>,
}

/// One payment of a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Payment {
    iban: String,
    cents: u64,
    reference: String,
}

/// The files sent, by their number of payments: the first one about 5 MiB.
const FILES: [(u32, usize); 3] = [(1, 50_000), (2, 10), (3, 25)];

/// How long the files may take before the example gives up.
const PATIENCE: Duration = Duration::from_secs(60);

fn file(number: u32, payments: usize) -> PaymentFile {
    PaymentFile {
        bank: "bank-7".to_owned(),
        number,
        payments: (0..payments)
            .map(|n| Payment {
                iban: format!("DE89370400440532{n:06}"),
                cents: 1_000 + n as u64,
                reference: format!("invoice {number}-{n} of the month, paid in full"),
            })
            .collect(),
    }
}

/// The files booked, in the order they were booked; told once all are.
#[derive(Clone, Default)]
struct Booked {
    files: Arc<Mutex<Vec<PaymentFile>>>,
    all: Arc<Notify>,
}

fn files_queue() -> SqsQueue {
    SqsQueue::new("payment-files.fifo")
        .create_if_missing()
        .dead_letter("payment-files-dlq.fifo", 5)
}

/// Books a file's payments.
#[subscriber(files_queue())]
async fn book(file: &PaymentFile, State(booked): State<Booked>) -> HandlerOutcome {
    let total: u64 = file.payments.iter().map(|payment| payment.cents).sum();
    tracing::info!(
        file.number,
        payments = file.payments.len(),
        total_cents = total,
        "payment file booked"
    );
    let mut files = booked.files.lock().unwrap();
    files.push(file.clone());
    if files.len() == FILES.len() {
        booked.all.notify_one();
    }
    HandlerOutcome::ack()
}

async fn run(broker: SqsBroker) -> Result<(), Box<dyn std::error::Error>> {
    let broker = broker.large_payloads(LargePayloads::new(bucket()).create_if_missing());
    let booked = Booked::default();
    let app = RustStream::new(AppInfo::new("payment-files", "0.1.0"))
        .with_state(booked.clone())
        .with_broker(broker.clone(), |b| {
            b.include(book);
        });
    let shutdown = app.shutdown_handle();
    let readiness = app.readiness();
    let all = booked.all.clone();
    let mut running = tokio::spawn(app.run());
    if !readiness.consuming().await {
        running.await??;
        return Err("the service did not start".into());
    }
    let files = broker.publisher(files_queue());
    let sent: Vec<PaymentFile> = FILES
        .iter()
        .map(|(number, payments)| file(*number, *payments))
        .collect();
    let before = broker.api_calls();
    for file in &sent {
        let bytes = serde_json::to_vec(file)?.len();
        files.message(file).group_id(&file.bank).send().await?;
        tracing::info!(file.number, bytes, "payment file sent");
    }
    tokio::select! {
        stopped = &mut running => {
            stopped??;
            return Err("the service stopped before every file was booked".into());
        }
        handled = tokio::time::timeout(PATIENCE, all.notified()) => {
            handled.map_err(|_| format!("files not all booked within {PATIENCE:?}"))?;
        }
    }
    shutdown.shutdown();
    running.await??;
    let calls = broker.api_calls() - before;
    let got = booked.files.lock().unwrap().clone();
    if got != sent {
        return Err("the files booked are not the files sent, in their order".into());
    }
    if (calls.put_object, calls.get_object) != (1, 1) {
        return Err(format!("expected one put and one get, made {calls:?}").into());
    }
    tracing::info!(
        put_object = calls.put_object,
        get_object = calls.get_object,
        "every file booked in order, the large one through S3; bye"
    );
    Ok(())
}

/// The bucket: one a run on a shared server, as S3's names are global.
fn bucket() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    format!("payment-files-{}-{nanos}", std::process::id())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let run = async { run(SqsBroker::from_env_or_in_process().await?).await };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("payment_files: {error}");
            ExitCode::FAILURE
        }
    }
}
