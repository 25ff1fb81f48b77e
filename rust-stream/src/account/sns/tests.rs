//! The account's SNS operations, on a paused clock: fan-out through filter policies, raw and
//! enveloped deliveries, FIFO topics into FIFO queues, deduplication, and every refusal.

use std::time::Duration;

use super::*;
use crate::model::envelope::Envelope;
use crate::model::topic::{PublishBatchEntry, DEDUP_WINDOW};
use crate::transport::{MessageAttributeValue, ReceiveMessage, ReceivedMessage};

/// Everything visible in the queue, attributes of both kinds included, taken for a minute.
async fn drain(account: &Account, url: &str) -> Vec<ReceivedMessage> {
    let mut all = Vec::new();
    loop {
        let request = ReceiveMessage::new(10)
            .system_attribute_names(["All"])
            .message_attribute_names(["All"])
            .visibility_timeout(60);
        let received = account.receive_message(url, request).await.unwrap();
        if received.is_empty() {
            return all;
        }
        for message in &received {
            account
                .delete_message(url, &message.receipt_handle)
                .await
                .unwrap();
        }
        all.extend(received);
    }
}

fn bodies(messages: &[ReceivedMessage]) -> Vec<&str> {
    messages.iter().map(|m| m.body.as_str()).collect()
}

/// A queue subscribed to `topic`, raw or not, with these extra subscription attributes.
async fn subscribed(
    account: &Account,
    topic: &str,
    queue: &str,
    raw: bool,
    attributes: &[(&str, &str)],
) -> String {
    let url = if queue.ends_with(".fifo") {
        account.create_fifo_queue(queue).await.unwrap()
    } else {
        account.create_standard_queue(queue).await.unwrap()
    };
    let mut request = Subscribe::sqs(topic, account.queue_arn_for(queue)).raw_message_delivery(raw);
    for (name, value) in attributes {
        request = request.attribute(*name, *value);
    }
    account.subscribe(request).await.unwrap();
    url
}

#[tokio::test(start_paused = true)]
async fn a_publish_reaches_exactly_the_queues_whose_filter_policy_matches() {
    let account = Account::new();
    let topic = account
        .create_topic("payments-posted", TopicAttributes::new())
        .await
        .unwrap();
    assert_eq!(topic, account.topic_arn_for("payments-posted"));
    let everything = subscribed(&account, &topic, "audit", true, &[]).await;
    let cards = subscribed(
        &account,
        &topic,
        "cards",
        true,
        &[("FilterPolicy", r#"{"kind": ["card"]}"#)],
    )
    .await;
    let large = subscribed(
        &account,
        &topic,
        "large",
        true,
        &[
            ("FilterPolicy", r#"{"amount": [{"numeric": [">=", 1000]}]}"#),
            ("FilterPolicyScope", "MessageBody"),
        ],
    )
    .await;

    let card =
        Publish::new(r#"{"amount": 120}"#).attribute("kind", MessageAttributeValue::string("card"));
    let published = account.publish(&topic, card).await.unwrap();
    assert!(!published.duplicate && published.sequence_number.is_none());

    assert_eq!(
        bodies(&drain(&account, &everything).await),
        [r#"{"amount": 120}"#]
    );
    assert_eq!(
        bodies(&drain(&account, &cards).await),
        [r#"{"amount": 120}"#]
    );
    assert!(
        drain(&account, &large).await.is_empty(),
        "an amount of 120 does not pass the body filter"
    );

    let subscriptions = account.list_subscriptions_by_topic(&topic).await.unwrap();
    let endpoints: Vec<_> = subscriptions.iter().map(|s| s.endpoint.as_str()).collect();
    assert_eq!(
        endpoints,
        ["audit", "cards", "large"].map(|name| account.queue_arn_for(name))
    );
    let attributes = account
        .get_subscription_attributes(&subscriptions[2].subscription_arn)
        .await
        .unwrap();
    assert_eq!(attributes["FilterPolicyScope"], "MessageBody");
    assert_eq!(attributes["RawMessageDelivery"], "true");
    assert_eq!(attributes["TopicArn"], topic);
    let topic_attributes = account.get_topic_attributes(&topic).await.unwrap();
    assert_eq!(topic_attributes["SubscriptionsConfirmed"], "3");
    assert!(!topic_attributes.contains_key("FifoTopic"));
}

#[tokio::test(start_paused = true)]
async fn raw_deliveries_carry_the_attributes_and_enveloped_ones_carry_them_in_the_envelope() {
    let account = Account::new();
    let topic = account
        .create_topic("events", TopicAttributes::new())
        .await
        .unwrap();
    let raw = subscribed(&account, &topic, "raw", true, &[]).await;
    let enveloped = subscribed(&account, &topic, "enveloped", false, &[]).await;
    let publish = Publish::new("posted")
        .subject("payments")
        .attribute("kind", MessageAttributeValue::string("card"))
        .attribute("amount", MessageAttributeValue::number("120.5"))
        .attribute("digest", MessageAttributeValue::binary(vec![0xde, 0xad]));
    let published = account.publish(&topic, publish.clone()).await.unwrap();

    let raw = drain(&account, &raw).await;
    assert_eq!(bodies(&raw), ["posted"]);
    assert_eq!(raw[0].message_attributes, publish.message_attributes);

    let enveloped = drain(&account, &enveloped).await;
    assert_eq!(enveloped.len(), 1);
    assert!(
        enveloped[0].message_attributes.is_empty(),
        "an enveloped delivery's attributes are in its body"
    );
    let envelope = Envelope::parse(&enveloped[0].body).unwrap();
    assert_eq!(envelope.message, "posted");
    assert_eq!(envelope.subject.as_deref(), Some("payments"));
    assert_eq!(envelope.message_id, published.message_id);
    assert_eq!(envelope.topic_arn.to_string(), topic);
    assert_eq!(envelope.message_attributes, publish.message_attributes);
    assert!(envelope.is_unsigned());
    assert_eq!(envelope.sequence_number, None);
    let subscriptions = account.list_subscriptions_by_topic(&topic).await.unwrap();
    assert!(envelope
        .unsubscribe_url
        .unwrap()
        .ends_with(&subscriptions[1].subscription_arn));
}

#[tokio::test(start_paused = true)]
async fn a_fifo_topic_keeps_each_groups_order_into_every_fifo_queue() {
    let account = Account::new();
    let topic = account
        .create_fifo_topic("ledger.fifo", false)
        .await
        .unwrap();
    let raw = subscribed(&account, &topic, "raw.fifo", true, &[]).await;
    let enveloped = subscribed(&account, &topic, "enveloped.fifo", false, &[]).await;
    // Interleaved across groups, in batches that cut across them.
    let publishes: Vec<(String, String)> = (0..20)
        .flat_map(|n| ["a", "b", "c"].map(|group| (group.to_owned(), format!("{group}-{n}"))))
        .collect();
    let mut sequence_numbers = Vec::new();
    for chunk in publishes.chunks(7) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, (group, body))| {
                let publish = Publish::new(body.as_str()).group_id(group).dedup_id(body);
                PublishBatchEntry::new(i.to_string(), publish)
            })
            .collect();
        let result = account.publish_batch(&topic, entries).await.unwrap();
        assert!(result.failed.is_empty(), "{:?}", result.failed);
        sequence_numbers.extend(
            result
                .successful
                .into_iter()
                .map(|(_, p)| p.sequence_number.unwrap()),
        );
    }
    let mut sorted = sequence_numbers.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        sorted, sequence_numbers,
        "a FIFO topic's sequence numbers increase"
    );

    for (url, raw) in [(raw, true), (enveloped, false)] {
        let received = drain(&account, &url).await;
        assert_eq!(received.len(), 60);
        for group in ["a", "b", "c"] {
            let in_group: Vec<String> = received
                .iter()
                .filter(|m| m.group_id() == Some(group))
                .map(|m| {
                    if raw {
                        m.body.clone()
                    } else {
                        Envelope::parse(&m.body).unwrap().message
                    }
                })
                .collect();
            let sent: Vec<String> = (0..20).map(|n| format!("{group}-{n}")).collect();
            assert_eq!(in_group, sent, "group {group} in order");
        }
        assert!(received.iter().all(|m| m.dedup_id().is_some()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_repeated_dedup_id_is_accepted_once_within_five_minutes_and_again_after() {
    let account = Account::new();
    let topic = account
        .create_fifo_topic("orders.fifo", false)
        .await
        .unwrap();
    let queue = subscribed(&account, &topic, "orders.fifo", true, &[]).await;
    let publish = |body: &str| Publish::new(body).group_id("g").dedup_id("order-1");

    let first = account.publish(&topic, publish("first")).await.unwrap();
    tokio::time::advance(DEDUP_WINDOW - Duration::from_secs(1)).await;
    let repeat = account.publish(&topic, publish("repeat")).await.unwrap();
    assert!(repeat.duplicate);
    assert_eq!(
        (&repeat.message_id, &repeat.sequence_number),
        (&first.message_id, &first.sequence_number),
        "a repeat is answered with the original's id and sequence number"
    );
    assert_eq!(bodies(&drain(&account, &queue).await), ["first"]);

    tokio::time::advance(Duration::from_secs(2)).await;
    let later = account.publish(&topic, publish("later")).await.unwrap();
    assert!(!later.duplicate);
    assert_ne!(later.message_id, first.message_id);
    assert_eq!(bodies(&drain(&account, &queue).await), ["later"]);
}

#[tokio::test(start_paused = true)]
async fn content_based_deduplication_drops_a_repeated_message_whatever_its_attributes() {
    let account = Account::new();
    let topic = account
        .create_fifo_topic("posted.fifo", true)
        .await
        .unwrap();
    let queue = subscribed(&account, &topic, "posted.fifo", true, &[]).await;
    let attributes = account.get_topic_attributes(&topic).await.unwrap();
    assert_eq!(
        (
            &attributes["FifoTopic"][..],
            &attributes["ContentBasedDeduplication"][..]
        ),
        ("true", "true")
    );
    let first = account
        .publish(&topic, Publish::new("same").group_id("g"))
        .await
        .unwrap();
    let again = Publish::new("same")
        .group_id("h")
        .attribute("kind", MessageAttributeValue::string("other"));
    let again = account.publish(&topic, again).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.message_id, first.message_id);
    account
        .publish(&topic, Publish::new("different").group_id("g"))
        .await
        .unwrap();
    assert_eq!(
        bodies(&drain(&account, &queue).await),
        ["same", "different"]
    );
}

#[tokio::test(start_paused = true)]
async fn every_refused_publish_has_snss_error_kind_and_delivers_nothing() {
    let account = Account::new();
    let standard = account
        .create_topic("standard", TopicAttributes::new())
        .await
        .unwrap();
    let fifo = account.create_fifo_topic("fifo.fifo", false).await.unwrap();
    let standard_queue = subscribed(&account, &standard, "standard-queue", false, &[]).await;
    let fifo_queue = subscribed(&account, &fifo, "fifo-queue.fifo", false, &[]).await;
    let kind = |result: Result<Published, TransportError>| result.unwrap_err().kind();

    let too_large = Publish::new("x".repeat(262_145));
    assert_eq!(
        kind(account.publish(&standard, too_large).await),
        Some(ErrorKind::InvalidParameter)
    );
    let bad_attribute =
        Publish::new("m").attribute("amount", MessageAttributeValue::number("twelve"));
    assert_eq!(
        kind(account.publish(&standard, bad_attribute).await),
        Some(ErrorKind::InvalidParameterValue)
    );
    let no_group = Publish::new("m").dedup_id("d");
    assert_eq!(
        kind(account.publish(&fifo, no_group).await),
        Some(ErrorKind::InvalidParameter)
    );
    let no_dedup = Publish::new("m").group_id("g");
    assert_eq!(
        kind(account.publish(&fifo, no_dedup).await),
        Some(ErrorKind::InvalidParameter)
    );
    let dedup_on_standard = Publish::new("m").dedup_id("d");
    assert_eq!(
        kind(account.publish(&standard, dedup_on_standard).await),
        Some(ErrorKind::InvalidParameter)
    );
    let missing = account.topic_arn_for("missing");
    assert_eq!(
        kind(account.publish(&missing, Publish::new("m")).await),
        Some(ErrorKind::NotFound)
    );

    let batch_kind =
        |result: Result<PublishBatchResult, TransportError>| result.unwrap_err().kind();
    let entries = |ids: &[&str]| -> Vec<PublishBatchEntry> {
        ids.iter()
            .map(|id| PublishBatchEntry::new(*id, Publish::new("m")))
            .collect()
    };
    let eleven: Vec<String> = (0..11).map(|n| n.to_string()).collect();
    let eleven: Vec<&str> = eleven.iter().map(String::as_str).collect();
    assert_eq!(
        batch_kind(account.publish_batch(&standard, entries(&eleven)).await),
        Some(ErrorKind::TooManyEntriesInBatchRequest)
    );
    assert_eq!(
        batch_kind(account.publish_batch(&standard, entries(&["a", "a"])).await),
        Some(ErrorKind::BatchEntryIdsNotDistinct)
    );
    assert_eq!(
        batch_kind(account.publish_batch(&standard, Vec::new()).await),
        Some(ErrorKind::EmptyBatchRequest)
    );
    let heavy = vec![
        PublishBatchEntry::new("a", Publish::new("x".repeat(200_000))),
        PublishBatchEntry::new("b", Publish::new("x".repeat(200_000))),
    ];
    assert_eq!(
        batch_kind(account.publish_batch(&standard, heavy).await),
        Some(ErrorKind::BatchRequestTooLong)
    );
    // Within a batch, a bad entry fails alone.
    let mixed = vec![
        PublishBatchEntry::new("good", Publish::new("kept")),
        PublishBatchEntry::new("bad", Publish::new("m").dedup_id("d")),
    ];
    let result = account.publish_batch(&standard, mixed).await.unwrap();
    assert_eq!(result.successful.len(), 1);
    assert_eq!(
        (result.failed[0].id.as_ref(), result.failed[0].kind),
        ("bad", ErrorKind::InvalidParameter)
    );

    assert_eq!(
        bodies(&drain(&account, &fifo_queue).await),
        Vec::<&str>::new()
    );
    let delivered = drain(&account, &standard_queue).await;
    assert_eq!(delivered.len(), 1, "only the good entry was delivered");
    assert_eq!(Envelope::parse(&delivered[0].body).unwrap().message, "kept");
}

#[tokio::test(start_paused = true)]
async fn topics_and_subscriptions_are_idempotent_and_refuse_what_sns_refuses() {
    let account = Account::new();
    let fifo = account.create_fifo_topic("t.fifo", false).await.unwrap();
    assert_eq!(
        account.create_fifo_topic("t.fifo", false).await.unwrap(),
        fifo
    );
    let kind = |result: Result<String, TransportError>| result.unwrap_err().kind();
    assert_eq!(
        kind(account.create_fifo_topic("t.fifo", true).await),
        Some(ErrorKind::InvalidParameter),
        "the same name with other attributes"
    );
    let standard_named_fifo = TopicAttributes::from([("FifoTopic".to_owned(), "false".to_owned())]);
    assert_eq!(
        kind(account.create_topic("u.fifo", standard_named_fifo).await),
        Some(ErrorKind::InvalidParameter)
    );
    let standard = account
        .create_topic("t", TopicAttributes::new())
        .await
        .unwrap();

    let queue = account.queue_arn_for("q.fifo");
    let first = account
        .subscribe(Subscribe::sqs(&fifo, &queue).raw_message_delivery(true))
        .await
        .unwrap();
    let again = account
        .subscribe(Subscribe::sqs(&fifo, &queue).attribute("RawMessageDelivery", "True"))
        .await
        .unwrap();
    assert_eq!(
        again, first,
        "the same queue and attributes: the same subscription"
    );
    assert_eq!(
        kind(
            account
                .subscribe(Subscribe::sqs(&fifo, &queue).raw_message_delivery(false))
                .await
        ),
        Some(ErrorKind::InvalidParameter),
        "the same queue with other attributes"
    );
    assert_eq!(
        kind(account.subscribe(Subscribe::sqs(&standard, &queue)).await),
        Some(ErrorKind::InvalidParameter),
        "a FIFO queue on a standard topic"
    );
    let bad_policy = Subscribe::sqs(&standard, account.queue_arn_for("q"))
        .attribute("FilterPolicy", r#"{"kind": "card"}"#);
    assert_eq!(
        kind(account.subscribe(bad_policy).await),
        Some(ErrorKind::InvalidParameter)
    );
    let mut email = Subscribe::sqs(&standard, "someone@example.com");
    email.protocol = "email".to_owned();
    assert_eq!(
        kind(account.subscribe(email).await),
        Some(ErrorKind::UnsupportedOperation)
    );
    let missing_topic = Subscribe::sqs(account.topic_arn_for("none"), account.queue_arn_for("q"));
    assert_eq!(
        kind(account.subscribe(missing_topic).await),
        Some(ErrorKind::NotFound)
    );
    assert_eq!(
        account
            .list_subscriptions_by_topic(&fifo)
            .await
            .unwrap()
            .len(),
        1
    );

    // The queue did not exist when it was subscribed (SNS does not check): the publish before
    // it exists is dropped, the one after is delivered.
    account
        .publish(&fifo, Publish::new("lost").group_id("g").dedup_id("1"))
        .await
        .unwrap();
    let url = account.create_fifo_queue("q.fifo").await.unwrap();
    account
        .publish(&fifo, Publish::new("found").group_id("g").dedup_id("2"))
        .await
        .unwrap();
    assert_eq!(bodies(&drain(&account, &url).await), ["found"]);
}

#[tokio::test(start_paused = true)]
async fn deliveries_go_through_the_queues_own_send_path() {
    let account = Account::new();
    let topic = account
        .create_topic("delayed", TopicAttributes::new())
        .await
        .unwrap();
    let url = subscribed(&account, &topic, "delayed", true, &[]).await;
    let attributes =
        crate::transport::QueueAttributes::from([("DelaySeconds".to_owned(), "30".to_owned())]);
    account
        .set_queue_attributes(&url, attributes)
        .await
        .unwrap();
    account
        .publish(&topic, Publish::new("later"))
        .await
        .unwrap();
    assert!(
        drain(&account, &url).await.is_empty(),
        "the queue's delay applies"
    );
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(bodies(&drain(&account, &url).await), ["later"]);
}
