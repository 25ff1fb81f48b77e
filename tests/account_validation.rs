//! Every rule and limit of `/work/shared/sqs-rules.md` that the in-process account can see, checked
//! through the public `Account` API: each violation fails with the SQS error kind the service uses
//! and a message that names the problem, and each limit is accepted at its edge.
//!
//! Tests that depend on time run on a paused tokio clock and move it with `tokio::time::advance`.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use rust_stream::account::{Account, QueueCounts};
use rust_stream::model::rules::ErrorKind;
use rust_stream::transport::{
    BatchFailure, BatchResult, ChangeVisibilityEntry, DeleteEntry, MessageAttributeValue,
    QueueAttributes, ReceiveMessage, ReceivedMessage, SendBatchEntry, SendMessage, TransportError,
};
use tokio::time::advance;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// 1 MiB: the largest message, and the largest send batch.
const MIB: usize = 1_048_576;

/// Queue attributes from `(name, value)` pairs.
fn attrs(pairs: &[(&str, &str)]) -> QueueAttributes {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
        .collect()
}

/// FIFO queue attributes: `FifoQueue=true` plus `pairs`.
fn fifo_attrs(pairs: &[(&str, &str)]) -> QueueAttributes {
    let mut attributes = attrs(pairs);
    attributes.insert("FifoQueue".to_owned(), "true".to_owned());
    attributes
}

/// The message of a service error (without the kind prefix that `Display` adds).
fn message_of(error: &TransportError) -> String {
    match error {
        TransportError::Service { message, .. } => message.clone(),
        other => panic!("expected a service error, got {other:?}"),
    }
}

/// Asserts that `result` failed with `kind` and a message containing `needle`; returns the message.
#[track_caller]
fn assert_error<T: Debug>(
    result: Result<T, TransportError>,
    kind: ErrorKind,
    needle: &str,
) -> String {
    let error = match result {
        Ok(value) => panic!("expected {kind} mentioning `{needle}`, got Ok({value:?})"),
        Err(error) => error,
    };
    assert_eq!(error.kind(), Some(kind), "wrong kind: {error}");
    let message = message_of(&error);
    assert!(
        message.contains(needle),
        "the {kind} message `{message}` does not mention `{needle}`"
    );
    message
}

/// Asserts that one batch entry failed with `kind`, as a sender fault, with `needle` in its message.
#[track_caller]
fn assert_failure(failure: &BatchFailure, id: &str, kind: ErrorKind, needle: &str) {
    assert_eq!(failure.id, id, "{failure:?}");
    assert_eq!(failure.kind, kind, "{failure:?}");
    assert!(failure.sender_fault, "{failure:?} should be a sender fault");
    assert!(
        failure.message.contains(needle),
        "the failure message `{}` does not mention `{needle}`",
        failure.message
    );
}

/// The ids of a batch's successful entries, in order.
fn successful_ids<T>(result: &BatchResult<T>) -> Vec<&str> {
    result
        .successful
        .iter()
        .map(|(id, _)| id.as_ref())
        .collect()
}

async fn standard(account: &Account, name: &str) -> String {
    account
        .create_standard_queue(name)
        .await
        .expect("create a standard queue")
}

async fn fifo(account: &Account, name: &str) -> String {
    account
        .create_fifo_queue(name)
        .await
        .expect("create a FIFO queue")
}

/// A FIFO queue that deduplicates by body, so sends need only a group id.
async fn fifo_content_dedup(account: &Account, name: &str) -> String {
    account
        .create_queue(name, fifo_attrs(&[("ContentBasedDeduplication", "true")]))
        .await
        .expect("create a FIFO queue with content-based deduplication")
}

/// Creates a queue named `name`, FIFO when the name says so, with no other attributes.
async fn create_named(account: &Account, name: &str) -> Result<String, TransportError> {
    if name.ends_with(".fifo") {
        account.create_queue(name, fifo_attrs(&[])).await
    } else {
        account.create_queue(name, QueueAttributes::new()).await
    }
}

async fn send(account: &Account, url: &str, body: &str) {
    account
        .send_message(url, SendMessage::new(body))
        .await
        .expect("send a message");
}

async fn receive(account: &Account, url: &str, max: i32) -> Vec<ReceivedMessage> {
    account
        .receive_message(url, ReceiveMessage::new(max))
        .await
        .expect("receive")
}

/// Sends one message and receives it; returns the receipt handle.
async fn send_and_receive(account: &Account, url: &str, body: &str) -> String {
    send(account, url, body).await;
    let received = receive(account, url, 1).await;
    assert_eq!(received.len(), 1, "the message just sent is received");
    received[0].receipt_handle.clone()
}

async fn counts(account: &Account, url: &str) -> QueueCounts {
    account.counts(url).await.expect("counts")
}

fn counts_of(visible: usize, in_flight: usize, delayed: usize) -> QueueCounts {
    QueueCounts {
        visible,
        in_flight,
        delayed,
    }
}

async fn attribute(account: &Account, url: &str, name: &str) -> String {
    let attributes = account
        .get_queue_attributes(url, &[name])
        .await
        .expect("get queue attributes");
    attributes
        .get(name)
        .unwrap_or_else(|| panic!("{name} is reported"))
        .clone()
}

/// A `RedrivePolicy` value naming `target` of this account.
fn redrive_policy(account: &Account, target: &str, max_receive_count: i64) -> String {
    serde_json::json!({
        "deadLetterTargetArn": account.queue_arn_for(target),
        "maxReceiveCount": max_receive_count,
    })
    .to_string()
}

fn with_attribute(body: &str, name: &str, value: MessageAttributeValue) -> SendMessage {
    SendMessage::new(body).attribute(name, value)
}

fn typed(data_type: &str, value: &str) -> MessageAttributeValue {
    MessageAttributeValue {
        data_type: data_type.to_owned(),
        ..MessageAttributeValue::string(value)
    }
}

/// Checks an integer queue attribute: accepted at `min` and `max` (at creation and by
/// `SetQueueAttributes`), refused one past either edge with `InvalidAttributeValue`.
async fn assert_attribute_range(name: &str, min: i64, max: i64) {
    let account = Account::new();
    for (i, edge) in [min, max].into_iter().enumerate() {
        let url = account
            .create_queue(&format!("edge-{i}"), attrs(&[(name, &edge.to_string())]))
            .await
            .unwrap_or_else(|e| panic!("{name}={edge} is accepted at creation: {e}"));
        assert_eq!(attribute(&account, &url, name).await, edge.to_string());
    }
    let range = format!("{min}..={max}");
    for (i, past) in [min - 1, max + 1].into_iter().enumerate() {
        let message = assert_error(
            account
                .create_queue(&format!("past-{i}"), attrs(&[(name, &past.to_string())]))
                .await,
            ErrorKind::InvalidAttributeValue,
            name,
        );
        assert!(
            message.contains(&range),
            "{message} names the range {range}"
        );
    }
    assert_error(
        account
            .create_queue("not-a-number", attrs(&[(name, "ten")]))
            .await,
        ErrorKind::InvalidAttributeValue,
        name,
    );

    let url = standard(&account, "set").await;
    for edge in [min, max] {
        account
            .set_queue_attributes(&url, attrs(&[(name, &edge.to_string())]))
            .await
            .unwrap_or_else(|e| panic!("{name}={edge} is accepted by SetQueueAttributes: {e}"));
    }
    for past in [min - 1, max + 1] {
        assert_error(
            account
                .set_queue_attributes(&url, attrs(&[(name, &past.to_string())]))
                .await,
            ErrorKind::InvalidAttributeValue,
            &range,
        );
    }
    assert_eq!(
        attribute(&account, &url, name).await,
        max.to_string(),
        "a refused SetQueueAttributes changes nothing"
    );
}

// ---------------------------------------------------------------------------------------------
// Queue names
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_queue_name_of_80_characters_is_accepted_and_81_refused() {
    let account = Account::new();
    standard(&account, &"a".repeat(80)).await;
    let long = "a".repeat(81);
    assert_error(
        account.create_standard_queue(&long).await,
        ErrorKind::InvalidParameterValue,
        &format!("queue name `{long}` is invalid"),
    );
}

#[tokio::test]
async fn a_fifo_queue_name_counts_its_suffix_in_the_80_characters() {
    let account = Account::new();
    fifo(&account, &format!("{}.fifo", "a".repeat(75))).await;
    let long = format!("{}.fifo", "a".repeat(76));
    assert_error(
        account.create_fifo_queue(&long).await,
        ErrorKind::InvalidParameterValue,
        "counted in the 80",
    );
}

#[tokio::test]
async fn queue_names_take_only_letters_digits_hyphens_and_underscores() {
    let account = Account::new();
    standard(&account, "Az09_-").await;
    fifo(&account, "Az09_-.fifo").await;
    for bad in [
        "",
        "or ders",
        "ord.ers",
        "ordérs",
        "orders!",
        "orders/1",
        ".fifo",
        "a.fifo.fifo",
    ] {
        assert_error(
            create_named(&account, bad).await,
            ErrorKind::InvalidParameterValue,
            &format!("queue name `{bad}` is invalid"),
        );
    }
}

#[tokio::test]
async fn a_fifo_suffix_without_fifo_queue_true_is_refused() {
    let account = Account::new();
    assert_error(
        account.create_standard_queue("orders.fifo").await,
        ErrorKind::InvalidParameterValue,
        "set the attribute FifoQueue=true",
    );
    assert_error(
        account
            .create_queue("orders.fifo", attrs(&[("FifoQueue", "false")]))
            .await,
        ErrorKind::InvalidParameterValue,
        "FifoQueue=true",
    );
}

#[tokio::test]
async fn fifo_queue_true_without_the_fifo_suffix_is_refused() {
    let account = Account::new();
    assert_error(
        account.create_fifo_queue("orders").await,
        ErrorKind::InvalidParameterValue,
        "must end in `.fifo`",
    );
}

#[tokio::test]
async fn get_queue_url_of_an_unknown_name_is_queue_does_not_exist() {
    let account = Account::new();
    assert_error(
        account.get_queue_url("nowhere").await,
        ErrorKind::QueueDoesNotExist,
        "`nowhere` does not exist",
    );
}

// ---------------------------------------------------------------------------------------------
// Queue attributes
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn visibility_timeout_is_accepted_from_0_to_43200_seconds() {
    assert_attribute_range("VisibilityTimeout", 0, 43_200).await;
}

#[tokio::test]
async fn delay_seconds_is_accepted_from_0_to_900() {
    assert_attribute_range("DelaySeconds", 0, 900).await;
}

#[tokio::test]
async fn receive_message_wait_time_seconds_is_accepted_from_0_to_20() {
    assert_attribute_range("ReceiveMessageWaitTimeSeconds", 0, 20).await;
}

#[tokio::test]
async fn message_retention_period_is_accepted_from_60_to_1209600_seconds() {
    assert_attribute_range("MessageRetentionPeriod", 60, 1_209_600).await;
}

#[tokio::test]
async fn maximum_message_size_is_accepted_from_1024_to_1048576_bytes() {
    assert_attribute_range("MaximumMessageSize", 1024, 1_048_576).await;
}

#[tokio::test]
async fn a_new_queue_has_the_documented_defaults() {
    let account = Account::new();
    let url = standard(&account, "defaults").await;
    let all = account
        .get_queue_attributes(&url, &["All"])
        .await
        .expect("attributes");
    for (name, value) in [
        ("VisibilityTimeout", "30"),
        ("DelaySeconds", "0"),
        ("ReceiveMessageWaitTimeSeconds", "0"),
        ("MessageRetentionPeriod", "345600"),
        ("MaximumMessageSize", "1048576"),
    ] {
        assert_eq!(all.get(name).map(String::as_str), Some(value), "{name}");
    }
    assert!(
        !all.contains_key("FifoQueue"),
        "a standard queue is not FIFO"
    );

    let url = fifo(&account, "defaults.fifo").await;
    let all = account
        .get_queue_attributes(&url, &["All"])
        .await
        .expect("attributes");
    for (name, value) in [
        ("FifoQueue", "true"),
        ("ContentBasedDeduplication", "false"),
        ("DeduplicationScope", "queue"),
        ("FifoThroughputLimit", "perQueue"),
    ] {
        assert_eq!(all.get(name).map(String::as_str), Some(value), "{name}");
    }
}

#[tokio::test]
async fn fifo_only_attributes_are_refused_on_a_standard_queue() {
    let account = Account::new();
    let url = standard(&account, "plain").await;
    for (name, value) in [
        ("ContentBasedDeduplication", "true"),
        ("DeduplicationScope", "queue"),
        ("FifoThroughputLimit", "perQueue"),
    ] {
        let message = assert_error(
            account.create_queue("other", attrs(&[(name, value)])).await,
            ErrorKind::InvalidAttributeName,
            "applies only to FIFO queues",
        );
        assert!(message.contains(name), "{message} names {name}");
        assert_error(
            account
                .set_queue_attributes(&url, attrs(&[(name, value)]))
                .await,
            ErrorKind::InvalidAttributeName,
            name,
        );
    }
}

#[tokio::test]
async fn fifo_attributes_take_only_their_documented_values() {
    let account = Account::new();
    let url = account
        .create_queue(
            "values.fifo",
            fifo_attrs(&[
                ("ContentBasedDeduplication", "true"),
                ("DeduplicationScope", "messageGroup"),
                ("FifoThroughputLimit", "perMessageGroupId"),
            ]),
        )
        .await
        .expect("documented values are accepted");
    for (name, bad, needle) in [
        ("ContentBasedDeduplication", "yes", "use `true` or `false`"),
        (
            "DeduplicationScope",
            "group",
            "use `queue` or `messageGroup`",
        ),
        (
            "FifoThroughputLimit",
            "perGroup",
            "use `perQueue` or `perMessageGroupId`",
        ),
    ] {
        assert_error(
            account
                .set_queue_attributes(&url, attrs(&[(name, bad)]))
                .await,
            ErrorKind::InvalidAttributeValue,
            needle,
        );
    }
}

#[tokio::test]
async fn per_message_group_throughput_needs_message_group_deduplication_scope() {
    let account = Account::new();
    assert_error(
        account
            .create_queue(
                "fast.fifo",
                fifo_attrs(&[("FifoThroughputLimit", "perMessageGroupId")]),
            )
            .await,
        ErrorKind::InvalidAttributeValue,
        "needs DeduplicationScope messageGroup",
    );
    let url = account
        .create_queue(
            "fast.fifo",
            fifo_attrs(&[
                ("FifoThroughputLimit", "perMessageGroupId"),
                ("DeduplicationScope", "messageGroup"),
            ]),
        )
        .await
        .expect("both together are accepted");
    assert_error(
        account
            .set_queue_attributes(&url, attrs(&[("DeduplicationScope", "queue")]))
            .await,
        ErrorKind::InvalidAttributeValue,
        "needs DeduplicationScope messageGroup",
    );
    assert_eq!(
        attribute(&account, &url, "DeduplicationScope").await,
        "messageGroup",
        "the refused change is not applied"
    );

    let url = fifo(&account, "slow.fifo").await;
    assert_error(
        account
            .set_queue_attributes(&url, attrs(&[("FifoThroughputLimit", "perMessageGroupId")]))
            .await,
        ErrorKind::InvalidAttributeValue,
        "needs DeduplicationScope messageGroup",
    );
}

#[tokio::test]
async fn fifo_queue_cannot_be_set_after_creation() {
    let account = Account::new();
    let plain = standard(&account, "plain").await;
    let ordered = fifo(&account, "ordered.fifo").await;
    for (url, value) in [(&plain, "true"), (&ordered, "false"), (&ordered, "true")] {
        assert_error(
            account
                .set_queue_attributes(url, attrs(&[("FifoQueue", value)]))
                .await,
            ErrorKind::InvalidAttributeName,
            "FifoQueue is fixed when a queue is created",
        );
    }
    assert_eq!(attribute(&account, &ordered, "FifoQueue").await, "true");
    let plain_attributes = account
        .get_queue_attributes(&plain, &["All"])
        .await
        .expect("attributes");
    assert!(!plain_attributes.contains_key("FifoQueue"));
}

#[tokio::test]
async fn read_only_and_unknown_attributes_cannot_be_set() {
    let account = Account::new();
    let url = standard(&account, "plain").await;
    for read_only in [
        "QueueArn",
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
        "CreatedTimestamp",
        "LastModifiedTimestamp",
    ] {
        assert_error(
            account
                .set_queue_attributes(&url, attrs(&[(read_only, "1")]))
                .await,
            ErrorKind::InvalidAttributeName,
            &format!("attribute {read_only} is read-only"),
        );
    }
    assert_error(
        account
            .set_queue_attributes(&url, attrs(&[("Colour", "blue")]))
            .await,
        ErrorKind::InvalidAttributeName,
        "unknown queue attribute `Colour`",
    );
    assert_error(
        account
            .create_queue("other", attrs(&[("Colour", "blue")]))
            .await,
        ErrorKind::InvalidAttributeName,
        "unknown queue attribute `Colour`",
    );
}

#[tokio::test]
async fn set_queue_attributes_is_all_or_nothing() {
    let account = Account::new();
    let url = standard(&account, "atomic").await;
    assert_error(
        account
            .set_queue_attributes(
                &url,
                attrs(&[("DelaySeconds", "10"), ("VisibilityTimeout", "43201")]),
            )
            .await,
        ErrorKind::InvalidAttributeValue,
        "VisibilityTimeout",
    );
    assert_eq!(attribute(&account, &url, "DelaySeconds").await, "0");
}

#[tokio::test]
async fn get_queue_attributes_refuses_an_unknown_attribute_name() {
    let account = Account::new();
    let url = standard(&account, "plain").await;
    assert_error(
        account
            .get_queue_attributes(&url, &["VisibilityTimeout", "Colour"])
            .await,
        ErrorKind::InvalidAttributeName,
        "unknown queue attribute `Colour`",
    );
    let known = account
        .get_queue_attributes(&url, &["VisibilityTimeout", "QueueArn", "RedrivePolicy"])
        .await
        .expect("known names are answered");
    assert_eq!(known["VisibilityTimeout"], "30");
    assert_eq!(known["QueueArn"], account.queue_arn_for("plain"));
    assert!(
        !known.contains_key("RedrivePolicy"),
        "an unset attribute is omitted"
    );
}

// ---------------------------------------------------------------------------------------------
// Creating, re-creating and deleting queues
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn recreating_a_queue_with_other_attributes_is_queue_name_exists() {
    let account = Account::new();
    account
        .create_queue("orders", attrs(&[("VisibilityTimeout", "60")]))
        .await
        .expect("create");
    assert_error(
        account
            .create_queue("orders", attrs(&[("VisibilityTimeout", "61")]))
            .await,
        ErrorKind::QueueNameExists,
        "queue `orders` exists with another VisibilityTimeout",
    );
    account
        .create_queue(
            "ledger.fifo",
            fifo_attrs(&[("ContentBasedDeduplication", "true")]),
        )
        .await
        .expect("create");
    assert_error(
        account
            .create_queue(
                "ledger.fifo",
                fifo_attrs(&[("ContentBasedDeduplication", "false")]),
            )
            .await,
        ErrorKind::QueueNameExists,
        "ContentBasedDeduplication",
    );
}

#[tokio::test]
async fn recreating_a_queue_identically_returns_the_same_url_and_keeps_its_messages() {
    let account = Account::new();
    let attributes = attrs(&[("VisibilityTimeout", "60"), ("DelaySeconds", "0")]);
    let url = account
        .create_queue("orders", attributes.clone())
        .await
        .expect("create");
    send(&account, &url, "kept").await;
    let again = account
        .create_queue("orders", attributes)
        .await
        .expect("an identical re-create succeeds");
    assert_eq!(again, url);
    assert_eq!(counts(&account, &url).await, counts_of(1, 0, 0));

    let ledger = fifo(&account, "ledger.fifo").await;
    assert_eq!(fifo(&account, "ledger.fifo").await, ledger);
}

#[tokio::test(start_paused = true)]
async fn a_deleted_queue_name_is_refused_for_60_seconds_then_accepted() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    send(&account, &url, "old").await;
    account.delete_queue(&url).await.expect("delete");

    assert_error(
        account.create_standard_queue("orders").await,
        ErrorKind::QueueDeletedRecently,
        "queue `orders` was deleted less than 60 s ago",
    );
    advance(Duration::from_secs(59)).await;
    assert_error(
        account.create_standard_queue("orders").await,
        ErrorKind::QueueDeletedRecently,
        "deleted less than 60 s ago",
    );
    advance(Duration::from_secs(1)).await;
    let again = standard(&account, "orders").await;
    assert_eq!(again, url);
    assert_eq!(
        counts(&account, &again).await,
        counts_of(0, 0, 0),
        "the new queue starts empty"
    );
}

#[tokio::test]
async fn every_operation_on_a_deleted_queue_is_queue_does_not_exist() {
    let account = Account::new();
    let url = standard(&account, "gone").await;
    let handle = send_and_receive(&account, &url, "m").await;
    account.delete_queue(&url).await.expect("delete");
    let gone = ErrorKind::QueueDoesNotExist;

    assert_error(
        account.get_queue_url("gone").await,
        gone,
        "`gone` does not exist",
    );
    assert!(account.list_queues("gone").await.is_empty());
    assert_error(
        account.get_queue_attributes(&url, &["All"]).await,
        gone,
        &url,
    );
    assert_error(
        account
            .set_queue_attributes(&url, attrs(&[("DelaySeconds", "1")]))
            .await,
        gone,
        &url,
    );
    assert_error(account.counts(&url).await, gone, &url);
    assert_error(
        account.send_message(&url, SendMessage::new("m")).await,
        gone,
        &url,
    );
    assert_error(
        account
            .send_message_batch(&url, vec![SendBatchEntry::new("a", SendMessage::new("m"))])
            .await,
        gone,
        &url,
    );
    assert_error(
        account.receive_message(&url, ReceiveMessage::new(1)).await,
        gone,
        &url,
    );
    assert_error(account.delete_message(&url, &handle).await, gone, &url);
    assert_error(
        account
            .delete_message_batch(
                &url,
                vec![DeleteEntry {
                    id: "a".into(),
                    receipt_handle: handle.clone(),
                }],
            )
            .await,
        gone,
        &url,
    );
    assert_error(
        account.change_message_visibility(&url, &handle, 10).await,
        gone,
        &url,
    );
    assert_error(
        account
            .change_message_visibility_batch(
                &url,
                vec![ChangeVisibilityEntry {
                    id: "a".into(),
                    receipt_handle: handle.clone(),
                    visibility_timeout: 10,
                }],
            )
            .await,
        gone,
        &url,
    );
    assert_error(account.purge_queue(&url).await, gone, &url);
    assert_error(account.delete_queue(&url).await, gone, &url);
}

// ---------------------------------------------------------------------------------------------
// Redrive policy
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_redrive_policy_takes_a_max_receive_count_from_1_to_1000() {
    let account = Account::new();
    standard(&account, "dlq").await;
    for (i, count) in [1, 1000].into_iter().enumerate() {
        let url = account
            .create_queue(
                &format!("ok-{i}"),
                attrs(&[("RedrivePolicy", &redrive_policy(&account, "dlq", count))]),
            )
            .await
            .unwrap_or_else(|e| panic!("maxReceiveCount {count} is accepted: {e}"));
        let policy: serde_json::Value =
            serde_json::from_str(&attribute(&account, &url, "RedrivePolicy").await)
                .expect("the policy is JSON");
        assert_eq!(policy["maxReceiveCount"], count);
        assert_eq!(policy["deadLetterTargetArn"], account.queue_arn_for("dlq"));
    }
    let url = standard(&account, "source").await;
    for count in [0, 1001, -1] {
        let policy = redrive_policy(&account, "dlq", count);
        assert_error(
            account
                .create_queue("bad", attrs(&[("RedrivePolicy", &policy)]))
                .await,
            ErrorKind::InvalidAttributeValue,
            "maxReceiveCount must be an integer in 1..=1000",
        );
        assert_error(
            account
                .set_queue_attributes(&url, attrs(&[("RedrivePolicy", &policy)]))
                .await,
            ErrorKind::InvalidAttributeValue,
            "maxReceiveCount",
        );
    }
}

#[tokio::test]
async fn a_redrive_policy_without_a_target_arn_or_with_a_malformed_one_is_refused() {
    let account = Account::new();
    for (policy, needle) in [
        (r#"{"maxReceiveCount":3}"#, "deadLetterTargetArn is missing"),
        (
            r#"{"deadLetterTargetArn":"dlq","maxReceiveCount":3}"#,
            "not an SQS queue ARN",
        ),
        ("not json", "not a JSON object"),
    ] {
        assert_error(
            account
                .create_queue("source", attrs(&[("RedrivePolicy", policy)]))
                .await,
            ErrorKind::InvalidAttributeValue,
            needle,
        );
    }
}

#[tokio::test]
async fn a_redrive_policy_naming_a_missing_queue_is_refused() {
    let account = Account::new();
    let policy = redrive_policy(&account, "nowhere", 3);
    assert_error(
        account
            .create_queue("source", attrs(&[("RedrivePolicy", &policy)]))
            .await,
        ErrorKind::InvalidParameterValue,
        "`nowhere`, which does not exist",
    );
    let url = standard(&account, "source").await;
    assert_error(
        account
            .set_queue_attributes(&url, attrs(&[("RedrivePolicy", &policy)]))
            .await,
        ErrorKind::InvalidParameterValue,
        "does not exist",
    );
}

#[tokio::test]
async fn a_fifo_queue_refuses_a_standard_dead_letter_queue() {
    let account = Account::new();
    standard(&account, "dlq").await;
    let policy = redrive_policy(&account, "dlq", 3);
    assert_error(
        account
            .create_queue("source.fifo", fifo_attrs(&[("RedrivePolicy", &policy)]))
            .await,
        ErrorKind::InvalidParameterValue,
        "dead-letter queue of a FIFO queue must be FIFO too",
    );
    let url = fifo(&account, "source.fifo").await;
    assert_error(
        account
            .set_queue_attributes(&url, attrs(&[("RedrivePolicy", &policy)]))
            .await,
        ErrorKind::InvalidParameterValue,
        "must be FIFO too",
    );
    fifo(&account, "dlq.fifo").await;
    account
        .set_queue_attributes(
            &url,
            attrs(&[("RedrivePolicy", &redrive_policy(&account, "dlq.fifo", 3))]),
        )
        .await
        .expect("a FIFO dead-letter queue is accepted");
}

#[tokio::test]
async fn a_standard_queue_refuses_a_fifo_dead_letter_queue() {
    let account = Account::new();
    fifo(&account, "dlq.fifo").await;
    let policy = redrive_policy(&account, "dlq.fifo", 3);
    assert_error(
        account
            .create_queue("source", attrs(&[("RedrivePolicy", &policy)]))
            .await,
        ErrorKind::InvalidParameterValue,
        "dead-letter queue of a standard queue must be standard too",
    );
    let url = standard(&account, "source").await;
    assert_error(
        account
            .set_queue_attributes(&url, attrs(&[("RedrivePolicy", &policy)]))
            .await,
        ErrorKind::InvalidParameterValue,
        "must be standard too",
    );
}

// ---------------------------------------------------------------------------------------------
// Purge
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn purging_again_within_60_seconds_is_purge_queue_in_progress() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    send(&account, &url, "a").await;
    account.purge_queue(&url).await.expect("first purge");
    assert_eq!(counts(&account, &url).await, counts_of(0, 0, 0));

    assert_error(
        account.purge_queue(&url).await,
        ErrorKind::PurgeQueueInProgress,
        "one purge every 60 s",
    );
    send(&account, &url, "b").await;
    advance(Duration::from_secs(59)).await;
    assert_error(
        account.purge_queue(&url).await,
        ErrorKind::PurgeQueueInProgress,
        "purged 59 s ago",
    );
    assert_eq!(
        counts(&account, &url).await,
        counts_of(1, 0, 0),
        "a refused purge deletes nothing"
    );
    advance(Duration::from_secs(1)).await;
    account.purge_queue(&url).await.expect("a purge after 60 s");
    assert_eq!(counts(&account, &url).await, counts_of(0, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// Message bodies and sizes
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_empty_body_is_refused() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    assert_error(
        account.send_message(&url, SendMessage::new("")).await,
        ErrorKind::MissingParameter,
        "the message body is empty",
    );
    send(&account, &url, "x").await;
    assert_eq!(counts(&account, &url).await, counts_of(1, 0, 0));
}

#[tokio::test]
async fn a_body_with_characters_outside_the_sqs_set_is_invalid_message_contents() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for bad in [
        '\u{0}', '\u{8}', '\u{B}', '\u{C}', '\u{1F}', '\u{FFFE}', '\u{FFFF}',
    ] {
        assert_error(
            account
                .send_message(&url, SendMessage::new(format!("ab{bad}c")))
                .await,
            ErrorKind::InvalidMessageContents,
            &format!("U+{:04X} at byte 2", bad as u32),
        );
    }
    let edges = "\t\n\r \u{7F}\u{D7FF}\u{E000}\u{FFFD}\u{10000}\u{10FFFF}";
    send(&account, &url, edges).await;
    assert_eq!(receive(&account, &url, 1).await[0].body, edges);
}

#[tokio::test]
async fn a_body_of_exactly_the_maximum_message_size_is_accepted_and_one_byte_more_refused() {
    let account = Account::new();
    let url = standard(&account, "big").await;
    send(&account, &url, &"x".repeat(MIB)).await;
    assert_error(
        account
            .send_message(&url, SendMessage::new("x".repeat(MIB + 1)))
            .await,
        ErrorKind::InvalidParameterValue,
        "the message is 1048577 bytes",
    );

    let small = account
        .create_queue("small", attrs(&[("MaximumMessageSize", "1024")]))
        .await
        .expect("create");
    send(&account, &small, &"x".repeat(1024)).await;
    assert_error(
        account
            .send_message(&small, SendMessage::new("x".repeat(1025)))
            .await,
        ErrorKind::InvalidParameterValue,
        "takes at most 1024 (MaximumMessageSize)",
    );
    // Bytes, not characters: 512 two-byte characters fill 1024 bytes.
    send(&account, &small, &"é".repeat(512)).await;
    assert_error(
        account
            .send_message(&small, SendMessage::new(format!("{}x", "é".repeat(512))))
            .await,
        ErrorKind::InvalidParameterValue,
        "1025 bytes",
    );
    assert_eq!(counts(&account, &small).await, counts_of(2, 0, 0));
}

#[tokio::test]
async fn message_attributes_count_toward_the_message_size() {
    let account = Account::new();
    let small = account
        .create_queue("small", attrs(&[("MaximumMessageSize", "1024")]))
        .await
        .expect("create");
    // "k" + "String" + "v": 8 bytes.
    let attribute = MessageAttributeValue::string("v");
    account
        .send_message(
            &small,
            with_attribute(&"x".repeat(1016), "k", attribute.clone()),
        )
        .await
        .expect("1016 + 8 bytes fit");
    assert_error(
        account
            .send_message(&small, with_attribute(&"x".repeat(1017), "k", attribute))
            .await,
        ErrorKind::InvalidParameterValue,
        "1025 bytes (body and attributes)",
    );

    let url = standard(&account, "big").await;
    // "bin" + "Binary" + 16 bytes: 25 bytes.
    let binary = MessageAttributeValue::binary(vec![7; 16]);
    account
        .send_message(
            &url,
            with_attribute(&"x".repeat(MIB - 25), "bin", binary.clone()),
        )
        .await
        .expect("exactly 1 MiB with the attribute");
    assert_error(
        account
            .send_message(&url, with_attribute(&"x".repeat(MIB - 24), "bin", binary))
            .await,
        ErrorKind::InvalidParameterValue,
        "1048577 bytes",
    );
}

// ---------------------------------------------------------------------------------------------
// Message attributes
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn at_most_10_message_attributes_are_accepted() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    let mut message = SendMessage::new("m");
    for i in 0..10 {
        message = message.attribute(format!("a{i}"), MessageAttributeValue::string("v"));
    }
    account
        .send_message(&url, message.clone())
        .await
        .expect("10 attributes are accepted");
    let message = message.attribute("a10", MessageAttributeValue::string("v"));
    assert_error(
        account.send_message(&url, message).await,
        ErrorKind::InvalidParameterValue,
        "the message has 11 attributes; SQS allows at most 10",
    );
}

#[tokio::test]
async fn attribute_names_with_a_reserved_prefix_are_refused_in_any_case() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for reserved in [
        "AWS.trace",
        "aws.trace",
        "Aws.x",
        "Amazon.x",
        "amazon.x",
        "AMAZON.x",
    ] {
        assert_error(
            account
                .send_message(
                    &url,
                    with_attribute("m", reserved, MessageAttributeValue::string("v")),
                )
                .await,
            ErrorKind::InvalidParameterValue,
            &format!("`{reserved}` is invalid: a name may not start with `AWS.` or `Amazon.`"),
        );
    }
    for allowed in ["AWSx", "Amazonian", "my.AWS.x"] {
        account
            .send_message(
                &url,
                with_attribute("m", allowed, MessageAttributeValue::string("v")),
            )
            .await
            .unwrap_or_else(|e| panic!("`{allowed}` is a valid name: {e}"));
    }
}

#[tokio::test]
async fn attribute_names_may_not_start_or_end_with_a_dot_or_hold_two_dots() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for bad in [".trace", "trace.", "trace..id", "."] {
        assert_error(
            account
                .send_message(
                    &url,
                    with_attribute("m", bad, MessageAttributeValue::string("v")),
                )
                .await,
            ErrorKind::InvalidParameterValue,
            "may not start or end with `.` or hold `..`",
        );
    }
    account
        .send_message(
            &url,
            with_attribute("m", "trace.id", MessageAttributeValue::string("v")),
        )
        .await
        .expect("a single inner dot is fine");
}

#[tokio::test]
async fn attribute_names_take_up_to_256_characters_of_letters_digits_underscore_hyphen_and_dot() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for good in ["a".repeat(256), "A-z_0.9".to_owned()] {
        account
            .send_message(
                &url,
                with_attribute("m", &good, MessageAttributeValue::string("v")),
            )
            .await
            .unwrap_or_else(|e| panic!("`{good}` is a valid name: {e}"));
    }
    for (bad, needle) in [
        ("a".repeat(257), "must be 1 to 256 characters"),
        (String::new(), "must be 1 to 256 characters"),
        ("a b".to_owned(), "may hold only letters"),
        ("a/b".to_owned(), "may hold only letters"),
        ("née".to_owned(), "may hold only letters"),
    ] {
        assert_error(
            account
                .send_message(
                    &url,
                    with_attribute("m", &bad, MessageAttributeValue::string("v")),
                )
                .await,
            ErrorKind::InvalidParameterValue,
            needle,
        );
    }
}

#[tokio::test]
async fn attribute_types_are_string_number_or_binary_with_an_optional_label() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for good in [
        MessageAttributeValue::string("text"),
        MessageAttributeValue::number("-12.5e3"),
        MessageAttributeValue::binary(vec![0, 255]),
        typed("String.json", "{}"),
        typed("Number.int", "12"),
        MessageAttributeValue {
            data_type: "Binary.png".to_owned(),
            ..MessageAttributeValue::binary(vec![1])
        },
    ] {
        account
            .send_message(&url, with_attribute("m", "a", good.clone()))
            .await
            .unwrap_or_else(|e| panic!("{good:?} is valid: {e}"));
    }
    for bad_type in ["string", "Text", "Boolean", "String.", "Strings", ""] {
        assert_error(
            account
                .send_message(&url, with_attribute("m", "a", typed(bad_type, "x")))
                .await,
            ErrorKind::InvalidParameterValue,
            &format!("has type `{bad_type}`; use `String`, `Number` or `Binary`"),
        );
    }
    let long_label = format!("String.{}", "l".repeat(257));
    assert_error(
        account
            .send_message(&url, with_attribute("m", "a", typed(&long_label, "x")))
            .await,
        ErrorKind::InvalidParameterValue,
        "optionally followed by `.label`",
    );
}

#[tokio::test]
async fn attribute_values_must_be_present_non_empty_and_of_their_type() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for (bad, needle) in [
        (
            MessageAttributeValue::string(""),
            "one non-empty string value",
        ),
        (
            MessageAttributeValue::number(""),
            "one non-empty string value",
        ),
        (
            MessageAttributeValue::binary(Vec::new()),
            "one non-empty binary value",
        ),
        (typed("Binary", "text"), "one non-empty binary value"),
        (
            MessageAttributeValue {
                data_type: "String".to_owned(),
                string_value: None,
                binary_value: Some(vec![1]),
            },
            "one non-empty string value",
        ),
        (
            MessageAttributeValue::number("twelve"),
            "which is not a number",
        ),
        (
            MessageAttributeValue::number("1".repeat(39)),
            "up to 38 digits",
        ),
        (
            MessageAttributeValue::string("a\u{1}b"),
            "holds character U+0001",
        ),
    ] {
        assert_error(
            account
                .send_message(&url, with_attribute("m", "a", bad.clone()))
                .await,
            ErrorKind::InvalidParameterValue,
            needle,
        );
    }
    account
        .send_message(
            &url,
            with_attribute("m", "a", MessageAttributeValue::number("9".repeat(38))),
        )
        .await
        .expect("38 digits are a number");
    assert_eq!(counts(&account, &url).await, counts_of(1, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// Group ids, deduplication ids and per-message delays
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_fifo_send_without_a_group_id_is_missing_a_parameter() {
    let account = Account::new();
    let url = fifo_content_dedup(&account, "ledger.fifo").await;
    assert_error(
        account.send_message(&url, SendMessage::new("m")).await,
        ErrorKind::MissingParameter,
        "every message needs a MessageGroupId",
    );
    assert_eq!(counts(&account, &url).await, counts_of(0, 0, 0));
}

#[tokio::test]
async fn a_fifo_send_without_a_deduplication_id_needs_content_based_deduplication() {
    let account = Account::new();
    let url = fifo(&account, "ledger.fifo").await;
    assert_error(
        account
            .send_message(&url, SendMessage::new("m").group_id("g"))
            .await,
        ErrorKind::InvalidParameterValue,
        "give each message a MessageDeduplicationId, or enable ContentBasedDeduplication",
    );
    account
        .send_message(&url, SendMessage::new("m").group_id("g").dedup_id("d"))
        .await
        .expect("an explicit deduplication id is accepted");

    let url = fifo_content_dedup(&account, "auto.fifo").await;
    account
        .send_message(&url, SendMessage::new("m").group_id("g"))
        .await
        .expect("content-based deduplication supplies the id");
}

#[tokio::test]
async fn a_deduplication_id_on_a_standard_queue_is_refused() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    assert_error(
        account
            .send_message(&url, SendMessage::new("m").dedup_id("d"))
            .await,
        ErrorKind::InvalidParameterValue,
        "takes no MessageDeduplicationId",
    );
    assert_eq!(counts(&account, &url).await, counts_of(0, 0, 0));
}

#[tokio::test]
async fn a_group_id_on_a_standard_queue_is_accepted_and_checked() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    account
        .send_message(&url, SendMessage::new("m").group_id("tenant-1"))
        .await
        .expect("a group id is accepted on a standard queue");
    assert_error(
        account
            .send_message(&url, SendMessage::new("m").group_id("x".repeat(129)))
            .await,
        ErrorKind::InvalidParameterValue,
        "MessageGroupId",
    );
}

#[tokio::test]
async fn group_and_deduplication_ids_take_1_to_128_characters() {
    let account = Account::new();
    let url = fifo(&account, "ledger.fifo").await;
    let max = "x".repeat(128);
    account
        .send_message(&url, SendMessage::new("m").group_id(&max).dedup_id(&max))
        .await
        .expect("128 characters are accepted");
    let over = "x".repeat(129);
    for (message, parameter) in [
        (
            SendMessage::new("m").group_id(&over).dedup_id("d"),
            "MessageGroupId",
        ),
        (
            SendMessage::new("m").group_id("g").dedup_id(&over),
            "MessageDeduplicationId",
        ),
        (
            SendMessage::new("m").group_id("").dedup_id("d"),
            "MessageGroupId",
        ),
        (
            SendMessage::new("m").group_id("g").dedup_id(""),
            "MessageDeduplicationId",
        ),
    ] {
        let text = assert_error(
            account.send_message(&url, message).await,
            ErrorKind::InvalidParameterValue,
            &format!("{parameter} `"),
        );
        assert!(text.contains("1 to 128 characters"), "{text}");
    }
}

#[tokio::test]
async fn group_and_deduplication_ids_take_only_alphanumerics_and_punctuation() {
    let account = Account::new();
    let url = fifo(&account, "ledger.fifo").await;
    let punctuation = r##"!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~"##;
    let every = format!("aZ09{punctuation}");
    account
        .send_message(
            &url,
            SendMessage::new("m").group_id(&every).dedup_id(&every),
        )
        .await
        .expect("alphanumerics and every listed punctuation mark are accepted");
    for bad in ["a b", "tab\t", "née", "a\u{7F}"] {
        assert_error(
            account
                .send_message(&url, SendMessage::new("m").group_id(bad).dedup_id("d"))
                .await,
            ErrorKind::InvalidParameterValue,
            &format!("MessageGroupId `{bad}` is invalid"),
        );
        assert_error(
            account
                .send_message(&url, SendMessage::new("m").group_id("g").dedup_id(bad))
                .await,
            ErrorKind::InvalidParameterValue,
            &format!("MessageDeduplicationId `{bad}` is invalid"),
        );
    }
    assert_eq!(counts(&account, &url).await, counts_of(1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_per_message_delay_from_0_to_900_seconds_is_accepted_on_a_standard_queue() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for seconds in [0, 900] {
        account
            .send_message(&url, SendMessage::new("m").delay_seconds(seconds))
            .await
            .unwrap_or_else(|e| panic!("DelaySeconds {seconds} is accepted: {e}"));
    }
    assert_eq!(counts(&account, &url).await, counts_of(1, 0, 1));
    for seconds in [-1, 901] {
        assert_error(
            account
                .send_message(&url, SendMessage::new("m").delay_seconds(seconds))
                .await,
            ErrorKind::InvalidParameterValue,
            &format!("DelaySeconds {seconds} is outside 0..=900"),
        );
    }
    advance(Duration::from_secs(899)).await;
    assert_eq!(counts(&account, &url).await, counts_of(1, 0, 1));
    advance(Duration::from_secs(1)).await;
    assert_eq!(counts(&account, &url).await, counts_of(2, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn a_fifo_queue_refuses_a_non_zero_per_message_delay_but_accepts_0() {
    let account = Account::new();
    let url = account
        .create_queue(
            "ledger.fifo",
            fifo_attrs(&[("ContentBasedDeduplication", "true"), ("DelaySeconds", "5")]),
        )
        .await
        .expect("create");
    for seconds in [1, 900] {
        assert_error(
            account
                .send_message(
                    &url,
                    SendMessage::new("m").group_id("g").delay_seconds(seconds),
                )
                .await,
            ErrorKind::InvalidParameterValue,
            "is FIFO and refuses a per-message DelaySeconds",
        );
    }
    account
        .send_message(&url, SendMessage::new("m").group_id("g").delay_seconds(0))
        .await
        .expect("a zero per-message delay is accepted");
    assert_eq!(
        counts(&account, &url).await,
        counts_of(0, 0, 1),
        "the queue's delay applies to every message"
    );
    advance(Duration::from_secs(5)).await;
    assert_eq!(counts(&account, &url).await, counts_of(1, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// Receive parameters
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_receive_takes_1_to_10_messages() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for i in 0..12 {
        send(&account, &url, &format!("m{i}")).await;
    }
    for max in [0, 11, -1] {
        assert_error(
            account
                .receive_message(&url, ReceiveMessage::new(max))
                .await,
            ErrorKind::InvalidParameterValue,
            &format!("MaxNumberOfMessages {max} is outside 1..=10"),
        );
    }
    assert_eq!(receive(&account, &url, 1).await.len(), 1);
    assert_eq!(receive(&account, &url, 10).await.len(), 10);
}

#[tokio::test(start_paused = true)]
async fn a_receive_waits_at_most_20_seconds() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for wait in [21, -1] {
        assert_error(
            account
                .receive_message(&url, ReceiveMessage::new(1).wait_time_seconds(wait))
                .await,
            ErrorKind::InvalidParameterValue,
            &format!("WaitTimeSeconds {wait} is outside 0..=20"),
        );
    }
    let start = tokio::time::Instant::now();
    let received = account
        .receive_message(&url, ReceiveMessage::new(1).wait_time_seconds(20))
        .await
        .expect("a 20-second wait is accepted");
    assert!(received.is_empty());
    assert_eq!(start.elapsed(), Duration::from_secs(20));
}

#[tokio::test]
async fn a_receive_visibility_timeout_is_accepted_up_to_43200_seconds() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    send(&account, &url, "m").await;
    for visibility in [43_201, -1] {
        assert_error(
            account
                .receive_message(&url, ReceiveMessage::new(1).visibility_timeout(visibility))
                .await,
            ErrorKind::InvalidParameterValue,
            &format!("VisibilityTimeout {visibility} is outside 0..=43200"),
        );
    }
    assert_eq!(
        counts(&account, &url).await,
        counts_of(1, 0, 0),
        "a refused receive takes nothing"
    );
    let received = account
        .receive_message(&url, ReceiveMessage::new(1).visibility_timeout(43_200))
        .await
        .expect("43200 is accepted");
    assert_eq!(received.len(), 1);
}

#[tokio::test]
async fn a_receive_refuses_an_unknown_system_attribute_name() {
    let account = Account::new();
    let url = fifo_content_dedup(&account, "ledger.fifo").await;
    for unknown in ["Colour", "sentTimestamp", ""] {
        assert_error(
            account
                .receive_message(
                    &url,
                    ReceiveMessage::new(1).system_attribute_names([unknown]),
                )
                .await,
            ErrorKind::InvalidAttributeName,
            &format!("unknown message system attribute `{unknown}`"),
        );
    }
    account
        .send_message(&url, SendMessage::new("m").group_id("g"))
        .await
        .expect("send");
    let documented = [
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
        "SentTimestamp",
        "SequenceNumber",
        "MessageGroupId",
        "MessageDeduplicationId",
        "DeadLetterQueueSourceArn",
    ];
    let received = account
        .receive_message(
            &url,
            ReceiveMessage::new(1).system_attribute_names(documented),
        )
        .await
        .expect("every documented name is accepted");
    assert_eq!(received.len(), 1);
    for name in &documented[..6] {
        assert!(
            received[0].attributes.contains_key(*name),
            "{name} is returned"
        );
    }
}

#[tokio::test]
async fn a_receive_request_attempt_id_takes_1_to_128_characters() {
    let account = Account::new();
    let url = fifo_content_dedup(&account, "ledger.fifo").await;
    account
        .receive_message(
            &url,
            ReceiveMessage::new(1).receive_request_attempt_id("a".repeat(128)),
        )
        .await
        .expect("128 characters are accepted");
    for bad in ["a".repeat(129), String::new(), "a b".to_owned()] {
        assert_error(
            account
                .receive_message(
                    &url,
                    ReceiveMessage::new(1).receive_request_attempt_id(bad.clone()),
                )
                .await,
            ErrorKind::InvalidParameterValue,
            &format!("ReceiveRequestAttemptId `{bad}` is invalid"),
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Batch requests
// ---------------------------------------------------------------------------------------------

/// Runs one kind of batch check against all three batch APIs, with entries made from `ids`.
async fn assert_every_batch_api_refuses(ids: &[String], kind: ErrorKind, needle: &str) {
    let account = Account::new();
    let url = standard(&account, "batch").await;
    let handle = send_and_receive(&account, &url, "m").await;
    let sends = ids
        .iter()
        .map(|id| SendBatchEntry::new(id.clone(), SendMessage::new("m")))
        .collect();
    assert_error(account.send_message_batch(&url, sends).await, kind, needle);
    let deletes = ids
        .iter()
        .map(|id| DeleteEntry {
            id: id.clone().into(),
            receipt_handle: handle.clone(),
        })
        .collect();
    assert_error(
        account.delete_message_batch(&url, deletes).await,
        kind,
        needle,
    );
    let changes = ids
        .iter()
        .map(|id| ChangeVisibilityEntry {
            id: id.clone().into(),
            receipt_handle: handle.clone(),
            visibility_timeout: 0,
        })
        .collect();
    assert_error(
        account.change_message_visibility_batch(&url, changes).await,
        kind,
        needle,
    );
    assert_eq!(
        counts(&account, &url).await,
        counts_of(0, 1, 0),
        "a refused batch stores, deletes and releases nothing"
    );
}

fn ids(list: &[&str]) -> Vec<String> {
    list.iter().map(|id| (*id).to_owned()).collect()
}

#[tokio::test]
async fn an_empty_batch_is_refused_by_every_batch_api() {
    assert_every_batch_api_refuses(
        &[],
        ErrorKind::EmptyBatchRequest,
        "the batch has no entries",
    )
    .await;
}

#[tokio::test]
async fn a_batch_of_11_entries_is_refused_by_every_batch_api() {
    let eleven: Vec<String> = (0..11).map(|i| format!("e{i}")).collect();
    assert_every_batch_api_refuses(
        &eleven,
        ErrorKind::TooManyEntriesInBatchRequest,
        "the batch has 11 entries",
    )
    .await;
}

#[tokio::test]
async fn a_batch_entry_id_outside_the_alphabet_or_over_80_characters_is_refused_by_every_batch_api()
{
    for bad in ["a.b", "a b", "", "é", &"a".repeat(81)] {
        assert_every_batch_api_refuses(
            &ids(&["ok", bad]),
            ErrorKind::InvalidBatchEntryId,
            &format!("batch entry id `{bad}` is invalid"),
        )
        .await;
    }
}

#[tokio::test]
async fn duplicate_batch_entry_ids_are_refused_by_every_batch_api() {
    assert_every_batch_api_refuses(
        &ids(&["a", "b", "a"]),
        ErrorKind::BatchEntryIdsNotDistinct,
        "batch entry id `a` appears twice",
    )
    .await;
}

#[tokio::test]
async fn every_batch_api_accepts_10_entries_with_80_character_ids() {
    let account = Account::new();
    let url = standard(&account, "batch").await;
    let ten: Vec<String> = (0..10)
        .map(|i| format!("{i}{}", "_-aZ".repeat(20))[..80].to_owned())
        .collect();
    let sent = account
        .send_message_batch(
            &url,
            ten.iter()
                .map(|id| SendBatchEntry::new(id.clone(), SendMessage::new("m")))
                .collect(),
        )
        .await
        .expect("10 entries are accepted");
    assert_eq!(sent.successful.len(), 10);
    assert!(sent.failed.is_empty());
    let received = receive(&account, &url, 10).await;
    let changed = account
        .change_message_visibility_batch(
            &url,
            ten.iter()
                .zip(&received)
                .map(|(id, m)| ChangeVisibilityEntry {
                    id: id.clone().into(),
                    receipt_handle: m.receipt_handle.clone(),
                    visibility_timeout: 60,
                })
                .collect(),
        )
        .await
        .expect("10 entries are accepted");
    assert_eq!(changed.successful.len(), 10);
    let deleted = account
        .delete_message_batch(
            &url,
            ten.iter()
                .zip(&received)
                .map(|(id, m)| DeleteEntry {
                    id: id.clone().into(),
                    receipt_handle: m.receipt_handle.clone(),
                })
                .collect(),
        )
        .await
        .expect("10 entries are accepted");
    assert_eq!(deleted.successful.len(), 10);
    assert_eq!(counts(&account, &url).await, counts_of(0, 0, 0));
}

#[tokio::test]
async fn a_send_batch_over_1_mib_in_total_is_batch_request_too_long() {
    let account = Account::new();
    let url = standard(&account, "big").await;
    let half = MIB / 2;
    let exact = account
        .send_message_batch(
            &url,
            vec![
                SendBatchEntry::new("a", SendMessage::new("x".repeat(half))),
                SendBatchEntry::new("b", SendMessage::new("x".repeat(half))),
            ],
        )
        .await
        .expect("exactly 1 MiB in total is accepted");
    assert_eq!(successful_ids(&exact), ["a", "b"]);

    assert_error(
        account
            .send_message_batch(
                &url,
                vec![
                    SendBatchEntry::new("a", SendMessage::new("x".repeat(half))),
                    SendBatchEntry::new("b", SendMessage::new("x".repeat(half + 1))),
                ],
            )
            .await,
        ErrorKind::BatchRequestTooLong,
        "add up to 1048577 bytes",
    );
    // Attributes count too: "k" + "String" + "vv" is 9 bytes.
    assert_error(
        account
            .send_message_batch(
                &url,
                vec![
                    SendBatchEntry::new("a", SendMessage::new("x".repeat(half))),
                    SendBatchEntry::new(
                        "b",
                        with_attribute(
                            &"x".repeat(half - 8),
                            "k",
                            MessageAttributeValue::string("vv"),
                        ),
                    ),
                ],
            )
            .await,
        ErrorKind::BatchRequestTooLong,
        "1048577 bytes",
    );
    assert_eq!(
        counts(&account, &url).await,
        counts_of(2, 0, 0),
        "a batch that is too long stores nothing"
    );
}

#[tokio::test]
async fn a_send_batch_with_bad_entries_stores_the_others_in_order_and_reports_each_failure() {
    let account = Account::new();
    let url = fifo_content_dedup(&account, "ledger.fifo").await;
    let result = account
        .send_message_batch(
            &url,
            vec![
                SendBatchEntry::new("a", SendMessage::new("first").group_id("g")),
                SendBatchEntry::new("b", SendMessage::new("no group")),
                SendBatchEntry::new("c", SendMessage::new("second").group_id("g")),
                SendBatchEntry::new("d", SendMessage::new("bad\u{0}").group_id("g")),
                SendBatchEntry::new(
                    "e",
                    SendMessage::new("delayed").group_id("g").delay_seconds(5),
                ),
                SendBatchEntry::new("f", SendMessage::new("third").group_id("g")),
            ],
        )
        .await
        .expect("a partial failure is a successful call");
    assert_eq!(successful_ids(&result), ["a", "c", "f"]);
    assert_eq!(result.failed.len(), 3, "{:?}", result.failed);
    assert_failure(
        &result.failed[0],
        "b",
        ErrorKind::MissingParameter,
        "MessageGroupId",
    );
    assert_failure(
        &result.failed[1],
        "d",
        ErrorKind::InvalidMessageContents,
        "U+0000",
    );
    assert_failure(
        &result.failed[2],
        "e",
        ErrorKind::InvalidParameterValue,
        "per-message DelaySeconds",
    );

    let received = account
        .receive_message(&url, ReceiveMessage::new(10))
        .await
        .expect("receive");
    let bodies: Vec<&str> = received.iter().map(|m| m.body.as_str()).collect();
    assert_eq!(bodies, ["first", "second", "third"]);
    let sequence: Vec<&str> = received
        .iter()
        .map(|m| m.sequence_number().expect("FIFO messages have one"))
        .collect();
    assert!(sequence.windows(2).all(|w| w[0] < w[1]), "{sequence:?}");
    for ((id, sent), message) in result.successful.iter().zip(&received) {
        assert_eq!(sent.message_id, message.message_id, "entry {id}");
    }
}

#[tokio::test]
async fn a_standard_send_batch_with_a_bad_entry_stores_the_others() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    let result = account
        .send_message_batch(
            &url,
            vec![
                SendBatchEntry::new("a", SendMessage::new("first")),
                SendBatchEntry::new("b", SendMessage::new("")),
                SendBatchEntry::new("c", SendMessage::new("second").dedup_id("d")),
                SendBatchEntry::new(
                    "d",
                    with_attribute("third", "AWS.x", MessageAttributeValue::string("v")),
                ),
                SendBatchEntry::new("e", SendMessage::new("fourth")),
            ],
        )
        .await
        .expect("a partial failure is a successful call");
    assert_eq!(successful_ids(&result), ["a", "e"]);
    assert_failure(&result.failed[0], "b", ErrorKind::MissingParameter, "empty");
    assert_failure(
        &result.failed[1],
        "c",
        ErrorKind::InvalidParameterValue,
        "MessageDeduplicationId",
    );
    assert_failure(
        &result.failed[2],
        "d",
        ErrorKind::InvalidParameterValue,
        "`AWS.x`",
    );
    let bodies: Vec<String> = receive(&account, &url, 10)
        .await
        .into_iter()
        .map(|m| m.body)
        .collect();
    assert_eq!(bodies, ["first", "fourth"]);
}

#[tokio::test]
async fn a_delete_batch_with_a_bogus_receipt_handle_deletes_the_others() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for body in ["a", "b", "c"] {
        send(&account, &url, body).await;
    }
    let received = receive(&account, &url, 3).await;
    assert_eq!(received.len(), 3);
    let result = account
        .delete_message_batch(
            &url,
            vec![
                DeleteEntry {
                    id: "first".into(),
                    receipt_handle: received[0].receipt_handle.clone(),
                },
                DeleteEntry {
                    id: "bogus".into(),
                    receipt_handle: "not-a-handle".into(),
                },
                DeleteEntry {
                    id: "third".into(),
                    receipt_handle: received[2].receipt_handle.clone(),
                },
            ],
        )
        .await
        .expect("a partial failure is a successful call");
    assert_eq!(successful_ids(&result), ["first", "third"]);
    assert_eq!(result.failed.len(), 1);
    assert_failure(
        &result.failed[0],
        "bogus",
        ErrorKind::ReceiptHandleIsInvalid,
        "receipt handle `not-a-handle` was not issued by queue `orders`",
    );
    assert_eq!(
        counts(&account, &url).await,
        counts_of(0, 1, 0),
        "only the message of the untouched handle is left"
    );
}

#[tokio::test]
async fn a_change_visibility_batch_with_a_bogus_receipt_handle_changes_the_others() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    for body in ["a", "b", "c"] {
        send(&account, &url, body).await;
    }
    let received = receive(&account, &url, 3).await;
    let entry = |id: &str, handle: &str, visibility_timeout| ChangeVisibilityEntry {
        id: id.to_owned().into(),
        receipt_handle: handle.to_owned(),
        visibility_timeout,
    };
    let result = account
        .change_message_visibility_batch(
            &url,
            vec![
                entry("release", &received[0].receipt_handle, 0),
                entry("bogus", "not-a-handle", 0),
                entry("too-long", &received[1].receipt_handle, 43_201),
                entry("extend", &received[2].receipt_handle, 600),
            ],
        )
        .await
        .expect("a partial failure is a successful call");
    assert_eq!(successful_ids(&result), ["release", "extend"]);
    assert_eq!(result.failed.len(), 2);
    assert_failure(
        &result.failed[0],
        "bogus",
        ErrorKind::ReceiptHandleIsInvalid,
        "`not-a-handle`",
    );
    assert_failure(
        &result.failed[1],
        "too-long",
        ErrorKind::InvalidParameterValue,
        "VisibilityTimeout 43201 is outside 0..=43200",
    );
    assert_eq!(counts(&account, &url).await, counts_of(1, 2, 0));
    let again = receive(&account, &url, 10).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].body, "a", "the released message is visible again");
}

// ---------------------------------------------------------------------------------------------
// Receipt handles and visibility
// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_receipt_handle_of_another_queue_is_invalid() {
    let account = Account::new();
    let orders = standard(&account, "orders").await;
    let refunds = standard(&account, "refunds").await;
    send(&account, &refunds, "r").await;
    let handle = send_and_receive(&account, &orders, "o").await;

    assert_error(
        account.delete_message(&refunds, &handle).await,
        ErrorKind::ReceiptHandleIsInvalid,
        "was not issued by queue `refunds`",
    );
    assert_error(
        account
            .change_message_visibility(&refunds, &handle, 0)
            .await,
        ErrorKind::ReceiptHandleIsInvalid,
        "was not issued by queue `refunds`",
    );
    for garbage in ["", "handle", &"z".repeat(40)] {
        assert_error(
            account.delete_message(&orders, garbage).await,
            ErrorKind::ReceiptHandleIsInvalid,
            "was not issued by queue `orders`",
        );
    }
    assert_eq!(counts(&account, &orders).await, counts_of(0, 1, 0));
    assert_eq!(counts(&account, &refunds).await, counts_of(1, 0, 0));

    // A queue re-created under the same name does not honour the old queue's handles.
    account.delete_queue(&orders).await.expect("delete");
    advance(Duration::from_secs(60)).await;
    let orders = standard(&account, "orders").await;
    send_and_receive(&account, &orders, "new").await;
    assert_error(
        account.delete_message(&orders, &handle).await,
        ErrorKind::ReceiptHandleIsInvalid,
        "was not issued by queue `orders`",
    );
    assert_eq!(counts(&account, &orders).await, counts_of(0, 1, 0));
}

#[tokio::test]
async fn changing_the_visibility_of_a_deleted_message_is_message_not_inflight() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    let handle = send_and_receive(&account, &url, "m").await;
    account.delete_message(&url, &handle).await.expect("delete");
    assert_error(
        account.change_message_visibility(&url, &handle, 10).await,
        ErrorKind::MessageNotInflight,
        "is not in flight on queue `orders`",
    );
    let result = account
        .change_message_visibility_batch(
            &url,
            vec![ChangeVisibilityEntry {
                id: "gone".into(),
                receipt_handle: handle,
                visibility_timeout: 10,
            }],
        )
        .await
        .expect("a per-entry failure is a successful call");
    assert_failure(
        &result.failed[0],
        "gone",
        ErrorKind::MessageNotInflight,
        "not in flight",
    );
}

#[tokio::test(start_paused = true)]
async fn changing_the_visibility_of_a_timed_out_message_is_message_not_inflight() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    let handle = send_and_receive(&account, &url, "m").await;
    advance(Duration::from_secs(29)).await;
    account
        .change_message_visibility(&url, &handle, 5)
        .await
        .expect("still in flight after 29 s");
    advance(Duration::from_secs(5)).await;
    assert_error(
        account.change_message_visibility(&url, &handle, 10).await,
        ErrorKind::MessageNotInflight,
        "not in flight",
    );
    assert_eq!(counts(&account, &url).await, counts_of(1, 0, 0));
}

#[tokio::test(start_paused = true)]
async fn visibility_is_capped_at_12_hours_after_the_receive() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    send(&account, &url, "m").await;
    let received = account
        .receive_message(&url, ReceiveMessage::new(1).visibility_timeout(43_200))
        .await
        .expect("receive for 12 hours");
    let handle = &received[0].receipt_handle;
    advance(Duration::from_secs(11 * 3600)).await;

    for past_the_cap in [7200, 3601] {
        let message = assert_error(
            account
                .change_message_visibility(&url, handle, past_the_cap)
                .await,
            ErrorKind::InvalidParameterValue,
            "past 12 hours after its receive",
        );
        assert!(message.contains("at most 3600 seconds remain"), "{message}");
    }
    account
        .change_message_visibility(&url, handle, 1800)
        .await
        .expect("30 minutes fit in the 12 hours");
    account
        .change_message_visibility(&url, handle, 3600)
        .await
        .expect("exactly up to the 12-hour cap fits");
    assert_error(
        account
            .change_message_visibility(&url, handle, 43_201)
            .await,
        ErrorKind::InvalidParameterValue,
        "VisibilityTimeout 43201 is outside 0..=43200",
    );
    advance(Duration::from_secs(3599)).await;
    assert_eq!(counts(&account, &url).await, counts_of(0, 1, 0));
    advance(Duration::from_secs(1)).await;
    assert_eq!(
        counts(&account, &url).await,
        counts_of(1, 0, 0),
        "the message is visible again 12 hours after its receive"
    );
}

#[tokio::test]
async fn deleting_a_message_twice_succeeds() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    send(&account, &url, "other").await;
    let handle = send_and_receive(&account, &url, "m").await;
    account.delete_message(&url, &handle).await.expect("delete");
    account
        .delete_message(&url, &handle)
        .await
        .expect("deleting again succeeds");
    let result = account
        .delete_message_batch(
            &url,
            vec![DeleteEntry {
                id: "again".into(),
                receipt_handle: handle,
            }],
        )
        .await
        .expect("batch");
    assert_eq!(successful_ids(&result), ["again"]);
    assert!(result.failed.is_empty());
    assert_eq!(
        counts(&account, &url).await,
        counts_of(1, 0, 0),
        "only the deleted message is gone"
    );
}

#[tokio::test]
async fn message_attributes_that_pass_validation_are_delivered_unchanged() {
    let account = Account::new();
    let url = standard(&account, "orders").await;
    account
        .send_message(
            &url,
            with_attribute("m", "trace.id", MessageAttributeValue::string("abc")),
        )
        .await
        .expect("send");
    let received = receive(&account, &url, 1).await;
    let expected: BTreeMap<String, MessageAttributeValue> =
        BTreeMap::from([("trace.id".to_owned(), MessageAttributeValue::string("abc"))]);
    assert_eq!(received[0].message_attributes, expected);
}

#[tokio::test]
async fn the_aws_trace_header_is_kept_outside_the_ten_attributes_and_must_be_an_xray_header() {
    let account = Account::new();
    let url = standard(&account, "traced").await;
    let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let full = (0..10).fold(SendMessage::new("full"), |message, n| {
        message.attribute(format!("a{n}"), MessageAttributeValue::string("x"))
    });
    account
        .send_message(&url, full.aws_trace_header(header))
        .await
        .expect("the system attribute is not an 11th attribute");
    assert_error(
        account
            .send_message(&url, SendMessage::new("m").aws_trace_header("not-a-trace"))
            .await,
        ErrorKind::InvalidParameterValue,
        "is not an X-Ray trace header",
    );
    let received = |names: &'static [&'static str]| {
        let account = account.clone();
        let url = url.clone();
        async move {
            let request = ReceiveMessage::new(10)
                .visibility_timeout(0)
                .system_attribute_names(names.iter().copied());
            account.receive_message(&url, request).await.unwrap()
        }
    };
    for names in [&["AWSTraceHeader"][..], &["All"][..]] {
        let messages = received(names).await;
        assert_eq!(messages.len(), 1);
        assert_eq!(
            messages[0].attributes.get("AWSTraceHeader"),
            Some(header),
            "{names:?}"
        );
        assert_eq!(messages[0].message_attributes.len(), 10);
    }
    let messages = received(&["SentTimestamp"]).await;
    assert_eq!(
        messages[0].attributes.get("AWSTraceHeader"),
        None,
        "not asked for"
    );
}
