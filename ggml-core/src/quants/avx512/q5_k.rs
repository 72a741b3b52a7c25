//! Q5_K at the AVX-512 levels: the decode dot and the GEMM of
//! [`super::k_min`] on the AVX2 kernels' codes (nibbles and fifth bits).

use std::arch::x86_64::*;

use super::k_min::{min_kernels, MinBlock};
use crate::quants::avx2::load256;
use crate::quants::avx2::q5_k::high_bit;
use crate::quants::blocks::k_quants::q5_k::BlockQ5K;

impl MinBlock for BlockQ5K {
    fn d_dmin(&self) -> (half::f16, half::f16) {
        (self.d, self.dmin)
    }

    fn packed(&self) -> &[u8; 12] {
        &self.scales
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn codes(&self, j: usize) -> (__m256i, __m256i) {
        let m4 = _mm256_set1_epi8(0x0f);
        let hbits = load256(self.qh.as_ptr());
        let bits = load256(self.qs.as_ptr().add(32 * j));
        (
            _mm256_or_si256(_mm256_and_si256(bits, m4), high_bit(hbits, 2 * j)),
            _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                high_bit(hbits, 2 * j + 1),
            ),
        )
    }
}

min_kernels!(BlockQ5K, gemm_q5_k_q8_k, gemm_q5_k_q8_k_vnni);
