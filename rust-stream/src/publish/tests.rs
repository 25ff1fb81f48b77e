//! The publisher's own tests: what is checked before a send, and how messages are built.

use std::time::Duration;

use super::*;
use crate::model::headers::PARTITION_KEY_HEADER;
use crate::model::rules::ErrorKind;
use crate::model::{SnsTopic, SqsQueue};
use crate::transport::{MessageAttributeValue, SendMessage};

fn request(outgoing: Outgoing) -> SendMessage {
    outgoing.into_request().unwrap().1
}

#[test]
fn a_fifo_group_comes_from_the_step_then_the_partition_header_then_default() {
    let orders = Publisher::new("orders.fifo");
    assert_eq!(
        request(
            orders
                .raw("x")
                .group_id("g")
                .header(PARTITION_KEY_HEADER, "h")
        )
        .group_id
        .unwrap(),
        "g"
    );
    assert_eq!(
        request(orders.raw("x").header(PARTITION_KEY_HEADER, "h"))
            .group_id
            .unwrap(),
        "h"
    );
    assert_eq!(request(orders.raw("x")).group_id.unwrap(), "default");
}

#[test]
fn generated_dedup_ids_are_unique_and_content_based_queues_get_none() {
    let orders = Publisher::new("orders.fifo");
    let a = request(orders.raw("x")).dedup_id.unwrap();
    let b = request(orders.raw("x")).dedup_id.unwrap();
    assert_ne!(a, b);
    assert_eq!(
        request(orders.raw("x").dedup_id("mine")).dedup_id.unwrap(),
        "mine"
    );
    let hashed = Publisher::new(SqsQueue::new("orders.fifo").content_based_dedup());
    assert_eq!(request(hashed.raw("x")).dedup_id, None);
}

#[test]
fn sqs_rules_are_checked_before_the_network() {
    let orders = Publisher::new("orders.fifo");
    let error = orders
        .raw("x")
        .delay(Duration::from_secs(5))
        .into_request()
        .unwrap_err();
    assert_eq!(error.kind(), Some(ErrorKind::InvalidParameterValue));
    assert!(error.to_string().contains("orders.fifo"), "{error}");
    let plain = Publisher::new("events");
    assert_eq!(
        plain.raw("").into_request().unwrap_err().kind(),
        Some(ErrorKind::MissingParameter)
    );
    assert_eq!(
        request(plain.raw("x").delay(Duration::from_millis(1500))).delay_seconds,
        Some(2)
    );
    for too_long in [Duration::from_secs(901), Duration::MAX] {
        let error = plain.raw("x").delay(too_long).into_request().unwrap_err();
        assert_eq!(error.kind(), Some(ErrorKind::InvalidParameterValue));
    }
}

#[test]
fn a_delay_sqs_cannot_keep_is_refused_before_the_network_pointing_to_the_outbox() {
    let day = Duration::from_secs(24 * 3600);
    for outgoing in [
        Publisher::new("events").raw("x").delay(3 * day),
        Publisher::new("events")
            .raw("x")
            .deliver_at(std::time::SystemTime::now() + 3 * day),
        Publisher::new("orders.fifo")
            .raw("x")
            .delay(Duration::from_secs(60)),
        Publisher::for_topic(SnsTopic::new("payments"))
            .raw("x")
            .delay(Duration::from_secs(60)),
    ] {
        assert!(outgoing.needs_outbox());
        let error = outgoing.into_request().unwrap_err().to_string();
        assert!(
            error.contains("outbox") && error.contains("docs/scheduling.md"),
            "{error}"
        );
    }
    assert!(!Publisher::new("events")
        .raw("x")
        .delay(Duration::from_secs(900))
        .needs_outbox());
}

#[test]
fn deliver_at_is_a_delay_until_then_and_a_time_long_past_is_refused() {
    let now = std::time::SystemTime::now();
    let events = Publisher::new("events");
    let seconds = request(events.raw("x").deliver_at(now + Duration::from_secs(120))).delay_seconds;
    assert!(matches!(seconds, Some(119..=120)), "{seconds:?}");
    // A moment ago is "now"; the last step of `delay` and `deliver_at` wins.
    let at_once = events.raw("x").deliver_at(now - Duration::from_secs(30));
    assert_eq!(request(at_once).delay_seconds, Some(0));
    let last = events
        .raw("x")
        .deliver_at(now)
        .delay(Duration::from_secs(5));
    assert_eq!(request(last).delay_seconds, Some(5));
    let error = events
        .raw("x")
        .deliver_at(now - Duration::from_secs(120))
        .into_request()
        .unwrap_err();
    assert_eq!(error.kind(), Some(ErrorKind::InvalidParameterValue));
    assert!(error.to_string().contains("in the past"), "{error}");
}

#[test]
fn number_and_binary_headers_are_checked_before_the_network() {
    let events = Publisher::new("events");
    let sent = request(
        events
            .raw("x")
            .header_number("lines", 3)
            .header_number("amount", -0.75)
            .header_number("total", "12.50")
            .header_number("largest", u64::MAX)
            .header_binary("signature", [0, 159, 146, 150]),
    );
    let attributes = &sent.message_attributes;
    assert_eq!(attributes["lines"], MessageAttributeValue::number("3"));
    assert_eq!(attributes["amount"], MessageAttributeValue::number("-0.75"));
    assert_eq!(attributes["total"], MessageAttributeValue::number("12.50"));
    assert_eq!(
        attributes["largest"],
        MessageAttributeValue::number(u64::MAX.to_string())
    );
    assert_eq!(
        attributes["signature"],
        MessageAttributeValue::binary([0, 159, 146, 150])
    );
    let refused = [
        events.raw("x").header_number("amount", "12abc"),
        events.raw("x").header_number("amount", f64::NAN),
        events.raw("x").header_number("amount", i128::MAX),
        events.raw("x").header_binary("signature", Vec::new()),
    ];
    for outgoing in refused {
        let error = outgoing.into_request().unwrap_err();
        assert_eq!(error.kind(), Some(ErrorKind::InvalidParameterValue));
    }
}

#[test]
fn a_batch_answers_each_message_in_order_even_without_a_broker() {
    let events = Publisher::new("events");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let results = runtime.block_on(events.send_batch([
        events.raw("x"),
        events.raw(""),
        Publisher::new("audit").raw("y"),
    ]));
    assert!(
        matches!(&results[0], Err(PublishError::Unbound { queue }) if queue == "events"),
        "{results:?}"
    );
    assert_eq!(
        results[1].as_ref().unwrap_err().kind(),
        Some(ErrorKind::MissingParameter)
    );
    let error = results[2].as_ref().unwrap_err();
    assert!(
        matches!(error, PublishError::OtherQueue { queue, message_queue }
            if queue == "events" && message_queue == "audit"),
        "{error}"
    );
    assert!(runtime.block_on(events.send_batch([])).is_empty());
}

#[test]
fn a_batch_message_takes_the_fifo_settings_of_the_publisher_sending_it() {
    let hashed = Publisher::new(SqsQueue::new("orders.fifo").content_based_dedup());
    let message = Publisher::new("orders.fifo").raw("x");
    assert_eq!(message.destination().name(), hashed.destination().name());
    assert_eq!(hashed.request_for(message).unwrap().dedup_id, None);
}

#[test]
fn an_unbound_publisher_says_how_to_bind_it() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let error = runtime
        .block_on(Publisher::new("events").raw("x").send())
        .unwrap_err();
    assert!(matches!(error, PublishError::Unbound { .. }), "{error}");
}

#[test]
fn a_topic_message_takes_the_fifo_steps_of_a_queue() {
    let posted = Publisher::for_topic(SnsTopic::new("posted.fifo"));
    // Checked as a publish to the topic, with a FIFO queue's defaults.
    let (_, message) = posted.raw("x").into_request().unwrap();
    assert_eq!(message.group_id.as_deref(), Some("default"));
    assert!(message.dedup_id.is_some(), "a generated deduplication id");
    let by_content =
        Publisher::for_topic(SnsTopic::new("posted.fifo").content_based_deduplication(true));
    assert_eq!(by_content.raw("x").into_request().unwrap().1.dedup_id, None);
}

#[test]
fn a_handlers_output_sent_once_is_refused_and_told_to_use_an_inbox() {
    // What the engine does with a handler's staged output: `into_request`, without the history.
    let output: Output<u32> = Output::new("events");
    let error = output
        .message(&7)
        .once("event-7", Duration::from_secs(60))
        .into_request()
        .unwrap_err();
    assert!(
        matches!(error, PublishError::OnceInOutput { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("idempotent(..)"), "{error}");
}
