//! The AVX-512 VNNI level (`vpdpbusd`, `vpdpwssd` over AVX-512): the
//! kernels of `quants::avx512` built on VNNI, each bit for bit the level
//! below (the integer sums are exact whatever instruction forms them): the
//! prompt GEMMs of the AVX-512 level with `vpdpbusd` / `vpdpwssd`, the
//! decode dots of Q8_0, Q4_0, IQ4_NL and MXFP4 (the AVX2 steps, one
//! `vpdpbusd` for `maddubs` + `madd`), Q4_K and Q6_K; the rest is the
//! AVX-512 level's.

use super::avx512;
use super::table::CpuTable;
use super::wrap::{gemm_run, vec_dot};
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
use crate::quants::gemm::QGemm;
use crate::quants::level::CpuLevel;
use crate::quants::traits::CpuTypeTraits;

vec_dot!(q8_0_dot, BlockQ8_0, BlockQ8_0, k8::dot_q8_0_q8_0_vnni);
vec_dot!(q4_0_dot, BlockQ4_0, BlockQ8_0, k8::dot_q4_0_q8_0_vnni);
vec_dot!(iq4nl_dot, BlockIq4Nl, BlockQ8_0, k8::dot_iq4_nl_q8_0_vnni);
vec_dot!(mxfp4_dot, BlockMxfp4, BlockQ8_0, k8::dot_mxfp4_q8_0_vnni);
vec_dot!(q4k_dot, BlockQ4K, BlockQ8K, k4::dot_q4_k_q8_k_vnni);
vec_dot!(q6k_dot, BlockQ6K, BlockQ8K, k6::dot_q6_k_q8_k_vnni);

gemm_run!(q8_0_gemm, BlockQ8_0, k8::gemm_q8_0_q8_0_vnni);
gemm_run!(q4_0_gemm, BlockQ4_0, k8::gemm_q4_0_q8_0_vnni);
gemm_run!(iq4nl_gemm, BlockIq4Nl, k8::gemm_iq4_nl_q8_0_vnni);
gemm_run!(mxfp4_gemm, BlockMxfp4, k8::gemm_mxfp4_q8_0_vnni);
gemm_run!(iq4xs_gemm, BlockIq4Xs, xs::gemm_iq4_xs_q8_k_vnni);
gemm_run!(q4k_gemm, BlockQ4K, k4::gemm_q4_k_q8_k_vnni);
gemm_run!(q5k_gemm, BlockQ5K, k5::gemm_q5_k_q8_k_vnni);
gemm_run!(q6k_gemm, BlockQ6K, k6::gemm_q6_k_q8_k_vnni);

/// The [`QGemm`] of the panel module `$panel` with the run `$run`.
macro_rules! qgemm {
    ($panel:ident, $run:path) => {
        QGemm {
            panel_bytes: $panel::panel_bytes,
            pack: $panel::pack,
            run: $run,
        }
    };
}

const GEMM_Q8_0: QGemm = qgemm!(q8_0_panel, q8_0_gemm);
const GEMM_Q4_0: QGemm = qgemm!(q8_0_panel, q4_0_gemm);
const GEMM_IQ4NL: QGemm = qgemm!(q8_0_panel, iq4nl_gemm);
const GEMM_MXFP4: QGemm = qgemm!(q8_0_panel, mxfp4_gemm);
const GEMM_IQ4XS: QGemm = qgemm!(panel, iq4xs_gemm);
const GEMM_Q4K: QGemm = qgemm!(panel, q4k_gemm);
const GEMM_Q5K: QGemm = qgemm!(panel, q5k_gemm);
const GEMM_Q6K: QGemm = qgemm!(panel, q6k_gemm);

const B: CpuTable = avx512::TABLE;

/// The AVX-512 VNNI table.
pub(super) const TABLE: CpuTable = CpuTable {
    level: CpuLevel::Avx512Vnni,
    q8_0: CpuTypeTraits {
        vec_dot: q8_0_dot,
        gemm: Some(&GEMM_Q8_0),
        ..B.q8_0
    },
    q4_0: CpuTypeTraits {
        vec_dot: q4_0_dot,
        gemm: Some(&GEMM_Q4_0),
        ..B.q4_0
    },
    iq4nl: CpuTypeTraits {
        vec_dot: iq4nl_dot,
        gemm: Some(&GEMM_IQ4NL),
        ..B.iq4nl
    },
    mxfp4: CpuTypeTraits {
        vec_dot: mxfp4_dot,
        gemm: Some(&GEMM_MXFP4),
        ..B.mxfp4
    },
    iq4xs: CpuTypeTraits {
        gemm: Some(&GEMM_IQ4XS),
        ..B.iq4xs
    },
    q4k: CpuTypeTraits {
        vec_dot: q4k_dot,
        gemm: Some(&GEMM_Q4K),
        ..B.q4k
    },
    q5k: CpuTypeTraits {
        gemm: Some(&GEMM_Q5K),
        ..B.q5k
    },
    q6k: CpuTypeTraits {
        vec_dot: q6k_dot,
        gemm: Some(&GEMM_Q6K),
        ..B.q6k
    },
    ..B
};
