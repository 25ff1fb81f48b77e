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

/// Whole milliseconds since the account started; the account adds its start's wall-clock time
/// when it shows them.
pub(super) type Milliseconds = u64;

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

    /// Whole milliseconds since the account started: what its timestamps count.
    pub(super) fn millis(self) -> Milliseconds {
        self.0 / 1_000_000
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

/// A message id: a version 4 UUID, kept as its 128 bits and written out when a send or a receive
/// returns it. Two words, not a `u128`, so that it stays 8-byte aligned where it is stored.
///
/// A queue does not store its messages' ids: it derives each from the message's key
/// ([`MessageIds::of`]), so a queued message costs 16 bytes less; only a message moved to a
/// dead-letter queue, which keeps the id it had, carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct MessageId([u64; 2]);

impl MessageId {
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

/// How one queue turns its keys into message ids: version 4 UUIDs that look random, distinct for
/// every key of the queue, and (by random salts) for every queue of every account with a
/// probability as good as 58 random bits.
#[derive(Debug, Clone, Copy)]
pub(super) struct MessageIds {
    /// The first 8 bytes of every id of the queue, version nibble set.
    high: u64,
    /// Mixed into the key before the permutation.
    salt: u64,
}

/// The bits of a UUID's last 8 bytes that are not its variant.
const LOW_BITS: u64 = (1 << 62) - 1;

impl MessageIds {
    /// The ids of a new queue: random salts, so no two queues (or accounts) share them.
    pub(super) fn random() -> Self {
        let high = fastrand::u64(..);
        Self {
            // Version 4: the 13th hexadecimal digit is 4.
            high: (high & !0xf000) | 0x4000,
            salt: fastrand::u64(..),
        }
    }

    /// The id of the message under `key`: the key through a permutation of 62 bits (an xorshift
    /// and odd multiplications, each invertible modulo 2^62), so no two keys share an id.
    pub(super) fn of(self, key: Key) -> MessageId {
        let mut x = (key ^ self.salt) & LOW_BITS;
        x ^= x >> 31;
        x = x.wrapping_mul(0x7fb5_d329_728e_a185) & LOW_BITS;
        x ^= x >> 27;
        x = x.wrapping_mul(0x81da_def4_bc2d_d44d) & LOW_BITS;
        x ^= x >> 33;
        // Variant 1 (RFC 4122): the 17th hexadecimal digit is 8 to b.
        MessageId([self.high, x | (1 << 63)])
    }
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.to_uuid().hyphenated().fmt(f)
    }
}
