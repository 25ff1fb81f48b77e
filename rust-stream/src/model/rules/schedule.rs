//! The rules of a message's schedule: how far ahead and behind a due time may be, and which
//! delays SQS keeps itself (the rest only an [outbox](crate::outbox) keeps).

use std::time::Duration;

use crate::model::error::{ErrorKind, TransportError};

/// Longest delay of a queue or a message, in seconds.
pub const MAX_DELAY_SECONDS: i32 = 900;

/// The furthest ahead an outbox schedules a message: 366 days.
pub const MAX_SCHEDULE: Duration = Duration::from_secs(366 * 24 * 3600);

/// How far in the past a due time (`deliver_at`) may be and still mean "now" (a time computed
/// as "now" a moment before the write): 60 s.
pub const PAST_DUE_TOLERANCE: Duration = Duration::from_secs(60);

/// How long from `now` until `at`: zero for a time at most [`PAST_DUE_TOLERANCE`] ago, and
/// `Err(how far in the past)` for one further back.
pub(crate) fn due_in(
    at: std::time::SystemTime,
    now: std::time::SystemTime,
) -> Result<Duration, Duration> {
    match at.duration_since(now) {
        Ok(ahead) => Ok(ahead),
        Err(past) if past.duration() <= PAST_DUE_TOLERANCE => Ok(Duration::ZERO),
        Err(past) => Err(past.duration()),
    }
}

/// The refusal of a due time `past` in the past, further back than [`PAST_DUE_TOLERANCE`].
pub(crate) fn due_in_the_past(past: Duration) -> TransportError {
    TransportError::service(
        ErrorKind::InvalidParameterValue,
        format!(
            "the message is due {past:?} in the past, more than the {PAST_DUE_TOLERANCE:?} a time \
             computed as \"now\" may lag: check the time's clock and zone, or send it without a \
             due time"
        ),
    )
}

/// Whether SQS itself keeps a message's delay of `delay`: a per-message `DelaySeconds` exists
/// on a standard queue only (a FIFO queue refuses one, SNS has none), up to
/// [`MAX_DELAY_SECONDS`]. A delay it does not keep goes through an outbox, which keeps any up to
/// [`MAX_SCHEDULE`].
pub(crate) fn sqs_keeps_delay(delay: Duration, standard_queue: bool) -> bool {
    delay.is_zero() || (standard_queue && delay <= Duration::from_secs(MAX_DELAY_SECONDS as u64))
}
