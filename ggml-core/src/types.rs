//! The ggml type table: every tensor element type with its GGUF id, block size
//! and bytes per block, as `ggml_type_traits` has them.

use std::fmt;

/// A tensor element type. Discriminants are the GGUF / ggml type ids, so a
/// GGUF file's `type` field maps to this enum with [`GgmlType::from_id`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    /// 32-bit IEEE float (`GGML_TYPE_F32`).
    F32 = 0,
    /// 16-bit IEEE half float (`GGML_TYPE_F16`).
    F16 = 1,
    /// 4-bit block quant, 32 weights per block with one f16 scale (`GGML_TYPE_Q4_0`).
    Q4_0 = 2,
    /// 4-bit block quant, 32 weights per block with an f16 scale and minimum (`GGML_TYPE_Q4_1`).
    Q4_1 = 3,
    /// 5-bit block quant, 32 weights per block with one f16 scale (`GGML_TYPE_Q5_0`).
    Q5_0 = 6,
    /// 5-bit block quant, 32 weights per block with an f16 scale and minimum (`GGML_TYPE_Q5_1`).
    Q5_1 = 7,
    /// 8-bit block quant, 32 weights per block with one f16 scale (`GGML_TYPE_Q8_0`).
    Q8_0 = 8,
    /// 8-bit block quant with an f16 scale and the block sum, used for activations (`GGML_TYPE_Q8_1`).
    Q8_1 = 9,
    /// 2-bit k-quant, 256-weight super-blocks of 16-weight sub-blocks with 4-bit scales and minimums (`GGML_TYPE_Q2_K`).
    Q2K = 10,
    /// 3-bit k-quant, 256-weight super-blocks with 6-bit sub-block scales (`GGML_TYPE_Q3_K`).
    Q3K = 11,
    /// 4-bit k-quant, 256-weight super-blocks with 6-bit sub-block scales and minimums (`GGML_TYPE_Q4_K`).
    Q4K = 12,
    /// 5-bit k-quant, 256-weight super-blocks with 6-bit sub-block scales and minimums (`GGML_TYPE_Q5_K`).
    Q5K = 13,
    /// 6-bit k-quant, 256-weight super-blocks with 8-bit sub-block scales (`GGML_TYPE_Q6_K`).
    Q6K = 14,
    /// 8-bit k-quant with f32 scale and per-16 sums, used for activations of the k-quant dot products (`GGML_TYPE_Q8_K`).
    Q8K = 15,
    /// 4-bit non-linear quant: 32 weights per block indexing a fixed 16-value table (`GGML_TYPE_IQ4_NL`).
    IQ4NL = 20,
    /// IQ4_NL on 256-weight super-blocks with 6-bit sub-block scales (`GGML_TYPE_IQ4_XS`).
    IQ4XS = 23,
    /// Signed 8-bit integer (`GGML_TYPE_I8`).
    I8 = 24,
    /// Signed 16-bit integer (`GGML_TYPE_I16`).
    I16 = 25,
    /// Signed 32-bit integer (`GGML_TYPE_I32`), used for ids and positions.
    I32 = 26,
    /// Signed 64-bit integer (`GGML_TYPE_I64`).
    I64 = 27,
    /// 64-bit IEEE float (`GGML_TYPE_F64`).
    F64 = 28,
    /// bfloat16: the upper 16 bits of an f32 (`GGML_TYPE_BF16`).
    BF16 = 30,
    /// OCP microscaling FP4: 32 E2M1 values per block with a shared E8M0 exponent (`GGML_TYPE_MXFP4`, gpt-oss experts).
    MXFP4 = 39,
}

/// Static facts about one type: what `ggml_type_traits` holds.
#[derive(Clone, Copy, Debug)]
pub struct TypeTraits {
    /// ggml's lower-case name (`"q4_K"`, `"f16"`), as llama.cpp prints it.
    pub name: &'static str,
    /// Elements per block (1 for plain types).
    pub blck_size: usize,
    /// Bytes per block.
    pub type_size: usize,
    /// Whether this is a block-quantized type.
    pub is_quantized: bool,
}

impl GgmlType {
    /// Every type this crate knows, in id order.
    pub const ALL: [GgmlType; 23] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2K,
        GgmlType::Q3K,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Q8K,
        GgmlType::IQ4NL,
        GgmlType::IQ4XS,
        GgmlType::I8,
        GgmlType::I16,
        GgmlType::I32,
        GgmlType::I64,
        GgmlType::F64,
        GgmlType::BF16,
        GgmlType::MXFP4,
    ];

    /// The type with this GGUF id, or `None` for ids this crate does not know
    /// (including ids ggml has retired).
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.iter().copied().find(|t| *t as u32 == id)
    }

    /// The GGUF id.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The type's traits.
    pub fn traits(self) -> TypeTraits {
        use GgmlType::*;
        let (name, blck_size, type_size, is_quantized) = match self {
            F32 => ("f32", 1, 4, false),
            F16 => ("f16", 1, 2, false),
            Q4_0 => ("q4_0", 32, 18, true),
            Q4_1 => ("q4_1", 32, 20, true),
            Q5_0 => ("q5_0", 32, 22, true),
            Q5_1 => ("q5_1", 32, 24, true),
            Q8_0 => ("q8_0", 32, 34, true),
            Q8_1 => ("q8_1", 32, 36, true),
            Q2K => ("q2_K", 256, 84, true),
            Q3K => ("q3_K", 256, 110, true),
            Q4K => ("q4_K", 256, 144, true),
            Q5K => ("q5_K", 256, 176, true),
            Q6K => ("q6_K", 256, 210, true),
            Q8K => ("q8_K", 256, 292, true),
            IQ4NL => ("iq4_nl", 32, 18, true),
            IQ4XS => ("iq4_xs", 256, 136, true),
            I8 => ("i8", 1, 1, false),
            I16 => ("i16", 1, 2, false),
            I32 => ("i32", 1, 4, false),
            I64 => ("i64", 1, 8, false),
            F64 => ("f64", 1, 8, false),
            BF16 => ("bf16", 1, 2, false),
            MXFP4 => ("mxfp4", 32, 17, true),
        };
        TypeTraits {
            name,
            blck_size,
            type_size,
            is_quantized,
        }
    }

    /// ggml's name for the type.
    pub fn name(self) -> &'static str {
        self.traits().name
    }

    /// Elements per block.
    pub fn blck_size(self) -> usize {
        self.traits().blck_size
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        self.traits().type_size
    }

    /// Whether the type is block-quantized.
    pub fn is_quantized(self) -> bool {
        self.traits().is_quantized
    }

    /// Bytes of a row of `ne0` elements (`ggml_row_size`), or `None` when
    /// `ne0` is not a multiple of the block size or the size overflows.
    pub fn row_size(self, ne0: u64) -> Option<usize> {
        let t = self.traits();
        if !ne0.is_multiple_of(t.blck_size as u64) {
            return None;
        }
        let blocks = usize::try_from(ne0 / t.blck_size as u64).ok()?;
        blocks.checked_mul(t.type_size)
    }

    /// Parse ggml's name (case-insensitive: `q4_k`, `Q4_K`, `f16`).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        GgmlType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_retired_ids_are_unknown() {
        for t in GgmlType::ALL {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        for retired in [4u32, 5, 31, 32, 33, 36, 37, 38, 1000] {
            assert_eq!(GgmlType::from_id(retired), None);
        }
    }

    #[test]
    fn block_sizes_match_ggml() {
        // bytes of a 256-element row, from ggml's block structs
        let expect = [
            (GgmlType::Q4_0, 144),
            (GgmlType::Q8_0, 272),
            (GgmlType::Q4K, 144),
            (GgmlType::Q6K, 210),
            (GgmlType::IQ4XS, 136),
            (GgmlType::MXFP4, 136),
            (GgmlType::F16, 512),
        ];
        for (t, bytes) in expect {
            assert_eq!(t.row_size(256), Some(bytes), "{t}");
        }
        assert_eq!(GgmlType::Q4K.row_size(100), None);
    }
}
