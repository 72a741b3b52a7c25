//! The device's out-of-range-index flag, read once per graph.
//!
//! The kernels that index with device data (`get_rows`, `set_rows`,
//! `add_id`, `mul_mat_id`) `atomicOr` their own bit into one device word
//! when an index is out of range (`kernels.cu`). Nothing synchronizes for it
//! inside a graph: [`ErrFlag::before_sync`] queues a copy of the word into
//! page-locked host memory on the compute stream just before the
//! synchronize that ends the graph, and [`ErrFlag::after_sync`] reads it
//! there, naming the op kinds whose bits are set, and clears the word.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use ggml_core::{BackendError, Op};

use crate::buffer::{Dev, DevMem};

/// The bit each validating op's kernel sets (the constants in `kernels.cu`).
const KINDS: [(u32, &str); 4] = [
    (1, "get_rows"),
    (2, "set_rows"),
    (4, "add_id"),
    (8, "mul_mat_id"),
];

/// The flag bit of `op`'s kernel, or 0 for ops that validate no index.
pub(crate) fn bit_of(op: Op) -> u32 {
    match op {
        Op::GetRows => 1,
        Op::SetRows => 2,
        Op::AddId => 4,
        Op::MulMatId => 8,
        _ => 0,
    }
}

/// The op kinds named by the bits of `flag`, as `get_rows and mul_mat_id`.
fn kinds(flag: u32) -> String {
    let names: Vec<&str> = KINDS
        .iter()
        .filter(|(b, _)| flag & b != 0)
        .map(|&(_, n)| n)
        .collect();
    match names.as_slice() {
        [] => format!("an op (flag {flag:#x})"),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// The flag word on the device, its page-locked host copy, and the kinds
/// launched since the last check.
pub(crate) struct ErrFlag {
    pub dev_word: DevMem,
    host: *mut u8,
    dev: Arc<Dev>,
    /// Bits of the validating ops queued since the last check.
    pending: AtomicU32,
    /// Whether a copy of the word is queued for the coming synchronize.
    copied: AtomicU32,
}

// SAFETY: `host` is 4 bytes of page-locked memory owned by this value; it
// is written by a device copy ordered before the synchronize that precedes
// every host read of it, and the backend checks the flag from one thread at
// a time (its callers synchronize and compute on one thread).
unsafe impl Send for ErrFlag {}
// SAFETY: see above.
unsafe impl Sync for ErrFlag {}

impl ErrFlag {
    /// A cleared flag on `dev` (waits for the clear).
    pub fn new(dev: &Arc<Dev>) -> Result<ErrFlag, BackendError> {
        let dev_word = DevMem::alloc(dev, 4)?;
        let host = dev.drv.host_alloc(4)?;
        if host.is_null() {
            return Err(BackendError::OutOfMemory(
                "4 bytes of pinned memory for the error flag".into(),
            ));
        }
        // SAFETY: `host` points to 4 writable bytes.
        unsafe { std::ptr::write_bytes(host, 0, 4) };
        // SAFETY: the word spans 4 bytes; queued on the compute stream.
        unsafe { dev.stream.memset_d8(dev_word.ptr, 0, 4) }?;
        dev.stream.synchronize()?;
        Ok(ErrFlag {
            dev_word,
            host,
            dev: Arc::clone(dev),
            pending: AtomicU32::new(0),
            copied: AtomicU32::new(0),
        })
    }

    /// Note that kernels with flag bits `bits` were queued.
    pub fn launched(&self, bits: u32) {
        if bits != 0 {
            self.pending.fetch_or(bits, Ordering::Relaxed);
        }
    }

    /// Before the synchronize that ends a graph: when a validating kernel
    /// was queued, copy the word to the host behind it on the compute stream.
    pub fn before_sync(&self) -> Result<(), BackendError> {
        if self.pending.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        // SAFETY: the word is 4 live device bytes and `host` 4 page-locked
        // bytes, read by the host only after the synchronize that follows.
        unsafe { self.dev.stream.memcpy_dtoh(self.host, self.dev_word.ptr, 4) }?;
        self.copied.store(1, Ordering::Relaxed);
        Ok(())
    }

    /// After that synchronize: the error naming the op kinds that found an
    /// index out of range, if any (the word is cleared for the next graph).
    pub fn after_sync(&self) -> Result<(), BackendError> {
        if self.copied.swap(0, Ordering::Relaxed) == 0 {
            return Ok(());
        }
        self.pending.store(0, Ordering::Relaxed);
        let mut w = [0u8; 4];
        // SAFETY: `host` holds 4 bytes; the copy into it completed (the
        // device was synchronized after it was queued).
        unsafe { std::ptr::copy_nonoverlapping(self.host, w.as_mut_ptr(), 4) };
        let flag = u32::from_ne_bytes(w);
        if flag == 0 {
            return Ok(());
        }
        // SAFETY: as in `new`; ordered before later kernels on the stream.
        unsafe { self.dev.stream.memset_d8(self.dev_word.ptr, 0, 4) }?;
        Err(BackendError::InvalidInput(format!(
            "{}: an index (expert id or row id) was out of range in {}",
            self.dev.name,
            kinds(flag)
        )))
    }
}

impl Drop for ErrFlag {
    fn drop(&mut self) {
        let _ = self.dev.bind();
        // a queued copy may still write `host`
        let _ = self.dev.sync();
        // SAFETY: `host` came from `host_alloc` and is freed only here.
        unsafe { self.dev.drv.host_free(self.host) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_name_every_set_bit() {
        assert_eq!(kinds(8), "mul_mat_id");
        assert_eq!(kinds(1 | 8), "get_rows and mul_mat_id");
        assert_eq!(kinds(1 | 2 | 4), "get_rows, set_rows and add_id");
        assert_eq!(bit_of(Op::MulMatId), 8);
        assert_eq!(bit_of(Op::Add), 0);
    }
}
