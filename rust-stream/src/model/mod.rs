//! Amazon SQS and SNS as data: the ground floor every other layer stands on.
//!
//! - [`error`]: what a service answers when it refuses ([`ErrorKind`], [`TransportError`]).
//! - [`wire`]: requests and responses, shaped like the SQS API.
//! - [`rules`]: the limits and checks both backends enforce alike.
//! - [`queue`]: a queue as an app declares it ([`SqsQueue`]), the topics it is subscribed to
//!   among its settings.
//! - [`sns_topic`]: a topic as an app declares it ([`SnsTopic`]), and a queue's subscription to a
//!   topic ([`TopicSubscription`]: raw delivery, filter policy).
//! - [`destination`]: where a publisher sends, a queue or a topic ([`Destination`]), and the
//!   rules a message for either is checked against before the network.
//! - `config`: what is wrong with a declaration ([`ConfigError`]), found before any network call.
//! - [`filter_policy`]: SNS subscription filter policies, parsed, checked against SNS's limits
//!   and matched against a message's attributes or JSON body.
//! - `naming`: the prefix and suffix a broker adds to every queue and topic name, applied in one
//!   place.
//! - `declare`: the declarations of a broker's apps and publishers, merged per queue and per
//!   topic.
//! - [`topic`]: SNS topics and publishes, shaped like the SNS API, and SNS's limits and rules.
//! - [`subscription`]: a topic's and a subscription's attributes and a `Subscribe` request, as
//!   SNS's management calls shape them, with their checks.
//! - [`envelope`]: the JSON notification SNS delivers to a queue without raw message delivery,
//!   built and parsed, and how a raw delivery carries a publish's attributes.
//! - [`headers`]: the message attributes rust-stream itself writes and reads.
//! - [`flow`]: limits that act on receiving (rate limits, per-key in-flight limits,
//!   backpressure), declared on a queue or a publisher; the engine's intake applies them.
//! - `base64`: the text form of binary attribute values in an envelope.
//!
//! Nothing here calls a service or runs a task.

pub(crate) mod base64;
pub(crate) mod config;
pub(crate) mod declare;
pub mod destination;
pub mod entry_id;
pub mod envelope;
pub mod error;
pub mod filter_policy;
pub mod flow;
pub mod headers;
pub mod large_payload;
pub(crate) mod naming;
pub mod queue;
pub mod rules;
pub mod sns_topic;
pub mod subscription;
pub mod topic;
pub mod wire;
pub(crate) mod xray;

pub use destination::Destination;
pub use error::{BatchFailure, ErrorKind, TransportError};
pub use queue::{ConfigError, ConfigErrors, SqsQueue};
pub use sns_topic::{SnsTopic, TopicSubscription};
