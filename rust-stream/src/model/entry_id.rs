//! A batch call's entry ids: [`EntryId`], and the ids the engine gives its own calls' entries,
//! borrowed, so that a batch of sends or deletes costs no string per entry.

use std::borrow::Cow;

/// A batch entry's id: 1–80 characters of `[A-Za-z0-9_-]`, unique within its call. The ids the
/// engine gives its own calls' entries are borrowed (`"0"` to `"9"`), so a batch costs no string
/// per entry; any other id is owned.
pub type EntryId = Cow<'static, str>;

/// The ids the engine gives a call's entries (at most 10, SQS's and SNS's limit), by index.
const ENTRY_IDS: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

/// The id of a call's entry `i`: its index, which the answer's ids are read back as.
pub(crate) fn entry_id(i: usize) -> EntryId {
    ENTRY_IDS
        .get(i)
        .map_or_else(|| EntryId::Owned(i.to_string()), |id| EntryId::Borrowed(id))
}

/// An id a service answered for an entry: borrowed when it is one the engine gives, so reading
/// an answer costs no string per entry either.
#[cfg(feature = "aws")]
pub(crate) fn answered_entry_id(id: &str) -> EntryId {
    ENTRY_IDS.iter().find(|known| **known == id).map_or_else(
        || EntryId::Owned(id.to_owned()),
        |known| EntryId::Borrowed(known),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine's ids for a call's ten entries are borrowed, any other is owned; an answered id
    /// that is one of them is read back borrowed.
    #[test]
    fn a_calls_ten_ids_cost_no_string() {
        for i in 0..10 {
            let id = entry_id(i);
            assert!(matches!(id, EntryId::Borrowed(_)), "entry {i}");
            assert_eq!(id, i.to_string());
        }
        assert!(matches!(entry_id(12), EntryId::Owned(ref id) if id == "12"));
        #[cfg(feature = "aws")]
        {
            assert!(matches!(answered_entry_id("7"), EntryId::Borrowed("7")));
            assert!(matches!(answered_entry_id("x-1"), EntryId::Owned(ref id) if id == "x-1"));
        }
    }
}
