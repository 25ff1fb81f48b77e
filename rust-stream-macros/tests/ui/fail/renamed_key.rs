use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders", wait_time_seconds = 20, max_messages = 10)]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
