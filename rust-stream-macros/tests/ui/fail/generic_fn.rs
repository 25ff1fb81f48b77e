use rust_stream::prelude::*;

#[subscriber("orders")]
async fn fulfil<T: serde::de::DeserializeOwned>(order: &T) {
    let _ = order;
}

fn main() {}
