//! Q8_0 activation panels, the input of the GEMM kernels of the types whose
//! activations are Q8_0 ([`crate::quants::gemm`]): [`GEMM_COLS`] Q8_0 rows
//! interleaved block by block. Per 32-element block, [`BLOCK_BYTES`] bytes:
//! the 8 columns' 32 values (column `t` at `32t`), then their scales
//! widened to f32 (`256..288`), so one 32-byte load gives a column's block
//! and one broadcast load its scale.

use crate::quants::block::row;
use crate::quants::blocks::q8_0;
use crate::quants::blocks::q8_0::BlockQ8_0;
use crate::quants::gemm::{run_scalar, GEMM_COLS};

/// Offset of the scales in a panel block.
pub(crate) const D_OFF: usize = 32 * GEMM_COLS;
/// Bytes of one block of a panel.
pub const BLOCK_BYTES: usize = D_OFF + 4 * GEMM_COLS;

/// Bytes of a panel of columns of `n` elements (`n` a multiple of 32).
pub fn panel_bytes(n: usize) -> usize {
    n / 32 * BLOCK_BYTES
}

/// Panics unless `panel` is the panel of `n_blocks` blocks (the SIMD GEMM
/// runs' bounds check).
pub(crate) fn check_panel(n_blocks: usize, panel: &[u8]) {
    assert_eq!(
        panel.len(),
        n_blocks * BLOCK_BYTES,
        "gemm: a panel of {} bytes for {n_blocks} blocks",
        panel.len(),
    );
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

/// The scalar GEMM run of the Q8_0 weights (see [`crate::quants::gemm`];
/// here because Q8_0 is both the weight type and the panel's): `out[t]` =
/// the scalar dot with column `t` of the panel. Panics when `x` is shorter
/// than the row of `n` elements or `panel` is not the panel of `n`.
pub fn gemm_scalar_q8_0(n: usize, x: &[u8], panel: &[u8], out: &mut [f32; GEMM_COLS]) {
    let x = row::<BlockQ8_0>(x, n);
    run_scalar(out, |t| column(n, panel, t), |y| q8_0::dot_scalar(x, y))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quants::blocks::q8_0::from_float_scalar;
    use crate::types::GgmlType;

    fn rows(n: usize, count: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut s = seed | 1;
        (0..count)
            .map(|c| {
                let a: Vec<f32> = (0..n)
                    .map(|_| {
                        s ^= s << 13;
                        s ^= s >> 7;
                        s ^= s << 17;
                        ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 + c) as f32
                    })
                    .collect();
                let mut y = vec![0u8; GgmlType::Q8_0.row_size(n as u64).unwrap()];
                from_float_scalar(&a, &mut y);
                y
            })
            .collect()
    }

    #[test]
    fn pack_then_column_gives_the_rows_back() {
        let n = 5 * 32;
        let ys = rows(n, 3, 7);
        let refs: Vec<&[u8]> = ys.iter().map(|r| r.as_slice()).collect();
        let mut p = vec![0xffu8; panel_bytes(n)];
        pack(n, &refs, &mut p);
        for t in 0..GEMM_COLS {
            let col = column(n, &p, t);
            let bytes: &[u8] = bytemuck::cast_slice(&col);
            match ys.get(t) {
                Some(r) => assert_eq!(bytes, r.as_slice(), "column {t}"),
                None => assert!(bytes.iter().all(|&b| b == 0), "zero column {t}"),
            }
        }
    }
}
