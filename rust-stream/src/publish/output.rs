//! A subscriber's typed outputs: [`Output`], where it goes ([`OutputTarget`]), and [`Outputs`],
//! the set a handler returns into.

use std::marker::PhantomData;

use serde::Serialize;

use super::publisher::Publisher;
use crate::describe::Payload;
use crate::handler::outgoing::Outgoing;
use crate::model::{SnsTopic, SqsQueue};

/// A subscriber's output: a queue it publishes `U` values to, sent before its input is
/// acknowledged.
///
/// ```
/// use rust_stream::{Context, Handle, HandlerOutcome, Output};
/// # #[derive(serde::Deserialize)] struct Order { id: u64 }
/// # #[derive(serde::Serialize)] struct Receipt { order: u64 }
///
/// struct Bill;
///
/// impl Handle<Order, Output<Receipt>> for Bill {
///     async fn handle(&self, order: &Order, receipts: &Output<Receipt>, ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
///         ctx.publish(receipts.message(&Receipt { order: order.id }).group_id("billing"));
///         Ok(())
///     }
/// }
/// ```
pub struct Output<U> {
    publisher: Publisher,
    payload: Payload,
    _values: PhantomData<fn(&U)>,
}

impl<U> std::fmt::Debug for Output<U> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Output")
            .field(&self.publisher.destination().name())
            .finish()
    }
}

impl<U> Clone for Output<U> {
    fn clone(&self) -> Self {
        Self {
            publisher: self.publisher.clone(),
            payload: self.payload,
            _values: PhantomData,
        }
    }
}

/// Where an [`Output`] publishes: a queue (its name, or an [`SqsQueue`]) or an SNS topic
/// ([`SnsTopic`]).
///
/// ```
/// use rust_stream::prelude::*;
/// use rust_stream::publish::OutputTarget;
///
/// assert!(matches!(OutputTarget::from("ledger.fifo"), OutputTarget::Queue(_)));
/// assert!(matches!(
///     OutputTarget::from(SnsTopic::new("payments-posted")),
///     OutputTarget::Topic(_)
/// ));
/// ```
#[derive(Debug, Clone)]
pub enum OutputTarget {
    /// A queue: the output sends to it.
    Queue(SqsQueue),
    /// A topic: the output publishes to it, and SNS delivers to its subscriptions.
    Topic(SnsTopic),
}

impl From<SqsQueue> for OutputTarget {
    fn from(queue: SqsQueue) -> Self {
        Self::Queue(queue)
    }
}

impl From<&str> for OutputTarget {
    fn from(queue: &str) -> Self {
        Self::Queue(queue.into())
    }
}

impl From<String> for OutputTarget {
    fn from(queue: String) -> Self {
        Self::Queue(queue.into())
    }
}

impl From<SnsTopic> for OutputTarget {
    fn from(topic: SnsTopic) -> Self {
        Self::Topic(topic)
    }
}

impl<U: Serialize> Output<U> {
    /// An output to a queue (a name or an [`SqsQueue`]) or to an SNS topic (an [`SnsTopic`]):
    /// what the handler gives [`Context::publish`](crate::Context::publish) is sent after it
    /// returns, before its message is acknowledged. A topic output's topic is resolved (or
    /// created, when declared so) with the app's other topics when it starts.
    pub fn new(target: impl Into<OutputTarget>) -> Self {
        let publisher = match target.into() {
            OutputTarget::Queue(queue) => Publisher::new(queue),
            OutputTarget::Topic(topic) => Publisher::for_topic(topic),
        };
        Self {
            publisher,
            payload: Payload::named::<U>(),
            _values: PhantomData,
        }
    }

    /// How the [AsyncAPI document](crate::asyncapi) describes this output's messages (default:
    /// by their type's name). With the `schemars` feature, `Payload::schema::<U>()` gives their
    /// JSON Schema.
    ///
    /// # Panics
    ///
    /// When `payload` describes another type than `U`.
    pub fn payload(mut self, payload: Payload) -> Self {
        payload.check_describes::<U>();
        self.payload = payload;
        self
    }

    /// A message carrying `value`; give it to [`Context::publish`](crate::Context::publish).
    pub fn message(&self, value: &U) -> Outgoing {
        self.publisher.message(value)
    }

    /// Refuses a message that names no group, as [`Publisher::strict_groups`]: on a FIFO queue,
    /// an output of a handler whose input is not from a FIFO queue (and so has no group to take)
    /// must then name one.
    pub fn strict_groups(mut self) -> Self {
        self.publisher = self.publisher.strict_groups();
        self
    }

    /// The publisher underneath.
    pub fn publisher(&self) -> &Publisher {
        &self.publisher
    }
}

/// The outputs a subscriber declares: `()`, one [`Output`], or a tuple of them.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a set of outputs",
    note = "declare outputs as `()`, an `Output<T>`, or a tuple of `Output<T>`s"
)]
pub trait Outputs: Send + Sync + 'static {
    /// The publishers of these outputs.
    fn publishers(&self) -> Vec<Publisher>;

    /// How each output's messages are described in the AsyncAPI document, in the order of
    /// [`publishers`](Self::publishers); by default none is.
    fn payloads(&self) -> Vec<Payload> {
        Vec::new()
    }
}

impl Outputs for () {
    fn publishers(&self) -> Vec<Publisher> {
        Vec::new()
    }
}

impl<U: 'static> Outputs for Output<U> {
    fn publishers(&self) -> Vec<Publisher> {
        vec![self.publisher.clone()]
    }

    fn payloads(&self) -> Vec<Payload> {
        vec![self.payload]
    }
}

macro_rules! tuple_outputs {
    ($($name:ident),+) => {
        impl<$($name: Outputs),+> Outputs for ($($name,)+) {
            #[allow(non_snake_case)]
            fn publishers(&self) -> Vec<Publisher> {
                let ($($name,)+) = self;
                let mut all = Vec::new();
                $(all.extend($name.publishers());)+
                all
            }

            #[allow(non_snake_case)]
            fn payloads(&self) -> Vec<Payload> {
                let ($($name,)+) = self;
                let mut all = Vec::new();
                $(all.extend($name.payloads());)+
                all
            }
        }
    };
}

tuple_outputs!(A);
tuple_outputs!(A, B);
tuple_outputs!(A, B, C);
tuple_outputs!(A, B, C, D);
tuple_outputs!(A, B, C, D, E);
tuple_outputs!(A, B, C, D, E, F);
