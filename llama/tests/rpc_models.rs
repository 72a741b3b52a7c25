//! Models on RPC workers: every fixture with its layers on `RPC0`/`RPC1`,
//! with `-ot exps=RPC0` and with `--cpu-moe` and the expert cache on
//! `RPC0`, against a local CPU run. On the fake worker (CI: this engine's
//! CPU kernels at the other end of the protocol) within a hundredth of the
//! fixtures' bounds of the CPU run, bit for bit with the layers on the CPU
//! (a layer on an RPC device stores its V cache transposed, as llama.cpp
//! does, which reorders V's sums); on llama.cpp's own `ggml-rpc-server`
//! (skipped where it is not built) within the fixtures' bounds of both the
//! CPU run and llama.cpp's reference, with the same greedy tokens.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, same_bits, Fixture, MODELS};
use ggml_core::Backend;
use ggml_rpc::testkit::{FakeOptions, FakeWorker, StockWorker};
use llama::device::{open_devices, rpc_devices, DeviceOptions};
use llama::moe_cache::{CacheSize, MoeCacheParams};
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams, MoeParams};

/// One way to place a model on the workers.
struct Case {
    name: &'static str,
    devices: &'static [&'static str],
    placement: fn() -> Placement,
    cache: bool,
}

const CASES: [Case; 3] = [
    Case {
        name: "layers split over RPC0,RPC1",
        devices: &["RPC0", "RPC1"],
        placement: Placement::default,
        cache: false,
    },
    Case {
        name: "-ot exps=RPC0 (layers on the CPU)",
        devices: &["RPC0"],
        placement: || Placement {
            n_gpu_layers: Some(0),
            overrides: Placement::parse_overrides("exps=RPC0").unwrap(),
            ..Default::default()
        },
        cache: false,
    },
    Case {
        name: "--cpu-moe, expert cache on RPC0",
        devices: &["RPC0"],
        placement: || Placement {
            cpu_moe: true,
            ..Default::default()
        },
        cache: true,
    },
];

fn load(fx: &Fixture, devices: Vec<Arc<dyn Backend>>, names: &[&str], p: Placement) -> Arc<Model> {
    let params = ModelParams {
        devices,
        placement: Placement {
            devices: names.iter().map(|s| s.to_string()).collect(),
            ..p
        },
        ..Default::default()
    };
    Arc::new(Model::load(&fx.gguf, params).expect("load"))
}

/// Prompt logits (every row) then 8 teacher-forced rows, and the greedy
/// tokens after the prompt.
fn run(model: &Arc<Model>, fx: &Fixture, cache: bool) -> (Vec<f32>, Vec<i32>) {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 256,
        n_threads: 2,
        moe: MoeParams {
            cache: MoeCacheParams {
                size: if cache {
                    CacheSize::Auto
                } else {
                    CacheSize::Off
                },
                ..MoeCacheParams::default()
            },
            ..MoeParams::default()
        },
        ..Default::default()
    };
    let mut c = Context::new(Arc::clone(model), p.clone()).expect("context");
    let (mut out, forced) = fx.prompt_and_forced(&mut c, 8);
    out.extend(forced);
    if cache {
        // the cache served the decodes: routed experts uploaded, hits
        let st = c.moe_cache_stats().expect("an expert cache on RPC0");
        let t = st.total();
        assert!(
            c.stats().h2d_bytes_experts > 0 && t.hits() > 0,
            "{}: {t:?}",
            fx.name
        );
        c.moe_cache_verify()
            .expect("the cache's banks hold the file's bytes");
    }
    let mut g = Context::new(Arc::clone(model), p).expect("context");
    g.decode(&fx.tokens, false).expect("prompt decode");
    let mut greedy = Vec::new();
    for _ in 0..fx.gen.len() {
        let t = llama::sampling::argmax(g.logits(0).expect("row"));
        greedy.push(t);
        g.decode(&[t], false).expect("decode one");
    }
    (out, greedy)
}

fn reference(fx: &Fixture) -> Vec<f32> {
    let n = fx.n_vocab();
    let mut r = fx.logits.clone();
    r.extend_from_slice(&fx.genlogits[..8 * n]);
    r
}

/// Every fixture and case on `devices` (RPC0.. of the workers), against
/// the CPU: bit for bit (`exact`) or within the fixture's bound.
fn all_fixtures(rpc: &[Arc<ggml_rpc::RpcBackend>], exact: bool) {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let (cpu, cpu_greedy) = run(
            &load(&fx, Vec::new(), &[], Placement::default()),
            &fx,
            false,
        );
        for case in &CASES {
            let names: Vec<String> = case.devices.iter().map(|s| s.to_string()).collect();
            let opts = DeviceOptions {
                rpc: rpc.to_vec(),
                offload_min_batch: 32,
                ..Default::default()
            };
            let devs = open_devices(&names, &opts).expect("RPC devices");
            let model = load(&fx, devs, case.devices, (case.placement)());
            let (got, greedy) = run(&model, &fx, case.cache);
            let what = format!("{name}, {}", case.name);
            if exact {
                // a layer on an RPC device keeps its V cache transposed (as
                // llama.cpp does: ggml's mul_mat takes no transposed view of
                // V rows), which reorders V's sums; with the layers on the
                // CPU the logits are the CPU's bit for bit
                let e = nmse(&got, &cpu);
                if case.devices.len() == 1 && !case.cache {
                    assert!(same_bits(&got, &cpu), "{what}: NMSE {e:e}, not bit for bit");
                }
                assert!(
                    e <= fx.bound / 100.0,
                    "{what}: NMSE {e:e} against the CPU run"
                );
                let n = fx.reliable_greedy_len();
                assert_eq!(greedy[..n], cpu_greedy[..n], "{what}");
            } else {
                let e_cpu = nmse(&got, &cpu);
                let e_ref = nmse(&got, &reference(&fx));
                println!(
                    "{what}: NMSE {e_cpu:.2e} against the CPU run, {e_ref:.2e} against llama.cpp"
                );
                assert!(
                    e_cpu <= fx.bound && e_ref <= fx.bound,
                    "{what}: {e_cpu:e} / {e_ref:e} > {}",
                    fx.bound
                );
                let n = fx.reliable_greedy_len();
                assert_eq!(greedy[..n], fx.gen[..n], "{what}: greedy tokens");
                assert_eq!(greedy[..n], cpu_greedy[..n], "{what}: greedy tokens");
            }
        }
    }
}

#[test]
fn every_fixture_on_fake_workers_gives_the_cpus_logits() {
    let w0 = FakeWorker::start(FakeOptions {
        n_threads: 2,
        ..FakeOptions::default()
    })
    .unwrap();
    let w1 = FakeWorker::start(FakeOptions {
        n_threads: 2,
        ..FakeOptions::default()
    })
    .unwrap();
    let rpc = rpc_devices(&[w0.endpoint(), w1.endpoint()], 2, 32).expect("connect");
    all_fixtures(&rpc, true);
    assert!(w0.count(ggml_rpc::Cmd::GraphCompute) > 0 && w1.count(ggml_rpc::Cmd::GraphCompute) > 0);
}

#[test]
fn every_fixture_on_stock_workers_within_the_bounds() {
    let (w0, w1) = match (StockWorker::start(2, false), StockWorker::start(2, false)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(why), _) | (_, Err(why)) => {
            println!("skipped: {why}");
            return;
        }
    };
    let rpc = rpc_devices(&[w0.endpoint(), w1.endpoint()], 2, 32).expect("connect");
    all_fixtures(&rpc, false);
}
