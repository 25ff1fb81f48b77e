use rust_stream::prelude::*;

struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
