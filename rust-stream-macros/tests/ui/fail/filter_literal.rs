use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct PaymentPosted {
    id: u64,
}

#[subscriber("payments", filter = "PaymentPosted")]
async fn posted(payment: &PaymentPosted) {
    let _ = payment.id;
}

fn main() {}
