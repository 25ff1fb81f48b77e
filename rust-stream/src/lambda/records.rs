//! An event's records read as the messages the engine receives: an SQS record is the message a
//! receive returns (its system attributes, its message attributes, its receipt handle); an SNS
//! record is the notification envelope SNS would have delivered to a subscribed queue.

use aws_lambda_events::event::sns::SnsRecord;
use aws_lambda_events::event::sqs::SqsMessage;

use crate::model::wire::{MessageAttributeValue, ReceivedMessage, SystemAttributes};
use crate::model::xray::AWS_TRACE_HEADER;

/// The name of the queue a record came from: the last part of its `eventSourceARN`.
pub(super) fn queue_name(record: &SqsMessage) -> Option<String> {
    let arn = record.event_source_arn.as_deref()?;
    Some(arn.rsplit(':').next().unwrap_or(arn).to_owned())
}

/// The name of a topic from its ARN.
pub(super) fn topic_name(arn: &str) -> &str {
    arn.rsplit(':').next().unwrap_or(arn)
}

/// An SQS record as the message a receive returns.
pub(super) fn received(record: SqsMessage) -> ReceivedMessage {
    let mut attributes = SystemAttributes::new();
    for (name, value) in record.attributes {
        attributes.insert(name, value);
    }
    let message_attributes = record
        .message_attributes
        .into_iter()
        .map(|(name, value)| {
            let attribute = MessageAttributeValue {
                data_type: value.data_type.unwrap_or_else(|| "String".to_owned()),
                string_value: value.string_value,
                binary_value: value.binary_value.map(|binary| binary.0),
            };
            (name, attribute)
        })
        .collect();
    ReceivedMessage {
        message_id: record.message_id.unwrap_or_default(),
        receipt_handle: record.receipt_handle.unwrap_or_default(),
        body: record.body.unwrap_or_default(),
        attributes,
        message_attributes,
    }
}

/// An SNS record as the notification envelope a subscribed queue receives, with no receipt
/// handle (nothing can be given back) and one receive.
pub(super) fn notification(record: &SnsRecord) -> ReceivedMessage {
    let sns = &record.sns;
    let mut envelope = serde_json::json!({
        "Type": "Notification",
        "MessageId": sns.message_id,
        "TopicArn": sns.topic_arn,
        "Message": sns.message,
        "Timestamp": sns.timestamp,
        "SignatureVersion": sns.signature_version,
        "Signature": sns.signature,
        "SigningCertURL": sns.signing_cert_url,
        "UnsubscribeURL": sns.unsubscribe_url,
    });
    if let Some(subject) = &sns.subject {
        envelope["Subject"] = serde_json::json!(subject);
    }
    if !sns.message_attributes.is_empty() {
        let attributes: serde_json::Map<String, serde_json::Value> = sns
            .message_attributes
            .iter()
            .map(|(name, value)| {
                (
                    name.clone(),
                    serde_json::json!({ "Type": value.data_type, "Value": value.value }),
                )
            })
            .collect();
        envelope["MessageAttributes"] = serde_json::Value::Object(attributes);
    }
    let mut attributes = SystemAttributes::new();
    attributes.insert("ApproximateReceiveCount", "1");
    ReceivedMessage {
        message_id: sns.message_id.clone(),
        receipt_handle: String::new(),
        body: envelope.to_string(),
        attributes,
        message_attributes: Default::default(),
    }
}

/// Makes the invocation's X-Ray trace the parent of a message that carries no trace of its own
/// (no `traceparent`, as `traced` says, and no `AWSTraceHeader`): its `process` span continues
/// the function's trace then, as it continues a message's own. A message's own trace wins: it
/// ties the handling to the service that published it.
pub(super) fn within_invocation(
    message: &mut ReceivedMessage,
    traced: bool,
    invocation_trace: Option<&str>,
) {
    let Some(trace) = invocation_trace else {
        return;
    };
    if traced || message.attributes.get(AWS_TRACE_HEADER).is_some() {
        return;
    }
    message.attributes.insert(AWS_TRACE_HEADER, trace);
}
