use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(order: &Order, previous: &Order) {
    let _ = (order.id, previous.id);
}

fn main() {}
