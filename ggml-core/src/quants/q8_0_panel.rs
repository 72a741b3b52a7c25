//! Q8_0 activation panels, the input of the GEMM kernels of the types whose
//! activations are Q8_0 ([`crate::quants::gemm`]): [`GEMM_COLS`] Q8_0 rows
//! interleaved block by block. Per 32-element block, [`BLOCK_BYTES`] bytes:
//! the 8 columns' 32 values (column `t` at `32t`), then their scales
//! widened to f32 (`256..288`), so one 32-byte load gives a column's block
//! and one broadcast load its scale.

use crate::quants::block::row;
use crate::quants::gemm::GEMM_COLS;
use crate::quants::q8_0::BlockQ8_0;

/// Offset of the scales in a panel block.
pub(crate) const D_OFF: usize = 32 * GEMM_COLS;
/// Bytes of one block of a panel.
pub const BLOCK_BYTES: usize = D_OFF + 4 * GEMM_COLS;

/// Bytes of a panel of columns of `n` elements (`n` a multiple of 32).
pub fn panel_bytes(n: usize) -> usize {
    n / 32 * BLOCK_BYTES
}

/// Pack up to [`GEMM_COLS`] Q8_0 rows of `n` elements into `panel`
/// (exactly [`panel_bytes`]`(n)` bytes); missing columns are zeros.
/// Panics on other lengths or more columns.
pub fn pack(n: usize, ys: &[&[u8]], panel: &mut [u8]) {
    assert!(
        ys.len() <= GEMM_COLS,
        "panel: {} columns, at most {GEMM_COLS}",
        ys.len()
    );
    assert!(n.is_multiple_of(32), "panel: {n} is not a multiple of 32");
    assert_eq!(panel.len(), panel_bytes(n), "panel: bytes for {n} elements");
    if ys.len() < GEMM_COLS {
        panel.fill(0);
    }
    for (t, y) in ys.iter().enumerate() {
        let yb = row::<BlockQ8_0>(y, n);
        for (by, p) in yb.iter().zip(panel.chunks_exact_mut(BLOCK_BYTES)) {
            p[32 * t..32 * t + 32].copy_from_slice(bytemuck::cast_slice(&by.qs));
            let d = by.d.to_f32();
            p[D_OFF + 4 * t..D_OFF + 4 * t + 4].copy_from_slice(&d.to_le_bytes());
        }
    }
}

/// Column `t` of a panel of `n` elements as Q8_0 blocks again (the scalar
/// kernels run the scalar dot on it; the scales came from f16, so they
/// narrow back exactly).
pub(crate) fn column(n: usize, panel: &[u8], t: usize) -> Vec<BlockQ8_0> {
    assert_eq!(panel.len(), panel_bytes(n), "panel: bytes for {n} elements");
    panel
        .chunks_exact(BLOCK_BYTES)
        .map(|p| {
            let at = D_OFF + 4 * t;
            let d = f32::from_le_bytes([p[at], p[at + 1], p[at + 2], p[at + 3]]);
            let mut qs = [0i8; 32];
            for (q, &b) in qs.iter_mut().zip(&p[32 * t..32 * t + 32]) {
                *q = b as i8;
            }
            BlockQ8_0 {
                d: half::f16::from_f32(d),
                qs,
            }
        })
        .collect()
}

/// The scalar `run` of a type with Q8_0 activations: `out[c]` = the scalar
/// dot `dot` of the weight blocks with column `c`.
pub(crate) fn run_scalar<B>(
    n: usize,
    x: &[B],
    panel: &[u8],
    out: &mut [f32; GEMM_COLS],
    dot: impl Fn(&[B], &[BlockQ8_0]) -> f32,
) {
    for (t, o) in out.iter_mut().enumerate() {
        *o = dot(x, &column(n, panel, t));
    }
}
