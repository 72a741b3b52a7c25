//! `rope_ext`: rotary position embeddings (modes Normal and NeoX), partial
//! rotation (`n_dims < ne0`, the rest copied), frequency factors and YaRN,
//! following ggml's f32 arithmetic step by step (`ggml_rope_cache_init`,
//! `rope_yarn`, `ggml_rope_yarn_corr_dims`).
//!
//! Including the fused multiply-adds that GCC forms in llama.cpp's build
//! (`-O3 -march=native`, GNU C++: `-ffp-contract=fast`): the YaRN angle
//! `theta_interp·(1 − ramp) + theta_extrap·ramp` and both rotated values
//! (`x0·cos − x1·sin`, `x0·sin + x1·cos`) are one FMA each, with the other
//! product rounded first. With these, the roped Q and K of the gpt-oss and
//! deepseek2 fixtures are bit-identical to llama.cpp 0.5.0-dev's (plain
//! mul/add left 1-ulp differences in 10-20 % of them).

use super::compute_ctx::ComputeCtx;
use super::copy::{is_float, load_row, min_rows, store_row};
use crate::backend::BackendError;
use crate::cpu::scratch::RowBuf;
use crate::graph::Graph;
use crate::op::{Op, RopeMode, RopeParams};
use crate::tensor::TensorId;
use crate::types::GgmlType;

/// F32 dst; float `a` of any strides; I32 positions (one per `ne2`);
/// F32 freq factors with at least `n_dims/2` entries.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let Op::RopeExt(p) = t.op else { return false };
    let a = g.tensor(t.src[0]);
    let pos = g.tensor(t.src[1]);
    let ff_ok = t.src.get(2).is_none_or(|&f| {
        let f = g.tensor(f);
        f.ty == GgmlType::F32 && f.ne[0] >= (p.n_dims / 2) as i64
    });
    t.ty == GgmlType::F32
        && is_float(a.ty)
        && a.ne == t.ne
        && pos.ty == GgmlType::I32
        && pos.ne[0] >= a.ne[2]
        && p.n_dims > 0
        && p.n_dims % 2 == 0
        && p.n_dims as i64 <= a.ne[0]
        && ff_ok
}

use crate::op::rope_yarn_corr_dims;

fn yarn_ramp(low: f32, high: f32, i0: usize) -> f32 {
    let d = high - low;
    let y = ((i0 / 2) as f32 - low) / if 0.001 > d { 0.001 } else { d };
    let y = if 0.0 > y { 0.0 } else { y };
    1.0 - if 1.0 < y { 1.0 } else { y }
}

/// `(cos, sin)` of one pair, as ggml's `rope_yarn`.
fn rope_yarn(
    theta_extrap: f32,
    freq_scale: f32,
    corr: [f32; 2],
    i0: usize,
    ext_factor: f32,
    mut mscale: f32,
) -> (f32, f32) {
    let theta_interp = freq_scale * theta_extrap;
    let mut theta = theta_interp;
    if ext_factor != 0.0 {
        let ramp_mix = yarn_ramp(corr[0], corr[1], i0) * ext_factor;
        // fused as GCC fuses it in ggml (module doc)
        theta = theta_interp.mul_add(1.0 - ramp_mix, theta_extrap * ramp_mix);
        mscale *= 1.0 + 0.1 * (1.0 / freq_scale).ln();
    }
    (theta.cos() * mscale, theta.sin() * mscale)
}

/// The cos/sin cache of one position: `cache[i0]`, `cache[i0+1]` for each
/// pair `i0 < n_dims` (ggml's `ggml_rope_cache_init`, theta multiplied
/// iteratively in f32).
pub(super) fn rope_cache(p: &RopeParams, pos: i32, ff: Option<&[f32]>, cache: &mut [f32]) {
    let n_dims = p.n_dims as usize;
    let theta_scale = p.freq_base.get().powf(-2.0 / p.n_dims as f32);
    let corr = rope_yarn_corr_dims(
        p.n_dims,
        p.n_ctx_orig,
        p.freq_base.get(),
        p.beta_fast.get(),
        p.beta_slow.get(),
    );
    let mut theta = pos as f32;
    let mut i0 = 0;
    while i0 < n_dims {
        let f = ff.map_or(1.0, |f| f[i0 / 2]);
        let (c, s) = rope_yarn(
            theta / f,
            p.freq_scale.get(),
            corr,
            i0,
            p.ext_factor.get(),
            p.attn_factor.get(),
        );
        cache[i0] = c;
        cache[i0 + 1] = s;
        theta *= theta_scale;
        i0 += 2;
    }
}

/// Rotate one row `x` into `y` with a cache from [`rope_cache`].
pub(super) fn rope_row(mode: RopeMode, n_dims: usize, cache: &[f32], x: &[f32], y: &mut [f32]) {
    let mut i0 = 0;
    while i0 < n_dims {
        let (c, s) = (cache[i0], cache[i0 + 1]);
        let (j0, j1) = match mode {
            RopeMode::Normal => (i0, i0 + 1),
            RopeMode::Neox => (i0 / 2, i0 / 2 + n_dims / 2),
        };
        let (x0, x1) = (x[j0], x[j1]);
        // fused as GCC fuses ggml's rotate_pairs (module doc)
        y[j0] = x0.mul_add(c, -(x1 * s));
        y[j1] = x0.mul_add(s, x1 * c);
        i0 += 2;
    }
    y[n_dims..].copy_from_slice(&x[n_dims..]);
}

/// Compute a `rope_ext` node.
pub(super) fn rope(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let Op::RopeExt(p) = ctx.g.tensor(node).op else {
        return Err(BackendError::Unsupported("rope: wrong node".into()));
    };
    if !supports(ctx.g, node) {
        return Err(BackendError::Unsupported(format!(
            "rope '{}': types or shapes",
            ctx.g.tensor(node).name
        )));
    }
    let (dst, src) = ctx.views(node)?;
    let (a, pos) = (src[0], src[1]);
    let ffv = src.get(2).copied();
    let n_dims = p.n_dims as usize;
    let ne0 = dst.ne[0];
    // freq factors, read once
    let ff: Option<Vec<f32>> = ffv.map(|f| {
        let mut v = vec![0f32; n_dims / 2];
        // SAFETY: row 0 exists with at least n_dims/2 elements (`supports`).
        unsafe { load_row(&f, 0, 0, 0, &mut v) };
        v
    });
    ctx.pool.for_ranges(dst.nrows(), min_rows(ne0), &|rows| {
        let mut buf = RowBuf::take(2 * ne0 + n_dims);
        let (x, rest) = buf.split_at_mut(ne0);
        let (y, cache) = rest.split_at_mut(ne0);
        let mut cached: Option<usize> = None;
        for r in rows {
            let (i1, i2, i3) = dst.row_coords(r);
            if cached != Some(i2) {
                // SAFETY: i2 < a.ne[2] <= pos.ne[0].
                let p_i = unsafe { pos.get_i32(i2, 0, 0, 0) };
                rope_cache(&p, p_i, ff.as_deref(), cache);
                cached = Some(i2);
            }
            // SAFETY: coordinates within both (equal) shapes; scratch rows.
            unsafe { load_row(&a, i1, i2, i3, x) };
            rope_row(p.mode, n_dims, cache, x, y);
            // SAFETY: as above.
            unsafe { store_row(&dst, i1, i2, i3, y) };
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x0·c − x1·s` and `x0·s + x1·c` each rounded once after the first
    /// product (`x0·c`, `x0·s`, exact in f64) is added to the rounded second
    /// one: what an FMA gives, derived here in f64.
    #[test]
    fn rotation_is_fused_as_in_llama_cpp() {
        let mut fused_differs = 0;
        for k in 0..200 {
            let x0 = 0.3 + k as f32 * 0.0137;
            let x1 = -0.7 + k as f32 * 0.0071;
            let (c, s) = ((k as f32 * 0.1).cos(), (k as f32 * 0.1).sin());
            let cache = [c, s];
            let mut y = [0f32; 2];
            rope_row(RopeMode::Normal, 2, &cache, &[x0, x1], &mut y);
            let want0 = (x0 as f64 * c as f64 - (x1 * s) as f64) as f32;
            let want1 = (x0 as f64 * s as f64 + (x1 * c) as f64) as f32;
            assert_eq!(y, [want0, want1], "pair {k}");
            if y != [x0 * c - x1 * s, x0 * s + x1 * c] {
                fused_differs += 1;
            }
        }
        // the two forms do differ on some of these pairs
        assert!(fused_differs > 0);
    }
}
