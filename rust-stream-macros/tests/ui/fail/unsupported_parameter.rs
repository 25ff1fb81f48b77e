use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(order: &Order, attempts: u32) {
    let _ = (order.id, attempts);
}

fn main() {}
