//! How a broker looks a topic up once ([`Resolver::resolve_topic`]): by the ARN it has in the
//! backend's account and region, or by creating it when declared `create_if_missing`; and the
//! queue ARNs that tell the broker that account and region. See [`topic`](super::topic) for why.
//! The [`Client`] reaches both through its resolver.

use std::sync::{Arc, PoisonError};

use crate::model::rules::ErrorKind;
use crate::model::subscription::{
    TopicAttributes, CONTENT_BASED_DEDUP_ATTRIBUTE, FIFO_TOPIC_ATTRIBUTE,
};
use crate::model::SnsTopic;
use crate::transport::TransportError;

use super::resolver::Resolver;
use super::topic::{described, topic_missing, Home, ResolvedTopic};
use super::Client;

impl Client {
    /// The topic's ARN and attributes, looked up once: see [`Resolver::resolve_topic`].
    pub(crate) async fn resolve_topic(
        &self,
        topic: &SnsTopic,
    ) -> Result<ResolvedTopic, TransportError> {
        self.resolver.resolve_topic(topic).await
    }

    /// The ARN of the queue at `url`, read once: see [`Resolver::queue_arn`].
    pub(crate) async fn queue_arn(&self, url: &str) -> Result<String, TransportError> {
        self.resolver.queue_arn(url).await
    }
}

impl Resolver {
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
