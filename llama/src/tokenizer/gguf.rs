//! Reading the tokenizer metadata (`tokenizer.ggml.*`) out of a GGUF file.

use ggml_core::gguf::{GgufArray, GgufFile};

use super::error::TokenizerError;
use super::vocab::{keys, VocabData};
use super::Tokenizer;

fn malformed(key: &'static str, detail: impl ToString) -> TokenizerError {
    TokenizerError::Malformed {
        key,
        detail: detail.to_string(),
    }
}

fn opt_u32(f: &GgufFile, key: &'static str) -> Result<Option<u32>, TokenizerError> {
    f.get_u32(key).map_err(|e| malformed(key, e))
}

fn opt_bool(f: &GgufFile, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    f.get_bool(key).map_err(|e| malformed(key, e))
}

fn opt_array<'a>(
    f: &'a GgufFile,
    key: &'static str,
) -> Result<Option<&'a GgufArray>, TokenizerError> {
    f.get_array(key).map_err(|e| malformed(key, e))
}

fn strings(a: &GgufArray, key: &'static str) -> Result<Vec<Vec<u8>>, TokenizerError> {
    let s = a.as_strings().ok_or_else(|| {
        malformed(
            key,
            format!("expected an array of strings, found {}", a.elem_type()),
        )
    })?;
    Ok(s.iter().map(|x| x.as_bytes().to_vec()).collect())
}

/// Collect the tokenizer keys of `file` into a [`VocabData`].
pub fn vocab_data_from_gguf(file: &GgufFile) -> Result<VocabData, TokenizerError> {
    let model = file
        .get_str(keys::MODEL)
        .map_err(|e| malformed(keys::MODEL, e))?
        .ok_or(TokenizerError::MissingKey(keys::MODEL))?
        .to_string();
    let pre = file
        .get_str(keys::PRE)
        .map_err(|e| malformed(keys::PRE, e))?
        .map(str::to_string);
    let tokens = strings(
        opt_array(file, keys::TOKENS)?.ok_or(TokenizerError::MissingKey(keys::TOKENS))?,
        keys::TOKENS,
    )?;
    let scores = match opt_array(file, keys::SCORES)? {
        None => None,
        Some(GgufArray::F32(v)) => Some(v.clone()),
        Some(GgufArray::I32(v)) => Some(v.iter().map(|&x| x as f32).collect()),
        Some(a) => {
            return Err(malformed(
                keys::SCORES,
                format!("expected f32 or i32 elements, found {}", a.elem_type()),
            ))
        }
    };
    let token_types = match opt_array(file, keys::TOKEN_TYPE)? {
        None => None,
        Some(a) => Some(a.as_i32_vec().ok_or_else(|| {
            malformed(
                keys::TOKEN_TYPE,
                format!("expected i32 elements, found {}", a.elem_type()),
            )
        })?),
    };
    let merges = match opt_array(file, keys::MERGES)? {
        None => None,
        Some(a) => Some(
            strings(a, keys::MERGES)?
                .into_iter()
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .collect(),
        ),
    };
    Ok(VocabData {
        model,
        pre,
        tokens,
        scores,
        token_types,
        merges,
        bos: opt_u32(file, keys::BOS_ID)?,
        eos: opt_u32(file, keys::EOS_ID)?,
        eot: opt_u32(file, keys::EOT_ID)?,
        eom: opt_u32(file, keys::EOM_ID)?,
        unk: opt_u32(file, keys::UNK_ID)?,
        sep: opt_u32(file, keys::SEP_ID)?,
        pad: opt_u32(file, keys::PAD_ID)?,
        mask: opt_u32(file, keys::MASK_ID)?,
        fim_pre: opt_u32(file, keys::FIM_PRE_ID)?,
        fim_suf: opt_u32(file, keys::FIM_SUF_ID)?,
        fim_mid: opt_u32(file, keys::FIM_MID_ID)?,
        fim_pad: opt_u32(file, keys::FIM_PAD_ID)?,
        fim_rep: opt_u32(file, keys::FIM_REP_ID)?,
        fim_sep: opt_u32(file, keys::FIM_SEP_ID)?,
        add_bos: opt_bool(file, keys::ADD_BOS)?,
        add_eos: opt_bool(file, keys::ADD_EOS)?,
        add_space_prefix: opt_bool(file, keys::ADD_SPACE_PREFIX)?,
        general_name: file
            .get_str(keys::GENERAL_NAME)
            .ok()
            .flatten()
            .map(str::to_string),
    })
}

impl Tokenizer {
    /// Build the tokenizer described by a GGUF file's `tokenizer.ggml.*` keys.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_vocab_data(vocab_data_from_gguf(file)?)
    }
}
