//! `mul_mat`, `mul_mat_id`, `get_rows` and `add_id` on the CPU backend
//! against plain f64 references, for every weight type with CPU kernels.
//!
//! The references dequantize weights with the type's `to_float` and pass
//! activations through the `vec_dot_type` round trip (`from_float` then
//! `to_float`), as the kernels do, so the tolerance only has to cover f32
//! summation order.

use std::sync::Arc;

use ggml_core::quants::cpu_traits;
use ggml_core::{
    Backend, BackendDevice, BackendError, BackendStream, BufferUsage, CpuBackend, GgmlType, Graph,
    SimBackend, TensorData, TensorId,
};
use proptest::prelude::*;

// ---- helpers ---------------------------------------------------------------

/// Every weight type the CPU matmul claims.
fn weight_types() -> Vec<GgmlType> {
    GgmlType::ALL
        .iter()
        .copied()
        .filter(|&t| cpu_traits(t).is_some())
        .collect()
}

/// Deterministic values in [-1, 1) from a seed (xorshift).
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Rows of `ne0` values quantized to `ty` (row by row), and their
/// dequantized values.
fn quantize(ty: GgmlType, vals: &[f32], ne0: usize) -> (Vec<u8>, Vec<f32>) {
    let tr = cpu_traits(ty).unwrap();
    let row = ty.row_size(ne0 as u64).unwrap();
    let nrows = vals.len() / ne0;
    let mut bytes = vec![0u8; row * nrows];
    let mut deq = vec![0f32; vals.len()];
    for r in 0..nrows {
        (tr.from_float)(
            &vals[r * ne0..(r + 1) * ne0],
            &mut bytes[r * row..(r + 1) * row],
        );
        (tr.to_float)(
            &bytes[r * row..(r + 1) * row],
            &mut deq[r * ne0..(r + 1) * ne0],
        );
    }
    (bytes, deq)
}

/// One activation row as the kernel sees it: converted to `vdt` and back.
fn round_trip(vdt: GgmlType, row: &[f32]) -> Vec<f32> {
    quantize(vdt, row, row.len()).1
}

/// Give every non-view tensor memory in one buffer of `be`.
fn alloc(g: &mut Graph, be: &dyn Backend) {
    let ids: Vec<TensorId> = g
        .ids()
        .filter(|&t| g.tensor(t).view_src.is_none())
        .collect();
    let total: usize = ids
        .iter()
        .map(|&t| g.tensor(t).nbytes().next_multiple_of(64) + 64)
        .sum();
    let buf = be.alloc_buffer(total, BufferUsage::Compute).unwrap();
    let mut off = 0;
    for t in ids {
        let n = g.tensor(t).nbytes().next_multiple_of(64) + 64;
        g.tensor_mut(t).data = Some(TensorData {
            buffer: Arc::clone(&buf),
            offset: off,
        });
        off += n;
    }
}

fn run(g: &Graph, be: &dyn Backend) -> Result<(), BackendError> {
    let nodes = g.nodes().to_vec();
    for &n in &nodes {
        assert!(
            be.supports_op(g, n),
            "{} claims {:?}",
            be.name(),
            g.tensor(n).op
        );
    }
    be.compute(g, &nodes)
}

/// Index of `(i0, i1, i2, i3)` in a dense tensor of shape `ne`.
fn flat(ne: [usize; 4], i: [usize; 4]) -> usize {
    ((i[3] * ne[2] + i[2]) * ne[1] + i[1]) * ne[0] + i[0]
}

/// How a source is laid out in memory.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// Dense.
    Plain,
    /// A `[k, ne2, ne1, ne3]` tensor permuted to `[k, ne1, ne2, ne3]`.
    Permuted,
    /// A window of rows one block longer, starting one block in (weights).
    Padded,
    /// A `[ne1, k, ne2, ne3]` tensor transposed (activations; nb0 ≠ elem).
    Transposed,
}

/// A source tensor: its logical values (already as the kernel reads them:
/// dequantized weights) and the graph tensor.
struct Src {
    id: TensorId,
    ne: [usize; 4],
    vals: Vec<f32>,
}

impl Src {
    fn at(&self, i: [usize; 4]) -> f32 {
        self.vals[flat(self.ne, i)]
    }
    fn row(&self, i1: usize, i2: usize, i3: usize) -> Vec<f32> {
        (0..self.ne[0])
            .map(|i0| self.at([i0, i1, i2, i3]))
            .collect()
    }
}

/// Build a source of type `ty`, logical shape `ne`, in `layout`; returns it
/// and the bytes to write into its base tensor after allocation.
fn make_src(
    g: &mut Graph,
    ty: GgmlType,
    ne: [usize; 4],
    layout: Layout,
    seed: u64,
) -> (Src, TensorId, Vec<u8>) {
    let blk = ty.blck_size();
    let base_ne = match layout {
        Layout::Plain => ne,
        Layout::Permuted => [ne[0], ne[2], ne[1], ne[3]],
        Layout::Padded => [ne[0] + blk, ne[1], ne[2], ne[3]],
        Layout::Transposed => [ne[1], ne[0], ne[2], ne[3]],
    };
    let n: usize = base_ne.iter().product();
    let (bytes, deq) = quantize(ty, &values(seed, n), base_ne[0]);
    let base_ne_i: Vec<i64> = base_ne.iter().map(|&x| x as i64).collect();
    let base = g.new_tensor(ty, &base_ne_i);
    g.set_name(base, format!("base{seed}"));
    let ne_i: Vec<i64> = ne.iter().map(|&x| x as i64).collect();
    let id = match layout {
        Layout::Plain => base,
        Layout::Permuted => g.permute(base, [0, 2, 1, 3]),
        Layout::Padded => {
            let nb = g.tensor(base).nb;
            g.view(base, &ne_i, &nb[1..], ty.type_size())
        }
        Layout::Transposed => g.transpose(base),
    };
    let mut vals = vec![0f32; ne.iter().product()];
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                for i0 in 0..ne[0] {
                    let b = match layout {
                        Layout::Plain => [i0, i1, i2, i3],
                        Layout::Permuted => [i0, i2, i1, i3],
                        Layout::Padded => [i0 + blk, i1, i2, i3],
                        Layout::Transposed => [i1, i0, i2, i3],
                    };
                    vals[flat(ne, [i0, i1, i2, i3])] = deq[flat(base_ne, b)];
                }
            }
        }
    }
    (Src { id, ne, vals }, base, bytes)
}

/// Tolerance for a dot of `k` terms whose absolute products sum to `abs`.
fn tol(k: usize, abs: f64, vdt: GgmlType, max_w: f64, sum_act: f64) -> f64 {
    let mut t = 1e-6 + abs * k as f64 * 2.4e-7;
    if vdt == GgmlType::Q8_1 {
        // ggml's Q8_1 keeps `s = d * Σq` as f16, used for the weights' minimum
        t += max_w * sum_act * 1e-3;
    }
    t
}

fn assert_close(got: f32, want: f64, tol: f64, what: &str) {
    assert!(
        (got as f64 - want).abs() <= tol,
        "{what}: got {got}, want {want} (tol {tol:e})"
    );
}

// ---- mul_mat ---------------------------------------------------------------

#[derive(Clone, Debug)]
struct MulMatCase {
    ty: GgmlType,
    b_ty: GgmlType,
    k_blocks: usize,
    k_extra: usize,
    m: usize,
    n: usize,
    a2: usize,
    r2: usize,
    a3: usize,
    r3: usize,
    a_layout: Layout,
    b_layout: Layout,
    seed: u64,
}

fn mul_mat_case() -> impl Strategy<Value = MulMatCase> {
    let types = weight_types();
    (
        (0..types.len(), 0..4usize, 1..4usize, 1..7usize, 1..8usize),
        (1..3usize, 1..4usize, 1..3usize, 1..3usize),
        (
            0..3usize,
            0..3usize,
            any::<u64>(),
            prop::sample::select(vec![0usize, 0, 3]),
        ),
    )
        .prop_map(
            move |((t, bt, k_blocks, m, n), (a2, r2, a3, r3), (al, bl, seed, k_extra))| {
                MulMatCase {
                    ty: types[t],
                    b_ty: [GgmlType::F32, GgmlType::F32, GgmlType::F16, GgmlType::BF16][bt],
                    k_blocks,
                    k_extra,
                    m,
                    n,
                    a2,
                    r2,
                    a3,
                    r3,
                    a_layout: [Layout::Plain, Layout::Permuted, Layout::Padded][al],
                    b_layout: [Layout::Plain, Layout::Permuted, Layout::Transposed][bl],
                    seed,
                }
            },
        )
}

/// Block size shared by a weight type and its activation type (8 for the
/// float types: the F32/F16 register-tiled kernel steps by 8).
fn k_unit(ty: GgmlType) -> usize {
    let vdt = cpu_traits(ty).unwrap().vec_dot_type;
    ty.blck_size().max(vdt.blck_size()).max(8)
}

/// Row length of a case: whole blocks, plus a ragged tail for float types
/// (which then take the `vec_dot` path).
fn row_len(ty: GgmlType, k_blocks: usize, k_extra: usize) -> usize {
    k_blocks * k_unit(ty) + if ty.blck_size() == 1 { k_extra } else { 0 }
}

fn check_mul_mat(c: &MulMatCase, be: &dyn Backend) {
    let k = row_len(c.ty, c.k_blocks, c.k_extra);
    let mut g = Graph::new();
    let (a, a_base, a_bytes) = make_src(&mut g, c.ty, [k, c.m, c.a2, c.a3], c.a_layout, c.seed);
    let (b, b_base, b_bytes) = make_src(
        &mut g,
        c.b_ty,
        [k, c.n, c.a2 * c.r2, c.a3 * c.r3],
        c.b_layout,
        c.seed ^ 0xB,
    );
    let out = g.mul_mat(a.id, b.id);
    g.set_name(out, "out");
    g.build_forward_expand(out);
    alloc(&mut g, be);
    g.write_bytes(a_base, &a_bytes).unwrap();
    g.write_bytes(b_base, &b_bytes).unwrap();
    run(&g, be).unwrap();
    let got = g.read_f32(out).unwrap();
    let vdt = cpu_traits(c.ty).unwrap().vec_dot_type;
    let dne = [c.m, c.n, c.a2 * c.r2, c.a3 * c.r3];
    for i3 in 0..dne[3] {
        for i2 in 0..dne[2] {
            for i1 in 0..dne[1] {
                let act = round_trip(vdt, &b.row(i1, i2, i3));
                for i0 in 0..dne[0] {
                    let w = a.row(i0, i2 / c.r2, i3 / c.r3);
                    let want: f64 = w.iter().zip(&act).map(|(x, y)| *x as f64 * *y as f64).sum();
                    let abs: f64 = w
                        .iter()
                        .zip(&act)
                        .map(|(x, y)| (*x as f64 * *y as f64).abs())
                        .sum();
                    let max_w = w.iter().fold(0f64, |m, x| m.max(x.abs() as f64));
                    let sum_act: f64 = act.iter().map(|y| y.abs() as f64).sum();
                    assert_close(
                        got[flat(dne, [i0, i1, i2, i3])],
                        want,
                        tol(k, abs, vdt, max_w, sum_act),
                        &format!("{c:?} at {:?}", [i0, i1, i2, i3]),
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mul_mat_matches_reference(c in mul_mat_case()) {
        check_mul_mat(&c, &CpuBackend::new(2));
    }
}

#[test]
fn mul_mat_every_type_every_layout() {
    let cpu = CpuBackend::new(3);
    for (s, ty) in weight_types().into_iter().enumerate() {
        for (al, a_layout) in [Layout::Plain, Layout::Permuted, Layout::Padded]
            .into_iter()
            .enumerate()
        {
            for (bl, b_layout) in [Layout::Plain, Layout::Permuted, Layout::Transposed]
                .into_iter()
                .enumerate()
            {
                let c = MulMatCase {
                    ty,
                    b_ty: GgmlType::F32,
                    k_blocks: 2,
                    k_extra: 0,
                    m: 5,
                    n: 6,
                    a2: 2,
                    r2: 2,
                    a3: 1,
                    r3: 2,
                    a_layout,
                    b_layout,
                    seed: (s * 9 + al * 3 + bl) as u64,
                };
                check_mul_mat(&c, &cpu);
            }
        }
    }
}

/// GQA-shaped attention product: k as a strided [d, n_kv, n_head_kv] view of
/// a cache, q permuted, heads mapped by division.
#[test]
fn mul_mat_attention_views() {
    let cpu = CpuBackend::new(2);
    for ty in [GgmlType::F32, GgmlType::F16] {
        let (d, n_kv, n_head_kv, n_head, n_tok, ctx) = (64usize, 7, 2, 6, 3, 16);
        let mut g = Graph::new();
        // cache [d * n_head_kv, ctx]: row = one position, heads side by side
        let cache = g.new_tensor_2d(ty, (d * n_head_kv) as i64, ctx as i64);
        let es = ty.type_size();
        let k = g.view_3d(
            cache,
            d as i64,
            n_kv as i64,
            n_head_kv as i64,
            d * n_head_kv * es,
            d * es,
            0,
        );
        let q0 = g.new_tensor_3d(GgmlType::F32, d as i64, n_head as i64, n_tok as i64);
        let q = g.permute(q0, [0, 2, 1, 3]); // [d, n_tok, n_head]
        let kq = g.mul_mat(k, q);
        g.build_forward_expand(kq);
        alloc(&mut g, &cpu);
        let (cb, cdeq) = quantize(ty, &values(1, d * n_head_kv * ctx), d * n_head_kv);
        g.write_bytes(cache, &cb).unwrap();
        let qv = values(2, d * n_head * n_tok);
        g.write_f32(q0, &qv).unwrap();
        run(&g, &cpu).unwrap();
        let got = g.read_f32(kq).unwrap();
        assert_eq!(
            g.tensor(kq).ne,
            [n_kv as i64, n_tok as i64, n_head as i64, 1]
        );
        for h in 0..n_head {
            let hk = h / (n_head / n_head_kv);
            for t in 0..n_tok {
                let act = round_trip(ty, &qv[(t * n_head + h) * d..(t * n_head + h + 1) * d]);
                for p in 0..n_kv {
                    let w = &cdeq[p * d * n_head_kv + hk * d..][..d];
                    let want: f64 = w.iter().zip(&act).map(|(x, y)| *x as f64 * *y as f64).sum();
                    let abs: f64 = w
                        .iter()
                        .zip(&act)
                        .map(|(x, y)| (*x as f64 * *y as f64).abs())
                        .sum();
                    assert_close(
                        got[(h * n_tok + t) * n_kv + p],
                        want,
                        tol(d, abs, ty, 0.0, 0.0),
                        &format!("{ty} head {h} tok {t} pos {p}"),
                    );
                }
            }
        }
    }
}

/// The attention's `kq·V` over a V cache stored one row per cell, as a
/// transposed view `[n_kv, d, n_head_kv]` (no copy): every float type,
/// against the f64 product, the same bits on 1 and 3 threads, and a
/// probability column's zeros (masked cells) wherever they sit change
/// nothing (the kernel sums each output over the cells in order).
#[test]
fn mul_mat_transposed_v_rows() {
    let (d, n_kv, n_head_kv, n_head, n_tok, ctx) = (40usize, 13, 2, 4, 5, 24);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        let es = ty.type_size();
        let (cb, cdeq) = quantize(ty, &values(3, d * n_head_kv * ctx), d * n_head_kv);
        // probabilities [n_kv, n_tok, n_head], every third cell masked
        let mut pv = values(4, n_kv * n_tok * n_head);
        for (i, p) in pv.iter_mut().enumerate() {
            *p = if (i % n_kv) % 3 == 1 { 0.0 } else { p.abs() };
        }
        let product = |threads: usize, pv: &[f32], cells: &[usize]| -> Vec<f32> {
            let cpu = CpuBackend::new(threads);
            let mut g = Graph::new();
            let cache = g.new_tensor_2d(ty, (d * n_head_kv) as i64, ctx as i64);
            let rows = g.view_3d(
                cache,
                d as i64,
                ctx as i64,
                n_head_kv as i64,
                d * n_head_kv * es,
                d * es,
                0,
            );
            let v = g.transpose(rows); // [ctx, d, n_head_kv]
            let p = g.new_tensor_3d(GgmlType::F32, ctx as i64, n_tok as i64, n_head as i64);
            let out = g.mul_mat(v, p);
            g.build_forward_expand(out);
            alloc(&mut g, &cpu);
            // cell `cells[i]` holds cache row i; the other cells hold
            // another sequence's values, masked
            let row = d * n_head_kv * es;
            let mut bytes = vec![0u8; ctx * row];
            for (c, chunk) in bytes.chunks_exact_mut(row).enumerate() {
                chunk.copy_from_slice(&cb[(c % 7) * row..(c % 7 + 1) * row]);
            }
            let mut probs = vec![0f32; ctx * n_tok * n_head];
            for (i, &c) in cells.iter().enumerate() {
                bytes[c * row..(c + 1) * row].copy_from_slice(&cb[i * row..(i + 1) * row]);
                for col in 0..n_tok * n_head {
                    probs[col * ctx + c] = pv[col * n_kv + i];
                }
            }
            g.write_bytes(cache, &bytes).unwrap();
            g.write_f32(p, &probs).unwrap();
            run(&g, &cpu).unwrap();
            assert_eq!(g.tensor(out).ne, [d as i64, n_tok as i64, n_head as i64, 1]);
            g.read_f32(out).unwrap()
        };
        let first: Vec<usize> = (0..n_kv).collect();
        let got = product(1, &pv, &first);
        for h in 0..n_head {
            let hk = h / (n_head / n_head_kv);
            for t in 0..n_tok {
                let col = h * n_tok + t;
                let act = round_trip(ty, &pv[col * n_kv..(col + 1) * n_kv]);
                for i in 0..d {
                    let terms = (0..n_kv)
                        .map(|c| cdeq[c * d * n_head_kv + hk * d + i] as f64 * act[c] as f64);
                    let want: f64 = terms.clone().sum();
                    let abs: f64 = terms.map(f64::abs).sum();
                    assert_close(
                        got[col * d + i],
                        want,
                        tol(n_kv, abs, ty, 0.0, 0.0),
                        &format!("{ty} head {h} tok {t} channel {i}"),
                    );
                }
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&product(3, &pv, &first)),
            bits(&got),
            "{ty}: 3 threads"
        );
        // the same cells spread out among other (masked) cells
        let spread: Vec<usize> = (0..n_kv).map(|i| 2 + i + i / 2).collect();
        assert!(spread[n_kv - 1] < ctx);
        assert_eq!(
            bits(&product(2, &pv, &spread)),
            bits(&got),
            "{ty}: cells moved"
        );
    }
}

// ---- mul_mat_id --------------------------------------------------------------

#[derive(Clone, Debug)]
struct MulMatIdCase {
    ty: GgmlType,
    k_blocks: usize,
    m: usize,
    n_expert: usize,
    n_used: usize,
    n_tokens: usize,
    b1_is_used: bool,
    ids: Vec<i32>,
    seed: u64,
}

fn mul_mat_id_case() -> impl Strategy<Value = MulMatIdCase> {
    let types = weight_types();
    (
        (
            0..types.len(),
            1..3usize,
            1..6usize,
            1..6usize,
            1..4usize,
            1..6usize,
        ),
        (any::<bool>(), any::<u64>()),
    )
        .prop_flat_map(move |((t, kb, m, ne, nu, nt), (b1, seed))| {
            let ty = types[t];
            proptest::collection::vec(0..ne as i32, nu * nt).prop_map(move |ids| MulMatIdCase {
                ty,
                k_blocks: kb,
                m,
                n_expert: ne,
                n_used: nu,
                n_tokens: nt,
                b1_is_used: b1,
                ids,
                seed,
            })
        })
}

/// Build the mul_mat_id graph; ids live in a wider I32 tensor
/// `[n_used + 2, n_tokens]` (as an argsort result) and are a strided view.
fn mul_mat_id_graph(c: &MulMatIdCase, be: &dyn Backend) -> (Graph, TensorId, TensorId, Src, Src) {
    let k = c.k_blocks * k_unit(c.ty);
    let n_b1 = if c.b1_is_used { c.n_used } else { 1 };
    let mut g = Graph::new();
    let (a, a_base, a_bytes) =
        make_src(&mut g, c.ty, [k, c.m, c.n_expert, 1], Layout::Plain, c.seed);
    let (b, b_base, b_bytes) = make_src(
        &mut g,
        GgmlType::F32,
        [k, n_b1, c.n_tokens, 1],
        Layout::Plain,
        c.seed ^ 7,
    );
    let wide = g.new_tensor_2d(GgmlType::I32, c.n_used as i64 + 2, c.n_tokens as i64);
    g.set_name(wide, "ids_wide");
    let nb1 = g.tensor(wide).nb[1];
    let ids = g.view_2d(wide, c.n_used as i64, c.n_tokens as i64, nb1, 4);
    g.set_name(ids, "ids");
    let out = g.mul_mat_id(a.id, b.id, ids);
    g.build_forward_expand(out);
    alloc(&mut g, be);
    g.write_bytes(a_base, &a_bytes).unwrap();
    g.write_bytes(b_base, &b_bytes).unwrap();
    let mut w = vec![-7i32; (c.n_used + 2) * c.n_tokens];
    for t in 0..c.n_tokens {
        for e in 0..c.n_used {
            w[t * (c.n_used + 2) + 1 + e] = c.ids[t * c.n_used + e];
        }
    }
    g.write_i32(wide, &w).unwrap();
    (g, out, wide, a, b)
}

fn check_mul_mat_id(c: &MulMatIdCase, be: &dyn Backend) {
    let (g, out, _, a, b) = mul_mat_id_graph(c, be);
    run(&g, be).unwrap();
    let got = g.read_f32(out).unwrap();
    let k = a.ne[0];
    let vdt = cpu_traits(c.ty).unwrap().vec_dot_type;
    let n_b1 = b.ne[1];
    for t in 0..c.n_tokens {
        for e in 0..c.n_used {
            let x = c.ids[t * c.n_used + e] as usize;
            let act = round_trip(vdt, &b.row(e % n_b1, t, 0));
            for r in 0..c.m {
                let w = a.row(r, x, 0);
                let want: f64 = w.iter().zip(&act).map(|(p, q)| *p as f64 * *q as f64).sum();
                let abs: f64 = w
                    .iter()
                    .zip(&act)
                    .map(|(p, q)| (*p as f64 * *q as f64).abs())
                    .sum();
                let max_w = w.iter().fold(0f64, |m, v| m.max(v.abs() as f64));
                let sum_act: f64 = act.iter().map(|y| y.abs() as f64).sum();
                assert_close(
                    got[(t * c.n_used + e) * c.m + r],
                    want,
                    tol(k, abs, vdt, max_w, sum_act),
                    &format!("{c:?} row {r} slot {e} token {t}"),
                );
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mul_mat_id_matches_reference(c in mul_mat_id_case()) {
        check_mul_mat_id(&c, &CpuBackend::new(3));
    }

    #[test]
    fn mul_mat_id_rejects_bad_ids(
        c in mul_mat_id_case(),
        pos in any::<prop::sample::Index>(),
        bad in 0..4usize,
    ) {
        let mut c = c;
        // -1 is not bad: it skips the slot (see mul_mat_id_skipped_slots_*)
        let bad_id = [c.n_expert as i32, -2, i32::MAX, i32::MIN][bad];
        let p = pos.index(c.ids.len());
        c.ids[p] = bad_id;
        for be in [&CpuBackend::new(1) as &dyn Backend, &CpuBackend::new(3)] {
            let (g, _, _, _, _) = mul_mat_id_graph(&c, be);
            let nodes = g.nodes().to_vec();
            match be.compute(&g, &nodes) {
                Err(BackendError::InvalidInput(msg)) => {
                    prop_assert!(msg.contains(&format!("expert id {bad_id} ")), "{}", msg);
                    prop_assert!(msg.contains("'ids'"), "{}", msg);
                }
                other => prop_assert!(false, "expected InvalidInput, got {:?}", other),
            }
        }
    }
}

/// The output of a mul_mat_id case with `ids` in place of the case's.
fn mul_mat_id_with_ids(c: &MulMatIdCase, ids: &[i32], be: &dyn Backend) -> Vec<f32> {
    let c = MulMatIdCase {
        ids: ids.to_vec(),
        ..c.clone()
    };
    let (g, out, _, _, _) = mul_mat_id_graph(&c, be);
    run(&g, be).unwrap();
    g.read_f32(out).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Hybrid placement: a layer's experts split between two mul_mat_ids
    /// (id -1 = "not mine") whose outputs are added give the unsplit
    /// result, for every type; skipped rows are exact zeros.
    #[test]
    fn mul_mat_id_skipped_slots_split_a_layer_exactly(
        c in mul_mat_id_case(),
        mine in proptest::collection::vec(any::<bool>(), 8),
    ) {
        let be = CpuBackend::new(2);
        let whole = mul_mat_id_with_ids(&c, &c.ids, &be);
        let part = |keep: bool| -> Vec<i32> {
            c.ids
                .iter()
                .map(|&x| if mine[x as usize % mine.len()] == keep { x } else { -1 })
                .collect()
        };
        let (ia, ib) = (part(true), part(false));
        let a = mul_mat_id_with_ids(&c, &ia, &be);
        let b = mul_mat_id_with_ids(&c, &ib, &be);
        for (slot, (&x, &y)) in ia.iter().zip(&ib).enumerate() {
            for r in 0..c.m {
                let i = slot * c.m + r;
                if x == -1 {
                    prop_assert_eq!(a[i].to_bits(), 0, "skipped row not zero");
                }
                if y == -1 {
                    prop_assert_eq!(b[i].to_bits(), 0, "skipped row not zero");
                }
                // one side computes the row, the other adds an exact zero
                prop_assert_eq!(a[i] + b[i], whole[i], "{:?} slot {} row {}", c.ty, slot, r);
            }
        }
    }
}

#[test]
fn mul_mat_id_every_type() {
    let cpu = CpuBackend::new(2);
    for (s, ty) in weight_types().into_iter().enumerate() {
        for b1 in [false, true] {
            let c = MulMatIdCase {
                ty,
                k_blocks: 2,
                m: 9,
                n_expert: 5,
                n_used: 3,
                n_tokens: 4,
                b1_is_used: b1,
                // repeats within a token, any order, some experts unused
                ids: vec![4, 4, 0, 2, 0, 4, 1, 1, 1, 0, 2, 4],
                seed: s as u64,
            };
            check_mul_mat_id(&c, &cpu);
        }
    }
}

// ---- bits: thread counts and the sim device ----------------------------------

/// Output bits of a mul_mat and a mul_mat_id big enough to be split.
fn product_bits(ty: GgmlType, be: &dyn Backend) -> (Vec<u32>, Vec<u32>) {
    let c = MulMatCase {
        ty,
        b_ty: GgmlType::F32,
        k_blocks: (256 / k_unit(ty)).max(1),
        k_extra: 0,
        m: 67,
        n: 21,
        a2: 2,
        r2: 2,
        a3: 1,
        r3: 1,
        a_layout: Layout::Plain,
        b_layout: Layout::Plain,
        seed: 5,
    };
    let k = c.k_blocks * k_unit(ty);
    let mut g = Graph::new();
    let (a, a_base, a_bytes) = make_src(&mut g, ty, [k, c.m, c.a2, 1], Layout::Plain, 5);
    let (b, b_base, b_bytes) = make_src(&mut g, GgmlType::F32, [k, c.n, 4, 1], Layout::Permuted, 6);
    let out = g.mul_mat(a.id, b.id);
    g.build_forward_expand(out);
    alloc(&mut g, be);
    g.write_bytes(a_base, &a_bytes).unwrap();
    g.write_bytes(b_base, &b_bytes).unwrap();
    run(&g, be).unwrap();
    let mm: Vec<u32> = g
        .read_f32(out)
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();

    let n_tokens = 19;
    let ids: Vec<i32> = (0..4 * n_tokens)
        .map(|i| ((i * 7 + i / 3) % 6) as i32)
        .collect();
    let cid = MulMatIdCase {
        ty,
        k_blocks: 2,
        m: 70,
        n_expert: 6,
        n_used: 4,
        n_tokens,
        b1_is_used: false,
        ids,
        seed: 9,
    };
    let (g, out, _, _, _) = mul_mat_id_graph(&cid, be);
    run(&g, be).unwrap();
    let mmid: Vec<u32> = g
        .read_f32(out)
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect();
    (mm, mmid)
}

#[test]
fn identical_bits_across_threads_and_sim() {
    let one = CpuBackend::new(1);
    let three = CpuBackend::new(3);
    let sim = SimBackend::new(0, 3);
    for ty in weight_types() {
        let r1 = product_bits(ty, &one);
        assert_eq!(r1, product_bits(ty, &three), "{ty}: 1 vs 3 threads");
        assert_eq!(r1, product_bits(ty, &sim), "{ty}: CPU vs SIM0");
    }
}

// ---- get_rows ----------------------------------------------------------------

#[test]
fn get_rows_every_type() {
    let cpu = CpuBackend::new(2);
    let mut types = weight_types();
    types.push(GgmlType::I32);
    for (s, ty) in types.into_iter().enumerate() {
        let n = 2 * ty.blck_size();
        let (rows, ne2, ne3) = (5usize, 2usize, 3usize);
        let mut g = Graph::new();
        let a = g.new_tensor(ty, &[n as i64, rows as i64, ne2 as i64, ne3 as i64]);
        // ids [n_ids, ne2, ne3']: a's i2 = ids' i1, a's i3 = ids' i2
        let n_ids = 4usize;
        let ids = g.new_tensor(GgmlType::I32, &[n_ids as i64, ne2 as i64, 2]);
        g.set_name(ids, "ids");
        let out = g.get_rows(a, ids);
        g.build_forward_expand(out);
        alloc(&mut g, &cpu);
        let total = n * rows * ne2 * ne3;
        let (bytes, deq) = if ty == GgmlType::I32 {
            let v: Vec<i32> = (0..total as i32).map(|i| i * 3 - 50).collect();
            (
                bytemuck::cast_slice(&v).to_vec(),
                v.iter().map(|&x| x as f32).collect(),
            )
        } else {
            quantize(ty, &values(s as u64, total), n)
        };
        g.write_bytes(a, &bytes).unwrap();
        let idv: Vec<i32> = (0..n_ids * ne2 * 2)
            .map(|i| ((i * 3 + 1) % rows) as i32)
            .collect();
        g.write_i32(ids, &idv).unwrap();
        run(&g, &cpu).unwrap();
        assert_eq!(
            g.tensor(out).ty,
            if ty == GgmlType::I32 {
                GgmlType::I32
            } else {
                GgmlType::F32
            }
        );
        let got = g.read_f32(out).unwrap();
        for i12 in 0..2 {
            for i11 in 0..ne2 {
                for i10 in 0..n_ids {
                    let r = idv[(i12 * ne2 + i11) * n_ids + i10] as usize;
                    for i0 in 0..n {
                        let want = deq[flat([n, rows, ne2, ne3], [i0, r, i11, i12])];
                        let g0 = got[flat([n, n_ids, ne2, 2], [i0, i10, i11, i12])];
                        assert_eq!(
                            g0.to_bits(),
                            want.to_bits(),
                            "{ty} [{i0},{i10},{i11},{i12}]"
                        );
                    }
                }
            }
        }
        // every out-of-range id is an error, not a read
        for bad in [rows as i32, -1, i32::MAX, i32::MIN] {
            let mut v = idv.clone();
            v[5] = bad;
            g.write_i32(ids, &v).unwrap();
            let nodes = g.nodes().to_vec();
            match cpu.compute(&g, &nodes) {
                Err(BackendError::InvalidInput(msg)) => {
                    assert!(msg.contains(&format!("row id {bad} ")), "{msg}")
                }
                other => panic!("{ty}: expected InvalidInput, got {other:?}"),
            }
        }
    }
}

#[test]
fn get_rows_transposed_float_source() {
    let cpu = CpuBackend::new(2);
    let mut g = Graph::new();
    let base = g.new_tensor_2d(GgmlType::F16, 6, 8); // [6, 8]
    let a = g.transpose(base); // [8, 6], nb0 = 12 bytes
    let ids = g.new_tensor_1d(GgmlType::I32, 3);
    let out = g.get_rows(a, ids);
    g.build_forward_expand(out);
    alloc(&mut g, &cpu);
    let (bytes, deq) = quantize(GgmlType::F16, &values(3, 48), 6);
    g.write_bytes(base, &bytes).unwrap();
    g.write_i32(ids, &[5, 0, 5]).unwrap();
    run(&g, &cpu).unwrap();
    let got = g.read_f32(out).unwrap();
    for (j, r) in [5usize, 0, 5].into_iter().enumerate() {
        for i0 in 0..8 {
            assert_eq!(got[j * 8 + i0], deq[i0 * 6 + r]);
        }
    }
}

// ---- add_id -------------------------------------------------------------------

proptest! {
    #[test]
    fn add_id_matches_reference(
        n in 1..40usize,
        ne1 in 1..5usize,
        ne2 in 1..5usize,
        n_expert in 1..6usize,
        seed in any::<u64>(),
        bad in proptest::option::of((0..4usize, any::<prop::sample::Index>())),
    ) {
        let cpu = CpuBackend::new(3);
        let mut g = Graph::new();
        let a = g.new_tensor_3d(GgmlType::F32, n as i64, ne1 as i64, ne2 as i64);
        let b = g.new_tensor_2d(GgmlType::F32, n as i64, n_expert as i64);
        let ids = g.new_tensor_2d(GgmlType::I32, ne1 as i64, ne2 as i64);
        g.set_name(ids, "ids");
        let out = g.add_id(a, b, ids);
        g.build_forward_expand(out);
        alloc(&mut g, &cpu);
        let av = values(seed, n * ne1 * ne2);
        let bv = values(seed ^ 1, n * n_expert);
        let mut idv: Vec<i32> = values(seed ^ 2, ne1 * ne2)
            .iter()
            .map(|x| ((x + 1.0) * 0.5 * n_expert as f32) as i32 % n_expert as i32)
            .collect();
        g.write_f32(a, &av).unwrap();
        g.write_f32(b, &bv).unwrap();
        if let Some((kind, pos)) = bad {
            let v = [n_expert as i32, -1, i32::MAX, i32::MIN][kind];
            let p = pos.index(idv.len());
            idv[p] = v;
            g.write_i32(ids, &idv).unwrap();
            let nodes = g.nodes().to_vec();
            match cpu.compute(&g, &nodes) {
                Err(BackendError::InvalidInput(msg)) => {
                    prop_assert!(msg.contains(&format!("id {v} ")), "{}", msg)
                }
                other => prop_assert!(false, "expected InvalidInput, got {:?}", other),
            }
            return Ok(());
        }
        g.write_i32(ids, &idv).unwrap();
        run(&g, &cpu).unwrap();
        let got = g.read_f32(out).unwrap();
        for i2 in 0..ne2 {
            for i1 in 0..ne1 {
                let e = idv[i2 * ne1 + i1] as usize;
                for i0 in 0..n {
                    let want = av[(i2 * ne1 + i1) * n + i0] + bv[e * n + i0];
                    prop_assert_eq!(got[(i2 * ne1 + i1) * n + i0].to_bits(), want.to_bits());
                }
            }
        }
    }
}

// ---- F32/F16 tiled kernel: llamafile tinyBLAS summation order -------------------

/// tinyBLAS's per-output order: 8 f32 lanes of fused multiply-adds over `k`,
/// then (hi + lo) halves, (0 + 2, 1 + 3), and the last pair.
fn tinyblas_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    for (ca, cb) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] = ca[l].mul_add(cb[l], acc[l]);
        }
    }
    let h: Vec<f32> = (0..4).map(|i| acc[4 + i] + acc[i]).collect();
    (h[0] + h[2]) + (h[1] + h[3])
}

#[test]
fn f32_f16_products_sum_in_tinyblas_order() {
    if !ggml_core::quants::simd_available() {
        return; // the scalar fallback uses vec_dot's order
    }
    for threads in [1, 3] {
        let cpu = CpuBackend::new(threads);
        for ty in [GgmlType::F32, GgmlType::F16] {
            for (k, m, n) in [(48usize, 7usize, 5usize), (256, 9, 1), (64, 1, 13)] {
                let mut g = Graph::new();
                let (a, a_base, a_bytes) = make_src(&mut g, ty, [k, m, 1, 1], Layout::Plain, 11);
                let (b, b_base, b_bytes) =
                    make_src(&mut g, GgmlType::F32, [k, n, 1, 1], Layout::Plain, 12);
                let out = g.mul_mat(a.id, b.id);
                g.build_forward_expand(out);
                alloc(&mut g, &cpu);
                g.write_bytes(a_base, &a_bytes).unwrap();
                g.write_bytes(b_base, &b_bytes).unwrap();
                run(&g, &cpu).unwrap();
                let got = g.read_f32(out).unwrap();
                for c in 0..n {
                    let act = round_trip(ty, &b.row(c, 0, 0));
                    for r in 0..m {
                        let want = tinyblas_dot(&a.row(r, 0, 0), &act);
                        assert_eq!(
                            got[c * m + r].to_bits(),
                            want.to_bits(),
                            "{ty} k {k} row {r} col {c}"
                        );
                    }
                }
            }
        }
    }
}

// ---- what the CPU does not claim ------------------------------------------------

#[test]
fn unsupported_layouts_are_refused_not_computed() {
    let cpu = CpuBackend::new(2);
    let mut g = Graph::new();
    // quantized weights whose rows are not dense (a transposed view): ggml
    // refuses too (only float ones are multiplied transposed)
    let w = g.new_tensor_2d(GgmlType::Q8_0, 64, 32);
    let wt = g.transpose(w); // [32, 64], nb0 = a row of two blocks
    let x = g.new_tensor_2d(GgmlType::F32, 32, 3);
    let y = g.mul_mat(wt, x);
    // float weights strided along both dims 0 and 1
    let w3 = g.new_tensor_3d(GgmlType::F32, 4, 8, 16);
    let w3p = g.permute(w3, [2, 0, 1, 3]); // [8, 16, 4]: nb0, nb1 both > 4
    let x3 = g.new_tensor_3d(GgmlType::F32, 8, 2, 4);
    let y3 = g.mul_mat(w3p, x3);
    // integer weights have no CPU traits
    let wi = g.new_tensor_2d(GgmlType::I16, 8, 4);
    let xi = g.new_tensor_2d(GgmlType::F32, 8, 2);
    let yi = g.mul_mat(wi, xi);
    g.build_forward_expand(y);
    g.build_forward_expand(y3);
    g.build_forward_expand(yi);
    alloc(&mut g, &cpu);
    for node in [y, y3, yi] {
        assert!(!cpu.supports_op(&g, node));
        match cpu.compute(&g, &[node]) {
            Err(BackendError::Unsupported(_)) => {}
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}
