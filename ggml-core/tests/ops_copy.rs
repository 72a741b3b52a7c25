//! Copies against references: dup/cont/cpy between F32/F16/BF16 with any
//! strides, set_rows (I32/I64 indices, broadcast, out-of-range errors), and
//! concat along every dim.

mod common;

use common::*;
use ggml_core::{BackendError, GgmlType, Graph};
use proptest::prelude::*;

fn float_ty() -> impl Strategy<Value = GgmlType> {
    prop::sample::select(vec![GgmlType::F32, GgmlType::F16, GgmlType::BF16])
}

fn layout() -> impl Strategy<Value = Layout> {
    prop::sample::select(layouts())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(64)))]

    /// cont/dup keep the type; cpy converts into a (possibly strided) dst of
    /// another shape with the same element count. Conversion is exact
    /// rounding, so the comparison is exact.
    #[test]
    fn dup_cont_cpy(ne in shape(6), ts in float_ty(), td in float_ty(), ls in layout(), ld in layout(),
                    which in 0..3u8, flat in any::<bool>(), seed in any::<u64>()) {
        let mut g = Graph::new();
        let (leaf, a) = source(&mut g, ts, ne, ls);
        let (out, dst_leaf) = match which {
            0 => (g.cont(a), None),
            1 => (g.dup(a), None),
            _ => {
                let n = ne.iter().product::<i64>();
                let (dl, d) = if flat { let t = g.new_tensor(td, &[n]); (t, t) } else { source(&mut g, td, ne, ld) };
                (g.cpy(a, d), Some(dl))
            }
        };
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        fill_rand(&g, leaf, &mut rng, -100.0, 100.0);
        if let Some(dl) = dst_leaf { fill_rand(&g, dl, &mut rng, -1.0, 1.0); }
        compute(&g, cpu());
        let av = g.read_f32(a).unwrap();
        let got = g.read_f32(out).unwrap();
        let oty = g.tensor(out).ty;
        let want: Vec<f64> = av.iter().map(|&x| round_to(oty, x) as f64).collect();
        assert_close(&got, &want, 0.0, 0.0, "copy");
    }

    #[test]
    fn set_rows(ne0 in 1i64..6, n_dst in 1i64..8, nsrc_pick in any::<u8>(), p2 in 1i64..3, p3 in 1i64..3, bc in any::<[bool; 2]>(),
                td in float_ty(), i64_idx in any::<bool>(), ld in prop::sample::select(vec![Layout::Contig, Layout::Padded]),
                seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let n_src = 1 + nsrc_pick as i64 % n_dst;
        let mut g = Graph::new();
        let (dleaf, a) = source(&mut g, td, [ne0, n_dst, p2, p3], ld);
        let b = g.new_tensor(GgmlType::F32, &[ne0, n_src, p2, p3]);
        let cne = [n_src, if bc[0] { 1 } else { p2 }, if bc[1] { 1 } else { p3 }];
        let c = g.new_tensor(if i64_idx { GgmlType::I64 } else { GgmlType::I32 }, &cne);
        let out = g.set_rows(a, b, c);
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        fill_rand(&g, dleaf, &mut rng, -1.0, 1.0);
        fill_rand(&g, b, &mut rng, -9.0, 9.0);
        // distinct row indices per index row
        let mut idxs = Vec::new();
        for _ in 0..cne[1] * cne[2] {
            let mut perm: Vec<i64> = (0..n_dst).collect();
            for i in (1..perm.len()).rev() { perm.swap(i, rng.below(i as u64 + 1) as usize); }
            idxs.extend_from_slice(&perm[..n_src as usize]);
        }
        let bytes: Vec<u8> = if i64_idx { idxs.iter().flat_map(|v| v.to_le_bytes()).collect() }
                             else { idxs.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect() };
        g.write_bytes(c, &bytes).unwrap();
        let before = g.read_f32(a).unwrap();
        compute(&g, cpu());
        let bv = g.read_f32(b).unwrap();
        let got = g.read_f32(out).unwrap();
        let ane = [ne0, n_dst, p2, p3];
        let bne = [ne0, n_src, p2, p3];
        let mut want: Vec<f64> = before.iter().map(|&x| x as f64).collect();
        for i3 in 0..p3 { for i2 in 0..p2 { for i in 0..n_src {
            let r = idxs[((i3 % cne[2]) * cne[1] + (i2 % cne[1])) as usize * n_src as usize + i as usize];
            for i0 in 0..ne0 {
                want[idx(&ane, i0, r, i2, i3)] = round_to(td, bv[idx(&bne, i0, i, i2, i3)]) as f64;
            }
        }}}
        assert_close(&got, &want, 0.0, 0.0, "set_rows");
    }

    #[test]
    fn concat(ne in shape(5), extra in 1i64..4, dim in 0..4usize, ty in prop::sample::select(vec![GgmlType::F32, GgmlType::F16, GgmlType::I32]),
              la in layout(), lb in layout(), seed in any::<u64>()) {
        let mut bne = ne;
        bne[dim] = extra;
        let mut g = Graph::new();
        let (al, a) = source(&mut g, ty, ne, la);
        let (bl, b) = source(&mut g, ty, bne, lb);
        let out = g.concat(a, b, dim);
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        let mut rng = Rng(seed);
        for l in [al, bl] {
            let n = g.tensor(l).nelements() as usize;
            let v: Vec<f32> = (0..n).map(|_| rng.below(2000) as f32 - 1000.0).collect();
            fill(&g, l, &v);
        }
        compute(&g, cpu());
        let (av, bv, got) = (g.read_f32(a).unwrap(), g.read_f32(b).unwrap(), g.read_f32(out).unwrap());
        let one = g.tensor(out).ne;
        let mut want = vec![0f64; got.len()];
        for i3 in 0..one[3] { for i2 in 0..one[2] { for i1 in 0..one[1] { for i0 in 0..one[0] {
            let i = [i0, i1, i2, i3];
            let v = if i[dim] < ne[dim] { av[idx(&ne, i0, i1, i2, i3)] } else {
                let mut j = i; j[dim] -= ne[dim];
                bv[idx(&bne, j[0], j[1], j[2], j[3])]
            };
            want[idx(&one, i0, i1, i2, i3)] = v as f64;
        }}}}
        assert_close(&got, &want, 0.0, 0.0, "concat");
    }
}

/// An index out of range is an error naming it, and nothing is written.
#[test]
fn set_rows_out_of_range_is_invalid_input() {
    for bad in [5i32, -1] {
        let mut g = Graph::new();
        let a = g.new_tensor(GgmlType::F16, &[4, 5]);
        let b = g.new_tensor(GgmlType::F32, &[4, 2]);
        let c = g.new_tensor(GgmlType::I32, &[2]);
        g.set_name(c, "kv_idxs");
        let out = g.set_rows(a, b, c);
        g.build_forward_expand(out);
        alloc(&mut g, cpu());
        fill(&g, b, &[1.0; 8]);
        g.write_i32(c, &[0, bad]).unwrap();
        let nodes = g.nodes().to_vec();
        let err = ggml_core::BackendStream::compute(cpu(), &g, &nodes).unwrap_err();
        match err {
            BackendError::InvalidInput(msg) => {
                assert!(
                    msg.contains(&bad.to_string()) && msg.contains("kv_idxs"),
                    "{msg}"
                )
            }
            e => panic!("unexpected error {e:?}"),
        }
        assert!(
            g.read_f32(a).unwrap().iter().all(|&x| x == 0.0),
            "nothing written"
        );
    }
}

/// Copies of larger tensors split across threads.
#[test]
fn cpy_transposed_multithreaded() {
    let mut g = Graph::new();
    let a = g.new_tensor(GgmlType::F32, &[300, 200]);
    let t = g.transpose(a);
    let d = g.new_tensor(GgmlType::F16, &[200, 300]);
    let out = g.cpy(t, d);
    g.build_forward_expand(out);
    alloc(&mut g, cpu());
    fill_rand(&g, a, &mut Rng(3), -2.0, 2.0);
    compute(&g, cpu());
    let av = g.read_f32(a).unwrap();
    let got = g.read_f32(out).unwrap();
    let want: Vec<f64> = (0..300 * 200)
        .map(|k| {
            let (i0, i1) = (k % 200, k / 200);
            round_to(GgmlType::F16, av[i0 * 300 + i1]) as f64
        })
        .collect();
    assert_close(&got, &want, 0.0, 0.0, "cpy transposed");
}
