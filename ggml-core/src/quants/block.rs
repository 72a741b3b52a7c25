//! Block structs as views of raw row bytes: the trait every GGUF block struct
//! implements, and the checked conversions from a byte row to a block slice.
//!
//! Every block struct in this module tree is `#[repr(C, packed)]` with ggml's
//! field order. None of ggml's block structs has padding, so the packed size
//! equals the C size (asserted at compile time next to each struct), and the
//! alignment of 1 lets a row at any byte offset of a mapped GGUF file be
//! viewed in place.

use bytemuck::Pod;

use crate::types::GgmlType;

/// A GGUF quantization block: `QK` elements stored in `size_of::<Self>()`
/// bytes, with the exact byte layout of ggml's `block_*` struct.
pub trait Block: Pod {
    /// The ggml type this block belongs to.
    const TYPE: GgmlType;
    /// Elements per block.
    const QK: usize;
}

/// Blocks in a row of `n` elements.
///
/// # Panics
/// When `n` is not a multiple of the block size.
pub(crate) fn n_blocks<B: Block>(n: usize) -> usize {
    assert!(
        n.is_multiple_of(B::QK),
        "{}: {n} elements is not a multiple of the block size {}",
        B::TYPE,
        B::QK
    );
    n / B::QK
}

/// The first `n / QK` blocks of `bytes` (a row may be followed by more data).
///
/// # Panics
/// When `n` is not a multiple of the block size or `bytes` is too short.
#[inline]
pub fn row<B: Block>(bytes: &[u8], n: usize) -> &[B] {
    let len = n_blocks::<B>(n) * size_of::<B>();
    assert!(
        bytes.len() >= len,
        "{}: row of {n} elements needs {len} bytes, got {}",
        B::TYPE,
        bytes.len()
    );
    bytemuck::cast_slice(&bytes[..len])
}

/// `bytes` as exactly the blocks of a row of `n` elements.
///
/// # Panics
/// When `n` is not a multiple of the block size or `bytes.len()` is not the
/// row size.
pub fn row_exact<B: Block>(bytes: &[u8], n: usize) -> &[B] {
    let len = n_blocks::<B>(n) * size_of::<B>();
    assert_eq!(
        bytes.len(),
        len,
        "{}: byte count of a row of {n} elements",
        B::TYPE
    );
    bytemuck::cast_slice(bytes)
}

/// Mutable [`row_exact`].
///
/// # Panics
/// As [`row_exact`].
pub fn row_exact_mut<B: Block>(bytes: &mut [u8], n: usize) -> &mut [B] {
    let len = n_blocks::<B>(n) * size_of::<B>();
    assert_eq!(
        bytes.len(),
        len,
        "{}: byte count of a row of {n} elements",
        B::TYPE
    );
    bytemuck::cast_slice_mut(bytes)
}

/// Declares a block struct's [`Block`] impl and asserts at compile time that
/// its size is ggml's `type_size`.
macro_rules! impl_block {
    ($block:ty, $ty:expr, $qk:expr, $size:expr) => {
        impl $crate::quants::block::Block for $block {
            const TYPE: $crate::types::GgmlType = $ty;
            const QK: usize = $qk;
        }
        const _: () = assert!(size_of::<$block>() == $size);
        const _: () = assert!(align_of::<$block>() == 1);
    };
}
pub(crate) use impl_block;
