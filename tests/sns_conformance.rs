//! SNS on both backends: every scenario runs on the in-process account (paused clock) and on a
//! live LocalStack with SNS (real time), through the same `Transport` (topics, subscriptions,
//! `PublishBatch`, and the SQS calls that read what a topic delivered), and asserts the same
//! observable results. Where LocalStack 4.13.1 differs from Amazon SNS, the scenario names the
//! difference and asserts each backend's own answer, as `tests/conformance.rs` does for SQS.
//!
//! A subscribed queue on AWS needs a policy that lets the topic send to it; neither backend
//! enforces one (the account has no policies, LocalStack does not check them), so only the
//! fan-out scenario sets it, through `SetQueueAttributes`, to prove the call works live.
//!
//! Requests that break SNS's rules are refused by the aws transport before the network (see
//! `the_aws_transport_refuses_invalid_sns_requests_before_the_network`), so the same requests are
//! also sent to LocalStack through the plain SDK client, whose answers must be the rules' kinds.
//!
//! Live legs need `RUST_STREAM_LIVE_ENDPOINT` (set by `scripts/test.sh`); under CI a missing
//! endpoint fails them.

#[macro_use]
mod common;

use std::collections::BTreeMap;

use common::backend::{Backend, Kind};
use common::bodies;
use rust_stream::model::envelope::Envelope;
use rust_stream::model::filter_policy::{FilterPolicy, FilterPolicyScope};
use rust_stream::model::rules::ErrorKind;
use rust_stream::transport::{
    MessageAttributeValue, MessageAttributes, Publish, PublishBatchEntry, PublishBatchResult,
    Published, Subscribe, TopicAttributes, Transport, TransportError,
};
use rust_stream::SqsBroker;

both_backends!(
    fan_out_reaches_the_two_of_three_queues_whose_policies_pass,
    exact_string_filter_matches_and_misses,
    numeric_exact_and_range_filters_match_and_miss,
    prefix_filter_matches_and_misses,
    exists_true_and_false_filters_match_and_miss,
    anything_but_filter_matches_and_misses,
    or_filter_matches_either_branch,
    body_scope_filter_matches_nested_keys,
    raw_delivery_keeps_the_message_and_enveloped_delivery_wraps_it,
    a_fifo_topic_keeps_each_groups_order_in_two_fifo_queues,
    a_fifo_topic_stores_a_deduplication_id_repeat_once,
    content_based_deduplication_on_a_fifo_topic_ignores_attributes,
    publish_batch_answers_each_entry,
    more_than_ten_attributes_reach_an_enveloped_subscription_only,
    invalid_sns_requests_fail_with_the_same_error_kinds,
    missing_topics_and_subscriptions_are_not_found,
    create_topic_is_idempotent_and_reads_back_its_attributes,
    subscribing_twice_answers_the_same_subscription,
    subscription_attributes_read_back,
    listing_subscriptions_follows_every_page,
);

// ---- helpers ---------------------------------------------------------------------------------

/// Creates a topic (FIFO when `base` ends in `.fifo`) with these attributes; returns its ARN.
async fn topic<T: Transport>(backend: &Backend<T>, base: &str, extra: &[(&str, &str)]) -> String {
    let name = backend.name(base);
    let mut attributes: TopicAttributes = extra
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    if name.ends_with(".fifo") {
        attributes.insert("FifoTopic".into(), "true".into());
    }
    backend
        .transport
        .create_topic(&name, attributes)
        .await
        .expect("create topic")
}

/// How a queue is subscribed.
#[derive(Clone, Copy)]
struct Delivery<'a> {
    raw: bool,
    policy: Option<(&'a str, FilterPolicyScope)>,
}

const RAW: Delivery<'static> = Delivery {
    raw: true,
    policy: None,
};
const ENVELOPED: Delivery<'static> = Delivery {
    raw: false,
    policy: None,
};

fn raw_filtered(policy: &str) -> Delivery<'_> {
    Delivery {
        raw: true,
        policy: Some((policy, FilterPolicyScope::MessageAttributes)),
    }
}

/// The subscribe request of the queue whose ARN is `queue_arn`.
fn subscription(topic_arn: &str, queue_arn: &str, delivery: Delivery<'_>) -> Subscribe {
    let mut request = Subscribe::sqs(topic_arn, queue_arn).raw_message_delivery(delivery.raw);
    if let Some((json, scope)) = delivery.policy {
        let policy = FilterPolicy::parse(json, scope).expect("a valid filter policy");
        request = request.filter_policy(&policy);
    }
    request
}

/// A new queue (FIFO when `base` ends in `.fifo`) subscribed to the topic; returns its URL and
/// the subscription's ARN.
async fn subscribed<T: Transport>(
    backend: &Backend<T>,
    topic_arn: &str,
    base: &str,
    delivery: Delivery<'_>,
) -> (String, String) {
    let url = backend.queue(base, &[]).await;
    let queue_arn = backend.arn(&url).await;
    let subscription_arn = backend
        .transport
        .subscribe(subscription(topic_arn, &queue_arn, delivery))
        .await
        .expect("subscribe");
    (url, subscription_arn)
}

/// Publishes in batches of 10, in order; every entry must succeed.
async fn publish<T: Transport>(
    backend: &Backend<T>,
    topic_arn: &str,
    publishes: Vec<Publish>,
) -> Vec<Published> {
    let mut answers = Vec::new();
    let entries: Vec<PublishBatchEntry> = publishes
        .into_iter()
        .enumerate()
        .map(|(i, publish)| PublishBatchEntry::new(format!("e{i}"), publish))
        .collect();
    for chunk in entries.chunks(10) {
        let result = backend
            .transport
            .publish_batch(topic_arn, chunk.to_vec())
            .await
            .expect("publish batch");
        assert!(result.failed.is_empty(), "{:?}", result.failed);
        answers.extend(
            result
                .successful
                .into_iter()
                .map(|(_, published)| published),
        );
    }
    answers
}

fn string(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::string(value)
}

fn number(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::number(value)
}

/// A publish whose message is `label`, with these attributes.
fn labelled(label: &str, attributes: &[(&str, MessageAttributeValue)]) -> Publish {
    attributes
        .iter()
        .fold(Publish::new(label), |publish, (name, value)| {
            publish.attribute(*name, value.clone())
        })
}

/// The bodies a queue received, sorted (a standard queue keeps no order), after `want` came and
/// a further second brought nothing.
async fn delivered<T: Transport>(backend: &Backend<T>, url: &str, want: usize) -> Vec<String> {
    let mut got: Vec<String> = bodies(&backend.take_all(url, want).await)
        .into_iter()
        .map(str::to_owned)
        .collect();
    got.sort();
    got
}

/// Publishes `publishes` to a new topic through one raw subscription with `policy` (attribute
/// scope) and answers the labels it received, sorted.
async fn filtered<T: Transport>(
    backend: &Backend<T>,
    base: &str,
    policy: &str,
    publishes: Vec<Publish>,
    want: usize,
) -> Vec<String> {
    let topic_arn = topic(backend, base, &[]).await;
    let (url, _) = subscribed(backend, &topic_arn, base, raw_filtered(policy)).await;
    publish(backend, &topic_arn, publishes).await;
    delivered(backend, &url, want).await
}

// ---- delivery and filter policies ------------------------------------------------------------

/// The policy that lets `topic_arn` send to the queue `queue_arn`, as AWS needs it on a
/// subscribed queue.
fn queue_policy(queue_arn: &str, topic_arn: &str) -> String {
    serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": "sns.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": topic_arn}},
        }],
    })
    .to_string()
}

async fn fan_out_reaches_the_two_of_three_queues_whose_policies_pass<T: Transport>(
    backend: Backend<T>,
) {
    let topic_arn = topic(&backend, "fan-out", &[]).await;
    let mut queues = Vec::new();
    for (base, policy) in [
        ("fan-card", r#"{"kind": ["card"]}"#),
        ("fan-large", r#"{"amount": [{"numeric": [">", 100]}]}"#),
        ("fan-cash", r#"{"kind": ["cash"]}"#),
    ] {
        let (url, _) = subscribed(&backend, &topic_arn, base, raw_filtered(policy)).await;
        // Not enforced by either backend; AWS needs it (see the module's comment).
        let queue_arn = backend.arn(&url).await;
        let policy = queue_policy(&queue_arn, &topic_arn);
        backend
            .transport
            .set_queue_attributes(&url, [("Policy".to_owned(), policy.clone())].into())
            .await
            .expect("set the queue policy");
        let read = backend
            .transport
            .get_queue_attributes(&url, &["Policy"])
            .await
            .unwrap();
        let read: serde_json::Value = serde_json::from_str(&read["Policy"]).unwrap();
        assert_eq!(
            read,
            serde_json::from_str::<serde_json::Value>(&policy).unwrap()
        );
        queues.push(url);
    }
    publish(
        &backend,
        &topic_arn,
        vec![labelled(
            "posted",
            &[("kind", string("card")), ("amount", number("120"))],
        )],
    )
    .await;
    assert_eq!(delivered(&backend, &queues[0], 1).await, ["posted"]);
    assert_eq!(delivered(&backend, &queues[1], 1).await, ["posted"]);
    assert!(delivered(&backend, &queues[2], 0).await.is_empty());
}

async fn exact_string_filter_matches_and_misses<T: Transport>(backend: Backend<T>) {
    let got = filtered(
        &backend,
        "exact",
        r#"{"kind": ["card", "cash"]}"#,
        vec![
            labelled("cheque", &[("kind", string("cheque"))]),
            labelled("no-kind", &[("channel", string("web"))]),
            labelled("card-upper", &[("kind", string("CARD"))]),
            labelled("card", &[("kind", string("card"))]),
            labelled("cash", &[("kind", string("cash"))]),
        ],
        2,
    )
    .await;
    assert_eq!(got, ["card", "cash"]);
}

async fn numeric_exact_and_range_filters_match_and_miss<T: Transport>(backend: Backend<T>) {
    let topic_arn = topic(&backend, "numeric", &[]).await;
    let exact = r#"{"amount": [{"numeric": ["=", 100]}]}"#;
    let range = r#"{"amount": [{"numeric": [">", 10, "<=", 100]}]}"#;
    let (exact_url, _) = subscribed(&backend, &topic_arn, "num-exact", raw_filtered(exact)).await;
    let (range_url, _) = subscribed(&backend, &topic_arn, "num-range", raw_filtered(range)).await;
    let amounts = ["10", "101", "50", "1e2", "100"];
    let publishes = amounts
        .iter()
        .map(|amount| labelled(&format!("amount-{amount}"), &[("amount", number(amount))]))
        .collect();
    publish(&backend, &topic_arn, publishes).await;
    // 1e2 is 100: numbers are compared as numbers, not as text.
    assert_eq!(
        delivered(&backend, &exact_url, 2).await,
        ["amount-100", "amount-1e2"]
    );
    assert_eq!(
        delivered(&backend, &range_url, 3).await,
        ["amount-100", "amount-1e2", "amount-50"]
    );
}

async fn prefix_filter_matches_and_misses<T: Transport>(backend: Backend<T>) {
    let got = filtered(
        &backend,
        "prefix",
        r#"{"region": [{"prefix": "eu-"}]}"#,
        vec![
            labelled("us-east-1", &[("region", string("us-east-1"))]),
            labelled("eu", &[("region", string("eu"))]),
            labelled("eu-west-1", &[("region", string("eu-west-1"))]),
            labelled("eu-central-1", &[("region", string("eu-central-1"))]),
        ],
        2,
    )
    .await;
    assert_eq!(got, ["eu-central-1", "eu-west-1"]);
}

async fn exists_true_and_false_filters_match_and_miss<T: Transport>(backend: Backend<T>) {
    let topic_arn = topic(&backend, "exists", &[]).await;
    let with = r#"{"coupon": [{"exists": true}]}"#;
    let without = r#"{"coupon": [{"exists": false}]}"#;
    let (with_url, _) = subscribed(&backend, &topic_arn, "with-coupon", raw_filtered(with)).await;
    let (without_url, _) = subscribed(
        &backend,
        &topic_arn,
        "without-coupon",
        raw_filtered(without),
    )
    .await;
    // Every publish carries some attribute: the policy is about `coupon` alone.
    publish(
        &backend,
        &topic_arn,
        vec![
            labelled(
                "coupon",
                &[("coupon", string("SAVE10")), ("kind", string("card"))],
            ),
            labelled("plain", &[("kind", string("card"))]),
        ],
    )
    .await;
    assert_eq!(delivered(&backend, &with_url, 1).await, ["coupon"]);
    assert_eq!(delivered(&backend, &without_url, 1).await, ["plain"]);
}

async fn anything_but_filter_matches_and_misses<T: Transport>(backend: Backend<T>) {
    let got = filtered(
        &backend,
        "anything-but",
        r#"{"kind": [{"anything-but": ["cash", "cheque"]}]}"#,
        vec![
            labelled("cash", &[("kind", string("cash"))]),
            labelled("cheque", &[("kind", string("cheque"))]),
            labelled("card", &[("kind", string("card"))]),
            labelled("transfer", &[("kind", string("transfer"))]),
        ],
        2,
    )
    .await;
    assert_eq!(got, ["card", "transfer"]);
}

async fn or_filter_matches_either_branch<T: Transport>(backend: Backend<T>) {
    let got = filtered(
        &backend,
        "or",
        r#"{"$or": [{"kind": ["card"]}, {"amount": [{"numeric": [">", 1000]}]}]}"#,
        vec![
            labelled(
                "small-cash",
                &[("kind", string("cash")), ("amount", number("5"))],
            ),
            labelled(
                "small-card",
                &[("kind", string("card")), ("amount", number("5"))],
            ),
            labelled(
                "large-cash",
                &[("kind", string("cash")), ("amount", number("5000"))],
            ),
        ],
        2,
    )
    .await;
    assert_eq!(got, ["large-cash", "small-card"]);
}

async fn body_scope_filter_matches_nested_keys<T: Transport>(backend: Backend<T>) {
    let topic_arn = topic(&backend, "body", &[]).await;
    let policy = r#"{"order": {"kind": ["card"], "total": [{"numeric": [">=", 100]}]}}"#;
    let delivery = Delivery {
        raw: true,
        policy: Some((policy, FilterPolicyScope::MessageBody)),
    };
    let (url, _) = subscribed(&backend, &topic_arn, "body-orders", delivery).await;
    let large_card = r#"{"order":{"kind":"card","total":120},"id":1}"#;
    let small_card = r#"{"order":{"kind":"card","total":50},"id":2}"#;
    let large_cash = r#"{"order":{"kind":"cash","total":500},"id":3}"#;
    let flat = r#"{"kind":"card","total":120,"id":4}"#;
    let not_json = "card 120";
    publish(
        &backend,
        &topic_arn,
        [small_card, large_cash, flat, not_json, large_card]
            .into_iter()
            .map(Publish::new)
            .collect(),
    )
    .await;
    assert_eq!(delivered(&backend, &url, 1).await, [large_card]);
}

async fn raw_delivery_keeps_the_message_and_enveloped_delivery_wraps_it<T: Transport>(
    backend: Backend<T>,
) {
    let topic_arn = topic(&backend, "delivery", &[]).await;
    let (raw_url, _) = subscribed(&backend, &topic_arn, "raw", RAW).await;
    let (enveloped_url, subscription_arn) =
        subscribed(&backend, &topic_arn, "enveloped", ENVELOPED).await;
    let message = r#"{"amount":120}"#;
    let sent = Publish::new(message)
        .subject("posted")
        .attribute("kind", string("card"))
        .attribute("amount", number("120"))
        .attribute(
            "digest",
            MessageAttributeValue::binary(vec![0xde, 0xad, 0xbe]),
        );
    let published = publish(&backend, &topic_arn, vec![sent.clone()]).await;

    let raw = backend.take_all(&raw_url, 1).await;
    assert_eq!(bodies(&raw), [message]);
    assert_eq!(raw[0].message_attributes, sent.message_attributes);

    let enveloped = backend.take_all(&enveloped_url, 1).await;
    assert_eq!(enveloped.len(), 1);
    assert!(
        enveloped[0].message_attributes.is_empty(),
        "an enveloped delivery carries the attributes in its JSON only"
    );
    let envelope = Envelope::parse(&enveloped[0].body).expect("an SNS envelope");
    assert_eq!(envelope.topic_arn.to_string(), topic_arn);
    assert_eq!(envelope.message_id, published[0].message_id);
    assert_eq!(envelope.message, message);
    assert_eq!(envelope.subject.as_deref(), Some("posted"));
    assert_eq!(envelope.message_attributes, sent.message_attributes);
    assert!(
        envelope.timestamp_millis().is_some(),
        "{}",
        envelope.timestamp
    );
    assert!(
        envelope
            .unsubscribe_url
            .as_deref()
            .is_some_and(|url| url.contains(&subscription_arn)),
        "{:?}",
        envelope.unsubscribe_url
    );
    match backend.kind {
        Kind::InProcess => assert!(envelope.is_unsigned()),
        // LocalStack signs with a key of its own, as SNS does with AWS's.
        Kind::LocalStack => assert!(!envelope.is_unsigned()),
    }
}

async fn a_fifo_topic_keeps_each_groups_order_in_two_fifo_queues<T: Transport>(
    backend: Backend<T>,
) {
    let topic_arn = topic(&backend, "orders.fifo", &[]).await;
    let (first, _) = subscribed(&backend, &topic_arn, "orders-a.fifo", RAW).await;
    let (second, _) = subscribed(&backend, &topic_arn, "orders-b.fifo", ENVELOPED).await;
    // 3 groups × 10, interleaved, in batches of 10.
    let publishes: Vec<Publish> = (0..30)
        .map(|n| {
            let body = format!("g{}-{:02}", n % 3, n / 3);
            Publish::new(&body)
                .group_id(format!("g{}", n % 3))
                .dedup_id(body)
        })
        .collect();
    let published = publish(&backend, &topic_arn, publishes).await;
    assert!(published.iter().all(|p| p.sequence_number.is_some()));
    for (url, raw) in [(&first, true), (&second, false)] {
        let got = backend.take_all(url, 30).await;
        assert_eq!(got.len(), 30);
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for message in &got {
            let body = if raw {
                message.body.clone()
            } else {
                Envelope::parse(&message.body).unwrap().message
            };
            let group = message.group_id().expect("a FIFO delivery has a group id");
            assert!(body.starts_with(&format!("{group}-")), "{body} in {group}");
            groups.entry(group.to_owned()).or_default().push(body);
        }
        assert_eq!(groups.len(), 3);
        for (group, seen) in groups {
            let expected: Vec<String> = (0..10).map(|i| format!("{group}-{i:02}")).collect();
            assert_eq!(seen, expected, "group {group} in order");
        }
    }
}

/// Both store the repeat once. Which id SNS answers a repeat with is not documented ("accepted
/// successfully but not delivered", API_PublishBatchRequestEntry); the account answers the
/// original's, as SQS does, and LocalStack 4.13.1 a new one (a difference, named here).
async fn a_fifo_topic_stores_a_deduplication_id_repeat_once<T: Transport>(backend: Backend<T>) {
    let topic_arn = topic(&backend, "dedup.fifo", &[]).await;
    let (url, _) = subscribed(&backend, &topic_arn, "dedup-q.fifo", RAW).await;
    let first = publish(
        &backend,
        &topic_arn,
        vec![Publish::new("deposit").group_id("acct").dedup_id("dep-1")],
    )
    .await;
    let again = publish(
        &backend,
        &topic_arn,
        vec![Publish::new("deposit again")
            .group_id("acct")
            .dedup_id("dep-1")],
    )
    .await;
    match backend.kind {
        Kind::InProcess => {
            assert_eq!(again[0].message_id, first[0].message_id);
            assert!(again[0].duplicate);
        }
        Kind::LocalStack => assert_ne!(
            again[0].message_id, first[0].message_id,
            "LocalStack answers a repeat with a new id"
        ),
    }
    assert_eq!(
        delivered(&backend, &url, 1).await,
        ["deposit"],
        "stored once"
    );
}

async fn content_based_deduplication_on_a_fifo_topic_ignores_attributes<T: Transport>(
    backend: Backend<T>,
) {
    let topic_arn = topic(
        &backend,
        "content.fifo",
        &[("ContentBasedDeduplication", "true")],
    )
    .await;
    let (url, _) = subscribed(&backend, &topic_arn, "content-q.fifo", RAW).await;
    publish(
        &backend,
        &topic_arn,
        vec![
            Publish::new("same").group_id("g"),
            Publish::new("same")
                .group_id("g")
                .attribute("retry", number("1")),
            Publish::new("other").group_id("g"),
        ],
    )
    .await;
    let got = backend.take_all(&url, 2).await;
    assert_eq!(bodies(&got), ["same", "other"]);
    assert!(got[0].message_attributes.is_empty(), "the first one kept");
}

async fn publish_batch_answers_each_entry<T: Transport>(backend: Backend<T>) {
    let topic_arn = topic(&backend, "batch", &[]).await;
    let (url, _) = subscribed(&backend, &topic_arn, "batch-q", RAW).await;
    let entries = vec![
        PublishBatchEntry::new("ok-1", Publish::new("first")),
        PublishBatchEntry::new(
            "bad-number",
            Publish::new("x").attribute("amount", number("twelve")),
        ),
        PublishBatchEntry::new("bad-subject", Publish::new("x").subject("two\nlines")),
        PublishBatchEntry::new("ok-2", Publish::new("second")),
    ];
    let result = backend
        .transport
        .publish_batch(&topic_arn, entries)
        .await
        .unwrap();
    assert_eq!(answered(&result), ["ok-1", "ok-2"], "{:?}", result.failed);
    assert_eq!(
        failed(&result),
        [
            ("bad-number".to_owned(), ErrorKind::InvalidParameterValue),
            ("bad-subject".to_owned(), ErrorKind::InvalidParameter),
        ]
    );
    assert!(result.failed.iter().all(|failure| failure.sender_fault));
    assert_eq!(delivered(&backend, &url, 2).await, ["first", "second"]);

    // On a FIFO topic without content-based deduplication, an entry without a deduplication id is
    // the service's to refuse (the aws transport cannot know the topic's setting). The account
    // fails that entry alone, as it fails every entry that breaks a publish rule; LocalStack
    // 4.13.1 refuses the whole batch, with the same kind. Which SNS does is not documented
    // (API_PublishBatch lists `InvalidParameter` for the request).
    let fifo_arn = topic(&backend, "batch.fifo", &[]).await;
    let entries = vec![
        PublishBatchEntry::new("with", Publish::new("a").group_id("g").dedup_id("a")),
        PublishBatchEntry::new("without", Publish::new("b").group_id("g")),
    ];
    let answer = backend.transport.publish_batch(&fifo_arn, entries).await;
    match backend.kind {
        Kind::InProcess => {
            let result = answer.unwrap();
            assert_eq!(answered(&result), ["with"], "{:?}", result.failed);
            assert_eq!(
                failed(&result),
                [("without".to_owned(), ErrorKind::InvalidParameter)]
            );
        }
        Kind::LocalStack => assert_eq!(
            answer.unwrap_err().kind(),
            Some(ErrorKind::InvalidParameter),
            "LocalStack refuses the whole batch"
        ),
    }
}

/// The ids of the successful entries, sorted.
fn answered(result: &PublishBatchResult) -> Vec<&str> {
    let mut ok: Vec<&str> = result
        .successful
        .iter()
        .map(|(id, _)| id.as_ref())
        .collect();
    ok.sort_unstable();
    ok
}

/// The failed entries' ids and kinds, sorted by id.
fn failed(result: &PublishBatchResult) -> Vec<(String, ErrorKind)> {
    let mut failed: Vec<(String, ErrorKind)> = result
        .failed
        .iter()
        .map(|failure| (failure.id.to_string(), failure.kind))
        .collect();
    failed.sort_by(|a, b| a.0.cmp(&b.0));
    failed
}

/// SNS takes a publish with any number of attributes (its size is the limit), and sends at most
/// 10 as SQS message attributes to a raw subscription, which SQS would refuse past 10: such a
/// message is discarded for that subscription, and an enveloped one carries them all in its JSON.
/// (<https://docs.aws.amazon.com/sns/latest/dg/sns-message-attributes.html>) The account does
/// so; LocalStack 4.13.1 delivers it to the raw subscription with all 11 (a difference, named
/// here).
async fn more_than_ten_attributes_reach_an_enveloped_subscription_only<T: Transport>(
    backend: Backend<T>,
) {
    let topic_arn = topic(&backend, "attributes", &[]).await;
    let (raw_url, _) = subscribed(&backend, &topic_arn, "attrs-raw", RAW).await;
    let (enveloped_url, _) = subscribed(&backend, &topic_arn, "attrs-env", ENVELOPED).await;
    let attributes: MessageAttributes = (0..11)
        .map(|i| (format!("a{i:02}"), string(&i.to_string())))
        .collect();
    let mut many = Publish::new("many");
    many.message_attributes = attributes.clone();
    publish(&backend, &topic_arn, vec![many, Publish::new("few")]).await;
    let enveloped = backend.take_all(&enveloped_url, 2).await;
    let envelopes: Vec<Envelope> = enveloped
        .iter()
        .map(|message| Envelope::parse(&message.body).unwrap())
        .collect();
    let many = envelopes
        .iter()
        .find(|envelope| envelope.message == "many")
        .expect("the enveloped subscription has it");
    assert_eq!(many.message_attributes, attributes);
    assert_eq!(envelopes.len(), 2);
    match backend.kind {
        Kind::InProcess => assert_eq!(delivered(&backend, &raw_url, 1).await, ["few"]),
        Kind::LocalStack => {
            let raw = backend.take_all(&raw_url, 2).await;
            let many = raw.iter().find(|message| message.body == "many");
            assert_eq!(
                many.map(|message| message.message_attributes.len()),
                Some(11),
                "LocalStack delivers more than 10 attributes raw"
            );
        }
    }
}

// ---- refused requests ------------------------------------------------------------------------

/// SNS requests that break a rule the aws transport checks before the network.
#[derive(Debug, Clone, Copy)]
enum Invalid {
    PublishElevenEntriesInABatch,
    PublishTwoBatchEntriesWithOneId,
    PublishAnEmptyBatch,
    PublishAMessageOverTheSizeLimit,
    PublishToAFifoTopicWithoutAGroupId,
    PublishADeduplicationIdToAStandardTopic,
    PublishAnEmptyMessage,
    PublishANumberAttributeThatIsNoNumber,
    CreateATopicWithABadName,
    CreateAStandardTopicNamedDotFifo,
    SubscribeAFifoQueueToAStandardTopic,
    SubscribeWithAnUnknownProtocol,
    SubscribeWithABadFilterPolicy,
}

const INVALID: [Invalid; 13] = [
    Invalid::PublishElevenEntriesInABatch,
    Invalid::PublishTwoBatchEntriesWithOneId,
    Invalid::PublishAnEmptyBatch,
    Invalid::PublishAMessageOverTheSizeLimit,
    Invalid::PublishToAFifoTopicWithoutAGroupId,
    Invalid::PublishADeduplicationIdToAStandardTopic,
    Invalid::PublishAnEmptyMessage,
    Invalid::PublishANumberAttributeThatIsNoNumber,
    Invalid::CreateATopicWithABadName,
    Invalid::CreateAStandardTopicNamedDotFifo,
    Invalid::SubscribeAFifoQueueToAStandardTopic,
    Invalid::SubscribeWithAnUnknownProtocol,
    Invalid::SubscribeWithABadFilterPolicy,
];

/// Where the invalid requests go: existing topics and queues of the backend.
struct Targets {
    standard_topic: String,
    fifo_topic: String,
    fifo_queue_arn: String,
    queue_arn: String,
}

impl Targets {
    async fn of<T: Transport>(backend: &Backend<T>) -> Self {
        let fifo_queue = backend.queue("refused-q.fifo", &[]).await;
        let queue = backend.queue("refused-q", &[]).await;
        Self {
            standard_topic: topic(backend, "refused", &[]).await,
            fifo_topic: topic(backend, "refused.fifo", &[]).await,
            fifo_queue_arn: backend.arn(&fifo_queue).await,
            queue_arn: backend.arn(&queue).await,
        }
    }
}

const OVERSIZE: usize = 262_145;

impl Invalid {
    /// The error kind Amazon SNS answers.
    fn kind(self) -> ErrorKind {
        match self {
            Self::PublishElevenEntriesInABatch => ErrorKind::TooManyEntriesInBatchRequest,
            Self::PublishTwoBatchEntriesWithOneId => ErrorKind::BatchEntryIdsNotDistinct,
            Self::PublishAnEmptyBatch => ErrorKind::EmptyBatchRequest,
            Self::PublishAMessageOverTheSizeLimit => ErrorKind::BatchRequestTooLong,
            Self::PublishANumberAttributeThatIsNoNumber => ErrorKind::InvalidParameterValue,
            Self::PublishToAFifoTopicWithoutAGroupId
            | Self::PublishADeduplicationIdToAStandardTopic
            | Self::PublishAnEmptyMessage
            | Self::CreateATopicWithABadName
            | Self::CreateAStandardTopicNamedDotFifo
            | Self::SubscribeAFifoQueueToAStandardTopic
            | Self::SubscribeWithAnUnknownProtocol
            | Self::SubscribeWithABadFilterPolicy => ErrorKind::InvalidParameter,
        }
    }

    /// What LocalStack 4.13.1 answers through the plain SDK (`None`: it accepts the request),
    /// where it differs from SNS.
    fn localstack_answer(self) -> Option<ErrorKind> {
        match self {
            // SNS documents `EmptyBatchRequest` for PublishBatch; LocalStack fails on its side.
            Self::PublishAnEmptyBatch => Some(ErrorKind::InternalError),
            // LocalStack checks no attribute value (SNS refuses a `Number` that is no number).
            Self::PublishANumberAttributeThatIsNoNumber => None,
            _ => Some(self.kind()),
        }
    }

    /// The request through a [`Transport`]; a failed entry of a batch counts as the refusal.
    async fn through<T: Transport>(self, transport: &T, at: &Targets) -> TransportError {
        let one = |publish: Publish| vec![PublishBatchEntry::new("e0", publish)];
        let many = |ids: &[&str]| {
            ids.iter()
                .map(|id| PublishBatchEntry::new(*id, Publish::new("x")))
                .collect::<Vec<_>>()
        };
        let eleven: Vec<String> = (0..11).map(|i| format!("e{i}")).collect();
        let eleven: Vec<&str> = eleven.iter().map(String::as_str).collect();
        let published = |result: Result<PublishBatchResult, TransportError>| match result {
            Err(error) => Some(error),
            Ok(mut result) => result
                .failed
                .pop()
                .map(|failure| TransportError::service(failure.kind, failure.message)),
        };
        let standard = at.standard_topic.as_str();
        let refused = match self {
            Self::PublishElevenEntriesInABatch => {
                published(transport.publish_batch(standard, many(&eleven)).await)
            }
            Self::PublishTwoBatchEntriesWithOneId => {
                published(transport.publish_batch(standard, many(&["a", "a"])).await)
            }
            Self::PublishAnEmptyBatch => published(transport.publish_batch(standard, vec![]).await),
            Self::PublishAMessageOverTheSizeLimit => published(
                transport
                    .publish_batch(standard, one(Publish::new("x".repeat(OVERSIZE))))
                    .await,
            ),
            Self::PublishToAFifoTopicWithoutAGroupId => published(
                transport
                    .publish_batch(&at.fifo_topic, one(Publish::new("x").dedup_id("d")))
                    .await,
            ),
            Self::PublishADeduplicationIdToAStandardTopic => published(
                transport
                    .publish_batch(standard, one(Publish::new("x").dedup_id("d")))
                    .await,
            ),
            Self::PublishAnEmptyMessage => published(
                transport
                    .publish_batch(standard, one(Publish::new("")))
                    .await,
            ),
            Self::PublishANumberAttributeThatIsNoNumber => published(
                transport
                    .publish_batch(
                        standard,
                        one(Publish::new("x").attribute("amount", number("twelve"))),
                    )
                    .await,
            ),
            Self::CreateATopicWithABadName => transport
                .create_topic("bad name", TopicAttributes::new())
                .await
                .err(),
            Self::CreateAStandardTopicNamedDotFifo => transport
                .create_topic("plain.fifo", TopicAttributes::new())
                .await
                .err(),
            Self::SubscribeAFifoQueueToAStandardTopic => transport
                .subscribe(Subscribe::sqs(standard, &at.fifo_queue_arn))
                .await
                .err(),
            Self::SubscribeWithAnUnknownProtocol => {
                let mut request = Subscribe::sqs(standard, &at.queue_arn);
                request.protocol = "carrier-pigeon".to_owned();
                transport.subscribe(request).await.err()
            }
            Self::SubscribeWithABadFilterPolicy => transport
                .subscribe(
                    Subscribe::sqs(standard, &at.queue_arn)
                        .attribute("FilterPolicy", r#"{"kind": "card"}"#),
                )
                .await
                .err(),
        };
        refused.unwrap_or_else(|| panic!("{self:?} was accepted"))
    }

    /// The request with the plain SDK client; answers the server's error code (a single
    /// `Publish` where the transport's is a batch of one), `None` when the server accepted it.
    async fn through_sdk(self, client: &aws_sdk_sns::Client, at: &Targets) -> Option<String> {
        use aws_sdk_sns::types::{MessageAttributeValue as SdkAttribute, PublishBatchRequestEntry};
        let entries = |ids: &[&str]| {
            ids.iter()
                .map(|id| {
                    PublishBatchRequestEntry::builder()
                        .id(*id)
                        .message("x")
                        .build()
                        .unwrap()
                })
                .collect::<Vec<_>>()
        };
        let batch = |entries: Vec<PublishBatchRequestEntry>| {
            client
                .publish_batch()
                .topic_arn(&at.standard_topic)
                .set_publish_batch_request_entries(Some(entries))
                .send()
        };
        let eleven: Vec<String> = (0..11).map(|i| format!("e{i}")).collect();
        let eleven: Vec<&str> = eleven.iter().map(String::as_str).collect();
        let publish = |topic: &str| client.publish().topic_arn(topic);
        match self {
            Self::PublishElevenEntriesInABatch => code(batch(entries(&eleven)).await),
            Self::PublishTwoBatchEntriesWithOneId => code(batch(entries(&["a", "a"])).await),
            Self::PublishAnEmptyBatch => code(batch(vec![]).await),
            Self::PublishAMessageOverTheSizeLimit => {
                let entry = PublishBatchRequestEntry::builder()
                    .id("e0")
                    .message("x".repeat(OVERSIZE))
                    .build()
                    .unwrap();
                code(batch(vec![entry]).await)
            }
            Self::PublishToAFifoTopicWithoutAGroupId => code(
                publish(&at.fifo_topic)
                    .message("x")
                    .message_deduplication_id("d")
                    .send()
                    .await,
            ),
            Self::PublishADeduplicationIdToAStandardTopic => code(
                publish(&at.standard_topic)
                    .message("x")
                    .message_deduplication_id("d")
                    .send()
                    .await,
            ),
            Self::PublishAnEmptyMessage => {
                code(publish(&at.standard_topic).message("").send().await)
            }
            Self::PublishANumberAttributeThatIsNoNumber => code(
                publish(&at.standard_topic)
                    .message("x")
                    .message_attributes(
                        "amount",
                        SdkAttribute::builder()
                            .data_type("Number")
                            .string_value("twelve")
                            .build()
                            .unwrap(),
                    )
                    .send()
                    .await,
            ),
            Self::CreateATopicWithABadName => {
                code(client.create_topic().name("bad name").send().await)
            }
            Self::CreateAStandardTopicNamedDotFifo => {
                code(client.create_topic().name("plain.fifo").send().await)
            }
            Self::SubscribeAFifoQueueToAStandardTopic => code(
                client
                    .subscribe()
                    .topic_arn(&at.standard_topic)
                    .protocol("sqs")
                    .endpoint(&at.fifo_queue_arn)
                    .send()
                    .await,
            ),
            Self::SubscribeWithAnUnknownProtocol => code(
                client
                    .subscribe()
                    .topic_arn(&at.standard_topic)
                    .protocol("carrier-pigeon")
                    .endpoint(&at.queue_arn)
                    .send()
                    .await,
            ),
            Self::SubscribeWithABadFilterPolicy => code(
                client
                    .subscribe()
                    .topic_arn(&at.standard_topic)
                    .protocol("sqs")
                    .endpoint(&at.queue_arn)
                    .attributes("FilterPolicy", r#"{"kind": "card"}"#)
                    .send()
                    .await,
            ),
        }
    }
}

/// The error code of a refused SDK call, `None` when it was accepted.
fn code<O, E, R>(result: Result<O, aws_sdk_sns::error::SdkError<E, R>>) -> Option<String>
where
    E: aws_sdk_sns::error::ProvideErrorMetadata,
{
    use aws_sdk_sns::error::ProvideErrorMetadata;
    let error = result.err()?;
    Some(error.code().unwrap_or("(no code)").to_owned())
}

/// SNS's codes as the model's kinds: the ones `ErrorKind::from_code` reads, and SNS's own
/// spelling of `InvalidParameterValue`.
fn kind_of(code: &str) -> Option<ErrorKind> {
    match code {
        "ParameterValueInvalid" => Some(ErrorKind::InvalidParameterValue),
        other => ErrorKind::from_code(other),
    }
}

async fn invalid_sns_requests_fail_with_the_same_error_kinds<T: Transport>(backend: Backend<T>) {
    let targets = Targets::of(&backend).await;
    for invalid in INVALID {
        let error = invalid.through(&backend.transport, &targets).await;
        assert_eq!(error.kind(), Some(invalid.kind()), "{invalid:?}: {error}");
    }
}

/// The aws transport checks SNS's rules before the network: pointed at a closed port, it answers
/// every invalid request with the rule's error kind, while a valid request finds the port closed
/// and says it was calling SNS there.
#[tokio::test]
async fn the_aws_transport_refuses_invalid_sns_requests_before_the_network() {
    let closed = SqsBroker::aws()
        .endpoint("http://127.0.0.1:9")
        .region("us-east-1")
        .test_credentials()
        .transport()
        .await
        .unwrap();
    let targets = Targets {
        standard_topic: "arn:aws:sns:us-east-1:000000000000:refused".to_owned(),
        fifo_topic: "arn:aws:sns:us-east-1:000000000000:refused.fifo".to_owned(),
        fifo_queue_arn: "arn:aws:sqs:us-east-1:000000000000:refused-q.fifo".to_owned(),
        queue_arn: "arn:aws:sqs:us-east-1:000000000000:refused-q".to_owned(),
    };
    for invalid in INVALID {
        let error = invalid.through(&closed, &targets).await;
        assert!(
            matches!(&error, TransportError::Service { kind, .. } if *kind == invalid.kind()),
            "{invalid:?}: {error:?}"
        );
    }
    let valid = closed
        .get_topic_attributes(&targets.standard_topic)
        .await
        .unwrap_err();
    assert!(
        matches!(&valid, TransportError::Unavailable { message }
            if message.contains("SNS at http://127.0.0.1:9")),
        "a valid request goes to the network, and nothing listens there: {valid:?}"
    );
}

/// What LocalStack itself answers to the invalid requests, through the plain SDK client (no rules
/// of this project in the way), is the error kind the rules give, but for the named differences.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localstack_refuses_invalid_sns_requests_with_the_error_kinds_of_the_rules() {
    let Some(backend) = Backend::live().await else {
        return;
    };
    let endpoint = rust_stream::testing::live_endpoint("live test").unwrap();
    let config = aws_sdk_sns::Config::builder()
        .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_sdk_sns::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sns::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .build();
    let client = aws_sdk_sns::Client::from_conf(config);
    let targets = Targets::of(&backend).await;
    let mut answers = Vec::new();
    for invalid in INVALID {
        let code = invalid.through_sdk(&client, &targets).await;
        let kind = code.as_deref().and_then(kind_of);
        answers.push((invalid, kind, code));
    }
    let unexpected: Vec<_> = answers
        .iter()
        .filter(|(invalid, kind, _)| *kind != invalid.localstack_answer())
        .collect();
    assert!(
        unexpected.is_empty(),
        "LocalStack answered otherwise: {unexpected:#?}"
    );
}

// ---- topics and subscriptions ----------------------------------------------------------------

async fn missing_topics_and_subscriptions_are_not_found<T: Transport>(backend: Backend<T>) {
    let existing = topic(&backend, "present", &[]).await;
    let missing = existing.replace("present", "absent");
    let queue = backend.queue("lonely", &[]).await;
    let queue_arn = backend.arn(&queue).await;
    let errors = [
        backend
            .transport
            .get_topic_attributes(&missing)
            .await
            .map(drop),
        backend
            .transport
            .publish_batch(
                &missing,
                vec![PublishBatchEntry::new("e0", Publish::new("x"))],
            )
            .await
            .map(drop),
        backend
            .transport
            .subscribe(Subscribe::sqs(&missing, &queue_arn))
            .await
            .map(drop),
        backend
            .transport
            .list_subscriptions_by_topic(&missing)
            .await
            .map(drop),
        backend
            .transport
            .get_subscription_attributes(&format!(
                "{existing}:00000000-0000-4000-8000-000000000000"
            ))
            .await
            .map(drop),
    ];
    for (i, error) in errors.into_iter().enumerate() {
        let error = error.expect_err("no such topic or subscription");
        assert_eq!(error.kind(), Some(ErrorKind::NotFound), "call {i}: {error}");
    }
}

async fn create_topic_is_idempotent_and_reads_back_its_attributes<T: Transport>(
    backend: Backend<T>,
) {
    let name = backend.name("again.fifo");
    let attributes: TopicAttributes = [
        ("FifoTopic".to_owned(), "true".to_owned()),
        ("ContentBasedDeduplication".to_owned(), "true".to_owned()),
    ]
    .into();
    let first = backend
        .transport
        .create_topic(&name, attributes.clone())
        .await
        .unwrap();
    let again = backend
        .transport
        .create_topic(&name, attributes)
        .await
        .unwrap();
    assert_eq!(again, first);
    assert!(first.ends_with(&format!(":{name}")), "{first}");
    let read = backend
        .transport
        .get_topic_attributes(&first)
        .await
        .unwrap();
    assert_eq!(read["TopicArn"], first);
    assert_eq!(read["FifoTopic"], "true");
    assert_eq!(read["ContentBasedDeduplication"], "true");

    let standard = topic(&backend, "again", &[]).await;
    let read = backend
        .transport
        .get_topic_attributes(&standard)
        .await
        .unwrap();
    assert_eq!(read["TopicArn"], standard);
    assert!(
        read.get("FifoTopic").is_none_or(|fifo| fifo == "false"),
        "{read:?}"
    );
}

async fn subscribing_twice_answers_the_same_subscription<T: Transport>(backend: Backend<T>) {
    let topic_arn = topic(&backend, "twice", &[]).await;
    let url = backend.queue("twice-q", &[]).await;
    let queue_arn = backend.arn(&url).await;
    let policy = r#"{"kind": ["card"]}"#;
    let request = subscription(&topic_arn, &queue_arn, raw_filtered(policy));
    let first = backend.transport.subscribe(request.clone()).await.unwrap();
    let again = backend.transport.subscribe(request).await.unwrap();
    assert_eq!(again, first);
    assert!(first.starts_with(&format!("{topic_arn}:")), "{first}");
    let listed = backend
        .transport
        .list_subscriptions_by_topic(&topic_arn)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].subscription_arn, first);
    assert_eq!(listed[0].topic_arn, topic_arn);
    assert_eq!(listed[0].protocol, "sqs");
    assert_eq!(listed[0].endpoint, queue_arn);
}

async fn subscription_attributes_read_back<T: Transport>(backend: Backend<T>) {
    let topic_arn = topic(&backend, "read-back", &[]).await;
    let policy = r#"{"order": {"kind": ["card"]}}"#;
    let delivery = Delivery {
        raw: true,
        policy: Some((policy, FilterPolicyScope::MessageBody)),
    };
    let (url, subscription_arn) = subscribed(&backend, &topic_arn, "read-back-q", delivery).await;
    let queue_arn = backend.arn(&url).await;
    let read = backend
        .transport
        .get_subscription_attributes(&subscription_arn)
        .await
        .unwrap();
    assert_eq!(read["RawMessageDelivery"], "true");
    assert_eq!(read["FilterPolicyScope"], "MessageBody");
    let read_policy: serde_json::Value = serde_json::from_str(&read["FilterPolicy"]).unwrap();
    assert_eq!(
        read_policy,
        serde_json::from_str::<serde_json::Value>(policy).unwrap()
    );
    assert_eq!(read["SubscriptionArn"], subscription_arn);
    assert_eq!(read["TopicArn"], topic_arn);
    assert_eq!(read["Protocol"], "sqs");
    assert_eq!(read["Endpoint"], queue_arn);

    let (_, plain) = subscribed(&backend, &topic_arn, "read-back-plain", ENVELOPED).await;
    let read = backend
        .transport
        .get_subscription_attributes(&plain)
        .await
        .unwrap();
    assert_eq!(read["RawMessageDelivery"], "false");
    assert!(!read.contains_key("FilterPolicy"), "{read:?}");
}

/// SNS lists 100 subscriptions a page; the transport follows `NextToken` to the last one. (The
/// queues need not exist: SNS takes a subscription of any queue ARN.)
async fn listing_subscriptions_follows_every_page<T: Transport>(backend: Backend<T>) {
    let topic_arn = topic(&backend, "pages", &[]).await;
    let url = backend.queue("pages-q", &[]).await;
    let queue_arn = backend.arn(&url).await;
    let mut endpoints = Vec::new();
    for i in 0..105 {
        let endpoint = format!("{queue_arn}-{i:03}");
        backend
            .transport
            .subscribe(Subscribe::sqs(&topic_arn, &endpoint))
            .await
            .unwrap();
        endpoints.push(endpoint);
    }
    let mut listed: Vec<String> = backend
        .transport
        .list_subscriptions_by_topic(&topic_arn)
        .await
        .unwrap()
        .into_iter()
        .map(|subscription| subscription.endpoint)
        .collect();
    listed.sort();
    assert_eq!(listed, endpoints);
}
