use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders", concurrency = 8, batch_size = 10, concurrency = 16)]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
