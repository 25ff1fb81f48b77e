//! A subscriber called as a function from a test: `name::call(..)` takes the parameters as
//! written, in the function's order, and returns what the function returns.
use rust_stream::prelude::*;
use rust_stream::testing::TestContext;
use rust_stream::{Output, State};

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[derive(serde::Serialize)]
struct Receipt {
    order: u64,
}

#[derive(Clone)]
struct Ledger {
    name: &'static str,
}

#[derive(Clone)]
struct Limit(u64);

mod handlers {
    use rust_stream::prelude::*;

    /// Visible to the crate, and so is its `call`.
    #[subscriber("audit")]
    #[tracing::instrument(skip_all)]
    pub(crate) async fn audit(order: &super::Order, ctx: &Context<'_>) -> Result<(), String> {
        if ctx.sqs().receive_count() > 1 {
            return Err(format!("order {} audited before", order.id));
        }
        Ok(())
    }
}

/// Every kind of parameter, patterns included.
#[subscriber("orders", outputs(receipts = "receipts"))]
async fn bill(
    Order { id }: &Order,
    State(ledger): State<Ledger>,
    receipts: &Output<Receipt>,
    mut ctx: &mut Context<'_>,
    limit: State<Limit>,
) -> Result<(), HandlerOutcome> {
    if *id > limit.0 .0 {
        return Err(HandlerOutcome::dead_letter(ledger.name));
    }
    let ctx = &mut ctx;
    ctx.publish(receipts.message(&Receipt { order: *id }));
    Ok(())
}

/// A parameter named like the function, one without a name, and no return type.
#[subscriber("orders-seen")]
async fn order(order: &Order, _: &Context<'_>) {
    let _ = order.id;
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let receipts = Output::new("receipts");
    let mut ctx = TestContext::new().message_id("m-1").build();
    let returned = bill::call(
        &Order { id: 7 },
        State(Ledger { name: "main" }),
        &receipts,
        &mut ctx,
        State(Limit(100)),
    )
    .await;
    assert_eq!(returned, Ok(()));
    assert_eq!(ctx.published().len(), 1);

    let returned: Result<(), HandlerOutcome> = bill::call(
        &Order { id: 700 },
        State(Ledger { name: "main" }),
        &receipts,
        &mut TestContext::new().build(),
        State(Limit(100)),
    )
    .await;
    assert_eq!(returned, Err(HandlerOutcome::dead_letter("main")));

    let again = TestContext::new().receive_count(2).build();
    let returned: Result<(), String> = handlers::audit::call(&Order { id: 1 }, &again).await;
    assert_eq!(returned, Err("order 1 audited before".to_owned()));

    let () = order::call(&Order { id: 2 }, &TestContext::new().build()).await;
}
