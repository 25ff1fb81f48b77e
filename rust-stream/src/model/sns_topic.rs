//! SNS as an app declares it: [`SnsTopic`], a topic by name and how to create it when missing, and
//! [`TopicSubscription`], a queue's subscription to a topic (raw delivery, filter policy).
//!
//! These are to SNS what [`SqsQueue`](super::SqsQueue) is to SQS: declarations, checked when the
//! app starts, every problem at once, before any network call ([`ConfigError`]). A queue names the
//! topics it is subscribed to ([`SqsQueue::subscribed_to`](super::SqsQueue::subscribed_to)); a
//! subscription's topic is declared with it, and the declarations of one topic (or of one queue's
//! subscription to a topic) made in several places are merged by name (`declare`), as queues
//! are. What SNS itself takes and answers (topic ARNs, publishes, SNS's limits) is in
//! [`topic`](super::topic); a filter policy's syntax and matching in
//! [`filter_policy`](super::filter_policy).
//!
//! The declarations stand apart from [`topic`](super::topic), which is SNS's API as data: these
//! are the framework's knobs (`create_if_missing`, the builder), built like `SqsQueue`'s, and
//! report [`ConfigError`]s rather than the service's error kinds.

use super::config::ConfigError;
use super::filter_policy::{FilterPolicy, FilterPolicyError, FilterPolicyScope};
use super::topic::{check_topic_name, is_fifo_topic_name};

/// A topic, named as in SNS: a name ending in `.fifo` is a FIFO topic.
///
/// ```
/// use rust_stream::model::SnsTopic;
///
/// let posted = SnsTopic::new("payments-posted.fifo")
///     .content_based_deduplication(true)
///     .create_if_missing();
/// assert!(posted.is_fifo());
/// assert_eq!(posted.name(), "payments-posted.fifo");
/// assert!(!SnsTopic::new("payments-posted").is_fifo());
/// ```
///
/// The name is checked when the app starts (SNS's rule: 1 to 256 letters, digits, `-` and `_`,
/// `.fifo` last on a FIFO topic and counted in the 256), with every other problem, before any
/// call; a broker's `queue_name_prefix` and `queue_name_suffix` are added to it as to a queue's.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct SnsTopic {
    pub(crate) name: String,
    pub(crate) create_if_missing: bool,
    /// `None` leaves it to the topic (or, when created here, SNS's default, off); an explicit
    /// `false` is a setting another declaration can disagree with.
    pub(crate) content_based_dedup: Option<bool>,
}

impl SnsTopic {
    /// The topic of this name. Nothing is checked until the app runs, when every problem is
    /// reported at once, before any network call.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            create_if_missing: false,
            content_based_dedup: None,
        }
    }

    /// The topic's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the topic is FIFO (its name ends in `.fifo`).
    pub fn is_fifo(&self) -> bool {
        is_fifo_topic_name(&self.name)
    }

    /// Create the topic when it does not exist: FIFO on a `.fifo` name, with content-based
    /// deduplication as declared. Without this, a missing topic is an error when the app starts.
    pub fn create_if_missing(mut self) -> Self {
        self.create_if_missing = true;
        self
    }

    /// On a FIFO topic: deduplicate publishes without a deduplication id by the SHA-256 of their
    /// message (SNS's `ContentBasedDeduplication`), when created here. A standard topic has no
    /// deduplication: `true` there keeps the app from starting.
    pub fn content_based_deduplication(mut self, enabled: bool) -> Self {
        self.content_based_dedup = Some(enabled);
        self
    }

    /// Whether publishes are deduplicated by content, as declared (`false` when not said).
    pub fn deduplicates_by_content(&self) -> bool {
        self.content_based_dedup.unwrap_or(false)
    }

    /// Every problem with this topic's settings, so `run` reports them all at once.
    pub(crate) fn problems(&self, problems: &mut Vec<ConfigError>) {
        if let Err(error) = check_topic_name(&self.name, self.is_fifo()) {
            problems.push(ConfigError::TopicName {
                topic: self.name.clone(),
                reason: error.to_string(),
            });
        }
        if self.content_based_dedup == Some(true) && !self.is_fifo() {
            problems.push(ConfigError::TopicContentBasedDedup {
                topic: self.name.clone(),
            });
        }
    }
}

impl From<&str> for SnsTopic {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<String> for SnsTopic {
    fn from(name: String) -> Self {
        Self::new(name)
    }
}

/// A queue's subscription to a topic: what SNS delivers to the queue, and how.
///
/// ```
/// use rust_stream::model::{SnsTopic, TopicSubscription};
/// use rust_stream::SqsQueue;
///
/// let posted = SnsTopic::new("payments-posted").create_if_missing();
/// let large = TopicSubscription::new(posted.clone())
///     .raw_message_delivery(true)
///     .filter_policy(r#"{"amount": [{"numeric": [">=", 1000]}]}"#);
/// let ledger = SqsQueue::new("ledger")
///     .create_if_missing()
///     .subscribed_to(large)
///     .subscribed_to(SnsTopic::new("payments-refunded"));
/// assert_eq!(ledger.subscriptions().len(), 2);
/// let subscription = &ledger.subscriptions()[0];
/// assert_eq!(subscription.topic().name(), "payments-posted");
/// assert!(subscription.is_raw_message_delivery());
/// assert!(subscription.policy().is_some());
///
/// // A policy SNS would refuse keeps the app from starting, naming the topic and the queue.
/// let refused = TopicSubscription::new(posted).filter_policy(r#"{"amount": 1000}"#);
/// assert!(refused.policy().is_none());
/// ```
///
/// A FIFO queue can only be subscribed to a FIFO topic; a FIFO topic delivers to standard queues
/// too (in order and once to FIFO queues only: a standard queue may reorder and repeat).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct TopicSubscription {
    pub(crate) topic: SnsTopic,
    pub(crate) raw_message_delivery: bool,
    pub(crate) filter_policy: Option<DeclaredPolicy>,
}

/// A filter policy as declared: its text and scope, and what parsing it gave, kept for the
/// app's start to report.
#[derive(Debug, Clone)]
pub(crate) struct DeclaredPolicy {
    json: String,
    scope: FilterPolicyScope,
    parsed: Result<FilterPolicy, FilterPolicyError>,
}

impl DeclaredPolicy {
    fn parse(json: String, scope: FilterPolicyScope) -> Self {
        let parsed = FilterPolicy::parse(&json, scope);
        Self {
            json,
            scope,
            parsed,
        }
    }
}

// The parse is a function of the text and the scope, so they alone decide equality; the parsed
// tree holds floats, which are only `PartialEq`.
impl PartialEq for DeclaredPolicy {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json && self.scope == other.scope
    }
}

impl Eq for DeclaredPolicy {}

impl TopicSubscription {
    /// A subscription to `topic`, SNS's defaults otherwise: enveloped delivery (the JSON
    /// notification, raw delivery off) and no filter policy (every message).
    pub fn new(topic: impl Into<SnsTopic>) -> Self {
        Self {
            topic: topic.into(),
            raw_message_delivery: false,
            filter_policy: None,
        }
    }

    /// The topic.
    pub fn topic(&self) -> &SnsTopic {
        &self.topic
    }

    /// Deliver the message as published (`true`), its attributes as the SQS message's, rather
    /// than in SNS's JSON envelope (`false`, SNS's default). SNS drops a raw delivery of a
    /// message with more than 10 attributes for this subscription.
    pub fn raw_message_delivery(mut self, raw: bool) -> Self {
        self.raw_message_delivery = raw;
        self
    }

    /// Whether the delivery is raw.
    pub fn is_raw_message_delivery(&self) -> bool {
        self.raw_message_delivery
    }

    /// Deliver only the messages whose attributes this SNS filter policy accepts (scope
    /// `MessageAttributes`). It replaces any filter policy given before. A policy SNS would
    /// refuse keeps the app from starting, with every other problem.
    pub fn filter_policy(mut self, json: impl Into<String>) -> Self {
        self.filter_policy = Some(DeclaredPolicy::parse(
            json.into(),
            FilterPolicyScope::MessageAttributes,
        ));
        self
    }

    /// Deliver only the messages whose JSON body this SNS filter policy accepts (scope
    /// `MessageBody`, where keys may nest). It replaces any filter policy given before.
    pub fn filter_policy_on_body(mut self, json: impl Into<String>) -> Self {
        self.filter_policy = Some(DeclaredPolicy::parse(
            json.into(),
            FilterPolicyScope::MessageBody,
        ));
        self
    }

    /// The filter policy, parsed; `None` without one, or when it is refused (the app's start
    /// reports why).
    pub fn policy(&self) -> Option<&FilterPolicy> {
        self.filter_policy
            .as_ref()
            .and_then(|policy| policy.parsed.as_ref().ok())
    }

    /// Every problem with this subscription of `queue`: its topic's, the filter policy's, and a
    /// FIFO queue on a standard topic, which SNS refuses.
    pub(crate) fn problems(&self, queue: &str, queue_fifo: bool, problems: &mut Vec<ConfigError>) {
        self.topic.problems(problems);
        if let Some(DeclaredPolicy {
            scope,
            parsed: Err(error),
            ..
        }) = &self.filter_policy
        {
            problems.push(ConfigError::FilterPolicy {
                queue: queue.to_owned(),
                topic: self.topic.name.clone(),
                scope: *scope,
                reason: error.to_string(),
            });
        }
        if queue_fifo && !self.topic.is_fifo() {
            problems.push(ConfigError::FifoQueueOnStandardTopic {
                queue: queue.to_owned(),
                topic: self.topic.name.clone(),
            });
        }
    }

    /// The filter policy's text and scope as declared, whether it parses or not: what two
    /// declarations of one subscription compare.
    pub(crate) fn declared_policy(&self) -> Option<(&str, FilterPolicyScope)> {
        self.filter_policy
            .as_ref()
            .map(|policy| (policy.json.as_str(), policy.scope))
    }
}

impl From<SnsTopic> for TopicSubscription {
    fn from(topic: SnsTopic) -> Self {
        Self::new(topic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems_of(subscription: &TopicSubscription, queue: &str) -> Vec<ConfigError> {
        let mut problems = Vec::new();
        subscription.problems(queue, queue.ends_with(".fifo"), &mut problems);
        problems
    }

    #[test]
    fn a_sound_topic_and_subscription_have_no_problems() {
        for (topic, queue) in [
            ("payments-posted", "ledger"),
            ("payments-posted.fifo", "ledger.fifo"),
            // SNS delivers from a FIFO topic to a standard queue since September 2023.
            ("payments-posted.fifo", "ledger"),
        ] {
            let subscription = TopicSubscription::new(SnsTopic::new(topic))
                .raw_message_delivery(true)
                .filter_policy_on_body(r#"{"payment": {"currency": ["EUR"]}}"#);
            assert!(subscription.policy().is_some());
            assert_eq!(problems_of(&subscription, queue), [], "{topic} → {queue}");
        }
        let mut problems = Vec::new();
        SnsTopic::new("posted.fifo")
            .content_based_deduplication(true)
            .problems(&mut problems);
        SnsTopic::new("posted")
            .content_based_deduplication(false)
            .problems(&mut problems);
        assert_eq!(problems, []);
    }

    #[test]
    fn a_fifo_queue_on_a_standard_topic_says_what_to_change() {
        let problems = problems_of(&TopicSubscription::new("posted"), "ledger.fifo");
        let [problem @ ConfigError::FifoQueueOnStandardTopic { .. }] = problems.as_slice() else {
            panic!("{problems:#?}");
        };
        let shown = problem.to_string();
        for needle in ["`ledger.fifo`", "`posted`", "FIFO topic", "`.fifo`"] {
            assert!(shown.contains(needle), "`{needle}` missing in: {shown}");
        }
    }

    #[test]
    fn a_refused_filter_policy_names_the_topic_the_queue_and_the_setter() {
        let subscription = TopicSubscription::new(SnsTopic::new("posted"))
            .filter_policy_on_body(r#"{"payment": {"currency": []}}"#);
        assert!(subscription.policy().is_none());
        let problems = problems_of(&subscription, "ledger");
        let [problem @ ConfigError::FilterPolicy { .. }] = problems.as_slice() else {
            panic!("{problems:#?}");
        };
        let shown = problem.to_string();
        for needle in [
            "`ledger`",
            "`posted`",
            "`payment.currency` has an empty array",
            "`.filter_policy_on_body(..)`",
        ] {
            assert!(shown.contains(needle), "`{needle}` missing in: {shown}");
        }
    }

    #[test]
    fn a_later_filter_policy_replaces_an_earlier_one_and_text_decides_equality() {
        let attributes = TopicSubscription::new(SnsTopic::new("posted"))
            .filter_policy(r#"{"kind": ["a"]}"#)
            .filter_policy(r#"{"kind": ["b"]}"#);
        assert_eq!(
            attributes.declared_policy(),
            Some((r#"{"kind": ["b"]}"#, FilterPolicyScope::MessageAttributes))
        );
        let again =
            TopicSubscription::new(SnsTopic::new("posted")).filter_policy(r#"{"kind": ["b"]}"#);
        assert_eq!(attributes, again);
        let on_body = TopicSubscription::new(SnsTopic::new("posted"))
            .filter_policy_on_body(r#"{"kind": ["b"]}"#);
        assert_ne!(attributes, on_body, "the scope counts");
    }

    #[test]
    fn a_topic_name_sns_refuses_and_dedup_on_a_standard_topic_are_reported_together() {
        let mut problems = Vec::new();
        SnsTopic::new("payments posted")
            .content_based_deduplication(true)
            .problems(&mut problems);
        assert!(
            matches!(
                problems.as_slice(),
                [
                    ConfigError::TopicName { .. },
                    ConfigError::TopicContentBasedDedup { .. }
                ]
            ),
            "{problems:#?}"
        );
        let shown = problems[0].to_string();
        assert!(
            shown.contains("topic `payments posted`") && shown.contains("1 to 256"),
            "{shown}"
        );
    }
}
