//! The SNS rules' own tests: each limit just inside and just outside, names, ARNs, and the kinds
//! and messages a refused publish gets.

use super::*;

fn kind<T: std::fmt::Debug>(result: Result<T, TransportError>) -> ErrorKind {
    result.unwrap_err().kind().expect("a service error")
}

fn message<T: std::fmt::Debug>(result: Result<T, TransportError>) -> String {
    result.unwrap_err().to_string()
}

#[test]
fn sns_error_kinds_have_their_codes_both_ways() {
    assert_eq!(ErrorKind::InvalidParameter.code(), "InvalidParameter");
    assert_eq!(ErrorKind::NotFound.code(), "NotFound");
    for (code, kind) in [
        ("InvalidParameter", ErrorKind::InvalidParameter),
        ("InvalidParameterException", ErrorKind::InvalidParameter),
        ("NotFound", ErrorKind::NotFound),
        ("NotFoundException", ErrorKind::NotFound),
        ("InvalidParameterValue", ErrorKind::InvalidParameterValue),
        ("BatchRequestTooLong", ErrorKind::BatchRequestTooLong),
    ] {
        assert_eq!(ErrorKind::from_code(code), Some(kind), "{code}");
    }
    assert!(ErrorKind::InvalidParameter.sender_fault());
    assert!(ErrorKind::NotFound.sender_fault());
}

#[test]
fn topic_names_take_1_to_256_characters_of_letters_digits_dash_and_underscore() {
    assert!(check_topic_name("a", false).is_ok());
    assert!(check_topic_name("Payments_posted-2", false).is_ok());
    assert!(check_topic_name(&"a".repeat(256), false).is_ok());
    assert_eq!(
        kind(check_topic_name(&"a".repeat(257), false)),
        ErrorKind::InvalidParameter
    );
    for bad in ["", "a b", "a.b", "a:b", "é", "orders.fifo"] {
        assert_eq!(
            kind(check_topic_name(bad, false)),
            ErrorKind::InvalidParameter,
            "{bad:?}"
        );
    }
}

#[test]
fn a_fifo_topic_name_ends_in_fifo_counted_in_the_256() {
    assert!(check_topic_name("orders.fifo", true).is_ok());
    assert!(check_topic_name(&format!("{}.fifo", "a".repeat(251)), true).is_ok());
    assert!(check_topic_name(&format!("{}.fifo", "a".repeat(252)), true).is_err());
    assert!(check_topic_name(".fifo", true).is_err());
    assert!(check_topic_name("orders", true).is_err());
    assert!(check_topic_name("or.ders.fifo", true).is_err());
    let shown = message(check_topic_name("orders", true));
    assert!(shown.starts_with("InvalidParameter: "), "{shown}");
    assert!(
        shown.contains("`orders`") && shown.contains("`.fifo`"),
        "{shown}"
    );
    assert!(is_fifo_topic_name("orders.fifo"));
    assert!(!is_fifo_topic_name("orders"));
}

#[test]
fn an_upper_case_fifo_suffix_is_named_as_the_mistake() {
    assert!(!is_fifo_topic_name("orders.FIFO"));
    let shown = message(check_topic_name("orders.FIFO", false));
    assert!(
        shown.contains("end the name in `.fifo`, in lower case"),
        "{shown}"
    );
    let plain = message(check_topic_name("orders.x", false));
    assert!(!plain.contains("lower case"), "{plain}");
}

#[test]
fn a_topic_arn_is_built_from_its_parts_and_read_back() {
    let arn = TopicArn::new("us-east-2", "111122223333", "ExampleTopic1").unwrap();
    assert_eq!(
        arn.to_string(),
        "arn:aws:sns:us-east-2:111122223333:ExampleTopic1"
    );
    let read = TopicArn::parse("arn:aws:sns:us-east-2:111122223333:ExampleTopic1").unwrap();
    assert_eq!(read, arn);
    assert_eq!(read.name(), "ExampleTopic1");
    assert_eq!(read.region(), "us-east-2");
    assert_eq!(read.account(), "111122223333");
    assert_eq!(read.partition(), "aws");
    assert!(!read.is_fifo());
    assert_eq!(
        arn.subscription_arn("e1039402-24e7-40a3-a0d4-797da162b297"),
        "arn:aws:sns:us-east-2:111122223333:ExampleTopic1:e1039402-24e7-40a3-a0d4-797da162b297"
    );

    let china: TopicArn = "arn:aws-cn:sns:cn-north-1:123456789012:orders.fifo"
        .parse()
        .unwrap();
    assert_eq!(china.partition(), "aws-cn");
    assert!(china.is_fifo());
    assert_eq!(
        china.to_string(),
        "arn:aws-cn:sns:cn-north-1:123456789012:orders.fifo"
    );
    assert_eq!(
        kind(TopicArn::new("us-east-1", "1", "bad name")),
        ErrorKind::InvalidParameter
    );
}

#[test]
fn what_is_not_a_topic_arn_is_refused_as_invalid_parameter() {
    for bad in [
        "",
        "ExampleTopic1",
        "arn:aws:sns:us-east-2:111122223333",
        "arn:aws:sqs:us-east-2:111122223333:ExampleTopic1",
        "arn:aws:sns:us-east-2:111122223333:ExampleTopic1:sub",
        "arn::sns:us-east-2:111122223333:ExampleTopic1",
        "arn:aws:sns::111122223333:ExampleTopic1",
        "arn:aws:sns:us-east-2::ExampleTopic1",
        "arn:aws:sns:us-east-2:111122223333:bad name",
        "urn:aws:sns:us-east-2:111122223333:ExampleTopic1",
    ] {
        let refused = TopicArn::parse(bad);
        assert_eq!(kind(refused.clone()), ErrorKind::InvalidParameter, "{bad}");
        assert!(message(refused).contains("TopicArn"), "{bad}");
    }
}

fn standard() -> PublishTarget<'static> {
    PublishTarget::new("payments")
}

fn fifo() -> PublishTarget<'static> {
    PublishTarget::new("payments.fifo")
}

#[test]
fn a_target_reads_its_type_from_the_name_and_starts_at_the_default_size() {
    assert!(!standard().fifo);
    assert!(fifo().fifo);
    assert_eq!(standard().maximum_message_size, 262_144);
    assert!(!fifo().content_based_dedup);
    let set = fifo()
        .content_based_dedup(true)
        .maximum_message_size(MAX_MAXIMUM_MESSAGE_SIZE);
    assert!(set.content_based_dedup);
    assert_eq!(set.maximum_message_size, 1_048_576);
}

#[test]
fn subjects_are_1_to_99_characters_without_control_characters() {
    assert!(check_subject("Payment posted").is_ok());
    assert!(check_subject(&"s".repeat(99)).is_ok());
    assert!(
        check_subject(&"é".repeat(99)).is_ok(),
        "counted in characters"
    );
    assert_eq!(
        kind(check_subject(&"s".repeat(100))),
        ErrorKind::InvalidParameter
    );
    for bad in ["", "two\nlines", "tab\there", "carriage\rreturn", "nul\0"] {
        assert_eq!(
            kind(check_subject(bad)),
            ErrorKind::InvalidParameter,
            "{bad:?}"
        );
    }
    let shown = message(check_publish(&Publish::new("m").subject(""), standard()));
    assert!(shown.contains("Subject"), "{shown}");
}

#[test]
fn a_message_may_not_be_empty() {
    assert!(check_publish(&Publish::new("m"), standard()).is_ok());
    let refused = check_publish(&Publish::new(""), standard());
    assert_eq!(kind(refused.clone()), ErrorKind::InvalidParameter);
    assert!(message(refused).contains("Empty message"));
}

#[test]
fn the_size_counts_message_and_attributes_against_the_topics_maximum() {
    let full = Publish::new("m".repeat(DEFAULT_MAX_MESSAGE_SIZE));
    assert_eq!(check_publish(&full, standard()).unwrap(), 262_144);
    let over = Publish::new("m".repeat(DEFAULT_MAX_MESSAGE_SIZE + 1));
    let refused = check_publish(&over, standard());
    assert_eq!(kind(refused.clone()), ErrorKind::InvalidParameter);
    assert!(message(refused).contains("Message too long"));

    // "kind" + "String" + "card" = 14 bytes of attribute.
    let attribute = MessageAttributeValue::string("card");
    let with_attribute =
        |len: usize| Publish::new("m".repeat(len)).attribute("kind", attribute.clone());
    assert_eq!(publish_size(&with_attribute(10)), 24);
    assert!(check_publish(&with_attribute(DEFAULT_MAX_MESSAGE_SIZE - 14), standard()).is_ok());
    assert!(check_publish(&with_attribute(DEFAULT_MAX_MESSAGE_SIZE - 13), standard()).is_err());

    let large = standard().maximum_message_size(MAX_MAXIMUM_MESSAGE_SIZE);
    assert!(check_publish(&Publish::new("m".repeat(MAX_MAXIMUM_MESSAGE_SIZE)), large).is_ok());
    assert!(check_publish(
        &Publish::new("m".repeat(MAX_MAXIMUM_MESSAGE_SIZE + 1)),
        large
    )
    .is_err());
}

#[test]
fn a_binary_value_counts_its_bytes_not_its_base64() {
    let publish = Publish::new("m").attribute("b", MessageAttributeValue::binary(vec![0; 3]));
    assert_eq!(publish_size(&publish), 1 + 1 + "Binary".len() + 3);
}

fn attribute(name: &str, value: MessageAttributeValue) -> Result<usize, TransportError> {
    let mut attributes = MessageAttributes::new();
    attributes.insert(name.to_owned(), value);
    check_message_attributes(&attributes)
}

#[test]
fn attribute_names_follow_the_rule_sns_shares_with_sqs() {
    let value = || MessageAttributeValue::string("v");
    assert!(attribute("trace.id", value()).is_ok());
    assert!(attribute(&"n".repeat(MAX_ATTRIBUTE_NAME_LEN), value()).is_ok());
    assert_eq!(
        kind(attribute(&"n".repeat(MAX_ATTRIBUTE_NAME_LEN + 1), value())),
        ErrorKind::InvalidParameterValue
    );
    for bad in [
        "", "AWS.x", "aws.x", "Amazon.y", ".x", "x.", "a..b", "a b", "a/b",
    ] {
        assert_eq!(
            kind(attribute(bad, value())),
            ErrorKind::InvalidParameterValue,
            "{bad:?}"
        );
    }
}

fn typed(data_type: &str, text: &str) -> MessageAttributeValue {
    MessageAttributeValue {
        data_type: data_type.to_owned(),
        string_value: Some(text.to_owned()),
        binary_value: None,
    }
}

#[test]
fn attribute_types_are_string_number_or_binary_with_an_optional_label() {
    for data_type in [
        "String",
        "Number",
        "String.Array",
        "String.custom",
        "Number.int",
    ] {
        let text = if data_type == "String.Array" {
            "[1]"
        } else {
            "1"
        };
        assert!(
            attribute("a", typed(data_type, text)).is_ok(),
            "{data_type}"
        );
    }
    assert!(attribute("a", MessageAttributeValue::binary(vec![1])).is_ok());
    let mut labelled = MessageAttributeValue::binary(vec![1]);
    labelled.data_type = "Binary.gzip".to_owned();
    assert!(attribute("a", labelled).is_ok());

    let longest = format!("String.{}", "l".repeat(MAX_ATTRIBUTE_TYPE_LEN - 7));
    assert!(attribute("a", typed(&longest, "v")).is_ok());
    let too_long = format!("String.{}", "l".repeat(MAX_ATTRIBUTE_TYPE_LEN - 6));
    for bad in ["string", "Str", "String.", "Boolean", "", too_long.as_str()] {
        let refused = attribute("a", typed(bad, "v"));
        assert_eq!(
            kind(refused.clone()),
            ErrorKind::InvalidParameterValue,
            "{bad}"
        );
        assert!(
            message(refused).contains("invalid message attribute type"),
            "{bad}"
        );
    }
}

#[test]
fn attribute_values_must_fit_their_type() {
    assert_eq!(
        attribute("a", MessageAttributeValue::string("card")).unwrap(),
        1 + 6 + 4
    );
    for number in ["12.5", "-3", "0", "1e3", "+7", "-0.00001", "1000000000"] {
        assert!(
            attribute("n", MessageAttributeValue::number(number)).is_ok(),
            "{number}"
        );
    }
    for not_number in ["abc", "NaN", "inf", "1e999", "1,5", "", "0x10", " 1"] {
        assert!(
            attribute("n", MessageAttributeValue::number(not_number)).is_err(),
            "{not_number:?}"
        );
    }
    for array in [
        r#"["a",1,true,false,null]"#,
        "[]",
        r#" [ "x" ] "#,
        "[1.5e3]",
    ] {
        assert!(
            attribute("s", MessageAttributeValue::string_array(array)).is_ok(),
            "{array}"
        );
    }
    for not_array in [
        "[[1]]",
        r#"[{"a":1}]"#,
        r#"{"a":1}"#,
        "\"a\"",
        "not json",
        "[1,]",
    ] {
        assert_eq!(
            kind(attribute(
                "s",
                MessageAttributeValue::string_array(not_array)
            )),
            ErrorKind::InvalidParameterValue,
            "{not_array}"
        );
    }
    // Binary takes bytes, the others text; none takes an empty value.
    let mut swapped = MessageAttributeValue::binary(vec![1]);
    swapped.data_type = "String".to_owned();
    assert!(attribute("a", swapped).is_err());
    assert!(attribute("a", typed("Binary", "AQ==")).is_err());
    assert!(attribute("a", MessageAttributeValue::binary(Vec::new())).is_err());
    assert!(attribute("a", MessageAttributeValue::string("")).is_err());
}

#[test]
fn string_values_stay_in_the_basic_multilingual_plane() {
    assert!(attribute("a", MessageAttributeValue::string("é 支付 \u{FFFD}")).is_ok());
    let refused = attribute("a", MessageAttributeValue::string("paid 😀"));
    assert_eq!(kind(refused.clone()), ErrorKind::InvalidParameterValue);
    assert!(message(refused).contains("U+1F600"));
}

#[test]
fn a_publish_may_carry_more_than_ten_attributes() {
    let mut publish = Publish::new("m");
    for at in 0..11 {
        publish = publish.attribute(format!("a{at}"), MessageAttributeValue::string("v"));
    }
    assert!(check_publish(&publish, standard()).is_ok());
}

#[test]
fn a_fifo_topic_needs_a_group_id() {
    let refused = check_publish(&Publish::new("m").dedup_id("d"), fifo());
    assert_eq!(kind(refused.clone()), ErrorKind::InvalidParameter);
    assert!(message(refused).contains("MessageGroupId parameter is required"));
    assert!(check_publish(&Publish::new("m").dedup_id("d").group_id("g"), fifo()).is_ok());
}

#[test]
fn a_fifo_topic_needs_a_dedup_id_unless_it_deduplicates_by_content() {
    let grouped = Publish::new("m").group_id("g");
    let refused = check_publish(&grouped, fifo());
    assert_eq!(kind(refused.clone()), ErrorKind::InvalidParameter);
    assert!(message(refused).contains("ContentBasedDeduplication"));
    assert!(check_publish(&grouped, fifo().content_based_dedup(true)).is_ok());
    assert!(check_publish(&grouped.dedup_id("d"), fifo()).is_ok());
}

#[test]
fn a_standard_topic_refuses_a_dedup_id_and_takes_a_group_id() {
    let refused = check_publish(&Publish::new("m").dedup_id("d"), standard());
    assert_eq!(kind(refused.clone()), ErrorKind::InvalidParameter);
    assert!(message(refused).contains("MessageDeduplicationId"));
    assert!(check_publish(&Publish::new("m").group_id("tenant-1"), standard()).is_ok());
    assert_eq!(
        kind(check_publish(
            &Publish::new("m").group_id("a b"),
            standard()
        )),
        ErrorKind::InvalidParameter,
        "a standard topic checks a group id as a FIFO topic does"
    );
}

#[test]
fn group_and_dedup_ids_take_128_letters_digits_and_punctuation() {
    let target = fifo();
    let publish = |group: &str, dedup: &str| Publish::new("m").group_id(group).dedup_id(dedup);
    assert!(check_publish(&publish(&"g".repeat(128), &"d".repeat(128)), target).is_ok());
    assert!(check_publish(&publish("acct-9:a/b{c}~", "!\"#$%&'()*+,-./"), target).is_ok());
    for (group, dedup) in [
        ("g".repeat(129), "d".to_owned()),
        ("g".to_owned(), "d".repeat(129)),
        (String::new(), "d".to_owned()),
        ("g".to_owned(), String::new()),
        ("a b".to_owned(), "d".to_owned()),
        ("g".to_owned(), "é".to_owned()),
    ] {
        assert_eq!(
            kind(check_publish(&publish(&group, &dedup), target)),
            ErrorKind::InvalidParameter,
            "{group:?} {dedup:?}"
        );
    }
}

#[test]
fn a_bad_subject_is_found_before_the_message_and_a_bad_attribute_before_the_fifo_rules() {
    let publish = Publish::new("")
        .subject("")
        .attribute("AWS.x", MessageAttributeValue::string("v"));
    assert!(message(check_publish(&publish, fifo())).contains("Subject"));
    let publish = Publish::new("m").attribute("AWS.x", MessageAttributeValue::string("v"));
    assert_eq!(
        kind(check_publish(&publish, fifo())),
        ErrorKind::InvalidParameterValue
    );
}

fn entries(count: usize, message_len: usize) -> Vec<PublishBatchEntry> {
    (0..count)
        .map(|at| PublishBatchEntry::new(format!("e{at}"), Publish::new("m".repeat(message_len))))
        .collect()
}

#[test]
fn a_batch_holds_1_to_10_entries_with_distinct_valid_ids() {
    assert!(check_publish_batch(&entries(1, 1), standard()).is_ok());
    assert!(check_publish_batch(&entries(MAX_PUBLISH_BATCH_ENTRIES, 1), standard()).is_ok());
    assert_eq!(
        kind(check_publish_batch(&[], standard())),
        ErrorKind::EmptyBatchRequest
    );
    assert_eq!(
        kind(check_publish_batch(&entries(11, 1), standard())),
        ErrorKind::TooManyEntriesInBatchRequest
    );
    let id = |id: &str| vec![PublishBatchEntry::new(id, Publish::new("m"))];
    assert!(check_publish_batch(&id(&"i".repeat(MAX_BATCH_ENTRY_ID_LEN)), standard()).is_ok());
    for bad in [
        "i".repeat(MAX_BATCH_ENTRY_ID_LEN + 1),
        String::new(),
        "a.b".to_owned(),
    ] {
        assert_eq!(
            kind(check_publish_batch(&id(&bad), standard())),
            ErrorKind::InvalidBatchEntryId,
            "{bad:?}"
        );
    }
    let mut twice = entries(2, 1);
    twice[1].id = twice[0].id.clone();
    assert_eq!(
        kind(check_publish_batch(&twice, standard())),
        ErrorKind::BatchEntryIdsNotDistinct
    );
}

#[test]
fn a_batch_fits_the_topics_maximum_size_all_together() {
    let half = DEFAULT_MAX_MESSAGE_SIZE / 2;
    assert!(check_publish_batch(&entries(2, half), standard()).is_ok());
    let mut over = entries(2, half);
    over[1].publish.message.push('m');
    let refused = check_publish_batch(&over, standard());
    assert_eq!(kind(refused.clone()), ErrorKind::BatchRequestTooLong);
    assert!(message(refused).contains("262145 bytes"));
    let large = standard().maximum_message_size(MAX_MAXIMUM_MESSAGE_SIZE);
    assert!(check_publish_batch(&over, large).is_ok());
}

#[test]
fn content_based_dedup_ids_are_the_messages_sha256_without_attributes() {
    assert_eq!(
        content_dedup_id(""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(
        content_dedup_id("abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
    assert_eq!(content_dedup_id("abc").len(), 64);
    assert!(check_publish(
        &Publish::new("m")
            .group_id("g")
            .dedup_id(content_dedup_id("m")),
        fifo()
    )
    .is_ok());
}
