//! The names a service uses, in one import: `use rust_stream::prelude::*;`.

pub use std::future::{ready, Future};

pub use crate::app::{App, AppInfo, RustStream};
pub use crate::handler::context::Context;
pub use crate::handler::Handle;
pub use crate::model::{SnsTopic, TopicSubscription};
pub use crate::outcome::HandlerOutcome;
pub use crate::sqs::{SqsBroker, SqsQueue};
pub use crate::subscriber::subscriber;
#[cfg(feature = "macros")]
pub use rust_stream_macros::subscriber;
