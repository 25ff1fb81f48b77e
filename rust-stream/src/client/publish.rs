//! Publishing to a topic: each publish checked against the resolved topic before the network,
//! then sent through the topic's sender (`PublishBatch`, up to 10 publishes and 256 KiB a call),
//! which keeps every FIFO group in order as a FIFO queue's sender does ([`send`](super::send)).
//! Each call of publishes runs in a `publish` span (`messaging.system = aws_sns`, the topic as
//! `messaging.destination.name`), and each publish is counted in `messaging.client.sent.messages`
//! with the same labels.

use tracing::Instrument;

use crate::model::topic::check_publish;
use crate::model::SnsTopic;
use crate::propagation::TraceHeaders;
use crate::transport::{Publish, SentMessage, TransportError};

use super::batch::PublishBatch;
use super::send::{Sender, FIFO_SEND_CALLS};
use super::Client;

impl Client {
    /// Publishes to a topic through its sender, each FIFO group in order, and answers each
    /// publish in the order given, as a queue's sends are answered. A publish the topic would refuse (`check_publish`) is answered
    /// with that error and never sent.
    pub(crate) async fn publish_many(
        &self,
        topic: &SnsTopic,
        mut publishes: Vec<Publish>,
    ) -> Vec<Result<SentMessage, TransportError>> {
        // Read before the first wait, while the caller's span is the current one.
        let trace = TraceHeaders::current();
        let resolved = match self.resolve_topic(topic).await {
            Ok(resolved) => resolved,
            Err(error) => return publishes.iter().map(|_| Err(error.clone())).collect(),
        };
        if let Some(trace) = &trace {
            for publish in &mut publishes {
                trace.inject_publish(publish, resolved.maximum_message_size);
            }
        }
        let checks: Vec<Result<(), TransportError>> = publishes
            .iter()
            .map(|publish| check_publish(publish, resolved.target()).map(|_| ()))
            .collect();
        // OpenTelemetry's messaging span for a publish, named by its operation; the trace
        // context the messages carry is the caller's, read above.
        let span = tracing::info_span!(
            "publish",
            messaging.system = "aws_sns",
            messaging.destination.name = %resolved.name,
            messaging.operation.type = "publish",
            messaging.batch.message_count = checks.iter().filter(|check| check.is_ok()).count(),
        );
        // On a FIFO topic, a refused publish holds its group's later ones in this submission.
        let answered = self
            .publisher(&resolved.arn, resolved.fifo)
            .submit_checked(publishes, checks)
            .instrument(span)
            .await;
        let published = answered.iter().filter(|answer| answer.is_ok()).count();
        if published > 0 {
            crate::metrics::published(&resolved.name, published, None);
        }
        for error in answered.iter().filter_map(|answer| answer.as_ref().err()) {
            crate::metrics::published(&resolved.name, 1, Some(error));
        }
        // Answered as a queue's sends are (the same three facts; collected in place, as the two
        // answers are the same size).
        answered
            .into_iter()
            .map(|answer| answer.map(SentMessage::from))
            .collect()
    }

    /// The topic's sender, started on first use: on a FIFO topic, calls formed by group, as a
    /// FIFO queue's.
    fn publisher(&self, topic_arn: &str, fifo: bool) -> Sender<PublishBatch> {
        let mut batchers = self.batchers();
        batchers
            .publish
            .entry(topic_arn.to_owned())
            .or_insert_with(|| {
                let transport = self.transport.clone();
                if fifo {
                    Sender::fifo_of(transport, topic_arn, FIFO_SEND_CALLS)
                } else {
                    Sender::standard_of(transport, topic_arn, self.settings())
                }
            })
            .clone()
    }
}
