//! Pollers: long-poll the queue and feed the pipeline, never holding more messages than the
//! subscription's capacity (concurrency plus one receive batch per poller).
//!
//! A poller takes room for a whole batch before it receives and hands back what the receive did
//! not fill, so a full pipeline stops receiving instead of piling up messages that would time out.
//! A failed receive backs off with jitter, from 1 s to 30 s; it never loops tight.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::batch::backoff;
use super::Consumer;
use crate::context::Delivery;
use crate::engine::transport::ReceiveMessage;

impl Consumer {
    /// One receive loop, until shutdown.
    pub(crate) async fn poll(self: Arc<Self>) {
        let batch_size = self.queue.consumer.batch_size;
        let mut failures = 0;
        loop {
            // Biased: once shutdown has begun, no new receive may start.
            let room = tokio::select! {
                biased;
                () = self.stopping() => return,
                room = self.capacity.clone().acquire_many_owned(batch_size as u32) => room.expect("never closed"),
            };
            let mut request = ReceiveMessage::new(batch_size as i32)
                .wait_time_seconds(self.queue.consumer.wait.as_secs() as i32);
            if let Some(timeout) = self.queue.consumer.visibility_timeout {
                request = request.visibility_timeout(timeout.as_secs() as i32);
            }
            if self.fifo {
                // A receive the SDK retries after a lost answer then gets the same messages back,
                // instead of leaving them (and their groups) invisible for a visibility timeout.
                request = request.receive_request_attempt_id(uuid::Uuid::new_v4().to_string());
            }
            let span = tracing::debug_span!(
                "receive",
                messaging.system = "aws_sqs",
                messaging.destination.name = %self.queue.name,
                messaging.operation.type = "receive",
                messaging.batch.message_count = tracing::field::Empty,
            );
            // Stopping abandons a long poll in flight; a message it was handing out becomes
            // visible again when its visibility timeout ends.
            let received = tokio::select! {
                biased;
                () = self.stopping() => return,
                received = self.core.transport.receive_message(&self.url, request).instrument(span.clone()) => received,
            };
            let mut room = room;
            match received {
                Ok(messages) => {
                    failures = 0;
                    span.record("messaging.batch.message_count", messages.len());
                    for message in messages {
                        let permit = room
                            .split(1)
                            .expect("a batch never exceeds the room taken for it");
                        let lease = self.leases.open(
                            message.receipt_handle.clone(),
                            message.message_id.clone(),
                            self.visibility,
                        );
                        let delivery = Arc::new(Delivery::new(&self.queue.name, message));
                        self.dispatch(super::dispatch::Held {
                            delivery,
                            lease,
                            _room: permit,
                        });
                    }
                }
                Err(error) => {
                    failures += 1;
                    let delay = backoff(failures, Duration::from_secs(1), Duration::from_secs(30));
                    tracing::warn!(
                        messaging.destination.name = %self.queue.name,
                        error = %error,
                        retry_in_ms = delay.as_millis() as u64,
                        "receive failed"
                    );
                    drop(room);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.stopping() => return,
                    }
                }
            }
        }
    }
}
