//! Tracing that joins across services (feature `opentelemetry`), on both backends:
//!
//! - a payment published inside a span is handled in a `process` span that is that span's child,
//!   in the same trace, and the ledger entry its handler publishes is handled in a `process` span
//!   that is the first one's child: publisher → payments (FIFO) → ledger (standard), one trace;
//! - a message whose own attributes already take SQS's 10 leaves without trace context, unchanged
//!   and without error, and a sender's own `traceparent` is never overwritten;
//! - the engine's retry and dead-letter log lines (a standard queue, and a FIFO queue retrying in
//!   place) are written inside the message's `process` span, so they carry its handler, attempt,
//!   outcome, message id and incoming `traceparent`; so is a standard queue's failed delete,
//!   logged when the batcher answers after the attempt (in process only: the delete fails
//!   through a faulty transport).
//!
//! - X-Ray: a message that carries only an `AWSTraceHeader` system attribute is continued from
//!   it, one with only `traceparent` from that, one with both from `traceparent`; a broker set to
//!   send both sends the X-Ray header as the system attribute, so a message whose own attributes
//!   take all 10 still carries it (a single send and a batch);
//! - links: a batch handler's call span links to each message's trace; a dead-letter copy keeps
//!   the original's trace and names the attempt it failed in, and once redriven its `process`
//!   span is in the redrive's trace with a link to that attempt.
//!
//! Spans are exported to OpenTelemetry's in-memory exporter through one process-wide subscriber
//! (the live runs spread over worker threads), which also writes every log line to a buffer; each
//! test picks its own spans and lines out by its queue names and message ids.

#[macro_use]
mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::backend::Backend;
use opentelemetry::trace::{SpanId, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use rust_stream::handler::batch::{BatchContext, BatchOutcome, HandleBatch};
use rust_stream::operations::Redrive;
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::{
    MessageAttributeValue, ReceiveMessage, SendBatchEntry, SendMessage, Transport,
};
use rust_stream::{Output, RetryPolicy};
use rust_stream::{LINKED_TRACEPARENT_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER};
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

both_backends!(
    a_payment_and_its_ledger_entry_are_one_trace,
    a_message_with_ten_attributes_is_sent_unchanged_and_a_senders_traceparent_is_kept,
    retry_and_dead_letter_lines_are_inside_the_process_span,
    w3c_only_xray_only_and_both_each_continue_their_trace,
    a_publisher_sends_both_headers_and_ten_attributes_keep_the_xray_one,
    a_batch_call_links_to_each_messages_trace,
    a_redriven_message_links_to_the_trace_it_failed_in,
);

/// What the process-wide subscriber exports and writes.
struct Telemetry {
    spans: InMemorySpanExporter,
    lines: common::CapturedLog,
}

/// Installs, once, a subscriber that exports spans to memory and writes log lines to a buffer.
fn telemetry() -> &'static Telemetry {
    static TELEMETRY: OnceLock<Telemetry> = OnceLock::new();
    TELEMETRY.get_or_init(|| {
        let spans = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(spans.clone())
            .build();
        let lines = common::CapturedLog::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("trace_propagation")))
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(move || writer.clone())
                    .with_ansi(false),
            );
        tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
        Telemetry { spans, lines }
    })
}

/// A queue the test's service creates, polled briefly so that a stop does not wait out a long
/// poll on LocalStack.
fn queue(name: &str) -> SqsQueue {
    SqsQueue::new(name)
        .wait(Duration::from_secs(1))
        .create_if_missing()
}

/// The ended `process` spans of `queue`.
fn process_spans(queue: &str) -> Vec<SpanData> {
    telemetry()
        .spans
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|span| {
            span.name == "process"
                && attribute(span, "messaging.destination.name") == Some(queue.to_owned())
        })
        .collect()
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|pair| pair.key.as_str() == key)
        .map(|pair| match &pair.value {
            Value::String(text) => text.as_str().to_owned(),
            other => other.to_string(),
        })
}

/// The trace and span id of a `tracing` span, as OpenTelemetry sees it.
fn ids(span: &tracing::Span) -> (TraceId, SpanId) {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    assert!(
        span_context.is_valid(),
        "the span has an OpenTelemetry context"
    );
    (span_context.trace_id(), span_context.span_id())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Payment {
    id: u32,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct LedgerEntry {
    payment: u32,
}

/// Books each payment: publishes its ledger entry as part of handling it.
struct RecordPayment;

impl Handle<Payment, Output<LedgerEntry>> for RecordPayment {
    async fn handle(
        &self,
        payment: &Payment,
        ledger: &Output<LedgerEntry>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        ctx.publish(ledger.message(&LedgerEntry {
            payment: payment.id,
        }));
        Ok(())
    }
}

/// Writes ledger entries.
#[derive(Clone, Default)]
struct WriteLedger(Arc<Mutex<Vec<u32>>>);

impl Handle<LedgerEntry> for WriteLedger {
    async fn handle(
        &self,
        entry: &LedgerEntry,
        _outputs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.0.lock().unwrap().push(entry.payment);
        Ok(())
    }
}

async fn a_payment_and_its_ledger_entry_are_one_trace<T: Transport>(backend: Backend<T>) {
    telemetry();
    let payments = backend.name("payments.fifo");
    let ledger = backend.name("ledger");
    let written = WriteLedger::default();
    let app = TestApp::spawn(RustStream::new(AppInfo::new("bank", "0")).with_broker(
        backend.broker.clone(),
        |b| {
            b.include(
                subscriber(queue(&payments), RecordPayment)
                    .outputs(Output::new(queue(&ledger)))
                    .build(),
            );
            b.include(subscriber(queue(&ledger), written.clone()).build());
        },
    ))
    .await
    .expect("the app starts");

    let checkout = tracing::info_span!("checkout");
    let publisher = backend.broker.publisher(SqsQueue::new(&payments));
    publisher
        .message(&Payment { id: 7 })
        .group_id("account-1")
        .send()
        .instrument(checkout.clone())
        .await
        .expect("sent");
    let (trace, checkout_id) = ids(&checkout);
    drop(checkout);

    eventually("the ledger entry is written", async || {
        written.0.lock().unwrap().clone() == [7]
    })
    .await;
    eventually("both process spans ended", async || {
        process_spans(&payments).len() == 1 && process_spans(&ledger).len() == 1
    })
    .await;
    app.stop().await.unwrap();

    let booked = &process_spans(&payments)[0];
    let entered = &process_spans(&ledger)[0];
    assert_eq!(booked.span_context.trace_id(), trace, "payment: same trace");
    assert_eq!(
        booked.parent_span_id, checkout_id,
        "payment: child of the publisher's span"
    );
    assert!(booked.parent_span_is_remote, "its parent came over SQS");
    assert_eq!(
        entered.span_context.trace_id(),
        trace,
        "ledger entry: same trace"
    );
    assert_eq!(
        entered.parent_span_id,
        booked.span_context.span_id(),
        "ledger entry: child of the payment's process span, which published it"
    );
    assert_eq!(
        attribute(entered, TRACEPARENT_HEADER),
        Some(format!("00-{trace}-{}-01", booked.span_context.span_id())),
        "the incoming traceparent is a field of the process span"
    );
    for (span, handler) in [(booked, "RecordPayment"), (entered, "WriteLedger")] {
        assert_eq!(
            attribute(span, "rust_stream.handler").as_deref(),
            Some(handler)
        );
        assert_eq!(
            attribute(span, "rust_stream.outcome").as_deref(),
            Some("acked")
        );
        assert_eq!(attribute(span, "rust_stream.attempt").as_deref(), Some("1"));
        assert_eq!(
            attribute(span, "messaging.system").as_deref(),
            Some("aws_sqs")
        );
        assert_eq!(
            attribute(span, "messaging.operation.type").as_deref(),
            Some("process")
        );
        assert!(attribute(span, "messaging.message.id").is_some());
    }
    assert_eq!(
        attribute(booked, "sqs.group_id").as_deref(),
        Some("account-1")
    );
}

async fn a_message_with_ten_attributes_is_sent_unchanged_and_a_senders_traceparent_is_kept<
    T: Transport,
>(
    backend: Backend<T>,
) {
    telemetry();
    let url = backend.queue("attributes", &[]).await;
    let publisher = backend
        .broker
        .publisher(SqsQueue::new(backend.name("attributes")));
    let full = (0..10).fold(publisher.raw("full"), |message, n| {
        message.header(format!("h{n}"), "x")
    });
    let own = publisher.raw("own").header(
        TRACEPARENT_HEADER,
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    );
    let traced = publisher.raw("traced");
    let sent = async {
        let full = full.send().await;
        let others = publisher.send_batch([own, traced]).await;
        (full, others)
    }
    .instrument(tracing::info_span!("checkout"))
    .await;
    sent.0.expect("a message with 10 attributes is sent");
    assert!(sent.1.iter().all(Result::is_ok), "{:?}", sent.1);

    let mut received = Vec::new();
    eventually("the three messages are received", async || {
        let request = ReceiveMessage::new(10).visibility_timeout(60);
        received.extend(
            backend
                .transport
                .receive_message(&url, request)
                .await
                .unwrap(),
        );
        received.len() >= 3
    })
    .await;
    let by_body = |body: &str| {
        received
            .iter()
            .find(|message| message.body == body)
            .unwrap_or_else(|| panic!("`{body}` received"))
            .message_attributes
            .clone()
    };
    let full = by_body("full");
    assert_eq!(full.len(), 10, "{:?}", full.keys());
    assert!(!full.contains_key(TRACEPARENT_HEADER));
    let own = by_body("own");
    assert_eq!(
        own[TRACEPARENT_HEADER].string_value.as_deref(),
        Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        "the sender's own traceparent is kept"
    );
    assert_eq!(own.len(), 1, "{:?}", own.keys());
    // The same send with room left does carry the trace: the rule above is what kept it out.
    let traced = by_body("traced");
    assert!(
        traced[TRACEPARENT_HEADER]
            .string_value
            .as_deref()
            .is_some_and(|value| value.starts_with("00-")),
        "{traced:?}"
    );
    assert!(
        !traced.contains_key(TRACESTATE_HEADER),
        "no vendor state, no tracestate"
    );
}

/// Fails every attempt.
struct AlwaysDeclines;

impl Handle<Payment> for AlwaysDeclines {
    async fn handle(
        &self,
        _payment: &Payment,
        _outputs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        Err(HandlerOutcome::failed("card declined"))
    }
}

async fn retry_and_dead_letter_lines_are_inside_the_process_span<T: Transport>(
    backend: Backend<T>,
) {
    // A standard queue retries by a new receive, a FIFO queue in place: both count attempts.
    for (base, dead) in [
        ("declined", "declined-dlq"),
        ("declined.fifo", "declined-dlq.fifo"),
    ] {
        retry_and_dead_letter_lines_in(&backend, base, dead).await;
    }
}

async fn retry_and_dead_letter_lines_in<T: Transport>(
    backend: &Backend<T>,
    base: &str,
    dead: &str,
) {
    telemetry();
    let payments = backend.name(base);
    let dead = backend.name(dead);
    let queue = queue(&payments)
        .dead_letter(&dead, 2)
        .retry(RetryPolicy::exponential(
            Duration::from_millis(100),
            Duration::from_millis(200),
        ))
        .visibility_timeout(Duration::from_secs(5));
    let app = TestApp::spawn(RustStream::new(AppInfo::new("cards", "0")).with_broker(
        backend.broker.clone(),
        |b| {
            b.include(subscriber(queue, AlwaysDeclines).build());
        },
    ))
    .await
    .expect("the app starts");
    let checkout = tracing::info_span!("checkout");
    let sent = backend
        .broker
        .publisher(SqsQueue::new(&payments))
        .message(&Payment { id: 9 })
        .send()
        .instrument(checkout.clone())
        .await
        .expect("sent");
    let (trace, _) = ids(&checkout);
    drop(checkout);
    let id = sent.message_id;

    let line = |message: &str| {
        telemetry()
            .lines
            .text()
            .lines()
            .find(|line| line.contains(message) && line.contains(&id))
            .map(str::to_owned)
    };
    eventually("the payment is dead-lettered", async || {
        line("message dead-lettered").is_some()
    })
    .await;
    app.stop().await.unwrap();

    let retried = line("message failed; it will be retried").expect("a retry line");
    let dead_lettered = line("message dead-lettered").expect("a dead-letter line");
    for (logged, attempt, outcome) in [
        (&retried, 1, "retried"),
        (&dead_lettered, 2, "dead_lettered"),
    ] {
        let span = logged
            .split_once("process{")
            .map(|(_, rest)| rest.split_once('}').expect("the span's fields close").0)
            .unwrap_or_else(|| panic!("the line is inside a process span: {logged}"));
        for field in [
            format!("messaging.message.id={id}"),
            format!("messaging.destination.name={payments}"),
            "rust_stream.handler=AlwaysDeclines".to_owned(),
            format!("rust_stream.attempt={attempt}"),
            format!("rust_stream.outcome=\"{outcome}\""),
            format!("traceparent=\"00-{trace}-"),
        ] {
            assert!(
                span.contains(&field),
                "`{field}` missing from the span of: {logged}"
            );
        }
    }
    assert!(retried.contains("card declined"), "the reason: {retried}");
}

/// A standard queue's delete is answered after the attempt, in the batcher's callback: its
/// failure is still logged inside the message's `process` span.
#[tokio::test(start_paused = true)]
async fn a_failed_delete_is_logged_inside_the_process_span() {
    telemetry();
    let account = rust_stream::account::Account::new();
    let faulty = common::engine::Faulty::default();
    faulty
        .permanent_delete_failures
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let broker = SqsBroker::with_transport(faulty.over(&account));
    let payments = "payments-delete-fails";
    let written = WriteLedger::default();
    let app = TestApp::spawn(RustStream::new(AppInfo::new("ledger", "0")).with_broker(
        broker.clone(),
        |b| {
            b.include(subscriber(queue(payments), written.clone()).build());
        },
    ))
    .await
    .expect("the app starts");
    let id = broker
        .publisher(SqsQueue::new(payments))
        .message(&LedgerEntry { payment: 3 })
        .send()
        .await
        .expect("sent")
        .message_id;
    let line = || {
        telemetry()
            .lines
            .text()
            .lines()
            .find(|line| line.contains("delete failed") && line.contains(&id))
            .map(str::to_owned)
    };
    eventually("the delete failure is logged", async || line().is_some()).await;
    app.stop().await.unwrap();
    let logged = line().unwrap();
    for field in [
        format!("process{{messaging.system=\"aws_sqs\" messaging.destination.name={payments}"),
        "rust_stream.handler=WriteLedger".to_owned(),
        "rust_stream.outcome=\"acked\"".to_owned(),
    ] {
        assert!(logged.contains(&field), "`{field}` missing from: {logged}");
    }
}

/// An X-Ray trace header, and the W3C `traceparent` of another trace.
const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
const W3C: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The ended `process` span of the message `id` in `queue`.
fn process_span_of(queue: &str, id: &str) -> SpanData {
    process_spans(queue)
        .into_iter()
        .find(|span| attribute(span, "messaging.message.id").as_deref() == Some(id))
        .unwrap_or_else(|| panic!("a process span for {id}"))
}

/// Sends `messages` to `url` by the transport itself, as another service (or AWS) would, and
/// returns their message ids in order.
async fn send_raw<T: Transport>(
    backend: &Backend<T>,
    url: &str,
    messages: Vec<SendMessage>,
) -> Vec<String> {
    let entries = messages
        .into_iter()
        .enumerate()
        .map(|(index, message)| SendBatchEntry::new(index.to_string(), message))
        .collect();
    let mut sent = backend
        .transport
        .send_message_batch(url, entries)
        .await
        .expect("sent");
    assert!(sent.failed.is_empty(), "{:?}", sent.failed);
    sent.successful
        .sort_by_key(|(id, _)| id.parse::<usize>().unwrap());
    sent.successful
        .into_iter()
        .map(|(_, sent)| sent.message_id)
        .collect()
}

fn ledger_body(payment: u32) -> String {
    serde_json::to_string(&LedgerEntry { payment }).unwrap()
}

async fn w3c_only_xray_only_and_both_each_continue_their_trace<T: Transport>(backend: Backend<T>) {
    telemetry();
    let name = backend.name("continued");
    let url = backend.queue("continued", &[]).await;
    let w3c = || MessageAttributeValue::string(W3C);
    let ids = send_raw(
        &backend,
        &url,
        vec![
            SendMessage::new(ledger_body(1)).attribute(TRACEPARENT_HEADER, w3c()),
            SendMessage::new(ledger_body(2)).aws_trace_header(XRAY),
            SendMessage::new(ledger_body(3))
                .attribute(TRACEPARENT_HEADER, w3c())
                .aws_trace_header(XRAY),
        ],
    )
    .await;
    let written = WriteLedger::default();
    let app = TestApp::spawn(RustStream::new(AppInfo::new("ledger", "0")).with_broker(
        backend.broker.clone(),
        |b| {
            b.include(subscriber(queue(&name), written.clone()).build());
        },
    ))
    .await
    .expect("the app starts");
    eventually("the three process spans ended", async || {
        process_spans(&name).len() == 3
    })
    .await;
    app.stop().await.unwrap();

    let continued = |id: &str| {
        let span = process_span_of(&name, id);
        assert!(span.parent_span_is_remote, "{id}: its parent came over SQS");
        (
            span.span_context.trace_id().to_string(),
            span.parent_span_id.to_string(),
            attribute(&span, TRACEPARENT_HEADER),
        )
    };
    let (trace, parent, field) = continued(&ids[0]);
    assert_eq!(
        (trace.as_str(), parent.as_str()),
        ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"),
        "W3C only"
    );
    assert_eq!(field.as_deref(), Some(W3C));
    let (trace, parent, field) = continued(&ids[1]);
    assert_eq!(
        (trace.as_str(), parent.as_str()),
        ("5759e988bd862e3fe1be46a994272793", "53995c3f42cd8ad8"),
        "X-Ray only: Root and Parent"
    );
    assert_eq!(
        field.as_deref(),
        Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"),
        "the X-Ray header, as a traceparent, is the span's field"
    );
    let (trace, parent, _) = continued(&ids[2]);
    assert_eq!(
        (trace.as_str(), parent.as_str()),
        ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"),
        "both: the traceparent wins"
    );
}

async fn a_publisher_sends_both_headers_and_ten_attributes_keep_the_xray_one<T: Transport>(
    backend: Backend<T>,
) {
    telemetry();
    let url = backend.queue("both-sent", &[]).await;
    let broker = backend.broker.clone().aws_trace_header();
    let publisher = broker.publisher(SqsQueue::new(backend.name("both-sent")));
    let full = (0..10).fold(publisher.raw("full"), |message, n| {
        message.header(format!("h{n}"), "x")
    });
    let checkout = tracing::info_span!("checkout");
    async {
        full.send()
            .await
            .expect("a message with 10 attributes is sent");
        let batch = publisher
            .send_batch([publisher.raw("one"), publisher.raw("two")])
            .await;
        assert!(batch.iter().all(Result::is_ok), "{batch:?}");
    }
    .instrument(checkout.clone())
    .await;
    let (trace, span_id) = ids(&checkout);
    drop(checkout);
    let trace = trace.to_string();
    let xray = format!(
        "Root=1-{}-{};Parent={span_id};Sampled=1",
        &trace[..8],
        &trace[8..]
    );

    let mut received = Vec::new();
    eventually("the three messages are received", async || {
        let request = ReceiveMessage::new(10).visibility_timeout(60);
        received.extend(
            backend
                .transport
                .receive_message(&url, request)
                .await
                .unwrap(),
        );
        received.len() >= 3
    })
    .await;
    for message in &received {
        assert_eq!(
            message.attributes.get("AWSTraceHeader"),
            Some(xray.as_str()),
            "`{}` carries the X-Ray header of the publisher's span",
            message.body
        );
        let traceparent = message.message_attributes.get(TRACEPARENT_HEADER);
        if message.body == "full" {
            assert_eq!(message.message_attributes.len(), 10);
            assert!(traceparent.is_none(), "no room for the W3C one");
        } else {
            assert_eq!(
                traceparent.and_then(|value| value.string_value.as_deref()),
                Some(format!("00-{trace}-{span_id}-01").as_str()),
                "`{}` carries both, of the same span",
                message.body
            );
        }
    }
}

/// Takes every batch.
struct TakeBatch;

impl HandleBatch<LedgerEntry> for TakeBatch {
    async fn handle(
        &self,
        _entries: &[LedgerEntry],
        _outputs: &(),
        _ctx: &mut BatchContext<'_>,
    ) -> BatchOutcome {
        BatchOutcome::ack()
    }
}

async fn a_batch_call_links_to_each_messages_trace<T: Transport>(backend: Backend<T>) {
    telemetry();
    let name = backend.name("batched");
    let url = backend.queue("batched", &[]).await;
    // Two published in spans of their own, one with an X-Ray header only; all waiting before the
    // app starts, so that a call takes them together.
    let publisher = backend.broker.publisher(SqsQueue::new(&name));
    let mut expected = Vec::new();
    for payment in [1, 2] {
        let checkout = tracing::info_span!("checkout");
        let sent = publisher
            .message(&LedgerEntry { payment })
            .send()
            .instrument(checkout.clone())
            .await
            .expect("sent");
        let (trace, span_id) = ids(&checkout);
        expected.push((sent.message_id, trace.to_string(), span_id.to_string()));
    }
    let xray_only = send_raw(
        &backend,
        &url,
        vec![SendMessage::new(ledger_body(3)).aws_trace_header(XRAY)],
    )
    .await;
    expected.push((
        xray_only[0].clone(),
        "5759e988bd862e3fe1be46a994272793".to_owned(),
        "53995c3f42cd8ad8".to_owned(),
    ));
    let app = TestApp::spawn(RustStream::new(AppInfo::new("ledger", "0")).with_broker(
        backend.broker.clone(),
        |b| {
            b.include(
                subscriber(queue(&name), TakeBatch)
                    .batch(10, Duration::from_millis(500))
                    .build(),
            );
        },
    ))
    .await
    .expect("the app starts");
    let calls = || {
        process_spans(&name)
            .into_iter()
            .filter(|span| attribute(span, "messaging.batch.message_count").is_some())
            .collect::<Vec<_>>()
    };
    let counted = || {
        calls()
            .iter()
            .map(|call| {
                attribute(call, "messaging.batch.message_count")
                    .unwrap()
                    .parse::<usize>()
                    .unwrap()
            })
            .sum::<usize>()
    };
    eventually("the calls took the three messages", async || counted() == 3).await;
    app.stop().await.unwrap();

    for (message_id, trace, span_id) in &expected {
        let linked = calls().into_iter().any(|call| {
            call.links.links.iter().any(|link| {
                link.span_context.trace_id().to_string() == *trace
                    && link.span_context.span_id().to_string() == *span_id
                    && link.attributes.iter().any(|pair| {
                        pair.key.as_str() == "messaging.message.id"
                            && pair.value.to_string() == *message_id
                    })
            })
        });
        assert!(
            linked,
            "a call links to {message_id}'s trace {trace}: {:?}",
            calls().iter().map(|call| &call.links).collect::<Vec<_>>()
        );
    }
    for call in calls() {
        assert!(
            expected
                .iter()
                .all(|(_, trace, _)| call.span_context.trace_id().to_string() != *trace),
            "the call continues none of its messages' traces"
        );
    }
}

/// Declines the first payment it sees, takes every one after (the redriven copy).
#[derive(Clone, Default)]
struct DeclinesFirst(Arc<Mutex<u32>>);

impl Handle<Payment> for DeclinesFirst {
    async fn handle(
        &self,
        _payment: &Payment,
        _outputs: &(),
        _ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        let mut calls = self.0.lock().unwrap();
        *calls += 1;
        if *calls == 1 {
            return Err(HandlerOutcome::failed("card declined"));
        }
        Ok(())
    }
}

async fn a_redriven_message_links_to_the_trace_it_failed_in<T: Transport>(backend: Backend<T>) {
    telemetry();
    let refunds = backend.name("refunds");
    let dead = backend.name("refunds-dlq");
    let handler = DeclinesFirst::default();
    let app = TestApp::spawn(RustStream::new(AppInfo::new("refunds", "0")).with_broker(
        backend.broker.clone(),
        |b| {
            b.include(subscriber(queue(&refunds).dead_letter(&dead, 1), handler.clone()).build());
        },
    ))
    .await
    .expect("the app starts");
    let checkout = tracing::info_span!("checkout");
    let sent = backend
        .broker
        .publisher(SqsQueue::new(&refunds))
        .message(&Payment { id: 11 })
        .send()
        .instrument(checkout.clone())
        .await
        .expect("sent");
    let (trace, checkout_id) = ids(&checkout);
    drop(checkout);

    // The dead-letter copy keeps the trace it failed in.
    let mut copies = Vec::new();
    eventually("the payment is dead-lettered", async || {
        let Ok(url) = backend.transport.get_queue_url(&dead).await else {
            return false;
        };
        let request = ReceiveMessage::new(1).visibility_timeout(0);
        copies = backend
            .transport
            .receive_message(&url, request)
            .await
            .unwrap();
        !copies.is_empty()
    })
    .await;
    eventually("the failed attempt's span ended", async || {
        process_spans(&refunds).len() == 1
    })
    .await;
    let failed = process_span_of(&refunds, &sent.message_id);
    assert_eq!(
        failed.span_context.trace_id(),
        trace,
        "it failed in the publisher's trace"
    );
    assert_eq!(
        copies[0].message_attributes[TRACEPARENT_HEADER]
            .string_value
            .as_deref(),
        Some(format!("00-{trace}-{checkout_id}-01").as_str()),
        "the dead-letter copy keeps the original's traceparent"
    );
    let failed_id = failed.span_context.span_id();
    assert_eq!(
        copies[0].message_attributes[LINKED_TRACEPARENT_HEADER]
            .string_value
            .as_deref(),
        Some(format!("00-{trace}-{failed_id}-01").as_str()),
        "and names the attempt it failed in"
    );

    let operator = tracing::info_span!("redrive");
    let report = backend
        .broker
        .operations()
        .redrive(&Redrive::from(&dead))
        .instrument(operator.clone())
        .await
        .expect("redriven");
    assert_eq!(report.moved.len(), 1, "{report:?}");
    let (operator_trace, _) = ids(&operator);
    drop(operator);
    eventually("the redriven payment is taken", async || {
        *handler.0.lock().unwrap() == 2 && process_spans(&refunds).len() == 2
    })
    .await;
    app.stop().await.unwrap();

    let redriven = process_spans(&refunds)
        .into_iter()
        .find(|span| span.span_context.span_id() != failed.span_context.span_id())
        .expect("the redriven attempt's span");
    assert_eq!(
        redriven.span_context.trace_id(),
        operator_trace,
        "the redriven attempt continues the redrive's trace, not the one it failed in"
    );
    let links: Vec<_> = redriven.links.links.iter().collect();
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(
        links[0].span_context.trace_id(),
        trace,
        "linked to the trace it failed in"
    );
    assert_eq!(
        links[0].span_context.span_id(),
        failed_id,
        "at the attempt that failed"
    );
    assert!(
        links[0]
            .attributes
            .iter()
            .any(|pair| pair.key.as_str() == "rust_stream.link"
                && pair.value.to_string() == "redriven_from"),
        "{:?}",
        links[0].attributes
    );
    assert!(
        attribute(&redriven, TRACEPARENT_HEADER)
            .is_some_and(|field| field.contains(&operator_trace.to_string())),
        "the redriven copy carries the redrive's traceparent"
    );
}

/// On Lambda the invocation's X-Ray trace (the runtime's `Lambda-Runtime-Trace-Id`, the
/// function's `_X_AMZN_TRACE_ID`) is the parent of a message that carries no trace of its own;
/// a message's own trace still wins.
#[tokio::test]
async fn on_lambda_the_invocations_trace_is_the_parent_of_a_message_without_its_own() {
    use rust_stream::lambda::{InvocationContext, LambdaHost};
    const INVOCATION: &str =
        "Root=1-6752f3a1-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1";
    telemetry();
    let account = rust_stream::account::Account::new();
    let broker = SqsBroker::with_account(&account);
    let name = "lambda-invocation-traced";
    let written = WriteLedger::default();
    let app = RustStream::new(AppInfo::new("ledger", "0")).with_broker(broker, |b| {
        b.include(subscriber(queue(name), written.clone()).build());
    });
    let host = LambdaHost::new(app).await.expect("the host starts");
    let record = |id: &str, payment: u32, attributes: serde_json::Value| {
        serde_json::json!({
            "messageId": id,
            "receiptHandle": format!("handle-{id}"),
            "body": ledger_body(payment),
            "attributes": { "ApproximateReceiveCount": "1", "SentTimestamp": "1733480000000" },
            "messageAttributes": attributes,
            "eventSource": "aws:sqs",
            "eventSourceARN": format!("arn:aws:sqs:us-east-1:000000000000:{name}"),
            "awsRegion": "us-east-1",
        })
    };
    let event = serde_json::json!({ "Records": [
        record("own-trace", 1, serde_json::json!({
            "traceparent": { "stringValue": W3C, "dataType": "String" }
        })),
        record("no-trace", 2, serde_json::json!({})),
    ]});
    let mut invocation = InvocationContext::default();
    invocation.xray_trace_id = Some(INVOCATION.to_owned());
    let answer = host.invoke(event, &invocation).await.expect("an SQS event");
    assert_eq!(answer["batchItemFailures"], serde_json::json!([]));
    assert_eq!(*written.0.lock().unwrap(), [1, 2]);

    let trace_and_parent = |id: &str| {
        let span = process_span_of(name, id);
        (
            span.span_context.trace_id().to_string(),
            span.parent_span_id.to_string(),
        )
    };
    assert_eq!(
        trace_and_parent("own-trace"),
        (
            "0af7651916cd43dd8448eb211c80319c".to_owned(),
            "b7ad6b7169203331".to_owned()
        ),
        "the message's own trace wins"
    );
    assert_eq!(
        trace_and_parent("no-trace"),
        (
            "6752f3a10123456789abcdef01234567".to_owned(),
            "89abcdef01234567".to_owned()
        ),
        "the invocation's trace is the parent"
    );
}
