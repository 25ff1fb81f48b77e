//! `FilterPolicyScope`: what a subscription's filter policy is matched against.

use std::fmt;
use std::str::FromStr;

use super::error::FilterPolicyError;

/// What a subscription's filter policy is matched against: SNS's `FilterPolicyScope`
/// subscription attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FilterPolicyScope {
    /// The message attributes (`MessageAttributes`, SNS's default). Keys do not nest.
    #[default]
    MessageAttributes,
    /// The properties of a JSON object message body (`MessageBody`). Keys may nest.
    MessageBody,
}

impl FilterPolicyScope {
    /// The scope's SNS name, as the `FilterPolicyScope` attribute spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MessageAttributes => "MessageAttributes",
            Self::MessageBody => "MessageBody",
        }
    }
}

impl fmt::Display for FilterPolicyScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FilterPolicyScope {
    type Err = FilterPolicyError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "MessageAttributes" => Ok(Self::MessageAttributes),
            "MessageBody" => Ok(Self::MessageBody),
            other => Err(FilterPolicyError::UnknownScope(other.to_owned())),
        }
    }
}
