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
use crate::describe::Payload;

/// Who declares a queue when a publisher made from the broker does.
const PUBLISHER: &str = "a publisher made with `broker.publisher(..)`";

/// Who declared a queue, for messages that name both sides of a disagreement.
#[derive(Debug, Clone)]
struct Declared {
    queue: SqsQueue,
    by: String,
}

/// Declarations by queue name: an app's, or the publishers' of a broker.
#[derive(Debug, Default)]
pub(crate) struct Declarations {
    by_name: BTreeMap<String, Declared>,
    conflicts: Vec<ConfigError>,
}

impl Declarations {
    /// The declarations of an app with these subscriptions, each given as its queue and the
    /// queues of its outputs: each subscription's queue, its dead-letter queue and its outputs.
    pub(crate) fn of_app<'a>(
        subscriptions: impl IntoIterator<Item = (&'a SqsQueue, Vec<&'a SqsQueue>)>,
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
                declarations.declare(output, &by);
            }
        }
        declarations
    }

    /// Adds `by`'s declaration of `queue`, merged into the earlier ones of the same name; a
    /// setting that disagrees with an earlier one is kept as a problem for the app's start.
    pub(crate) fn declare(&mut self, queue: &SqsQueue, by: &str) {
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
        for setting in merge(&mut earlier.queue, queue) {
            let conflict = ConfigError::ConflictingDeclarations {
                queue: queue.name.clone(),
                setting,
                first: earlier.by.clone(),
                second: by.to_owned(),
            };
            // A broker's publishers are made again and again (one per request, say); the same
            // disagreement is one problem, and must not grow the list for the broker's life.
            if !self.conflicts.contains(&conflict) {
                self.conflicts.push(conflict);
            }
        }
    }

    /// Adds `other`'s declarations of the queues `keep` picks after this one's, and the
    /// disagreements `other` found among them.
    fn join(&mut self, other: &Self, keep: impl Fn(&str) -> bool) {
        for declared in other
            .by_name
            .values()
            .filter(|declared| keep(&declared.queue.name))
        {
            self.declare(&declared.queue, &declared.by);
        }
        for conflict in &other.conflicts {
            let kept = matches!(conflict, ConfigError::ConflictingDeclarations { queue, .. } if keep(queue));
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

    /// The disagreements found so far.
    pub(crate) fn conflicts(&self) -> Vec<ConfigError> {
        self.conflicts.clone()
    }
}

/// Merges `queue`'s settings into `merged`, the earlier declarations of the same queue: a setting
/// only `queue` gives is taken; the settings both give otherwise are returned, and `merged`
/// keeps its own.
fn merge(merged: &mut SqsQueue, queue: &SqsQueue) -> Vec<&'static str> {
    let mut disagreeing = Vec::new();
    match (&merged.dead_letter, &queue.dead_letter) {
        (Some(first), Some(second)) if first != second => disagreeing.push("dead-letter queue"),
        (None, Some(second)) => merged.dead_letter = Some(second.clone()),
        _ => {}
    }
    match (
        merged.consumer.visibility_timeout,
        queue.consumer.visibility_timeout,
    ) {
        (Some(first), Some(second)) if first != second => disagreeing.push("visibility timeout"),
        (None, Some(second)) => merged.consumer.visibility_timeout = Some(second),
        _ => {}
    }
    // Asking for creation or content-based deduplication in one place asks for the queue.
    merged.create_if_missing |= queue.create_if_missing;
    merged.content_based_dedup |= queue.content_based_dedup;
    disagreeing
}

/// A broker's declarations: its publishers', and those of each app built on it that still lives.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    publishers: Declarations,
    /// What the broker's publishers say they send, by queue name, each type once: for the
    /// AsyncAPI document.
    publisher_payloads: BTreeMap<String, Vec<Payload>>,
    /// By registration, so the app built first comes first.
    apps: BTreeMap<u64, Declarations>,
    next_app: u64,
}

impl Registry {
    /// Adds the declaration of a publisher made with `broker.publisher(..)`.
    pub(crate) fn publisher(&mut self, queue: &SqsQueue) {
        self.publishers.declare(queue, PUBLISHER);
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
        declarations.join(&self.publishers, |name| own.contains(name));
        declarations
    }

    /// What an app's AsyncAPI document shows: its own declarations, joined by every publisher's.
    pub(crate) fn documented(&self, app: Declarations) -> Declarations {
        let mut declarations = app;
        declarations.join(&self.publishers, |_| true);
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
        let _other = Registry::register(&registry, crate::handler::declarations(&other_app));
        let mut locked = registry.lock().unwrap();
        locked.publisher(&SqsQueue::new("jobs").dead_letter("a", 3));
        locked.publisher(&SqsQueue::new("elsewhere").dead_letter("x", 3));
        locked.publisher(&SqsQueue::new("elsewhere").dead_letter("y", 3));
        let app = [crate::subscriber("jobs", Take).build()];
        let checked = locked.checked(crate::handler::declarations(&app));
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
        let documented = locked.documented(crate::handler::declarations(&app));
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
        let registered = Registry::register(&registry, crate::handler::declarations(&app));
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
                .checked(crate::handler::declarations(&app))
                .conflicts()
                .len(),
            1
        );
    }
}
