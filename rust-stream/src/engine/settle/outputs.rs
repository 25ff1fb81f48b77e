//! The settler's sends of what a handler staged (its outputs), before an ack deletes the message:
//! grouped by broker and destination, each destination's messages in one call where they fit, in
//! the order staged; a refusal fails the attempt, which is retried like a failed handler.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Settler;
use crate::client::Client;
use crate::model::Destination;
use crate::publish::{Outgoing, PublishError};
use crate::record::Event;
use crate::transport::{SendMessage, SentMessage};

impl Settler {
    /// Sends what the handler published, in order, grouped by queue or topic, each through the
    /// broker its publisher belongs to (the subscription's own when the publisher is not bound,
    /// which names its queue or topic as it names every other).
    pub(super) async fn publish_staged(&self, staged: Vec<Outgoing>) -> Result<(), PublishError> {
        // Keyed by kind (queues first), broker and name, so each destination's messages go out
        // together, in the order staged.
        type ByDestination =
            BTreeMap<(bool, usize, String), (Arc<Client>, Destination, Vec<SendMessage>)>;
        let mut by_destination = ByDestination::new();
        for outgoing in staged {
            let (publisher, message) = outgoing.into_request()?;
            // A downstream's shared budget: the message is held, its visibility extended, while
            // it waits.
            if let Some(limit) = publisher.rate_limit_of() {
                limit.wait_for(1).await;
            }
            let (client, destination) = match publisher.core() {
                Some(client) => (client, publisher.destination().clone()),
                None => {
                    let mut problems = Vec::new();
                    let named = self
                        .client
                        .naming()
                        .destination(publisher.destination(), &mut problems);
                    if let Some(problem) = problems.pop() {
                        return Err(PublishError::Config(problem));
                    }
                    (self.client.clone(), named)
                }
            };
            let key = (
                destination.topic().is_some(),
                Arc::as_ptr(&client) as usize,
                destination.name().to_owned(),
            );
            by_destination
                .entry(key)
                .or_insert_with(|| (client, destination, Vec::new()))
                .2
                .push(message);
        }
        for (client, destination, messages) in by_destination.into_values() {
            let bodies = self.recorded_bodies(&messages);
            let answers = client.send_to(&destination, messages).await;
            self.check_sent(destination.name(), answers, bodies)?;
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

    /// The first refusal among the answers of a send to the queue or topic `name`, and each
    /// message sent told to the recorder.
    fn check_sent(
        &self,
        name: &str,
        answers: Vec<Result<SentMessage, crate::transport::TransportError>>,
        bodies: Option<Vec<String>>,
    ) -> Result<(), PublishError> {
        for (index, answer) in answers.into_iter().enumerate() {
            answer.map_err(PublishError::rejected(name))?;
            if let Some(bodies) = &bodies {
                self.client.record(|| Event::Published {
                    queue: name.to_owned(),
                    body: bodies[index].clone(),
                });
            }
        }
        Ok(())
    }
}
