//! How message bodies become values and back: the [`Codec`] trait and [`Json`], the default.
//!
//! A codec decodes the message a handler reads: the SQS body, or, on a queue with an enveloped
//! SNS subscription, the `Message` of the notification envelope the body is (the engine unwraps
//! it first; see [`Context::sns`](crate::Context::sns)).
//!
//! A body that does not decode is never deleted: the engine logs the [`DecodeError`] with the
//! message id and dead-letters the message when the subscription has a dead-letter queue, or
//! retries it so the queue's redrive policy can act. An SNS envelope that cannot be read (no
//! `Message`, an attribute SNS would not write) is a [`DecodeError`] too, whose reason names the
//! field.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Turns message bodies into values and values into bodies.
pub trait Codec: Clone + Send + Sync + 'static {
    /// Decodes a body.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] when the body is not a valid `T`.
    fn decode<T: DeserializeOwned>(&self, body: &str) -> Result<T, DecodeError>;

    /// Encodes a value as a body.
    ///
    /// # Errors
    ///
    /// [`EncodeError`] when the value cannot be written (a map with non-string keys, for JSON).
    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<String, EncodeError>;

    /// The media type of the bodies, for the AsyncAPI document (`application/json` for [`Json`]);
    /// `None`, the default, leaves it unsaid.
    fn content_type(&self) -> Option<&'static str> {
        None
    }
}

/// JSON via serde: the default codec.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json;

impl Codec for Json {
    fn decode<T: DeserializeOwned>(&self, body: &str) -> Result<T, DecodeError> {
        serde_json::from_str(body).map_err(|error| DecodeError {
            type_name: std::any::type_name::<T>(),
            reason: error.to_string(),
        })
    }

    fn encode<T: Serialize + ?Sized>(&self, value: &T) -> Result<String, EncodeError> {
        serde_json::to_string(value).map_err(|error| EncodeError {
            type_name: std::any::type_name::<T>(),
            reason: error.to_string(),
        })
    }

    fn content_type(&self) -> Option<&'static str> {
        Some("application/json")
    }
}

/// A body that is not a valid value of the handler's message type.
#[derive(Debug, Clone, thiserror::Error)]
#[error("body is not a valid `{type_name}`: {reason}")]
pub struct DecodeError {
    /// The type the body was decoded as.
    pub type_name: &'static str,
    /// What the codec found wrong (for JSON, serde's message with line and column).
    pub reason: String,
}

/// A value that cannot be written as a body.
#[derive(Debug, Clone, thiserror::Error)]
#[error("`{type_name}` cannot be encoded: {reason}")]
pub struct EncodeError {
    /// The type of the value.
    pub type_name: &'static str,
    /// What the codec found wrong.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Deserialize, serde::Serialize)]
    struct Order {
        id: u64,
    }

    #[test]
    fn json_round_trips_and_names_the_type_on_failure() {
        let body = Json.encode(&Order { id: 7 }).unwrap();
        assert_eq!(Json.decode::<Order>(&body).unwrap(), Order { id: 7 });
        let error = Json.decode::<Order>(r#"{"id":"seven"}"#).unwrap_err();
        assert!(error.to_string().contains("Order"), "{error}");
        assert!(error.reason.contains("line 1"), "{error}");
    }
}
