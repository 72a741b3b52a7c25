//! The symbol list the SPM and BPE merge loops work on: byte ranges of the
//! text, linked to their live neighbours.

/// A symbol: a byte range of the text plus links to its live neighbours.
#[derive(Debug, Clone, Copy)]
pub(super) struct Symbol {
    pub start: usize,
    pub len: usize,
    pub prev: Option<usize>,
    pub next: Option<usize>,
}

/// One symbol per character of `text`, linked in order.
pub(super) fn char_symbols(text: &str) -> Vec<Symbol> {
    let mut symbols = Vec::new();
    for (i, (start, c)) in text.char_indices().enumerate() {
        let len = c.len_utf8();
        symbols.push(Symbol {
            start,
            len,
            prev: i.checked_sub(1),
            next: (start + len < text.len()).then_some(i + 1),
        });
    }
    symbols
}

/// Merge symbol `right` into its left neighbour `left`: `left` grows over
/// it, and `right` becomes empty (`len` 0) and leaves the links.
pub(super) fn merge(symbols: &mut [Symbol], left: usize, right: usize) {
    let r = symbols[right];
    symbols[left].len += r.len;
    symbols[right].len = 0;
    symbols[left].next = r.next;
    if let Some(n) = r.next {
        symbols[n].prev = Some(left);
    }
}
