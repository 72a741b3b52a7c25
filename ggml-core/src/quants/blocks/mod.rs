//! The block types: for each GGUF type its block struct with ggml's byte
//! layout and its scalar reference kernels (`to_float`, the reference
//! quantizer, the scalar `vec_dot` and, for the types with a prompt GEMM,
//! the scalar `gemm` run), plus the activation panels the GEMMs read.
//!
//! Nothing here depends on a SIMD level: the levels (`quants::avx2`,
//! `quants::avx512`) depend on these layouts, and `quants::tables` pairs
//! each level's kernels with these references.

pub(crate) mod amax;
pub mod float;
pub(crate) mod int8;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod k_quants;
pub mod mxfp4;
pub mod q4_0;
pub mod q4_1;
pub mod q5_0;
pub mod q5_1;
pub mod q8_0;
pub mod q8_0_panel;
pub mod q8_1;
pub(crate) mod rounding;
