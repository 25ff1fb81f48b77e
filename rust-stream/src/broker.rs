//! The [`Broker`] trait, and [`Include`], the scope in which an app mounts its subscribers
//! (`b.include(..)`).
//!
//! Handlers know nothing of brokers: a [`Handle`](crate::Handle) impl runs unchanged on any
//! broker whose subscribers can carry it. [`SqsBroker`](crate::SqsBroker) is the first.

use std::future::Future;

use crate::app::{AppContext, AppInfo, RunError};

/// A message broker an app runs on.
pub trait Broker: Send + 'static {
    /// What [`Include::include`] accepts.
    type Subscriber: Send + 'static;

    /// Learns the app's subscribers as soon as they are included, before the app runs, so that
    /// what the broker does before then (a publisher creating a queue) already follows them.
    fn declare(&self, subscribers: &[Self::Subscriber]) {
        let _ = subscribers;
    }

    /// The AsyncAPI document of an app with these subscribers on this broker; by default, the
    /// app's info and no channel.
    fn asyncapi(&self, info: &AppInfo, subscribers: &[Self::Subscriber]) -> serde_json::Value {
        let _ = subscribers;
        crate::asyncapi::info_only(info)
    }

    /// Runs the subscribers until the app's shutdown is requested, then stops them gracefully.
    fn run(
        self,
        app: AppContext,
        subscribers: Vec<Self::Subscriber>,
    ) -> impl Future<Output = Result<(), RunError>> + Send;
}

/// The subscribers of one broker, gathered by [`RustStream::with_broker`](crate::RustStream::with_broker).
#[derive(Debug)]
pub struct Include<B: Broker> {
    pub(crate) subscribers: Vec<B::Subscriber>,
}

impl<B: Broker> Include<B> {
    pub(crate) fn new() -> Self {
        Self {
            subscribers: Vec::new(),
        }
    }

    /// Mounts a subscriber: a built [`Subscriber`](crate::Subscriber), or a `#[subscriber]` function.
    pub fn include(&mut self, subscriber: impl Into<B::Subscriber>) -> &mut Self {
        self.subscribers.push(subscriber.into());
        self
    }
}
