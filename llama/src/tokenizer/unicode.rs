//! Codepoint classification with the same categories llama.cpp's
//! `unicode_cpt_flags` uses (letter, number, punctuation, mark, symbol,
//! whitespace).
//!
//! The pre-tokenizers only ever ask these questions, so this is all the
//! Unicode data the tokenizer needs. ASCII is answered from fixed tables; other
//! codepoints use the Unicode general-category tables shipped in the `regex`
//! crate, which keeps the answers consistent with the `\p{..}` classes that
//! the regex-based splitters use.

use std::sync::OnceLock;

/// The category facts about one codepoint that the splitters consult.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CptFlags {
    pub whitespace: bool,
    pub letter: bool,
    pub number: bool,
    pub punctuation: bool,
    pub mark: bool,
    pub symbol: bool,
}

/// One regex per general category, used for codepoints outside ASCII.
struct CategoryTables {
    letter: regex::Regex,
    number: regex::Regex,
    punctuation: regex::Regex,
    mark: regex::Regex,
    symbol: regex::Regex,
}

fn tables() -> &'static CategoryTables {
    static T: OnceLock<CategoryTables> = OnceLock::new();
    T.get_or_init(|| {
        // These patterns are constants; failing to compile them is a bug in
        // this file, caught by every test that touches non-ASCII text.
        let re = |p: &str| regex::Regex::new(p).expect("constant category regex");
        CategoryTables {
            letter: re(r"^\p{L}$"),
            number: re(r"^\p{N}$"),
            punctuation: re(r"^\p{P}$"),
            mark: re(r"^\p{M}$"),
            symbol: re(r"^\p{S}$"),
        }
    })
}

/// Whitespace as llama.cpp's table defines it (the Unicode `White_Space`
/// property: `\t`..`\r`, space, U+0085, U+00A0, U+1680, U+2000..U+200A,
/// U+2028, U+2029, U+202F, U+205F, U+3000).
pub(crate) fn is_whitespace(c: char) -> bool {
    c.is_whitespace()
}

/// Classify one codepoint.
pub(crate) fn flags(c: char) -> CptFlags {
    let mut f = CptFlags {
        whitespace: is_whitespace(c),
        ..CptFlags::default()
    };
    if c.is_ascii() {
        let b = c as u8;
        if b.is_ascii_alphabetic() {
            f.letter = true;
        } else if b.is_ascii_digit() {
            f.number = true;
        } else if matches!(
            b,
            b'$' | b'+' | b'<' | b'=' | b'>' | b'^' | b'`' | b'|' | b'~'
        ) {
            f.symbol = true;
        } else if b.is_ascii_punctuation() {
            f.punctuation = true;
        }
        return f;
    }
    let mut buf = [0u8; 4];
    let s = c.encode_utf8(&mut buf);
    let t = tables();
    if t.letter.is_match(s) {
        f.letter = true;
    } else if t.number.is_match(s) {
        f.number = true;
    } else if t.punctuation.is_match(s) {
        f.punctuation = true;
    } else if t.mark.is_match(s) {
        f.mark = true;
    } else if t.symbol.is_match(s) {
        f.symbol = true;
    }
    f
}

/// The one-character stand-in llama.cpp's "collapsed" regex matching uses for
/// a codepoint: ASCII stays itself, other whitespace becomes U+000B, and other
/// codepoints become U+00D1 (number), U+00D2 (letter), U+00D3 (punctuation),
/// U+00D4 (mark), U+00D5 (symbol) or U+00D0 (anything else).
pub(crate) fn collapse(c: char) -> char {
    if c.is_ascii() {
        return c;
    }
    let f = flags(c);
    if f.whitespace {
        '\u{0B}'
    } else if f.number {
        '\u{D1}'
    } else if f.letter {
        '\u{D2}'
    } else if f.punctuation {
        '\u{D3}'
    } else if f.mark {
        '\u{D4}'
    } else if f.symbol {
        '\u{D5}'
    } else {
        '\u{D0}'
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_categories() {
        assert!(flags('a').letter);
        assert!(flags('7').number);
        assert!(flags('!').punctuation);
        assert!(flags('~').symbol);
        assert!(flags(' ').whitespace);
        assert!(flags('\u{0B}').whitespace);
    }

    #[test]
    fn non_ascii_categories() {
        assert!(flags('é').letter);
        assert!(flags('Ⅵ').number);
        assert!(flags('。').punctuation);
        assert!(flags('\u{301}').mark);
        assert!(flags('€').symbol);
        assert!(flags('\u{3000}').whitespace);
        assert_eq!(collapse('🦙'), '\u{D5}');
        assert_eq!(collapse('\u{200B}'), '\u{D0}');
    }
}
