//! What a redrive or a delete of dead letters did: an [`AuditRecord`] a message, the messages
//! [`Left`] in the queue and those that [`CameBack`], and the [`RedriveReport`] that sums them up,
//! with the audit log line each record also becomes.
//!
//! The run itself is in [`redrive`](super::redrive), which re-exports these.

use serde::Serialize;

/// One message moved (or, in a dry run, that would be).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AuditRecord {
    /// Its id in the dead-letter queue.
    pub message_id: String,
    /// Its id in the queue it was dead-lettered from, when the copy says.
    pub original_message_id: Option<String>,
    /// The dead-letter queue.
    pub from: String,
    /// Where it went: empty for a message deleted
    /// ([`Operations::delete_matching`](crate::operations::Operations::delete_matching)).
    pub to: String,
    /// Its group, on a FIFO target.
    pub group_id: Option<String>,
    /// The deduplication id it was sent with, on a FIFO target.
    pub dedup_id: Option<String>,
    /// Why it was dead-lettered, when the copy says.
    pub reason: Option<String>,
    /// Its attempts before, when the copy says.
    pub attempts: Option<u32>,
    /// Its message id in `to`; `None` in a dry run, and for a message deleted.
    pub new_message_id: Option<String>,
    /// When it was moved (deleted from the dead-letter queue): milliseconds since the epoch.
    pub at_ms: u64,
    /// Whether this was a dry run (nothing moved).
    pub dry_run: bool,
}

/// A message a redrive left in the dead-letter queue, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Left {
    /// Its id in the dead-letter queue.
    pub message_id: String,
    /// Why it stayed.
    pub reason: String,
    /// Whether it stayed because its target refused its send (the other causes: it names no
    /// source, an earlier message of its FIFO group stayed, or its delete failed).
    pub refused: bool,
}

/// A copy of a message this run moved that was dead-lettered again while the run went on: left
/// in the dead-letter queue for the next run (after the fix), never moved twice by one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CameBack {
    /// Its id in the dead-letter queue.
    pub message_id: String,
    /// The id this run sent it back as (the message that was dead-lettered again).
    pub sent_as: String,
    /// Why it was dead-lettered again, when the copy says.
    pub reason: Option<String>,
}

/// What a redrive did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct RedriveReport {
    /// The dead-letter queue.
    pub from: String,
    /// Whether it was a dry run.
    pub dry_run: bool,
    /// Whether the run deleted the messages chosen instead of moving them
    /// ([`Operations::delete_matching`](crate::operations::Operations::delete_matching)).
    pub deleted: bool,
    /// Messages the run's filter did not choose: they stay where they are.
    pub unmatched: u64,
    /// Each message moved (would be moved, in a dry run), in the order moved.
    pub moved: Vec<AuditRecord>,
    /// The messages it left in the dead-letter queue.
    pub left: Vec<Left>,
    /// Copies of messages it moved that came back to the dead-letter queue during the run (a
    /// consumer dead-lettered them again): left there for the next run.
    pub came_back: Vec<CameBack>,
    /// The dead-letter queue's messages when the run started (visible, in flight and delayed):
    /// the most it moves.
    pub at_start: u64,
    /// The dead-letter queue's messages after the run (visible, in flight and delayed).
    pub remaining: u64,
}

impl RedriveReport {
    /// How many messages its target refused (of [`left`](Self::left)).
    pub fn refused(&self) -> usize {
        self.left.iter().filter(|left| left.refused).count()
    }
}

/// The one-line summary of a run: `moved 3 from q; 2 came back (left for the next run); 1 left
/// (1 refused); 3 remain in it`, or, for a dry run, `would move 3 from q, 2 stay`.
impl std::fmt::Display for RedriveReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let moved = self.moved.len();
        let verb = if self.deleted { "delete" } else { "move" };
        if self.dry_run {
            // Nothing moved: what stays is what is there but the messages that would go.
            let stay = self.remaining.saturating_sub(moved as u64);
            return write!(f, "would {verb} {moved} from {}, {stay} stay", self.from);
        }
        if self.unmatched > 0 {
            write!(f, "{} not chosen by the filter; ", self.unmatched)?;
        }
        if self.deleted {
            return write!(
                f,
                "deleted {moved} from {}; {} left; {} remain in it",
                self.from,
                self.left.len(),
                self.remaining
            );
        }
        write!(
            f,
            "moved {moved} from {}; {} came back (left for the next run); {} left ({} refused); \
             {} remain in it",
            self.from,
            self.came_back.len(),
            self.left.len(),
            self.refused(),
            self.remaining
        )
    }
}

/// Logs a message moved, with the record's fields.
pub(super) fn log(record: &AuditRecord) {
    if record.to.is_empty() {
        tracing::info!(
            operation = "delete",
            messaging.message.id = %record.message_id,
            original_message_id = record.original_message_id.as_deref().unwrap_or(""),
            from = %record.from,
            group_id = record.group_id.as_deref().unwrap_or(""),
            reason = record.reason.as_deref().unwrap_or(""),
            at_ms = record.at_ms,
            dry_run = record.dry_run,
            "dead-letter message deleted"
        );
        return;
    }
    tracing::info!(
        operation = "redrive",
        messaging.message.id = %record.message_id,
        original_message_id = record.original_message_id.as_deref().unwrap_or(""),
        from = %record.from,
        to = %record.to,
        group_id = record.group_id.as_deref().unwrap_or(""),
        new_message_id = record.new_message_id.as_deref().unwrap_or(""),
        at_ms = record.at_ms,
        dry_run = record.dry_run,
        "dead-letter message redriven"
    );
}
