//! The S3 actions over aws-sdk-s3, for large payloads (feature `s3`): a bucket made if missing,
//! and objects put, read, sized and deleted, each answer read back into the model's words (a
//! missing bucket `NoSuchBucket`, a missing object `NoSuchKey`). The S3 methods of
//! [`Transport`](crate::transport::Transport) in `transport.rs` call these; the S3 client is made
//! in `mod.rs` from the same configuration as the SQS client, so one endpoint (a local stack)
//! serves all three, in path style there (a local stack has no bucket host names).

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};

use crate::model::large_payload::check_bucket_name;
use crate::model::rules::ErrorKind;
use crate::transport::TransportError;

use super::convert;
use super::AwsTransport;

impl AwsTransport {
    /// The S3 client, or why there is none: a transport made over clients given by hand.
    fn s3(&self) -> Result<&aws_sdk_s3::Client, TransportError> {
        self.s3.as_ref().ok_or_else(|| {
            TransportError::service(
                ErrorKind::UnsupportedOperation,
                "this AwsTransport was made over SDK clients given by hand and has no S3 client: \
                 give it one with `AwsTransport::with_s3`, or make it with `SqsBroker::aws()` or \
                 `AwsTransport::local`",
            )
        })
    }

    /// S3 `CreateBucket` in the client's region; a bucket this account owns already is no error.
    pub(super) async fn s3_create_bucket(&self, bucket: &str) -> Result<(), TransportError> {
        check_bucket_name(bucket).map_err(TransportError::unsent)?;
        let client = self.s3()?;
        // us-east-1 takes no location constraint; every other region needs its own.
        let region = client
            .config()
            .region()
            .map(|region| region.as_ref().to_owned());
        let location = region.filter(|region| region != "us-east-1").map(|region| {
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(region.as_str()))
                .build()
        });
        match client
            .create_bucket()
            .bucket(bucket)
            .set_create_bucket_configuration(location)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(error)
                if error
                    .as_service_error()
                    .is_some_and(|e| e.is_bucket_already_owned_by_you()) =>
            {
                Ok(())
            }
            Err(error) => Err(refused(
                error,
                "s3:CreateBucket",
                S3Resource::Bucket(bucket),
            )),
        }
    }

    /// S3 `PutObject`.
    pub(super) async fn s3_put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Vec<u8>,
    ) -> Result<(), TransportError> {
        self.s3()?
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|error| refused(error, "s3:PutObject", S3Resource::Objects(bucket)))?;
        Ok(())
    }

    /// S3 `GetObject`: the object's bytes, read whole.
    pub(super) async fn s3_get_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Vec<u8>, TransportError> {
        let output = self
            .s3()?
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|error| refused(error, "s3:GetObject", S3Resource::Objects(bucket)))?;
        let body = output
            .body
            .collect()
            .await
            .map_err(|error| TransportError::Unavailable {
                message: format!("the object `{key}` in `{bucket}` broke off while read: {error}"),
            })?;
        Ok(body.into_bytes().to_vec())
    }

    /// S3 `HeadObject`: the object's size. S3 answers a missing object's HEAD with a bare 404,
    /// which is read as `NoSuchKey`, as a GET of it says.
    pub(super) async fn s3_head_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<u64, TransportError> {
        let output = self
            .s3()?
            .head_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|error| {
                if error.as_service_error().is_some_and(|e| e.is_not_found()) {
                    TransportError::service(
                        ErrorKind::NoSuchKey,
                        format!("the bucket `{bucket}` has no object `{key}`"),
                    )
                } else {
                    refused(error, "s3:GetObject", S3Resource::Objects(bucket))
                }
            })?;
        Ok(output
            .content_length()
            .and_then(|length| u64::try_from(length).ok())
            .unwrap_or(0))
    }

    /// S3 `CopyObject` of an object onto itself: S3 takes such a copy only when the metadata is
    /// replaced, so it is, with none (large payloads' objects carry none).
    pub(super) async fn s3_copy_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(), TransportError> {
        self.s3()?
            .copy_object()
            .bucket(bucket)
            .key(key)
            .copy_source(format!("{bucket}/{key}"))
            .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
            .send()
            .await
            .map_err(|error| {
                refused(
                    error,
                    "s3:GetObject and s3:PutObject",
                    S3Resource::Objects(bucket),
                )
            })?;
        Ok(())
    }

    /// S3 `DeleteObject`: a key with no object is no error, as in S3.
    pub(super) async fn s3_delete_object(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(), TransportError> {
        self.s3()?
            .delete_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|error| refused(error, "s3:DeleteObject", S3Resource::Objects(bucket)))?;
        Ok(())
    }
}

/// What an S3 call acts on, named by its ARN (its `Display`) in a refusal, as an IAM policy
/// grants it.
#[derive(Debug, Clone, Copy)]
pub(super) enum S3Resource<'a> {
    /// The bucket itself (`CreateBucket`).
    Bucket(&'a str),
    /// The bucket's objects (`PutObject`, `GetObject`, `DeleteObject`).
    Objects(&'a str),
}

impl std::fmt::Display for S3Resource<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bucket(bucket) => write!(f, "arn:aws:s3:::{bucket}"),
            Self::Objects(bucket) => write!(f, "arn:aws:s3:::{bucket}/*"),
        }
    }
}

/// An S3 SDK error as a [`TransportError`]; an `AccessDenied` says which permission on which
/// resource the service's credentials lack, as S3's own message ("Access Denied") does not.
pub(super) fn refused<E, R>(
    error: aws_sdk_s3::error::SdkError<E, R>,
    permission: &str,
    resource: S3Resource<'_>,
) -> TransportError
where
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    match convert::error(error) {
        TransportError::Service {
            kind: ErrorKind::AccessDenied,
            message,
            ..
        } => TransportError::service(
            ErrorKind::AccessDenied,
            format!(
                "{message}: this service's credentials need `{permission}` on `{resource}` \
                 (large payloads: see the IAM table in docs/aws.md)"
            ),
        ),
        other => other,
    }
}
