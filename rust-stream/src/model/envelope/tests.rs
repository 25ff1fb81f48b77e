//! The envelope's own tests: round trips, AWS's own samples read, attributes of every type, bodies
//! that are no envelope told from broken ones, timestamps, and what each subscription receives.

use super::*;

fn topic(name: &str) -> TopicArn {
    TopicArn::new("us-west-2", "123456789012", name).unwrap()
}

fn every_type() -> Publish {
    let mut custom = MessageAttributeValue::binary(vec![0, 1, 2, 0xfe, 0xff]);
    custom.data_type = "Binary.gzip".to_owned();
    Publish::new("Hello world!")
        .attribute("kind", MessageAttributeValue::string("card \"quoted\" é"))
        .attribute("amount", MessageAttributeValue::number("-120.50"))
        .attribute(
            "channels",
            MessageAttributeValue::string_array(r#"["ledger",2,true,null]"#),
        )
        .attribute(
            "digest",
            MessageAttributeValue::binary(vec![0xde, 0xad, 0xbe, 0xef]),
        )
        .attribute("blob", custom)
        .attribute("region", {
            let mut labelled = MessageAttributeValue::string("eu");
            labelled.data_type = "String.region".to_owned();
            labelled
        })
}

fn built(publish: &Publish, topic: &TopicArn) -> Envelope {
    Envelope::unsigned(
        publish,
        topic,
        "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        1_335_920_046_655,
        &topic.subscription_arn("c9135db0-26c4-47ec-8998-413945fb5a96"),
    )
}

#[test]
fn an_envelope_survives_a_round_trip() {
    let standard = topic("MyTopic");
    let publish = every_type().subject("My First Message");
    let envelope = built(&publish, &standard);
    assert_eq!(envelope.timestamp, "2012-05-02T00:54:06.655Z");
    assert_eq!(envelope.timestamp_millis(), Some(1_335_920_046_655));
    let json = envelope.to_json();
    assert_eq!(Envelope::parse(&json).unwrap(), envelope);

    let fifo = topic("MyTopic.fifo");
    let envelope =
        built(&Publish::new("m").group_id("g"), &fifo).with_sequence_number("10000000000000003000");
    let json = envelope.to_json();
    assert!(json.contains(r#""SequenceNumber":"10000000000000003000""#));
    let read = Envelope::parse(&json).unwrap();
    assert_eq!(read, envelope);
    assert!(read.topic_arn.is_fifo());
}

#[test]
fn the_json_has_awss_fields_in_awss_order_and_leaves_out_what_is_not_there() {
    let envelope = built(&Publish::new("Hello world!"), &topic("MyTopic"));
    let json = envelope.to_json();
    let names: Vec<String> = serde_json::from_str::<serde_json::Map<String, Value>>(&json)
        .unwrap()
        .keys()
        .cloned()
        .collect();
    // serde_json's map is sorted; the order in the text is checked below.
    assert_eq!(names.len(), 9, "{json}");
    for absent in ["Subject", "SequenceNumber", "MessageAttributes"] {
        assert!(!json.contains(absent), "{absent} in {json}");
    }
    let order = [
        "\"Type\":\"Notification\"",
        "\"MessageId\"",
        "\"TopicArn\":\"arn:aws:sns:us-west-2:123456789012:MyTopic\"",
        "\"Message\":\"Hello world!\"",
        "\"Timestamp\"",
        "\"SignatureVersion\":\"1\"",
        "\"Signature\"",
        "\"SigningCertURL\"",
        "\"UnsubscribeURL\"",
    ];
    let positions: Vec<usize> = order
        .iter()
        .map(|field| json.find(field).unwrap())
        .collect();
    assert!(positions.windows(2).all(|pair| pair[0] < pair[1]), "{json}");
}

#[test]
fn the_in_process_account_marks_its_envelopes_unsigned() {
    let topic = topic("MyTopic");
    let envelope = built(&Publish::new("m"), &topic);
    assert!(envelope.is_unsigned());
    assert_eq!(envelope.signature.as_deref(), Some(UNSIGNED_SIGNATURE));
    assert_eq!(
        envelope.signing_cert_url.as_deref(),
        Some(UNSIGNED_CERT_URL)
    );
    assert_eq!(envelope.signature_version.as_deref(), Some("1"));
    assert_eq!(
        envelope.unsubscribe_url.as_deref(),
        Some(
            "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=\
             arn:aws:sns:us-west-2:123456789012:MyTopic:c9135db0-26c4-47ec-8998-413945fb5a96"
        )
    );
    assert!(
        base64::decode(UNSIGNED_SIGNATURE).is_none(),
        "the marker cannot pass for a signature"
    );
}

/// The raw message delivery page's enveloped sample, as AWS printed it:
/// <https://docs.aws.amazon.com/sns/latest/dg/sns-large-payload-raw-message-delivery.html>.
const AWS_SQS_SAMPLE: &str = r#"{
  "Type": "Notification",
  "MessageId": "dc1e94d9-56c5-5e96-808d-cc7f68faa162",
  "TopicArn": "arn:aws:sns:us-east-2:111122223333:ExampleTopic1",
  "Subject": "TestSubject",
  "Message": "This is a test message.",
  "Timestamp": "2021-02-16T21:41:19.978Z",
  "SignatureVersion": "1",
  "Signature": "FMG5tlZhJNHLHUXvZgtZzlk24FzVa7oX0T4P03neeXw8ZEXZx6z35j2FOTuNYShn2h0bKNC/zLTnMyIxEzmi2X1shOBWsJHkrW2xkR58ABZF+4uWHEE73yDVR4SyYAikP9jstZzDRm+bcVs8+T0yaLiEGLrIIIL4esi1llhIkgErCuy5btPcWXBdio2fpCRD5x9oR6gmE/rd5O7lX1c1uvnv4r1Lkk4pqP2/iUfxFZva1xLSRvgyfm6D9hNklVyPfy+7TalMD0lzmJuOrExtnSIbZew3foxgx8GT+lbZkLd0ZdtdRJlIyPRP44eyq78sU0Eo/LsDr0Iak4ZDpg8dXg==",
  "SigningCertURL": "https://sns.us-east-2.amazonaws.com/SimpleNotificationService-010a507c1833636cd94bdb98bd93083a.pem",
  "UnsubscribeURL": "https://sns.us-east-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:us-east-2:111122223333:ExampleTopic1:e1039402-24e7-40a3-a0d4-797da162b297"
}"#;

#[test]
fn awss_own_sample_is_read() {
    let envelope = Envelope::parse(AWS_SQS_SAMPLE).unwrap();
    assert_eq!(envelope.message_id, "dc1e94d9-56c5-5e96-808d-cc7f68faa162");
    assert_eq!(
        envelope.topic_arn.to_string(),
        "arn:aws:sns:us-east-2:111122223333:ExampleTopic1"
    );
    assert_eq!(envelope.topic_arn.name(), "ExampleTopic1");
    assert_eq!(envelope.subject.as_deref(), Some("TestSubject"));
    assert_eq!(envelope.message, "This is a test message.");
    assert_eq!(envelope.timestamp_millis(), Some(1_613_511_679_978));
    assert_eq!(envelope.sequence_number, None);
    assert!(envelope.message_attributes.is_empty());
    assert!(!envelope.is_unsigned());
    let signature = envelope.signature.as_deref().unwrap();
    assert_eq!(
        base64::decode(signature).map(|bytes| bytes.len()),
        Some(256)
    );
    assert!(envelope
        .signing_cert_url
        .unwrap()
        .starts_with("https://sns.us-east-2.amazonaws.com/"));
    // Read back and written again, it reads the same.
    let again = Envelope::parse(AWS_SQS_SAMPLE).unwrap();
    assert_eq!(Envelope::parse(&again.to_json()).unwrap(), again);
}

/// The HTTP notification sample of
/// <https://docs.aws.amazon.com/sns/latest/dg/sns-message-and-json-formats.html>, spaces and all.
#[test]
fn awss_http_notification_sample_is_read() {
    let body = r#"{
  "Type" : "Notification",
  "MessageId" : "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
  "TopicArn" : "arn:aws:sns:us-west-2:123456789012:MyTopic",
  "Subject" : "My First Message",
  "Message" : "Hello world!",
  "Timestamp" : "2012-05-02T00:54:06.655Z",
  "SignatureVersion" : "1",
  "Signature" : "EXAMPLEw6JRN...",
  "SigningCertURL" : "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem",
  "UnsubscribeURL" : "https://sns.us-west-2.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=arn:aws:sns:us-west-2:123456789012:MyTopic:c9135db0-26c4-47ec-8998-413945fb5a96"
}"#;
    let envelope = Envelope::parse(body).unwrap();
    let ours = Envelope {
        signature: Some("EXAMPLEw6JRN...".to_owned()),
        signing_cert_url: Some(
            "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-f3ecfb7224c7233fe7bb5f59f96de52f.pem"
                .to_owned(),
        ),
        ..built(&Publish::new("Hello world!").subject("My First Message"), &topic("MyTopic"))
    };
    assert_eq!(
        envelope, ours,
        "ours differs from AWS's only in the signature"
    );
}

#[test]
fn attributes_of_every_type_come_back_as_they_were_published() {
    let publish = every_type();
    let json = built(&publish, &topic("MyTopic")).to_json();
    assert!(
        json.contains(r#""digest":{"Type":"Binary","Value":"3q2+7w=="}"#),
        "{json}"
    );
    assert!(
        json.contains(r#""amount":{"Type":"Number","Value":"-120.50"}"#),
        "{json}"
    );
    assert!(
        json.contains(r#""channels":{"Type":"String.Array","Value":"[\"ledger\",2,true,null]"}"#),
        "{json}"
    );
    let read = Envelope::parse(&json).unwrap();
    assert_eq!(read.message_attributes, publish.message_attributes);
    assert_eq!(
        read.message_attributes["blob"].binary_value.as_deref(),
        Some(&[0, 1, 2, 0xfe, 0xff][..])
    );
}

#[test]
fn an_envelope_written_by_another_service_reads_its_attributes() {
    let body = r#"{"Type":"Notification","MessageId":"m-1",
        "TopicArn":"arn:aws:sns:eu-west-1:000000000000:payments.fifo",
        "SequenceNumber":"10000000000000000001",
        "Message":"{\"amount\":120}","Timestamp":"2026-12-02T01:02:03.004Z",
        "MessageAttributes":{
            "traceparent":{"Type":"String","Value":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
            "attempt":{"Type":"Number","Value":"3"},
            "tags":{"Type":"String.Array","Value":"[\"a\",\"b\"]"},
            "key":{"Type":"Binary","Value":"AAEC"}},
        "UnknownField":{"nested":[1,2,3]}}"#;
    let envelope = Envelope::parse(body).unwrap();
    assert_eq!(envelope.message, r#"{"amount":120}"#);
    assert_eq!(
        envelope.sequence_number.as_deref(),
        Some("10000000000000000001")
    );
    assert_eq!(
        envelope.signature, None,
        "the signature fields are optional when read"
    );
    let attributes = &envelope.message_attributes;
    assert_eq!(
        attributes["traceparent"],
        MessageAttributeValue::string("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    );
    assert_eq!(attributes["attempt"], MessageAttributeValue::number("3"));
    assert_eq!(
        attributes["tags"],
        MessageAttributeValue::string_array(r#"["a","b"]"#)
    );
    assert_eq!(
        attributes["key"],
        MessageAttributeValue::binary(vec![0, 1, 2])
    );
}

#[test]
fn messages_with_quotes_lines_and_unicode_come_back_unchanged() {
    for message in [
        "line one\nline two\ttab \"quoted\" \\ back",
        r#"{"nested":{"json":[1,2,3]},"text":"a \"b\""}"#,
        "支付 😀 \u{0} \u{1f}",
        " ",
    ] {
        let envelope = built(&Publish::new(message), &topic("MyTopic"));
        let read = Envelope::parse(&envelope.to_json()).unwrap();
        assert_eq!(read.message, message);
    }
}

#[test]
fn a_body_that_is_no_envelope_says_so() {
    for body in [
        "",
        "hello",
        "This is a test message.",
        r#"{"amount":120}"#,
        r#"[1,2,3]"#,
        "{not json",
        r#"{"Type":"Notification"}"#,
        r#"{"Type":"SubscriptionConfirmation","TopicArn":"arn:aws:sns:us-west-2:1:T","Message":"m"}"#,
        r#"{"Type":5,"TopicArn":"arn:aws:sns:us-west-2:1:T"}"#,
        r#"{"Type":"Notification","TopicArn":7}"#,
        r#"{"Type":"Notification","Type":"Notification","TopicArn":"arn:aws:sns:us-west-2:1:T"}"#,
    ] {
        let error = Envelope::parse(body).unwrap_err();
        assert!(error.is_not_an_envelope(), "{body}: {error}");
    }
}

fn invalid_field(body: &str) -> String {
    match Envelope::parse(body).unwrap_err() {
        EnvelopeError::Invalid { field, .. } => field,
        other => panic!("{body}: {other:?}"),
    }
}

#[test]
fn a_broken_envelope_names_its_field() {
    let head = r#""Type":"Notification","TopicArn":"arn:aws:sns:us-west-2:1:T""#;
    let complete = r#""MessageId":"m","Message":"x","Timestamp":"2012-05-02T00:54:06.655Z""#;
    assert!(Envelope::parse(&format!("{{{head},{complete}}}")).is_ok());
    for (body, field) in [
        (
            format!(r#"{{{head},"Message":"x","Timestamp":"t"}}"#),
            "MessageId",
        ),
        (
            format!(r#"{{{head},"MessageId":"m","Timestamp":"t"}}"#),
            "Message",
        ),
        (
            format!(r#"{{{head},"MessageId":"m","Message":"x"}}"#),
            "Timestamp",
        ),
        (
            format!(r#"{{{head},"MessageId":"m","Message":5,"Timestamp":"t"}}"#),
            "Message",
        ),
        (
            format!(r#"{{{head},{complete},"Subject":["s"]}}"#),
            "Subject",
        ),
        (
            format!(r#"{{{head},{complete},"MessageAttributes":[]}}"#),
            "MessageAttributes",
        ),
        (
            format!(r#"{{{head},{complete},"MessageAttributes":{{"a":"v"}}}}"#),
            "MessageAttributes.a",
        ),
        (
            format!(r#"{{{head},{complete},"MessageAttributes":{{"a":{{"Value":"v"}}}}}}"#),
            "MessageAttributes.a.Type",
        ),
        (
            format!(r#"{{{head},{complete},"MessageAttributes":{{"a":{{"Type":"String"}}}}}}"#),
            "MessageAttributes.a.Value",
        ),
        (
            format!(
                r#"{{{head},{complete},"MessageAttributes":{{"a":{{"Type":"Boolean","Value":"true"}}}}}}"#
            ),
            "MessageAttributes.a.Type",
        ),
        (
            format!(
                r#"{{{head},{complete},"MessageAttributes":{{"a":{{"Type":"Binary","Value":"not base64"}}}}}}"#
            ),
            "MessageAttributes.a.Value",
        ),
    ] {
        assert_eq!(invalid_field(&body), field, "{body}");
    }
    let wrong_arn =
        format!(r#"{{"Type":"Notification","TopicArn":"arn:aws:sqs:us-west-2:1:q",{complete}}}"#);
    assert_eq!(invalid_field(&wrong_arn), "TopicArn");
    let shown = Envelope::parse(&wrong_arn).unwrap_err().to_string();
    assert!(shown.contains("`TopicArn` is invalid"), "{shown}");
}

#[test]
fn null_optional_fields_read_as_absent() {
    let body = r#"{"Type":"Notification","TopicArn":"arn:aws:sns:us-west-2:1:T","MessageId":"m",
        "Message":"x","Timestamp":"2012-05-02T00:54:06Z","Subject":null,"MessageAttributes":null}"#;
    let envelope = Envelope::parse(body).unwrap();
    assert_eq!(envelope.subject, None);
    assert!(envelope.message_attributes.is_empty());
    assert_eq!(envelope.timestamp_millis(), Some(1_335_920_046_000));
}

#[test]
fn timestamps_are_written_and_read_as_iso_8601_utc_with_milliseconds() {
    for (millis, text) in [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_335_920_046_655, "2012-05-02T00:54:06.655Z"),
        (951_868_799_999, "2000-02-29T23:59:59.999Z"),
        (951_868_800_000, "2000-03-01T00:00:00.000Z"),
        (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
    ] {
        assert_eq!(format_timestamp(millis), text);
        assert_eq!(parse_timestamp(text), Some(millis), "{text}");
    }
    // Every day of four centuries, at a moment that moves through the day.
    for day in 0..146_097u64 {
        let millis = day * 86_400_000 + (day * 7_919_993) % 86_400_000;
        assert_eq!(parse_timestamp(&format_timestamp(millis)), Some(millis));
    }
    assert_eq!(
        parse_timestamp("2012-05-02T00:54:06Z"),
        Some(1_335_920_046_000)
    );
    assert_eq!(
        parse_timestamp("2012-05-02T00:54:06.6Z"),
        Some(1_335_920_046_600)
    );
    assert_eq!(
        parse_timestamp("2012-05-02T00:54:06.655999Z"),
        Some(1_335_920_046_655)
    );
    for bad in [
        "",
        "2012-05-02T00:54:06.655",
        "2012-05-02 00:54:06Z",
        "2012-5-02T00:54:06Z",
        "2012-05-02T24:00:00Z",
        "2012-05-02T00:60:00Z",
        "2012-13-02T00:54:06Z",
        "2012-00-02T00:54:06Z",
        "2011-02-29T00:00:00Z",
        "2012-04-31T00:00:00Z",
        "1969-12-31T23:59:59Z",
        "2012-05-02T00:54:06.Z",
        "2012-05-02T00:54:06.6aZ",
        "2012-05-02T00:54:06+00:00",
        "2012-05-02-01T00:54:06Z",
    ] {
        assert_eq!(parse_timestamp(bad), None, "{bad}");
    }
}

#[test]
fn a_raw_delivery_carries_up_to_10_attributes_as_they_were() {
    let publish = every_type();
    assert_eq!(
        raw_delivery_attributes(&publish.message_attributes).unwrap(),
        publish.message_attributes
    );
    let ten: MessageAttributes = (0..10)
        .map(|at| (format!("a{at}"), MessageAttributeValue::string("v")))
        .collect();
    assert!(raw_delivery_attributes(&ten).is_ok());
    let mut eleven = ten;
    eleven.insert("a10".to_owned(), MessageAttributeValue::string("v"));
    let refused = raw_delivery_attributes(&eleven).unwrap_err();
    assert_eq!(refused.kind(), Some(ErrorKind::InvalidParameterValue));
    assert!(refused.to_string().contains("raw message delivery"));
}

#[test]
fn each_subscription_gets_the_body_attributes_and_ids_its_kind_takes() {
    let fifo_topic = topic("payments.fifo");
    let publish = Publish::new("posted")
        .attribute("kind", MessageAttributeValue::string("card"))
        .group_id("account-7")
        .dedup_id("payment-1");
    let envelope = built(&publish, &fifo_topic).with_sequence_number("1");
    let delivery = |envelope: Option<&Envelope>, topic_fifo: bool, queue_fifo: bool| {
        QueueDelivery {
            envelope,
            topic_fifo,
            queue_fifo,
            dedup_id: publish.dedup_id.as_deref(),
        }
        .message(&publish)
        .unwrap()
    };

    let raw = delivery(None, true, true);
    assert_eq!(raw.body, "posted");
    assert_eq!(raw.message_attributes, publish.message_attributes);
    assert_eq!(raw.group_id.as_deref(), Some("account-7"));
    assert_eq!(raw.dedup_id.as_deref(), Some("payment-1"));
    assert_eq!(raw.delay_seconds, None);

    let enveloped = delivery(Some(&envelope), true, true);
    assert_eq!(Envelope::parse(&enveloped.body).unwrap(), envelope);
    assert!(
        enveloped.message_attributes.is_empty(),
        "they are in the JSON"
    );
    assert_eq!(enveloped.group_id.as_deref(), Some("account-7"));
    assert_eq!(enveloped.dedup_id.as_deref(), Some("payment-1"));

    let fifo_to_standard = delivery(None, true, false);
    assert_eq!(
        fifo_to_standard.group_id, None,
        "not passed to a standard queue"
    );
    assert_eq!(fifo_to_standard.dedup_id, None);

    let fair = delivery(None, false, false);
    assert_eq!(
        fair.group_id.as_deref(),
        Some("account-7"),
        "a standard topic's group id reaches a standard queue (fair queues)"
    );
    assert_eq!(fair.dedup_id, None);

    let crowded = (0..11).fold(Publish::new("m"), |publish, at| {
        publish.attribute(format!("a{at}"), MessageAttributeValue::string("v"))
    });
    let raw = QueueDelivery {
        envelope: None,
        topic_fifo: false,
        queue_fifo: false,
        dedup_id: None,
    };
    assert!(raw.message(&crowded).is_err());
    let crowded_envelope = built(&crowded, &topic("MyTopic"));
    let enveloped = QueueDelivery {
        envelope: Some(&crowded_envelope),
        ..raw
    };
    assert!(
        enveloped.message(&crowded).is_ok(),
        "an envelope carries any number of attributes"
    );
}
