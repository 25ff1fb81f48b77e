//! Trace context across services: a publish carries the W3C trace context of the span it was made
//! in, and the `process` span of the consumer that handles the message continues it, so one trace
//! follows a payment from the service that published it into the ledger entry another service
//! wrote for it.
//!
//! The context travels in two `String` message attributes, [`TRACEPARENT_HEADER`] and
//! [`TRACESTATE_HEADER`] (the latter only when the trace has vendor state), in the
//! [W3C Trace Context](https://www.w3.org/TR/trace-context/) format, whatever global propagator
//! the service installed. With the `opentelemetry` feature:
//!
//! - **Publishing** ([`Outgoing::send`](crate::Outgoing::send),
//!   [`Publisher::send_batch`](crate::Publisher::send_batch), a handler's
//!   [`Context::publish`](crate::Context::publish), dead-letter copies) injects the OpenTelemetry
//!   context of the `tracing` span current when the send began (for a handler's outputs: its
//!   `process` span), through `tracing_opentelemetry::OpenTelemetrySpanExt::context`. Nothing is
//!   injected when that span has no valid OpenTelemetry context (no `tracing-opentelemetry` layer,
//!   or no span).
//! - **Consuming**: each `process` span is made a child of the context a message carries
//!   (`OpenTelemetrySpanExt::set_parent`); a message without one starts a new trace.
//!
//! A send never fails, and is never held back, for its trace context. SQS takes at most 10
//! attributes a message, so the context is left out (a `debug` event says so) when the message's
//! own attributes leave no room: `traceparent` needs one free attribute, `tracestate` goes along
//! only when a second is free. It is also left out when it would take the message past its
//! queue's `MaximumMessageSize`. Attributes the sender set are never overwritten: a message that
//! already carries `traceparent` or `tracestate` (the sender propagates itself, or a dead-letter
//! copy keeps the original's) is sent as it is.
//!
//! Without the feature nothing is injected, and the `process` span still records the incoming
//! `traceparent` as a field, so its log lines can be matched with the publisher's.
//!
//! ```toml
//! rust-stream = { version = "0.1", features = ["opentelemetry"] }
//! ```
//!
//! The service then installs a `tracing-opentelemetry` layer whose tracer comes from its
//! OpenTelemetry SDK provider (and exporter); rust-stream needs no global propagator of its own.

use crate::model::headers::{TRACEPARENT_HEADER, TRACESTATE_HEADER};
use crate::model::rules::{self, MAX_MESSAGE_ATTRIBUTES};
use crate::model::topic::Publish;
use crate::model::wire::{MessageAttributeValue, MessageAttributes, SendMessage};

/// The incoming `traceparent` of a received message, if it carries one as text.
pub(crate) fn traceparent(attributes: &MessageAttributes) -> Option<&str> {
    attributes.get(TRACEPARENT_HEADER)?.string_value.as_deref()
}

/// The W3C trace context of the span current when a publish began, as message attributes carry it.
#[derive(Debug)]
pub(crate) struct TraceHeaders {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceHeaders {
    /// The current span's trace context: `None` without the `opentelemetry` feature, or when the
    /// current span has no valid OpenTelemetry context.
    pub(crate) fn current() -> Option<Self> {
        #[cfg(feature = "opentelemetry")]
        {
            otel::current()
        }
        #[cfg(not(feature = "opentelemetry"))]
        {
            None
        }
    }

    /// Adds the context to `message` where it fits (see the module docs): never over the
    /// attribute count or `maximum_message_size`, never over the sender's own attributes.
    pub(crate) fn inject(&self, message: &mut SendMessage, maximum_message_size: usize) {
        self.inject_into(
            message.body.len(),
            &mut message.message_attributes,
            maximum_message_size,
        );
    }

    /// Adds the context to a publish to an SNS topic, as [`inject`](Self::inject) does to an SQS
    /// message: SNS has the same 10-attribute limit for a raw delivery, and counts size alike.
    pub(crate) fn inject_publish(&self, publish: &mut Publish, maximum_message_size: usize) {
        self.inject_into(
            publish.message.len(),
            &mut publish.message_attributes,
            maximum_message_size,
        );
    }

    /// Adds the context to `attributes`, those of a message whose body is `body` bytes long.
    fn inject_into(
        &self,
        body: usize,
        attributes: &mut MessageAttributes,
        maximum_message_size: usize,
    ) {
        if attributes.contains_key(TRACEPARENT_HEADER) || attributes.contains_key(TRACESTATE_HEADER)
        {
            return;
        }
        let free = MAX_MESSAGE_ATTRIBUTES.saturating_sub(attributes.len());
        if free == 0 {
            tracing::debug!(
                attributes = attributes.len(),
                "the message has no attribute left for its trace context; sent without it"
            );
            return;
        }
        if !fits(
            body,
            attributes,
            TRACEPARENT_HEADER,
            &self.traceparent,
            maximum_message_size,
        ) {
            tracing::debug!("the trace context would take the message past its queue's MaximumMessageSize; sent without it");
            return;
        }
        attributes.insert(
            TRACEPARENT_HEADER.to_owned(),
            MessageAttributeValue::string(self.traceparent.clone()),
        );
        let Some(tracestate) = &self.tracestate else {
            return;
        };
        if free < 2
            || !fits(
                body,
                attributes,
                TRACESTATE_HEADER,
                tracestate,
                maximum_message_size,
            )
        {
            tracing::debug!(
                "no room left for the message's tracestate; sent with its traceparent alone"
            );
            return;
        }
        attributes.insert(
            TRACESTATE_HEADER.to_owned(),
            MessageAttributeValue::string(tracestate.clone()),
        );
    }
}

/// Whether a message of `body` bytes and `attributes` stays within `maximum` bytes with a
/// `String` attribute `name` of `value`.
fn fits(
    body: usize,
    attributes: &MessageAttributes,
    name: &str,
    value: &str,
    maximum: usize,
) -> bool {
    let added = name.len() + "String".len() + value.len();
    body + rules::attributes_size(attributes) + added <= maximum
}

/// Continues in `span` the trace a received message carries, when it carries a valid one.
#[cfg(feature = "opentelemetry")]
pub(crate) fn continue_trace(span: &tracing::Span, attributes: &MessageAttributes) {
    otel::continue_trace(span, attributes);
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::TraceContextExt;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::TraceHeaders;
    use crate::model::headers::{TRACEPARENT_HEADER, TRACESTATE_HEADER};
    use crate::model::wire::MessageAttributes;

    pub(super) fn current() -> Option<TraceHeaders> {
        let context = tracing::Span::current().context();
        if !context.span().span_context().is_valid() {
            return None;
        }
        let mut fields = Fields::default();
        TraceContextPropagator::new().inject_context(&context, &mut fields);
        Some(TraceHeaders {
            traceparent: fields.traceparent?,
            tracestate: fields.tracestate.filter(|state| !state.is_empty()),
        })
    }

    pub(super) fn continue_trace(span: &tracing::Span, attributes: &MessageAttributes) {
        if super::traceparent(attributes).is_none() {
            return;
        }
        let context = TraceContextPropagator::new().extract(&Attributes(attributes));
        if context.span().span_context().is_valid() {
            // Fails only when no tracing-opentelemetry layer is installed: nothing to continue.
            let _ = span.set_parent(context);
        }
    }

    /// What the W3C propagator writes.
    #[derive(Default)]
    struct Fields {
        traceparent: Option<String>,
        tracestate: Option<String>,
    }

    impl Injector for Fields {
        fn set(&mut self, key: &str, value: String) {
            match key {
                TRACEPARENT_HEADER => self.traceparent = Some(value),
                TRACESTATE_HEADER => self.tracestate = Some(value),
                _ => {}
            }
        }
    }

    /// A received message's `String` attributes, as the W3C propagator reads them.
    struct Attributes<'a>(&'a MessageAttributes);

    impl Extractor for Attributes<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get(key)?.string_value.as_deref()
        }

        fn keys(&self) -> Vec<&str> {
            self.0.keys().map(String::as_str).collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(tracestate: Option<&str>) -> TraceHeaders {
        TraceHeaders {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".to_owned(),
            tracestate: tracestate.map(str::to_owned),
        }
    }

    fn with_attributes(count: usize) -> SendMessage {
        let mut message = SendMessage::new("{}");
        for index in 0..count {
            message
                .message_attributes
                .insert(format!("a{index}"), MessageAttributeValue::string("x"));
        }
        message
    }

    #[test]
    fn both_headers_go_where_two_attributes_are_free() {
        let mut message = with_attributes(8);
        headers(Some("vendor=1")).inject(&mut message, rules::MAX_MESSAGE_SIZE);
        assert_eq!(message.message_attributes.len(), 10);
        assert_eq!(
            traceparent(&message.message_attributes),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        assert_eq!(
            message.message_attributes[TRACESTATE_HEADER],
            MessageAttributeValue::string("vendor=1")
        );
    }

    #[test]
    fn one_free_attribute_takes_the_traceparent_alone_and_none_takes_nothing() {
        let mut message = with_attributes(9);
        headers(Some("vendor=1")).inject(&mut message, rules::MAX_MESSAGE_SIZE);
        assert!(traceparent(&message.message_attributes).is_some());
        assert!(!message.message_attributes.contains_key(TRACESTATE_HEADER));

        let full = with_attributes(10);
        let mut message = full.clone();
        headers(Some("vendor=1")).inject(&mut message, rules::MAX_MESSAGE_SIZE);
        assert_eq!(message, full);
    }

    #[test]
    fn the_senders_own_trace_attributes_are_kept() {
        let mut message = with_attributes(0);
        message.message_attributes.insert(
            TRACESTATE_HEADER.to_owned(),
            MessageAttributeValue::string("mine"),
        );
        let before = message.clone();
        headers(Some("vendor=1")).inject(&mut message, rules::MAX_MESSAGE_SIZE);
        assert_eq!(message, before);
    }

    #[test]
    fn the_context_is_left_out_rather_than_pass_the_queues_maximum_size() {
        let mut message = with_attributes(0);
        let maximum = rules::message_size(&message) + 20;
        headers(None).inject(&mut message, maximum);
        assert!(message.message_attributes.is_empty());
    }
}
