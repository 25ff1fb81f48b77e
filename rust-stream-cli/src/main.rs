//! `rust-stream`: queues and dead letters from the command line, over
//! [`rust_stream::operations`] (the command line only wraps that API).
//!
//! It connects as the library does ([`SqsBroker::from_env`]): region, credentials and profile
//! from the environment as the AWS CLI reads them, `AWS_ENDPOINT_URL` for LocalStack. It prints
//! human tables, or JSON with `--json`; never a credential. A refusal or failure is one line on
//! standard error naming the queue, and exit status 1 (2 for a command line clap refuses).
//! `asyncapi` connects to nothing: it runs a service binary with `--asyncapi` ([`asyncapi`]) and
//! names the binary in its refusals.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

mod asyncapi;
mod output;
mod serve;
mod suggest;

use output::{
    audit_line, message_detail, messages_table, queues_table, redrive_table, to_json, Progress,
};
use suggest::nearest;

use clap::{Parser, Subcommand};
use rust_stream::operations::{
    MessageFilter, OperationError, Operations, Peek, QueueSpec, Redrive,
};
use rust_stream::transport::{ErrorKind, SendMessage};
use rust_stream::SqsBroker;

/// Queues and dead letters on Amazon SQS (or LocalStack, with AWS_ENDPOINT_URL).
#[derive(Debug, Parser)]
#[command(name = "rust-stream", version)]
struct Cli {
    /// Prints JSON instead of tables, for scripts.
    #[arg(long, global = true)]
    json: bool,
    /// Logs what it does (each message redriven, ...) on standard error.
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Lists queues with their counts and dead-letter relations.
    Queues {
        /// Only queues whose names start with this.
        #[arg(long, default_value = "")]
        prefix: String,
    },
    /// Creates a queue (or finds an identical one).
    Create {
        /// The queue's name (`.fifo` at the end for a FIFO queue).
        queue: String,
        /// A FIFO queue.
        #[arg(long)]
        fifo: bool,
        /// FIFO deduplication by content when a send gives no deduplication id.
        #[arg(long)]
        content_dedup: bool,
        /// FIFO high throughput: the throughput quota per message group, deduplication within it.
        #[arg(long)]
        high_throughput: bool,
        /// Its dead-letter queue (which must exist), for SQS's redrive policy.
        #[arg(long, value_name = "NAME", requires = "max_receive_count")]
        dead_letter: Option<String>,
        /// Receives after which SQS moves a message to the dead-letter queue.
        #[arg(long, value_name = "N", requires = "dead_letter")]
        max_receive_count: Option<u32>,
    },
    /// Sends one message.
    Send {
        /// The queue.
        queue: String,
        /// The message body.
        #[arg(long, required_unless_present = "stdin", conflicts_with = "stdin")]
        body: Option<String>,
        /// Reads the messages from standard input, one body a line (JSON lines), and sends them
        /// in `SendMessageBatch` calls of 10; `--group` and `--dedup` are then not for each
        /// message: a FIFO queue's messages take `--group`, and each gets a fresh deduplication
        /// id unless the queue deduplicates by content.
        #[arg(long, conflicts_with = "dedup")]
        stdin: bool,
        /// The message group (FIFO).
        #[arg(long)]
        group: Option<String>,
        /// The deduplication id (FIFO; without it, a queue that does not deduplicate by content
        /// gets a fresh one, as the library's publisher gives).
        #[arg(long)]
        dedup: Option<String>,
    },
    /// Shows messages without taking them (on SQS: received and made visible again at once).
    Peek {
        /// The queue.
        queue: String,
        /// How many at most.
        #[arg(long, default_value_t = 10)]
        amount: usize,
        /// How many matching ones to skip first.
        #[arg(long, default_value_t = 0)]
        offset: usize,
        #[command(flatten)]
        choose: Choose,
        /// Peeks a FIFO queue or one with a redrive policy on SQS anyway (it raises receive
        /// counts and holds FIFO groups for the moment).
        #[arg(long)]
        force: bool,
    },
    /// Shows one message with its attributes.
    Show {
        /// The queue.
        queue: String,
        /// The message id.
        message_id: String,
        /// As for `peek`.
        #[arg(long)]
        force: bool,
    },
    /// Moves a dead-letter queue's messages back to their sources (or to `--to`).
    Redrive {
        /// The dead-letter queue.
        queue: String,
        /// Sends every message here instead of its source.
        #[arg(long, value_name = "QUEUE")]
        to: Option<String>,
        /// Messages a second at most.
        #[arg(long, value_name = "PER_SECOND")]
        rate: Option<f64>,
        /// Says what would move where; sends and deletes nothing.
        #[arg(long)]
        dry_run: bool,
        /// Moves at most this many.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Only the messages these choose (the others stay; on a FIFO queue a group moves up to
        /// its first message not chosen).
        #[command(flatten)]
        choose: Choose,
    },
    /// Deletes the named (or chosen) messages of a dead-letter queue, each with an audit line.
    Delete {
        /// The queue.
        queue: String,
        /// Says what would be deleted; deletes nothing.
        #[arg(long)]
        dry_run: bool,
        /// The messages to delete (at least one condition: to delete all, purge).
        #[command(flatten)]
        choose: Choose,
    },
    /// Deletes every message of a queue.
    Purge {
        /// The queue.
        queue: String,
        /// The queue's name again: a purge cannot be undone.
        #[arg(long, value_name = "QUEUE", default_value = "")]
        yes_i_mean: String,
    },
    /// Serves the HTTP queue API (push, pop, ack, ping, peek, size under /queue/NAME/) until
    /// interrupted. Reads API_TOKENS (bearer tokens, comma separated) or API_TOKENS_FILE (one a
    /// line): without either it listens on 127.0.0.1 only; BIND (the address, 0.0.0.0 with a
    /// token); QUEUE_PREFIX and QUEUES (the queues served); PORT (8080), PORT_METRICS (8088,
    /// /metrics), ALLOWED_ORIGINS (CORS, comma separated; other origins refused), PEEK_ON_SQS
    /// (true to peek on SQS), HISTORY_POSTGRES_URL (the hashCode history in a PostgreSQL
    /// replicas share; else in memory), ID_KEY (32+ bytes shared by the replicas: popped ids
    /// signed so any replica acks and pings them) and the bounds MAX_BODY_BYTES, MAX_PUSH_ITEMS,
    /// MAX_POP_AMOUNT, MAX_HASH_DURATION_SECONDS, MAX_CONCURRENT_REQUESTS,
    /// REQUEST_DEADLINE_SECONDS; SQS as the library's from_env_or_in_process chooses it
    /// (AWS_ENDPOINT_URL, AWS_REGION, ...; else in process).
    Serve {
        /// Serves without a token on an address other than loopback (BIND): anyone who reaches
        /// the port may push, pop and delete every queue the credentials reach.
        #[arg(long)]
        insecure_no_auth: bool,
    },
    /// Prints a service binary's AsyncAPI 3 document: runs it with `--asyncapi` (and ARGS),
    /// checks that it printed one, and prints it (compact JSON with `--json`) or writes it to
    /// `--output`. Connects to nothing; the binary inherits the environment.
    Asyncapi {
        /// The service binary (e.g. target/release/examples/fault_consumer).
        binary: PathBuf,
        /// Arguments for the binary, after `--asyncapi`.
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<String>,
        /// Writes the document to this file instead of standard output.
        #[arg(long, value_name = "PATH")]
        output: Option<PathBuf>,
        /// Seconds the binary may take before it is killed and refused.
        #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
        timeout: f64,
    },
}

/// Which messages a command takes: every condition given must hold.
#[derive(Debug, clap::Args)]
struct Choose {
    /// Only the message of this id (repeat for more).
    #[arg(long = "id", value_name = "MESSAGE_ID")]
    ids: Vec<String>,
    /// Only messages of this group.
    #[arg(long)]
    group: Option<String>,
    /// Only messages whose body contains this.
    #[arg(long)]
    contains: Option<String>,
    /// Only dead-letter copies from this queue.
    #[arg(long)]
    source: Option<String>,
    /// Only dead-letter copies whose reason contains this.
    #[arg(long)]
    reason: Option<String>,
    /// Only messages whose JSON body has this value at this pointer: `/currency=EUR`,
    /// `/amount=-1` (the value as JSON, else as a string; repeat for more).
    #[arg(long = "pointer", value_name = "POINTER=VALUE")]
    json_pointers: Vec<String>,
    /// Only messages sent to the queue before this time, in milliseconds since the epoch (as
    /// `show` prints SentTimestamp).
    #[arg(long, value_name = "EPOCH_MS")]
    sent_before: Option<u64>,
    /// Only messages sent to the queue at or after this time (milliseconds since the epoch).
    #[arg(long, value_name = "EPOCH_MS")]
    sent_after: Option<u64>,
}

impl Choose {
    /// The library's filter for these conditions.
    fn filter(self) -> Result<MessageFilter, Failure> {
        let mut filter = MessageFilter::new();
        if !self.ids.is_empty() {
            filter = filter.message_ids(self.ids);
        }
        if let Some(group) = self.group {
            filter = filter.group_id(group);
        }
        if let Some(text) = self.contains {
            filter = filter.body_contains(text);
        }
        if let Some(source) = self.source {
            filter = filter.source_queue(source);
        }
        if let Some(text) = self.reason {
            filter = filter.reason_contains(text);
        }
        for pair in self.json_pointers {
            let Some((pointer, value)) = pair.split_once('=').filter(|(p, _)| p.starts_with('/'))
            else {
                return Err(Failure::Usage(format!(
                    "--pointer {pair}: give a JSON pointer and a value, as `/currency=EUR`"
                )));
            };
            let value = serde_json::from_str(value)
                .unwrap_or_else(|_| serde_json::Value::String(value.to_owned()));
            filter = filter.json_pointer(pointer, value);
        }
        let at = |ms: u64| std::time::UNIX_EPOCH + Duration::from_millis(ms);
        if let Some(ms) = self.sent_before {
            filter = filter.sent_before(at(ms));
        }
        if let Some(ms) = self.sent_after {
            filter = filter.sent_after(at(ms));
        }
        Ok(filter)
    }
}

/// Why a command failed: printed on standard error.
#[derive(Debug)]
enum Failure {
    Connect(rust_stream::ConnectError),
    Operation(OperationError),
    /// `serve`'s settings or sockets.
    Serve(String),
    /// `asyncapi`: the binary, what it printed, or the output file.
    Asyncapi(String),
    /// An argument the command cannot use.
    Usage(String),
    /// A queue that does not exist, and the names nearest to it.
    NoSuchQueue {
        queue: String,
        suggestions: Vec<String>,
    },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Connect(error) => write!(f, "cannot connect to SQS: {error}"),
            Self::Operation(error) => error.fmt(f),
            Self::Serve(why) | Self::Asyncapi(why) | Self::Usage(why) => f.write_str(why),
            Self::NoSuchQueue { queue, suggestions } => {
                write!(f, "queue `{queue}` does not exist")?;
                match suggestions.as_slice() {
                    [] => write!(f, " (`rust-stream queues` lists those that do)"),
                    [one] => write!(f, "; did you mean `{one}`?"),
                    many => write!(f, "; did you mean one of `{}`?", many.join("`, `")),
                }
            }
        }
    }
}

impl From<OperationError> for Failure {
    fn from(error: OperationError) -> Self {
        Self::Operation(error)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Errors only by default: what a command did or left is in its output, not in log lines.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_max_level(
            if cli.verbose || matches!(cli.command, Command::Serve { .. }) {
                tracing::Level::INFO
            } else {
                tracing::Level::ERROR
            },
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the command; what it prints.
async fn run(cli: Cli) -> Result<String, Failure> {
    if let Command::Serve { insecure_no_auth } = cli.command {
        return serve::run(|name| std::env::var(name).ok(), insecure_no_auth).await;
    }
    if let Command::Asyncapi {
        binary,
        args,
        output,
        timeout,
    } = cli.command
    {
        let timeout = Duration::try_from_secs_f64(timeout).map_err(|_| {
            Failure::Asyncapi(format!(
                "--timeout {timeout}: give a number of seconds, at least 0"
            ))
        })?;
        return asyncapi::run(&asyncapi::Request {
            binary,
            args,
            output,
            timeout,
            json: cli.json,
        });
    }
    let broker = SqsBroker::from_env().await.map_err(Failure::Connect)?;
    let ops = broker.operations();
    let json = cli.json;
    let outcome: Result<String, Failure> = async {
        Ok(match cli.command {
            Command::Serve { .. } => unreachable!("served above"),
            Command::Asyncapi { .. } => unreachable!("printed above"),
            Command::Queues { prefix } => {
                let queues = ops.queues(&prefix).await?;
                if json {
                    to_json(&queues)
                } else {
                    queues_table(&queues)
                }
            }
            Command::Create {
                queue,
                fifo,
                content_dedup,
                high_throughput,
                dead_letter,
                max_receive_count,
            } => {
                let mut spec = QueueSpec::new();
                if fifo {
                    spec = spec.fifo();
                }
                if content_dedup {
                    spec = spec.content_based_dedup();
                }
                if high_throughput {
                    spec = spec.high_throughput();
                }
                if let (Some(dead_letter), Some(count)) = (dead_letter, max_receive_count) {
                    spec = spec.dead_letter(dead_letter, count);
                }
                let url = ops.create_queue(&queue, &spec).await?;
                if json {
                    to_json(&serde_json::json!({ "queue": queue, "url": url }))
                } else {
                    format!("created {queue}: {url}\n")
                }
            }
            Command::Send {
                queue,
                stdin: true,
                group,
                ..
            } => send_lines(&ops, &queue, group, json).await?,
            Command::Send {
                queue,
                body,
                group,
                dedup,
                ..
            } => {
                let body = body.expect("clap requires --body without --stdin");
                let mut message = SendMessage::new(body);
                message.group_id = group;
                message.dedup_id = dedup;
                let sent = ops.send(&queue, message).await?;
                if json {
                    to_json(&serde_json::json!({
                        "queue": queue,
                        "message_id": sent.message_id,
                        "sequence_number": sent.sequence_number,
                    }))
                } else {
                    match &sent.sequence_number {
                        Some(sequence) => format!(
                            "sent to {queue}: {} (sequence {sequence})\n",
                            sent.message_id
                        ),
                        None => format!("sent to {queue}: {}\n", sent.message_id),
                    }
                }
            }
            Command::Peek {
                queue,
                amount,
                offset,
                choose,
                force,
            } => {
                let filter = choose.filter()?;
                let mut peek = Peek::new().filter(filter).amount(amount).offset(offset);
                if force {
                    peek = peek.force();
                }
                let messages = ops.peek(&queue, &peek).await?;
                if json {
                    to_json(&messages)
                } else {
                    messages_table(&messages)
                }
            }
            Command::Show {
                queue,
                message_id,
                force,
            } => {
                let message = ops.show(&queue, &message_id, force).await?;
                if json {
                    to_json(&message)
                } else {
                    message_detail(&message)
                }
            }
            Command::Redrive {
                queue,
                to,
                rate,
                dry_run,
                limit,
                choose,
            } => {
                let mut redrive = Redrive::from(&queue).filter(choose.filter()?);
                if let Some(to) = to {
                    redrive = redrive.to(to);
                }
                if let Some(rate) = rate {
                    redrive = redrive.rate(rate);
                }
                if dry_run {
                    redrive = redrive.dry_run();
                }
                if let Some(limit) = limit {
                    redrive = redrive.limit(limit);
                }
                let mut progress = Progress::new();
                let report = ops
                    .redrive_with(&redrive, |record| progress.moved(record))
                    .await;
                progress.end();
                let report = report?;
                if json {
                    to_json(&report)
                } else {
                    redrive_table(&report)
                }
            }
            Command::Delete {
                queue,
                dry_run,
                choose,
            } => {
                let ids = choose.ids.clone();
                // An audit line each on standard error as it goes: a run stopped part way has said
                // what it deleted.
                let report = ops
                    .delete_matching(&queue, choose.filter()?, dry_run, |record| {
                        eprintln!("{}", audit_line(record));
                    })
                    .await?;
                let missing: Vec<&String> = ids
                    .iter()
                    .filter(|id| !report.moved.iter().any(|r| r.message_id == **id))
                    .collect();
                if json {
                    to_json(&serde_json::json!({ "report": report, "not_found": missing }))
                } else {
                    let mut out = String::new();
                    for id in missing {
                        out.push_str(&format!(
                        "not found {id}: not in {queue} (or behind a message of its FIFO group \
                         not chosen)\n"
                    ));
                    }
                    for left in &report.left {
                        out.push_str(&format!("left {}: {}\n", left.message_id, left.reason));
                    }
                    out.push_str(&format!("{report}\n"));
                    out
                }
            }
            Command::Purge { queue, yes_i_mean } => {
                ops.purge(&queue, &yes_i_mean).await?;
                if json {
                    to_json(&serde_json::json!({ "queue": queue, "purged": true }))
                } else {
                    format!("purged {queue}\n")
                }
            }
        })
    }
    .await;
    match outcome {
        Err(Failure::Operation(OperationError::Queue { queue, source }))
            if source.kind() == Some(ErrorKind::QueueDoesNotExist) =>
        {
            // An operator's typo: the queues that exist, nearest first, say what was meant.
            let known = ops.queues("").await.unwrap_or_default();
            Err(Failure::NoSuchQueue {
                suggestions: nearest(&queue, known.iter().map(|info| info.name.as_str())),
                queue,
            })
        }
        outcome => outcome,
    }
}

/// Sends the lines of standard input to `queue`, one message a non-empty line, in calls of 10
/// (the library's batcher), a FIFO queue's in `group`.
async fn send_lines(
    ops: &Operations,
    queue: &str,
    group: Option<String>,
    json: bool,
) -> Result<String, Failure> {
    let mut input = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut input)
        .map_err(|error| Failure::Usage(format!("--stdin: cannot read standard input: {error}")))?;
    let messages: Vec<SendMessage> = input
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let mut message = SendMessage::new(line.to_owned());
            message.group_id.clone_from(&group);
            message
        })
        .collect();
    if messages.is_empty() {
        return Err(Failure::Usage(
            "--stdin: standard input has no line to send (one message body a line)".to_owned(),
        ));
    }
    let total = messages.len();
    let answers = ops.send_many(queue, messages).await?;
    let mut ids = Vec::with_capacity(total);
    let mut failed = Vec::new();
    for (line, answer) in answers.into_iter().enumerate() {
        match answer {
            Ok(sent) => ids.push(sent.message_id),
            Err(error) => failed.push((line + 1, error.to_string())),
        }
    }
    let out = if json {
        to_json(&serde_json::json!({
            "queue": queue,
            "sent": ids,
            "failed": failed
                .iter()
                .map(|(line, error)| serde_json::json!({ "line": line, "error": error }))
                .collect::<Vec<_>>(),
        }))
    } else {
        let mut out = format!("sent {} of {total} to {queue}\n", ids.len());
        for (line, error) in &failed {
            out.push_str(&format!("line {line} not sent: {error}\n"));
        }
        out
    };
    if failed.is_empty() {
        Ok(out)
    } else {
        // What was sent is said on standard output; the failure makes the exit code say so.
        print!("{out}");
        Err(Failure::Usage(format!(
            "{} of {total} lines were not sent (listed above): send those again",
            failed.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Clap's own checks of the command line (unique option names, ...), which it makes only
    /// when a command is first parsed.
    #[test]
    fn the_command_line_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
