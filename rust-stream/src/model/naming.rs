//! How a broker names queues and topics: the prefix and suffix an environment adds to every queue
//! and topic name it resolves (`staging-` makes `payments.fifo` `staging-payments.fifo`).
//!
//! [`QueueNaming::name`] (and [`QueueNaming::topic_name`] for a topic) is the one place a declared
//! name becomes the name the broker uses. The broker calls it, through [`QueueNaming::queue`], when
//! a subscriber is included (its queue, its dead-letter queue and the topics it is subscribed to)
//! and when a publisher is bound (a subscriber's output, or one made with
//! `broker.publisher(..)`); everything after that (declarations, creation, sends, dead-letter
//! copies, health, the AsyncAPI document) sees only the names it made.

use super::destination::Destination;
use super::queue::{ConfigError, SqsQueue};
use super::rules::{is_fifo_name, MAX_QUEUE_NAME_LEN};
use super::sns_topic::SnsTopic;
use super::topic::{is_fifo_topic_name, MAX_TOPIC_NAME_LEN};

/// The suffix that marks a FIFO queue or topic, which stays last whatever the naming adds.
const FIFO_SUFFIX: &str = ".fifo";

/// Whose rules a name must keep: a queue's, or a topic's.
#[derive(Clone, Copy)]
enum Service {
    Sqs,
    Sns,
}

/// What a broker adds to every queue and topic name it resolves: nothing by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QueueNaming {
    pub(crate) prefix: String,
    pub(crate) suffix: String,
}

impl QueueNaming {
    /// Whether names stay as declared.
    fn is_plain(&self) -> bool {
        self.prefix.is_empty() && self.suffix.is_empty()
    }

    /// `declared` as the broker names it: the prefix before it, the suffix after it and before a
    /// `.fifo`, which stays last so the queue keeps its type.
    ///
    /// A prefix or suffix with a character SQS refuses, or a name it takes past 80 characters, is
    /// a [`ConfigError::QueueNaming`] that names the queue and the fix. A declared name that is
    /// wrong on its own is left to the queue's own checks.
    pub(crate) fn name(&self, declared: &str) -> Result<String, ConfigError> {
        self.affixed(declared, is_fifo_name(declared), Service::Sqs)
            .map_err(|(named, reason)| ConfigError::QueueNaming {
                queue: declared.to_owned(),
                named,
                reason,
            })
    }

    /// `declared`, a topic's name, as the broker names it: the same prefix and suffix as a
    /// queue's, the suffix before a `.fifo`.
    ///
    /// A prefix or suffix with a character SNS refuses (the same as SQS's), or a name it takes
    /// past 256 characters, is a [`ConfigError::TopicNaming`] that names the topic and the fix. A
    /// declared name that is wrong on its own is left to the topic's own checks.
    pub(crate) fn topic_name(&self, declared: &str) -> Result<String, ConfigError> {
        self.affixed(declared, is_fifo_topic_name(declared), Service::Sns)
            .map_err(|(named, reason)| ConfigError::TopicNaming {
                topic: declared.to_owned(),
                named,
                reason,
            })
    }

    /// `declared` with the prefix and suffix, or the name they make and why `service` refuses it.
    fn affixed(
        &self,
        declared: &str,
        fifo: bool,
        service: Service,
    ) -> Result<String, (String, String)> {
        if self.is_plain() {
            return Ok(declared.to_owned());
        }
        let (stem, fifo) = match declared.strip_suffix(FIFO_SUFFIX) {
            Some(stem) if fifo => (stem, FIFO_SUFFIX),
            _ => (declared, ""),
        };
        let named = format!("{}{stem}{}{fifo}", self.prefix, self.suffix);
        let refused = |affix: &str| {
            !affix
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
        };
        let (name, max, kind) = match service {
            Service::Sqs => ("SQS", MAX_QUEUE_NAME_LEN, "queue"),
            Service::Sns => ("SNS", MAX_TOPIC_NAME_LEN, "topic"),
        };
        let reason = if refused(&self.prefix) {
            Some(format!(
                "the prefix `{}` may hold only letters, digits, `-` and `_`; change \
                 `SqsBroker::queue_name_prefix(..)`",
                self.prefix
            ))
        } else if refused(&self.suffix) {
            Some(format!(
                "the suffix `{}` may hold only letters, digits, `-` and `_` (a `.fifo` stays at \
                 the end of the name by itself); change `SqsBroker::queue_name_suffix(..)`",
                self.suffix
            ))
        } else if named.len() > max {
            Some(format!(
                "it is {} characters, over {name}'s {max}; shorten the prefix or suffix (or the \
                 {kind}'s name) by {}",
                named.len(),
                named.len() - max
            ))
        } else {
            None
        };
        match reason {
            Some(reason) => Err((named, reason)),
            None => Ok(named),
        }
    }

    /// `topic` with its name as the broker names it. A name that cannot be named so stays as
    /// declared, and its problem goes to `problems`.
    pub(crate) fn topic(&self, topic: &SnsTopic, problems: &mut Vec<ConfigError>) -> SnsTopic {
        let mut named = topic.clone();
        match self.topic_name(&topic.name) {
            Ok(new) => named.name = new,
            Err(problem) => problems.push(problem),
        }
        named
    }

    /// `queue` with its name, its dead-letter queue's and the names of the topics it is subscribed
    /// to as the broker names them. A name that
    /// cannot be named so stays as declared, and its problem goes to `problems`, for the app's
    /// start (or the publisher's sends) to refuse with.
    pub(crate) fn queue(&self, queue: &SqsQueue, problems: &mut Vec<ConfigError>) -> SqsQueue {
        let mut named = queue.clone();
        let mut rename = |name: &mut String| match self.name(name) {
            Ok(new) => *name = new,
            Err(problem) => problems.push(problem),
        };
        rename(&mut named.name);
        if let Some(dead_letter) = &mut named.dead_letter {
            rename(&mut dead_letter.queue);
        }
        for subscription in &mut named.subscriptions {
            subscription.topic = self.topic(&subscription.topic, problems);
        }
        named
    }

    /// `destination` as the broker names it: a queue as [`queue`](Self::queue) names it, a topic
    /// as [`topic`](Self::topic) does.
    pub(crate) fn destination(
        &self,
        destination: &Destination,
        problems: &mut Vec<ConfigError>,
    ) -> Destination {
        match destination {
            Destination::Queue(queue) => Destination::Queue(self.queue(queue, problems)),
            Destination::Topic(topic) => Destination::Topic(self.topic(topic, problems)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naming(prefix: &str, suffix: &str) -> QueueNaming {
        QueueNaming {
            prefix: prefix.to_owned(),
            suffix: suffix.to_owned(),
        }
    }

    #[test]
    fn the_prefix_goes_first_and_the_suffix_before_fifo() {
        let staging = naming("staging-", "-blue");
        assert_eq!(
            staging.name("payments.fifo").unwrap(),
            "staging-payments-blue.fifo"
        );
        assert_eq!(staging.name("payments").unwrap(), "staging-payments-blue");
        assert_eq!(
            naming("", "").name("payments.fifo").unwrap(),
            "payments.fifo"
        );
    }

    #[test]
    fn a_queue_and_its_dead_letter_queue_are_renamed_together() {
        let mut problems = Vec::new();
        let queue = SqsQueue::new("payments.fifo")
            .create_if_missing()
            .dead_letter("payments-dlq.fifo", 3)
            .concurrency(4);
        let named = naming("staging-", "").queue(&queue, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            named,
            SqsQueue::new("staging-payments.fifo")
                .create_if_missing()
                .dead_letter("staging-payments-dlq.fifo", 3)
                .concurrency(4)
        );
    }

    #[test]
    fn a_prefix_sqs_refuses_names_the_queue_and_the_fix() {
        let problem = naming("staging.", "").name("payments.fifo").unwrap_err();
        let shown = problem.to_string();
        assert!(shown.contains("queue `payments.fifo`"), "{shown}");
        assert!(shown.contains("`staging.payments.fifo`"), "{shown}");
        assert!(shown.contains("queue_name_prefix"), "{shown}");
        let shown = naming("", "-v1.fifo")
            .name("payments.fifo")
            .unwrap_err()
            .to_string();
        assert!(shown.contains("queue_name_suffix"), "{shown}");
    }

    #[test]
    fn a_queues_topics_are_named_with_it_and_a_topic_takes_256_characters() {
        let mut problems = Vec::new();
        let queue = SqsQueue::new("ledger.fifo")
            .subscribed_to(SnsTopic::new("posted.fifo"))
            .subscribed_to(SnsTopic::new("refunded.fifo"));
        let named = naming("staging-", "-blue").queue(&queue, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let topics: Vec<&str> = named
            .subscriptions()
            .iter()
            .map(|subscription| subscription.topic().name())
            .collect();
        assert_eq!(
            topics,
            ["staging-posted-blue.fifo", "staging-refunded-blue.fifo"]
        );
        let long = "t".repeat(100);
        assert!(
            naming("staging-", "").topic_name(&long).is_ok(),
            "over a queue's 80, within a topic's 256"
        );
        let problem = naming("staging-", "")
            .topic_name(&"t".repeat(250))
            .unwrap_err();
        let ConfigError::TopicNaming {
            topic,
            named,
            reason,
        } = &problem
        else {
            panic!("{problem:?}");
        };
        assert_eq!((topic.len(), named.len()), (250, 258));
        assert!(
            reason.contains("258 characters, over SNS's 256"),
            "{reason}"
        );
        assert!(reason.contains("the topic's name) by 2"), "{reason}");
        let shown = naming("staging.", "")
            .topic_name("posted")
            .unwrap_err()
            .to_string();
        for needle in [
            "topic `posted`",
            "`staging.posted`",
            "SNS refuses",
            "queue_name_prefix",
        ] {
            assert!(shown.contains(needle), "`{needle}` missing in: {shown}");
        }
    }

    #[test]
    fn a_name_the_prefix_takes_past_80_characters_says_by_how_much() {
        let long = "p".repeat(70);
        let problem = naming("staging-", "")
            .name(&format!("{long}.fifo"))
            .unwrap_err();
        let ConfigError::QueueNaming { named, reason, .. } = &problem else {
            panic!("{problem:?}");
        };
        assert_eq!(named.len(), 83);
        assert!(reason.contains("83 characters, over SQS's 80"), "{reason}");
        assert!(reason.contains("by 3"), "{reason}");
        let mut problems = Vec::new();
        let kept =
            naming("staging-", "").queue(&SqsQueue::new(format!("{long}.fifo")), &mut problems);
        assert_eq!(
            kept.name(),
            format!("{long}.fifo"),
            "a name that cannot be made stays"
        );
        assert_eq!(problems, [problem]);
    }
}
