//! Sources written as expressions, and every setting.
use std::time::Duration;

use rust_stream::prelude::*;
use rust_stream::Json;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

const AUDIT: &str = "audit";

fn orders_queue() -> SqsQueue {
    SqsQueue::new("orders.fifo").create_if_missing()
}

#[subscriber(
    SqsQueue::new("orders.fifo").wait(Duration::from_secs(5)).create_if_missing(),
    concurrency = 32,
    batch_size = 5,
    wait = Duration::from_secs(2),
    visibility_timeout = Duration::from_secs(60),
    pollers = 2,
    retry = rust_stream::RetryPolicy::fixed(Duration::from_secs(2)),
    timeout = Duration::from_secs(30),
    dead_letter("orders-dlq.fifo", 5),
    codec = Json,
)]
async fn configured(order: &Order) {
    let _ = order.id;
}

#[subscriber(orders_queue())]
async fn from_a_function(order: &Order) {
    let _ = order.id;
}

#[subscriber(AUDIT, batch_size = 1)]
async fn from_a_const(order: &Order) {
    let _ = order.id;
}

#[subscriber(format!("tenant-{}", 7))]
async fn from_a_string(order: &Order) {
    let _ = order.id;
}

fn main() {
    let built = rust_stream::Subscriber::from(configured);
    assert_eq!(built.queue().name(), "orders.fifo");
    assert_eq!(rust_stream::Subscriber::from(from_a_function).queue().name(), "orders.fifo");
    assert_eq!(rust_stream::Subscriber::from(from_a_const).queue().name(), "audit");
    assert_eq!(rust_stream::Subscriber::from(from_a_string).queue().name(), "tenant-7");
}
