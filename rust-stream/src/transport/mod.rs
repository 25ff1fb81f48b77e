//! The seam between the engine and a queue service: the [`Transport`] trait, its erased form that
//! a broker shares, [`layer`], which makes a transport that changes a few calls of another out of
//! hooks, and [`meter`], the hooks that count and time every call of a broker.
//!
//! A transport speaks in the SQS words of [`model`](crate::model): its requests, responses and
//! errors are re-exported here, so an implementation imports one module.

use std::future::Future;
use std::sync::Arc;

pub use crate::model::error::{BatchFailure, ErrorKind, TransportError};
pub use crate::model::wire::*;

pub mod layer;
pub mod meter;

/// What the engine needs from a queue service. The in-process
/// [`Account`](crate::account::Account) and the aws-sdk transport answer alike, with the same
/// [`ErrorKind`]s, so everything above this trait is tested once, on the account.
///
/// Every method mirrors the SQS action of the same name.
pub trait Transport: Send + Sync + 'static {
    /// `GetQueueUrl`.
    fn get_queue_url(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<String, TransportError>> + Send;

    /// `CreateQueue`: creates the queue or returns the URL of an identical one.
    fn create_queue(
        &self,
        name: &str,
        attributes: QueueAttributes,
    ) -> impl Future<Output = Result<String, TransportError>> + Send;

    /// `GetQueueAttributes`.
    fn get_queue_attributes(
        &self,
        queue_url: &str,
        names: &[&str],
    ) -> impl Future<Output = Result<QueueAttributes, TransportError>> + Send;

    /// `SendMessageBatch`.
    fn send_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<SendBatchEntry>,
    ) -> impl Future<Output = Result<BatchResult<SentMessage>, TransportError>> + Send;

    /// `ReceiveMessage`.
    fn receive_message(
        &self,
        queue_url: &str,
        request: ReceiveMessage,
    ) -> impl Future<Output = Result<Vec<ReceivedMessage>, TransportError>> + Send;

    /// `DeleteMessageBatch`.
    fn delete_message_batch(
        &self,
        queue_url: &str,
        entries: Vec<DeleteEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send;

    /// `ChangeMessageVisibilityBatch`.
    fn change_message_visibility_batch(
        &self,
        queue_url: &str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> impl Future<Output = Result<BatchResult<()>, TransportError>> + Send;

    /// Whether a `ReceiveMessage` dropped before it answers has taken no message. Over a network
    /// it may have: the server still hands messages to the abandoned call, and they stay
    /// invisible for their visibility timeout. So by default the engine lets a receive in flight
    /// at shutdown finish (within the long poll) and releases what it got; a backend that takes
    /// messages only as it answers says `true` here, and shutdown drops the wait instead.
    fn abandoned_receive_takes_nothing(&self) -> bool {
        false
    }

    /// The longest one attempt of a call may take before it is given up, if the transport bounds
    /// it: a subscription's long poll must be shorter, or every receive is cut and retried.
    fn attempt_timeout(&self) -> Option<std::time::Duration> {
        None
    }
}

pub use crate::task::BoxFuture;

/// [`Transport`] behind a pointer, so a broker holds either backend as one type; every
/// [`Transport`] is one.
pub(crate) trait DynTransport: Send + Sync + 'static {
    fn get_queue_url<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<String, TransportError>>;
    fn create_queue<'a>(
        &'a self,
        name: &'a str,
        attributes: QueueAttributes,
    ) -> BoxFuture<'a, Result<String, TransportError>>;
    fn get_queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
        names: &'a [&'a str],
    ) -> BoxFuture<'a, Result<QueueAttributes, TransportError>>;
    fn send_message_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<SendBatchEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<SentMessage>, TransportError>>;
    fn receive_message<'a>(
        &'a self,
        queue_url: &'a str,
        request: ReceiveMessage,
    ) -> BoxFuture<'a, Result<Vec<ReceivedMessage>, TransportError>>;
    fn delete_message_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<DeleteEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>>;
    fn change_message_visibility_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>>;
    fn abandoned_receive_takes_nothing(&self) -> bool;
    fn attempt_timeout(&self) -> Option<std::time::Duration>;
}

impl<T: Transport> DynTransport for T {
    fn get_queue_url<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<String, TransportError>> {
        Box::pin(Transport::get_queue_url(self, name))
    }
    fn create_queue<'a>(
        &'a self,
        name: &'a str,
        attributes: QueueAttributes,
    ) -> BoxFuture<'a, Result<String, TransportError>> {
        Box::pin(Transport::create_queue(self, name, attributes))
    }
    fn get_queue_attributes<'a>(
        &'a self,
        queue_url: &'a str,
        names: &'a [&'a str],
    ) -> BoxFuture<'a, Result<QueueAttributes, TransportError>> {
        Box::pin(Transport::get_queue_attributes(self, queue_url, names))
    }
    fn send_message_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<SendBatchEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<SentMessage>, TransportError>> {
        Box::pin(Transport::send_message_batch(self, queue_url, entries))
    }
    fn receive_message<'a>(
        &'a self,
        queue_url: &'a str,
        request: ReceiveMessage,
    ) -> BoxFuture<'a, Result<Vec<ReceivedMessage>, TransportError>> {
        Box::pin(Transport::receive_message(self, queue_url, request))
    }
    fn delete_message_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<DeleteEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>> {
        Box::pin(Transport::delete_message_batch(self, queue_url, entries))
    }
    fn change_message_visibility_batch<'a>(
        &'a self,
        queue_url: &'a str,
        entries: Vec<ChangeVisibilityEntry>,
    ) -> BoxFuture<'a, Result<BatchResult<()>, TransportError>> {
        Box::pin(Transport::change_message_visibility_batch(
            self, queue_url, entries,
        ))
    }
    fn abandoned_receive_takes_nothing(&self) -> bool {
        Transport::abandoned_receive_takes_nothing(self)
    }
    fn attempt_timeout(&self) -> Option<std::time::Duration> {
        Transport::attempt_timeout(self)
    }
}

/// The transport a broker and its engine share.
pub(crate) type SharedTransport = Arc<dyn DynTransport>;
