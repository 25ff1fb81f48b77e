//! What the `#[subscriber]` macro's expansion names. Not a public API: it changes with the macro,
//! which is pinned to this crate's exact version.

pub use serde::{Deserialize, Serialize};

use std::marker::PhantomData;
use std::time::Duration;

use crate::describe::Payload;
use crate::handler::batch::{BatchContext, BatchOutcome, IntoBatchOutcome};

use crate::handler::context::Context;
use crate::outcome::{HandlerOutcome, IntoOutcome};
use crate::state::State;

/// What a handler returned, as `Handle::handle` reports it: `Ok(())` for ack.
pub fn settle<R: IntoOutcome>(returned: R) -> Result<(), HandlerOutcome> {
    match returned.into_outcome() {
        HandlerOutcome::Ack => Ok(()),
        outcome => Err(outcome),
    }
}

/// What a batch handler returned, as `HandleBatch::handle` reports it.
pub fn settle_batch<R: IntoBatchOutcome>(returned: R) -> BatchOutcome {
    returned.into_batch_outcome()
}

/// The app's state of type `T`, for a `State<T>` parameter.
///
/// A `#[subscriber]` declares the state it reads, so the app refuses to start without it; only a
/// handler mounted by hand without `.requires_state::<T>()` can miss it. Its messages then come
/// back after a minute, not at once, so a missing registration does not spin.
pub fn state<T: Clone + Send + Sync + 'static>(
    ctx: &Context<'_>,
) -> Result<State<T>, HandlerOutcome> {
    ctx.state::<T>().ok_or_else(missing_state::<T>)
}

/// The app's state of type `T`, for a `State<T>` parameter of a batch handler; as [`state`],
/// whose missing state retries every message of the batch in a minute.
pub fn batch_state<T: Clone + Send + Sync + 'static>(
    ctx: &BatchContext<'_>,
) -> Result<State<T>, BatchOutcome> {
    ctx.state::<T>()
        .ok_or_else(|| BatchOutcome::all(missing_state::<T>()))
}

/// The outcome of a message whose handler reads state the app does not have, logged.
fn missing_state<T>() -> HandlerOutcome {
    tracing::error!(
        state = std::any::type_name::<T>(),
        "the handler reads state the app does not have: register it with `.with_state(..)` \
         and declare it with `.requires_state::<T>()`; the handler asks to retry the message in a minute"
    );
    HandlerOutcome::retry_after(Duration::from_secs(60))
}

/// How the AsyncAPI document describes `T`: by its JSON Schema when `T` implements
/// `schemars::JsonSchema` (feature `schemars`), else by its name. Chosen at compile time by
/// method resolution on a concrete `T`: `describe::<T>().payload()` finds [`WithSchema`] on
/// `Describe<T>` before [`ByName`] on `&Describe<T>`, which takes one more auto-reference.
#[allow(missing_debug_implementations)]
pub struct Describe<T: ?Sized>(PhantomData<fn() -> PhantomData<T>>);

/// The describer of `T`, borrowed: the receiver [`WithSchema`] and [`ByName`] are chosen on.
pub const fn describe<T: ?Sized>() -> &'static Describe<T> {
    &Describe(PhantomData)
}

/// The first choice of [`Describe`]: a JSON Schema.
pub trait WithSchema {
    /// `T` by its JSON Schema.
    fn payload(&self) -> Payload;
}

#[cfg(feature = "schemars")]
impl<T: schemars::JsonSchema + ?Sized> WithSchema for Describe<T> {
    fn payload(&self) -> Payload {
        Payload::schema::<T>()
    }
}

/// The fallback of [`Describe`]: the type's name.
pub trait ByName {
    /// `T` by its name.
    fn payload(&self) -> Payload;
}

impl<T: ?Sized> ByName for &Describe<T> {
    fn payload(&self) -> Payload {
        Payload::named::<T>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_takes_the_schema_when_there_is_one_and_the_name_otherwise() {
        #[allow(unused_imports)]
        use super::{ByName as _, WithSchema as _};
        struct Plain;
        let plain = describe::<Plain>().payload();
        assert!(plain.type_name().ends_with("Plain"));
        assert!(!format!("{plain:?}").contains("schema: true"));
        #[cfg(feature = "schemars")]
        {
            #[derive(schemars::JsonSchema)]
            struct Schemed {
                _id: u64,
            }
            let schemed = describe::<Schemed>().payload();
            assert!(
                format!("{schemed:?}").contains("schema: true"),
                "{schemed:?}"
            );
        }
    }

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
