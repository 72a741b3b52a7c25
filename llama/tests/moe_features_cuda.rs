//! The MoE features on CUDA0 (the emulated device without a GPU): the
//! prefetch look-ahead, hybrid experts, decode prediction, each within the
//! fixture's bound and, where the feature must not change the numbers,
//! bit for bit equal to the same device with the feature off; and the
//! expert bytes `--cpu-moe` uploads on CUDA0 equal to SIM0's for the same
//! run. Fixtures: qwen3moe (F32 and Q4_K), deepseek2, gpt-oss.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, same_bits, Fixture};
use llama::device::open_device;
use llama::moe_cache::cache::layout::{bytes_for_all, model_groups};
use llama::moe_cache::hybrid::CpuShare;
use llama::moe_cache::predict::MoePredict;
use llama::moe_cache::prefetch::PrefetchSlots;
use llama::moe_cache::trace::forced::ForcedRouting;
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind};
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};

const FIXTURES: [&str; 4] = [
    "tiny-qwen3moe-f32",
    "tiny-qwen3moe-q4_k",
    "tiny-deepseek2-f32",
    "tiny-gptoss-mxfp4",
];

fn use_emulator_without_gpu() {
    if let Some(why) = ggml_cuda::unavailable_reason() {
        println!("no GPU ({why}): CUDA0 is the emulated device");
        ggml_cuda::emulator::fallback(&why);
    }
}

/// The model with experts in host memory (`--cpu-moe`) on `device`, every
/// batch offloaded (`--offload-min-batch 1`).
fn load(fx: &Fixture, device: &str) -> Arc<Model> {
    let params = ModelParams {
        device: open_device(device, 2, 1).expect("device"),
        placement: Placement {
            cpu_moe: true,
            ..Default::default()
        },
        progress: None,
        ..Default::default()
    };
    Arc::new(Model::load(&fx.gguf, params).expect("load"))
}

fn params() -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 512,
        n_threads: 2,
        ..Default::default()
    }
}

/// Prompt rows, then 4 teacher-forced rows; with the NMSE of each part
/// against the fixture.
fn logits(c: &mut Context, fx: &Fixture) -> (Vec<f32>, f64, f64) {
    let (mut out, forced) = fx.prompt_and_forced(c, 4);
    let prompt = out.len();
    out.extend(forced);
    let p = nmse(&out[..prompt], &fx.logits);
    let f = nmse(&out[prompt..], &fx.genlogits[..out.len() - prompt]);
    (out, p, f)
}

fn within(fx: &Fixture, what: &str, p: f64, f: f64) {
    println!(
        "{} [{what}]: prompt NMSE {p:.2e}, teacher-forced NMSE {f:.2e}",
        fx.name
    );
    assert!(
        p <= fx.bound && f <= fx.bound,
        "{} [{what}]: NMSE {p:.2e} / {f:.2e} > {:.0e}",
        fx.name,
        fx.bound
    );
}

/// What the plain run gives: [`logits`] and the expert bytes uploaded
/// (`h2d_bytes_experts`, `h2d_bytes_full_copy`).
type PlainRun = (Vec<f32>, (u64, u64));

/// The plain `--cpu-moe` run on CUDA0 (every batch offloaded, no prefetch,
/// no cache), which the prefetch test compares with and the upload test
/// counts: run once per fixture for both (whichever test comes first runs
/// it, the other waits for it).
fn cuda0_plain_run(fx: &Fixture) -> Arc<PlainRun> {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    type Cell = Arc<OnceLock<Arc<PlainRun>>>;
    static RUNS: Mutex<BTreeMap<String, Cell>> = Mutex::new(BTreeMap::new());
    let cell = RUNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .entry(fx.name.clone())
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let model = load(fx, "CUDA0");
        let mut c = Context::new(Arc::clone(&model), params()).expect("context");
        let (out, ..) = logits(&mut c, fx);
        let st = c.stats();
        Arc::new((out, (st.h2d_bytes_experts, st.h2d_bytes_full_copy)))
    })
    .clone()
}

#[test]
fn prefetch_on_cuda0_changes_no_logit() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, "CUDA0");
        let plain = cuda0_plain_run(&fx);
        let base = &plain.0;
        for slots in [1, 3] {
            let mut cp = params();
            cp.moe.prefetch = PrefetchSlots::fixed(slots);
            cp.moe.cache.max_batch = 1;
            let mut c = Context::new(Arc::clone(&model), cp).expect("context");
            let (got, p, f) = logits(&mut c, &fx);
            within(&fx, &format!("prefetch {slots} slots"), p, f);
            assert!(same_bits(&got, base), "{name}: prefetch changed the logits");
            // every fixture's experts have CUDA kernels (gpt-oss's MXFP4
            // included), so each one stages experts
            let st = c.prefetch_stats().expect("staging");
            assert!(st.bytes > 0 && st.bytes_used > 0, "{name}: {st:?}");
        }
    }
}

#[test]
fn hybrid_experts_on_cuda0_within_the_bound() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, "CUDA0");
        let g = &model_groups(&model)[0];
        let bytes = g.bank_bytes(g.n_expert * g.layers.len() as u32 / 2);
        for share in [CpuShare::Fixed(0.5), CpuShare::Auto] {
            let mut cp = params();
            cp.n_ubatch = 5;
            cp.moe.cache = MoeCacheParams {
                size: CacheSize::Bytes(bytes),
                policy: PolicyKind::Lru,
                max_batch: 32,
            };
            cp.moe.hybrid = Some(share);
            let mut c = Context::new(Arc::clone(&model), cp).expect("context");
            let (_, p, f) = logits(&mut c, &fx);
            within(&fx, &format!("hybrid {share:?}"), p, f);
            let t = c.moe_cache_stats().expect("a cache").total();
            if share == CpuShare::Fixed(0.5) {
                assert!(t.cpu() > 0, "{name}: the CPU computed no expert: {t:?}");
            }
            c.moe_cache_verify().expect("banks agree with the maps");
        }
    }
}

#[test]
fn moe_predict_on_cuda0_changes_no_logit() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, "CUDA0");
        let mut outs = Vec::new();
        for on in [MoePredict::Off, MoePredict::Router, MoePredict::History] {
            let mut cp = params();
            cp.moe.cache = MoeCacheParams {
                size: CacheSize::Bytes(bytes_for_all(&model_groups(&model)) / 2),
                ..MoeCacheParams::default()
            };
            cp.moe.predict = on;
            let mut c = Context::new(Arc::clone(&model), cp).expect("context");
            let (got, p, f) = logits(&mut c, &fx);
            within(&fx, &format!("--moe-predict {on}"), p, f);
            c.moe_cache_verify().expect("banks agree with the maps");
            outs.push(got);
        }
        for (o, on) in outs[1..].iter().zip(["router", "history"]) {
            assert!(
                same_bits(&outs[0], o),
                "{name}: the {on} prediction changed the logits"
            );
        }
    }
}

/// Forced routing on CUDA0 (its ids are device inputs there, uploaded
/// before the compute that reads them): the model's own routing, recorded
/// and forced back with the cache and the history prediction on, gives the
/// same logits bit for bit and the same routing.
#[test]
fn forced_own_routing_on_cuda0_changes_no_logit() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(&fx, "CUDA0");
        let run = |forced: Option<ForcedRouting>| {
            let mut cp = params();
            cp.moe.cache = MoeCacheParams {
                size: CacheSize::Bytes(bytes_for_all(&model_groups(&model)) / 2),
                ..MoeCacheParams::default()
            };
            cp.moe.predict = MoePredict::History;
            cp.moe.forced_routing = forced.map(Arc::new);
            let mut c = Context::new(Arc::clone(&model), cp).expect("context");
            c.start_expert_trace();
            let (got, p, f) = logits(&mut c, &fx);
            within(&fx, "forced routing", p, f);
            c.moe_cache_verify().expect("banks agree with the maps");
            (got, c.take_expert_trace().expect("trace"))
        };
        let (want, trace) = run(None);
        let forced = ForcedRouting::new(&trace, &model).expect("forced");
        let (got, again) = run(Some(forced));
        assert!(
            same_bits(&want, &got),
            "{name}: its own routing forced back on CUDA0 changed the logits"
        );
        assert_eq!(again, trace, "{name}: the routing");
    }
}

#[test]
fn cpu_moe_uploads_the_expert_bytes_sim0_uploads() {
    use_emulator_without_gpu();
    for name in FIXTURES {
        let fx = or_skip!(Fixture::load(name), continue);
        let mut seen = Vec::new();
        let model = load(&fx, "SIM0");
        let mut c = Context::new(Arc::clone(&model), params()).expect("context");
        let _ = logits(&mut c, &fx);
        let st = c.stats();
        seen.push((st.h2d_bytes_experts, st.h2d_bytes_full_copy));
        seen.push(cuda0_plain_run(&fx).1);
        println!(
            "{name}: experts uploaded SIM0 {} B, CUDA0 {} B (full copies {} / {} B)",
            seen[0].0, seen[1].0, seen[0].1, seen[1].1
        );
        assert!(seen[0].0 > 0, "{name}: nothing uploaded");
        assert_eq!(
            seen[0], seen[1],
            "{name}: CUDA0 and SIM0 upload differently"
        );
    }
}

/// What one `--cpu-moe` run with the host weights pinned (the default) or
/// pageable (`--no-host`) gave, measured in a child process of this test
/// binary (so the emulator's per-device counts are its own).
#[derive(Debug)]
struct HostWeightsRun {
    pinned: bool,
    emulated: bool,
    /// The emulator's counts over the decodes (zero on a GPU).
    pinned_bytes: u64,
    pageable_bytes: u64,
    pageable_copies: u64,
    host_blocked_ns: u64,
    /// CUDA0's event timeline: nanoseconds of host-to-device copies, and of
    /// those while a kernel ran.
    h2d_ns: u64,
    h2d_during_kernels_ns: u64,
    /// FNV-1a of the logits' bits.
    logits_hash: u64,
}

/// The emulated host-to-device link of the host-weights runs (MB/s): slow
/// enough that an upload spans kernels, so blocking and overlap both show.
const HOST_WEIGHTS_MBPS: u64 = 200;
const HOST_WEIGHTS_CHILD: &str = "GGML_RS_HOST_WEIGHTS_CHILD";

/// The child's side: load with `no_host`, decode the prompt and 4 forced
/// tokens with the event timeline on, print one `host-weights-run` line.
fn host_weights_child(fx: &Fixture, no_host: bool) {
    use_emulator_without_gpu();
    let emulated = ggml_cuda::emulator::enabled();
    if emulated {
        let mut c = ggml_cuda::emulator::config();
        c.h2d_bytes_per_s = Some(HOST_WEIGHTS_MBPS * 1_000_000);
        ggml_cuda::emulator::set_thread_config(Some(c));
    }
    let mp = ModelParams {
        device: open_device("CUDA0", 2, 1).expect("device"),
        placement: Placement {
            cpu_moe: true,
            ..Default::default()
        },
        no_host,
        progress: None,
        ..Default::default()
    };
    let model = Arc::new(Model::load(&fx.gguf, mp).expect("load"));
    let dev = model.device.clone().expect("CUDA0");
    let mut c = Context::new(Arc::clone(&model), params()).expect("context");
    let before = ggml_cuda::emulator::stats(0);
    let diag = dev.diagnostics().expect("CUDA0 keeps diagnostics");
    assert!(diag.set_event_timeline(true), "CUDA0 records events");
    let (out, ..) = logits(&mut c, fx);
    let tl = diag
        .take_event_timeline()
        .expect("timeline")
        .expect("recorded");
    let after = ggml_cuda::emulator::stats(0);
    let merged = |kind: ggml_core::timeline::SpanKind| {
        let mut v: Vec<(u64, u64)> = tl
            .spans
            .iter()
            .filter(|s| s.kind == kind)
            .map(|s| (s.start_ns, s.end_ns))
            .collect();
        v.sort_unstable();
        let mut m: Vec<(u64, u64)> = Vec::new();
        for (s, e) in v {
            match m.last_mut() {
                Some(l) if s <= l.1 => l.1 = l.1.max(e),
                _ => m.push((s, e)),
            }
        }
        m
    };
    let h2d = merged(ggml_core::timeline::SpanKind::CopyH2D);
    let ops = merged(ggml_core::timeline::SpanKind::Op);
    let bits: Vec<u8> = out.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect();
    println!(
        "host-weights-run pinned={} emulated={emulated} pinned_bytes={} pageable_bytes={} pageable_copies={} host_blocked_ns={} h2d_ns={} h2d_during_kernels_ns={} logits_hash={}",
        model.host_pinned,
        after.h2d_pinned_bytes - before.h2d_pinned_bytes,
        after.h2d_pageable_bytes - before.h2d_pageable_bytes,
        after.h2d_pageable_copies - before.h2d_pageable_copies,
        after.host_blocked_ns - before.host_blocked_ns,
        h2d.iter().map(|(s, e)| e - s).sum::<u64>(),
        ggml_core::timeline::overlap_ns(&h2d, &ops),
        ggml_cuda::shipped::fnv1a64(&bits),
    );
}

/// Runs [`host_weights_child`] in a child process and parses its line.
fn host_weights_run(no_host: bool) -> HostWeightsRun {
    let exe = std::env::current_exe().expect("this test binary");
    let o = std::process::Command::new(exe)
        .args([
            "--exact",
            "expert_uploads_are_pinned_by_default_and_pageable_with_no_host",
            "--nocapture",
        ])
        .env(
            HOST_WEIGHTS_CHILD,
            if no_host { "pageable" } else { "pinned" },
        )
        .output()
        .expect("the child runs");
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "child (no_host {no_host}) failed:\n{text}"
    );
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("host-weights-run "))
        .unwrap_or_else(|| panic!("no host-weights-run line:\n{text}"));
    let field = |k: &str| -> String {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {line}"))
            .to_string()
    };
    let num = |k: &str| field(k).parse::<u64>().expect("a number");
    HostWeightsRun {
        pinned: field("pinned") == "true",
        emulated: field("emulated") == "true",
        pinned_bytes: num("pinned_bytes"),
        pageable_bytes: num("pageable_bytes"),
        pageable_copies: num("pageable_copies"),
        host_blocked_ns: num("host_blocked_ns"),
        h2d_ns: num("h2d_ns"),
        h2d_during_kernels_ns: num("h2d_during_kernels_ns"),
        logits_hash: num("logits_hash"),
    }
}

/// CUDA computing with experts in host memory uploads them from pinned
/// memory by default (the host weights' span registered), and from
/// pageable memory with `--no-host`; the logits are the same bits. On the
/// emulator, with a link of [`HOST_WEIGHTS_MBPS`] MB/s: each pageable
/// upload blocks the host for at least its link time (as CUDA's staging
/// does), while pinned uploads block nothing and run while kernels run.
#[test]
fn expert_uploads_are_pinned_by_default_and_pageable_with_no_host() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"));
    match std::env::var(HOST_WEIGHTS_CHILD).as_deref() {
        Ok("pinned") => return host_weights_child(&fx, false),
        Ok("pageable") => return host_weights_child(&fx, true),
        _ => {}
    }
    let pinned = host_weights_run(false);
    let pageable = host_weights_run(true);
    println!("default: {pinned:?}\n--no-host: {pageable:?}");
    assert!(pinned.pinned, "the host weights were not pinned by default");
    assert!(!pageable.pinned, "--no-host pinned the host weights");
    assert_eq!(
        pinned.logits_hash, pageable.logits_hash,
        "pinned and pageable uploads gave different logits"
    );
    if !pinned.emulated {
        return;
    }
    let link_ns = |bytes: u64| bytes * 1000 / HOST_WEIGHTS_MBPS;
    // --no-host: the experts' uploads are pageable, and the host waited
    // for each one's link time
    assert!(
        pageable.pageable_bytes > pinned.pageable_bytes,
        "{pageable:?}"
    );
    let expert_bytes = pageable.pageable_bytes - pinned.pageable_bytes;
    assert_eq!(
        pinned.pinned_bytes - pageable.pinned_bytes,
        expert_bytes,
        "the same expert bytes move either way"
    );
    assert!(
        pageable.host_blocked_ns >= link_ns(pageable.pageable_bytes) * 9 / 10,
        "pageable uploads of {} B blocked the host {} ns only: {pageable:?}",
        pageable.pageable_bytes,
        pageable.host_blocked_ns
    );
    // by default: no expert upload is pageable (what is left, and all that
    // blocks the host, are the small inputs: token ids, positions, which
    // wait for the stream to reach them), and the experts' uploads run
    // while kernels run
    assert!(
        pageable.pageable_copies > pinned.pageable_copies
            && pinned.pageable_bytes * 100 < expert_bytes,
        "pinned: {pinned:?}, pageable: {pageable:?}"
    );
    // (no bound between the two runs' blocked times: the small inputs'
    // waits for the stream to reach them grow with the machine's load)
    assert!(
        pinned.h2d_during_kernels_ns > 0,
        "no pinned upload ran while a kernel did: {pinned:?}"
    );
    println!(
        "emulated, {HOST_WEIGHTS_MBPS} MB/s link: --no-host blocked the host {:.1} ms in {} pageable uploads ({} B); pinned (default) {:.1} ms, in its {} small pageable inputs ({} B), its uploads {:.1} ms on the copy stream, {:.1} ms of it while kernels ran",
        pageable.host_blocked_ns as f64 / 1e6,
        pageable.pageable_copies,
        pageable.pageable_bytes,
        pinned.host_blocked_ns as f64 / 1e6,
        pinned.pageable_copies,
        pinned.pageable_bytes,
        pinned.h2d_ns as f64 / 1e6,
        pinned.h2d_during_kernels_ns as f64 / 1e6
    );
}
