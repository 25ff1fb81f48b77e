//! The settler's sends of what a handler staged (its outputs), before an ack deletes the message:
//! grouped by broker and destination, each destination's messages in one call where they fit, in
//! the order staged; a refusal fails the attempt, which is retried like a failed handler.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Settler;
use crate::client::Client;
use crate::model::{SnsTopic, SqsQueue};
use crate::publish::{publish_of, Outgoing, PublishError};
use crate::record::Event;
use crate::transport::SendMessage;

impl Settler {
    /// Sends what the handler published, in order, grouped by queue, each through the broker its
    /// publisher belongs to (the subscription's own when the publisher is not bound, which names
    /// its queue as it names every other).
    pub(super) async fn publish_staged(&self, staged: Vec<Outgoing>) -> Result<(), PublishError> {
        // Keyed by broker and queue (or topic) name, so each destination's messages go out
        // together, in the order staged.
        type ByQueue = BTreeMap<(usize, String), (Arc<Client>, SqsQueue, Vec<SendMessage>)>;
        type ByTopic =
            BTreeMap<(usize, String), (Arc<Client>, SnsTopic, SqsQueue, Vec<SendMessage>)>;
        let mut by_queue = ByQueue::new();
        let mut by_topic = ByTopic::new();
        for outgoing in staged {
            let (publisher, message) = outgoing.into_request()?;
            let client = publisher.core().unwrap_or_else(|| self.client.clone());
            let mut problems = Vec::new();
            if let Some(topic) = publisher.topic() {
                let topic = match publisher.core() {
                    Some(_) => topic.clone(),
                    None => self.client.naming().topic(topic, &mut problems),
                };
                if let Some(problem) = problems.pop() {
                    return Err(PublishError::Config(problem));
                }
                by_topic
                    .entry((Arc::as_ptr(&client) as usize, topic.name.clone()))
                    .or_insert_with(|| (client, topic, publisher.queue().clone(), Vec::new()))
                    .3
                    .push(message);
                continue;
            }
            let queue = match publisher.core() {
                Some(_) => publisher.queue().clone(),
                None => self.client.naming().queue(publisher.queue(), &mut problems),
            };
            if let Some(problem) = problems.pop() {
                return Err(PublishError::Config(problem));
            }
            by_queue
                .entry((Arc::as_ptr(&client) as usize, queue.name.clone()))
                .or_insert_with(|| (client, queue, Vec::new()))
                .2
                .push(message);
        }
        for (client, queue, messages) in by_queue.into_values() {
            let bodies = self.recorded_bodies(&messages);
            let answers = client.send_many(&queue, messages).await;
            self.check_sent(&queue, answers, bodies)?;
        }
        for (client, topic, stand_in, messages) in by_topic.into_values() {
            let bodies = self.recorded_bodies(&messages);
            let publishes = messages.into_iter().map(publish_of).collect();
            let answers = client.publish_many(&topic, publishes).await;
            self.check_sent(&stand_in, answers, bodies)?;
        }
        Ok(())
    }

    /// The bodies of messages about to be sent, kept for a test's recorder only.
    fn recorded_bodies(&self, messages: &[SendMessage]) -> Option<Vec<String>> {
        self.client.is_recording().then(|| {
            messages
                .iter()
                .map(|message| message.body.clone())
                .collect()
        })
    }

    /// The first refusal among the answers of a send to `queue` (or a topic, as its stand-in),
    /// and each message sent told to the recorder.
    fn check_sent<T>(
        &self,
        queue: &SqsQueue,
        answers: Vec<Result<T, crate::transport::TransportError>>,
        bodies: Option<Vec<String>>,
    ) -> Result<(), PublishError> {
        for (index, answer) in answers.into_iter().enumerate() {
            answer.map_err(PublishError::rejected(queue))?;
            if let Some(bodies) = &bodies {
                self.client.record(|| Event::Published {
                    queue: queue.name.clone(),
                    body: bodies[index].clone(),
                });
            }
        }
        Ok(())
    }
}
