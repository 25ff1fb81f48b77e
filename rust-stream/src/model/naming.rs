//! How a broker names queues: the prefix and suffix an environment adds to every queue name it
//! resolves (`staging-` makes `payments.fifo` `staging-payments.fifo`).
//!
//! [`QueueNaming::name`] is the one place a declared name becomes the name the broker uses. The
//! broker calls it, through [`QueueNaming::queue`], when a subscriber is included (its queue and
//! its dead-letter queue) and when a publisher is bound (a subscriber's output, or one made with
//! `broker.publisher(..)`); everything after that (declarations, creation, sends, dead-letter
//! copies, health, the AsyncAPI document) sees only the names it made.

use super::queue::{ConfigError, SqsQueue};
use super::rules::{is_fifo_name, MAX_QUEUE_NAME_LEN};

/// The suffix that marks a FIFO queue, which stays last whatever the naming adds.
const FIFO_SUFFIX: &str = ".fifo";

/// What a broker adds to every queue name it resolves: nothing by default.
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
        if self.is_plain() {
            return Ok(declared.to_owned());
        }
        let (stem, fifo) = match declared.strip_suffix(FIFO_SUFFIX) {
            Some(stem) if is_fifo_name(declared) => (stem, FIFO_SUFFIX),
            _ => (declared, ""),
        };
        let named = format!("{}{stem}{}{fifo}", self.prefix, self.suffix);
        let refused = |affix: &str| {
            !affix
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
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
        } else if named.len() > MAX_QUEUE_NAME_LEN {
            Some(format!(
                "it is {} characters, over SQS's {MAX_QUEUE_NAME_LEN}; shorten the prefix or \
                 suffix (or the queue's name) by {}",
                named.len(),
                named.len() - MAX_QUEUE_NAME_LEN
            ))
        } else {
            None
        };
        match reason {
            Some(reason) => Err(ConfigError::QueueNaming {
                queue: declared.to_owned(),
                named,
                reason,
            }),
            None => Ok(named),
        }
    }

    /// `queue` with its name and its dead-letter queue's as the broker names them. A name that
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
        named
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
