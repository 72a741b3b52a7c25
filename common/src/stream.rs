//! Streaming token pieces as text: pieces are bytes, and a UTF-8 character
//! may be split across tokens (byte-fallback and byte-level BPE tokens), so
//! bytes are held back until they complete a character.

/// Accumulates piece bytes and releases the longest valid UTF-8 prefix.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// An empty stream.
    pub fn new() -> Utf8Stream {
        Utf8Stream::default()
    }

    /// Add `bytes`; return the text that is complete now. A byte sequence
    /// that can never become valid UTF-8 is released as U+FFFD; an
    /// incomplete sequence at the end is kept for the next call.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(
                        std::str::from_utf8(&self.pending[..valid]).expect("checked valid"),
                    );
                    match e.error_len() {
                        None => {
                            // incomplete character at the end: keep it
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + n);
                        }
                    }
                }
            }
        }
    }

    /// Release whatever is left (an incomplete character becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_wait_for_their_end() {
        let mut s = Utf8Stream::new();
        let e = "é€😀".as_bytes();
        assert_eq!(s.push(&e[..1]), "");
        assert_eq!(s.push(&e[1..3]), "é");
        assert_eq!(s.push(&e[3..5]), "€");
        assert_eq!(s.push(&e[5..8]), "");
        assert_eq!(s.push(&e[8..]), "😀");
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(b"a\xffb"), "a\u{fffd}b");
        assert_eq!(s.push(b"\xe2\x82"), "");
        assert_eq!(s.push(b"x"), "\u{fffd}x");
        assert_eq!(s.push(b"\xf0\x9f"), "");
        assert_eq!(s.finish(), "\u{fffd}");
    }
}
