//! The account's SNS topics: each topic's settings and attributes, its subscriptions of SQS
//! queues, and what a publish needs of the topic before it is delivered (SNS's checks, a FIFO
//! topic's 5-minute deduplication and its sequence numbers).
//!
//! This file holds no queue: delivering a publish into the subscribed queues is the account's,
//! in `sns.rs`, which resolves each subscription's queue and sends through the queue's own send
//! path under the queues' locks. What a subscription sends a queue for a publish (envelope or raw
//! body, group and deduplication ids) is [`TopicSubscription::message`], from the model's
//! [`QueueDelivery`].

use std::collections::HashMap;

use tokio::time::Instant;

use super::fifo::Window;
use super::ids::ACCOUNT_ID;
use crate::model::envelope::{Envelope, QueueDelivery};
use crate::model::filter_policy::{FilterPolicy, FilterPolicyScope};
use crate::model::rules::{fail, ErrorKind};
use crate::model::subscription::{
    Subscribe, Subscription, SubscriptionAttributes, SubscriptionSettings, TopicAttributes,
    TopicSettings, CONTENT_BASED_DEDUP_ATTRIBUTE, FIFO_TOPIC_ATTRIBUTE, FILTER_POLICY_ATTRIBUTE,
    FILTER_POLICY_SCOPE_ATTRIBUTE, RAW_MESSAGE_DELIVERY_ATTRIBUTE,
};
use crate::model::topic::{
    check_publish, content_dedup_id, Publish, PublishTarget, Published, TopicArn, DEDUP_WINDOW,
};
use crate::transport::{SendMessage, TransportError};

/// The account's topics by name (a topic's ARN is the account's region and id and its name).
#[derive(Debug, Default)]
pub(super) struct Topics {
    by_name: HashMap<String, Topic>,
}

impl Topics {
    /// `CreateTopic`: creates the topic `arn` names, or returns the ARN of the existing one when
    /// every attribute given is the one it has (SNS's idempotency).
    ///
    /// `arn`'s name must have been checked with `attributes`
    /// ([`check_topic_attributes`](crate::model::subscription::check_topic_attributes)), which
    /// gives `settings`.
    pub(super) fn create(
        &mut self,
        arn: TopicArn,
        settings: TopicSettings,
        attributes: TopicAttributes,
    ) -> Result<String, TransportError> {
        if let Some(existing) = self.by_name.get(arn.name()) {
            let differs = attributes
                .iter()
                .find(|(name, value)| !existing.has_attribute(name, value));
            return match differs {
                Some((name, _)) => fail(
                    ErrorKind::InvalidParameter,
                    format!(
                        "Invalid parameter: Attributes Reason: Topic already exists with \
                         different attributes: topic `{}` has another {name}; use its attributes \
                         or another name",
                        arn.name()
                    ),
                ),
                None => Ok(existing.arn_text.clone()),
            };
        }
        let mut kept = attributes;
        kept.remove(FIFO_TOPIC_ATTRIBUTE);
        kept.remove(CONTENT_BASED_DEDUP_ATTRIBUTE);
        let topic = Topic {
            arn_text: arn.to_string(),
            arn,
            settings,
            attributes: kept,
            subscriptions: Vec::new(),
            dedup: Window::default(),
            last_sequence: 0,
        };
        let arn_text = topic.arn_text.clone();
        tracing::debug!(
            messaging.destination.name = topic.arn.name(),
            fifo = settings.fifo,
            "topic created"
        );
        self.by_name.insert(topic.arn.name().to_owned(), topic);
        Ok(arn_text)
    }

    /// The topic whose ARN is `arn`.
    pub(super) fn get(&self, arn: &str) -> Result<&Topic, TransportError> {
        let name = TopicArn::parse(arn)
            .map_err(TransportError::unsent)?
            .name()
            .to_owned();
        match self.by_name.get(&name) {
            Some(topic) if topic.arn_text == arn => Ok(topic),
            _ => not_found(arn),
        }
    }

    /// The topic whose ARN is `arn`, to change.
    pub(super) fn get_mut(&mut self, arn: &str) -> Result<&mut Topic, TransportError> {
        let name = TopicArn::parse(arn)
            .map_err(TransportError::unsent)?
            .name()
            .to_owned();
        match self.by_name.get_mut(&name) {
            Some(topic) if topic.arn_text == arn => Ok(topic),
            _ => not_found(arn),
        }
    }
}

/// SNS's answer for a topic that does not exist.
fn not_found<T>(arn: &str) -> Result<T, TransportError> {
    fail(
        ErrorKind::NotFound,
        format!("Topic does not exist: no topic has ARN `{arn}`; create it first or check the ARN"),
    )
}

/// One topic of the account.
#[derive(Debug)]
pub(super) struct Topic {
    pub(super) arn: TopicArn,
    /// The ARN as text, as callers name the topic.
    arn_text: String,
    settings: TopicSettings,
    /// The attributes set at creation, but `FifoTopic` and `ContentBasedDeduplication`, which
    /// `settings` holds.
    attributes: TopicAttributes,
    /// In the order they were made, which is the order a publish is delivered in.
    pub(super) subscriptions: Vec<TopicSubscription>,
    /// A FIFO topic's deduplication ids of the last 5 minutes and what their publish answered.
    dedup: Window<String, Published>,
    /// The sequence number of the last publish to a FIFO topic.
    last_sequence: u128,
}

/// What a topic made of a publish it accepted.
#[derive(Debug)]
pub(super) enum Accepted {
    /// New: deliver it, with this deduplication id on a FIFO topic (its own or its content's).
    Deliver {
        published: Published,
        dedup_id: Option<String>,
    },
    /// A FIFO topic saw its deduplication id within 5 minutes: accepted, answered with the
    /// original's id and sequence number, and not delivered again.
    Duplicate(Published),
}

impl Topic {
    /// Whether the topic is FIFO.
    pub(super) fn fifo(&self) -> bool {
        self.settings.fifo
    }

    /// What a publish is checked against.
    pub(super) fn target(&self) -> PublishTarget<'_> {
        PublishTarget::new(self.arn.name()).content_based_dedup(self.settings.content_based_dedup)
    }

    /// Whether `CreateTopic` attribute `name` = `value` is what the topic has.
    fn has_attribute(&self, name: &str, value: &str) -> bool {
        let flag = |set: bool| value.eq_ignore_ascii_case(if set { "true" } else { "false" });
        match name {
            FIFO_TOPIC_ATTRIBUTE => flag(self.settings.fifo),
            CONTENT_BASED_DEDUP_ATTRIBUTE => flag(self.settings.content_based_dedup),
            _ => self.attributes.get(name).is_some_and(|set| set == value),
        }
    }

    /// `GetTopicAttributes`: the attributes set, the topic's ARN and owner, its subscription
    /// counts (every subscription of a queue is confirmed at once), and on a FIFO topic
    /// `FifoTopic` and `ContentBasedDeduplication`.
    pub(super) fn attributes(&self) -> TopicAttributes {
        let mut all = self.attributes.clone();
        let confirmed = self.subscriptions.len().to_string();
        for (name, value) in [
            ("TopicArn", self.arn_text.clone()),
            ("Owner", ACCOUNT_ID.to_owned()),
            ("SubscriptionsConfirmed", confirmed),
            ("SubscriptionsPending", "0".to_owned()),
            ("SubscriptionsDeleted", "0".to_owned()),
        ] {
            all.insert(name.to_owned(), value);
        }
        if self.settings.fifo {
            all.insert(FIFO_TOPIC_ATTRIBUTE.to_owned(), "true".to_owned());
            all.insert(
                CONTENT_BASED_DEDUP_ATTRIBUTE.to_owned(),
                self.settings.content_based_dedup.to_string(),
            );
        }
        all
    }

    /// `Subscribe`, checked ([`check_subscribe`](crate::model::subscription::check_subscribe) gave
    /// `settings`): the new subscription's ARN, or the existing one's when the endpoint is
    /// subscribed already and every attribute given is the one it has.
    pub(super) fn subscribe(
        &mut self,
        request: Subscribe,
        settings: SubscriptionSettings,
    ) -> Result<String, TransportError> {
        let existing = self.subscriptions.iter().find(|subscription| {
            subscription.protocol == request.protocol && subscription.endpoint == request.endpoint
        });
        if let Some(existing) = existing {
            let differs = request
                .attributes
                .iter()
                .find(|(name, value)| !existing.has_attribute(name, value));
            return match differs {
                Some((name, _)) => fail(
                    ErrorKind::InvalidParameter,
                    format!(
                        "Invalid parameter: Attributes Reason: Subscription already exists with \
                         different attributes: `{}` is subscribed to `{}` with another {name}",
                        request.endpoint,
                        self.arn.name()
                    ),
                ),
                None => Ok(existing.arn.clone()),
            };
        }
        let arn = self.arn.subscription_arn(&uuid::Uuid::new_v4().to_string());
        let mut attributes = request.attributes;
        // Stored as SNS reads them, so a repeat that spells `True` finds the same subscription.
        if attributes.contains_key(RAW_MESSAGE_DELIVERY_ATTRIBUTE) {
            attributes.insert(
                RAW_MESSAGE_DELIVERY_ATTRIBUTE.to_owned(),
                settings.raw_message_delivery.to_string(),
            );
        }
        tracing::debug!(
            messaging.destination.name = self.arn.name(),
            endpoint = %request.endpoint,
            raw = settings.raw_message_delivery,
            "queue subscribed to topic"
        );
        self.subscriptions.push(TopicSubscription {
            arn: arn.clone(),
            protocol: request.protocol,
            endpoint: request.endpoint,
            raw: settings.raw_message_delivery,
            filter_policy: settings.filter_policy,
            attributes,
        });
        Ok(arn)
    }

    /// The subscription whose ARN is `arn`.
    pub(super) fn subscription(&self, arn: &str) -> Result<&TopicSubscription, TransportError> {
        match self.subscriptions.iter().find(|s| s.arn == arn) {
            Some(subscription) => Ok(subscription),
            None => fail(
                ErrorKind::NotFound,
                format!("Subscription does not exist: no subscription has ARN `{arn}`"),
            ),
        }
    }

    /// `ListSubscriptionsByTopic`, in the order they were made.
    pub(super) fn list_subscriptions(&self) -> Vec<Subscription> {
        self.subscriptions
            .iter()
            .map(|subscription| Subscription {
                subscription_arn: subscription.arn.clone(),
                topic_arn: self.arn_text.clone(),
                protocol: subscription.protocol.clone(),
                endpoint: subscription.endpoint.clone(),
                owner: ACCOUNT_ID.to_owned(),
            })
            .collect()
    }

    /// Takes a publish: checks it against the topic's rules ([`check_publish`]), then on a FIFO
    /// topic deduplicates it over [`DEDUP_WINDOW`] by its deduplication id (or its message's
    /// SHA-256 with content-based deduplication) and gives it the topic's next sequence number.
    pub(super) fn accept(
        &mut self,
        publish: &Publish,
        now: Instant,
    ) -> Result<Accepted, TransportError> {
        check_publish(publish, self.target())?;
        if !self.settings.fifo {
            return Ok(Accepted::Deliver {
                published: Published {
                    message_id: uuid::Uuid::new_v4().to_string(),
                    sequence_number: None,
                    duplicate: false,
                },
                dedup_id: None,
            });
        }
        let dedup_id = match &publish.dedup_id {
            Some(id) => id.clone(),
            None => content_dedup_id(&publish.message),
        };
        if let Some(original) = self.dedup.get(&dedup_id, now) {
            return Ok(Accepted::Duplicate(Published {
                duplicate: true,
                ..original.clone()
            }));
        }
        self.last_sequence += 1;
        let published = Published {
            message_id: uuid::Uuid::new_v4().to_string(),
            sequence_number: Some(format!("{:020}", self.last_sequence)),
            duplicate: false,
        };
        self.dedup
            .insert(dedup_id.clone(), published.clone(), now + DEDUP_WINDOW);
        Ok(Accepted::Deliver {
            published,
            dedup_id: Some(dedup_id),
        })
    }
}

/// A subscription of a topic: an SQS queue by its ARN, how it receives, and what.
#[derive(Debug)]
pub(super) struct TopicSubscription {
    pub(super) arn: String,
    protocol: String,
    /// The queue's ARN.
    pub(super) endpoint: String,
    raw: bool,
    filter_policy: Option<FilterPolicy>,
    /// The attributes given when it was made.
    attributes: SubscriptionAttributes,
}

impl TopicSubscription {
    /// Whether `Subscribe` attribute `name` = `value` is what the subscription has (a flag read
    /// without regard to case, as SNS reads it).
    fn has_attribute(&self, name: &str, value: &str) -> bool {
        match (name, self.attribute(name)) {
            (RAW_MESSAGE_DELIVERY_ATTRIBUTE, Some(set)) => value.eq_ignore_ascii_case(&set),
            (_, set) => set.as_deref() == Some(value),
        }
    }

    /// The value of attribute `name` as `GetSubscriptionAttributes` shows it, defaults included.
    fn attribute(&self, name: &str) -> Option<String> {
        match name {
            RAW_MESSAGE_DELIVERY_ATTRIBUTE => Some(self.raw.to_string()),
            FILTER_POLICY_SCOPE_ATTRIBUTE => Some(
                self.filter_policy
                    .as_ref()
                    .map_or(FilterPolicyScope::default(), FilterPolicy::scope)
                    .as_str()
                    .to_owned(),
            ),
            _ => self.attributes.get(name).cloned(),
        }
    }

    /// `GetSubscriptionAttributes`: the attributes given, `RawMessageDelivery`, the filter
    /// policy's scope when it has one, and what the subscription is (queue subscriptions are
    /// confirmed at once).
    pub(super) fn attributes(&self, topic: &Topic) -> SubscriptionAttributes {
        let mut all = self.attributes.clone();
        for (name, value) in [
            ("SubscriptionArn", self.arn.clone()),
            ("TopicArn", topic.arn_text.clone()),
            ("Owner", ACCOUNT_ID.to_owned()),
            ("Protocol", self.protocol.clone()),
            ("Endpoint", self.endpoint.clone()),
            ("PendingConfirmation", "false".to_owned()),
            ("ConfirmationWasAuthenticated", "true".to_owned()),
            (RAW_MESSAGE_DELIVERY_ATTRIBUTE, self.raw.to_string()),
        ] {
            all.insert(name.to_owned(), value);
        }
        if self.filter_policy.is_some() {
            let scope = self.attribute(FILTER_POLICY_SCOPE_ATTRIBUTE);
            all.insert(
                FILTER_POLICY_SCOPE_ATTRIBUTE.to_owned(),
                scope.expect("always shown"),
            );
        } else {
            all.remove(FILTER_POLICY_ATTRIBUTE);
        }
        all
    }

    /// Whether the subscription's filter policy lets the publish through: no policy takes
    /// everything; a `MessageBody` policy takes only a JSON object message that matches.
    pub(super) fn wants(&self, publish: &Publish) -> bool {
        let Some(policy) = &self.filter_policy else {
            return true;
        };
        match policy.scope() {
            FilterPolicyScope::MessageAttributes => {
                policy.matches_attributes(&publish.message_attributes)
            }
            FilterPolicyScope::MessageBody => serde_json::from_str(&publish.message)
                .is_ok_and(|body: serde_json::Value| policy.matches_body(&body)),
        }
    }

    /// The SQS message this subscription sends a queue (FIFO or not) for a publish the topic
    /// accepted at `epoch_ms`: the envelope's JSON, or the raw message and its attributes.
    ///
    /// # Errors
    ///
    /// A raw delivery of more attributes than SNS sends to a queue (SNS discards it).
    pub(super) fn message(
        &self,
        topic: &Topic,
        publish: &Publish,
        published: &Published,
        dedup_id: Option<&str>,
        queue_fifo: bool,
        epoch_ms: u64,
    ) -> Result<SendMessage, TransportError> {
        let envelope = (!self.raw).then(|| {
            let envelope = Envelope::unsigned(
                publish,
                &topic.arn,
                published.message_id.as_str(),
                epoch_ms,
                &self.arn,
            );
            match &published.sequence_number {
                Some(number) => envelope.with_sequence_number(number.as_str()),
                None => envelope,
            }
        });
        QueueDelivery {
            envelope: envelope.as_ref(),
            topic_fifo: topic.fifo(),
            queue_fifo,
            dedup_id,
        }
        .message(publish)
    }
}
