//! llama.cpp's one-line model description (`llama_model_desc`), the
//! `model_type` field: `ARCH TYPE FTYPE`, e.g. `qwen3moe 30B.A3B Q4_K -
//! Medium`. TYPE comes from llama.cpp's per-architecture tables of known
//! sizes (by layer count), `?B` for any other; FTYPE from
//! `general.file_type`, or guessed from the most common weight type as
//! llama.cpp does (with ` (guessed)`).

use ggml_core::GgmlType;
use llama::arch::Arch;
use llama::Model;

/// `llama_model_desc` for a loaded model.
pub fn model_desc(model: &Model) -> String {
    let hp = &model.hparams;
    let size = size_name(hp.arch, hp.n_layer, hp.n_expert);
    let ftype = match model.file.get_u32("general.file_type").ok().flatten() {
        Some(ft) => ftype_name(ft).to_string(),
        None => guessed_ftype(model),
    };
    format!("{} {size} {ftype}", hp.arch.name())
}

/// llama.cpp's `llm_type_name` of the size its loader infers.
pub fn size_name(arch: Arch, n_layer: usize, n_expert: usize) -> &'static str {
    match (arch, n_layer) {
        (Arch::Qwen3Moe, 48) => "30B.A3B",
        (Arch::Qwen3Moe, 94) => "235B.A22B",
        (Arch::Qwen2Moe, 24) => "A2.7B",
        (Arch::Qwen2Moe, 28) => "57B.A14B",
        (Arch::Olmoe, 16) => "A1.7B",
        (Arch::Llama, 32) if n_expert == 8 => "8x7B",
        (Arch::Llama, 56) if n_expert == 8 => "8x22B",
        _ => "?B",
    }
}

/// llama.cpp's `llama_model_ftype_name` for a `general.file_type` value.
pub fn ftype_name(ft: u32) -> &'static str {
    match ft {
        0 => "all F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        19 => "IQ2_XXS - 2.0625 bpw",
        20 => "IQ2_XS - 2.3125 bpw",
        21 => "Q2_K - Small",
        22 => "IQ3_XS - 3.3 bpw",
        23 => "IQ3_XXS - 3.0625 bpw",
        24 => "IQ1_S - 1.5625 bpw",
        25 => "IQ4_NL - 4.5 bpw",
        26 => "IQ3_S - 3.4375 bpw",
        27 => "IQ3_S mix - 3.66 bpw",
        28 => "IQ2_S - 2.5 bpw",
        29 => "IQ2_M - 2.7 bpw",
        30 => "IQ4_XS - 4.25 bpw",
        31 => "IQ1_M - 1.75 bpw",
        32 => "BF16",
        36 => "TQ1_0 - 1.69 bpw ternary",
        37 => "TQ2_0 - 2.06 bpw ternary",
        38 => "MXFP4 MoE",
        _ => "unknown, may not work",
    }
}

/// The file type of the most common weight type (llama.cpp's guess when
/// `general.file_type` is missing).
fn guessed_ftype(model: &Model) -> String {
    let mut counts: Vec<(GgmlType, usize)> = Vec::new();
    for w in &model.weights {
        match counts.iter_mut().find(|(t, _)| *t == w.ty) {
            Some((_, n)) => *n += 1,
            None => counts.push((w.ty, 1)),
        }
    }
    let top = counts.iter().max_by_key(|(_, n)| *n).map(|(t, _)| *t);
    let ft = match top {
        Some(GgmlType::F32) => 0,
        Some(GgmlType::F16) => 1,
        Some(GgmlType::Q4_0) => 2,
        Some(GgmlType::Q4_1) => 3,
        Some(GgmlType::Q8_0) => 7,
        Some(GgmlType::Q5_0) => 8,
        Some(GgmlType::Q5_1) => 9,
        Some(GgmlType::Q2K) => 10,
        Some(GgmlType::Q3K) => 12,
        Some(GgmlType::Q4K) => 15,
        Some(GgmlType::Q5K) => 17,
        Some(GgmlType::Q6K) => 18,
        Some(GgmlType::BF16) => 32,
        _ => u32::MAX,
    };
    format!("{} (guessed)", ftype_name(ft))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_llama_cpp() {
        assert_eq!(size_name(Arch::Qwen3Moe, 48, 128), "30B.A3B");
        assert_eq!(size_name(Arch::Qwen3Moe, 2, 16), "?B");
        assert_eq!(size_name(Arch::Llama, 32, 8), "8x7B");
        assert_eq!(size_name(Arch::Llama, 32, 16), "?B");
        assert_eq!(ftype_name(15), "Q4_K - Medium");
        assert_eq!(ftype_name(0), "all F32");
        assert_eq!(ftype_name(38), "MXFP4 MoE");
    }
}
