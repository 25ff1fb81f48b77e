//! What the `#[subscriber]` macro's expansion names. Not a public API: it changes with the macro,
//! which is pinned to this crate's exact version.

pub use serde::{Deserialize, Serialize};

use std::time::Duration;

use crate::context::Context;
use crate::outcome::{HandlerOutcome, IntoOutcome};
use crate::state::State;

/// What a handler returned, as `Handle::handle` reports it: `Ok(())` for ack.
pub fn settle<R: IntoOutcome>(returned: R) -> Result<(), HandlerOutcome> {
    match returned.into_outcome() {
        HandlerOutcome::Ack => Ok(()),
        outcome => Err(outcome),
    }
}

/// The app's state of type `T`, for a `State<T>` parameter.
///
/// A `#[subscriber]` declares the state it reads, so the app refuses to start without it; only a
/// handler mounted by hand without `.requires_state::<T>()` can miss it. Its messages then come
/// back after a minute, not at once, so a missing registration does not spin.
pub fn state<T: Clone + Send + Sync + 'static>(
    ctx: &Context<'_>,
) -> Result<State<T>, HandlerOutcome> {
    ctx.state::<T>().ok_or_else(|| {
        tracing::error!(
            state = std::any::type_name::<T>(),
            "the handler reads state the app does not have: register it with `.with_state(..)` \
             and declare it with `.requires_state::<T>()`; the message will be retried"
        );
        HandlerOutcome::retry_after(Duration::from_secs(60))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_is_ok_and_every_other_outcome_is_err() {
        assert_eq!(settle(()), Ok(()));
        assert_eq!(settle(HandlerOutcome::ack()), Ok(()));
        assert_eq!(settle(HandlerOutcome::retry()), Err(HandlerOutcome::Retry));
        assert_eq!(
            settle(Err::<(), _>("boom")),
            Err(HandlerOutcome::failed("boom"))
        );
        assert_eq!(
            settle(Err::<(), _>(HandlerOutcome::dead_letter("bad"))),
            Err(HandlerOutcome::dead_letter("bad"))
        );
    }
}
