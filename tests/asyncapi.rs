//! The AsyncAPI 3.0 documents rust-stream writes are valid by the official AsyncAPI parser
//! (`@asyncapi/parser`, run by Node, installed under `target/` by `scripts/asyncapi-parser.sh`):
//! the document every example prints with `--asyncapi`, and that of an app using every kind of
//! declaration (outputs, dead-letter queues, a broker's publisher, schemas and plain type names),
//! each with zero diagnostics of any severity but the one justified in [`JUSTIFIED`]. Each
//! document also says what its app declares: the queues with their SQS bindings, the operations
//! with their handlers' doc comments, the payloads' JSON Schemas. And the parser does catch a
//! broken document, so a clean result means something.
//!
//! Without Node and npm (and no root to install them) the tests say SKIPPED on the terminal;
//! under `CI=true` they fail instead.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::process::{example_binary, output_within};
use rust_stream::asyncapi::Payload;
use rust_stream::prelude::*;
use rust_stream::Output;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long installing the parser (npm, maybe apt-get) or running an example may take.
const PATIENCE: Duration = Duration::from_secs(300);

/// Diagnostics accepted, each with why.
///
/// - `asyncapi-latest-version` (severity 2, information): the parser suggests AsyncAPI 3.1.0 to
///   any 3.0.0 document. The documents are 3.0.0 on purpose: it is the version asked for, and
///   the one whose schema defines the SQS bindings they use (0.2.0).
const JUSTIFIED: [(&str, u64); 1] = [("asyncapi-latest-version", 2)];

/// One diagnostic of the parser.
#[derive(Debug, Deserialize)]
struct Diagnostic {
    file: String,
    code: String,
    /// 0 error, 1 warning, 2 information, 3 hint.
    severity: u64,
    message: String,
    path: Vec<Value>,
}

/// The installed parser.
struct Parser {
    script: PathBuf,
    dir: PathBuf,
}

impl Parser {
    /// The parser, installed if need be; `None` (said on the terminal) when it cannot be, which
    /// fails the test under CI.
    fn installed(test: &str) -> Option<Self> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/asyncapi-parser.sh");
        let output = output_within(Command::new(&script).arg("install"), PATIENCE);
        if !output.status.success() {
            let why = String::from_utf8_lossy(&output.stderr);
            assert!(
                std::env::var_os("CI").is_none(),
                "the AsyncAPI parser cannot be installed under CI, so {test} cannot run:\n{why}"
            );
            common::report(format!(
                "SKIPPED {test}: the AsyncAPI parser cannot be installed (scripts/asyncapi-parser.sh \
                 needs Node.js and npm):\n{why}"
            ));
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "rust-stream-asyncapi-{}-{test}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the documents");
        Some(Self { script, dir })
    }

    /// Whether every document parses, and what the parser says of each.
    fn parse(&self, documents: &[(String, Value)]) -> (bool, Vec<Diagnostic>) {
        let files: Vec<PathBuf> = documents
            .iter()
            .map(|(name, document)| {
                let file = self.dir.join(format!("{name}.json"));
                let text = serde_json::to_string_pretty(document).expect("JSON prints");
                std::fs::write(&file, text).expect("write the document");
                file
            })
            .collect();
        let output = output_within(
            Command::new(&self.script).arg("validate").args(&files),
            PATIENCE,
        );
        let diagnostics = String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|error| panic!("not a diagnostic ({error}): {line}"))
            })
            .collect();
        (output.status.success(), diagnostics)
    }

    /// Asserts that the parser has nothing to say of the documents but what [`JUSTIFIED`]
    /// accepts.
    fn assert_clean(&self, documents: &[(String, Value)]) {
        let (parsed, diagnostics) = self.parse(documents);
        let unjustified: Vec<String> = diagnostics
            .into_iter()
            .filter(|diagnostic| {
                !JUSTIFIED.contains(&(diagnostic.code.as_str(), diagnostic.severity))
            })
            .map(|d| {
                format!(
                    "{}: {} (severity {}) at {:?}: {}",
                    d.file, d.code, d.severity, d.path, d.message
                )
            })
            .collect();
        assert!(
            parsed && unjustified.is_empty(),
            "the parser finds:\n{}",
            unjustified.join("\n")
        );
    }
}

impl Drop for Parser {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The document an example prints with `--asyncapi`.
fn example_document(name: &str, env: &[(&str, &str)]) -> Value {
    let mut command = Command::new(example_binary(name));
    command.arg("--asyncapi").envs(env.iter().copied());
    let output = output_within(&mut command, PATIENCE);
    assert!(
        output.status.success(),
        "{name} --asyncapi: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|error| {
        panic!(
            "{name} --asyncapi prints no JSON document ({error}):\n{}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

#[test]
fn every_example_prints_a_document_the_official_parser_accepts() {
    let Some(parser) = Parser::installed("examples") else {
        return;
    };
    let documents = vec![
        ("quickstart".to_owned(), example_document("quickstart", &[])),
        (
            "sqs_subscriptions_fifo".to_owned(),
            example_document("sqs_subscriptions_fifo", &[]),
        ),
        (
            "manual_sqs_subscriptions_fifo".to_owned(),
            example_document("manual_sqs_subscriptions_fifo", &[]),
        ),
        (
            "observability".to_owned(),
            example_document("observability", &[]),
        ),
        (
            "fault_consumer".to_owned(),
            example_document(
                "fault_consumer",
                &[
                    ("FAULT_QUEUE", "jobs.fifo"),
                    ("FAULT_OUTPUT_QUEUE", "jobs-done.fifo"),
                ],
            ),
        ),
        ("fan_out".to_owned(), example_document("fan_out", &[])),
        ("routing".to_owned(), example_document("routing", &[])),
    ];
    for (name, document) in &documents {
        assert_eq!(document["asyncapi"], "3.0.0", "{name}");
        assert_eq!(document["info"]["version"], "0.1.0", "{name}");
    }

    // The fan-out: its topic's channel, with the three queues as the delivery's consumers.
    let fan_out = &documents
        .iter()
        .find(|(name, _)| name == "fan_out")
        .expect("the fan-out document")
        .1;
    let consumers =
        &fan_out["operations"]["deliver.fan-out-payments-posted"]["bindings"]["sns"]["consumers"];
    assert_eq!(consumers.as_array().map(Vec::len), Some(3), "{consumers}");

    // The quickstart: its handler's doc comment, its dead-letter queue, its payload's schema.
    let quickstart = &documents[0].1;
    let fulfil = &quickstart["operations"]["fulfil"];
    assert_eq!(fulfil["action"], "receive");
    assert!(
        fulfil["description"]
            .as_str()
            .is_some_and(|text| text.starts_with("Reads the FIFO queue `orders.fifo`.")),
        "{fulfil}"
    );
    let binding = &quickstart["channels"]["orders.fifo"]["bindings"]["sqs"];
    assert_eq!(binding["queue"]["fifoQueue"], true);
    assert_eq!(
        binding["queue"]["redrivePolicy"]["deadLetterQueue"]["name"],
        "orders-dlq.fifo"
    );
    assert_eq!(binding["queue"]["redrivePolicy"]["maxReceiveCount"], 5);
    assert_eq!(
        quickstart["operations"]["fulfil.dead_letter"]["channel"]["$ref"],
        "#/channels/orders-dlq.fifo"
    );
    let order = &quickstart["channels"]["orders.fifo"]["messages"]["Order"];
    assert_eq!(order["payload"]["$ref"], "#/components/schemas/Order");
    assert_eq!(
        quickstart["components"]["schemas"]["Order"]["required"],
        serde_json::json!(["id", "customer"])
    );

    // The subscriber made by hand gives no schema: its payload names the type.
    let manual = &documents[2].1;
    assert_eq!(manual["operations"]["Fulfil"]["action"], "receive");
    let payload = &manual["channels"]["orders.fifo"]["messages"]["Order"]["payload"];
    assert_eq!(payload["title"], "Order");
    assert!(manual.get("components").is_none(), "{manual}");

    // The health example's one subscription, on a standard queue.
    let health = &documents[3].1;
    assert_eq!(health["operations"]["pong"]["action"], "receive");
    assert_eq!(
        health["channels"]["pings"]["bindings"]["sqs"]["queue"]["fifoQueue"],
        false
    );

    // The fault consumer's output: a send operation with the output's schema.
    let fault = &documents[4].1;
    let send = &fault["operations"]["work.jobs-done.fifo"];
    assert_eq!(send["action"], "send");
    assert_eq!(
        send["messages"][0]["$ref"],
        "#/channels/jobs-done.fifo/messages/Done"
    );
    assert!(
        fault["components"]["schemas"]["Done"].is_object(),
        "{fault}"
    );

    parser.assert_clean(&documents);
}

// ---------------------------------------------------------------------------------------------
// An app using every kind of declaration
// ---------------------------------------------------------------------------------------------

/// A payment to book.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Payment {
    id: u64,
    amount_cents: i64,
    method: Method,
    note: Option<String>,
    /// Where the money came from, as a tree of accounts.
    source: Account,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
enum Method {
    Card { last4: String },
    Transfer,
}

/// A recursive type: its schema refers to itself.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct Account {
    name: String,
    parents: Vec<Account>,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct LedgerEntry {
    payment: u64,
}

/// A type without a schema: described by its name.
#[derive(Debug, Serialize, Deserialize)]
struct Receipt {
    payment: u64,
}

/// Books a payment in the ledger and sends its receipt.
#[subscriber(
    SqsQueue::new("payments.fifo").visibility_timeout(Duration::from_secs(60)),
    dead_letter("payments-dlq.fifo", 3),
    outputs(ledger = "ledger.fifo", receipts = "receipts")
)]
async fn book(
    payment: &Payment,
    ledger: &Output<LedgerEntry>,
    receipts: &Output<Receipt>,
    ctx: &mut Context<'_>,
) -> HandlerOutcome {
    ctx.publish(ledger.message(&LedgerEntry {
        payment: payment.id,
    }));
    ctx.publish(receipts.message(&Receipt {
        payment: payment.id,
    }));
    HandlerOutcome::ack()
}

/// Audits what it reads; mounted twice, so two operations share its name.
struct Audit;

impl Handle<Payment> for Audit {
    async fn handle(&self, _: &Payment, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> {
        Ok(())
    }
}

fn every_declaration() -> Value {
    let broker = SqsBroker::in_process();
    let _refunds = broker.publisher(
        SqsQueue::new("refunds.fifo")
            .content_based_dedup()
            .high_throughput(),
    );
    // A publisher takes any type; this one says what it sends, once by schema, once by name.
    let _notices = broker
        .publisher("notices")
        .payload(Payload::schema::<LedgerEntry>())
        .payload(Payload::named::<Receipt>());
    let _again = broker
        .publisher("notices")
        .payload(Payload::schema::<LedgerEntry>());
    RustStream::new(
        AppInfo::new("payments", "2.1.0").with_description("Books payments; **sends** receipts."),
    )
    .with_broker(broker, |b| {
        b.include(book);
        b.include(
            subscriber(SqsQueue::new("audit").dead_letter("audit-dlq", 2), Audit)
                .payload(Payload::schema::<Payment>())
                .description("Audits payments.")
                .build(),
        );
        b.include(subscriber("audit-again", Audit).build());
    })
    .asyncapi()
}

#[test]
fn a_document_of_every_declaration_says_what_the_app_does_and_the_parser_accepts_it() {
    let document = every_declaration();
    assert_eq!(document["info"]["title"], "payments");
    assert_eq!(
        document["info"]["description"],
        "Books payments; **sends** receipts."
    );

    let channels = &document["channels"];
    let mut names: Vec<&String> = channels.as_object().expect("channels").keys().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "audit",
            "audit-again",
            "audit-dlq",
            "ledger.fifo",
            "notices",
            "payments-dlq.fifo",
            "payments.fifo",
            "receipts",
            "refunds.fifo"
        ]
    );
    let payments = &channels["payments.fifo"]["bindings"]["sqs"];
    assert_eq!(payments["queue"]["visibilityTimeout"], 60);
    assert_eq!(payments["queue"]["redrivePolicy"]["maxReceiveCount"], 3);
    assert_eq!(payments["deadLetterQueue"]["fifoQueue"], true);
    assert_eq!(
        channels["audit"]["bindings"]["sqs"]["queue"]["fifoQueue"],
        false
    );
    assert_eq!(
        channels["refunds.fifo"]["bindings"]["sqs"]["queue"]["x-contentBasedDeduplication"],
        true
    );
    let refunds = &channels["refunds.fifo"]["bindings"]["sqs"]["queue"];
    assert_eq!(refunds["deduplicationScope"], "messageGroup");
    assert_eq!(refunds["fifoThroughputLimit"], "perMessageGroupId");

    let operations = &document["operations"];
    let mut ids: Vec<&String> = operations.as_object().expect("operations").keys().collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            "Audit",
            "Audit-2",
            "Audit.dead_letter",
            "book",
            "book.dead_letter",
            "book.ledger.fifo",
            "book.receipts",
            "publish.notices",
            "publish.refunds.fifo"
        ]
    );
    assert_eq!(
        operations["book"]["description"],
        "Books a payment in the ledger and sends its receipt."
    );
    assert_eq!(operations["Audit"]["description"], "Audits payments.");
    assert!(operations["Audit-2"].get("description").is_none());
    assert!(operations["publish.refunds.fifo"].get("messages").is_none());
    assert_eq!(
        operations["publish.notices"]["messages"],
        serde_json::json!([
            { "$ref": "#/channels/notices/messages/LedgerEntry" },
            { "$ref": "#/channels/notices/messages/Receipt" },
        ]),
        "a publisher's declared payloads, each type once"
    );

    // Schemas where the type has one, by `#[subscriber]` and by hand; the name otherwise.
    let message = |channel: &str, name: &str| channels[channel]["messages"][name].clone();
    assert_eq!(
        message("payments.fifo", "Payment")["payload"]["$ref"],
        "#/components/schemas/Payment"
    );
    assert_eq!(
        message("audit", "Payment")["payload"]["$ref"],
        "#/components/schemas/Payment"
    );
    assert_eq!(
        message("ledger.fifo", "LedgerEntry")["payload"]["$ref"],
        "#/components/schemas/LedgerEntry"
    );
    assert_eq!(
        message("receipts", "Receipt")["payload"]["title"],
        "Receipt"
    );
    assert!(message("audit-again", "Payment")["payload"]["$ref"].is_null());
    assert_eq!(
        message("notices", "LedgerEntry")["payload"]["$ref"],
        "#/components/schemas/LedgerEntry"
    );
    assert_eq!(message("notices", "Receipt")["payload"]["title"], "Receipt");
    assert_eq!(
        message("notices", "LedgerEntry")["contentType"],
        "application/json"
    );
    let schemas = &document["components"]["schemas"];
    assert_eq!(
        schemas["Account"]["properties"]["parents"]["items"]["$ref"],
        "#/components/schemas/Account"
    );
    assert!(schemas["Method"].is_object(), "{schemas}");

    let Some(parser) = Parser::installed("every_declaration") else {
        return;
    };
    parser.assert_clean(&[("every_declaration".to_owned(), document)]);
}

/// Books a refund and announces it on a topic.
#[subscriber(
    "refund-requests",
    outputs(refunded = SnsTopic::new("payments-refunded").create_if_missing())
)]
async fn refund(
    payment: &Payment,
    refunded: &Output<Receipt>,
    ctx: &mut Context<'_>,
) -> HandlerOutcome {
    ctx.publish(refunded.message(&Receipt {
        payment: payment.id,
    }));
    HandlerOutcome::ack()
}

/// An app whose queues are fed by SNS topics: a standard topic into two queues (one raw with a
/// numeric filter policy, one enveloped with a list of strings), and a FIFO topic of the same
/// name as a queue into a FIFO queue with a body filter; a handler's output to a topic, and a
/// broker's topic publisher.
fn topics_declaration() -> Value {
    let posted = SnsTopic::new("payments-posted").create_if_missing();
    let booked = SnsTopic::new("payments.fifo").content_based_deduplication(true);
    let broker = SqsBroker::in_process();
    let _announcements = broker.topic(SnsTopic::new("announcements"));
    RustStream::new(AppInfo::new("fan-out", "1.0.0"))
        .with_broker(broker, |b| {
            b.include(refund);
            b.include(
                subscriber(
                    SqsQueue::new("large-payments").subscribed_to(
                        TopicSubscription::new(posted.clone())
                            .raw_message_delivery(true)
                            .filter_policy(r#"{"amount": [{"numeric": [">=", 1000]}]}"#),
                    ),
                    Audit,
                )
                .build(),
            );
            b.include(
                subscriber(
                    SqsQueue::new("eur-payments").subscribed_to(
                        TopicSubscription::new(posted).filter_policy(r#"{"currency": ["EUR"]}"#),
                    ),
                    Audit,
                )
                .build(),
            );
            b.include(
                subscriber(
                    SqsQueue::new("payments.fifo").subscribed_to(
                        TopicSubscription::new(booked)
                            .filter_policy_on_body(r#"{"payment": {"method": ["card"]}}"#),
                    ),
                    Audit,
                )
                .build(),
            );
        })
        .asyncapi()
}

#[test]
fn a_document_of_topics_has_their_channels_and_deliveries_and_the_parser_accepts_it() {
    let document = topics_declaration();
    let channels = &document["channels"];
    let mut names: Vec<&String> = channels.as_object().expect("channels").keys().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "eur-payments",
            "large-payments",
            "payments.fifo",
            "refund-requests",
            "sns.announcements",
            "sns.payments-posted",
            "sns.payments-refunded",
            "sns.payments.fifo"
        ]
    );
    let posted = &channels["sns.payments-posted"];
    assert_eq!(posted["address"], "payments-posted");
    assert_eq!(posted["bindings"]["sns"]["name"], "payments-posted");
    assert_eq!(posted["bindings"]["sns"]["ordering"]["type"], "standard");
    let booked = &channels["sns.payments.fifo"]["bindings"]["sns"];
    assert_eq!(booked["ordering"]["type"], "FIFO");
    assert_eq!(booked["ordering"]["contentBasedDeduplication"], true);
    assert_eq!(
        posted["messages"]
            .as_object()
            .map(|messages| messages.len()),
        Some(1),
        "two queues of one payload type share the topic's message"
    );

    let operations = &document["operations"];
    let delivery = &operations["deliver.payments-posted"];
    assert_eq!(delivery["action"], "receive");
    assert_eq!(
        delivery["channel"]["$ref"],
        "#/channels/sns.payments-posted"
    );
    let consumers = &delivery["bindings"]["sns"]["consumers"];
    assert_eq!(
        consumers,
        &serde_json::json!([
            {
                "protocol": "sqs",
                "endpoint": { "name": "large-payments" },
                "rawMessageDelivery": true,
                // A list of operators is beyond the binding's schema: kept whole, as an extension.
                "x-filterPolicy": { "amount": [{ "numeric": [">=", 1000] }] },
            },
            {
                "protocol": "sqs",
                "endpoint": { "name": "eur-payments" },
                "rawMessageDelivery": false,
                "filterPolicy": { "currency": ["EUR"] },
            },
        ])
    );
    // A handler's output to a topic and a broker's topic publisher send on the topic's channel;
    // a topic no queue of the app is subscribed to has no delivery.
    assert_eq!(
        operations["refund.payments-refunded"]["channel"]["$ref"],
        "#/channels/sns.payments-refunded"
    );
    assert_eq!(
        operations["refund.payments-refunded"]["messages"][0]["$ref"],
        "#/channels/sns.payments-refunded/messages/Receipt"
    );
    assert_eq!(
        operations["publish.announcements"]["channel"]["$ref"],
        "#/channels/sns.announcements"
    );
    assert!(operations.get("deliver.payments-refunded").is_none());
    assert!(operations.get("deliver.announcements").is_none());
    let fifo = &operations["deliver.payments.fifo"]["bindings"]["sns"]["consumers"][0];
    assert_eq!(fifo["filterPolicyScope"], "MessageBody");
    assert_eq!(fifo["filterPolicy"]["payment"]["method"][0], "card");

    let Some(parser) = Parser::installed("topics") else {
        return;
    };
    parser.assert_clean(&[("topics".to_owned(), document)]);
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct PaymentPosted {
    id: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct PaymentReversed {
    id: u64,
}

/// Posts a payment.
#[subscriber("payment-events")]
async fn post(payment: &PaymentPosted) {
    let _ = payment;
}

/// Reverses a payment.
#[subscriber("payment-events")]
async fn reverse(payment: &PaymentReversed) {
    let _ = payment;
}

/// Takes what the ledger sends that no type claims.
#[subscriber("payment-events", filter = |ctx: &Context<'_>| ctx.header("source") == Some("ledger"))]
async fn ledger_entry(entry: &Receipt) {
    let _ = entry;
}

#[test]
fn a_routed_queue_lists_each_message_with_its_type_header_and_the_parser_accepts_it() {
    let document = RustStream::new(AppInfo::new("ledger", "1.0.0"))
        .with_broker(SqsBroker::in_process().type_header("event_type"), |b| {
            b.include(post);
            b.include(reverse);
            b.include(ledger_entry);
        })
        .asyncapi();
    let channel = &document["channels"]["payment-events"];
    let messages = channel["messages"].as_object().expect("messages");
    let mut names: Vec<&String> = messages.keys().collect();
    names.sort();
    assert_eq!(names, ["PaymentPosted", "PaymentReversed", "Receipt"]);
    for name in ["PaymentPosted", "PaymentReversed"] {
        assert_eq!(
            messages[name]["headers"]["properties"]["event_type"]["const"], name,
            "{name}"
        );
        assert_eq!(messages[name]["headers"]["required"][0], "event_type");
    }
    assert!(
        messages["Receipt"].get("headers").is_none(),
        "a filter takes it, not its type"
    );
    for (operation, message) in [
        ("post", "PaymentPosted"),
        ("reverse", "PaymentReversed"),
        ("ledger_entry", "Receipt"),
    ] {
        assert_eq!(
            document["operations"][operation]["messages"][0]["$ref"],
            format!("#/channels/payment-events/messages/{message}")
        );
    }
    let Some(parser) = Parser::installed("routed") else {
        return;
    };
    parser.assert_clean(&[("routed".to_owned(), document)]);
}

#[test]
fn a_queue_or_topic_an_outbox_sends_to_notes_its_messages_may_be_scheduled_and_the_parser_accepts_it(
) {
    use rust_stream::outbox::Outbox;
    use rust_stream::store::memory::MemoryStore;
    let broker = SqsBroker::in_process();
    let store = MemoryStore::new();
    let _reminders = Outbox::new(store.clone(), broker.publisher("reminders"));
    let _dunning = Outbox::new(store.clone(), broker.topic(SnsTopic::new("dunning")));
    let _receipts = broker.publisher("receipts");
    let _announcements = broker.topic(SnsTopic::new("announcements"));
    let document = RustStream::new(AppInfo::new("billing", "1.0.0"))
        .with_broker(broker.clone(), |b| {
            b.worker(broker.relay(store.clone()));
        })
        .asyncapi();
    let operations = &document["operations"];
    for scheduled in ["publish.reminders", "publish.dunning"] {
        let operation = &operations[scheduled];
        assert_eq!(operation["x-rust-stream-scheduled"], true, "{scheduled}");
        let description = operation["description"].as_str().expect("a description");
        assert!(description.contains("may be scheduled"), "{description}");
    }
    // A broker's publisher no outbox sends through sends at once (or within SQS's delay).
    for plain in ["publish.receipts", "publish.announcements"] {
        assert!(
            operations[plain].get("x-rust-stream-scheduled").is_none(),
            "{plain}"
        );
        let description = operations[plain]["description"]
            .as_str()
            .expect("a description");
        assert!(!description.contains("scheduled"), "{description}");
    }
    let Some(parser) = Parser::installed("scheduled") else {
        return;
    };
    parser.assert_clean(&[("scheduled".to_owned(), document)]);
}

#[test]
fn the_parser_reports_a_broken_document() {
    let Some(parser) = Parser::installed("broken") else {
        return;
    };
    let mut document = every_declaration();
    document["channels"]["payments.fifo"]["bindings"]["sqs"]["queue"]
        .as_object_mut()
        .expect("a queue binding")
        .remove("fifoQueue");
    let (parsed, diagnostics) = parser.parse(&[("broken".to_owned(), document)]);
    assert!(!parsed, "a queue binding without `fifoQueue` parses");
    assert!(
        diagnostics
            .iter()
            .any(|d| d.severity == 0 && d.message.contains("fifoQueue")),
        "{diagnostics:?}"
    );
}
