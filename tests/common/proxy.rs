//! A fault-injecting HTTP/1.1 proxy for live tests: it sits between the SDK and LocalStack on
//! loopback and, per request, passes it through or injects the fault the test switched on.
//!
//! It reads HTTP/1.1 framing (a request's `Content-Length`; a response's `Content-Length` or
//! chunked body) so that a fault hits one request of a kept-alive connection, not a connection
//! as a whole. Each request is forwarded on a fresh upstream connection, so the upstream's own
//! keep-alive never decides what the client sees. It counts every request (a refused connection
//! counts as one) and every fault by kind.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the proxy does to the requests that reach it while the fault is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// Resets the connection (RST) at once: a new one as it is accepted, a kept-alive one as its
    /// next request arrives. Nothing reaches the upstream.
    Refuse,
    /// Reads the request and never answers nor forwards it; the connection stays open until the
    /// client gives up on it, whatever the fault is afterwards.
    Stall,
    /// Forwards the head and half of the body, then closes both sides: the upstream never sees a
    /// whole request, the client never sees an answer.
    CutRequest,
    /// Forwards the whole request, so the upstream acts on it, and gives the client the response
    /// head and half of its body, then closes the connection.
    CutResponse,
    /// Answers HTTP 500 `InternalFailure`, as SQS does when it fails; nothing is forwarded.
    ServerError,
    /// Answers HTTP 400 `RequestThrottled`, as SQS throttles in its JSON protocol; nothing is
    /// forwarded.
    Throttle,
}

impl Fault {
    pub const ALL: [Fault; 6] = [
        Fault::Refuse,
        Fault::Stall,
        Fault::CutRequest,
        Fault::CutResponse,
        Fault::ServerError,
        Fault::Throttle,
    ];

    fn index(self) -> usize {
        Self::ALL
            .iter()
            .position(|fault| *fault == self)
            .expect("every fault is listed")
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fault::Refuse => "refuse",
            Fault::Stall => "stall",
            Fault::CutRequest => "cut request",
            Fault::CutResponse => "cut response",
            Fault::ServerError => "HTTP 500",
            Fault::Throttle => "throttle",
        })
    }
}

/// What the proxy has seen so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests that reached the proxy, and connections it refused.
    pub requests: u64,
    /// Requests forwarded whole and answered whole.
    pub passed: u64,
    /// Faults injected, by [`Fault::ALL`] index.
    pub faults: [u64; 6],
}

impl Counts {
    pub fn faults_of(&self, fault: Fault) -> u64 {
        self.faults[fault.index()]
    }

    /// What happened between `earlier` and `self`.
    pub fn since(&self, earlier: &Counts) -> Counts {
        let mut faults = [0; 6];
        for (i, count) in faults.iter_mut().enumerate() {
            *count = self.faults[i] - earlier.faults[i];
        }
        Counts {
            requests: self.requests - earlier.requests,
            passed: self.passed - earlier.passed,
            faults,
        }
    }
}

/// A request a fault hit: its SQS operation (`SendMessageBatch`) and queue name, or `-` for a
/// connection refused before any request.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Hit {
    pub fault: Fault,
    pub operation: String,
    pub queue: String,
}

#[derive(Default)]
struct State {
    fault: Mutex<Option<Fault>>,
    /// The next request of this operation stalls, whatever the fault is.
    stall_next: Mutex<Option<String>>,
    /// Every request of this operation gets this fault, whatever the fault is for the others.
    fault_of: Mutex<Option<(String, Fault)>>,
    requests: AtomicU64,
    passed: AtomicU64,
    faults: [AtomicU64; 6],
    hits: Mutex<BTreeMap<Hit, u64>>,
}

impl State {
    fn fault(&self) -> Option<Fault> {
        *self.fault.lock().unwrap()
    }

    fn count_request(&self) {
        self.requests.fetch_add(1, Ordering::SeqCst);
    }

    fn count_fault(&self, fault: Fault, request: Option<&Message>) {
        self.faults[fault.index()].fetch_add(1, Ordering::SeqCst);
        let hit = Hit {
            fault,
            operation: request.map_or_else(|| "-".to_owned(), Message::operation),
            queue: request.map_or_else(|| "-".to_owned(), Message::queue),
        };
        *self.hits.lock().unwrap().entry(hit).or_default() += 1;
    }
}

/// The running proxy; it stops accepting when dropped.
pub struct Proxy {
    address: SocketAddr,
    state: Arc<State>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> Proxy {
        let authority = upstream
            .strip_prefix("http://")
            .expect("the proxy speaks plain HTTP to the upstream")
            .trim_end_matches('/');
        let upstream = tokio::net::lookup_host(authority)
            .await
            .expect("the upstream's host resolves")
            .next()
            .expect("the upstream's host has an address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let address = listener.local_addr().unwrap();
        let state = Arc::new(State::default());
        let accept = tokio::spawn(accept(listener, upstream, state.clone()));
        Proxy {
            address,
            state,
            accept,
        }
    }

    /// The endpoint to give the SDK.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Switches the fault on (`Some`) or passes everything through (`None`), from the next
    /// request on.
    pub fn set(&self, fault: Option<Fault>) {
        *self.state.fault.lock().unwrap() = fault;
    }

    /// Stalls the next request of `operation` (`DeleteMessageBatch`, say), once, as one stalled
    /// connection among healthy ones: it is never answered until the client gives it up.
    pub fn stall_next(&self, operation: &str) {
        *self.state.stall_next.lock().unwrap() = Some(operation.to_owned());
    }

    /// Gives every request of `operation` (`DeleteMessageBatch`, say) this fault from the next
    /// one on, until set to `None`; other operations pass as [`set`](Self::set) says.
    pub fn set_for(&self, operation: &str, fault: Option<Fault>) {
        *self.state.fault_of.lock().unwrap() = fault.map(|fault| (operation.to_owned(), fault));
    }

    /// Every request a fault hit so far, by fault, operation and queue.
    pub fn hits(&self) -> BTreeMap<Hit, u64> {
        self.state.hits.lock().unwrap().clone()
    }

    pub fn counts(&self) -> Counts {
        let mut faults = [0; 6];
        for (i, count) in faults.iter_mut().enumerate() {
            *count = self.state.faults[i].load(Ordering::SeqCst);
        }
        Counts {
            requests: self.state.requests.load(Ordering::SeqCst),
            passed: self.state.passed.load(Ordering::SeqCst),
            faults,
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn accept(listener: TcpListener, upstream: SocketAddr, state: Arc<State>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        if state.fault() == Some(Fault::Refuse) {
            state.count_request();
            state.count_fault(Fault::Refuse, None);
            reset(client);
            continue;
        }
        let state = state.clone();
        tokio::spawn(async move {
            // An I/O error ends the connection, as it would end it between a client and SQS.
            let _ = serve(client, upstream, &state).await;
        });
    }
}

/// Closes the connection with a RST rather than a FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

/// Serves the requests of one client connection until it closes or a fault closes it.
async fn serve(client: TcpStream, upstream: SocketAddr, state: &State) -> std::io::Result<()> {
    let mut client = BufReader::new(client);
    loop {
        let Some(request) = read_message(&mut client, false).await? else {
            return Ok(());
        };
        state.count_request();
        let stall_this = {
            let mut next = state.stall_next.lock().unwrap();
            let matches = next.as_deref() == Some(request.operation().as_str());
            if matches {
                *next = None;
            }
            matches
        };
        let of_operation = state
            .fault_of
            .lock()
            .unwrap()
            .as_ref()
            .filter(|(operation, _)| *operation == request.operation())
            .map(|(_, fault)| *fault);
        let fault = if stall_this {
            Some(Fault::Stall)
        } else {
            of_operation.or_else(|| state.fault())
        };
        if let Some(fault) = fault {
            state.count_fault(fault, Some(&request));
        }
        match fault {
            None => {
                let response = exchange(upstream, &request).await?;
                client.write_all(&response.bytes()).await?;
                state.passed.fetch_add(1, Ordering::SeqCst);
            }
            Some(Fault::Refuse) => {
                reset(client.into_inner());
                return Ok(());
            }
            Some(Fault::Stall) => {
                // Hold the connection, reading whatever comes, until the client drops it.
                let mut sink = [0; 4096];
                while client.read(&mut sink).await? > 0 {}
                return Ok(());
            }
            Some(Fault::CutRequest) => {
                let mut to_upstream = TcpStream::connect(upstream).await?;
                to_upstream.write_all(&request.cut()).await?;
                to_upstream.shutdown().await?;
                client.shutdown().await?;
                return Ok(());
            }
            Some(Fault::CutResponse) => {
                let response = exchange(upstream, &request).await?;
                client.write_all(&response.cut()).await?;
                client.shutdown().await?;
                return Ok(());
            }
            Some(Fault::ServerError) => {
                let body =
                    r#"{"__type":"InternalFailure","message":"injected by the fault proxy"}"#;
                client
                    .write_all(&error_response(500, "InternalFailure;Receiver", body))
                    .await?;
            }
            Some(Fault::Throttle) => {
                let body =
                    r#"{"__type":"com.amazonaws.sqs#RequestThrottled","message":"Rate exceeded"}"#;
                client
                    .write_all(&error_response(400, "RequestThrottled;Sender", body))
                    .await?;
            }
        }
        if request.closes() {
            client.shutdown().await?;
            return Ok(());
        }
    }
}

/// An error answer in the SQS JSON protocol: the `__type` body and the query-compatible code the
/// SDK reads first.
fn error_response(status: u16, query_error: &str, body: &str) -> Vec<u8> {
    let reason = if status == 500 {
        "Internal Server Error"
    } else {
        "Bad Request"
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/x-amz-json-1.0\r\n\
         x-amzn-query-error: {query_error}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends one request on a new upstream connection and reads its response.
async fn exchange(upstream: SocketAddr, request: &Message) -> std::io::Result<Message> {
    let mut to_upstream = BufReader::new(TcpStream::connect(upstream).await?);
    to_upstream.write_all(&request.bytes()).await?;
    read_message(&mut to_upstream, true)
        .await?
        .ok_or_else(|| std::io::Error::other("the upstream closed without answering"))
}

/// One HTTP/1.1 message as it was on the wire: its head (through the blank line) and its body
/// (framing included, when chunked).
struct Message {
    head: Vec<u8>,
    body: Vec<u8>,
}

impl Message {
    fn bytes(&self) -> Vec<u8> {
        [self.head.as_slice(), self.body.as_slice()].concat()
    }

    /// The message cut in the middle: its head and half of its body, or half of its head when it
    /// has no body, so the peer never reads a whole message.
    fn cut(&self) -> Vec<u8> {
        if self.body.is_empty() {
            return self.head[..self.head.len() / 2].to_vec();
        }
        [self.head.as_slice(), &self.body[..self.body.len() / 2]].concat()
    }

    fn header(&self, name: &str) -> Option<String> {
        String::from_utf8_lossy(&self.head)
            .lines()
            .skip(1)
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| key.trim().eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim().to_owned())
    }

    /// The SQS operation of a request, from its `X-Amz-Target` (`AmazonSQS.ReceiveMessage`).
    fn operation(&self) -> String {
        self.header("x-amz-target")
            .and_then(|target| target.rsplit('.').next().map(str::to_owned))
            .unwrap_or_else(|| "?".to_owned())
    }

    /// The queue a request names, from the `QueueUrl` (or `QueueName`) of its JSON body.
    fn queue(&self) -> String {
        let body: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_default();
        body.get("QueueUrl")
            .and_then(|url| url.as_str())
            .and_then(|url| url.rsplit('/').next())
            .or_else(|| body.get("QueueName").and_then(|name| name.as_str()))
            .unwrap_or("?")
            .to_owned()
    }

    fn closes(&self) -> bool {
        self.header("connection")
            .is_some_and(|value| value.eq_ignore_ascii_case("close"))
    }
}

/// Reads one message, or `None` when the peer closed before sending one. A request without a
/// `Content-Length` has no body; a response without one is chunked or runs to the end of the
/// connection.
async fn read_message<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    response: bool,
) -> std::io::Result<Option<Message>> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        if reader.read_until(b'\n', &mut head).await? == 0 {
            if head.is_empty() {
                return Ok(None);
            }
            return Err(std::io::Error::other("closed in the middle of a head"));
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            // A blank line before any start line is noise between messages.
            if before == 0 {
                head.clear();
                continue;
            }
            break;
        }
    }
    let mut message = Message {
        head,
        body: Vec::new(),
    };
    let chunked = message
        .header("transfer-encoding")
        .is_some_and(|value| value.to_ascii_lowercase().contains("chunked"));
    if chunked {
        read_chunked(reader, &mut message.body).await?;
    } else if let Some(length) = message.header("content-length") {
        let length: usize = length
            .parse()
            .map_err(|_| std::io::Error::other("a Content-Length that is not a number"))?;
        message.body.resize(length, 0);
        reader.read_exact(&mut message.body).await?;
    } else if response {
        reader.read_to_end(&mut message.body).await?;
    }
    Ok(Some(message))
}

/// Reads a chunked body as it is on the wire, through the last chunk and the trailers.
async fn read_chunked<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    body: &mut Vec<u8>,
) -> std::io::Result<()> {
    loop {
        let before = body.len();
        reader.read_until(b'\n', body).await?;
        let line = String::from_utf8_lossy(&body[before..]).trim().to_owned();
        let size = line.split(';').next().unwrap_or("");
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| std::io::Error::other("a chunk size that is not hexadecimal"))?;
        if size == 0 {
            // Trailers, up to the blank line.
            loop {
                let before = body.len();
                if reader.read_until(b'\n', body).await? == 0
                    || body[before..].trim_ascii().is_empty()
                {
                    return Ok(());
                }
            }
        }
        let start = body.len();
        body.resize(start + size + 2, 0);
        reader.read_exact(&mut body[start..]).await?;
    }
}
