use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

/// A layer's entry that is no middleware: reported on its expression.
#[subscriber("orders", layers(42))]
async fn fulfil(order: &Order) {
    let _ = order.id;
}

fn main() {}
