//! ggml's enum ordinals as the pinned protocol's server numbers them: the
//! ops (`enum ggml_op`), unary functions (`enum ggml_unary_op`), gated
//! linear units (`enum ggml_glu_op`) and element types (`enum ggml_type`)
//! of the `ggml.h` that protocol 7.0.0 was built with (llama.cpp
//! 0.5.0-dev, `GGML_OP_COUNT == 101`).
//!
//! They travel raw on the wire (`rpc_tensor.op`, `.type`, `op_params[0]`),
//! and ggml has inserted ops mid-enum under patch bumps, so the tables are
//! written down in full; `tests/header_tables.rs` parses that `ggml.h`
//! (found through `GGML_H`, or llama.cpp's tree in the reference cache) and
//! checks every entry, and the named constants below against the tables.

/// `enum ggml_op`, in order: the ordinal of an op is its index.
pub const OP_NAMES: [&str; 101] = [
    "NONE",
    "DUP",
    "ADD",
    "ADD_ID",
    "ADD1",
    "ACC",
    "SUB",
    "MUL",
    "DIV",
    "SQR",
    "SQRT",
    "LOG",
    "SIN",
    "COS",
    "SUM",
    "SUM_ROWS",
    "CUMSUM",
    "MEAN",
    "ARGMAX",
    "COUNT_EQUAL",
    "REPEAT",
    "REPEAT_BACK",
    "CONCAT",
    "SILU_BACK",
    "NORM",
    "RMS_NORM",
    "RMS_NORM_BACK",
    "GROUP_NORM",
    "L2_NORM",
    "MUL_MAT",
    "MUL_MAT_ID",
    "OUT_PROD",
    "SCALE",
    "SET",
    "CPY",
    "CONT",
    "RESHAPE",
    "VIEW",
    "PERMUTE",
    "TRANSPOSE",
    "GET_ROWS",
    "GET_ROWS_BACK",
    "SET_ROWS",
    "DIAG",
    "DIAG_MASK_INF",
    "DIAG_MASK_ZERO",
    "SOFT_MAX",
    "SOFT_MAX_BACK",
    "ROPE",
    "ROPE_BACK",
    "CLAMP",
    "CONV_TRANSPOSE_1D",
    "IM2COL",
    "IM2COL_BACK",
    "IM2COL_3D",
    "COL2IM_1D",
    "CONV_2D",
    "CONV_3D",
    "CONV_2D_DW",
    "CONV_TRANSPOSE_2D",
    "POOL_1D",
    "POOL_2D",
    "POOL_2D_BACK",
    "UPSCALE",
    "PAD",
    "PAD_REFLECT_1D",
    "ROLL",
    "ARANGE",
    "TIMESTEP_EMBEDDING",
    "ARGSORT",
    "TOP_K",
    "LEAKY_RELU",
    "TRI",
    "FILL",
    "FLASH_ATTN_EXT",
    "FLASH_ATTN_BACK",
    "SSM_CONV",
    "SSM_SCAN",
    "WIN_PART",
    "WIN_UNPART",
    "GET_REL_POS",
    "ADD_REL_POS",
    "RWKV_WKV6",
    "GATED_LINEAR_ATTN",
    "RWKV_WKV7",
    "SOLVE_TRI",
    "GATED_DELTA_NET",
    "LIGHTNING_INDEXER",
    "DSV4_HC_COMB",
    "DSV4_HC_PRE",
    "DSV4_HC_POST",
    "UNARY",
    "MAP_CUSTOM1",
    "MAP_CUSTOM2",
    "MAP_CUSTOM3",
    "CUSTOM",
    "CROSS_ENTROPY_LOSS",
    "CROSS_ENTROPY_LOSS_BACK",
    "OPT_STEP_ADAMW",
    "OPT_STEP_SGD",
    "GLU",
];

/// `enum ggml_unary_op`, in order.
pub const UNARY_NAMES: [&str; 22] = [
    "ABS",
    "SGN",
    "NEG",
    "STEP",
    "TANH",
    "ELU",
    "RELU",
    "SIGMOID",
    "GELU",
    "GELU_QUICK",
    "SILU",
    "HARDSWISH",
    "HARDSIGMOID",
    "EXP",
    "EXPM1",
    "SOFTPLUS",
    "GELU_ERF",
    "XIELU",
    "FLOOR",
    "CEIL",
    "ROUND",
    "TRUNC",
];

/// `enum ggml_glu_op`, in order.
pub const GLU_NAMES: [&str; 7] = [
    "REGLU",
    "GEGLU",
    "SWIGLU",
    "SWIGLU_OAI",
    "GEGLU_ERF",
    "GEGLU_QUICK",
    "SWIGLU_CLAMP",
];

/// `enum ggml_type`: name and number (removed types leave gaps).
pub const TYPES: [(&str, u32); 35] = [
    ("F32", 0),
    ("F16", 1),
    ("Q4_0", 2),
    ("Q4_1", 3),
    ("Q5_0", 6),
    ("Q5_1", 7),
    ("Q8_0", 8),
    ("Q8_1", 9),
    ("Q2_K", 10),
    ("Q3_K", 11),
    ("Q4_K", 12),
    ("Q5_K", 13),
    ("Q6_K", 14),
    ("Q8_K", 15),
    ("IQ2_XXS", 16),
    ("IQ2_XS", 17),
    ("IQ3_XXS", 18),
    ("IQ1_S", 19),
    ("IQ4_NL", 20),
    ("IQ3_S", 21),
    ("IQ2_S", 22),
    ("IQ4_XS", 23),
    ("I8", 24),
    ("I16", 25),
    ("I32", 26),
    ("I64", 27),
    ("F64", 28),
    ("IQ1_M", 29),
    ("BF16", 30),
    ("TQ1_0", 34),
    ("TQ2_0", 35),
    ("MXFP4", 39),
    ("NVFP4", 40),
    ("Q1_0", 41),
    ("Q2_0", 42),
];

/// The ordinal of the op named `name` (`"MUL_MAT"`) in [`OP_NAMES`].
pub fn op_ordinal(name: &str) -> Option<u32> {
    OP_NAMES.iter().position(|n| *n == name).map(|i| i as u32)
}

/// The name of op ordinal `op` (`None` past the table).
pub fn op_name(op: u32) -> Option<&'static str> {
    OP_NAMES.get(op as usize).copied()
}

/// The ggml type number of the type named `name` (`"Q4_K"`).
pub fn type_id(name: &str) -> Option<u32> {
    TYPES.iter().find(|(n, _)| *n == name).map(|&(_, id)| id)
}

/// Named ordinals of the ops this engine sends (checked against
/// [`OP_NAMES`] by the tests).
pub mod op {
    /// `GGML_OP_NONE`
    pub const NONE: u32 = 0;
    /// `GGML_OP_DUP`
    pub const DUP: u32 = 1;
    /// `GGML_OP_ADD`
    pub const ADD: u32 = 2;
    /// `GGML_OP_ADD_ID`
    pub const ADD_ID: u32 = 3;
    /// `GGML_OP_SUB`
    pub const SUB: u32 = 6;
    /// `GGML_OP_MUL`
    pub const MUL: u32 = 7;
    /// `GGML_OP_DIV`
    pub const DIV: u32 = 8;
    /// `GGML_OP_SQR`
    pub const SQR: u32 = 9;
    /// `GGML_OP_SQRT`
    pub const SQRT: u32 = 10;
    /// `GGML_OP_SUM_ROWS`
    pub const SUM_ROWS: u32 = 15;
    /// `GGML_OP_MEAN`
    pub const MEAN: u32 = 17;
    /// `GGML_OP_ARGMAX`
    pub const ARGMAX: u32 = 18;
    /// `GGML_OP_CONCAT`
    pub const CONCAT: u32 = 22;
    /// `GGML_OP_NORM`
    pub const NORM: u32 = 24;
    /// `GGML_OP_RMS_NORM`
    pub const RMS_NORM: u32 = 25;
    /// `GGML_OP_MUL_MAT`
    pub const MUL_MAT: u32 = 29;
    /// `GGML_OP_MUL_MAT_ID`
    pub const MUL_MAT_ID: u32 = 30;
    /// `GGML_OP_SCALE`
    pub const SCALE: u32 = 32;
    /// `GGML_OP_CPY`
    pub const CPY: u32 = 34;
    /// `GGML_OP_CONT`
    pub const CONT: u32 = 35;
    /// `GGML_OP_RESHAPE`
    pub const RESHAPE: u32 = 36;
    /// `GGML_OP_VIEW`
    pub const VIEW: u32 = 37;
    /// `GGML_OP_PERMUTE`
    pub const PERMUTE: u32 = 38;
    /// `GGML_OP_TRANSPOSE`
    pub const TRANSPOSE: u32 = 39;
    /// `GGML_OP_GET_ROWS`
    pub const GET_ROWS: u32 = 40;
    /// `GGML_OP_SET_ROWS`
    pub const SET_ROWS: u32 = 42;
    /// `GGML_OP_SOFT_MAX`
    pub const SOFT_MAX: u32 = 46;
    /// `GGML_OP_ROPE`
    pub const ROPE: u32 = 48;
    /// `GGML_OP_ARGSORT`
    pub const ARGSORT: u32 = 69;
    /// `GGML_OP_TOP_K`
    pub const TOP_K: u32 = 70;
    /// `GGML_OP_FLASH_ATTN_EXT`
    pub const FLASH_ATTN_EXT: u32 = 74;
    /// `GGML_OP_UNARY`
    pub const UNARY: u32 = 91;
    /// `GGML_OP_GLU`
    pub const GLU: u32 = 100;

    /// Every constant above with its ggml name, for the tests.
    pub const NAMED: [(&str, u32); 33] = [
        ("NONE", NONE),
        ("DUP", DUP),
        ("ADD", ADD),
        ("ADD_ID", ADD_ID),
        ("SUB", SUB),
        ("MUL", MUL),
        ("DIV", DIV),
        ("SQR", SQR),
        ("SQRT", SQRT),
        ("SUM_ROWS", SUM_ROWS),
        ("MEAN", MEAN),
        ("ARGMAX", ARGMAX),
        ("CONCAT", CONCAT),
        ("NORM", NORM),
        ("RMS_NORM", RMS_NORM),
        ("MUL_MAT", MUL_MAT),
        ("MUL_MAT_ID", MUL_MAT_ID),
        ("SCALE", SCALE),
        ("CPY", CPY),
        ("CONT", CONT),
        ("RESHAPE", RESHAPE),
        ("VIEW", VIEW),
        ("PERMUTE", PERMUTE),
        ("TRANSPOSE", TRANSPOSE),
        ("GET_ROWS", GET_ROWS),
        ("SET_ROWS", SET_ROWS),
        ("SOFT_MAX", SOFT_MAX),
        ("ROPE", ROPE),
        ("ARGSORT", ARGSORT),
        ("TOP_K", TOP_K),
        ("FLASH_ATTN_EXT", FLASH_ATTN_EXT),
        ("UNARY", UNARY),
        ("GLU", GLU),
    ];
}

/// Named ordinals of `enum ggml_unary_op` this engine sends.
pub mod unary {
    /// `GGML_UNARY_OP_NEG`
    pub const NEG: i32 = 2;
    /// `GGML_UNARY_OP_RELU`
    pub const RELU: i32 = 6;
    /// `GGML_UNARY_OP_SIGMOID`
    pub const SIGMOID: i32 = 7;
    /// `GGML_UNARY_OP_GELU`
    pub const GELU: i32 = 8;
    /// `GGML_UNARY_OP_SILU`
    pub const SILU: i32 = 10;
    /// `GGML_UNARY_OP_EXP`
    pub const EXP: i32 = 13;

    /// Every constant above with its ggml name, for the tests.
    pub const NAMED: [(&str, i32); 6] = [
        ("NEG", NEG),
        ("RELU", RELU),
        ("SIGMOID", SIGMOID),
        ("GELU", GELU),
        ("SILU", SILU),
        ("EXP", EXP),
    ];
}

/// Named ordinals of `enum ggml_glu_op` this engine sends.
pub mod glu {
    /// `GGML_GLU_OP_GEGLU`
    pub const GEGLU: i32 = 1;
    /// `GGML_GLU_OP_SWIGLU`
    pub const SWIGLU: i32 = 2;
    /// `GGML_GLU_OP_SWIGLU_OAI`
    pub const SWIGLU_OAI: i32 = 3;

    /// Every constant above with its ggml name, for the tests.
    pub const NAMED: [(&str, i32); 3] = [
        ("GEGLU", GEGLU),
        ("SWIGLU", SWIGLU),
        ("SWIGLU_OAI", SWIGLU_OAI),
    ];
}

/// `GGML_TENSOR_FLAG_*`.
pub mod flag {
    /// An input of the graph.
    pub const INPUT: i32 = 1;
    /// An output of the graph.
    pub const OUTPUT: i32 = 2;
    /// Must be computed (ggml's CPU backend skips nodes without it).
    pub const COMPUTE: i32 = 16;
}

/// `GGML_ROPE_TYPE_NEOX`.
pub const ROPE_TYPE_NEOX: i32 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_constants_match_the_tables() {
        for (n, v) in op::NAMED {
            assert_eq!(op_ordinal(n), Some(v), "GGML_OP_{n}");
        }
        for (n, v) in unary::NAMED {
            assert_eq!(UNARY_NAMES[v as usize], n, "GGML_UNARY_OP_{n}");
        }
        for (n, v) in glu::NAMED {
            assert_eq!(GLU_NAMES[v as usize], n, "GGML_GLU_OP_{n}");
        }
        assert_eq!(OP_NAMES.len(), 101, "GGML_OP_COUNT of protocol 7.0.0");
    }

    #[test]
    fn our_type_ids_are_ggml_numbers() {
        for t in ggml_core::GgmlType::ALL {
            let name = t.name().to_ascii_uppercase();
            assert_eq!(type_id(&name), Some(t.id()), "{name}");
        }
    }
}
