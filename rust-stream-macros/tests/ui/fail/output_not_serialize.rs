use rust_stream::prelude::*;
use rust_stream::Output;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

struct Receipt {
    order: u64,
}

#[subscriber("orders", outputs(receipts = "receipts"))]
async fn fulfil(order: &Order, receipts: &Output<Receipt>) {
    let _ = (receipts, Receipt { order: order.id }.order);
}

fn main() {}
