//! A quantized KV cache at op level (llama.cpp's `-ctk/-ctv q8_0|q4_0|bf16`),
//! on the CPU and on the sim device:
//! - `cpy` of F32 rows into a view of a Q8_0/Q4_0/BF16 cache writes the
//!   reference quantizer's bytes for those rows and nothing else; a copy
//!   out dequantizes; a copy between two caches of one type moves whole
//!   blocks; `set_rows` into a quantized cache quantizes the same way;
//! - `flash_attn_ext` over quantized K and V (GQA, a mask, head views into
//!   the cache rows) against an f64 attention over the dequantized K/V,
//!   with q rounded through K's `vec_dot_type` as ggml does;
//! - the KQ `mul_mat` with a quantized K view (the non-flash path).

mod common;

use common::*;
use ggml_core::quants::cpu_traits;
use ggml_core::{Backend, GgmlType, Graph, TensorId};

const KV_TYPES: [GgmlType; 3] = [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::BF16];

/// Dequantize a whole dense tensor of any type with CPU kernels.
fn dequant(g: &Graph, id: TensorId) -> Vec<f32> {
    let t = g.tensor(id);
    let bytes = g.read_bytes(id).unwrap();
    let mut out = vec![0f32; t.nelements() as usize];
    (cpu_traits(t.ty).unwrap().to_float)(&bytes[..t.nbytes()], &mut out);
    out
}

/// Quantize with the type's reference quantizer.
fn quant(ty: GgmlType, x: &[f32]) -> Vec<u8> {
    let mut b = vec![0u8; ty.row_size(x.len() as u64).unwrap()];
    (cpu_traits(ty).unwrap().from_float)(x, &mut b);
    b
}

fn backends() -> [&'static dyn Backend; 2] {
    [cpu(), sim()]
}

#[test]
fn cpy_into_a_quantized_cache_writes_only_the_reference_blocks_of_its_rows() {
    for be in backends() {
        for ty in KV_TYPES {
            let (ne0, cells, nt, pos0) = (64i64, 8i64, 3usize, 2usize);
            let mut g = Graph::new();
            let cache = g.new_tensor(ty, &[ne0, cells]);
            let src = g.new_tensor(GgmlType::F32, &[ne0, nt as i64]);
            let row = ty.row_size(ne0 as u64).unwrap();
            let dst = g.view_2d(cache, ne0, nt as i64, row, pos0 * row);
            let store = g.cpy(src, dst);
            g.build_forward_expand(store);
            // out again: the whole cache dequantized by a copy to F32
            let out = g.new_tensor(GgmlType::F32, &[ne0, cells]);
            let back = g.cpy(cache, out);
            g.build_forward_expand(back);
            // and into a second cache of the same type: whole blocks
            let twin = g.new_tensor(ty, &[ne0, cells]);
            let same = g.cpy(cache, twin);
            g.build_forward_expand(same);
            alloc(&mut g, be);
            let mut rng = Rng(ty.id() as u64 + 11);
            // what the other cells held before: values of their own
            let old: Vec<f32> = (0..ne0 * cells).map(|_| rng.f32(-9.0, 9.0)).collect();
            let before = quant(ty, &old);
            g.write_bytes(cache, &before).unwrap();
            let x: Vec<f32> = (0..ne0 as usize * nt).map(|_| rng.f32(-3.0, 3.0)).collect();
            fill(&g, src, &x);
            compute(&g, be);
            let after = g.read_bytes(cache).unwrap();
            assert_eq!(
                &after[..pos0 * row],
                &before[..pos0 * row],
                "{ty}: cells before the ubatch"
            );
            assert_eq!(
                &after[(pos0 + nt) * row..],
                &before[(pos0 + nt) * row..],
                "{ty}: cells after the ubatch"
            );
            assert_eq!(
                &after[pos0 * row..(pos0 + nt) * row],
                &quant(ty, &x)[..],
                "{ty} on {}: stored rows are the reference quantizer's bytes",
                be.name()
            );
            // dequantized: each value within the type's rounding of its block
            let got = g.read_f32(out).unwrap();
            assert_eq!(got, dequant(&g, cache), "{ty}: copy out dequantizes");
            for (i, &v) in x.iter().enumerate() {
                let blk = &x[i / 32 * 32..i / 32 * 32 + 32];
                let amax = blk.iter().fold(0f32, |m, y| m.max(y.abs()));
                let tol = match ty {
                    // half a step, plus the F16 rounding of the scale
                    GgmlType::Q8_0 => amax / 127.0 * 0.6,
                    // the largest positive value may clamp by a whole step
                    GgmlType::Q4_0 => amax / 8.0 * 1.1,
                    _ => v.abs() / 128.0,
                };
                let d = got[pos0 * ne0 as usize + i];
                assert!(
                    (d - v).abs() <= tol + 1e-6,
                    "{ty}: value {i}: {v} stored as {d}"
                );
            }
            assert_eq!(g.read_bytes(twin).unwrap(), after, "{ty}: block copy");
        }
    }
}

#[test]
fn set_rows_into_a_quantized_cache_quantizes_each_row() {
    for be in backends() {
        for ty in KV_TYPES {
            let (ne0, cells) = (64i64, 6i64);
            let mut g = Graph::new();
            let cache = g.new_tensor(ty, &[ne0, cells]);
            let src = g.new_tensor(GgmlType::F32, &[ne0, 2]);
            let idx = g.new_tensor(GgmlType::I64, &[2]);
            let s = g.set_rows(cache, src, idx);
            g.build_forward_expand(s);
            alloc(&mut g, be);
            g.write_bytes(cache, &vec![0u8; g.tensor(cache).nbytes()])
                .unwrap();
            let mut rng = Rng(5);
            let x: Vec<f32> = (0..128).map(|_| rng.f32(-1.0, 1.0)).collect();
            fill(&g, src, &x);
            g.write_bytes(idx, bytemuck::cast_slice(&[4i64, 1]))
                .unwrap();
            compute(&g, be);
            let row = ty.row_size(ne0 as u64).unwrap();
            let b = g.read_bytes(cache).unwrap();
            assert_eq!(
                &b[4 * row..5 * row],
                &quant(ty, &x[..64])[..],
                "{ty}: row 4"
            );
            assert_eq!(&b[row..2 * row], &quant(ty, &x[64..])[..], "{ty}: row 1");
            assert!(b[..row].iter().all(|&v| v == 0), "{ty}: row 0 untouched");
        }
    }
}

/// Round q as ggml does before dotting it with a K row of `k_ty`.
fn q_as_k_sees_it(k_ty: GgmlType, q: &[f32]) -> Vec<f32> {
    match k_ty {
        GgmlType::F16 | GgmlType::BF16 => q.iter().map(|&x| round_to(k_ty, x)).collect(),
        t if t.is_quantized() => {
            let vt = cpu_traits(t).unwrap().vec_dot_type;
            let mut out = vec![0f32; q.len()];
            (cpu_traits(vt).unwrap().to_float)(&quant(vt, q), &mut out);
            out
        }
        _ => q.to_vec(),
    }
}

#[test]
fn flash_attn_ext_over_a_quantized_cache_matches_f64_over_the_dequantized_one() {
    for be in backends() {
        for (k_ty, v_ty) in [
            (GgmlType::Q8_0, GgmlType::Q8_0),
            (GgmlType::Q4_0, GgmlType::Q4_0),
            (GgmlType::BF16, GgmlType::BF16),
            (GgmlType::Q8_0, GgmlType::F16),
            (GgmlType::F16, GgmlType::Q4_0),
        ] {
            for n_q in [1i64, 5] {
                // the cache as llama lays it out: rows of n_head_kv heads per
                // cell; K and V read through head views
                let (d, dv, n_head_kv, gqa, cells, n_kv) = (64i64, 32i64, 2i64, 2i64, 16i64, 11i64);
                let n_head = n_head_kv * gqa;
                let mut g = Graph::new();
                let kc = g.new_tensor(k_ty, &[d * n_head_kv, cells]);
                let vc = g.new_tensor(v_ty, &[dv * n_head_kv, cells]);
                let (kr, vr) = (
                    k_ty.row_size((d * n_head_kv) as u64).unwrap(),
                    v_ty.row_size((dv * n_head_kv) as u64).unwrap(),
                );
                let (kh, vh) = (
                    k_ty.row_size(d as u64).unwrap(),
                    v_ty.row_size(dv as u64).unwrap(),
                );
                let k = g.view_3d(kc, d, n_kv, n_head_kv, kr, kh, 0);
                let v = g.view_3d(vc, dv, n_kv, n_head_kv, vr, vh, 0);
                let (ql, q) = source(
                    &mut g,
                    GgmlType::F32,
                    [d, n_q, n_head, 1],
                    Layout::Permuted([0, 2, 1, 3]),
                );
                let mne = [n_kv, n_q, 1, 1];
                let mask = g.new_tensor(GgmlType::F16, &mne);
                let scale = 1.0 / (d as f32).sqrt();
                let out = g.flash_attn_ext(q, k, v, Some(mask), scale, 0.0, 0.0);
                g.build_forward_expand(out);
                alloc(&mut g, be);
                let mut rng = Rng(k_ty.id() as u64 * 31 + v_ty.id() as u64 + n_q as u64);
                let kx: Vec<f32> = (0..d * n_head_kv * cells)
                    .map(|_| rng.f32(-2.0, 2.0))
                    .collect();
                let vx: Vec<f32> = (0..dv * n_head_kv * cells)
                    .map(|_| rng.f32(-2.0, 2.0))
                    .collect();
                let enc = |ty: GgmlType, x: &[f32]| {
                    if ty.is_quantized() {
                        quant(ty, x)
                    } else {
                        encode(ty, x)
                    }
                };
                g.write_bytes(kc, &enc(k_ty, &kx)).unwrap();
                g.write_bytes(vc, &enc(v_ty, &vx)).unwrap();
                fill_rand(&g, ql, &mut rng, -2.0, 2.0);
                let mv: Vec<f32> = (0..n_kv * n_q)
                    .map(|i| {
                        if i % n_kv > n_kv - n_q + i / n_kv {
                            f32::NEG_INFINITY
                        } else {
                            0.0
                        }
                    })
                    .collect();
                fill(&g, mask, &mv);
                compute(&g, be);
                let got = g.read_f32(out).unwrap();
                let (kd, vd) = (dequant(&g, kc), dequant(&g, vc));
                let qv = g.read_f32(q).unwrap();
                let qne = [d, n_q, n_head, 1];
                let one = [dv, n_head, n_q, 1];
                let mut want = vec![0f64; got.len()];
                for h in 0..n_head {
                    for iq in 0..n_q {
                        let hk = h / gqa;
                        let qrow: Vec<f32> = (0..d).map(|i| qv[idx(&qne, i, iq, h, 0)]).collect();
                        let qrow = q_as_k_sees_it(k_ty, &qrow);
                        let mut logits = Vec::new();
                        for ic in 0..n_kv {
                            let krow = (ic * n_head_kv + hk) * d;
                            let s: f64 = (0..d)
                                .map(|i| qrow[i as usize] as f64 * kd[(krow + i) as usize] as f64)
                                .sum();
                            logits.push(s * scale as f64 + mv[(iq * n_kv + ic) as usize] as f64);
                        }
                        let mx = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                        let z: f64 = logits.iter().map(|s| (s - mx).exp()).sum();
                        for j in 0..dv {
                            let o: f64 = (0..n_kv)
                                .map(|ic| {
                                    let vrow = (ic * n_head_kv + hk) * dv;
                                    (logits[ic as usize] - mx).exp() / z
                                        * vd[(vrow + j) as usize] as f64
                                })
                                .sum();
                            want[idx(&one, j, h, iq, 0)] = o;
                        }
                    }
                }
                // An F16 v is accumulated in F16 as ggml does (rounded at
                // each of the n_kv multiply-adds and each rescale, a relative
                // 2^-11 of a running sum below S·max|v|): after the division
                // by S at most (2·n_kv + 1)·2^-11·max|v| per output.
                let (atol, rtol) = if v_ty == GgmlType::F16 {
                    let vmax = vd.iter().fold(0f64, |m, &x| m.max((x as f64).abs()));
                    ((2 * n_kv + 1) as f64 * 2f64.powi(-11) * vmax, 0.0)
                } else {
                    (2e-5, 1e-4)
                };
                assert_close(
                    &got,
                    &want,
                    atol,
                    rtol,
                    &format!(
                        "flash_attn_ext k {k_ty} v {v_ty} n_q {n_q} on {}",
                        be.name()
                    ),
                );
            }
        }
    }
}

#[test]
fn kq_mul_mat_reads_a_quantized_k_view() {
    for be in backends() {
        for k_ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::BF16] {
            let (d, n_head_kv, cells, n_kv, n_q) = (64i64, 2i64, 8i64, 6i64, 3i64);
            let mut g = Graph::new();
            let kc = g.new_tensor(k_ty, &[d * n_head_kv, cells]);
            let kr = k_ty.row_size((d * n_head_kv) as u64).unwrap();
            let kh = k_ty.row_size(d as u64).unwrap();
            let k = g.view_3d(kc, d, n_kv, n_head_kv, kr, kh, 0);
            let q = g.new_tensor(GgmlType::F32, &[d, n_q, n_head_kv]);
            let kq = g.mul_mat(k, q);
            g.build_forward_expand(kq);
            alloc(&mut g, be);
            let mut rng = Rng(k_ty.id() as u64);
            let kx: Vec<f32> = (0..d * n_head_kv * cells)
                .map(|_| rng.f32(-1.0, 1.0))
                .collect();
            let bytes = if k_ty.is_quantized() {
                quant(k_ty, &kx)
            } else {
                encode(k_ty, &kx)
            };
            g.write_bytes(kc, &bytes).unwrap();
            fill_rand(&g, q, &mut rng, -1.0, 1.0);
            compute(&g, be);
            let got = g.read_f32(kq).unwrap();
            let kd = dequant(&g, kc);
            let qv = g.read_f32(q).unwrap();
            let mut want = vec![0f64; got.len()];
            for h in 0..n_head_kv {
                for iq in 0..n_q {
                    let qrow =
                        &qv[((h * n_q + iq) * d) as usize..((h * n_q + iq + 1) * d) as usize];
                    let qrow = q_as_k_sees_it(k_ty, qrow);
                    for ic in 0..n_kv {
                        let krow = ((ic * n_head_kv + h) * d) as usize;
                        want[((h * n_q + iq) * n_kv + ic) as usize] = (0..d as usize)
                            .map(|i| qrow[i] as f64 * kd[krow + i] as f64)
                            .sum();
                    }
                }
            }
            assert_close(
                &got,
                &want,
                1e-5,
                1e-4,
                &format!("kq {k_ty} on {}", be.name()),
            );
        }
    }
}
