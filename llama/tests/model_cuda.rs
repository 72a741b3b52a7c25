//! The fixture models on a CUDA device against llama.cpp's logits: all
//! weights on the device, experts in host memory (`--cpu-moe`), and
//! `--cpu-moe` with every batch offloaded so the expert copy policy runs.
//! Without a CUDA driver the test prints why it skipped.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, Fixture, MODELS};
use ggml_core::gguf::LoadMode;
use llama::device::open_device;
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};

#[test]
fn fixtures_on_cuda0() {
    if let Some(why) = ggml_cuda::unavailable_reason() {
        println!("skipped: {why}");
        return;
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
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let n = fx.n_vocab();
        for (label, placement, min_batch, load_mode) in cases.clone() {
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
                "{name} [{label}]: prompt NMSE {p:.2e}, teacher-forced NMSE {f:.2e}, experts h2d {} B of {} B full",
                st.h2d_bytes_experts, st.h2d_bytes_full_copy
            );
            assert_eq!(ours.len(), fx.tokens.len() * n);
            assert!(
                p <= fx.bound && f <= fx.bound,
                "{name} [{label}]: NMSE {p:.2e} / {f:.2e} > {:.0e}",
                fx.bound
            );
        }
    }
}
