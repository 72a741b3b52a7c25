//! Two CUDA devices, `CUDA0,CUDA1` (without two GPUs: two emulated
//! devices, as `GGML_CUDA_EMULATOR_DEVICES=2` makes them): the fixtures
//! within their bounds of llama.cpp's logits with the layers split over
//! both devices (`-ts 1,3`: one layer each on the 2-layer fixtures), and
//! with `--cpu-moe` and an expert cache on each device. The activations
//! cross from CUDA0 to CUDA1 by peer copies, none through host memory
//! (where the devices can address each other: always on the emulator); with
//! the emulator's peer access off (`GGML_CUDA_EMULATOR_PEER=0`) they cross
//! through host memory, with the same bounds.
//!
//! Every fixture runs, on the emulator as on two real GPUs (both cases
//! together take about 15 s on the 2-core machine). One test per case, so
//! they run in parallel.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, Fixture, MODELS};
use ggml_core::gguf::LoadMode;
use ggml_cuda::emulator;
use llama::device::{open_devices, DeviceOptions};
use llama::moe_cache::{CacheSize, MoeCacheParams};
use llama::placement::Placement;
use llama::MoeParams;
use llama::{Context, ContextParams, Model, ModelParams};

/// Whether the devices are emulated: with fewer than two GPUs, two
/// emulated devices (`GGML_CUDA_EMULATOR_DEVICES=2`).
fn two_devices() -> bool {
    let gpus = match ggml_cuda::unavailable_reason() {
        Some(_) => 0,
        None => ggml_cuda::cuda_device_count().unwrap_or(0),
    };
    if gpus < 2 && !ggml_cuda::emulator::enabled() {
        println!("{gpus} GPU(s): CUDA0 and CUDA1 are emulated devices");
        ggml_cuda::emulator::fallback(&format!("{gpus} GPU(s), two needed"));
    }
    if ggml_cuda::emulator::enabled() && ggml_cuda::emulator::device_count() < 2 {
        ggml_cuda::emulator::set_config(ggml_cuda::emulator::Config {
            devices: 2,
            ..ggml_cuda::emulator::config()
        });
    }
    ggml_cuda::emulator::enabled()
}

/// The fixtures default CI runs on the emulator.
/// As `model_cuda.rs`: tiny-deepseek2-q4_k's teacher-forced rows are held
/// to 1e-2 (activation rounding amplified by routing flips).
const ACTIVATION_SENSITIVE: (&str, f64) = ("tiny-deepseek2-q4_k", 1e-2);

fn on_two_cuda_devices(cpu_moe: bool) {
    on_two_cuda_devices_with(cpu_moe, true, &MODELS);
}

fn on_two_cuda_devices_with(cpu_moe: bool, peer: bool, models: &[&str]) {
    let emulated = two_devices();
    if emulated {
        // this thread's emulator: two devices, peer access as asked
        emulator::set_thread_config(None);
        emulator::set_thread_config(Some(emulator::Config {
            devices: 2,
            peer,
            ..emulator::config()
        }));
    } else if !peer {
        println!("skipped: peer access cannot be turned off on real GPUs (emulator only)");
        return;
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for &name in models {
        let fx = or_skip!(Fixture::load(name), continue);
        let t0 = std::time::Instant::now();
        let names = vec!["CUDA0".to_string(), "CUDA1".to_string()];
        let opts = DeviceOptions {
            n_threads: 2,
            offload_min_batch: 1,
            ..Default::default()
        };
        let params = ModelParams {
            devices: open_devices(&names, &opts).expect("CUDA0,CUDA1"),
            placement: Placement {
                devices: names,
                tensor_split: vec![1.0, 3.0],
                cpu_moe,
                ..Default::default()
            },
            ..Default::default()
        };
        let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
        let used: Vec<_> = model.layers.iter().map(|l| l.device).collect();
        assert!(
            used.contains(&Some(0)) && used.contains(&Some(1)),
            "{name}: layers on {used:?}"
        );
        let cp = ContextParams {
            n_ctx: 512,
            n_batch: 512,
            n_ubatch: 512,
            n_threads: 2,
            moe: MoeParams {
                cache: MoeCacheParams {
                    size: if cpu_moe {
                        CacheSize::Auto
                    } else {
                        CacheSize::Off
                    },
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let mut ctx = Context::new(Arc::clone(&model), cp).expect("context");
        let (ours, forced) = fx.prompt_and_forced(&mut ctx, fx.gen.len());
        let p = nmse(&ours, &fx.logits);
        let f = nmse(&forced, &fx.genlogits);
        let devs = ctx.device_stats();
        let st = ctx.stats();
        // where the pair can, the boundary crosses device to device
        let can_peer = if emulated { peer } else { st.d2d_bytes > 0 };
        if can_peer {
            assert!(
                st.d2d_bytes > 0 && st.d2d_bytes_via_host == 0,
                "{name}: {st:?}"
            );
        } else {
            assert!(
                st.d2d_bytes == 0 && st.d2d_bytes_via_host > 0,
                "{name}: {st:?}"
            );
        }
        println!(
            "{name}: {} bytes device to device, {} through host memory",
            st.d2d_bytes, st.d2d_bytes_via_host
        );
        println!(
            "{name} on CUDA0,CUDA1{}{}: prompt NMSE {p:.2e}, teacher-forced NMSE {f:.2e}, per device {:?} ({:.1} s)",
            if emulated { " (emulated)" } else { "" },
            if cpu_moe { " --cpu-moe, a cache each" } else { "" },
            devs.iter()
                .map(|d| (d.name.as_str(), d.layers, d.h2d_bytes_experts))
                .collect::<Vec<_>>(),
            t0.elapsed().as_secs_f64()
        );
        if cpu_moe {
            ctx.moe_cache_verify().expect("cache state");
            assert!(
                devs.iter().all(|d| d.moe_cache_mib > 0.0 || d.layers == 0),
                "{name}: {devs:?}"
            );
        }
        let f_bound = if name == ACTIVATION_SENSITIVE.0 {
            ACTIVATION_SENSITIVE.1
        } else {
            fx.bound
        };
        if p > fx.bound || f > f_bound {
            failures.push(format!("{name}: NMSE {p:.2e} / {f:.2e} > {:.0e}", fx.bound));
        }
        ran += 1;
    }
    println!("{ran} fixtures run on CUDA0,CUDA1");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn fixtures_on_two_cuda_devices_layers_split() {
    on_two_cuda_devices(false);
}

#[test]
fn fixtures_on_two_cuda_devices_cpu_moe_cache_each() {
    on_two_cuda_devices(true);
}

/// Without peer access the activations cross through host memory, within
/// the same bounds (two fixtures; emulator only).
#[test]
fn without_peer_access_activations_cross_through_host() {
    on_two_cuda_devices_with(false, false, &["tiny-qwen3moe-f32", "tiny-gptoss-mxfp4"]);
}

/// `--load-mode pin` with several devices page-locks the host weights for
/// every device, not only the main one: with `SIM0` (which gains nothing
/// from it) as the main device, `CUDA0` pins them; on `CUDA0,CUDA1` the
/// expert uploads into CUDA1's cache come from page-locked memory (CUDA's
/// registration is portable: one serves every device). Emulator only (it
/// counts pinned bytes).
#[test]
fn pin_serves_every_device() {
    if !two_devices() {
        println!("skipped: real GPUs do not count page-locked uploads (emulator only)");
        return;
    }
    emulator::set_thread_config(None);
    emulator::set_thread_config(Some(emulator::Config {
        devices: 2,
        ..emulator::config()
    }));
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"));
    for list in [["SIM0", "CUDA0"], ["CUDA0", "CUDA1"]] {
        let names: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        let opts = DeviceOptions {
            n_threads: 2,
            offload_min_batch: 1,
            ..Default::default()
        };
        let params = ModelParams {
            devices: open_devices(&names, &opts).expect("devices"),
            placement: Placement {
                devices: names,
                tensor_split: vec![1.0, 3.0],
                cpu_moe: true,
                ..Default::default()
            },
            load_mode: LoadMode::Pin,
            ..Default::default()
        };
        let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
        assert!(model.host_pinned, "{list:?}: {:?}", model.load_notes);
        assert!(
            model.load_notes.is_empty(),
            "{list:?}: {:?}",
            model.load_notes
        );
        if list[1] != "CUDA1" {
            continue;
        }
        let before = emulator::stats(1).h2d_pinned_bytes;
        let cp = ContextParams {
            n_ctx: 256,
            n_batch: 256,
            n_ubatch: 256,
            n_threads: 2,
            moe: MoeParams {
                cache: MoeCacheParams {
                    size: CacheSize::Auto,
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let mut ctx = Context::new(Arc::clone(&model), cp).expect("context");
        ctx.decode(&fx.tokens, false).expect("decode");
        let devs = ctx.device_stats();
        let on1 = devs.iter().find(|d| d.name == "CUDA1").expect("CUDA1");
        assert!(on1.h2d_bytes_experts > 0, "{devs:?}");
        let pinned = emulator::stats(1).h2d_pinned_bytes - before;
        assert!(
            pinned >= on1.h2d_bytes_experts,
            "CUDA1: {pinned} pinned bytes < {} expert bytes",
            on1.h2d_bytes_experts
        );
    }
}
