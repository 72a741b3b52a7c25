//! The AVX2 level (AVX2, FMA, F16C): the kernels of `quants::avx2` for
//! F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
//! Q6_K, IQ4_NL, IQ4_XS and MXFP4 (decode dots, and the prompt kernels of
//! the types that have them), the F16 row conversions with F16C, and the
//! Q8_0 / Q8_K activation quantizers; the rest is the scalar level's.
//! The dots keep ggml's AVX2 accumulators and order.

use super::scalar;
use super::table::CpuTable;
use super::wrap::{float_dot, gemm_run, qgemm, vec_dot, vec_dot_cols, vec_dot_tile};
use crate::quants::avx2::{float as f, legacy, lut4, q2_k as k2, q3_k as k3};
use crate::quants::avx2::{q4_k as k4, q5_k as k5, q6_k as k6, q8_0_gemm, q8_0_tiles, quantize};
use crate::quants::block::row_exact_mut;
use crate::quants::blocks::float::check_len;
use crate::quants::blocks::iq4_nl::BlockIq4Nl;
use crate::quants::blocks::iq4_xs::BlockIq4Xs;
use crate::quants::blocks::k_quants::panel;
use crate::quants::blocks::k_quants::q2_k::BlockQ2K;
use crate::quants::blocks::k_quants::q3_k::BlockQ3K;
use crate::quants::blocks::k_quants::q4_k::BlockQ4K;
use crate::quants::blocks::k_quants::q5_k::BlockQ5K;
use crate::quants::blocks::k_quants::q6_k::BlockQ6K;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::blocks::mxfp4::BlockMxfp4;
use crate::quants::blocks::q4_0::BlockQ4_0;
use crate::quants::blocks::q4_1::BlockQ4_1;
use crate::quants::blocks::q5_0::BlockQ5_0;
use crate::quants::blocks::q5_1::BlockQ5_1;
use crate::quants::blocks::q8_0::BlockQ8_0;
use crate::quants::blocks::q8_0_panel;
use crate::quants::blocks::q8_1::BlockQ8_1;
use crate::quants::gemm::QGemm;
use crate::quants::level::CpuLevel;
use crate::quants::traits::CpuTypeTraits;

// ---- the float types ----

float_dot!(f32_dot, "f32", 4, f::dot_f32);
float_dot!(f16_dot, "f16", 2, f::dot_f16);
float_dot!(bf16_dot, "bf16", 2, f::dot_bf16);

fn f16_to_float(src: &[u8], dst: &mut [f32]) {
    check_len("f16", dst.len(), src.len(), 2, true);
    // SAFETY: as `vec_dot!`'s (see `tables::wrap`); lengths checked above.
    unsafe { f::f16_to_f32_row(src, dst) }
}

fn f16_from_float(src: &[f32], dst: &mut [u8]) {
    check_len("f16", src.len(), dst.len(), 2, true);
    // SAFETY: as `vec_dot!`'s (see `tables::wrap`); lengths checked above.
    unsafe { f::f32_to_f16_row(src, dst) }
}

// ---- the activation quantizers ----

fn q8_0_from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ8_0>(dst, src.len());
    // SAFETY: as `vec_dot!`'s (see `tables::wrap`).
    unsafe { quantize::quantize_row_q8_0(src, yb) }
}

fn q8_k_from_float(src: &[f32], dst: &mut [u8]) {
    let yb = row_exact_mut::<BlockQ8K>(dst, src.len());
    // SAFETY: as `vec_dot!`'s (see `tables::wrap`).
    unsafe { quantize::quantize_row_q8_k(src, yb) }
}

// ---- the block dots ----

vec_dot!(q4_0_dot, BlockQ4_0, BlockQ8_0, legacy::dot_q4_0_q8_0);
vec_dot!(q4_1_dot, BlockQ4_1, BlockQ8_1, legacy::dot_q4_1_q8_1);
vec_dot!(q5_0_dot, BlockQ5_0, BlockQ8_0, legacy::dot_q5_0_q8_0);
vec_dot!(q5_1_dot, BlockQ5_1, BlockQ8_1, legacy::dot_q5_1_q8_1);
vec_dot!(q8_0_dot, BlockQ8_0, BlockQ8_0, legacy::dot_q8_0_q8_0);
vec_dot!(q2k_dot, BlockQ2K, BlockQ8K, k2::dot_q2_k_q8_k);
vec_dot!(q3k_dot, BlockQ3K, BlockQ8K, k3::dot_q3_k_q8_k);
vec_dot!(q4k_dot, BlockQ4K, BlockQ8K, k4::dot_q4_k_q8_k);
vec_dot!(q5k_dot, BlockQ5K, BlockQ8K, k5::dot_q5_k_q8_k);
vec_dot!(q6k_dot, BlockQ6K, BlockQ8K, k6::dot_q6_k_q8_k);
vec_dot!(iq4nl_dot, BlockIq4Nl, BlockQ8_0, lut4::dot_iq4_nl_q8_0);
vec_dot!(iq4xs_dot, BlockIq4Xs, BlockQ8K, lut4::dot_iq4_xs_q8_k);
vec_dot!(mxfp4_dot, BlockMxfp4, BlockQ8_0, lut4::dot_mxfp4_q8_0);

vec_dot_cols!(q4_0_cols, BlockQ4_0, BlockQ8_0, legacy::dot_q4_0_q8_0_cols);
vec_dot_cols!(q8_0_cols, BlockQ8_0, BlockQ8_0, legacy::dot_q8_0_q8_0_cols);
vec_dot_cols!(
    iq4nl_cols,
    BlockIq4Nl,
    BlockQ8_0,
    lut4::dot_iq4_nl_q8_0_cols
);
vec_dot_cols!(iq4xs_cols, BlockIq4Xs, BlockQ8K, lut4::dot_iq4_xs_q8_k_cols);
vec_dot_cols!(mxfp4_cols, BlockMxfp4, BlockQ8_0, lut4::dot_mxfp4_q8_0_cols);

vec_dot_tile!(
    q8_0_tile,
    BlockQ8_0,
    BlockQ8_0,
    q8_0_tiles::dot_q8_0_q8_0_tile,
    q8_0_cols
);

gemm_run!(q4_0_gemm, BlockQ4_0, q8_0_gemm::gemm_q4_0_q8_0);
gemm_run!(q8_0_gemm, BlockQ8_0, q8_0_gemm::gemm_q8_0_q8_0);
gemm_run!(iq4nl_gemm, BlockIq4Nl, q8_0_gemm::gemm_iq4_nl_q8_0);
gemm_run!(mxfp4_gemm, BlockMxfp4, q8_0_gemm::gemm_mxfp4_q8_0);
gemm_run!(q4k_gemm, BlockQ4K, k4::gemm_q4_k_q8_k);
gemm_run!(q5k_gemm, BlockQ5K, k5::gemm_q5_k_q8_k);
gemm_run!(q6k_gemm, BlockQ6K, k6::gemm_q6_k_q8_k);
gemm_run!(iq4xs_gemm, BlockIq4Xs, lut4::gemm_iq4_xs_q8_k);

const GEMM_Q4_0: QGemm = qgemm!(q8_0_panel, q4_0_gemm);
const GEMM_Q8_0: QGemm = qgemm!(q8_0_panel, q8_0_gemm);
const GEMM_IQ4NL: QGemm = qgemm!(q8_0_panel, iq4nl_gemm);
const GEMM_MXFP4: QGemm = qgemm!(q8_0_panel, mxfp4_gemm);
const GEMM_Q4K: QGemm = qgemm!(panel, q4k_gemm);
const GEMM_Q5K: QGemm = qgemm!(panel, q5k_gemm);
const GEMM_Q6K: QGemm = qgemm!(panel, q6k_gemm);
const GEMM_IQ4XS: QGemm = qgemm!(panel, iq4xs_gemm);

const S: CpuTable = scalar::TABLE;

/// The AVX2 table.
pub(super) const TABLE: CpuTable = CpuTable {
    level: CpuLevel::Avx2,
    f32: CpuTypeTraits {
        vec_dot: f32_dot,
        ..S.f32
    },
    f16: CpuTypeTraits {
        to_float: f16_to_float,
        from_float: f16_from_float,
        vec_dot: f16_dot,
        ..S.f16
    },
    bf16: CpuTypeTraits {
        vec_dot: bf16_dot,
        ..S.bf16
    },
    q4_0: CpuTypeTraits {
        vec_dot: q4_0_dot,
        vec_dot_cols: Some(q4_0_cols),
        gemm: Some(&GEMM_Q4_0),
        ..S.q4_0
    },
    q4_1: CpuTypeTraits {
        vec_dot: q4_1_dot,
        ..S.q4_1
    },
    q5_0: CpuTypeTraits {
        vec_dot: q5_0_dot,
        ..S.q5_0
    },
    q5_1: CpuTypeTraits {
        vec_dot: q5_1_dot,
        ..S.q5_1
    },
    q8_0: CpuTypeTraits {
        from_float: q8_0_from_float,
        vec_dot: q8_0_dot,
        vec_dot_cols: Some(q8_0_cols),
        vec_dot_tile: Some(q8_0_tile),
        gemm: Some(&GEMM_Q8_0),
        ..S.q8_0
    },
    q8_1: S.q8_1,
    q2k: CpuTypeTraits {
        vec_dot: q2k_dot,
        ..S.q2k
    },
    q3k: CpuTypeTraits {
        vec_dot: q3k_dot,
        ..S.q3k
    },
    q4k: CpuTypeTraits {
        vec_dot: q4k_dot,
        gemm: Some(&GEMM_Q4K),
        ..S.q4k
    },
    q5k: CpuTypeTraits {
        vec_dot: q5k_dot,
        gemm: Some(&GEMM_Q5K),
        ..S.q5k
    },
    q6k: CpuTypeTraits {
        vec_dot: q6k_dot,
        gemm: Some(&GEMM_Q6K),
        ..S.q6k
    },
    q8k: CpuTypeTraits {
        from_float: q8_k_from_float,
        ..S.q8k
    },
    iq4nl: CpuTypeTraits {
        vec_dot: iq4nl_dot,
        vec_dot_cols: Some(iq4nl_cols),
        gemm: Some(&GEMM_IQ4NL),
        ..S.iq4nl
    },
    iq4xs: CpuTypeTraits {
        vec_dot: iq4xs_dot,
        vec_dot_cols: Some(iq4xs_cols),
        gemm: Some(&GEMM_IQ4XS),
        ..S.iq4xs
    },
    mxfp4: CpuTypeTraits {
        vec_dot: mxfp4_dot,
        vec_dot_cols: Some(mxfp4_cols),
        gemm: Some(&GEMM_MXFP4),
        ..S.mxfp4
    },
};
