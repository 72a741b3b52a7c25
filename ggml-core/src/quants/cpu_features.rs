//! Run-time CPU feature detection for the SIMD kernels, cached.

#[cfg(target_arch = "x86_64")]
use std::sync::atomic::{AtomicU8, Ordering};

/// Whether the AVX2 kernels may run: the CPU has AVX2, FMA and F16C.
/// Detected once and cached (0 = not yet known, 1 = no, 2 = yes).
#[inline]
pub(crate) fn has_avx2_fma_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static STATE: AtomicU8 = AtomicU8::new(0);
        match STATE.load(Ordering::Relaxed) {
            2 => true,
            1 => false,
            _ => {
                let yes = std::is_x86_feature_detected!("avx2")
                    && std::is_x86_feature_detected!("fma")
                    && std::is_x86_feature_detected!("f16c");
                STATE.store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Calls the AVX2 kernel `$avx2` when the CPU has AVX2/FMA/F16C, else the
/// scalar `$scalar`, with the same arguments.
macro_rules! dispatch {
    ($avx2:path, $scalar:path, ($($arg:expr),*)) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if $crate::quants::cpu_features::has_avx2_fma_f16c() {
                // SAFETY: `$avx2` is compiled with `avx2,fma,f16c` enabled; the
                // run-time check just above (cached `is_x86_feature_detected!`)
                // proved the CPU has all three. Its other preconditions (slice
                // lengths) are upheld by safe slices checked by the caller.
                return unsafe { $avx2($($arg),*) };
            }
        }
        $scalar($($arg),*)
    }};
}
pub(crate) use dispatch;
