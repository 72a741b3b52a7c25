//! The scalar level: every type's reference kernels from `quants::blocks`,
//! what a CPU without AVX2 runs, and the base the other levels fall back to.
//!
//! The types whose prompt kernels exist at a SIMD level have them here too
//! (`vec_dot_cols` and `vec_dot_tile` as the scalar dot per output, `gemm`
//! as the scalar dot per panel column), so that every level offers the same
//! entries and only their speed differs.

use super::table::CpuTable;
use crate::quants::blocks::k_quants::{panel, q2_k, q3_k, q4_k, q5_k, q6_k, q8_k};
use crate::quants::blocks::{
    float, iq4_nl, iq4_xs, mxfp4, q4_0, q4_1, q5_0, q5_1, q8_0, q8_0_panel, q8_1,
};
use crate::quants::gemm::QGemm;
use crate::quants::level::CpuLevel;
use crate::quants::traits::CpuTypeTraits;
use crate::quants::vec_dot_cols::check_cols;
use crate::quants::vec_dot_tile::check_tile;
use crate::types::GgmlType;

/// The entry of a type with module `$m` (`to_float`, `from_float`,
/// `vec_dot_scalar`), no prompt kernels.
macro_rules! entry {
    ($ty:ident, $dot_ty:ident, $m:ident) => {
        entry!($ty, $dot_ty, $m, $m::from_float)
    };
    ($ty:ident, $dot_ty:ident, $m:ident, $from:path) => {
        CpuTypeTraits {
            ty: GgmlType::$ty,
            vec_dot_type: GgmlType::$dot_ty,
            to_float: $m::to_float,
            from_float: $from,
            vec_dot: $m::vec_dot_scalar,
            vec_dot_scalar: $m::vec_dot_scalar,
            vec_dot_cols: None,
            vec_dot_tile: None,
            gemm: None,
        }
    };
}

/// `fn $name`: a `vec_dot_cols` that is `$dot` per column.
macro_rules! cols_by_dot {
    ($name:ident, $dot:path) => {
        fn $name(n: usize, x: &[u8], ys: &[&[u8]], out: &mut [f32]) {
            check_cols(ys, out);
            for (o, y) in out.iter_mut().zip(ys) {
                *o = $dot(n, x, y);
            }
        }
    };
}

cols_by_dot!(q4_0_cols, q4_0::vec_dot_scalar);
cols_by_dot!(q8_0_cols, q8_0::vec_dot_scalar);
cols_by_dot!(iq4_nl_cols, iq4_nl::vec_dot_scalar);
cols_by_dot!(iq4_xs_cols, iq4_xs::vec_dot_scalar);
cols_by_dot!(mxfp4_cols, mxfp4::vec_dot_scalar);

/// The Q8_0 `vec_dot_tile`: [`q8_0_cols`] per row.
fn q8_0_tile(n: usize, xs: &[&[u8]], ys: &[&[u8]], out: &mut [f32]) {
    check_tile(xs, ys, out);
    let nc = ys.len();
    for (r, x) in xs.iter().enumerate() {
        q8_0_cols(n, x, ys, &mut out[r * nc..(r + 1) * nc]);
    }
}

/// The [`QGemm`] of a type with the panel module `$panel` and the run `$run`.
macro_rules! qgemm {
    ($panel:ident, $run:path) => {
        QGemm {
            panel_bytes: $panel::panel_bytes,
            pack: $panel::pack,
            run: $run,
        }
    };
}

const GEMM_Q4_0: QGemm = qgemm!(q8_0_panel, q4_0::gemm_scalar);
const GEMM_Q8_0: QGemm = qgemm!(q8_0_panel, q8_0_panel::gemm_scalar_q8_0);
const GEMM_IQ4NL: QGemm = qgemm!(q8_0_panel, iq4_nl::gemm_scalar);
const GEMM_MXFP4: QGemm = qgemm!(q8_0_panel, mxfp4::gemm_scalar);
const GEMM_Q4K: QGemm = qgemm!(panel, q4_k::gemm_scalar);
const GEMM_Q5K: QGemm = qgemm!(panel, q5_k::gemm_scalar);
const GEMM_Q6K: QGemm = qgemm!(panel, q6_k::gemm_scalar);
const GEMM_IQ4XS: QGemm = qgemm!(panel, iq4_xs::gemm_scalar);

/// The scalar table.
pub(super) const TABLE: CpuTable = CpuTable {
    level: CpuLevel::Scalar,
    f32: CpuTypeTraits {
        ty: GgmlType::F32,
        vec_dot_type: GgmlType::F32,
        to_float: float::f32_to_float,
        from_float: float::f32_from_float,
        vec_dot: float::f32_vec_dot_scalar,
        vec_dot_scalar: float::f32_vec_dot_scalar,
        vec_dot_cols: None,
        vec_dot_tile: None,
        gemm: None,
    },
    f16: CpuTypeTraits {
        ty: GgmlType::F16,
        vec_dot_type: GgmlType::F16,
        to_float: float::f16_to_float_scalar,
        from_float: float::f16_from_float_scalar,
        vec_dot: float::f16_vec_dot_scalar,
        vec_dot_scalar: float::f16_vec_dot_scalar,
        vec_dot_cols: None,
        vec_dot_tile: None,
        gemm: None,
    },
    bf16: CpuTypeTraits {
        ty: GgmlType::BF16,
        vec_dot_type: GgmlType::BF16,
        to_float: float::bf16_to_float,
        from_float: float::bf16_from_float,
        vec_dot: float::bf16_vec_dot_scalar,
        vec_dot_scalar: float::bf16_vec_dot_scalar,
        vec_dot_cols: None,
        vec_dot_tile: None,
        gemm: None,
    },
    q4_0: CpuTypeTraits {
        vec_dot_cols: Some(q4_0_cols),
        gemm: Some(&GEMM_Q4_0),
        ..entry!(Q4_0, Q8_0, q4_0)
    },
    q4_1: entry!(Q4_1, Q8_1, q4_1),
    q5_0: entry!(Q5_0, Q8_0, q5_0),
    q5_1: entry!(Q5_1, Q8_1, q5_1),
    q8_0: CpuTypeTraits {
        vec_dot_cols: Some(q8_0_cols),
        vec_dot_tile: Some(q8_0_tile),
        gemm: Some(&GEMM_Q8_0),
        ..entry!(Q8_0, Q8_0, q8_0, q8_0::from_float_scalar)
    },
    q8_1: entry!(Q8_1, Q8_1, q8_1),
    q2k: entry!(Q2K, Q8K, q2_k),
    q3k: entry!(Q3K, Q8K, q3_k),
    q4k: CpuTypeTraits {
        gemm: Some(&GEMM_Q4K),
        ..entry!(Q4K, Q8K, q4_k)
    },
    q5k: CpuTypeTraits {
        gemm: Some(&GEMM_Q5K),
        ..entry!(Q5K, Q8K, q5_k)
    },
    q6k: CpuTypeTraits {
        gemm: Some(&GEMM_Q6K),
        ..entry!(Q6K, Q8K, q6_k)
    },
    q8k: entry!(Q8K, Q8K, q8_k, q8_k::from_float_scalar),
    iq4nl: CpuTypeTraits {
        vec_dot_cols: Some(iq4_nl_cols),
        gemm: Some(&GEMM_IQ4NL),
        ..entry!(IQ4NL, Q8_0, iq4_nl)
    },
    iq4xs: CpuTypeTraits {
        vec_dot_cols: Some(iq4_xs_cols),
        gemm: Some(&GEMM_IQ4XS),
        ..entry!(IQ4XS, Q8K, iq4_xs)
    },
    mxfp4: CpuTypeTraits {
        vec_dot_cols: Some(mxfp4_cols),
        gemm: Some(&GEMM_MXFP4),
        ..entry!(MXFP4, Q8_0, mxfp4)
    },
};
