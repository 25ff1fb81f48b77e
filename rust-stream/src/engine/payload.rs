//! A message whose payload is in S3 gets it before its handler runs: fetched once (a retry reads
//! what the first attempt fetched), checked against its size and SHA-256, and kept in the
//! delivery for the handler's codec. The pointer itself is never given to a handler, and a
//! dead-letter copy or a redrive carries the pointer as it came, so they need no new object.
//!
//! A pointer that points nowhere (a missing bucket or object, a payload that is not the one sent,
//! a body marked as a pointer that is none) will not get better by waiting: the message does not
//! decode and is dead-lettered with the reason. Any other failure of the fetch (throttling, the
//! network) is a failed attempt, retried as a handler's failure is.

use super::attempt;
use super::settle::Verdict;
use crate::client::Client;
use crate::codec::DecodeError;
use crate::handler::context::Delivery;
use crate::metrics::SubscriptionMetrics;
use crate::model::large_payload::checked_payload;
use crate::model::rules::ErrorKind;

/// Fetches the payload `delivery` points at, when it points at one not fetched yet: `None` when
/// its handler may run, else the verdict of this attempt (logged in the caller's span).
pub(crate) async fn fetch(
    client: &Client,
    delivery: &Delivery,
    metrics: &SubscriptionMetrics,
) -> Option<Verdict> {
    let large = delivery.large.as_ref()?;
    if large.fetched.get().is_some() {
        return None;
    }
    let read = match &large.pointer {
        Ok(read) => read,
        Err(error) => return Some(points_nowhere(error.to_string(), metrics)),
    };
    let pointer = &read.pointer;
    match client
        .transport()
        .get_object(&pointer.bucket, &pointer.key)
        .await
    {
        Ok(payload) => match checked_payload(read, payload) {
            Ok(payload) => {
                let _ = large.fetched.set(payload);
                None
            }
            Err(reason) => Some(points_nowhere(reason, metrics)),
        },
        Err(error)
            if matches!(
                error.kind(),
                Some(ErrorKind::NoSuchKey | ErrorKind::NoSuchBucket)
            ) =>
        {
            Some(points_nowhere(
                format!(
                    "its payload `{}` in the S3 bucket `{}` is gone: {error}",
                    pointer.key, pointer.bucket
                ),
                metrics,
            ))
        }
        Err(error) => {
            tracing::warn!(error = %error, bucket = %pointer.bucket, key = %pointer.key, "payload fetch from S3 failed; the message is retried");
            Some(Verdict::Failed {
                reason: format!(
                    "its payload `{}` could not be fetched from the S3 bucket `{}`: {error}",
                    pointer.key, pointer.bucket
                ),
                asked: None,
            })
        }
    }
}

/// The verdict of a message whose pointer leads to no payload it was sent with.
fn points_nowhere(reason: String, metrics: &SubscriptionMetrics) -> Verdict {
    attempt::undecodable(
        &DecodeError {
            type_name: "a payload in S3",
            reason,
        },
        metrics,
    )
}
