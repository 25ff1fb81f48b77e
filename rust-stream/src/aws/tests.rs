//! The aws transport's own tests: what it refuses before the network, and how it reads the SDK.

use super::*;
use crate::model::ErrorKind;

#[test]
fn a_failed_entry_whose_code_names_the_requests_fault_is_never_retried() {
    let entry = |code: &str, sender_fault: bool| {
        aws_sdk_sqs::types::BatchResultErrorEntry::builder()
            .id("0")
            .code(code)
            .sender_fault(sender_fault)
            .message("why")
            .build()
            .expect("id, code and sender fault are set")
    };
    let read = failures(&[
        // LocalStack's answer to the delete of an expired receipt handle.
        entry("InvalidParameterValue", false),
        entry("ReceiptHandleIsInvalid", true),
        entry("InternalError", false),
        // A code we do not know: SQS's flag decides.
        entry("SomethingNew", false),
        entry("SomethingElse", true),
    ]);
    let flags: Vec<bool> = read.iter().map(|failure| failure.sender_fault).collect();
    assert_eq!(flags, [true, true, false, false, true]);
    assert_eq!(read[0].kind, ErrorKind::InvalidParameterValue);
}

#[test]
fn queue_urls_are_rebased_onto_the_configured_endpoint() {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url("http://127.0.0.1:4566")
        .build();
    let endpoint = Some("http://127.0.0.1:4566".to_owned());
    let transport = AwsTransport::from_client(aws_sdk_sqs::Client::from_conf(config), endpoint);
    assert_eq!(
        transport
            .rebase("http://localhost.localstack.cloud:4566/000000000000/orders.fifo".to_owned()),
        "http://127.0.0.1:4566/000000000000/orders.fifo"
    );
    assert_eq!(
        transport.rebase("http://127.0.0.1:4566/queue/us-east-1/000000000000/q".to_owned()),
        "http://127.0.0.1:4566/queue/us-east-1/000000000000/q"
    );
}

#[test]
fn an_endpoint_is_shown_without_its_user_info() {
    assert_eq!(
        shown_endpoint("http://user:hunter2@127.0.0.1:4566/path?q=1"),
        "http://***@127.0.0.1:4566/path?q=1"
    );
    assert_eq!(shown_endpoint("https://token@host"), "https://***@host");
    assert_eq!(
        shown_endpoint("http://127.0.0.1:4566/a@b"),
        "http://127.0.0.1:4566/a@b"
    );
    assert_eq!(shown_endpoint("not a url"), "not a url");
}

#[test]
fn both_generations_of_error_codes_name_the_same_kind() {
    assert_eq!(
        ErrorKind::from_code("AWS.SimpleQueueService.NonExistentQueue"),
        Some(ErrorKind::QueueDoesNotExist)
    );
    assert_eq!(
        ErrorKind::from_code("QueueDoesNotExist"),
        Some(ErrorKind::QueueDoesNotExist)
    );
    assert_eq!(
        ErrorKind::from_code("com.amazonaws.sqs#QueueDoesNotExist"),
        Some(ErrorKind::QueueDoesNotExist)
    );
    assert_eq!(
        ErrorKind::from_code("AWS.SimpleQueueService.TooManyEntriesInBatchRequest"),
        Some(ErrorKind::TooManyEntriesInBatchRequest)
    );
    assert_eq!(ErrorKind::from_code("AccessDenied"), None);
}
