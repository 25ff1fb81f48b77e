//! The account's S3: enough of it for large payloads (create a bucket, put, get, head and delete
//! an object) with S3's bucket-name rule and its answers to a missing bucket or key, over the
//! buckets of `objects.rs`. S3's own limits beyond the bucket name's are not modelled (a single
//! PUT takes up to 5 GiB there, so no body a queue service carries reaches it).

use super::objects::{no_such_key, Object};
use super::Account;
use crate::model::large_payload::check_bucket_name;
use crate::transport::TransportError;

impl Account {
    /// S3 `CreateBucket`: creates an empty bucket, or leaves the bucket of this name as it is.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidParameterValue`](crate::model::ErrorKind::InvalidParameterValue) for a name S3 refuses.
    pub async fn create_bucket(&self, bucket: &str) -> Result<(), TransportError> {
        check_bucket_name(bucket).map_err(TransportError::unsent)?;
        self.objects().buckets.entry(bucket.to_owned()).or_default();
        Ok(())
    }

    /// S3 `PutObject`: stores `body` under `key` in `bucket`, replacing what was there.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoSuchBucket`](crate::model::ErrorKind::NoSuchBucket) when the bucket does not exist.
    pub async fn put_object(
        &self,
        bucket: &str,
        key: &str,
        body: Vec<u8>,
    ) -> Result<(), TransportError> {
        let written = tokio::time::Instant::now();
        let object = Object { body, written };
        self.objects()
            .bucket(bucket)?
            .insert(key.to_owned(), object);
        Ok(())
    }

    /// S3 `GetObject`: the bytes stored under `key` in `bucket`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoSuchBucket`](crate::model::ErrorKind::NoSuchBucket), or [`ErrorKind::NoSuchKey`](crate::model::ErrorKind::NoSuchKey) when the bucket has no such
    /// object.
    pub async fn get_object(&self, bucket: &str, key: &str) -> Result<Vec<u8>, TransportError> {
        let mut objects = self.objects();
        match objects.bucket(bucket)?.get(key) {
            Some(object) => Ok(object.body.clone()),
            None => no_such_key(bucket, key),
        }
    }

    /// S3 `HeadObject`: the size in bytes of the object under `key` in `bucket`.
    ///
    /// # Errors
    ///
    /// As [`get_object`](Self::get_object).
    pub async fn head_object(&self, bucket: &str, key: &str) -> Result<u64, TransportError> {
        let mut objects = self.objects();
        match objects.bucket(bucket)?.get(key) {
            Some(object) => Ok(object.body.len() as u64),
            None => no_such_key(bucket, key),
        }
    }

    /// S3 `CopyObject` of the object under `key` onto itself: written again as it is, so its age
    /// starts now ([`object_written_at`](Self::object_written_at) says when).
    ///
    /// # Errors
    ///
    /// As [`get_object`](Self::get_object).
    pub async fn copy_object(&self, bucket: &str, key: &str) -> Result<(), TransportError> {
        let mut objects = self.objects();
        match objects.bucket(bucket)?.get_mut(key) {
            Some(object) => {
                object.written = tokio::time::Instant::now();
                Ok(())
            }
            None => no_such_key(bucket, key),
        }
    }

    /// When the object under `key` in `bucket` was last written (put, or copied onto itself), on
    /// tokio's clock; `None` when there is no such object. For tests: the age a bucket's lifecycle
    /// rule would read.
    pub fn object_written_at(&self, bucket: &str, key: &str) -> Option<tokio::time::Instant> {
        let objects = self.objects();
        Some(objects.buckets.get(bucket)?.get(key)?.written)
    }

    /// S3 `DeleteObject`: removes the object under `key` from `bucket`; a key with no object is
    /// no error, as in S3.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoSuchBucket`](crate::model::ErrorKind::NoSuchBucket) when the bucket does not exist.
    pub async fn delete_object(&self, bucket: &str, key: &str) -> Result<(), TransportError> {
        self.objects().bucket(bucket)?.remove(key);
        Ok(())
    }

    /// The keys of the objects in `bucket`, sorted; empty when it does not exist. For tests: a
    /// look at what a bucket holds, as S3's `ListObjectsV2` would give it.
    pub fn object_keys(&self, bucket: &str) -> Vec<String> {
        let objects = self.objects();
        let mut keys: Vec<String> = objects
            .buckets
            .get(bucket)
            .map(|objects| objects.keys().cloned().collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::rules::ErrorKind;

    #[tokio::test]
    async fn an_object_is_put_read_and_deleted_as_in_s3() {
        let account = Account::new();
        account.create_bucket("payloads").await.unwrap();
        account.create_bucket("payloads").await.unwrap();
        account
            .put_object("payloads", "k1", b"large body".to_vec())
            .await
            .unwrap();
        assert_eq!(
            account.get_object("payloads", "k1").await.unwrap(),
            b"large body"
        );
        assert_eq!(account.head_object("payloads", "k1").await.unwrap(), 10);
        assert_eq!(account.object_keys("payloads"), ["k1"]);
        account.delete_object("payloads", "k1").await.unwrap();
        account.delete_object("payloads", "k1").await.unwrap();
        let missing = account.get_object("payloads", "k1").await.unwrap_err();
        assert_eq!(missing.kind(), Some(ErrorKind::NoSuchKey), "{missing}");
        assert!(account.object_keys("payloads").is_empty());
    }

    #[tokio::test]
    async fn a_missing_bucket_and_a_bad_name_are_refused() {
        let account = Account::new();
        let missing = account
            .put_object("nowhere", "k", vec![1])
            .await
            .unwrap_err();
        assert_eq!(missing.kind(), Some(ErrorKind::NoSuchBucket), "{missing}");
        assert!(
            missing.to_string().contains("create_if_missing"),
            "{missing}"
        );
        for bad in ["ab", "Payloads", "-payloads", "payloads_1"] {
            let refused = account.create_bucket(bad).await.unwrap_err();
            assert_eq!(
                refused.kind(),
                Some(ErrorKind::InvalidParameterValue),
                "{bad}"
            );
        }
    }
}
