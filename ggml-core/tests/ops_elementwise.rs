//! Element-wise ops against f64 references: binary ops with broadcasting,
//! scale/sqr/sqrt, unary activations and GLUs, over random shapes, strided
//! sources and F16/BF16 inputs.

mod common;

use common::*;
use ggml_core::op::{GluOp, UnaryOp};
use ggml_core::{GgmlType, Graph};
use proptest::prelude::*;

fn float_ty() -> impl Strategy<Value = GgmlType> {
    prop::sample::select(vec![
        GgmlType::F32,
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
    ])
}

fn layout() -> impl Strategy<Value = Layout> {
    prop::sample::select(layouts())
}

/// A broadcast shape for `b` over `a`: each dim 1 or a divisor of a's.
fn bcast(ne: [i64; 4], pick: [u8; 4]) -> [i64; 4] {
    let mut out = [1; 4];
    for i in 0..4 {
        let divs: Vec<i64> = (1..=ne[i]).filter(|d| ne[i] % d == 0).collect();
        out[i] = divs[pick[i] as usize % divs.len()];
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    /// add/sub/mul/div: one IEEE op on f32 values, so the f64 reference
    /// rounded to f32 must match exactly.
    #[test]
    fn binary_ops(ne in shape(6), pick in any::<[u8; 4]>(), ta in float_ty(), tb in float_ty(),
                  la in layout(), lb in layout(), op in 0..4u8, seed in any::<u64>()) {
        let bne = bcast(ne, pick);
        let mut g = Graph::new();
        let (a_leaf, a) = source(&mut g, ta, ne, la);
        let (b_leaf, b) = source(&mut g, tb, bne, lb);
        let out = match op { 0 => g.add(a, b), 1 => g.sub(a, b), 2 => g.mul(a, b), _ => g.div(a, b) };
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        fill_rand(&g, a_leaf, &mut rng, -4.0, 4.0);
        fill_rand(&g, b_leaf, &mut rng, 0.25, 3.0);
        compute(&g, cpu());
        let (av, bv, got) = (g.read_f32(a).unwrap(), g.read_f32(b).unwrap(), g.read_f32(out).unwrap());
        let mut want = vec![0f64; got.len()];
        for i3 in 0..ne[3] { for i2 in 0..ne[2] { for i1 in 0..ne[1] { for i0 in 0..ne[0] {
            let x = av[idx(&ne, i0, i1, i2, i3)] as f64;
            let y = bv[idx(&bne, i0 % bne[0], i1 % bne[1], i2 % bne[2], i3 % bne[3])] as f64;
            let r = match op { 0 => x + y, 1 => x - y, 2 => x * y, _ => x / y };
            want[idx(&ne, i0, i1, i2, i3)] = r as f32 as f64;
        }}}}
        assert_close(&got, &want, 0.0, 0.0, "binary");
    }

    #[test]
    fn scale_sqr_sqrt(ne in shape(7), ty in float_ty(), l in layout(), which in 0..4u8,
                      s in -3.0f32..3.0, bias in -2.0f32..2.0, seed in any::<u64>()) {
        let mut g = Graph::new();
        let (leaf, a) = source(&mut g, ty, ne, l);
        let out = match which { 0 => g.scale(a, s), 1 => g.scale_bias(a, s, bias), 2 => g.sqr(a), _ => g.sqrt(a) };
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        fill_rand(&g, leaf, &mut rng, if which == 3 { 0.0 } else { -5.0 }, 5.0);
        compute(&g, cpu());
        let (av, got) = (g.read_f32(a).unwrap(), g.read_f32(out).unwrap());
        let want: Vec<f64> = av.iter().map(|&x| { let x = x as f64; match which {
            0 => x * s as f64, 1 => x * s as f64 + bias as f64, 2 => x * x, _ => x.sqrt() } }).collect();
        // one (two for scale_bias) f32 roundings
        assert_close(&got, &want, 1e-6, 2.5e-7, "scale/sqr/sqrt");
    }

    #[test]
    fn unary_ops(ne in shape(7), ty in float_ty(), l in layout(), which in 0..6u8, seed in any::<u64>()) {
        let u = [UnaryOp::Silu, UnaryOp::Gelu, UnaryOp::Sigmoid, UnaryOp::Neg, UnaryOp::Relu, UnaryOp::Exp][which as usize];
        let mut g = Graph::new();
        let (leaf, a) = source(&mut g, ty, ne, l);
        let out = match u {
            UnaryOp::Silu => g.silu(a), UnaryOp::Gelu => g.gelu(a), UnaryOp::Sigmoid => g.sigmoid(a),
            UnaryOp::Neg => g.neg(a), UnaryOp::Relu => g.relu(a), UnaryOp::Exp => g.exp(a),
        };
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        fill_rand(&g, leaf, &mut rng, -12.0, 12.0);
        compute(&g, cpu());
        let (av, got) = (g.read_f32(a).unwrap(), g.read_f32(out).unwrap());
        let want: Vec<f64> = av.iter().map(|&x| { let x = x as f64; match u {
            UnaryOp::Silu => x / (1.0 + (-x).exp()),
            UnaryOp::Gelu => 0.5 * x * (1.0 + (0.797_884_560_802_865_4 * x * (1.0 + 0.044715 * x * x)).tanh()),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Neg => -x,
            UnaryOp::Relu => x.max(0.0),
            UnaryOp::Exp => x.exp(),
        }}).collect();
        // GELU goes through ggml's f16 table: f16 rounding of input and output
        let (atol, rtol) = match u { UnaryOp::Gelu => (2e-3, 2e-3), UnaryOp::Neg | UnaryOp::Relu => (0.0, 0.0), _ => (1e-6, 1e-6) };
        assert_close(&got, &want, atol, rtol, &format!("{u:?}"));
    }

    #[test]
    fn glu_ops(ne in shape(6), ty in float_ty(), l in layout(), which in 0..3u8, split in any::<bool>(),
               swapped in any::<bool>(), alpha in 0.5f32..2.0, limit in 1.0f32..8.0, seed in any::<u64>()) {
        let op = match which { 0 => GluOp::Swiglu, 1 => GluOp::Geglu, _ => GluOp::SwigluOai { alpha: alpha.into(), limit: limit.into() } };
        let mut g = Graph::new();
        let mut rng = Rng(seed);
        let (leaves, gate, up, out, nc);
        if split {
            let (la, a) = source(&mut g, ty, ne, l);
            let (lb, b) = source(&mut g, ty, ne, Layout::Contig);
            out = g.glu_split(a, b, op);
            leaves = vec![la, lb];
            gate = a; up = b; nc = ne[0];
        } else {
            let mut wne = ne; wne[0] *= 2;
            let (la, a) = source(&mut g, ty, wne, l);
            out = g.glu(a, op, swapped);
            leaves = vec![la];
            gate = a; up = a; nc = ne[0];
        }
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        for &lf in &leaves { fill_rand(&g, lf, &mut rng, -12.0, 12.0); }
        compute(&g, cpu());
        let (gv, uv, got) = (g.read_f32(gate).unwrap(), g.read_f32(up).unwrap(), g.read_f32(out).unwrap());
        let gne = g.tensor(gate).ne;
        let mut want = vec![0f64; got.len()];
        for i3 in 0..ne[3] { for i2 in 0..ne[2] { for i1 in 0..ne[1] { for i0 in 0..nc {
            let (x, y) = if split {
                (gv[idx(&gne, i0, i1, i2, i3)] as f64, uv[idx(&gne, i0, i1, i2, i3)] as f64)
            } else {
                let first = gv[idx(&gne, i0, i1, i2, i3)] as f64;
                let second = gv[idx(&gne, i0 + nc, i1, i2, i3)] as f64;
                if swapped { (second, first) } else { (first, second) }
            };
            let r = match op {
                GluOp::Swiglu => x / (1.0 + (-x).exp()) * y,
                GluOp::Geglu => 0.5 * x * (1.0 + (0.797_884_560_802_865_4 * x * (1.0 + 0.044715 * x * x)).tanh()) * y,
                GluOp::SwigluOai { alpha, limit } => {
                    let (a, lim) = (alpha.get() as f64, limit.get() as f64);
                    let x = x.min(lim);
                    let y = y.clamp(-lim, lim);
                    x / (1.0 + (-a * x).exp()) * (y + 1.0)
                }
            };
            want[idx(&ne, i0, i1, i2, i3)] = r;
        }}}}
        let (atol, rtol) = if matches!(op, GluOp::Geglu) { (2.5e-2, 2e-3) } else { (1e-5, 1e-5) };
        assert_close(&got, &want, atol, rtol, &format!("{op:?} split={split} swapped={swapped}"));
    }
}

/// Rows long enough that the pool splits them across threads.
#[test]
fn binary_multithreaded_rows() {
    let mut g = Graph::new();
    let a = g.new_tensor(GgmlType::F32, &[4096, 16]);
    let b = g.new_tensor(GgmlType::F32, &[4096]);
    let out = g.mul(a, b);
    let sl = g.silu(out);
    g.build_forward_expand(sl);
    alloc(&mut g, cpu());
    let mut rng = Rng(7);
    fill_rand(&g, a, &mut rng, -3.0, 3.0);
    fill_rand(&g, b, &mut rng, -3.0, 3.0);
    compute(&g, cpu());
    let (av, bv, got) = (
        g.read_f32(a).unwrap(),
        g.read_f32(b).unwrap(),
        g.read_f32(sl).unwrap(),
    );
    let want: Vec<f64> = av
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let m = (x * bv[i % 4096]) as f64;
            m / (1.0 + (-m).exp())
        })
        .collect();
    assert_close(&got, &want, 1e-6, 1e-6, "mul+silu");
}
