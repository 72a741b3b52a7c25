//! Q8_K activation panels, the input of the GEMM kernels of the types dotted
//! with Q8_K (the K-quants and IQ4_XS, [`crate::quants::gemm`]): [`GEMM_COLS`] Q8_K rows interleaved block by
//! block. Per 256-element block, [`BLOCK_BYTES`] bytes:
//!
//! | bytes | what |
//! | --- | --- |
//! | `0..2048` | `qs`: for sub-block `s < 8`, column `t < 8`: the column's 32 values `32s..32s+32` at `(8s + t)·32` |
//! | `2048..2080` | `d`: the 8 columns' f32 scales |
//! | `2080..2208` | `-d` of column `t` four times at `2080 + 16t` (the minima's 4-lane factors) |
//! | `2208..2336` | the pair sums `bsums[2s] + bsums[2s+1]` (i16), `s < 8`, of column `t` at `2208 + 16t` |
//! | `2336..2592` | the 16 `bsums` (i16) of column `t` at `2336 + 32t` |
//!
//! so one 32-byte load gives a column's sub-block, one the 8 columns'
//! scales, one the 16-value sums of a column or the pair sums of two.

use super::q8_k::BlockQ8K;
use super::QK_K;
use crate::quants::block::row;
use crate::quants::gemm::GEMM_COLS;

/// Offset of the scales in a panel block.
pub(crate) const D_OFF: usize = 8 * GEMM_COLS * 32;
/// Offset of the negated scales, four per column.
pub(crate) const NEG_D4_OFF: usize = D_OFF + 4 * GEMM_COLS;
/// Offset of the pair sums, eight i16 per column.
pub(crate) const PAIRS_OFF: usize = NEG_D4_OFF + 16 * GEMM_COLS;
/// Offset of the 16-value sums, sixteen i16 per column.
pub(crate) const BSUMS_OFF: usize = PAIRS_OFF + 16 * GEMM_COLS;
/// Bytes of one block of a panel.
pub const BLOCK_BYTES: usize = BSUMS_OFF + 32 * GEMM_COLS;

/// Bytes of a panel of columns of `n` elements (`n` a multiple of 256).
pub fn panel_bytes(n: usize) -> usize {
    n / QK_K * BLOCK_BYTES
}

/// Pack up to [`GEMM_COLS`] Q8_K rows of `n` elements into `panel`
/// (exactly [`panel_bytes`]`(n)` bytes); missing columns are zeros.
/// Panics on other lengths or more columns.
pub fn pack(n: usize, ys: &[&[u8]], panel: &mut [u8]) {
    assert!(
        ys.len() <= GEMM_COLS,
        "panel: {} columns, at most {GEMM_COLS}",
        ys.len()
    );
    assert!(
        n.is_multiple_of(QK_K),
        "panel: {n} is not a multiple of {QK_K}"
    );
    assert_eq!(panel.len(), panel_bytes(n), "panel: bytes for {n} elements");
    if ys.len() < GEMM_COLS {
        // every byte of a present column is written below
        panel.fill(0);
    }
    for (t, y) in ys.iter().enumerate() {
        let yb = row::<BlockQ8K>(y, n);
        for (by, p) in yb.iter().zip(panel.chunks_exact_mut(BLOCK_BYTES)) {
            for s in 0..8 {
                let at = (8 * s + t) * 32;
                p[at..at + 32].copy_from_slice(bytemuck::cast_slice(&by.qs[32 * s..32 * s + 32]));
            }
            let d = by.d;
            p[D_OFF + 4 * t..D_OFF + 4 * t + 4].copy_from_slice(&d.to_le_bytes());
            for l in 0..4 {
                let at = NEG_D4_OFF + 16 * t + 4 * l;
                p[at..at + 4].copy_from_slice(&(-d).to_le_bytes());
            }
            let bsums = by.bsums;
            for (j, b) in bsums.iter().enumerate() {
                let at = BSUMS_OFF + 32 * t + 2 * j;
                p[at..at + 2].copy_from_slice(&b.to_le_bytes());
            }
            for s in 0..8 {
                // as ggml's `_mm_hadd_epi16` of the sums: wrapping i16
                let pair = bsums[2 * s].wrapping_add(bsums[2 * s + 1]);
                let at = PAIRS_OFF + 16 * t + 2 * s;
                p[at..at + 2].copy_from_slice(&pair.to_le_bytes());
            }
        }
    }
}

/// Column `t` of a panel of `n` elements as Q8_K blocks again (the scalar
/// kernels run the scalar dot on it).
pub(crate) fn column(n: usize, panel: &[u8], t: usize) -> Vec<BlockQ8K> {
    assert_eq!(panel.len(), panel_bytes(n), "panel: bytes for {n} elements");
    panel
        .chunks_exact(BLOCK_BYTES)
        .map(|p| {
            let mut b = BlockQ8K {
                d: f32::from_le_bytes([
                    p[D_OFF + 4 * t],
                    p[D_OFF + 4 * t + 1],
                    p[D_OFF + 4 * t + 2],
                    p[D_OFF + 4 * t + 3],
                ]),
                qs: [0; QK_K],
                bsums: [0; QK_K / 16],
            };
            for s in 0..8 {
                let at = (8 * s + t) * 32;
                for l in 0..32 {
                    b.qs[32 * s + l] = p[at + l] as i8;
                }
            }
            let mut bsums = [0i16; QK_K / 16];
            for (j, b) in bsums.iter_mut().enumerate() {
                let at = BSUMS_OFF + 32 * t + 2 * j;
                *b = i16::from_le_bytes([p[at], p[at + 1]]);
            }
            b.bsums = bsums;
            b
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quants::blocks::k_quants::q8_k::from_float_scalar;
    use crate::types::GgmlType;

    fn q8k_rows(n: usize, cols: usize) -> Vec<Vec<u8>> {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        (0..cols)
            .map(|c| {
                let a: Vec<f32> = (0..n)
                    .map(|_| {
                        s ^= s << 13;
                        s ^= s >> 7;
                        s ^= s << 17;
                        ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * (1 + c) as f32
                    })
                    .collect();
                let mut y = vec![0u8; GgmlType::Q8K.row_size(n as u64).unwrap()];
                from_float_scalar(&a, &mut y);
                y
            })
            .collect()
    }

    #[test]
    fn pack_then_column_gives_the_rows_back() {
        let n = 3 * QK_K;
        let rows = q8k_rows(n, 5);
        let refs: Vec<&[u8]> = rows.iter().map(|r| r.as_slice()).collect();
        let mut p = vec![0xffu8; panel_bytes(n)];
        pack(n, &refs, &mut p);
        for t in 0..GEMM_COLS {
            let col = column(n, &p, t);
            let bytes: &[u8] = bytemuck::cast_slice(&col);
            match rows.get(t) {
                Some(r) => assert_eq!(bytes, r.as_slice(), "column {t}"),
                None => assert!(bytes.iter().all(|&b| b == 0), "zero column {t}"),
            }
        }
    }
}
