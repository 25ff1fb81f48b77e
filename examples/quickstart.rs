//! Quickstart: a fulfillment service on the in-process SQS broker.
//!
//! It starts the service, publishes a few orders of two customers to the FIFO queue `orders.fifo`
//! (one message group per customer), handles them (each customer's orders in the order they were
//! placed), logs them, and exits once all are fulfilled.
//!
//! ```sh
//! cargo run --example quickstart
//! cargo run --example quickstart -- --asyncapi   # its AsyncAPI document, instead of running
//! ```

#[path = "common/asyncapi.rs"]
mod asyncapi;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rust_stream::prelude::*;
use rust_stream::State;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Order {
    id: u64,
    customer: String,
}

/// How many orders are still to fulfil: shared state of the app.
#[derive(Clone)]
struct Progress {
    left: Arc<AtomicUsize>,
    all_fulfilled: Arc<Notify>,
}

/// Reads the FIFO queue `orders.fifo`. The orders of one customer are one message group, so
/// they arrive in the order they were sent, one at a time. A call that takes over 30 s fails and is
/// retried; after 5 failed attempts the order goes to `orders-dlq.fifo`.
#[subscriber(
    SqsQueue::new("orders.fifo").create_if_missing().dead_letter("orders-dlq.fifo", 5),
    timeout = std::time::Duration::from_secs(30)
)]
async fn fulfil(
    order: &Order,
    ctx: &Context<'_>,
    State(progress): State<Progress>,
) -> HandlerOutcome {
    tracing::info!(
        order.id,
        order.customer,
        sequence = ctx.sqs().sequence_number(),
        "order fulfilled"
    );
    if progress.left.fetch_sub(1, Ordering::AcqRel) == 1 {
        progress.all_fulfilled.notify_one();
    }
    HandlerOutcome::ack()
}

fn progress_of(orders: usize) -> Progress {
    Progress {
        left: Arc::new(AtomicUsize::new(orders)),
        all_fulfilled: Arc::new(Notify::new()),
    }
}

fn service(broker: SqsBroker, progress: Progress) -> impl App {
    RustStream::new(AppInfo::new("fulfillment", "0.1.0"))
        .with_state(progress)
        .with_broker(broker, |b| {
            b.include(fulfil);
        })
}

const ORDERS: [(u64, &str); 6] = [
    (1, "ada"),
    (2, "grace"),
    (3, "ada"),
    (4, "grace"),
    (5, "ada"),
    (6, "grace"),
];

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let broker = SqsBroker::in_process();
    if asyncapi::requested() {
        asyncapi::print(&service(broker, progress_of(0)));
        return Ok(());
    }
    tracing_subscriber::fmt().with_target(false).init();

    let progress = progress_of(ORDERS.len());
    let all_fulfilled = progress.all_fulfilled.clone();
    let app = service(broker.clone(), progress);
    let shutdown = app.shutdown_handle();
    let readiness = app.readiness();
    let running = tokio::spawn(app.run());
    // The app creates its queues as it starts: `orders.fifo` with its dead-letter queue and the
    // redrive policy to it. Orders are placed once it consumes; a publisher that created the
    // queue first would create it without the redrive policy (and the app would warn).
    if !readiness.consuming().await {
        running.await??;
        return Err("the service did not start".into());
    }
    let orders = broker.publisher("orders.fifo");
    for (id, customer) in ORDERS {
        let sent = orders
            .message(&Order {
                id,
                customer: customer.to_owned(),
            })
            .group_id(customer)
            .send()
            .await?;
        tracing::info!(order.id = id, message_id = %sent.message_id, "order placed");
    }
    all_fulfilled.notified().await;
    shutdown.shutdown();
    running.await??;
    tracing::info!("all orders fulfilled; bye");
    Ok(())
}
