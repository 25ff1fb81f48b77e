use std::rc::Rc;

use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(order: &Order) {
    let local = Rc::new(order.id);
    std::future::ready(()).await;
    let _ = local;
}

fn main() {}
