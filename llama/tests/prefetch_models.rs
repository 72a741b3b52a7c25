//! The prefill prefetch (`--prefetch-experts-slots`) on the sim device:
//! the CPU's logits bit for bit on every fixture, slots on and off, with
//! and without the expert cache; exact byte accounting; on the recorded
//! simulated timeline no staging slot is read before its copy completed
//! nor overwritten while a split still reads it; bad slot counts; auto
//! (`-1`) gives prefetch-off's logits and never moves more than whole
//! tensors. Decode prediction (router and history) changes no logit,
//! accounts for every byte and respects the timeline.

mod common;

use std::sync::Arc;

use common::{or_skip, same_bits, Fixture, MODELS};
use llama::device::{open_device, open_device_with_memory};
use llama::moe_cache::cache::layout::{bytes_for_all, model_groups};
use llama::moe_cache::predict::MoePredict;
use llama::moe_cache::prefetch::auto::Choice;
use llama::moe_cache::prefetch::{AutoPrefetch, PrefetchSlots};
use llama::moe_cache::trace::forced::ForcedRouting;
use llama::moe_cache::{CacheSize, MoeCacheParams};
use llama::moe_cache::{Trace, TraceHeader};
use llama::placement::Placement;
use llama::MoeParams;
use llama::{Context, ContextParams, Model, ModelParams};

fn load_on(fx: &Fixture, dev: Option<Arc<dyn ggml_core::Backend>>) -> Arc<Model> {
    let params = ModelParams {
        placement: Placement {
            cpu_moe: dev.is_some(),
            ..Default::default()
        },
        device: dev,
        progress: None,
        ..Default::default()
    };
    Arc::new(Model::load(&fx.gguf, params).expect("load"))
}

fn load(fx: &Fixture, device: Option<&str>) -> Arc<Model> {
    load_on(
        fx,
        device.and_then(|d| open_device(d, 2, 1).expect("device")),
    )
}

/// A context prefetching every ubatch of more than one token (the cache's
/// insert limit is 1 here, so the short fixture prompts prefetch).
fn ctx(model: &Arc<Model>, slots: i32, cache: CacheSize) -> Context {
    ctx_forcing(model, slots, cache, None)
}

/// [`ctx`], auto taking `force` wherever it can.
fn ctx_forcing(model: &Arc<Model>, slots: i32, cache: CacheSize, force: Option<Choice>) -> Context {
    let auto = AutoPrefetch {
        force,
        ..AutoPrefetch::default()
    };
    let mut p = auto_params(slots, auto);
    p.moe.cache = MoeCacheParams {
        size: cache,
        max_batch: 1,
        ..MoeCacheParams::default()
    };
    Context::new(Arc::clone(model), p).expect("context")
}

/// The parameters of [`ctx`] without a cache, with `auto`'s options for
/// `-1`.
fn auto_params(slots: i32, auto: AutoPrefetch) -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 512,
        n_threads: 2,
        moe: MoeParams {
            cache: MoeCacheParams {
                size: CacheSize::Off,
                max_batch: 1,
                ..MoeCacheParams::default()
            },
            prefetch: PrefetchSlots::from_count(slots.into(), auto).expect("a slot count"),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Prompt logits (all rows), 3 decoded rows, then a batch of 7 tokens.
fn logits(c: &mut Context, fx: &Fixture) -> Vec<f32> {
    let (mut out, forced) = fx.prompt_and_forced(c, 3);
    out.extend(forced);
    let more = &fx.gen[3..10];
    c.decode(more, true).expect("batch");
    for i in 0..more.len() {
        out.extend_from_slice(c.logits(i).expect("row"));
    }
    out
}

#[test]
fn prefetched_experts_give_cpu_logits_bit_for_bit() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu = logits(&mut ctx(&load(&fx, None), 0, CacheSize::Off), &fx);
        let model = load(&fx, Some("SIM0"));
        let half = CacheSize::Bytes(bytes_for_all(&model_groups(&model)) / 2);
        for (slots, cache) in [
            (0, CacheSize::Off),
            (1, CacheSize::Off),
            (3, CacheSize::Off),
            (-1, half),
        ] {
            let mut c = ctx(&model, slots, cache);
            let got = logits(&mut c, &fx);
            let same = got
                .iter()
                .zip(&cpu)
                .all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same && got.len() == cpu.len(),
                "{name} slots {slots} cache {cache}: logits differ from CPU"
            );
            let Some(p) = c.prefetch_stats() else {
                assert_eq!(slots, 0, "{name}: slots {slots} made no staging");
                continue;
            };
            if slots < 0 {
                // auto may stage nothing; `auto_prefetch_*` checks it
                assert!(
                    p.auto_whole + p.auto_none > 0,
                    "{name}: auto decided nothing"
                );
                continue;
            }
            assert!(
                p.bytes > 0 && p.inputs > 0,
                "{name} slots {slots}: nothing prefetched"
            );
            assert_eq!(p.bytes_used + p.bytes_wasted, p.bytes, "{name}");
            assert!(p.bytes_used > 0, "{name}: no prefetched expert was used");
            // prefetched bytes are expert bytes uploaded
            let t = c.stats();
            assert!(t.h2d_bytes_experts >= p.bytes, "{name}");
        }
    }
}

#[test]
fn auto_prefetch_matches_off_and_never_moves_more_than_whole_tensors() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, Some("SIM0"));
        let mut off = ctx(&model, 0, CacheSize::Off);
        let want = logits(&mut off, &fx);
        let off_bytes = off.stats().h2d_bytes_experts;
        let mut whole = ctx(&model, 3, CacheSize::Off);
        let _ = logits(&mut whole, &fx);
        let w = whole.prefetch_stats().expect("staging");
        let whole_bytes = whole.stats().h2d_bytes_experts;
        let mut auto = ctx(&model, -1, CacheSize::Off);
        let got = logits(&mut auto, &fx);
        let same = same_bits(&got, &want);
        assert!(same, "{name}: auto's logits differ from prefetch off");
        let a = auto.prefetch_stats().expect("staging");
        let auto_bytes = auto.stats().h2d_bytes_experts;
        eprintln!(
            "{name}: off {off_bytes} whole {whole_bytes} ({} staged, {} wasted) auto {auto_bytes} ({} staged; whole {} none {})",
            w.bytes, w.bytes_wasted, a.bytes, a.auto_whole, a.auto_none
        );
        assert_eq!(a.bytes_used + a.bytes_wasted, a.bytes, "{name}");
        assert!(a.bytes <= w.bytes, "{name}: auto staged more than whole");
        assert!(
            auto_bytes <= whole_bytes.max(off_bytes),
            "{name}: auto moved {auto_bytes} bytes, whole {whole_bytes}"
        );
        assert!(
            a.auto_whole + a.auto_none > 0,
            "{name}: auto decided nothing"
        );
    }
}

/// Whether a fixture's graph guesses each layer's experts through the next
/// router (deepseek2 and gpt-oss route through their own blocks, which do
/// not build the guess yet; one MoE layer has no next layer).
fn guesses(name: &str, model: &Model) -> bool {
    let n_moe: usize = model_groups(model).iter().map(|g| g.layers.len()).sum();
    n_moe >= 2 && !name.contains("deepseek2") && !name.contains("gptoss")
}

#[test]
fn selective_prefetch_gives_off_logits_and_never_moves_more_than_whole_tensors() {
    let mut saw = 0;
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, Some("SIM0"));
        let mut off = ctx(&model, 0, CacheSize::Off);
        let want = logits(&mut off, &fx);
        let mut whole = ctx(&model, 3, CacheSize::Off);
        let _ = logits(&mut whole, &fx);
        let w = whole.prefetch_stats().expect("staging");
        let whole_bytes = whole.stats().h2d_bytes_experts;
        let off_bytes = off.stats().h2d_bytes_experts;
        let mut sel = ctx_forcing(&model, -1, CacheSize::Off, Some(Choice::Selective));
        let got = logits(&mut sel, &fx);
        assert!(
            same_bits(&got, &want),
            "{name}: selective prefetch's logits differ from prefetch off"
        );
        let a = sel.prefetch_stats().expect("staging");
        let sel_bytes = sel.stats().h2d_bytes_experts;
        eprintln!(
            "{name}: off {off_bytes} whole {whole_bytes} selective {sel_bytes}: {a:?} recall {:?} precision {:?}",
            a.prediction_recall(),
            a.prediction_precision()
        );
        assert_eq!(a.bytes_used + a.bytes_wasted, a.bytes, "{name}");
        assert!(
            sel_bytes <= whole_bytes.max(off_bytes),
            "{name}: selective moved {sel_bytes} bytes, whole {whole_bytes}"
        );
        // staged early and completed late, at most whole tensors' bytes
        assert!(a.bytes + a.selective_late_bytes <= w.bytes, "{name}");
        if !guesses(name, &model) {
            assert_eq!(a.auto_selective, 0, "{name}");
            continue;
        }
        assert!(a.auto_selective > 0, "{name}: selective never taken");
        assert!(a.predicted_layers > 0, "{name}: no guess measured");
        assert!(a.predicted_experts_correct <= a.predicted_experts_needed);
        assert!(a.predicted_experts_correct <= a.predicted_experts);
        // the guess is better than nothing on the model's own router
        assert!(a.bytes_used > 0, "{name}: no guessed expert was used");
        saw += 1;
    }
    assert!(saw > 0, "no fixture took the selective prefetch");
}

/// The prompt's logits (all rows), then the prompt again as a second
/// ubatch of the same sequence and its logits.
fn twice(c: &mut Context, fx: &Fixture) -> Vec<f32> {
    let mut out = Vec::new();
    for _ in 0..2 {
        c.decode(&fx.tokens, true).expect("prompt");
        for i in 0..fx.tokens.len() {
            out.extend_from_slice(c.logits(i).expect("row"));
        }
    }
    out
}

/// The prompt's first `n` tokens, twice, as in [`twice`].
fn twice_first(c: &mut Context, fx: &Fixture, n: usize) -> Vec<f32> {
    let mut out = Vec::new();
    let toks = &fx.tokens[..n.min(fx.tokens.len())];
    for _ in 0..2 {
        c.decode(toks, true).expect("prompt");
        for i in 0..toks.len() {
            out.extend_from_slice(c.logits(i).expect("row"));
        }
    }
    out
}

#[test]
fn auto_leaves_partly_used_tensors_to_the_selective_copy_when_compute_hides_nothing() {
    // no link latency, no launch cost and a device far faster than the
    // link: a whole tensor pays only when every expert of it is used
    let prof = ggml_core::SimProfile::from_json(
        r#"{"name": "no-hiding",
        "device": {"flops": 1.0e18, "mem_bw": 1.0e18, "launch_s": 0.0},
        "link": {"h2d_bw": 1.0e9, "d2h_bw": 1.0e9, "latency_s": 0.0}}"#,
    )
    .expect("profile");
    let mut saw_none = false;
    for name in [
        "tiny-qwen3moe-q4_k",
        "tiny-olmoe-f32",
        "tiny-deepseek2-q4_k",
    ] {
        let fx = or_skip!(Fixture::load(name), continue);
        let dev = common::sim0_with_profile(prof.clone());
        let model = load_on(&fx, dev);
        let want = twice(&mut ctx(&model, 0, CacheSize::Off), &fx);
        let mut whole = ctx(&model, 3, CacheSize::Off);
        let _ = twice(&mut whole, &fx);
        let w = whole.prefetch_stats().expect("staging");
        let mut auto = ctx(&model, -1, CacheSize::Off);
        let got = twice(&mut auto, &fx);
        assert!(
            same_bits(&got, &want),
            "{name}: auto's logits differ from prefetch off"
        );
        let a = auto.prefetch_stats().expect("staging");
        assert!(a.bytes <= w.bytes, "{name}");
        if w.bytes_wasted > 0 {
            // some tensor was partly used: on the second prompt, with each
            // tensor's own fraction measured, auto left some to the copy
            assert!(
                a.auto_none > 0 && a.bytes < w.bytes,
                "{name}: {a:?} vs {w:?}"
            );
            saw_none = true;
        }
    }
    assert!(saw_none, "no fixture had a partly used tensor");
}

#[test]
fn auto_takes_the_selective_prefetch_where_its_guess_hides_and_whole_would_not() {
    // a device whose compute before each expert tensor's consumer (its
    // kernel launch cost, the cost model's hidden time) hides three
    // quarters of that tensor's link time: a whole tensor leaves a quarter
    // exposed, a good guess of the used experts hides entirely and leaves
    // only its misses (two-token prompts, so that a layer uses only part
    // of its experts)
    let mut saw = 0;
    for name in [
        "tiny-qwen3moe-q4_k",
        "tiny-qwen3moe-f32",
        "tiny-mixtral-f16",
    ] {
        let fx = or_skip!(Fixture::load(name), continue);
        let probe = load(&fx, Some("SIM0"));
        let g = &model_groups(&probe)[0];
        let tensor_bytes = g.roles[0].expert_bytes as f64 * g.n_expert as f64;
        let launch = 1.0e-3;
        let link_bw = tensor_bytes / (launch / 0.75);
        let prof = ggml_core::SimProfile::from_json(&format!(
            r#"{{"name": "hides-three-quarters",
            "device": {{"flops": 1.0e18, "mem_bw": 1.0e18, "launch_s": {launch}}},
            "link": {{"h2d_bw": {link_bw}, "d2h_bw": {link_bw}, "latency_s": 0.0}}}}"#
        ))
        .expect("profile");
        let dev = common::sim0_with_profile(prof);
        let model = load_on(&fx, dev);
        let want = twice_first(&mut ctx(&model, 0, CacheSize::Off), &fx, 2);
        let mut auto = ctx(&model, -1, CacheSize::Off);
        let got = twice_first(&mut auto, &fx, 2);
        assert!(
            same_bits(&got, &want),
            "{name}: auto's logits differ from prefetch off"
        );
        let a = auto.prefetch_stats().expect("staging");
        eprintln!("{name}: {a:?}");
        assert_eq!(a.bytes_used + a.bytes_wasted, a.bytes, "{name}");
        // the guesses were measured on the first prompt; where they were
        // good, the second prompt takes the selective prefetch
        let recall = a.prediction_recall().expect("guesses measured");
        // (a layer whose ubatch uses every expert is best staged whole)
        let partly_used = a.predicted_experts_needed < a.predicted_layers * g.n_expert as u64;
        if recall >= 0.8 && partly_used {
            assert!(
                a.auto_selective > 0,
                "{name}: recall {recall:.2}, selective never chosen: {a:?}"
            );
            saw += 1;
        }
        // without the third choice: no guess in the graph, none taken
        let two = auto_params(
            -1,
            AutoPrefetch {
                selective: false,
                force: None,
            },
        );
        let mut c = Context::new(Arc::clone(&model), two).expect("context");
        let got = twice_first(&mut c, &fx, 2);
        assert!(got
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        let b = c.prefetch_stats().expect("staging");
        assert_eq!((b.auto_selective, b.predicted_layers), (0, 0), "{name}");
    }
    assert!(saw > 0, "no fixture's guess was good enough to choose");
}

#[test]
fn staging_slots_are_never_read_early_nor_overwritten_while_read() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-q4_k"));
    let model = load(&fx, Some("SIM0"));
    let clock = model
        .device
        .as_ref()
        .and_then(|d| ggml_core::SimClock::of(d.as_ref()))
        .expect("a sim clock");
    for slots in [1, 2, 3] {
        let mut c = ctx(&model, slots, CacheSize::Off);
        clock.set_recording(true);
        let _ = clock.take_timeline();
        c.decode(&fx.tokens, true).expect("prompt");
        let tl = clock.take_timeline();
        clock.set_recording(false);
        let staged: Vec<_> = tl
            .spans
            .iter()
            .filter(|s| s.name.starts_with("prefetch "))
            .collect();
        let p = c.prefetch_stats().expect("staging");
        // every expert tensor of every layer was staged, so slots were
        // reused (the model has more host expert tensors than slots)
        assert_eq!(staged.len() as u64, p.inputs, "slots {slots}");
        let n_tensors: usize = model_groups(&model)
            .iter()
            .map(|g| 3 * g.layers.len())
            .sum();
        assert_eq!(p.inputs as usize, n_tensors, "slots {slots}");
        assert!(n_tensors > slots as usize);
        // the same slot memory is written again
        let first = staged[0].writes[0];
        assert!(
            staged[1..].iter().any(|s| s.writes[0].overlaps(&first)),
            "slots {slots}: no slot was reused"
        );
        // some op reads each staged range, after its copy ended
        for s in &staged {
            let w = s.writes[0];
            let readers: Vec<_> = tl
                .spans
                .iter()
                .filter(|o| o.seq > s.seq && o.reads.iter().any(|r| r.overlaps(&w)))
                .collect();
            assert!(
                !readers.is_empty(),
                "slots {slots}: '{}' never read",
                s.name
            );
            assert!(
                readers[0].start_ns >= s.end_ns,
                "slots {slots}: '{}' read at {} before its copy ended at {}",
                s.name,
                readers[0].start_ns,
                s.end_ns
            );
        }
        tl.check_hazards()
            .unwrap_or_else(|e| panic!("slots {slots}: {e}"));
    }
}

#[test]
fn bad_slot_counts_err_or_shrink_with_a_note() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"));
    let model = load(&fx, Some("SIM0"));
    let e = PrefetchSlots::from_count(-7, AutoPrefetch::default()).expect_err("an error");
    let m = e.to_string();
    assert!(
        m.contains("--prefetch-experts-slots -7") && m.contains("-1 for auto"),
        "{m}"
    );
    // more slots than the model has expert tensors: capped, with a note
    let c = ctx(&model, 1000, CacheSize::Off);
    let (n, _, note) = c.prefetch_slots().expect("staging");
    let n_tensors: usize = model_groups(&model)
        .iter()
        .map(|g| 3 * g.layers.len())
        .sum();
    assert_eq!(n, n_tensors);
    assert!(note.expect("a note").contains("using"), "capped");
    // a device too small for the slots asked for: fewer, with a note
    // naming the count used; the run still gives the CPU's logits
    let cap = 256usize << 20;
    let sim = open_device_with_memory("SIM0", 2, 1, Some(cap)).expect("device");
    let probe_model = load_on(&fx, sim);
    let probe = ctx(&probe_model, 1, CacheSize::Off);
    let dev = probe_model.device.clone().expect("device");
    let (free, _) = dev.memory().expect("limited");
    let (_, slot_bytes, _) = probe.prefetch_slots().expect("staging");
    let slot = slot_bytes + dev.read_overhang();
    // what the model, the graph and one slot take, then room for 2.5 slots
    let cap2 = (cap - free) - slot + slot * 5 / 2;
    drop(probe);
    drop(probe_model);
    let want = 5.min(n_tensors) as i32;
    assert!(want > 2);
    let sim = open_device_with_memory("SIM0", 2, 1, Some(cap2)).expect("device");
    let small = load_on(&fx, sim);
    let mut c = ctx(&small, want, CacheSize::Off);
    let (n, _, note) = c.prefetch_slots().expect("staging");
    let note = note.expect("a note");
    assert_eq!(n, 2, "{note}");
    assert!(
        note.contains("using 2") && note.contains("do not fit"),
        "{note}"
    );
    let cpu = logits(&mut ctx(&load(&fx, None), 0, CacheSize::Off), &fx);
    let got = logits(&mut c, &fx);
    assert!(got
        .iter()
        .zip(&cpu)
        .all(|(a, b)| a.to_bits() == b.to_bits()));
    assert!(c.prefetch_stats().expect("staging").bytes > 0);
}

/// A context with the cache holding half the experts, decode ubatches
/// cached, and the prediction `on` (off, router or history).
fn predict_ctx(model: &Arc<Model>, on: MoePredict) -> Context {
    predict_ctx_forced(model, on, None)
}

/// [`predict_ctx`] routing by `forced`.
fn predict_ctx_forced(
    model: &Arc<Model>,
    on: MoePredict,
    forced: Option<Arc<ForcedRouting>>,
) -> Context {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 512,
        n_threads: 2,
        moe: MoeParams {
            cache: MoeCacheParams {
                size: CacheSize::Bytes(bytes_for_all(&model_groups(model)) / 2),
                ..MoeCacheParams::default()
            },
            predict: on,
            forced_routing: forced,
            ..Default::default()
        },
        ..Default::default()
    };
    Context::new(Arc::clone(model), p).expect("context")
}

#[test]
fn predicted_experts_give_cpu_logits_and_exact_accounting() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu = logits(&mut ctx(&load(&fx, None), 0, CacheSize::Off), &fx);
        let model = load(&fx, Some("SIM0"));
        for on in [MoePredict::Off, MoePredict::Router, MoePredict::History] {
            let mut c = predict_ctx(&model, on);
            let got = logits(&mut c, &fx);
            assert!(
                same_bits(&got, &cpu),
                "{name} predict {on}: logits differ from CPU"
            );
            c.moe_cache_verify().expect("banks agree with the maps");
            let Some(p) = c.predict_stats() else {
                assert_eq!(on, MoePredict::Off, "{name}: no prediction state");
                continue;
            };
            let n_moe = model_groups(&model)
                .iter()
                .map(|g| g.layers.len())
                .sum::<usize>();
            // deepseek2 and gpt-oss route through their own blocks, which
            // do not build the router's guess (yet); the history predictor
            // needs no graph node
            if on == MoePredict::Router
                && (n_moe < 2 || name.contains("deepseek2") || name.contains("gptoss"))
            {
                assert_eq!(p.bytes, 0);
                continue;
            }
            assert!(p.layers > 0, "{name} {on}: nothing predicted");
            assert!(p.experts_correct <= p.experts_needed);
            assert!(p.experts_correct <= p.experts_predicted);
            assert_eq!(p.bytes_used + p.bytes_wasted, p.bytes, "{name}");
            // critical path + used + wasted = uploaded
            let cs = c.moe_cache_stats().expect("cache").total();
            let t = c.stats();
            assert_eq!(
                t.h2d_bytes_experts,
                cs.bytes_uploaded + p.bytes + c.expert_copy_stats().bytes,
                "{name}"
            );
        }
    }
}

/// Routing that cycles through 4 sets of experts, each layer one set
/// ahead of the layer before: the history predictor learns the transitions
/// and guesses sets the cache (half the experts) no longer holds.
fn cycling_routing(model: &Arc<Model>) -> Arc<ForcedRouting> {
    let header = TraceHeader::from_model(model);
    let (n_moe, ne, nu) = (
        header.layers.len(),
        header.n_expert as usize,
        header.n_expert_used as usize,
    );
    assert!(
        4 * nu <= ne,
        "4 sets of {nu} experts need {ne} >= {}",
        4 * nu
    );
    let tokens: Vec<Vec<Vec<u32>>> = (0..64)
        .map(|t| {
            (0..n_moe)
                .map(|j| {
                    let k = (t + j) % 4;
                    (0..nu).map(|i| (k * nu + i) as u32).collect()
                })
                .collect()
        })
        .collect();
    let trace = Trace::from_tokens(header, &tokens);
    Arc::new(ForcedRouting::new(&trace, model).expect("forced"))
}

#[test]
fn predicted_uploads_respect_the_timeline() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-q4_k"));
    let model = load(&fx, Some("SIM0"));
    let clock = model
        .device
        .as_ref()
        .and_then(|d| ggml_core::SimClock::of(d.as_ref()))
        .expect("a sim clock");
    for (on, forced) in [
        (MoePredict::Router, None),
        (MoePredict::History, Some(cycling_routing(&model))),
    ] {
        let mut c = predict_ctx_forced(&model, on, forced);
        c.decode(&fx.tokens, true).expect("prompt");
        clock.set_recording(true);
        let _ = clock.take_timeline();
        for &t in &fx.gen[..6] {
            c.decode(&[t], false).expect("decode");
        }
        let tl = clock.take_timeline();
        clock.set_recording(false);
        assert!(
            tl.spans.iter().any(|s| s.name.starts_with("predict layer")),
            "{on}: no predicted upload recorded"
        );
        tl.check_hazards().unwrap();
        let p = c.predict_stats().expect("predict");
        assert!(p.bytes > 0, "{on}");
        if on == MoePredict::History {
            // the transitions are learned: most early uploads are used
            assert!(p.bytes_used > p.bytes_wasted, "{p:?}");
        }
    }
}
