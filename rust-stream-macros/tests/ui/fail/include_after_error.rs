// The service that includes a misused subscriber shows only the subscriber's own error.
use rust_stream::prelude::*;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[subscriber("orders")]
async fn fulfil(order: Order) {
    let _ = order.id;
}

fn service(broker: SqsBroker) -> impl App {
    RustStream::new(AppInfo::new("fulfillment", "0.1.0")).with_broker(broker, |b| {
        b.include(fulfil);
    })
}

fn main() {
    let _ = service(SqsBroker::in_process());
}
