//! llama.cpp's draft-free `ngram-simple` lookup (`common_ngram_simple_draft`):
//! the last `size_n` tokens (the sampled one last) are searched for
//! backwards in the history; the tokens that followed the latest earlier
//! match, up to `size_m`, are the draft.

use super::DraftSource;
use crate::Result;

/// `--spec-type ngram-simple` with `--spec-ngram-simple-size-n` /
/// `--spec-ngram-simple-size-m` (llama.cpp's defaults 12 and 48).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NgramSimple {
    /// Length of the n-gram looked up.
    pub size_n: usize,
    /// Most tokens copied after a match.
    pub size_m: usize,
}

impl Default for NgramSimple {
    fn default() -> NgramSimple {
        NgramSimple {
            size_n: 12,
            size_m: 48,
        }
    }
}

impl NgramSimple {
    /// The draft after `tokens` and `sampled` (llama.cpp's semantics: none
    /// unless the history holds more than `size_n + size_m + 1` tokens, the
    /// match is the latest one before the current position, and a copy
    /// shorter than `size_n` is no draft).
    pub fn draft(&self, tokens: &[i32], sampled: i32) -> Vec<i32> {
        let (n, m) = (self.size_n, self.size_m);
        let cur = tokens.len();
        if n == 0 || cur <= n + m + 1 {
            return Vec::new();
        }
        let mut pattern: Vec<i32> = tokens[cur - n + 1..].to_vec();
        pattern.push(sampled);
        let found = (1..cur - n)
            .rev()
            .find(|&j| tokens[j..j + n] == pattern[..]);
        let Some(j) = found else {
            return Vec::new();
        };
        let copy = m.min(cur - (j + n));
        if copy < n {
            return Vec::new();
        }
        tokens[j + n..j + n + copy].to_vec()
    }
}

impl DraftSource for NgramSimple {
    fn name(&self) -> &'static str {
        "ngram-simple"
    }

    fn propose(&mut self, history: &[i32], last: i32, n_max: usize) -> Result<Vec<i32>> {
        let mut d = self.draft(history, last);
        d.truncate(n_max);
        Ok(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_latest_earlier_match() {
        let g = NgramSimple {
            size_n: 2,
            size_m: 3,
        };
        //            0  1  2  3  4  5  6  7  8  9
        let toks = [9, 1, 2, 3, 4, 5, 1, 2, 7, 8, 1];
        // pattern [1, 2] (last token 1, sampled 2): the match at 6 is
        // the latest one before the current position
        assert_eq!(g.draft(&toks, 2), vec![7, 8, 1]);
        // no match
        assert_eq!(g.draft(&toks, 6), Vec::<i32>::new());
        // too short a history
        assert_eq!(g.draft(&toks[..6], 2), Vec::<i32>::new());
        // a copy shorter than size_n is no draft: [1, 2] matches at 7, and
        // size_m 1 copies one token only
        let short = [9, 4, 4, 4, 4, 4, 4, 1, 2, 7, 1];
        let g1 = NgramSimple {
            size_n: 2,
            size_m: 1,
        };
        assert_eq!(g1.draft(&short, 2), Vec::<i32>::new());
    }

    #[test]
    fn n_max_truncates() {
        let mut g = NgramSimple {
            size_n: 1,
            size_m: 8,
        };
        let toks = [5, 1, 2, 3, 4, 6, 6, 6, 6, 6, 6];
        assert_eq!(g.propose(&toks, 1, 2).unwrap(), vec![2, 3]);
    }
}
