//! Scratch memory for CPU kernels (ggml's `wdata`): one growable, 64-byte
//! aligned block per compute thread, reused from op to op so that decoding
//! does not allocate per op; and each thread's f32 row buffers (the rows a
//! kernel converts to f32 and back), kept the same way.
//!
//! Kernels run on the thread that called `BackendStream::compute` (worker 0 of the
//! pool), so a thread-local block is private to one compute at a time; the
//! pool's other workers reach it through the raw pointer the kernel shares.

use std::cell::{Cell, RefCell};

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

thread_local! {
    static ROWS: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// A zeroed f32 buffer taken from this thread's row memory and given back
/// when dropped (the pool's threads are persistent, so once the memory has
/// grown a kernel's per-thread rows allocate nothing). Take one buffer per
/// scope and split it: a second one taken while the first is held gets
/// fresh memory.
pub struct RowBuf {
    v: Vec<f32>,
    len: usize,
}

impl RowBuf {
    /// `len` zeroed elements.
    pub fn take(len: usize) -> RowBuf {
        let mut v = ROWS.with(Cell::take);
        if v.len() < len {
            v = vec![0f32; len.next_power_of_two()];
        } else {
            v[..len].fill(0.0);
        }
        RowBuf { v, len }
    }
}

impl std::ops::Deref for RowBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.v[..self.len]
    }
}

impl std::ops::DerefMut for RowBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.v[..self.len]
    }
}

impl Drop for RowBuf {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.v);
        // keep the larger of this buffer and whatever came back meanwhile
        let _ = ROWS.try_with(|c| {
            let held = c.take();
            c.set(if held.len() >= v.len() { held } else { v });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_bufs_are_zeroed_sized_and_reused() {
        let mut a = RowBuf::take(8);
        assert_eq!(a.len(), 8);
        assert!(a.iter().all(|&x| x == 0.0));
        a.fill(1.0);
        let p = a.as_ptr();
        {
            // taken while `a` is held: other memory
            let mut b = RowBuf::take(4);
            assert_eq!(&b[..], &[0.0; 4]);
            b.fill(2.0);
            assert_ne!(b.as_ptr(), p);
        }
        assert!(a.iter().all(|&x| x == 1.0));
        drop(a);
        // the larger buffer came back: reused, zeroed again
        let c = RowBuf::take(8);
        assert_eq!(c.as_ptr(), p);
        assert!(c.iter().all(|&x| x == 0.0));
    }

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
