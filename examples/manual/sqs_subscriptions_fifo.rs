//! FIFO subscriptions, without the macro: the orders of one customer, fulfilled in the order they
//! were placed.
//!
//! The twin of `examples/sqs_subscriptions_fifo.rs`, with the handler written as a `Handle` impl
//! instead of a `#[subscriber]` function: what the macro writes, by hand. `orders.fifo` is a FIFO
//! queue and each customer's orders are one message group, so the queue hands out a customer's
//! orders in the order they were sent, one at a time, while the other customer's go on meanwhile.
//! This example places three orders for each of two customers, lets the service fulfil them (the
//! log shows each customer's in order), and stops once the queue is empty.
//!
//! ```sh
//! cargo run --example manual_sqs_subscriptions_fifo
//! ```
//!
//! It runs on the in-process SQS account by default, and on SQS when the environment names one
//! (`AWS_ENDPOINT_URL`, `AWS_PROFILE` or `AWS_ACCESS_KEY_ID`).

#[path = "../common/mod.rs"]
mod common;

use std::process::ExitCode;

use common::Order;
use rust_stream::prelude::*;

/// Reads the FIFO queue `orders.fifo`. The orders of one customer are one message group, so
/// they arrive in the order they were sent, one at a time.
struct Fulfil;

impl Handle<Order> for Fulfil {
    fn handle(
        &self,
        order: &Order,
        _outs: &(),
        _ctx: &mut Context<'_>,
    ) -> impl Future<Output = Result<(), HandlerOutcome>> {
        tracing::info!(order.id, order.customer, "order fulfilled");
        ready(Ok(()))
    }
}

fn service(broker: SqsBroker) -> impl App {
    RustStream::new(AppInfo::new("fulfillment", "0.1.0")).with_broker(broker, |b| {
        b.include(subscriber("orders.fifo", Fulfil).build());
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    common::run(service).await
}
