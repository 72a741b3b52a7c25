//! The AVX-512 VNNI level (`vpdpbusd`, `vpdpwssd` over AVX-512): the
//! kernels of `quants::avx512` built on VNNI, each bit for bit the level
//! below (the integer sums are exact whatever instruction forms them): the
//! prompt GEMMs of the AVX-512 level with `vpdpbusd` / `vpdpwssd`, the
//! decode dots of Q8_0, Q4_0, IQ4_NL and MXFP4 (the AVX2 steps, one
//! `vpdpbusd` for `maddubs` + `madd`), Q4_K and Q6_K; the rest is the
//! AVX-512 level's.

use super::avx512;
use super::table::CpuTable;
use super::wrap::entry;
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

const B: CpuTable = avx512::TABLE;

/// The AVX-512 VNNI table.
pub(super) const TABLE: CpuTable = CpuTable {
    level: CpuLevel::Avx512Vnni,
    q8_0: entry!(
        B.q8_0,
        BlockQ8_0,
        BlockQ8_0,
        dot k8::dot_q8_0_q8_0_vnni,
        gemm q8_0_panel,
        k8::gemm_q8_0_q8_0_vnni
    ),
    q4_0: entry!(
        B.q4_0,
        BlockQ4_0,
        BlockQ8_0,
        dot k8::dot_q4_0_q8_0_vnni,
        gemm q8_0_panel,
        k8::gemm_q4_0_q8_0_vnni
    ),
    iq4nl: entry!(
        B.iq4nl,
        BlockIq4Nl,
        BlockQ8_0,
        dot k8::dot_iq4_nl_q8_0_vnni,
        gemm q8_0_panel,
        k8::gemm_iq4_nl_q8_0_vnni
    ),
    mxfp4: entry!(
        B.mxfp4,
        BlockMxfp4,
        BlockQ8_0,
        dot k8::dot_mxfp4_q8_0_vnni,
        gemm q8_0_panel,
        k8::gemm_mxfp4_q8_0_vnni
    ),
    iq4xs: entry!(B.iq4xs, BlockIq4Xs, gemm panel, xs::gemm_iq4_xs_q8_k_vnni),
    q4k: entry!(
        B.q4k,
        BlockQ4K,
        BlockQ8K,
        dot k4::dot_q4_k_q8_k_vnni,
        gemm panel,
        k4::gemm_q4_k_q8_k_vnni
    ),
    q5k: entry!(B.q5k, BlockQ5K, gemm panel, k5::gemm_q5_k_q8_k_vnni),
    q6k: entry!(
        B.q6k,
        BlockQ6K,
        BlockQ8K,
        dot k6::dot_q6_k_q8_k_vnni,
        gemm panel,
        k6::gemm_q6_k_q8_k_vnni
    ),
    ..B
};
