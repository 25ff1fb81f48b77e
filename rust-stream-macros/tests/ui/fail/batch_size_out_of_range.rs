use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders", batch_size = 25)]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
