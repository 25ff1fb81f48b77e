//! What a redrive is asked to do ([`Redrive`]): from which queue, to where, how fast, which
//! messages, for real or as a dry run, and how long it holds what it received.

use std::time::Duration;

use crate::model::rules;
use crate::operations::peek::MessageFilter;

/// How long a redrive keeps the messages it received invisible by default: enough to send and
/// delete a batch.
const DEFAULT_VISIBILITY: Duration = Duration::from_secs(60);

/// What to redrive, where, how fast: see [the module](crate::operations::redrive).
///
/// ```
/// use rust_stream::operations::Redrive;
///
/// // Every copy back to its source, 50 a second; first a dry run.
/// let plan = Redrive::from("payments-dlq.fifo").rate(50.0).dry_run();
/// # let _ = plan;
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Redrive {
    pub(super) from: String,
    pub(super) to: Option<String>,
    pub(super) rate: Option<f64>,
    pub(super) dry_run: bool,
    pub(super) limit: Option<usize>,
    pub(super) visibility: Option<Duration>,
    pub(super) filter: Option<MessageFilter>,
    /// Deletes what the filter chooses instead of moving it ([`Operations::delete_matching`]).
    pub(super) delete: bool,
}

impl Redrive {
    /// Redrives the dead-letter queue `queue`, each message to its source.
    pub fn from(queue: impl Into<String>) -> Self {
        Self {
            from: queue.into(),
            to: None,
            rate: None,
            dry_run: false,
            limit: None,
            visibility: None,
            filter: None,
            delete: false,
        }
    }

    /// Moves only the messages `filter` matches (by reason, source queue, body, JSON pointer,
    /// ids, sent time: see [`MessageFilter`]); the others stay where they are, counted in
    /// [`RedriveReport::unmatched`](crate::operations::RedriveReport::unmatched).
    ///
    /// On a FIFO dead-letter queue a group moves in its order, so a filter never splits one
    /// out of order: a group moves up to its first message the filter does not match, and a
    /// matching message behind that one stays, in
    /// [`RedriveReport::left`](crate::operations::RedriveReport::left) with the reason (widen the
    /// filter to the whole group, e.g. by its group id, to move it).
    pub fn filter(mut self, filter: MessageFilter) -> Self {
        self.filter = Some(filter);
        self
    }

    /// Sends every message to `queue` instead of its source.
    pub fn to(mut self, queue: impl Into<String>) -> Self {
        self.to = Some(queue.into());
        self
    }

    /// Moves at most `per_second` messages a second (over the run; sends go in batches).
    pub fn rate(mut self, per_second: f64) -> Self {
        self.rate = Some(per_second);
        self
    }

    /// Sends and deletes nothing: says what would move where.
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Moves at most `messages`, then stops (what is left stays in the dead-letter queue).
    pub fn limit(mut self, messages: usize) -> Self {
        self.limit = Some(messages);
        self
    }

    /// How long the messages received from the dead-letter queue stay invisible while they are
    /// moved (default 60 s, longer at a low rate): after a redrive killed mid-way, a rerun waits
    /// this long for them.
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility = Some(timeout);
        self
    }

    /// The visibility a redrive receives with: room for a batch at the rate.
    pub(super) fn hold(&self) -> Duration {
        let for_a_batch = self.rate.map_or(Duration::ZERO, |rate| {
            Duration::from_secs_f64(2.0 * rules::MAX_BATCH_ENTRIES as f64 / rate)
        });
        self.visibility
            .unwrap_or(DEFAULT_VISIBILITY.max(for_a_batch + Duration::from_secs(30)))
    }
}
