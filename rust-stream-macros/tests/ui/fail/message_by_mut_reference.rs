use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(order: &mut Order) {
    order.id += 1;
}

fn main() {}
