//! The AVX-512 level (AVX-512 F, BW, VL, DQ over AVX2): the kernels of
//! `quants::avx512`, each bit for bit the AVX2 one; the rest is the AVX2
//! level's.

use super::avx2;
use super::table::CpuTable;
use crate::quants::level::CpuLevel;

/// The AVX-512 table.
pub(super) const TABLE: CpuTable = CpuTable {
    level: CpuLevel::Avx512,
    ..avx2::TABLE
};
