//! The ggml type table: every tensor element type with its GGUF id, block size
//! and bytes per block, as `ggml_type_traits` has them.

use std::fmt;

/// A tensor element type. Discriminants are the GGUF / ggml type ids, so a
/// GGUF file's `type` field maps to this enum with [`GgmlType::from_id`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum GgmlType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    Q8K = 15,
    IQ4NL = 20,
    IQ4XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
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
