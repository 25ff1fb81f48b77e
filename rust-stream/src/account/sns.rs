//! The account's SNS operations: topics, subscriptions of the account's queues, and publishes
//! delivered into those queues, each a method of [`Account`] named and shaped like the SNS action.
//!
//! A publish is checked by the model's rules, deduplicated on a FIFO topic (`topics.rs`), and then
//! delivered in one step to every subscription whose filter policy takes it: the subscribed
//! queues are locked together (in the account's order, the newer queue first) and each message
//! goes through the queue's own send path, so the queue's rules, delays, deduplication and limits
//! apply as to any send, and no receiver sees some of a publish's copies without the others. A
//! delivery SNS would fail (a queue that does not exist, a raw delivery with more than 10
//! attributes, a message the queue refuses) is dropped with a warning, as SNS drops it for a
//! subscription without a dead-letter queue; the publish still succeeds. No queue policy is
//! needed in process.
//!
//! Locking: the topics have one lock, taken first and held for a whole publish, so a FIFO
//! topic's sequence numbers and its deliveries into each queue follow one order. Under it the map
//! of queues is locked alone, to find the subscribed queues, and released before their locks are
//! taken. No operation takes the topics' lock while it holds another.

use std::sync::{Arc, MutexGuard, PoisonError};

use super::ids::{Now, ACCOUNT_ID};
use super::queue::Queue;
use super::topics::{Accepted, Topic, Topics};
use super::{Account, Slot, State, REGION};
use crate::model::rules::{fail, ErrorKind};
use crate::model::subscription::{
    check_subscribe, check_topic_attributes, sqs_queue_name, Subscribe, Subscription,
    SubscriptionAttributes, TopicAttributes, FIFO_TOPIC_ATTRIBUTE, SQS_PROTOCOL,
};
use crate::model::topic::{
    check_publish_batch, Publish, PublishBatchEntry, PublishBatchResult, Published, TopicArn,
};
use crate::transport::{BatchResult, TransportError};

/// A publish the topic accepted and will deliver.
struct Delivery {
    publish: Publish,
    published: Published,
    dedup_id: Option<String>,
}

impl Account {
    fn topics(&self) -> MutexGuard<'_, Topics> {
        // Every operation checks before it changes a topic: consistent whenever unlocked.
        self.inner
            .topics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The ARN a topic of this name has in this account.
    pub fn topic_arn_for(&self, name: &str) -> String {
        format!("arn:aws:sns:{REGION}:{ACCOUNT_ID}:{name}")
    }

    /// SNS `CreateTopic`: creates a topic (FIFO with `FifoTopic=true`, its name ending in
    /// `.fifo`) and returns its ARN, or returns the ARN of the topic of this name when every
    /// attribute given is the one it has.
    ///
    /// # Errors
    ///
    /// `InvalidParameter`: a bad name, an attribute `CreateTopic` does not take or a bad value,
    /// content-based deduplication on a standard topic, a topic of this name with other
    /// attributes.
    pub async fn create_topic(
        &self,
        name: &str,
        attributes: TopicAttributes,
    ) -> Result<String, TransportError> {
        let settings = check_topic_attributes(name, &attributes).map_err(TransportError::unsent)?;
        let arn = TopicArn::new(REGION, ACCOUNT_ID, name)?;
        self.topics().create(arn, settings, attributes)
    }

    /// Creates a FIFO topic (`FifoTopic=true`), with content-based deduplication when asked.
    ///
    /// # Errors
    ///
    /// As [`create_topic`](Self::create_topic).
    pub async fn create_fifo_topic(
        &self,
        name: &str,
        content_based_dedup: bool,
    ) -> Result<String, TransportError> {
        let mut attributes =
            TopicAttributes::from([(FIFO_TOPIC_ATTRIBUTE.to_owned(), "true".to_owned())]);
        if content_based_dedup {
            attributes.insert("ContentBasedDeduplication".to_owned(), "true".to_owned());
        }
        self.create_topic(name, attributes).await
    }

    /// SNS `GetTopicAttributes`.
    ///
    /// # Errors
    ///
    /// `InvalidParameter` for a malformed ARN; `NotFound`.
    pub async fn get_topic_attributes(
        &self,
        topic_arn: &str,
    ) -> Result<TopicAttributes, TransportError> {
        Ok(self.topics().get(topic_arn)?.attributes())
    }

    /// SNS `Subscribe` of a queue (protocol `sqs`, the queue's ARN as endpoint): returns the
    /// subscription's ARN, confirmed at once, or the existing subscription's when the queue is
    /// subscribed already with the attributes given. As on SNS, the queue need not exist yet: a
    /// publish finds it when it delivers.
    ///
    /// # Errors
    ///
    /// `InvalidParameter` (the model's [`check_subscribe`]: a malformed ARN, an unknown protocol,
    /// a FIFO queue on a standard topic, a bad attribute or filter policy, the queue subscribed
    /// with other attributes); `NotFound`; `UnsupportedOperation` for a protocol other than `sqs`,
    /// which the account cannot deliver to.
    pub async fn subscribe(&self, request: Subscribe) -> Result<String, TransportError> {
        let (_, settings) = check_subscribe(&request).map_err(TransportError::unsent)?;
        if request.protocol != SQS_PROTOCOL {
            return fail(
                ErrorKind::UnsupportedOperation,
                format!(
                    "the in-process account delivers to SQS queues only; protocol `{}` is not \
                     simulated: subscribe a queue (protocol `sqs`, the queue's ARN)",
                    request.protocol
                ),
            );
        }
        self.topics()
            .get_mut(&request.topic_arn)?
            .subscribe(request, settings)
    }

    /// SNS `GetSubscriptionAttributes`.
    ///
    /// # Errors
    ///
    /// `InvalidParameter` for a malformed ARN; `NotFound`.
    pub async fn get_subscription_attributes(
        &self,
        subscription_arn: &str,
    ) -> Result<SubscriptionAttributes, TransportError> {
        let Some((topic_arn, _)) = subscription_arn.rsplit_once(':') else {
            return fail(
                ErrorKind::InvalidParameter,
                format!(
                    "Invalid parameter: SubscriptionArn: `{subscription_arn}` is not a \
                     subscription ARN (a topic's ARN, `:` and an id)"
                ),
            )
            .map_err(TransportError::unsent);
        };
        let topics = self.topics();
        let topic = topics.get(topic_arn)?;
        Ok(topic.subscription(subscription_arn)?.attributes(topic))
    }

    /// SNS `ListSubscriptionsByTopic`, all of them, in the order they were made.
    ///
    /// # Errors
    ///
    /// `InvalidParameter` for a malformed ARN; `NotFound`.
    pub async fn list_subscriptions_by_topic(
        &self,
        topic_arn: &str,
    ) -> Result<Vec<Subscription>, TransportError> {
        Ok(self.topics().get(topic_arn)?.list_subscriptions())
    }

    /// SNS `Publish`: checks the publish, deduplicates it on a FIFO topic (a repeat within 5
    /// minutes is accepted, answered with the original's id and not delivered again), and
    /// delivers it to every subscription whose filter policy takes it in one step, through each
    /// queue's own send path. A delivery SNS would fail (the queue does not exist or refuses the
    /// message, a raw delivery of more than 10 attributes) is dropped with a warning.
    ///
    /// # Errors
    ///
    /// `InvalidParameter` for a malformed ARN or a publish the topic refuses (the model's
    /// [`check_publish`](crate::model::topic::check_publish)), `InvalidParameterValue` for a bad
    /// attribute; `NotFound`.
    pub async fn publish(
        &self,
        topic_arn: &str,
        publish: Publish,
    ) -> Result<Published, TransportError> {
        let entries = vec![PublishBatchEntry::new("0", publish)];
        let mut result = self.publish_entries(topic_arn, entries, false)?;
        match (result.successful.pop(), result.failed.pop()) {
            (Some((_, published)), _) => Ok(published),
            (None, Some(failure)) => fail(failure.kind, failure.message),
            (None, None) => unreachable!("one entry is answered once"),
        }
    }

    /// SNS `PublishBatch`: entries are published in request order, each as
    /// [`publish`](Self::publish) does, and each succeeds or fails alone; those that succeed are
    /// delivered in one step.
    ///
    /// # Errors
    ///
    /// `InvalidParameter` for a malformed ARN; `NotFound`; `EmptyBatchRequest`,
    /// `TooManyEntriesInBatchRequest`, `InvalidBatchEntryId`, `BatchEntryIdsNotDistinct`,
    /// `BatchRequestTooLong` for the whole batch.
    pub async fn publish_batch(
        &self,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
    ) -> Result<PublishBatchResult, TransportError> {
        self.publish_entries(topic_arn, entries, true)
    }

    /// Publishes `entries` to the topic, checked as a batch when `batch` (a single `Publish` has
    /// no batch rules).
    fn publish_entries(
        &self,
        topic_arn: &str,
        entries: Vec<PublishBatchEntry>,
        batch: bool,
    ) -> Result<PublishBatchResult, TransportError> {
        TopicArn::parse(topic_arn).map_err(TransportError::unsent)?;
        let now = self.now();
        let mut topics = self.topics();
        let topic = topics.get_mut(topic_arn)?;
        if batch {
            check_publish_batch(&entries, topic.target()).map_err(TransportError::unsent)?;
        }
        let mut result = BatchResult::default();
        let mut deliveries = Vec::with_capacity(entries.len());
        for entry in entries {
            match topic.accept(&entry.publish, now.instant) {
                Ok(Accepted::Deliver {
                    published,
                    dedup_id,
                }) => {
                    result.successful.push((entry.id, published.clone()));
                    deliveries.push(Delivery {
                        publish: entry.publish,
                        published,
                        dedup_id,
                    });
                }
                Ok(Accepted::Duplicate(original)) => result.successful.push((entry.id, original)),
                Err(error) => result.failed.push(error.into_batch_failure(entry.id)),
            }
        }
        if !deliveries.is_empty() {
            self.deliver(topic, &deliveries, now);
        }
        Ok(result)
    }

    /// Delivers accepted publishes to the topic's subscriptions, in publish order and, for each,
    /// in subscription order, under every subscribed queue's lock at once.
    fn deliver(&self, topic: &Topic, deliveries: &[Delivery], now: Now) {
        // The map's lock is held alone, as everywhere in the account.
        let queues: Vec<Option<Arc<Slot>>> = {
            let state = self.state();
            topic
                .subscriptions
                .iter()
                .map(|subscription| self.queue_by_arn(&state, &subscription.endpoint))
                .collect()
        };
        // Every message is made before any queue is locked.
        let mut sends = Vec::new();
        for delivery in deliveries {
            for (subscription, queue) in topic.subscriptions.iter().zip(&queues) {
                if !subscription.wants(&delivery.publish) {
                    continue;
                }
                let Some(slot) = queue else {
                    tracing::warn!(
                        messaging.destination.name = topic.arn.name(),
                        endpoint = %subscription.endpoint,
                        "subscribed queue does not exist: the delivery is dropped, as SNS drops it"
                    );
                    continue;
                };
                let message = subscription.message(
                    topic,
                    &delivery.publish,
                    &delivery.published,
                    delivery.dedup_id.as_deref(),
                    slot.fifo,
                    now.epoch_ms,
                );
                match message {
                    Ok(message) => sends.push((slot, message)),
                    Err(error) => tracing::warn!(
                        messaging.destination.name = topic.arn.name(),
                        endpoint = %subscription.endpoint,
                        %error,
                        "delivery discarded, as SNS discards it"
                    ),
                }
            }
        }
        let mut slots: Vec<&Arc<Slot>> = Vec::new();
        for (slot, _) in &sends {
            if !slots.iter().any(|taken| Arc::ptr_eq(taken, slot)) {
                slots.push(slot);
            }
        }
        // The account's lock order: the newer queue first.
        slots.sort_by_key(|slot| std::cmp::Reverse(slot.incarnation));
        let mut locked: Vec<MutexGuard<'_, Queue>> =
            slots.iter().map(|slot| slot.lock_at(now.moment)).collect();
        for (slot, message) in sends {
            let at = slots
                .iter()
                .position(|taken| Arc::ptr_eq(taken, slot))
                .expect("every sending queue is locked");
            if let Err(error) = locked[at].send(message, now) {
                tracing::warn!(
                    messaging.destination.name = topic.arn.name(),
                    queue = %slot.url,
                    %error,
                    "the subscribed queue refused the delivery: dropped, as SNS drops it"
                );
            }
        }
        drop(locked);
        for slot in slots {
            slot.notify.notify_waiters();
        }
    }

    /// The account's queue whose ARN is `arn`, if it exists.
    fn queue_by_arn(&self, state: &State, arn: &str) -> Option<Arc<Slot>> {
        let name = sqs_queue_name(arn)?;
        (self.queue_arn_for(name) == arn)
            .then(|| state.queues.get(name).cloned())
            .flatten()
    }
}

#[cfg(test)]
mod tests;
