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
/// - [`retry`](Self::retry): released now (visibility 0) so it is received again.
/// - [`retry_after`](Self::retry_after): received again after the delay (its visibility is set to it).
/// - [`dead_letter`](Self::dead_letter): moved to the subscription's dead-letter queue now: sent
///   there first, then deleted, so a crash in between duplicates rather than loses it.
///
/// On a FIFO queue, `retry` and `retry_after` also hold back the later messages of the group that
/// this consumer holds, so the group comes back whole and in order.
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
    /// Move to the dead-letter queue, saying why.
    DeadLetter(String),
}

impl HandlerOutcome {
    /// The message was handled.
    pub fn ack() -> Self {
        Self::Ack
    }

    /// Release the message now, so it is received again at once.
    pub fn retry() -> Self {
        Self::Retry
    }

    /// Release the message after `delay` (rounded up to whole seconds, at most 12 hours).
    pub fn retry_after(delay: Duration) -> Self {
        Self::RetryAfter(delay)
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

/// A handler's own error: `Err` is logged with its message and the message is retried.
///
/// (`HandlerOutcome` has no `Display`, so `Result<(), HandlerOutcome>` takes the impl above.)
impl<E: fmt::Display> IntoOutcome for Result<(), E> {
    fn into_outcome(self) -> HandlerOutcome {
        match self {
            Ok(()) => HandlerOutcome::Ack,
            Err(error) => {
                tracing::warn!(error = %error, "handler failed; the message will be retried");
                HandlerOutcome::Retry
            }
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
        assert_eq!(Err::<(), _>("boom").into_outcome(), HandlerOutcome::Retry);
        assert_eq!(Ok::<(), &str>(()).into_outcome(), HandlerOutcome::Ack);
    }
}
