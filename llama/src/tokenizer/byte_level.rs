//! GPT-2 "byte-level" encoding: every byte maps to one printable codepoint so
//! that byte-level BPE vocabularies can be stored as text.
//!
//! Bytes `!`..`~`, `¡`..`¬` and `®`..`ÿ` map to themselves; the remaining 68
//! bytes map, in increasing order, to U+0100, U+0101, ... (so space becomes
//! `Ġ` and newline `Ċ`). This is the table `bytes_to_unicode()` from GPT-2
//! that llama.cpp reproduces in `unicode_byte_to_utf8_map`.

use std::sync::OnceLock;

struct Tables {
    to_char: [char; 256],
    /// Indexed by codepoint; every mapped codepoint is below U+0144.
    to_byte: [Option<u8>; 0x200],
}

fn tables() -> &'static Tables {
    static T: OnceLock<Tables> = OnceLock::new();
    T.get_or_init(|| {
        let mut to_char = ['\0'; 256];
        let mut to_byte = [None; 0x200];
        let mut next = 256u32;
        for b in 0..=255u8 {
            let keeps = matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF);
            let cp = if keeps {
                u32::from(b)
            } else {
                let cp = next;
                next += 1;
                cp
            };
            // cp < 0x200 by construction, so both conversions succeed.
            let c = char::from_u32(cp).unwrap_or('\u{FFFD}');
            to_char[usize::from(b)] = c;
            to_byte[cp as usize] = Some(b);
        }
        Tables { to_char, to_byte }
    })
}

/// The codepoint that stands for `b` in byte-level text.
pub fn byte_to_char(b: u8) -> char {
    tables().to_char[usize::from(b)]
}

/// The byte a byte-level codepoint stands for, if `c` is one.
pub fn char_to_byte(c: char) -> Option<u8> {
    tables().to_byte.get(c as usize).copied().flatten()
}

/// Encode raw bytes as byte-level text.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|&b| byte_to_char(b)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_mappings() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(0), 'Ā');
        assert_eq!(byte_to_char(0xAD), 'Ń');
    }

    #[test]
    fn round_trip_all_bytes() {
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
        assert_eq!(char_to_byte('▁'), None);
    }
}
