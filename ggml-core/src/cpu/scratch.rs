//! Scratch memory for CPU kernels (ggml's `wdata`): one growable, 64-byte
//! aligned block per compute thread, reused from op to op so that decoding
//! does not allocate per op.
//!
//! Kernels run on the thread that called `Backend::compute` (worker 0 of the
//! pool), so a thread-local block is private to one compute at a time; the
//! pool's other workers reach it through the raw pointer the kernel shares.

use std::cell::RefCell;

const ALIGN: usize = 64;

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static TILE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Run `f` with at least `bytes` of 64-byte aligned scratch memory (contents
/// unspecified). Re-entrant calls get a fresh allocation.
pub fn with_scratch<R>(bytes: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    with_block(&SCRATCH, bytes, f)
}

/// As [`with_scratch`], from a second per-thread block: for what one task
/// packs inside an op that holds the first (the GEMM's activation panels),
/// so that the compute thread, which holds its scratch for the op's
/// converted activations, does not allocate per task.
pub fn with_tile_scratch<R>(bytes: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    with_block(&TILE, bytes, f)
}

fn with_block<R>(
    key: &'static std::thread::LocalKey<RefCell<Vec<u8>>>,
    bytes: usize,
    f: impl FnOnce(&mut [u8]) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < bytes + ALIGN {
                *v = vec![0u8; (bytes + ALIGN).next_power_of_two()];
            }
            let off = v.as_ptr().align_offset(ALIGN);
            f(&mut v[off..off + bytes])
        }
        Err(_) => {
            let mut v = vec![0u8; bytes + ALIGN];
            let off = v.as_ptr().align_offset(ALIGN);
            f(&mut v[off..off + bytes])
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_reentrant() {
        with_scratch(100, |a| {
            assert_eq!(a.len(), 100);
            assert_eq!(a.as_ptr() as usize % ALIGN, 0);
            a.fill(1);
            with_scratch(10, |b| {
                assert_eq!(b.len(), 10);
                assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            });
            assert!(a.iter().all(|&x| x == 1));
        });
    }
}
