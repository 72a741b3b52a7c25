//! The `nextuse` policy on small hand-made walks: it keeps hitting where
//! LRU loops, keeps a popular expert over one-offs, and its prediction
//! keeps what the layer before announces (in `tests/` so that the policy's
//! file does not import the bank that imports it).

use llama::moe_cache::policy::nextuse::NextUse;
use llama::moe_cache::SlotBank;

/// Hits of a bank of `n_slots` over `tokens` (per token, per layer ids).
fn hits(p: NextUse, layers: &[u32], n_slots: u32, tokens: &[Vec<Vec<u32>>]) -> u64 {
    let mut b = SlotBank::new(layers, 8, n_slots, Box::new(p));
    let mut h = 0;
    for t in tokens {
        b.begin_ubatch(1);
        for (l, ids) in layers.iter().zip(t) {
            h += b.access(*l, ids).expect("access").hits.len() as u64;
        }
        b.check().expect("bank agrees with the policy");
    }
    h
}

#[test]
fn a_walk_longer_than_the_slots_still_hits() {
    // 4 layers each using the same 2 experts every token, 6 slots: LRU
    // evicts what comes next and never hits; keeping 2 layers' pairs hits
    let layers = [0, 1, 2, 3];
    let tokens: Vec<Vec<Vec<u32>>> = (0..50).map(|_| vec![vec![1, 2]; 4]).collect();
    let h = hits(NextUse::new(), &layers, 6, &tokens);
    assert!(h >= 40 * 4, "{h}");
}

#[test]
fn a_popular_expert_outlives_one_offs() {
    // one layer, 3 slots, expert 0 every token, two fresh experts each
    let tokens: Vec<Vec<Vec<u32>>> = (0..60u32)
        .map(|t| vec![vec![0, 1 + (2 * t) % 7, 1 + (2 * t + 1) % 7]])
        .collect();
    let h = hits(NextUse::new(), &[0], 3, &tokens);
    // expert 0 hits nearly always once learned
    assert!(h >= 50, "{h}");
}

#[test]
fn the_prediction_keeps_what_the_layer_before_announces() {
    // layer 1 uses e + 4 for layer 0's e; layer 0 alternates pairs; 4
    // slots for 16 experts: layer 1's pair is known only once layer 0 ran
    let tokens: Vec<Vec<Vec<u32>>> = (0..200u32)
        .map(|t| {
            let a = if (t / 3) % 2 == 0 {
                vec![0, 1]
            } else {
                vec![2, 3]
            };
            let b = a.iter().map(|e| e + 4).collect();
            vec![a, b]
        })
        .collect();
    let with = hits(NextUse::new(), &[0, 1], 5, &tokens);
    let without = hits(NextUse::without_prediction(), &[0, 1], 5, &tokens);
    assert!(with >= without, "{with} < {without}");
}
