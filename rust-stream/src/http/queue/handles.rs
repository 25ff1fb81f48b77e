//! What an `ack` or `ping` of an id acts with: the receipt handle the message was popped with.
//!
//! With an [id key](super::QueueApi::id_key) (`ID_KEY`, the same on every replica), the `_id` a
//! pop hands out carries it: `<message id>~<receipt handle>~<HMAC-SHA256 of the queue, the
//! message id and the handle, in hex>`, so any replica with the key acts on it and keeps nothing,
//! and a client cannot forge one (nor move one to another queue). Without, `_id` is the message
//! id and this server keeps the handle, until the message's expiry passes by [`HANDLE_GRACE`]
//! (swept as pops add to them), and at most [`Limits::receipt_handles`](super::Limits) of them
//! (past it, those expiring soonest are forgotten: their `ack` answers `404` and the message
//! comes back at its expiry, as if the ack had not been sent): an `ack` or `ping` must then
//! reach the server that popped.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::time::Instant;

/// How long after its expiry a popped message's receipt handle is kept for a late `ack`.
const HANDLE_GRACE: Duration = Duration::from_secs(3600);

/// Between a signed id's parts: neither a message id (a UUID) nor the MAC (hex) holds one, so
/// the handle between them may hold anything.
const SEPARATOR: char = '~';

/// An id an `ack` or `ping` named, with what it acts on.
#[derive(Debug, Clone)]
pub(super) struct Known {
    /// As the client sent it.
    pub(super) id: String,
    pub(super) message_id: String,
    pub(super) receipt_handle: String,
}

/// Receipt handles: signed into the ids, or kept by queue and message id.
#[derive(Debug, Default)]
pub(super) struct Handles {
    /// The HMAC key ids are signed with, when set.
    key: Option<Vec<u8>>,
    held: Mutex<HashMap<(String, String), Held>>,
}

#[derive(Debug)]
struct Held {
    receipt_handle: String,
    expires: Instant,
}

impl Handles {
    /// Handles signed into the ids with `key`.
    pub(super) fn signed(key: &[u8]) -> Self {
        Self {
            key: Some(key.to_vec()),
            held: Mutex::default(),
        }
    }

    /// The same key, holding no handle: a reconfigured clone's.
    pub(super) fn fresh(&self) -> Self {
        Self {
            key: self.key.clone(),
            held: Mutex::default(),
        }
    }

    /// How many receipt handles this server keeps (none with a key).
    pub(super) fn held(&self) -> usize {
        self.lock().len()
    }

    /// Whether ids carry their handles (any replica may act on them).
    pub(super) fn is_signed(&self) -> bool {
        self.key.is_some()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The ids of `popped` (message id, receipt handle) popped from `queue` for `expires`,
    /// keeping at most `most` handles when unsigned.
    pub(super) fn hand_out(
        &self,
        queue: &str,
        popped: Vec<(String, String)>,
        expires: Duration,
        most: usize,
    ) -> Vec<String> {
        if let Some(key) = &self.key {
            return popped
                .into_iter()
                .map(|(id, handle)| {
                    let mac = hex(&mac(key, queue, &id, &handle));
                    format!("{id}{SEPARATOR}{handle}{SEPARATOR}{mac}")
                })
                .collect();
        }
        let now = Instant::now();
        let mut held = self.lock();
        held.retain(|_, held| held.expires + HANDLE_GRACE > now);
        let ids = popped
            .into_iter()
            .map(|(id, receipt_handle)| {
                held.insert(
                    (queue.to_owned(), id.clone()),
                    Held {
                        receipt_handle,
                        expires: now + expires,
                    },
                );
                id
            })
            .collect();
        // Within the bound: those expiring soonest go first (past their expiry they act on a
        // message that may be another's now; before it, they are the nearest to coming back
        // anyway).
        let over = held.len().saturating_sub(most);
        if over > 0 {
            let mut by_expiry: Vec<(Instant, (String, String))> = held
                .iter()
                .map(|(key, held)| (held.expires, key.clone()))
                .collect();
            by_expiry.select_nth_unstable_by_key(over - 1, |(expires, _)| *expires);
            for (_, key) in by_expiry.into_iter().take(over) {
                held.remove(&key);
            }
            tracing::warn!(
                forgotten = over,
                most,
                "receipt handles forgotten to stay within MAX_RECEIPT_HANDLES: acks of those \
                 messages answer 404 and they come back at their expiry; set ID_KEY to keep none"
            );
        }
        ids
    }

    /// What `ids` act on in `queue`, and the ids that act on nothing (not handed out by this
    /// server, acked already, or not signed with the key).
    pub(super) fn of(&self, queue: &str, ids: &[String]) -> (Vec<Known>, Vec<String>) {
        let mut known = Vec::new();
        let mut unknown = Vec::new();
        if let Some(key) = &self.key {
            for id in ids {
                match verified(key, queue, id) {
                    Some((message_id, receipt_handle)) => known.push(Known {
                        id: id.clone(),
                        message_id,
                        receipt_handle,
                    }),
                    None => unknown.push(id.clone()),
                }
            }
            return (known, unknown);
        }
        let held = self.lock();
        for id in ids {
            match held.get(&(queue.to_owned(), id.clone())) {
                Some(entry) => known.push(Known {
                    id: id.clone(),
                    message_id: id.clone(),
                    receipt_handle: entry.receipt_handle.clone(),
                }),
                None => unknown.push(id.clone()),
            }
        }
        (known, unknown)
    }

    /// Forgets the handles of `acked`.
    pub(super) fn forget<'a>(&self, queue: &str, acked: impl IntoIterator<Item = &'a Known>) {
        if self.is_signed() {
            return;
        }
        let mut held = self.lock();
        for known in acked {
            held.remove(&(queue.to_owned(), known.message_id.clone()));
        }
    }

    /// Marks `pinged` as expiring `expires` from now.
    pub(super) fn extended<'a>(
        &self,
        queue: &str,
        pinged: impl IntoIterator<Item = &'a Known>,
        expires: Duration,
    ) {
        if self.is_signed() {
            return;
        }
        let until = Instant::now() + expires;
        let mut held = self.lock();
        for known in pinged {
            if let Some(entry) = held.get_mut(&(queue.to_owned(), known.message_id.clone())) {
                entry.expires = until;
            }
        }
    }
}

/// The message id and receipt handle a signed `id` carries, when its MAC is the key's for
/// `queue`.
fn verified(key: &[u8], queue: &str, id: &str) -> Option<(String, String)> {
    let (message_id, rest) = id.split_once(SEPARATOR)?;
    let (handle, given) = rest.rsplit_once(SEPARATOR)?;
    let expected = hex(&mac(key, queue, message_id, handle));
    // Compared whole, byte by byte, so the time taken says nothing of how much matched.
    let same = expected.len() == given.len()
        && expected
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    same.then(|| (message_id.to_owned(), handle.to_owned()))
}

/// HMAC-SHA256 (RFC 2104) of the queue, the message id and the handle, each length-prefixed so
/// no two triples read alike.
fn mac(key: &[u8], queue: &str, message_id: &str, handle: &str) -> [u8; 32] {
    let mut message = Vec::with_capacity(queue.len() + message_id.len() + handle.len() + 24);
    for part in [queue, message_id, handle] {
        message.extend_from_slice(&(part.len() as u64).to_be_bytes());
        message.extend_from_slice(part.as_bytes());
    }
    hmac_sha256(key, &message)
}

/// HMAC-SHA256 (RFC 2104) over the `sha2` the crate already uses.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|k| k ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_answers_rfc_4231s_test_cases() {
        // Test case 2 (a short key) and 6 (a key longer than the block).
        assert_eq!(
            hex(&hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn unsigned_handles_past_their_bound_forget_those_expiring_soonest() {
        let handles = Handles::default();
        let pop = |from: usize, expires: u64| {
            handles.hand_out(
                "jobs",
                (from..from + 10)
                    .map(|n| (format!("m-{n}"), format!("h-{n}")))
                    .collect(),
                Duration::from_secs(expires),
                25,
            )
        };
        let long = pop(0, 600);
        let short = pop(10, 30);
        let later = pop(20, 300);
        assert_eq!(handles.held(), 25);
        // The 5 forgotten were the soonest to expire: the 30 s ones.
        assert_eq!(handles.of("jobs", &long).0.len(), 10);
        assert_eq!(handles.of("jobs", &later).0.len(), 10);
        assert_eq!(handles.of("jobs", &short).1.len(), 5);
        for n in 0..100 {
            pop(100 + n * 10, 60);
            assert!(handles.held() <= 25);
        }
    }

    #[test]
    fn a_signed_id_acts_on_its_queue_only_and_cannot_be_forged() {
        let handles = Handles::signed(b"a key the replicas share, 32 bytes");
        let ids = handles.hand_out(
            "jobs",
            vec![("m-1".into(), "handle~with/odd+chars=".into())],
            Duration::from_secs(30),
            1,
        );
        let (known, unknown) = handles.of("jobs", &ids);
        assert!(unknown.is_empty());
        assert_eq!(known[0].message_id, "m-1");
        assert_eq!(known[0].receipt_handle, "handle~with/odd+chars=");
        // Another replica with the same key reads it; one with another key, or another queue,
        // does not.
        let replica = Handles::signed(b"a key the replicas share, 32 bytes");
        assert_eq!(replica.of("jobs", &ids).0.len(), 1);
        assert_eq!(Handles::signed(b"another key").of("jobs", &ids).1, ids);
        assert_eq!(handles.of("payments", &ids).1, ids);
        let forged = ids[0].replace("handle", "forged");
        assert_eq!(
            handles.of("jobs", std::slice::from_ref(&forged)).1,
            vec![forged]
        );
        assert_eq!(
            handles.of("jobs", &["m-1".to_owned()]).1,
            vec!["m-1".to_owned()]
        );
    }
}
