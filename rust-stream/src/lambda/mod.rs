//! The same app on AWS Lambda (feature `lambda`): [`serve`] runs an app built with
//! [`RustStream`](crate::RustStream) and [`SqsBroker`] as a Lambda function, through the Lambda
//! Runtime API, instead of [`App::run`](crate::App::run)'s pollers.
//!
//! Each SQS event's records are read into the messages the engine handles and run through the
//! engine's own parts (decode, middleware, handler, panic catch, batch calls, inbox, outputs, the
//! retry decision, dead-letter copies), and the answer lists the failed ones in
//! `batchItemFailures` for the event source mapping (which must have `ReportBatchItemFailures`),
//! which deletes the rest:
//!
//! | outcome | on the server | on Lambda |
//! | --- | --- | --- |
//! | ack | outputs sent, then deleted | outputs sent, then reported a success (the mapping deletes it) |
//! | `dead_letter`, a body that does not decode | copied to the dead-letter queue, then deleted | copied to the dead-letter queue, then reported a success |
//! | failure, `retry_after` | hidden for the retry delay (FIFO: retried in place) | hidden for the retry delay by a visibility change, reported a failure |
//! | a FIFO message fails | its group waits, retried in place | it and the later messages of its group in the event are reported failed, hidden alike |
//!
//! SNS-to-Lambda events run the subscriptions whose queue is subscribed to the event's topic,
//! each notification read as the queue would read its envelope; a failure fails the invocation,
//! which Lambda retries. `docs/lambda.md` is the guide: where Lambda differs, building a
//! `bootstrap`, the event source mapping, cold-start numbers.
//!
//! ```no_run
//! use rust_stream::prelude::*;
//! # #[derive(serde::Deserialize)] struct Order;
//! # struct Fulfil;
//! # impl Handle<Order> for Fulfil {
//! #     async fn handle(&self, _: &Order, _: &(), _: &mut Context<'_>) -> Result<(), HandlerOutcome> { Ok(()) }
//! # }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let app = RustStream::new(AppInfo::new("fulfillment", "0.1.0"))
//!         .with_broker(SqsBroker::from_env().await?, |b| {
//!             b.include(subscriber(SqsQueue::new("orders.fifo"), Fulfil).build());
//!         });
//!     rust_stream::lambda::serve(app).await?;
//!     Ok(())
//! }
//! ```

mod records;

use std::collections::HashMap;
use std::sync::Arc;

pub use aws_lambda_events::event::sns::SnsEvent;
pub use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
pub use lambda_runtime::Context as InvocationContext;

use crate::app::{RunError, Service};
use crate::engine::event::{EventConsumer, Settled, Source};
use crate::model::headers::TRACEPARENT_HEADER;
use crate::sqs::SqsBroker;

/// Why the Lambda host could not serve.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LambdaError {
    /// The app could not start: its declarations, or its queues (the first invocation never
    /// comes).
    #[error("the app could not start: {0}")]
    Start(#[from] RunError),
    /// The Lambda Runtime API failed.
    #[error("the Lambda runtime failed: {0}")]
    Runtime(lambda_runtime::Error),
}

/// Why an invocation failed as a whole (its event is retried by Lambda).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvocationError {
    /// The event is neither an SQS nor an SNS event.
    #[error("the event is neither an SQS nor an SNS event: {0}")]
    UnknownEvent(String),
    /// Notifications of an SNS event failed; Lambda invokes the function with it again.
    #[error("{failed} of {total} SNS notifications failed")]
    Notifications {
        /// How many failed.
        failed: usize,
        /// How many the event had.
        total: usize,
    },
}

/// An app served as a Lambda function: its subscriptions, built once (at the cold start), and
/// handed each invocation's event.
#[derive(Debug)]
pub struct LambdaHost {
    /// Kept for the app's declarations, registered while the broker value lives.
    _broker: SqsBroker,
    consumers: Vec<EventConsumer>,
    /// The subscriptions by their queue's name.
    by_queue: HashMap<String, usize>,
}

impl LambdaHost {
    /// Starts `app` as the server's run starts it (its checks, its queues resolved or created,
    /// its topics wired), without pollers. Its workers do not run on Lambda.
    pub async fn new(app: Service<SqsBroker>) -> Result<Self, RunError> {
        let (context, broker, subscribers) = app.into_hosted();
        let client = broker.client().clone();
        let subscribers = crate::engine::prepare(&client, subscribers, &context).await?;
        let mut consumers = Vec::with_capacity(subscribers.len());
        let mut by_queue = HashMap::new();
        for subscriber in subscribers {
            let consumer =
                EventConsumer::build(&client, subscriber, context.states().clone()).await?;
            by_queue.insert(consumer.queue().name.clone(), consumers.len());
            consumers.push(consumer);
        }
        tracing::info!(subscriptions = consumers.len(), "serving Lambda events");
        Ok(Self {
            _broker: broker,
            consumers,
            by_queue,
        })
    }

    /// Handles an SQS event: each record by the subscription of its queue (named by the
    /// record's `eventSourceARN`), and answers the ones that failed, by message id. A record of a
    /// queue the app does not subscribe to fails (it comes back, and reaches the queue's
    /// dead-letter queue after its receives).
    pub async fn handle_sqs(&self, event: SqsEvent) -> SqsBatchResponse {
        self.handle_sqs_in(event, None).await
    }

    /// [`handle_sqs`](Self::handle_sqs) within the invocation's X-Ray trace, the parent of each
    /// message that carries no trace of its own.
    async fn handle_sqs_in(
        &self,
        event: SqsEvent,
        invocation_trace: Option<&str>,
    ) -> SqsBatchResponse {
        let mut by_consumer: Vec<(usize, Vec<_>)> = Vec::new();
        let mut failures = Vec::new();
        for record in event.records {
            let queue = records::queue_name(&record);
            let mut message = records::received(record);
            let traced = message.message_attributes.contains_key(TRACEPARENT_HEADER);
            records::within_invocation(&mut message, traced, invocation_trace);
            let Some(&consumer) = queue.as_deref().and_then(|queue| self.by_queue.get(queue))
            else {
                tracing::error!(
                    messaging.destination.name = queue.as_deref().unwrap_or(""),
                    messaging.message.id = %message.message_id,
                    "a record of a queue no subscription of the app reads; reported failed"
                );
                failures.push(message.message_id);
                continue;
            };
            match by_consumer.iter_mut().find(|(index, _)| *index == consumer) {
                Some((_, messages)) => messages.push(message),
                None => by_consumer.push((consumer, vec![message])),
            }
        }
        let handled = futures_util::future::join_all(by_consumer.into_iter().map(
            |(consumer, messages)| async move {
                let ids: Vec<String> = messages
                    .iter()
                    .map(|message| message.message_id.clone())
                    .collect();
                let settled = self.consumers[consumer]
                    .handle(messages, Source::Queue)
                    .await;
                ids.into_iter()
                    .zip(settled)
                    .filter(|(_, settled)| *settled == Settled::Failed)
                    .map(|(id, _)| id)
                    .collect::<Vec<_>>()
            },
        ))
        .await;
        failures.extend(handled.into_iter().flatten());
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = failures
            .into_iter()
            .map(|id| {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = id;
                failure
            })
            .collect();
        response
    }

    /// Handles an SNS event: each notification by every subscription whose queue is subscribed
    /// to its topic, read as that queue reads an SNS envelope. Any failure fails the invocation,
    /// which Lambda retries (a notification has no receipt handle to give back alone).
    pub async fn handle_sns(&self, event: SnsEvent) -> Result<(), InvocationError> {
        self.handle_sns_in(event, None).await
    }

    /// [`handle_sns`](Self::handle_sns) within the invocation's X-Ray trace, the parent of each
    /// notification that carries no trace of its own.
    async fn handle_sns_in(
        &self,
        event: SnsEvent,
        invocation_trace: Option<&str>,
    ) -> Result<(), InvocationError> {
        let total = event.records.len();
        let mut failed = 0;
        for record in event.records {
            let topic = records::topic_name(&record.sns.topic_arn).to_owned();
            let readers: Vec<&EventConsumer> = self
                .consumers
                .iter()
                .filter(|consumer| {
                    consumer
                        .queue()
                        .subscriptions()
                        .iter()
                        .any(|subscription| subscription.topic().name() == topic)
                })
                .collect();
            if readers.is_empty() {
                tracing::error!(topic = %topic, "a notification of a topic no subscription of the app reads");
                failed += 1;
                continue;
            }
            let mut message = records::notification(&record);
            let traced = record
                .sns
                .message_attributes
                .contains_key(TRACEPARENT_HEADER);
            records::within_invocation(&mut message, traced, invocation_trace);
            let mut ok = true;
            for reader in readers {
                let settled = reader.handle(vec![message.clone()], Source::Topic).await;
                ok &= settled.iter().all(|settled| *settled == Settled::Done);
            }
            failed += usize::from(!ok);
        }
        if failed > 0 {
            return Err(InvocationError::Notifications { failed, total });
        }
        Ok(())
    }

    /// Handles one invocation's event, SQS or SNS, as the Runtime API hands it over: an SQS
    /// event's answer is its `batchItemFailures`, an SNS event's is empty.
    pub async fn invoke(
        &self,
        event: serde_json::Value,
        context: &InvocationContext,
    ) -> Result<serde_json::Value, InvocationError> {
        // The invocation's X-Ray trace (the runtime's `Lambda-Runtime-Trace-Id`, which it also
        // sets as `_X_AMZN_TRACE_ID`).
        let trace = context.xray_trace_id.as_deref();
        let source = event
            .pointer("/Records/0/eventSource")
            .or_else(|| event.pointer("/Records/0/EventSource"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match source.as_str() {
            "aws:sqs" => {
                let event: SqsEvent = serde_json::from_value(event)
                    .map_err(|error| InvocationError::UnknownEvent(error.to_string()))?;
                let response = self.handle_sqs_in(event, trace).await;
                Ok(serde_json::to_value(response).expect("a batch response serializes"))
            }
            "aws:sns" => {
                let event: SnsEvent = serde_json::from_value(event)
                    .map_err(|error| InvocationError::UnknownEvent(error.to_string()))?;
                self.handle_sns_in(event, trace).await?;
                Ok(serde_json::Value::Null)
            }
            other => Err(InvocationError::UnknownEvent(format!(
                "event source `{other}`"
            ))),
        }
    }

    /// Serves invocations through the Lambda Runtime API (at `AWS_LAMBDA_RUNTIME_API`, as
    /// Lambda starts a function) until the runtime ends.
    pub async fn serve(self) -> Result<(), LambdaError> {
        let host = Arc::new(self);
        let service = lambda_runtime::service_fn(
            move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
                let host = host.clone();
                async move {
                    host.invoke(event.payload, &event.context)
                        .await
                        .map_err(|error| lambda_runtime::Diagnostic {
                            error_type: "rust_stream::lambda::InvocationError".to_owned(),
                            error_message: error.to_string(),
                        })
                }
            },
        );
        lambda_runtime::run(service)
            .await
            .map_err(LambdaError::Runtime)
    }
}

/// Serves `app` as a Lambda function: starts it (its checks, its queues) at the cold start,
/// then handles each invocation's SQS or SNS event. What `App::run` is to a server.
pub async fn serve(app: Service<SqsBroker>) -> Result<(), LambdaError> {
    LambdaHost::new(app).await?.serve().await
}
