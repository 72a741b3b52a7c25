//! Byte-level BPE (llama.cpp's `llm_tokenizer_bpe_session`): each
//! pre-tokenized word is byte-level encoded, split into characters, and the
//! adjacent pair with the lowest merge rank is merged until none applies.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::symbol::{char_symbols, merge, Symbol};
use super::vocab::{TokenId, Vocab};

/// Heap key: lowest rank first, then leftmost; the text guards staleness.
type Entry = Reverse<(u32, usize, usize, String)>;

/// Tokenize one byte-level encoded word and append the ids.
pub(crate) fn tokenize_word(vocab: &Vocab, word: &str, out: &mut Vec<TokenId>) {
    if word.is_empty() {
        return;
    }
    if vocab.ignore_merges {
        if let Some(id) = vocab.text_to_token(word) {
            out.push(id);
            return;
        }
    }
    let mut symbols = char_symbols(word);

    let text_of = |s: &Symbol| &word[s.start..s.start + s.len];
    let mut queue: BinaryHeap<Entry> = BinaryHeap::new();
    let add = |symbols: &[Symbol], queue: &mut BinaryHeap<Entry>, left: usize, right: usize| {
        let (l, r) = (text_of(&symbols[left]), text_of(&symbols[right]));
        if let Some(rank) = vocab.bpe_rank(l, r) {
            queue.push(Reverse((rank, left, right, format!("{l}{r}"))));
        }
    };
    for i in 1..symbols.len() {
        add(&symbols, &mut queue, i - 1, i);
    }

    while let Some(Reverse((_, left, right, text))) = queue.pop() {
        let (l, r) = (symbols[left], symbols[right]);
        if l.len == 0 || r.len == 0 {
            continue;
        }
        // Stale if either side changed since the pair was queued.
        if l.start + l.len != r.start || word.get(l.start..r.start + r.len) != Some(text.as_str()) {
            continue;
        }
        merge(&mut symbols, left, right);
        if let Some(p) = symbols[left].prev {
            add(&symbols, &mut queue, p, left);
        }
        if let Some(n) = symbols[left].next {
            add(&symbols, &mut queue, left, n);
        }
    }

    let mut cur = Some(0);
    while let Some(i) = cur {
        let s = symbols[i];
        let piece = text_of(&s);
        match vocab.text_to_token(piece) {
            Some(id) => out.push(id),
            None => {
                // As llama.cpp: try each byte of the piece as a one-byte
                // token; bytes that are not tokens are dropped.
                for &b in piece.as_bytes() {
                    if b.is_ascii() {
                        if let Some(id) = vocab.text_to_token(&char::from(b).to_string()) {
                            out.push(id);
                        }
                    }
                }
            }
        }
        cur = s.next;
    }
}
