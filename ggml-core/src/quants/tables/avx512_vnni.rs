//! The AVX-512 VNNI level (`vpdpbusd`, `vpdpwssd` over AVX-512): the
//! kernels of `quants::avx512` built on VNNI (the Q4_K and Q6_K prompt
//! GEMMs, `vpdpwssd` for `madd` + `add`), each bit for bit the level below
//! (the integer sums are exact whatever instruction forms them); the rest
//! is the AVX-512 level's.

use super::avx512;
use super::table::CpuTable;
use super::wrap::gemm_run;
use crate::quants::avx512::{q4_k as k4, q6_k as k6};
use crate::quants::blocks::k_quants::panel;
use crate::quants::blocks::k_quants::q4_k::BlockQ4K;
use crate::quants::blocks::k_quants::q6_k::BlockQ6K;
use crate::quants::gemm::QGemm;
use crate::quants::level::CpuLevel;
use crate::quants::traits::CpuTypeTraits;

gemm_run!(q4k_gemm, BlockQ4K, k4::gemm_q4_k_q8_k_vnni);
gemm_run!(q6k_gemm, BlockQ6K, k6::gemm_q6_k_q8_k_vnni);

const GEMM_Q4K: QGemm = QGemm {
    panel_bytes: panel::panel_bytes,
    pack: panel::pack,
    run: q4k_gemm,
};
const GEMM_Q6K: QGemm = QGemm {
    panel_bytes: panel::panel_bytes,
    pack: panel::pack,
    run: q6k_gemm,
};

const B: CpuTable = avx512::TABLE;

/// The AVX-512 VNNI table.
pub(super) const TABLE: CpuTable = CpuTable {
    level: CpuLevel::Avx512Vnni,
    q4k: CpuTypeTraits {
        gemm: Some(&GEMM_Q4K),
        ..B.q4k
    },
    q6k: CpuTypeTraits {
        gemm: Some(&GEMM_Q6K),
        ..B.q6k
    },
    ..B
};
