//! Shared helpers of the `ops_*` tests: graph allocation on a backend,
//! random inputs, source layouts (contiguous, permuted, padded views), and
//! tolerance checks against plain f64 references.
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use ggml_core::{
    Backend, BufferUsage, CpuBackend, GgmlType, Graph, SimBackend, TensorData, TensorId,
};

/// Proptest cases per op: `PROPTEST_CASES` or `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A shared 2-thread CPU backend.
pub fn cpu() -> &'static CpuBackend {
    static CPU: OnceLock<CpuBackend> = OnceLock::new();
    CPU.get_or_init(|| CpuBackend::new(2))
}

/// A shared 2-thread sim device.
pub fn sim() -> &'static SimBackend {
    static SIM: OnceLock<SimBackend> = OnceLock::new();
    SIM.get_or_init(|| SimBackend::new(0, 2))
}

/// Allocate every non-view tensor of `g` in one buffer of `backend`.
pub fn alloc(g: &mut Graph, backend: &dyn Backend) {
    let ids: Vec<_> = g
        .ids()
        .filter(|&t| g.tensor(t).view_src.is_none())
        .collect();
    let total: usize = ids
        .iter()
        .map(|&t| g.tensor(t).nbytes().next_multiple_of(64) + 64)
        .sum();
    let buf = backend
        .alloc_buffer(total.max(64), BufferUsage::Compute)
        .unwrap();
    let mut offset = 0;
    for t in ids {
        let n = g.tensor(t).nbytes().next_multiple_of(64) + 64;
        g.tensor_mut(t).data = Some(TensorData {
            buffer: Arc::clone(&buf),
            offset,
        });
        offset += n;
    }
}

/// Compute every node of `g` on `backend`.
pub fn compute(g: &Graph, backend: &dyn Backend) {
    let nodes = g.nodes().to_vec();
    for &n in &nodes {
        assert!(
            backend.supports_op(g, n),
            "backend does not support {:?}",
            g.tensor(n).op
        );
    }
    backend.compute(g, &nodes).unwrap();
}

/// splitmix64
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `[lo, hi)`.
    pub fn f32(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Encode f32 values as a tensor type's bytes (F32, F16, BF16, I32).
pub fn encode(ty: GgmlType, v: &[f32]) -> Vec<u8> {
    match ty {
        GgmlType::F32 => bytemuck::cast_slice(v).to_vec(),
        GgmlType::F16 => v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect(),
        GgmlType::BF16 => v
            .iter()
            .flat_map(|&x| half::bf16::from_f32(x).to_le_bytes())
            .collect(),
        GgmlType::I32 => v.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect(),
        t => panic!("encode: {t}"),
    }
}

/// Fill a contiguous leaf with values (through its buffer).
pub fn fill(g: &Graph, id: TensorId, v: &[f32]) {
    let t = g.tensor(id);
    assert_eq!(v.len() as i64, t.nelements());
    g.write_bytes(id, &encode(t.ty, v)).unwrap();
}

/// Fill a contiguous leaf with uniform random values in `[lo, hi)`.
pub fn fill_rand(g: &Graph, id: TensorId, rng: &mut Rng, lo: f32, hi: f32) {
    let n = g.tensor(id).nelements() as usize;
    let v: Vec<f32> = (0..n).map(|_| rng.f32(lo, hi)).collect();
    fill(g, id, &v);
}

/// How a source tensor is laid out in memory.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    /// Dense.
    Contig,
    /// A `permute` view of a dense leaf, the axes as `ggml_permute` takes them.
    Permuted([usize; 4]),
    /// A view with padded rows, one element into a wider leaf.
    Padded,
}

/// Layouts to draw from (identity, transpose, and two 3-d/4-d permutations).
pub fn layouts() -> Vec<Layout> {
    vec![
        Layout::Contig,
        Layout::Permuted([1, 0, 2, 3]),
        Layout::Permuted([0, 2, 1, 3]),
        Layout::Permuted([2, 0, 3, 1]),
        Layout::Padded,
    ]
}

/// A source of logical shape `ne` with `layout`: `(leaf to fill, tensor to use)`.
pub fn source(g: &mut Graph, ty: GgmlType, ne: [i64; 4], layout: Layout) -> (TensorId, TensorId) {
    match layout {
        Layout::Contig => {
            let t = g.new_tensor(ty, &ne);
            (t, t)
        }
        Layout::Permuted(axes) => {
            // leaf dim i holds logical dim axes[i]
            let mut lne = [0i64; 4];
            for i in 0..4 {
                lne[i] = ne[axes[i]];
            }
            let leaf = g.new_tensor(ty, &lne);
            let v = g.permute(leaf, axes);
            assert_eq!(g.tensor(v).ne, ne);
            (leaf, v)
        }
        Layout::Padded => {
            let leaf = g.new_tensor(ty, &[ne[0] + 2, ne[1], ne[2], ne[3]]);
            let nb = g.tensor(leaf).nb;
            let v = g.view(leaf, &ne, &nb[1..], ty.type_size());
            (leaf, v)
        }
    }
}

/// Shapes of 1 to 4 dims with small sizes (1s included).
pub fn shape(max: i64) -> impl proptest::strategy::Strategy<Value = [i64; 4]> {
    use proptest::prelude::*;
    (1..=4usize, proptest::collection::vec(1..=max, 4)).prop_map(|(nd, v)| {
        let mut ne = [1i64; 4];
        ne[..nd].copy_from_slice(&v[..nd]);
        ne
    })
}

/// Index of element `(i0, i1, i2, i3)` in dense ggml order.
pub fn idx(ne: &[i64; 4], i0: i64, i1: i64, i2: i64, i3: i64) -> usize {
    (((i3 * ne[2] + i2) * ne[1] + i1) * ne[0] + i0) as usize
}

/// Round a value as storing it in `ty` would.
pub fn round_to(ty: GgmlType, x: f32) -> f32 {
    match ty {
        GgmlType::F16 => half::f16::from_f32(x).to_f32(),
        GgmlType::BF16 => half::bf16::from_f32(x).to_f32(),
        _ => x,
    }
}

/// Assert `|got - want| <= atol + rtol * |want|` element-wise (NaN == NaN).
pub fn assert_close(got: &[f32], want: &[f64], atol: f64, rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() && g.is_nan() {
            continue;
        }
        if w.is_infinite() && g as f64 == w {
            continue;
        }
        let err = (g as f64 - w).abs();
        assert!(
            err <= atol + rtol * w.abs(),
            "{what}: element {i}: got {g}, want {w} (err {err:e})"
        );
    }
}
