use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(ctx: &mut Context<'_>, order: &Order) {
    let _ = (ctx.message_id(), order.id);
}

fn main() {}
