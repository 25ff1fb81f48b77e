use rust_stream::prelude::*;
use rust_stream::Output;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[derive(serde::Serialize)]
struct Receipt {
    order: u64,
}

#[subscriber("orders", outputs(receipts = "receipts"))]
async fn fulfil(order: &Order, receipts: Output<Receipt>, ctx: &mut Context<'_>) {
    ctx.publish(receipts.message(&Receipt { order: order.id }));
}

fn main() {}
