//! What every handler call shares, one message or a batch: the wait for a handler that was not
//! ready at once (its timeout, the shutdown's cancellation), the verdict an outcome, a decode
//! failure or a panic comes to and how each verdict is counted, and the gauge of messages in
//! handlers. The dispatcher's single attempts (`dispatch.rs`) and the batch calls (`batches.rs`)
//! both run through here, so a message is settled and counted the same way whichever handler
//! took it.

use std::future::Future;
use std::time::Duration;

use super::settle::Verdict;
use super::shared::Tasks;
use crate::codec::DecodeError;
use crate::metrics::{Attempt, SubscriptionMetrics};
use crate::outcome::HandlerOutcome;
use crate::publish::Outgoing;

/// Why a handler call was dropped before it returned.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dropped {
    /// It outlived the subscription's handler timeout.
    TimedOut(Duration),
    /// The shutdown's budget ran out.
    Cancelled,
}

impl Dropped {
    /// The verdict of each message of the dropped call.
    pub(crate) fn verdict(self) -> Verdict {
        match self {
            Self::TimedOut(timeout) => Verdict::Failed {
                reason: format!("the handler did not finish within its timeout of {timeout:?}"),
                asked: None,
            },
            Self::Cancelled => Verdict::Cancelled,
        }
    }
}

/// Waits for a handler call that was not ready at its first poll, at most `timeout` and until
/// the shutdown cancels handlers; why it was dropped instead. The call is dropped (cancelled)
/// here, so the handler no longer runs once its messages are settled or released.
pub(crate) async fn wait_for_handler<F: Future + Unpin>(
    mut call: F,
    timeout: Option<Duration>,
    tasks: &Tasks,
    span: &tracing::Span,
) -> Result<F::Output, Dropped> {
    let timed_out = async {
        match timeout {
            Some(timeout) => tokio::time::sleep(timeout).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        handled = &mut call => Ok(handled),
        () = timed_out => {
            drop(call);
            let timeout = timeout.unwrap_or_default();
            let _entered = span.enter();
            tracing::error!(timeout_ms = timeout.as_millis() as u64, "handler timed out and was cancelled");
            Err(Dropped::TimedOut(timeout))
        }
        () = tasks.cancel_handlers().cancelled() => {
            drop(call);
            let _entered = span.enter();
            tracing::warn!("handler cancelled at the shutdown timeout; its message is released");
            Err(Dropped::Cancelled)
        }
    }
}

/// The verdict of a handler's outcome, with what it published.
pub(crate) fn verdict(outcome: HandlerOutcome, staged: Vec<Outgoing>) -> Verdict {
    match outcome {
        HandlerOutcome::Ack => Verdict::Ack { staged },
        HandlerOutcome::Retry => Verdict::Failed {
            reason: "the handler asked to retry".to_owned(),
            asked: None,
        },
        HandlerOutcome::Failed(error) => Verdict::Failed {
            reason: format!("the handler failed: {error}"),
            asked: None,
        },
        HandlerOutcome::RetryAfter(delay) => Verdict::Failed {
            reason: format!("the handler asked to retry after {delay:?}"),
            asked: Some(delay),
        },
        HandlerOutcome::DeadLetter(reason) => Verdict::DeadLetter {
            reason,
            undecodable: false,
        },
    }
}

/// How an attempt that came to `verdict` is counted in the subscription's metrics.
pub(crate) fn counted(verdict: &Verdict) -> Attempt {
    match verdict {
        Verdict::Ack { .. } => Attempt::Succeeded,
        Verdict::Failed { .. } => Attempt::Failed,
        Verdict::DeadLetter { .. } => Attempt::DeadLetter,
        Verdict::Cancelled => Attempt::Cancelled,
    }
}

/// The verdict of a message whose body does not decode, counted and logged (in the caller's
/// span: the message's).
pub(crate) fn undecodable(error: &DecodeError, metrics: &SubscriptionMetrics) -> Verdict {
    metrics.undecodable();
    tracing::error!(error = %error, "message body does not decode");
    Verdict::DeadLetter {
        reason: error.to_string(),
        undecodable: true,
    }
}

/// The verdict of each message of a call that panicked, the panic logged (in the caller's span).
pub(crate) fn panicked(panic: &str) -> Verdict {
    Verdict::Failed {
        reason: format!("the handler panicked: {panic}"),
        asked: None,
    }
}

/// Messages counted as in handlers while this lives, however the call ends (a dropped future
/// included).
pub(crate) struct InFlight<'a> {
    metrics: &'a SubscriptionMetrics,
    messages: usize,
}

impl<'a> InFlight<'a> {
    pub(crate) fn new(metrics: &'a SubscriptionMetrics, messages: usize) -> Self {
        metrics.in_flight.increment(messages as f64);
        Self { metrics, messages }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.metrics.in_flight.decrement(self.messages as f64);
    }
}
