use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
