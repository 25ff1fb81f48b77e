//! A queue's settable attributes ([`Config`]), read from and written to SQS attribute maps.

use std::collections::BTreeMap;

use crate::model::rules::{self, fail, DedupScope, ErrorKind, QueueAttribute, RedrivePolicy};
use crate::transport::TransportError;

/// A queue's settable attributes.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Config {
    pub(super) visibility_timeout: u32,
    pub(super) delay_seconds: u32,
    pub(super) wait_time_seconds: u32,
    pub(super) retention_seconds: u32,
    pub(super) maximum_message_size: u32,
    pub(super) fifo: bool,
    pub(super) content_based_dedup: bool,
    pub(super) dedup_scope: DedupScope,
    pub(super) per_group_throughput: bool,
    pub(super) redrive: Option<RedrivePolicy>,
    pub(super) opaque: BTreeMap<String, String>,
}

impl Config {
    pub(super) fn new(fifo: bool) -> Self {
        Self {
            visibility_timeout: 30,
            delay_seconds: 0,
            wait_time_seconds: 0,
            retention_seconds: 345_600,
            maximum_message_size: rules::MAX_MESSAGE_SIZE as u32,
            fifo,
            content_based_dedup: false,
            dedup_scope: DedupScope::Queue,
            per_group_throughput: false,
            redrive: None,
            opaque: BTreeMap::new(),
        }
    }

    /// Applies one parsed attribute; refuses FIFO-only attributes on a standard queue.
    pub(super) fn apply(
        &mut self,
        name: &str,
        attribute: QueueAttribute,
    ) -> Result<(), TransportError> {
        let fifo_only = matches!(
            attribute,
            QueueAttribute::ContentBasedDeduplication(_)
                | QueueAttribute::DeduplicationScope(_)
                | QueueAttribute::FifoThroughputLimit { .. }
        );
        if fifo_only && !self.fifo {
            return fail(
                ErrorKind::InvalidAttributeName,
                format!("attribute {name} applies only to FIFO queues (names ending in `.fifo`)"),
            );
        }
        match attribute {
            QueueAttribute::VisibilityTimeout(v) => self.visibility_timeout = v,
            QueueAttribute::DelaySeconds(v) => self.delay_seconds = v,
            QueueAttribute::ReceiveMessageWaitTimeSeconds(v) => self.wait_time_seconds = v,
            QueueAttribute::MessageRetentionPeriod(v) => self.retention_seconds = v,
            QueueAttribute::MaximumMessageSize(v) => self.maximum_message_size = v,
            QueueAttribute::FifoQueue(fifo) => {
                if fifo != self.fifo {
                    return fail(
                        ErrorKind::InvalidAttributeValue,
                        "FifoQueue is fixed when a queue is created; create a new queue (a FIFO queue's name ends in `.fifo`)",
                    );
                }
            }
            QueueAttribute::ContentBasedDeduplication(v) => self.content_based_dedup = v,
            QueueAttribute::DeduplicationScope(v) => self.dedup_scope = v,
            QueueAttribute::FifoThroughputLimit { per_message_group } => {
                self.per_group_throughput = per_message_group
            }
            QueueAttribute::RedrivePolicy(policy) => self.redrive = policy,
            QueueAttribute::Opaque(value) => {
                self.opaque.insert(name.to_owned(), value);
            }
        }
        Ok(())
    }

    /// Checks rules that span attributes.
    pub(super) fn check(&self) -> Result<(), TransportError> {
        if self.per_group_throughput && self.dedup_scope != DedupScope::MessageGroup {
            return fail(
                ErrorKind::InvalidAttributeValue,
                "FifoThroughputLimit perMessageGroupId needs DeduplicationScope messageGroup; set both",
            );
        }
        Ok(())
    }

    /// The settable attributes as SQS reports them.
    pub(super) fn attributes(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut put = |name: &str, value: String| {
            out.insert(name.to_owned(), value);
        };
        put("VisibilityTimeout", self.visibility_timeout.to_string());
        put("DelaySeconds", self.delay_seconds.to_string());
        put(
            "ReceiveMessageWaitTimeSeconds",
            self.wait_time_seconds.to_string(),
        );
        put("MessageRetentionPeriod", self.retention_seconds.to_string());
        put("MaximumMessageSize", self.maximum_message_size.to_string());
        if self.fifo {
            put("FifoQueue", "true".to_owned());
            put(
                "ContentBasedDeduplication",
                self.content_based_dedup.to_string(),
            );
            put(
                "DeduplicationScope",
                match self.dedup_scope {
                    DedupScope::Queue => "queue",
                    DedupScope::MessageGroup => "messageGroup",
                }
                .to_owned(),
            );
            put(
                "FifoThroughputLimit",
                if self.per_group_throughput {
                    "perMessageGroupId"
                } else {
                    "perQueue"
                }
                .to_owned(),
            );
        }
        if let Some(policy) = &self.redrive {
            put("RedrivePolicy", policy.to_json());
        }
        for (name, value) in &self.opaque {
            put(name, value.clone());
        }
        out
    }
}
