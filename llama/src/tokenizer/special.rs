//! Special-token partitioning (llama.cpp's `tokenizer_st_partition`): before
//! the model's tokenizer runs, occurrences of special tokens' texts are cut
//! out of the input and emitted as those tokens directly.
//!
//! Tokens are tried longest text first; each one splits every remaining text
//! fragment at all its non-overlapping occurrences. Control and unknown
//! tokens take part only when `parse_special` is set; user-defined tokens
//! always do. Tokens with the LSTRIP/RSTRIP attribute swallow ASCII
//! whitespace on that side.

use super::vocab::{TokenAttr, TokenId, Vocab};

/// A piece of input: raw text (a byte range of the input) or a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(std::ops::Range<usize>),
    Token(TokenId),
}

/// C `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Split `text` into fragments.
pub(crate) fn partition(vocab: &Vocab, text: &str, parse_special: bool) -> Vec<Fragment> {
    let mut frags = Vec::new();
    if text.is_empty() {
        return frags;
    }
    frags.push(Fragment::Text(0..text.len()));
    let bytes = text.as_bytes();
    for &id in &vocab.special_cache {
        let Some(tok) = vocab.token(id) else { continue };
        if !parse_special && tok.attr.has(TokenAttr::CONTROL | TokenAttr::UNKNOWN) {
            continue;
        }
        let needle = tok.text.as_str();
        if needle.is_empty() {
            continue;
        }
        let lstrip = tok.attr.has(TokenAttr::LSTRIP);
        let rstrip = tok.attr.has(TokenAttr::RSTRIP);
        let mut next = Vec::with_capacity(frags.len());
        for frag in frags {
            let Fragment::Text(range) = frag else {
                next.push(frag);
                continue;
            };
            let (mut pos, end) = (range.start, range.end);
            loop {
                let Some(found) = text[pos..end].find(needle) else {
                    if pos < end {
                        next.push(Fragment::Text(pos..end));
                    }
                    break;
                };
                let m = pos + found;
                let mut left_end = m;
                if lstrip {
                    while left_end > pos && is_c_space(bytes[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > pos {
                    next.push(Fragment::Text(pos..left_end));
                }
                next.push(Fragment::Token(id));
                pos = m + needle.len();
                if rstrip {
                    while pos < end && is_c_space(bytes[pos]) {
                        pos += 1;
                    }
                }
                if pos >= end {
                    break;
                }
            }
        }
        frags = next;
    }
    frags
}
