//! flash_attn_ext against a plain f64 attention: GQA, masks (F16/F32,
//! broadcast, taller than the queries), ALiBi, softcap, sinks (gpt-oss),
//! F16 or F32 k/v; and the F16 accumulation of an F16 v as ggml does it.

mod common;

use common::*;
use ggml_core::{GgmlType, Graph};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(48)))]

    #[test]
    fn flash_attn_ext(d in 1i64..=8, dv in 1i64..=8, n_q in 1i64..=4, n_kv in 1i64..=9, n_head_kv in 1i64..=2, gqa in 1i64..=2,
                      kv_ty in prop::sample::select(vec![GgmlType::F16, GgmlType::F32]), mask_kind in 0..3u8,
                      alibi in any::<bool>(), softcap in prop::sample::select(vec![0.0f32, 0.0, 20.0]), qperm in any::<bool>(),
                      sinks in any::<bool>(), seed in any::<u64>()) {
        let n_head = n_head_kv * gqa;
        let scale = 1.0 / (d as f32).sqrt();
        let max_bias = if alibi { 8.0f32 } else { 0.0 };
        let mut g = Graph::new();
        let qne = [d, n_q, n_head, 1];
        let (ql, q) = source(&mut g, GgmlType::F32, qne, if qperm { Layout::Permuted([0, 2, 1, 3]) } else { Layout::Contig });
        let k = g.new_tensor(kv_ty, &[d, n_kv, n_head_kv]);
        let v = g.new_tensor(kv_ty, &[dv, n_kv, n_head_kv]);
        let mne = [n_kv, n_q + 1, 1, 1];
        let mask = match mask_kind { 0 => None, 1 => Some(g.new_tensor(GgmlType::F16, &mne)), _ => Some(g.new_tensor(GgmlType::F32, &mne)) };
        let out = g.flash_attn_ext(q, k, v, mask, scale, max_bias, softcap);
        // sinks need a mask (as ggml_flash_attn_ext_add_sinks)
        let sk = (sinks && mask.is_some()).then(|| {
            let s = g.new_tensor(GgmlType::F32, &[n_head]);
            g.flash_attn_ext_add_sinks(out, s);
            s
        });
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        fill_rand(&g, ql, &mut rng, -2.0, 2.0);
        fill_rand(&g, k, &mut rng, -2.0, 2.0);
        fill_rand(&g, v, &mut rng, -2.0, 2.0);
        if let Some(m) = mask {
            // causal-ish: -inf above the diagonal, never a whole row
            let mv: Vec<f32> = (0..mne[0] * mne[1]).map(|i| {
                let (c, r) = (i % n_kv, i / n_kv);
                if c > r + 1 { f32::NEG_INFINITY } else { rng.f32(-1.0, 0.0) }
            }).collect();
            fill(&g, m, &mv);
        }
        if let Some(s) = sk {
            fill_rand(&g, s, &mut rng, -3.0, 3.0);
        }
        compute(&g, cpu());
        let skv = sk.map(|s| g.read_f32(s).unwrap());
        let (qv, kv, vv) = (g.read_f32(q).unwrap(), g.read_f32(k).unwrap(), g.read_f32(v).unwrap());
        let mv = mask.map(|m| g.read_f32(m).unwrap());
        let got = g.read_f32(out).unwrap();
        let kne = [d, n_kv, n_head_kv, 1];
        let vne = [dv, n_kv, n_head_kv, 1];
        let one = [dv, n_head, n_q, 1];
        let n_head_log2 = 1u32 << (n_head as f64).log2().floor() as u32;
        let mut want = vec![0f64; got.len()];
        for h in 0..n_head { for iq in 0..n_q {
            let hk = h / gqa;
            let slope = if max_bias > 0.0 {
                let m0 = 2f64.powf(-(max_bias as f64) / n_head_log2 as f64);
                let m1 = 2f64.powf(-(max_bias as f64 / 2.0) / n_head_log2 as f64);
                let hh = h as u32;
                if hh < n_head_log2 { m0.powi(hh as i32 + 1) } else { m1.powi(2 * (hh - n_head_log2) as i32 + 1) }
            } else { 1.0 };
            let mut logits = Vec::new();
            for ic in 0..n_kv {
                let mut s = 0f64;
                for i in 0..d {
                    let mut x = qv[idx(&qne, i, iq, h, 0)];
                    if kv_ty == GgmlType::F16 { x = round_to(GgmlType::F16, x); }
                    s += x as f64 * kv[idx(&kne, i, ic, hk, 0)] as f64;
                }
                s *= scale as f64;
                if softcap != 0.0 { s = softcap as f64 * (s / softcap as f64).tanh(); }
                if let Some(mv) = &mv { s += slope * mv[idx(&mne, ic, iq, 0, 0)] as f64; }
                logits.push(s);
            }
            // a sink joins the denominator only: softmax([scores, sink]) without its share
            let sink = skv.as_ref().map(|v| v[h as usize] as f64);
            let mx = logits.iter().cloned().chain(sink).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = logits.iter().map(|s| (s - mx).exp()).sum::<f64>() + sink.map_or(0.0, |s| (s - mx).exp());
            for j in 0..dv {
                let o: f64 = (0..n_kv).map(|ic| (logits[ic as usize] - mx).exp() / z * vv[idx(&vne, j, ic, hk, 0)] as f64).sum();
                want[idx(&one, j, h, iq, 0)] = o;
            }
        }}
        // An F16 v is accumulated in F16 as ggml does (rounded at each of the
        // n_kv multiply-adds and each rescale, a relative 2^-11 of a running
        // sum that stays below S·max|v| = 2S): after the division by S that
        // is at most (2·n_kv + 1)·2^-11·2 per output. F32 v: f32 rounding only.
        let (atol, rtol) = if kv_ty == GgmlType::F16 {
            ((2 * n_kv + 1) as f64 * 2f64.powi(-10), 0.0)
        } else {
            (2e-5, 1e-4)
        };
        assert_close(&got, &want, atol, rtol, "flash_attn_ext");
    }
}

/// Two keys with equal scores and v = 2048, 1: ggml's F16 accumulator holds
/// 2048 + 1 = 2049 as 2048 (F16 spacing 2 there, ties to even), so the
/// output is 2048 / 2 = 1024; an F32 v keeps the 1 and gives 1024.5.
#[test]
fn flash_attn_ext_accumulates_f16_v_in_f16() {
    for (ty, want) in [(GgmlType::F16, 1024.0f32), (GgmlType::F32, 1024.5)] {
        let mut g = Graph::new();
        let q = g.new_tensor(GgmlType::F32, &[1, 1, 1]);
        let k = g.new_tensor(ty, &[1, 2, 1]);
        let v = g.new_tensor(ty, &[1, 2, 1]);
        let out = g.flash_attn_ext(q, k, v, None, 1.0, 0.0, 0.0);
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        fill(&g, q, &[0.0]);
        fill(&g, k, &[1.0, 1.0]);
        fill(&g, v, &[2048.0, 1.0]);
        compute(&g, cpu());
        assert_eq!(g.read_f32(out).unwrap(), vec![want], "{ty:?} v");
    }
}
