//! Base64 (RFC 4648, standard alphabet, padded), the text form AWS gives binary values in JSON: an
//! SNS envelope carries a `Binary` message attribute's bytes so. Small enough to keep here rather
//! than take a crate for two functions.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `bytes` as padded base64 text.
pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let triple = chunk.iter().enumerate().fold(0u32, |acc, (at, byte)| {
            acc | u32::from(*byte) << (16 - 8 * at)
        });
        // A chunk of n bytes fills n + 1 sextets; the rest of the four are padding.
        for at in 0..4 {
            if at <= chunk.len() {
                let sextet = (triple >> (18 - 6 * at)) & 0x3f;
                text.push(char::from(ALPHABET[sextet as usize]));
            } else {
                text.push('=');
            }
        }
    }
    text
}

/// The bytes of padded base64 `text`; `None` when it is not that (a length not a multiple of 4, a
/// character outside the alphabet, padding anywhere but at the end, or bits left over in the
/// last character, which a canonical encoder never sets).
pub(crate) fn decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let padding = text.iter().rev().take_while(|byte| **byte == b'=').count();
    if padding > 2 {
        return None;
    }
    let mut bytes = Vec::with_capacity(text.len() / 4 * 3);
    let last_chunk = text.len() / 4;
    for (index, chunk) in text.chunks(4).enumerate() {
        let pad = if index + 1 == last_chunk { padding } else { 0 };
        let mut quad = 0u32;
        for (at, symbol) in chunk[..4 - pad].iter().enumerate() {
            quad |= u32::from(sextet(*symbol)?) << (18 - 6 * at);
        }
        let kept = 3 - pad;
        // A canonical encoder leaves the bits past the last whole byte at zero.
        if quad & ((1 << (8 * (3 - kept))) - 1) != 0 {
            return None;
        }
        for at in 0..kept {
            bytes.push((quad >> (16 - 8 * at)) as u8);
        }
    }
    Some(bytes)
}

fn sextet(symbol: u8) -> Option<u8> {
    Some(match symbol {
        b'A'..=b'Z' => symbol - b'A',
        b'a'..=b'z' => symbol - b'a' + 26,
        b'0'..=b'9' => symbol - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_4648_vectors_encode_and_decode() {
        for (bytes, text) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(bytes.as_bytes()), text);
            assert_eq!(decode(text).as_deref(), Some(bytes.as_bytes()), "{text}");
        }
    }

    #[test]
    fn every_byte_value_survives_a_round_trip() {
        let bytes: Vec<u8> = (0..=255).chain((0..=255).rev()).collect();
        for len in 0..bytes.len() {
            assert_eq!(
                decode(&encode(&bytes[..len])).as_deref(),
                Some(&bytes[..len])
            );
        }
        assert_eq!(encode(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn text_that_is_not_padded_base64_is_refused() {
        for bad in [
            "Zg", "Zg=", "Z===", "Zh==", "Zm9v!A==", "=Zm9", "Zg==Zg==", "Zm 9",
        ] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
