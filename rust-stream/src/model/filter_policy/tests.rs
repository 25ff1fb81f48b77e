//! Filter policies against the rules of the Amazon SNS Developer Guide: each operator matching and
//! missing in both scopes, arrays, missing keys, `$or`, and every limit just inside and just
//! outside.

use serde_json::{json, Value};

use super::*;
use crate::model::wire::MessageAttributeValue;

fn attribute_policy(json: &str) -> FilterPolicy {
    FilterPolicy::parse(json, FilterPolicyScope::MessageAttributes)
        .unwrap_or_else(|err| panic!("{json} should parse: {err}"))
}

fn body_policy(json: &str) -> FilterPolicy {
    FilterPolicy::parse(json, FilterPolicyScope::MessageBody)
        .unwrap_or_else(|err| panic!("{json} should parse: {err}"))
}

fn refused(json: &str, scope: FilterPolicyScope) -> FilterPolicyError {
    match FilterPolicy::parse(json, scope) {
        Ok(_) => panic!("{json} should be refused in scope {scope}"),
        Err(err) => err,
    }
}

fn attributes(pairs: &[(&str, MessageAttributeValue)]) -> MessageAttributes {
    pairs
        .iter()
        .map(|(name, value)| ((*name).to_owned(), value.clone()))
        .collect()
}

fn string(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::string(value)
}

fn number(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::number(value)
}

fn string_array(json: &str) -> MessageAttributeValue {
    MessageAttributeValue {
        data_type: "String.Array".to_owned(),
        string_value: Some(json.to_owned()),
        binary_value: None,
    }
}

/// Whether the attribute policy matches a message whose only attribute is `key`.
fn attr_matches(policy: &FilterPolicy, key: &str, value: MessageAttributeValue) -> bool {
    policy.matches_attributes(&attributes(&[(key, value)]))
}

fn body_matches(policy: &FilterPolicy, body: Value) -> bool {
    policy.matches_body(&body)
}

// ---- scope, text, equality -------------------------------------------------------------------

#[test]
fn scope_names_are_snss_and_message_attributes_is_the_default() {
    assert_eq!(
        FilterPolicyScope::default(),
        FilterPolicyScope::MessageAttributes
    );
    for scope in [
        FilterPolicyScope::MessageAttributes,
        FilterPolicyScope::MessageBody,
    ] {
        assert_eq!(scope.to_string().parse::<FilterPolicyScope>(), Ok(scope));
    }
    assert_eq!(FilterPolicyScope::MessageBody.as_str(), "MessageBody");
    let err = "messagebody".parse::<FilterPolicyScope>().unwrap_err();
    assert_eq!(
        err,
        FilterPolicyError::UnknownScope("messagebody".to_owned())
    );
    assert!(err.to_string().contains("MessageBody"));
}

#[test]
fn a_policy_keeps_its_text_and_scope() {
    let text = "{ \"kind\" : [\"a\",  \"b\"] }";
    let policy = attribute_policy(text);
    assert_eq!(policy.as_json(), text);
    assert_eq!(policy.to_string(), text);
    assert_eq!(policy.scope(), FilterPolicyScope::MessageAttributes);
    assert_eq!(policy.clone(), policy);
    assert_ne!(policy, body_policy(text));
}

#[test]
fn an_empty_policy_matches_everything_in_its_scope() {
    assert!(attribute_policy("{}").matches_attributes(&MessageAttributes::new()));
    assert!(body_policy("{}").matches_body(&json!({})));
}

#[test]
fn a_policy_matches_only_in_its_own_scope() {
    let attrs = attribute_policy(r#"{"kind": ["a"]}"#);
    let body = body_policy(r#"{"kind": ["a"]}"#);
    assert!(!attrs.matches_body(&json!({"kind": "a"})));
    assert!(!body.matches_attributes(&attributes(&[("kind", string("a"))])));
}

#[test]
fn a_body_that_is_not_a_json_object_never_matches() {
    // "Amazon SNS message filtering": a body-scope policy needs a well-formed JSON object.
    let policy = body_policy(r#"{"kind": [{"exists": false}]}"#);
    assert!(body_matches(&policy, json!({})));
    assert!(!body_matches(&policy, json!("kind")));
    assert!(!body_matches(&policy, json!([{"kind": "a"}])));
    assert!(!body_matches(&policy, Value::Null));
}

// ---- exact values ----------------------------------------------------------------------------

#[test]
fn exact_strings_match_case_sensitively() {
    let policy = attribute_policy(r#"{"customer_interests": ["rugby", "tennis"]}"#);
    assert!(attr_matches(&policy, "customer_interests", string("rugby")));
    assert!(attr_matches(
        &policy,
        "customer_interests",
        string("tennis")
    ));
    assert!(!attr_matches(
        &policy,
        "customer_interests",
        string("baseball")
    ));
    assert!(!attr_matches(
        &policy,
        "customer_interests",
        string("Rugby")
    ));

    let policy = body_policy(r#"{"customer_interests": ["rugby", "tennis"]}"#);
    assert!(body_matches(
        &policy,
        json!({"customer_interests": "rugby"})
    ));
    assert!(!body_matches(
        &policy,
        json!({"customer_interests": "baseball"})
    ));
}

#[test]
fn exact_numbers_compare_as_numbers() {
    // "Numeric value matching": 301.5 matches a Number attribute of 301.5 or 3.015e2.
    let policy = attribute_policy(r#"{"price_usd": [301.5]}"#);
    assert!(attr_matches(&policy, "price_usd", number("301.5")));
    assert!(attr_matches(&policy, "price_usd", number("3.015e2")));
    assert!(attr_matches(&policy, "price_usd", number("301.50")));
    assert!(!attr_matches(&policy, "price_usd", number("301.6")));
    // A String attribute is a string, not a number.
    assert!(!attr_matches(&policy, "price_usd", string("301.5")));
    // Nor does a number in the policy match a string in the body.
    let policy = body_policy(r#"{"price_usd": [301.5]}"#);
    assert!(body_matches(&policy, json!({"price_usd": 3.015e2})));
    assert!(!body_matches(&policy, json!({"price_usd": "301.5"})));
    assert!(!body_matches(&policy, json!({"price_usd": 301})));
}

#[test]
fn a_string_in_the_policy_does_not_match_a_number_attribute() {
    let policy = attribute_policy(r#"{"count": ["5"]}"#);
    assert!(!attr_matches(&policy, "count", number("5")));
    assert!(attr_matches(&policy, "count", string("5")));
}

#[test]
fn custom_type_labels_keep_their_base_type() {
    let policy = attribute_policy(r#"{"size": [{"numeric": [">", 1]}]}"#);
    let labelled = MessageAttributeValue {
        data_type: "Number.float".to_owned(),
        string_value: Some("2.5".to_owned()),
        binary_value: None,
    };
    assert!(attr_matches(&policy, "size", labelled));
}

#[test]
fn true_false_and_null_match_json_values_of_the_body() {
    let policy = body_policy(r#"{"flag": [true], "gone": [null]}"#);
    assert!(body_matches(&policy, json!({"flag": true, "gone": null})));
    assert!(!body_matches(&policy, json!({"flag": false, "gone": null})));
    assert!(!body_matches(
        &policy,
        json!({"flag": "true", "gone": null})
    ));
    assert!(!body_matches(&policy, json!({"flag": true})));
}

// ---- arrays in messages ----------------------------------------------------------------------

#[test]
fn a_string_array_attribute_matches_when_one_element_does() {
    // "String value matching": each element of a String.Array is matched on its own.
    let policy = attribute_policy(r#"{"customer_interests": ["rugby", "tennis"]}"#);
    assert!(attr_matches(
        &policy,
        "customer_interests",
        string_array(r#"["rugby", "baseball"]"#)
    ));
    assert!(!attr_matches(
        &policy,
        "customer_interests",
        string_array(r#"["baseball"]"#)
    ));
    // Numbers in the array are numbers.
    let numeric = attribute_policy(r#"{"sizes": [{"numeric": [">", 10]}]}"#);
    assert!(attr_matches(&numeric, "sizes", string_array("[1, 20]")));
    assert!(!attr_matches(&numeric, "sizes", string_array("[1, 2]")));
    // A value that is not a JSON array has no elements to match.
    assert!(!attr_matches(
        &policy,
        "customer_interests",
        string_array("rugby")
    ));
}

#[test]
fn a_body_array_matches_when_one_element_does() {
    let policy = body_policy(r#"{"customer_interests": ["rugby"]}"#);
    assert!(body_matches(
        &policy,
        json!({"customer_interests": ["baseball", "rugby"]})
    ));
    assert!(!body_matches(
        &policy,
        json!({"customer_interests": ["baseball"]})
    ));
    // An empty array has no value: the key counts as absent.
    assert!(!body_matches(&policy, json!({"customer_interests": []})));
    let absent = body_policy(r#"{"customer_interests": [{"exists": false}]}"#);
    assert!(body_matches(&absent, json!({"customer_interests": []})));
}

#[test]
fn nested_keys_reach_into_arrays_of_objects() {
    let policy = body_policy(r#"{"order": {"lines": {"sku": [{"prefix": "BK-"}]}}}"#);
    assert!(body_matches(
        &policy,
        json!({"order": {"lines": [{"sku": "CD-1"}, {"sku": "BK-2"}]}})
    ));
    assert!(!body_matches(
        &policy,
        json!({"order": {"lines": [{"sku": "CD-1"}, {"sku": "CD-2"}]}})
    ));
    // A key whose value is an object has no value of its own.
    assert!(!body_matches(
        &policy,
        json!({"order": {"lines": {"sku": {"id": "BK-1"}}}})
    ));
}

// ---- missing keys ----------------------------------------------------------------------------

#[test]
fn a_missing_key_fails_every_operator_but_exists_false() {
    let empty = MessageAttributes::new();
    for policy in [
        r#"{"k": ["a"]}"#,
        r#"{"k": [1]}"#,
        r#"{"k": [{"prefix": "a"}]}"#,
        r#"{"k": [{"suffix": "a"}]}"#,
        r#"{"k": [{"equals-ignore-case": "a"}]}"#,
        // anything-but needs the key present: "anything-but can be combined with exists: false"
        // to take absent keys too ("String value matching").
        r#"{"k": [{"anything-but": "a"}]}"#,
        r#"{"k": [{"anything-but": {"prefix": "a"}}]}"#,
        r#"{"k": [{"numeric": [">", 0]}]}"#,
        r#"{"k": [{"exists": true}]}"#,
        r#"{"k": [{"cidr": "10.0.0.0/8"}]}"#,
    ] {
        assert!(
            !attribute_policy(policy).matches_attributes(&empty),
            "{policy}"
        );
        assert!(
            !body_policy(policy).matches_body(&json!({"other": 1})),
            "{policy}"
        );
    }
    let absent = r#"{"k": [{"exists": false}]}"#;
    assert!(attribute_policy(absent).matches_attributes(&empty));
    assert!(body_policy(absent).matches_body(&json!({"other": 1})));
}

#[test]
fn anything_but_or_exists_false_takes_absent_keys_too() {
    let policy = attribute_policy(r#"{"k": [{"anything-but": "test"}, {"exists": false}]}"#);
    assert!(policy.matches_attributes(&MessageAttributes::new()));
    assert!(attr_matches(&policy, "k", string("prod")));
    assert!(!attr_matches(&policy, "k", string("test")));
}

#[test]
fn binary_attributes_are_ignored_as_if_absent() {
    // "Filter policy constraints": Amazon SNS ignores message attributes with the Binary type.
    let binary = MessageAttributeValue::binary(b"rugby".to_vec());
    assert!(!attr_matches(
        &attribute_policy(r#"{"k": ["rugby"]}"#),
        "k",
        binary.clone()
    ));
    assert!(!attr_matches(
        &attribute_policy(r#"{"k": [{"exists": true}]}"#),
        "k",
        binary.clone()
    ));
    assert!(attr_matches(
        &attribute_policy(r#"{"k": [{"exists": false}]}"#),
        "k",
        binary
    ));
}

// ---- string operators ------------------------------------------------------------------------

#[test]
fn prefix_matches_strings_that_start_with_it() {
    let policy = attribute_policy(r#"{"customer_interests": [{"prefix": "bas"}]}"#);
    assert!(attr_matches(
        &policy,
        "customer_interests",
        string("baseball")
    ));
    assert!(attr_matches(
        &policy,
        "customer_interests",
        string("basketball")
    ));
    assert!(!attr_matches(
        &policy,
        "customer_interests",
        string("rugby")
    ));
    // "Prefixes are supported for string matching only."
    let numbers = attribute_policy(r#"{"code": [{"prefix": "12"}]}"#);
    assert!(!attr_matches(&numbers, "code", number("123")));

    let policy = body_policy(r#"{"customer_interests": [{"prefix": "bas"}]}"#);
    assert!(body_matches(
        &policy,
        json!({"customer_interests": "baseball"})
    ));
    assert!(!body_matches(
        &policy,
        json!({"customer_interests": "rugby"})
    ));
}

#[test]
fn suffix_matches_strings_that_end_with_it() {
    let policy = attribute_policy(r#"{"customer_interests": [{"suffix": "ball"}]}"#);
    assert!(attr_matches(
        &policy,
        "customer_interests",
        string("baseball")
    ));
    assert!(!attr_matches(
        &policy,
        "customer_interests",
        string("rugby")
    ));
    let policy = body_policy(r#"{"customer_interests": [{"suffix": "ball"}]}"#);
    assert!(body_matches(
        &policy,
        json!({"customer_interests": "football"})
    ));
    assert!(!body_matches(
        &policy,
        json!({"customer_interests": "balls"})
    ));
}

#[test]
fn equals_ignore_case_matches_in_any_case() {
    let policy = attribute_policy(r#"{"customer_interests": [{"equals-ignore-case": "tennis"}]}"#);
    assert!(attr_matches(
        &policy,
        "customer_interests",
        string("TENNIS")
    ));
    assert!(attr_matches(
        &policy,
        "customer_interests",
        string("Tennis")
    ));
    assert!(!attr_matches(
        &policy,
        "customer_interests",
        string("tennis2")
    ));
    let policy = body_policy(r#"{"currency": [{"equals-ignore-case": "EUR"}]}"#);
    assert!(body_matches(&policy, json!({"currency": "eur"})));
    assert!(!body_matches(&policy, json!({"currency": "usd"})));
}

#[test]
fn anything_but_strings_matches_other_values() {
    let policy =
        attribute_policy(r#"{"customer_interests": [{"anything-but": ["rugby", "tennis"]}]}"#);
    assert!(attr_matches(
        &policy,
        "customer_interests",
        string("baseball")
    ));
    assert!(!attr_matches(
        &policy,
        "customer_interests",
        string("rugby")
    ));
    // "String value matching": an array with a value that is neither rugby nor tennis matches.
    assert!(attr_matches(
        &policy,
        "customer_interests",
        string_array(r#"["rugby", "baseball"]"#)
    ));
    assert!(!attr_matches(
        &policy,
        "customer_interests",
        string_array(r#"["rugby", "tennis"]"#)
    ));

    let single = body_policy(r#"{"customer_interests": [{"anything-but": "rugby"}]}"#);
    assert!(body_matches(
        &single,
        json!({"customer_interests": "football"})
    ));
    assert!(!body_matches(
        &single,
        json!({"customer_interests": "rugby"})
    ));
    assert!(body_matches(
        &single,
        json!({"customer_interests": ["rugby", "football"]})
    ));
}

#[test]
fn anything_but_numbers_matches_other_numbers() {
    // "Numeric value matching": anything-but [100, 500].
    let policy = attribute_policy(r#"{"price": [{"anything-but": [100, 500]}]}"#);
    assert!(attr_matches(&policy, "price", number("101")));
    assert!(attr_matches(&policy, "price", number("100.1")));
    assert!(!attr_matches(&policy, "price", number("100")));
    assert!(!attr_matches(&policy, "price", number("1e2")));
    let policy = body_policy(r#"{"price": [{"anything-but": [100, 500]}]}"#);
    assert!(body_matches(&policy, json!({"price": [100, 50]})));
    assert!(!body_matches(&policy, json!({"price": 100})));
}

#[test]
fn anything_but_prefix_matches_strings_that_do_not_start_with_it() {
    let policy = attribute_policy(r#"{"event": [{"anything-but": {"prefix": "order-"}}]}"#);
    assert!(attr_matches(&policy, "event", string("payment-posted")));
    assert!(!attr_matches(&policy, "event", string("order-placed")));
    let policy = body_policy(r#"{"event": [{"anything-but": {"prefix": "order-"}}]}"#);
    assert!(body_matches(&policy, json!({"event": "payment-posted"})));
    assert!(!body_matches(&policy, json!({"event": "order-placed"})));
}

#[test]
fn anything_but_takes_only_values_or_a_prefix() {
    // SNS refuses anything-but with suffix or equals-ignore-case, or with true, false or null.
    let err = refused(
        r#"{"event": [{"anything-but": {"suffix": "-test"}}]}"#,
        FilterPolicyScope::MessageAttributes,
    );
    assert!(matches!(
        &err,
        FilterPolicyError::AnythingButPattern { key, pattern } if key == "event" && pattern == "suffix"
    ));
    assert!(err.to_string().contains("`event`"));
    for bad in [
        r#"{"event": [{"anything-but": []}]}"#,
        r#"{"event": [{"anything-but": true}]}"#,
        r#"{"event": [{"anything-but": [null]}]}"#,
        r#"{"event": [{"anything-but": {"prefix": 1}}]}"#,
        r#"{"event": [{"anything-but": {}}]}"#,
    ] {
        let err = refused(bad, FilterPolicyScope::MessageAttributes);
        assert!(
            matches!(&err, FilterPolicyError::OperatorValue { key, operator: "anything-but", .. } if key == "event"),
            "{bad}: {err:?}"
        );
    }
}

// ---- numeric ---------------------------------------------------------------------------------

#[test]
fn numeric_equals_and_bounds() {
    let cases: [(&str, &[(&str, bool)]); 5] = [
        (
            r#"["=", 301.5]"#,
            &[("301.5", true), ("3.015e2", true), ("301", false)],
        ),
        (r#"["<", 0]"#, &[("-0.5", true), ("0", false), ("1", false)]),
        (
            r#"["<=", 0]"#,
            &[("-1", true), ("0", true), ("0.00001", false)],
        ),
        (
            r#"[">", 0]"#,
            &[("0.00001", true), ("0", false), ("-1", false)],
        ),
        (
            r#"[">=", 0]"#,
            &[("0", true), ("5", true), ("-0.00001", false)],
        ),
    ];
    for (expression, values) in cases {
        let policy = format!(r#"{{"price_usd": [{{"numeric": {expression}}}]}}"#);
        let attrs = attribute_policy(&policy);
        let body = body_policy(&policy);
        for (value, expected) in values {
            assert_eq!(
                attr_matches(&attrs, "price_usd", number(value)),
                *expected,
                "{expression} against {value}"
            );
            let parsed: Value = serde_json::from_str(value).unwrap();
            assert_eq!(
                body_matches(&body, json!({ "price_usd": parsed })),
                *expected,
                "{expression} against body {value}"
            );
        }
    }
}

#[test]
fn numeric_ranges() {
    // "Numeric value matching": positive numbers up to and including 150.
    let policy = attribute_policy(r#"{"price_usd": [{"numeric": [">", 0, "<=", 150]}]}"#);
    assert!(attr_matches(&policy, "price_usd", number("150")));
    assert!(attr_matches(&policy, "price_usd", number("0.1")));
    assert!(!attr_matches(&policy, "price_usd", number("0")));
    assert!(!attr_matches(&policy, "price_usd", number("150.00001")));
    let policy = body_policy(r#"{"price_usd": [{"numeric": [">=", 10, "<", 20]}]}"#);
    assert!(body_matches(&policy, json!({"price_usd": 10})));
    assert!(!body_matches(&policy, json!({"price_usd": 20})));
}

#[test]
fn numeric_matches_numbers_only() {
    let policy = attribute_policy(r#"{"price_usd": [{"numeric": [">", 0]}]}"#);
    assert!(!attr_matches(&policy, "price_usd", string("5")));
    assert!(!attr_matches(&policy, "price_usd", number("not a number")));
    assert!(!attr_matches(&policy, "price_usd", number("NaN")));
    let policy = body_policy(r#"{"price_usd": [{"numeric": [">", 0]}]}"#);
    assert!(!body_matches(&policy, json!({"price_usd": "5"})));
    assert!(!body_matches(&policy, json!({"price_usd": true})));
}

#[test]
fn numbers_count_to_five_decimals() {
    // "Filter policy constraints": five digits of accuracy after the decimal point.
    let policy = attribute_policy(r#"{"rate": [{"numeric": ["=", 1.00001]}]}"#);
    assert!(attr_matches(&policy, "rate", number("1.000011")));
    assert!(!attr_matches(&policy, "rate", number("1.00002")));
    let policy = attribute_policy(r#"{"rate": [1.000001]}"#);
    assert!(attr_matches(&policy, "rate", number("1")));
}

#[test]
fn numbers_in_a_policy_stay_within_a_billion() {
    // "Filter policy constraints": numbers range from -10^9 to 10^9.
    for inside in [
        r#"{"n": [{"numeric": ["<", 1000000000]}]}"#,
        r#"{"n": [{"numeric": [">=", -1000000000]}]}"#,
        r#"{"n": [1000000000]}"#,
        r#"{"n": [{"anything-but": [-1000000000]}]}"#,
    ] {
        attribute_policy(inside);
    }
    for outside in [
        r#"{"n": [{"numeric": ["<", 1000000000.001]}]}"#,
        r#"{"n": [{"numeric": [">", 0, "<", 1e10]}]}"#,
        r#"{"n": [-1000000001]}"#,
        r#"{"n": [{"anything-but": [2000000000]}]}"#,
    ] {
        let err = refused(outside, FilterPolicyScope::MessageBody);
        assert!(
            matches!(&err, FilterPolicyError::NumberOutOfRange { key, .. } if key == "n"),
            "{outside}: {err:?}"
        );
    }
}

#[test]
fn malformed_numeric_expressions_are_refused() {
    for (expression, says) in [
        ("[]", "empty"),
        (r#"[">"]"#, "1 terms"),
        (r#"[">", 1, "<"]"#, "3 terms"),
        (r#"[">", 1, "<", 5, "=", 3]"#, "6 terms"),
        (r#"["!=", 1]"#, "unknown operator"),
        (r#"[1, ">"]"#, "a number where an operator belongs"),
        (r#"[">", "1"]"#, "a string, not a number"),
        (r#"["<", 5, ">", 1]"#, "a lower bound"),
        (r#"["=", 1, "<", 5]"#, "a lower bound"),
        (r#"[">", 5, "<", 5]"#, "not below"),
        (r#"[">", 6, "<=", 5]"#, "not below"),
        (r#"">""#, "not an array"),
    ] {
        let policy = format!(r#"{{"price": [{{"numeric": {expression}}}]}}"#);
        let err = refused(&policy, FilterPolicyScope::MessageAttributes);
        let FilterPolicyError::Numeric { key, reason } = &err else {
            panic!("{expression}: {err:?}");
        };
        assert_eq!(key, "price");
        assert!(reason.contains(says), "{expression}: {reason}");
    }
}

// ---- exists ----------------------------------------------------------------------------------

#[test]
fn exists_true_and_false() {
    // "Key matching".
    let present = attribute_policy(r#"{"store": [{"exists": true}]}"#);
    let absent = attribute_policy(r#"{"store": [{"exists": false}]}"#);
    let with_store = attributes(&[("store", string("fans")), ("other", string("x"))]);
    let without = attributes(&[("other", string("x"))]);
    assert!(present.matches_attributes(&with_store));
    assert!(!present.matches_attributes(&without));
    assert!(!absent.matches_attributes(&with_store));
    assert!(absent.matches_attributes(&without));

    let present = body_policy(r#"{"store": [{"exists": true}]}"#);
    let absent = body_policy(r#"{"store": [{"exists": false}]}"#);
    assert!(body_matches(&present, json!({"store": "fans"})));
    assert!(body_matches(&present, json!({"store": null})));
    assert!(!body_matches(&present, json!({"other": "x"})));
    assert!(!body_matches(&absent, json!({"store": "fans"})));
    assert!(body_matches(&absent, json!({"other": "x"})));
}

#[test]
fn exists_takes_a_boolean() {
    let err = refused(
        r#"{"store": [{"exists": "yes"}]}"#,
        FilterPolicyScope::MessageAttributes,
    );
    assert!(matches!(
        &err,
        FilterPolicyError::OperatorValue { key, operator: "exists", .. } if key == "store"
    ));
}

// ---- cidr ------------------------------------------------------------------------------------

#[test]
fn cidr_matches_addresses_in_the_network() {
    // "IP address matching".
    let policy = attribute_policy(r#"{"source_ip": [{"cidr": "10.0.0.0/24"}]}"#);
    assert!(attr_matches(&policy, "source_ip", string("10.0.0.255")));
    assert!(!attr_matches(&policy, "source_ip", string("10.0.1.0")));
    assert!(!attr_matches(
        &policy,
        "source_ip",
        string("not an address")
    ));
    assert!(!attr_matches(
        &policy,
        "source_ip",
        string("::ffff:10.0.0.1")
    ));

    let policy = body_policy(r#"{"source_ip": [{"cidr": "2001:db8::/32"}]}"#);
    assert!(body_matches(&policy, json!({"source_ip": "2001:db8:1::5"})));
    assert!(!body_matches(&policy, json!({"source_ip": "2001:db9::5"})));
    assert!(!body_matches(&policy, json!({"source_ip": "10.0.0.1"})));

    let everything = attribute_policy(r#"{"ip": [{"cidr": "0.0.0.0/0"}]}"#);
    assert!(attr_matches(&everything, "ip", string("203.0.113.9")));
    let one = attribute_policy(r#"{"ip": [{"cidr": "203.0.113.9/32"}]}"#);
    assert!(attr_matches(&one, "ip", string("203.0.113.9")));
    assert!(!attr_matches(&one, "ip", string("203.0.113.8")));
}

#[test]
fn malformed_cidrs_are_refused() {
    for (cidr, says) in [
        ("10.0.0.0", "one '/'"),
        ("10.0.0.0/x", "whole number"),
        ("10.0.0/8", "not an IPv4 or IPv6 address"),
        ("10.0.0.0/33", "more bits"),
        ("2001:db8::/129", "more bits"),
    ] {
        let policy = format!(r#"{{"ip": [{{"cidr": "{cidr}"}}]}}"#);
        let err = refused(&policy, FilterPolicyScope::MessageAttributes);
        assert!(
            matches!(&err, FilterPolicyError::Cidr { key, reason, .. } if key == "ip" && reason.contains(says)),
            "{cidr}: {err:?}"
        );
    }
    // The boundaries themselves are fine.
    attribute_policy(r#"{"ip": [{"cidr": "10.0.0.0/32"}, {"cidr": "::/128"}]}"#);
}

// ---- AND, OR, $or ----------------------------------------------------------------------------

#[test]
fn keys_are_anded_and_values_ored() {
    // "AND/OR logic".
    let policy = attribute_policy(
        r#"{"customer_interests": ["rugby", "football"], "price_usd": [{"numeric": [">", 100]}]}"#,
    );
    let both = attributes(&[
        ("customer_interests", string("football")),
        ("price_usd", number("101")),
    ]);
    let cheap = attributes(&[
        ("customer_interests", string("football")),
        ("price_usd", number("100")),
    ]);
    let unrelated = attributes(&[("price_usd", number("101"))]);
    assert!(policy.matches_attributes(&both));
    assert!(!policy.matches_attributes(&cheap));
    assert!(!policy.matches_attributes(&unrelated));
}

#[test]
fn or_operator_joins_alternatives() {
    // "AND/OR logic", "OR operator": source && (metricName || namespace).
    let text = r#"{"source": ["aws.cloudwatch"], "$or": [{"metricName": ["CPUUtilization"]}, {"namespace": ["AWS/EC2"]}]}"#;
    let policy = attribute_policy(text);
    let by_metric = attributes(&[
        ("source", string("aws.cloudwatch")),
        ("metricName", string("CPUUtilization")),
    ]);
    let by_namespace = attributes(&[
        ("source", string("aws.cloudwatch")),
        ("namespace", string("AWS/EC2")),
    ]);
    let neither = attributes(&[
        ("source", string("aws.cloudwatch")),
        ("metricName", string("ReadLatency")),
    ]);
    let wrong_source = attributes(&[
        ("source", string("aws.ecs")),
        ("namespace", string("AWS/EC2")),
    ]);
    assert!(policy.matches_attributes(&by_metric));
    assert!(policy.matches_attributes(&by_namespace));
    assert!(!policy.matches_attributes(&neither));
    assert!(!policy.matches_attributes(&wrong_source));

    let policy = body_policy(text);
    assert!(body_matches(
        &policy,
        json!({"source": "aws.cloudwatch", "namespace": "AWS/EC2"})
    ));
    assert!(!body_matches(&policy, json!({"source": "aws.cloudwatch"})));
}

#[test]
fn or_operator_nests_inside_body_keys() {
    let policy = body_policy(
        r#"{"detail": {"$or": [{"state": ["failed"]}, {"retries": [{"numeric": [">", 3]}]}]}}"#,
    );
    assert!(body_matches(
        &policy,
        json!({"detail": {"state": "failed"}})
    ));
    assert!(body_matches(&policy, json!({"detail": {"retries": 4}})));
    assert!(!body_matches(
        &policy,
        json!({"detail": {"state": "ok", "retries": 1}})
    ));
}

#[test]
fn or_with_fewer_than_two_objects_is_a_plain_key() {
    // "OR operator": "$or" is an OR only with at least two objects; otherwise it is a key name,
    // and its objects are then read as operators.
    let err = refused(
        r#"{"$or": [{"metricName": ["CPUUtilization"]}]}"#,
        FilterPolicyScope::MessageAttributes,
    );
    assert!(matches!(
        &err,
        FilterPolicyError::UnknownOperator { key, operator } if key == "$or" && operator == "metricName"
    ));
    // A plain `$or` key matches an attribute of that name.
    let policy = attribute_policy(r#"{"$or": ["x"]}"#);
    assert!(attr_matches(&policy, "$or", string("x")));
}

#[test]
fn or_whose_objects_use_operator_words_is_a_plain_key() {
    // "OR operator": {"$or": [{"numeric": 123}, {"prefix": "abc"}]} is not an OR.
    let err = refused(
        r#"{"$or": [{"numeric": 123}, {"prefix": "abc"}]}"#,
        FilterPolicyScope::MessageAttributes,
    );
    assert!(matches!(&err, FilterPolicyError::Numeric { key, .. } if key == "$or"));
    let policy = attribute_policy(r#"{"$or": [{"prefix": "ab"}, {"suffix": "yz"}]}"#);
    assert!(attr_matches(&policy, "$or", string("abc")));
    assert!(!attr_matches(&policy, "$or", string("xxx")));
}

// ---- shape of a policy -----------------------------------------------------------------------

#[test]
fn nested_keys_only_in_the_body_scope() {
    // "Filter policy constraints": no nested policy for attribute-based filtering.
    let text = r#"{"payment": {"currency": ["EUR"]}}"#;
    let err = refused(text, FilterPolicyScope::MessageAttributes);
    assert_eq!(
        err,
        FilterPolicyError::NestedInAttributeScope {
            key: "payment".to_owned()
        }
    );
    assert!(err.to_string().contains("MessageBody"));
    let policy = body_policy(text);
    assert!(body_matches(
        &policy,
        json!({"payment": {"currency": "EUR"}})
    ));
    assert!(!body_matches(
        &policy,
        json!({"payment": {"currency": "USD"}})
    ));
    assert!(!body_matches(&policy, json!({"payment": "EUR"})));
    assert!(!body_matches(&policy, json!({"currency": "EUR"})));
}

/// Whether a refusal is the one expected.
type Check = fn(&FilterPolicyError) -> bool;

#[test]
fn malformed_policies_are_refused_naming_the_key() {
    use FilterPolicyScope::{MessageAttributes as Attrs, MessageBody as Body};
    let cases: Vec<(&str, FilterPolicyScope, Check)> = vec![
        ("{", Attrs, |e| matches!(e, FilterPolicyError::NotJson(_))),
        ("[]", Attrs, |e| {
            matches!(e, FilterPolicyError::NotAnObject { found: "an array" })
        }),
        (
            r#"{"kind": "a"}"#,
            Attrs,
            |e| matches!(e, FilterPolicyError::NotAnArray { key, nested_hint: "", .. } if key == "kind"),
        ),
        (
            r#"{"a": {"kind": 5}}"#,
            Body,
            |e| matches!(e, FilterPolicyError::NotAnArray { key, found: "a number", .. } if key == "a.kind"),
        ),
        (
            r#"{"kind": []}"#,
            Attrs,
            |e| matches!(e, FilterPolicyError::EmptyArray { key } if key == "kind"),
        ),
        (
            r#"{"kind": [["a"]]}"#,
            Attrs,
            |e| matches!(e, FilterPolicyError::InvalidValue { key, found: "an array" } if key == "kind"),
        ),
        (
            r#"{"kind": [{"prefix": "a", "suffix": "b"}]}"#,
            Attrs,
            |e| matches!(e, FilterPolicyError::OperatorCount { key, count: 2 } if key == "kind"),
        ),
        (
            r#"{"kind": [{}]}"#,
            Attrs,
            |e| matches!(e, FilterPolicyError::OperatorCount { key, count: 0 } if key == "kind"),
        ),
        (
            r#"{"kind": [{"wildcard": "a*"}]}"#,
            Attrs,
            |e| matches!(e, FilterPolicyError::UnknownOperator { key, operator } if key == "kind" && operator == "wildcard"),
        ),
        (
            r#"{"kind": [{"prefix": 1}]}"#,
            Attrs,
            |e| matches!(e, FilterPolicyError::OperatorValue { key, operator: "prefix", .. } if key == "kind"),
        ),
        (
            r#"{"kind": [{"suffix": null}]}"#,
            Body,
            |e| matches!(e, FilterPolicyError::OperatorValue { key, operator: "suffix", .. } if key == "kind"),
        ),
        (
            r#"{"kind": [{"equals-ignore-case": ["a"]}]}"#,
            Attrs,
            |e| matches!(e, FilterPolicyError::OperatorValue { key, operator: "equals-ignore-case", .. } if key == "kind"),
        ),
        (
            r#"{"kind": [{"cidr": 10}]}"#,
            Attrs,
            |e| matches!(e, FilterPolicyError::OperatorValue { key, operator: "cidr", .. } if key == "kind"),
        ),
    ];
    for (policy, scope, expected) in cases {
        let err = refused(policy, scope);
        assert!(expected(&err), "{policy}: {err:?}");
        // Every message names what it is about and how to fix it.
        let message = err.to_string();
        assert!(message.len() > 40, "{policy}: {message}");
        if !matches!(
            err,
            FilterPolicyError::NotJson(_) | FilterPolicyError::NotAnObject { .. }
        ) {
            assert!(
                message.contains("`kind`") || message.contains("`a.kind`"),
                "{message}"
            );
        }
    }
}

// ---- limits ----------------------------------------------------------------------------------

#[test]
fn policy_size_limit_is_256_kib() {
    // "Filter policy constraints": the maximum size of a policy is 256 KB.
    let frame = r#"{"k": [""]}"#.len();
    let fill = |size: usize| format!(r#"{{"k": ["{}"]}}"#, "x".repeat(size - frame));
    let inside = fill(MAX_POLICY_SIZE);
    assert_eq!(inside.len(), 262_144);
    attribute_policy(&inside);
    let err = refused(
        &fill(MAX_POLICY_SIZE + 1),
        FilterPolicyScope::MessageAttributes,
    );
    assert_eq!(
        err,
        FilterPolicyError::TooLarge {
            size: 262_145,
            max: 262_144
        }
    );
}

#[test]
fn at_most_five_keys() {
    // "Filter policy constraints": a filter policy can have a maximum of five keys.
    let five = r#"{"a": ["1"], "b": ["1"], "c": ["1"], "d": ["1"], "e": ["1"]}"#;
    attribute_policy(five);
    let six = r#"{"a": ["1"], "b": ["1"], "c": ["1"], "d": ["1"], "e": ["1"], "f": ["1"]}"#;
    let err = refused(six, FilterPolicyScope::MessageAttributes);
    assert!(matches!(
        &err,
        FilterPolicyError::TooManyKeys { count: 6, max: 5, keys } if keys == "a, b, c, d, e, f"
    ));
}

#[test]
fn only_keys_with_values_count_toward_five() {
    // "Filter policy constraints": in {"state", "severity", "message", "finding": {...3 keys}}
    // six keys count; `finding`, which holds an object, does not.
    let six = r#"{"state": ["SUCCESS"], "severity": [{"exists": true}], "message": [{"exists": true}],
        "finding": {"standard_control": [{"exists": true}], "region": [{"exists": true}], "account": [{"exists": true}]}}"#;
    let err = refused(six, FilterPolicyScope::MessageBody);
    assert!(
        matches!(&err, FilterPolicyError::TooManyKeys { count: 6, keys, .. }
        if keys.contains("finding.region") && !keys.contains("finding,"))
    );
    let five = r#"{"state": ["SUCCESS"], "severity": [{"exists": true}],
        "finding": {"standard_control": [{"exists": true}], "region": [{"exists": true}], "account": [{"exists": true}]}}"#;
    body_policy(five);
}

#[test]
fn or_alternatives_count_their_keys_separately() {
    // The five keys of "AND/OR logic"'s nested "$or" example, each alternative with at most
    // three: our reading of the key limit with "$or".
    let policy = r#"{"a": ["1"], "b": ["1"], "$or": [
        {"c": ["1"], "d": ["1"], "e": ["1"]},
        {"f": ["1"], "g": ["1"], "h": ["1"]}]}"#;
    attribute_policy(policy);
    let err = refused(
        r#"{"a": ["1"], "b": ["1"], "$or": [{"c": ["1"]}, {"f": ["1"], "g": ["1"], "h": ["1"], "i": ["1"]}]}"#,
        FilterPolicyScope::MessageAttributes,
    );
    assert!(
        matches!(&err, FilterPolicyError::TooManyKeys { count: 6, keys, .. } if keys == "a, b, f, g, h, i")
    );
}

fn values(count: usize) -> String {
    let values: Vec<String> = (0..count).map(|i| format!("\"v{i}\"")).collect();
    format!("[{}]", values.join(", "))
}

fn combinations_of(json: &str, scope: FilterPolicyScope) -> u64 {
    let policy = FilterPolicy::parse(json, scope).unwrap();
    parse::combinations(&policy.root)
}

#[test]
fn combinations_follow_snss_examples() {
    // "Filter policy constraints": 3 x 1 x 2 = 6.
    let flat = r#"{"key_a": ["value_one", "value_two", "value_three"], "key_b": ["value_one"], "key_c": ["value_one", "value_two"]}"#;
    assert_eq!(
        combinations_of(flat, FilterPolicyScope::MessageAttributes),
        6
    );
    // "Filter policy constraints" (payload-based): 3 x 4 x 2 x 3 = 72.
    let nested = r#"{"key_a": {"key_b": {"key_c": ["value_one", "value_two", "value_three", "value_four"]}},
        "key_d": {"key_e": ["value_one", "value_two", "value_three"]}}"#;
    assert_eq!(combinations_of(nested, FilterPolicyScope::MessageBody), 72);
    // "AND/OR logic": (source * metricName) + (source * metricType * metricId)
    // + (source * metricType * spaceId) = (2 * 2) + (2 * 1 * 2) + (2 * 1 * 3) = 14.
    let or = r#"{"source": ["aws.cloudwatch", "aws.ecs"], "$or": [
        {"metricName": ["CPUUtilization", "ReadLatency"]},
        {"metricType": ["MetricType"], "$or": [{"metricId": [1234, 4321]}, {"spaceId": [1000, 2000, 3000]}]}]}"#;
    assert_eq!(
        combinations_of(or, FilterPolicyScope::MessageAttributes),
        14
    );
}

#[test]
fn at_most_150_combinations() {
    // "Filter policy constraints": the total combination of values must not exceed 150.
    let inside = format!(
        r#"{{"a": {}, "b": {}, "c": {}}}"#,
        values(5),
        values(5),
        values(6)
    );
    attribute_policy(&inside);
    let outside = format!(r#"{{"a": {}}}"#, values(151));
    let err = refused(&outside, FilterPolicyScope::MessageAttributes);
    assert_eq!(
        err,
        FilterPolicyError::TooComplex {
            combinations: 151,
            max: 150
        }
    );
    attribute_policy(&format!(r#"{{"a": {}}}"#, values(150)));
    // Nesting multiplies: 75 values two keys deep are 150, 76 are 152.
    body_policy(&format!(r#"{{"a": {{"b": {}}}}}"#, values(75)));
    let err = refused(
        &format!(r#"{{"a": {{"b": {}}}}}"#, values(76)),
        FilterPolicyScope::MessageBody,
    );
    assert!(matches!(
        err,
        FilterPolicyError::TooComplex {
            combinations: 152,
            ..
        }
    ));
    // "$or" alternatives add up: 75 + 75 inside, 75 + 76 outside.
    let or = |second: usize| {
        format!(
            r#"{{"$or": [{{"a": {}}}, {{"b": {}}}]}}"#,
            values(75),
            values(second)
        )
    };
    attribute_policy(&or(75));
    let err = refused(&or(76), FilterPolicyScope::MessageAttributes);
    assert!(matches!(
        err,
        FilterPolicyError::TooComplex {
            combinations: 151,
            ..
        }
    ));
}

#[test]
fn deep_or_nesting_is_measured_without_expanding_it() {
    // Forty nested levels, each with a two-way "$or", are 2^40 alternatives once expanded; the
    // measure is computed on the tree, saturating, and refuses the policy at once.
    let mut policy = r#"{"z": ["1"]}"#.to_owned();
    for _ in 0..40 {
        policy = format!(r#"{{"$or": [{{"a": ["1"]}}, {{"b": ["1"]}}], "n": {policy}}}"#);
    }
    let err = refused(&policy, FilterPolicyScope::MessageBody);
    assert!(
        matches!(err, FilterPolicyError::TooComplex { .. }),
        "{err:?}"
    );
}
