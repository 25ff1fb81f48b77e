//! Routing: three message types on one queue, each to its own handler.
//!
//! The queue `routing-payment-events` carries `PaymentPosted`, `PaymentReversed` and
//! `AccountClosed`. The service mounts a handler per type on it; one consumer reads the queue
//! and hands each message to the handler of the type its `rust_stream.type` header names, which
//! the publisher sets by itself. A fourth message, a `RefundIssued`, is of a type no handler
//! takes: it is dead-lettered with a reason, and a handler on the dead-letter queue logs it.
//!
//! ```sh
//! cargo run --example routing
//! cargo run --example routing -- --asyncapi   # its AsyncAPI document, instead of running
//! ```
//!
//! It runs on the in-process broker by default, and on AWS when the environment names it
//! (`AWS_ENDPOINT_URL` for LocalStack, or `AWS_PROFILE`/`AWS_ACCESS_KEY_ID`).

#[path = "common/asyncapi.rs"]
mod asyncapi;

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rust_stream::prelude::*;
use rust_stream::{State, DEAD_LETTER_REASON_HEADER};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// A payment booked on an account.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct PaymentPosted {
    id: u64,
    cents: i64,
}

/// A payment taken back.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct PaymentReversed {
    id: u64,
}

/// An account closed.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct AccountClosed {
    account: String,
}

/// A type the service has no handler for.
#[derive(Debug, Serialize, Deserialize)]
struct RefundIssued {
    id: u64,
}

/// Any event, read for its headers: its fields are not looked at (serde skips unknown ones).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
struct AnyEvent {}

/// How many messages the example sends: three handled, one dead-lettered.
const MESSAGES: usize = 4;

/// How long the messages may take before the example gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// How many messages are still to handle: shared state of the app.
#[derive(Clone)]
struct Progress {
    left: Arc<AtomicUsize>,
    all_handled: Arc<Notify>,
}

impl Progress {
    fn new(messages: usize) -> Self {
        Self {
            left: Arc::new(AtomicUsize::new(messages)),
            all_handled: Arc::new(Notify::new()),
        }
    }

    fn handled(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all_handled.notify_one();
        }
    }
}

/// The queue of payment events: every subscriber of it declares it the same way.
fn events() -> SqsQueue {
    SqsQueue::new("routing-payment-events")
        .create_if_missing()
        .wait(Duration::from_secs(1))
        .dead_letter("routing-payment-events-dlq", 3)
}

/// Books a posted payment.
#[subscriber(events())]
async fn post(payment: &PaymentPosted, State(progress): State<Progress>) {
    tracing::info!(payment.id, payment.cents, "payment posted");
    progress.handled();
}

/// Takes a payment back.
#[subscriber(events())]
async fn reverse(payment: &PaymentReversed, State(progress): State<Progress>) {
    tracing::info!(payment.id, "payment reversed");
    progress.handled();
}

/// Closes an account.
#[subscriber(events())]
async fn close(closed: &AccountClosed, State(progress): State<Progress>) {
    tracing::info!(closed.account, "account closed");
    progress.handled();
}

/// Logs what no handler took, with the reason the consumer gave.
#[subscriber(SqsQueue::new("routing-payment-events-dlq").create_if_missing().wait(Duration::from_secs(1)))]
async fn unrouted(_event: &AnyEvent, ctx: &Context<'_>, State(progress): State<Progress>) {
    let reason = ctx.header(DEAD_LETTER_REASON_HEADER).unwrap_or_default();
    tracing::warn!(reason, "dead letter read");
    progress.handled();
}

fn service(broker: SqsBroker, progress: Progress) -> impl App {
    RustStream::new(AppInfo::new("payment-events", "0.1.0"))
        .with_state(progress)
        .with_broker(broker, |b| {
            b.include(post);
            b.include(reverse);
            b.include(close);
            b.include(unrouted);
        })
}

/// Starts the service, sends the four messages once it consumes, and stops it once each was
/// handled or dead-lettered.
async fn route(broker: SqsBroker) -> Result<(), Box<dyn std::error::Error>> {
    let progress = Progress::new(MESSAGES);
    let all_handled = progress.all_handled.clone();
    let app = service(broker.clone(), progress);
    let shutdown = app.shutdown_handle();
    let readiness = app.readiness();
    let mut running = tokio::spawn(app.run());
    if !readiness.consuming().await {
        running.await??;
        return Err("the service did not start".into());
    }
    // Each typed message carries its type's name in `rust_stream.type`.
    let publisher = broker.publisher(events());
    publisher
        .message(&PaymentPosted {
            id: 1,
            cents: 2_500,
        })
        .send()
        .await?;
    publisher.message(&PaymentReversed { id: 1 }).send().await?;
    publisher
        .message(&AccountClosed {
            account: "ada".to_owned(),
        })
        .send()
        .await?;
    publisher.message(&RefundIssued { id: 1 }).send().await?;
    tokio::select! {
        stopped = &mut running => {
            stopped??;
            return Err("the service stopped before every message was handled".into());
        }
        handled = tokio::time::timeout(PATIENCE, all_handled.notified()) => {
            handled.map_err(|_| format!("messages not all handled within {PATIENCE:?}"))?;
        }
    }
    shutdown.shutdown();
    running.await??;
    tracing::info!("every message went to its handler, or to the dead-letter queue; bye");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    if asyncapi::requested() {
        asyncapi::print(&service(SqsBroker::in_process(), Progress::new(0)));
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let run = async { route(SqsBroker::from_env_or_in_process().await?).await };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
