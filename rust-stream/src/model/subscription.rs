//! SNS's management calls as data: a topic's attributes (`CreateTopic`, `GetTopicAttributes`), a
//! subscription's (`Subscribe`, `GetSubscriptionAttributes`), a [`Subscribe`] request and a
//! [`Subscription`] as `ListSubscriptionsByTopic` lists it, with the checks both backends make of
//! them before anything is sent.
//!
//! Publishes and topic names are in [`topic`](super::topic); this module stands on it (a
//! subscription names its topic by [`TopicArn`]).

use std::collections::BTreeMap;

use super::error::{ErrorKind, TransportError};
use super::filter_policy::{FilterPolicy, FilterPolicyScope};
use super::rules::{self, fail};
use super::topic::{check_topic_name, TopicArn};

/// A topic's attributes by name: what `CreateTopic` takes and `GetTopicAttributes` answers.
/// (CreateTopic, `Attributes`: <https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html>)
pub type TopicAttributes = BTreeMap<String, String>;

/// A subscription's attributes by name: what `Subscribe` takes and `GetSubscriptionAttributes`
/// answers.
/// (Subscribe, `Attributes`: <https://docs.aws.amazon.com/sns/latest/api/API_Subscribe.html>)
pub type SubscriptionAttributes = BTreeMap<String, String>;

/// `FifoTopic`: `true` makes a FIFO topic, whose name must end in `.fifo`.
pub const FIFO_TOPIC_ATTRIBUTE: &str = "FifoTopic";
/// `ContentBasedDeduplication`: on a FIFO topic, a publish without a deduplication id is
/// deduplicated by the SHA-256 of its message ([`content_dedup_id`](super::topic::content_dedup_id)).
pub const CONTENT_BASED_DEDUP_ATTRIBUTE: &str = "ContentBasedDeduplication";
/// `RawMessageDelivery`: `true` delivers the message as it was published instead of the JSON
/// envelope.
pub const RAW_MESSAGE_DELIVERY_ATTRIBUTE: &str = "RawMessageDelivery";
/// `FilterPolicy`: the JSON filter policy that picks the messages a subscription receives.
pub const FILTER_POLICY_ATTRIBUTE: &str = "FilterPolicy";
/// `FilterPolicyScope`: `MessageAttributes` (the default) or `MessageBody`.
pub const FILTER_POLICY_SCOPE_ATTRIBUTE: &str = "FilterPolicyScope";
/// The protocol of a subscription that delivers to an SQS queue; its endpoint is the queue's ARN.
pub const SQS_PROTOCOL: &str = "sqs";

/// The attributes `CreateTopic` takes.
/// (CreateTopic, `Attributes`: <https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html>)
pub const TOPIC_ATTRIBUTE_NAMES: &[&str] = &[
    "ArchivePolicy",
    CONTENT_BASED_DEDUP_ATTRIBUTE,
    "DeliveryPolicy",
    "DisplayName",
    FIFO_TOPIC_ATTRIBUTE,
    "FifoThroughputScope",
    "KmsMasterKeyId",
    "Policy",
    "SignatureVersion",
    "TracingConfig",
];

/// The attributes `Subscribe` takes.
/// (Subscribe, `Attributes`: <https://docs.aws.amazon.com/sns/latest/api/API_Subscribe.html>)
pub const SUBSCRIPTION_ATTRIBUTE_NAMES: &[&str] = &[
    "DeliveryPolicy",
    FILTER_POLICY_ATTRIBUTE,
    FILTER_POLICY_SCOPE_ATTRIBUTE,
    RAW_MESSAGE_DELIVERY_ATTRIBUTE,
    "RedrivePolicy",
    "ReplayPolicy",
    "SubscriptionRoleArn",
];

/// The protocols SNS delivers over.
/// (Subscribe, `Protocol`: <https://docs.aws.amazon.com/sns/latest/api/API_Subscribe.html>)
pub const PROTOCOLS: &[&str] = &[
    "application",
    "email",
    "email-json",
    "firehose",
    "http",
    "https",
    "lambda",
    "sms",
    SQS_PROTOCOL,
];

/// A `true`/`false` attribute, which SNS reads without regard to case.
fn parse_flag(attribute: &str, value: &str, reason_prefix: &str) -> Result<bool, TransportError> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => fail(
            ErrorKind::InvalidParameter,
            format!(
                "Invalid parameter: {reason_prefix}{attribute}: Invalid value [{value}]. Must be \
                 true or false."
            ),
        ),
    }
}

/// What a topic's `CreateTopic` attributes make of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicSettings {
    /// `FifoTopic=true`.
    pub fifo: bool,
    /// `ContentBasedDeduplication=true` (FIFO topics only).
    pub content_based_dedup: bool,
}

/// Checks a `CreateTopic` request: the name ([`check_topic_name`], its type from `FifoTopic`),
/// every attribute name one `CreateTopic` takes ([`TOPIC_ATTRIBUTE_NAMES`]), `FifoTopic` and
/// `ContentBasedDeduplication` `true` or `false`, and content-based deduplication on a FIFO topic
/// only. SNS answers `InvalidParameter` for each.
/// (CreateTopic: <https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html>;
/// <https://docs.aws.amazon.com/sns/latest/dg/fifo-message-dedup.html>)
pub fn check_topic_attributes(
    name: &str,
    attributes: &TopicAttributes,
) -> Result<TopicSettings, TransportError> {
    const REASON: &str = "Attributes Reason: ";
    let mut settings = TopicSettings::default();
    for (attribute, value) in attributes {
        match attribute.as_str() {
            FIFO_TOPIC_ATTRIBUTE => settings.fifo = parse_flag(attribute, value, REASON)?,
            CONTENT_BASED_DEDUP_ATTRIBUTE => {
                settings.content_based_dedup = parse_flag(attribute, value, REASON)?;
            }
            known if TOPIC_ATTRIBUTE_NAMES.contains(&known) => {}
            unknown => {
                return fail(
                    ErrorKind::InvalidParameter,
                    format!(
                        "Invalid parameter: {REASON}AttributeName: `{unknown}` is not an attribute \
                         CreateTopic takes; use one of {}",
                        TOPIC_ATTRIBUTE_NAMES.join(", ")
                    ),
                )
            }
        }
    }
    check_topic_name(name, settings.fifo)?;
    if settings.content_based_dedup && !settings.fifo {
        return fail(
            ErrorKind::InvalidParameter,
            format!(
                "Invalid parameter: {REASON}ContentBasedDeduplication: topic `{name}` is a \
                 standard topic; content-based deduplication is for FIFO topics only"
            ),
        );
    }
    Ok(settings)
}

/// A `Subscribe` request: the topic, the protocol and endpoint, and the subscription's
/// attributes. [`Subscribe::sqs`] subscribes a queue by its ARN.
///
/// ```
/// use rust_stream::model::filter_policy::{FilterPolicy, FilterPolicyScope};
/// use rust_stream::model::subscription::Subscribe;
///
/// let policy = FilterPolicy::parse(r#"{"kind": ["card"]}"#, FilterPolicyScope::MessageAttributes)?;
/// let subscribe = Subscribe::sqs(
///     "arn:aws:sns:us-east-1:000000000000:payments-posted",
///     "arn:aws:sqs:us-east-1:000000000000:ledger",
/// )
/// .raw_message_delivery(true)
/// .filter_policy(&policy);
/// assert_eq!(subscribe.attributes["RawMessageDelivery"], "true");
/// assert_eq!(subscribe.attributes["FilterPolicyScope"], "MessageAttributes");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct Subscribe {
    /// `TopicArn`: the topic subscribed to.
    pub topic_arn: String,
    /// `Protocol`: [`SQS_PROTOCOL`] for a queue.
    pub protocol: String,
    /// `Endpoint`: for `sqs`, the queue's ARN.
    pub endpoint: String,
    /// `Attributes`: `RawMessageDelivery`, `FilterPolicy`, `FilterPolicyScope`, ...
    pub attributes: SubscriptionAttributes,
}

impl Subscribe {
    /// Subscribes the queue whose ARN is `queue_arn` to the topic, with no attributes set
    /// (enveloped deliveries, every message).
    pub fn sqs(topic_arn: impl Into<String>, queue_arn: impl Into<String>) -> Self {
        Self {
            topic_arn: topic_arn.into(),
            protocol: SQS_PROTOCOL.to_owned(),
            endpoint: queue_arn.into(),
            attributes: SubscriptionAttributes::new(),
        }
    }

    /// Sets `RawMessageDelivery`.
    pub fn raw_message_delivery(self, raw: bool) -> Self {
        self.attribute(RAW_MESSAGE_DELIVERY_ATTRIBUTE, raw.to_string())
    }

    /// Sets `FilterPolicy` to the policy's JSON and `FilterPolicyScope` to its scope.
    pub fn filter_policy(self, policy: &FilterPolicy) -> Self {
        self.attribute(FILTER_POLICY_ATTRIBUTE, policy.as_json())
            .attribute(FILTER_POLICY_SCOPE_ATTRIBUTE, policy.scope().as_str())
    }

    /// Sets a subscription attribute.
    pub fn attribute(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.attributes.insert(name.into(), value.into());
        self
    }
}

/// What a subscription's attributes make of it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SubscriptionSettings {
    /// `RawMessageDelivery=true`.
    pub raw_message_delivery: bool,
    /// The parsed `FilterPolicy`, in its `FilterPolicyScope`; `None` delivers every message.
    pub filter_policy: Option<FilterPolicy>,
}

/// Checks a subscription's attributes: each a name `Subscribe` takes
/// ([`SUBSCRIPTION_ATTRIBUTE_NAMES`]), `RawMessageDelivery` `true` or `false`,
/// `FilterPolicyScope` `MessageAttributes` or `MessageBody`, and `FilterPolicy` a policy SNS
/// accepts in that scope ([`FilterPolicy::parse`]; an empty one is none). SNS answers
/// `InvalidParameter` for each.
/// (Subscribe: <https://docs.aws.amazon.com/sns/latest/api/API_Subscribe.html>;
/// SetSubscriptionAttributes: <https://docs.aws.amazon.com/sns/latest/api/API_SetSubscriptionAttributes.html>)
pub fn check_subscription_attributes(
    attributes: &SubscriptionAttributes,
) -> Result<SubscriptionSettings, TransportError> {
    const REASON: &str = "Attributes Reason: ";
    let invalid = |why: String| {
        fail(
            ErrorKind::InvalidParameter,
            format!("Invalid parameter: {REASON}{why}"),
        )
    };
    if let Some(unknown) = attributes
        .keys()
        .find(|name| !SUBSCRIPTION_ATTRIBUTE_NAMES.contains(&name.as_str()))
    {
        return invalid(format!(
            "AttributeName: `{unknown}` is not an attribute Subscribe takes; use one of {}",
            SUBSCRIPTION_ATTRIBUTE_NAMES.join(", ")
        ));
    }
    let raw_message_delivery = match attributes.get(RAW_MESSAGE_DELIVERY_ATTRIBUTE) {
        Some(value) => parse_flag(RAW_MESSAGE_DELIVERY_ATTRIBUTE, value, REASON)?,
        None => false,
    };
    let scope = match attributes.get(FILTER_POLICY_SCOPE_ATTRIBUTE) {
        Some(value) => match value.parse::<FilterPolicyScope>() {
            Ok(scope) => scope,
            Err(_) => {
                return invalid(format!(
                    "FilterPolicyScope: Invalid value [{value}]. Please use either MessageBody or \
                     MessageAttributes"
                ))
            }
        },
        None => FilterPolicyScope::default(),
    };
    let filter_policy = match attributes.get(FILTER_POLICY_ATTRIBUTE) {
        Some(json) if !json.trim().is_empty() => match FilterPolicy::parse(json, scope) {
            Ok(policy) => Some(policy),
            Err(error) => return invalid(format!("FilterPolicy: {error}")),
        },
        _ => None,
    };
    Ok(SubscriptionSettings {
        raw_message_delivery,
        filter_policy,
    })
}

/// Checks a `Subscribe` request and reads it: the topic ARN ([`TopicArn::parse`]), a protocol SNS
/// has ([`PROTOCOLS`]), for `sqs` an endpoint that is an SQS queue's ARN and not a FIFO queue's on
/// a standard topic, and the attributes ([`check_subscription_attributes`]). SNS answers
/// `InvalidParameter` for each. (A FIFO topic may deliver to standard queues.)
/// (Subscribe: <https://docs.aws.amazon.com/sns/latest/api/API_Subscribe.html>;
/// <https://docs.aws.amazon.com/sns/latest/dg/fifo-message-delivery.html>)
pub fn check_subscribe(
    request: &Subscribe,
) -> Result<(TopicArn, SubscriptionSettings), TransportError> {
    let topic = TopicArn::parse(&request.topic_arn)?;
    let protocol = request.protocol.as_str();
    if !PROTOCOLS.contains(&protocol) {
        return fail(
            ErrorKind::InvalidParameter,
            format!(
                "Invalid parameter: Amazon SNS does not support this protocol string: \
                 `{protocol}`; use one of {}",
                PROTOCOLS.join(", ")
            ),
        );
    }
    if protocol == SQS_PROTOCOL {
        let Some(queue) = sqs_queue_name(&request.endpoint) else {
            return fail(
                ErrorKind::InvalidParameter,
                format!(
                    "Invalid parameter: SQS endpoint ARN: `{}` is not a queue ARN; write \
                     arn:aws:sqs:REGION:ACCOUNT:QUEUE",
                    request.endpoint
                ),
            );
        };
        if rules::is_fifo_name(queue) && !topic.is_fifo() {
            return fail(
                ErrorKind::InvalidParameter,
                format!(
                    "Invalid parameter: Endpoint Reason: FIFO SQS Queues can not be subscribed to \
                     standard SNS topics: `{queue}` is FIFO and `{}` is not; subscribe it to a FIFO \
                     topic or use a standard queue",
                    topic.name()
                ),
            );
        }
    }
    let settings = check_subscription_attributes(&request.attributes)?;
    Ok((topic, settings))
}

/// The queue name an SQS queue ARN (`arn:PARTITION:sqs:REGION:ACCOUNT:NAME`) ends in, if it is
/// one.
pub fn sqs_queue_name(arn: &str) -> Option<&str> {
    let parts: Vec<&str> = arn.split(':').collect();
    match parts[..] {
        ["arn", partition, "sqs", region, account, name]
            if !partition.is_empty()
                && !region.is_empty()
                && !account.is_empty()
                && rules::check_queue_name(name).is_ok() =>
        {
            Some(name)
        }
        _ => None,
    }
}

/// One subscription of a topic, as `ListSubscriptionsByTopic` lists it.
/// (Subscription: <https://docs.aws.amazon.com/sns/latest/api/API_Subscription.html>)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// `SubscriptionArn`.
    pub subscription_arn: String,
    /// `TopicArn`.
    pub topic_arn: String,
    /// `Protocol`: `sqs` for a queue.
    pub protocol: String,
    /// `Endpoint`: for `sqs`, the queue's ARN.
    pub endpoint: String,
    /// `Owner`: the subscription's account id.
    pub owner: String,
}
