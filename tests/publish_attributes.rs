//! Number and Binary message attributes beside String ones: a publisher's `header_number` and
//! `header_binary` reach a handler's `Context` (a number among the headers as its text, bytes
//! among the attributes), and a value SQS would refuse fails before the network.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use rust_stream::model::rules::ErrorKind;
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, TestApp};
use rust_stream::transport::{MessageAttributeValue, MessageAttributes};
use rust_stream::PublishError;

#[derive(serde::Deserialize)]
struct Invoice {}

/// What a handler saw of one delivery: its headers and its attributes.
#[derive(Default)]
struct Inspect {
    seen: Mutex<Option<(BTreeMap<String, String>, MessageAttributes)>>,
}

impl Handle<Invoice> for Arc<Inspect> {
    async fn handle(
        &self,
        _: &Invoice,
        _: &(),
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        *self.seen.lock().unwrap() = Some((ctx.headers().clone(), ctx.attributes().clone()));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn number_and_binary_headers_reach_the_handlers_context() {
    let broker = SqsBroker::in_process();
    let queue = SqsQueue::new("invoices").create_if_missing();
    let inspect = Arc::new(Inspect::default());
    let service = RustStream::new(AppInfo::new("test", "0.0.0")).with_broker(broker.clone(), |b| {
        b.include(subscriber(queue.clone(), inspect.clone()).build());
    });
    let running = TestApp::spawn(service).await.expect("the app starts");
    let signature = [0, 159, 146, 150];
    broker
        .publisher(queue)
        .raw("{}")
        .header("tenant", "acme")
        .header_number("amount", 12.5)
        .header_number("lines", 3)
        .header_number("balance", "-0.75")
        .header_binary("signature", signature)
        .send()
        .await
        .unwrap();
    eventually("the invoice handled", async || {
        inspect.seen.lock().unwrap().is_some()
    })
    .await;
    running.stop().await.unwrap();

    let (headers, attributes) = inspect.seen.lock().unwrap().take().unwrap();
    let text: Vec<(&str, &str)> = headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    assert_eq!(
        text,
        [
            ("amount", "12.5"),
            ("balance", "-0.75"),
            ("lines", "3"),
            ("tenant", "acme")
        ],
        "numbers are headers as their text; bytes are not"
    );
    assert_eq!(attributes["amount"], MessageAttributeValue::number("12.5"));
    assert_eq!(attributes["lines"].data_type, "Number");
    assert_eq!(attributes["tenant"].data_type, "String");
    assert_eq!(
        attributes["signature"],
        MessageAttributeValue::binary(signature)
    );
}

#[tokio::test(start_paused = true)]
async fn an_invalid_number_is_refused_before_the_network_and_named() {
    let broker = SqsBroker::in_process();
    let invoices = broker.publisher("invoices");

    let error = invoices
        .raw("{}")
        .header_number("amount", "12abc")
        .send()
        .await
        .unwrap_err();

    let PublishError::Rejected { queue, error } = &error else {
        panic!("expected a rejection, got {error}")
    };
    assert_eq!(queue, "invoices");
    assert_eq!(error.kind(), Some(ErrorKind::InvalidParameterValue));
    let text = error.to_string();
    for expected in ["`amount`", "Number", "`12abc`"] {
        assert!(text.contains(expected), "missing {expected} in: {text}");
    }
    let empty = invoices
        .raw("{}")
        .header_binary("signature", Vec::new())
        .send()
        .await
        .unwrap_err();
    assert_eq!(empty.kind(), Some(ErrorKind::InvalidParameterValue));
    assert!(empty.to_string().contains("`signature`"), "{empty}");
    assert_eq!(
        broker.api_calls(),
        Default::default(),
        "nothing reached the broker's transport"
    );
}
