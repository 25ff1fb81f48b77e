//! `filter = ..` takes a function of the context, or a closure.

use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct PaymentPosted {
    id: u64,
}

fn from_the_ledger(ctx: &Context<'_>) -> bool {
    ctx.header("source") == Some("ledger")
}

#[subscriber("payments", filter = from_the_ledger)]
async fn posted(payment: &PaymentPosted) {
    let _ = payment.id;
}

#[subscriber("payments", concurrency = 4, filter = |ctx: &Context<'_>| ctx.header("kind").is_some())]
async fn any(payment: &PaymentPosted) {
    let _ = payment;
}

fn main() {
    let _: rust_stream::Subscriber = posted.into();
    let _: rust_stream::Subscriber = any.on("other");
}
