//! `--fit` against measured peaks: for three synthetic model sizes and
//! three device memory sizes each, the plan is applied (layer split, host
//! experts, cache budget), the model loaded on a sim device with that
//! capacity, a short prompt and a few tokens decoded with the expert cache
//! on, and the device's measured peak memory must be at most its size. A
//! device too small for the dense weights gets the error naming the
//! shortfall.

use std::sync::Arc;

use ggml_core::gguf::GgufFile;
use ggml_core::{GgmlType, SimBackend};
use llama::fit::{plan, FitDevice, FitModel, FitParams, FitPlan};
use llama::moe_cache::{CacheSize, MoeCacheParams};
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};
use synth::{synthesize, SynthParams};

const MIB: u64 = 1 << 20;
const N_CTX: usize = 256;

fn synth_file(n_layer: usize, n_expert: usize, n_embd: usize, n_ff_exp: usize) -> Vec<u8> {
    let p = SynthParams {
        n_layer,
        n_expert,
        n_expert_used: 4,
        n_embd,
        n_ff_exp,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 32,
        n_merges: 32,
        ty: GgmlType::Q8_0,
        seed: 11,
        ..SynthParams::default_model()
    };
    synthesize(&p, &mut |_| {})
        .expect("synthesize")
        .to_bytes()
        .expect("bytes")
}

fn params(n_ubatch: usize) -> FitParams {
    FitParams {
        n_ctx: N_CTX,
        n_ubatch,
        ..FitParams::default()
    }
}

/// Apply `plan` to a placement (one device).
fn placement(pl: &FitPlan) -> Placement {
    let mut p = Placement::default();
    if let Some(r) = pl.override_rule() {
        p.overrides.push(r);
    }
    p
}

/// Load with `pl` on a sim device of `mem` bytes, decode a prompt and a few
/// tokens with the cache on; the measured peak of the device's memory and
/// the scheduler's compute memory on it.
fn run(bytes: &[u8], pl: &FitPlan, mem: u64, n_ubatch: usize) -> Result<(u64, u64), String> {
    let sim = SimBackend::new(0, 2).with_memory_capacity(mem as usize);
    let account = Arc::clone(sim.memory_account());
    let file = GgufFile::from_bytes(bytes.to_vec()).map_err(|e| e.to_string())?;
    let model = Model::from_gguf(
        file,
        ModelParams {
            device: Some(Arc::new(sim)),
            placement: placement(pl),
            ..Default::default()
        },
    )
    .map_err(|e| format!("load: {e}"))?;
    let cache = pl.devices[0].cache;
    let cp = ContextParams {
        n_ctx: N_CTX,
        n_batch: N_CTX,
        n_ubatch,
        n_threads: 2,
        moe_cache: MoeCacheParams {
            size: if cache > 0 {
                CacheSize::Bytes(cache)
            } else {
                CacheSize::Off
            },
            ..MoeCacheParams::default()
        },
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::new(model), cp).map_err(|e| format!("context: {e}"))?;
    let prompt = ctx
        .tokenize(
            &"Once upon a time there was a cache. ".repeat(6),
            true,
            false,
        )
        .map_err(|e| e.to_string())?;
    if prompt.len() < 64 {
        return Err(format!("a prompt of {} tokens: too short", prompt.len()));
    }
    ctx.decode(&prompt, false)
        .map_err(|e| format!("prompt: {e}"))?;
    let mut tok = llama::sampling::argmax(ctx.logits(0).ok_or("no logits")?);
    for _ in 0..6 {
        ctx.decode(&[tok], false)
            .map_err(|e| format!("decode: {e}"))?;
        tok = llama::sampling::argmax(ctx.logits(0).ok_or("no logits")?);
    }
    let compute: u64 = ctx
        .compute_buffer_sizes()
        .iter()
        .filter(|(b, _)| b == "SIM0")
        .map(|(_, n)| *n as u64)
        .sum();
    Ok((account.peak() as u64, compute))
}

#[test]
fn fit_plans_stay_within_the_measured_peak_on_one_device() {
    // (layers, experts, embedding, expert FFN width)
    // (layers, experts, embedding, expert FFN width, ubatch): the last
    // ubatch is large enough for the device to copy host experts in
    let shapes = [
        (2, 32, 128, 256, 16),
        (4, 64, 128, 256, 16),
        (4, 32, 256, 256, 64),
    ];
    let mut rows = Vec::new();
    for &(nl, ne, embd, ff, ub) in &shapes {
        let bytes = synth_file(nl, ne, embd, ff);
        let file = GgufFile::from_bytes(bytes.clone()).expect("parse");
        let fm = FitModel::from_gguf(&file, GgmlType::F16, GgmlType::F16).expect("fit model");
        // the three sizes: everything on the device; some experts on the
        // device and a cache; only the dense part, every expert in host
        // memory with a small cache
        let huge = plan(&fm, &[dev(1 << 40)], &params(ub)).expect("plan");
        let all = huge.devices[0].total();
        let host = FitParams {
            cpu_moe: true,
            ..params(ub)
        };
        let d = &plan(&fm, &[dev(1 << 40)], &host).expect("plan").devices[0];
        let dense = d.total() - d.cache;
        let experts = huge.devices[0].experts;
        let sizes = [
            all + all / 8,
            dense + dense / 8 + experts / 2,
            dense + dense / 8 + experts / 8,
        ];
        for mem in sizes {
            let pl = plan(&fm, &[dev(mem)], &params(ub)).unwrap_or_else(|e| {
                panic!("{nl}x{ne}x{embd}x{ff} on {mem} bytes: {e}");
            });
            let d = &pl.devices[0];
            let (peak, compute) = run(&bytes, &pl, mem, ub)
                .unwrap_or_else(|e| panic!("{nl}x{ne}x{embd}x{ff} on {mem} B:\n{}{e}", pl.table()));
            rows.push(format!(
                "{nl} layers x {ne} experts, embd {embd}, ff {ff}, -ub {ub}: device {:.2} MiB, planned {:.2} MiB (compute {:.2} est., {:.2} measured; cache {:.2}; host-expert layers {}), measured peak {:.2} MiB",
                mem as f64 / MIB as f64,
                d.total() as f64 / MIB as f64,
                d.compute as f64 / MIB as f64,
                compute as f64 / MIB as f64,
                d.cache as f64 / MIB as f64,
                d.host_expert_layers.len(),
                peak as f64 / MIB as f64
            ));
            assert!(peak <= mem, "peak {peak} > device {mem}\n{}", pl.table());
            assert!(
                compute <= d.compute,
                "compute memory {compute} above the estimate {}\n{}",
                d.compute,
                pl.table()
            );
        }
    }
    for r in &rows {
        println!("{r}");
    }
}

#[test]
fn too_small_a_device_gets_the_shortfall() {
    let bytes = synth_file(2, 8, 128, 128);
    let file = GgufFile::from_bytes(bytes).expect("parse");
    let fm = FitModel::from_gguf(&file, GgmlType::F16, GgmlType::F16).expect("fit model");
    let e = plan(&fm, &[dev(MIB / 2)], &params(16))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing") && e.contains("MiB on SIM0"), "{e}");
}

fn dev(free: u64) -> FitDevice {
    FitDevice {
        name: "SIM0".into(),
        free,
    }
}
