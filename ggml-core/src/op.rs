//! The operations a graph node can hold, with their parameters, named after
//! ggml's `GGML_OP_*` (parameters live in the variant instead of `op_params`).

/// Unary element-wise functions (`GGML_UNARY_OP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `x * sigmoid(x)` (`GGML_UNARY_OP_SILU`).
    Silu,
    /// tanh approximation, as `ggml_gelu`
    Gelu,
    /// `1 / (1 + exp(-x))` (`GGML_UNARY_OP_SIGMOID`).
    Sigmoid,
    /// `-x` (`GGML_UNARY_OP_NEG`).
    Neg,
    /// `max(x, 0)` (`GGML_UNARY_OP_RELU`).
    Relu,
    /// `exp(x)` (`GGML_UNARY_OP_EXP`).
    Exp,
}

/// Gated linear units (`GGML_GLU_OP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GluOp {
    /// `silu(gate) * up`
    Swiglu,
    /// `gelu(gate) * up`
    Geglu,
    /// gpt-oss: `x * sigmoid(alpha * x) * (y + 1)` with clamping at `limit`
    SwigluOai {
        /// Slope inside the sigmoid (1.702 in gpt-oss).
        alpha: OrderedF32,
        /// Clamp: the gate at most `limit`, the up value within `[-limit, limit]`.
        limit: OrderedF32,
    },
}

/// Sort order for `argsort`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortOrder {
    /// Smallest first (`GGML_SORT_ORDER_ASC`).
    Asc,
    /// Largest first (`GGML_SORT_ORDER_DESC`).
    Desc,
}

/// An `f32` parameter that can live in a `Hash`/`Eq` op (compared by bits),
/// so that graphs can be compared structurally for plan reuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrderedF32(u32);

impl OrderedF32 {
    /// Wrap a value.
    pub fn new(v: f32) -> Self {
        OrderedF32(v.to_bits())
    }
    /// The value.
    pub fn get(self) -> f32 {
        f32::from_bits(self.0)
    }
}

impl From<f32> for OrderedF32 {
    fn from(v: f32) -> Self {
        OrderedF32::new(v)
    }
}

/// RoPE mode (`GGML_ROPE_TYPE_*`): which element pairs rotate together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RopeMode {
    /// pairs `(2i, 2i+1)` (LLaMA, Mixtral)
    Normal,
    /// pairs `(i, i + n_dims/2)` (Qwen, OLMoE, GPT-NeoX)
    Neox,
}

/// Parameters of `rope_ext`, as ggml's op_params.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RopeParams {
    /// Number of leading elements of each head that rotate (the rest pass through).
    pub n_dims: i32,
    /// Which element pairs rotate together.
    pub mode: RopeMode,
    /// Context length the model was trained with (YaRN scaling input).
    pub n_ctx_orig: i32,
    /// Base of the rotation frequencies (`rope_freq_base`, theta).
    pub freq_base: OrderedF32,
    /// Position scale (`1 / rope scaling factor`).
    pub freq_scale: OrderedF32,
    /// YaRN extrapolation mix factor (0 disables YaRN).
    pub ext_factor: OrderedF32,
    /// YaRN attention magnitude scale.
    pub attn_factor: OrderedF32,
    /// YaRN low correction dimension parameter (`beta_fast`).
    pub beta_fast: OrderedF32,
    /// YaRN high correction dimension parameter (`beta_slow`).
    pub beta_slow: OrderedF32,
}

/// A node's operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// A leaf: input, weight or cache; nothing to compute.
    None,
    /// `ggml_dup`: copy into a new contiguous tensor of the same type.
    Dup,
    /// `ggml_cpy(a, b)`: write `a` into `b` (converting type); the node is a view of `b`.
    Cpy,
    /// `ggml_cont`: contiguous copy of a (possibly strided) tensor.
    Cont,
    /// `ggml_reshape_*`: a view with a new shape of contiguous data.
    Reshape,
    /// `ggml_view_*`: a strided window into another tensor.
    View,
    /// `ggml_permute`: a view with axes reordered.
    Permute,
    /// `ggml_transpose`: a view with axes 0 and 1 swapped.
    Transpose,
    /// `ggml_get_rows(a, ids)`: rows of `a` gathered by I32 ids, as F32.
    GetRows,
    /// `ggml_add(a, b)`: element-wise sum, `b` broadcast over `a`.
    Add,
    /// `ggml_sub(a, b)`: element-wise difference, `b` broadcast over `a`.
    Sub,
    /// `ggml_mul(a, b)`: element-wise product, `b` broadcast over `a`.
    Mul,
    /// `ggml_div(a, b)`: element-wise quotient, `b` broadcast over `a`.
    Div,
    /// `ggml_scale_bias`: `a * s + b`.
    Scale {
        /// Factor multiplied into every element.
        s: OrderedF32,
        /// Bias added after scaling.
        b: OrderedF32,
    },
    /// `ggml_sqr`: element-wise square.
    Sqr,
    /// `ggml_sqrt`: element-wise square root.
    Sqrt,
    /// Sum of each row into a single element.
    SumRows,
    /// Mean of each row.
    Mean,
    /// Index of the largest element of each row (I32).
    Argmax,
    /// `x / sqrt(mean(x^2) + eps)` per row.
    RmsNorm {
        /// Added to the variance before the square root.
        eps: OrderedF32,
    },
    /// `(x - mean) / sqrt(var + eps)` per row.
    Norm {
        /// Added to the variance before the square root.
        eps: OrderedF32,
    },
    /// `ggml_mul_mat(a, b)`: `a^T b` over rows of dimension `ne0`.
    MulMat,
    /// `ggml_mul_mat_id(as, b, ids)`: per-token expert matmul.
    MulMatId,
    /// `ggml_add_id(a, b, ids)`: add the bias row `b[:, ids[i1, i2]]`.
    AddId,
    /// `ggml_rope_ext`.
    RopeExt(RopeParams),
    /// `ggml_soft_max_ext(a, mask, scale, max_bias)`; optional sinks as src 2.
    SoftMaxExt {
        /// Factor applied to the scores before the mask (usually `1 / sqrt(head_dim)`).
        scale: OrderedF32,
        /// ALiBi maximum bias (0 disables ALiBi).
        max_bias: OrderedF32,
    },
    /// `ggml_unary`: an element-wise function.
    Unary(UnaryOp),
    /// GLU over one tensor (halves of `ne0`) or two (`swapped` puts the gate second).
    Glu {
        /// Which gated linear unit.
        op: GluOp,
        /// The gate is the second half (or second tensor) instead of the first.
        swapped: bool,
    },
    /// Indices that sort each row (I32).
    Argsort(SortOrder),
    /// Indices of the `k` largest elements of each row, largest first (I32).
    TopK {
        /// How many indices to keep per row.
        k: i32,
    },
    /// `ggml_concat(a, b, dim)`.
    Concat {
        /// The dimension (0..4) along which `b` follows `a`.
        dim: i32,
    },
    /// `ggml_set_rows(a, b, idx)`: write rows of `b` into `a` at `idx`; the node is a view of `a`.
    SetRows,
    /// `ggml_flash_attn_ext(q, k, v, mask, scale, max_bias, softcap)`; optional sinks as src 4.
    FlashAttnExt {
        /// Factor applied to the scores before the mask (usually `1 / sqrt(head_dim)`).
        scale: OrderedF32,
        /// ALiBi maximum bias (0 disables ALiBi).
        max_bias: OrderedF32,
        /// Logit soft-capping value: `softcap * tanh(x / softcap)` (0 disables it).
        softcap: OrderedF32,
    },
}

impl Op {
    /// ggml's upper-case op name (`MUL_MAT_ID`), as plan dumps print it.
    pub fn name(&self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::Dup => "DUP",
            Op::Cpy => "CPY",
            Op::Cont => "CONT",
            Op::Reshape => "RESHAPE",
            Op::View => "VIEW",
            Op::Permute => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
            Op::GetRows => "GET_ROWS",
            Op::Add => "ADD",
            Op::Sub => "SUB",
            Op::Mul => "MUL",
            Op::Div => "DIV",
            Op::Scale { .. } => "SCALE",
            Op::Sqr => "SQR",
            Op::Sqrt => "SQRT",
            Op::SumRows => "SUM_ROWS",
            Op::Mean => "MEAN",
            Op::Argmax => "ARGMAX",
            Op::RmsNorm { .. } => "RMS_NORM",
            Op::Norm { .. } => "NORM",
            Op::MulMat => "MUL_MAT",
            Op::MulMatId => "MUL_MAT_ID",
            Op::AddId => "ADD_ID",
            Op::RopeExt(_) => "ROPE",
            Op::SoftMaxExt { .. } => "SOFT_MAX",
            Op::Unary(UnaryOp::Silu) => "SILU",
            Op::Unary(UnaryOp::Gelu) => "GELU",
            Op::Unary(UnaryOp::Sigmoid) => "SIGMOID",
            Op::Unary(UnaryOp::Neg) => "NEG",
            Op::Unary(UnaryOp::Relu) => "RELU",
            Op::Unary(UnaryOp::Exp) => "EXP",
            Op::Glu { .. } => "GLU",
            Op::Argsort(_) => "ARGSORT",
            Op::TopK { .. } => "TOP_K",
            Op::Concat { .. } => "CONCAT",
            Op::SetRows => "SET_ROWS",
            Op::FlashAttnExt { .. } => "FLASH_ATTN_EXT",
        }
    }

    /// Ops that only reinterpret their source's memory: nothing to compute.
    pub fn is_view(&self) -> bool {
        matches!(self, Op::Reshape | Op::View | Op::Permute | Op::Transpose)
    }

    /// Ops whose result is written into a pre-existing tensor (`src[1]` for
    /// `cpy`, `src[0]` for `set_rows`): the node is a view of that tensor.
    pub fn writes_in_place(&self) -> bool {
        matches!(self, Op::Cpy | Op::SetRows)
    }
}

fn yarn_corr_dim(n_dims: i32, n_ctx_orig: i32, n_rot: f32, base: f32) -> f32 {
    n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
        / (2.0 * base.ln())
}

/// `ggml_rope_yarn_corr_dims`: the dims where YaRN ramps from extrapolation
/// to interpolation.
pub fn rope_yarn_corr_dims(
    n_dims: i32,
    n_ctx_orig: i32,
    freq_base: f32,
    beta_fast: f32,
    beta_slow: f32,
) -> [f32; 2] {
    let start = yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base).floor();
    let end = yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base).ceil();
    let lo = if 0.0 > start { 0.0 } else { start };
    let top = (n_dims - 1) as f32;
    let hi = if top < end { top } else { end };
    [lo, hi]
}
