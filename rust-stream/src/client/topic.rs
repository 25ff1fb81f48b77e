//! What a broker learns of a topic ([`ResolvedTopic`]) and of its backend's account and region
//! ([`Home`]); `topic_lookup` looks topics up with them, once per broker, like queues, in a cell
//! by name.
//!
//! SNS has no `GetTopicArn`. `CreateTopic` answers the ARN of an existing topic, but creates a
//! missing one, and needs `sns:CreateTopic`; so it is called only for a topic declared
//! `create_if_missing`. Any other topic is found by `GetTopicAttributes` on the ARN it would have:
//! `arn:PARTITION:sns:REGION:ACCOUNT:NAME`, in the account and region of the broker's queues,
//! which the broker learns from the first queue ARN it reads (`GetQueueAttributes QueueArn`, the
//! call a subscription's endpoint needs anyway). One backend is one account and region, so every
//! queue ARN says the same; no STS call, no configuration.

use crate::model::rules::ErrorKind;
use crate::model::subscription::{
    TopicAttributes, CONTENT_BASED_DEDUP_ATTRIBUTE, FIFO_TOPIC_ATTRIBUTE,
};
use crate::model::topic::{PublishTarget, DEFAULT_MAX_MESSAGE_SIZE};
use crate::model::SnsTopic;
use crate::transport::TransportError;

/// What a broker learns of a topic once: its ARN, and what each publish to it is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvedTopic {
    /// The topic's name, as the broker names it.
    pub(crate) name: String,
    /// The topic's ARN: where its publishes and subscriptions go.
    pub(crate) arn: String,
    /// The topic's `FifoTopic`.
    pub(crate) fifo: bool,
    /// The topic's `ContentBasedDeduplication`: a FIFO publish without a deduplication id is
    /// taken only when it is on, whatever the declaration says.
    pub(crate) content_based_dedup: bool,
    /// The largest publish (message and attributes) the topic takes.
    pub(crate) maximum_message_size: usize,
}

impl ResolvedTopic {
    /// What [`check_publish`](crate::model::topic::check_publish) checks a publish to this topic
    /// against.
    pub(crate) fn target(&self) -> PublishTarget<'_> {
        PublishTarget::new(&self.name)
            .content_based_dedup(self.content_based_dedup)
            .maximum_message_size(self.maximum_message_size)
    }
}

/// The account and region a broker's backend is in, as its ARNs say them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Home {
    partition: String,
    region: String,
    account: String,
}

impl Home {
    /// The partition, region and account of any ARN (`arn:PARTITION:SERVICE:REGION:ACCOUNT:..`).
    pub(super) fn of(arn: &str) -> Option<Self> {
        let mut parts = arn.split(':');
        let (Some("arn"), Some(partition), Some(_), Some(region), Some(account)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        if partition.is_empty() || region.is_empty() || account.is_empty() {
            return None;
        }
        Some(Self {
            partition: partition.to_owned(),
            region: region.to_owned(),
            account: account.to_owned(),
        })
    }

    /// The ARN a topic of this name has here.
    pub(super) fn topic_arn(&self, name: &str) -> String {
        format!(
            "arn:{}:sns:{}:{}:{name}",
            self.partition, self.region, self.account
        )
    }
}

/// The error a topic that does not exist (and is not to be created) is told by.
pub(crate) fn topic_missing(topic: &str) -> TransportError {
    TransportError::service(
        ErrorKind::NotFound,
        format!(
            "topic `{topic}` does not exist: create it, or declare it with \
             `SnsTopic::new(\"{topic}\").create_if_missing()`"
        ),
    )
}

/// What the topic's attributes say a publish must respect.
pub(super) fn described(
    topic: &SnsTopic,
    arn: String,
    attributes: &TopicAttributes,
) -> ResolvedTopic {
    let flag = |name: &str| attributes.get(name).is_some_and(|value| value == "true");
    ResolvedTopic {
        name: topic.name.clone(),
        arn,
        // A backend that leaves FifoTopic out of a standard topic's attributes still names a FIFO
        // topic `.fifo`.
        fifo: flag(FIFO_TOPIC_ATTRIBUTE) || topic.is_fifo(),
        content_based_dedup: flag(CONTENT_BASED_DEDUP_ATTRIBUTE),
        maximum_message_size: attributes
            .get("MaximumMessageSize")
            .and_then(|size| size.parse().ok())
            .unwrap_or(DEFAULT_MAX_MESSAGE_SIZE),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_arn_gives_the_topic_arn_of_its_account_and_region() {
        let home = Home::of("arn:aws-cn:sqs:cn-north-1:123456789012:orders.fifo").unwrap();
        assert_eq!(
            home.topic_arn("posted"),
            "arn:aws-cn:sns:cn-north-1:123456789012:posted"
        );
        assert_eq!(Home::of("arn:aws:sqs::123:q"), None, "no region");
        assert_eq!(Home::of("not an arn"), None);
    }
}
