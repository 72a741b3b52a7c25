//! Running the tests: check every test before the first one runs, load a
//! model only when a model-scope parameter changes, then per test a fresh
//! context, a warm-up run (as llama.cpp: the prompt once, one generated
//! token), and `-r` timed repetitions, each after clearing the cache and
//! refilling `-d` tokens of depth (untimed).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use ggml_core::GgmlType;
use llama::{Context, ContextParams, Model};

use crate::bench::args::Params;
use crate::bench::fields::{
    host_cache_given, CacheFields, HostCacheFields, ModelInfo, SimStats, TestResult, Traffic,
};
use crate::bench::matrix::{instances, Instance};
use crate::bench::model_desc::model_desc;
use crate::bench::output::{printer, Plan, Printer};
use crate::bench::overrides;
use crate::bench::params::host_cache_mib_of;
use crate::bench::sysinfo;
use common::cli::{self, Loaded, PlacementArgs};
use llama::moe_cache::prefetch::{AutoPrefetch, PrefetchSlots};
use llama::moe_cache::{CacheSize, MoeCacheParams};
use llama::MoeParams;

const TOOL: &str = "llama-bench";

/// The placement flags of a test (what `cli::load_model` takes).
// `..Default::default()` keeps this building when cli.rs gains flags
#[allow(clippy::needless_update)]
pub fn placement_args(inst: &Instance, no_expert_copy: bool, rpc: Option<&str>) -> PlacementArgs {
    let dev = inst.device();
    let min_batch = if inst.bool("no_op_offload") {
        i64::MAX as usize
    } else {
        inst.int("offload_min_batch").max(1) as usize
    };
    PlacementArgs {
        device: dev.map(str::to_string),
        // without a device every weight is in host memory whatever -ngl
        // says (-rpc without -dev: every RPC device)
        n_gpu_layers: (dev.is_some() || rpc.is_some()).then(|| inst.int("n_gpu_layers")),
        rpc: rpc.map(str::to_string),
        override_tensor: overrides::rules(inst.str("tensor_buft_overrides")),
        cpu_moe: inst.bool("cpu_moe"),
        n_cpu_moe: Some(inst.int("n_cpu_moe").max(0) as usize),
        no_expert_copy,
        offload_min_batch: min_batch,
        sim_profile: inst
            .on_sim_device()
            .then(|| inst.str("sim_profile").to_string()),
        sim_mem_mib: Some(inst.str("sim_mem_mib"))
            .filter(|m| *m != "none")
            .map(str::to_string),
        load_mode: crate::bench::params::load_mode_of(inst.str("load_mode")),
        split_mode: Some(inst.str("split_mode").to_string()),
        // llama-bench's 0 (all zero): no split given
        tensor_split: Some(inst.str("tensor_split"))
            .filter(|ts| {
                ts.split('/')
                    .any(|v| v.parse::<f64>().is_ok_and(|x| x > 0.0))
            })
            .map(str::to_string),
        main_gpu: Some(inst.int("main_gpu")),
        ..Default::default()
    }
}

fn kv_type(name: &str) -> Result<GgmlType> {
    match llama::kv_cache::KV_CACHE_TYPES
        .iter()
        .find(|t| t.name() == name)
    {
        Some(&t) => Ok(t),
        None => bail!("cache type {name} is not supported (f16, f32, bf16, q8_0, q4_0)"),
    }
}

/// Flash attention of a test as the flags say: `-fa 1`, or `-fa auto`
/// (-1) where a quantized V cache needs it; `run_test` also turns auto on
/// where the CUDA device runs it (`llama::device::flash_attn_auto`).
fn flash_attn_of(inst: &Instance) -> Result<bool> {
    let v = kv_type(inst.str("type_v"))?;
    Ok(match inst.int("flash_attn") {
        1 => true,
        -1 => v.is_quantized(),
        _ => false,
    })
}

/// Errs on the first test that cannot run, before anything runs: missing
/// model files, devices that do not open, `-ot` backends not in use, cache
/// types the KV cache cannot hold.
pub fn check(p: &Params, insts: &[Instance]) -> Result<()> {
    for m in p.list("model_filename") {
        if !m.str().is_empty() {
            cli::check_model_path(std::path::Path::new(m.str()))?;
        }
    }
    let mut devices: Vec<&str> = insts.iter().filter_map(Instance::device).collect();
    devices.dedup();
    for d in devices {
        let names = cli::parse_device_list(d)?;
        let rpc = PlacementArgs {
            rpc: p.rpc.clone(),
            ..Default::default()
        }
        .rpc_devices(1)?;
        let opts = llama::device::DeviceOptions {
            rpc,
            ..Default::default()
        };
        llama::device::open_devices(&names, &opts).map_err(|e| anyhow::anyhow!("-dev {d}: {e}"))?;
    }
    for inst in insts {
        let names = match inst.device() {
            Some(d) => cli::parse_device_list(d)?,
            None => Vec::new(),
        };
        placement_args(inst, p.no_expert_copy, p.rpc.as_deref())
            .placement(&names)
            .with_context(|| format!("devices {}", inst.str("devices")))?;
        kv_type(inst.str("type_k"))?;
        let v = kv_type(inst.str("type_v"))?;
        if v.is_quantized() && !flash_attn_of(inst)? {
            bail!("-ctv {v}: V cache quantization requires flash attention (-fa 1 or auto)");
        }
    }
    Ok(())
}

struct Out {
    printer: Box<dyn Printer>,
    stderr: bool,
}

impl Out {
    fn emit(&self, s: &str) -> Result<()> {
        if s.is_empty() {
            return Ok(());
        }
        if self.stderr {
            let mut e = std::io::stderr().lock();
            e.write_all(s.as_bytes())?;
            e.flush()?;
        } else {
            let mut o = std::io::stdout().lock();
            o.write_all(s.as_bytes())?;
            o.flush()?;
        }
        Ok(())
    }
}

/// Run every test of `p`, printing as it goes.
pub fn run(p: &Params) -> Result<()> {
    let insts = instances(p);
    if insts.is_empty() {
        bail!("no tests: every -p, -n and -pg value is 0");
    }
    check(p, &insts)?;
    let mut outs: Vec<Out> = [(p.output, false), (p.output_err, true)]
        .into_iter()
        .filter_map(|(f, stderr)| printer(f).map(|printer| Out { printer, stderr }))
        .collect();
    let plan = Plan {
        params: p,
        instances: &insts,
    };
    for o in &mut outs {
        let h = o.printer.header(&plan);
        o.emit(&h)?;
    }
    let mut loaded: Option<(Instance, Loaded, ModelInfo)> = None;
    let n = insts.len();
    for (k, inst) in insts.iter().enumerate() {
        let progress = |what: &str| {
            if p.progress {
                eprintln!("{TOOL}: benchmark {}/{n}: {what}", k + 1);
            }
        };
        progress("starting");
        if !loaded
            .as_ref()
            .is_some_and(|(prev, _, _)| prev.same_model(inst))
        {
            drop(loaded.take()); // free the previous model first
            let (l, info) = load(p, inst)?;
            loaded = Some((inst.clone(), l, info));
        }
        let Some((_, l, info)) = &loaded else {
            bail!("internal error: no model loaded");
        };
        let r = run_test(p, inst, &l.model, info, &progress)?;
        for o in &mut outs {
            let s = o.printer.test(&r);
            o.emit(&s)?;
        }
    }
    for o in &mut outs {
        let f = o.printer.footer();
        o.emit(&f)?;
    }
    Ok(())
}

fn load(p: &Params, inst: &Instance) -> Result<(Loaded, ModelInfo)> {
    let mut pa = placement_args(inst, p.no_expert_copy, p.rpc.as_deref());
    let path = match inst.str("model_filename") {
        "" => None,
        m => Some(std::path::PathBuf::from(m)),
    };
    // the host expert cache reads the experts from the file: map it lazily
    cli::host_cache_load_mode(
        host_cache_mib_of(inst.str("moe_host_cache_mib")),
        &mut pa,
        path.as_deref(),
    );
    let threads = inst.int("n_threads").max(1) as usize;
    let l = cli::load_model(TOOL, path.as_deref(), &pa, threads)?;
    if p.verbose {
        eprintln!("{TOOL}: placement: {}", cli::placement_summary(&l.model));
        eprint!("{}", cli::placement_table(&l.model));
    }
    let dev = inst.device();
    let info = ModelInfo {
        filename: match &path {
            Some(m) => m.display().to_string(),
            None => l.path.display().to_string(),
        },
        model_type: model_desc(&l.model),
        size: l.model.size_bytes() as u64,
        n_params: l.model.n_params(),
        backends: match (dev, &p.rpc) {
            (Some(d), _) => sysinfo::backend_kind(d),
            (None, Some(_)) => "RPC".into(),
            (None, None) => "CPU".into(),
        },
        gpu_info: dev.map(sysinfo::devices_description).unwrap_or_default(),
    };
    Ok((l, info))
}

/// xorshift64* for the random tokens (llama.cpp uses `rand()`).
struct Rng(u64);

impl Rng {
    fn token(&mut self, n_vocab: usize) -> i32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n_vocab.max(1) as u64) as i32
    }
}

/// llama.cpp's `test_prompt`: `n` tokens in batches of `n_batch`, the first
/// BOS where the vocabulary adds one.
fn test_prompt(ctx: &mut Context, n: usize, n_batch: usize, rng: &mut Rng) -> Result<()> {
    let model = Arc::clone(ctx.model());
    let n_vocab = model.hparams.n_vocab;
    let bos = model.tokenizer.bos().filter(|_| model.tokenizer.add_bos());
    let mut done = 0;
    while done < n {
        let len = (n - done).min(n_batch);
        let batch: Vec<i32> = (0..len)
            .map(|i| match bos {
                Some(b) if done == 0 && i == 0 => b,
                _ => rng.token(n_vocab),
            })
            .collect();
        ctx.decode(&batch, false)
            .context("failed to decode a prompt batch")?;
        done += len;
    }
    Ok(())
}

/// llama.cpp's `test_gen`: `n` decodes of one token each.
fn test_gen(ctx: &mut Context, n: usize, rng: &mut Rng) -> Result<()> {
    let model = Arc::clone(ctx.model());
    let n_vocab = model.hparams.n_vocab;
    let mut tok = match model.tokenizer.bos().filter(|_| model.tokenizer.add_bos()) {
        Some(b) => b,
        None => rng.token(n_vocab),
    };
    for _ in 0..n {
        ctx.decode(&[tok], false)
            .context("failed to decode a generation token")?;
        tok = rng.token(n_vocab);
    }
    Ok(())
}

fn run_test(
    p: &Params,
    inst: &Instance,
    model: &Arc<Model>,
    info: &ModelInfo,
    progress: &dyn Fn(&str),
) -> Result<TestResult> {
    let (np, ng, nd) = (
        inst.n_prompt as usize,
        inst.n_gen as usize,
        inst.int("n_depth") as usize,
    );
    let n_batch = inst.int("n_batch") as usize;
    let (host_cache, host_line) = cli::host_cache_for(
        host_cache_mib_of(inst.str("moe_host_cache_mib")),
        inst.str("moe_host_cache_policy"),
        model,
    )?;
    if let Some(l) = host_line {
        eprintln!("{TOOL}: {l}");
    }
    let params = ContextParams {
        n_ctx: (np + ng + nd).max(1),
        n_batch,
        n_ubatch: inst.int("n_ubatch") as usize,
        n_threads: inst.int("n_threads") as usize,
        kv_type: kv_type(inst.str("type_k"))?,
        kv_type_v: Some(kv_type(inst.str("type_v"))?),
        flash_attn: flash_attn_of(inst)?
            || (inst.int("flash_attn") == -1
                && llama::device::flash_attn_auto(
                    model,
                    kv_type(inst.str("type_k"))?,
                    kv_type(inst.str("type_v"))?,
                )),
        moe: MoeParams {
            expert_copy: !p.no_expert_copy,
            cache: MoeCacheParams {
                // -nopo keeps every op on host weights on the CPU: no cache
                size: if p.no_expert_copy || inst.bool("no_op_offload") {
                    CacheSize::Off
                } else {
                    inst.str("moe_cache_mib").parse().map_err(|e| {
                        anyhow::anyhow!("--moe-cache-mib {}: {e}", inst.str("moe_cache_mib"))
                    })?
                },
                policy: inst.str("moe_cache_policy").parse().map_err(|e| {
                    anyhow::anyhow!("--moe-cache-policy {}: {e}", inst.str("moe_cache_policy"))
                })?,
                max_batch: inst.int("moe_cache_max_batch").max(1) as usize,
            },
            hybrid: match inst.str("moe_hybrid") {
                "off" => None,
                _ => Some(inst.str("moe_cache_cpu_share").parse().map_err(|e| {
                    anyhow::anyhow!(
                        "--moe-cache-cpu-share {}: {e}",
                        inst.str("moe_cache_cpu_share")
                    )
                })?),
            },
            prefetch: PrefetchSlots::from_count(
                inst.int("prefetch_experts_slots"),
                AutoPrefetch {
                    selective: inst.int("prefetch_selective") != 0,
                    force: (inst.int("prefetch_selective") == 2)
                        .then_some(llama::moe_cache::prefetch::auto::Choice::Selective),
                },
            )?,
            predict: match inst.int("moe_predict") {
                1 => llama::moe_cache::predict::MoePredict::Router,
                2 => llama::moe_cache::predict::MoePredict::History,
                _ => llama::moe_cache::predict::MoePredict::Off,
            },
            forced_routing: match &p.expert_trace_in {
                Some(path) => Some(Arc::new(common::forced::load(path, model)?)),
                None => None,
            },
            host_cache,
            ..Default::default()
        },
        ..ContextParams::default()
    };
    let mut ctx = Context::new(Arc::clone(model), params).with_context(|| {
        format!(
            "failed to create the context (--moe-cache-mib {})",
            inst.str("moe_cache_mib")
        )
    })?;
    if let Some(n) = ctx.host_cache_note() {
        eprintln!("{TOOL}: warning: {n}");
    }
    let test_time = sysinfo::iso_now();
    if p.delay > 0 {
        std::thread::sleep(Duration::from_secs(p.delay));
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    if !p.no_warmup {
        if np > 0 {
            progress("warmup prompt run");
            test_prompt(&mut ctx, np, n_batch, &mut rng)?;
        }
        if ng > 0 {
            progress("warmup generation run");
            test_gen(&mut ctx, 1, &mut rng)?;
        }
    }
    let mut samples_ns = Vec::with_capacity(p.reps);
    let mut traffic = Traffic::default();
    let mut cache: Option<CacheFields> = None;
    let mut host = HostCacheFields::default();
    let clock = ctx.sim_clock();
    let mut sim = clock.as_ref().map(|c| SimStats {
        profile: c.profile().name.clone(),
        ..SimStats::default()
    });
    if let (Some(c), Some(_)) = (&clock, &p.timeline_out) {
        // the timeline of the last repetition (each one starts it anew)
        c.set_recording(true);
    }
    for rep in 1..=p.reps {
        ctx.clear();
        if nd > 0 {
            progress(&format!("depth run {rep}/{}", p.reps));
            test_prompt(&mut ctx, nd, n_batch, &mut rng)?;
        }
        ctx.reset_stats();
        if p.expert_trace_out.is_some() {
            ctx.start_expert_trace(); // each repetition starts it anew
        }
        if let (Some(c), Some(_)) = (&clock, &p.timeline_out) {
            c.take_timeline();
        }
        let sim0 = clock.as_ref().map(|c| c.totals());
        let t0 = Instant::now();
        if np > 0 {
            progress(&format!("prompt run {rep}/{}", p.reps));
            test_prompt(&mut ctx, np, n_batch, &mut rng)?;
        }
        if ng > 0 {
            progress(&format!("generation run {rep}/{}", p.reps));
            test_gen(&mut ctx, ng, &mut rng)?;
        }
        samples_ns.push((t0.elapsed().as_nanos() as u64).max(1));
        if let (Some(c), Some(s0), Some(sim)) = (&clock, sim0, sim.as_mut()) {
            let d = c.totals().since(&s0);
            let r = p.reps as f64;
            sim.avg_ts += (np + ng) as f64 / (d.now_ns.max(1) as f64 / 1e9) / r;
            sim.link_busy_s += d.link_busy_ns as f64 / 1e9 / r;
            sim.device_busy_s += d.device_busy_ns as f64 / 1e9 / r;
            sim.link_hidden_s += d.link_hidden_ns as f64 / 1e9 / r;
        }
        let st = ctx.stats();
        let n_tok = (np + ng) as f64 * p.reps as f64;
        traffic.experts += st.h2d_bytes_experts as f64 / n_tok;
        traffic.full_copy += st.h2d_bytes_full_copy as f64 / n_tok;
        traffic.other += st.h2d_bytes_other as f64 / n_tok;
        traffic.experts_copied += st.experts_copied as f64 / n_tok;
        if let Some(h) = ctx.host_cache_stats() {
            let r = p.reps as f64;
            host.hit_rate += h.hit_rate() / r;
            host.disk_bytes_per_token += h.disk.bytes as f64 / ((np + ng) as f64 * r);
            host.disk_read_rate += h.disk.read_rate() / r;
            host.read_p50_us += h.disk.latency_quantile(0.5) * 1e6 / r;
            host.read_p99_us += h.disk.latency_quantile(0.99) * 1e6 / r;
        }
        if let Some(c) = ctx.moe_cache_stats() {
            let t = c.total();
            let r = p.reps as f64;
            let f = cache.get_or_insert_with(|| CacheFields {
                budget_mib: c.budget_bytes as f64 / 1048576.0,
                ..CacheFields::default()
            });
            f.hit_rate += t.hit_rate_decode() / r;
            f.hit_rate_prompt += t.hit_rate_prompt() / r;
            f.bytes_uploaded_per_token += t.bytes_uploaded as f64 / ((np + ng) as f64 * r);
            f.experts_cpu.add(t.cpu_prompt, t.cpu_decode, r);
            f.experts_device_cached.add(t.hits_prompt, t.hits_decode, r);
            f.experts_device_uploaded
                .add(t.misses_prompt, t.misses_decode, r);
        }
    }
    if let Some(pf) = ctx.prefetch_stats() {
        let n = pf.auto_none + pf.auto_whole + pf.auto_selective;
        if n > 0 {
            // auto's choices over the repetitions (and the warm-up)
            eprintln!(
                "llama-bench: prefetch auto (slots {}): {} tensor-ubatches none, {} whole, {} selective; prompt guess recall {}, precision {}",
                inst.int("prefetch_experts_slots"),
                pf.auto_none,
                pf.auto_whole,
                pf.auto_selective,
                pf.prediction_recall()
                    .map_or("-".to_string(), |r| format!("{:.1}%", 100.0 * r)),
                pf.prediction_precision()
                    .map_or("-".to_string(), |r| format!("{:.1}%", 100.0 * r)),
            );
        }
    }
    if let (Some(path), Some(t)) = (&p.expert_trace_out, ctx.take_expert_trace()) {
        std::fs::write(path, t.to_bytes())
            .with_context(|| format!("--expert-trace-out: cannot write '{}'", path.display()))?;
    }
    if let (Some(c), Some(path)) = (&clock, &p.timeline_out) {
        let t = c.take_timeline();
        c.set_recording(false);
        let title = format!(
            "simulated clock, profile {}, last repetition of {}",
            c.profile().name,
            if np > 0 && ng == 0 {
                format!("pp{np}")
            } else if np == 0 {
                format!("tg{ng}")
            } else {
                format!("pp{np}+tg{ng}")
            }
        );
        std::fs::write(path, t.to_chrome_json(&title))
            .with_context(|| format!("--timeline-out: cannot write '{}'", path.display()))?;
    }
    Ok(TestResult {
        sim,
        cache: inst.device().map(|_| cache.unwrap_or_default()),
        host_cache: host_cache_given(p).then_some(host),
        inst: inst.clone(),
        model: info.clone(),
        test_time,
        samples_ns,
        traffic: inst.device().map(|_| traffic),
        no_expert_copy: p.no_expert_copy,
        given: p.given.clone(),
        forced_routing: p.expert_trace_in.is_some(),
    })
}
