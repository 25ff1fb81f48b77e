//! Sends whose bodies go through S3: each message over the broker's threshold has its body put in
//! the bucket under a fresh key and is sent as the pointer to it
//! ([`large_payload`](crate::model::large_payload)), the others as they are, in one call of the
//! send path as before.
//!
//! A message whose payload could not be put is not sent: its answer is the S3 error. On a FIFO
//! destination the later messages of its group in the same send are not sent either (they would
//! overtake it); they answer [`TransportError::HeldBehind`], as a publisher's batch holds what
//! follows a refused message.

use std::collections::HashMap;

use super::Client;
use crate::model::large_payload::{pointer_in, LargePayloads};
use crate::model::{Destination, SqsQueue};
use crate::transport::{SendMessage, SentMessage, TransportError};

impl Client {
    /// Sends `messages` to `destination`, the large ones' bodies through S3.
    pub(super) async fn send_through_s3(
        &self,
        large: &LargePayloads,
        destination: &Destination,
        messages: Vec<SendMessage>,
    ) -> Vec<Result<SentMessage, TransportError>> {
        if !messages.iter().any(|message| large.offloads(message)) {
            return self.send_as_they_are(destination, messages).await;
        }
        let mut answers: Vec<Option<Result<SentMessage, TransportError>>> =
            std::iter::repeat_with(|| None)
                .take(messages.len())
                .collect();
        let mut sending = Vec::with_capacity(messages.len());
        let mut places = Vec::with_capacity(messages.len());
        // The groups whose payload could not be put, and why.
        let mut failed_groups: HashMap<String, String> = HashMap::new();
        for (place, mut message) in messages.into_iter().enumerate() {
            let behind = message.group_id.as_ref().and_then(|g| failed_groups.get(g));
            if let Some(why) = behind {
                answers[place] = Some(Err(TransportError::HeldBehind {
                    message: why.clone(),
                }));
                continue;
            }
            if large.offloads(&message) {
                let key = uuid::Uuid::new_v4().to_string();
                let payload = large.offload(&mut message, key.clone());
                if let Err(error) = self.put_payload(large, &key, payload).await {
                    if let Some(group) = message.group_id.take() {
                        let why = format!("its payload could not be put in S3: {error}");
                        failed_groups.insert(group, why);
                    }
                    answers[place] = Some(Err(error));
                    continue;
                }
            }
            sending.push(message);
            places.push(place);
        }
        let sent = self.send_as_they_are(destination, sending).await;
        for (place, answer) in places.into_iter().zip(sent) {
            answers[place] = Some(answer);
        }
        answers
            .into_iter()
            .map(|answer| answer.expect("every message answered"))
            .collect()
    }
}

impl Client {
    /// Puts `payload` in the bucket under `key`, the bucket created first when it is declared so.
    async fn put_payload(
        &self,
        large: &LargePayloads,
        key: &str,
        payload: Vec<u8>,
    ) -> Result<(), TransportError> {
        if large.create_if_missing {
            self.payload_bucket
                .get_or_try_init(|| self.transport.create_bucket(&large.bucket))
                .await?;
        }
        self.transport.put_object(&large.bucket, key, payload).await
    }
}

impl Client {
    /// Sends copies of stored messages to `queue` (a dead-letter copy, a redrive): the object a
    /// copy points at in S3 is written again first ([`copy_object`](crate::transport::Transport::copy_object)
    /// onto itself), so a bucket's lifecycle rule counts its age from this copy, as
    /// `docs/large-payloads.md` plans. A refresh that fails is logged and the copy still goes: a
    /// message is never held back, or lost, for its object's age.
    pub(crate) async fn send_copies(
        &self,
        queue: &SqsQueue,
        messages: Vec<SendMessage>,
    ) -> Vec<Result<SentMessage, TransportError>> {
        for message in &messages {
            let Some(pointer) = pointer_in(&message.body, &message.message_attributes) else {
                continue;
            };
            if let Err(error) = self
                .transport
                .copy_object(&pointer.bucket, &pointer.key)
                .await
            {
                tracing::warn!(
                    error = %error,
                    bucket = %pointer.bucket,
                    key = %pointer.key,
                    "a copied message's payload could not be refreshed in S3; the copy is sent, \
                     and the object's age counts from its last write"
                );
            }
        }
        self.send_many(queue, messages).await
    }
}
