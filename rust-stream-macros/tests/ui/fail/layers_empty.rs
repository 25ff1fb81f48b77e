use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders", layers())]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
