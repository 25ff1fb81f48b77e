use rust_stream::prelude::*;

#[subscriber("orders")]
struct Fulfil;

fn main() {}
