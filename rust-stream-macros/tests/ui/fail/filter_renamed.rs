use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct PaymentPosted {
    id: u64,
}

fn from_the_ledger(ctx: &Context<'_>) -> bool {
    ctx.header("source") == Some("ledger")
}

#[subscriber("payments", predicate = from_the_ledger)]
async fn posted(payment: &PaymentPosted) {
    let _ = payment.id;
}

fn main() {}
