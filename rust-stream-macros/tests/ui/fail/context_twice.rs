use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(order: &Order, ctx: &mut Context<'_>, again: &Context<'_>) {
    let _ = (ctx.message_id(), again.queue(), order.id);
}

fn main() {}
