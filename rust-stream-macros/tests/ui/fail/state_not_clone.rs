use rust_stream::prelude::*;
use rust_stream::State;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

struct Ledger;

#[subscriber("orders")]
async fn fulfil(order: &Order, State(ledger): State<Ledger>) {
    let _ = (order.id, ledger);
}

fn main() {}
