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
