//! Large payloads through S3, on the in-process account (its S3 buckets beside its queues) and,
//! for the round trip, on LocalStack's S3 as well: a body
//! over the threshold is put in the bucket and sent as the Java extended client's pointer; a
//! consumer gives its handler the payload, never the pointer, whoever wrote it; a pointer that
//! leads to no payload it was sent with is dead-lettered with the reason; small messages cost no
//! S3 call.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rust_stream::account::Account;
use rust_stream::model::large_payload::{LargePayloads, PayloadPointer, DEFAULT_THRESHOLD};
use rust_stream::prelude::*;
use rust_stream::testing::{eventually, on_each_backend, TestApp};
use rust_stream::transport::{MessageAttributeValue, ReceiveMessage, SendMessage};
use rust_stream::{DEAD_LETTER_REASON_HEADER, EXTENDED_PAYLOAD_SIZE, LEGACY_PAYLOAD_SIZE};
use serde::{Deserialize, Serialize};

const BUCKET: &str = "payment-files";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PaymentFile {
    id: u32,
    rows: String,
}

/// A file whose JSON body is about `bytes` long.
fn file(id: u32, bytes: usize) -> PaymentFile {
    PaymentFile {
        id,
        rows: "r".repeat(bytes.saturating_sub(24)),
    }
}

/// Keeps every file it is given.
#[derive(Clone, Default)]
struct Keep(Arc<Mutex<Vec<PaymentFile>>>);

impl Handle<PaymentFile> for Keep {
    async fn handle(
        &self,
        file: &PaymentFile,
        _: &(),
        _: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        self.0.lock().unwrap().push(file.clone());
        Ok(())
    }
}

impl Keep {
    fn ids(&self) -> Vec<u32> {
        let mut ids: Vec<u32> = self.0.lock().unwrap().iter().map(|file| file.id).collect();
        ids.sort_unstable();
        ids
    }
}

fn offloading(account: &Account) -> SqsBroker {
    SqsBroker::with_account(account).large_payloads(LargePayloads::new(BUCKET).create_if_missing())
}

fn app(broker: &SqsBroker, queue: SqsQueue, keep: &Keep) -> impl App {
    let keep = keep.clone();
    RustStream::new(AppInfo::new("files", "0")).with_broker(broker.clone(), move |b| {
        b.include(subscriber(queue, keep).build());
    })
}

#[tokio::test(start_paused = true)]
async fn bodies_below_and_above_the_threshold_round_trip_and_only_the_large_go_through_s3() {
    for name in ["files", "files.fifo"] {
        let account = Account::new();
        let broker = offloading(&account);
        let queue = SqsQueue::new(name).create_if_missing();
        let publisher = broker.publisher(queue.clone());
        let sent = [
            file(1, 1_000),
            file(2, DEFAULT_THRESHOLD - 1_000),
            file(3, 300_000),
            file(4, 2 * 1_048_576),
        ];
        for file in &sent {
            let mut message = publisher.message(file);
            if name.ends_with(".fifo") {
                message = message.group_id("files");
            }
            message
                .send()
                .await
                .expect("sent, the large ones through S3");
        }
        let put = broker.api_calls();
        assert_eq!(put.put_object, 2, "{name}: the two over 256 KiB: {put:?}");
        assert_eq!(put.get_object, 0);

        let keep = Keep::default();
        let running = TestApp::spawn(app(&broker, queue, &keep)).await.unwrap();
        eventually("the four files handled", async || {
            keep.ids() == [1, 2, 3, 4]
        })
        .await;
        running.stop().await.unwrap();
        let mut got = keep.0.lock().unwrap().clone();
        got.sort_by_key(|file| file.id);
        assert_eq!(
            got, sent,
            "{name}: the handler reads the payloads, not pointers"
        );
        let calls = broker.api_calls() - put;
        assert_eq!(
            calls.get_object, 2,
            "{name}: one fetch a large message: {calls:?}"
        );
        assert_eq!(
            account.object_keys(BUCKET).len(),
            2,
            "{name}: the objects stay for the bucket's lifecycle rule"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_large_body_is_sent_as_the_java_clients_pointer_with_its_digest() {
    let account = Account::new();
    let broker = offloading(&account);
    let queue = SqsQueue::new("files").create_if_missing();
    let big = file(7, 400_000);
    broker.publisher(queue).message(&big).send().await.unwrap();

    let url = account.get_queue_url("files").await.unwrap();
    let got = account
        .receive_message(&url, ReceiveMessage::new(1))
        .await
        .unwrap();
    let read = PayloadPointer::read(&got[0].body, &got[0].message_attributes)
        .unwrap()
        .expect("the body is a pointer");
    assert!(got[0].body.starts_with(
        r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{"s3BucketName":"payment-files","#
    ));
    assert_eq!(read.pointer.bucket, BUCKET);
    let payload = account.get_object(BUCKET, &read.pointer.key).await.unwrap();
    assert_eq!(read.size, payload.len() as u64);
    assert_eq!(
        serde_json::from_slice::<PaymentFile>(&payload).unwrap(),
        big
    );
    assert_eq!(read.sha256.as_deref().map(str::len), Some(64));
}

/// Changes (`tamper`) or deletes the object the one message of `queue_url` points at, through
/// `s3`, after reading the pointer without taking the message (a receive with no visibility).
async fn spoil_the_payload(
    s3: &impl rust_stream::transport::Transport,
    queue_url: &str,
    tamper: bool,
) {
    let peeked = s3
        .receive_message(
            queue_url,
            ReceiveMessage::new(1)
                .wait_time_seconds(20)
                .visibility_timeout(0)
                .message_attribute_names(["All"]),
        )
        .await
        .unwrap();
    let read = PayloadPointer::read(&peeked[0].body, &peeked[0].message_attributes)
        .unwrap()
        .expect("a pointer");
    let (bucket, key) = (&read.pointer.bucket, &read.pointer.key);
    if tamper {
        let mut tampered = s3.get_object(bucket, key).await.unwrap();
        tampered[10] ^= 1;
        s3.put_object(bucket, key, tampered).await.unwrap();
    } else {
        s3.delete_object(bucket, key).await.unwrap();
    }
}

#[test]
fn a_pointer_to_a_changed_or_missing_payload_is_dead_lettered_with_the_reason() {
    on_each_backend(async |backend| {
        let bucket = backend.queue_name("spoiled");
        let broker = backend
            .broker()
            .clone()
            .large_payloads(LargePayloads::new(&bucket).create_if_missing());
        let live = backend
            .endpoint()
            .map(|endpoint| rust_stream::aws::AwsTransport::local(endpoint, "us-east-1"));
        for (case, tamper) in [("changed", true), ("missing", false)] {
            let name = backend.queue_name(&format!("spoiled-{case}"));
            let dead_letters = backend.queue_name(&format!("spoiled-{case}-dlq"));
            let queue = SqsQueue::new(&name)
                .create_if_missing()
                .dead_letter(&dead_letters, 5);
            broker
                .publisher(SqsQueue::new(&name).create_if_missing())
                .message(&file(1, 300_000))
                .send()
                .await
                .unwrap();
            let receive_dead_letter = ReceiveMessage::new(1)
                .wait_time_seconds(20)
                .message_attribute_names(["All"]);
            let keep = Keep::default();
            let got = match (backend.account(), &live) {
                (Some(account), _) => {
                    let url = account.get_queue_url(&name).await.unwrap();
                    spoil_the_payload(account, &url, tamper).await;
                    let running = TestApp::spawn(app(&broker, queue, &keep)).await.unwrap();
                    let dlq = account.get_queue_url(&dead_letters).await.unwrap();
                    let got = account.receive_message(&dlq, receive_dead_letter).await;
                    running.stop().await.unwrap();
                    got.unwrap()
                }
                (None, Some(aws)) => {
                    use rust_stream::transport::Transport;
                    let url = aws.get_queue_url(&name).await.unwrap();
                    spoil_the_payload(aws, &url, tamper).await;
                    let running = TestApp::spawn(app(&broker, queue, &keep)).await.unwrap();
                    let dlq = aws.get_queue_url(&dead_letters).await.unwrap();
                    let got = aws.receive_message(&dlq, receive_dead_letter).await;
                    running.stop().await.unwrap();
                    got.unwrap()
                }
                (None, None) => unreachable!("a leg has an account or an endpoint"),
            };
            let kind = backend.kind();
            assert!(
                keep.ids().is_empty(),
                "{case} on {kind:?}: no handler saw it"
            );
            assert_eq!(got.len(), 1, "{case} on {kind:?}: dead-lettered");
            let reason = got[0].message_attributes[DEAD_LETTER_REASON_HEADER]
                .string_value
                .clone()
                .unwrap();
            let expected = if tamper { "SHA-256" } else { "is gone" };
            assert!(reason.contains(expected), "{case} on {kind:?}: {reason}");
            assert!(
                PayloadPointer::read(&got[0].body, &got[0].message_attributes)
                    .unwrap()
                    .is_some(),
                "{case} on {kind:?}: the dead letter carries the pointer as it came"
            );
        }
    });
}

#[tokio::test(start_paused = true)]
async fn pointers_written_by_other_extended_clients_are_read_without_any_setting() {
    let account = Account::new();
    account.create_bucket("java-files").await.unwrap();
    let url = account
        .create_queue("files", Default::default())
        .await
        .unwrap();
    let payloads = [file(1, 300_000), file(2, 500_000)];
    for (n, payload) in payloads.iter().enumerate() {
        let key = format!("object-{n}");
        let bytes = serde_json::to_vec(payload).unwrap();
        let size = bytes.len().to_string();
        account.put_object("java-files", &key, bytes).await.unwrap();
        // The Java client's array with `ExtendedPayloadSize`, and an older Java client's plain
        // object with `SQSLargePayloadSize`; neither writes a digest.
        let (body, attribute) = if n == 0 {
            (
                format!(
                    r#"["software.amazon.payloadoffloading.PayloadS3Pointer",{{"s3BucketName":"java-files","s3Key":"{key}"}}]"#
                ),
                EXTENDED_PAYLOAD_SIZE,
            )
        } else {
            (
                format!(r#"{{"s3BucketName":"java-files","s3Key":"{key}"}}"#),
                LEGACY_PAYLOAD_SIZE,
            )
        };
        account
            .send_message(
                &url,
                SendMessage::new(body).attribute(attribute, MessageAttributeValue::number(size)),
            )
            .await
            .unwrap();
    }

    let broker = SqsBroker::with_account(&account);
    let keep = Keep::default();
    let running = TestApp::spawn(app(&broker, SqsQueue::new("files"), &keep))
        .await
        .unwrap();
    eventually("both files handled", async || keep.ids() == [1, 2]).await;
    running.stop().await.unwrap();
    let mut got = keep.0.lock().unwrap().clone();
    got.sort_by_key(|file| file.id);
    assert_eq!(got, payloads);
}

#[tokio::test(start_paused = true)]
async fn a_mixed_batch_puts_only_its_large_bodies_and_is_one_send_call() {
    let account = Account::new();
    let broker = offloading(&account);
    let publisher = broker.publisher(SqsQueue::new("files").create_if_missing());
    // Warm: the queue resolved and the bucket made, so the batch's own calls are counted.
    publisher.message(&file(0, 300_000)).send().await.unwrap();
    let before = broker.api_calls();
    let batch = (1..=10).map(|id| {
        let bytes = if id % 4 == 0 { 300_000 } else { 2_000 };
        publisher.message(&file(id, bytes))
    });
    let sent = publisher.send_batch(batch).await;
    assert!(sent.iter().all(Result::is_ok), "{sent:?}");
    let calls = broker.api_calls() - before;
    assert_eq!(
        (
            calls.put_object,
            calls.send_message_batch,
            calls.create_bucket
        ),
        (2, 1, 0),
        "ids 4 and 8 put, all ten in one call: {calls:?}"
    );
}

/// Fails the `put_object` of the payload whose body holds `marker`, as S3 would at a throttle.
#[derive(Clone)]
struct FailingPut {
    marker: &'static str,
}

impl rust_stream::transport::layer::Hooks for FailingPut {
    async fn put_object(
        &self,
        inner: &impl rust_stream::transport::Transport,
        bucket: &str,
        key: &str,
        body: Vec<u8>,
    ) -> Result<(), rust_stream::transport::TransportError> {
        if String::from_utf8_lossy(&body).contains(self.marker) {
            return Err(rust_stream::transport::TransportError::service(
                rust_stream::model::rules::ErrorKind::RequestThrottled,
                "slow down",
            ));
        }
        inner.put_object(bucket, key, body).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_payload_that_cannot_be_put_is_not_sent_nor_is_what_follows_it_in_its_group() {
    let account = Account::new();
    let failing = rust_stream::transport::layer::Hooked::new(
        account.clone(),
        FailingPut {
            marker: "\"id\":2,",
        },
    );
    let broker = SqsBroker::with_transport(failing)
        .large_payloads(LargePayloads::new(BUCKET).create_if_missing());
    let publisher = broker.publisher(SqsQueue::new("files.fifo").create_if_missing());
    let batch = [
        (1, 300_000, "a"),
        (2, 300_000, "a"),
        (3, 1_000, "a"),
        (4, 1_000, "b"),
    ]
    .map(|(id, bytes, group)| publisher.message(&file(id, bytes)).group_id(group));
    let sent = publisher.send_batch(batch).await;
    let ok: Vec<bool> = sent.iter().map(Result::is_ok).collect();
    assert_eq!(
        ok,
        [true, false, false, true],
        "2's put failed, and 3 of its group stays behind it: {sent:?}"
    );

    let url = account.get_queue_url("files.fifo").await.unwrap();
    let got = account
        .receive_message(&url, ReceiveMessage::new(10))
        .await
        .unwrap();
    assert_eq!(got.len(), 2, "1 and 4 were stored");
}

#[tokio::test(start_paused = true)]
async fn a_large_publish_to_a_topic_reaches_enveloped_and_raw_subscribers_as_its_payload() {
    use rust_stream::{SnsTopic, TopicSubscription};

    let account = Account::new();
    let broker = offloading(&account);
    let enveloped = SqsQueue::new("files-enveloped")
        .create_if_missing()
        .subscribed_to(SnsTopic::new("files").create_if_missing());
    let raw = SqsQueue::new("files-raw")
        .create_if_missing()
        .subscribed_to(TopicSubscription::new("files").raw_message_delivery(true));
    let keep = Keep::default();
    let (from_enveloped, from_raw) = (keep.clone(), keep.clone());
    let running = TestApp::spawn(RustStream::new(AppInfo::new("files", "0")).with_broker(
        broker.clone(),
        move |b| {
            b.include(subscriber(enveloped, from_enveloped).build());
            b.include(subscriber(raw, from_raw).build());
        },
    ))
    .await
    .unwrap();
    let big = file(9, 600_000);
    broker
        .topic(SnsTopic::new("files"))
        .message(&big)
        .send()
        .await
        .expect("published through S3");
    eventually("both subscriptions handled it", async || {
        keep.ids() == [9, 9]
    })
    .await;
    running.stop().await.unwrap();
    assert!(keep.0.lock().unwrap().iter().all(|got| *got == big));
    let calls = broker.api_calls();
    assert_eq!(
        (calls.put_object, calls.get_object),
        (1, 2),
        "one object, fetched by each subscription: {calls:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_missing_bucket_fails_the_large_send_and_says_to_create_it() {
    let account = Account::new();
    let broker =
        SqsBroker::with_account(&account).large_payloads(LargePayloads::new("no-such-bucket"));
    let publisher = broker.publisher(SqsQueue::new("files").create_if_missing());
    let refused = publisher
        .message(&file(1, 300_000))
        .send()
        .await
        .unwrap_err();
    let said = refused.to_string();
    assert!(
        said.contains("`no-such-bucket` does not exist") && said.contains("create_if_missing"),
        "{said}"
    );
    publisher
        .message(&file(2, 1_000))
        .send()
        .await
        .expect("a small message needs no bucket");
    let url = account.get_queue_url("files").await.unwrap();
    let got = account
        .receive_message(&url, ReceiveMessage::new(10))
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "only the small one was stored");
}

#[test]
fn large_bodies_round_trip_through_s3_on_each_backend() {
    on_each_backend(async |backend| {
        let bucket = backend.queue_name("payloads");
        let broker = backend
            .broker()
            .clone()
            .large_payloads(LargePayloads::new(&bucket).create_if_missing());
        for base in ["large-files", "large-files.fifo"] {
            let name = backend.queue_name(base);
            let queue = SqsQueue::new(&name).create_if_missing();
            let publisher = broker.publisher(queue.clone());
            let sent = [file(1, 1_000), file(2, 300_000), file(3, 2 * 1_048_576)];
            let before = broker.api_calls();
            for file in &sent {
                let mut message = publisher.message(file);
                if name.ends_with(".fifo") {
                    message = message.group_id("files");
                }
                message
                    .send()
                    .await
                    .expect("sent, the large ones through S3");
            }
            let keep = Keep::default();
            let running = TestApp::spawn(app(&broker, queue, &keep)).await.unwrap();
            eventually("the three files handled", async || keep.ids() == [1, 2, 3]).await;
            running.stop().await.unwrap();
            let mut got = keep.0.lock().unwrap().clone();
            got.sort_by_key(|file| file.id);
            assert_eq!(got, sent, "{name} on {:?}", backend.kind());
            let calls = broker.api_calls() - before;
            assert_eq!(
                (calls.put_object, calls.get_object),
                (2, 2),
                "{name} on {:?}: {calls:?}",
                backend.kind()
            );
        }
    });
}

/// Dead-letters every file it is given.
#[derive(Clone)]
struct Refuse;

impl Handle<PaymentFile> for Refuse {
    async fn handle(
        &self,
        _: &PaymentFile,
        _: &(),
        _: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        Err(HandlerOutcome::dead_letter("refused"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_copy_and_a_redrive_write_the_object_again_so_its_age_starts_anew() {
    use rust_stream::operations::Redrive;

    let account = Account::new();
    let broker = offloading(&account);
    let queue = SqsQueue::new("files")
        .create_if_missing()
        .dead_letter("files-dlq", 5);
    broker
        .publisher(SqsQueue::new("files").create_if_missing())
        .message(&file(1, 300_000))
        .send()
        .await
        .unwrap();
    let key = account.object_keys(BUCKET).pop().unwrap();
    let put_at = account.object_written_at(BUCKET, &key).unwrap();

    tokio::time::sleep(Duration::from_secs(3_600)).await;
    let refusing = RustStream::new(AppInfo::new("files", "0")).with_broker(broker.clone(), |b| {
        b.include(subscriber(queue.clone(), Refuse).build());
    });
    let running = TestApp::spawn(refusing).await.unwrap();
    let dlq = account.get_queue_url("files-dlq").await.unwrap();
    eventually("the file dead-lettered", async || {
        account
            .counts(&dlq)
            .await
            .map(|counts| counts.visible)
            .unwrap_or(0)
            == 1
    })
    .await;
    running.stop().await.unwrap();
    let dead_lettered_at = account.object_written_at(BUCKET, &key).unwrap();
    assert!(
        dead_lettered_at >= put_at + Duration::from_secs(3_600),
        "the dead-letter copy wrote the object again"
    );

    tokio::time::sleep(Duration::from_secs(3_600)).await;
    let report = broker
        .operations()
        .redrive(&Redrive::from("files-dlq").to("files"))
        .await
        .unwrap();
    assert_eq!(report.moved.len(), 1, "{report:?}");
    let redriven_at = account.object_written_at(BUCKET, &key).unwrap();
    assert!(
        redriven_at >= dead_lettered_at + Duration::from_secs(3_600),
        "the redrive wrote it again"
    );
    assert_eq!(broker.api_calls().copy_object, 2);

    let keep = Keep::default();
    let running = TestApp::spawn(app(&broker, queue, &keep)).await.unwrap();
    eventually("the redriven file handled", async || keep.ids() == [1]).await;
    running.stop().await.unwrap();
}

/// S3's calls answer alike on both backends: the account's buckets and LocalStack's S3.
async fn s3_answers_as_s3_does(s3: &impl rust_stream::transport::Transport, bucket: &str) {
    use rust_stream::model::rules::ErrorKind;

    s3.create_bucket(bucket).await.unwrap();
    s3.create_bucket(bucket)
        .await
        .expect("a bucket owned already");
    s3.put_object(bucket, "k", b"large body".to_vec())
        .await
        .unwrap();
    assert_eq!(s3.get_object(bucket, "k").await.unwrap(), b"large body");
    assert_eq!(s3.head_object(bucket, "k").await.unwrap(), 10);
    s3.copy_object(bucket, "k")
        .await
        .expect("copied onto itself");
    assert_eq!(s3.get_object(bucket, "k").await.unwrap(), b"large body");
    s3.delete_object(bucket, "k").await.unwrap();
    s3.delete_object(bucket, "k")
        .await
        .expect("no object is no error");
    let gone = s3.get_object(bucket, "k").await.unwrap_err();
    assert_eq!(gone.kind(), Some(ErrorKind::NoSuchKey), "{gone}");
    let no_head = s3.head_object(bucket, "k").await.unwrap_err();
    assert_eq!(no_head.kind(), Some(ErrorKind::NoSuchKey), "{no_head}");
    let nowhere = format!("{bucket}-none");
    let missing = s3.put_object(&nowhere, "k", vec![1]).await.unwrap_err();
    assert_eq!(missing.kind(), Some(ErrorKind::NoSuchBucket), "{missing}");
}

#[test]
fn the_s3_calls_answer_alike_on_each_backend() {
    on_each_backend(async |backend| {
        let bucket = backend.queue_name("s3-calls");
        match (backend.account(), backend.endpoint()) {
            (Some(account), _) => s3_answers_as_s3_does(account, &bucket).await,
            (None, Some(endpoint)) => {
                let aws = rust_stream::aws::AwsTransport::local(endpoint, "us-east-1");
                s3_answers_as_s3_does(&aws, &bucket).await;
            }
            (None, None) => unreachable!("a leg has an account or an endpoint"),
        }
    });
}

/// Runs `scripts/extended-client.sh` (AWS's Python extended client in a virtualenv it installs)
/// with `args` and `input` on standard input: its standard output, or a panic with its error.
fn python_client(args: &[&str], input: &str) -> String {
    use std::io::Write;
    use std::process::{Command, Stdio};

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/extended-client.sh");
    let mut child = Command::new(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("scripts/extended-client.sh runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "extended-client.sh {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// AWS's Python extended client and rust-stream read each other's large messages on LocalStack:
/// the Python client resolves what rust-stream sent to the payload, and a rust-stream consumer
/// hands its handler the payloads the Python client sent, in its current form and in its legacy
/// one (`SQSLargePayloadSize`, Java 1.x's pointer class).
#[test]
fn the_python_extended_client_and_rust_stream_read_each_others_large_messages() {
    let Some(endpoint) = rust_stream::testing::live_endpoint("the extended-client interop") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        use rust_stream::aws::AwsTransport;
        use rust_stream::testing::QueueNames;
        use rust_stream::transport::Transport;

        let names = QueueNames::new();
        let bucket = names.queue_name("interop");
        let aws = AwsTransport::local(&endpoint, "us-east-1");
        let broker = SqsBroker::with_transport(aws.clone())
            .large_payloads(LargePayloads::new(&bucket).create_if_missing());

        // Ours, read by the Python client.
        let to_python = names.queue_name("to-python");
        let ours = file(1, 300_000);
        broker
            .publisher(SqsQueue::new(&to_python).create_if_missing())
            .message(&ours)
            .send()
            .await
            .unwrap();
        let url = aws.get_queue_url(&to_python).await.unwrap();
        let read = python_client(&["receive", &endpoint, &url], "");
        assert_eq!(
            serde_json::from_str::<PaymentFile>(&read).unwrap(),
            ours,
            "the Python client resolved our pointer to the payload"
        );

        // Theirs, read by a rust-stream consumer.
        let from_python = names.queue_name("from-python");
        let url = aws
            .create_queue(&from_python, Default::default())
            .await
            .unwrap();
        let theirs = [file(2, 300_000), file(3, 200_000)];
        python_client(
            &["send", &endpoint, &url, &bucket],
            &serde_json::to_string(&theirs[0]).unwrap(),
        );
        python_client(
            &["send", &endpoint, &url, &bucket, "legacy"],
            &serde_json::to_string(&theirs[1]).unwrap(),
        );
        let keep = Keep::default();
        let running = TestApp::spawn(app(&broker, SqsQueue::new(&from_python), &keep))
            .await
            .unwrap();
        eventually("both Python files handled", async || keep.ids() == [2, 3]).await;
        running.stop().await.unwrap();
        let mut got = keep.0.lock().unwrap().clone();
        got.sort_by_key(|file| file.id);
        assert_eq!(got, theirs);
    });
}

/// Forwards each file it is given to its output, doubled in size.
struct Forward;

impl Handle<PaymentFile, rust_stream::Output<PaymentFile>> for Forward {
    async fn handle(
        &self,
        small: &PaymentFile,
        out: &rust_stream::Output<PaymentFile>,
        ctx: &mut Context<'_>,
    ) -> Result<(), HandlerOutcome> {
        ctx.publish(out.message(&file(small.id, 300_000)));
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_handlers_large_output_and_an_outbox_rows_large_message_go_through_s3() {
    use rust_stream::outbox::Outbox;
    use rust_stream::store::memory::MemoryStore;

    let account = Account::new();
    let broker = offloading(&account);
    let store = MemoryStore::new();
    let outbox = Outbox::new(
        store.clone(),
        broker.publisher(SqsQueue::new("files-out").create_if_missing()),
    );
    let keep = Keep::default();
    let kept = keep.clone();
    let relay = broker.relay(store.clone());
    let app = RustStream::new(AppInfo::new("files", "0")).with_broker(broker.clone(), move |b| {
        b.include(
            subscriber(SqsQueue::new("files-in").create_if_missing(), Forward)
                .outputs(rust_stream::Output::<PaymentFile>::new(
                    SqsQueue::new("files-out").create_if_missing(),
                ))
                .build(),
        );
        b.include(subscriber(SqsQueue::new("files-out").create_if_missing(), kept).build());
        b.worker(relay);
    });
    let running = TestApp::spawn(app).await.unwrap();
    broker
        .publisher(SqsQueue::new("files-in").create_if_missing())
        .message(&file(1, 1_000))
        .send()
        .await
        .unwrap();
    let mut transaction = store.begin();
    outbox
        .message(&file(2, 2 * 1_048_576))
        .send(&mut transaction)
        .await
        .expect("a row over 1 MiB is taken: it is sent through S3");
    store.commit(transaction);
    eventually("the output and the outbox's row handled", async || {
        keep.ids() == [1, 2]
    })
    .await;
    running.stop().await.unwrap();
    let got = keep.0.lock().unwrap().clone();
    assert!(
        got.iter().all(|got| got.rows.len() > 290_000),
        "the payloads, not pointers"
    );
    assert_eq!(
        broker.api_calls().put_object,
        2,
        "the output's and the row's"
    );
}

/// The body the Java extended client sends, captured from its pointer library
/// (`tests/fixtures/extended-client/README.md` says how).
const JAVA_CAPTURED_POINTER: &str =
    include_str!("fixtures/extended-client/java-payload-offloading-2.2.0-pointer.json");

#[test]
fn the_java_libraries_own_pointer_reads_here_and_ours_is_byte_for_byte_what_it_writes() {
    let captured = JAVA_CAPTURED_POINTER.trim_end();
    let pointer = PayloadPointer::new("payment-files", "9c5e4a2e-1b6d-4a8f-9e59-2f3c1d0b7a61");
    let mut attributes = rust_stream::transport::MessageAttributes::new();
    attributes.insert(
        EXTENDED_PAYLOAD_SIZE.to_owned(),
        MessageAttributeValue::number("5242880"),
    );
    let read = PayloadPointer::read(captured, &attributes)
        .unwrap()
        .expect("the Java body is a pointer");
    assert_eq!(read.pointer, pointer);
    assert_eq!((read.size, read.sha256), (5_242_880, None));
    assert_eq!(
        pointer.to_body(),
        captured,
        "what the Java library writes, and so reads"
    );
}
