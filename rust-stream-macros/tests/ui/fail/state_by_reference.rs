use rust_stream::prelude::*;
use rust_stream::State;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[derive(Clone)]
struct Ledger;

#[subscriber("orders")]
async fn fulfil(order: &Order, ledger: &State<Ledger>) {
    let _ = (order.id, ledger);
}

fn main() {}
