//! The fixture models on a CUDA device against llama.cpp's logits: all
//! weights on the device, experts in host memory (`--cpu-moe`), and
//! `--cpu-moe` with every batch offloaded so the expert copy policy runs.
//! Without a GPU, CUDA0 is the emulated device
//! (`ggml_cuda::emulator`).

mod common;

use std::sync::Arc;

use common::{nmse, Fixture, MODELS};
use ggml_core::gguf::LoadMode;
use llama::device::open_device;
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};

#[test]
fn fixtures_on_cuda0() {
    if let Some(why) = ggml_cuda::unavailable_reason() {
        println!("no GPU ({why}): CUDA0 is the emulated device");
        ggml_cuda::emulator::enable();
    }
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
    for name in MODELS {
        let fx = Fixture::load(name);
        let n = fx.n_vocab();
        for (label, placement, min_batch, load_mode) in cases.clone() {
            let t0 = std::time::Instant::now();
            let dev = open_device("CUDA0", 2, min_batch).expect("CUDA0");
            let params = ModelParams {
                device: dev,
                placement,
                progress: None,
                load_mode,
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
            ctx.decode(&fx.tokens, true).expect("prompt");
            let mut ours = Vec::new();
            for i in 0..fx.tokens.len() {
                ours.extend_from_slice(ctx.logits(i).expect("row"));
            }
            let p = nmse(&ours, &fx.logits);
            let mut forced = Vec::new();
            for &t in &fx.gen {
                ctx.decode(&[t], false).expect("decode");
                forced.extend_from_slice(ctx.logits(0).expect("row"));
            }
            let f = nmse(&forced, &fx.genlogits);
            let st = ctx.stats();
            println!(
                "{name} [{label}]: prompt NMSE {p:.2e}, teacher-forced NMSE {f:.2e}, experts h2d {} B of {} B full ({:.1} s)",
                st.h2d_bytes_experts,
                st.h2d_bytes_full_copy,
                t0.elapsed().as_secs_f64()
            );
            assert_eq!(ours.len(), fx.tokens.len() * n);
            if p > fx.bound || f > fx.bound {
                failures.push(format!(
                    "{name} [{label}]: NMSE {p:.2e} / {f:.2e} > {:.0e}",
                    fx.bound
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
