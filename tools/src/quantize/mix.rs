//! llama.cpp's quantization mixes (`LLAMA_FTYPE_MOSTLY_*`: Q4_K_M, Q4_K_S,
//! Q5_K_M, Q3_K_M, Q6_K, Q8_0, ...) and the type each tensor gets in one:
//! more bits for the output head, `attn_v` / `attn_k` of 8-expert models,
//! `attn_output`, and some `ffn_down` layers (`use_more_bits`), the
//! fallback when rows do not split into the type's blocks, as
//! `llama_tensor_get_type` chooses without an importance matrix.

use ggml_core::GgmlType;
use synth::ftype::{fit_rows, pure_file_type};

/// A target of `llama-quantize`: a named mix, or every matrix to one type
/// (`--pure`, or a type no mix is named after).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// llama.cpp's mix of this name.
    Named(Ftype),
    /// Every quantizable matrix to this type (and its fallback).
    Pure(GgmlType),
}

/// llama.cpp's `llama_ftype` values that `llama-quantize` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum Ftype {
    /// All F32.
    F32,
    /// Matrices F16.
    F16,
    /// Matrices BF16.
    BF16,
    /// Q4_0.
    Q4_0,
    /// Q4_1.
    Q4_1,
    /// Q5_0.
    Q5_0,
    /// Q5_1.
    Q5_1,
    /// Q8_0.
    Q8_0,
    /// Q2_K.
    Q2_K,
    /// Q3_K small.
    Q3_K_S,
    /// Q3_K medium.
    Q3_K_M,
    /// Q3_K large.
    Q3_K_L,
    /// Q4_K small.
    Q4_K_S,
    /// Q4_K medium.
    Q4_K_M,
    /// Q5_K small.
    Q5_K_S,
    /// Q5_K medium.
    Q5_K_M,
    /// Q6_K.
    Q6_K,
}

/// Every mix `llama-quantize` knows, with its name, llama.cpp's
/// description, and whether it is an alias.
pub const MIXES: &[(&str, Ftype, &str)] = &[
    ("Q4_0", Ftype::Q4_0, "4.34G, +0.4685 ppl @ Llama-3-8B"),
    ("Q4_1", Ftype::Q4_1, "4.78G, +0.4511 ppl @ Llama-3-8B"),
    ("Q5_0", Ftype::Q5_0, "5.21G, +0.1316 ppl @ Llama-3-8B"),
    ("Q5_1", Ftype::Q5_1, "5.65G, +0.1062 ppl @ Llama-3-8B"),
    ("Q2_K", Ftype::Q2_K, "2.96G, +3.5199 ppl @ Llama-3-8B"),
    ("Q3_K", Ftype::Q3_K_M, "alias for Q3_K_M"),
    ("Q3_K_S", Ftype::Q3_K_S, "3.41G, +1.6321 ppl @ Llama-3-8B"),
    ("Q3_K_M", Ftype::Q3_K_M, "3.74G, +0.6569 ppl @ Llama-3-8B"),
    ("Q3_K_L", Ftype::Q3_K_L, "4.03G, +0.5562 ppl @ Llama-3-8B"),
    ("Q4_K", Ftype::Q4_K_M, "alias for Q4_K_M"),
    ("Q4_K_S", Ftype::Q4_K_S, "4.37G, +0.2689 ppl @ Llama-3-8B"),
    ("Q4_K_M", Ftype::Q4_K_M, "4.58G, +0.1754 ppl @ Llama-3-8B"),
    ("Q5_K", Ftype::Q5_K_M, "alias for Q5_K_M"),
    ("Q5_K_S", Ftype::Q5_K_S, "5.21G, +0.1049 ppl @ Llama-3-8B"),
    ("Q5_K_M", Ftype::Q5_K_M, "5.33G, +0.0569 ppl @ Llama-3-8B"),
    ("Q6_K", Ftype::Q6_K, "6.14G, +0.0217 ppl @ Llama-3-8B"),
    ("Q8_0", Ftype::Q8_0, "7.96G, +0.0026 ppl @ Llama-3-8B"),
    ("F16", Ftype::F16, "14.00G, +0.0020 ppl @ Mistral-7B"),
    ("BF16", Ftype::BF16, "14.00G, -0.0050 ppl @ Mistral-7B"),
    ("F32", Ftype::F32, "26.00G @ 7B"),
];

impl Ftype {
    /// The mix named `name` (case-insensitive, llama.cpp's aliases too).
    pub fn from_name(name: &str) -> Option<Ftype> {
        MIXES
            .iter()
            .find(|(n, _, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, f, _)| *f)
    }

    /// llama.cpp's name of the mix.
    pub fn name(self) -> &'static str {
        MIXES
            .iter()
            .find(|(_, f, d)| *f == self && !d.starts_with("alias"))
            .map_or("?", |(n, _, _)| n)
    }

    /// The `general.file_type` value.
    pub fn file_type(self) -> u32 {
        match self {
            Ftype::F32 => 0,
            Ftype::F16 => 1,
            Ftype::Q4_0 => 2,
            Ftype::Q4_1 => 3,
            Ftype::Q8_0 => 7,
            Ftype::Q5_0 => 8,
            Ftype::Q5_1 => 9,
            Ftype::Q2_K => 10,
            Ftype::Q3_K_S => 11,
            Ftype::Q3_K_M => 12,
            Ftype::Q3_K_L => 13,
            Ftype::Q4_K_S => 14,
            Ftype::Q4_K_M => 15,
            Ftype::Q5_K_S => 16,
            Ftype::Q5_K_M => 17,
            Ftype::Q6_K => 18,
            Ftype::BF16 => 32,
        }
    }

    /// The type most matrices get.
    pub fn default_type(self) -> GgmlType {
        match self {
            Ftype::F32 => GgmlType::F32,
            Ftype::F16 => GgmlType::F16,
            Ftype::BF16 => GgmlType::BF16,
            Ftype::Q4_0 => GgmlType::Q4_0,
            Ftype::Q4_1 => GgmlType::Q4_1,
            Ftype::Q5_0 => GgmlType::Q5_0,
            Ftype::Q5_1 => GgmlType::Q5_1,
            Ftype::Q8_0 => GgmlType::Q8_0,
            Ftype::Q2_K => GgmlType::Q2K,
            Ftype::Q3_K_S | Ftype::Q3_K_M | Ftype::Q3_K_L => GgmlType::Q3K,
            Ftype::Q4_K_S | Ftype::Q4_K_M => GgmlType::Q4K,
            Ftype::Q5_K_S | Ftype::Q5_K_M => GgmlType::Q5K,
            Ftype::Q6_K => GgmlType::Q6K,
        }
    }
}

impl Mix {
    /// A mix by name, else (or with `pure`) one ggml type for all matrices.
    pub fn parse(name: &str, pure: bool) -> Option<Mix> {
        let ftype = Ftype::from_name(name);
        if pure || ftype.is_none() {
            let ty = ftype
                .map(Ftype::default_type)
                .or_else(|| GgmlType::from_name(name))?;
            return Some(Mix::Pure(ty));
        }
        ftype.map(Mix::Named)
    }

    /// The type of most matrices.
    pub fn default_type(self) -> GgmlType {
        match self {
            Mix::Named(f) => f.default_type(),
            Mix::Pure(t) => t,
        }
    }

    /// The `general.file_type` the output gets; `None` for a type no
    /// llama.cpp file type names.
    pub fn file_type(self) -> Option<u32> {
        match self {
            Mix::Named(f) => Some(f.file_type()),
            Mix::Pure(t) => pure_file_type(t),
        }
    }

    /// Whether the mix's tensors are kept as float (F32 / F16 / BF16: no
    /// per-tensor rules, as in llama.cpp).
    fn is_float(self) -> bool {
        !self.default_type().is_quantized()
    }
}

/// What the choice depends on besides a tensor's name and shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// Decoder layers (`{arch}.block_count`).
    pub n_layer: usize,
    /// Experts per MoE layer (`{arch}.expert_count`, 0 for dense).
    pub n_expert: usize,
    /// Query heads per KV head.
    pub n_gqa: usize,
}

/// Whether a tensor is quantized at all: a 2-d or larger `*.weight`, not
/// the expert router nor a position / token-type embedding.
pub fn is_quantizable(name: &str, n_dims: u32) -> bool {
    n_dims >= 2
        && name.ends_with("weight")
        && !name.contains("ffn_gate_inp.weight")
        && !name.contains("_norm.weight")
        && !name.contains("position_embd")
        && !name.contains("token_types")
}

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers
/// and every third one between.
fn use_more_bits(i_layer: usize, n_layer: usize) -> bool {
    i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2
}

/// The layer index in `blk.N.` names.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// Chooses each tensor's type in file order, counting `attn_v` and
/// `ffn_down` tensors as llama.cpp does.
#[derive(Debug, Clone)]
pub struct TypeChooser {
    mix: Mix,
    shape: ModelShape,
    has_output: bool,
    n_attention_wv: usize,
    i_attention_wv: usize,
    i_ffn_down: usize,
}

/// Why a tensor cannot be given a type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChooseError(pub String);

impl std::fmt::Display for ChooseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ChooseError {}

impl TypeChooser {
    /// A chooser for a model with these tensor names (all of them, in file
    /// order: the counts come from them).
    pub fn new<'a>(
        mix: Mix,
        shape: ModelShape,
        names: impl IntoIterator<Item = &'a str>,
    ) -> TypeChooser {
        let mut has_output = false;
        let mut n_attention_wv = 0;
        for n in names {
            if n.contains("attn_v.weight")
                || n.contains("attn_qkv.weight")
                || n.contains("attn_kv_b.weight")
            {
                n_attention_wv += 1;
            } else if n == "output.weight" {
                has_output = true;
            }
        }
        TypeChooser {
            mix,
            shape,
            has_output,
            n_attention_wv,
            i_attention_wv: 0,
            i_ffn_down: 0,
        }
    }

    /// The type of the next tensor (call in file order); `None` when it is
    /// not quantized (it keeps its type).
    pub fn choose(
        &mut self,
        name: &str,
        ne: &[i64],
        n_dims: u32,
    ) -> Result<Option<GgmlType>, ChooseError> {
        if !is_quantizable(name, n_dims) {
            return Ok(None);
        }
        let default = self.mix.default_type();
        let ty = match self.mix {
            Mix::Named(f) if !self.mix.is_float() => self.mix_type(f, name, ne)?,
            _ => default,
        };
        Ok(Some(fit_rows(ty, ne.first().copied().unwrap_or(0))))
    }

    fn mix_type(&mut self, f: Ftype, name: &str, ne: &[i64]) -> Result<GgmlType, ChooseError> {
        use Ftype as F;
        use GgmlType as T;
        let mut ty = f.default_type();
        let s = self.shape;
        let nx = ne.first().copied().unwrap_or(0);
        if name == "output.weight" || (!self.has_output && name == "token_embd.weight") {
            if nx % 256 != 0 {
                ty = T::Q8_0;
            } else if ty != T::Q8_0 {
                ty = T::Q6K;
            }
        } else if name == "token_embd.weight" {
            // the default type
        } else if name.contains("attn_v.weight") {
            let (i, n) = (self.i_attention_wv, self.n_attention_wv);
            match f {
                F::Q2_K => ty = if s.n_gqa >= 4 { T::Q4K } else { T::Q3K },
                F::Q3_K_M => ty = if i < 2 { T::Q5K } else { T::Q4K },
                F::Q3_K_L => ty = T::Q5K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => ty = T::Q6K,
                F::Q4_K_S if i < 4 => ty = T::Q5K,
                _ => {}
            }
            if s.n_expert == 8 {
                ty = T::Q8_0;
            }
            self.i_attention_wv += 1;
        } else if name.contains("attn_k.weight") {
            if s.n_expert == 8 {
                ty = T::Q8_0;
            }
        } else if name.contains("ffn_down") {
            let (i_layer, n_layer) = if s.n_expert > 1 {
                let i = layer_of(name).ok_or_else(|| {
                    ChooseError(format!("cannot find the layer of tensor '{name}'"))
                })?;
                if i >= s.n_layer {
                    return Err(ChooseError(format!(
                        "tensor '{name}': layer {i} out of range [0, {})",
                        s.n_layer
                    )));
                }
                (i, s.n_layer)
            } else {
                (self.i_ffn_down, s.n_layer)
            };
            match f {
                F::Q2_K => ty = T::Q3K,
                F::Q3_K_M => {
                    ty = if i_layer < n_layer / 16 {
                        T::Q5K
                    } else {
                        T::Q4K
                    }
                }
                F::Q3_K_L => ty = T::Q5K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i_layer, n_layer) => ty = T::Q6K,
                F::Q4_K_S if i_layer < n_layer / 8 => ty = T::Q5K,
                _ => {}
            }
            self.i_ffn_down += 1;
        } else if name.contains("attn_output.weight") {
            if s.n_expert == 8 {
                if matches!(f, F::Q2_K | F::Q3_K_S | F::Q3_K_M | F::Q4_K_S | F::Q4_K_M) {
                    ty = T::Q5K;
                }
            } else {
                match f {
                    F::Q2_K => ty = T::Q3K,
                    F::Q3_K_M => ty = T::Q4K,
                    F::Q3_K_L => ty = T::Q5K,
                    _ => {}
                }
            }
        } else if name.contains("attn_qkv.weight") {
            match f {
                F::Q3_K_M | F::Q3_K_L => ty = T::Q4K,
                F::Q4_K_M => ty = T::Q5K,
                F::Q5_K_M => ty = T::Q6K,
                _ => {}
            }
        }
        Ok(ty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_more_bits_as_llama_cpp() {
        let more: Vec<usize> = (0..48).filter(|&i| use_more_bits(i, 48)).collect();
        assert_eq!(
            more,
            [
                0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 42, 43, 44, 45,
                46, 47
            ]
        );
    }

    #[test]
    fn names_and_aliases() {
        assert_eq!(Mix::parse("q4_k_m", false), Some(Mix::Named(Ftype::Q4_K_M)));
        assert_eq!(Mix::parse("Q4_K", false), Some(Mix::Named(Ftype::Q4_K_M)));
        assert_eq!(Mix::parse("Q4_K", true), Some(Mix::Pure(GgmlType::Q4K)));
        assert_eq!(
            Mix::parse("iq4_nl", false),
            Some(Mix::Pure(GgmlType::IQ4NL))
        );
        assert_eq!(Mix::parse("q9", false), None);
        assert_eq!(Ftype::Q4_K_M.name(), "Q4_K_M");
    }
}
