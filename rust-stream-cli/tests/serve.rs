//! `rust-stream serve` as a process: the seed's curl-style requests to it, `/metrics` on
//! `PORT_METRICS`, two server processes over one LocalStack queue handing out disjoint
//! messages, two sharing a command history on PostgreSQL (`HISTORY_POSTGRES_URL`: a `hashCode`
//! pushed through one is ignored by the other), the in-process account when the environment
//! names no SQS, a bad `PORT`, `PEEK_ON_SQS` or `HISTORY_POSTGRES_URL` refused, and exposure
//! rules: a bearer token from `API_TOKENS` required, without one `127.0.0.1` only (said at
//! start) and another `BIND` refused without `--insecure-no-auth`, refusals counted on
//! `/metrics`; and the seed's examples as it writes them against two replicas behind a
//! round-robin (pop on one, ack or ping on the other).

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rust_stream::testing::{live_endpoint, live_postgres_url, QueueNames};
use serde_json::Value;

/// A port free now (the server binds it a moment later).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// A `rust-stream serve` process, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    metrics_port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn command(endpoint: Option<&str>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rust-stream"));
    for name in [
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_SQS",
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_DEFAULT_REGION",
        "AWS_REGION",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "ALLOWED_ORIGINS",
        "PEEK_ON_SQS",
        "HISTORY_POSTGRES_URL",
        "API_TOKENS",
        "API_TOKENS_FILE",
        "BIND",
        "QUEUE_PREFIX",
        "QUEUES",
        "ID_KEY",
    ] {
        command.env_remove(name);
    }
    if let Some(endpoint) = endpoint {
        command
            .env("AWS_ENDPOINT_URL", endpoint)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test");
    }
    command.arg("serve");
    command
}

/// Starts a server and waits until it answers.
fn serve(endpoint: Option<&str>) -> Server {
    start(command(endpoint))
}

/// The bearer token the tests' servers take (`API_TOKENS`), sent by [`call`].
const TOKEN: &str = "serve-test-token";

/// Starts a server from `command` (`serve`'s, with the variables a test adds, and [`TOKEN`]) and
/// waits until it answers.
fn start(mut command: Command) -> Server {
    command.env("API_TOKENS", format!("retired-token,{TOKEN}"));
    listening(command, false)
}

/// Starts a server from `command` as it is and waits until it answers; its standard error piped
/// when `capture` (to read once it is killed: a pipe nobody reads fills and stalls the server's
/// logging, so the others go to null).
fn listening(mut command: Command, capture: bool) -> Server {
    let (port, metrics_port) = (free_port(), free_port());
    let child = command
        .env("PORT", port.to_string())
        .env("PORT_METRICS", metrics_port.to_string())
        .env("ALLOWED_ORIGINS", "https://ops.example.com")
        .stdout(Stdio::null())
        .stderr(if capture {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .spawn()
        .expect("the binary starts");
    let server = Server {
        child,
        port,
        metrics_port,
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the server listens within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// One request, as curl sends it with the token: status and body.
fn call(port: u16, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    call_as(port, Some(TOKEN), method, path, body)
}

/// One request with `token` (or none): status and body.
fn call_as(
    port: u16,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    let body = body.unwrap_or_default();
    let authorization = token
        .map(|token| format!("authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n{authorization}\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .expect("sends");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("reads");
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("an HTTP answer: {answer}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn ids(body: &str) -> Vec<String> {
    let value: Value = serde_json::from_str(body).expect("JSON");
    value
        .as_array()
        .expect("an array")
        .iter()
        .map(|m| m["_id"].as_str().expect("an _id").to_owned())
        .collect()
}

/// Pops from `port` until it answers 204; the ids it handed out.
fn drain(port: u16, queue: &str) -> Vec<String> {
    let mut taken = Vec::new();
    loop {
        match call(
            port,
            "POST",
            &format!("/queue/{queue}/pop/4?expiresIn=60"),
            None,
        ) {
            (200, body) => taken.extend(ids(&body)),
            (204, _) => return taken,
            other => panic!("a pop answers 200 or 204: {other:?}"),
        }
    }
}

#[test]
fn two_server_processes_over_one_localstack_queue_hand_out_disjoint_messages() {
    let Some(endpoint) = live_endpoint("rust-stream serve on LocalStack") else {
        return;
    };
    let queue = QueueNames::new().queue_name("serve-two");
    let (a, b) = (serve(Some(&endpoint)), serve(Some(&endpoint)));

    // The seed's own requests.
    let batch: Vec<Value> = (0..30).map(|n| serde_json::json!({ "n": n })).collect();
    let (status, body) = call(
        a.port,
        "POST",
        &format!("/queue/{queue}/push?hashCode=batch-1&expiresIn=300"),
        Some(&Value::Array(batch.clone()).to_string()),
    );
    assert_eq!(status, 201, "{body}");
    let pushed: BTreeSet<String> = serde_json::from_str::<Value>(&body).unwrap()["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(pushed.len(), 30);
    let (status, _) = call(
        a.port,
        "POST",
        &format!("/queue/{queue}/push?hashCode=batch-1&expiresIn=300"),
        Some(&Value::Array(batch).to_string()),
    );
    assert_eq!(status, 204, "the repeat is ignored");
    assert_eq!(
        call(b.port, "GET", &format!("/queue/{queue}/size"), None),
        (200, r#"{"size":30}"#.to_owned())
    );

    let (queue_a, queue_b) = (queue.clone(), queue.clone());
    let (port_a, port_b) = (a.port, b.port);
    let from_a = std::thread::spawn(move || drain(port_a, &queue_a));
    let from_b = std::thread::spawn(move || drain(port_b, &queue_b));
    let (from_a, from_b) = (from_a.join().unwrap(), from_b.join().unwrap());
    let set_a: BTreeSet<String> = from_a.iter().cloned().collect();
    let set_b: BTreeSet<String> = from_b.iter().cloned().collect();
    assert_eq!(set_a.len() + set_b.len(), from_a.len() + from_b.len());
    assert!(
        set_a.is_disjoint(&set_b),
        "both processes handed out {:?}",
        set_a.intersection(&set_b).collect::<Vec<_>>()
    );
    assert_eq!(&set_a | &set_b, pushed);

    for (server, taken) in [(&a, &from_a), (&b, &from_b)] {
        if taken.is_empty() {
            continue;
        }
        let body = serde_json::json!({ "id": taken }).to_string();
        let (status, answer) = call(
            server.port,
            "POST",
            &format!("/queue/{queue}/ack"),
            Some(&body),
        );
        assert_eq!(status, 204, "{answer}");
    }
    assert_eq!(
        call(a.port, "GET", &format!("/queue/{queue}/size"), None),
        (200, r#"{"size":0}"#.to_owned())
    );

    // Metrics on their own port, in Prometheus's format: the API's requests and its SQS calls.
    let (status, metrics) = call(a.metrics_port, "GET", "/metrics", None);
    assert_eq!(status, 200);
    assert!(metrics.contains("rust_stream_http_requests{"), "{metrics}");
    assert!(
        metrics.contains(r#"http_route="/queue/{queue}/push",http_response_status_code="201""#),
        "{metrics}"
    );
    assert!(
        metrics.contains("messaging_client_operation_duration"),
        "{metrics}"
    );
    assert_eq!(call(a.metrics_port, "GET", "/queue/x/size", None).0, 404);
}

#[test]
fn two_server_processes_sharing_a_postgres_history_push_a_hash_code_once() {
    let Some(endpoint) = live_endpoint("rust-stream serve on LocalStack") else {
        return;
    };
    let Some(postgres) = live_postgres_url("rust-stream serve's command history on PostgreSQL")
    else {
        return;
    };
    let queue = QueueNames::new().queue_name("serve-history");
    let [a, b] = [(); 2].map(|()| {
        let mut command = command(Some(&endpoint));
        command.env("HISTORY_POSTGRES_URL", &postgres);
        start(command)
    });
    let push = format!("/queue/{queue}/push?hashCode=shared-1&expiresIn=300");
    let (status, body) = call(a.port, "POST", &push, Some(r#"{"player": "zezima"}"#));
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(b.port, "POST", &push, Some(r#"{"player": "zezima"}"#));
    assert_eq!(status, 204, "the other process ignores the hash: {body}");
    let other = format!("/queue/{queue}/push?hashCode=shared-2&expiresIn=300");
    assert_eq!(call(b.port, "POST", &other, Some("{}")).0, 201);
    assert_eq!(call(a.port, "POST", &other, Some("{}")).0, 204);
    assert_eq!(
        call(a.port, "GET", &format!("/queue/{queue}/size"), None),
        (200, r#"{"size":2}"#.to_owned())
    );
}

#[test]
fn without_sqs_in_the_environment_it_serves_an_in_process_account() {
    let server = serve(None);
    let (status, body) = call(
        server.port,
        "POST",
        "/queue/local/push",
        Some(r#"{"hello": 1}"#),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = call(server.port, "POST", "/queue/local/pop", None);
    assert_eq!(status, 200, "{body}");
    let popped: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(popped["payload"]["hello"], 1);
    assert_eq!(popped["attempts"], 1);
    let ack = serde_json::json!({ "id": [popped["_id"]] }).to_string();
    assert_eq!(
        call(server.port, "POST", "/queue/local/ack", Some(&ack)).0,
        204
    );
    assert_eq!(
        call(server.port, "GET", "/queue/local/size", None),
        (200, r#"{"size":0}"#.to_owned())
    );
}

#[test]
fn a_bad_setting_is_refused_naming_its_variable() {
    let output = command(None)
        .env("PORT", "eighty")
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PORT is `eighty`"), "{stderr}");
    let output = command(None)
        .env("PORT", "0")
        .env("PEEK_ON_SQS", "maybe")
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("PEEK_ON_SQS is `maybe`"), "{stderr}");
    let output = command(None)
        .env("PORT", "0")
        .env("PORT_METRICS", "0")
        .env("HISTORY_POSTGRES_URL", "mysql://localhost/history")
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("the PostgreSQL HISTORY_POSTGRES_URL names"),
        "{stderr}"
    );
}

#[test]
fn with_api_tokens_every_route_but_the_health_probe_takes_one_and_refusals_are_counted() {
    let server = serve(None);
    let push = "/queue/guarded/push";
    let (status, body) = call_as(server.port, None, "POST", push, Some("{}"));
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("API_TOKENS"), "{body}");
    let (status, _) = call_as(server.port, Some("guess"), "POST", push, Some("{}"));
    assert_eq!(status, 401);
    // Either token of a rotation.
    assert_eq!(
        call_as(server.port, Some(TOKEN), "POST", push, Some("{}")).0,
        201
    );
    assert_eq!(
        call_as(
            server.port,
            Some("retired-token"),
            "GET",
            "/queue/guarded/size",
            None
        ),
        (200, r#"{"size":1}"#.to_owned())
    );
    assert_eq!(call_as(server.port, None, "GET", "/healthz", None).0, 200);
    let (status, metrics) = call(server.metrics_port, "GET", "/metrics", None);
    assert_eq!(status, 200);
    assert!(
        metrics.contains(r#"rust_stream_http_refused{rust_stream_reason="token"} 2"#),
        "{metrics}"
    );
}

#[test]
fn without_a_token_it_listens_on_loopback_only_and_says_so() {
    let mut server = listening(command(None), true);
    assert_eq!(
        call_as(server.port, None, "GET", "/queue/open/size", None).0,
        200
    );
    let _ = server.child.kill();
    let _ = server.child.wait();
    let mut stderr = String::new();
    if let Some(mut pipe) = server.child.stderr.take() {
        pipe.read_to_string(&mut stderr).expect("reads stderr");
    }
    assert!(stderr.contains("no API_TOKENS"), "{stderr}");
    assert!(stderr.contains("127.0.0.1 only"), "{stderr}");
    assert!(
        stderr.contains("127.0.0.1:"),
        "the address it listens on: {stderr}"
    );
}

#[test]
fn another_address_without_a_token_is_refused_unless_said_insecure() {
    let output = command(None)
        .env("BIND", "0.0.0.0")
        .env("PORT", "0")
        .env("PORT_METRICS", "0")
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--insecure-no-auth"), "{stderr}");
    assert!(stderr.contains("API_TOKENS"), "{stderr}");
    let mut insecure = command(None);
    insecure.arg("--insecure-no-auth").env("BIND", "0.0.0.0");
    let server = listening(insecure, false);
    assert_eq!(
        call_as(server.port, None, "GET", "/queue/open/size", None).0,
        200
    );
}

/// Seed 004's "replica safe": two processes given one `ID_KEY` behind a round-robin (requests
/// alternate between them): what one pops, the other pings and acks; 0 lost, 0 handed out twice.
#[test]
fn two_server_processes_with_one_id_key_ack_what_each_other_popped() {
    let Some(endpoint) = live_endpoint("rust-stream serve on LocalStack") else {
        return;
    };
    let queue = QueueNames::new().queue_name("serve-replicas");
    let [a, b] = [(); 2].map(|()| {
        let mut command = command(Some(&endpoint));
        command.env("ID_KEY", "0123456789abcdef0123456789abcdef");
        start(command)
    });
    let ports = [a.port, b.port];
    let mut turn = 0;
    let mut next = || {
        turn += 1;
        ports[turn % 2]
    };
    let batch: Vec<Value> = (0..20).map(|n| serde_json::json!({ "n": n })).collect();
    let push = format!("/queue/{queue}/push");
    let (status, body) = call(
        next(),
        "POST",
        &push,
        Some(&Value::Array(batch).to_string()),
    );
    assert_eq!(status, 201, "{body}");
    let mut seen = BTreeSet::new();
    loop {
        let port = next();
        let (status, body) = call(
            port,
            "POST",
            &format!("/queue/{queue}/pop/3?expiresIn=60"),
            None,
        );
        if status == 204 {
            break;
        }
        assert_eq!(status, 200, "{body}");
        let popped: Value = serde_json::from_str(&body).unwrap();
        let ids = ids(&body);
        for message in popped.as_array().unwrap() {
            let id = message["messageId"]
                .as_str()
                .expect("a messageId")
                .to_owned();
            assert!(
                seen.insert(id),
                "handed out twice within its visibility: {message}"
            );
        }
        // The other replica pings them and acks them.
        let other = if port == ports[0] { ports[1] } else { ports[0] };
        let body = serde_json::json!({ "id": ids }).to_string();
        let (status, answer) = call(
            other,
            "POST",
            &format!("/queue/{queue}/ping?expiresIn=60"),
            Some(&body),
        );
        assert_eq!(status, 200, "{answer}");
        let (status, answer) = call(other, "POST", &format!("/queue/{queue}/ack"), Some(&body));
        assert_eq!(status, 204, "{answer}");
    }
    assert_eq!(seen.len(), 20, "every message handed out once");
    assert_eq!(
        call(next(), "GET", &format!("/queue/{queue}/size"), None),
        (200, r#"{"size":0}"#.to_owned())
    );
}

#[test]
fn a_short_id_key_is_refused() {
    let output = command(None)
        .env("API_TOKENS", TOKEN)
        .env("ID_KEY", "short")
        .output()
        .expect("the binary runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("ID_KEY is 5 bytes"), "{stderr}");
}

/// The p50 and p99 of `samples`, in milliseconds.
fn percentiles(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort_unstable();
    let at = |q: f64| {
        let index = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[index].as_secs_f64() * 1000.0
    };
    (at(0.50), at(0.99))
}

/// Issue 35's load run: 2 replicas sharing an `ID_KEY`, 20 clients for 60 s, each pushing
/// through one replica, popping through the other and acking through the first, 5 rounds a
/// second at most: 0 lost, 0 handed out twice, and each route's p50/p99 printed (quoted in
/// docs/operations.md).
#[test]
#[ignore = "a measurement: 60 s on LocalStack; run with --ignored --nocapture"]
fn two_replicas_and_twenty_clients_for_sixty_seconds_lose_nothing_and_hand_out_nothing_twice() {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    let Some(endpoint) = live_endpoint("rust-stream serve's load run on LocalStack") else {
        return;
    };
    let queue = QueueNames::new().queue_name("serve-load");
    let [a, b] = [(); 2].map(|()| {
        let mut command = command(Some(&endpoint));
        command.env("ID_KEY", "0123456789abcdef0123456789abcdef");
        start(command)
    });
    let ports = [a.port, b.port];
    let pushed = Arc::new(Mutex::new(BTreeSet::new()));
    let popped = Arc::new(Mutex::new(Vec::new()));
    let latencies: Arc<Mutex<HashMap<&'static str, Vec<Duration>>>> = Arc::default();
    let until = Instant::now() + Duration::from_secs(60);
    let timed = |latencies: &Mutex<HashMap<&'static str, Vec<Duration>>>,
                 route: &'static str,
                 request: &dyn Fn() -> (u16, String)| {
        let started = Instant::now();
        let answer = request();
        latencies
            .lock()
            .unwrap()
            .entry(route)
            .or_default()
            .push(started.elapsed());
        answer
    };
    std::thread::scope(|scope| {
        for client in 0..20 {
            let (pushed, popped, latencies, queue) = (&pushed, &popped, &latencies, &queue);
            scope.spawn(move || {
                let mut round = 0usize;
                while Instant::now() < until {
                    let began = Instant::now();
                    let (first, other) =
                        (ports[(client + round) % 2], ports[(client + round + 1) % 2]);
                    let body = serde_json::json!({ "client": client, "round": round }).to_string();
                    let (status, answer) = timed(latencies, "push", &|| {
                        call(first, "POST", &format!("/queue/{queue}/push"), Some(&body))
                    });
                    assert_eq!(status, 201, "{answer}");
                    let id = serde_json::from_str::<Value>(&answer).unwrap()["ids"][0]
                        .as_str()
                        .unwrap()
                        .to_owned();
                    pushed.lock().unwrap().insert(id);
                    let (status, answer) = timed(latencies, "pop", &|| {
                        call(
                            other,
                            "POST",
                            &format!("/queue/{queue}/pop?expiresIn=60"),
                            None,
                        )
                    });
                    if status == 200 {
                        let message: Value = serde_json::from_str(&answer).unwrap();
                        popped
                            .lock()
                            .unwrap()
                            .push(message["messageId"].as_str().unwrap().to_owned());
                        let ack = serde_json::json!({ "id": [message["_id"]] }).to_string();
                        let (status, answer) = timed(latencies, "ack", &|| {
                            call(first, "POST", &format!("/queue/{queue}/ack"), Some(&ack))
                        });
                        assert_eq!(status, 204, "{answer}");
                    } else {
                        assert_eq!(status, 204, "{answer}");
                    }
                    round += 1;
                    std::thread::sleep(Duration::from_millis(200).saturating_sub(began.elapsed()));
                }
            });
        }
    });
    // What the clients left: drained through both replicas.
    loop {
        let (status, body) = call(
            a.port,
            "POST",
            &format!("/queue/{queue}/pop/10?expiresIn=60"),
            None,
        );
        if status == 204 {
            break;
        }
        assert_eq!(status, 200, "{body}");
        let messages: Value = serde_json::from_str(&body).unwrap();
        let mut ids = Vec::new();
        for message in messages.as_array().unwrap() {
            popped
                .lock()
                .unwrap()
                .push(message["messageId"].as_str().unwrap().to_owned());
            ids.push(message["_id"].clone());
        }
        let ack = serde_json::json!({ "id": ids }).to_string();
        assert_eq!(
            call(b.port, "POST", &format!("/queue/{queue}/ack"), Some(&ack)).0,
            204
        );
    }
    let pushed = pushed.lock().unwrap().clone();
    let popped = popped.lock().unwrap().clone();
    let once: BTreeSet<String> = popped.iter().cloned().collect();
    let lost: Vec<&String> = pushed.difference(&once).collect();
    let twice = popped.len() - once.len();
    let mut report = format!(
        "load: 2 replicas, 20 clients, 60 s: {} pushed, {} popped, {} lost, {} handed out twice",
        pushed.len(),
        popped.len(),
        lost.len(),
        twice
    );
    for (route, samples) in latencies.lock().unwrap().iter_mut() {
        let (p50, p99) = percentiles(samples);
        report.push_str(&format!(
            "; {route}: {} calls, p50 {p50:.1} ms, p99 {p99:.1} ms",
            samples.len()
        ));
    }
    println!("{report}");
    assert!(lost.is_empty(), "lost {lost:?}");
    assert_eq!(twice, 0, "handed out twice");
    assert_eq!(
        call(a.port, "GET", &format!("/queue/{queue}/size"), None),
        (200, r#"{"size":0}"#.to_owned())
    );
}

/// Two `serve` replicas behind a round-robin: each request goes to the next of the two, as a
/// balancer without sticky sessions sends them.
struct RoundRobin {
    ports: [u16; 2],
    turn: usize,
}

impl RoundRobin {
    /// Sends one request to the next replica: its port, status and body.
    fn call(&mut self, method: &str, path: &str, body: Option<&str>) -> (u16, u16, String) {
        self.turn += 1;
        let port = self.ports[self.turn % 2];
        let (status, answer) = call(port, method, path, body);
        (port, status, answer)
    }
}

/// A query value as `curl --data-urlencode` sends it.
fn urlencoded(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(byte).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// Which messages are out (popped, not acked) and until when, by SQS message id, as the clients
/// saw them: a message handed out again before then was delivered to two clients within one
/// visibility. "Until" counts from when the request was sent, before the server's receive, so
/// it is never later than the real expiry.
#[derive(Default)]
struct Out {
    until: std::collections::HashMap<String, Option<Instant>>,
}

impl Out {
    /// Records the messages of a pop's answer, sent at `sent` for `expires_in`; their `_id`s.
    fn popped(&mut self, answer: &str, sent: Instant, expires_in: Duration) -> Vec<String> {
        let value: Value = serde_json::from_str(answer).expect("JSON");
        let messages = match value {
            Value::Array(messages) => messages,
            one => vec![one],
        };
        let mut ids = Vec::new();
        for message in messages {
            // Without an ID_KEY, `_id` is the message id and there is no `messageId`.
            let id = message["messageId"]
                .as_str()
                .or(message["_id"].as_str())
                .expect("a message id")
                .to_owned();
            match self.until.get(&id) {
                Some(None) => panic!("handed out after it was acked: {message}"),
                Some(Some(until)) => assert!(
                    Instant::now() >= *until,
                    "handed out again within its visibility: {message}"
                ),
                None => {}
            }
            self.until.insert(id, Some(sent + expires_in));
            ids.push(message["_id"].as_str().expect("an _id").to_owned());
        }
        ids
    }

    /// `message_id` pinged at `sent` for `expires_in` more.
    fn pinged(&mut self, message_id: &str, sent: Instant, expires_in: Duration) {
        self.until
            .insert(message_id.to_owned(), Some(sent + expires_in));
    }

    /// `message_id` acked.
    fn acked(&mut self, message_id: &str) {
        self.until.insert(message_id.to_owned(), None);
    }
}

/// The SQS message id a signed `_id` carries (`<message id>~<receipt handle>~<mac>`).
fn message_id(id: &str) -> &str {
    id.split('~').next().expect("a message id")
}

/// Seed 004's examples as it writes them (docs/operations.md's requests), against two `serve`
/// processes over LocalStack sharing `API_TOKENS`, `ID_KEY` and a PostgreSQL command history,
/// every request sent to the next of the two: the size of `test`; a push of one and of many with
/// a `hashCode`, the repeat ignored by the other replica; a pop on one acked on the other; a
/// pop/10 whose messages the other pings (still out past their first expiry) or leaves (back at
/// its expiry); the peek with the seed's filter; the scraper's username that fails 5 times and
/// lands in `player-hiscore-scraper-dead`. 0 messages lost, 0 handed out twice within one
/// visibility.
#[test]
fn the_seeds_examples_against_two_replicas_behind_a_round_robin() {
    let Some(endpoint) = live_endpoint("the seed's examples against two serve processes") else {
        return;
    };
    let Some(postgres) = live_postgres_url("the seed's examples' shared command history") else {
        return;
    };
    let names = QueueNames::new();
    let (test, scraper) = (
        names.queue_name("test"),
        names.queue_name("player-hiscore-scraper"),
    );
    let [a, b] = [(); 2].map(|()| {
        let mut command = command(Some(&endpoint));
        command
            .env("ID_KEY", "0123456789abcdef0123456789abcdef")
            .env("HISTORY_POSTGRES_URL", &postgres)
            .env("PEEK_ON_SQS", "true");
        start(command)
    });
    let mut balancer = RoundRobin {
        ports: [a.port, b.port],
        turn: 0,
    };
    let mut out = Out::default();
    let mut pushed = BTreeSet::new();
    let record = |pushed: &mut BTreeSet<String>, body: &str| {
        let value: Value = serde_json::from_str(body).expect("JSON");
        for id in value["ids"].as_array().expect("ids") {
            pushed.insert(id.as_str().expect("an id").to_owned());
        }
    };

    // "we could check the size of the test queue by performing GET /queue/test/size"
    let (_, status, body) = balancer.call("GET", &format!("/queue/{test}/size"), None);
    assert_eq!((status, body.as_str()), (200, r#"{"size":0}"#));

    // PushOne, then PushMany with a command history: the repeat, on the other replica, ignored.
    let (_, status, body) = balancer.call(
        "POST",
        &format!("/queue/{scraper}/push"),
        Some(r#"{"player": "zezima"}"#),
    );
    assert_eq!(status, 201, "{body}");
    record(&mut pushed, &body);
    let many = format!("/queue/{scraper}/push?hashCode=9f2c1e&expiresIn=600");
    let players = r#"[{"player": "zezima"}, {"player": "lynx"}]"#;
    let (first, status, body) = balancer.call("POST", &many, Some(players));
    assert_eq!(status, 201, "{body}");
    record(&mut pushed, &body);
    let (second, status, body) = balancer.call("POST", &many, Some(players));
    assert_ne!(first, second, "the repeat went to the other replica");
    assert_eq!(status, 204, "the repeat is ignored: {body}");
    assert_eq!(pushed.len(), 3);
    let (_, status, body) = balancer.call("GET", &format!("/queue/{scraper}/size"), None);
    assert_eq!((status, body.as_str()), (200, r#"{"size":3}"#));

    // Peek with the seed's filter, amount and offset (a peek on SQS is a receive, allowed
    // here by PEEK_ON_SQS): all three match, none is taken.
    let filter = urlencoded(r#"{"payload.player": {"$in": ["zezima", "lynx"]}}"#);
    let peek = format!("/queue/{scraper}/peek?filter={filter}&amount=10&offset=0");
    let (_, status, body) = balancer.call("GET", &peek, None);
    assert_eq!(status, 200, "{body}");
    let peeked: Vec<String> = serde_json::from_str::<Value>(&body)
        .unwrap()
        .as_array()
        .expect("an array")
        .iter()
        .map(|m| m["_id"].as_str().expect("an _id").to_owned())
        .collect();
    assert_eq!(peeked.iter().cloned().collect::<BTreeSet<_>>(), pushed);
    // The peek's receive made them visible again; LocalStack's timer acts within 1 s.
    std::thread::sleep(Duration::from_secs(2));

    // Pop on one replica, ack on the other.
    let sent = Instant::now();
    let (popper, status, body) =
        balancer.call("POST", &format!("/queue/{scraper}/pop?expiresIn=60"), None);
    assert_eq!(status, 200, "{body}");
    let one = out.popped(&body, sent, Duration::from_secs(60));
    let ack = serde_json::json!({ "id": one }).to_string();
    let (acker, status, body) = balancer.call("POST", &format!("/queue/{scraper}/ack"), Some(&ack));
    assert_ne!(popper, acker);
    assert_eq!(status, 204, "{body}");
    out.acked(message_id(&one[0]));

    // Pop the rest for 5 s; the other replica pings the first for 600 s more and leaves the
    // other, which comes back after its expiry while the pinged one stays out.
    let sent = Instant::now();
    let (popper, status, body) = balancer.call(
        "POST",
        &format!("/queue/{scraper}/pop/10?expiresIn=5"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let rest = out.popped(&body, sent, Duration::from_secs(5));
    assert_eq!(rest.len(), 2, "{body}");
    let (kept, left) = (rest[0].clone(), rest[1].clone());
    let ping = serde_json::json!({ "id": [kept] }).to_string();
    let sent = Instant::now();
    let (pinger, status, body) = balancer.call(
        "POST",
        &format!("/queue/{scraper}/ping?expiresIn=600"),
        Some(&ping),
    );
    assert_ne!(popper, pinger);
    assert_eq!(status, 200, "{body}");
    out.pinged(message_id(&kept), sent, Duration::from_secs(600));
    // 2 s past the expiry, beyond LocalStack's 1 s visibility timer.
    std::thread::sleep(Duration::from_secs(7));
    let sent = Instant::now();
    let (_, status, body) = balancer.call(
        "POST",
        &format!("/queue/{scraper}/pop/10?expiresIn=60"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let back = out.popped(&body, sent, Duration::from_secs(60));
    assert_eq!(back.len(), 1, "only the one not pinged: {body}");
    assert_eq!(message_id(&back[0]), message_id(&left));
    let popped: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        popped[0]["attempts"], 3,
        "popped twice and peeked once: {body}"
    );
    // Both acked, on whichever replica is next.
    let ack = serde_json::json!({ "id": [kept, back[0]] }).to_string();
    let (_, status, body) = balancer.call("POST", &format!("/queue/{scraper}/ack"), Some(&ack));
    assert_eq!(status, 204, "{body}");
    out.acked(message_id(&kept));
    out.acked(message_id(&back[0]));
    let (_, status, body) = balancer.call("GET", &format!("/queue/{scraper}/size"), None);
    assert_eq!((status, body.as_str()), (200, r#"{"size":0}"#));

    // "Somehow a non-existing username gets pushed and it fails 5 times. The user then gets
    // moved to the player-hiscore-scraper-dead queue."
    let (_, status, body) = balancer.call(
        "POST",
        &format!("/queue/{scraper}/push"),
        Some(r#"{"player": "no-such-player"}"#),
    );
    assert_eq!(status, 201, "{body}");
    record(&mut pushed, &body);
    for attempt in 1..=5 {
        let sent = Instant::now();
        let (_, status, body) =
            balancer.call("POST", &format!("/queue/{scraper}/pop?expiresIn=1"), None);
        assert_eq!(status, 200, "attempt {attempt}: {body}");
        out.popped(&body, sent, Duration::from_secs(1));
        let popped: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(popped["attempts"], attempt, "{body}");
        assert_eq!(popped["payload"]["player"], "no-such-player");
        std::thread::sleep(Duration::from_secs(3));
    }
    let (_, status, body) = balancer.call("POST", &format!("/queue/{scraper}/pop"), None);
    assert_eq!(status, 204, "the sixth receive moved it: {body}");
    let (_, status, body) = balancer.call("GET", &format!("/queue/{scraper}-dead/peek"), None);
    assert_eq!(status, 200, "{body}");
    let dead: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(dead[0]["payload"]["player"], "no-such-player", "{body}");

    // 0 lost: every message pushed was acked, or is the one in the dead queue.
    let acked: BTreeSet<&String> = out
        .until
        .iter()
        .filter(|(_, until)| until.is_none())
        .map(|(id, _)| id)
        .collect();
    let dead_id = dead[0]["_id"].as_str().expect("an _id").to_owned();
    let accounted: BTreeSet<String> = acked.into_iter().cloned().chain([dead_id]).collect();
    assert_eq!(
        accounted, pushed,
        "every message pushed acked or dead-lettered"
    );
}
