//! The seed's FIFO subscriber, exactly as printed, and its service.
use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
    customer: String,
}

/// Reads the FIFO queue `orders.fifo`. The orders of one customer are one message group, so
/// they arrive in the order they were sent, one at a time.
#[subscriber(SqsQueue::new("orders.fifo"))]
async fn fulfil(order: &Order) -> HandlerOutcome {
    tracing::info!(order.id, order.customer, "order fulfilled");
    HandlerOutcome::ack()
}

fn service(broker: SqsBroker) -> impl App {
    RustStream::new(AppInfo::new("fulfillment", "0.1.0")).with_broker(broker, |b| {
        b.include(fulfil);
    })
}

fn main() {
    let _ = service(SqsBroker::in_process());
    let built = rust_stream::Subscriber::from(fulfil);
    assert_eq!(built.queue().name(), "orders.fifo");
    assert_eq!(
        built.description(),
        Some(
            "Reads the FIFO queue `orders.fifo`. The orders of one customer are one message group, so\n\
             they arrive in the order they were sent, one at a time."
        )
    );
    assert!(built.message_type().ends_with("Order"));
}
