//! BPE pre-tokenizers: the `tokenizer.ggml.pre` names llama.cpp accepts, the
//! regex list each one applies, and the engine that applies them.
//!
//! llama.cpp splits text with a *list* of regexes: the first regex splits the
//! whole text, each following regex splits every piece again, and both the
//! matches and the unmatched gaps between them become pieces. Two regexes (the
//! GPT-2 one and the Llama-3 one) are run by hand-written splitters; the others
//! run through `std::regex`, on a "collapsed" copy of the text where every
//! non-ASCII codepoint is replaced by one stand-in character per Unicode
//! category and `\p{..}` classes are rewritten to match those stand-ins. This
//! module reproduces the same three paths (with `fancy-regex` for the regex
//! ones) so that pieces come out exactly as llama.cpp's do, quirks included
//! (e.g. `~` is not `\p{S}` in the collapsed form).

use fancy_regex::{Regex, RegexBuilder};

use super::error::TokenizerError;
use super::unicode;

/// The GPT-2 regex; llama.cpp runs it with a hand-written splitter.
const RE_GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// The Llama-3 regex (case-insensitive contractions spelled out); llama.cpp
/// runs it with a hand-written splitter.
const RE_LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Same as the Llama-3 regex with the case-insensitive group form; also custom.
const RE_LLAMA3_ALT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

const RE_QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const RE_QWEN35: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const RE_GPT4O: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const RE_TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const RE_SEED_CODER: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+";
const RE_BAILINGMOE: &str = r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";
const RE_DEEPSEEK3: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
const RE_BLOOM: &str = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+";

/// Which regex list a pre-tokenizer applies (llama.cpp's `LLAMA_VOCAB_PRE_TYPE_*`
/// groups that share one list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreType {
    /// No or `default` pre-tokenizer.
    Default,
    /// Llama 3 (also dbrx, smaug).
    Llama3,
    /// DeepSeek LLM (v1 chat/base).
    DeepseekLlm,
    /// DeepSeek Coder.
    DeepseekCoder,
    /// DeepSeek V3 (also hunyuan-dense, joyai-llm, hy_v4).
    Deepseek3,
    /// Falcon.
    Falcon,
    /// StarCoder family (refact, command-r, smollm, codeshell, exaone, minerva).
    Starcoder,
    /// GPT-2 family (phi-2, mpt, olmo, jais, ...).
    Gpt2,
    /// Qwen2 family (stablelm2, hunyuan, megrez, deepseek-r1-qwen, ...).
    Qwen2,
    /// Qwen3.5: Qwen2 with combining marks kept inside words.
    Qwen35,
    /// poro-chat, bloom, gpt3-finnish.
    Bloom,
    /// ChatGLM-4 / GLM-4.
    ChatGlm4,
    /// Viking (LumiOpen).
    Viking,
    /// Mistral's Tekken (Mistral NeMo).
    Tekken,
    /// gpt-4o, llama4, minimax-m2 (o200k style, as gpt-oss uses).
    Gpt4o,
    /// ByteDance Seed-Coder.
    SeedCoder,
    /// Ling / Bailing MoE.
    BailingMoe,
    /// Grok-2.
    Grok2,
}

/// Per-pre-tokenizer vocabulary settings llama.cpp applies when it recognises
/// a `tokenizer.ggml.pre` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreConfig {
    /// Which pre-tokenizer regexes split the text.
    pub pre_type: PreType,
    /// Apply llama.cpp's `clean_up_tokenization_spaces` when detokenizing.
    pub clean_spaces: bool,
    /// Look whole pre-tokenized words up in the vocabulary before merging.
    pub ignore_merges: bool,
    /// Default for `add_bos` when `tokenizer.ggml.add_bos_token` is absent.
    pub add_bos: bool,
    /// The pre-tokenizer disables the default BOS id (chatglm).
    pub no_bos: bool,
}

impl PreConfig {
    const fn new(pre_type: PreType, clean_spaces: bool) -> PreConfig {
        PreConfig {
            pre_type,
            clean_spaces,
            ignore_merges: false,
            add_bos: false,
            no_bos: false,
        }
    }
}

/// Map a `tokenizer.ggml.pre` value to its settings, as llama.cpp's
/// `llama_vocab::impl::load` does. `None` means llama.cpp would reject it.
/// An absent or empty name is `default`.
pub fn pre_config(name: &str) -> Option<PreConfig> {
    use PreType as P;
    let c = match name {
        "" | "default" => PreConfig::new(P::Default, true),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" | "jina-v5-nano" => PreConfig {
            ignore_merges: true,
            add_bos: true,
            ..PreConfig::new(P::Llama3, true)
        },
        "dbrx" | "smaug-bpe" => PreConfig::new(P::Llama3, true),
        "deepseek-llm" => PreConfig::new(P::DeepseekLlm, false),
        "deepseek-coder" => PreConfig::new(P::DeepseekCoder, false),
        "deepseek-v3" | "hunyuan-dense" | "joyai-llm" | "hy_v4" => {
            PreConfig::new(P::Deepseek3, false)
        }
        "falcon" => PreConfig::new(P::Falcon, true),
        "mpt" | "olmo" | "jais" | "exaone4" => PreConfig::new(P::Gpt2, true),
        "trillion" | "granite-docling" => PreConfig::new(P::Gpt2, false),
        "starcoder" | "refact" | "codeshell" | "exaone" | "minerva-7b" | "mellum2" => {
            PreConfig::new(P::Starcoder, true)
        }
        "command-r" | "smollm" => PreConfig::new(P::Starcoder, false),
        "gpt-2" | "phi-2" | "jina-es" | "jina-de" | "gigachat" | "jina-v2-es" | "jina-v2-de"
        | "a.x-4.0" | "mellum" | "modern-bert" => PreConfig::new(P::Gpt2, true),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "hunyuan" | "solar-open" => {
            PreConfig::new(P::Qwen2, false)
        }
        "stablelm2" | "megrez" => PreConfig::new(P::Qwen2, true),
        "qwen35" => PreConfig::new(P::Qwen35, false),
        "poro-chat" => PreConfig::new(P::Bloom, false),
        "bloom" | "gpt3-finnish" => PreConfig::new(P::Bloom, true),
        "glm4" | "chatglm-bpe" => PreConfig {
            no_bos: true,
            ..PreConfig::new(P::ChatGlm4, true)
        },
        "viking" => PreConfig::new(P::Viking, false),
        "tekken" => PreConfig {
            ignore_merges: true,
            add_bos: true,
            ..PreConfig::new(P::Tekken, false)
        },
        "gpt-4o" | "llama4" | "kanana2" | "talkie" | "minimax-m2" => {
            PreConfig::new(P::Gpt4o, false)
        }
        "seed-coder" => PreConfig::new(P::SeedCoder, false),
        "bailingmoe" | "bailingmoe2" | "llada-moe" => PreConfig::new(P::BailingMoe, false),
        "grok-2" => PreConfig::new(P::Grok2, false),
        _ => return None,
    };
    Some(c)
}

/// The regex list of a pre-tokenizer, in application order.
pub fn regexes(pre: PreType) -> Vec<&'static str> {
    use PreType as P;
    match pre {
        P::Default => vec![
            r"[\p{P}\$\+<=>\^~\|]+",
            RE_GPT2,
            r"\p{N}+",
            "[0-9][0-9][0-9]",
        ],
        P::Llama3 => vec![RE_LLAMA3],
        P::DeepseekLlm => vec![
            "[\r\n]",
            r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+",
            r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
            "\\s+$",
            r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
            r"\p{N}+",
        ],
        P::DeepseekCoder => vec![
            "[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+",
            r"\p{N}",
        ],
        P::Deepseek3 => vec![
            r"\p{N}{1,3}",
            r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
            RE_DEEPSEEK3,
        ],
        P::Falcon => vec![r"[\p{P}\$\+<=>\^~\|`]+", RE_GPT2, "[0-9][0-9][0-9]"],
        P::Starcoder => vec![r"\p{N}", RE_GPT2],
        P::Gpt2 => vec![RE_GPT2],
        P::Qwen2 | P::Grok2 => vec![RE_QWEN2],
        P::Qwen35 => vec![RE_QWEN35],
        P::Bloom => vec![RE_BLOOM],
        P::ChatGlm4 => vec![RE_LLAMA3],
        P::Viking => vec![RE_BLOOM, r"\p{N}"],
        P::Tekken => vec![RE_TEKKEN],
        P::Gpt4o => vec![RE_GPT4O],
        P::SeedCoder => vec![RE_SEED_CODER],
        P::BailingMoe => vec![RE_BAILINGMOE],
    }
}

/// Unicode category names llama.cpp rewrites in collapsed mode, with the
/// class body (stand-in codepoint plus the ASCII members) each becomes.
const CATEGORY_CLASSES: &[(&str, &str)] = &[
    (r"\p{N}", r"\x{D1}0-9"),
    (r"\p{L}", r"\x{D2}A-Za-z"),
    (r"\p{Lu}", r"\x{D2}A-Za-z"),
    (r"\p{Ll}", r"\x{D2}A-Za-z"),
    (r"\p{Lt}", r"\x{D2}A-Za-z"),
    (r"\p{Lm}", r"\x{D2}A-Za-z"),
    (r"\p{Lo}", r"\x{D2}A-Za-z"),
    (
        r"\p{P}",
        r"\x{D3}\x{21}-\x{23}\x{25}-\x{2A}\x{2C}-\x{2F}\x{3A}-\x{3B}\x{3F}-\x{40}\x{5B}-\x{5D}\x{5F}\x{7B}\x{7D}",
    ),
    (r"\p{M}", r"\x{D4}"),
    (
        r"\p{S}",
        r"\x{D5}\x{24}\x{2B}\x{3C}-\x{3E}\x{5E}\x{60}\x{7C}",
    ),
];

fn uses_categories(re: &str) -> bool {
    CATEGORY_CLASSES.iter().any(|(name, _)| re.contains(name))
}

/// Rewrite `\p{..}` classes to match collapsed text, as llama.cpp does.
fn collapse_regex(re: &str) -> String {
    let bytes = re.as_bytes();
    let mut out = String::with_capacity(re.len() * 2);
    let mut in_class = false;
    let mut i = 0;
    while i < re.len() {
        let rest = &re[i..];
        if bytes[i] == b'\\' {
            if let Some((name, body)) = CATEGORY_CLASSES.iter().find(|(n, _)| rest.starts_with(n)) {
                if in_class {
                    out.push_str(body);
                } else {
                    out.push('[');
                    out.push_str(body);
                    out.push(']');
                }
                i += name.len();
                continue;
            }
            // Copy the escape and the escaped character verbatim.
            let mut chars = rest.chars();
            out.push(chars.next().unwrap_or('\\'));
            if let Some(c) = chars.next() {
                out.push(c);
                i += 1 + c.len_utf8();
            } else {
                i += 1;
            }
            continue;
        }
        let c = rest.chars().next().unwrap_or('\0');
        if c == '[' {
            in_class = true;
        } else if c == ']' && in_class {
            in_class = false;
        }
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// One splitting step.
#[derive(Debug)]
enum Step {
    /// The GPT-2 regex, by hand.
    Gpt2,
    /// The Llama-3 regex, by hand.
    Llama3,
    /// A regex run over collapsed text (`collapsed`) or over the text with
    /// non-ASCII whitespace replaced by U+000B.
    Regex { re: Box<Regex>, collapsed: bool },
}

/// A compiled pre-tokenizer: splits text into words (before byte encoding).
#[derive(Debug)]
pub struct PreTokenizer {
    steps: Vec<Step>,
}

impl PreTokenizer {
    /// Compile the regex list of `pre`.
    pub fn new(pre: PreType) -> Result<PreTokenizer, TokenizerError> {
        let mut steps = Vec::new();
        for src in regexes(pre) {
            let step = if src == RE_GPT2 {
                Step::Gpt2
            } else if src == RE_LLAMA3 || src == RE_LLAMA3_ALT {
                Step::Llama3
            } else {
                let collapsed = uses_categories(src);
                let pattern = if collapsed {
                    collapse_regex(src)
                } else {
                    src.to_string()
                };
                let re = RegexBuilder::new(&pattern)
                    .backtrack_limit(10_000_000)
                    .build()
                    .map_err(|e| TokenizerError::Regex {
                        pattern: src.to_string(),
                        message: e.to_string(),
                    })?;
                Step::Regex {
                    re: Box::new(re),
                    collapsed,
                }
            };
            steps.push(step);
        }
        Ok(PreTokenizer { steps })
    }

    /// Split `text` into words, in order; their concatenation is `text`.
    pub fn split(&self, text: &str) -> Vec<String> {
        let cpts: Vec<char> = text.chars().collect();
        if cpts.is_empty() {
            return Vec::new();
        }
        let mut lens = vec![cpts.len()];
        let mut collapsed: Option<Haystack> = None;
        let mut ws_only: Option<Haystack> = None;
        for step in &self.steps {
            lens = match step {
                Step::Gpt2 => split_gpt2(&cpts, &lens),
                Step::Llama3 => split_llama3(&cpts, &lens),
                Step::Regex {
                    re,
                    collapsed: true,
                } => {
                    let hay = collapsed.get_or_insert_with(|| {
                        Haystack::new(cpts.iter().map(|&c| unicode::collapse(c)))
                    });
                    hay.split(re, &lens)
                }
                Step::Regex {
                    re,
                    collapsed: false,
                } => {
                    let hay = ws_only.get_or_insert_with(|| {
                        Haystack::new(cpts.iter().map(|&c| {
                            if !c.is_ascii() && unicode::is_whitespace(c) {
                                '\u{0B}'
                            } else {
                                c
                            }
                        }))
                    });
                    hay.split(re, &lens)
                }
            };
        }
        let mut words = Vec::with_capacity(lens.len());
        let mut start = 0;
        for len in lens {
            words.push(cpts[start..start + len].iter().collect());
            start += len;
        }
        words
    }
}

/// A transformed copy of the text with one char per original codepoint, and
/// the byte offset of each char (plus the end).
struct Haystack {
    text: String,
    offsets: Vec<usize>,
}

impl Haystack {
    fn new(chars: impl Iterator<Item = char>) -> Haystack {
        let mut text = String::new();
        let mut offsets = Vec::new();
        for c in chars {
            offsets.push(text.len());
            text.push(c);
        }
        offsets.push(text.len());
        Haystack { text, offsets }
    }

    fn char_index(&self, byte: usize) -> usize {
        // Matches always start and end on char boundaries.
        self.offsets.binary_search(&byte).unwrap_or_else(|i| i)
    }

    /// Split each piece (given as codepoint lengths) by `re`, keeping matches
    /// and the gaps between them, like llama.cpp's `unicode_regex_split_stl`.
    fn split(&self, re: &Regex, lens: &[usize]) -> Vec<usize> {
        let mut out = Vec::with_capacity(lens.len());
        let mut start = 0;
        for &len in lens {
            let b0 = self.offsets[start];
            let b1 = self.offsets[start + len];
            let piece = &self.text[b0..b1];
            let mut done = start;
            for m in re.find_iter(piece) {
                // A regex that gives up (backtrack limit) leaves the rest of
                // the piece as one gap rather than failing the whole call.
                let Ok(m) = m else { break };
                if m.start() == m.end() {
                    continue;
                }
                let ms = self.char_index(b0 + m.start());
                let me = self.char_index(b0 + m.end());
                if ms > done {
                    out.push(ms - done);
                }
                out.push(me - ms);
                done = me;
            }
            if start + len > done {
                out.push(start + len - done);
            }
            start += len;
        }
        out
    }
}

/// Cursor over one piece for the hand-written splitters: positions outside
/// the piece read as "no codepoint".
struct Piece<'a> {
    cpts: &'a [char],
    ini: usize,
    end: usize,
}

impl Piece<'_> {
    fn cpt(&self, pos: usize) -> Option<char> {
        (self.ini <= pos && pos < self.end).then(|| self.cpts[pos])
    }
    fn flags(&self, pos: usize) -> Option<unicode::CptFlags> {
        self.cpt(pos).map(unicode::flags)
    }
    fn is_letter(&self, pos: usize) -> bool {
        self.flags(pos).is_some_and(|f| f.letter)
    }
    fn is_number(&self, pos: usize) -> bool {
        self.flags(pos).is_some_and(|f| f.number)
    }
    fn is_whitespace(&self, pos: usize) -> bool {
        self.flags(pos).is_some_and(|f| f.whitespace)
    }
    /// In the piece and not whitespace, letter or number: `[^\s\p{L}\p{N}]`.
    fn is_other(&self, pos: usize) -> bool {
        self.flags(pos)
            .is_some_and(|f| !(f.whitespace || f.letter || f.number))
    }
}

/// Emits word lengths for one piece.
struct Emitter<'a> {
    out: &'a mut Vec<usize>,
    prev_end: usize,
}

impl Emitter<'_> {
    fn add(&mut self, end: usize) -> usize {
        let len = end.saturating_sub(self.prev_end);
        if len > 0 {
            self.out.push(len);
        }
        self.prev_end = end;
        len
    }
}

/// If a contraction (`'s 't 're 've 'm 'll 'd`) starts at `pos`, its length.
fn contraction_len(p: &Piece<'_>, pos: usize, ignore_case: bool) -> Option<usize> {
    if p.cpt(pos) != Some('\'') || pos + 1 >= p.end {
        return None;
    }
    let low = |c: Option<char>| {
        c.map(|c| {
            if ignore_case {
                c.to_ascii_lowercase()
            } else {
                c
            }
        })
    };
    let n1 = low(p.cpt(pos + 1))?;
    if matches!(n1, 's' | 't' | 'm' | 'd') {
        return Some(2);
    }
    if pos + 2 < p.end {
        let n2 = low(p.cpt(pos + 2))?;
        if matches!((n1, n2), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
            return Some(3);
        }
    }
    None
}

/// Trailing-whitespace handling shared by both splitters: `\s+(?!\S)` then
/// `\s+`. Returns the new position, or `None` when `pos` is not whitespace.
fn whitespace_run(p: &Piece<'_>, pos: usize) -> Option<usize> {
    let mut n = 0;
    while p.is_whitespace(pos + n) {
        n += 1;
    }
    if n > 1 && p.cpt(pos + n).is_some() {
        Some(pos + n - 1)
    } else if n > 0 {
        Some(pos + n)
    } else {
        None
    }
}

/// Split each piece (consecutive spans of `cpts`, `lens` long) with `split`,
/// which emits the ends of its words; returns the word lengths in order.
fn split_pieces(
    cpts: &[char],
    lens: &[usize],
    split: fn(&Piece<'_>, &mut Emitter<'_>),
) -> Vec<usize> {
    let mut out = Vec::with_capacity(lens.len());
    let mut start = 0;
    for &len in lens {
        let p = Piece {
            cpts,
            ini: start,
            end: start + len,
        };
        start += len;
        let mut e = Emitter {
            out: &mut out,
            prev_end: p.ini,
        };
        split(&p, &mut e);
    }
    out
}

/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
fn split_gpt2(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    split_pieces(cpts, lens, gpt2_piece)
}

/// One piece of [`split_gpt2`].
fn gpt2_piece(p: &Piece<'_>, e: &mut Emitter<'_>) {
    let mut pos = p.ini;
    while pos < p.end {
        if let Some(n) = contraction_len(p, pos, false) {
            pos += e.add(pos + n);
            continue;
        }
        let space = p.cpt(pos) == Some(' ');
        let at = if space { pos + 1 } else { pos };
        let classes: [&dyn Fn(usize) -> bool; 3] =
            [&|i| p.is_letter(i), &|i| p.is_number(i), &|i| p.is_other(i)];
        if let Some(class) = classes.iter().find(|f| f(at)) {
            pos = at;
            while class(pos) {
                pos += 1;
            }
            e.add(pos);
            continue;
        }
        if let Some(next) = whitespace_run(p, pos) {
            pos = next;
            e.add(pos);
            continue;
        }
        pos += 1;
        e.add(pos);
    }
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
fn split_llama3(cpts: &[char], lens: &[usize]) -> Vec<usize> {
    split_pieces(cpts, lens, llama3_piece)
}

/// One piece of [`split_llama3`].
fn llama3_piece(p: &Piece<'_>, e: &mut Emitter<'_>) {
    let mut pos = p.ini;
    while pos < p.end {
        let cpt = p.cpt(pos).unwrap_or('\0');
        if let Some(n) = contraction_len(p, pos, true) {
            pos += e.add(pos + n);
            continue;
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if !(cpt == '\r' || cpt == '\n' || p.is_number(pos))
            && (p.is_letter(pos) || p.is_letter(pos + 1))
        {
            pos += 1;
            while p.is_letter(pos) {
                pos += 1;
            }
            e.add(pos);
            continue;
        }
        // \p{N}{1,3}
        if p.is_number(pos) {
            let mut ini = pos;
            while p.is_number(pos) {
                pos += 1;
                if pos - ini >= 3 {
                    e.add(pos);
                    ini = pos;
                }
            }
            e.add(pos);
            continue;
        }
        // <space>?[^\s\p{L}\p{N}]+[\r\n]*
        let at = if cpt == ' ' { pos + 1 } else { pos };
        if p.is_other(at) {
            pos = at;
            while p.is_other(pos) {
                pos += 1;
            }
            while matches!(p.cpt(pos), Some('\r' | '\n')) {
                pos += 1;
            }
            e.add(pos);
            continue;
        }
        // \s*[\r\n]+
        let mut n = 0;
        let mut last_nl = None;
        while p.is_whitespace(pos + n) {
            if matches!(p.cpt(pos + n), Some('\r' | '\n')) {
                last_nl = Some(pos + n + 1);
            }
            n += 1;
        }
        if let Some(end) = last_nl {
            pos = end;
            e.add(pos);
            continue;
        }
        if let Some(next) = whitespace_run(p, pos) {
            pos = next;
            e.add(pos);
            continue;
        }
        pos += 1;
        e.add(pos);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: PreType, text: &str) -> Vec<String> {
        PreTokenizer::new(pre).unwrap().split(text)
    }

    #[test]
    fn all_pre_types_compile() {
        use PreType as P;
        for p in [
            P::Default,
            P::Llama3,
            P::DeepseekLlm,
            P::DeepseekCoder,
            P::Deepseek3,
            P::Falcon,
            P::Starcoder,
            P::Gpt2,
            P::Qwen2,
            P::Qwen35,
            P::Bloom,
            P::ChatGlm4,
            P::Viking,
            P::Tekken,
            P::Gpt4o,
            P::SeedCoder,
            P::BailingMoe,
            P::Grok2,
        ] {
            let w = words(p, "Hello world's 12345 \u{FC}n\u{EF}code\n\n  end  ");
            assert_eq!(
                w.concat(),
                "Hello world's 12345 \u{FC}n\u{EF}code\n\n  end  ",
                "{p:?}"
            );
        }
    }

    #[test]
    fn gpt2_splits() {
        assert_eq!(
            words(PreType::Gpt2, "Hello   world's 123!!"),
            ["Hello", "  ", " world", "'s", " 123", "!!"]
        );
    }

    #[test]
    fn llama3_splits() {
        assert_eq!(
            words(PreType::Llama3, "I'M 12345\n\n x"),
            ["I", "'M", " ", "123", "45", "\n\n", " x"]
        );
    }

    #[test]
    fn qwen2_splits_digits() {
        assert_eq!(words(PreType::Qwen2, "ab 12"), ["ab", " ", "1", "2"]);
    }

    /// A pre-tokenizer that runs `src` through the general regex path.
    fn regex_only(src: &str) -> PreTokenizer {
        let re = RegexBuilder::new(&collapse_regex(src)).build().unwrap();
        PreTokenizer {
            steps: vec![Step::Regex {
                re: Box::new(re),
                collapsed: true,
            }],
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 256,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// The hand-written GPT-2 and Llama-3 splitters agree with running
        /// their regexes through the collapsed-regex engine, which checks
        /// both paths against each other.
        #[test]
        fn custom_splitters_agree_with_regex_engine(
            text in "[ \t\r\na-zA-Z0-9'.,!?\u{e9}\u{301}\u{660}\u{3000}\u{a0}\u{4e00}\u{1f600}_-]{0,40}"
        ) {
            let gpt2 = PreTokenizer::new(PreType::Gpt2).unwrap().split(&text);
            proptest::prop_assert_eq!(gpt2, regex_only(RE_GPT2).split(&text));
            let llama3 = PreTokenizer::new(PreType::Llama3).unwrap().split(&text);
            proptest::prop_assert_eq!(llama3, regex_only(RE_LLAMA3).split(&text));
        }
    }

    #[test]
    fn collapse_rewrites_categories() {
        assert_eq!(collapse_regex(r"\p{N}+"), r"[\x{D1}0-9]+");
        assert_eq!(collapse_regex(r"[^\s\p{L}]"), r"[^\s\x{D2}A-Za-z]");
    }
}
