// A test that calls a misused subscriber as a function shows only the subscriber's own error.
use rust_stream::prelude::*;
use rust_stream::testing::TestContext;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(order: Order, ctx: &mut Context<'_>) -> HandlerOutcome {
    let _ = (order.id, ctx.message_id());
    HandlerOutcome::ack()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut ctx = TestContext::new().build();
    let outcome = fulfil::call(Order { id: 1 }, &mut ctx).await;
    assert_eq!(outcome, HandlerOutcome::ack());
}
