//! The synthetic models' vocabulary: byte-level BPE as GPT-2 has it
//! (`tokenizer.ggml.model = "gpt2"`, `pre = "gpt-2"`): the 256 byte tokens,
//! merges learned deterministically from a small embedded English text, a
//! few special tokens, and optional padding up to a requested size.

use std::collections::HashMap;

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
pub const TOKEN_TYPE_NORMAL: i32 = 1;
/// Control token (rendered as nothing unless asked).
pub const TOKEN_TYPE_CONTROL: i32 = 3;

/// What kind of token a vocabulary entry is; the generator scales the
/// output-head row of each kind differently so that sampled text is mostly
/// words and printable characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenClass {
    /// A merged token that starts with a space (a word start: " the").
    SpaceWord,
    /// Another merged token (a word piece: "ing").
    Word,
    /// A single printable ASCII byte (letters, digits, punctuation, space).
    Printable,
    /// Any other byte (control characters, UTF-8 lead/continuation bytes).
    OtherByte,
    /// Special tokens (end of text, chat markers) and padding.
    Special,
}

/// A byte-level BPE vocabulary ready to be written as GGUF metadata.
#[derive(Clone, Debug)]
pub struct SynthVocab {
    /// Token texts (byte-level encoded).
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`.
    pub token_types: Vec<i32>,
    /// `tokenizer.ggml.merges` (`"left right"`).
    pub merges: Vec<String>,
    /// Class of each token.
    pub classes: Vec<TokenClass>,
    /// `<|endoftext|>`: end of text (EOS, and BOS for files that ask for one).
    pub eos: u32,
}

/// Text the merges are learned from: short plain sentences, so that the
/// merged tokens are common English word pieces.
const CORPUS: &str = "Once upon a time there was a little girl who lived in a village near the \
forest. Whenever she went out, the little girl wore a red riding cloak, so everyone in the \
village called her Little Red Riding Hood. One morning she asked her mother if she could go to \
visit her grandmother, as it had been a while since they had seen each other. That is a good \
idea, her mother said. So they packed a nice basket for her to take to her grandmother. When \
the basket was ready, the little girl put on her red cloak and kissed her mother goodbye. \
The quick brown fox jumps over the lazy dog. The sun was shining on the sea, shining with all \
his might: he did his very best to make the billows smooth and bright. It was the best of \
times, it was the worst of times, it was the age of wisdom, it was the age of foolishness. \
All happy families are alike; each unhappy family is unhappy in its own way. In the beginning \
the model was small, and the experts lived in host memory. Only the experts that the router \
picked crossed the bus, and the rest stayed where they were. The weather is nice today and \
the children are playing in the garden with their friends. We are going to the market to \
buy some bread, some cheese and a bottle of milk. This is the house that Jack built. There \
is nothing either good or bad, but thinking makes it so. What is the answer to the question \
of life, the universe and everything? He said that he would come back in the evening, and \
she said that she would wait for him by the river until the moon was high.";

/// GPT-2's byte → unicode mapping (`bytes_to_unicode`): printable bytes
/// map to themselves, the others to code points from U+0100 on.
pub fn byte_to_char(b: u8) -> char {
    let printable = |c: u32| (0x21..=0x7e).contains(&c) || (0xa1..=0xac).contains(&c) || c >= 0xae;
    if printable(b as u32) {
        return char::from_u32(b as u32).expect("latin-1 code point");
    }
    let rank = (0..b as u32).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + rank).expect("code point below U+0200")
}

/// Byte-level encoding of a string's bytes.
fn encode(s: &str) -> String {
    s.bytes().map(byte_to_char).collect()
}

/// Words as the GPT-2 pre-tokenizer would cut them (approximately: letter
/// runs with an optional leading space, digit runs, punctuation runs).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut kind = 0u8; // 0 none, 1 letters, 2 digits, 3 punct
    for ch in text.chars() {
        let k = if ch.is_alphabetic() {
            1
        } else if ch.is_numeric() {
            2
        } else if ch.is_whitespace() {
            0
        } else {
            3
        };
        if k == 0 {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            cur.push(' ');
            kind = 0;
            continue;
        }
        if kind != 0 && k != kind && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(ch);
        kind = k;
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

impl SynthVocab {
    /// Byte tokens, `n_merges` merges learned from the embedded text, the
    /// special tokens, then padding up to `n_vocab` tokens (if larger).
    pub fn build(n_merges: usize, n_vocab: Option<usize>) -> SynthVocab {
        let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_to_char(b).to_string()).collect();
        let mut classes: Vec<TokenClass> = (0..=255u8)
            .map(|b| {
                if b == b' ' || b.is_ascii_graphic() {
                    TokenClass::Printable
                } else {
                    TokenClass::OtherByte
                }
            })
            .collect();
        let mut index: HashMap<String, usize> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i))
            .collect();

        // word -> count, each word as a list of symbols
        let mut counts: HashMap<String, usize> = HashMap::new();
        for w in words(CORPUS) {
            *counts.entry(encode(&w)).or_default() += 1;
        }
        let mut corpus: Vec<(Vec<String>, usize)> = counts
            .into_iter()
            .map(|(w, c)| (w.chars().map(|c| c.to_string()).collect(), c))
            .collect();
        corpus.sort();
        let mut merges = Vec::new();
        while merges.len() < n_merges {
            let mut pairs: HashMap<(&str, &str), usize> = HashMap::new();
            for (syms, c) in &corpus {
                for p in syms.windows(2) {
                    *pairs.entry((&p[0], &p[1])).or_default() += c;
                }
            }
            // most frequent pair; ties to the lexicographically smallest
            let Some(((l, r), n)) = pairs
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
            else {
                break;
            };
            if n < 2 {
                break;
            }
            let (l, r) = (l.to_string(), r.to_string());
            let joined = format!("{l}{r}");
            for (syms, _) in corpus.iter_mut() {
                let mut i = 0;
                while i + 1 < syms.len() {
                    if syms[i] == l && syms[i + 1] == r {
                        syms[i] = joined.clone();
                        syms.remove(i + 1);
                    }
                    i += 1;
                }
            }
            merges.push(format!("{l} {r}"));
            if !index.contains_key(&joined) {
                index.insert(joined.clone(), tokens.len());
                classes.push(if joined.starts_with('\u{120}') {
                    TokenClass::SpaceWord
                } else {
                    TokenClass::Word
                });
                tokens.push(joined);
            }
        }
        let mut token_types = vec![TOKEN_TYPE_NORMAL; tokens.len()];
        let eos = tokens.len() as u32;
        for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] {
            tokens.push(s.to_string());
            token_types.push(TOKEN_TYPE_CONTROL);
            classes.push(TokenClass::Special);
        }
        if let Some(n) = n_vocab {
            let mut k = 0;
            while tokens.len() < n {
                tokens.push(format!("<|extra_{k}|>"));
                token_types.push(TOKEN_TYPE_CONTROL);
                classes.push(TokenClass::Special);
                k += 1;
            }
        }
        SynthVocab {
            tokens,
            token_types,
            merges,
            classes,
            eos,
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the vocabulary is empty (never, once built).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_mapping_is_a_bijection() {
        let chars: std::collections::HashSet<char> = (0..=255u8).map(byte_to_char).collect();
        assert_eq!(chars.len(), 256);
        assert_eq!(byte_to_char(b'a'), 'a');
        assert_eq!(byte_to_char(b' '), '\u{120}');
        assert_eq!(byte_to_char(b'\n'), '\u{10a}');
    }

    #[test]
    fn vocab_is_deterministic_with_word_pieces() {
        let a = SynthVocab::build(256, None);
        let b = SynthVocab::build(256, None);
        assert_eq!(a.tokens, b.tokens);
        assert_eq!(a.merges, b.merges);
        assert!(a.merges.len() > 100, "{} merges", a.merges.len());
        assert!(a.tokens.iter().any(|t| t == "\u{120}the"));
        let uniq: std::collections::HashSet<&String> = a.tokens.iter().collect();
        assert_eq!(uniq.len(), a.tokens.len());
        let c = SynthVocab::build(16, Some(1000));
        assert_eq!(c.len(), 1000);
    }
}
