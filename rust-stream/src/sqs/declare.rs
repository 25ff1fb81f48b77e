//! Declarations: every place an app names a queue (a subscription, its dead-letter queue, an
//! output, a publisher made from the broker), merged by name into the one queue they describe.
//!
//! A queue is created from its merged declaration, whichever declaration happens to resolve it
//! first: a publisher's `create_if_missing()` that runs before the app starts still creates the
//! queue with the subscription's dead-letter queue and visibility timeout, and a subscription's
//! output queue that another subscription creates exists before either starts. Two declarations
//! that give one queue different settings cannot both hold: the app refuses to start, naming both.

use std::collections::HashMap;

use super::queue::{ConfigError, SqsQueue};

/// Who declared a queue, for messages that name both sides of a disagreement.
#[derive(Debug, Clone)]
struct Declared {
    queue: SqsQueue,
    by: String,
}

/// The declarations of one broker, by queue name.
#[derive(Debug, Default)]
pub(crate) struct Declarations {
    by_name: HashMap<String, Declared>,
    conflicts: Vec<ConfigError>,
}

impl Declarations {
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
        let first = earlier.by.clone();
        let conflict = |setting: &'static str| ConfigError::ConflictingDeclarations {
            queue: queue.name.clone(),
            setting,
            first: first.clone(),
            second: by.to_owned(),
        };
        let merged = &mut earlier.queue;
        match (&merged.dead_letter, &queue.dead_letter) {
            (Some(first), Some(second)) if first != second => {
                self.conflicts.push(conflict("dead-letter queue"));
            }
            (None, Some(second)) => merged.dead_letter = Some(second.clone()),
            _ => {}
        }
        match (
            merged.consumer.visibility_timeout,
            queue.consumer.visibility_timeout,
        ) {
            (Some(first), Some(second)) if first != second => {
                self.conflicts.push(conflict("visibility timeout"));
            }
            (None, Some(second)) => merged.consumer.visibility_timeout = Some(second),
            _ => {}
        }
        // Asking for creation or content-based deduplication in one place asks for the queue.
        merged.create_if_missing |= queue.create_if_missing;
        merged.content_based_dedup |= queue.content_based_dedup;
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
}
