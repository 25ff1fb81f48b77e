//! The rules' own tests: each limit and check, and the messages that say what to fix.

use super::*;

fn kind<T: std::fmt::Debug>(result: Result<T, TransportError>) -> ErrorKind {
    result.unwrap_err().kind().expect("a service error")
}

#[test]
fn queue_names_follow_the_sqs_alphabet_and_length() {
    assert!(check_queue_name("orders").is_ok());
    assert!(check_queue_name("orders.fifo").is_ok());
    assert!(check_queue_name(&"a".repeat(80)).is_ok());
    assert_eq!(
        kind(check_queue_name(&"a".repeat(81))),
        ErrorKind::InvalidParameterValue
    );
    assert_eq!(
        kind(check_queue_name(&format!("{}.fifo", "a".repeat(76)))),
        ErrorKind::InvalidParameterValue
    );
    assert_eq!(
        kind(check_queue_name("or ders")),
        ErrorKind::InvalidParameterValue
    );
    assert_eq!(
        kind(check_queue_name(".fifo")),
        ErrorKind::InvalidParameterValue
    );
    assert_eq!(kind(check_queue_name("")), ErrorKind::InvalidParameterValue);
}

#[test]
fn tokens_take_alphanumerics_and_punctuation_up_to_128() {
    assert!(check_token("MessageGroupId", "acct-9:a/b{c}~").is_ok());
    assert!(check_token("MessageGroupId", &"x".repeat(128)).is_ok());
    assert!(check_token("MessageGroupId", &"x".repeat(129)).is_err());
    assert!(check_token("MessageGroupId", "").is_err());
    assert!(check_token("MessageGroupId", "a b").is_err());
    assert!(check_token("MessageGroupId", "é").is_err());
}

#[test]
fn a_token_takes_exactly_the_letters_digits_and_punctuation_of_ascii() {
    for byte in 0..=0x7F_u8 {
        let token = format!("a{}z", byte as char);
        assert_eq!(
            check_token("MessageGroupId", &token).is_ok(),
            byte.is_ascii_alphanumeric() || byte.is_ascii_punctuation(),
            "{byte:#04x}"
        );
    }
    for wide in ['é', '\u{80}', '\u{FFFD}', '😀'] {
        assert!(check_token("MessageDeduplicationId", &format!("a{wide}")).is_err());
    }
}

#[test]
fn bodies_must_be_non_empty_and_in_the_allowed_characters() {
    assert!(check_body("hello\t\n\r 😀").is_ok());
    assert_eq!(kind(check_body("")), ErrorKind::MissingParameter);
    assert_eq!(
        kind(check_body("a\u{1}b")),
        ErrorKind::InvalidMessageContents
    );
    assert_eq!(
        kind(check_body("\u{FFFE}")),
        ErrorKind::InvalidMessageContents
    );
}

#[test]
fn the_bytewise_check_of_the_allowed_characters_agrees_with_the_characters_one_by_one() {
    // Every code point alone, and at each place of a body longer than the check's chunks, after
    // ASCII and after a wide character (the one refused wide characters are three bytes).
    for code in 0..=0x10FFFF_u32 {
        let Some(c) = char::from_u32(code) else {
            continue;
        };
        assert_eq!(
            all_allowed(c.encode_utf8(&mut [0; 4])),
            is_allowed_char(c),
            "{c:?}"
        );
    }
    for bad in ['\u{0}', '\u{1F}', '\u{FFFE}', '\u{FFFF}'] {
        for prefix in ["", "é"] {
            for at in 0..140 {
                let body = format!("{prefix}{}{bad}{}", "x".repeat(at), "y".repeat(140 - at));
                assert!(!all_allowed(&body), "{bad:?} at {at} after {prefix:?}");
                assert_eq!(kind(check_body(&body)), ErrorKind::InvalidMessageContents);
            }
        }
    }
    assert!(all_allowed(
        &"\t\n\r ~\u{7F}\u{80}\u{D7FF}\u{E000}\u{FFFD}\u{10000}😀".repeat(20)
    ));
    assert!(all_allowed(""));
}

fn string(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::string(value)
}

#[test]
fn message_attributes_are_checked_and_sized() {
    let mut attributes = BTreeMap::new();
    attributes.insert("trace.id".to_owned(), string("abc"));
    assert_eq!(
        check_message_attributes(&attributes).unwrap(),
        "trace.id".len() + "String".len() + 3
    );
    for bad in ["AWS.x", "amazon.y", ".x", "x.", "a..b", "a b", ""] {
        let mut attributes = BTreeMap::new();
        attributes.insert(bad.to_owned(), string("v"));
        assert!(check_message_attributes(&attributes).is_err(), "{bad}");
    }
    let too_many: BTreeMap<_, _> = (0..11).map(|i| (format!("a{i}"), string("v"))).collect();
    assert!(check_message_attributes(&too_many).is_err());
    let mut attributes = BTreeMap::new();
    attributes.insert("n".to_owned(), MessageAttributeValue::number("12.5"));
    attributes.insert("b".to_owned(), MessageAttributeValue::binary(vec![1, 2]));
    attributes.insert(
        "s".to_owned(),
        MessageAttributeValue {
            data_type: "String.custom".into(),
            ..string("x")
        },
    );
    assert!(check_message_attributes(&attributes).is_ok());
    for bad in [
        MessageAttributeValue::number("twelve"),
        MessageAttributeValue {
            data_type: "Text".into(),
            ..string("x")
        },
        MessageAttributeValue {
            data_type: "String.".into(),
            ..string("x")
        },
        string(""),
        MessageAttributeValue {
            data_type: "Binary".into(),
            string_value: Some("x".into()),
            binary_value: None,
        },
    ] {
        let mut attributes = BTreeMap::new();
        attributes.insert("a".to_owned(), bad.clone());
        assert!(check_message_attributes(&attributes).is_err(), "{bad:?}");
    }
}

#[test]
fn a_message_is_sized_as_the_attribute_check_sizes_it() {
    let mut message = SendMessage::new("body");
    message
        .message_attributes
        .insert("trace.id".to_owned(), string("abc"));
    message.message_attributes.insert(
        "blob".to_owned(),
        MessageAttributeValue::binary(vec![1, 2, 3, 4]),
    );
    assert_eq!(
        message_size(&message),
        "body".len() + check_message_attributes(&message.message_attributes).unwrap()
    );
    assert_eq!(
        message_size(&message),
        4 + ("trace.id".len() + "String".len() + 3) + ("blob".len() + "Binary".len() + 4)
    );
}

#[test]
fn batch_ids_are_counted_checked_and_distinct() {
    assert_eq!(
        kind(check_batch_ids([].into_iter())),
        ErrorKind::EmptyBatchRequest
    );
    let eleven: Vec<String> = (0..11).map(|i| i.to_string()).collect();
    assert_eq!(
        kind(check_batch_ids(eleven.iter().map(String::as_str))),
        ErrorKind::TooManyEntriesInBatchRequest
    );
    assert_eq!(
        kind(check_batch_ids(["a", "a"].into_iter())),
        ErrorKind::BatchEntryIdsNotDistinct
    );
    assert_eq!(
        kind(check_batch_ids(["a.b"].into_iter())),
        ErrorKind::InvalidBatchEntryId
    );
    assert!(check_batch_ids(["a-1", "b_2"].into_iter()).is_ok());
}

#[test]
fn queue_attributes_are_parsed_with_their_ranges() {
    assert_eq!(
        parse_queue_attribute("VisibilityTimeout", "43200").unwrap(),
        QueueAttribute::VisibilityTimeout(43200)
    );
    assert_eq!(
        kind(parse_queue_attribute("VisibilityTimeout", "43201")),
        ErrorKind::InvalidAttributeValue
    );
    assert_eq!(
        kind(parse_queue_attribute("DelaySeconds", "901")),
        ErrorKind::InvalidAttributeValue
    );
    assert_eq!(
        kind(parse_queue_attribute("MessageRetentionPeriod", "59")),
        ErrorKind::InvalidAttributeValue
    );
    assert_eq!(
        kind(parse_queue_attribute("MaximumMessageSize", "1048577")),
        ErrorKind::InvalidAttributeValue
    );
    assert_eq!(
        kind(parse_queue_attribute("QueueArn", "x")),
        ErrorKind::InvalidAttributeName
    );
    assert_eq!(
        kind(parse_queue_attribute("Colour", "x")),
        ErrorKind::InvalidAttributeName
    );
    assert_eq!(
        kind(parse_queue_attribute("FifoQueue", "yes")),
        ErrorKind::InvalidAttributeValue
    );
}

#[test]
fn redrive_policies_need_an_arn_and_a_count_in_range() {
    let parsed = parse_queue_attribute(
        "RedrivePolicy",
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":"3"}"#,
    )
    .unwrap();
    let QueueAttribute::RedrivePolicy(Some(policy)) = parsed else {
        panic!("{parsed:?}")
    };
    assert_eq!(policy.target_name(), "dlq");
    assert_eq!(policy.max_receive_count, 3);
    for bad in [
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:0:dlq","maxReceiveCount":0}"#,
        r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:0:dlq","maxReceiveCount":1001}"#,
        r#"{"maxReceiveCount":3}"#,
        r#"{"deadLetterTargetArn":"dlq","maxReceiveCount":3}"#,
        "not json",
    ] {
        assert_eq!(
            kind(parse_queue_attribute("RedrivePolicy", bad)),
            ErrorKind::InvalidAttributeValue,
            "{bad}"
        );
    }
}
