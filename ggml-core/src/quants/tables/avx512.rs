//! The AVX-512 level (AVX-512 F, BW, VL, DQ over AVX2): the kernels of
//! `quants::avx512`, each bit for bit the AVX2 one: the prompt GEMMs of
//! Q8_0, Q4_0, IQ4_NL, MXFP4, Q4_K, Q5_K, Q6_K and IQ4_XS, and the Q6_K
//! and BF16 decode dots; the rest is the AVX2 level's. The other decode dots stay
//! AVX2's: in 512-bit form they measured 0.83–0.99x of it on Zen 4, whose
//! 512-bit operations take two 256-bit passes (`cargo bench -p ggml-core
//! --bench levels`).

use super::avx2;
use super::table::CpuTable;
use super::wrap::{entry, float_dot};
use crate::quants::avx512::float as f;
use crate::quants::avx512::{iq4_xs as xs, q4_k as k4, q5_k as k5, q6_k as k6, q8_0 as k8};
use crate::quants::blocks::iq4_nl::BlockIq4Nl;
use crate::quants::blocks::iq4_xs::BlockIq4Xs;
use crate::quants::blocks::k_quants::panel;
use crate::quants::blocks::k_quants::q4_k::BlockQ4K;
use crate::quants::blocks::k_quants::q5_k::BlockQ5K;
use crate::quants::blocks::k_quants::q6_k::BlockQ6K;
use crate::quants::blocks::k_quants::q8_k::BlockQ8K;
use crate::quants::blocks::mxfp4::BlockMxfp4;
use crate::quants::blocks::q4_0::BlockQ4_0;
use crate::quants::blocks::q8_0::BlockQ8_0;
use crate::quants::blocks::q8_0_panel;
use crate::quants::level::CpuLevel;
use crate::quants::traits::CpuTypeTraits;

float_dot!(bf16_dot, "bf16", 2, f::dot_bf16);

const B: CpuTable = avx2::TABLE;

/// The AVX-512 table.
pub(super) const TABLE: CpuTable = CpuTable {
    level: CpuLevel::Avx512,
    bf16: CpuTypeTraits {
        vec_dot: bf16_dot,
        ..B.bf16
    },
    q8_0: entry!(B.q8_0, BlockQ8_0, gemm q8_0_panel, k8::gemm_q8_0_q8_0),
    q4_0: entry!(B.q4_0, BlockQ4_0, gemm q8_0_panel, k8::gemm_q4_0_q8_0),
    iq4nl: entry!(B.iq4nl, BlockIq4Nl, gemm q8_0_panel, k8::gemm_iq4_nl_q8_0),
    mxfp4: entry!(B.mxfp4, BlockMxfp4, gemm q8_0_panel, k8::gemm_mxfp4_q8_0),
    iq4xs: entry!(B.iq4xs, BlockIq4Xs, gemm panel, xs::gemm_iq4_xs_q8_k),
    q4k: entry!(B.q4k, BlockQ4K, gemm panel, k4::gemm_q4_k_q8_k),
    q5k: entry!(B.q5k, BlockQ5K, gemm panel, k5::gemm_q5_k_q8_k),
    q6k: entry!(
        B.q6k,
        BlockQ6K,
        BlockQ8K,
        dot k6::dot_q6_k_q8_k,
        gemm panel,
        k6::gemm_q6_k_q8_k
    ),
    ..B
};
