//! What the simulated mapping invokes: a [`Function`], in process ([`LambdaHost`]) or through
//! the Runtime API (`runtime_api.rs`).

use crate::lambda::{InvocationContext, LambdaHost};
use crate::task::BoxFuture;

/// A Lambda function, as the mapping invokes it: an event in, its answer (or its error) out.
pub trait Function: Send + Sync {
    /// Invokes the function with `event`: its answer, or the error it reported.
    fn invoke(&self, event: serde_json::Value) -> BoxFuture<'_, Result<serde_json::Value, String>>;
}

impl Function for LambdaHost {
    fn invoke(&self, event: serde_json::Value) -> BoxFuture<'_, Result<serde_json::Value, String>> {
        Box::pin(async move {
            let mut context = InvocationContext::default();
            context.request_id = uuid::Uuid::new_v4().to_string();
            LambdaHost::invoke(self, event, &context)
                .await
                .map_err(|error| error.to_string())
        })
    }
}
