//! Declarations: every place a queue is named (a subscription, its dead-letter queue, an output,
//! a publisher made from the broker), merged by name into the one queue they describe.
//!
//! Declarations belong to whoever makes them. An app's are those of its subscriptions, their
//! dead-letter queues and outputs ([`Declarations::of_app`]), made from its own subscriber list:
//! its start checks and resolves exactly those queues ([`Registry::checked`]), its AsyncAPI
//! document shows them ([`Registry::documented`]), and no other app on the broker ever sees them.
//! A publisher made with `broker.publisher(..)` belongs to the broker: its declaration joins that
//! of every app naming the same queue, and every app's document lists its queue.
//!
//! A queue is created from its merged declaration, whichever declaration happens to resolve it
//! first. An app's start resolves every one of its queues before any subscription starts, each as
//! the app and the broker's publishers together describe it, so a subscription's output queue
//! that another subscription creates exists before either starts. A publisher resolves its queue as every declaration alive on the
//! broker describes it: an app's are registered with the broker from the moment the app is built
//! until it is dropped or its run ends, refused or not ([`Registered`]), so a publisher's
//! `create_if_missing()` that runs before the app starts still creates the queue with the
//! subscription's dead-letter queue and visibility timeout, while an app that is gone leaves
//! nothing behind. Two declarations that give one queue different settings cannot both hold: the
//! app whose declarations (or whose queues' publishers) disagree refuses to start, naming both.
//! The declarations of two apps never meet in a check; where they disagree, a publisher's
//! creation follows the app built first.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, PoisonError};

use super::queue::{ConfigError, SqsQueue};
use super::sns_topic::{SnsTopic, TopicSubscription};
use crate::describe::Payload;

/// Who declares a queue when a publisher made from the broker does.
const PUBLISHER: &str = "a publisher made with `broker.publisher(..)`";

/// Who declares a topic when a topic publisher made from the broker does.
const TOPIC_PUBLISHER: &str = "a publisher made with `broker.topic(..)`";

/// Who declared a queue, for messages that name both sides of a disagreement.
#[derive(Debug, Clone)]
struct Declared {
    queue: SqsQueue,
    by: String,
}

/// Who declared a topic, for messages that name both sides of a disagreement.
#[derive(Debug, Clone)]
struct DeclaredTopic {
    topic: SnsTopic,
    by: String,
}

/// Declarations by queue name and by topic name: an app's, or the publishers' of a broker.
#[derive(Debug, Default)]
pub(crate) struct Declarations {
    by_name: BTreeMap<String, Declared>,
    topics: BTreeMap<String, DeclaredTopic>,
    conflicts: Vec<ConfigError>,
}

/// A setting two declarations of one queue give differently.
enum Disagreement {
    /// A setting of the queue itself.
    Queue(&'static str),
    /// A setting of the queue's subscription to a topic.
    Subscription {
        topic: String,
        setting: &'static str,
    },
}

/// Where a subscription's output goes: a queue, or an SNS topic.
pub(crate) enum Target<'a> {
    Queue(&'a SqsQueue),
    Topic(&'a SnsTopic),
}

impl Declarations {
    /// The declarations of an app with these subscriptions, each given as its queue and the
    /// targets of its outputs: each subscription's queue, its dead-letter queue and its outputs'
    /// queues and topics.
    pub(crate) fn of_app<'a>(
        subscriptions: impl IntoIterator<Item = (&'a SqsQueue, Vec<Target<'a>>)>,
    ) -> Self {
        let mut declarations = Self::default();
        for (queue, outputs) in subscriptions {
            let name = &queue.name;
            declarations.declare(queue, &format!("the subscription of `{name}`"));
            if let Some(dead_letter) = queue.dead_letter_queue() {
                let by = format!("the dead-letter queue of `{name}`");
                declarations.declare(&dead_letter, &by);
            }
            for output in outputs {
                let by = format!("an output of the subscription of `{name}`");
                match output {
                    Target::Queue(queue) => declarations.declare(queue, &by),
                    Target::Topic(topic) => declarations.declare_topic(topic, &by),
                }
            }
        }
        declarations
    }

    /// Adds `by`'s declaration of `queue`, merged into the earlier ones of the same name, and of
    /// the topics it is subscribed to; a setting that disagrees with an earlier one is kept as a
    /// problem for the app's start.
    pub(crate) fn declare(&mut self, queue: &SqsQueue, by: &str) {
        for subscription in &queue.subscriptions {
            let through = format!("{by}, through `{}`'s `.subscribed_to(..)`", queue.name);
            self.declare_topic(&subscription.topic, &through);
        }
        let Some(earlier) = self.by_name.get_mut(&queue.name) else {
            self.by_name.insert(
                queue.name.clone(),
                Declared {
                    queue: queue.clone(),
                    by: by.to_owned(),
                },
            );
            return;
        };
        for disagreement in merge(&mut earlier.queue, queue) {
            let (first, second) = (earlier.by.clone(), by.to_owned());
            let conflict = match disagreement {
                Disagreement::Queue(setting) => ConfigError::ConflictingDeclarations {
                    queue: queue.name.clone(),
                    setting,
                    first,
                    second,
                },
                Disagreement::Subscription { topic, setting } => {
                    ConfigError::ConflictingSubscriptions {
                        queue: queue.name.clone(),
                        topic,
                        setting,
                        first,
                        second,
                    }
                }
            };
            // A broker's publishers are made again and again (one per request, say); the same
            // disagreement is one problem, and must not grow the list for the broker's life.
            if !self.conflicts.contains(&conflict) {
                self.conflicts.push(conflict);
            }
        }
    }

    /// Adds `by`'s declaration of `topic`, merged into the earlier ones of the same name; a
    /// setting that disagrees with an earlier one is kept as a problem for the app's start.
    pub(crate) fn declare_topic(&mut self, topic: &SnsTopic, by: &str) {
        let Some(earlier) = self.topics.get_mut(&topic.name) else {
            self.topics.insert(
                topic.name.clone(),
                DeclaredTopic {
                    topic: topic.clone(),
                    by: by.to_owned(),
                },
            );
            return;
        };
        for setting in merge_topic(&mut earlier.topic, topic) {
            let conflict = ConfigError::ConflictingTopicDeclarations {
                topic: topic.name.clone(),
                setting,
                first: earlier.by.clone(),
                second: by.to_owned(),
            };
            if !self.conflicts.contains(&conflict) {
                self.conflicts.push(conflict);
            }
        }
    }

    /// Adds `other`'s declarations of the queues `keep` picks and of the topics `keep_topic`
    /// picks after this one's, and the disagreements `other` found among them.
    fn join(
        &mut self,
        other: &Self,
        keep: impl Fn(&str) -> bool,
        keep_topic: impl Fn(&str) -> bool,
    ) {
        for declared in other
            .topics
            .values()
            .filter(|declared| keep_topic(&declared.topic.name))
        {
            self.declare_topic(&declared.topic, &declared.by);
        }
        for declared in other
            .by_name
            .values()
            .filter(|declared| keep(&declared.queue.name))
        {
            self.declare(&declared.queue, &declared.by);
        }
        for conflict in &other.conflicts {
            let kept = match conflict {
                ConfigError::ConflictingDeclarations { queue, .. }
                | ConfigError::ConflictingSubscriptions { queue, .. } => keep(queue),
                ConfigError::ConflictingTopicDeclarations { topic, .. } => keep_topic(topic),
                _ => false,
            };
            if kept && !self.conflicts.contains(conflict) {
                self.conflicts.push(conflict.clone());
            }
        }
    }

    /// The queue as its declarations together describe it, or `queue` itself when undeclared.
    pub(crate) fn merged(&self, queue: &SqsQueue) -> SqsQueue {
        self.by_name
            .get(&queue.name)
            .map_or_else(|| queue.clone(), |declared| declared.queue.clone())
    }

    /// Every declared queue, dead-letter queues first (a redrive policy names its target, which
    /// must exist), then by name.
    pub(crate) fn in_creation_order(&self) -> Vec<SqsQueue> {
        let targets: Vec<&str> = self
            .by_name
            .values()
            .filter_map(|declared| Some(declared.queue.dead_letter.as_ref()?.queue.as_str()))
            .collect();
        let mut queues: Vec<SqsQueue> = self
            .by_name
            .values()
            .map(|declared| declared.queue.clone())
            .collect();
        queues.sort_by_key(|queue| (!targets.contains(&queue.name.as_str()), queue.name.clone()));
        queues
    }

    /// The topic as its declarations together describe it, or `topic` itself when undeclared.
    #[allow(
        dead_code,
        reason = "the resolver that creates topics at startup reads it"
    )]
    pub(crate) fn merged_topic(&self, topic: &SnsTopic) -> SnsTopic {
        self.topics
            .get(&topic.name)
            .map_or_else(|| topic.clone(), |declared| declared.topic.clone())
    }

    /// Every declared topic, by name: a subscription's topic is among them, to be resolved (or
    /// created) before the queue is subscribed to it.
    pub(crate) fn topics(&self) -> Vec<SnsTopic> {
        self.topics
            .values()
            .map(|declared| declared.topic.clone())
            .collect()
    }

    /// The disagreements found so far.
    pub(crate) fn conflicts(&self) -> Vec<ConfigError> {
        self.conflicts.clone()
    }
}

/// Merges `queue`'s settings into `merged`, the earlier declarations of the same queue: a setting
/// only `queue` gives is taken (a subscription to a topic `merged` lacks, too); the settings both
/// give otherwise are returned, and `merged` keeps its own.
fn merge(merged: &mut SqsQueue, queue: &SqsQueue) -> Vec<Disagreement> {
    let mut disagreeing = Vec::new();
    match (&merged.dead_letter, &queue.dead_letter) {
        (Some(first), Some(second)) if first != second => {
            disagreeing.push(Disagreement::Queue("dead-letter queue"));
        }
        (None, Some(second)) => merged.dead_letter = Some(second.clone()),
        _ => {}
    }
    match (
        merged.consumer.visibility_timeout,
        queue.consumer.visibility_timeout,
    ) {
        (Some(first), Some(second)) if first != second => {
            disagreeing.push(Disagreement::Queue("visibility timeout"));
        }
        (None, Some(second)) => merged.consumer.visibility_timeout = Some(second),
        _ => {}
    }
    // Asking for creation, content-based deduplication or high throughput in one place asks for
    // the queue.
    merged.create_if_missing |= queue.create_if_missing;
    merged.content_based_dedup |= queue.content_based_dedup;
    merged.high_throughput |= queue.high_throughput;
    for subscription in &queue.subscriptions {
        let earlier = merged
            .subscriptions
            .iter_mut()
            .find(|earlier| earlier.topic.name == subscription.topic.name);
        let Some(earlier) = earlier else {
            merged.subscriptions.push(subscription.clone());
            continue;
        };
        for setting in merge_subscription(earlier, subscription) {
            disagreeing.push(Disagreement::Subscription {
                topic: subscription.topic.name.clone(),
                setting,
            });
        }
    }
    disagreeing
}

/// Merges `subscription` into `merged`, an earlier declaration of the same queue's subscription
/// to the same topic. SNS keeps one subscription of a queue to a topic, with one set of
/// attributes: both must say the same. The topic's own settings are merged too; where they
/// disagree, the topic's declarations report it.
fn merge_subscription(
    merged: &mut TopicSubscription,
    subscription: &TopicSubscription,
) -> Vec<&'static str> {
    let mut disagreeing = Vec::new();
    if merged.raw_message_delivery != subscription.raw_message_delivery {
        disagreeing.push("raw message delivery");
    }
    if merged.declared_policy() != subscription.declared_policy() {
        disagreeing.push("filter policy");
    }
    let _ = merge_topic(&mut merged.topic, &subscription.topic);
    disagreeing
}

/// Merges `topic`'s settings into `merged`, the earlier declarations of the same topic, as
/// [`merge`] does a queue's: a setting only `topic` gives is taken, the settings both give
/// otherwise are returned.
fn merge_topic(merged: &mut SnsTopic, topic: &SnsTopic) -> Vec<&'static str> {
    let mut disagreeing = Vec::new();
    match (merged.content_based_dedup, topic.content_based_dedup) {
        (Some(first), Some(second)) if first != second => {
            disagreeing.push("content-based deduplication");
        }
        (None, Some(second)) => merged.content_based_dedup = Some(second),
        _ => {}
    }
    // Asking for creation in one place asks for the topic.
    merged.create_if_missing |= topic.create_if_missing;
    disagreeing
}

/// A broker's declarations: its publishers', and those of each app built on it that still lives.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    publishers: Declarations,
    /// What the broker's publishers say they send, by queue name, each type once: for the
    /// AsyncAPI document.
    publisher_payloads: BTreeMap<String, Vec<Payload>>,
    /// The topics of the broker's topic publishers, by name: for the AsyncAPI document.
    topic_publishers: BTreeSet<String>,
    /// The queues and topics an outbox sends to, by their unique names (a topic's `topic:`
    /// prefixed): its messages may be scheduled, which the AsyncAPI document notes.
    outboxes: BTreeSet<String>,
    /// By registration, so the app built first comes first.
    apps: BTreeMap<u64, Declarations>,
    next_app: u64,
}

impl Registry {
    /// Adds the declaration of a publisher made with `broker.publisher(..)`.
    pub(crate) fn publisher(&mut self, queue: &SqsQueue) {
        self.publishers.declare(queue, PUBLISHER);
    }

    /// Adds the declaration of a topic publisher made with `broker.topic(..)`.
    pub(crate) fn topic_publisher(&mut self, topic: &SnsTopic) {
        self.publishers.declare_topic(topic, TOPIC_PUBLISHER);
        self.topic_publishers.insert(topic.name.clone());
    }

    /// Notes that an outbox sends to `destination`: its messages may be scheduled.
    pub(crate) fn outbox(&mut self, destination: &super::Destination) {
        self.outboxes.insert(destination.unique_name());
    }

    /// The queues and topics an outbox sends to, by their unique names.
    pub(crate) fn outboxes(&self) -> BTreeSet<String> {
        self.outboxes.clone()
    }

    /// The topics of the broker's topic publishers, as every publisher declares them.
    pub(crate) fn published_topics(&self) -> Vec<SnsTopic> {
        self.topic_publishers
            .iter()
            .filter_map(|name| self.publishers.topics.get(name))
            .map(|declared| declared.topic.clone())
            .collect()
    }

    /// Adds `payload` to what a publisher made with `broker.publisher(..)` sends to `queue`; a type
    /// said again (a publisher made for each request) is kept once.
    pub(crate) fn publisher_payload(&mut self, queue: &str, payload: Payload) {
        let payloads = self.publisher_payloads.entry(queue.to_owned()).or_default();
        if !payloads
            .iter()
            .any(|known| known.type_name == payload.type_name)
        {
            payloads.push(payload);
        }
    }

    /// The queues of the broker's publishers, by name, each with the payloads its publishers
    /// said they send.
    pub(crate) fn published(&self) -> Vec<(SqsQueue, Vec<Payload>)> {
        self.publishers
            .by_name
            .values()
            .map(|declared| {
                let payloads = self
                    .publisher_payloads
                    .get(&declared.queue.name)
                    .cloned()
                    .unwrap_or_default();
                (declared.queue.clone(), payloads)
            })
            .collect()
    }

    /// Registers an app's declarations with `registry` until the returned guard is dropped.
    pub(crate) fn register(registry: &Arc<Mutex<Self>>, app: Declarations) -> Registered {
        let mut locked = registry.lock().unwrap_or_else(PoisonError::into_inner);
        let id = locked.next_app;
        locked.next_app += 1;
        locked.apps.insert(id, app);
        Registered {
            registry: registry.clone(),
            id,
        }
    }

    /// What an app's start checks and resolves: its own declarations, joined by the publishers'
    /// of the same queues. Another app's are never in it.
    pub(crate) fn checked(&self, app: Declarations) -> Declarations {
        let mut declarations = app;
        let own: BTreeSet<String> = declarations.by_name.keys().cloned().collect();
        let own_topics: BTreeSet<String> = declarations.topics.keys().cloned().collect();
        declarations.join(
            &self.publishers,
            |name| own.contains(name),
            |topic| own_topics.contains(topic),
        );
        declarations
    }

    /// What an app's AsyncAPI document shows: its own declarations, joined by every publisher's.
    pub(crate) fn documented(&self, app: Declarations) -> Declarations {
        let mut declarations = app;
        declarations.join(&self.publishers, |_| true, |_| true);
        declarations
    }

    /// `queue` as one of an app's queues is resolved: with the publishers' declarations of it.
    pub(crate) fn for_app(&self, queue: &SqsQueue) -> SqsQueue {
        merged_with(queue, [&self.publishers])
    }

    /// `queue` as a publisher resolves it: with the publishers' declarations of it, then each
    /// living app's, the app built first first.
    pub(crate) fn for_publisher(&self, queue: &SqsQueue) -> SqsQueue {
        merged_with(
            queue,
            std::iter::once(&self.publishers).chain(self.apps.values()),
        )
    }

    /// `topic` as a topic publisher resolves it: with the publishers' declarations of it, then
    /// each living app's, the app built first first.
    pub(crate) fn for_topic_publisher(&self, topic: &SnsTopic) -> SnsTopic {
        let mut merged = topic.clone();
        for declared in std::iter::once(&self.publishers)
            .chain(self.apps.values())
            .filter_map(|declarations| declarations.topics.get(&topic.name))
        {
            let _ = merge_topic(&mut merged, &declared.topic);
        }
        merged
    }
}

/// `queue` merged with what each of `sources` declares of it, in their order; where they
/// disagree, the first to give a setting wins (an app's start has already refused what it must).
fn merged_with<'a>(
    queue: &SqsQueue,
    sources: impl IntoIterator<Item = &'a Declarations>,
) -> SqsQueue {
    let mut merged = queue.clone();
    for declared in sources
        .into_iter()
        .filter_map(|declarations| declarations.by_name.get(&queue.name))
    {
        let _ = merge(&mut merged, &declared.queue);
    }
    merged
}

/// An app's declarations registered with its broker; dropping this takes them back. The app holds
/// it from when it is built to when it is dropped or its run ends, refused or not.
pub(crate) struct Registered {
    registry: Arc<Mutex<Registry>>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .apps
            .remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn declarations_merge_into_one_queue_and_dead_letter_queues_come_first() {
        let mut declarations = Declarations::default();
        declarations.declare(
            &SqsQueue::new("orders.fifo").create_if_missing(),
            "a publisher",
        );
        declarations.declare(
            &SqsQueue::new("orders.fifo")
                .dead_letter("orders-dlq.fifo", 5)
                .visibility_timeout(Duration::from_secs(60)),
            "the subscription of `orders.fifo`",
        );
        declarations.declare(&SqsQueue::new("orders-dlq.fifo"), "its dead-letter queue");
        let merged = declarations.merged(&SqsQueue::new("orders.fifo"));
        assert!(merged.create_if_missing);
        assert_eq!(merged.dead_letter.unwrap().queue, "orders-dlq.fifo");
        assert_eq!(
            merged.consumer.visibility_timeout,
            Some(Duration::from_secs(60))
        );
        let order: Vec<String> = declarations
            .in_creation_order()
            .into_iter()
            .map(|queue| queue.name)
            .collect();
        assert_eq!(order, ["orders-dlq.fifo", "orders.fifo"]);
        assert!(declarations.conflicts().is_empty());
    }

    #[test]
    fn two_declarations_that_disagree_are_a_problem_naming_both() {
        let mut declarations = Declarations::default();
        declarations.declare(
            &SqsQueue::new("jobs").dead_letter("a", 3),
            "the subscription of `jobs`",
        );
        declarations.declare(&SqsQueue::new("jobs").dead_letter("b", 3), "a publisher");
        let shown = declarations.conflicts()[0].to_string();
        assert!(
            shown.contains("dead-letter queue")
                && shown.contains("the subscription of `jobs`")
                && shown.contains("a publisher"),
            "{shown}"
        );
    }

    #[test]
    fn a_subscriptions_topic_is_declared_with_it_and_merged_with_other_declarations() {
        let mut declarations = Declarations::default();
        declarations.declare(
            &SqsQueue::new("ledger").subscribed_to(
                TopicSubscription::new(SnsTopic::new("posted.fifo").create_if_missing())
                    .raw_message_delivery(true),
            ),
            "the subscription of `ledger`",
        );
        declarations.declare(
            &SqsQueue::new("risk")
                .subscribed_to(SnsTopic::new("posted.fifo").content_based_deduplication(true)),
            "the subscription of `risk`",
        );
        let topics = declarations.topics();
        assert_eq!(
            topics,
            [SnsTopic::new("posted.fifo")
                .create_if_missing()
                .content_based_deduplication(true)]
        );
        assert_eq!(
            declarations.merged_topic(&SnsTopic::new("posted.fifo")),
            topics[0]
        );
        assert_eq!(
            declarations.merged_topic(&SnsTopic::new("elsewhere")),
            SnsTopic::new("elsewhere"),
            "an undeclared topic is itself"
        );
        assert!(declarations.conflicts().is_empty());
    }

    #[test]
    fn a_topic_declared_with_two_deduplications_is_a_problem_naming_both() {
        let mut declarations = Declarations::default();
        declarations.declare(
            &SqsQueue::new("ledger.fifo")
                .subscribed_to(SnsTopic::new("posted.fifo").content_based_deduplication(true)),
            "the subscription of `ledger.fifo`",
        );
        declarations.declare(
            &SqsQueue::new("risk.fifo")
                .subscribed_to(SnsTopic::new("posted.fifo").content_based_deduplication(false)),
            "the subscription of `risk.fifo`",
        );
        let conflicts = declarations.conflicts();
        let [conflict @ ConfigError::ConflictingTopicDeclarations { .. }] = conflicts.as_slice()
        else {
            panic!("{conflicts:#?}");
        };
        let shown = conflict.to_string();
        for needle in [
            "topic `posted.fifo`",
            "content-based deduplication",
            "the subscription of `ledger.fifo`, through `ledger.fifo`'s `.subscribed_to(..)`",
            "the subscription of `risk.fifo`",
        ] {
            assert!(shown.contains(needle), "`{needle}` missing in: {shown}");
        }
    }

    #[test]
    fn one_queues_subscription_declared_twice_must_say_the_same() {
        let posted = || TopicSubscription::new(SnsTopic::new("posted"));
        let mut declarations = Declarations::default();
        declarations.declare(
            &SqsQueue::new("ledger").subscribed_to(posted().filter_policy(r#"{"kind": ["a"]}"#)),
            "the subscription of `ledger`",
        );
        declarations.declare(
            &SqsQueue::new("ledger").subscribed_to(posted().filter_policy(r#"{"kind": ["a"]}"#)),
            "an output of the subscription of `jobs`",
        );
        declarations.declare(
            &SqsQueue::new("ledger").subscribed_to(SnsTopic::new("refunded")),
            "a publisher",
        );
        let merged = declarations.merged(&SqsQueue::new("ledger"));
        let topics: Vec<&str> = merged
            .subscriptions()
            .iter()
            .map(|subscription| subscription.topic().name())
            .collect();
        assert_eq!(topics, ["posted", "refunded"], "the same twice is one");
        assert!(declarations.conflicts().is_empty());

        declarations.declare(
            &SqsQueue::new("ledger").subscribed_to(
                posted()
                    .raw_message_delivery(true)
                    .filter_policy_on_body(r#"{"kind": ["a"]}"#),
            ),
            "the subscription of `other`",
        );
        let conflicts = declarations.conflicts();
        let settings: Vec<&str> = conflicts
            .iter()
            .map(|conflict| match conflict {
                ConfigError::ConflictingSubscriptions { setting, .. } => *setting,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(settings, ["raw message delivery", "filter policy"]);
        let shown = conflicts[0].to_string();
        for needle in [
            "queue `ledger`'s subscription to topic `posted`",
            "by the subscription of `ledger` and by the subscription of `other`",
            "one subscription of a queue to a topic",
        ] {
            assert!(shown.contains(needle), "`{needle}` missing in: {shown}");
        }
    }

    #[test]
    fn an_app_is_checked_with_the_topic_publishers_of_its_own_topics_only() {
        let mut registry = Registry::default();
        registry.topic_publisher(&SnsTopic::new("posted.fifo").content_based_deduplication(false));
        registry.topic_publisher(&SnsTopic::new("posted.fifo").content_based_deduplication(true));
        registry.topic_publisher(&SnsTopic::new("elsewhere").create_if_missing());
        let app = [crate::subscriber(
            SqsQueue::new("ledger.fifo").subscribed_to(SnsTopic::new("posted.fifo")),
            Take,
        )
        .build()];
        let checked = registry.checked(crate::subscriber::declarations(&app));
        let names: Vec<String> = checked
            .topics()
            .into_iter()
            .map(|topic| topic.name)
            .collect();
        assert_eq!(
            names,
            ["posted.fifo"],
            "the publisher of `elsewhere` is not the app's"
        );
        assert_eq!(
            checked
                .merged_topic(&SnsTopic::new("posted.fifo"))
                .content_based_dedup,
            Some(false)
        );
        assert!(
            matches!(
                checked.conflicts().as_slice(),
                [ConfigError::ConflictingTopicDeclarations { .. }]
            ),
            "{:?}",
            checked.conflicts()
        );
        let documented = registry.documented(crate::subscriber::declarations(&app));
        assert_eq!(documented.topics().len(), 2);
        let app = [crate::subscriber("jobs", Take).build()];
        assert!(registry
            .checked(crate::subscriber::declarations(&app))
            .conflicts()
            .is_empty());
    }

    #[test]
    fn a_topic_publisher_creates_with_the_living_apps_declarations() {
        let registry = Arc::new(Mutex::new(Registry::default()));
        let app = [crate::subscriber(
            SqsQueue::new("ledger.fifo").subscribed_to(
                SnsTopic::new("posted.fifo")
                    .content_based_deduplication(true)
                    .create_if_missing(),
            ),
            Take,
        )
        .build()];
        let registered = Registry::register(&registry, crate::subscriber::declarations(&app));
        let published = SnsTopic::new("posted.fifo");
        let resolved = registry.lock().unwrap().for_topic_publisher(&published);
        assert!(resolved.create_if_missing && resolved.deduplicates_by_content());
        drop(registered);
        let resolved = registry.lock().unwrap().for_topic_publisher(&published);
        assert_eq!(resolved, published);
    }

    /// Takes every message.
    struct Take;

    impl crate::Handle<serde_json::Value> for Take {
        async fn handle(
            &self,
            _: &serde_json::Value,
            _: &(),
            _: &mut crate::Context<'_>,
        ) -> Result<(), crate::HandlerOutcome> {
            Ok(())
        }
    }

    #[test]
    fn an_app_is_checked_with_the_publishers_of_its_own_queues_and_nothing_else() {
        let registry = Arc::new(Mutex::new(Registry::default()));
        let other_app =
            [crate::subscriber(SqsQueue::new("jobs").dead_letter("c", 3), Take).build()];
        let _other = Registry::register(&registry, crate::subscriber::declarations(&other_app));
        let mut locked = registry.lock().unwrap();
        locked.publisher(&SqsQueue::new("jobs").dead_letter("a", 3));
        locked.publisher(&SqsQueue::new("elsewhere").dead_letter("x", 3));
        locked.publisher(&SqsQueue::new("elsewhere").dead_letter("y", 3));
        let app = [crate::subscriber("jobs", Take).build()];
        let checked = locked.checked(crate::subscriber::declarations(&app));
        let names: Vec<String> = checked
            .in_creation_order()
            .into_iter()
            .map(|queue| queue.name)
            .collect();
        assert_eq!(
            names,
            ["jobs"],
            "the publisher of `elsewhere` is not the app's"
        );
        assert_eq!(
            checked
                .merged(&SqsQueue::new("jobs"))
                .dead_letter
                .unwrap()
                .queue,
            "a",
            "the publisher's declaration joins the app's; the other app's does not"
        );
        assert!(checked.conflicts().is_empty(), "{:?}", checked.conflicts());
        let documented = locked.documented(crate::subscriber::declarations(&app));
        let names: Vec<String> = documented
            .in_creation_order()
            .into_iter()
            .map(|queue| queue.name)
            .collect();
        assert_eq!(names, ["elsewhere", "jobs"]);
    }

    #[test]
    fn an_apps_declarations_join_a_publishers_creation_only_while_the_app_lives() {
        let registry = Arc::new(Mutex::new(Registry::default()));
        let app = [crate::subscriber(
            SqsQueue::new("orders")
                .dead_letter("orders-dlq", 4)
                .visibility_timeout(Duration::from_secs(45)),
            Take,
        )
        .build()];
        let registered = Registry::register(&registry, crate::subscriber::declarations(&app));
        let published = SqsQueue::new("orders").create_if_missing();
        let created = registry.lock().unwrap().for_publisher(&published);
        assert!(created.create_if_missing);
        assert_eq!(created.dead_letter.unwrap().queue, "orders-dlq");
        assert_eq!(
            created.consumer.visibility_timeout,
            Some(Duration::from_secs(45))
        );
        // An app's start merges with the publishers only, never with another app.
        assert!(registry
            .lock()
            .unwrap()
            .for_app(&published)
            .dead_letter
            .is_none());
        drop(registered);
        let created = registry.lock().unwrap().for_publisher(&published);
        assert!(created.dead_letter.is_none() && created.consumer.visibility_timeout.is_none());
        assert!(registry.lock().unwrap().apps.is_empty());
    }

    #[test]
    fn a_disagreement_declared_again_and_again_is_one_problem() {
        let mut registry = Registry::default();
        for dead_letter in ["a", "b"].into_iter().cycle().take(100) {
            registry.publisher(&SqsQueue::new("jobs").dead_letter(dead_letter, 3));
        }
        let app = [crate::subscriber("jobs", Take).build()];
        assert_eq!(
            registry
                .checked(crate::subscriber::declarations(&app))
                .conflicts()
                .len(),
            1
        );
    }
}
