//! Row-wise ops against f64 references: rms_norm, norm, sum_rows, mean,
//! argmax, argsort, top_k and soft_max_ext (mask broadcast, ALiBi, sinks).

mod common;

use common::*;
use ggml_core::op::SortOrder;
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

fn rows(ne: &[i64; 4]) -> impl Iterator<Item = (i64, i64, i64)> + '_ {
    (0..ne[3])
        .flat_map(move |i3| (0..ne[2]).flat_map(move |i2| (0..ne[1]).map(move |i1| (i1, i2, i3))))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn norms(ne in shape(9), ty in float_ty(), l in layout(), rms in any::<bool>(),
             eps in prop::sample::select(vec![1e-6f32, 1e-5, 0.1]), seed in any::<u64>()) {
        let mut g = Graph::new();
        let (leaf, a) = source(&mut g, ty, ne, l);
        let out = if rms { g.rms_norm(a, eps) } else { g.norm(a, eps) };
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        fill_rand(&g, leaf, &mut Rng(seed), -3.0, 3.0);
        compute(&g, cpu());
        let (av, got) = (g.read_f32(a).unwrap(), g.read_f32(out).unwrap());
        let n = ne[0] as usize;
        let mut want = Vec::new();
        for row in av.chunks(n) {
            let x: Vec<f64> = row.iter().map(|&v| v as f64).collect();
            if rms {
                let ms = x.iter().map(|v| v * v).sum::<f64>() / n as f64;
                let s = 1.0 / (ms + eps as f64).sqrt();
                want.extend(x.iter().map(|v| v * s));
            } else {
                // ggml's definition keeps the mean as an f32 (`float mean = sum/ne00`);
                // without that, near-constant rows are ill-conditioned
                let mean = (x.iter().sum::<f64>() / n as f64) as f32 as f64;
                let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n as f64;
                let s = 1.0 / (var + eps as f64).sqrt();
                want.extend(x.iter().map(|v| (v - mean) * s));
            }
        }
        assert_close(&got, &want, 1e-5, 1e-5, if rms { "rms_norm" } else { "norm" });
    }

    #[test]
    fn sums_and_argmax(ne in shape(9), ty in float_ty(), l in layout(), which in 0..3u8, ties in any::<bool>(), seed in any::<u64>()) {
        let mut ne = ne;
        if which == 2 { ne[2] = 1; ne[3] = 1; }
        let mut g = Graph::new();
        let (leaf, a) = source(&mut g, ty, ne, l);
        let out = match which { 0 => g.sum_rows(a), 1 => g.mean(a), _ => g.argmax(a) };
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        let n = g.tensor(leaf).nelements() as usize;
        // small integers give ties (argmax takes the last of equal maxima, as ggml)
        let v: Vec<f32> = (0..n).map(|_| if ties { rng.below(4) as f32 } else { rng.f32(-5.0, 5.0) }).collect();
        fill(&g, leaf, &v);
        compute(&g, cpu());
        let (av, got) = (g.read_f32(a).unwrap(), g.read_f32(out).unwrap());
        let want: Vec<f64> = av.chunks(ne[0] as usize).map(|row| match which {
            0 => row.iter().map(|&x| x as f64).sum::<f64>(),
            1 => row.iter().map(|&x| x as f64).sum::<f64>() / row.len() as f64,
            _ => {
                let m = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                row.iter().rposition(|&x| x == m).unwrap() as f64
            }
        }).collect();
        assert_close(&got, &want, 1e-5, 1e-6, ["sum_rows", "mean", "argmax"][which as usize]);
    }

    /// Sorts are exact; ties keep the lower index first in both directions.
    #[test]
    fn argsort_top_k(ne in shape(12), ty in float_ty(), l in layout(), desc in any::<bool>(), topk in any::<bool>(),
                     kpick in any::<u8>(), ties in any::<bool>(), seed in any::<u64>()) {
        let mut g = Graph::new();
        let (leaf, a) = source(&mut g, ty, ne, l);
        let k = 1 + kpick as i64 % ne[0];
        let out = if topk { g.top_k(a, k as i32) } else { g.argsort(a, if desc { SortOrder::Desc } else { SortOrder::Asc }) };
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        let n = g.tensor(leaf).nelements() as usize;
        let v: Vec<f32> = (0..n).map(|_| if ties { rng.below(3) as f32 - 1.0 } else { rng.f32(-5.0, 5.0) }).collect();
        fill(&g, leaf, &v);
        compute(&g, cpu());
        let (av, got) = (g.read_f32(a).unwrap(), g.read_f32(out).unwrap());
        let mut want = Vec::new();
        for row in av.chunks(ne[0] as usize) {
            let mut ix: Vec<usize> = (0..row.len()).collect();
            if topk || desc {
                ix.sort_by(|&p, &q| (row[q] as f64).partial_cmp(&(row[p] as f64)).unwrap());
            } else {
                ix.sort_by(|&p, &q| (row[p] as f64).partial_cmp(&(row[q] as f64)).unwrap());
            }
            let take = if topk { k as usize } else { row.len() };
            want.extend(ix[..take].iter().map(|&i| i as f64));
        }
        assert_close(&got, &want, 0.0, 0.0, if topk { "top_k" } else { "argsort" });
    }

    #[test]
    fn soft_max(ne in shape(9), l in layout(), mask_kind in 0..3u8, extra_rows in 0..3i64, bpick in any::<[bool; 2]>(),
                scale in 0.1f32..2.0, alibi in any::<bool>(), sinks in any::<bool>(), seed in any::<u64>()) {
        let max_bias = if alibi { 8.0f32 } else { 0.0 };
        let mut g = Graph::new();
        let (leaf, a) = source(&mut g, GgmlType::F32, ne, l);
        let mut leaves = vec![(leaf, -4.0f32, 4.0f32)];
        let mne = [ne[0], ne[1] + extra_rows, if bpick[0] { 1 } else { ne[2] }, if bpick[1] { 1 } else { ne[3] }];
        let mask = match mask_kind {
            0 => None,
            k => {
                let m = g.new_tensor(if k == 1 { GgmlType::F32 } else { GgmlType::F16 }, &mne);
                leaves.push((m, -3.0, 1.0));
                Some(m)
            }
        };
        let sinks = sinks && mask.is_some();
        let out = g.soft_max_ext(a, mask, scale, max_bias);
        let sk = if sinks {
            let s = g.new_tensor(GgmlType::F32, &[ne[2]]);
            g.soft_max_add_sinks(out, s);
            leaves.push((s, -2.0, 2.0));
            Some(s)
        } else { None };
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        for &(lf, lo, hi) in &leaves { fill_rand(&g, lf, &mut rng, lo, hi); }
        // some -inf mask entries (never a whole row)
        if let Some(m) = mask {
            let mut mv = g.read_f32(m).unwrap();
            for (i, x) in mv.iter_mut().enumerate() { if i % mne[0] as usize != 0 && rng.below(5) == 0 { *x = f32::NEG_INFINITY; } }
            fill(&g, m, &mv);
        }
        compute(&g, cpu());
        let av = g.read_f32(a).unwrap();
        let mv = mask.map(|m| g.read_f32(m).unwrap());
        let sv = sk.map(|s| g.read_f32(s).unwrap());
        let got = g.read_f32(out).unwrap();
        let n_head = ne[2] as u32;
        let n_head_log2 = 1u32 << (n_head as f64).log2().floor() as u32;
        let mut want = vec![0f64; got.len()];
        for (i1, i2, i3) in rows(&ne) {
            let slope = if max_bias > 0.0 {
                let h = i2 as u32;
                let m0 = 2f64.powf(-(max_bias as f64) / n_head_log2 as f64);
                let m1 = 2f64.powf(-(max_bias as f64 / 2.0) / n_head_log2 as f64);
                if h < n_head_log2 { m0.powi(h as i32 + 1) } else { m1.powi(2 * (h - n_head_log2) as i32 + 1) }
            } else { 1.0 };
            let w: Vec<f64> = (0..ne[0]).map(|i0| {
                let mut x = av[idx(&ne, i0, i1, i2, i3)] as f64 * scale as f64;
                if let Some(mv) = &mv { x += slope * mv[idx(&mne, i0, i1, i2 % mne[2], i3 % mne[3])] as f64; }
                x
            }).collect();
            let sink = sv.as_ref().map(|s| s[i2 as usize] as f64);
            let mx = w.iter().cloned().chain(sink).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = w.iter().map(|x| (x - mx).exp()).sum::<f64>() + sink.map_or(0.0, |s| (s - mx).exp());
            for i0 in 0..ne[0] { want[idx(&ne, i0, i1, i2, i3)] = (w[i0 as usize] - mx).exp() / z; }
        }
        assert_close(&got, &want, 1e-6, 1e-5, "soft_max");
    }
}
