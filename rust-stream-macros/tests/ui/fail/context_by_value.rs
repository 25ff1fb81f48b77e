use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(order: &Order, ctx: Context<'_>) {
    let _ = (ctx.message_id(), order.id);
}

fn main() {}
