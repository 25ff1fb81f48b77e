//! [`AwsTransport`]: the [`Transport`] over aws-sdk-sqs, and [`AwsBrokerBuilder`], how a broker
//! is configured for Amazon SQS or a local stand-in. This is the only file that names the SDK.
//!
//! Connecting checks, before any SQS call, that a region is configured and that the credentials
//! provider answers with credentials, and fails with a [`ConnectError`] saying what to set: without
//! the check a missing region or missing credentials would show only at the first SQS call, after
//! the SDK's warnings about the instance metadata service, with a message naming neither.
//!
//! Every request is checked against the SQS rules before it is sent, with the same error kinds as
//! the in-process account; batch entries that break a rule are answered as failed entries and the
//! rest go out. The SDK retries throttling, 5xx and network errors with jittered backoff; each
//! attempt may take longer than a 20 s long poll, and no longer than its attempt timeout (30 s
//! unless set), so a connection that stalls is given up and tried again. Queue URLs that a local stack returns with
//! another host are rebased onto the configured endpoint.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_sqs::config::ProvideCredentials;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry,
    MessageAttributeValue as SdkAttribute, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};

use crate::model::rules::{self, ErrorKind};
use crate::transport::{
    BatchFailure, BatchResult, ChangeVisibilityEntry, DeleteEntry, MessageAttributeValue,
    MessageAttributes, QueueAttributes, ReceiveMessage, ReceivedMessage, SendBatchEntry,
    SentMessage, Transport, TransportError,
};

/// How long one SDK attempt may take unless set: longer than the 20 s long poll, so a long poll is
/// never cut, and short enough that a stalled connection is given up within half a minute.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts per SDK call before its error reaches the engine (which backs off again).
const SDK_ATTEMPTS: u32 = 4;
/// How long connecting waits for the credentials provider: enough for SSO, STS or a container's
/// credentials endpoint, while a provider that never answers (a credential process waiting for
/// input, an instance metadata service behind a firewall that drops packets) fails the start
/// within seconds instead of holding it.
const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(5);
/// How long connecting waits for a region: of its providers only the last, the instance metadata
/// service, goes to the network, where it may never be answered.
const REGION_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a broker over SQS could not be made: what its configuration lacks, found before any SQS
/// call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// No region was given to the builder, and none is in the environment or the profile.
    #[error(
        "no AWS region is configured: set AWS_REGION (or AWS_DEFAULT_REGION, or a region in the \
         profile), or give one to `SqsBroker::aws().region(..)`"
    )]
    MissingRegion,
    /// The credentials provider chain (environment, profile, web identity, container, instance
    /// metadata) found no credentials, failed, or did not answer in time.
    #[error(
        "no AWS credentials could be loaded: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
         AWS_PROFILE naming a profile with credentials (a local stand-in takes any, as \
         `SqsBroker::aws().test_credentials()` gives); the credentials provider answered: {reason}"
    )]
    MissingCredentials {
        /// What the credentials provider answered.
        reason: String,
    },
}

/// Configures a broker for Amazon SQS, or for a local stand-in such as LocalStack.
///
/// ```no_run
/// use rust_stream::SqsBroker;
///
/// # async fn connect() -> Result<(), rust_stream::sqs::aws::ConnectError> {
/// // Region, credentials and profile from the environment, as the AWS CLI reads them.
/// let production = SqsBroker::from_env().await?;
/// // A local stack.
/// let local = SqsBroker::aws()
///     .endpoint("http://127.0.0.1:4566")
///     .region("us-east-1")
///     .test_credentials()
///     .connect()
///     .await?;
/// # let _ = (production, local);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Default)]
#[must_use = "call `.connect().await`"]
pub struct AwsBrokerBuilder {
    endpoint: Option<String>,
    region: Option<String>,
    profile: Option<String>,
    test_credentials: bool,
    attempt_timeout: Option<Duration>,
}

impl AwsBrokerBuilder {
    /// Sends requests to this endpoint (a local stack) instead of the region's (also read from
    /// `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_SQS` when not set here).
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.endpoint = Some(url.into());
        self
    }

    /// The region (default: from the environment and profile).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// The named profile of `~/.aws/config` to read.
    pub fn profile(mut self, profile: impl Into<String>) -> Self {
        self.profile = Some(profile.into());
        self
    }

    /// Fixed dummy credentials (`test`/`test`), as local stacks accept; never for AWS itself.
    pub fn test_credentials(mut self) -> Self {
        self.test_credentials = true;
        self
    }

    /// How long one attempt of an SQS call may take before it is abandoned and retried (default
    /// 30 s): a connection that stalls (a dead peer, a firewall that drops packets) holds a call
    /// no longer than this. Keep it longer than the longest long poll a subscription asks for
    /// (its `wait`, at most 20 s): an app with a subscription whose wait is not shorter is refused
    /// at start ([`ConfigError::WaitPastAttemptTimeout`](crate::ConfigError::WaitPastAttemptTimeout)),
    /// since every long poll would be cut short and retried.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = Some(timeout);
        self
    }

    /// Loads and checks the configuration as [`connect`](Self::connect) does, and makes the bare
    /// transport, for calls outside a broker (tests, administration).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn transport(self) -> Result<AwsTransport, ConnectError> {
        AwsTransport::load(self).await
    }
}

// Debug output goes to logs and panic messages: it shows the endpoint without the user info of
// its URL (a password or token), and nothing of the SDK client, whose configuration holds the
// credentials provider (the SDK's own `Debug` of credentials shows the access key id).
impl std::fmt::Debug for AwsBrokerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsBrokerBuilder")
            .field("endpoint", &self.endpoint.as_deref().map(shown_endpoint))
            .field("region", &self.region)
            .field("profile", &self.profile)
            .field("test_credentials", &self.test_credentials)
            .field("attempt_timeout", &self.attempt_timeout)
            .finish()
    }
}

/// The [`Transport`] over aws-sdk-sqs.
#[derive(Clone)]
pub struct AwsTransport {
    client: aws_sdk_sqs::Client,
    /// The configured endpoint, onto which queue URLs are rebased.
    endpoint: Option<String>,
}

impl std::fmt::Debug for AwsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let config = self.client.config();
        f.debug_struct("AwsTransport")
            .field("endpoint", &self.endpoint.as_deref().map(shown_endpoint))
            .field("region", &config.region().map(|region| region.as_ref()))
            .finish_non_exhaustive()
    }
}

/// An endpoint URL as logs and `Debug` may show it: its user info, if any (a user and password,
/// or a token), is replaced by `***`.
pub(crate) fn shown_endpoint(url: &str) -> String {
    let Some(after_scheme) = url.find("://").map(|at| at + 3) else {
        return url.to_owned();
    };
    let authority_end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| after_scheme + at);
    let authority = &url[after_scheme..authority_end];
    match authority.rsplit_once('@') {
        Some((_user_info, host)) => format!(
            "{}***@{host}{}",
            &url[..after_scheme],
            &url[authority_end..]
        ),
        None => url.to_owned(),
    }
}

impl AwsTransport {
    async fn load(settings: AwsBrokerBuilder) -> Result<Self, ConnectError> {
        let region = match settings.region {
            Some(region) => Some(aws_config::Region::new(region)),
            None => configured_region(settings.profile.as_deref()).await,
        };
        // An empty AWS_REGION is read as a region named "", which no endpoint serves.
        let region = region
            .filter(|region| !region.as_ref().trim().is_empty())
            .ok_or(ConnectError::MissingRegion)?;
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .operation_attempt_timeout(settings.attempt_timeout.unwrap_or(ATTEMPT_TIMEOUT))
                    .build(),
            )
            .retry_config(
                aws_config::retry::RetryConfig::standard().with_max_attempts(SDK_ATTEMPTS),
            );
        if let Some(endpoint) = &settings.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        loader = loader.region(region);
        if let Some(profile) = settings.profile {
            loader = loader.profile_name(profile);
        }
        if settings.test_credentials {
            loader = loader.credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "test",
                "test",
                None,
                None,
                "rust-stream-test",
            ));
        }
        let config = loader.load().await;
        check_credentials(&config).await?;
        let endpoint = settings
            .endpoint
            .or_else(|| config.endpoint_url().map(str::to_owned));
        tracing::debug!(
            sqs.region = config.region().map_or("", |region| region.as_ref()),
            sqs.endpoint = %endpoint.as_deref().map_or("default".to_owned(), shown_endpoint),
            "AWS configuration loaded"
        );
        Ok(Self {
            client: aws_sdk_sqs::Client::new(&config),
            endpoint,
        })
    }

    /// A transport over an SDK client you configured yourself; `endpoint` is the one it was given,
    /// if any, onto which queue URLs are rebased.
    pub fn from_client(client: aws_sdk_sqs::Client, endpoint: Option<String>) -> Self {
        Self { client, endpoint }
    }

    /// A queue URL with its scheme and host replaced by the configured endpoint's, so a local stack
    /// that names itself by another host (`localhost.localstack.cloud`) is still reached.
    fn rebase(&self, url: String) -> String {
        let Some(endpoint) = &self.endpoint else {
            return url;
        };
        let Some(after_scheme) = url.find("://").map(|at| at + 3) else {
            return url;
        };
        let path = url[after_scheme..]
            .find('/')
            .map_or("", |at| &url[after_scheme + at..]);
        format!("{}{}", endpoint.trim_end_matches('/'), path)
    }
}

/// The region as the SDK resolves it (environment, then profile, then instance metadata), or
/// `None` when it finds none in time.
async fn configured_region(profile: Option<&str>) -> Option<aws_config::Region> {
    let mut chain = aws_config::default_provider::region::DefaultRegionChain::builder();
    if let Some(profile) = profile {
        chain = chain.profile_name(profile);
    }
    let chain = chain.build();
    tokio::time::timeout(REGION_TIMEOUT, chain.region())
        .await
        .ok()
        .flatten()
}

/// Asks the configured credentials provider once, so that missing credentials fail the connect,
/// not the first call after the SDK's retries.
async fn check_credentials(config: &aws_config::SdkConfig) -> Result<(), ConnectError> {
    let Some(provider) = config.credentials_provider() else {
        return Err(ConnectError::MissingCredentials {
            reason: "no credentials provider is configured".to_owned(),
        });
    };
    match tokio::time::timeout(CREDENTIALS_TIMEOUT, provider.provide_credentials()).await {
        Ok(Ok(_credentials)) => Ok(()),
        Ok(Err(error)) => Err(ConnectError::MissingCredentials {
            reason: describe(&error),
        }),
        Err(_elapsed) => Err(ConnectError::MissingCredentials {
            reason: format!(
                "no answer within {CREDENTIALS_TIMEOUT:?}; outside EC2 the last provider, the \
                 instance metadata service, may be unreachable: AWS_EC2_METADATA_DISABLED=true \
                 skips it"
            ),
        }),
    }
}

/// An SDK error as a [`TransportError`]: service errors by their SQS kind, the rest retryable.
fn error<E: ProvideErrorMetadata + std::error::Error + 'static, R: std::fmt::Debug>(
    error: SdkError<E, R>,
) -> TransportError {
    match &error {
        SdkError::ServiceError(_) => {
            let code = error.code().unwrap_or("Unknown").to_owned();
            let message = error.message().unwrap_or("").to_owned();
            match ErrorKind::from_code(&code) {
                Some(kind) => TransportError::Service { kind, message },
                None => TransportError::Other { code, message },
            }
        }
        SdkError::ConstructionFailure(_) => TransportError::Other {
            code: "ConstructionFailure".to_owned(),
            message: describe(&error),
        },
        _ => TransportError::Unavailable {
            message: describe(&error),
        },
    }
}

/// The error and its causes on one line (the SDK's top-level message alone says little).
fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// An SDK request that could not be built: a required field the rules let through.
fn unbuildable(error: aws_sdk_sqs::error::BuildError) -> TransportError {
    TransportError::service(ErrorKind::InvalidParameterValue, error.to_string())
}

fn missing(what: &str) -> TransportError {
    TransportError::Unavailable {
        message: format!("SQS answered without {what}"),
    }
}

fn to_sdk_attribute(value: &MessageAttributeValue) -> Result<SdkAttribute, TransportError> {
    SdkAttribute::builder()
        .data_type(&value.data_type)
        .set_string_value(value.string_value.clone())
        .set_binary_value(value.binary_value.clone().map(Blob::new))
        .build()
        .map_err(unbuildable)
}

fn from_sdk_attributes(attributes: Option<&HashMap<String, SdkAttribute>>) -> MessageAttributes {
    attributes
        .into_iter()
        .flatten()
        .map(|(name, value)| {
            let value = MessageAttributeValue {
                data_type: value.data_type().to_owned(),
                string_value: value.string_value().map(str::to_owned),
                binary_value: value.binary_value().map(|blob| blob.as_ref().to_vec()),
            };
            (name.clone(), value)
        })
        .collect()
}

fn failures(failed: &[aws_sdk_sqs::types::BatchResultErrorEntry]) -> Vec<BatchFailure> {
    failed
        .iter()
        .map(|entry| {
            let known = ErrorKind::from_code(entry.code());
            BatchFailure {
                id: entry.id().to_owned(),
                kind: known.unwrap_or(ErrorKind::InternalError),
                // A code that names the request's fault is never retried, whatever the entry's
                // flag says: LocalStack flags an expired receipt handle as the service's fault,
                // and retrying that delete for seconds would hold its FIFO group for nothing.
                sender_fault: entry.sender_fault() || known.is_some_and(ErrorKind::sender_fault),
                message: format!("{}: {}", entry.code(), entry.message().unwrap_or_default()),
            }
        })
        .collect()
}

/// Checks and converts each batch entry: those that break a rule are answered as failed entries
/// (as SQS would answer them) and only the rest go to the network.
fn split_checked<E, S, T>(
    entries: Vec<E>,
    id: impl Fn(&E) -> &String,
    convert: impl Fn(&E) -> Result<S, TransportError>,
) -> (Vec<S>, BatchResult<T>) {
    let mut result = BatchResult::default();
    let mut request = Vec::new();
    for entry in &entries {
        match convert(entry) {
            Ok(converted) => request.push(converted),
            Err(error) => result
                .failed
                .push(error.into_batch_failure(id(entry).clone())),
        }
    }
    (request, result)
}

fn is_fifo_url(url: &str) -> bool {
    url.ends_with(".fifo")
}

impl Transport for AwsTransport {
    fn attempt_timeout(&self) -> Option<Duration> {
        self.client
            .config()
            .timeout_config()
            .and_then(|timeouts| timeouts.operation_attempt_timeout())
    }

    async fn get_queue_url(&self, name: &str) -> Result<String, TransportError> {
        rules::check_queue_name(name)?;
        let output = self
            .client
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| match error(e) {
                // Name the queue: the service's own message does not.
                TransportError::Service {
                    kind: ErrorKind::QueueDoesNotExist,
                    ..
                } => TransportError::service(
                    ErrorKind::QueueDoesNotExist,
                    format!("queue `{name}` does not exist; create it first"),
                ),
                other => other,
            })?;
        Ok(self.rebase(
            output
                .queue_url()
                .ok_or_else(|| missing("a queue URL"))?
                .to_owned(),
        ))
    }

    async fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> Result<String, TransportError> {
        rules::check_queue_name(name)?;
        for (attribute, value) in &attributes {
            rules::parse_queue_attribute(attribute, value)?;
        }
        let attributes: HashMap<QueueAttributeName, String> = attributes
            .into_iter()
            .map(|(name, value)| (QueueAttributeName::from(name.as_str()), value))
            .collect();
        let output = self
            .client
            .create_queue()
            .queue_name(name)
            .set_attributes(Some(attributes))
            .send()
            .await
            .map_err(error)?;
        Ok(self.rebase(
            output
                .queue_url()
                .ok_or_else(|| missing("a queue URL"))?
                .to_owned(),
        ))
    }

    async fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> Result<QueueAttributes, TransportError> {
        let output = self
            .client
            .get_queue_attributes()
            .queue_url(queue_url)
            .set_attribute_names(Some(
                names
                    .iter()
                    .map(|name| QueueAttributeName::from(*name))
                    .collect(),
            ))
            .send()
            .await
            .map_err(error)?;
        Ok(output
            .attributes()
            .into_iter()
            .flatten()
            .map(|(name, value)| (name.as_str().to_owned(), value.clone()))
            .collect())
    }

    async fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> Result<BatchResult<SentMessage>, TransportError> {
        rules::check_send_batch(&entries)?;
        let target = rules::SendTarget {
            queue: queue_url.rsplit('/').next().unwrap_or(queue_url),
            fifo: is_fifo_url(queue_url),
            // Whether the queue deduplicates by content is the service's to say.
            content_based_dedup: true,
            maximum_message_size: rules::MAX_MESSAGE_SIZE,
        };
        let (request, mut result) = split_checked(
            entries,
            |entry| &entry.id,
            |entry| {
                rules::check_send(&entry.message, target)?;
                let attributes = entry
                    .message
                    .message_attributes
                    .iter()
                    .map(|(name, value)| Ok((name.clone(), to_sdk_attribute(value)?)))
                    .collect::<Result<HashMap<_, _>, TransportError>>()?;
                SendMessageBatchRequestEntry::builder()
                    .id(&entry.id)
                    .message_body(&entry.message.body)
                    .set_delay_seconds(entry.message.delay_seconds)
                    .set_message_group_id(entry.message.group_id.clone())
                    .set_message_deduplication_id(entry.message.dedup_id.clone())
                    .set_message_attributes((!attributes.is_empty()).then_some(attributes))
                    .build()
                    .map_err(unbuildable)
            },
        );
        if request.is_empty() {
            return Ok(result);
        }
        let output = self
            .client
            .send_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(request))
            .send()
            .await
            .map_err(error)?;
        for entry in output.successful() {
            result.successful.push((
                entry.id().to_owned(),
                SentMessage {
                    message_id: entry.message_id().to_owned(),
                    sequence_number: entry.sequence_number().map(str::to_owned),
                    duplicate: false,
                },
            ));
        }
        result.failed.extend(failures(output.failed()));
        Ok(result)
    }

    async fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> Result<Vec<ReceivedMessage>, TransportError> {
        rules::check_receive(
            request.max_number_of_messages,
            request.wait_time_seconds,
            request.visibility_timeout,
            request.receive_request_attempt_id.as_deref(),
        )?;
        rules::check_system_attribute_names(&request.system_attribute_names)?;
        let output = self
            .client
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(request.max_number_of_messages)
            .set_wait_time_seconds(request.wait_time_seconds)
            .set_visibility_timeout(request.visibility_timeout)
            .set_message_system_attribute_names(Some(
                request
                    .system_attribute_names
                    .iter()
                    .map(|name| MessageSystemAttributeName::from(name.as_ref()))
                    .collect(),
            ))
            .set_message_attribute_names(Some(
                request
                    .message_attribute_names
                    .iter()
                    .map(|name| name.to_string())
                    .collect(),
            ))
            .set_receive_request_attempt_id(request.receive_request_attempt_id.clone())
            .send()
            .await
            .map_err(error)?;
        output
            .messages()
            .iter()
            .map(|message| {
                Ok(ReceivedMessage {
                    message_id: message
                        .message_id()
                        .ok_or_else(|| missing("a message id"))?
                        .to_owned(),
                    receipt_handle: message
                        .receipt_handle()
                        .ok_or_else(|| missing("a receipt handle"))?
                        .to_owned(),
                    body: message.body().unwrap_or_default().to_owned(),
                    attributes: message
                        .attributes()
                        .into_iter()
                        .flatten()
                        .map(|(name, value)| (name.as_str(), value.as_str()))
                        .collect(),
                    message_attributes: from_sdk_attributes(message.message_attributes()),
                })
            })
            .collect()
    }

    async fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        rules::check_batch_ids(entries.iter().map(|entry| entry.id.as_str()))?;
        let request = entries
            .into_iter()
            .map(|entry| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(entry.id)
                    .receipt_handle(entry.receipt_handle)
                    .build()
                    .map_err(unbuildable)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let output = self
            .client
            .delete_message_batch()
            .queue_url(queue_url)
            .set_entries(Some(request))
            .send()
            .await
            .map_err(error)?;
        Ok(BatchResult {
            successful: output
                .successful()
                .iter()
                .map(|entry| (entry.id().to_owned(), ()))
                .collect(),
            failed: failures(output.failed()),
        })
    }

    async fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> Result<BatchResult<()>, TransportError> {
        rules::check_batch_ids(entries.iter().map(|entry| entry.id.as_str()))?;
        let (request, mut result) = split_checked(
            entries,
            |entry| &entry.id,
            |entry| {
                rules::check_range(
                    "VisibilityTimeout",
                    entry.visibility_timeout,
                    0,
                    rules::MAX_VISIBILITY_TIMEOUT_SECONDS,
                )?;
                ChangeMessageVisibilityBatchRequestEntry::builder()
                    .id(&entry.id)
                    .receipt_handle(&entry.receipt_handle)
                    .visibility_timeout(entry.visibility_timeout)
                    .build()
                    .map_err(unbuildable)
            },
        );
        if request.is_empty() {
            return Ok(result);
        }
        let output = self
            .client
            .change_message_visibility_batch()
            .queue_url(queue_url)
            .set_entries(Some(request))
            // The engine's batcher is the one to retry a visibility change: it repeats an
            // extension whose answer was lost, never a release (see `VisibilityBatch`), which the
            // SDK's own retries cannot tell apart.
            .customize()
            .config_override(
                aws_sdk_sqs::config::Config::builder()
                    .retry_config(aws_config::retry::RetryConfig::disabled()),
            )
            .send()
            .await
            .map_err(error)?;
        result.successful.extend(
            output
                .successful()
                .iter()
                .map(|entry| (entry.id().to_owned(), ())),
        );
        result.failed.extend(failures(output.failed()));
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            transport.rebase(
                "http://localhost.localstack.cloud:4566/000000000000/orders.fifo".to_owned()
            ),
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
}
