//! Every kind of parameter after the message, in mixed orders, and both forms of state.
use rust_stream::prelude::*;
use rust_stream::{Output, State};

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[derive(serde::Serialize)]
struct Receipt {
    order: u64,
}

#[derive(serde::Serialize)]
struct Shipment {
    order: u64,
}

#[derive(Clone)]
struct Ledger {
    name: &'static str,
}

#[derive(Clone)]
struct Limits(u64);

/// Takes all of them.
#[subscriber(
    "orders",
    outputs(shipments = SqsQueue::new("shipments.fifo"), receipts = "receipts")
)]
async fn everything(
    order: &Order,
    receipts: &Output<Receipt>,
    State(ledger): State<Ledger>,
    ctx: &mut Context<'_>,
    limits: State<Limits>,
    shipments: &Output<Shipment>,
) -> Result<(), HandlerOutcome> {
    if order.id > limits.0 .0 {
        return Err(HandlerOutcome::dead_letter(ledger.name));
    }
    ctx.publish(receipts.message(&Receipt { order: order.id }));
    ctx.publish(shipments.message(&Shipment { order: order.id }).group_id("ship"));
    Ok(())
}

/// Reads the context without publishing.
#[subscriber("audit")]
async fn read_only(order: &Order, ctx: &Context<'_>) {
    tracing::info!(order.id, message_id = ctx.message_id(), "seen");
}

/// The context with a full path and a mutable binding; the message destructured.
#[subscriber("totals")]
async fn destructured(Order { id }: &Order, mut ctx: &mut rust_stream::Context<'_>) {
    let _ = (&mut ctx, id);
}

/// One output: `O` is the output itself.
#[subscriber("receipts-in", outputs(receipts = "receipts"))]
async fn one_output(order: &Order, receipts: &Output<Receipt>, ctx: &mut Context<'_>) {
    ctx.publish(receipts.message(&Receipt { order: order.id }));
}

fn handles<T, O, H: Handle<T, O>>(_: &H) {}

fn main() {
    handles::<Order, (Output<Receipt>, Output<Shipment>), _>(&everything);
    handles::<Order, (), _>(&read_only);
    handles::<Order, Output<Receipt>, _>(&one_output);

    let app = RustStream::new(AppInfo::new("every-parameter", "0.1.0"))
        .with_state(Ledger { name: "main" })
        .with_state(Limits(100))
        .with_broker(SqsBroker::in_process(), |b| {
            b.include(everything)
                .include(read_only)
                .include(destructured)
                .include(one_output);
        });
    let _ = app;

    let built = rust_stream::Subscriber::from(everything);
    assert_eq!(built.queue().name(), "orders");
    assert_eq!(built.description(), Some("Takes all of them."));
}
