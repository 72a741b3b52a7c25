//! The AVX-512 VNNI level (`vpdpbusd`, `vpdpwssd` over AVX-512): the
//! integer dots of `quants::avx512` built on VNNI, each bit for bit the
//! level below (the integer sums are exact whatever instruction forms
//! them); the rest is the AVX-512 level's.

use super::avx512;
use super::table::CpuTable;
use crate::quants::level::CpuLevel;

/// The AVX-512 VNNI table.
pub(super) const TABLE: CpuTable = CpuTable {
    level: CpuLevel::Avx512Vnni,
    ..avx512::TABLE
};
