use rust_stream::prelude::*;
use rust_stream::store::memory::MemoryStore;

#[derive(serde::Deserialize)]
struct Payment {
    id: String,
}

/// The store where its inbox belongs: reported on the expression, which is no `Inbox<S>`.
#[subscriber("payments", idempotent = MemoryStore::new())]
async fn post(payment: &Payment) {
    let _ = &payment.id;
}

fn main() {}
