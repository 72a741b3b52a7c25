//! Loop resistance: at 1/8, 1/4 and 1/2 of a Mixtral-shaped group's experts
//! (32 layers of 8, top-2), on the real Mixtral trace
//! (`../shared/fixtures/routing/`, skipped when absent), on each synthetic
//! router and on a pure loop (every layer always the same two experts), no
//! policy falls to zero hits where Belady hits. The exceptions are the
//! plain recency policies `lru`, `slru` and `lrfu`, whose exact behaviour
//! other tests pin to their definitions: on the pure loop they hit nothing
//! (asserted here, as the reason their `tlfu-` forms exist), and their
//! `tlfu-` forms behind the admission filter do hit. `hlfu` (the default)
//! also hits nothing on the pure loop (asserted, a finding left open); it
//! hits on the real and synthetic traces.

use llama::moe_cache::cache::replay::{belady_steps, replay, TraceUbatch};
use llama::moe_cache::policy::belady::Belady;
use llama::moe_cache::policy::Policy;
use llama::moe_cache::trace::synthetic::{generate, SynthKind, SynthParams};
use llama::moe_cache::PolicyKind;

const N_LAYER: u32 = 32;
const N_EXPERT: u32 = 8;
const N_USED: u32 = 2;
const SIZES: [u32; 3] = [32, 64, 128];

/// The plain recency policies, left as defined.
const LOOPING: [PolicyKind; 3] = [PolicyKind::Lru, PolicyKind::Slru, PolicyKind::Lrfu];

fn hits(p: Box<dyn Policy>, n_slots: u32, trace: &[TraceUbatch]) -> u64 {
    let layers: Vec<u32> = (0..N_LAYER).collect();
    replay(&layers, N_EXPERT, n_slots, p, trace)
        .expect("replay")
        .values()
        .map(|s| s.hits())
        .sum()
}

fn belady(n_slots: u32, trace: &[TraceUbatch]) -> u64 {
    let layers: Vec<u32> = (0..N_LAYER).collect();
    hits(
        Box::new(Belady::new(&belady_steps(&layers, trace))),
        n_slots,
        trace,
    )
}

fn decode_trace(tokens: &[Vec<Vec<u32>>]) -> Vec<TraceUbatch> {
    tokens
        .iter()
        .map(|t| TraceUbatch {
            n_tokens: 1,
            layers: t
                .iter()
                .enumerate()
                .map(|(l, ids)| (l as u32, ids.clone()))
                .collect(),
        })
        .collect()
}

/// `"key": value` of one JSONL record, as text.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = line[at..].trim_start();
    let end = if rest.starts_with('[') {
        rest.find(']')? + 1
    } else {
        rest.find([',', '}'])?
    };
    Some(&rest[..end])
}

/// The real trace's tokens: records of one `(seq, token_pos)` in a row, one
/// per layer.
fn real_tokens(text: &str) -> Vec<Vec<Vec<u32>>> {
    let mut out: Vec<Vec<Vec<u32>>> = Vec::new();
    let mut at: Option<(String, String)> = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let tok = (
            field(line, "seq").expect("seq").to_string(),
            field(line, "token_pos").expect("token_pos").to_string(),
        );
        let layer: usize = field(line, "layer").expect("layer").parse().expect("layer");
        let ids: Vec<u32> = field(line, "experts")
            .expect("experts")
            .trim_matches(['[', ']'])
            .split(',')
            .map(|s| s.trim().parse().expect("expert"))
            .collect();
        if at.as_ref() != Some(&tok) {
            out.push(Vec::new());
            at = Some(tok);
        }
        let t = out.last_mut().expect("a token");
        assert_eq!(layer, t.len(), "layers in order");
        t.push(ids);
    }
    out.retain(|t| t.len() == N_LAYER as usize);
    out
}

fn check(name: &str, trace: &[TraceUbatch], exempt: &[PolicyKind]) {
    for n_slots in SIZES {
        let opt = belady(n_slots, trace);
        assert!(opt > 0, "{name}: Belady hits nothing at {n_slots} slots");
        for k in PolicyKind::ALL {
            if LOOPING.contains(&k) || exempt.contains(&k) {
                continue;
            }
            let h = hits(k.build(n_slots as usize), n_slots, trace);
            assert!(
                h > 0,
                "{name}: {k} hits nothing at {n_slots} slots (Belady {opt})"
            );
        }
    }
}

#[test]
fn no_policy_falls_to_zero_hits_where_belady_hits() {
    for kind in SynthKind::ALL {
        let p = SynthParams::new(kind);
        let tokens = generate(&p, N_LAYER as usize, N_EXPERT, N_USED, 600);
        check(&format!("{kind}"), &decode_trace(&tokens), &[]);
    }
    match fixtures::fixture_path("routing/mixtral-8x7b-gsm8k.jsonl") {
        Ok(path) => {
            let text = std::fs::read_to_string(&path).expect("read the trace");
            let tokens = real_tokens(&text);
            assert!(tokens.len() > 200, "{} tokens", tokens.len());
            check("the real Mixtral trace", &decode_trace(&tokens), &[]);
        }
        Err(why) => println!("skipped: {why}"),
    }
}

#[test]
fn on_a_pure_loop_recency_hits_nothing_and_the_admission_filter_does() {
    // every layer uses the same two experts at every token: 64 keys in a
    // loop, more than the 32 slots of 1/8
    let token: Vec<Vec<u32>> = (0..N_LAYER).map(|l| vec![l % 8, (l + 3) % 8]).collect();
    let trace = decode_trace(&vec![token; 100]);
    // hlfu, today's default, loops too: on a pure loop every count is
    // alike and its tie-break is recency (a finding, not yet fixed)
    check("the pure loop", &trace, &[PolicyKind::Hlfu]);
    let n_slots = SIZES[0];
    assert!(belady(n_slots, &trace) > 0);
    for k in LOOPING.into_iter().chain([PolicyKind::Hlfu]) {
        assert_eq!(hits(k.build(n_slots as usize), n_slots, &trace), 0, "{k}");
    }
    for k in [
        PolicyKind::TlfuLru,
        PolicyKind::TlfuSlru,
        PolicyKind::TlfuLrfu,
    ] {
        let h = hits(k.build(n_slots as usize), n_slots, &trace);
        // about 30 of the 64 keys stay and hit at every walk
        assert!(h >= 20 * 99, "{k}: {h} hits");
    }
}
