//! What both FIFO examples do around their `service`: place three orders for each of two
//! customers, run the service until the queue is empty, then shut it down.
//!
//! They run on the in-process SQS account by default, and on SQS when the environment names one:
//! `AWS_ENDPOINT_URL` (a local stack such as LocalStack), or AWS credentials (`AWS_PROFILE`,
//! `AWS_ACCESS_KEY_ID`), read as the AWS CLI reads them.

use std::process::ExitCode;
use std::time::Duration;

use rust_stream::account::Account;
use rust_stream::engine::transport::Transport;
use rust_stream::prelude::*;
use serde::{Deserialize, Serialize};

/// An order of a customer.
#[derive(Debug, Serialize, Deserialize)]
pub struct Order {
    pub id: u64,
    pub customer: String,
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
const PATIENCE: Duration = Duration::from_secs(60);

/// Whether the environment names an SQS to use instead of the in-process account.
fn sqs_configured() -> bool {
    [
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_SQS",
        "AWS_PROFILE",
        "AWS_ACCESS_KEY_ID",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some())
}

/// Runs the example around `service` and says how it went as the exit code.
pub async fn run<A: App>(service: fn(SqsBroker) -> A) -> ExitCode {
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    let outcome = if sqs_configured() {
        tracing::info!("running on SQS, as the AWS environment configures it");
        fulfil_orders(SqsBroker::aws().transport().await, service).await
    } else {
        tracing::info!("running on the in-process SQS account");
        fulfil_orders(Account::new(), service).await
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Places the orders, runs the service until the queue is empty, then shuts it down.
async fn fulfil_orders<T: Transport + Clone, A: App>(
    transport: T,
    service: fn(SqsBroker) -> A,
) -> Result<(), Box<dyn std::error::Error>> {
    let broker = SqsBroker::with_transport(transport.clone());
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
    let url = transport.get_queue_url("orders.fifo").await?;

    let app = service(broker);
    let shutdown = app.shutdown_handle();
    let mut running = tokio::spawn(app.run());
    tokio::select! {
        stopped = &mut running => {
            stopped??;
            return Err("the service stopped before every order was fulfilled".into());
        }
        emptied = queue_emptied(&transport, &url) => emptied?,
    }
    shutdown.shutdown();
    running.await??;
    tracing::info!("all orders fulfilled; bye");
    Ok(())
}

/// Resolves once the queue holds no message, visible, in flight or delayed: every order was
/// fulfilled and deleted.
async fn queue_emptied<T: Transport>(
    transport: &T,
    url: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    const COUNTS: [&str; 3] = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ];
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let attributes = transport.get_queue_attributes(url, &COUNTS).await?;
        let held: u64 = COUNTS
            .iter()
            .filter_map(|name| attributes.get(*name)?.parse::<u64>().ok())
            .sum();
        if held == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("orders not fulfilled within {PATIENCE:?}: {attributes:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
