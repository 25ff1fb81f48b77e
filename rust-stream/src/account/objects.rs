//! The account's S3 buckets, as data: objects by key in buckets by name, in memory, with S3's
//! answer to a bucket that does not exist. The account's S3 calls (`s3.rs`) work on them.

use std::collections::HashMap;

use crate::model::rules::{fail, ErrorKind};
use crate::transport::TransportError;

/// The account's buckets, by name.
#[derive(Debug, Default)]
pub(super) struct Buckets {
    pub(super) buckets: HashMap<String, HashMap<String, Object>>,
}

/// An object: its bytes, and when they were last written (its age for a lifecycle rule).
#[derive(Debug)]
pub(super) struct Object {
    pub(super) body: Vec<u8>,
    pub(super) written: tokio::time::Instant,
}

impl Buckets {
    /// The objects of `bucket`, or S3's answer when it does not exist.
    pub(super) fn bucket(
        &mut self,
        bucket: &str,
    ) -> Result<&mut HashMap<String, Object>, TransportError> {
        match self.buckets.get_mut(bucket) {
            Some(objects) => Ok(objects),
            None => fail(
                ErrorKind::NoSuchBucket,
                format!(
                    "the bucket `{bucket}` does not exist: create it first (declare it with \
                     `create_if_missing`) or check its name"
                ),
            ),
        }
    }
}

pub(super) fn no_such_key<T>(bucket: &str, key: &str) -> Result<T, TransportError> {
    fail(
        ErrorKind::NoSuchKey,
        format!("the bucket `{bucket}` has no object `{key}`"),
    )
}
