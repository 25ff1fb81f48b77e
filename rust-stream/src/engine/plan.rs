//! The consumer's start-up decisions, made before any consumer runs: the problems of the
//! subscriptions' declarations (each one found before any network call, and reported together),
//! the settings that work but badly (warned about), how an existing queue compares with its
//! declaration, and where a subscription's failed messages go and after how many attempts (its
//! `dead_letter(..)` or the queue's `RedrivePolicy`, and a dead-letter queue that can take every
//! message). `mod.rs` asks these as it starts the consumers, and wires what they decide.

use std::sync::Arc;
use std::time::Duration;

use super::start::StartError;
use crate::app::{AppContext, RunError};
use crate::client::Client;
use crate::model::queue::ConfigError;
use crate::model::rules::{self, RedrivePolicy};
use crate::model::SqsQueue;
use crate::publish::Publisher;
use crate::subscriber::Subscriber;

/// The problems of the subscriptions' declarations, as the app's run reports them at once:
/// each subscription's own and its queue's, a long poll past the transport's attempt timeout,
/// batch limits, missing states, the routes of queues several subscriptions read (and the type
/// header they route by), the batch linger, and declarations of one queue that conflict.
pub(super) fn problems(
    subscribers: &[Subscriber],
    client: &Client,
    app: &AppContext,
    type_header: &Arc<str>,
) -> Vec<ConfigError> {
    let mut problems = Vec::new();
    let attempt_timeout = client.transport().attempt_timeout();
    for subscriber in subscribers {
        problems.extend(subscriber.problems.iter().cloned());
        let before = problems.len();
        subscriber.queue.problems(&mut problems);
        // A wait refused on its own is one problem, not two.
        let wait_refused = problems[before..]
            .iter()
            .any(|problem| matches!(problem, ConfigError::Wait { .. }));
        let wait = subscriber.queue.consumer.wait;
        if let Some(attempt_timeout) =
            attempt_timeout.filter(|timeout| !wait_refused && wait >= *timeout)
        {
            problems.push(ConfigError::WaitPastAttemptTimeout {
                queue: subscriber.queue.name.clone(),
                wait,
                attempt_timeout,
            });
        }
        if let Some(limits) = subscriber.handler.batch_limits() {
            if !(1..=crate::handler::batch::MAX_BATCH_MESSAGES).contains(&limits.max) {
                problems.push(ConfigError::BatchMax {
                    queue: subscriber.queue.name.clone(),
                    got: limits.max,
                });
            }
            if limits.window > crate::handler::batch::MAX_BATCH_WINDOW {
                problems.push(ConfigError::BatchWindow {
                    queue: subscriber.queue.name.clone(),
                    got: limits.window,
                    max: crate::handler::batch::MAX_BATCH_WINDOW,
                });
            }
        }
        for requirement in &subscriber.requirements {
            if !app.states().contains(requirement.type_id) {
                problems.push(ConfigError::MissingState {
                    queue: subscriber.queue.name.clone(),
                    type_name: requirement.type_name,
                });
            }
        }
    }
    crate::routing::check(subscribers, &mut problems);
    if !crate::routing::routed_queues(subscribers).is_empty() {
        if let Err(error) = rules::check_attribute_name(type_header) {
            problems.push(ConfigError::TypeHeaderName {
                name: type_header.to_string(),
                reason: error.to_string(),
            });
        }
    }
    if client.linger() > crate::model::queue::MAX_BATCH_LINGER {
        problems.push(ConfigError::BatchLinger {
            got: client.linger(),
            max: crate::model::queue::MAX_BATCH_LINGER,
        });
    }
    if let Some(got) = client
        .backlog_interval()
        .filter(|interval| *interval < Duration::from_secs(1))
    {
        problems.push(ConfigError::BacklogInterval { got });
    }
    problems.extend(client.conflicting_declarations(crate::subscriber::declarations(subscribers)));
    problems
}

/// The shortest visibility timeout that leaves the heartbeat and the calls it makes room: below
/// it, a call slower than a quarter of the timeout lets messages lapse.
const SHORTEST_SAFE_VISIBILITY: Duration = Duration::from_secs(5);

/// Warns about settings that work, but badly: a visibility timeout too short for the heartbeat's
/// calls, and a FIFO subscription without a handler timeout.
pub(super) fn warn_about_settings(subscribers: &[Subscriber]) {
    for subscriber in subscribers {
        let queue = &subscriber.queue;
        if let Some(visibility) = queue.consumer.visibility_timeout {
            if visibility < SHORTEST_SAFE_VISIBILITY {
                tracing::warn!(
                    messaging.destination.name = %queue.name,
                    visibility_timeout_s = visibility.as_secs(),
                    "a visibility timeout this short leaves the heartbeat a quarter of it to extend a message: \
                     a slower call lets messages time out and be handled twice; use at least 5 s"
                );
            }
        }
        if queue.is_fifo() && queue.consumer.handler_timeout.is_none() {
            tracing::warn!(
                messaging.destination.name = %queue.name,
                "no handler timeout: a handler that never returns holds its FIFO group (extended) until the \
                 12-hour cap, and its handler slot for good; set `.timeout(..)`"
            );
        }
    }
}

/// Checks an existing queue against its declaration: a difference the consumer makes up for is a
/// warning naming the attribute; one that would break a promise keeps the app from starting.
pub(super) fn compare_with_declaration(
    queue: &SqsQueue,
    attributes: &crate::transport::QueueAttributes,
) -> Result<(), RunError> {
    let actual = |name: &str| attributes.get(name).map(String::as_str).unwrap_or("");
    if queue.content_based_dedup && actual("ContentBasedDeduplication") != "true" {
        // Publishers of this declaration send no deduplication id; SQS would refuse every one.
        return Err(StartError::QueueAttribute {
            queue: queue.name.clone(),
            attribute: "ContentBasedDeduplication",
            declared: "true".to_owned(),
            actual: actual("ContentBasedDeduplication").to_owned(),
        }
        .into());
    }
    if let Some(timeout) = queue.consumer.visibility_timeout {
        let seconds = timeout.as_secs().to_string();
        if actual("VisibilityTimeout") != seconds {
            tracing::warn!(
                messaging.destination.name = %queue.name,
                declared = %seconds,
                actual = %actual("VisibilityTimeout"),
                "the queue's VisibilityTimeout differs from the declaration; the consumer asks for the declared one on every receive"
            );
        }
    }
    if queue.high_throughput {
        for (attribute, declared) in crate::model::queue::HIGH_THROUGHPUT_FIFO {
            if actual(attribute) != declared {
                // The consumer works either way: the queue's throughput quota, or the scope of its
                // deduplication ids, is not what the declaration asks for.
                tracing::warn!(
                    messaging.destination.name = %queue.name,
                    attribute,
                    declared,
                    actual = %actual(attribute),
                    "the queue is declared `.high_throughput()` but its attribute differs: without both \
                     DeduplicationScope=messageGroup and FifoThroughputLimit=perMessageGroupId the queue's throughput \
                     quota is per queue, and with DeduplicationScope=queue a deduplication id counts across groups; \
                     set both with SetQueueAttributes"
                );
            }
        }
    }
    if queue.dead_letter.is_some() && actual("RedrivePolicy").is_empty() {
        tracing::warn!(
            messaging.destination.name = %queue.name,
            "the queue has no RedrivePolicy although the subscription declares `.dead_letter(..)`; \
             the consumer dead-letters by the declaration, but nothing moves a message if consumers crash on it. \
             To fix: set the queue's RedrivePolicy to the dead-letter queue (SetQueueAttributes), or let \
             the subscription create the queue (`.create_if_missing()`, before anything else creates it)"
        );
    }
    Ok(())
}

/// Decides where a subscription's failed messages go and after how many attempts: the
/// subscription's `dead_letter(..)`, or else the queue's own `RedrivePolicy`.
pub(super) async fn dead_letter_decision(
    client: &Arc<Client>,
    queue: &SqsQueue,
    redrive: Option<&RedrivePolicy>,
) -> Result<(Option<Publisher>, Option<u32>), RunError> {
    if let Some(declared) = &queue.dead_letter {
        if let Some(policy) = redrive {
            let backstop = crate::retry::redrive_backstop(declared.max_receive_count);
            if policy.target_name() != declared.queue {
                // SQS's redrive stays the backstop; when it moves messages, they reach the other
                // queue without this consumer's record.
                tracing::warn!(
                    messaging.destination.name = %queue.name,
                    subscription.dead_letter = %declared.queue,
                    queue.dead_letter = %policy.target_name(),
                    "the queue's RedrivePolicy names another dead-letter queue than the subscription's `.dead_letter(..)`; \
                     the consumer dead-letters by the subscription, SQS redrives by the queue's policy"
                );
            }
            if policy.max_receive_count < backstop {
                warn_tight_redrive(queue, policy, declared.max_receive_count);
            }
        }
        let target = queue.dead_letter_queue().expect("declared above");
        check_dead_letter_size(client, queue, &target).await?;
        return Ok((
            Some(Publisher::bound(target, client.clone())),
            Some(declared.max_receive_count),
        ));
    }
    let Some(policy) = redrive else {
        // Nothing would ever stop a message that always fails; on FIFO it holds its group.
        tracing::warn!(
            messaging.destination.name = %queue.name,
            "queue has no dead-letter queue and no redrive policy: a message that keeps failing is retried for ever; \
             declare `.dead_letter(queue, max_receive_count)`"
        );
        return Ok((None, None));
    };
    // The queue's count is the consumer's too, so nothing is left for receives that were no
    // attempt: say what to declare instead.
    warn_tight_redrive(queue, policy, policy.max_receive_count);
    let target = SqsQueue::new(policy.target_name());
    match client.resolve(&target).await {
        Ok(_) => {
            check_dead_letter_size(client, queue, &target).await?;
            Ok((
                Some(Publisher::bound(target, client.clone())),
                Some(policy.max_receive_count),
            ))
        }
        Err(error) if queue.is_fifo() => Err(StartError::DeadLetterUnreachable {
            queue: queue.name.clone(),
            dead_letter: policy.target_name().to_owned(),
            error,
        }
        .into()),
        Err(error) => {
            tracing::warn!(
                messaging.destination.name = %queue.name,
                queue.dead_letter = %policy.target_name(),
                error = %error,
                "cannot reach the dead-letter queue of the queue's RedrivePolicy; messages out of attempts \
                 are left for SQS's redrive to move"
            );
            Ok((None, Some(policy.max_receive_count)))
        }
    }
}

/// Resolves a subscription's dead-letter queue and refuses one that takes smaller messages than
/// the queue it serves: a copy it can never take would hold the message for ever.
async fn check_dead_letter_size(
    client: &Arc<Client>,
    queue: &SqsQueue,
    target: &SqsQueue,
) -> Result<(), RunError> {
    let dead_letter = client
        .resolved(target)
        .await
        .map_err(|error| StartError::from_transport(target.name.clone(), error))?;
    let source = client
        .resolved(queue)
        .await
        .map_err(|error| StartError::from_transport(queue.name.clone(), error))?;
    if dead_letter.maximum_message_size < source.maximum_message_size {
        return Err(StartError::DeadLetterTooSmall {
            queue: queue.name.clone(),
            dead_letter: target.name.clone(),
            queue_maximum: source.maximum_message_size,
            dead_letter_maximum: dead_letter.maximum_message_size,
        }
        .into());
    }
    Ok(())
}

/// Warns that a queue's `RedrivePolicy` can move a message before the subscription's `attempts`
/// were made, by counting receives that were no attempt (a graceful stop gives back what it
/// could not start; a crash; a lost receive answer): names the count to set.
fn warn_tight_redrive(queue: &SqsQueue, policy: &RedrivePolicy, attempts: u32) {
    let backstop = crate::retry::redrive_backstop(attempts);
    if policy.max_receive_count >= backstop {
        return;
    }
    tracing::warn!(
        messaging.destination.name = %queue.name,
        queue.max_receive_count = policy.max_receive_count,
        attempts,
        recommended_max_receive_count = backstop,
        "the queue's RedrivePolicy maxReceiveCount ({}) leaves no room for receives that are no attempt \
         (a rolling restart gives back messages it did not start): SQS may dead-letter a message that was \
         never tried and let its FIFO group go on past it. Set maxReceiveCount to {backstop} and declare \
         `.dead_letter(\"{}\", {attempts})` so the consumer dead-letters by its own count",
        policy.max_receive_count,
        policy.target_name(),
    );
}
