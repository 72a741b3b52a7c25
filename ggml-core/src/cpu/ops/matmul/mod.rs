//! Matrix products and the row gathers that feed them: `mul_mat`,
//! `mul_mat_id`, `add_id`, `get_rows`.
//!
//! `mul_mat` and `mul_mat_id` follow ggml's CPU path exactly: the activations
//! are converted once per op into the weight type's `vec_dot_type` (scratch
//! memory), then every output element is one `vec_dot(weight row, activation
//! row)`. Each output element therefore depends only on its two rows, never
//! on how the work was split, so any thread count gives identical bits.
//!
//! A transposed float `a` (elements contiguous along `ne[1]`, such as the
//! attention's V rows viewed as `[n_kv, head_dim]`) goes through
//! [`transposed`] instead: rank-1 updates in order of `k`, whose sums do not
//! depend on where zero (masked) `k` sit.
//!
//! Work is cut into tasks of (weight matrix, block of weight rows, block of
//! activation columns) that threads take from a shared counter. Within a task
//! a weight row is reused for a tile of [`TILE_COLS`](engine::TILE_COLS) columns while it is in
//! L1, and the task's rows stay in L2 across its column tiles.

mod add_id;
mod engine;
mod gemm;
mod get_rows;
mod mul_mat;
mod mul_mat_id;
mod transposed;

pub(super) use add_id::{add_id, supports_add_id};
pub(super) use get_rows::{get_rows, supports_get_rows};
pub(super) use mul_mat::{mul_mat, supports_mul_mat};
pub(super) use mul_mat_id::{mul_mat_id, supports_mul_mat_id};
