use rust_stream::prelude::*;

#[subscriber("orders")]
async fn fulfil() -> HandlerOutcome {
    HandlerOutcome::ack()
}

fn main() {}
