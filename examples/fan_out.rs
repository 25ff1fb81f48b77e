//! Fan-out: one SNS topic, three queues, two of them with filter policies.
//!
//! Payments are published once to the topic `fan-out-payments-posted`. SNS copies each into every
//! subscribed queue whose filter policy takes it:
//!
//! - `fan-out-ledger` books every payment (SNS's JSON envelope, which the consumer unwraps; the
//!   handler logs the topic from `Context::sns`);
//! - `fan-out-risk` reviews payments of 1,000 or more (a numeric filter on the `amount`
//!   attribute), delivered raw;
//! - `fan-out-eur` notifies about payments in euros (a filter on the `currency` attribute).
//!
//! The service declares the topic, the queues (each with a dead-letter queue) and the
//! subscriptions `create_if_missing`, so its start creates them (and sets each queue's policy to let the topic send to it) where they are
//! missing. It publishes four payments once it consumes, and exits once every copy is handled.
//!
//! ```sh
//! cargo run --example fan_out
//! cargo run --example fan_out -- --asyncapi   # its AsyncAPI document, instead of running
//! ```
//!
//! It runs on the in-process broker (SQS and SNS in process) by default, and on AWS when the
//! environment names it (`AWS_ENDPOINT_URL` for LocalStack, or `AWS_PROFILE`/`AWS_ACCESS_KEY_ID`).

#[path = "common/asyncapi.rs"]
mod asyncapi;

use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rust_stream::prelude::*;
use rust_stream::State;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// A posted payment.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Payment {
    id: u64,
    amount: u64,
    currency: String,
}

/// The payments published: every one is booked, those of 1,000 or more reviewed, those in EUR
/// noticed.
const PAYMENTS: [(u64, u64, &str); 4] = [
    (1, 250, "EUR"),
    (2, 4_000, "USD"),
    (3, 12_000, "EUR"),
    (4, 90, "GBP"),
];

/// How many deliveries the payments make: 4 booked, 2 reviewed, 2 noticed.
const DELIVERIES: usize = 8;

/// How long the deliveries may take before the example gives up.
const PATIENCE: Duration = Duration::from_secs(60);

/// How many deliveries are still to handle: shared state of the app.
#[derive(Clone)]
struct Progress {
    left: Arc<AtomicUsize>,
    all_handled: Arc<Notify>,
}

impl Progress {
    fn new(deliveries: usize) -> Self {
        Self {
            left: Arc::new(AtomicUsize::new(deliveries)),
            all_handled: Arc::new(Notify::new()),
        }
    }

    fn handled(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all_handled.notify_one();
        }
    }
}

fn posted() -> SnsTopic {
    SnsTopic::new("fan-out-payments-posted").create_if_missing()
}

/// Books every posted payment; it comes in SNS's envelope, which the consumer unwraps.
#[subscriber(
    SqsQueue::new("fan-out-ledger")
        .create_if_missing()
        .dead_letter("fan-out-ledger-dlq", 5)
        .subscribed_to(posted())
)]
async fn book(
    payment: &Payment,
    ctx: &Context<'_>,
    State(progress): State<Progress>,
) -> HandlerOutcome {
    let topic = ctx
        .sns()
        .map(|notification| notification.topic_arn().name());
    tracing::info!(payment.id, topic, "payment booked");
    progress.handled();
    HandlerOutcome::ack()
}

/// Reviews payments of 1,000 or more, delivered raw.
#[subscriber(SqsQueue::new("fan-out-risk").create_if_missing().dead_letter("fan-out-risk-dlq", 5).subscribed_to(
    TopicSubscription::new(posted())
        .raw_message_delivery(true)
        .filter_policy(r#"{"amount": [{"numeric": [">=", 1000]}]}"#),
))]
async fn review(payment: &Payment, State(progress): State<Progress>) -> HandlerOutcome {
    tracing::info!(payment.id, payment.amount, "payment reviewed");
    progress.handled();
    HandlerOutcome::ack()
}

/// Notifies about payments in euros.
#[subscriber(SqsQueue::new("fan-out-eur").create_if_missing().dead_letter("fan-out-eur-dlq", 5).subscribed_to(
    TopicSubscription::new(posted()).filter_policy(r#"{"currency": ["EUR"]}"#),
))]
async fn notify(payment: &Payment, State(progress): State<Progress>) -> HandlerOutcome {
    tracing::info!(payment.id, payment.currency, "payment noticed");
    progress.handled();
    HandlerOutcome::ack()
}

fn service(broker: SqsBroker, progress: Progress) -> impl App {
    RustStream::new(AppInfo::new("payments-fan-out", "0.1.0"))
        .with_state(progress)
        .with_broker(broker, |b| {
            b.include(book);
            b.include(review);
            b.include(notify);
        })
}

/// Starts the service, publishes the payments once it consumes, and stops it once every copy
/// was handled.
async fn fan_out(broker: SqsBroker) -> Result<(), Box<dyn std::error::Error>> {
    let progress = Progress::new(DELIVERIES);
    let all_handled = progress.all_handled.clone();
    let app = service(broker.clone(), progress);
    let shutdown = app.shutdown_handle();
    let readiness = app.readiness();
    let mut running = tokio::spawn(app.run());
    // The app's start makes the topic and the subscriptions: a payment published before it
    // would reach no queue.
    if !readiness.consuming().await {
        running.await??;
        return Err("the service did not start".into());
    }
    let topic = broker.topic(posted());
    for (id, amount, currency) in PAYMENTS {
        let payment = Payment {
            id,
            amount,
            currency: currency.to_owned(),
        };
        // The filter policies read the message's attributes.
        topic
            .message(&payment)
            .header_number("amount", amount)
            .header("currency", currency)
            .send()
            .await?;
        tracing::info!(
            payment.id,
            payment.amount,
            payment.currency,
            "payment posted"
        );
    }
    tokio::select! {
        stopped = &mut running => {
            stopped??;
            return Err("the service stopped before every payment was handled".into());
        }
        handled = tokio::time::timeout(PATIENCE, all_handled.notified()) => {
            handled.map_err(|_| format!("payments not all handled within {PATIENCE:?}"))?;
        }
    }
    shutdown.shutdown();
    running.await??;
    tracing::info!("every payment handled where its policies took it; bye");
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
    let run = async { fan_out(SqsBroker::from_env_or_in_process().await?).await };
    match run.await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
