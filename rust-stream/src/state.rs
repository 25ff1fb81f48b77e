//! Shared application state: values registered on the app with
//! [`RustStream::with_state`](crate::RustStream::with_state) and read by handlers, like axum's
//! `State`.
//!
//! ```
//! use rust_stream::prelude::*;
//! use rust_stream::State;
//! # #[derive(serde::Deserialize)] struct Order { id: u64 }
//!
//! #[derive(Clone)]
//! struct Ledger { name: &'static str }
//!
//! struct Book;
//!
//! impl Handle<Order> for Book {
//!     async fn handle(&self, order: &Order, _outs: &(), ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
//!         let State(ledger) = ctx.state::<Ledger>().expect("registered on the app");
//!         tracing::info!(order.id, ledger = ledger.name, "booked");
//!         Ok(())
//!     }
//! }
//!
//! let app = RustStream::new(AppInfo::new("books", "0.1.0"))
//!     .with_state(Ledger { name: "main" })
//!     .with_broker(SqsBroker::in_process(), |b| {
//!         b.include(subscriber("orders", Book).requires_state::<Ledger>().build());
//!     });
//! # let _ = app;
//! ```

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

/// A value of the app's shared state, as a handler receives it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State<T>(pub T);

/// The app's shared state, by type.
#[derive(Debug, Clone, Default)]
pub struct States {
    values: HashMap<TypeId, (Arc<dyn Any + Send + Sync>, &'static str)>,
}

impl States {
    pub(crate) fn insert<T: Clone + Send + Sync + 'static>(&mut self, value: T) {
        self.values.insert(
            TypeId::of::<T>(),
            (Arc::new(value), std::any::type_name::<T>()),
        );
    }

    /// The value of type `T`, if the app registered one.
    pub fn get<T: Clone + Send + Sync + 'static>(&self) -> Option<State<T>> {
        let (value, _) = self.values.get(&TypeId::of::<T>())?;
        value.downcast_ref::<T>().cloned().map(State)
    }

    pub(crate) fn contains(&self, type_id: TypeId) -> bool {
        self.values.contains_key(&type_id)
    }
}

/// A state type a subscriber needs, checked when the app starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requirement {
    pub(crate) type_id: TypeId,
    pub(crate) type_name: &'static str,
}

impl Requirement {
    pub(crate) fn of<T: 'static>() -> Self {
        Self {
            type_id: TypeId::of::<T>(),
            type_name: std::any::type_name::<T>(),
        }
    }
}
