//! The AsyncAPI 3.0 document of an app: what it receives, what it sends, on which queues.
//!
//! ```
//! use rust_stream::prelude::*;
//! # #[derive(serde::Deserialize)] struct Order { id: u64 }
//!
//! struct Fulfil;
//!
//! impl Handle<Order> for Fulfil {
//!     async fn handle(&self, order: &Order, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
//!         tracing::info!(order.id, "order fulfilled");
//!         Ok(())
//!     }
//! }
//!
//! let info = AppInfo::new("fulfillment", "0.1.0").with_description("Ships orders.");
//! let app = RustStream::new(info).with_broker(SqsBroker::in_process(), |b| {
//!     let orders = SqsQueue::new("orders.fifo").dead_letter("orders-dlq.fifo", 5);
//!     b.include(subscriber(orders, Fulfil).description("Ships an order.").build());
//! });
//!
//! let document = app.asyncapi();
//! assert_eq!(document["asyncapi"], "3.0.0");
//! assert_eq!(document["info"]["description"], "Ships orders.");
//! let receive = &document["operations"]["Fulfil"];
//! assert_eq!(receive["action"], "receive");
//! assert_eq!(receive["description"], "Ships an order.");
//! let queue = &document["channels"]["orders.fifo"]["bindings"]["sqs"]["queue"];
//! assert_eq!(queue["fifoQueue"], true);
//! assert_eq!(queue["redrivePolicy"]["maxReceiveCount"], 5);
//! println!("{}", serde_json::to_string_pretty(&document).unwrap());
//! ```
//!
//! [`App::asyncapi`](crate::App::asyncapi) writes it from what the app declares, before it runs
//! and without a network call. Only the app's own queues are in it, as it declares them: another
//! app built on the same broker is not, even where it names the same queue. Publishers made with
//! [`SqsBroker::publisher`](crate::SqsBroker::publisher) belong to the broker, so every app on the
//! broker lists their queues, and their declarations join the app's.
//!
//! - `info`: the [`AppInfo`]: name (the title), version, description.
//! - `channels`: one per queue, named and addressed by the queue's name, with its SQS binding
//!   (version 0.2.0, the one AsyncAPI 3.0.0 defines): the queue's name, whether it is FIFO, the
//!   visibility timeout and dead-letter queue (with `maxReceiveCount`) when declared, and the
//!   messages that travel on it.
//! - topics: a channel per SNS topic the app's queues are subscribed to
//!   ([`SqsQueue::subscribed_to`](crate::SqsQueue::subscribed_to)), keyed `sns.TOPIC` (no queue's
//!   channel can take that key) and addressed by the topic's name, with its SNS binding (version
//!   0.1.0, the one AsyncAPI 3.0.0 defines: the name, `ordering` standard or FIFO and
//!   content-based deduplication), and a `receive` operation `deliver.TOPIC` whose binding lists
//!   the subscribed queues as its `consumers` (protocol `sqs`, the queue by its SQS binding's
//!   name, raw delivery, the filter policy and its scope). The binding's schema takes a filter
//!   policy only when each value is a string, a list of strings or an object; a policy with
//!   operators in a list (`{"amount": [{"numeric": [">", 0]}]}`) is written whole as
//!   `x-filterPolicy` instead, which keeps the document valid.
//! - `operations`: a `receive` per subscription, named after its handler (the function of a
//!   `#[subscriber]`; its full path in `x-rust-handler`) and described by its doc comment
//!   ([`SubscriberBuilder::description`](crate::SubscriberBuilder::description)); a
//!   `send` per output of a subscription (`HANDLER.QUEUE`), per dead-letter queue
//!   (`HANDLER.dead_letter`: the consumer moves failing messages there itself), and per queue a
//!   publisher made with [`SqsBroker::publisher`](crate::SqsBroker::publisher) sends to
//!   (`publish.QUEUE`; such a publisher takes any type, so its messages are listed only when it
//!   declares them with [`Publisher::payload`](crate::Publisher::payload)).
//! - scheduled messages: the `publish.QUEUE` (or topic) operation of a queue or topic an
//!   [outbox](crate::outbox) made with a broker's publisher sends to says, in its description
//!   and as `x-rust-stream-scheduled: true`, that its messages may be scheduled (an outbox
//!   message may be due at any time). The document knows of the outboxes made on the broker,
//!   not of what each message asks for. It does not mark a subscription's outputs that its
//!   handler schedules through its inbox's outbox (`Outgoing::delay` beyond SQS's 900 s): that
//!   is decided message by message, where the document cannot see.
//! - messages: named after their Rust type (the full path in `x-rust-type`), with the codec's
//!   content type. With the `schemars` feature, a payload whose type implements
//!   `schemars::JsonSchema` is its JSON Schema (draft 7, the types it uses under
//!   `components/schemas`); otherwise the payload names the type.
//! - routed queues ([`crate::routing`]): the channel of a queue whose subscribers are routed by
//!   type lists the message of each (AsyncAPI 3's `messages` map: a message on the channel is one
//!   of them, what AsyncAPI 2 wrote as `oneOf`), with a `receive` operation per handler; a message
//!   taken by its type has a `headers` schema whose type header (`rust_stream.type`, or the name
//!   the broker gives it) is the type's short name as a `const`.
//!
//! A `#[subscriber]` picks up the schemas of its message and outputs by itself. A subscriber, an
//! [`Output`](crate::Output) made by hand or a broker's publisher says it with
//! `.payload(Payload::schema::<T>())` (or `Payload::named::<T>()` without the `schemars` feature).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::app::AppInfo;
use crate::describe::short_name;
pub use crate::describe::Payload;
use crate::model::filter_policy::FilterPolicyScope;
use crate::model::{Destination, SnsTopic, SqsQueue};
use crate::subscriber::Subscriber;

pub use crate::broker::ASYNCAPI_VERSION;

/// The version of the SQS bindings used: the one the AsyncAPI 3.0.0 schema knows.
pub const SQS_BINDING_VERSION: &str = "0.2.0";

/// The version of the SNS bindings used: the one the AsyncAPI 3.0.0 schema knows.
pub const SNS_BINDING_VERSION: &str = "0.1.0";

/// `base`, or `base-2`, `base-3`... when taken.
fn unique(base: String, taken: impl Fn(&str) -> bool) -> String {
    if !taken(&base) {
        return base;
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|name| !taken(name))
        .expect("a free name")
}

/// One queue of the document.
struct Channel {
    queue: SqsQueue,
    /// Messages by key: the message object.
    messages: BTreeMap<String, Value>,
}

/// One topic of the document: the topic as first declared, its messages, and the app's queues
/// subscribed to it (the consumers of its SNS binding).
struct TopicChannel {
    topic: SnsTopic,
    messages: BTreeMap<String, Value>,
    consumers: Vec<Value>,
    /// The receive operations of the subscriptions fed by the topic: the delivery operation
    /// lists their messages.
    message_refs: Vec<Value>,
}

/// Writes the document of an app on SQS.
pub(crate) struct Writer<'a> {
    info: &'a AppInfo,
    /// Each queue as the app's declarations and the broker's publishers' together describe it.
    merged: &'a dyn Fn(&SqsQueue) -> SqsQueue,
    channels: BTreeMap<String, Channel>,
    /// Topics by name.
    topics: BTreeMap<String, TopicChannel>,
    operations: Map<String, Value>,
    /// The queues the app routes by type, and the header that names a message's type there.
    routed: Vec<String>,
    type_header: String,
    /// The queues and topics an outbox sends to (a topic's name `topic:` prefixed).
    outboxes: std::collections::BTreeSet<String>,
    #[cfg(feature = "schemars")]
    generator: schemars::SchemaGenerator,
}

/// What a send operation of a queue or topic an outbox sends to adds to its description.
const SCHEDULED: &str = " An outbox sends to it, so its messages may be scheduled: one may \
                         arrive long after it was written, at the time its writer chose.";

impl<'a> Writer<'a> {
    pub(crate) fn new(info: &'a AppInfo, merged: &'a dyn Fn(&SqsQueue) -> SqsQueue) -> Self {
        Self {
            info,
            merged,
            channels: BTreeMap::new(),
            topics: BTreeMap::new(),
            operations: Map::new(),
            routed: Vec::new(),
            type_header: crate::model::headers::TYPE_HEADER.to_owned(),
            outboxes: std::collections::BTreeSet::new(),
            #[cfg(feature = "schemars")]
            generator: {
                let mut settings = schemars::generate::SchemaSettings::draft07();
                // Shared types go where the document's `$ref`s find them.
                settings.definitions_path = "/components/schemas".into();
                settings.into_generator()
            },
        }
    }

    /// Says which queues and topics an outbox sends to, by their unique names
    /// (`Destination::unique_name`): the operations of the broker's publishers that send there
    /// note that messages may be scheduled.
    pub(crate) fn outboxes(mut self, outboxes: std::collections::BTreeSet<String>) -> Self {
        self.outboxes = outboxes;
        self
    }

    /// Notes on `send`, the operation of a broker's publisher to the queue or topic of unique
    /// name `name`, that its messages may be scheduled, when an outbox sends there.
    fn note_schedule(&self, name: &str, send: &mut Value) {
        if self.outboxes.contains(name) {
            let description = send["description"].as_str().unwrap_or_default().to_owned();
            send["description"] = json!(format!("{description}{SCHEDULED}"));
            send["x-rust-stream-scheduled"] = json!(true);
        }
    }

    /// Says which queues the app routes by type ([`crate::routing`]) and the header that names a
    /// message's type there: each message a subscriber of such a queue takes by type says the
    /// header's value in its `headers` schema.
    pub(crate) fn routed(&mut self, queues: Vec<String>, type_header: &str) {
        self.routed = queues;
        self.type_header = type_header.to_owned();
    }

    /// A subscription: its receive operation, its topics' deliveries, its dead-letter queue's
    /// and its outputs'.
    pub(crate) fn subscriber(&mut self, subscriber: &Subscriber) {
        let handler = short_name(subscriber.handler_type);
        let id = unique(handler, |name| self.operations.contains_key(name));
        let queue = subscriber.queue.name.clone();
        let place = Place::Queue(&queue);
        let message = self.message(&place, &subscriber.payload, subscriber.content_type);
        if self.routed.contains(&queue) && subscriber.filter.is_none() {
            let header = self.type_header.clone();
            let type_name = short_name(subscriber.message_type);
            self.messages_of(&place)
                .get_mut(&message)
                .expect("just added")["headers"] = json!({
                "type": "object",
                "properties": { header.as_str(): { "type": "string", "const": type_name } },
                "required": [header],
            });
        }
        let mut receive = json!({
            "action": "receive",
            "channel": { "$ref": place.channel_ref() },
            "messages": [{ "$ref": place.message_ref(&message) }],
            "x-rust-handler": subscriber.handler_type,
        });
        if let Some(description) = &subscriber.description {
            receive["description"] = json!(description);
        }
        self.operations.insert(id.clone(), receive);

        let merged = (self.merged)(&subscriber.queue);
        for subscription in merged.subscriptions() {
            let topic = Place::Topic(subscription.topic());
            // Queues whose handlers take the same type share the topic's message.
            let key = self.message(&topic, &subscriber.payload, subscriber.content_type);
            let reference = json!({ "$ref": topic.message_ref(&key) });
            let channel = self.topic_channel(subscription.topic());
            if !channel.message_refs.contains(&reference) {
                channel.message_refs.push(reference);
            }
            channel.consumers.push(sns_consumer(&queue, subscription));
        }
        if let Some(dead_letter) = &merged.dead_letter {
            let place = Place::Queue(&dead_letter.queue);
            let message = self.message(&place, &subscriber.payload, subscriber.content_type);
            let send = json!({
                "action": "send",
                "channel": { "$ref": place.channel_ref() },
                "messages": [{ "$ref": place.message_ref(&message) }],
                "description": format!(
                    "Messages of `{queue}` that fail {} attempts, that the handler dead-letters, \
                     or that do not decode, moved here by the consumer.",
                    dead_letter.max_receive_count
                ),
            });
            let send_id = unique(format!("{id}.dead_letter"), |name| {
                self.operations.contains_key(name)
            });
            self.operations.insert(send_id, send);
        }

        // An `Outputs` of one's own may not say its payloads; then none is shown, rather than
        // one against the wrong queue.
        let payloads = &subscriber.output_payloads;
        let described = payloads.len() == subscriber.outputs.len();
        for (index, output) in subscriber.outputs.iter().enumerate() {
            let place = match output.destination() {
                Destination::Topic(topic) => Place::Topic(topic),
                Destination::Queue(queue) => Place::Queue(&queue.name),
            };
            let payload = payloads.get(index).filter(|_| described);
            let message = payload.map(|payload| {
                self.message(
                    &place,
                    payload,
                    crate::codec::Codec::content_type(&crate::codec::Json),
                )
            });
            self.messages_of(&place);
            let mut send = json!({
                "action": "send",
                "channel": { "$ref": place.channel_ref() },
                "description": format!("Published as part of handling a message of `{queue}`."),
            });
            if let Some(message) = message {
                send["messages"] = json!([{ "$ref": place.message_ref(&message) }]);
            }
            let send_id = unique(format!("{id}.{}", place.name()), |name| {
                self.operations.contains_key(name)
            });
            self.operations.insert(send_id, send);
        }
    }

    /// A queue a publisher made from the broker sends to, with the payloads its publishers said
    /// they send (`Publisher::payload`), in JSON as such a publisher's `message` encodes them.
    pub(crate) fn publisher(&mut self, queue: &SqsQueue, payloads: &[Payload]) {
        let place = Place::Queue(&queue.name);
        self.messages_of(&place);
        let mut send = json!({
            "action": "send",
            "channel": { "$ref": place.channel_ref() },
            "description": "Sent by a publisher made with `SqsBroker::publisher`, which takes \
                            messages of any type.",
        });
        if !payloads.is_empty() {
            let content_type = crate::codec::Codec::content_type(&crate::codec::Json);
            let messages: Vec<Value> = payloads
                .iter()
                .map(|payload| {
                    let message = self.message(&place, payload, content_type);
                    json!({ "$ref": place.message_ref(&message) })
                })
                .collect();
            send["messages"] = json!(messages);
            send["description"] = json!(
                "Sent by a publisher made with `SqsBroker::publisher`, with the payloads it \
                 declares."
            );
        }
        self.note_schedule(&queue.name, &mut send);
        let id = unique(format!("publish.{}", queue.name), |name| {
            self.operations.contains_key(name)
        });
        self.operations.insert(id, send);
    }

    /// A topic a publisher made from the broker (`SqsBroker::topic`) publishes to: a send
    /// operation on the topic's channel. Such a publisher takes any type, so no message is listed.
    pub(crate) fn topic_publisher(&mut self, topic: &SnsTopic) {
        let place = Place::Topic(topic);
        self.messages_of(&place);
        let mut send = json!({
            "action": "send",
            "channel": { "$ref": place.channel_ref() },
            "description": "Published by a publisher made with `SqsBroker::topic`, which takes \
                            messages of any type.",
        });
        self.note_schedule(&format!("topic:{}", topic.name), &mut send);
        let id = unique(format!("publish.{}", place.name()), |name| {
            self.operations.contains_key(name)
        });
        self.operations.insert(id, send);
    }

    /// The channel of `queue`, made on first use.
    fn channel(&mut self, queue: &str) -> &mut Channel {
        let merged = self.merged;
        self.channels
            .entry(queue.to_owned())
            .or_insert_with(|| Channel {
                queue: merged(&SqsQueue::new(queue)),
                messages: BTreeMap::new(),
            })
    }

    /// The channel of `topic`, made on first use with the topic as first declared.
    fn topic_channel(&mut self, topic: &SnsTopic) -> &mut TopicChannel {
        self.topics
            .entry(topic.name().to_owned())
            .or_insert_with(|| TopicChannel {
                topic: topic.clone(),
                messages: BTreeMap::new(),
                consumers: Vec::new(),
                message_refs: Vec::new(),
            })
    }

    /// The messages of the channel of `place`, which is made on first use.
    fn messages_of(&mut self, place: &Place<'_>) -> &mut BTreeMap<String, Value> {
        match place {
            Place::Queue(queue) => &mut self.channel(queue).messages,
            Place::Topic(topic) => &mut self.topic_channel(topic).messages,
        }
    }

    /// Adds the message `payload` to the channel of `place`, once; answers its key there.
    fn message(
        &mut self,
        place: &Place<'_>,
        payload: &Payload,
        content_type: Option<&str>,
    ) -> String {
        let messages = self.messages_of(place);
        let same = |message: &Value| {
            message["x-rust-type"] == payload.type_name
                && message.get("contentType").and_then(Value::as_str) == content_type
        };
        if let Some((key, _)) = messages.iter().find(|(_, message)| same(message)) {
            return key.clone();
        }
        let key = unique(short_name(payload.type_name), |name| {
            messages.contains_key(name)
        });
        let mut message = json!({
            "name": key,
            "x-rust-type": payload.type_name,
        });
        if let Some(content_type) = content_type {
            message["contentType"] = json!(content_type);
        }
        message["payload"] = self.payload(payload);
        self.messages_of(place).insert(key.clone(), message);
        key
    }

    /// The payload's schema: its JSON Schema when known, else a schema that names the type.
    fn payload(&mut self, payload: &Payload) -> Value {
        #[cfg(feature = "schemars")]
        if let Some(schema) = payload.schema {
            let mut schema = schema(&mut self.generator);
            for transform in self.generator.transforms_mut() {
                transform.transform(&mut schema);
            }
            return schema.to_value();
        }
        json!({
            "title": short_name(payload.type_name),
            "description": format!("A `{}`.", payload.type_name),
        })
    }

    /// The document.
    pub(crate) fn finish(mut self) -> Value {
        let info = self.info.asyncapi();
        let mut channels: Map<String, Value> = self
            .channels
            .iter()
            .map(|(name, channel)| (name.clone(), channel_object(channel)))
            .collect();
        for (name, topic) in &self.topics {
            channels.insert(topic_channel_key(name), topic_channel_object(topic));
            if topic.consumers.is_empty() {
                // Only published to (by an output or a publisher): no queue of the app is fed.
                continue;
            }
            let id = unique(format!("deliver.{name}"), |id| {
                self.operations.contains_key(id)
            });
            let delivery = json!({
                "action": "receive",
                "channel": { "$ref": topic_channel_ref(name) },
                "messages": topic.message_refs,
                "description": format!(
                    "SNS delivers the messages published to `{name}` to the app's queues \
                     subscribed to it (the consumers of the binding), each through its filter \
                     policy; the app receives them from those queues."
                ),
                "bindings": { "sns": {
                    "consumers": topic.consumers,
                    "bindingVersion": SNS_BINDING_VERSION,
                } },
            });
            self.operations.insert(id, delivery);
        }
        let schemas = self.schemas();
        let mut document = json!({
            "asyncapi": ASYNCAPI_VERSION,
            "info": info,
            "channels": channels,
            "operations": self.operations,
        });
        if !schemas.is_empty() {
            document["components"] = json!({ "schemas": schemas });
        }
        document
    }

    /// The schemas the payloads refer to, by name.
    #[cfg(feature = "schemars")]
    fn schemas(&mut self) -> Map<String, Value> {
        self.generator.take_definitions(true)
    }

    #[cfg(not(feature = "schemars"))]
    fn schemas(&mut self) -> Map<String, Value> {
        Map::new()
    }
}

fn channel_ref(queue: &str) -> String {
    format!("#/channels/{queue}")
}

/// Where a message travels in the document: a queue's channel, or a topic's.
enum Place<'p> {
    Queue(&'p str),
    Topic(&'p SnsTopic),
}

impl Place<'_> {
    /// The queue's or the topic's name.
    fn name(&self) -> &str {
        match self {
            Place::Queue(queue) => queue,
            Place::Topic(topic) => topic.name(),
        }
    }

    fn channel_ref(&self) -> String {
        match self {
            Place::Queue(queue) => channel_ref(queue),
            Place::Topic(topic) => topic_channel_ref(topic.name()),
        }
    }

    fn message_ref(&self, message: &str) -> String {
        format!("{}/messages/{message}", self.channel_ref())
    }
}

/// The key of a topic's channel: `sns.` and the topic's name, which no queue's channel can take
/// (a queue's name has no `.` but in `.fifo`, last).
fn topic_channel_key(topic: &str) -> String {
    format!("sns.{topic}")
}

fn topic_channel_ref(topic: &str) -> String {
    format!("#/channels/{}", topic_channel_key(topic))
}

/// A topic's channel object: its address (the topic's name), its messages and its SNS binding.
fn topic_channel_object(channel: &TopicChannel) -> Value {
    let topic = &channel.topic;
    let mut binding = json!({
        "name": topic.name(),
        "bindingVersion": SNS_BINDING_VERSION,
    });
    if topic.is_fifo() {
        binding["ordering"] = json!({
            "type": "FIFO",
            "contentBasedDeduplication": topic.deduplicates_by_content(),
        });
    } else {
        binding["ordering"] = json!({ "type": "standard" });
    }
    let kind = if topic.is_fifo() { "FIFO" } else { "standard" };
    json!({
        "address": topic.name(),
        "description": format!("The {kind} SNS topic `{}`.", topic.name()),
        "messages": channel.messages,
        "bindings": { "sns": binding },
    })
}

/// The SNS binding's consumer for `queue`'s subscription: the queue by the name of its channel's
/// SQS binding, raw or enveloped, and its filter policy. The binding's schema takes a filter
/// policy whose every value is a string, a list of strings or an object; a policy with a list of
/// operators (`[{"numeric": [">", 0]}]`) or `$or` is kept whole in `x-filterPolicy` instead, so
/// the document stays valid and says everything.
fn sns_consumer(queue: &str, subscription: &crate::model::TopicSubscription) -> Value {
    let mut consumer = json!({
        "protocol": "sqs",
        "endpoint": { "name": queue },
        "rawMessageDelivery": subscription.is_raw_message_delivery(),
    });
    if let Some((text, scope)) = subscription.declared_policy() {
        if let Ok(policy) = serde_json::from_str::<Value>(text) {
            let fits = policy.as_object().is_some_and(|keys| {
                keys.values().all(|value| match value {
                    Value::String(_) | Value::Object(_) => true,
                    Value::Array(items) => items.iter().all(Value::is_string),
                    _ => false,
                })
            });
            let field = if fits {
                "filterPolicy"
            } else {
                "x-filterPolicy"
            };
            consumer[field] = policy;
            if scope != FilterPolicyScope::default() {
                consumer["filterPolicyScope"] = json!(scope.as_str());
            }
        }
    }
    consumer
}

/// A channel object: the queue's address, its messages and its SQS binding.
fn channel_object(channel: &Channel) -> Value {
    let queue = &channel.queue;
    let mut binding_queue = json!({
        "name": queue.name,
        "fifoQueue": queue.is_fifo(),
    });
    if let Some(timeout) = queue.consumer.visibility_timeout {
        binding_queue["visibilityTimeout"] = json!(timeout.as_secs());
    }
    if queue.content_based_dedup {
        binding_queue["x-contentBasedDeduplication"] = json!(true);
    }
    if queue.high_throughput {
        for (attribute, value) in crate::model::queue::HIGH_THROUGHPUT_FIFO {
            // The binding's own fields, named as the attributes are but in lower camel case.
            let field = match attribute {
                "DeduplicationScope" => "deduplicationScope",
                _ => "fifoThroughputLimit",
            };
            binding_queue[field] = json!(value);
        }
    }
    let mut binding = json!({ "bindingVersion": SQS_BINDING_VERSION });
    if let Some(dead_letter) = &queue.dead_letter {
        binding_queue["redrivePolicy"] = json!({
            "deadLetterQueue": { "name": dead_letter.queue },
            "maxReceiveCount": dead_letter.max_receive_count,
        });
        binding["deadLetterQueue"] = json!({
            "name": dead_letter.queue,
            "fifoQueue": crate::model::rules::is_fifo_name(&dead_letter.queue),
        });
    }
    binding["queue"] = binding_queue;
    let kind = if queue.is_fifo() { "FIFO" } else { "standard" };
    json!({
        "address": queue.name,
        "description": format!("The {kind} SQS queue `{}`.", queue.name),
        "messages": channel.messages,
        "bindings": { "sqs": binding },
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{subscriber, App, Context, Handle, HandlerOutcome, RustStream, SqsBroker};

    #[derive(serde::Deserialize)]
    struct Ping {}

    struct Pong;

    impl Handle<Ping> for Pong {
        async fn handle(
            &self,
            _: &Ping,
            _: &(),
            _: &mut Context<'_>,
        ) -> Result<(), HandlerOutcome> {
            Ok(())
        }
    }

    #[test]
    fn a_subscription_made_by_hand_is_described_by_its_settings_and_its_type_name() {
        let broker = SqsBroker::in_process();
        // A publisher's declaration of the queue joins the subscription's, as the queue is made.
        let _ = broker.publisher(SqsQueue::new("pings").dead_letter("pings-dlq", 4));
        let document = RustStream::new(AppInfo::new("pinger", "1.0.0"))
            .with_broker(broker, |b| {
                b.include(
                    subscriber("pings", Pong)
                        .visibility_timeout(Duration::from_secs(45))
                        .description("Answers pings.")
                        .build(),
                );
            })
            .asyncapi();
        assert_eq!(
            document["info"],
            json!({"title": "pinger", "version": "1.0.0"})
        );
        let queue = &document["channels"]["pings"]["bindings"]["sqs"]["queue"];
        assert_eq!(queue["fifoQueue"], false);
        assert_eq!(queue["visibilityTimeout"], 45);
        assert_eq!(queue["redrivePolicy"]["maxReceiveCount"], 4);
        let operations = &document["operations"];
        assert_eq!(operations["Pong"]["description"], "Answers pings.");
        assert_eq!(
            operations["Pong"]["messages"][0]["$ref"],
            "#/channels/pings/messages/Ping"
        );
        assert_eq!(operations["Pong.dead_letter"]["action"], "send");
        assert_eq!(operations["publish.pings"]["action"], "send");
        let ping = &document["channels"]["pings"]["messages"]["Ping"];
        assert_eq!(ping["contentType"], "application/json");
        assert_eq!(ping["x-rust-type"], std::any::type_name::<Ping>());
        assert_eq!(ping["payload"]["title"], "Ping");
        assert!(document.get("components").is_none(), "{document}");
    }

    #[test]
    fn without_subscriptions_the_document_holds_the_info() {
        let info = AppInfo::new("quiet", "0.0.1").with_description("Does nothing.");
        let document = crate::Broker::asyncapi(&SqsBroker::in_process(), &info, &[]);
        assert_eq!(document["info"]["description"], "Does nothing.");
        assert_eq!(document["channels"], json!({}));
        assert_eq!(document["operations"], json!({}));
    }

    #[test]
    #[should_panic(expected = "describes `u32`, but the messages are")]
    fn a_subscriber_given_the_payload_of_another_type_is_refused() {
        let _ = subscriber("pings", Pong)
            .payload(Payload::named::<u32>())
            .build();
    }

    #[test]
    fn keys_are_short_rust_names_made_unique() {
        assert_eq!(short_name("shop::orders::Order"), "Order");
        assert_eq!(short_name("shop::Wrapper<shop::Order>"), "Wrapper");
        assert_eq!(short_name("(u32, u64)"), "_u32__u64_");
        assert_eq!(unique("a".into(), |name| name == "a"), "a-2");
        assert_eq!(unique("b".into(), |_| false), "b");
    }

    #[test]
    #[should_panic(expected = "describes `u32`, but the messages are `u64`")]
    fn a_payload_of_another_type_is_refused() {
        Payload::named::<u32>().check_describes::<u64>();
    }
}
