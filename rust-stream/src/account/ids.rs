//! The account's small identities: a message's key in its queue, its id, the account's clock
//! ([`Now`], [`Moment`]) and the account id. Below every other file of the account.

use std::time::Duration;

use tokio::time::Instant;

/// The account id the account's ARNs, URLs and `SenderId`s name, as local SQS stand-ins use.
pub(super) const ACCOUNT_ID: &str = "000000000000";

/// A message's place in its queue: storage order, and on FIFO queues its sequence number.
pub(super) type Key = u64;

/// The current time on both clocks the account keeps.
#[derive(Debug, Clone, Copy)]
pub(super) struct Now {
    /// Tokio's clock, which tests can pause and advance.
    pub(super) instant: Instant,
    /// The same, as the account's queues keep it.
    pub(super) moment: Moment,
    /// Milliseconds since the Unix epoch, for timestamps shown to callers.
    pub(super) epoch_ms: u64,
}

/// A point on tokio's clock as nanoseconds since the account started: half the size of an
/// `Instant`, and a queue keeps several per message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct Moment(u64);

impl Moment {
    pub(super) fn since(origin: Instant, at: Instant) -> Self {
        Self(u64::try_from(at.saturating_duration_since(origin).as_nanos()).unwrap_or(u64::MAX))
    }

    pub(super) fn to_instant(self, origin: Instant) -> Instant {
        origin + Duration::from_nanos(self.0)
    }

    pub(super) fn saturating_since(self, earlier: Self) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Moment {
    type Output = Self;

    fn add(self, duration: Duration) -> Self {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        Self(self.0.saturating_add(nanos))
    }
}

/// A message id: a random (version 4) UUID, kept as its 128 bits and written out when a send or
/// a receive returns it. Two words, not a `u128`, so a stored message stays 8-byte aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MessageId([u64; 2]);

impl MessageId {
    pub(super) fn random() -> Self {
        // fastrand (per-thread wyrand, seeded from the OS) instead of a getrandom call per message.
        let uuid = uuid::Builder::from_random_bytes(fastrand::u128(..).to_le_bytes()).into_uuid();
        let bits = uuid.as_u128();
        Self([(bits >> 64) as u64, bits as u64])
    }

    pub(super) fn to_uuid(self) -> uuid::Uuid {
        uuid::Uuid::from_u128((u128::from(self.0[0]) << 64) | u128::from(self.0[1]))
    }

    pub(super) fn text(self) -> String {
        let mut buffer = uuid::Uuid::encode_buffer();
        self.to_uuid()
            .hyphenated()
            .encode_lower(&mut buffer)
            .to_owned()
    }
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_uuid().hyphenated().fmt(f)
    }
}
