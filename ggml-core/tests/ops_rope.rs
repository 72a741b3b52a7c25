//! rope_ext against an f64 reference written from ggml's definition: modes
//! Normal and NeoX, partial rotation, freq factors, YaRN parameters.

mod common;

use common::*;
use ggml_core::op::{RopeMode, RopeParams};
use ggml_core::{GgmlType, Graph};
use proptest::prelude::*;

/// `ggml_rope_yarn_corr_dims` (f32, as ggml: these are discrete choices).
fn corr_dims(n_dims: i32, n_ctx_orig: i32, base: f32, beta_fast: f32, beta_slow: f32) -> [f64; 2] {
    let cd = |n_rot: f32| {
        n_dims as f32 * (n_ctx_orig as f32 / (n_rot * 2.0 * std::f32::consts::PI)).ln()
            / (2.0 * base.ln())
    };
    let start = cd(beta_fast).floor();
    let end = cd(beta_slow).ceil();
    [start.max(0.0) as f64, end.min((n_dims - 1) as f32) as f64]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    #[test]
    fn rope(half_d in 1i64..=8, extra in 0i64..=3, partial in any::<bool>(), n_head in 1i64..=3, n_tok in 1i64..=4,
            ne3 in 1i64..=2, neox in any::<bool>(), ty in prop::sample::select(vec![GgmlType::F32, GgmlType::F16]),
            lpick in 0..3u8, ff in any::<bool>(), yarn in any::<bool>(), base in prop::sample::select(vec![10000.0f32, 1e6, 500.0]),
            seed in any::<u64>()) {
        let n_dims_full = 2 * half_d;
        let ne0 = n_dims_full + 2 * extra;
        let n_dims = if partial { 2 * (1 + (half_d - 1) / 2) } else { n_dims_full };
        let ne = [ne0, n_head, n_tok, ne3];
        let l = [Layout::Contig, Layout::Padded, Layout::Permuted([0, 2, 1, 3])][lpick as usize];
        let p = RopeParams {
            n_dims: n_dims as i32,
            mode: if neox { RopeMode::Neox } else { RopeMode::Normal },
            n_ctx_orig: 4096,
            freq_base: base.into(),
            freq_scale: (if yarn { 0.25f32 } else { 1.0 }).into(),
            ext_factor: (if yarn { 1.0f32 } else { 0.0 }).into(),
            attn_factor: (if yarn { 1.1f32 } else { 1.0 }).into(),
            beta_fast: 32.0f32.into(),
            beta_slow: 1.0f32.into(),
        };
        let mut g = Graph::new();
        let (leaf, a) = source(&mut g, ty, ne, l);
        let pos = g.new_tensor(GgmlType::I32, &[n_tok]);
        let ffs = if ff { Some(g.new_tensor(GgmlType::F32, &[n_dims / 2])) } else { None };
        let out = g.rope_ext(a, pos, ffs, p);
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        fill_rand(&g, leaf, &mut rng, -2.0, 2.0);
        let posv: Vec<f32> = (0..n_tok).map(|_| rng.below(60) as f32 - 5.0).collect();
        fill(&g, pos, &posv);
        if let Some(f) = ffs { fill_rand(&g, f, &mut rng, 0.5, 4.0); }
        compute(&g, cpu());
        let av = g.read_f32(a).unwrap();
        let ffv = ffs.map(|f| g.read_f32(f).unwrap());
        let got = g.read_f32(out).unwrap();
        let corr = corr_dims(p.n_dims, p.n_ctx_orig, base, 32.0, 1.0);
        let (fs, ext, attn) = (p.freq_scale.get() as f64, p.ext_factor.get() as f64, p.attn_factor.get() as f64);
        let mut want = vec![0f64; got.len()];
        for i3 in 0..ne3 { for i2 in 0..n_tok { for i1 in 0..n_head {
            let x = |i0: i64| av[idx(&ne, i0, i1, i2, i3)] as f64;
            for i0 in n_dims..ne0 { want[idx(&ne, i0, i1, i2, i3)] = x(i0); }
            for i in 0..n_dims / 2 {
                let f = ffv.as_ref().map_or(1.0, |v| v[i as usize] as f64);
                let extrap = posv[i2 as usize] as f64 * (base as f64).powf(-2.0 * i as f64 / n_dims as f64) / f;
                let interp = fs * extrap;
                let (theta, mscale) = if ext != 0.0 {
                    let y = (i as f64 - corr[0]) / (corr[1] - corr[0]).max(0.001);
                    let mix = (1.0 - y.clamp(0.0, 1.0)) * ext;
                    (interp * (1.0 - mix) + extrap * mix, attn * (1.0 + 0.1 * (1.0 / fs).ln()))
                } else { (interp, attn) };
                let (c, s) = (theta.cos() * mscale, theta.sin() * mscale);
                let (j0, j1) = if neox { (i, i + n_dims / 2) } else { (2 * i, 2 * i + 1) };
                want[idx(&ne, j0, i1, i2, i3)] = x(j0) * c - x(j1) * s;
                want[idx(&ne, j1, i1, i2, i3)] = x(j0) * s + x(j1) * c;
            }
        }}}
        // theta is built by repeated f32 multiplication, as ggml does
        assert_close(&got, &want, 2e-4, 1e-4, &format!("rope {p:?}"));
    }
}
