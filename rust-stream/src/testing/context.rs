//! [`TestContext`]: a [`Context`] for calling a handler in a unit test, without a broker; and
//! [`TestBatch`], a [`BatchContext`] of them for a batch handler.

use std::time::SystemTime;

use crate::handler::batch::BatchContext;
use crate::handler::context::{Context, Delivery, Extensions};
use crate::inbox::InboxTransaction;
use crate::model::envelope::Envelope;
use crate::state::States;
use crate::store::InboxStore;
use crate::transport::{
    MessageAttributeValue, MessageAttributes, ReceivedMessage, SystemAttributes,
};

/// Builds the [`Context`] a handler is called with in a unit test: the message's ids, group,
/// receive count and headers as a queue would have delivered them, and the app's state.
///
/// [`build`](Self::build) gives a `Context<'static>`, which owns all of it: hold it in a `let
/// mut`, lend it to the handler, then read what the handler published with
/// [`Context::published`]. Call a `#[subscriber]` function through the `call` its macro writes,
/// and a `Handle` impl through [`Handle::handle`](crate::Handle::handle).
///
/// ```
/// use rust_stream::prelude::*;
/// use rust_stream::testing::TestContext;
/// use rust_stream::{Output, State};
/// # #[derive(serde::Deserialize)] struct Order { id: u64 }
/// # #[derive(serde::Serialize)] struct Receipt { order: u64, ledger: &'static str }
///
/// #[derive(Clone)]
/// struct Ledger(&'static str);
///
/// /// Bills an order and publishes its receipt to the customer's group.
/// #[subscriber("orders", outputs(receipts = "receipts.fifo"))]
/// async fn bill(
///     order: &Order,
///     State(ledger): State<Ledger>,
///     receipts: &Output<Receipt>,
///     ctx: &mut Context<'_>,
/// ) -> HandlerOutcome {
///     if ctx.sqs().receive_count() > 3 {
///         return HandlerOutcome::dead_letter("billed too often");
///     }
///     let customer = ctx.header("customer").unwrap_or("anonymous").to_owned();
///     ctx.publish(receipts.message(&Receipt { order: order.id, ledger: ledger.0 }).group_id(customer));
///     HandlerOutcome::ack()
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut ctx = TestContext::new()
///     .message_id("m-1")
///     .receive_count(2)
///     .header("customer", "ada")
///     .build();
/// let receipts = Output::new("receipts.fifo");
/// let outcome = bill::call(&Order { id: 7 }, State(Ledger("main")), &receipts, &mut ctx).await;
///
/// assert_eq!(outcome, HandlerOutcome::ack());
/// let published = ctx.published();
/// assert_eq!(published.len(), 1);
/// assert_eq!(published[0].destination().name(), "receipts.fifo");
/// assert_eq!(published[0].body().unwrap(), r#"{"order":7,"ledger":"main"}"#);
/// assert_eq!(published[0].group_id(), Some("ada"));
/// // The input's id, the position, and a digest of the group and body.
/// assert!(published[0].dedup_id().unwrap().starts_with("m-1-0-"));
/// # }
/// ```
///
/// The state a handler reads through its context (a `Handle` impl's `ctx.state::<T>()`, or a
/// `#[subscriber]` called as a `Handle`) is given with [`state`](Self::state).
#[derive(Debug, Clone)]
#[must_use = "call `.build()` for the context"]
pub struct TestContext {
    queue: String,
    message: ReceivedMessage,
    sent_at: Option<SystemTime>,
    attempt: Option<u32>,
    /// Whether the body is an SNS envelope to read, as a queue with an enveloped subscription
    /// reads it.
    reads_envelopes: bool,
    states: States,
    /// What a middleware layer would have put in for the handler.
    extensions: Extensions,
    stopping: tokio_util::sync::CancellationToken,
}

impl Default for TestContext {
    fn default() -> Self {
        Self::new()
    }
}

impl TestContext {
    /// A first delivery from the standard queue `test-queue`, of the message `test-message`,
    /// without group, headers, send time or state.
    pub fn new() -> Self {
        Self {
            queue: "test-queue".to_owned(),
            message: ReceivedMessage {
                message_id: "test-message".to_owned(),
                receipt_handle: String::new(),
                body: String::new(),
                attributes: SystemAttributes::from_iter([("ApproximateReceiveCount", "1")]),
                message_attributes: MessageAttributes::new(),
            },
            sent_at: None,
            attempt: None,
            reads_envelopes: false,
            states: States::default(),
            extensions: Extensions::default(),
            stopping: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// The SQS message id; a FIFO output's deduplication id is made of it.
    pub fn message_id(mut self, message_id: impl Into<String>) -> Self {
        self.message.message_id = message_id.into();
        self
    }

    /// The queue the message came from.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = queue.into();
        self
    }

    /// The message group; the context also shows it in the
    /// [`PARTITION_KEY_HEADER`](crate::PARTITION_KEY_HEADER) header, as it does for a delivery
    /// from a FIFO queue.
    pub fn group_id(self, group_id: impl Into<String>) -> Self {
        self.attribute("MessageGroupId", group_id.into())
    }

    /// The deduplication id (FIFO queues).
    pub fn dedup_id(self, dedup_id: impl Into<String>) -> Self {
        self.attribute("MessageDeduplicationId", dedup_id.into())
    }

    /// The sequence number (FIFO queues).
    pub fn sequence_number(self, sequence_number: impl Into<String>) -> Self {
        self.attribute("SequenceNumber", sequence_number.into())
    }

    /// How many times the message has been received, this time included (default 1).
    pub fn receive_count(self, receive_count: u32) -> Self {
        self.attribute("ApproximateReceiveCount", receive_count.to_string())
    }

    /// Which attempt this is, as [`Context::attempt`] reports it (default: the receive count, as
    /// for a message that was never retried in place): `.attempt(3)` with the default receive
    /// count of 1 is a FIFO message's third try in place.
    pub fn attempt(mut self, attempt: u32) -> Self {
        self.attempt = Some(attempt);
        self
    }

    /// When the message was sent.
    pub fn sent_at(mut self, sent_at: SystemTime) -> Self {
        self.sent_at = Some(sent_at);
        self
    }

    /// A header (a `String` message attribute).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.message
            .message_attributes
            .insert(name.into(), MessageAttributeValue::string(value));
        self
    }

    /// The message came from an SNS topic in this notification envelope, as SNS delivers it to a
    /// queue subscribed with raw message delivery off: [`Context::sns`] has its topic, message
    /// id, subject and timestamp, and the headers and [`Context::attributes`] are the envelope's
    /// `MessageAttributes` (so [`header`](Self::header) no longer shows): what a handler's
    /// context has for a message that came in this envelope.
    ///
    /// ```
    /// use rust_stream::model::envelope::Envelope;
    /// use rust_stream::model::topic::{Publish, TopicArn};
    /// use rust_stream::model::wire::MessageAttributeValue;
    /// use rust_stream::testing::TestContext;
    ///
    /// let topic = TopicArn::new("us-east-1", "000000000000", "payments-posted").unwrap();
    /// let publish = Publish::new(r#"{"amount":120}"#)
    ///     .subject("posted")
    ///     .attribute("kind", MessageAttributeValue::string("card"));
    /// let envelope = Envelope::unsigned(&publish, &topic, "sns-1", 1_764_633_600_123, "sub");
    /// let ctx = TestContext::new().sns(envelope).build();
    ///
    /// let notification = ctx.sns().unwrap();
    /// assert_eq!(notification.topic_arn().name(), "payments-posted");
    /// assert_eq!(notification.message_id(), "sns-1");
    /// assert_eq!(notification.subject(), Some("posted"));
    /// assert_eq!(ctx.header("kind"), Some("card"));
    /// ```
    ///
    /// [`Context::sns`]: crate::Context::sns
    /// [`Context::attributes`]: crate::Context::attributes
    pub fn sns(mut self, envelope: Envelope) -> Self {
        self.message.body = envelope.to_json();
        self.reads_envelopes = true;
        self
    }

    /// Shared state of type `T`, as [`RustStream::with_state`](crate::RustStream::with_state)
    /// registers it on an app.
    pub fn state<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.states.insert(value);
        self
    }

    /// A value of type `T` as a [middleware](crate::handler::middleware) layer puts it in for the handler
    /// ([`Call::insert`](crate::handler::middleware::Call::insert)), read with
    /// [`Context::extension`](crate::Context::extension).
    pub fn extension<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The inbox's open transaction of a store of type `S`, as an
    /// [`idempotent`](crate::SubscriberBuilder::idempotent) subscription's inbox lends it to the
    /// handler: [`Context::transaction::<S>()`](crate::Context::transaction) gives it, so an
    /// inbox handler's whole path, its writes included, is tested as a function. Open it as the
    /// inbox does, with the store's [`claim`](crate::store::InboxStore::claim) (any transaction
    /// of the type will do: [`MemoryStore::begin`](crate::store::memory::MemoryStore::begin),
    /// `store.pool().begin()`); after the handler returns, [`take_transaction`] gives it back, to
    /// read the handler's writes through it, or to commit it
    /// ([`InboxStore::complete`](crate::store::InboxStore::complete)) or drop it (a rollback).
    ///
    /// ```
    /// use rust_stream::prelude::*;
    /// use rust_stream::store::memory::MemoryStore;
    /// use rust_stream::testing::{take_transaction, TestContext};
    /// use std::sync::{Arc, Mutex};
    /// # #[derive(serde::Deserialize)] struct Payment { id: String, cents: i64 }
    ///
    /// /// Posts a payment to a ledger, in the inbox's transaction.
    /// struct Post(Arc<Mutex<Vec<String>>>);
    ///
    /// impl Handle<Payment> for Post {
    ///     async fn handle(&self, payment: &Payment, _: &(), ctx: &mut Context<'_>) -> Result<(), HandlerOutcome> {
    ///         if payment.cents <= 0 {
    ///             return Err(HandlerOutcome::dead_letter("nothing to post"));
    ///         }
    ///         let mut transaction = ctx
    ///             .transaction::<MemoryStore>()
    ///             .await
    ///             .map_err(|error| HandlerOutcome::dead_letter(error.to_string()))?;
    ///         let (ledger, id) = (self.0.clone(), payment.id.clone());
    ///         transaction.on_commit(move || ledger.lock().unwrap().push(id));
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let store = MemoryStore::new();
    /// let ledger = Arc::new(Mutex::new(Vec::new()));
    /// let mut ctx = TestContext::new()
    ///     .transaction::<MemoryStore>(store.begin())
    ///     .build();
    /// let payment = Payment { id: "pay-1".into(), cents: 120 };
    ///
    /// assert_eq!(Post(ledger.clone()).handle(&payment, &(), &mut ctx).await, Ok(()));
    /// assert!(ledger.lock().unwrap().is_empty(), "nothing is written before the commit");
    /// store.commit(take_transaction::<MemoryStore>(&ctx).unwrap());
    /// assert_eq!(*ledger.lock().unwrap(), ["pay-1"]);
    /// # }
    /// ```
    pub fn transaction<S: InboxStore>(mut self, transaction: S::Transaction) -> Self {
        self.extensions.insert(InboxTransaction::new(transaction));
        self
    }

    /// The context as the app has begun to stop:
    /// [`Context::is_stopping`](crate::Context::is_stopping) is true and
    /// [`Context::stopping`](crate::Context::stopping) resolves at once.
    pub fn stopping(self) -> Self {
        self.stopping.cancel();
        self
    }

    /// The context, owning the message and the state.
    pub fn build(self) -> Context<'static> {
        // The engine's own reading of a received message, so a test sees what a handler would.
        let mut delivery = Delivery::new(
            &self.queue.as_str().into(),
            self.message,
            self.reads_envelopes,
        );
        delivery.sent_at = self.sent_at;
        let attempt = self
            .attempt
            .unwrap_or_else(|| crate::retry::attempts(delivery.receive_count, 1));
        Context::owned(
            delivery,
            attempt,
            (self.states, self.extensions),
            self.stopping,
        )
    }

    fn attribute(mut self, name: &str, value: String) -> Self {
        self.message.attributes.insert(name, value);
        self
    }
}

/// The inbox transaction of store type `S` that [`TestContext::transaction`] gave `ctx`, taken
/// back once the handler has returned, as the inbox takes it to commit or roll back: `None` when
/// the context was given none of that type, it was taken already, or the handler still holds it
/// (a [`Transaction`](crate::inbox::Transaction) kept past its return, which the inbox would
/// retry the message for).
pub fn take_transaction<S: InboxStore>(ctx: &Context<'_>) -> Option<S::Transaction> {
    ctx.take_transaction::<S>()
}

/// Builds the [`BatchContext`] a batch handler is called with in a unit test: a
/// [`TestContext`] for each message of the batch, in order, and the app's state.
///
/// [`build`](Self::build) lends the context: hold it in a `let mut`, lend it to the handler,
/// then read what the handler published for each message with `ctx[i].published()`.
///
/// ```
/// use rust_stream::handler::batch::{BatchContext, BatchOutcome};
/// use rust_stream::prelude::*;
/// use rust_stream::testing::{TestBatch, TestContext};
/// use rust_stream::Output;
/// # #[derive(serde::Deserialize)] struct Posting { cents: i64 }
/// # #[derive(serde::Serialize)] struct Receipt { cents: i64 }
///
/// #[subscriber("postings", batch(max = 10, window = 100ms), outputs(receipts = "receipts"))]
/// async fn post(postings: &[Posting], receipts: &Output<Receipt>, ctx: &mut BatchContext<'_>) -> BatchOutcome {
///     let mut outcome = BatchOutcome::ack();
///     for (index, posting) in postings.iter().enumerate() {
///         if posting.cents == 0 {
///             outcome.set(index, HandlerOutcome::dead_letter("nothing to post"));
///         } else {
///             ctx[index].publish(receipts.message(&Receipt { cents: posting.cents }));
///         }
///     }
///     outcome
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let batch = TestBatch::new([
///     TestContext::new().message_id("m-1"),
///     TestContext::new().message_id("m-2"),
/// ]);
/// let mut ctx = batch.build();
/// let receipts = Output::new("receipts");
/// let outcome = post::call(&[Posting { cents: 5 }, Posting { cents: 0 }], &receipts, &mut ctx).await;
///
/// assert_eq!(outcome.outcome_of(0), &HandlerOutcome::ack());
/// assert_eq!(outcome.outcome_of(1), &HandlerOutcome::dead_letter("nothing to post"));
/// assert_eq!(ctx[0].published()[0].body().unwrap(), r#"{"cents":5}"#);
/// assert!(ctx[1].published().is_empty());
/// # }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use = "call `.build()` for the context"]
pub struct TestBatch {
    messages: Vec<TestContext>,
}

impl TestBatch {
    /// A batch of these messages, in order.
    pub fn new(messages: impl IntoIterator<Item = TestContext>) -> Self {
        Self {
            messages: messages.into_iter().collect(),
        }
    }

    /// Shared state of type `T`, as [`RustStream::with_state`](crate::RustStream::with_state)
    /// registers it on an app: read through the batch context and each message's.
    pub fn state<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.messages = self
            .messages
            .into_iter()
            .map(|message| message.state(value.clone()))
            .collect();
        self
    }

    /// The batch as the app has begun to stop: the batch context and each message's say so.
    pub fn stopping(mut self) -> Self {
        self.messages = self
            .messages
            .into_iter()
            .map(TestContext::stopping)
            .collect();
        self
    }

    /// The batch context: a [`Context`] for each message, in order (collected as
    /// `BatchContext`'s `FromIterator` does, reading the state and the stop from the first).
    pub fn build(&self) -> BatchContext<'static> {
        self.messages
            .iter()
            .cloned()
            .map(TestContext::build)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::headers::PARTITION_KEY_HEADER;

    #[test]
    fn the_context_reads_the_message_as_the_engine_would() {
        let sent_at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_234);
        let ctx = TestContext::new()
            .message_id("m-1")
            .queue("orders.fifo")
            .group_id("customer-7")
            .dedup_id("d-1")
            .sequence_number("18")
            .receive_count(3)
            .sent_at(sent_at)
            .header("trace", "t-1")
            .state(7_u64)
            .extension("tenant-1")
            .build();
        assert_eq!(ctx.message_id(), "m-1");
        assert_eq!(ctx.queue(), "orders.fifo");
        assert_eq!(ctx.sqs().group_id(), Some("customer-7"));
        assert_eq!(ctx.header(PARTITION_KEY_HEADER), Some("customer-7"));
        assert_eq!(ctx.sqs().dedup_id(), Some("d-1"));
        assert_eq!(ctx.sqs().sequence_number(), Some("18"));
        assert_eq!(ctx.sqs().receive_count(), 3);
        assert_eq!(ctx.attempt(), 3, "each receive was an attempt");
        assert_eq!(ctx.sent_at(), Some(sent_at));
        assert_eq!(ctx.header("trace"), Some("t-1"));
        assert_eq!(ctx.state::<u64>().map(|state| state.0), Some(7));
        assert_eq!(ctx.extension::<&str>(), Some(&"tenant-1"));
        assert!(ctx.published().is_empty());
    }

    #[test]
    fn a_new_context_is_a_first_delivery_without_group_headers_or_state() {
        let ctx = TestContext::new().build();
        assert_eq!(ctx.message_id(), "test-message");
        assert_eq!(ctx.queue(), "test-queue");
        assert_eq!(ctx.sqs().receive_count(), 1);
        assert_eq!(ctx.attempt(), 1);
        assert_eq!(ctx.sqs().group_id(), None);
        assert!(ctx.headers().is_empty());
        assert_eq!(ctx.sent_at(), None);
        assert!(ctx.state::<u64>().is_none());
        assert!(ctx.extension::<u64>().is_none());
    }

    #[test]
    fn a_test_batch_holds_its_messages_in_order_with_the_state_and_the_stop() {
        let batch = TestBatch::new([
            TestContext::new().message_id("m-1"),
            TestContext::new().message_id("m-2").group_id("g"),
        ])
        .state(7_u64)
        .stopping();
        let ctx = batch.build();
        let ids: Vec<&str> = ctx.iter().map(Context::message_id).collect();
        assert_eq!(ids, ["m-1", "m-2"]);
        assert_eq!(ctx[1].sqs().group_id(), Some("g"));
        assert_eq!(ctx.state::<u64>().map(|state| state.0), Some(7));
        assert_eq!(ctx[0].state::<u64>().map(|state| state.0), Some(7));
        assert!(ctx.is_stopping() && ctx[1].is_stopping());
        assert!(TestBatch::default().build().is_empty());
    }

    #[test]
    fn the_attempt_is_set_apart_from_the_receive_count() {
        let ctx = TestContext::new().group_id("g").attempt(3).build();
        assert_eq!((ctx.sqs().receive_count(), ctx.attempt()), (1, 3));
    }
}
