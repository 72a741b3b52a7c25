//! The K-quants: 256-element super-blocks with 6- or 8-bit sub-block scales
//! (Q2_K … Q6_K), and Q8_K, their activation type.

pub mod panel;
pub mod q2_k;
pub mod q3_k;
pub mod q4_k;
pub mod q5_k;
pub mod q6_k;
pub mod q8_k;
mod scale_search;

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;

/// The f32 step of a K-quant dot per block with minima (Q4_K, Q5_K), shared
/// by every kernel so that all give the same bits: `acc + (dy·d)·isum −
/// (dy·dmin)·msum`, two fused multiply-adds, with `dy` the Q8_K block's
/// scale, `d`/`dmin` the weight block's and `isum`/`msum` the block's exact
/// integer sums.
#[inline]
pub(crate) fn acc_min(acc: f32, dy: f32, d: f32, dmin: f32, isum: i32, msum: i32) -> f32 {
    let acc = (dy * d).mul_add(isum as f32, acc);
    (-(dy * dmin)).mul_add(msum as f32, acc)
}

/// The f32 step of a K-quant dot per block without minima (Q6_K):
/// `acc + (dy·d)·isum`, one fused multiply-add.
#[inline]
pub(crate) fn acc_offset(acc: f32, dy: f32, d: f32, isum: i32) -> f32 {
    (dy * d).mul_add(isum as f32, acc)
}
