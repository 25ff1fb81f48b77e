//! Messages recorded as text, to send later unchanged: the same body, group, deduplication id and
//! headers, to the same queue or topic (on a FIFO queue, SQS then stores a second send once).
//! The [inbox](crate::inbox) records a handler's outputs beside a completed message, so that a
//! duplicate of the message sends them again; the [outbox](crate::outbox) records each message
//! it is given as a row, which its relay sends.

use std::borrow::Cow;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Outgoing, Publisher};
use crate::transport::MessageAttributeValue;

/// One output, recorded.
#[derive(Debug, Serialize, Deserialize)]
struct RecordedOutgoing {
    /// The declared name of its queue or topic.
    to: String,
    /// Whether `to` names an SNS topic.
    topic: bool,
    body: String,
    group_id: Option<String>,
    dedup_id: Option<String>,
    delay_ms: Option<u64>,
    headers: Vec<RecordedHeader>,
    /// The short name its type header carries, when its publisher adds one.
    type_name: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct RecordedHeader {
    name: String,
    data_type: String,
    string_value: Option<String>,
    binary_value: Option<Vec<u8>>,
}

/// Why recorded outputs cannot be sent again.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    /// The record is not what [`record`] writes.
    #[error("the recorded outputs do not parse: {0}")]
    Unreadable(#[from] serde_json::Error),
    /// An output went to a queue or topic the subscription no longer publishes to.
    #[error(
        "a recorded output went to `{0}`, which is no longer one of the subscription's outputs: \
         add it back to send the recorded outputs again"
    )]
    NoPublisher(String),
}

/// `outputs` as text to keep with a completed message; `None` when there are none to keep. An
/// output whose body did not encode is left out: it fails its send, so the message is not
/// completed anyway.
pub(crate) fn record(outputs: &[Outgoing]) -> Option<String> {
    let recorded: Vec<RecordedOutgoing> = outputs
        .iter()
        .filter_map(|outgoing| {
            let body = outgoing.body.as_ref().ok()?;
            let declared = outgoing.sink.declared();
            Some(RecordedOutgoing {
                to: declared.name().to_owned(),
                topic: declared.topic().is_some(),
                body: body.clone(),
                group_id: outgoing.group_id.clone(),
                dedup_id: outgoing.dedup_id.clone(),
                // A `deliver_at` step is kept as the delay it is now: a resend goes at once.
                delay_ms: outgoing
                    .due_in()
                    .map(|due| due.unwrap_or_default().as_millis() as u64),
                headers: outgoing
                    .headers
                    .iter()
                    .map(|(name, value)| RecordedHeader {
                        name: name.clone(),
                        data_type: value.data_type.clone(),
                        string_value: value.string_value.clone(),
                        binary_value: value.binary_value.clone(),
                    })
                    .collect(),
                type_name: outgoing
                    .type_name
                    .as_deref()
                    .map(crate::describe::short_name),
            })
        })
        .collect();
    if recorded.is_empty() {
        return None;
    }
    Some(serde_json::to_string(&recorded).expect("recorded outputs are plain data"))
}

/// The outputs [`record`] recorded, each with its publisher among `publishers` (the
/// subscription's outputs), ready to send again.
pub(crate) fn replay(
    recorded: &str,
    publishers: &[Publisher],
) -> Result<Vec<Outgoing>, ReplayError> {
    replay_with(recorded, |to, topic| {
        publishers
            .iter()
            .find(|publisher| {
                let declared = publisher.declared();
                declared.name() == to && declared.topic().is_some() == topic
            })
            .cloned()
    })
}

/// The outputs [`record`] recorded, each with the publisher `publisher_for` gives for its
/// destination (its declared name, and whether it is a topic), ready to send again.
pub(crate) fn replay_with(
    recorded: &str,
    mut publisher_for: impl FnMut(&str, bool) -> Option<Publisher>,
) -> Result<Vec<Outgoing>, ReplayError> {
    let recorded: Vec<RecordedOutgoing> = serde_json::from_str(recorded)?;
    recorded
        .into_iter()
        .map(|output| {
            let publisher = publisher_for(&output.to, output.topic)
                .ok_or_else(|| ReplayError::NoPublisher(output.to.clone()))?;
            let mut outgoing = Outgoing::new(publisher.sink(), Ok(output.body));
            outgoing.group_id = output.group_id;
            outgoing.dedup_id = output.dedup_id;
            outgoing.delay = output.delay_ms.map(Duration::from_millis);
            outgoing.headers = output
                .headers
                .into_iter()
                .map(|header| {
                    (
                        header.name,
                        MessageAttributeValue {
                            data_type: header.data_type,
                            string_value: header.string_value,
                            binary_value: header.binary_value,
                        },
                    )
                })
                .collect();
            outgoing.type_name = output.type_name.map(Cow::Owned);
            Ok(outgoing)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SqsQueue;

    #[test]
    fn a_recorded_output_comes_back_with_its_ids_and_headers() {
        let ledger = Publisher::new(SqsQueue::new("ledger.fifo"));
        let output = ledger
            .message(&serde_json::json!({"posted": 7}))
            .group_id("account-1")
            .dedup_id("payment-7-0")
            .header("source", "payments")
            .header_binary("raw", vec![1, 2]);
        let recorded = record(std::slice::from_ref(&output)).expect("one output");
        let again = replay(&recorded, &[ledger]).unwrap();
        assert_eq!(again.len(), 1);
        let (sent_before, sent_again) = (
            output.into_request().unwrap().1,
            again.into_iter().next().unwrap().into_request().unwrap().1,
        );
        assert_eq!(sent_again.body, sent_before.body);
        assert_eq!(sent_again.group_id, sent_before.group_id);
        assert_eq!(sent_again.dedup_id, sent_before.dedup_id);
        assert_eq!(
            sent_again.message_attributes,
            sent_before.message_attributes
        );
    }

    #[test]
    fn no_outputs_record_nothing_and_a_missing_publisher_is_named() {
        assert_eq!(record(&[]), None);
        let ledger = Publisher::new(SqsQueue::new("ledger"));
        let recorded = record(&[ledger.raw("{}")]).unwrap();
        let error = replay(&recorded, &[Publisher::new(SqsQueue::new("audit"))]).unwrap_err();
        assert!(matches!(error, ReplayError::NoPublisher(to) if to == "ledger"));
    }
}
