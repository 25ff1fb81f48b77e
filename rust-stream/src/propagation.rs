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
//!   (`OpenTelemetrySpanExt::set_parent`): its `traceparent`, else its X-Ray
//!   [`AWS_TRACE_HEADER`] system attribute; a message without either starts a new trace.
//! - **Batches**: a batch handler's call span continues none of its messages' traces and has a
//!   span link to each (`messaging.message.id` on the link).
//! - **Dead letters and redrives**: a dead-letter copy keeps the original's trace (its
//!   `traceparent`, `tracestate` and `AWSTraceHeader`) and names the attempt it failed in (that
//!   `process` span) in [`LINKED_TRACEPARENT_HEADER`](crate::LINKED_TRACEPARENT_HEADER). A
//!   redrive keeps that link (or makes it of the message's own trace), drops the message's
//!   `traceparent` and `tracestate`, and sends it with the redrive's own context: the redriven
//!   attempt's `process` span is in the redrive's trace (or a new one) and links to the attempt
//!   it failed in (`rust_stream.link = "redriven_from"`).
//!
//! X-Ray's header (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`)
//! and W3C's `traceparent` name the same ids ([`traceparent_from_xray`],
//! [`xray_from_traceparent`]). With [`SqsBroker::aws_trace_header`](crate::SqsBroker::aws_trace_header)
//! every send carries both: the X-Ray header rides the `AWSTraceHeader` system attribute, which
//! is not one of the 10 message attributes, so a message whose own attributes take all 10 still
//! carries it. `xray_parent` (with the feature) makes a parent context of an X-Ray header (a
//! Lambda function's `_X_AMZN_TRACE_ID`).
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

pub use crate::model::xray::{traceparent_from_xray, xray_from_traceparent, AWS_TRACE_HEADER};

use std::borrow::Cow;

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
        Self::of(&tracing::Span::current())
    }

    /// `span`'s trace context, as [`current`](Self::current) reads the current span's.
    pub(crate) fn of(span: &tracing::Span) -> Option<Self> {
        #[cfg(feature = "opentelemetry")]
        {
            otel::of(span)
        }
        #[cfg(not(feature = "opentelemetry"))]
        {
            let _ = span;
            None
        }
    }

    /// The W3C `traceparent`.
    pub(crate) fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// Adds the context to `message` where it fits (see the module docs): never over the
    /// attribute count or `maximum_message_size`, never over the sender's own attributes. With
    /// `xray`, the message also carries it as its `AWSTraceHeader` system attribute, unless the
    /// sender set one: the trace of the message's own `traceparent` when it has one (a
    /// dead-letter copy's), else this one.
    pub(crate) fn inject(
        &self,
        message: &mut SendMessage,
        maximum_message_size: usize,
        xray: bool,
    ) {
        if xray && message.aws_trace_header.is_none() {
            let traceparent = traceparent(&message.message_attributes).unwrap_or(&self.traceparent);
            message.aws_trace_header = xray_from_traceparent(traceparent);
        }
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

/// The trace a received message carries, as a W3C `traceparent`: its `traceparent` attribute,
/// else its `AWSTraceHeader` system attribute in W3C form.
pub(crate) fn incoming<'a>(
    attributes: &'a MessageAttributes,
    aws_trace_header: Option<&str>,
) -> Option<Cow<'a, str>> {
    match traceparent(attributes) {
        Some(traceparent) => Some(Cow::Borrowed(traceparent)),
        None => aws_trace_header
            .and_then(traceparent_from_xray)
            .map(Cow::Owned),
    }
}

/// Continues in `span` the trace a received message carries, when it carries a valid one (its
/// `traceparent`, else its `AWSTraceHeader`), and links `span` to the trace of its
/// [`LINKED_TRACEPARENT_HEADER`](crate::LINKED_TRACEPARENT_HEADER).
#[cfg(feature = "opentelemetry")]
pub(crate) fn continue_trace(
    span: &tracing::Span,
    attributes: &MessageAttributes,
    aws_trace_header: Option<&str>,
) {
    otel::continue_trace(span, attributes, aws_trace_header);
}

/// Links a batch handler's call `span` to the trace each of its messages carries, a message
/// being its attributes and its `AWSTraceHeader`, named by its message id on the link.
#[cfg(feature = "opentelemetry")]
pub(crate) fn link_messages<'a>(
    span: &tracing::Span,
    messages: impl Iterator<Item = (&'a str, &'a MessageAttributes, Option<&'a str>)>,
) {
    otel::link_messages(span, messages);
}

/// The OpenTelemetry context of an X-Ray trace header (the `_X_AMZN_TRACE_ID` a Lambda function
/// is started with, or an `AWSTraceHeader`), to make the parent of a span:
/// `span.set_parent(context)` through `tracing_opentelemetry::OpenTelemetrySpanExt`. `None` when
/// the header names no trace and parent span ([`traceparent_from_xray`]).
///
/// ```
/// use opentelemetry::trace::TraceContextExt;
///
/// let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
/// let parent = rust_stream::propagation::xray_parent(header).expect("a trace and a parent");
/// let span = parent.span();
/// let context = span.span_context();
/// assert_eq!(context.trace_id().to_string(), "5759e988bd862e3fe1be46a994272793");
/// assert_eq!(context.span_id().to_string(), "53995c3f42cd8ad8");
/// assert!(context.is_sampled() && context.is_remote());
/// ```
#[cfg(feature = "opentelemetry")]
pub fn xray_parent(header: &str) -> Option<opentelemetry::Context> {
    otel::remote(&traceparent_from_xray(header)?, None)
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::{SpanContext, TraceContextExt};
    use opentelemetry::{Context, KeyValue};
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::TraceHeaders;
    use crate::model::headers::{LINKED_TRACEPARENT_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER};
    use crate::model::wire::MessageAttributes;

    pub(super) fn of(span: &tracing::Span) -> Option<TraceHeaders> {
        let context = span.context();
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

    /// The remote context of a `traceparent` (and `tracestate`), when it is a valid one.
    pub(super) fn remote(traceparent: &str, tracestate: Option<&str>) -> Option<Context> {
        let fields = Fields {
            traceparent: Some(traceparent.to_owned()),
            tracestate: tracestate.map(str::to_owned),
        };
        let context = TraceContextPropagator::new().extract(&fields);
        context.span().span_context().is_valid().then_some(context)
    }

    /// The trace a message carries: its W3C attributes, else its X-Ray header.
    fn carried(attributes: &MessageAttributes, aws_trace_header: Option<&str>) -> Option<Context> {
        if super::traceparent(attributes).is_some() {
            let context = TraceContextPropagator::new().extract(&Attributes(attributes));
            return context.span().span_context().is_valid().then_some(context);
        }
        remote(&super::traceparent_from_xray(aws_trace_header?)?, None)
    }

    pub(super) fn continue_trace(
        span: &tracing::Span,
        attributes: &MessageAttributes,
        aws_trace_header: Option<&str>,
    ) {
        if let Some(linked) = attributes
            .get(LINKED_TRACEPARENT_HEADER)
            .and_then(|value| value.string_value.as_deref())
            .and_then(|traceparent| remote(traceparent, None))
        {
            span.add_link_with_attributes(
                linked.span().span_context().clone(),
                vec![KeyValue::new("rust_stream.link", "redriven_from")],
            );
        }
        if let Some(context) = carried(attributes, aws_trace_header) {
            // Fails only when no tracing-opentelemetry layer is installed: nothing to continue.
            let _ = span.set_parent(context);
        }
    }

    pub(super) fn link_messages<'a>(
        span: &tracing::Span,
        messages: impl Iterator<Item = (&'a str, &'a MessageAttributes, Option<&'a str>)>,
    ) {
        for (message_id, attributes, aws_trace_header) in messages {
            let Some(context) = carried(attributes, aws_trace_header) else {
                continue;
            };
            let linked: SpanContext = context.span().span_context().clone();
            span.add_link_with_attributes(
                linked,
                vec![KeyValue::new("messaging.message.id", message_id.to_owned())],
            );
        }
    }

    /// What the W3C propagator writes, or reads from one `traceparent`.
    #[derive(Default)]
    struct Fields {
        traceparent: Option<String>,
        tracestate: Option<String>,
    }

    impl Extractor for Fields {
        fn get(&self, key: &str) -> Option<&str> {
            match key {
                TRACEPARENT_HEADER => self.traceparent.as_deref(),
                TRACESTATE_HEADER => self.tracestate.as_deref(),
                _ => None,
            }
        }

        fn keys(&self) -> Vec<&str> {
            vec![TRACEPARENT_HEADER, TRACESTATE_HEADER]
        }
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
        headers(Some("vendor=1")).inject(&mut message, rules::MAX_MESSAGE_SIZE, false);
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
        headers(Some("vendor=1")).inject(&mut message, rules::MAX_MESSAGE_SIZE, false);
        assert!(traceparent(&message.message_attributes).is_some());
        assert!(!message.message_attributes.contains_key(TRACESTATE_HEADER));

        let full = with_attributes(10);
        let mut message = full.clone();
        headers(Some("vendor=1")).inject(&mut message, rules::MAX_MESSAGE_SIZE, false);
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
        headers(Some("vendor=1")).inject(&mut message, rules::MAX_MESSAGE_SIZE, false);
        assert_eq!(message, before);
    }

    #[test]
    fn the_context_is_left_out_rather_than_pass_the_queues_maximum_size() {
        let mut message = with_attributes(0);
        let maximum = rules::message_size(&message) + 20;
        headers(None).inject(&mut message, maximum, false);
        assert!(message.message_attributes.is_empty());
    }

    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    const W3C: &str = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01";

    #[test]
    fn the_xray_header_rides_the_system_attribute_of_a_message_with_ten_attributes() {
        let headers = TraceHeaders {
            traceparent: W3C.to_owned(),
            tracestate: None,
        };
        let mut message = SendMessage::new("{}");
        for index in 0..MAX_MESSAGE_ATTRIBUTES {
            message
                .message_attributes
                .insert(format!("a{index}"), MessageAttributeValue::string("x"));
        }
        headers.inject(&mut message, rules::MAX_MESSAGE_SIZE, true);
        assert_eq!(message.aws_trace_header.as_deref(), Some(XRAY));
        assert!(!message.message_attributes.contains_key(TRACEPARENT_HEADER));

        // Off by default; a sender's own header is kept; a message's own traceparent (a
        // dead-letter copy's) is the trace its header names.
        let mut plain = SendMessage::new("{}");
        headers.inject(&mut plain, rules::MAX_MESSAGE_SIZE, false);
        assert_eq!(plain.aws_trace_header, None);
        let mut own =
            SendMessage::new("{}").aws_trace_header("Root=1-00000001-000000000000000000000001");
        headers.inject(&mut own, rules::MAX_MESSAGE_SIZE, true);
        assert_eq!(
            own.aws_trace_header.as_deref(),
            Some("Root=1-00000001-000000000000000000000001")
        );
        let mut copy = SendMessage::new("{}").attribute(
            TRACEPARENT_HEADER,
            MessageAttributeValue::string(
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            ),
        );
        headers.inject(&mut copy, rules::MAX_MESSAGE_SIZE, true);
        assert_eq!(
            copy.aws_trace_header.as_deref(),
            Some("Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331;Sampled=1")
        );
    }
}
