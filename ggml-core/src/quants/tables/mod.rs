//! One kernel table per SIMD level, as ggml's `type_traits_cpu`: for every
//! type its row conversions (`to_float`, `from_float` for activations),
//! its decode dot (`vec_dot`) and its prompt kernels (`vec_dot_cols`,
//! `vec_dot_tile`, the `gemm` panel run).
//!
//! The levels are [`CpuLevel`]'s. Each level's table fills what the level
//! has and takes the level below's entry for the rest (struct update from
//! the lower table, at compile time): scalar ← AVX2 ← AVX-512 ← AVX-512
//! VNNI. [`cpu_table`] hands a level's table out only on a CPU that has the
//! level (the SIMD entries run their kernels unchecked, see `wrap`);
//! [`cpu_traits`] reads the table of the level chosen once at start
//! ([`crate::quants::cpu_level`]).
//!
//! Data flows one way: `blocks` (layouts and scalar references) ← the SIMD
//! kernels (`quants::avx2`, `quants::avx512`) ← these tables ← the ops.

mod scalar;
mod table;
mod wrap;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_vnni;

use crate::quants::level::{cpu_level, detected_level, CpuLevel, CpuLevelError};
use crate::quants::traits::CpuTypeTraits;
use crate::types::GgmlType;

pub use table::CpuTable;

static SCALAR: CpuTable = scalar::TABLE;
#[cfg(target_arch = "x86_64")]
static AVX2: CpuTable = avx2::TABLE;
#[cfg(target_arch = "x86_64")]
static AVX512: CpuTable = avx512::TABLE;
#[cfg(target_arch = "x86_64")]
static AVX512_VNNI: CpuTable = avx512_vnni::TABLE;

/// The table of `level`, or why not: the CPU lacks the level.
pub fn cpu_table(level: CpuLevel) -> Result<&'static CpuTable, CpuLevelError> {
    if !level.is_supported() {
        return Err(CpuLevelError::Missing {
            asked: level,
            best: detected_level(),
        });
    }
    Ok(match level {
        CpuLevel::Scalar => &SCALAR,
        #[cfg(target_arch = "x86_64")]
        CpuLevel::Avx2 => &AVX2,
        #[cfg(target_arch = "x86_64")]
        CpuLevel::Avx512 => &AVX512,
        #[cfg(target_arch = "x86_64")]
        CpuLevel::Avx512Vnni => &AVX512_VNNI,
        // unreachable: no SIMD level is supported off x86_64
        #[cfg(not(target_arch = "x86_64"))]
        _ => &SCALAR,
    })
}

/// The table of the chosen level ([`cpu_level`]).
#[inline]
pub fn active_table() -> &'static CpuTable {
    static ACTIVE: std::sync::OnceLock<&'static CpuTable> = std::sync::OnceLock::new();
    // the chosen level is one the CPU has, so its table is handed out
    ACTIVE.get_or_init(|| cpu_table(cpu_level()).unwrap_or(&SCALAR))
}

/// The CPU traits of `ty` at the chosen level, or `None` for types without
/// CPU kernels here (the integer types and F64).
#[inline]
pub fn cpu_traits(ty: GgmlType) -> Option<&'static CpuTypeTraits> {
    active_table().traits(ty)
}

#[cfg(test)]
mod tests;
