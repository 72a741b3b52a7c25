//! The AVX-512 level (AVX-512 F, BW, VL, DQ over AVX2): the kernels of
//! `quants::avx512`, each bit for bit the AVX2 one: the prompt GEMMs of
//! Q8_0, Q4_0, IQ4_NL, MXFP4, Q4_K, Q5_K, Q6_K and IQ4_XS, and the Q6_K
//! decode dot; the rest is the AVX2 level's. The other decode dots stay
//! AVX2's: in 512-bit form they measured 0.83–0.99x of it on Zen 4, whose
//! 512-bit operations take two 256-bit passes (`cargo bench -p ggml-core
//! --bench levels`).

use super::avx2;
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

vec_dot!(q6k_dot, BlockQ6K, BlockQ8K, k6::dot_q6_k_q8_k);

gemm_run!(q8_0_gemm, BlockQ8_0, k8::gemm_q8_0_q8_0);
gemm_run!(q4_0_gemm, BlockQ4_0, k8::gemm_q4_0_q8_0);
gemm_run!(iq4nl_gemm, BlockIq4Nl, k8::gemm_iq4_nl_q8_0);
gemm_run!(mxfp4_gemm, BlockMxfp4, k8::gemm_mxfp4_q8_0);
gemm_run!(iq4xs_gemm, BlockIq4Xs, xs::gemm_iq4_xs_q8_k);
gemm_run!(q4k_gemm, BlockQ4K, k4::gemm_q4_k_q8_k);
gemm_run!(q5k_gemm, BlockQ5K, k5::gemm_q5_k_q8_k);
gemm_run!(q6k_gemm, BlockQ6K, k6::gemm_q6_k_q8_k);

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

const B: CpuTable = avx2::TABLE;

/// The AVX-512 table.
pub(super) const TABLE: CpuTable = CpuTable {
    level: CpuLevel::Avx512,
    q8_0: CpuTypeTraits {
        gemm: Some(&GEMM_Q8_0),
        ..B.q8_0
    },
    q4_0: CpuTypeTraits {
        gemm: Some(&GEMM_Q4_0),
        ..B.q4_0
    },
    iq4nl: CpuTypeTraits {
        gemm: Some(&GEMM_IQ4NL),
        ..B.iq4nl
    },
    mxfp4: CpuTypeTraits {
        gemm: Some(&GEMM_MXFP4),
        ..B.mxfp4
    },
    iq4xs: CpuTypeTraits {
        gemm: Some(&GEMM_IQ4XS),
        ..B.iq4xs
    },
    q4k: CpuTypeTraits {
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
