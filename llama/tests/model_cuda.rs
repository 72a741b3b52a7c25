//! The fixture models on a CUDA device against llama.cpp's logits: all
//! weights on the device, experts in host memory (`--cpu-moe`), and
//! `--cpu-moe` with every batch offloaded so the expert copy policy runs.
//! Without a GPU, CUDA0 is the emulated device
//! (`ggml_cuda::emulator`): every fixture in every placement, the
//! quantized fixtures' `--cpu-moe` variants included (about 5 s a run on
//! the emulator). One test per fixture, so they run in parallel.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, Fixture, MODELS};
use ggml_core::gguf::LoadMode;
use llama::device::open_device;
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};

/// Make CUDA0 the emulated device where there is no GPU.
fn use_emulator_without_gpu() {
    if let Some(why) = ggml_cuda::unavailable_reason() {
        println!("no GPU ({why}): CUDA0 is the emulated device");
        ggml_cuda::emulator::enable();
    }
}

/// tiny-deepseek2-q4_k is the fixtures' most sensitive file (routing flips,
/// see `model_fixtures.rs`). The CUDA kernels now quantize activations as
/// the CPU backend does (Q8_0 / Q8_K rounding, `k_quantize_q8_1`), which
/// brought it from prompt 3.3e-3 / teacher-forced 8.7e-3 to 1.4e-3 / 5.8e-3
/// on the emulator; the CPU backend lands at 2.0e-3 / 2.7e-3. The rest is
/// the discontinuity of activation rounding: CUDA and CPU sums differ in
/// their last bits (other summation order), a value near a rounding
/// boundary then quantizes one step apart, and this file amplifies that
/// (CUDA vs CPU logits: rows 0-4 agree to 1e-13, later rows differ by
/// 2e-4..5e-4, two rows with a routing flip by 2e-2). Per teacher-forced
/// row against llama.cpp, CUDA and the CPU backend agree (4e-4..1.3e-3;
/// row 13 is 3e-2 on both, a flip against llama.cpp) except row 14: 4.8e-2
/// on CUDA, 5.4e-4 on the CPU, one routing flip that makes CUDA's 5.7e-3.
/// Where the experts run does not matter (`--cpu-moe` gives the same
/// 5.70e-3), nor graph replay; with every op whose name or weight names
/// `attn` moved to the CPU the emulated device gives the CPU's 2.67e-3, but
/// no single attention matmul (q, kv_a, k_b, v_b, output) does: the flip
/// follows last-bit differences spread over the attention, not one
/// kernel's precision. Its prompt rows are held to the 5e-3 bound; the
/// teacher-forced NMSE is printed, and must stay below 1e-2.
const ACTIVATION_SENSITIVE: (&str, f64) = ("tiny-deepseek2-q4_k", 1e-2);

fn fixture_on_cuda0(name: &str) {
    use_emulator_without_gpu();
    let cases = [
        (
            "all weights on CUDA0",
            Placement::default(),
            32,
            LoadMode::Mmap,
        ),
        (
            "--cpu-moe",
            Placement {
                cpu_moe: true,
                ..Default::default()
            },
            32,
            LoadMode::Mmap,
        ),
        (
            "--cpu-moe, every batch offloaded",
            Placement {
                cpu_moe: true,
                ..Default::default()
            },
            1,
            LoadMode::Mmap,
        ),
        (
            "--cpu-moe, every batch offloaded, --load-mode pin",
            Placement {
                cpu_moe: true,
                ..Default::default()
            },
            1,
            LoadMode::Pin,
        ),
    ];
    let mut failures = Vec::new();
    {
        let fx = or_skip!(Fixture::load(name));
        let n = fx.n_vocab();
        for (label, placement, min_batch, load_mode) in cases.clone() {
            let t0 = std::time::Instant::now();
            let dev = open_device("CUDA0", 2, min_batch).expect("CUDA0");
            let params = ModelParams {
                device: dev,
                placement,
                progress: None,
                load_mode,
                ..Default::default()
            };
            let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
            if load_mode == LoadMode::Pin {
                // a refused pin is a warning for users, a failure here
                assert!(model.host_pinned, "{name}: {:?}", model.load_notes);
            }
            let cp = ContextParams {
                n_ctx: 512,
                n_batch: 512,
                n_ubatch: 512,
                n_threads: 2,
                ..Default::default()
            };
            let mut ctx = Context::new(Arc::clone(&model), cp).expect("context");
            let (ours, forced) = fx.prompt_and_forced(&mut ctx, fx.gen.len());
            let p = nmse(&ours, &fx.logits);
            let f = nmse(&forced, &fx.genlogits);
            let st = ctx.stats();
            println!(
                "{name} [{label}]: prompt NMSE {p:.2e}, teacher-forced NMSE {f:.2e}, experts h2d {} B of {} B full ({:.1} s)",
                st.h2d_bytes_experts,
                st.h2d_bytes_full_copy,
                t0.elapsed().as_secs_f64()
            );
            assert_eq!(ours.len(), fx.tokens.len() * n);
            let f_bound = if name == ACTIVATION_SENSITIVE.0 {
                ACTIVATION_SENSITIVE.1
            } else {
                fx.bound
            };
            if p > fx.bound || f > f_bound {
                failures.push(format!(
                    "{name} [{label}]: NMSE {p:.2e} / {f:.2e} > {:.0e}",
                    fx.bound
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
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

#[test]
fn tiny_qwen3moe_f32() {
    fixture_on_cuda0(MODELS[0]);
}
#[test]
fn tiny_qwen2moe_f32() {
    fixture_on_cuda0(MODELS[1]);
}
#[test]
fn tiny_mixtral_f16() {
    fixture_on_cuda0(MODELS[2]);
}
#[test]
fn tiny_olmoe_f32() {
    fixture_on_cuda0(MODELS[3]);
}
#[test]
fn tiny_qwen3moe_q8_0() {
    fixture_on_cuda0(MODELS[4]);
}
#[test]
fn tiny_qwen3moe_q4_0() {
    fixture_on_cuda0(MODELS[5]);
}
#[test]
fn tiny_qwen3moe_q4_k() {
    fixture_on_cuda0(MODELS[6]);
}
#[test]
fn tiny_qwen3moe_q6_k() {
    fixture_on_cuda0(MODELS[7]);
}
#[test]
fn small_qwen3moe_spm_f16() {
    fixture_on_cuda0(MODELS[8]);
}
#[test]
fn tiny_deepseek2_f32() {
    fixture_on_cuda0(MODELS[9]);
}
#[test]
fn tiny_deepseek2_q4_k() {
    fixture_on_cuda0(MODELS[10]);
}
#[test]
fn tiny_gptoss_mxfp4() {
    fixture_on_cuda0(MODELS[11]);
}
