// Every mistake is reported in one compile, each on its own token.
use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders", workers = 4, visibility = 30)]
fn fulfil(order: Order, ctx: Context<'_>) {
    let _ = (order.id, ctx.message_id());
}

fn main() {}
