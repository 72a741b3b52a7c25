//! SentencePiece-style BPE (llama.cpp's `llm_tokenizer_spm`): start from one
//! symbol per UTF-8 character and repeatedly merge the adjacent pair whose
//! concatenation is the highest-scoring vocabulary token; characters that end
//! up outside the vocabulary are emitted as `<0xXX>` byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::symbol::{char_symbols, merge, Symbol};
use super::vocab::{TokenId, Vocab};

/// A candidate merge of symbols `left` and `right` into a token of `score`.
#[derive(Debug, Clone, Copy)]
struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first; on equal scores the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| other.left.cmp(&self.left))
    }
}

/// Tokenize `text` (already space-escaped to `▁`) and append the ids.
pub(crate) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<TokenId>) {
    let mut symbols = char_symbols(text);
    if symbols.is_empty() {
        return;
    }

    let mut queue = BinaryHeap::new();
    let try_add =
        |symbols: &[Symbol], queue: &mut BinaryHeap<Bigram>, left: usize, right: usize| {
            let (l, r) = (symbols[left], symbols[right]);
            let piece = &text[l.start..r.start + r.len];
            if let Some(id) = vocab.text_to_token(piece) {
                if let Some(tok) = vocab.token(id) {
                    queue.push(Bigram {
                        left,
                        right,
                        score: tok.score,
                        size: piece.len(),
                    });
                }
            }
        };
    for i in 1..symbols.len() {
        try_add(&symbols, &mut queue, i - 1, i);
    }

    while let Some(b) = queue.pop() {
        let (l, r) = (symbols[b.left], symbols[b.right]);
        // Skip pairs where either side has since been merged away or grown.
        if l.len == 0 || r.len == 0 || l.len + r.len != b.size {
            continue;
        }
        merge(&mut symbols, b.left, b.right);
        if let Some(p) = symbols[b.left].prev {
            try_add(&symbols, &mut queue, p, b.left);
        }
        if let Some(n) = symbols[b.left].next {
            try_add(&symbols, &mut queue, b.left, n);
        }
    }

    // Every surviving symbol is either a vocabulary token (merges only form
    // tokens) or a single character; characters outside the vocabulary fall
    // back to byte tokens.
    let mut cur = Some(0);
    while let Some(i) = cur {
        let s = symbols[i];
        let piece = &text[s.start..s.start + s.len];
        match vocab.text_to_token(piece) {
            Some(id) => out.push(id),
            None => {
                for &b in piece.as_bytes() {
                    if let Some(id) = vocab.byte_to_token(b).or(vocab.special.unk) {
                        out.push(id);
                    }
                }
            }
        }
        cur = s.next;
    }
}
