use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct PaymentPosted {
    id: u64,
}

fn large(payment: &PaymentPosted) -> bool {
    payment.id > 1_000
}

#[subscriber("payments", filter = large)]
async fn posted(payment: &PaymentPosted) {
    let _ = payment.id;
}

fn main() {}
