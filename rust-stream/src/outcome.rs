//! How a handler settles its message: [`HandlerOutcome`], and [`IntoOutcome`] for everything a
//! handler may return.
//!
//! ```
//! use std::time::Duration;
//! use rust_stream::HandlerOutcome;
//!
//! fn settle(stock: u32) -> HandlerOutcome {
//!     match stock {
//!         0 => HandlerOutcome::retry_after(Duration::from_secs(60)), // come back in a minute
//!         _ => HandlerOutcome::ack(),
//!     }
//! }
//! # assert_eq!(settle(1), HandlerOutcome::ack());
//! ```

use std::fmt;
use std::time::Duration;

/// What becomes of a message once its handler is done.
///
/// - [`ack`](Self::ack): handled; its outputs are sent, then it is deleted.
/// - [`retry`](Self::retry): attempted again after the subscription's
///   [`RetryPolicy`](crate::RetryPolicy) delay.
/// - [`retry_after`](Self::retry_after): attempted again after this delay instead.
/// - [`failed`](Self::failed): the handler's own error; retried as `retry` is, and the error's
///   text is the reason a dead-letter copy carries if the message runs out of attempts. A handler
///   returning `Err(e)` for any `e: Display` gives this.
/// - [`dead_letter`](Self::dead_letter): moved to the subscription's dead-letter queue now: sent
///   there first, then deleted, so a crash in between duplicates rather than loses it.
///
/// A retry counts as an attempt: once a message has had the subscription's `max_receive_count`
/// attempts it is dead-lettered. On a standard queue a retry is a visibility change; on a FIFO
/// queue the consumer keeps the message's group and runs the message again in place, so nothing
/// later in the group runs before it (see [`retry`](crate::retry)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a handler outcome settles the message only when returned"]
pub enum HandlerOutcome {
    /// Handled.
    Ack,
    /// Release now.
    Retry,
    /// Release after this delay.
    RetryAfter(Duration),
    /// The handler failed with this error; retry as [`Retry`](Self::Retry) does.
    Failed(String),
    /// Move to the dead-letter queue, saying why.
    DeadLetter(String),
}

/// The shortest wait [`HandlerOutcome::retry_after`] gives a message.
pub const SHORTEST_RETRY_AFTER: Duration = Duration::from_millis(100);

impl HandlerOutcome {
    /// The message was handled.
    pub fn ack() -> Self {
        Self::Ack
    }

    /// Attempt the message again after the subscription's retry delay.
    pub fn retry() -> Self {
        Self::Retry
    }

    /// The handler failed with `error`: attempted again after the subscription's retry delay,
    /// and, once out of attempts, dead-lettered with `error` as its reason.
    pub fn failed(error: impl fmt::Display) -> Self {
        Self::Failed(error.to_string())
    }

    /// Attempt the message again after `delay` (on a standard queue rounded up to whole seconds;
    /// never past SQS's 12-hour visibility cap, at which the message goes back to the queue).
    /// A delay under [`SHORTEST_RETRY_AFTER`] waits that long instead: a FIFO message retried at
    /// once would spin its group, and a standard one would come straight back.
    pub fn retry_after(delay: Duration) -> Self {
        Self::RetryAfter(delay.max(SHORTEST_RETRY_AFTER))
    }

    /// Move the message to the dead-letter queue now; `reason` travels with it as a header.
    pub fn dead_letter(reason: impl Into<String>) -> Self {
        Self::DeadLetter(reason.into())
    }
}

/// What a handler may return: anything that says how to settle the message.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot settle a message",
    label = "a handler must return how to settle its message",
    note = "return `HandlerOutcome`, `()`, `Result<(), E: Display>` or `Result<(), HandlerOutcome>`"
)]
pub trait IntoOutcome {
    /// The outcome this value stands for.
    fn into_outcome(self) -> HandlerOutcome;
}

impl IntoOutcome for HandlerOutcome {
    fn into_outcome(self) -> HandlerOutcome {
        self
    }
}

/// `()` acknowledges.
impl IntoOutcome for () {
    fn into_outcome(self) -> HandlerOutcome {
        HandlerOutcome::Ack
    }
}

/// `Ok(())` acknowledges; `Err(outcome)` settles as the outcome says.
impl IntoOutcome for Result<(), HandlerOutcome> {
    fn into_outcome(self) -> HandlerOutcome {
        self.err().unwrap_or(HandlerOutcome::Ack)
    }
}

/// A handler's own error: `Err` fails the attempt, as [`HandlerOutcome::failed`]. Its text is the
/// `reason` of the line that logs what becomes of the message (retried, or dead-lettered on its
/// last attempt), and travels with the message if it is dead-lettered. Nothing is logged here:
/// only the retry decision knows whether the message will be retried.
///
/// (`HandlerOutcome` has no `Display`, so `Result<(), HandlerOutcome>` takes the impl above.)
impl<E: fmt::Display> IntoOutcome for Result<(), E> {
    fn into_outcome(self) -> HandlerOutcome {
        match self {
            Ok(()) => HandlerOutcome::Ack,
            Err(error) => HandlerOutcome::failed(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_return_shape_maps_to_its_outcome() {
        assert_eq!(().into_outcome(), HandlerOutcome::Ack);
        assert_eq!(
            Ok::<(), HandlerOutcome>(()).into_outcome(),
            HandlerOutcome::Ack
        );
        assert_eq!(
            Err(HandlerOutcome::dead_letter("bad")).into_outcome(),
            HandlerOutcome::DeadLetter("bad".into())
        );
        assert_eq!(
            Err::<(), _>("boom").into_outcome(),
            HandlerOutcome::Failed("boom".into())
        );
        assert_eq!(Ok::<(), &str>(()).into_outcome(), HandlerOutcome::Ack);
    }
}
