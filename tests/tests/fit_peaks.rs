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
use llama::MoeParams;
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

/// Apply `plan` to a placement: the host expert rule, and the layer split
/// over several devices.
fn placement(pl: &FitPlan) -> Placement {
    let mut p = Placement {
        devices: pl.devices.iter().map(|d| d.name.clone()).collect(),
        ..Placement::default()
    };
    if pl.devices.len() > 1 {
        p.tensor_split = pl.tensor_split();
    }
    if let Some(r) = pl.override_rule() {
        p.overrides.push(r);
    }
    p
}

/// Load with `pl` on sim devices of `mems` bytes, decode a prompt and a
/// few tokens with the cache on; each device's measured peak and the
/// scheduler's compute memory on it.
fn run(
    bytes: &[u8],
    pl: &FitPlan,
    mems: &[u64],
    n_ubatch: usize,
) -> Result<Vec<(u64, u64)>, String> {
    let clock = ggml_core::SimClock::new(ggml_core::SimProfile::default_profile());
    let sims: Vec<SimBackend> = mems
        .iter()
        .enumerate()
        .map(|(i, &m)| {
            SimBackend::new(i, 2)
                .with_clock(Arc::clone(&clock))
                .with_memory_capacity(m as usize)
        })
        .collect();
    let accounts: Vec<_> = sims
        .iter()
        .map(|s| Arc::clone(s.memory_account()))
        .collect();
    let file = GgufFile::from_bytes(bytes.to_vec()).map_err(|e| e.to_string())?;
    let model = Model::from_gguf(
        file,
        ModelParams {
            devices: sims
                .into_iter()
                .map(|s| Arc::new(s) as Arc<dyn ggml_core::Backend>)
                .collect(),
            placement: placement(pl),
            ..Default::default()
        },
    )
    .map_err(|e| format!("load: {e}"))?;
    let size = |b: u64| {
        if b > 0 {
            CacheSize::Bytes(b)
        } else {
            CacheSize::Off
        }
    };
    let cache = pl.devices[0].cache;
    let cp = ContextParams {
        n_ctx: N_CTX,
        n_batch: N_CTX,
        n_ubatch,
        n_threads: 2,
        moe: MoeParams {
            cache: MoeCacheParams {
                size: size(cache),
                ..MoeCacheParams::default()
            },
            // each device's planned cache
            cache_sizes: if pl.devices.len() > 1 {
                pl.devices.iter().map(|d| size(d.cache)).collect()
            } else {
                Vec::new()
            },
            ..Default::default()
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
    let sizes = ctx.compute_buffer_sizes();
    Ok(pl
        .devices
        .iter()
        .zip(&accounts)
        .map(|(d, a)| {
            let compute = sizes
                .iter()
                .filter(|(b, _)| *b == d.name)
                .map(|(_, n)| *n as u64)
                .sum();
            (a.peak() as u64, compute)
        })
        .collect())
}

/// (layers, experts, embedding, expert FFN width, ubatch): the last ubatch
/// is large enough for a device to copy host experts in.
const SHAPES: [(usize, usize, usize, usize, usize); 3] = [
    (2, 32, 128, 256, 16),
    (4, 64, 128, 256, 16),
    (4, 32, 256, 256, 64),
];

/// For each shape, three memory sizes per device (everything on the
/// devices; some experts on them and a cache; only the dense part, every
/// expert in host memory with a small cache): plan, run, and check each
/// device's measured peak against its size.
fn check_peaks(n_dev: usize) {
    let names: Vec<String> = (0..n_dev).map(|i| format!("SIM{i}")).collect();
    let devs = |free: u64| -> Vec<FitDevice> {
        names
            .iter()
            .map(|n| FitDevice {
                name: n.clone(),
                free,
            })
            .collect()
    };
    let mut rows = Vec::new();
    for &(nl, ne, embd, ff, ub) in &SHAPES {
        let bytes = synth_file(nl, ne, embd, ff);
        let file = GgufFile::from_bytes(bytes.clone()).expect("parse");
        let fm = FitModel::from_gguf(&file, GgmlType::F16, GgmlType::F16).expect("fit model");
        let largest = |pl: &FitPlan, f: &dyn Fn(&llama::fit::DevicePlan) -> u64| {
            pl.devices.iter().map(f).max().unwrap_or(0)
        };
        let huge = plan(&fm, &devs(1 << 40), &params(ub)).expect("plan");
        let all = largest(&huge, &|d| d.total());
        let experts = largest(&huge, &|d| d.experts);
        let host = FitParams {
            cpu_moe: true,
            ..params(ub)
        };
        let hp = plan(&fm, &devs(1 << 40), &host).expect("plan");
        let dense = largest(&hp, &|d| d.total() - d.cache);
        let sizes = [
            all + all / 8,
            dense + dense / 8 + experts / 2,
            dense + dense / 8 + experts / 8,
        ];
        for mem in sizes {
            let pl = plan(&fm, &devs(mem), &params(ub)).unwrap_or_else(|e| {
                panic!("{nl}x{ne}x{embd}x{ff} on {n_dev} x {mem} bytes: {e}");
            });
            let mems = vec![mem; n_dev];
            let measured = run(&bytes, &pl, &mems, ub).unwrap_or_else(|e| {
                panic!(
                    "{nl}x{ne}x{embd}x{ff} on {n_dev} x {mem} B:\n{}{e}",
                    pl.table()
                )
            });
            for (d, &(peak, compute)) in pl.devices.iter().zip(&measured) {
                rows.push(format!(
                    "{nl} layers x {ne} experts, embd {embd}, ff {ff}, -ub {ub}: {} of {n_dev}: {:.2} MiB, layers {}, planned {:.2} MiB (compute {:.2} est., {:.2} measured; cache {:.2}; host-expert layers {}), measured peak {:.2} MiB",
                    d.name,
                    mem as f64 / MIB as f64,
                    d.n_layers,
                    d.total() as f64 / MIB as f64,
                    d.compute as f64 / MIB as f64,
                    compute as f64 / MIB as f64,
                    d.cache as f64 / MIB as f64,
                    d.host_expert_layers.len(),
                    peak as f64 / MIB as f64
                ));
                assert!(
                    peak <= mem,
                    "{}: peak {peak} > device {mem}\n{}",
                    d.name,
                    pl.table()
                );
                assert!(
                    compute <= d.compute,
                    "{}: compute memory {compute} above the estimate {}\n{}",
                    d.name,
                    d.compute,
                    pl.table()
                );
            }
        }
    }
    for r in &rows {
        println!("{r}");
    }
}

#[test]
fn fit_plans_stay_within_the_measured_peak_on_one_device() {
    check_peaks(1);
}

#[test]
fn fit_plans_stay_within_the_measured_peaks_on_two_devices() {
    check_peaks(2);
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
