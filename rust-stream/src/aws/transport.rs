//! The SQS actions over the SDK: each request checked against the rules, built, sent, and its
//! answer read back into the model's words. The SNS actions are `sns.rs`'s; the trait's SNS
//! methods here hand over to them.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageSystemAttributeName, MessageSystemAttributeNameForSends, MessageSystemAttributeValue,
    QueueAttributeName, SendMessageBatchRequestEntry,
};

use crate::model::entry_id::answered_entry_id;
use crate::model::rules::{self, ErrorKind};
use crate::transport::{
    BatchResult, ChangeVisibilityEntry, DeleteEntry, PublishBatchEntry, PublishBatchResult,
    QueueAttributes, ReceiveMessage, ReceivedMessage, SendBatchEntry, SentMessage, Subscribe,
    Subscription, SubscriptionAttributes, TopicAttributes, Transport, TransportError,
};

use super::convert::*;
use super::AwsTransport;

impl Transport for AwsTransport {
    fn attempt_timeout(&self) -> Option<Duration> {
        self.client
            .config()
            .timeout_config()
            .and_then(|timeouts| timeouts.operation_attempt_timeout())
    }

    async fn get_queue_url(&self, name: &str) -> Result<String, TransportError> {
        rules::check_queue_name(name).map_err(TransportError::unsent)?;
        let output = self
            .client
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| match self.error(e) {
                // Name the queue: the service's own message does not.
                TransportError::Service {
                    kind: ErrorKind::QueueDoesNotExist,
                    ..
                } => TransportError::service(
                    ErrorKind::QueueDoesNotExist,
                    format!("queue `{name}` does not exist; create it first"),
                ),
                other => other,
            })?;
        Ok(self.rebase(
            output
                .queue_url()
                .ok_or_else(|| missing("a queue URL"))?
                .to_owned(),
        ))
    }

    async fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> Result<String, TransportError> {
        rules::check_queue_name(name).map_err(TransportError::unsent)?;
        for (attribute, value) in &attributes {
            rules::parse_queue_attribute(attribute, value).map_err(TransportError::unsent)?;
        }
        let attributes: HashMap<QueueAttributeName, String> = attributes
            .into_iter()
            .map(|(name, value)| (QueueAttributeName::from(name.as_str()), value))
            .collect();
        let output = self
            .client
            .create_queue()
            .queue_name(name)
            .set_attributes(Some(attributes))
            .send()
            .await
            .map_err(|e| self.error(e))?;
        Ok(self.rebase(
            output
                .queue_url()
                .ok_or_else(|| missing("a queue URL"))?
                .to_owned(),
        ))
    }

    async fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> Result<QueueAttributes, TransportError> {
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(queue_url)
            .set_attribute_names(Some(
                names
                    .iter()
                    .map(|name| QueueAttributeName::from(*name))
                    .collect(),
            ))
            .send()
            .await
            .map_err(|e| self.error(e))?;
        Ok(output
            .attributes()
            .into_iter()
            .flatten()
            .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
            .collect())
    }

    async fn set_queue_attributes(
        &self,
        queue_url: &str,
        attributes: QueueAttributes,
    ) -> Result<(), TransportError> {
        for (attribute, value) in &attributes {
            if attribute == "FifoQueue" {
                return Err(TransportError::service(
                    ErrorKind::InvalidAttributeName,
                    "FifoQueue is fixed when a queue is created; it cannot be set",
                ));
            }
            rules::parse_queue_attribute(attribute, value).map_err(TransportError::unsent)?;
        }
        let attributes: HashMap<QueueAttributeName, String> = attributes
            .into_iter()
            .map(|(name, value)| (QueueAttributeName::from(name.as_str()), value))
            .collect();
        self.client
            .set_queue_attributes()
            .queue_url(queue_url)
            .set_attributes(Some(attributes))
            .send()
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    async fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> Result<BatchResult<SentMessage>, TransportError> {
        rules::check_send_batch(&entries).map_err(TransportError::unsent)?;
        let target = rules::SendTarget {
            queue: queue_url.rsplit('/').next().unwrap_or(queue_url),
            fifo: is_fifo_url(queue_url),
            // Whether the queue deduplicates by content is the service's to say.
            content_based_dedup: true,
            maximum_message_size: rules::MAX_MESSAGE_SIZE,
        };
        let (request, mut result) = split_checked(
            entries,
            |entry| &entry.id,
            |entry| {
                rules::check_send(&entry.message, target)?;
                let attributes = entry
                    .message
                    .message_attributes
                    .iter()
                    .map(|(name, value)| Ok((name.clone(), to_sdk_attribute(value)?)))
                    .collect::<Result<HashMap<_, _>, TransportError>>()?;
                let trace_header = match &entry.message.aws_trace_header {
                    Some(header) => Some(HashMap::from([(
                        MessageSystemAttributeNameForSends::AwsTraceHeader,
                        MessageSystemAttributeValue::builder()
                            .data_type("String")
                            .string_value(header)
                            .build()
                            .map_err(unbuildable)?,
                    )])),
                    None => None,
                };
                SendMessageBatchRequestEntry::builder()
                    .id(entry.id.as_ref())
                    .message_body(&entry.message.body)
                    .set_delay_seconds(entry.message.delay_seconds)
                    .set_message_group_id(entry.message.group_id.clone())
                    .set_message_deduplication_id(entry.message.dedup_id.clone())
                    .set_message_attributes((!attributes.is_empty()).then_some(attributes))
                    .set_message_system_attributes(trace_header)
                    .build()
                    .map_err(unbuildable)
            },
        );
        if request.is_empty() {
            return Ok(result);
        }
        // Boxed where it is made: the SDK's future for a call is kilobytes, and every future
        // around it (this call's, the meter's, the hooks', the boxed dyn call's) would
        // otherwise hold it inline and copy it whole each time it moves, about 10,000
        // instructions a call; one allocation a call (10 messages) is cheaper.
        let output = Box::pin(
            self.client
                .send_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(request))
                .send(),
        )
        .await
        .map_err(|e| self.error(e))?;
        for entry in output.successful() {
            result.successful.push((
                answered_entry_id(entry.id()),
                SentMessage {
                    message_id: entry.message_id().to_owned(),
                    sequence_number: entry.sequence_number().map(str::to_owned),
                    duplicate: false,
                },
            ));
        }
        result.failed.extend(failures(output.failed()));
        Ok(result)
    }

    async fn list_queues(&self, prefix: &str) -> Result<Vec<String>, TransportError> {
        let mut urls = Vec::new();
        let mut next_token = None;
        loop {
            let output = self
                .client
                .list_queues()
                .set_queue_name_prefix((!prefix.is_empty()).then(|| prefix.to_owned()))
                .max_results(1000)
                .set_next_token(next_token.take())
                .send()
                .await
                .map_err(|e| self.error(e))?;
            urls.extend(
                output
                    .queue_urls()
                    .iter()
                    .map(|url| self.rebase(url.clone())),
            );
            match output.next_token() {
                Some(token) if !token.is_empty() => next_token = Some(token.to_owned()),
                _ => break,
            }
        }
        urls.sort();
        Ok(urls)
    }

    async fn purge_queue(&self, queue_url: &str) -> Result<(), TransportError> {
        self.client
            .purge_queue()
            .queue_url(queue_url)
            .send()
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    async fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        rules::check_receive(
            request.max_number_of_messages,
            request.wait_time_seconds,
            request.visibility_timeout,
            request.receive_request_attempt_id.as_deref(),
        )
        .map_err(TransportError::unsent)?;
        rules::check_system_attribute_names(&request.system_attribute_names)
            .map_err(TransportError::unsent)?;
        // Boxed where it is made, as in `send_message_batch`.
        let output = Box::pin(
            self.client
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(request.max_number_of_messages)
                .set_wait_time_seconds(request.wait_time_seconds)
                .set_visibility_timeout(request.visibility_timeout)
                .set_message_system_attribute_names(Some(
                    request
                        .system_attribute_names
                        .iter()
                        .map(|name| MessageSystemAttributeName::from(name.as_ref()))
                        .collect(),
                ))
                .set_message_attribute_names(Some(
                    request
                        .message_attribute_names
                        .iter()
                        .map(|name| name.to_string())
                        .collect(),
                ))
                .set_receive_request_attempt_id(request.receive_request_attempt_id.clone())
                .send(),
        )
        .await
        .map_err(|e| self.error(e))?;
        // Taken apart, not copied: every message's id, receipt handle, body and attributes move
        // out of the SDK's answer as they are (its strings are dropped with it otherwise).
        // Into this thread's kept list ([`ReceivedMessage::list`]), not a new one.
        let messages = output.messages.unwrap_or_default();
        let mut received = ReceivedMessage::list(messages.len());
        for message in messages {
            received.push(ReceivedMessage {
                message_id: message.message_id.ok_or_else(|| missing("a message id"))?,
                receipt_handle: message
                    .receipt_handle
                    .ok_or_else(|| missing("a receipt handle"))?,
                body: message.body.unwrap_or_default(),
                attributes: message.attributes.into_iter().flatten().collect(),
                message_attributes: from_sdk_attributes(message.message_attributes),
            });
        }
        Ok(received)
    }

    async fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        rules::check_batch_ids(entries.iter().map(|entry| entry.id.as_ref()))
            .map_err(TransportError::unsent)?;
        let request = entries
            .into_iter()
            .map(|entry| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(entry.id)
                    .receipt_handle(entry.receipt_handle)
                    .build()
                    .map_err(unbuildable)
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Boxed where it is made, as in `send_message_batch`.
        let output = Box::pin(
            self.client
                .delete_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(request))
                .send(),
        )
        .await
        .map_err(|e| self.error(e))?;
        Ok(BatchResult {
            successful: output
                .successful()
                .iter()
                .map(|entry| (answered_entry_id(entry.id()), ()))
                .collect(),
            failed: failures(output.failed()),
        })
    }

    async fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        rules::check_batch_ids(entries.iter().map(|entry| entry.id.as_ref()))
            .map_err(TransportError::unsent)?;
        let (request, mut result) = split_checked(
            entries,
            |entry| &entry.id,
            |entry| {
                rules::check_range(
                    "VisibilityTimeout",
                    entry.visibility_timeout,
                    0,
                    rules::MAX_VISIBILITY_TIMEOUT_SECONDS,
                )?;
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(entry.id.as_ref())
                    .receipt_handle(&entry.receipt_handle)
                    .visibility_timeout(entry.visibility_timeout)
                    .build()
                    .map_err(unbuildable)
            },
        );
        if request.is_empty() {
            return Ok(result);
        }
        // Boxed where it is made, as in `send_message_batch`.
        let output = Box::pin(
            self.client
                .change_message_visibility_batch()
                .queue_url(queue_url)
                .set_entries(Some(request))
                // The engine's batcher is the one to retry a visibility change: it repeats an
                // extension whose answer was lost, never a release (see `VisibilityBatch`), which the
                // SDK's own retries cannot tell apart.
                .customize()
                .config_override(
                    aws_sdk_sqs::config::Config::builder()
                        .retry_config(aws_config::retry::RetryConfig::disabled()),
                )
                .send(),
        )
        .await
        .map_err(|e| self.error(e))?;
        result.successful.extend(
            output
                .successful()
                .iter()
                .map(|entry| (answered_entry_id(entry.id()), ())),
        );
        result.failed.extend(failures(output.failed()));
        Ok(result)
    }

    async fn create_topic(
        &self,
        name: &str,
        attributes: TopicAttributes,
    ) -> Result<String, TransportError> {
        self.sns_create_topic(name, attributes).await
    }

    async fn get_topic_attributes(
        &self,
        topic_arn: &str,
    ) -> Result<TopicAttributes, TransportError> {
        self.sns_get_topic_attributes(topic_arn).await
    }

    async fn subscribe(&self, request: Subscribe) -> Result<String, TransportError> {
        self.sns_subscribe(request).await
    }

    async fn get_subscription_attributes(
        &self,
        subscription_arn: &str,
    ) -> Result<SubscriptionAttributes, TransportError> {
        self.sns_get_subscription_attributes(subscription_arn).await
    }

    async fn list_subscriptions_by_topic(
        &self,
        topic_arn: &str,
    ) -> Result<Vec<Subscription>, TransportError> {
        self.sns_list_subscriptions_by_topic(topic_arn).await
    }

    async fn publish_batch(
        &self,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
    ) -> Result<PublishBatchResult, TransportError> {
        self.sns_publish_batch(topic_arn, entries).await
    }

    #[cfg(feature = "s3")]
    async fn create_bucket(&self, bucket: &str) -> Result<(), TransportError> {
        self.s3_create_bucket(bucket).await
    }

    #[cfg(feature = "s3")]
    async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Vec<u8>,
    ) -> Result<(), TransportError> {
        self.s3_put_object(bucket, key, body).await
    }

    #[cfg(feature = "s3")]
    async fn get_object(&self, bucket: &str, key: &str) -> Result<Vec<u8>, TransportError> {
        self.s3_get_object(bucket, key).await
    }

    #[cfg(feature = "s3")]
    async fn head_object(&self, bucket: &str, key: &str) -> Result<u64, TransportError> {
        self.s3_head_object(bucket, key).await
    }

    #[cfg(feature = "s3")]
    async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), TransportError> {
        self.s3_delete_object(bucket, key).await
    }

    #[cfg(feature = "s3")]
    async fn copy_object(&self, bucket: &str, key: &str) -> Result<(), TransportError> {
        self.s3_copy_object(bucket, key).await
    }
}
