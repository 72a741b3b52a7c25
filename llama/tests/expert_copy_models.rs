//! Experts in host memory on a (simulated) device: the same logits as the
//! CPU-only run, policy on and off; exact accounting of the bytes the policy
//! copies; poisoned expert ids give an error, not a crash.

mod common;

use std::sync::Arc;

use common::{or_skip, Fixture, MODELS};
use llama::device::open_device;
use llama::placement::Placement;
use llama::MoeParams;
use llama::{Context, ContextParams, Model, ModelParams};

fn load(fx: &Fixture, device: Option<&str>, placement: Placement, min_batch: usize) -> Arc<Model> {
    let dev = device.and_then(|d| open_device(d, 2, min_batch).expect("device"));
    let params = ModelParams {
        device: dev,
        placement,
        progress: None,
        ..Default::default()
    };
    Arc::new(Model::load(&fx.gguf, params).expect("load"))
}

fn ctx(model: &Arc<Model>, expert_copy: bool) -> Context {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 256,
        n_threads: 2,
        moe: MoeParams {
            expert_copy,
            record_expert_ids: true,
            ..Default::default()
        },
        ..Default::default()
    };
    Context::new(Arc::clone(model), p).expect("context")
}

/// Prompt logits (all rows) then 4 teacher-forced rows.
fn logits(model: &Arc<Model>, fx: &Fixture, expert_copy: bool) -> Vec<f32> {
    let mut c = ctx(model, expert_copy);
    let (mut out, forced) = fx.prompt_and_forced(&mut c, 4);
    out.extend(forced);
    out
}

#[test]
fn offloaded_experts_give_cpu_logits_bit_for_bit() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let cpu = logits(&load(&fx, None, Placement::default(), 32), &fx, true);
        let cases = [
            ("all on the device", Placement::default()),
            (
                "--cpu-moe",
                Placement {
                    cpu_moe: true,
                    ..Default::default()
                },
            ),
            (
                "--n-cpu-moe 1",
                Placement {
                    n_cpu_moe: 1,
                    ..Default::default()
                },
            ),
        ];
        for (flag, placement) in cases {
            for min_batch in [1, 32] {
                let model = load(&fx, Some("SIM0"), placement.clone(), min_batch);
                for policy in [true, false] {
                    let got = logits(&model, &fx, policy);
                    let same = got
                        .iter()
                        .zip(&cpu)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{name} SIM0 {flag} min-batch {min_batch} policy {policy}: logits differ from CPU");
                }
            }
        }
    }
}

/// Bytes the policy must copy for one graph, computed from the router ids:
/// per layer with host experts, for each of gate/up/down, the distinct used
/// experts times the expert size (runs need no padding on SIM0), plus, for
/// each expert bias tensor (gpt-oss, `[n, n_expert]`, read by `add_id`),
/// the distinct used experts times the bias row. Dense layers have none.
fn expected_bytes(model: &Model, ids: &[Vec<i32>]) -> u64 {
    let mut total = 0u64;
    for (il, lw) in model.layers.iter().enumerate() {
        let Some(moe) = lw.moe() else { continue };
        let mut used = vec![false; model.hparams.n_expert];
        for &e in &ids[il] {
            used[e as usize] = true;
        }
        let n_used = used.iter().filter(|&&u| u).count() as u64;
        for w in [moe.gate_exps, moe.up_exps, moe.down_exps] {
            let w = model.weight(w);
            if w.target == llama::placement::Target::Host {
                let t = ggml_core::Tensor::new(w.ty, w.ne);
                total += n_used * t.nb[2] as u64;
            }
        }
        for b in [moe.gate_exps_b, moe.up_exps_b, moe.down_exps_b]
            .into_iter()
            .flatten()
        {
            let b = model.weight(b);
            assert_eq!(b.ne[1] as usize, model.hparams.n_expert, "{}", b.name);
            if b.target == llama::placement::Target::Host {
                let t = ggml_core::Tensor::new(b.ty, b.ne);
                total += n_used * t.nb[1] as u64;
            }
        }
    }
    total
}

/// Host expert tensors and expert biases of the MoE layers.
fn host_expert_tensors(model: &Model) -> u64 {
    let mut n = 0;
    for lw in &model.layers {
        let Some(moe) = lw.moe() else { continue };
        let all = [moe.gate_exps, moe.up_exps, moe.down_exps]
            .into_iter()
            .chain(
                [moe.gate_exps_b, moe.up_exps_b, moe.down_exps_b]
                    .into_iter()
                    .flatten(),
            );
        for w in all {
            if model.weight(w).target == llama::placement::Target::Host {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn policy_bytes_match_the_router_ids_exactly() {
    for name in [
        "tiny-qwen3moe-f32",
        "tiny-qwen3moe-q4_k",
        "tiny-qwen2moe-f32",
        "tiny-deepseek2-f32",
        "tiny-deepseek2-q4_k",
        "tiny-gptoss-mxfp4",
    ] {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = load(
            &fx,
            Some("SIM0"),
            Placement {
                cpu_moe: true,
                ..Default::default()
            },
            1,
        );
        let mut c = ctx(&model, true);
        let mut steps = vec![fx.tokens.clone()];
        steps.extend(fx.gen[..6].iter().map(|&t| vec![t]));
        for (i, step) in steps.iter().enumerate() {
            let before = c.expert_copy_stats();
            c.decode(step, i == 0).expect("decode");
            let after = c.expert_copy_stats();
            let want = expected_bytes(&model, c.last_expert_ids());
            assert!(want > 0, "{name}: nothing offloaded");
            println!(
                "{name} step {i}: policy copied {} of {} bytes (expected {want})",
                after.bytes - before.bytes,
                after.full_bytes - before.full_bytes
            );
            assert_eq!(
                after.bytes - before.bytes,
                want,
                "{name} step {i}: policy bytes"
            );
            assert!(after.full_bytes - before.full_bytes >= want);
            // nothing declined but what is not an expert tensor: every host
            // expert tensor and expert bias went through the policy
            assert_eq!(
                after.inputs - before.inputs - (after.declined - before.declined),
                host_expert_tensors(&model),
                "{name} step {i}: inputs handled by the policy"
            );
        }
    }
}

#[test]
fn poisoned_expert_ids_are_an_error_and_the_context_recovers() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-f32"));
    let model = load(
        &fx,
        Some("SIM0"),
        Placement {
            cpu_moe: true,
            ..Default::default()
        },
        1,
    );
    let n_expert = model.hparams.n_expert as i32;
    let mut c = ctx(&model, true);
    for bad in [n_expert, -1, i32::MAX] {
        c.set_expert_id_filter(Some(Box::new(move |ids: &mut [i32]| ids[0] = bad)));
        let e = c
            .decode(&fx.tokens, false)
            .expect_err("poisoned ids must fail");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("expert id {bad}")) && msg.contains("out of range"),
            "{msg}"
        );
        assert_eq!(c.n_past(), 0);
    }
    c.set_expert_id_filter(None);
    c.decode(&fx.tokens, false)
        .expect("decode after the poisoned ones");
    assert_eq!(c.n_past(), fx.tokens.len());
}
