//! The seed's HTTP queue API (`rust_stream::http::queue`), driven over real HTTP on the
//! in-process account and on LocalStack, both in real time (the API's expiries are the
//! backend's): every route with its status codes, the `hashCode` command history, expiry, ack and
//! ping, the dead queue after 5 pops, peek and size against what was pushed, CORS, two servers
//! over one queue, and two servers sharing a command history on PostgreSQL (a `hashCode` pushed
//! through one is ignored by the other within its duration). Expiries are 3 s or more and each
//! check after one comes 2 s past it, beyond LocalStack's 1 s visibility timer. Tokens, origins,
//! the namespace and the bounds are in `http_queue_access.rs`.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use common::stores::{postgres_pool, postgres_schema};
use rust_stream::account::Account;
use rust_stream::http::queue::QueueApi;
use rust_stream::publish::History;
use rust_stream::store::postgres::PostgresStore;
use rust_stream::testing::{live_broker, live_endpoint, QueueNames};
use rust_stream::SqsBroker;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One backend: a broker, a second broker over the same queues (another server's), and names.
struct Leg {
    broker: SqsBroker,
    second: SqsBroker,
    live: bool,
    names: QueueNames,
}

impl Leg {
    fn account() -> Self {
        let account = Account::new();
        Self {
            broker: SqsBroker::with_account(&account),
            second: SqsBroker::with_account(&account),
            live: false,
            names: QueueNames::new(),
        }
    }

    async fn live() -> Option<Self> {
        let endpoint = live_endpoint("the HTTP queue API's live leg")?;
        Some(Self {
            broker: live_broker(&endpoint).await,
            second: live_broker(&endpoint).await,
            live: true,
            names: QueueNames::new(),
        })
    }

    fn queue(&self, base: &str) -> String {
        self.names.queue_name(base)
    }

    /// The API over this leg's first broker, peeking on SQS too.
    fn api(&self) -> QueueApi {
        QueueApi::new(&self.broker).peek_on_sqs(true)
    }
}

/// Runs each scenario on the account and on LocalStack (failing under CI without one).
macro_rules! on_both {
    ($($scenario:ident),* $(,)?) => {
        $(
            mod $scenario {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn on_the_account() {
                    super::$scenario(super::Leg::account()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn on_localstack() {
                    if let Some(leg) = super::Leg::live().await {
                        super::$scenario(leg).await;
                    }
                }
            }
        )*
    };
}

on_both!(
    every_route_answers_with_the_seeds_status_codes,
    a_hash_code_stores_a_push_once_within_its_duration_and_again_after_it,
    a_popped_message_returns_after_its_expiry_unless_acked_or_pinged,
    five_failed_pops_move_a_message_to_its_dead_queue,
    peek_and_size_agree_with_what_was_pushed,
    cors_headers_answer_allowed_origins_only,
    two_servers_over_one_queue_never_hand_one_message_to_both,
    two_servers_sharing_a_postgres_history_push_a_hash_code_once,
    with_one_id_key_a_replica_acks_and_pings_what_another_popped,
);

/// An HTTP answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("a JSON body ({error}): {self:?}"))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(found, _)| found.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// The `error` of a refusal, which every one carries.
    fn reason(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_else(|| panic!("an `error` reason: {self:?}"))
            .to_owned()
    }
}

/// One request over a fresh connection, as curl makes it.
async fn call(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Answer {
    let mut stream = TcpStream::connect(address).await.expect("connects");
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nhost: queue-api\r\nconnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or_default());
    stream.write_all(request.as_bytes()).await.expect("sends");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.expect("reads");
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {raw}"));
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

async fn post(address: SocketAddr, path: impl AsRef<str>, body: Option<&str>) -> Answer {
    call(address, "POST", path.as_ref(), &[], body).await
}

async fn get(address: SocketAddr, path: impl AsRef<str>) -> Answer {
    call(address, "GET", path.as_ref(), &[], None).await
}

/// Serves `api` on a free loopback port.
async fn serve(api: QueueApi) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let address = listener.local_addr().expect("an address");
    tokio::spawn(api.serve(listener));
    address
}

/// The ids in a pop's or peek's answer (one object or an array).
fn ids(answer: &Answer) -> Vec<String> {
    let value = answer.json();
    let items = match &value {
        Value::Array(items) => items.clone(),
        one => vec![one.clone()],
    };
    items
        .iter()
        .map(|item| item["_id"].as_str().expect("an _id").to_owned())
        .collect()
}

fn ack_body(ids: &[String]) -> String {
    json!({ "id": ids }).to_string()
}

async fn size(address: SocketAddr, queue: &str) -> u64 {
    let answer = get(address, &format!("/queue/{queue}/size")).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.json()["size"].as_u64().expect("a size")
}

async fn every_route_answers_with_the_seeds_status_codes(leg: Leg) {
    let address = serve(leg.api()).await;
    let queue = leg.queue("http-codes");
    let q = |route: &str| format!("/queue/{queue}/{route}");

    // Nothing there yet: the routes that read answer as for an empty queue.
    assert_eq!(post(address, &q("pop"), None).await.status, 204);
    assert_eq!(post(address, &q("pop/3"), None).await.status, 204);
    assert_eq!(get(address, &q("peek")).await.status, 204);
    assert_eq!(size(address, &queue).await, 0);

    // Push one (an object) and many (an array): 201 with the stored ids.
    let one = post(address, &q("push"), Some(r#"{"job": 1}"#)).await;
    assert_eq!(one.status, 201, "{one:?}");
    assert_eq!(one.json()["ids"].as_array().map(Vec::len), Some(1));
    let many = post(address, &q("push"), Some(r#"[{"job": 2}, "three", 4]"#)).await;
    assert_eq!(many.status, 201, "{many:?}");
    assert_eq!(many.json()["ids"].as_array().map(Vec::len), Some(3));
    assert_eq!(size(address, &queue).await, 4);

    // Pop one: 200 with the seed's fields; pop an amount: 200 with an array.
    let popped = post(address, &q("pop?expiresIn=60"), None).await;
    assert_eq!(popped.status, 200, "{popped:?}");
    let message = popped.json();
    assert!(message["_id"].is_string(), "{message}");
    assert_eq!(message["attempts"], 1, "{message}");
    assert!(
        message["expiryDate"]
            .as_str()
            .is_some_and(|d| d.ends_with('Z')),
        "{message}"
    );
    assert!(!message["payload"].is_null(), "{message}");
    let rest = post(address, &q("pop/10?expiresIn=60"), None).await;
    assert_eq!(rest.status, 200, "{rest:?}");
    assert_eq!(rest.json().as_array().map(Vec::len), Some(3));
    let mut all = ids(&popped);
    all.extend(ids(&rest));
    let payloads: BTreeSet<String> = std::iter::once(message["payload"].to_string())
        .chain(
            rest.json()
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["payload"].to_string()),
        )
        .collect();
    let pushed: BTreeSet<String> = [r#"{"job":1}"#, r#"{"job":2}"#, r#""three""#, "4"]
        .into_iter()
        .map(str::to_owned)
        .collect();
    assert_eq!(payloads, pushed);

    // Ping: 200 with the new expiry; ack: 204.
    let pinged = post(
        address,
        &q("ping?expiresIn=120"),
        Some(&ack_body(&all[..1])),
    )
    .await;
    assert_eq!(pinged.status, 200, "{pinged:?}");
    assert!(pinged.json()["expiryDate"].is_string());
    let acked = post(address, &q("ack"), Some(&ack_body(&all))).await;
    assert_eq!(acked.status, 204, "{acked:?}");
    assert_eq!(size(address, &queue).await, 0);

    // Ids this server did not hand out (or acked already): 404 naming them.
    let again = post(address, &q("ack"), Some(&ack_body(&all[..1]))).await;
    assert_eq!(again.status, 404, "{again:?}");
    assert_eq!(again.json()["unknown"], json!([all[0]]));
    assert_eq!(
        post(address, &q("ping"), Some(r#"{"id": ["nope"]}"#))
            .await
            .status,
        404
    );

    // Bad requests: 400 with a reason that says what to send.
    for (method, path, body, says) in [
        ("POST", q("push"), Some("{not json"), "not JSON"),
        ("POST", q("push"), None, "not JSON"),
        ("POST", q("push"), Some("[]"), "empty array"),
        ("POST", q("push?expiresIn=soon"), Some("{}"), "expiresIn"),
        ("POST", q("pop?expiresIn=-1"), None, "expiresIn"),
        ("POST", q("pop?expiresIn=43201"), None, "43200"),
        ("POST", q("pop/0"), None, "amount"),
        ("POST", q("pop/many"), None, "amount"),
        ("POST", q("ack"), Some(r#"{"ids": ["x"]}"#), "\"id\""),
        ("POST", q("ack"), Some(r#"{"id": []}"#), "empty"),
        ("POST", q("ping"), Some(r#"{"id": [1]}"#), "strings"),
        ("GET", q("peek?amount=lots"), None, "amount"),
        ("GET", q("peek?filter=%7Bx"), None, "not JSON"),
        (
            "GET",
            q("peek?filter=%7B%22a%22%3A%7B%22%24regex%22%3A%22x%22%7D%7D"),
            None,
            "$regex",
        ),
        (
            "GET",
            "/queue/bad.name/size".to_owned(),
            None,
            "letters, digits",
        ),
        (
            "POST",
            format!("/queue/{}/push", "q".repeat(76)),
            Some("{}"),
            "1 to 75",
        ),
    ] {
        let answer = call(address, method, &path, &[], body).await;
        assert_eq!(answer.status, 400, "{method} {path}: {answer:?}");
        let reason = answer.reason();
        assert!(reason.contains(says), "{method} {path}: {reason}");
    }

    // A path that is not a route: 404 with the routes.
    let lost = get(address, "/queues").await;
    assert_eq!(lost.status, 404);
    assert!(lost.reason().contains("/queue/<name>/"), "{lost:?}");
    // A route's other method: 405.
    assert_eq!(get(address, &q("pop")).await.status, 405);
}

async fn a_hash_code_stores_a_push_once_within_its_duration_and_again_after_it(leg: Leg) {
    let address = serve(leg.api()).await;
    let queue = leg.queue("http-hash");
    let batch = r#"[{"player": "zezima"}, {"player": "lynx"}]"#;
    let push = format!("/queue/{queue}/push?hashCode=players-1&expiresIn=4");

    let started = tokio::time::Instant::now();
    let first = post(address, &push, Some(batch)).await;
    assert_eq!(first.status, 201, "{first:?}");
    // The same command within its duration, from this server: ignored.
    let repeat = post(address, &push, Some(batch)).await;
    assert_eq!(repeat.status, 204, "{repeat:?}");
    assert_eq!(size(address, &queue).await, 2);
    // Another hash, or none, is pushed.
    let other = format!("/queue/{queue}/push?hashCode=players-2");
    assert_eq!(post(address, &other, Some(batch)).await.status, 201);
    assert_eq!(size(address, &queue).await, 4);
    // The same hash on another queue is another command.
    let elsewhere = leg.queue("http-hash-other");
    let elsewhere_push = format!("/queue/{elsewhere}/push?hashCode=players-1&expiresIn=4");
    assert_eq!(
        post(address, &elsewhere_push, Some(batch)).await.status,
        201
    );

    // After the duration (2 s past it, beyond LocalStack's 1 s timer), pushed again.
    tokio::time::sleep_until(started + Duration::from_secs(6)).await;
    let later = post(address, &push, Some(batch)).await;
    assert_eq!(later.status, 201, "{later:?}");
    assert_eq!(size(address, &queue).await, 6);
    assert_eq!(post(address, &push, Some(batch)).await.status, 204);
    assert_eq!(size(address, &queue).await, 6);

    // A push SQS refuses (U+FFFE is not a character it takes) frees its hash: the retry is stored.
    let retried = format!("/queue/{queue}/push?hashCode=players-3");
    let refused = post(address, &retried, Some("\"\u{FFFE}\"")).await;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert_eq!(post(address, &retried, Some(batch)).await.status, 201);
    assert_eq!(size(address, &queue).await, 8);
}

async fn a_popped_message_returns_after_its_expiry_unless_acked_or_pinged(leg: Leg) {
    let address = serve(leg.api()).await;
    let queue = leg.queue("http-expiry");
    let pushed = post(
        address,
        &format!("/queue/{queue}/push"),
        Some(r#"[{"k": "acked"}, {"k": "pinged"}, {"k": "dropped"}]"#),
    )
    .await;
    assert_eq!(pushed.status, 201);
    let started = tokio::time::Instant::now();
    let popped = post(address, &format!("/queue/{queue}/pop/3?expiresIn=3"), None).await;
    assert_eq!(popped.status, 200, "{popped:?}");
    let by_key: std::collections::HashMap<String, String> = popped
        .json()
        .as_array()
        .expect("an array")
        .iter()
        .map(|m| {
            (
                m["payload"]["k"].as_str().unwrap().to_owned(),
                m["_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(by_key.len(), 3, "{popped:?}");
    let acked = post(
        address,
        &format!("/queue/{queue}/ack"),
        Some(&ack_body(&[by_key["acked"].clone()])),
    )
    .await;
    assert_eq!(acked.status, 204, "{acked:?}");
    let pinged = post(
        address,
        &format!("/queue/{queue}/ping?expiresIn=10"),
        Some(&ack_body(&[by_key["pinged"].clone()])),
    )
    .await;
    assert_eq!(pinged.status, 200, "{pinged:?}");
    // All three are out for now.
    assert_eq!(
        post(address, &format!("/queue/{queue}/pop"), None)
            .await
            .status,
        204
    );

    // Past the expiry: only the one neither acked nor pinged is back, on its second attempt.
    tokio::time::sleep_until(started + Duration::from_millis(5_000)).await;
    let back = post(address, &format!("/queue/{queue}/pop/3?expiresIn=30"), None).await;
    assert_eq!(back.status, 200, "{back:?}");
    assert_eq!(ids(&back), vec![by_key["dropped"].clone()]);
    assert_eq!(back.json()[0]["attempts"], 2, "{back:?}");

    // Past the ping's expiry: the pinged one is back.
    tokio::time::sleep_until(started + Duration::from_millis(13_000)).await;
    let late = post(address, &format!("/queue/{queue}/pop/3?expiresIn=30"), None).await;
    assert_eq!(late.status, 200, "{late:?}");
    assert_eq!(ids(&late), vec![by_key["pinged"].clone()]);
    let rest = vec![by_key["dropped"].clone(), by_key["pinged"].clone()];
    assert_eq!(
        post(
            address,
            &format!("/queue/{queue}/ack"),
            Some(&ack_body(&rest))
        )
        .await
        .status,
        204
    );
    assert_eq!(size(address, &queue).await, 0);
}

async fn five_failed_pops_move_a_message_to_its_dead_queue(leg: Leg) {
    let address = serve(leg.api()).await;
    let queue = leg.queue("http-dead");
    let dead = format!("{queue}-dead");
    let pushed = post(
        address,
        &format!("/queue/{queue}/push"),
        Some(r#"{"player": "no-such-user"}"#),
    )
    .await;
    assert_eq!(pushed.status, 201);
    let id = pushed.json()["ids"][0].as_str().unwrap().to_owned();
    for attempt in 1..=5 {
        let popped = post(address, &format!("/queue/{queue}/pop?expiresIn=1"), None).await;
        assert_eq!(popped.status, 200, "attempt {attempt}: {popped:?}");
        assert_eq!(popped.json()["attempts"], attempt, "{popped:?}");
        assert_eq!(ids(&popped), vec![id.clone()]);
        // Not acked: the attempt failed.
        // 2 s past the expiry, beyond LocalStack's 1 s visibility timer.
        tokio::time::sleep(Duration::from_millis(3_000)).await;
    }
    // The receive after the fifth moves it: the queue answers none, its dead queue holds it.
    let sixth = post(address, &format!("/queue/{queue}/pop?expiresIn=1"), None).await;
    assert_eq!(sixth.status, 204, "{sixth:?}");
    assert_eq!(size(address, &queue).await, 0);
    assert_eq!(size(address, &dead).await, 1);
    let peeked = get(address, &format!("/queue/{dead}/peek")).await;
    assert_eq!(peeked.status, 200, "{peeked:?}");
    assert_eq!(
        peeked.json()[0]["payload"],
        json!({"player": "no-such-user"})
    );
    // The dead queue is a queue like any other: pop and ack it.
    let from_dead = post(address, &format!("/queue/{dead}/pop"), None).await;
    assert_eq!(from_dead.status, 200, "{from_dead:?}");
    assert_eq!(from_dead.json()["payload"]["player"], "no-such-user");
    assert_eq!(
        post(
            address,
            &format!("/queue/{dead}/ack"),
            Some(&ack_body(&ids(&from_dead)))
        )
        .await
        .status,
        204
    );
    assert_eq!(size(address, &dead).await, 0);
}

async fn peek_and_size_agree_with_what_was_pushed(leg: Leg) {
    let address = serve(leg.api()).await;
    let queue = leg.queue("http-peek");
    let payloads: Vec<Value> = (0..7)
        .map(|n| json!({"n": n, "even": n % 2 == 0}))
        .collect();
    let pushed = post(
        address,
        &format!("/queue/{queue}/push"),
        Some(&Value::Array(payloads.clone()).to_string()),
    )
    .await;
    assert_eq!(pushed.status, 201);
    let pushed_ids: BTreeSet<String> = pushed.json()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(size(address, &queue).await, 7);

    let peek = |query: &str| get(address, format!("/queue/{queue}/peek{query}"));
    let everything = peek("").await;
    assert_eq!(everything.status, 200, "{everything:?}");
    assert_eq!(
        ids(&everything).into_iter().collect::<BTreeSet<_>>(),
        pushed_ids
    );
    let seen: BTreeSet<String> = everything
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["payload"].to_string())
        .collect();
    assert_eq!(seen, payloads.iter().map(Value::to_string).collect());

    let page = peek("?amount=3&offset=2").await;
    assert_eq!(page.status, 200, "{page:?}");
    let page_n: Vec<u64> = page
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["payload"]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(page_n.len(), 3, "{page:?}");
    if !leg.live {
        // The account peeks in storage order.
        assert_eq!(page_n, vec![2, 3, 4]);
    }
    // {"payload.n": {"$gte": 5}}
    let high = peek("?filter=%7B%22payload.n%22%3A%7B%22%24gte%22%3A5%7D%7D").await;
    assert_eq!(high.status, 200, "{high:?}");
    let high_n: BTreeSet<u64> = high
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["payload"]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(high_n, BTreeSet::from([5, 6]));
    if !leg.live {
        // On SQS each peek is a receive counted toward the 5 attempts (a sixth receive would
        // move the messages to the dead queue), so the live leg peeks three times only.
        // {"payload.even": true, "payload.n": {"$in": [1, 2, 4]}}
        let even = peek(
            "?filter=%7B%22payload.even%22%3Atrue%2C%22payload.n%22%3A%7B%22%24in%22%3A%5B1%2C2%2C4%5D%7D%7D",
        )
        .await;
        assert_eq!(even.json().as_array().map(Vec::len), Some(2), "{even:?}");
        // None matches: 204.
        assert_eq!(peek("?filter=%7B%22payload.n%22%3A99%7D").await.status, 204);
    }
    assert_eq!(size(address, &queue).await, 7);

    // Popped messages still count in the size; the account's peek shows them in flight.
    let popped = post(address, &format!("/queue/{queue}/pop/2?expiresIn=60"), None).await;
    assert_eq!(popped.status, 200);
    assert_eq!(size(address, &queue).await, 7);
    if leg.live {
        // The peeks' receives counted: the pop is not the messages' first attempt.
        assert!(
            popped
                .json()
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["attempts"].as_u64() > Some(1)),
            "{popped:?}"
        );
    }
    if !leg.live {
        let shown = peek("?amount=10").await.json();
        let in_flight: Vec<&Value> = shown
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m.get("expiryDate").is_some())
            .collect();
        assert_eq!(in_flight.len(), 2, "{shown}");
        assert!(in_flight.iter().all(|m| m["attempts"] == 1), "{shown}");
    }
    assert_eq!(
        post(
            address,
            &format!("/queue/{queue}/ack"),
            Some(&ack_body(&ids(&popped)))
        )
        .await
        .status,
        204
    );
    assert_eq!(size(address, &queue).await, 5);

    if leg.live {
        // Without peek_on_sqs, a peek on SQS (where it would count as an attempt) is refused.
        let refusing = serve(QueueApi::new(&leg.broker)).await;
        let refused = get(refusing, &format!("/queue/{queue}/peek")).await;
        assert_eq!(refused.status, 409, "{refused:?}");
        assert!(refused.reason().contains("PEEK_ON_SQS"), "{refused:?}");
    }
}

async fn cors_headers_answer_allowed_origins_only(leg: Leg) {
    let allowed = "https://ops.example.com";
    let address = serve(leg.api().allowed_origins(allowed.split(',').chain([""]))).await;
    let path = format!("/queue/{}/size", leg.queue("http-cors"));

    let answer = call(address, "GET", &path, &[("origin", allowed)], None).await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.header("access-control-allow-origin"), Some(allowed));
    assert_eq!(answer.header("vary"), Some("origin"));

    let other = call(
        address,
        "GET",
        &path,
        &[("origin", "https://evil.example")],
        None,
    )
    .await;
    // Another origin is refused before any work, not only left without CORS headers.
    assert_eq!(other.status, 403, "{other:?}");
    assert!(other.reason().contains("ALLOWED_ORIGINS"), "{other:?}");
    assert_eq!(
        other.header("access-control-allow-origin"),
        None,
        "{other:?}"
    );

    let preflight = [
        ("access-control-request-method", "POST"),
        ("access-control-request-headers", "content-type"),
    ];
    let push = format!("/queue/{}/push", leg.queue("http-cors"));
    let mut headers = vec![("origin", allowed)];
    headers.extend(preflight);
    let allowed_preflight = call(address, "OPTIONS", &push, &headers, None).await;
    assert_eq!(allowed_preflight.status, 204);
    assert_eq!(
        allowed_preflight.header("access-control-allow-origin"),
        Some(allowed)
    );
    assert!(allowed_preflight
        .header("access-control-allow-methods")
        .is_some_and(|methods| methods.contains("POST")));
    assert_eq!(
        allowed_preflight.header("access-control-allow-headers"),
        Some("content-type")
    );
    let mut headers = vec![("origin", "https://evil.example")];
    headers.extend(preflight);
    let refused = call(address, "OPTIONS", &push, &headers, None).await;
    assert_eq!(refused.header("access-control-allow-origin"), None);
    assert_eq!(refused.header("access-control-allow-methods"), None);

    // No origin allowed at all: every browser's request is refused, no CORS header for anyone.
    let closed = serve(leg.api()).await;
    let answer = call(closed, "GET", &path, &[("origin", allowed)], None).await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.header("access-control-allow-origin"), None);
}

async fn two_servers_over_one_queue_never_hand_one_message_to_both(leg: Leg) {
    let first = serve(leg.api()).await;
    let second = serve(QueueApi::new(&leg.second)).await;
    let queue = leg.queue("http-two");
    let payloads: Vec<Value> = (0..40).map(|n| json!({ "n": n })).collect();
    let pushed = post(
        first,
        &format!("/queue/{queue}/push"),
        Some(&Value::Array(payloads).to_string()),
    )
    .await;
    assert_eq!(pushed.status, 201);
    let pushed_ids: BTreeSet<String> = pushed.json()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();

    let drain = |address: SocketAddr, queue: String| async move {
        let mut taken = Vec::new();
        loop {
            let popped = post(address, &format!("/queue/{queue}/pop/3?expiresIn=60"), None).await;
            match popped.status {
                200 => taken.extend(ids(&popped)),
                204 => return taken,
                _ => panic!("a pop answers 200 or 204: {popped:?}"),
            }
        }
    };
    let (a, b) = tokio::join!(
        tokio::spawn(drain(first, queue.clone())),
        tokio::spawn(drain(second, queue.clone()))
    );
    let (a, b) = (a.expect("drains"), b.expect("drains"));
    let a_set: BTreeSet<String> = a.iter().cloned().collect();
    let b_set: BTreeSet<String> = b.iter().cloned().collect();
    assert_eq!(a_set.len(), a.len(), "one server got a message twice");
    assert_eq!(b_set.len(), b.len(), "one server got a message twice");
    assert!(
        a_set.is_disjoint(&b_set),
        "both servers got {:?}",
        a_set.intersection(&b_set).collect::<Vec<_>>()
    );
    assert_eq!(&a_set | &b_set, pushed_ids);
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both servers took some: {} and {}",
        a.len(),
        b.len()
    );

    // Each server acks what it handed out; the other's ids are not its to ack.
    let crossed = post(
        second,
        &format!("/queue/{queue}/ack"),
        Some(&ack_body(&a[..1])),
    )
    .await;
    assert_eq!(crossed.status, 404, "{crossed:?}");
    assert_eq!(
        post(first, &format!("/queue/{queue}/ack"), Some(&ack_body(&a)))
            .await
            .status,
        204
    );
    assert_eq!(
        post(second, &format!("/queue/{queue}/ack"), Some(&ack_body(&b)))
            .await
            .status,
        204
    );
    assert_eq!(size(first, &queue).await, 0);
}

/// Two servers (two brokers, each with its own pool on one PostgreSQL schema, as two replicas)
/// share the command history: a `hashCode` pushed through one is ignored by the other within its
/// duration, one of two racing pushes of a hash is stored, and after the duration the hash is
/// pushed again.
async fn two_servers_sharing_a_postgres_history_push_a_hash_code_once(leg: Leg) {
    let Some((options, schema)) = postgres_schema("http_queue", "shared_history").await else {
        return;
    };
    let mut servers = Vec::new();
    for broker in [&leg.broker, &leg.second] {
        let store = PostgresStore::new(postgres_pool(&options).await)
            .await
            .unwrap();
        servers.push(serve(QueueApi::new(broker).history(History::new(store))).await);
    }
    let (one, other) = (servers[0], servers[1]);
    let queue = leg.queue("http-shared-hash");
    let message = r#"{"player": "zezima"}"#;
    let push = format!("/queue/{queue}/push?hashCode=shared-1&expiresIn=3");

    let started = tokio::time::Instant::now();
    let first = post(one, &push, Some(message)).await;
    assert_eq!(first.status, 201, "{first:?}");
    let through_other = post(other, &push, Some(message)).await;
    assert_eq!(through_other.status, 204, "{through_other:?}");
    assert_eq!(size(other, &queue).await, 1);

    // Both servers at once with a new hash: one stores it, the other ignores it.
    let race = format!("/queue/{queue}/push?hashCode=shared-2&expiresIn=300");
    let (a, b) = tokio::join!(
        post(one, &race, Some(message)),
        post(other, &race, Some(message))
    );
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 204], "{a:?} {b:?}");
    assert_eq!(size(one, &queue).await, 2);

    // After its duration (2 s past it), the hash is pushed again, through either server, once.
    tokio::time::sleep_until(started + Duration::from_secs(5)).await;
    let later = post(other, &push, Some(message)).await;
    assert_eq!(later.status, 201, "{later:?}");
    assert_eq!(post(one, &push, Some(message)).await.status, 204);
    assert_eq!(size(one, &queue).await, 3);

    // A push that fails through one server frees its hash for the other's retry.
    let retried = format!("/queue/{queue}/push?hashCode=shared-3");
    let refused = post(one, &retried, Some("\"\u{FFFE}\"")).await;
    assert_eq!(refused.status, 400, "{refused:?}");
    assert_eq!(post(other, &retried, Some(message)).await.status, 201);
    assert_eq!(size(one, &queue).await, 4);
    schema.drop_it().await;
}

/// Replica safe ids (issue 35): two servers given one `id_key`, as replicas behind a round-robin
/// balancer. A message popped through one is pinged and acked through the other; the pinged one
/// stays out past its first expiry, the acked one is gone, the one neither came back; an id
/// signed with another key, or changed, acts on nothing.
async fn with_one_id_key_a_replica_acks_and_pings_what_another_popped(leg: Leg) {
    const KEY: &str = "replicas-share-this-32-byte-key!";
    let first = serve(leg.api().id_key(KEY)).await;
    let second = serve(QueueApi::new(&leg.second).id_key(KEY)).await;
    let elsewhere =
        serve(QueueApi::new(&leg.second).id_key("another-key-of-32-bytes-or-more!")).await;
    let queue = leg.queue("http-replicas");
    let q = |route: &str| format!("/queue/{queue}/{route}");
    let pushed = post(
        first,
        &q("push"),
        Some(r#"[{"k": "acked"}, {"k": "pinged"}, {"k": "dropped"}]"#),
    )
    .await;
    assert_eq!(pushed.status, 201, "{pushed:?}");
    let pushed_ids: BTreeSet<String> = pushed.json()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    let started = tokio::time::Instant::now();
    let popped = post(first, &q("pop/3?expiresIn=3"), None).await;
    assert_eq!(popped.status, 200, "{popped:?}");
    let messages = popped.json().as_array().cloned().unwrap();
    let by_key: std::collections::HashMap<String, (String, String)> = messages
        .iter()
        .map(|m| {
            (
                m["payload"]["k"].as_str().unwrap().to_owned(),
                (
                    m["_id"].as_str().unwrap().to_owned(),
                    m["messageId"].as_str().unwrap().to_owned(),
                ),
            )
        })
        .collect();
    assert_eq!(by_key.len(), 3, "{popped:?}");
    let message_ids: BTreeSet<String> = by_key.values().map(|(_, id)| id.clone()).collect();
    assert_eq!(message_ids, pushed_ids, "messageId is the SQS message id");

    // Another key, or a changed id, acts on nothing.
    let (acked_id, _) = by_key["acked"].clone();
    let foreign = post(
        elsewhere,
        &q("ack"),
        Some(&ack_body(std::slice::from_ref(&acked_id))),
    )
    .await;
    assert_eq!(foreign.status, 404, "{foreign:?}");
    let forged = format!("{}0", acked_id);
    let changed = post(second, &q("ack"), Some(&ack_body(&[forged]))).await;
    assert_eq!(changed.status, 404, "{changed:?}");

    // Through the other replica: ping one for 20 s more, ack another.
    let (pinged_id, _) = by_key["pinged"].clone();
    let pinged = post(
        second,
        &q("ping?expiresIn=20"),
        Some(&ack_body(&[pinged_id])),
    )
    .await;
    assert_eq!(pinged.status, 200, "{pinged:?}");
    let acked = post(second, &q("ack"), Some(&ack_body(&[acked_id]))).await;
    assert_eq!(acked.status, 204, "{acked:?}");

    // 2 s past the first expiry: only the one neither acked nor pinged is back.
    tokio::time::sleep_until(started + Duration::from_secs(5)).await;
    let back = post(second, &q("pop/3?expiresIn=60"), None).await;
    assert_eq!(back.status, 200, "{back:?}");
    let back = back.json();
    assert_eq!(back.as_array().map(Vec::len), Some(1), "{back}");
    assert_eq!(back[0]["messageId"], by_key["dropped"].1.as_str(), "{back}");
    assert_eq!(back[0]["attempts"], 2, "{back}");
    assert_eq!(
        size(first, &queue).await,
        2,
        "the pinged and the dropped are left"
    );
    let dropped_id = back[0]["_id"].as_str().unwrap().to_owned();
    let (pinged_id, _) = by_key["pinged"].clone();
    let rest = post(first, &q("ack"), Some(&ack_body(&[dropped_id, pinged_id]))).await;
    assert_eq!(rest.status, 204, "{rest:?}");
    assert_eq!(size(second, &queue).await, 0);
}
