//! The kernel table of one SIMD level: one [`CpuTypeTraits`] per type.

use crate::quants::level::CpuLevel;
use crate::quants::traits::CpuTypeTraits;
use crate::types::GgmlType;

/// The kernels of one SIMD level, one [`CpuTypeTraits`] per type.
#[derive(Debug)]
pub struct CpuTable {
    pub(super) level: CpuLevel,
    pub(super) f32: CpuTypeTraits,
    pub(super) f16: CpuTypeTraits,
    pub(super) bf16: CpuTypeTraits,
    pub(super) q4_0: CpuTypeTraits,
    pub(super) q4_1: CpuTypeTraits,
    pub(super) q5_0: CpuTypeTraits,
    pub(super) q5_1: CpuTypeTraits,
    pub(super) q8_0: CpuTypeTraits,
    pub(super) q8_1: CpuTypeTraits,
    pub(super) q2k: CpuTypeTraits,
    pub(super) q3k: CpuTypeTraits,
    pub(super) q4k: CpuTypeTraits,
    pub(super) q5k: CpuTypeTraits,
    pub(super) q6k: CpuTypeTraits,
    pub(super) q8k: CpuTypeTraits,
    pub(super) iq4nl: CpuTypeTraits,
    pub(super) iq4xs: CpuTypeTraits,
    pub(super) mxfp4: CpuTypeTraits,
}

impl CpuTable {
    /// The level whose kernels these are.
    pub fn level(&self) -> CpuLevel {
        self.level
    }

    /// The entry of `ty`, or `None` for types without CPU kernels (the
    /// integer types and F64).
    pub fn traits(&self, ty: GgmlType) -> Option<&CpuTypeTraits> {
        use GgmlType as T;
        Some(match ty {
            T::F32 => &self.f32,
            T::F16 => &self.f16,
            T::BF16 => &self.bf16,
            T::Q4_0 => &self.q4_0,
            T::Q4_1 => &self.q4_1,
            T::Q5_0 => &self.q5_0,
            T::Q5_1 => &self.q5_1,
            T::Q8_0 => &self.q8_0,
            T::Q8_1 => &self.q8_1,
            T::Q2K => &self.q2k,
            T::Q3K => &self.q3k,
            T::Q4K => &self.q4k,
            T::Q5K => &self.q5k,
            T::Q6K => &self.q6k,
            T::Q8K => &self.q8k,
            T::IQ4NL => &self.iq4nl,
            T::IQ4XS => &self.iq4xs,
            T::MXFP4 => &self.mxfp4,
            T::I8 | T::I16 | T::I32 | T::I64 | T::F64 => return None,
        })
    }
}
