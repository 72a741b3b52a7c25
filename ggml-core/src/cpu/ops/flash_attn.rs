//! `flash_attn_ext`: fused `softmax(scale * q·k + slope * mask) · v` per
//! query row with an online softmax, as ggml's CPU kernel: GQA broadcast of
//! k/v heads, optional F16/F32 mask (broadcast over dims 2 and 3, rows ≥ the
//! query rows), ALiBi `max_bias`, logit `softcap`, optional sinks (src 4).
//! Output `[dv, n_head, n_q, ne3]` (ggml's permuted layout).
//!
//! The numerics are those of ggml's `ggml_compute_forward_flash_attn_ext_f16_one_chunk`
//! (the path llama.cpp's CPU backend takes for fewer than 64 query rows,
//! i.e. every decode step and short prompts): q is rounded to F16 (BF16)
//! when k is F16 (BF16), each score is `ggml_vec_dot_f16` (or `_f32`) in
//! ggml's AVX2 order (`flash_attn_vec`), and when v is F16 the weighted sum
//! of v is accumulated in an F16 row (`ggml_vec_mad_f16` /
//! `ggml_vec_scale_f16`, rounded at every step) and only converted to f32
//! before the sink and the final `1 / S`; an F32 v accumulates in f32 with
//! fused multiply-adds.
//!
//! A block-quantized k (a Q8_0/Q4_0 KV cache) is dotted as ggml does: q
//! converted once per row to k's `vec_dot_type` (Q8_0) and each k row
//! dotted with the type's `vec_dot`; a block-quantized (or BF16) v row is
//! dequantized whole before it is accumulated in f32.

use super::compute_ctx::ComputeCtx;
use super::copy::{is_float, load_row, load_row_at, min_rows, store_row};
use super::flash_attn_vec::{ggml_dot, mad_f16, mad_f32, round_f16, scale_f16};
use super::quant_rows::tensor_block_rows;
use super::softmax::alibi_slope;
use crate::backend::BackendError;
use crate::graph::Graph;
use crate::op::Op;
use crate::quants::{cpu_traits, CpuTypeTraits};
use crate::tensor::{Tensor, TensorId};
use crate::types::GgmlType;

/// The kernels of a block-quantized k and of its `vec_dot_type`, when `k`
/// can be dotted whole row by row (blocks dense in the row, the head
/// dimension a whole number of blocks of both types).
fn quant_k(k: &Tensor) -> Option<(&'static CpuTypeTraits, &'static CpuTypeTraits)> {
    if !tensor_block_rows(k) {
        return None;
    }
    let kt = cpu_traits(k.ty)?;
    let qt = cpu_traits(kt.vec_dot_type)?;
    (k.ne[0] as u64)
        .is_multiple_of(kt.vec_dot_type.blck_size() as u64)
        .then_some((kt, qt))
}

/// F32 dst; float q/mask of any strides, k and v float of any strides or
/// block-quantized with whole blocks per row, with ggml's shapes.
pub(super) fn supports(g: &Graph, node: TensorId) -> bool {
    let t = g.tensor(node);
    let (q, k, v) = (g.tensor(t.src[0]), g.tensor(t.src[1]), g.tensor(t.src[2]));
    let mask_ok = t.src.get(3).is_none_or(|&m| is_float(g.tensor(m).ty));
    let sinks_ok = t
        .src
        .get(4)
        .is_none_or(|&s| g.tensor(s).ty == GgmlType::F32);
    t.ty == GgmlType::F32
        && is_float(q.ty)
        && (is_float(k.ty) || quant_k(k).is_some())
        && (is_float(v.ty) || tensor_block_rows(v))
        && g.flash_attn_ext_shapes_ok(node)
        && mask_ok
        && sinks_ok
}

/// Compute a `flash_attn_ext` node.
pub(super) fn flash_attn(ctx: &ComputeCtx<'_>, node: TensorId) -> Result<(), BackendError> {
    let Op::FlashAttnExt {
        scale,
        max_bias,
        softcap,
    } = ctx.g.tensor(node).op
    else {
        return Err(BackendError::Unsupported("flash_attn: wrong node".into()));
    };
    if !supports(ctx.g, node) {
        return Err(BackendError::Unsupported(format!(
            "flash_attn_ext '{}': types or shapes",
            ctx.g.tensor(node).name
        )));
    }
    let (mut scale, max_bias, softcap) = (scale.get(), max_bias.get(), softcap.get());
    if softcap != 0.0 {
        scale /= softcap;
    }
    let (dst, src) = ctx.views(node)?;
    let (q, k, v) = (src[0], src[1], src[2]);
    let mask = src.get(3).copied();
    let sinks = src.get(4).copied();
    let (dk, dv, n_kv) = (q.ne[0], v.ne[0], k.ne[1]);
    let (n_q, n_head, ne3) = (q.ne[1], q.ne[2], q.ne[3]);
    let (rk2, rk3) = (n_head / k.ne[2], ne3 / k.ne[3]);
    let round_q = k.ty == GgmlType::F16;
    let acc_f16 = v.ty == GgmlType::F16;
    let round_q_bf16 = k.ty == GgmlType::BF16;
    // a quantized k: q goes to k's vec_dot type, each k row is dotted whole
    let qk = quant_k(ctx.g.tensor(ctx.g.tensor(node).src[1]));
    let k_row_bytes = k.ty.row_size(dk as u64).unwrap_or(0);
    let q_bytes = qk.map_or(0, |(kt, _)| {
        kt.vec_dot_type.row_size(dk as u64).unwrap_or(0)
    });
    let rows = n_q * n_head * ne3;
    ctx.pool
        .for_ranges(rows, min_rows(n_kv * (dk + dv)), &|range| {
            let mut qr = vec![0f32; dk];
            let mut kr = vec![0f32; dk];
            let mut vr = vec![0f32; dv];
            let mut mr = vec![0f32; if mask.is_some() { n_kv } else { 0 }];
            let mut acc = vec![0f32; dv];
            let mut qq = vec![0u8; q_bytes];
            for r in range {
                // row order of dst: head fastest, then query, then ne3
                let iq2 = r % n_head;
                let iq1 = (r / n_head) % n_q;
                let iq3 = r / (n_head * n_q);
                let (ik2, ik3) = (iq2 / rk2, iq3 / rk3);
                let slope = alibi_slope(max_bias, n_head as u32, iq2 as u32);
                // SAFETY: every coordinate below is within its view's shape
                // (checked by `supports`); rows go to scratch vectors.
                unsafe {
                    load_row(&q, iq1, iq2, iq3, &mut qr);
                    if let Some(m) = &mask {
                        load_row_at(m, 0, iq1, iq2 % m.ne[2], iq3 % m.ne[3], &mut mr);
                    }
                }
                if round_q {
                    for x in qr.iter_mut() {
                        *x = round_f16(*x);
                    }
                }
                if round_q_bf16 {
                    for x in qr.iter_mut() {
                        *x = half::bf16::from_f32(*x).to_f32();
                    }
                }
                if let Some((_, qt)) = qk {
                    (qt.from_float)(&qr, &mut qq);
                }
                let mut m_run = f32::NEG_INFINITY;
                let mut s_run = 0f32;
                acc.fill(0.0);
                for ic in 0..n_kv {
                    let mv = mr.get(ic).map_or(0.0, |&m| slope * m);
                    if mv == f32::NEG_INFINITY {
                        continue;
                    }
                    let dot = match qk {
                        Some((kt, _)) => {
                            // SAFETY: ic < n_kv, (ik2, ik3) within k's shape;
                            // the row's blocks are dense (`supports`), so
                            // its `k_row_bytes` lie in the checked view.
                            let row = unsafe {
                                std::slice::from_raw_parts(
                                    k.row_ptr(ic, ik2, ik3) as *const u8,
                                    k_row_bytes,
                                )
                            };
                            (kt.vec_dot)(dk, row, &qq)
                        }
                        None => {
                            // SAFETY: ic < n_kv, (ik2, ik3) within k's and v's shapes.
                            unsafe { load_row(&k, ic, ik2, ik3, &mut kr) };
                            ggml_dot(&qr, &kr)
                        }
                    };
                    let mut s = dot * scale;
                    if softcap != 0.0 {
                        s = softcap * s.tanh();
                    }
                    s += mv;
                    let (mut ms, mut vs) = (1f32, 1f32);
                    if s > m_run {
                        let old = m_run;
                        m_run = s;
                        ms = (old - m_run).exp();
                        if acc_f16 {
                            scale_f16(&mut acc, ms);
                        } else {
                            for a in acc.iter_mut() {
                                *a *= ms;
                            }
                        }
                    } else {
                        vs = (s - m_run).exp();
                    }
                    // SAFETY: as above.
                    unsafe { load_row(&v, ic, ik2, ik3, &mut vr) };
                    if acc_f16 {
                        mad_f16(&mut acc, &vr, vs);
                    } else {
                        mad_f32(&mut acc, &vr, vs);
                    }
                    s_run = s_run.mul_add(ms, vs);
                }
                if let Some(sk) = &sinks {
                    // SAFETY: iq2 < n_head <= sinks.ne[0].
                    let s = unsafe { sk.get_f32(iq2, 0, 0, 0) };
                    let (mut ms, mut vs) = (1f32, 1f32);
                    if s > m_run {
                        ms = (m_run - s).exp();
                        for a in acc.iter_mut() {
                            *a *= ms;
                        }
                    } else {
                        vs = (s - m_run).exp();
                    }
                    s_run = s_run.mul_add(ms, vs);
                }
                let inv = if s_run == 0.0 { 0.0 } else { 1.0 / s_run };
                for a in acc.iter_mut() {
                    *a *= inv;
                }
                // SAFETY: dst is [dv, n_head, n_q, ne3].
                unsafe { store_row(&dst, iq2, iq1, iq3, &acc) };
            }
        });
    Ok(())
}
