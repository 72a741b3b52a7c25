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
        ggml_cuda::emulator::fallback(&why);
    }
}

/// tiny-deepseek2-q4_k is the fixtures' most sensitive file (routing flips,
/// see `model_fixtures.rs`). On the emulator it lands at prompt 1.42e-3 /
/// teacher-forced 5.70e-3; the CPU backend at 1.96e-3 / 2.74e-3. The
/// graphs agree within float rounding up to the first quantized matmuls
/// (`kv_cmpr_pe-0`, `q-0`: Q4_K weights, their sums taken in another order
/// than the CPU's, 2e-7 apart; see
/// `node_dumps_agree_within_float_rounding_up_to_the_first_quantized_matmul`).
/// The first node above that is `q_nope_absorbed-0`: re-quantizing `q-0`
/// to Q8_0 for the Q5_0 `attn_k_b`, one value (prompt token 10, head 0)
/// lands on the other side of a rounding step, x/d = -61.49999 on the CPU
/// and -61.50002 on CUDA. That one step spreads through the later layers
/// and flips teacher-forced row 14's grouped sigmoid routing on CUDA
/// (4.8e-2 against 5.4e-4 on the CPU; row 13 flips on both), which alone
/// makes the 5.70e-3. Making the elementwise and row kernels (RoPE, norms,
/// softmax, SiLU) give the CPU's bits was tried and did not move the bound
/// (5.69e-3), so it was not kept: its serial double sums cost decode
/// latency. `llama/examples/node-divergence.rs` prints the rows and the
/// nodes. Its prompt rows are held to the 5e-3 bound; the teacher-forced
/// NMSE is printed, and must stay below 1e-2.
const ACTIVATION_SENSITIVE: (&str, f64) = ("tiny-deepseek2-q4_k", 1e-2);

/// The fixtures' settings (llama.cpp's run: context, batch and ubatch 512,
/// 2 threads), flash attention as given.
fn fixture_context(flash_attn: bool) -> ContextParams {
    ContextParams {
        n_ctx: 512,
        n_batch: 512,
        n_ubatch: 512,
        n_threads: 2,
        flash_attn,
        ..Default::default()
    }
}

fn fixture_on_cuda0(name: &str) {
    use_emulator_without_gpu();
    // the fixtures' logits are llama.cpp's runs with flash attention off;
    // "-fa on" runs our flash-attention kernels against them (deepseek2's
    // Q4_K file has its own flash-attention reference below)
    let fa_on = name != MODELS[10];
    let cases = [
        (
            "all weights on CUDA0, -fa on",
            Placement::default(),
            32,
            LoadMode::Mmap,
            true,
        ),
        (
            "all weights on CUDA0",
            Placement::default(),
            32,
            LoadMode::Mmap,
            false,
        ),
        (
            "--cpu-moe",
            Placement {
                cpu_moe: true,
                ..Default::default()
            },
            32,
            LoadMode::Mmap,
            false,
        ),
        (
            "--cpu-moe, every batch offloaded",
            Placement {
                cpu_moe: true,
                ..Default::default()
            },
            1,
            LoadMode::Mmap,
            false,
        ),
        (
            "--cpu-moe, every batch offloaded, --load-mode pin",
            Placement {
                cpu_moe: true,
                ..Default::default()
            },
            1,
            LoadMode::Pin,
            false,
        ),
    ];
    let mut failures = Vec::new();
    {
        let fx = or_skip!(Fixture::load(name));
        let n = fx.n_vocab();
        for (label, placement, min_batch, load_mode, flash_attn) in cases.clone() {
            if flash_attn && !fa_on {
                continue;
            }
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
            let cp = fixture_context(flash_attn);
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

/// [`Context::set_node_dump`] on the CPU and on CUDA0, tiny-deepseek2-q4_k's
/// prompt: the same named nodes in the same order; the token embeddings
/// (rows copied, no arithmetic) bit for bit; the first RMS norm
/// (`attn_norm-0`, 3.4e-8 apart on the emulator: its row summed in another
/// order) and the first quantized projection (`kv_cmpr_pe-0`, Q4_K weights
/// on Q8_K activations, 2.2e-7) within float rounding, 1e-6 relative.
/// Later nodes part further where activations re-quantize
/// (`llama/examples/node-divergence.rs` prints the table).
#[test]
fn node_dumps_agree_within_float_rounding_up_to_the_first_quantized_matmul() {
    use_emulator_without_gpu();
    let fx = or_skip!(Fixture::load("tiny-deepseek2-q4_k"));
    let dump = |dev: &str| {
        let params = ModelParams {
            device: open_device(dev, 2, 32).expect("device"),
            progress: None,
            ..Default::default()
        };
        let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
        let cp = fixture_context(false);
        let mut ctx = Context::new(model, cp).expect("context");
        ctx.set_node_dump(true);
        ctx.decode(&fx.tokens, true).expect("prompt");
        ctx.node_dump().to_vec()
    };
    let (cpu, cuda) = (dump("CPU"), dump("CUDA0"));
    let names = |d: &[(String, Vec<f32>)]| d.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&cpu), names(&cuda));
    let node = |d: &[(String, Vec<f32>)], name: &str| {
        d.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("no node {name}"))
    };
    assert!(
        common::same_bits(&node(&cpu, "inp_embd"), &node(&cuda, "inp_embd")),
        "inp_embd differs"
    );
    for name in ["attn_norm-0", "kv_cmpr_pe-0"] {
        let (c, g) = (node(&cpu, name), node(&cuda, name));
        let rel = nmse(&g, &c).sqrt();
        println!("{name}: relative difference {rel:.2e}");
        assert!(rel < 1e-6, "{name}: {rel:.2e}");
    }
}

/// tiny-deepseek2-q4_k with flash attention on, as llama.cpp's CUDA backend
/// runs by default, against llama.cpp's own flash-attention run of that
/// file (`Fixture::load_flash_attn`): within the fixture's 5e-3 bound on
/// every row, prompt and teacher-forced, all weights on CUDA0 and with
/// `--cpu-moe`. (Flash attention off, the teacher-forced rows take one
/// routing flip llama.cpp's CPU does not, 5.70e-3; llama.cpp's own
/// flash-attention run lands at 1.4e-2 against the flash-attention-off
/// files: `tests/data/README.md`.)
#[test]
fn tiny_deepseek2_q4_k_flash_attn_within_the_bound() {
    use_emulator_without_gpu();
    let fx = or_skip!(Fixture::load_flash_attn(MODELS[10]));
    for (label, cpu_moe) in [("all weights on CUDA0", false), ("--cpu-moe", true)] {
        let params = ModelParams {
            device: open_device("CUDA0", 2, 32).expect("CUDA0"),
            placement: Placement {
                cpu_moe,
                ..Default::default()
            },
            load_mode: LoadMode::Mmap,
            ..Default::default()
        };
        let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
        let cp = fixture_context(true);
        let mut ctx = Context::new(model, cp).expect("context");
        let (ours, forced) = fx.prompt_and_forced(&mut ctx, fx.gen.len());
        let (p, f) = (nmse(&ours, &fx.logits), nmse(&forced, &fx.genlogits));
        println!(
            "{} -fa on [{label}]: prompt NMSE {p:.2e}, teacher-forced NMSE {f:.2e}",
            MODELS[10]
        );
        assert!(
            p <= fx.bound && f <= fx.bound,
            "{} -fa on [{label}]: NMSE {p:.2e} / {f:.2e} > {:.0e}",
            MODELS[10],
            fx.bound
        );
    }
}

/// `-fa auto` resolves as llama.cpp's does: on where the device holding
/// the layers runs flash attention for the cache (CUDA0 does, for the F16
/// cache of every fixture, all weights on it or experts in host memory),
/// off where our plain attention is the CPU's and the sim device's (as
/// before); on everywhere for a quantized V cache, which needs it.
#[test]
fn flash_attn_auto_is_on_where_cuda0_holds_the_layers() {
    use_emulator_without_gpu();
    use ggml_core::GgmlType::{F16, Q8_0};
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        for (device, cpu_moe, want) in [
            ("CUDA0", false, true),
            ("CUDA0", true, true),
            ("SIM0", false, false),
            ("CPU", false, false),
        ] {
            let params = ModelParams {
                device: open_device(device, 2, 32).expect("device"),
                placement: Placement {
                    cpu_moe,
                    ..Default::default()
                },
                progress: None,
                ..Default::default()
            };
            let model = Model::load(&fx.gguf, params).expect("load");
            let got = llama::device::flash_attn_auto(&model, F16, F16);
            assert_eq!(
                got, want,
                "{name} on {device} (--cpu-moe {cpu_moe}): -fa auto with an F16 cache"
            );
            assert!(
                llama::device::flash_attn_auto(&model, F16, Q8_0),
                "{name} on {device}: a Q8_0 V cache needs flash attention"
            );
        }
    }
}
