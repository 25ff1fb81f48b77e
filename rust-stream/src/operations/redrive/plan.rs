//! What a dead-letter copy becomes when it is redriven: the queue it goes to (named, its
//! `SOURCE_QUEUE_HEADER`, or SQS's `DeadLetterQueueSourceArn`), the send (its attributes without
//! the engine's dead-letter ones, a FIFO target's group and deduplication ids, an idempotency
//! key, the trace it failed in as a link), and its audit record; or why it cannot go.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::model::headers::{
    ATTEMPTS_HEADER, DEAD_LETTER_REASON_HEADER, IDEMPOTENCY_KEY_HEADER, LINKED_TRACEPARENT_HEADER,
    ORIGINAL_MESSAGE_ID_HEADER, SOURCE_QUEUE_HEADER, TRACEPARENT_HEADER, TRACESTATE_HEADER,
};
use crate::model::rules::{self, MAX_MESSAGE_ATTRIBUTES};
use crate::model::xray::AWS_TRACE_HEADER;
use crate::operations::peek::DeadLetterOrigin;
use crate::operations::report::AuditRecord;
use crate::propagation;
use crate::transport::{MessageAttributeValue, ReceivedMessage, SendMessage};

/// A message on its way: where it goes, as what.
pub(super) struct Planned {
    pub(super) receipt_handle: String,
    /// Its group in the dead-letter queue, when that is FIFO.
    pub(super) group: Option<String>,
    pub(super) target: String,
    pub(super) send: SendMessage,
    pub(super) record: AuditRecord,
}

/// Milliseconds since the epoch, now.
pub(super) fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// What a redrive of `message` from `from` sends, and where; or why it cannot go.
pub(super) fn plan(
    from: &str,
    message: &ReceivedMessage,
    to: Option<&str>,
) -> Result<Planned, String> {
    let origin = DeadLetterOrigin::of(message);
    let target = to
        .map(str::to_owned)
        .or(origin.source_queue)
        .or(origin.moved_by_sqs_from)
        .ok_or_else(|| {
            format!(
                "it names no source queue (no `{SOURCE_QUEUE_HEADER}` attribute, and SQS did not \
                 move it): redrive it to a named queue (`to`, `--to QUEUE`)"
            )
        })?;
    let original = origin
        .original_message_id
        .unwrap_or_else(|| message.message_id.clone());
    let mut send = SendMessage::new(message.body.clone());
    // Where the message failed becomes a link: the redriven attempt is not part of that trace
    // (it may come days later, at an operator's word), its `process` span starts a trace of its
    // own (the redrive's, when the redrive runs in a traced span) and links back. The engine's
    // copy names the failed attempt's span (beside its original message id); a message SQS
    // moved, or a copy with no room for it, names its trace (traceparent, else X-Ray header).
    let copied_link = message
        .message_attributes
        .contains_key(ORIGINAL_MESSAGE_ID_HEADER)
        .then(|| message.message_attributes.get(LINKED_TRACEPARENT_HEADER))
        .flatten()
        .and_then(|value| value.string_value.clone());
    let failed_in = copied_link.or_else(|| {
        propagation::incoming(
            &message.message_attributes,
            message.attributes.get(AWS_TRACE_HEADER),
        )
        .map(|traceparent| traceparent.into_owned())
    });
    send.message_attributes = message
        .message_attributes
        .iter()
        .filter(|(name, _)| {
            let dead_letter = [
                SOURCE_QUEUE_HEADER,
                ORIGINAL_MESSAGE_ID_HEADER,
                ATTEMPTS_HEADER,
                DEAD_LETTER_REASON_HEADER,
            ];
            let trace = [TRACEPARENT_HEADER, TRACESTATE_HEADER];
            let linked = failed_in.is_some() && name.as_str() == LINKED_TRACEPARENT_HEADER;
            !dead_letter.contains(&name.as_str()) && !trace.contains(&name.as_str()) && !linked
        })
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    if let Some(traceparent) = failed_in {
        if send.message_attributes.len() < MAX_MESSAGE_ATTRIBUTES {
            send.message_attributes.insert(
                LINKED_TRACEPARENT_HEADER.to_owned(),
                MessageAttributeValue::string(traceparent),
            );
        }
    }
    let fifo = rules::is_fifo_name(&target);
    if fifo {
        send.group_id = Some(message.group_id().unwrap_or("default").to_owned());
        send.dedup_id = Some(format!("redrive-{original}"));
    }
    if !send.message_attributes.contains_key(IDEMPOTENCY_KEY_HEADER)
        && send.message_attributes.len() < MAX_MESSAGE_ATTRIBUTES
    {
        // A standard queue cannot drop a second copy, nor FIFO one past its five minutes; an
        // inbox can, by this key (the original's message id, its key there by default).
        send.message_attributes.insert(
            IDEMPOTENCY_KEY_HEADER.to_owned(),
            MessageAttributeValue::string(original.clone()),
        );
    }
    let record = AuditRecord {
        message_id: message.message_id.clone(),
        original_message_id: Some(original),
        from: from.to_owned(),
        to: target.clone(),
        group_id: send.group_id.clone(),
        dedup_id: send.dedup_id.clone(),
        reason: origin.reason,
        attempts: origin.attempts,
        new_message_id: None,
        at_ms: 0,
        dry_run: false,
    };
    Ok(Planned {
        receipt_handle: message.receipt_handle.clone(),
        group: message
            .group_id()
            .filter(|_| rules::is_fifo_name(from))
            .map(str::to_owned),
        target,
        send,
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::SystemAttributes;

    fn dead_letter_copy(
        attributes: &[(&str, &str)],
        aws_trace_header: Option<&str>,
    ) -> ReceivedMessage {
        let mut system = SystemAttributes::new();
        if let Some(header) = aws_trace_header {
            system.insert(AWS_TRACE_HEADER, header);
        }
        ReceivedMessage {
            message_id: "m-1".to_owned(),
            receipt_handle: "r-1".to_owned(),
            body: "{}".to_owned(),
            attributes: system,
            message_attributes: attributes
                .iter()
                .map(|(name, value)| ((*name).to_owned(), MessageAttributeValue::string(*value)))
                .collect(),
        }
    }

    fn linked(planned: &Planned) -> Option<&str> {
        planned
            .send
            .message_attributes
            .get(LINKED_TRACEPARENT_HEADER)?
            .string_value
            .as_deref()
    }

    const FAILED_IN: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    #[test]
    fn the_trace_a_message_failed_in_becomes_its_link_and_its_own_trace_is_dropped() {
        let copy = dead_letter_copy(
            &[
                (TRACEPARENT_HEADER, FAILED_IN),
                (TRACESTATE_HEADER, "vendor=1"),
                (
                    LINKED_TRACEPARENT_HEADER,
                    "00-11111111111111111111111111111111-2222222222222222-01",
                ),
                (SOURCE_QUEUE_HEADER, "payments"),
            ],
            Some("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"),
        );
        let planned = plan("payments-dlq", &copy, None).unwrap();
        assert_eq!(
            linked(&planned),
            Some(FAILED_IN),
            "the newest failure, W3C first"
        );
        for gone in [TRACEPARENT_HEADER, TRACESTATE_HEADER] {
            assert!(
                !planned.send.message_attributes.contains_key(gone),
                "{gone}"
            );
        }
        assert_eq!(
            planned.send.aws_trace_header, None,
            "the redrive's own, if any, is sent"
        );
    }

    #[test]
    fn an_xray_only_message_links_to_its_xray_trace_and_one_without_a_trace_keeps_its_link() {
        let copy = dead_letter_copy(
            &[(SOURCE_QUEUE_HEADER, "payments")],
            Some("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"),
        );
        let planned = plan("payments-dlq", &copy, None).unwrap();
        assert_eq!(
            linked(&planned),
            Some("00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01")
        );
        let earlier = "00-11111111111111111111111111111111-2222222222222222-01";
        let copy = dead_letter_copy(
            &[
                (SOURCE_QUEUE_HEADER, "payments"),
                (LINKED_TRACEPARENT_HEADER, earlier),
            ],
            None,
        );
        let planned = plan("payments-dlq", &copy, None).unwrap();
        assert_eq!(linked(&planned), Some(earlier));
    }

    #[test]
    fn the_engines_copy_names_the_attempt_it_failed_in_and_that_is_the_link() {
        let attempt = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
        let copy = dead_letter_copy(
            &[
                (TRACEPARENT_HEADER, FAILED_IN),
                (ORIGINAL_MESSAGE_ID_HEADER, "m-0"),
                (SOURCE_QUEUE_HEADER, "payments"),
                (LINKED_TRACEPARENT_HEADER, attempt),
            ],
            None,
        );
        let planned = plan("payments-dlq", &copy, None).unwrap();
        assert_eq!(linked(&planned), Some(attempt));
        assert!(!planned
            .send
            .message_attributes
            .contains_key(TRACEPARENT_HEADER));
    }
}
