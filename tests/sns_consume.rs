//! Consuming what SNS delivers (issue 21, item 4), in process on the paused clock: a topic on the
//! in-process account with an enveloped and a raw SQS subscription, each queue read by the same
//! handler through the in-process broker over that account.
//!
//! - one publish with attributes of every SNS type reaches both queues' handlers as equal values
//!   with equal headers and attributes;
//! - the enveloped copy's `Context::sns` has the topic, SNS's message id, the subject and the
//!   publish time; the raw copy's is `None`;
//! - a message sent to the queue directly is decoded as it is; a queue with no enveloped
//!   subscription does not unwrap an envelope;
//! - a malformed envelope (no `Message`, an attribute that cannot be read), like an envelope
//!   whose message does not decode, is dead-lettered whole with its reason, never handled;
//! - a `traceparent` among the publish's attributes parents the handler's `process` span, from
//!   the envelope and from a raw delivery alike.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rust_stream::account::Account;
use rust_stream::handler::context::SnsNotification;
use rust_stream::model::subscription::{Subscribe, TopicAttributes};
use rust_stream::model::topic::{Publish, PublishBatchEntry};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::{
    MessageAttributeValue, MessageAttributes, ReceiveMessage, SendMessage,
};
use rust_stream::TRACEPARENT_HEADER;
use rust_stream::{SnsTopic, TopicSubscription, DEAD_LETTER_REASON_HEADER};
use serde::{Deserialize, Serialize};
use tracing_subscriber::layer::SubscriberExt;

const TOPIC: &str = "payments-posted";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Payment {
    id: u32,
    amount: String,
}

/// What a handler saw of one message.
#[derive(Debug, Clone)]
struct Seen {
    queue: String,
    payment: Payment,
    headers: BTreeMap<String, String>,
    attributes: MessageAttributes,
    sns: Option<SnsNotification>,
    sent_at: Option<SystemTime>,
}

/// Records every payment it is given, with what its context says, and acks.
#[derive(Clone, Default)]
struct Record(Arc<Mutex<Vec<Seen>>>);

impl Record {
    fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    fn of(&self, queue: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|seen| seen.queue == queue)
            .collect()
    }
}

impl Handle<Payment> for Record {
    async fn handle(
        &self,
        payment: &Payment,
        _outputs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.0.lock().unwrap().push(Seen {
            queue: ctx.queue().to_owned(),
            payment: payment.clone(),
            headers: ctx.headers().clone(),
            attributes: ctx.attributes().clone(),
            sns: ctx.sns().cloned(),
            sent_at: ctx.sent_at(),
        });
        Ok(())
    }
}

/// A topic with two subscribed queues, `<prefix>-enveloped` (raw delivery off) and
/// `<prefix>-raw` (on), each read by `record`; the enveloped one dead-letters to
/// `<prefix>-dlq` at the first failure.
struct Fanned {
    account: Account,
    topic_arn: String,
    enveloped: String,
    raw: String,
    dead_letters: String,
    app: TestApp,
}

impl Fanned {
    async fn start(prefix: &str, record: &Record) -> Self {
        let account = Account::new();
        let broker = SqsBroker::with_account(&account);
        let topic_arn = account
            .create_topic(TOPIC, TopicAttributes::new())
            .await
            .expect("the topic is created");
        let enveloped = format!("{prefix}-enveloped");
        let raw = format!("{prefix}-raw");
        let dead_letters = format!("{prefix}-dlq");
        account
            .create_queue(&dead_letters, Default::default())
            .await
            .expect("the dead-letter queue is created");
        for (queue, raw_delivery) in [(&enveloped, false), (&raw, true)] {
            account
                .create_queue(queue, Default::default())
                .await
                .expect("the queue is created");
            account
                .subscribe(
                    Subscribe::sqs(&topic_arn, account.queue_arn_for(queue))
                        .raw_message_delivery(raw_delivery),
                )
                .await
                .expect("the queue is subscribed");
        }
        let enveloped_queue = SqsQueue::new(&enveloped)
            .subscribed_to(SnsTopic::new(TOPIC))
            .dead_letter(&dead_letters, 1);
        let raw_queue = SqsQueue::new(&raw)
            .subscribed_to(TopicSubscription::new(TOPIC).raw_message_delivery(true));
        let app = TestApp::spawn(RustStream::new(AppInfo::new("ledger", "0")).with_broker(
            broker.clone(),
            |b| {
                b.include(subscriber(enveloped_queue, record.clone()).build());
                b.include(subscriber(raw_queue, record.clone()).build());
            },
        ))
        .await
        .expect("the app starts");
        Self {
            account,
            topic_arn,
            enveloped,
            raw,
            dead_letters,
            app,
        }
    }

    /// Publishes one message through the account's `PublishBatch`; SNS's message id.
    async fn publish(&self, publish: Publish) -> String {
        let mut result = self
            .account
            .publish_batch(&self.topic_arn, vec![PublishBatchEntry::new("0", publish)])
            .await
            .expect("the batch is taken");
        assert!(result.failed.is_empty(), "{:?}", result.failed);
        result.successful.pop().expect("published").1.message_id
    }

    /// The message the dead-letter queue gets.
    async fn dead_letter(&self) -> rust_stream::transport::ReceivedMessage {
        let dlq = self
            .account
            .get_queue_url(&self.dead_letters)
            .await
            .expect("the dead-letter queue exists");
        let mut got = self
            .account
            .receive_message(&dlq, ReceiveMessage::new(1).wait_time_seconds(20))
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "one message is dead-lettered");
        got.pop().unwrap()
    }

    /// Sends `body` to the enveloped queue directly, not through the topic.
    async fn send_directly(&self, body: &str) {
        let url = self.account.get_queue_url(&self.enveloped).await.unwrap();
        self.account
            .send_message(&url, SendMessage::new(body))
            .await
            .expect("sent");
    }
}

fn payment(id: u32) -> Payment {
    Payment {
        id,
        amount: "120.50".to_owned(),
    }
}

fn json(payment: &Payment) -> String {
    serde_json::to_string(payment).unwrap()
}

/// A publish of `payment` with an attribute of every type SNS has.
fn with_every_attribute_type(payment: &Payment) -> Publish {
    Publish::new(json(payment))
        .subject("posted")
        .attribute("kind", MessageAttributeValue::string("card"))
        .attribute("amount", MessageAttributeValue::number("120.5"))
        .attribute(
            "digest",
            MessageAttributeValue::binary(vec![0xde, 0xad, 0x00]),
        )
        .attribute(
            "tags",
            MessageAttributeValue::string_array(r#"["eu","priority",7]"#),
        )
}

#[tokio::test(start_paused = true)]
async fn the_same_handler_gets_equal_values_and_headers_from_an_enveloped_and_a_raw_delivery() {
    let record = Record::default();
    let fanned = Fanned::start("equal", &record).await;
    fanned.publish(with_every_attribute_type(&payment(7))).await;
    eventually("both copies are handled", async || record.seen().len() == 2).await;
    fanned.app.stop().await.unwrap();

    let enveloped = &record.of(&fanned.enveloped)[0];
    let raw = &record.of(&fanned.raw)[0];
    assert_eq!(enveloped.payment, payment(7));
    assert_eq!(raw.payment, enveloped.payment);
    assert_eq!(raw.headers, enveloped.headers);
    assert_eq!(raw.attributes, enveloped.attributes);
    // What those equal headers are: text, the number's text and the array's JSON; the binary
    // attribute is no header, and is among the attributes, decoded, with its type.
    let expected: BTreeMap<String, String> = [
        ("amount", "120.5"),
        ("kind", "card"),
        ("tags", r#"["eu","priority",7]"#),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect();
    assert_eq!(enveloped.headers, expected);
    let attributes = &enveloped.attributes;
    assert_eq!(
        attributes["digest"],
        MessageAttributeValue::binary(vec![0xde, 0xad, 0x00])
    );
    assert_eq!(attributes["tags"].data_type, "String.Array");
    assert_eq!(attributes["amount"].data_type, "Number");
    assert_eq!(attributes.len(), 4, "{:?}", attributes.keys());
}

#[tokio::test(start_paused = true)]
async fn an_enveloped_delivery_has_the_notification_in_its_context_and_a_raw_one_has_none() {
    let record = Record::default();
    let fanned = Fanned::start("context", &record).await;
    let published_at = SystemTime::now();
    let sns_id = fanned.publish(with_every_attribute_type(&payment(8))).await;
    eventually("both copies are handled", async || record.seen().len() == 2).await;
    fanned.app.stop().await.unwrap();

    let enveloped = &record.of(&fanned.enveloped)[0];
    let notification = enveloped
        .sns
        .as_ref()
        .expect("an enveloped delivery has its notification");
    assert_eq!(notification.topic_arn().to_string(), fanned.topic_arn);
    assert_eq!(notification.topic_arn().name(), TOPIC);
    assert_eq!(notification.message_id(), sns_id);
    assert_eq!(notification.subject(), Some("posted"));
    assert_eq!(notification.sequence_number(), None, "a standard topic");
    let timestamp = notification.timestamp().expect("SNS's timestamp reads");
    // The account sent the copy when it accepted the publish: one clock, to the millisecond.
    assert_eq!(Some(timestamp), enveloped.sent_at);
    let off = timestamp
        .duration_since(published_at)
        .unwrap_or_else(|early| early.duration());
    assert!(
        off < Duration::from_secs(5),
        "published at {published_at:?}, stamped {timestamp:?}"
    );
    assert_eq!(notification.envelope().message, json(&payment(8)));
    assert!(notification.envelope().is_unsigned());

    let raw = &record.of(&fanned.raw)[0];
    assert!(
        raw.sns.is_none(),
        "a raw delivery carries no notification: {:?}",
        raw.sns
    );
}

#[tokio::test(start_paused = true)]
async fn a_message_sent_to_the_queue_directly_is_decoded_as_it_is() {
    let record = Record::default();
    let fanned = Fanned::start("direct", &record).await;
    let url = fanned
        .account
        .get_queue_url(&fanned.enveloped)
        .await
        .unwrap();
    fanned
        .account
        .send_message(
            &url,
            SendMessage::new(json(&payment(9)))
                .attribute("kind", MessageAttributeValue::string("transfer")),
        )
        .await
        .unwrap();
    eventually("the direct send is handled", async || {
        record.seen().len() == 1
    })
    .await;
    fanned.app.stop().await.unwrap();
    let seen = &record.seen()[0];
    assert_eq!(seen.queue, fanned.enveloped);
    assert_eq!(seen.payment, payment(9));
    assert_eq!(seen.headers["kind"], "transfer");
    assert!(seen.sns.is_none());
}

/// Reads any JSON and keeps it, with whether it came in an SNS notification.
#[derive(Clone, Default)]
struct Keep(Arc<Mutex<Vec<(serde_json::Value, bool)>>>);

impl Handle<serde_json::Value> for Keep {
    async fn handle(
        &self,
        body: &serde_json::Value,
        _outputs: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.0
            .lock()
            .unwrap()
            .push((body.clone(), ctx.sns().is_some()));
        Ok(())
    }
}

/// A queue that declares no enveloped subscription reads every body as it is, an envelope too
/// (subscribed to the topic out of the app's sight, its handler reads notifications).
#[tokio::test(start_paused = true)]
async fn a_queue_without_an_enveloped_subscription_reads_an_envelope_as_it_is() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let topic_arn = account
        .create_topic(TOPIC, TopicAttributes::new())
        .await
        .unwrap();
    account
        .create_queue("audit", Default::default())
        .await
        .unwrap();
    account
        .subscribe(Subscribe::sqs(&topic_arn, account.queue_arn_for("audit")))
        .await
        .unwrap();
    let kept = Keep::default();
    let app = TestApp::spawn(RustStream::new(AppInfo::new("audit", "0")).with_broker(
        broker.clone(),
        |b| {
            b.include(subscriber(SqsQueue::new("audit"), kept.clone()).build());
        },
    ))
    .await
    .unwrap();
    account
        .publish(&topic_arn, Publish::new(json(&payment(10))))
        .await
        .unwrap();
    eventually("the notification is handled", async || {
        !kept.0.lock().unwrap().is_empty()
    })
    .await;
    app.stop().await.unwrap();
    let (body, in_notification) = kept.0.lock().unwrap()[0].clone();
    assert_eq!(body["Type"], "Notification");
    assert_eq!(body["Message"], json(&payment(10)));
    assert!(!in_notification);
}

/// An envelope's JSON with `Message` left out, or an attribute that cannot be read.
fn broken_envelopes(topic_arn: &str) -> [(String, &'static str); 2] {
    let head = format!(
        r#""Type":"Notification","MessageId":"0f9e7a44-0000-4000-8000-00000000000b","TopicArn":"{topic_arn}","Timestamp":"2026-12-02T04:00:00.000Z""#
    );
    [
        (format!("{{{head}}}"), "`Message` is invalid: it is missing"),
        (
            format!(
                r#"{{{head},"Message":"{{\"id\":11,\"amount\":\"1\"}}","MessageAttributes":{{"digest":{{"Type":"Binary","Value":"not base64!"}}}}}}"#
            ),
            "`MessageAttributes.digest.Value` is invalid",
        ),
    ]
}

#[tokio::test(start_paused = true)]
async fn an_envelope_without_its_message_is_dead_lettered_whole_as_undecodable() {
    let record = Record::default();
    let fanned = Fanned::start("no-message", &record).await;
    let [(broken, reason), _] = broken_envelopes(&fanned.topic_arn);
    fanned.send_directly(&broken).await;
    let letter = fanned.dead_letter().await;
    assert_eq!(letter.body, broken, "the letter is the envelope as it came");
    let said = letter.message_attributes[DEAD_LETTER_REASON_HEADER]
        .string_value
        .clone()
        .unwrap();
    assert!(said.contains(reason), "{said}");
    assert!(
        said.contains("Payment"),
        "the reason names the type: {said}"
    );
    fanned.app.stop().await.unwrap();
    assert!(
        record.seen().is_empty(),
        "never handled: {:?}",
        record.seen()
    );
}

#[tokio::test(start_paused = true)]
async fn an_envelope_with_an_unreadable_attribute_is_dead_lettered_whole_as_undecodable() {
    let record = Record::default();
    let fanned = Fanned::start("bad-attribute", &record).await;
    let [_, (broken, reason)] = broken_envelopes(&fanned.topic_arn);
    fanned.send_directly(&broken).await;
    let letter = fanned.dead_letter().await;
    assert_eq!(letter.body, broken);
    let said = letter.message_attributes[DEAD_LETTER_REASON_HEADER]
        .string_value
        .clone()
        .unwrap();
    assert!(said.contains(reason), "{said}");
    fanned.app.stop().await.unwrap();
    assert!(
        record.seen().is_empty(),
        "never handled: {:?}",
        record.seen()
    );
}

/// A well-formed envelope whose message is not the handler's type is undecodable as any body
/// is: dead-lettered as the envelope it came in, so a redrive brings back what SNS delivered.
#[tokio::test(start_paused = true)]
async fn an_envelope_whose_message_does_not_decode_is_dead_lettered_as_it_came() {
    let record = Record::default();
    let fanned = Fanned::start("wrong-shape", &record).await;
    fanned
        .publish(
            Publish::new(r#"{"id":"twelve"}"#)
                .attribute("kind", MessageAttributeValue::string("card")),
        )
        .await;
    let letter = fanned.dead_letter().await;
    assert!(
        letter.body.contains(r#""Type":"Notification""#),
        "{}",
        letter.body
    );
    assert!(
        letter
            .body
            .contains(r#""kind":{"Type":"String","Value":"card"}"#),
        "{}",
        letter.body
    );
    let said = letter.message_attributes[DEAD_LETTER_REASON_HEADER]
        .string_value
        .clone()
        .unwrap();
    assert!(said.contains("Payment"), "{said}");
    assert!(
        said.contains("invalid type"),
        "serde's error on `Message`: {said}"
    );
    // The raw copy is as undecodable; its queue has no dead-letter queue, so it is retried.
    fanned.app.stop().await.unwrap();
    assert!(
        record.seen().is_empty(),
        "never handled: {:?}",
        record.seen()
    );
}

/// The spans of the process-wide subscriber, exported to memory.
fn spans() -> &'static InMemorySpanExporter {
    static SPANS: OnceLock<InMemorySpanExporter> = OnceLock::new();
    SPANS.get_or_init(|| {
        let spans = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("sns_consume")));
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        spans
    })
}

/// The ended `process` spans of `queue`.
fn process_spans(queue: &str) -> Vec<SpanData> {
    spans()
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|span| {
            span.name == "process"
                && span.attributes.iter().any(|pair| {
                    pair.key.as_str() == "messaging.destination.name"
                        && pair.value == Value::from(queue.to_owned())
                })
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_traceparent_published_to_the_topic_parents_the_handlers_span_either_way() {
    spans();
    let record = Record::default();
    let fanned = Fanned::start("traced", &record).await;
    let trace = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
    let parent = SpanId::from_hex("00f067aa0ba902b7").unwrap();
    fanned
        .publish(Publish::new(json(&payment(13))).attribute(
            TRACEPARENT_HEADER,
            MessageAttributeValue::string(format!("00-{trace}-{parent}-01")),
        ))
        .await;
    eventually("both copies are handled", async || record.seen().len() == 2).await;
    eventually("both process spans ended", async || {
        process_spans(&fanned.enveloped).len() == 1 && process_spans(&fanned.raw).len() == 1
    })
    .await;
    fanned.app.stop().await.unwrap();
    for queue in [&fanned.enveloped, &fanned.raw] {
        let span = &process_spans(queue)[0];
        assert_eq!(
            span.span_context.trace_id(),
            trace,
            "{queue}: the publisher's trace"
        );
        assert_eq!(
            span.parent_span_id, parent,
            "{queue}: the publisher's span is its parent"
        );
        assert!(
            span.parent_span_is_remote,
            "{queue}: its parent came over SNS"
        );
    }
}

/// From a FIFO topic into a FIFO queue, enveloped: the notification has SNS's sequence number,
/// and the group comes with the SQS message, as a header too.
#[tokio::test(start_paused = true)]
async fn a_fifo_topics_notification_has_its_sequence_number_and_the_group() {
    let account = Account::new();
    let broker = SqsBroker::with_account(&account);
    let topic_arn = account
        .create_fifo_topic("payments.fifo", true)
        .await
        .unwrap();
    let queue = "ledger.fifo";
    account
        .create_queue(
            queue,
            BTreeMap::from([("FifoQueue".to_owned(), "true".to_owned())]),
        )
        .await
        .unwrap();
    account
        .subscribe(
            Subscribe::sqs(&topic_arn, account.queue_arn_for(queue)).raw_message_delivery(false),
        )
        .await
        .unwrap();
    let record = Record::default();
    let app = TestApp::spawn(RustStream::new(AppInfo::new("ledger", "0")).with_broker(
        broker.clone(),
        |b| {
            let declared = SqsQueue::new(queue).subscribed_to(SnsTopic::new("payments.fifo"));
            b.include(subscriber(declared, record.clone()).build());
        },
    ))
    .await
    .unwrap();
    let published = account
        .publish(
            &topic_arn,
            Publish::new(json(&payment(14))).group_id("customer-7"),
        )
        .await
        .unwrap();
    eventually("the notification is handled", async || {
        record.seen().len() == 1
    })
    .await;
    app.stop().await.unwrap();
    let seen = &record.seen()[0];
    assert_eq!(seen.payment, payment(14));
    let notification = seen.sns.as_ref().expect("enveloped");
    assert_eq!(
        notification.sequence_number(),
        published.sequence_number.as_deref()
    );
    assert!(notification.sequence_number().is_some());
    assert_eq!(notification.topic_arn().name(), "payments.fifo");
    assert_eq!(
        seen.headers[rust_stream::PARTITION_KEY_HEADER],
        "customer-7"
    );
}
