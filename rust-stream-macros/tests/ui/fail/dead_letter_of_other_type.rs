use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber(SqsQueue::new("orders.fifo"), dead_letter("orders-dlq", 5))]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
