//! The SNS actions over aws-sdk-sns: each request checked against SNS's rules (the model's
//! validators in [`topic`](crate::model::topic), the ones the in-process account calls), built,
//! sent, and its answer read back into the model's words. The SNS methods of
//! [`Transport`](crate::transport::Transport) in `transport.rs` call these; the SNS client is made
//! in `mod.rs` from the same configuration as the SQS client, so one endpoint (a local stack)
//! serves both.
//!
//! A topic's own settings are the service's to say: a publish is checked as if its topic took
//! content-based deduplication (a FIFO publish without a deduplication id goes out, and SNS answers
//! for the topic) and at SNS's default `MaximumMessageSize`, 256 KiB.

use std::collections::HashMap;

use aws_sdk_sns::types::{
    BatchResultErrorEntry, MessageAttributeValue as SdkAttribute, PublishBatchRequestEntry,
};

use crate::model::entry_id::answered_entry_id;
use crate::model::rules::{fail, ErrorKind};
use crate::model::subscription::{check_subscribe, check_topic_attributes};
use crate::model::topic::{check_publish, check_publish_batch, PublishTarget, TopicArn};
use crate::transport::{
    BatchFailure, MessageAttributeValue, PublishBatchEntry, PublishBatchResult, Published,
    Subscribe, Subscription, SubscriptionAttributes, TopicAttributes, TransportError,
};

use super::convert::{batch_failure, split_checked};
use super::AwsTransport;

impl AwsTransport {
    /// The SNS client, or why there is none: a transport made over an SQS client alone.
    fn sns(&self) -> Result<&aws_sdk_sns::Client, TransportError> {
        self.sns.as_ref().ok_or_else(|| {
            TransportError::service(
                ErrorKind::UnsupportedOperation,
                "this AwsTransport was made over an SQS client alone (`AwsTransport::from_client`) \
                 and has no SNS client: make it with `AwsTransport::from_clients`, \
                 `AwsTransport::local` or `SqsBroker::aws()...transport()` to call SNS",
            )
        })
    }

    /// SNS `CreateTopic`, its name and attributes checked first.
    pub(super) async fn sns_create_topic(
        &self,
        name: &str,
        attributes: TopicAttributes,
    ) -> Result<String, TransportError> {
        check_topic_attributes(name, &attributes).map_err(TransportError::unsent)?;
        let output = self
            .sns()?
            .create_topic()
            .name(name)
            .set_attributes((!attributes.is_empty()).then(|| attributes.into_iter().collect()))
            .send()
            .await
            .map_err(|e| self.sns_error(e))?;
        output
            .topic_arn()
            .map(str::to_owned)
            .ok_or_else(|| sns_missing("a topic ARN"))
    }

    /// SNS `GetTopicAttributes`, the ARN checked first.
    pub(super) async fn sns_get_topic_attributes(
        &self,
        topic_arn: &str,
    ) -> Result<TopicAttributes, TransportError> {
        TopicArn::parse(topic_arn).map_err(TransportError::unsent)?;
        let output = self
            .sns()?
            .get_topic_attributes()
            .topic_arn(topic_arn)
            .send()
            .await
            .map_err(|e| self.sns_error(e))?;
        Ok(output
            .attributes()
            .into_iter()
            .flatten()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect())
    }

    /// SNS `Subscribe` with `ReturnSubscriptionArn=true`, so the answer is the subscription's ARN
    /// (an SQS subscription is confirmed at once; without the flag SNS would answer
    /// `pending confirmation` for protocols that confirm).
    pub(super) async fn sns_subscribe(&self, request: Subscribe) -> Result<String, TransportError> {
        check_subscribe(&request).map_err(TransportError::unsent)?;
        let attributes: HashMap<String, String> = request.attributes.into_iter().collect();
        let output = self
            .sns()?
            .subscribe()
            .topic_arn(request.topic_arn)
            .protocol(request.protocol)
            .endpoint(request.endpoint)
            .set_attributes((!attributes.is_empty()).then_some(attributes))
            .return_subscription_arn(true)
            .send()
            .await
            .map_err(|e| self.sns_error(e))?;
        output
            .subscription_arn()
            .map(str::to_owned)
            .ok_or_else(|| sns_missing("a subscription ARN"))
    }

    /// SNS `GetSubscriptionAttributes`, the ARN checked first.
    pub(super) async fn sns_get_subscription_attributes(
        &self,
        subscription_arn: &str,
    ) -> Result<SubscriptionAttributes, TransportError> {
        check_subscription_arn(subscription_arn).map_err(TransportError::unsent)?;
        let output = self
            .sns()?
            .get_subscription_attributes()
            .subscription_arn(subscription_arn)
            .send()
            .await
            .map_err(|e| self.sns_error(e))?;
        Ok(output
            .attributes()
            .into_iter()
            .flatten()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect())
    }

    /// SNS `ListSubscriptionsByTopic`, following `NextToken` until the last page (SNS lists 100 a
    /// page).
    pub(super) async fn sns_list_subscriptions_by_topic(
        &self,
        topic_arn: &str,
    ) -> Result<Vec<Subscription>, TransportError> {
        TopicArn::parse(topic_arn).map_err(TransportError::unsent)?;
        let mut subscriptions = Vec::new();
        let mut next_token: Option<String> = None;
        loop {
            let output = self
                .sns()?
                .list_subscriptions_by_topic()
                .topic_arn(topic_arn)
                .set_next_token(next_token.take())
                .send()
                .await
                .map_err(|e| self.sns_error(e))?;
            subscriptions.extend(output.subscriptions().iter().map(from_sdk_subscription));
            match output.next_token() {
                Some(token) if !token.is_empty() => next_token = Some(token.to_owned()),
                _ => return Ok(subscriptions),
            }
        }
    }

    /// SNS `PublishBatch`: the batch checked as a whole (entries, ids, total size), then each entry
    /// by [`check_publish`]; entries that break a rule are answered as failed entries and only the
    /// rest go out.
    pub(super) async fn sns_publish_batch(
        &self,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
    ) -> Result<PublishBatchResult, TransportError> {
        let topic = TopicArn::parse(topic_arn).map_err(TransportError::unsent)?;
        // Whether the topic deduplicates by content is the service's to say.
        let target = PublishTarget::new(topic.name()).content_based_dedup(topic.is_fifo());
        check_publish_batch(&entries, target).map_err(TransportError::unsent)?;
        let (request, mut result) = split_checked(
            entries,
            |entry| &entry.id,
            |entry| {
                check_publish(&entry.publish, target)?;
                let publish = &entry.publish;
                let attributes = publish
                    .message_attributes
                    .iter()
                    .map(|(name, value)| Ok((name.clone(), to_sdk_attribute(value)?)))
                    .collect::<Result<HashMap<_, _>, TransportError>>()?;
                PublishBatchRequestEntry::builder()
                    .id(entry.id.as_ref())
                    .message(&publish.message)
                    .set_subject(publish.subject.clone())
                    .set_message_group_id(publish.group_id.clone())
                    .set_message_deduplication_id(publish.dedup_id.clone())
                    .set_message_attributes((!attributes.is_empty()).then_some(attributes))
                    .build()
                    .map_err(unbuildable)
            },
        );
        if request.is_empty() {
            return Ok(result);
        }
        let output = self
            .sns()?
            .publish_batch()
            .topic_arn(topic_arn)
            .set_publish_batch_request_entries(Some(request))
            .send()
            .await
            .map_err(|e| self.sns_error(e))?;
        for entry in output.successful() {
            result.successful.push((
                answered_entry_id(entry.id().unwrap_or_default()),
                Published {
                    message_id: entry.message_id().unwrap_or_default().to_owned(),
                    sequence_number: entry.sequence_number().map(str::to_owned),
                    // SNS does not say; a repeat is answered as a publish.
                    duplicate: false,
                },
            ));
        }
        result.failed.extend(sns_failures(output.failed()));
        Ok(result)
    }
}

/// Checks a subscription ARN's shape as the in-process account reads it: a topic's ARN, `:`, and
/// an id. SNS answers `InvalidParameter`.
fn check_subscription_arn(subscription_arn: &str) -> Result<(), TransportError> {
    match subscription_arn.rsplit_once(':') {
        Some((topic_arn, id)) if !id.is_empty() && TopicArn::parse(topic_arn).is_ok() => Ok(()),
        _ => fail(
            ErrorKind::InvalidParameter,
            format!(
                "Invalid parameter: SubscriptionArn: `{subscription_arn}` is not a subscription \
                 ARN (a topic's ARN, `:` and an id)"
            ),
        ),
    }
}

/// A message attribute in the SDK's words: SNS's types are the crate's (`String`, `String.Array`,
/// `Number`, `Binary`).
pub(super) fn to_sdk_attribute(
    value: &MessageAttributeValue,
) -> Result<SdkAttribute, TransportError> {
    SdkAttribute::builder()
        .data_type(&value.data_type)
        .set_string_value(value.string_value.clone())
        .set_binary_value(
            value
                .binary_value
                .clone()
                .map(aws_sdk_sns::primitives::Blob::new),
        )
        .build()
        .map_err(unbuildable)
}

/// A subscription as `ListSubscriptionsByTopic` lists it; a field SNS left out is empty.
fn from_sdk_subscription(subscription: &aws_sdk_sns::types::Subscription) -> Subscription {
    let text = |field: Option<&str>| field.unwrap_or_default().to_owned();
    Subscription {
        subscription_arn: text(subscription.subscription_arn()),
        topic_arn: text(subscription.topic_arn()),
        protocol: text(subscription.protocol()),
        endpoint: text(subscription.endpoint()),
        owner: text(subscription.owner()),
    }
}

/// `PublishBatch`'s failed entries, by SNS's codes.
pub(super) fn sns_failures(failed: &[BatchResultErrorEntry]) -> Vec<BatchFailure> {
    failed
        .iter()
        .map(|entry| {
            batch_failure(
                entry.id(),
                entry.code(),
                entry.message(),
                entry.sender_fault(),
            )
        })
        .collect()
}

/// An SNS request that could not be built: a required field the rules let through.
fn unbuildable(error: aws_sdk_sns::error::BuildError) -> TransportError {
    TransportError::service(ErrorKind::InvalidParameter, error.to_string())
}

/// An SNS answer without a field it always has.
fn sns_missing(what: &str) -> TransportError {
    TransportError::Unavailable {
        message: format!("SNS answered without {what}"),
    }
}
