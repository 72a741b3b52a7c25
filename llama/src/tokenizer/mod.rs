//! Text ⇄ token ids, matching llama.cpp's `llama_vocab` for the SPM
//! (`tokenizer.ggml.model = "llama"`) and byte-level BPE (`"gpt2"`) models.
//!
//! Layout, one topic per file:
//! - [`vocab`]: the vocabulary and special ids built from `tokenizer.ggml.*`
//!   metadata with llama.cpp's defaults;
//! - [`pretokenize`]: the `tokenizer.ggml.pre` table and the regex splitter;
//! - `spm`, `bpe`: the two merge algorithms;
//! - `special`: cutting special tokens out of the input;
//! - [`byte_level`], `unicode`: the GPT-2 byte mapping and codepoint classes;
//! - [`gguf`]: reading the metadata from a GGUF file.
//!
//! Typical use: `Tokenizer::from_gguf(&file)?`, then
//! `tokenize(prompt, true, false)` for a prompt and `token_to_piece(id, false)`
//! for streaming output.

mod bpe;
pub mod byte_level;
pub mod error;
pub mod gguf;
pub mod pretokenize;
mod special;
mod spm;
mod symbol;
mod unicode;
pub mod vocab;

pub use error::TokenizerError;
pub use pretokenize::{PreConfig, PreType};
pub use vocab::{SpecialTokens, TokenAttr, TokenData, TokenId, Vocab, VocabData, VocabType};

use pretokenize::PreTokenizer;
use special::Fragment;

/// A ready-to-use tokenizer: the vocabulary plus its compiled pre-tokenizer.
#[derive(Debug)]
pub struct Tokenizer {
    vocab: Vocab,
    /// Present for BPE vocabularies.
    pre: Option<PreTokenizer>,
    /// `token_to_piece(id, special = true)` for every token, precomputed as
    /// llama.cpp does.
    pieces: Vec<Vec<u8>>,
    /// The newline token (llama.cpp's `linefeed_id`).
    newline: Option<TokenId>,
}

impl Tokenizer {
    /// Build from raw vocabulary metadata.
    pub fn from_vocab_data(data: VocabData) -> Result<Tokenizer, TokenizerError> {
        let vocab = Vocab::from_data(data)?;
        let pre = match (vocab.vocab_type, vocab.pre) {
            (VocabType::Bpe, Some(cfg)) => Some(PreTokenizer::new(cfg.pre_type)?),
            _ => None,
        };
        let mut t = Tokenizer {
            vocab,
            pre,
            pieces: Vec::new(),
            newline: None,
        };
        t.pieces = (0..t.vocab.n_tokens() as TokenId)
            .map(|id| t.piece_uncached(id, true))
            .collect();
        t.newline = match t.vocab.vocab_type {
            VocabType::Spm => t.vocab.byte_to_token(b'\n').or(t.vocab.special.pad),
            VocabType::Bpe => t
                .tokenize("\n", false, false)
                .ok()
                .and_then(|ids| ids.first().copied())
                .or(t.vocab.special.pad),
        };
        Ok(t)
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Vocab {
        &self.vocab
    }

    /// Which algorithm this vocabulary uses.
    pub fn vocab_type(&self) -> VocabType {
        self.vocab.vocab_type
    }

    /// `tokenizer.ggml.model` as given.
    pub fn model_name(&self) -> &str {
        &self.vocab.model
    }

    /// `tokenizer.ggml.pre` as given ("" when absent or for SPM).
    pub fn pre_name(&self) -> &str {
        &self.vocab.pre_name
    }

    /// Number of tokens in the vocabulary.
    pub fn n_vocab(&self) -> usize {
        self.vocab.n_tokens()
    }

    /// Beginning-of-sequence token.
    pub fn bos(&self) -> Option<TokenId> {
        self.vocab.special.bos
    }

    /// End-of-sequence token.
    pub fn eos(&self) -> Option<TokenId> {
        self.vocab.special.eos
    }

    /// End-of-turn token.
    pub fn eot(&self) -> Option<TokenId> {
        self.vocab.special.eot
    }

    /// End-of-message token.
    pub fn eom(&self) -> Option<TokenId> {
        self.vocab.special.eom
    }

    /// Unknown token.
    pub fn unk(&self) -> Option<TokenId> {
        self.vocab.special.unk
    }

    /// Padding token.
    pub fn pad(&self) -> Option<TokenId> {
        self.vocab.special.pad
    }

    /// Newline token.
    pub fn nl(&self) -> Option<TokenId> {
        self.newline
    }

    /// All special ids.
    pub fn special_tokens(&self) -> &SpecialTokens {
        &self.vocab.special
    }

    /// Whether `tokenize(.., add_special = true, ..)` prepends BOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }

    /// Whether `tokenize(.., add_special = true, ..)` appends EOS.
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }

    /// Whether SPM text gets a leading space.
    pub fn add_space_prefix(&self) -> bool {
        self.vocab.add_space_prefix
    }

    /// Whether generation should stop at `id` (EOS, EOT, EOM and the tokens
    /// llama.cpp recognises by text, e.g. `<|im_end|>`, `<|endoftext|>`).
    pub fn is_eog(&self, id: TokenId) -> bool {
        self.vocab.eog.contains(&id)
    }

    /// The end-of-generation ids, ascending.
    pub fn eog_tokens(&self) -> impl Iterator<Item = TokenId> + '_ {
        self.vocab.eog.iter().copied()
    }

    /// Whether `id` is a control token.
    pub fn is_control(&self, id: TokenId) -> bool {
        self.vocab
            .token(id)
            .is_some_and(|t| t.attr.has(TokenAttr::CONTROL))
    }

    /// The vocabulary text of `id` (`None` if out of range).
    pub fn token_text(&self, id: TokenId) -> Option<&str> {
        self.vocab.token(id).map(|t| t.text.as_str())
    }

    /// The score of `id` (`None` if out of range).
    pub fn token_score(&self, id: TokenId) -> Option<f32> {
        self.vocab.token(id).map(|t| t.score)
    }

    /// The attributes of `id` (`None` if out of range).
    pub fn token_attr(&self, id: TokenId) -> Option<TokenAttr> {
        self.vocab.token(id).map(|t| t.attr)
    }

    /// Id of the token with exactly this vocabulary text.
    pub fn text_to_token(&self, text: &str) -> Option<TokenId> {
        self.vocab.text_to_token(text)
    }

    /// Convert text to token ids as `llama_tokenize` does.
    ///
    /// `add_special` adds BOS/EOS as the vocabulary asks (`add_bos`,
    /// `add_eos`); `parse_special` lets control tokens written in the text
    /// (e.g. `<|im_start|>`) become those tokens instead of plain text.
    pub fn tokenize(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<TokenId>, TokenizerError> {
        let v = &self.vocab;
        let frags = special::partition(v, text, parse_special);
        let mut out = Vec::new();
        if add_special && v.add_bos {
            out.extend(v.special.bos);
        }
        match (v.vocab_type, &self.pre) {
            (VocabType::Spm, _) => {
                // A space is prefixed to the first text fragment and to each
                // one that follows a special token.
                let mut prev_special = true;
                for frag in &frags {
                    match frag {
                        Fragment::Text(r) => {
                            let mut s = String::with_capacity(r.len() + 4);
                            if v.add_space_prefix && prev_special {
                                s.push(' ');
                            }
                            s.push_str(&text[r.clone()]);
                            let escaped = s.replace(' ', "\u{2581}");
                            spm::tokenize(v, &escaped, &mut out);
                            prev_special = false;
                        }
                        Fragment::Token(id) => {
                            out.push(*id);
                            prev_special = true;
                        }
                    }
                }
            }
            (VocabType::Bpe, pre) => {
                let Some(pre) = pre else {
                    return Err(TokenizerError::UnknownPreTokenizer(v.pre_name.clone()));
                };
                for frag in &frags {
                    match frag {
                        Fragment::Text(r) => {
                            for word in pre.split(&text[r.clone()]) {
                                let encoded = byte_level::encode(word.as_bytes());
                                bpe::tokenize_word(v, &encoded, &mut out);
                            }
                        }
                        Fragment::Token(id) => out.push(*id),
                    }
                }
            }
        }
        if add_special && v.add_eos {
            out.extend(v.special.eos);
        }
        Ok(out)
    }

    /// The bytes `id` stands for, as `llama_token_to_piece` with `lstrip = 0`.
    ///
    /// Control and unknown tokens render as nothing unless `special`; an id
    /// outside the vocabulary also renders as nothing (use [`Self::detokenize`]
    /// to have it reported).
    pub fn token_to_piece(&self, id: TokenId, special: bool) -> Vec<u8> {
        self.piece(id, special).to_vec()
    }

    fn piece(&self, id: TokenId, special: bool) -> &[u8] {
        let Some(tok) = self.vocab.token(id) else {
            return &[];
        };
        if !special && tok.attr.has(TokenAttr::UNKNOWN | TokenAttr::CONTROL) {
            return &[];
        }
        self.pieces
            .get(id as usize)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Build the piece of `id` from its text and attributes.
    fn piece_uncached(&self, id: TokenId, special: bool) -> Vec<u8> {
        let Some(tok) = self.vocab.token(id) else {
            return Vec::new();
        };
        let attr = tok.attr;
        if !special && attr.has(TokenAttr::UNKNOWN | TokenAttr::CONTROL) {
            return Vec::new();
        }
        if attr.has(TokenAttr::UNKNOWN | TokenAttr::CONTROL | TokenAttr::USER_DEFINED) {
            return tok.text.as_bytes().to_vec();
        }
        if attr.has(TokenAttr::NORMAL) {
            return match self.vocab.vocab_type {
                VocabType::Spm => tok.text.replace('\u{2581}', " ").into_bytes(),
                VocabType::Bpe => decode_byte_level(&tok.text),
            };
        }
        if attr.has(TokenAttr::BYTE) {
            return self
                .vocab
                .token_to_byte(id)
                .map(|b| vec![b])
                .unwrap_or_default();
        }
        Vec::new()
    }

    /// Convert ids back to bytes as `llama_detokenize` does.
    ///
    /// `remove_special` drops a leading BOS / trailing EOS the vocabulary
    /// would have added; `unparse_special` renders control tokens' text. With
    /// `add_space_prefix` (SPM) the first piece loses one leading space unless
    /// a BOS was removed. Vocabularies with `clean_spaces` (GPT-2 style) get
    /// llama.cpp's clean-up of spaces before punctuation and contractions.
    pub fn detokenize(
        &self,
        ids: &[TokenId],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<Vec<u8>, TokenizerError> {
        let v = &self.vocab;
        let n_vocab = v.n_tokens();
        if let Some(&bad) = ids.iter().find(|&&id| v.token(id).is_none()) {
            return Err(TokenizerError::TokenOutOfRange { id: bad, n_vocab });
        }
        let mut ids = ids;
        let mut remove_space = v.add_space_prefix;
        if remove_special && v.add_bos && !ids.is_empty() && Some(ids[0]) == v.special.bos {
            remove_space = false;
            ids = &ids[1..];
        }
        if remove_special && v.add_eos && ids.last().copied() == v.special.eos && !ids.is_empty() {
            ids = &ids[..ids.len() - 1];
        }
        let mut out = Vec::new();
        for &id in ids {
            let mut piece = self.piece(id, unparse_special);
            if remove_space {
                if let Some(rest) = piece.strip_prefix(b" ") {
                    piece = rest;
                }
            }
            remove_space = false;
            out.extend_from_slice(piece);
        }
        if v.clean_spaces {
            clean_up_spaces(&mut out);
        }
        Ok(out)
    }

    /// [`Self::detokenize`] as a `String`, replacing invalid UTF-8.
    pub fn detokenize_lossy(
        &self,
        ids: &[TokenId],
        remove_special: bool,
        unparse_special: bool,
    ) -> Result<String, TokenizerError> {
        let bytes = self.detokenize(ids, remove_special, unparse_special)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Map byte-level text back to bytes. Characters outside the byte-level
/// alphabet are rendered as llama.cpp does (`[UNK_BYTE_0x..<text>]`).
fn decode_byte_level(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match byte_level::char_to_byte(c) {
            Some(b) => out.push(b),
            None => {
                out.extend_from_slice(b"[UNK_BYTE_0x");
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

/// llama.cpp's `clean_up_tokenization_spaces`: drop the space in " ?", " !",
/// " .", " ,"; turn " ' " into "'"; drop the space before "'s", "'m", "'re"
/// and "'ve".
fn clean_up_spaces(text: &mut Vec<u8>) {
    // Pass 1: space before ?!.,
    let mut out: Vec<u8> = Vec::with_capacity(text.len());
    for (i, &x) in text.iter().enumerate() {
        if i > 0 && text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            out.pop();
        }
        out.push(x);
    }
    // Pass 2: " ' " → "'"
    // (llama.cpp overwrites the skipped space with NUL, which a following
    // check then sees; reproduce that.)
    let mut src = std::mem::take(&mut out);
    let mut i = 0;
    while i < src.len() {
        let x = src[i];
        if i > 0 && x == b'\'' && i + 1 < src.len() && src[i - 1] == b' ' && src[i + 1] == b' ' {
            out.pop();
            out.push(x);
            src[i + 1] = 0;
            i += 2;
            continue;
        }
        out.push(x);
        i += 1;
    }
    // Pass 3: contractions.
    let src = std::mem::take(&mut out);
    for (i, &x) in src.iter().enumerate() {
        if i > 0 && src[i - 1] == b' ' && x == b'\'' && i + 1 < src.len() {
            let x1 = src[i + 1];
            let x2 = src.get(i + 2).copied();
            let drop = match x1 {
                b's' | b'm' => true,
                b'r' | b'v' => x2 == Some(b'e'),
                _ => false,
            };
            if drop {
                out.pop();
            }
        }
        out.push(x);
    }
    *text = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_up_matches_llama_cpp() {
        let mut t = b"Hello , world ! it 's a ' b ' I 've x".to_vec();
        clean_up_spaces(&mut t);
        assert_eq!(
            String::from_utf8(t).unwrap(),
            "Hello, world! it's a'b'I've x"
        );
    }
}
