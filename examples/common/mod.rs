//! What both FIFO examples do around their `service`: place three orders for each of two
//! customers, run the service until the queue is empty, then shut it down.
//!
//! They run where `SqsBroker::from_env_or_in_process` says: on SQS when the environment names one
//! (`AWS_ENDPOINT_URL` for a local stack such as LocalStack; `AWS_REGION`, `AWS_PROFILE` or
//! `AWS_ACCESS_KEY_ID` for Amazon SQS, configured as the AWS CLI reads it), on the in-process SQS
//! account otherwise. With `--asyncapi` they print their service's AsyncAPI document instead.

pub mod asyncapi;

use std::process::ExitCode;
use std::time::Duration;

use rust_stream::prelude::*;
use rust_stream::{QueueLoad, Readiness};
use serde::{Deserialize, Serialize};

/// An order of a customer.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
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

/// Runs the example around `service` and says how it went as the exit code; with `--asyncapi`,
/// prints the service's AsyncAPI document instead.
pub async fn run<A: App>(service: fn(SqsBroker) -> A) -> ExitCode {
    if asyncapi::requested() {
        asyncapi::print(&service(SqsBroker::in_process()));
        return ExitCode::SUCCESS;
    }
    tracing_subscriber::fmt()
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();
    match fulfil_orders(service).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Places the orders, runs the service until the queue is empty, then shuts it down.
async fn fulfil_orders<A: App>(
    service: fn(SqsBroker) -> A,
) -> Result<(), Box<dyn std::error::Error>> {
    let broker = SqsBroker::from_env_or_in_process().await?;
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

    let app = service(broker);
    let shutdown = app.shutdown_handle();
    let readiness = app.readiness();
    let mut running = tokio::spawn(app.run());
    tokio::select! {
        stopped = &mut running => {
            stopped??;
            return Err("the service stopped before every order was fulfilled".into());
        }
        emptied = queues_emptied(&readiness) => emptied?,
    }
    shutdown.shutdown();
    running.await??;
    tracing::info!("all orders fulfilled; bye");
    Ok(())
}

/// Resolves once every queue the service uses holds no message, visible, in flight or delayed:
/// every order was fulfilled and deleted.
async fn queues_emptied(readiness: &Readiness) -> Result<(), Box<dyn std::error::Error>> {
    // The counts are approximate: a message a receive is handing out can be counted neither
    // visible nor in flight for a moment (LocalStack takes it from its group before it marks it
    // in flight), so a single empty reading does not prove the work done.
    const EMPTY_READINGS: u32 = 3;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut empty_readings = 0;
    if readiness.consuming().await {
        while let Some(loads) = readiness.queues().await {
            let loads = loads?;
            if loads.iter().all(QueueLoad::is_empty) {
                empty_readings += 1;
                if empty_readings == EMPTY_READINGS {
                    return Ok(());
                }
            } else {
                empty_readings = 0;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("orders not fulfilled within {PATIENCE:?}: {loads:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The service ended first: the error it ended with is the one to report.
    std::future::pending().await
}
