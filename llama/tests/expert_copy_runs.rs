//! The run grouping of the expert copy policy against a naive per-expert
//! copy: same bytes land, nothing unused is copied beyond the padding.

use llama::expert_copy::runs::{copy_ranges, expert_runs};
use proptest::prelude::*;

fn used_strategy() -> impl Strategy<Value = Vec<bool>> {
    (1usize..80).prop_flat_map(|n| {
        prop_oneof![
            Just(vec![true; n]),
            (0..n).prop_map(move |i| (0..n).map(|j| j == i).collect()),
            Just((0..n).map(|j| j == 0 || j == n - 1).collect()),
            proptest::collection::vec(any::<bool>(), n),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn runs_equal_a_per_expert_copy(used in used_strategy(), eb in 1usize..64, overhang in 0usize..100) {
        let n = used.len();
        let total = n * eb;
        let src: Vec<u8> = (0..total).map(|i| (i * 7 + 3) as u8).collect();
        // naive: each used expert on its own, then its overhang
        let mut naive = vec![0u8; total];
        for e in (0..n).filter(|&e| used[e]) {
            let end = ((e + 1) * eb + overhang).min(total);
            naive[e * eb..end].copy_from_slice(&src[e * eb..end]);
        }
        let mut grouped = vec![0u8; total];
        let ranges = copy_ranges(&used, eb, total, overhang);
        for r in &ranges {
            grouped[r.clone()].copy_from_slice(&src[r.clone()]);
        }
        // every used expert's bytes arrive, identical to the naive copy
        for e in (0..n).filter(|&e| used[e]) {
            prop_assert_eq!(&grouped[e * eb..(e + 1) * eb], &src[e * eb..(e + 1) * eb]);
        }
        prop_assert_eq!(&grouped, &naive);
        // at most one range per run, in order, not touching
        prop_assert!(ranges.len() <= expert_runs(&used).len());
        if overhang == 0 {
            prop_assert_eq!(ranges.len(), expert_runs(&used).len());
        }
        for w in ranges.windows(2) {
            prop_assert!(w[0].end < w[1].start);
        }
        // bytes: used experts plus at most `overhang` per run
        let n_used = used.iter().filter(|&&u| u).count();
        let copied: usize = ranges.iter().map(|r| r.len()).sum();
        prop_assert!(copied >= n_used * eb);
        prop_assert!(copied <= n_used * eb + expert_runs(&used).len() * overhang);
        if overhang == 0 {
            prop_assert_eq!(copied, n_used * eb);
        }
    }
}
