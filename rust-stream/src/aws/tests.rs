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
    for code in [
        "AccessDenied",
        "AccessDeniedException",
        "KmsAccessDenied",
        "KMS.AccessDeniedException",
    ] {
        assert_eq!(
            ErrorKind::from_code(code),
            Some(ErrorKind::AccessDenied),
            "{code}"
        );
    }
    assert_eq!(ErrorKind::from_code("InvalidClientTokenId"), None);
}

#[cfg(feature = "s3")]
#[test]
fn an_s3_access_denied_is_typed_and_names_the_permission_and_the_resource() {
    use aws_sdk_s3::error::{ErrorMetadata, SdkError};
    use aws_sdk_s3::operation::put_object::PutObjectError;
    let answer = |code: &str, message: &str| {
        SdkError::<PutObjectError, ()>::service_error(
            PutObjectError::generic(ErrorMetadata::builder().code(code).message(message).build()),
            (),
        )
    };
    let denied = s3::refused(
        answer("AccessDenied", "Access Denied"),
        "s3:PutObject",
        s3::S3Resource::Objects("payment-files"),
    );
    assert_eq!(denied.kind(), Some(ErrorKind::AccessDenied));
    assert!(!denied.is_retryable(), "granting helps, retrying does not");
    let text = denied.to_string();
    for named in [
        "AccessDenied",
        "Access Denied",
        "`s3:PutObject`",
        "`arn:aws:s3:::payment-files/*`",
        "docs/aws.md",
    ] {
        assert!(text.contains(named), "{named} missing from: {text}");
    }
    let missing = s3::refused(
        answer("NoSuchBucket", "The specified bucket does not exist"),
        "s3:PutObject",
        s3::S3Resource::Objects("payment-files"),
    );
    assert_eq!(missing.kind(), Some(ErrorKind::NoSuchBucket));
    assert_eq!(
        s3::S3Resource::Bucket("payment-files").to_string(),
        "arn:aws:s3:::payment-files",
        "a bucket's own calls are on the bucket, not its objects"
    );
    assert!(
        !missing.to_string().contains("s3:PutObject"),
        "only a refusal names a permission: {missing}"
    );
}

#[test]
fn sns_codes_name_the_models_kinds() {
    for (code, kind) in [
        ("InvalidParameter", Some(ErrorKind::InvalidParameter)),
        (
            "ParameterValueInvalid",
            Some(ErrorKind::InvalidParameterValue),
        ),
        ("NotFound", Some(ErrorKind::NotFound)),
        ("Throttled", Some(ErrorKind::RequestThrottled)),
        ("InternalError", Some(ErrorKind::InternalError)),
        (
            "TooManyEntriesInBatchRequest",
            Some(ErrorKind::TooManyEntriesInBatchRequest),
        ),
        ("BatchRequestTooLong", Some(ErrorKind::BatchRequestTooLong)),
        ("AuthorizationError", Some(ErrorKind::AccessDenied)),
        // No kind of its own: reaches the caller with its code.
        ("TopicLimitExceeded", None),
    ] {
        assert_eq!(error_kind(code), kind, "{code}");
    }
    let failed = sns::sns_failures(&[aws_sdk_sns::types::BatchResultErrorEntry::builder()
        .id("e0")
        .code("ParameterValueInvalid")
        .sender_fault(false)
        .message("bad attribute")
        .build()
        .expect("id, code and sender fault are set")]);
    assert_eq!(failed[0].kind, ErrorKind::InvalidParameterValue);
    assert!(
        failed[0].sender_fault,
        "the request's fault is never retried"
    );
}

#[test]
fn a_local_transport_calls_sns_where_it_calls_sqs() {
    let transport = AwsTransport::local("http://127.0.0.1:4566", "eu-west-1");
    let sns = transport.sns.as_ref().expect("an SNS client").config();
    assert_eq!(
        sns.region().map(|region| region.as_ref()),
        Some("eu-west-1")
    );
    assert_eq!(
        sns.timeout_config()
            .and_then(|timeouts| timeouts.operation_attempt_timeout()),
        Some(ATTEMPT_TIMEOUT)
    );
    assert_eq!(
        sns.retry_config().map(|retries| retries.max_attempts()),
        Some(SDK_ATTEMPTS)
    );
    assert_eq!(
        transport.place("SNS"),
        "SNS at http://127.0.0.1:4566 in region eu-west-1"
    );
}

#[tokio::test]
async fn a_transport_over_an_sqs_client_alone_says_it_has_no_sns() {
    use crate::transport::Transport;
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url("http://127.0.0.1:9")
        .build();
    let transport = AwsTransport::from_client(
        aws_sdk_sqs::Client::from_conf(config),
        Some("http://127.0.0.1:9".to_owned()),
    );
    let error = transport
        .get_topic_attributes("arn:aws:sns:us-east-1:000000000000:orders")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), Some(ErrorKind::UnsupportedOperation));
    assert!(error.to_string().contains("from_clients"), "{error}");
}

#[tokio::test]
async fn sns_requests_that_break_the_rules_never_reach_the_network() {
    use crate::transport::{Publish, PublishBatchEntry, Subscribe, Transport};
    // Nothing listens on port 9: a request that went out would fail as unavailable.
    let closed = AwsTransport::local("http://127.0.0.1:9", "us-east-1");
    let topic = "arn:aws:sns:us-east-1:000000000000:orders";
    let kind = |error: crate::transport::TransportError| error.kind();
    assert_eq!(
        kind(closed.get_topic_attributes("not-an-arn").await.unwrap_err()),
        Some(ErrorKind::InvalidParameter)
    );
    assert_eq!(
        kind(closed.get_subscription_attributes(topic).await.unwrap_err()),
        Some(ErrorKind::InvalidParameter),
        "a topic's ARN is not a subscription's"
    );
    assert_eq!(
        kind(
            closed
                .subscribe(Subscribe::sqs(
                    topic,
                    "arn:aws:sqs:us-east-1:000000000000:q.fifo"
                ))
                .await
                .unwrap_err()
        ),
        Some(ErrorKind::InvalidParameter)
    );
    let result = closed
        .publish_batch(
            topic,
            vec![PublishBatchEntry::new(
                "e0",
                Publish::new("x").dedup_id("d"),
            )],
        )
        .await
        .expect("the failed entry is answered, nothing sent");
    assert_eq!(result.failed[0].kind, ErrorKind::InvalidParameter);
    assert!(result.successful.is_empty());
    let unreachable = closed.list_subscriptions_by_topic(topic).await.unwrap_err();
    assert!(
        matches!(&unreachable, crate::transport::TransportError::Unavailable { message }
            if message.contains("SNS at http://127.0.0.1:9")),
        "{unreachable:?}"
    );
}
