//! Amazon SQS: [`SqsBroker`], the [`SqsQueue`] descriptor, and the SQS [`rules`] every backend
//! honours.
//!
//! A broker holds one [`Transport`]: today the in-process [`Account`], tomorrow aws-sdk-sqs. It
//! resolves queue URLs once (creating queues when asked), and owns one batcher per queue and
//! action, shared by every subscription and publisher of the broker.

#[cfg(feature = "aws")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
pub mod aws;
pub(crate) mod queue;
pub mod rules;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

pub use queue::{ConfigError, ConfigErrors, SqsQueue};

use crate::account::Account;
use crate::app::{AppContext, RunError};
use crate::broker::Broker;
use crate::engine::batch::{self, BatchSettings, Batcher};
use crate::engine::meter::{ApiCalls, CallCounter, Metered};
use crate::engine::transport::{
    QueueAttributes, SendMessage, SentMessage, SharedTransport, Transport, TransportError,
};
use crate::handler::Subscriber;
use crate::publish::{PublishError, Publisher};
use rules::ErrorKind;

/// The SQS broker: subscriptions and publishers over one SQS backend.
///
/// ```
/// use rust_stream::account::Account;
/// use rust_stream::SqsBroker;
///
/// let fresh = SqsBroker::in_process();
/// let account = Account::new();
/// let shared = SqsBroker::with_account(&account); // the test keeps `account` to look inside
/// # let _ = (fresh, shared);
/// ```
#[derive(Clone)]
pub struct SqsBroker {
    core: Arc<BrokerCore>,
}

impl std::fmt::Debug for SqsBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqsBroker")
            .field("linger", &self.core.linger())
            .finish()
    }
}

impl SqsBroker {
    /// A broker over a fresh in-process account.
    pub fn in_process() -> Self {
        Self::with_account(&Account::new())
    }

    /// A broker over Amazon SQS, configured from the environment as the AWS CLI is (region,
    /// credentials, profile, `AWS_ENDPOINT_URL`).
    #[cfg(feature = "aws")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
    pub async fn from_env() -> Self {
        Self::aws().connect().await
    }

    /// A broker over Amazon SQS or a local stand-in, to configure: endpoint, region, profile,
    /// test credentials.
    #[cfg(feature = "aws")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aws")))]
    pub fn aws() -> aws::AwsBrokerBuilder {
        aws::AwsBrokerBuilder::default()
    }

    /// A broker over `account`, which a test may share to send, receive and inspect.
    pub fn with_account(account: &Account) -> Self {
        Self::with_transport(account.clone())
    }

    /// A broker over any [`Transport`].
    pub fn with_transport(transport: impl Transport) -> Self {
        let metered = Metered::new(transport);
        let calls = metered.calls.clone();
        Self {
            core: Arc::new(BrokerCore::new(Arc::new(metered), calls)),
        }
    }

    /// The SQS API calls this broker has made so far, by action.
    pub fn api_calls(&self) -> ApiCalls {
        self.core.calls.snapshot()
    }

    /// How long the first entry of a batched call waits for company (default 5 ms). Applies to
    /// batchers the broker starts from now on; set it before the app runs.
    #[must_use]
    pub fn batch_linger(self, linger: Duration) -> Self {
        self.core
            .linger_nanos
            .store(linger.as_nanos() as u64, Ordering::Relaxed);
        self
    }

    /// A publisher for `queue`, bound to this broker.
    pub fn publisher(&self, queue: impl Into<SqsQueue>) -> Publisher {
        Publisher::bound(queue.into(), self.core.clone())
    }
}

impl Broker for SqsBroker {
    type Subscriber = Subscriber;

    async fn run(self, app: AppContext, subscribers: Vec<Subscriber>) -> Result<(), RunError> {
        tracing::info!(app.name = %app.info().name(), app.version = %app.info().version(), "starting");
        crate::engine::run(self.core, subscribers, app).await
    }
}

/// What a broker shares among its subscriptions and publishers.
pub(crate) struct BrokerCore {
    pub(crate) transport: SharedTransport,
    calls: Arc<CallCounter>,
    linger_nanos: AtomicU64,
    /// Queue URLs by name, resolved once.
    urls: tokio::sync::Mutex<HashMap<String, String>>,
    batchers: Mutex<Batchers>,
}

#[derive(Default)]
struct Batchers {
    send: HashMap<String, Batcher<batch::SendBatch>>,
    delete: HashMap<String, Batcher<batch::DeleteBatch>>,
    visibility: HashMap<String, Batcher<batch::VisibilityBatch>>,
}

/// Calls in flight per batcher where order does not matter.
const PARALLEL_CALLS: usize = 4;

impl BrokerCore {
    fn new(transport: SharedTransport, calls: Arc<CallCounter>) -> Self {
        Self {
            transport,
            calls,
            linger_nanos: AtomicU64::new(5_000_000),
            urls: tokio::sync::Mutex::new(HashMap::new()),
            batchers: Mutex::new(Batchers::default()),
        }
    }

    fn linger(&self) -> Duration {
        Duration::from_nanos(self.linger_nanos.load(Ordering::Relaxed))
    }

    fn settings(&self, in_order: bool) -> BatchSettings {
        BatchSettings {
            linger: self.linger(),
            max_in_flight: if in_order { 1 } else { PARALLEL_CALLS },
        }
    }

    /// The queue's URL, resolved once; a queue declared `create_if_missing` is created (with its
    /// dead-letter queue and redrive policy) when it does not exist.
    pub(crate) async fn resolve(&self, queue: &SqsQueue) -> Result<String, TransportError> {
        let mut urls = self.urls.lock().await;
        if let Some(url) = urls.get(&queue.name) {
            return Ok(url.clone());
        }
        let url = match self.transport.get_queue_url(&queue.name).await {
            Ok(url) => url,
            Err(error)
                if queue.create_if_missing
                    && error.kind() == Some(ErrorKind::QueueDoesNotExist) =>
            {
                let mut attributes = QueueAttributes::new();
                if queue.is_fifo() {
                    attributes.insert("FifoQueue".into(), "true".into());
                    if queue.content_based_dedup {
                        attributes.insert("ContentBasedDeduplication".into(), "true".into());
                    }
                }
                if let Some(timeout) = queue.consumer.visibility_timeout {
                    attributes.insert("VisibilityTimeout".into(), timeout.as_secs().to_string());
                }
                if let (Some(dead_letter), Some(policy)) =
                    (queue.dead_letter_queue(), &queue.dead_letter)
                {
                    let dead_letter_url = match urls.get(&dead_letter.name) {
                        Some(url) => url.clone(),
                        None => self.create_plain(&dead_letter).await?,
                    };
                    urls.insert(dead_letter.name.clone(), dead_letter_url.clone());
                    let arn = self
                        .transport
                        .get_queue_attributes(&dead_letter_url, &["QueueArn"])
                        .await?;
                    let arn = arn.get("QueueArn").cloned().unwrap_or_default();
                    let redrive = serde_json::json!({ "deadLetterTargetArn": arn, "maxReceiveCount": policy.max_receive_count });
                    attributes.insert("RedrivePolicy".into(), redrive.to_string());
                }
                let url = self.transport.create_queue(&queue.name, attributes).await?;
                tracing::info!(messaging.destination.name = %queue.name, "queue created");
                url
            }
            Err(error) => return Err(error),
        };
        urls.insert(queue.name.clone(), url.clone());
        Ok(url)
    }

    /// Creates a queue with only its type set, or finds it.
    async fn create_plain(&self, queue: &SqsQueue) -> Result<String, TransportError> {
        match self.transport.get_queue_url(&queue.name).await {
            Err(error)
                if queue.create_if_missing
                    && error.kind() == Some(ErrorKind::QueueDoesNotExist) =>
            {
                let mut attributes = QueueAttributes::new();
                if queue.is_fifo() {
                    attributes.insert("FifoQueue".into(), "true".into());
                }
                self.transport.create_queue(&queue.name, attributes).await
            }
            found => found,
        }
    }

    /// Sends messages to a queue through its batcher, in order.
    pub(crate) async fn send_many(
        &self,
        queue: &SqsQueue,
        messages: Vec<SendMessage>,
    ) -> Vec<Result<SentMessage, PublishError>> {
        let reject = |error: TransportError| PublishError::Rejected {
            queue: queue.name.clone(),
            error,
        };
        let url = match self.resolve(queue).await {
            Ok(url) => url,
            Err(error) => {
                return messages
                    .iter()
                    .map(|_| Err(reject(error.clone())))
                    .collect()
            }
        };
        let sender = self.sender(&url, queue.is_fifo());
        sender
            .submit(messages)
            .await
            .into_iter()
            .map(|answer| answer.map_err(reject))
            .collect()
    }

    /// Sends one message.
    pub(crate) async fn send(
        &self,
        queue: &SqsQueue,
        message: SendMessage,
    ) -> Result<SentMessage, PublishError> {
        self.send_many(queue, vec![message])
            .await
            .pop()
            .expect("one answer per message")
    }

    fn batchers(&self) -> std::sync::MutexGuard<'_, Batchers> {
        self.batchers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue's batcher for one action, started on first use.
    fn batcher<A: batch::Action>(
        &self,
        url: &str,
        in_order: bool,
        pick: impl FnOnce(&mut Batchers) -> &mut HashMap<String, Batcher<A>>,
    ) -> Batcher<A> {
        let settings = self.settings(in_order);
        let mut batchers = self.batchers();
        pick(&mut batchers)
            .entry(url.to_owned())
            .or_insert_with(|| Batcher::spawn(self.transport.clone(), url.to_owned(), settings))
            .clone()
    }

    fn sender(&self, url: &str, fifo: bool) -> Batcher<batch::SendBatch> {
        // A FIFO queue's sends go out one call at a time, so no group is reordered.
        self.batcher(url, fifo, |batchers| &mut batchers.send)
    }

    pub(crate) fn deleter(&self, url: &str) -> Batcher<batch::DeleteBatch> {
        self.batcher(url, false, |batchers| &mut batchers.delete)
    }

    pub(crate) fn visibility_batcher(&self, url: &str) -> Batcher<batch::VisibilityBatch> {
        self.batcher(url, false, |batchers| &mut batchers.visibility)
    }
}
