//! Topics resolved once: a topic's ARN and the attributes its publishes are checked against,
//! looked up (or created) once per broker, like queues, in a cell by name.
//!
//! SNS has no `GetTopicArn`. `CreateTopic` answers the ARN of an existing topic, but creates a
//! missing one, and needs `sns:CreateTopic`; so it is called only for a topic declared
//! `create_if_missing`. Any other topic is found by `GetTopicAttributes` on the ARN it would have:
//! `arn:PARTITION:sns:REGION:ACCOUNT:NAME`, in the account and region of the broker's queues,
//! which the broker learns from the first queue ARN it reads (`GetQueueAttributes QueueArn`, the
//! call a subscription's endpoint needs anyway). One backend is one account and region, so every
//! queue ARN says the same; no STS call, no configuration.

use std::sync::{Arc, PoisonError};

use crate::model::rules::ErrorKind;
use crate::model::topic::{
    PublishTarget, TopicAttributes, CONTENT_BASED_DEDUP_ATTRIBUTE, DEFAULT_MAX_MESSAGE_SIZE,
    FIFO_TOPIC_ATTRIBUTE,
};
use crate::model::SnsTopic;
use crate::transport::TransportError;

use super::Client;

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
    fn of(arn: &str) -> Option<Self> {
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
    fn topic_arn(&self, name: &str) -> String {
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

impl Client {
    /// The topic's ARN and attributes, looked up once (and created when declared
    /// `create_if_missing`, as every declaration of it alive on the broker describes it). A failed
    /// lookup is not kept, so the next caller tries again.
    pub(crate) async fn resolve_topic(
        &self,
        topic: &SnsTopic,
    ) -> Result<ResolvedTopic, TransportError> {
        let cell = self.topic_cell(&topic.name);
        if let Some(resolved) = cell.get() {
            return Ok(resolved.clone());
        }
        let topic = self.declarations().for_topic_publisher(topic);
        cell.get_or_try_init(|| self.look_up_topic(&topic))
            .await
            .cloned()
    }

    /// The ARN of the queue at `url`, read once (`GetQueueAttributes QueueArn`); the first one
    /// read tells the broker its account and region.
    pub(crate) async fn queue_arn(&self, url: &str) -> Result<String, TransportError> {
        if let Some(arn) = self
            .queue_arns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(url)
        {
            return Ok(arn.clone());
        }
        let attributes = self
            .transport
            .get_queue_attributes(url, &["QueueArn"])
            .await?;
        let Some(arn) = attributes.get("QueueArn").filter(|arn| !arn.is_empty()) else {
            return Err(TransportError::service(
                ErrorKind::InvalidAttributeName,
                format!("the queue at `{url}` answered no QueueArn"),
            ));
        };
        self.learn_home(arn);
        self.queue_arns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(url.to_owned(), arn.clone());
        Ok(arn.clone())
    }

    /// Keeps the account and region `arn` names, if none is known yet.
    fn learn_home(&self, arn: &str) {
        if let Some(home) = Home::of(arn) {
            let _ = self.home.set(home);
        }
    }

    /// The account and region of the broker's backend: known once a queue's ARN was read, or else
    /// read from the first queue the broker resolved.
    async fn home(&self) -> Option<Home> {
        if let Some(home) = self.home.get() {
            return Some(home.clone());
        }
        let (_, url) = self.resolved_queues().into_iter().next()?;
        self.queue_arn(&url).await.ok()?;
        self.home.get().cloned()
    }

    /// The cell a topic is resolved in, made on first use.
    fn topic_cell(&self, name: &str) -> Arc<tokio::sync::OnceCell<ResolvedTopic>> {
        self.topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// Finds the topic by its ARN, or creates it when declared `create_if_missing`; then reads
    /// its attributes.
    async fn look_up_topic(&self, topic: &SnsTopic) -> Result<ResolvedTopic, TransportError> {
        let found = match self.home().await {
            Some(home) => {
                let arn = home.topic_arn(&topic.name);
                match self.transport.get_topic_attributes(&arn).await {
                    Ok(attributes) => Some((arn, attributes)),
                    Err(error) if error.kind() == Some(ErrorKind::NotFound) => None,
                    Err(error) => return Err(error),
                }
            }
            None if topic.create_if_missing => None,
            None => {
                return Err(TransportError::service(
                    ErrorKind::NotFound,
                    format!(
                        "topic `{}` cannot be looked up: SNS has no GetTopicArn, and the broker \
                         knows no queue yet to learn its account and region from; declare it \
                         `.create_if_missing()` (CreateTopic answers an existing topic's ARN), or \
                         resolve a queue of the broker first (publish to it, or start an app)",
                        topic.name
                    ),
                ))
            }
        };
        let (arn, attributes) = match found {
            Some(found) => found,
            None if topic.create_if_missing => {
                let arn = self.create_topic(topic).await?;
                let attributes = self.transport.get_topic_attributes(&arn).await?;
                (arn, attributes)
            }
            None => return Err(topic_missing(&topic.name)),
        };
        Ok(described(topic, arn, &attributes))
    }

    /// Creates a topic declared `create_if_missing`: FIFO on a `.fifo` name, with content-based
    /// deduplication when declared. Answers the ARN of an existing topic with these attributes.
    async fn create_topic(&self, topic: &SnsTopic) -> Result<String, TransportError> {
        let mut attributes = TopicAttributes::new();
        if topic.is_fifo() {
            attributes.insert(FIFO_TOPIC_ATTRIBUTE.into(), "true".into());
            if let Some(dedup) = topic.content_based_dedup {
                attributes.insert(CONTENT_BASED_DEDUP_ATTRIBUTE.into(), dedup.to_string());
            }
        }
        let arn = self.transport.create_topic(&topic.name, attributes).await?;
        self.learn_home(&arn);
        tracing::info!(messaging.system = "aws_sns", messaging.destination.name = %topic.name, topic.arn = %arn, "topic created");
        Ok(arn)
    }
}

/// What the topic's attributes say a publish must respect.
fn described(topic: &SnsTopic, arn: String, attributes: &TopicAttributes) -> ResolvedTopic {
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
