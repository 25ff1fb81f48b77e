//! The numbers SNS holds a filter policy to ("Filter policy constraints").

/// Largest filter policy SNS accepts, in bytes of its JSON text (256 KB).
pub const MAX_POLICY_SIZE: usize = 256 * 1024;
/// Most keys a filter policy may hold. Keys whose value is a nested object are not counted, only
/// those that list values; for a policy with `"$or"`, each alternative is counted on its own.
pub const MAX_KEYS: usize = 5;
/// Most value combinations a filter policy may hold (SNS's "filter policy complexity").
pub const MAX_COMBINATIONS: u64 = 150;
/// Largest magnitude of a number in a filter policy (10^9).
pub const MAX_NUMBER: f64 = 1_000_000_000.0;
/// Digits after the decimal point that numeric matching takes into account.
pub const NUMBER_DECIMALS: i32 = 5;
