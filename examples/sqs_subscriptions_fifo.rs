//! FIFO subscriptions: the orders of one customer, fulfilled in the order they were placed.
//!
//! `orders.fifo` is a FIFO queue and each customer's orders are one message group, so the queue
//! hands out a customer's orders in the order they were sent, one at a time, while the other
//! customer's go on meanwhile. This example places three orders for each of two customers, lets
//! the service fulfil them (the log shows each customer's in order), and stops once the queue is
//! empty.
//!
//! ```sh
//! cargo run --example sqs_subscriptions_fifo
//! ```
//!
//! It runs on the in-process SQS account; with `AWS_ENDPOINT_URL` set it is meant to run on SQS,
//! which is not built yet. The same service without the macro is
//! `examples/manual/sqs_subscriptions_fifo.rs`.

use std::process::ExitCode;
use std::time::Duration;

use rust_stream::account::Account;
use rust_stream::prelude::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Order {
    id: u64,
    customer: String,
}

/// Reads the FIFO queue `orders.fifo`. The orders of one customer are one message group, so
/// they arrive in the order they were sent, one at a time.
#[subscriber(SqsQueue::new("orders.fifo"))]
async fn fulfil(order: &Order) -> HandlerOutcome {
    tracing::info!(order.id, order.customer, "order fulfilled");
    HandlerOutcome::ack()
}

fn service(broker: SqsBroker) -> impl App {
    RustStream::new(AppInfo::new("fulfillment", "0.1.0")).with_broker(broker, |b| {
        b.include(fulfil);
    })
}

/// The orders placed, in this order: two customers, interleaved.
const ORDERS: [(u64, &str); 6] = [
    (1, "ada"),
    (2, "grace"),
    (3, "ada"),
    (4, "grace"),
    (5, "ada"),
    (6, "grace"),
];

/// How long the orders may take before the example gives up.
const PATIENCE: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    if std::env::var_os("AWS_ENDPOINT_URL").is_some() {
        // TODO(issue 5): run `service` on `SqsBroker::from_env()` once the aws-sdk-sqs backend is built.
        eprintln!(
            "AWS_ENDPOINT_URL is set, but rust-stream's SQS backend (aws-sdk-sqs) is not built \
             yet; unset AWS_ENDPOINT_URL to run on the in-process account"
        );
        return ExitCode::from(2);
    }
    match in_process().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Places the orders, runs the service until the queue is empty, then shuts it down.
async fn in_process() -> Result<(), Box<dyn std::error::Error>> {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);

    // `service` reads `orders.fifo` as a service reads a queue its infrastructure made: it does
    // not create it. Here the publisher creates it, before the service starts.
    let orders = broker.publisher(SqsQueue::new("orders.fifo").create_if_missing());
    for (id, customer) in ORDERS {
        let order = Order {
            id,
            customer: customer.to_owned(),
        };
        orders.message(&order).group_id(customer).send().await?;
        tracing::info!(order.id, order.customer, "order placed");
    }
    let url = account.get_queue_url("orders.fifo").await?;

    let app = service(broker);
    let shutdown = app.shutdown_handle();
    let mut running = tokio::spawn(app.run());
    tokio::select! {
        stopped = &mut running => {
            stopped??;
            return Err("the service stopped before every order was fulfilled".into());
        }
        emptied = queue_emptied(&account, &url) => emptied?,
    }
    shutdown.shutdown();
    running.await??;
    tracing::info!("all orders fulfilled; bye");
    Ok(())
}

/// Resolves once the queue holds no message, visible, in flight or delayed: every order was
/// fulfilled and deleted.
async fn queue_emptied(account: &Account, url: &str) -> Result<(), Box<dyn std::error::Error>> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let counts = account.counts(url).await?;
        if counts.visible + counts.in_flight + counts.delayed == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("orders not fulfilled within {PATIENCE:?}: {counts:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
