//! Cache hints for the kernels that stream weight rows from memory: a
//! hint per 64-byte line, never a fault, whatever the address (past a
//! row's end included). No-ops off x86_64.

/// How far ahead of the bytes it is reading a decode dot kernel asks for
/// the weight row's next bytes. Generation streams every weight row from
/// DRAM exactly once, and left to the hardware prefetcher the kernels wait
/// on memory for a good part of each row; a steady hint a few KiB ahead of
/// the data keeps both cores' loads in flight. Asking for whole rows at
/// once before each row (as the matmul loop did) stalled on the full miss
/// buffers instead. Measured on the 2-core AMD EPYC (Zen 3) dev machine,
/// `llama-bench -p 0 -n 64 -t 2` on the 4-layer Qwen3-30B-A3B-shaped files,
/// best of 3 interleaved rounds: Q4_K_M 117 → 124-135 t/s and Q8_0 68 →
/// 84-92 t/s for 2.3-4.6 KiB ahead; 9 KiB was worse again.
pub(crate) const PREFETCH_AHEAD: usize = 4608;

/// Ask the cache hierarchy for the `len` bytes at `p`, a line every 64
/// bytes from `p`.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let mut off = 0;
        while off < len {
            // SAFETY: `_mm_prefetch` is a hint that never faults, whatever
            // the address; SSE is part of the x86_64 baseline.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off) as *const i8) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// [`prefetch`] of the `len` bytes lying [`PREFETCH_AHEAD`] bytes after
/// `p`. For a row read front to back in pieces of `len` bytes that covers
/// every line of the row ahead.
#[inline(always)]
pub(crate) fn prefetch_ahead(p: *const u8, len: usize) {
    prefetch(p.wrapping_add(PREFETCH_AHEAD), len);
}

/// [`prefetch_ahead`] for block `b` of a row: the block as far ahead.
#[inline(always)]
pub(crate) fn prefetch_block_ahead<T>(b: &T) {
    prefetch_ahead(b as *const T as *const u8, size_of::<T>());
}
