//! The vocabulary: token texts, scores and attributes, special token ids and
//! the tokenizer flags, built from GGUF `tokenizer.ggml.*` metadata with the
//! defaults and fix-ups llama.cpp's `llama_vocab::impl::load` applies.

use std::collections::{BTreeSet, HashMap};

use super::error::TokenizerError;
use super::pretokenize::{pre_config, PreConfig};

/// A token id, as llama.cpp's `llama_token`.
pub type TokenId = i32;

/// GGUF metadata keys the tokenizer reads.
pub mod keys {
    /// GGUF key: tokenizer model name (`llama` = SPM, `gpt2` = BPE).
    pub const MODEL: &str = "tokenizer.ggml.model";
    /// GGUF key: pre-tokenizer name (`qwen2`, `llama-bpe`, ...).
    pub const PRE: &str = "tokenizer.ggml.pre";
    /// GGUF key: token strings, by id.
    pub const TOKENS: &str = "tokenizer.ggml.tokens";
    /// GGUF key: token scores, by id.
    pub const SCORES: &str = "tokenizer.ggml.scores";
    /// GGUF key: token types (normal, control, byte, ...), by id.
    pub const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
    /// GGUF key: BPE merges (`"a b"`), by priority.
    pub const MERGES: &str = "tokenizer.ggml.merges";
    /// GGUF key: id of the beginning-of-sequence token.
    pub const BOS_ID: &str = "tokenizer.ggml.bos_token_id";
    /// GGUF key: id of the end-of-sequence token.
    pub const EOS_ID: &str = "tokenizer.ggml.eos_token_id";
    /// GGUF key: id of the end-of-turn token.
    pub const EOT_ID: &str = "tokenizer.ggml.eot_token_id";
    /// GGUF key: id of the end-of-message token.
    pub const EOM_ID: &str = "tokenizer.ggml.eom_token_id";
    /// GGUF key: id of the unknown token.
    pub const UNK_ID: &str = "tokenizer.ggml.unknown_token_id";
    /// GGUF key: id of the separator token.
    pub const SEP_ID: &str = "tokenizer.ggml.seperator_token_id";
    /// GGUF key: id of the padding token.
    pub const PAD_ID: &str = "tokenizer.ggml.padding_token_id";
    /// GGUF key: id of the mask token.
    pub const MASK_ID: &str = "tokenizer.ggml.mask_token_id";
    /// GGUF key: id of the fill-in-the-middle prefix token.
    pub const FIM_PRE_ID: &str = "tokenizer.ggml.fim_pre_token_id";
    /// GGUF key: id of the fill-in-the-middle suffix token.
    pub const FIM_SUF_ID: &str = "tokenizer.ggml.fim_suf_token_id";
    /// GGUF key: id of the fill-in-the-middle middle token.
    pub const FIM_MID_ID: &str = "tokenizer.ggml.fim_mid_token_id";
    /// GGUF key: id of the fill-in-the-middle padding token.
    pub const FIM_PAD_ID: &str = "tokenizer.ggml.fim_pad_token_id";
    /// GGUF key: id of the fill-in-the-middle repository token.
    pub const FIM_REP_ID: &str = "tokenizer.ggml.fim_rep_token_id";
    /// GGUF key: id of the fill-in-the-middle file separator token.
    pub const FIM_SEP_ID: &str = "tokenizer.ggml.fim_sep_token_id";
    /// GGUF key: whether tokenizing prepends BOS.
    pub const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
    /// GGUF key: whether tokenizing appends EOS.
    pub const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
    /// GGUF key: whether SPM puts a space before the text.
    pub const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
    /// GGUF key: model name.
    pub const GENERAL_NAME: &str = "general.name";
}

/// Token attributes (llama.cpp's `llama_token_attr` bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenAttr(pub u32);

impl TokenAttr {
    /// No attribute (`LLAMA_TOKEN_ATTR_UNDEFINED`).
    pub const UNDEFINED: TokenAttr = TokenAttr(0);
    /// The unknown-token placeholder (`<unk>`).
    pub const UNKNOWN: TokenAttr = TokenAttr(1 << 0);
    /// A reserved slot that no text maps to.
    pub const UNUSED: TokenAttr = TokenAttr(1 << 1);
    /// An ordinary text token.
    pub const NORMAL: TokenAttr = TokenAttr(1 << 2);
    /// A control token (`<s>`, `<|im_end|>`): not printed, only matched as special.
    pub const CONTROL: TokenAttr = TokenAttr(1 << 3);
    /// A token added by the user, matched whole in the text.
    pub const USER_DEFINED: TokenAttr = TokenAttr(1 << 4);
    /// A byte fallback token (`<0x0A>`).
    pub const BYTE: TokenAttr = TokenAttr(1 << 5);
    /// Its text is normalized before matching.
    pub const NORMALIZED: TokenAttr = TokenAttr(1 << 6);
    /// Spaces to its left are stripped when matching.
    pub const LSTRIP: TokenAttr = TokenAttr(1 << 7);
    /// Spaces to its right are stripped when matching.
    pub const RSTRIP: TokenAttr = TokenAttr(1 << 8);
    /// Matched only as a whole word.
    pub const SINGLE_WORD: TokenAttr = TokenAttr(1 << 9);

    /// Whether any bit of `other` is set.
    pub fn has(self, other: TokenAttr) -> bool {
        self.0 & other.0 != 0
    }

    /// Attribute for a GGUF `tokenizer.ggml.token_type` value.
    pub fn from_token_type(t: i32) -> TokenAttr {
        match t {
            1 => TokenAttr::NORMAL,
            2 => TokenAttr::UNKNOWN,
            3 => TokenAttr::CONTROL,
            4 => TokenAttr::USER_DEFINED,
            5 => TokenAttr::UNUSED,
            6 => TokenAttr::BYTE,
            _ => TokenAttr::UNDEFINED,
        }
    }
}

impl std::ops::BitOr for TokenAttr {
    type Output = TokenAttr;
    fn bitor(self, rhs: TokenAttr) -> TokenAttr {
        TokenAttr(self.0 | rhs.0)
    }
}

/// Which tokenization algorithm the vocabulary uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VocabType {
    /// SentencePiece-style BPE over scores (`tokenizer.ggml.model = "llama"`).
    Spm,
    /// Byte-level BPE over merges (`tokenizer.ggml.model = "gpt2"`).
    Bpe,
}

/// Raw vocabulary metadata, one field per GGUF key (`None` = key absent).
///
/// This is the format-neutral input of [`super::Tokenizer::from_vocab_data`];
/// [`super::Tokenizer::from_gguf`] fills it from a GGUF file.
#[derive(Debug, Clone, Default)]
pub struct VocabData {
    /// `tokenizer.ggml.model`.
    pub model: String,
    /// `tokenizer.ggml.pre`.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens` (raw bytes of each token string).
    pub tokens: Vec<Vec<u8>>,
    /// `tokenizer.ggml.scores`.
    pub scores: Option<Vec<f32>>,
    /// `tokenizer.ggml.token_type`.
    pub token_types: Option<Vec<i32>>,
    /// `tokenizer.ggml.merges`.
    pub merges: Option<Vec<String>>,
    /// `tokenizer.ggml.bos_token_id`: the beginning of sequence token.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`: the end of sequence token.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.eot_token_id`: the end of turn token.
    pub eot: Option<u32>,
    /// `tokenizer.ggml.eom_token_id`: the end of message (tool call) token.
    pub eom: Option<u32>,
    /// `tokenizer.ggml.unknown_token_id`: the unknown token.
    pub unk: Option<u32>,
    /// `tokenizer.ggml.seperator_token_id`: the separator token.
    pub sep: Option<u32>,
    /// `tokenizer.ggml.padding_token_id`: the padding token.
    pub pad: Option<u32>,
    /// `tokenizer.ggml.mask_token_id`: the mask token.
    pub mask: Option<u32>,
    /// `tokenizer.ggml.fim_pre_token_id`: the fill-in-the-middle prefix token.
    pub fim_pre: Option<u32>,
    /// `tokenizer.ggml.fim_suf_token_id`: the fill-in-the-middle suffix token.
    pub fim_suf: Option<u32>,
    /// `tokenizer.ggml.fim_mid_token_id`: the fill-in-the-middle middle token.
    pub fim_mid: Option<u32>,
    /// `tokenizer.ggml.fim_pad_token_id`: the fill-in-the-middle padding token.
    pub fim_pad: Option<u32>,
    /// `tokenizer.ggml.fim_rep_token_id`: the fill-in-the-middle repository token.
    pub fim_rep: Option<u32>,
    /// `tokenizer.ggml.fim_sep_token_id`: the fill-in-the-middle file separator token.
    pub fim_sep: Option<u32>,
    /// `tokenizer.ggml.add_bos_token`: prepend BOS when tokenizing.
    pub add_bos: Option<bool>,
    /// `tokenizer.ggml.add_eos_token`: append EOS when tokenizing.
    pub add_eos: Option<bool>,
    /// `tokenizer.ggml.add_space_prefix`: SPM puts a space before the text.
    pub add_space_prefix: Option<bool>,
    /// `general.name` (llama.cpp keys a Phi-3 attribute fix-up on it).
    pub general_name: Option<String>,
}

/// One vocabulary entry.
#[derive(Debug, Clone)]
pub struct TokenData {
    /// The token's text as stored in the vocabulary (`▁` for space in SPM,
    /// byte-level characters in BPE).
    pub text: String,
    /// SPM score (log probability) of the token; merge priority in BPE vocabularies without merges.
    pub score: f32,
    /// The token's attributes (control, byte, user-defined, ...).
    pub attr: TokenAttr,
}

/// Special token ids; `None` where the vocabulary has none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// The beginning of sequence token.
    pub bos: Option<TokenId>,
    /// The end of sequence token.
    pub eos: Option<TokenId>,
    /// The end of turn token.
    pub eot: Option<TokenId>,
    /// The end of message (tool call) token.
    pub eom: Option<TokenId>,
    /// The unknown token.
    pub unk: Option<TokenId>,
    /// The separator token.
    pub sep: Option<TokenId>,
    /// The padding token.
    pub pad: Option<TokenId>,
    /// The mask token.
    pub mask: Option<TokenId>,
    /// The fill-in-the-middle prefix token.
    pub fim_pre: Option<TokenId>,
    /// The fill-in-the-middle suffix token.
    pub fim_suf: Option<TokenId>,
    /// The fill-in-the-middle middle token.
    pub fim_mid: Option<TokenId>,
    /// The fill-in-the-middle padding token.
    pub fim_pad: Option<TokenId>,
    /// The fill-in-the-middle repository token.
    pub fim_rep: Option<TokenId>,
    /// The fill-in-the-middle file separator token.
    pub fim_sep: Option<TokenId>,
}

/// A loaded vocabulary.
#[derive(Debug, Clone)]
pub struct Vocab {
    pub(crate) vocab_type: VocabType,
    pub(crate) model: String,
    pub(crate) pre_name: String,
    pub(crate) pre: Option<PreConfig>,
    pub(crate) tokens: Vec<TokenData>,
    pub(crate) token_to_id: HashMap<String, TokenId>,
    /// BPE merge ranks keyed by (left, right).
    pub(crate) bpe_ranks: HashMap<(String, String), u32>,
    pub(crate) special: SpecialTokens,
    pub(crate) eog: BTreeSet<TokenId>,
    pub(crate) add_bos: bool,
    pub(crate) add_eos: bool,
    pub(crate) add_space_prefix: bool,
    pub(crate) clean_spaces: bool,
    pub(crate) ignore_merges: bool,
    /// Control/user-defined/unknown tokens, longest text first: the order in
    /// which special-token partitioning tries them.
    pub(crate) special_cache: Vec<TokenId>,
}

/// Texts llama.cpp recognises as the end-of-turn token when no id is given.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];
/// Texts llama.cpp always treats as end-of-generation.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

impl Vocab {
    /// Build a vocabulary from raw metadata, applying llama.cpp's defaults.
    pub fn from_data(data: VocabData) -> Result<Vocab, TokenizerError> {
        let (vocab_type, mut special) = match data.model.as_str() {
            "llama" => (
                VocabType::Spm,
                SpecialTokens {
                    bos: Some(1),
                    eos: Some(2),
                    unk: Some(0),
                    ..SpecialTokens::default()
                },
            ),
            "gpt2" => (
                VocabType::Bpe,
                SpecialTokens {
                    bos: Some(11),
                    eos: Some(11),
                    ..SpecialTokens::default()
                },
            ),
            other => return Err(TokenizerError::UnsupportedModel(other.to_string())),
        };

        let pre_name = data.pre.clone().unwrap_or_default();
        let mut pre = None;
        let mut bpe_ranks = HashMap::new();
        let (mut add_bos, mut add_eos, mut add_space_prefix, clean_spaces, ignore_merges);
        match vocab_type {
            VocabType::Spm => {
                add_bos = true;
                add_eos = false;
                add_space_prefix = true;
                clean_spaces = false;
                ignore_merges = false;
            }
            VocabType::Bpe => {
                let cfg = pre_config(&pre_name)
                    .ok_or_else(|| TokenizerError::UnknownPreTokenizer(pre_name.clone()))?;
                if cfg.no_bos {
                    special.bos = None;
                }
                add_bos = cfg.add_bos;
                add_eos = false;
                add_space_prefix = false;
                clean_spaces = cfg.clean_spaces;
                ignore_merges = cfg.ignore_merges;
                pre = Some(cfg);
                let merges = data
                    .merges
                    .as_ref()
                    .ok_or(TokenizerError::MissingKey(keys::MERGES))?;
                bpe_ranks.reserve(merges.len());
                for (rank, m) in merges.iter().enumerate() {
                    // Split at the first space after the first byte, so a
                    // merge whose left side starts with a space still parses.
                    let pos = m
                        .as_bytes()
                        .iter()
                        .skip(1)
                        .position(|&b| b == b' ')
                        .map(|p| p + 1)
                        .ok_or_else(|| TokenizerError::Malformed {
                            key: keys::MERGES,
                            detail: format!("entry {rank} ({m:?}) has no space separator"),
                        })?;
                    let rank = u32::try_from(rank).map_err(|_| TokenizerError::Malformed {
                        key: keys::MERGES,
                        detail: "too many merges".into(),
                    })?;
                    bpe_ranks
                        .entry((m[..pos].to_string(), m[pos + 1..].to_string()))
                        .or_insert(rank);
                }
            }
        }
        if let Some(v) = data.add_space_prefix {
            add_space_prefix = v;
        }

        // Tokens, scores, types.
        let n = data.tokens.len();
        if n == 0 {
            return Err(TokenizerError::Malformed {
                key: keys::TOKENS,
                detail: "the token list is empty".into(),
            });
        }
        if n > i32::MAX as usize {
            return Err(TokenizerError::Malformed {
                key: keys::TOKENS,
                detail: format!("{n} tokens do not fit a 32-bit token id"),
            });
        }
        if let Some(s) = &data.scores {
            if s.len() < n {
                return Err(TokenizerError::Malformed {
                    key: keys::SCORES,
                    detail: format!("{} scores for {n} tokens", s.len()),
                });
            }
        }
        if let Some(t) = &data.token_types {
            if t.len() < n {
                return Err(TokenizerError::Malformed {
                    key: keys::TOKEN_TYPE,
                    detail: format!("{} token types for {n} tokens", t.len()),
                });
            }
        }
        let mut tokens = Vec::with_capacity(n);
        let mut token_to_id = HashMap::with_capacity(n);
        for (i, raw) in data.tokens.iter().enumerate() {
            let id = i as TokenId;
            let text = if raw.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                String::from_utf8_lossy(raw).into_owned()
            };
            if let Some(prev) = token_to_id.insert(text.clone(), id) {
                return Err(TokenizerError::Malformed {
                    key: keys::TOKENS,
                    detail: format!("duplicate token {text:?} has ids {prev} and {i}"),
                });
            }
            let score = data.scores.as_ref().map_or(0.0, |s| s[i]);
            let attr = data
                .token_types
                .as_ref()
                .map_or(TokenAttr::NORMAL, |t| TokenAttr::from_token_type(t[i]));
            tokens.push(TokenData { text, score, attr });
        }

        // Special ids: defaults outside the vocabulary are disabled; given ids
        // outside it are ignored (keeping the default), as llama.cpp does.
        let in_range = |id: Option<TokenId>| id.filter(|&i| i >= 0 && (i as usize) < n);
        let apply = |slot: &mut Option<TokenId>, given: Option<u32>| {
            *slot = in_range(*slot);
            if let Some(g) = given {
                if (g as usize) < n {
                    *slot = Some(g as TokenId);
                }
            }
        };
        apply(&mut special.bos, data.bos);
        apply(&mut special.eos, data.eos);
        apply(&mut special.eot, data.eot);
        apply(&mut special.eom, data.eom);
        apply(&mut special.unk, data.unk);
        apply(&mut special.sep, data.sep);
        apply(&mut special.pad, data.pad);
        apply(&mut special.mask, data.mask);
        apply(&mut special.fim_pre, data.fim_pre);
        apply(&mut special.fim_suf, data.fim_suf);
        apply(&mut special.fim_mid, data.fim_mid);
        apply(&mut special.fim_pad, data.fim_pad);
        apply(&mut special.fim_rep, data.fim_rep);
        apply(&mut special.fim_sep, data.fim_sep);

        if let Some(v) = data.add_bos {
            add_bos = v;
        }
        if let Some(v) = data.add_eos {
            add_eos = v;
        }
        if add_bos && special.bos.is_none() {
            return Err(TokenizerError::Malformed {
                key: keys::ADD_BOS,
                detail: format!("is true, but {} is not set", keys::BOS_ID),
            });
        }
        if add_eos && special.eos.is_none() {
            return Err(TokenizerError::Malformed {
                key: keys::ADD_EOS,
                detail: format!("is true, but {} is not set", keys::EOS_ID),
            });
        }

        let mut v = Vocab {
            vocab_type,
            model: data.model.clone(),
            pre_name,
            pre,
            tokens,
            token_to_id,
            bpe_ranks,
            special,
            eog: BTreeSet::new(),
            add_bos,
            add_eos,
            add_space_prefix,
            clean_spaces,
            ignore_merges,
            special_cache: Vec::new(),
        };
        v.detect_special_by_text();
        v.build_eog();
        v.build_special_cache();
        if let Some(name) = &data.general_name {
            v.apply_model_name_fixups(name);
        }
        Ok(v)
    }

    /// Fill unset EOT/EOM/FIM ids from well-known token texts and mark those
    /// tokens as control tokens; then mark control tokens named "unused".
    ///
    /// llama.cpp walks a hash map here, so when several texts match, which one
    /// wins is unspecified there; this walks ids in ascending order.
    fn detect_special_by_text(&mut self) {
        let s = &mut self.special;
        let slots: [(&mut Option<TokenId>, &[&str]); 8] = [
            (&mut s.eot, EOT_TEXTS),
            (&mut s.eom, EOM_TEXTS),
            (&mut s.fim_pre, FIM_PRE_TEXTS),
            (&mut s.fim_suf, FIM_SUF_TEXTS),
            (&mut s.fim_mid, FIM_MID_TEXTS),
            (&mut s.fim_pad, FIM_PAD_TEXTS),
            (&mut s.fim_rep, FIM_REP_TEXTS),
            (&mut s.fim_sep, FIM_SEP_TEXTS),
        ];
        for (slot, texts) in slots {
            if slot.is_some() {
                continue;
            }
            if let Some(id) = self
                .tokens
                .iter()
                .position(|t| texts.contains(&t.text.as_str()))
            {
                *slot = Some(id as TokenId);
                self.tokens[id].attr = self.tokens[id].attr | TokenAttr::CONTROL;
            }
        }
        for t in &mut self.tokens {
            if t.attr.has(TokenAttr::CONTROL)
                && !t.attr.has(TokenAttr::UNUSED)
                && t.text.contains("unused")
            {
                t.attr = t.attr | TokenAttr::UNUSED;
            }
        }
    }

    /// The end-of-generation set, as llama.cpp builds it.
    fn build_eog(&mut self) {
        let s = self.special;
        let mut eog = BTreeSet::new();
        eog.extend(s.fim_pad);
        eog.extend(s.fim_rep);
        eog.extend(s.fim_sep);
        for (i, t) in self.tokens.iter_mut().enumerate() {
            if EOG_TEXTS.contains(&t.text.as_str()) {
                eog.insert(i as TokenId);
                t.attr = t.attr | TokenAttr::CONTROL;
            }
        }
        // gpt-oss: these are always rendered.
        for t in &mut self.tokens {
            if matches!(
                t.text.as_str(),
                "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>"
            ) {
                t.attr = TokenAttr::USER_DEFINED;
            }
        }
        eog.extend(s.eos);
        eog.extend(s.eot);
        eog.extend(s.eom);

        // o200k_harmony / solar-open: "<|end|>" is not EOG when the
        // "<|return|>"/"<|call|>" (or "<|calls|>"/"<|flush|>") pair exists.
        fn has(tokens: &[TokenData], eog: &BTreeSet<TokenId>, texts: &[&str]) -> bool {
            eog.iter()
                .any(|&id| texts.contains(&tokens[id as usize].text.as_str()))
        }
        let end_id = eog
            .iter()
            .copied()
            .find(|&id| self.tokens[id as usize].text == "<|end|>");
        if let Some(end_id) = end_id {
            let has_return = has(&self.tokens, &eog, &["<|return|>"]);
            let has_call = has(&self.tokens, &eog, &["<|call|>", "<|calls|>"]);
            let has_flush = has(&self.tokens, &eog, &["<|flush|>"]);
            if has_call && (has_return || has_flush) {
                eog.remove(&end_id);
                self.tokens[end_id as usize].attr = TokenAttr::USER_DEFINED;
            }
        }
        // gemma4 / paddleocr: "</s>" is not EOG next to "<|tool_response>".
        if has(&self.tokens, &eog, &["<|tool_response>"]) {
            if let Some(s_id) = eog
                .iter()
                .copied()
                .find(|&id| self.tokens[id as usize].text == "</s>")
            {
                eog.remove(&s_id);
                self.tokens[s_id as usize].attr = TokenAttr::NORMAL;
            }
        }
        self.eog = eog;
    }

    fn build_special_cache(&mut self) {
        let mask = TokenAttr::CONTROL | TokenAttr::USER_DEFINED | TokenAttr::UNKNOWN;
        let mut ids: Vec<TokenId> = (0..self.tokens.len() as TokenId)
            .filter(|&id| self.tokens[id as usize].attr.has(mask))
            .collect();
        ids.sort_by_key(|&id| std::cmp::Reverse(self.tokens[id as usize].text.len()));
        self.special_cache = ids;
    }

    /// llama.cpp's per-model attribute fix-up keyed on `general.name`
    /// (Phi-3: special tokens strip whitespace to their right).
    fn apply_model_name_fixups(&mut self, name: &str) {
        let name = name.to_ascii_lowercase();
        if name.contains("phi-3") || name.contains("phi3") {
            for &id in &self.special_cache {
                let t = &mut self.tokens[id as usize];
                t.attr = t.attr | TokenAttr::RSTRIP;
            }
            if let Some(&id) = self.token_to_id.get("</s>") {
                let t = &mut self.tokens[id as usize];
                t.attr = t.attr | TokenAttr::RSTRIP;
            }
            for text in ["<unk>", "<s>", "<|endoftext|>"] {
                if let Some(&id) = self.token_to_id.get(text) {
                    let t = &mut self.tokens[id as usize];
                    t.attr = TokenAttr(t.attr.0 & !TokenAttr::RSTRIP.0);
                }
            }
        }
    }

    /// Number of tokens.
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    /// Vocabulary entry for `id`, if in range.
    pub fn token(&self, id: TokenId) -> Option<&TokenData> {
        usize::try_from(id).ok().and_then(|i| self.tokens.get(i))
    }

    /// Id of the token whose text is exactly `text`.
    pub fn text_to_token(&self, text: &str) -> Option<TokenId> {
        self.token_to_id.get(text).copied()
    }

    /// The token standing for raw byte `b`: `<0xXX>` (SPM), falling back to
    /// the one-character token; for BPE the byte-level character.
    pub fn byte_to_token(&self, b: u8) -> Option<TokenId> {
        match self.vocab_type {
            VocabType::Spm => self.text_to_token(&format!("<0x{b:02X}>")).or_else(|| {
                b.is_ascii()
                    .then(|| self.text_to_token(&char::from(b).to_string()))
                    .flatten()
            }),
            VocabType::Bpe => self.text_to_token(&super::byte_level::byte_to_char(b).to_string()),
        }
    }

    /// The byte a `<0xXX>` byte token stands for.
    pub fn token_to_byte(&self, id: TokenId) -> Option<u8> {
        let t = self.token(id)?;
        let hex = t.text.strip_prefix("<0x")?.strip_suffix('>')?;
        u8::from_str_radix(hex, 16).ok()
    }

    /// BPE merge rank of (left, right); lower merges first.
    pub fn bpe_rank(&self, left: &str, right: &str) -> Option<u32> {
        self.bpe_ranks
            .get(&(left.to_string(), right.to_string()))
            .copied()
    }
}
