//! Several devices: every model fixture on `SIM0,SIM1` gives the CPU's
//! logits bit for bit, with the layers split (even, `-ts 3,1`, `-ts 1,3`),
//! with `--cpu-moe`, with `-sm none -mg 1`, and with `-ot` sending a layer
//! to the second device; the split follows llama.cpp's rule and each
//! layer's KV cache lives on the layer's device; the activations cross the
//! split boundary device to device (peer copies), none through host memory.

mod common;

use std::sync::Arc;

use common::{or_skip, same_bits, Fixture, MODELS};
use ggml_core::sim::SimProfile;
use llama::device::{open_devices, DeviceOptions};
use llama::placement::{Placement, SplitMode, Target};
use llama::MoeParams;
use llama::{Context, ContextParams, Model, ModelParams, TransferStats};

fn load(fx: &Fixture, devices: &[&str], placement: Placement) -> Arc<Model> {
    load_with(fx, devices, placement, None)
}

fn load_with(
    fx: &Fixture,
    devices: &[&str],
    placement: Placement,
    sim_profile: Option<SimProfile>,
) -> Arc<Model> {
    let names: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
    let opts = DeviceOptions {
        n_threads: 2,
        offload_min_batch: 1,
        sim_profile,
        ..Default::default()
    };
    let params = ModelParams {
        devices: open_devices(&names, &opts).expect("devices"),
        placement: Placement {
            devices: names,
            ..placement
        },
        ..Default::default()
    };
    Arc::new(Model::load(&fx.gguf, params).expect("load"))
}

/// Prompt logits (all rows) then 4 teacher-forced rows.
fn logits(model: &Arc<Model>, fx: &Fixture) -> Vec<f32> {
    logits_and_stats(model, fx).0
}

/// [`logits`] and the context's transfer counters.
fn logits_and_stats(model: &Arc<Model>, fx: &Fixture) -> (Vec<f32>, TransferStats) {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 256,
        n_threads: 2,
        ..Default::default()
    };
    let mut c = Context::new(Arc::clone(model), p).expect("context");
    let (mut out, forced) = fx.prompt_and_forced(&mut c, 4);
    out.extend(forced);
    (out, c.stats())
}

/// Which device each layer (and, last, the output head) is on.
fn layer_devices(model: &Model) -> Vec<Option<usize>> {
    let mut v: Vec<_> = model.layers.iter().map(|l| l.device).collect();
    v.push(model.output_device);
    v
}

#[test]
fn two_sim_devices_give_cpu_logits_bit_for_bit() {
    let cases: Vec<(&str, Placement)> = vec![
        ("layers split", Placement::default()),
        (
            "-ts 3,1",
            Placement {
                tensor_split: vec![3.0, 1.0],
                ..Default::default()
            },
        ),
        (
            "-ts 1,3",
            Placement {
                tensor_split: vec![1.0, 3.0],
                ..Default::default()
            },
        ),
        (
            "--cpu-moe",
            Placement {
                cpu_moe: true,
                ..Default::default()
            },
        ),
        (
            "-sm none -mg 1",
            Placement {
                split_mode: SplitMode::None,
                main_gpu: 1,
                ..Default::default()
            },
        ),
        (
            "-ot blk.0=SIM1 --n-cpu-moe 1",
            Placement {
                overrides: Placement::parse_overrides(r"blk\.0\.=SIM1").unwrap(),
                n_cpu_moe: 1,
                ..Default::default()
            },
        ),
    ];
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu = logits(&load(&fx, &[], Placement::default()), &fx);
        for (flag, placement) in &cases {
            let model = load(&fx, &["SIM0", "SIM1"], placement.clone());
            let n_layer = model.layers.len();
            let expect: Vec<_> = (0..=n_layer)
                .map(|il| model.placement.layer_device(il, n_layer))
                .collect();
            assert_eq!(layer_devices(&model), expect, "{name} {flag}");
            let got = logits(&model, &fx);
            assert!(
                same_bits(&got, &cpu),
                "{name} on SIM0,SIM1 {flag} (layers on {:?}): logits differ from the CPU's",
                layer_devices(&model)
            );
        }
    }
}

/// With the layers split over SIM0,SIM1 the activations cross the
/// boundary device to device (peer copies): no byte of it goes through host
/// memory, and the logits are the CPU's bit for bit. With peer copies off
/// in the profile (`d2d_bw` 0) the same bytes cross through host memory,
/// with the same logits.
#[test]
fn split_boundaries_cross_device_to_device() {
    let no_peer = SimProfile::from_json(r#"{"d2d_bw": 0}"#).expect("profile");
    let mut n = 0;
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu = logits(&load(&fx, &[], Placement::default()), &fx);
        let peer = load(&fx, &["SIM0", "SIM1"], Placement::default());
        let (got, st) = logits_and_stats(&peer, &fx);
        assert!(same_bits(&got, &cpu), "{name}: peer copies change logits");
        let devs = layer_devices(&peer);
        if !(devs.contains(&Some(0)) && devs.contains(&Some(1))) {
            continue; // nothing crosses
        }
        n += 1;
        assert!(st.d2d_bytes > 0, "{name}: {st:?}");
        assert_eq!(st.d2d_bytes_via_host, 0, "{name}: {st:?}");
        let host = load_with(
            &fx,
            &["SIM0", "SIM1"],
            Placement::default(),
            Some(no_peer.clone()),
        );
        let (got, sh) = logits_and_stats(&host, &fx);
        assert!(same_bits(&got, &cpu), "{name}: logits differ through host");
        assert_eq!(sh.d2d_bytes, 0, "{name}: {sh:?}");
        assert_eq!(sh.d2d_bytes_via_host, st.d2d_bytes, "{name}: {sh:?}");
        // the same bytes cross either way; through host memory they also
        // count as host-to-device bytes
        assert_eq!(
            sh.h2d_bytes_other,
            st.h2d_bytes_other + st.d2d_bytes,
            "{name}"
        );
    }
    if n == 0 {
        println!("skipped: no fixture with layers on both devices");
    }
}

#[test]
fn weights_go_to_their_layers_device() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"), return);
    let model = load(&fx, &["SIM0", "SIM1"], Placement::default());
    let n_layer = model.layers.len();
    let mut on = [0usize; 2];
    for w in &model.weights {
        let layer = w
            .name
            .strip_prefix("blk.")
            .and_then(|r| r.split('.').next())
            .and_then(|n| n.parse::<usize>().ok())
            .or_else(|| w.name.starts_with("output").then_some(n_layer));
        let want = match layer.and_then(|il| model.placement.layer_device(il, n_layer)) {
            Some(d) => Target::Device(model.devices[d].name().to_string()),
            None => Target::Host,
        };
        assert_eq!(w.target, want, "{}", w.name);
        if let Target::Device(d) = &w.target {
            on[usize::from(d == "SIM1")] += 1;
        }
    }
    assert!(on[0] > 0 && on[1] > 0, "both devices hold weights: {on:?}");
    // each layer's KV cache is in its device's memory
    let c = Context::new(Arc::clone(&model), ContextParams::default()).expect("context");
    for (il, lw) in model.layers.iter().enumerate() {
        let buf = &c.kv_cache().layers[il].k.buffer;
        let d = lw.device.expect("every layer offloaded");
        assert!(model.devices[d].can_use_buffer(buf.as_ref()), "layer {il}");
        assert!(
            !model.devices[1 - d].can_use_buffer(buf.as_ref()),
            "layer {il}"
        );
    }
    assert_eq!(model.device.as_ref().map(|d| d.name()), Some("SIM0"));
}

#[test]
fn mismatched_device_lists_are_errors() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"), return);
    let opts = DeviceOptions::default();
    let devs = open_devices(&["SIM0".into(), "SIM1".into()], &opts).unwrap();
    let params = ModelParams {
        devices: devs,
        placement: Placement {
            devices: vec!["SIM1".into(), "SIM0".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let e = Model::load(&fx.gguf, params).err().unwrap().to_string();
    assert!(e.contains("SIM1,SIM0") && e.contains("SIM0,SIM1"), "{e}");
    let devs = open_devices(&["SIM0".into(), "SIM1".into()], &opts).unwrap();
    let params = ModelParams {
        devices: devs,
        placement: Placement {
            tensor_split: vec![1.0],
            ..Default::default()
        },
        ..Default::default()
    };
    let e = Model::load(&fx.gguf, params).err().unwrap().to_string();
    assert!(e.contains("1 values for 2 devices"), "{e}");
}

/// Prompt + 4 teacher-forced rows with `p`; the context for its counters.
fn logits_with(model: &Arc<Model>, fx: &Fixture, p: ContextParams) -> (Vec<f32>, Context) {
    let mut c = Context::new(Arc::clone(model), p).expect("context");
    let (mut out, forced) = fx.prompt_and_forced(&mut c, 4);
    out.extend(forced);
    (out, c)
}

/// [`cache_params`] with `f` applied to its MoE settings.
fn cache_params_with(
    size: CacheSize,
    max_batch: usize,
    f: impl FnOnce(&mut MoeParams),
) -> ContextParams {
    let mut p = cache_params(size, max_batch);
    f(&mut p.moe);
    p
}

fn cache_params(size: CacheSize, max_batch: usize) -> ContextParams {
    ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 256,
        n_threads: 2,
        moe: MoeParams {
            cache: MoeCacheParams {
                size,
                max_batch,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    }
}

use llama::moe_cache::cache::layout::{bytes_for_all, model_groups_on};
use llama::moe_cache::hybrid::CpuShare;
use llama::moe_cache::predict::MoePredict;
use llama::moe_cache::prefetch::PrefetchSlots;
use llama::moe_cache::{CacheSize, MoeCacheParams};

/// `--cpu-moe` with an expert cache on each of SIM0 and SIM1 (`-ts 1,3`:
/// one layer each on the 2-layer fixtures): the CPU's logits bit for bit,
/// with the whole cache, a cache of half the experts, prediction, hybrid
/// experts and prefill prefetch; each device's cache serves its own
/// layers and the per-device expert bytes add up to the total.
#[test]
fn cpu_moe_with_a_cache_on_each_device_bit_for_bit() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu = logits(&load(&fx, &[], Placement::default()), &fx);
        let model = load(
            &fx,
            &["SIM0", "SIM1"],
            Placement {
                cpu_moe: true,
                tensor_split: vec![1.0, 3.0],
                ..Default::default()
            },
        );
        let half = |d: usize| bytes_for_all(&model_groups_on(&model, Some(d))) / 2;
        let cases: Vec<(&str, ContextParams)> = vec![
            (
                "cache auto (every expert)",
                cache_params(CacheSize::Auto, 32),
            ),
            (
                "cache of half the experts",
                cache_params_with(CacheSize::Auto, 32, |m| {
                    m.cache_sizes = vec![CacheSize::Bytes(half(0)), CacheSize::Bytes(half(1))]
                }),
            ),
            (
                "half, --moe-predict on",
                cache_params_with(CacheSize::Auto, 32, |m| {
                    m.cache_sizes = vec![CacheSize::Bytes(half(0)), CacheSize::Bytes(half(1))];
                    m.predict = MoePredict::Router;
                }),
            ),
            (
                "half, hybrid 0.5",
                cache_params_with(CacheSize::Auto, 32, |m| {
                    m.cache_sizes = vec![CacheSize::Bytes(half(0)), CacheSize::Bytes(half(1))];
                    m.hybrid = Some(CpuShare::Fixed(0.5));
                }),
            ),
            (
                "auto, prefetch 2 slots, max batch 1",
                cache_params_with(CacheSize::Auto, 1, |m| m.prefetch = PrefetchSlots::fixed(2)),
            ),
            (
                "SIM0 only (SIM1: 0)",
                cache_params_with(CacheSize::Auto, 32, |m| {
                    m.cache_sizes = vec![CacheSize::Auto, CacheSize::Off]
                }),
            ),
        ];
        for (what, p) in cases {
            let (got, c) = logits_with(&model, &fx, p.clone());
            assert!(
                same_bits(&got, &cpu),
                "{name} SIM0,SIM1 --cpu-moe {what}: logits differ from the CPU's"
            );
            c.moe_cache_verify().expect("cache state");
            let devs = c.device_stats();
            assert_eq!(devs.len(), 2);
            let sum: u64 = devs.iter().map(|d| d.h2d_bytes_experts).sum();
            assert_eq!(sum, c.stats().h2d_bytes_experts, "{name} {what}: {devs:?}");
            for (di, d) in devs.iter().enumerate() {
                let has_moe = !model_groups_on(&model, Some(di)).is_empty();
                let cache_off = p.moe.cache_sizes.get(di) == Some(&CacheSize::Off);
                assert_eq!(
                    d.moe_cache_mib > 0.0,
                    has_moe && !cache_off,
                    "{name} {what}: {d:?}"
                );
                // (without a cache, a host expert matmul offloaded by
                // --offload-min-batch goes to the first device that asks,
                // as in llama.cpp's scheduler)
                if has_moe && !cache_off {
                    assert!(d.h2d_bytes_experts > 0, "{name} {what}: {d:?}");
                }
            }
        }
    }
}

#[test]
fn cache_sizes_per_device_must_match_the_devices() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"), return);
    let model = load(
        &fx,
        &["SIM0", "SIM1"],
        Placement {
            cpu_moe: true,
            ..Default::default()
        },
    );
    let p = cache_params_with(CacheSize::Auto, 32, |m| {
        m.cache_sizes = vec![CacheSize::Auto; 3]
    });
    let e = Context::new(Arc::clone(&model), p)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("3 sizes for 2 devices (SIM0,SIM1)"), "{e}");
}

/// `-ngl 1` on two devices: layer 0 stays in host memory and its host
/// experts are served by the main device's cache (`-mg 1`: SIM1), layer 1
/// is on SIM0 (the offloaded layers split over both devices); the CPU's
/// logits bit for bit.
#[test]
fn host_layers_use_the_main_devices_cache() {
    for name in ["tiny-qwen3moe-f32", "tiny-gptoss-mxfp4"] {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu = logits(&load(&fx, &[], Placement::default()), &fx);
        let model = load(
            &fx,
            &["SIM0", "SIM1"],
            Placement {
                cpu_moe: true,
                n_gpu_layers: Some(1),
                main_gpu: 1,
                ..Default::default()
            },
        );
        let n_layer = model.layers.len();
        assert_eq!(model.layers[0].device, None, "{name}");
        assert_eq!(
            llama::moe_cache::cache::layout::cache_device(&model, 0),
            Some(1),
            "{name}"
        );
        assert!(model.layers[n_layer - 1].device.is_some(), "{name}");
        let (got, c) = logits_with(&model, &fx, cache_params(CacheSize::Auto, 32));
        assert!(
            same_bits(&got, &cpu),
            "{name}: -ngl 1 on SIM0,SIM1 with caches: logits differ from the CPU's"
        );
        c.moe_cache_verify().expect("cache state");
    }
}
