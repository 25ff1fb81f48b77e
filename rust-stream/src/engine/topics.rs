//! An app's topic subscriptions, wired when it starts, after its queues are resolved: every topic
//! it declares resolved (or created) first, then each queue's subscriptions found or made.
//!
//! A subscription is found by listing the topic's subscriptions (`ListSubscriptionsByTopic`) for
//! the queue's ARN. One found is compared with its declaration (`GetSubscriptionAttributes`):
//! a difference in `RawMessageDelivery`, `FilterPolicy` or `FilterPolicyScope` is a warning that
//! names the attribute, not a refusal, since the consumer unwraps an envelope and takes a raw body
//! alike, and a filter policy only decides which messages come. One missing is made when the queue
//! is declared `create_if_missing`: the queue's policy first (one `SetQueueAttributes Policy` a
//! queue, letting every topic it is subscribed to send to it; the statements of a policy already
//! there are kept, and only ours, by its `Sid`, replaced), then `Subscribe` with the declared
//! attributes. Otherwise the start is refused, naming the queue, the topic and the fix.

use std::sync::Arc;

use serde_json::{json, Value};

use super::start::StartError;
use crate::app::RunError;
use crate::client::topic::ResolvedTopic;
use crate::client::Client;
use crate::model::filter_policy::FilterPolicyScope;
use crate::model::rules::ErrorKind;
use crate::model::subscription::{
    Subscribe, FILTER_POLICY_ATTRIBUTE, FILTER_POLICY_SCOPE_ATTRIBUTE,
    RAW_MESSAGE_DELIVERY_ATTRIBUTE, SQS_PROTOCOL,
};
use crate::model::{declare, SqsQueue, TopicSubscription};
use crate::transport::{QueueAttributes, TransportError};

/// The `Sid` of the statement the broker keeps in a subscribed queue's policy: the one statement
/// it replaces, leaving the others as they are.
pub(crate) const POLICY_SID: &str = "rust-stream-sns-subscriptions";

/// Resolves every topic the app declares, then finds or makes each of its queues'
/// subscriptions.
pub(super) async fn wire(client: &Arc<Client>, app: declare::Declarations) -> Result<(), RunError> {
    let checked = client.declarations().checked(app);
    for topic in checked.topics() {
        client
            .resolve_topic(&topic)
            .await
            .map_err(|error| topic_error(&topic.name, error))?;
    }
    for queue in checked.in_creation_order() {
        if !queue.subscriptions.is_empty() {
            subscribe_queue(client, &queue).await?;
        }
    }
    Ok(())
}

/// How a failed topic call at start is told.
fn topic_error(topic: &str, error: TransportError) -> StartError {
    if error.kind() == Some(ErrorKind::NotFound) {
        StartError::TopicMissing {
            topic: topic.to_owned(),
        }
    } else {
        StartError::Topic {
            topic: topic.to_owned(),
            error,
        }
    }
}

/// Finds or makes one queue's subscriptions.
async fn subscribe_queue(client: &Arc<Client>, queue: &SqsQueue) -> Result<(), RunError> {
    let failed = |error| StartError::from_transport(queue.name.clone(), error);
    let url = client.resolve(queue).await.map_err(failed)?;
    let queue_arn = client.queue_arn(&url).await.map_err(failed)?;
    let mut topics = Vec::new();
    let mut missing = Vec::new();
    for subscription in &queue.subscriptions {
        let topic = client
            .resolve_topic(&subscription.topic)
            .await
            .map_err(|error| topic_error(&subscription.topic.name, error))?;
        let topic_failed = |error| topic_error(&topic.name, error);
        let found = client
            .transport()
            .list_subscriptions_by_topic(&topic.arn)
            .await
            .map_err(topic_failed)?
            .into_iter()
            .find(|existing| existing.protocol == SQS_PROTOCOL && existing.endpoint == queue_arn);
        match found {
            Some(existing) => {
                let attributes = client
                    .transport()
                    .get_subscription_attributes(&existing.subscription_arn)
                    .await
                    .map_err(topic_failed)?;
                warn_about_drift(&queue.name, &topic.name, subscription, &attributes);
            }
            None if queue.create_if_missing => missing.push((subscription, topic.clone())),
            None => {
                return Err(StartError::SubscriptionMissing {
                    queue: queue.name.clone(),
                    topic: topic.name.clone(),
                }
                .into())
            }
        }
        topics.push(topic);
    }
    if missing.is_empty() {
        return Ok(());
    }
    allow_topics(client, &url, &queue_arn, &topics)
        .await
        .map_err(failed)?;
    for (subscription, topic) in missing {
        let mut request = Subscribe::sqs(&topic.arn, &queue_arn)
            .raw_message_delivery(subscription.is_raw_message_delivery());
        if let Some(policy) = subscription.policy() {
            request = request.filter_policy(policy);
        }
        let arn = client
            .transport()
            .subscribe(request)
            .await
            .map_err(|error| topic_error(&topic.name, error))?;
        tracing::info!(
            messaging.system = "aws_sns",
            messaging.destination.name = %topic.name,
            queue = %queue.name,
            subscription.arn = %arn,
            "queue subscribed to topic"
        );
    }
    Ok(())
}

/// Sets the queue's policy to let `topics` send to it: our statement (by [`POLICY_SID`]) replaced,
/// every other statement of the policy it has kept.
async fn allow_topics(
    client: &Client,
    url: &str,
    queue_arn: &str,
    topics: &[ResolvedTopic],
) -> Result<(), TransportError> {
    let current = client
        .transport()
        .get_queue_attributes(url, &["Policy"])
        .await?;
    let policy = with_our_statement(
        current.get("Policy").map(String::as_str),
        queue_arn,
        topics.iter().map(|topic| topic.arn.as_str()),
    )?;
    client
        .transport()
        .set_queue_attributes(url, QueueAttributes::from([("Policy".to_owned(), policy)]))
        .await?;
    tracing::info!(
        queue_arn = %queue_arn,
        topics = topics.len(),
        "queue policy set to let its topics send to it"
    );
    Ok(())
}

/// `current` (a queue's policy, if any) with our statement in place of the one it had: SNS may
/// send to `queue_arn` from each of `topic_arns`, and from every topic our statement allowed
/// already (another app may have subscribed the queue to a topic this one does not name; taking
/// that topic's permission away would stop its deliveries).
fn with_our_statement<'a>(
    current: Option<&str>,
    queue_arn: &str,
    topic_arns: impl Iterator<Item = &'a str>,
) -> Result<String, TransportError> {
    let mut policy = match current.filter(|text| !text.trim().is_empty()) {
        None => json!({ "Version": "2012-10-17", "Statement": [] }),
        Some(text) => serde_json::from_str::<Value>(text)
            .ok()
            .filter(Value::is_object)
            .ok_or_else(|| {
                TransportError::service(
                    ErrorKind::InvalidAttributeValue,
                    format!(
                        "the queue's Policy is not a JSON object, so the statement letting its \
                         topics send to it cannot be added beside it: fix the policy ({text})"
                    ),
                )
            })?,
    };
    let statements = match policy.get_mut("Statement").map(Value::take) {
        Some(Value::Array(statements)) => statements,
        Some(Value::Null) | None => Vec::new(),
        Some(one) => vec![one],
    };
    let (earlier, mut statements): (Vec<Value>, Vec<Value>) = statements
        .into_iter()
        .partition(|statement| statement.get("Sid").and_then(Value::as_str) == Some(POLICY_SID));
    // The topics allowed so far, then the new ones, each once, in that order.
    let mut allowed: Vec<String> = Vec::new();
    for statement in &earlier {
        match &statement["Condition"]["ArnEquals"]["aws:SourceArn"] {
            Value::String(arn) => allowed.push(arn.clone()),
            Value::Array(arns) => {
                allowed.extend(arns.iter().filter_map(Value::as_str).map(str::to_owned))
            }
            _ => {}
        }
    }
    allowed.extend(topic_arns.map(str::to_owned));
    let mut seen = std::collections::HashSet::new();
    allowed.retain(|arn| seen.insert(arn.clone()));
    statements.push(json!({
        "Sid": POLICY_SID,
        "Effect": "Allow",
        "Principal": { "Service": "sns.amazonaws.com" },
        "Action": "sqs:SendMessage",
        "Resource": queue_arn,
        "Condition": { "ArnEquals": { "aws:SourceArn": allowed } },
    }));
    policy["Statement"] = Value::Array(statements);
    if policy.get("Version").is_none() {
        policy["Version"] = json!("2012-10-17");
    }
    Ok(policy.to_string())
}

/// Warns, naming the attribute, where an existing subscription differs from its declaration.
fn warn_about_drift(
    queue: &str,
    topic: &str,
    declared: &TopicSubscription,
    actual: &crate::transport::SubscriptionAttributes,
) {
    let raw = actual
        .get(RAW_MESSAGE_DELIVERY_ATTRIBUTE)
        .is_some_and(|value| value == "true");
    if raw != declared.is_raw_message_delivery() {
        warn(
            queue,
            topic,
            RAW_MESSAGE_DELIVERY_ATTRIBUTE,
            &declared.is_raw_message_delivery().to_string(),
            &raw.to_string(),
        );
    }
    let actual_policy = actual
        .get(FILTER_POLICY_ATTRIBUTE)
        .filter(|policy| !policy.trim().is_empty());
    let declared_policy = declared.declared_policy();
    let same_policy = match (declared_policy, actual_policy) {
        (None, None) => true,
        (Some((declared, _)), Some(actual)) => same_json(declared, actual),
        _ => false,
    };
    if !same_policy {
        warn(
            queue,
            topic,
            FILTER_POLICY_ATTRIBUTE,
            declared_policy.map_or("(none)", |(json, _)| json),
            actual_policy.map_or("(none)", String::as_str),
        );
    }
    if let (Some((_, scope)), Some(_)) = (declared_policy, actual_policy) {
        let actual_scope = actual
            .get(FILTER_POLICY_SCOPE_ATTRIBUTE)
            .map_or(FilterPolicyScope::default().as_str(), String::as_str);
        if actual_scope != scope.as_str() {
            warn(
                queue,
                topic,
                FILTER_POLICY_SCOPE_ATTRIBUTE,
                scope.as_str(),
                actual_scope,
            );
        }
    }
}

/// Whether two JSON texts say the same (whitespace and key order aside).
fn same_json(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<Value>(a),
        serde_json::from_str::<Value>(b),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn warn(queue: &str, topic: &str, attribute: &str, declared: &str, actual: &str) {
    tracing::warn!(
        messaging.system = "aws_sns",
        messaging.destination.name = %topic,
        queue = %queue,
        attribute = %attribute,
        declared = %declared,
        actual = %actual,
        "the queue's subscription to the topic has another {attribute} than its declaration; the app \
         runs with the subscription as it is (the consumer takes enveloped and raw deliveries alike). \
         To fix: change the subscription (SetSubscriptionAttributes), or the declaration"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_statement_replaces_itself_and_keeps_the_others() {
        let queue = "arn:aws:sqs:eu-west-1:1:ledger";
        let first =
            with_our_statement(None, queue, ["arn:aws:sns:eu-west-1:1:a"].into_iter()).unwrap();
        let theirs = json!({"Sid": "theirs", "Effect": "Deny", "Principal": "*", "Action": "sqs:*", "Resource": queue});
        let mut with_theirs: Value = serde_json::from_str(&first).unwrap();
        with_theirs["Statement"]
            .as_array_mut()
            .unwrap()
            .push(theirs.clone());
        let second = with_our_statement(
            Some(&with_theirs.to_string()),
            queue,
            ["arn:aws:sns:eu-west-1:1:a", "arn:aws:sns:eu-west-1:1:b"].into_iter(),
        )
        .unwrap();
        let second: Value = serde_json::from_str(&second).unwrap();
        let statements = second["Statement"].as_array().unwrap();
        assert_eq!(statements.len(), 2, "{second}");
        assert_eq!(statements[0], theirs);
        assert_eq!(statements[1]["Sid"], POLICY_SID);
        assert_eq!(
            statements[1]["Condition"]["ArnEquals"]["aws:SourceArn"],
            json!(["arn:aws:sns:eu-west-1:1:a", "arn:aws:sns:eu-west-1:1:b"])
        );
        // Another app's topic stays allowed when this one names only its own.
        let third = with_our_statement(
            Some(&second.to_string()),
            queue,
            ["arn:aws:sns:eu-west-1:1:c"].into_iter(),
        )
        .unwrap();
        let third: Value = serde_json::from_str(&third).unwrap();
        assert_eq!(
            third["Statement"][1]["Condition"]["ArnEquals"]["aws:SourceArn"],
            json!([
                "arn:aws:sns:eu-west-1:1:a",
                "arn:aws:sns:eu-west-1:1:b",
                "arn:aws:sns:eu-west-1:1:c"
            ])
        );
        assert!(with_our_statement(Some("[1]"), queue, std::iter::empty()).is_err());
    }
}
