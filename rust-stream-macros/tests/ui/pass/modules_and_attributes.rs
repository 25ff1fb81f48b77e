//! Visibility, modules, `cfg` and other attributes carry over; a trailing comma is fine.
#![deny(missing_docs)]
//! The crate.

mod handlers {
    use rust_stream::prelude::*;

    #[derive(serde::Deserialize)]
    pub(crate) struct Order {
        pub(crate) id: u64,
    }

    /// Visible to the crate.
    #[subscriber("orders",)]
    #[allow(clippy::unused_async)]
    pub(crate) async fn fulfil(order: &Order) {
        let _ = order.id;
    }

    /// Never compiled.
    #[cfg(any())]
    #[subscriber("never")]
    pub(crate) async fn never(order: &Order) {
        let _ = order.id;
    }

    /// Never compiled either: the `cfg` reaches every item the macro writes.
    #[subscriber("never-either")]
    #[cfg(any())]
    pub(crate) async fn never_either(order: &Missing) {
        let _ = order.id;
    }

    /// Public, in a public module.
    pub mod inner {
        /// The message.
        #[derive(serde::Deserialize)]
        pub struct Ping;

        /// Answers pings.
        #[rust_stream::subscriber("pings")]
        pub async fn pong(_ping: &Ping) {}
    }
}

use rust_stream::prelude::*;

fn main() {
    let app = RustStream::new(AppInfo::new("modules", "0.1.0")).with_broker(
        SqsBroker::in_process(),
        |b| {
            b.include(handlers::fulfil).include(handlers::inner::pong);
        },
    );
    let _ = app;
    let _copy = handlers::fulfil;
    let _debug = format!("{:?}", handlers::inner::pong);
}
