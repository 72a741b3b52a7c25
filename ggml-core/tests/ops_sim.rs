//! The same graphs on the CPU backend and on the sim device (whose memory is
//! reached only through its buffers) give bit-identical results.

mod common;

use common::*;
use ggml_core::op::{GluOp, RopeMode, RopeParams, SortOrder};
use ggml_core::{Backend, BackendStream, GgmlType, Graph, TensorId};
use proptest::prelude::*;

struct Built {
    g: Graph,
    inputs: Vec<TensorId>,
    outputs: Vec<TensorId>,
}

/// A block touching every op family: norm, rope, softmax with mask and
/// sinks, GLU, sorts, reductions, set_rows into an F16 cache, copies, concat.
fn build(n_tok: i64) -> Built {
    let (d, nh) = (8i64, 2i64);
    let mut g = Graph::new();
    let x = g.new_tensor(GgmlType::F32, &[d * nh, n_tok]);
    let w = g.new_tensor(GgmlType::F32, &[d * nh]);
    let pos = g.new_tensor(GgmlType::I32, &[n_tok]);
    let logits = g.new_tensor(GgmlType::F32, &[5, n_tok, nh]);
    let mask = g.new_tensor(GgmlType::F16, &[5, n_tok + 1]);
    let sinks = g.new_tensor(GgmlType::F32, &[nh]);
    let cache = g.new_tensor(GgmlType::F16, &[d * nh, 6]);
    let rows = g.new_tensor(GgmlType::I64, &[n_tok]);
    let inputs = vec![x, w, pos, logits, mask, sinks, cache, rows];

    let n = g.rms_norm(x, 1e-6);
    let n = g.mul(n, w);
    let q = g.reshape_3d(n, d, nh, n_tok);
    let p = RopeParams {
        n_dims: d as i32,
        mode: RopeMode::Neox,
        n_ctx_orig: 4096,
        freq_base: 1e6f32.into(),
        freq_scale: 0.5f32.into(),
        ext_factor: 1.0f32.into(),
        attn_factor: 1.0f32.into(),
        beta_fast: 32.0f32.into(),
        beta_slow: 1.0f32.into(),
    };
    let r = g.rope_ext(q, pos, None, p);
    let rc = g.cont_reshape(r, &[d * nh, n_tok]);
    let sr = g.set_rows(cache, rc, rows);
    let sm = g.soft_max_ext(logits, Some(mask), 0.7, 0.0);
    g.soft_max_add_sinks(sm, sinks);
    let top = g.top_k(sm, 2);
    let srt = g.argsort(sm, SortOrder::Desc);
    let both = g.concat(n, rc, 0);
    let act = g.glu(both, GluOp::Swiglu, false);
    let ge = g.glu(both, GluOp::Geglu, true);
    let oai = g.glu(
        both,
        GluOp::SwigluOai {
            alpha: 1.702f32.into(),
            limit: 7.0f32.into(),
        },
        false,
    );
    let s = g.sum_rows(act);
    let nm = g.norm(ge, 1e-5);
    let t = g.transpose(nm);
    let bf = g.new_tensor(GgmlType::BF16, &[n_tok, d * nh]);
    let cb = g.cpy(t, bf);
    let sc = g.scale_bias(oai, 0.5, 0.25);
    let dv = g.div(sc, w);
    let am = g.argmax(dv);
    let outputs = vec![sr, top, srt, s, cb, dv, am, sm];
    for &o in &outputs {
        g.build_forward_expand(o);
    }
    Built { g, inputs, outputs }
}

fn run(backend: &dyn Backend, n_tok: i64, seed: u64) -> Vec<Vec<u32>> {
    let mut b = build(n_tok);
    alloc(&mut b.g, backend);
    let mut rng = Rng(seed);
    for &i in &b.inputs {
        let t = b.g.tensor(i).clone();
        let n = t.nelements() as usize;
        match t.ty {
            GgmlType::I32 => {
                let v: Vec<i32> = (0..n).map(|_| rng.below(100) as i32).collect();
                b.g.write_i32(i, &v).unwrap();
            }
            GgmlType::I64 => {
                // distinct rows of the 6-row cache
                let v: Vec<u8> = (0..n as i64).rev().flat_map(|k| k.to_le_bytes()).collect();
                b.g.write_bytes(i, &v).unwrap();
            }
            ty => {
                let v: Vec<f32> = (0..n).map(|_| rng.f32(-3.0, 3.0)).collect();
                b.g.write_bytes(i, &encode(ty, &v)).unwrap();
            }
        }
    }
    compute(&b.g, backend);
    b.outputs
        .iter()
        .map(|&o| {
            b.g.read_f32(o)
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(16)))]

    #[test]
    fn cpu_and_sim_agree_bit_for_bit(n_tok in 1i64..=4, seed in any::<u64>()) {
        let c = run(cpu(), n_tok, seed);
        let s = run(sim(), n_tok, seed);
        prop_assert_eq!(c, s);
    }
}

/// The sim device refuses memory that is not its own.
#[test]
fn sim_rejects_host_buffers() {
    let mut b = build(2);
    alloc(&mut b.g, cpu());
    let nodes = b.g.nodes().to_vec();
    assert!(sim().compute(&b.g, &nodes).is_err());
}
