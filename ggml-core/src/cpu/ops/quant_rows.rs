//! Whole rows of block-quantized tensors for the row-wise kernels (`cpy`,
//! `set_rows`, `flash_attn_ext`): read a row as f32 with the type's
//! `to_float` (ggml's `dequantize_row_*`), write f32 into a row with its
//! `from_float` (ggml's reference quantizers), as ggml-cpu does when it
//! copies into or reads from a quantized KV cache. A row is only ever read
//! or written whole, block by block.

use crate::cpu::view::TView;
use crate::quants::cpu_traits;
use crate::tensor::Tensor;
use crate::types::GgmlType;

/// Whether rows of `ne0` elements of `ty` with element stride `nb0` can be
/// handled whole here: a block type with CPU kernels, blocks dense in the
/// row, and `ne0` a whole number of blocks.
pub(super) fn block_rows(ty: GgmlType, nb0: usize, ne0: i64) -> bool {
    ty.is_quantized()
        && cpu_traits(ty).is_some()
        && nb0 == ty.type_size()
        && ne0 >= 0
        && (ne0 as u64).is_multiple_of(ty.blck_size() as u64)
}

/// [`block_rows`] of a tensor.
pub(super) fn tensor_block_rows(t: &Tensor) -> bool {
    block_rows(t.ty, t.nb[0], t.ne[0])
}

/// Read row `(i1, i2, i3)` of a block-quantized view whole as f32.
/// Returns `false` (and leaves `out` alone) when the view's type has no
/// kernels or `out` is not a whole number of blocks.
///
/// # Safety
/// `(i1, i2, i3)` within `v.ne`, `out.len() <= v.ne[0]`, blocks dense in
/// the row (`nb[0]` the block size in bytes: checked by the caller's
/// `supports` through [`block_rows`]).
pub(super) unsafe fn load_qrow(
    v: &TView,
    i1: usize,
    i2: usize,
    i3: usize,
    out: &mut [f32],
) -> bool {
    let (Some(tr), Some(bytes)) = (cpu_traits(v.ty), v.ty.row_size(out.len() as u64)) else {
        return false;
    };
    debug_assert!(out.len() <= v.ne[0] && v.nb[0] == v.ty.type_size());
    let row = std::slice::from_raw_parts(v.row_ptr(i1, i2, i3) as *const u8, bytes);
    (tr.to_float)(row, out);
    true
}

/// Quantize `src` into row `(i1, i2, i3)` of a block-quantized view from
/// its first block. Returns `false` (writing nothing) when the type has no
/// kernels or `src` is not a whole number of blocks.
///
/// # Safety
/// `(i1, i2, i3)` within `v.ne`, `src.len() <= v.ne[0]`, blocks dense in
/// the row, memory writable and not overlapping `src`.
pub(super) unsafe fn store_qrow(v: &TView, i1: usize, i2: usize, i3: usize, src: &[f32]) -> bool {
    let (Some(tr), Some(bytes)) = (cpu_traits(v.ty), v.ty.row_size(src.len() as u64)) else {
        return false;
    };
    debug_assert!(src.len() <= v.ne[0] && v.nb[0] == v.ty.type_size());
    let row = std::slice::from_raw_parts_mut(v.row_ptr(i1, i2, i3), bytes);
    (tr.from_float)(src, row);
    true
}
