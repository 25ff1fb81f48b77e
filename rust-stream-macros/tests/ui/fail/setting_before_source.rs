use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber(concurrency = 8, "orders")]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
