use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders", retries = 3)]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
