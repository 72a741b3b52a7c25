//! The expert cache on a CUDA device: banks in device memory, the slot
//! lookup as a device `get_rows`; the fixtures' logits within llama.cpp's
//! bounds for every policy, a cache of all and of a few experts, ubatches
//! of 7 (so that prompts fill the cache too). Without a GPU, CUDA0 is the
//! emulated device (`ggml_cuda::emulator`).

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, Fixture, MODELS};
use llama::device::open_device;
use llama::moe_cache::cache::layout::{bytes_for_all, model_groups};
use llama::moe_cache::{CacheSize, MoeCacheParams, PolicyKind};
use llama::placement::Placement;
use llama::MoeParams;
use llama::{Context, ContextParams, Model, ModelParams};

/// Whether CUDA0 is the emulator (enabling it where there is no GPU).
fn emulated() -> bool {
    if let Some(why) = ggml_cuda::unavailable_reason() {
        println!("no GPU ({why}): CUDA0 is the emulated device");
        ggml_cuda::emulator::fallback(&why);
    }
    ggml_cuda::emulator::enabled()
}

/// On the emulator (unless `GGML_CUDA_EMULATOR_FULL=1`): every policy and
/// both sizes on tiny-qwen3moe-f32; the small cache with the first policy
/// on the other tiny float and MXFP4 fixtures and on tiny-qwen3moe-q4_k
/// (Q4_K banks). The emulated quantized mat-vec kernels cost 5-20 s a run.
fn emulator_runs(name: &str, small: bool, policy: PolicyKind) -> bool {
    let fast =
        name.starts_with("tiny-") && ["f32", "f16", "mxfp4"].iter().any(|t| name.ends_with(t));
    name == "tiny-qwen3moe-f32"
        || ((fast || name == "tiny-qwen3moe-q4_k") && small && policy == PolicyKind::ALL[0])
}

/// tiny-deepseek2-q4_k, the fixtures' most sensitive file: on the emulator
/// its prompt rows are at NMSE 1.42e-3 and its teacher-forced rows at
/// 5.70e-3, from one Q8_0 activation value in `q_nope_absorbed-0` rounding
/// a step apart from the CPU's (the Q4_K matmul before it sums in another
/// order) that later flips teacher-forced row 14's routing (see
/// `model_cuda.rs`); as there, those rows are held to 1e-2.
const ACTIVATION_SENSITIVE: (&str, f64) = ("tiny-deepseek2-q4_k", 1e-2);

/// Fixture `name` with the cache: sizes `sizes` (0: a few experts, 1: all
/// of them), every policy (on the emulator: those `emulator_runs` picks).
fn fixture_with_the_expert_cache(name: &str, sizes: &[usize]) {
    let emulated = emulated();
    let full = !emulated || std::env::var("GGML_CUDA_EMULATOR_FULL").is_ok_and(|v| v == "1");
    let any = sizes.iter().any(|&k| {
        PolicyKind::ALL
            .into_iter()
            .any(|p| emulator_runs(name, k == 0, p))
    });
    if !(full || any) {
        println!("{name}: not run on the emulator (GGML_CUDA_EMULATOR_FULL=1 runs it)");
        return;
    }
    {
        let fx = or_skip!(Fixture::load(name));
        let params = ModelParams {
            device: open_device("CUDA0", 2, 32).expect("CUDA0"),
            placement: Placement {
                cpu_moe: true,
                ..Default::default()
            },
            progress: None,
            ..Default::default()
        };
        let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
        let groups = model_groups(&model);
        let g = &groups[0];
        let wanted = sizes;
        let sizes = [g.bank_bytes(g.n_used * 7), bytes_for_all(&groups)];
        for (k, bytes) in sizes.into_iter().enumerate() {
            if !wanted.contains(&k) {
                continue;
            }
            for policy in PolicyKind::ALL {
                if !(full || emulator_runs(name, k == 0, policy)) {
                    continue;
                }
                let cp = ContextParams {
                    n_ctx: 512,
                    n_batch: 512,
                    n_ubatch: 7,
                    n_threads: 2,
                    moe: MoeParams {
                        cache: MoeCacheParams {
                            size: CacheSize::Bytes(bytes),
                            policy,
                            max_batch: 32,
                        },
                        ..Default::default()
                    },
                    ..Default::default()
                };
                let mut ctx = Context::new(Arc::clone(&model), cp).expect("context");
                let (ours, forced) = fx.prompt_and_forced(&mut ctx, fx.gen.len());
                let (p, f) = (nmse(&ours, &fx.logits), nmse(&forced, &fx.genlogits));
                let t = ctx.moe_cache_stats().expect("a cache").total();
                println!(
                    "{name} [{policy}, {bytes} B]: prompt NMSE {p:.2e}, forced NMSE {f:.2e}, decode hit rate {:.1}%",
                    100.0 * t.hit_rate_decode()
                );
                assert!(t.hits() + t.misses() > 0, "{name}: the cache never ran");
                ctx.moe_cache_verify().expect("banks agree with the maps");
                let f_bound = if name == ACTIVATION_SENSITIVE.0 {
                    ACTIVATION_SENSITIVE.1
                } else {
                    fx.bound
                };
                assert!(
                    p <= fx.bound && f <= f_bound,
                    "{name} [{policy}, {bytes} B]: NMSE {p:.2e} / {f:.2e} > {:.0e} / {f_bound:.0e}",
                    fx.bound
                );
            }
        }
    }
}

#[test]
fn every_fixture_is_tested() {
    assert_eq!(
        MODELS,
        [
            "tiny-qwen3moe-f32",
            "tiny-qwen2moe-f32",
            "tiny-mixtral-f16",
            "tiny-olmoe-f32",
            "tiny-qwen3moe-q8_0",
            "tiny-qwen3moe-q4_0",
            "tiny-qwen3moe-q4_k",
            "tiny-qwen3moe-q6_k",
            "small-qwen3moe-spm-f16",
            "tiny-deepseek2-f32",
            "tiny-deepseek2-q4_k",
            "tiny-gptoss-mxfp4",
        ],
        "a fixture was added: give it a test below"
    );
}

// one test per fixture (and per size for the one that runs every policy),
// so that they run in parallel
#[test]
fn tiny_qwen3moe_f32_cache_of_a_few_experts() {
    fixture_with_the_expert_cache(MODELS[0], &[0]);
}
#[test]
fn tiny_qwen3moe_f32_cache_of_all_experts() {
    fixture_with_the_expert_cache(MODELS[0], &[1]);
}
#[test]
fn tiny_qwen2moe_f32() {
    fixture_with_the_expert_cache(MODELS[1], &[0, 1]);
}
#[test]
fn tiny_mixtral_f16() {
    fixture_with_the_expert_cache(MODELS[2], &[0, 1]);
}
#[test]
fn tiny_olmoe_f32() {
    fixture_with_the_expert_cache(MODELS[3], &[0, 1]);
}
#[test]
fn tiny_qwen3moe_q8_0() {
    fixture_with_the_expert_cache(MODELS[4], &[0, 1]);
}
#[test]
fn tiny_qwen3moe_q4_0() {
    fixture_with_the_expert_cache(MODELS[5], &[0, 1]);
}
#[test]
fn tiny_qwen3moe_q4_k() {
    fixture_with_the_expert_cache(MODELS[6], &[0, 1]);
}
#[test]
fn tiny_qwen3moe_q6_k() {
    fixture_with_the_expert_cache(MODELS[7], &[0, 1]);
}
#[test]
fn small_qwen3moe_spm_f16() {
    fixture_with_the_expert_cache(MODELS[8], &[0, 1]);
}
#[test]
fn tiny_deepseek2_f32() {
    fixture_with_the_expert_cache(MODELS[9], &[0, 1]);
}
#[test]
fn tiny_deepseek2_q4_k() {
    fixture_with_the_expert_cache(MODELS[10], &[0, 1]);
}
#[test]
fn tiny_gptoss_mxfp4() {
    fixture_with_the_expert_cache(MODELS[11], &[0, 1]);
}
