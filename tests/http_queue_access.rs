//! The HTTP queue API is safe to expose (issue 35): who may call it (bearer tokens, origins,
//! JSON bodies), which queues it serves (a prefix), its bounds (body, push, pop, deadline,
//! requests at once), and a push that finds its `hashCode` pending answering by that push's
//! outcome. Each refusal is checked with the SQS calls the server made, counted by a `Hooks`
//! layer: a refused request makes none. The router is driven in process
//! (`tower::ServiceExt::oneshot`, the router `serve` runs) on the account, on a paused clock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::Request;
use axum::Router;
use rust_stream::account::Account;
use rust_stream::http::queue::{Limits, QueueApi};
use rust_stream::model::rules::ErrorKind;
use rust_stream::publish::History;
use rust_stream::store::memory::MemoryStore;
use rust_stream::transport::layer::{Action, Hooked, Hooks};
use rust_stream::transport::{
    BatchResult, ReceiveMessage, ReceivedMessage, SendBatchEntry, SentMessage, Transport,
    TransportError,
};
use rust_stream::SqsBroker;
use serde_json::{json, Value};
use tower::ServiceExt;

/// Counts every SQS call by action, fails the first `fail_sends` sends after 2 s, and stalls
/// every receive when `stall_receives`.
#[derive(Clone, Default)]
struct Counted {
    calls: Arc<Mutex<Vec<Action>>>,
    fail_sends: Arc<AtomicUsize>,
    stall_receives: bool,
}

impl Counted {
    fn calls(&self) -> Vec<Action> {
        self.calls.lock().unwrap().clone()
    }

    fn reset(&self) {
        self.calls.lock().unwrap().clear();
    }
}

impl Hooks for Counted {
    fn around<R: Send>(
        &self,
        action: Action,
        _queue: &str,
        call: impl std::future::Future<Output = Result<R, TransportError>> + Send,
    ) -> impl std::future::Future<Output = Result<R, TransportError>> + Send {
        self.calls.lock().unwrap().push(action);
        call
    }

    async fn send_message_batch(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> Result<BatchResult<SentMessage>, TransportError> {
        let fail = self
            .fail_sends
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if fail {
            tokio::time::sleep(Duration::from_secs(2)).await;
            // What the SDK answers for a queue whose KMS key the service may not use: the
            // service's misconfiguration, never the API caller's bad request.
            return Err(TransportError::service(
                ErrorKind::AccessDenied,
                "the test refuses this send",
            ));
        }
        inner.send_message_batch(queue_url, entries).await
    }

    async fn receive_message(
        &self,
        inner: &impl Transport,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        if self.stall_receives {
            std::future::pending::<()>().await;
        }
        inner.receive_message(queue_url, request).await
    }
}

/// The account, the hooks counting its calls, and a broker over both.
fn backend(hooks: Counted) -> (Account, Counted, SqsBroker) {
    let account = Account::new();
    let broker = SqsBroker::with_transport(Hooked::new(account.clone(), hooks.clone()));
    (account, hooks, broker)
}

const TOKEN: &str = "tok-2026-12-current";
const NEXT_TOKEN: &str = "tok-2026-12-next";
const OPS: &str = "https://ops.example.com";

/// The API as an operator exposes it: two tokens (rotation), a prefix, one origin.
fn exposed(broker: &SqsBroker) -> Router {
    QueueApi::new(broker)
        .tokens([TOKEN, NEXT_TOKEN])
        .queue_prefix("team-")
        .allowed_origins([OPS])
        .router()
}

/// One request: status and JSON body (`Null` for none).
async fn call(
    router: &Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Body>,
) -> (u16, Value) {
    let mut request = Request::builder().method(method).uri(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = router
        .clone()
        .oneshot(request.body(body.into()).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, body)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

async fn stored(account: &Account, queue: &str) -> usize {
    match account.get_queue_url(queue).await {
        Ok(url) => {
            let counts = account.counts(&url).await.unwrap();
            counts.visible + counts.in_flight + counts.delayed
        }
        Err(_) => 0,
    }
}

/// A refusal: its name, method, path, headers, body, status and the `limit` it names.
type Case<'a> = (
    &'a str,
    &'a str,
    String,
    Vec<(&'a str, &'a str)>,
    String,
    u16,
    Option<&'a str>,
);

#[tokio::test(start_paused = true)]
async fn each_refusal_answers_its_status_and_makes_no_sqs_call() {
    let (account, hooks, broker) = backend(Counted::default());
    let router = exposed(&broker);
    let auth = bearer(TOKEN);
    let json_auth = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    // Both tokens of a rotation work, with and without an allowed origin.
    let (status, body) = call(
        &router,
        "POST",
        "/queue/team-jobs/push",
        &json_auth,
        r#"{"job":1}"#,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let next = bearer(NEXT_TOKEN);
    let (status, _) = call(
        &router,
        "GET",
        "/queue/team-jobs/size",
        &[("authorization", &next), ("origin", OPS)],
        Body::empty(),
    )
    .await;
    assert_eq!(status, 200);
    hooks.reset();

    let huge = "x".repeat(3 * 1024 * 1024);
    let huge = format!("[\"{huge}\"]");
    let many = format!("[{}0]", "0,".repeat(99_999));
    let evil = "https://evil.example";
    let revoked = bearer("tok-2026-11-revoked");
    let cases: Vec<Case> = vec![
        (
            "no token",
            "POST",
            "/queue/team-jobs/pop".into(),
            vec![],
            String::new(),
            401,
            None,
        ),
        (
            "a wrong token",
            "POST",
            "/queue/team-jobs/pop".into(),
            vec![("authorization", "Bearer guess")],
            String::new(),
            401,
            None,
        ),
        (
            "a revoked token",
            "POST",
            "/queue/team-jobs/push".into(),
            vec![
                ("authorization", &revoked),
                ("content-type", "application/json"),
            ],
            "{}".into(),
            401,
            None,
        ),
        (
            "a token that is not a bearer",
            "GET",
            "/queue/team-jobs/size".into(),
            vec![("authorization", TOKEN)],
            String::new(),
            401,
            None,
        ),
        (
            "a disallowed origin with text/plain",
            "POST",
            "/queue/team-jobs/push".into(),
            vec![
                ("origin", evil),
                ("content-type", "text/plain"),
                ("authorization", &auth),
            ],
            r#"{"pay":1}"#.into(),
            403,
            None,
        ),
        (
            "a disallowed origin with JSON",
            "POST",
            "/queue/team-jobs/push".into(),
            vec![
                ("origin", evil),
                ("content-type", "application/json"),
                ("authorization", &auth),
            ],
            r#"{"pay":1}"#.into(),
            403,
            None,
        ),
        (
            "a disallowed origin's pop",
            "POST",
            "/queue/team-jobs/pop?expiresIn=0".into(),
            vec![("origin", evil)],
            String::new(),
            403,
            None,
        ),
        (
            "a body that is not JSON",
            "POST",
            "/queue/team-jobs/push".into(),
            vec![("authorization", &auth), ("content-type", "text/plain")],
            r#"{"pay":1}"#.into(),
            415,
            None,
        ),
        (
            "a queue outside the prefix",
            "POST",
            "/queue/payments/push".into(),
            json_auth.to_vec(),
            "{}".into(),
            404,
            None,
        ),
        (
            "a queue outside the prefix, popped",
            "POST",
            "/queue/payments/pop".into(),
            vec![("authorization", &auth)],
            String::new(),
            404,
            None,
        ),
        (
            "../ in the name",
            "POST",
            "/queue/..%2Fpayments/push".into(),
            json_auth.to_vec(),
            "{}".into(),
            400,
            None,
        ),
        (
            "an encoded name",
            "GET",
            "/queue/team-%2e%2e%2fpayments/size".into(),
            vec![("authorization", &auth)],
            String::new(),
            400,
            None,
        ),
        (
            "a 3 MiB body",
            "POST",
            "/queue/team-jobs/push".into(),
            json_auth.to_vec(),
            huge,
            413,
            Some("MAX_BODY_BYTES"),
        ),
        (
            "an array of 100,000 items",
            "POST",
            "/queue/team-jobs/push".into(),
            json_auth.to_vec(),
            many,
            400,
            Some("MAX_PUSH_ITEMS"),
        ),
        (
            "pop/1000000",
            "POST",
            "/queue/team-jobs/pop/1000000".into(),
            vec![("authorization", &auth)],
            String::new(),
            400,
            Some("MAX_POP_AMOUNT"),
        ),
        (
            "a hashCode kept for a year",
            "POST",
            "/queue/team-jobs/push?hashCode=h&expiresIn=31536000".into(),
            json_auth.to_vec(),
            "{}".into(),
            400,
            Some("MAX_HASH_DURATION_SECONDS"),
        ),
        (
            "a hashCode of 10,000 bytes",
            "POST",
            format!("/queue/team-jobs/push?hashCode={}", "h".repeat(10_000)),
            json_auth.to_vec(),
            "{}".into(),
            400,
            Some("MAX_HASH_CODE_BYTES"),
        ),
    ];
    for (case, method, path, headers, body, want, limit) in cases {
        let (status, answer) = call(&router, method, &path, &headers, body).await;
        assert_eq!(status, want, "{case}: {answer}");
        assert!(answer["error"].is_string(), "{case}: a reason: {answer}");
        if let Some(limit) = limit {
            assert_eq!(answer["limit"], limit, "{case}: {answer}");
        }
        assert_eq!(hooks.calls(), vec![], "{case}: no SQS call");
    }

    // 10,000 distinct queue names outside the prefix: none reaches SQS, none is remembered.
    for n in 0..10_000 {
        let path = format!("/queue/other-{n}/push");
        let (status, _) = call(&router, "POST", &path, &json_auth, "{}").await;
        assert_eq!(status, 404);
    }
    assert_eq!(hooks.calls(), vec![], "10,000 names: no SQS call");
    assert_eq!(
        stored(&account, "team-jobs").await,
        1,
        "only the first push"
    );
    assert_eq!(
        account.list_queues("").await.len(),
        2,
        "team-jobs and its dead queue"
    );

    // Health probes answer without a token.
    let (status, body) = call(&router, "GET", "/healthz", &[], Body::empty()).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));
}

/// R4 of the 2026-12-06 review, as a test of the fix: a page on another origin can no longer
/// push, pop or dead-letter through an operator's browser with "simple" (text/plain) POSTs.
#[tokio::test(start_paused = true)]
async fn regression_35_a_disallowed_origin_can_neither_push_nor_pop_nor_dead_letter() {
    let (account, hooks, broker) = backend(Counted::default());
    let router = QueueApi::new(&broker).allowed_origins([OPS]).router();
    let plain = [
        ("origin", "https://evil.example"),
        ("content-type", "text/plain"),
    ];
    let (pushed, _) = call(
        &router,
        "POST",
        "/queue/payments/push",
        &plain,
        r#"{"pay":1}"#,
    )
    .await;
    let json = [("content-type", "application/json")];
    let (stored_first, _) = call(
        &router,
        "POST",
        "/queue/payments/push",
        &json,
        r#"{"pay":1}"#,
    )
    .await;
    hooks.reset();
    let mut pops = Vec::new();
    for _ in 0..6 {
        pops.push(
            call(
                &router,
                "POST",
                "/queue/payments/pop?expiresIn=0",
                &plain,
                Body::empty(),
            )
            .await
            .0,
        );
    }
    assert_eq!(pushed, 403, "the push is refused");
    assert_eq!(
        stored_first, 201,
        "a call without an Origin (a server's) is served"
    );
    assert_eq!(pops, vec![403; 6], "every pop is refused");
    assert_eq!(hooks.calls(), vec![], "the refused pops made no call");
    assert_eq!(stored(&account, "payments").await, 1);
    assert_eq!(
        stored(&account, "payments-dead").await,
        0,
        "nothing dead-lettered"
    );
}

/// R6 of the 2026-12-06 review, as a test of the fix: a push finding its hashCode pending waits
/// for that push's outcome; when it failed, this one is stored (never 204 with nothing stored).
#[tokio::test(start_paused = true)]
async fn regression_35_a_push_finding_its_hash_code_pending_answers_by_that_pushs_outcome() {
    let hooks = Counted::default();
    hooks.fail_sends.store(1, Ordering::SeqCst);
    let (account, _hooks, broker) = backend(hooks);
    let router = QueueApi::new(&broker).router();
    let push = |router: Router| async move {
        call(
            &router,
            "POST",
            "/queue/scrape/push?hashCode=zezima",
            &[("content-type", "application/json")],
            r#"{"player":"zezima"}"#,
        )
        .await
        .0
    };
    let first = tokio::spawn(push(router.clone()));
    // The second starts while the first holds the hash (its send takes 2 s).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = push(router.clone()).await;
    let first = first.await.unwrap();
    assert_eq!(first, 500, "the holder's send failed");
    assert_eq!(second, 201, "the second push was stored, not told 204");
    assert_eq!(stored(&account, "scrape").await, 1);
    // And once stored, the hash answers 204 as before.
    assert_eq!(push(router.clone()).await, 204);
    assert_eq!(stored(&account, "scrape").await, 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_past_its_deadline_or_beyond_the_requests_at_once_answers_503_naming_the_limit() {
    let hooks = Counted {
        stall_receives: true,
        ..Counted::default()
    };
    let (_account, _hooks, broker) = backend(hooks);
    let mut limits = Limits::default();
    limits.request_deadline = Duration::from_secs(5);
    limits.concurrent_requests = 1;
    let router = QueueApi::new(&broker).limits(limits).router();
    let json = [("content-type", "application/json")];
    assert_eq!(
        call(&router, "POST", "/queue/jobs/push", &json, "{}")
            .await
            .0,
        201
    );
    let stalled = tokio::spawn({
        let router = router.clone();
        async move { call(&router, "POST", "/queue/jobs/pop", &[], Body::empty()).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (status, busy) = call(&router, "GET", "/queue/jobs/size", &[], Body::empty()).await;
    assert_eq!(status, 503, "{busy}");
    assert_eq!(busy["limit"], "MAX_CONCURRENT_REQUESTS");
    let started = tokio::time::Instant::now();
    let (status, late) = stalled.await.unwrap();
    assert_eq!(status, 503, "{late}");
    assert_eq!(late["limit"], "REQUEST_DEADLINE_SECONDS");
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(4),
        "stopped at its 5 s deadline"
    );
    // The slot is free again: the health probe and the next request are served.
    let (status, _) = call(&router, "GET", "/healthz", &[], Body::empty()).await;
    assert_eq!(status, 200);
}

/// A push of many items costs a `SendMessageBatch` call for each 10, not one an item, and answers
/// the ids in the order of the items; an item SQS refuses is named by its position while the
/// others are stored.
#[tokio::test(start_paused = true)]
async fn a_push_of_many_items_is_sent_in_calls_of_ten_and_answers_ids_in_order() {
    let (account, hooks, broker) = backend(Counted::default());
    let router = exposed(&broker);
    let auth = bearer(TOKEN);
    let json_auth = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    // The queue made by a first push, so that only the batch's own calls are counted below.
    let (status, _) = call(&router, "POST", "/queue/team-bulk/push", &json_auth, "{}").await;
    assert_eq!(status, 201);
    hooks.reset();
    let items: Vec<Value> = (0..25).map(|n| json!({ "n": n })).collect();
    let (status, body) = call(
        &router,
        "POST",
        "/queue/team-bulk/push",
        &json_auth,
        Value::Array(items).to_string(),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let ids = body["ids"].as_array().expect("ids").clone();
    assert_eq!(ids.len(), 25, "{body}");
    let sends = hooks
        .calls()
        .into_iter()
        .filter(|action| *action == Action::SendMessageBatch)
        .count();
    assert_eq!(sends, 3, "25 items in calls of 10: {:?}", hooks.calls());
    assert_eq!(stored(&account, "team-bulk").await, 26);
    // The ids answer the items in order: each id's body is its item.
    let url = account.get_queue_url("team-bulk").await.unwrap();
    let peeked = account
        .peek_messages(
            &url,
            rust_stream::transport::PeekMessages {
                offset: 0,
                max: 100,
            },
        )
        .await
        .unwrap();
    for (n, id) in ids.iter().enumerate() {
        let message = peeked
            .iter()
            .find(|peeked| Some(peeked.message.message_id.as_str()) == id.as_str())
            .unwrap_or_else(|| panic!("id {id} stored"));
        assert_eq!(message.message.body, json!({ "n": n }).to_string());
    }
}

/// The security table's last rows: 100,000 distinct hashCodes are each stored, as the seed
/// designs them, while the server's own command history holds at most its bound
/// (`MAX_HASH_CODES`, here 10,000), forgetting the oldest first: the newest hash repeated is
/// still ignored, the oldest, forgotten, is stored again. 10,000 distinct queue names within the
/// prefix are each served while the server remembers at most its bound of them
/// (`MAX_ENSURED_QUEUES`, here 1,000).
#[tokio::test(start_paused = true)]
async fn distinct_hash_codes_and_queue_names_leave_the_servers_memory_bounded() {
    let (account, hooks, broker) = backend(Counted::default());
    let mut limits = Limits::default();
    limits.hash_codes = 10_000;
    limits.ensured_queues = 1_000;
    let api = QueueApi::new(&broker)
        .tokens([TOKEN])
        .queue_prefix("team-")
        .limits(limits);
    let router = api.clone().router();
    let auth = bearer(TOKEN);
    let json_auth = [
        ("authorization", auth.as_str()),
        ("content-type", "application/json"),
    ];
    // Kept a day, so only the bound (not time, which the sends move on) forgets one.
    let push =
        |hash: usize| format!("/queue/team-scrape/push?hashCode=hash-{hash}&expiresIn=86400");
    let mut most = 0;
    for n in 0..100_000 {
        let (status, body) = call(&router, "POST", &push(n), &json_auth, "{}").await;
        assert_eq!(status, 201, "hashCode {n}: {body}");
        let held = api
            .in_memory()
            .hash_codes
            .expect("the server's own history");
        most = most.max(held);
    }
    assert_eq!(most, 10_000, "never more than MAX_HASH_CODES");
    assert_eq!(stored(&account, "team-scrape").await, 100_000);
    let sends = hooks
        .calls()
        .into_iter()
        .filter(|action| *action == Action::SendMessageBatch)
        .count();
    assert_eq!(sends, 100_000, "one send a push");
    let (status, _) = call(&router, "POST", &push(99_999), &json_auth, "{}").await;
    assert_eq!(status, 204, "the newest hash is still in the history");
    let (status, _) = call(&router, "POST", &push(0), &json_auth, "{}").await;
    assert_eq!(status, 201, "the oldest was forgotten: stored again");
    assert_eq!(stored(&account, "team-scrape").await, 100_001);
    assert_eq!(api.in_memory().hash_codes, Some(10_000));

    let mut most = 0;
    for n in 0..10_000 {
        let path = format!("/queue/team-{n}/push");
        let (status, body) = call(&router, "POST", &path, &json_auth, "{}").await;
        assert_eq!(status, 201, "queue {n}: {body}");
        most = most.max(api.in_memory().queues);
    }
    assert_eq!(most, 1_000, "never more than MAX_ENSURED_QUEUES");
    assert_eq!(stored(&account, "team-9999").await, 1);
    assert_eq!(api.in_memory().receipt_handles, 0, "nothing popped");

    // The defaults, and a history given to the server, which it does not count.
    assert_eq!(Limits::default().hash_codes, 100_000);
    assert_eq!(Limits::default().hash_code_bytes, 256);
    assert_eq!(Limits::default().ensured_queues, 10_000);
    assert_eq!(QueueApi::new(&broker).in_memory().hash_codes, Some(0));
    let shared = QueueApi::new(&broker).history(History::new(MemoryStore::new()));
    assert_eq!(shared.in_memory().hash_codes, None);
}

/// Without an `ID_KEY` the server keeps the receipt handles of what it popped, at most
/// `MAX_RECEIPT_HANDLES` (here 50): past it the handles expiring soonest are forgotten, an ack of
/// one answers `404` naming it, and its message comes back at its expiry, popped and acked again:
/// nothing is lost.
#[tokio::test(start_paused = true)]
async fn receipt_handles_past_their_bound_are_forgotten_and_their_messages_come_back() {
    let (account, _hooks, broker) = backend(Counted::default());
    let mut limits = Limits::default();
    limits.receipt_handles = 50;
    let api = QueueApi::new(&broker).limits(limits);
    let router = api.clone().router();
    let json = [("content-type", "application/json")];
    let items: Vec<Value> = (0..100).map(|n| json!({ "n": n })).collect();
    let (status, _) = call(
        &router,
        "POST",
        "/queue/jobs/push",
        &json,
        Value::Array(items).to_string(),
    )
    .await;
    assert_eq!(status, 201);
    let pop = |expires: u64| {
        let router = router.clone();
        async move {
            let path = format!("/queue/jobs/pop/25?expiresIn={expires}");
            let (status, body) = call(&router, "POST", &path, &[], Body::empty()).await;
            assert_eq!(status, 200, "{body}");
            body.as_array()
                .expect("an array")
                .iter()
                .map(|m| m["_id"].as_str().expect("an _id").to_owned())
                .collect::<Vec<_>>()
        }
    };
    // The first 50 expire sooner than the next: theirs are the handles forgotten.
    let mut soon = pop(60).await;
    soon.extend(pop(60).await);
    assert_eq!(api.in_memory().receipt_handles, 50);
    let mut late = pop(600).await;
    late.extend(pop(600).await);
    assert_eq!((soon.len(), late.len()), (50, 50));
    assert_eq!(
        api.in_memory().receipt_handles,
        50,
        "never more than the bound"
    );
    let ack = |ids: &[String]| {
        let router = router.clone();
        let body = json!({ "id": ids }).to_string();
        async move { call(&router, "POST", "/queue/jobs/ack", &json, body).await }
    };
    let (status, body) = ack(&soon).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["unknown"].as_array().map(Vec::len), Some(50));
    let (status, body) = ack(&late).await;
    assert_eq!(status, 204, "the 50 newest were kept: {body}");
    assert_eq!(
        stored(&account, "jobs").await,
        50,
        "the forgotten, still out"
    );
    // The forgotten come back at their expiry, and are acked then: none lost.
    tokio::time::advance(Duration::from_secs(61)).await;
    let mut again = pop(60).await;
    again.extend(pop(60).await);
    assert_eq!(again.len(), 50, "the forgotten ones, back");
    assert_eq!(ack(&again).await.0, 204);
    assert_eq!(stored(&account, "jobs").await, 0);
}
