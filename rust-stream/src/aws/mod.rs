//! [`AwsTransport`]: the [`Transport`](crate::transport::Transport) over aws-sdk-sqs and
//! aws-sdk-sns, and [`AwsBrokerBuilder`], how a broker is configured for Amazon SQS and SNS or a
//! local stand-in. The transport holds two SDK clients made from one configuration (region,
//! credentials, endpoint, timeouts, retries), so a local stack's endpoint serves both; the SQS
//! calls are in `transport.rs`, the SNS ones in `sns.rs`, the conversions between the SDKs' types
//! and the model's in `convert.rs`.
//!
//! Connecting checks, before any SQS call, that a region is configured and that the credentials
//! provider answers with credentials, and fails with a [`ConnectError`] saying what to set: without
//! the check a missing region or missing credentials would show only at the first SQS call, after
//! the SDK's warnings about the instance metadata service, with a message naming neither.
//!
//! Every request is checked against the SQS or SNS rules before it is sent, with the same error
//! kinds as the in-process account; batch entries that break a rule are answered as failed
//! entries and the rest go out. The SDK retries throttling, 5xx and network errors with jittered backoff; each
//! attempt may take longer than a 20 s long poll, and no longer than its attempt timeout (30 s
//! unless set), so a connection that stalls is given up and tried again. Queue URLs that a local stack returns with
//! another host are rebased onto the configured endpoint.

use std::time::Duration;

use aws_sdk_sqs::config::ProvideCredentials;

mod convert;
#[cfg(feature = "s3")]
mod s3;
mod sns;
#[cfg(test)]
mod tests;
mod transport;

use convert::*;

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
         profile), or give one to `SqsBroker::aws().region(..)`. Any warnings of the AWS SDK just \
         before, about the instance metadata service (IMDS), come from this search: outside EC2 \
         nothing answers there, and AWS_EC2_METADATA_DISABLED=true skips it"
    )]
    MissingRegion,
    /// The credentials provider chain (environment, profile, web identity, container, instance
    /// metadata) found no credentials, failed, or did not answer in time.
    #[error(
        "no AWS credentials could be loaded: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
         AWS_PROFILE naming a profile with credentials (a local stand-in takes any, as \
         `SqsBroker::aws().test_credentials()` gives); the credentials provider answered: {reason}. \
         Any warnings of the AWS SDK just before, about the instance metadata service (IMDS), come \
         from this search: outside EC2 nothing answers there, and AWS_EC2_METADATA_DISABLED=true \
         skips it"
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
/// # async fn connect() -> Result<(), rust_stream::aws::ConnectError> {
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
    /// Sends requests to this endpoint (a local stack) instead of the region's, SQS's and SNS's
    /// alike (also read from `AWS_ENDPOINT_URL`, or per service from `AWS_ENDPOINT_URL_SQS` and
    /// `AWS_ENDPOINT_URL_SNS`, when not set here).
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

/// The [`Transport`](crate::transport::Transport) over aws-sdk-sqs (queues) and aws-sdk-sns
/// (topics, subscriptions, publishes).
#[derive(Clone)]
pub struct AwsTransport {
    client: aws_sdk_sqs::Client,
    /// Made from the same configuration as the SQS client, so both reach the same endpoint and
    /// region; `None` for a transport over an SQS client alone
    /// ([`from_client`](Self::from_client)), whose SNS calls then say so.
    sns: Option<aws_sdk_sns::Client>,
    /// The S3 client for large payloads (feature `s3`), made from the same configuration; `None`
    /// for a transport over clients given by hand, unless [`with_s3`](Self::with_s3) gave one.
    #[cfg(feature = "s3")]
    s3: Option<aws_sdk_s3::Client>,
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
            .timeout_config(timeouts(settings.attempt_timeout))
            .retry_config(retries());
        if let Some(endpoint) = &settings.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        loader = loader.region(region);
        if let Some(profile) = settings.profile {
            loader = loader.profile_name(profile);
        }
        if settings.test_credentials {
            loader = loader.credentials_provider(test_credentials());
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
        #[cfg(feature = "s3")]
        let s3 = {
            // A custom endpoint (a local stack) has no bucket host names: path style there.
            let s3 = aws_sdk_s3::config::Builder::from(&config)
                .force_path_style(endpoint.is_some())
                .build();
            Some(aws_sdk_s3::Client::from_conf(s3))
        };
        Ok(Self {
            client: aws_sdk_sqs::Client::new(&config),
            sns: Some(aws_sdk_sns::Client::new(&config)),
            #[cfg(feature = "s3")]
            s3,
            endpoint,
        })
    }

    /// A transport for a local stand-in of SQS and SNS (LocalStack) at `endpoint`, in `region`,
    /// with the test credentials (`test`/`test`) such stand-ins accept; never for AWS itself. Nothing is
    /// loaded from the environment or the profile, so nothing can fail: unlike
    /// [`AwsBrokerBuilder::transport`] this needs no `.await` and returns no `Result`. The SDK's
    /// retries and attempt timeout are those of a connected broker.
    pub fn local(endpoint: impl Into<String>, region: impl Into<String>) -> Self {
        let endpoint = endpoint.into();
        let region = region.into();
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
            .endpoint_url(&endpoint)
            .region(aws_sdk_sqs::config::Region::new(region.clone()))
            .credentials_provider(test_credentials())
            .timeout_config(timeouts(None))
            .retry_config(retries())
            .build();
        let sns = aws_sdk_sns::Config::builder()
            .behavior_version(aws_sdk_sns::config::BehaviorVersion::latest())
            .endpoint_url(&endpoint)
            .region(aws_sdk_sns::config::Region::new(region.clone()))
            .credentials_provider(test_credentials())
            .timeout_config(timeouts(None))
            .retry_config(retries())
            .build();
        let transport = Self::from_clients(
            aws_sdk_sqs::Client::from_conf(config),
            aws_sdk_sns::Client::from_conf(sns),
            Some(endpoint.clone()),
        );
        #[cfg(feature = "s3")]
        let transport = transport.with_s3(aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::Config::builder()
                .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
                .endpoint_url(&endpoint)
                .region(aws_sdk_s3::config::Region::new(region))
                .credentials_provider(test_credentials())
                .timeout_config(timeouts(None))
                .retry_config(retries())
                .force_path_style(true)
                .build(),
        ));
        #[cfg(not(feature = "s3"))]
        let _ = region;
        transport
    }

    /// A transport over an SDK client you configured yourself; `endpoint` is the one it was given,
    /// if any, onto which queue URLs are rebased. It has no SNS client (an SQS client's
    /// credentials cannot be read back to make one), so its SNS calls answer
    /// [`UnsupportedOperation`](crate::model::ErrorKind::UnsupportedOperation): for topics, give
    /// a client of each to [`from_clients`](Self::from_clients).
    pub fn from_client(client: aws_sdk_sqs::Client, endpoint: Option<String>) -> Self {
        Self {
            client,
            sns: None,
            #[cfg(feature = "s3")]
            s3: None,
            endpoint,
        }
    }

    /// A transport over an SQS and an SNS client you configured yourself, for queues and topics;
    /// `endpoint` is the SQS client's, if any, onto which queue URLs are rebased.
    ///
    /// ```no_run
    /// # async fn make() -> rust_stream::aws::AwsTransport {
    /// let config = aws_config::load_from_env().await;
    /// rust_stream::aws::AwsTransport::from_clients(
    ///     aws_sdk_sqs::Client::new(&config),
    ///     aws_sdk_sns::Client::new(&config),
    ///     None,
    /// )
    /// # }
    /// ```
    pub fn from_clients(
        client: aws_sdk_sqs::Client,
        sns: aws_sdk_sns::Client,
        endpoint: Option<String>,
    ) -> Self {
        Self {
            client,
            sns: Some(sns),
            #[cfg(feature = "s3")]
            s3: None,
            endpoint,
        }
    }

    /// This transport with an S3 client you configured yourself, for large payloads (feature
    /// `s3`). A transport made by `SqsBroker::aws()` or [`local`](Self::local) has one already.
    #[cfg(feature = "s3")]
    #[must_use]
    pub fn with_s3(mut self, s3: aws_sdk_s3::Client) -> Self {
        self.s3 = Some(s3);
        self
    }

    /// An SDK error as a [`TransportError`](crate::transport::TransportError); one that never
    /// reached SQS names where it was sent (the endpoint, or the region's, and the region): a
    /// mistyped region or a closed port otherwise shows only as a bare "dns error" or
    /// "connection refused".
    fn error<E, R>(
        &self,
        error: aws_sdk_sqs::error::SdkError<E, R>,
    ) -> crate::transport::TransportError
    where
        E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        self.error_of("SQS", error)
    }

    /// An SNS SDK error as a [`TransportError`](crate::transport::TransportError), as
    /// [`error`](Self::error) reads an SQS one (the SDKs share their error types).
    fn sns_error<E, R>(
        &self,
        error: aws_sdk_sns::error::SdkError<E, R>,
    ) -> crate::transport::TransportError
    where
        E: aws_sdk_sns::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        self.error_of("SNS", error)
    }

    fn error_of<E, R>(
        &self,
        service: &str,
        error: aws_sdk_sqs::error::SdkError<E, R>,
    ) -> crate::transport::TransportError
    where
        E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        match convert::error(error) {
            crate::transport::TransportError::Unavailable { message } => {
                crate::transport::TransportError::Unavailable {
                    message: format!("{message} (calling {})", self.place(service)),
                }
            }
            other => other,
        }
    }

    /// Where this transport sends its calls to `service` (`SQS`, `SNS`), as an error names it:
    /// the endpoint (the configured one, or the region's own) and the region.
    fn place(&self, service: &str) -> String {
        let region = self
            .client
            .config()
            .region()
            .map_or("(none)", |region| region.as_ref());
        match &self.endpoint {
            Some(endpoint) => format!(
                "{service} at {} in region {region}",
                shown_endpoint(endpoint)
            ),
            None => format!(
                "{service} at https://{}.{region}.amazonaws.com, the endpoint of region {region}; \
                 check the region's name",
                service.to_ascii_lowercase()
            ),
        }
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

/// The SDK's timeouts: connecting within 5 s, and each attempt within `attempt_timeout` (30 s
/// unless set).
fn timeouts(attempt_timeout: Option<Duration>) -> aws_sdk_sqs::config::timeout::TimeoutConfig {
    aws_sdk_sqs::config::timeout::TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_attempt_timeout(attempt_timeout.unwrap_or(ATTEMPT_TIMEOUT))
        .build()
}

/// The SDK's retries: standard (jittered backoff), [`SDK_ATTEMPTS`] attempts a call.
fn retries() -> aws_sdk_sqs::config::retry::RetryConfig {
    aws_sdk_sqs::config::retry::RetryConfig::standard().with_max_attempts(SDK_ATTEMPTS)
}

/// The fixed credentials local stand-ins accept.
fn test_credentials() -> aws_sdk_sqs::config::Credentials {
    aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "rust-stream-test")
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
