use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

struct Fulfilment;

impl Fulfilment {
    #[subscriber("orders")]
    async fn fulfil(&self, order: &Order) {
        let _ = order.id;
    }
}

fn main() {}
