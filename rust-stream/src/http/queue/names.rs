//! Which queues a server serves: SQS's characters, short enough for the dead queue's name, and
//! inside its namespace (a name prefix, `QUEUE_PREFIX`, and an allow-list, `QUEUES`). A name
//! outside answers `404` before any call, so a token for one team's server cannot reach, or
//! create, another team's queues.

use super::error::ApiError;
use crate::model::rules;

/// What a queue's dead queue is called: the queue's name with this after it.
pub const DEAD_QUEUE_SUFFIX: &str = "-dead";

/// The longest queue name served: SQS's 80 less the dead queue's suffix.
const MAX_NAME: usize = rules::MAX_QUEUE_NAME_LEN - DEAD_QUEUE_SUFFIX.len();

/// The queue names a server serves.
#[derive(Debug, Clone, Default)]
pub(super) struct Namespace {
    /// Every name served starts with this (empty: any).
    pub(super) prefix: String,
    /// Only these names, and their dead queues, are served (empty: any with the prefix).
    pub(super) allowed: Vec<String>,
}

impl Namespace {
    /// `queue` when this server serves it: `400` for a name SQS (or the dead queue's suffix)
    /// refuses, `404` for one outside the namespace.
    pub(super) fn check<'a>(&self, queue: &'a str) -> Result<&'a str, ApiError> {
        let fits = !queue.is_empty()
            && queue.len() <= MAX_NAME
            && queue
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !fits {
            return Err(ApiError::BadRequest(format!(
                "queue name `{queue}`: use 1 to {MAX_NAME} letters, digits, `-` and `_` (SQS's \
                 80 less `{DEAD_QUEUE_SUFFIX}` for its dead queue; FIFO queues are not served \
                 here)"
            )));
        }
        let listed = self.allowed.is_empty()
            || self.allowed.iter().any(|allowed| {
                queue == allowed
                    || queue
                        .strip_suffix(DEAD_QUEUE_SUFFIX)
                        .is_some_and(|base| base == allowed)
            });
        if queue.starts_with(&self.prefix) && listed {
            Ok(queue)
        } else {
            Err(ApiError::OutsideNamespace(queue.to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_and_an_allow_list_confine_the_names_served() {
        let open = Namespace::default();
        assert!(open.check("anything").is_ok());
        assert!(matches!(open.check("../x"), Err(ApiError::BadRequest(_))));
        let team = Namespace {
            prefix: "team-a-".into(),
            allowed: Vec::new(),
        };
        assert!(team.check("team-a-jobs").is_ok());
        assert!(team.check("team-a-jobs-dead").is_ok());
        assert!(matches!(
            team.check("payments"),
            Err(ApiError::OutsideNamespace(_))
        ));
        let listed = Namespace {
            prefix: String::new(),
            allowed: vec!["jobs".into()],
        };
        assert!(listed.check("jobs").is_ok());
        assert!(listed.check("jobs-dead").is_ok());
        assert!(matches!(
            listed.check("jobs2"),
            Err(ApiError::OutsideNamespace(_))
        ));
    }
}
