//! `llama-run --synth OUT.gguf`: the synthesis flags turned into
//! [`SynthParams`] (the architecture's preset, then each flag given), the
//! size checked against memory, the model generated with a progress
//! display and written atomically.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, Result};
use common::cli;
use common::progress::Progress;
use ggml_core::GgmlType;
use synth::SynthParams;

use super::flags::Args;
use super::TOOL;

/// Write the synthetic model `a`'s flags describe to `out`.
pub(crate) fn synthesize(a: &Args, out: &Path) -> Result<()> {
    let ty = GgmlType::from_name(&a.ty).with_context(|| {
        format!(
            "--type {}: unknown type (supported: {})",
            a.ty,
            synth::supported_types().join(", ")
        )
    })?;
    let base = SynthParams::preset(&a.arch).with_context(|| {
        format!(
            "--arch {}: cannot synthesize this architecture (supported: {})",
            a.arch,
            synth::SYNTH_ARCHS.join(", ")
        )
    })?;
    let embd = a.embd.unwrap_or(base.n_embd);
    let p = if a.arch == "qwen3moe" {
        let head_dim = a
            .head_dim
            .unwrap_or(if embd >= 512 { 128 } else { (embd / 4).max(2) });
        let heads = a.heads.unwrap_or((embd / head_dim.max(1)).max(1));
        let heads_kv = a.heads_kv.unwrap_or(if heads.is_multiple_of(4) {
            heads / 4
        } else {
            heads
        });
        SynthParams {
            n_head: heads,
            n_head_kv: heads_kv,
            head_dim,
            ..base
        }
    } else {
        SynthParams {
            n_head: a.heads.unwrap_or(base.n_head),
            n_head_kv: a.heads_kv.unwrap_or(base.n_head_kv),
            head_dim: a.head_dim.unwrap_or(base.head_dim),
            ..base
        }
    };
    let p = SynthParams {
        n_layer: a.layers.unwrap_or(p.n_layer),
        n_expert: a.experts.unwrap_or(p.n_expert),
        n_expert_used: a.used.unwrap_or(p.n_expert_used),
        n_embd: embd,
        n_ff_exp: a.ff.unwrap_or(p.n_ff_exp),
        n_vocab: a.vocab,
        seed: a.synth_seed,
        ty,
        ..p
    };
    p.validate()?;
    synth::budget::check(&p)?;
    let t0 = Instant::now();
    let mut bar = Progress::new("synthesizing");
    let w = synth::synthesize(&p, &mut |f| bar.set(f))?;
    bar.finish();
    let t1 = Instant::now();
    synth::write_atomic(&w, out)?;
    let size = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "{TOOL}: wrote {} ({}, {} layers, {} experts, {} used, embd {}, ff {}, heads {}/{}x{}, {}): generated in {:.2} s, written in {:.2} s",
        out.display(),
        cli::fmt_bytes(size as f64),
        p.n_layer,
        p.n_expert,
        p.n_expert_used,
        p.n_embd,
        p.n_ff_exp,
        p.n_head,
        p.n_head_kv,
        p.head_dim,
        p.ty,
        (t1 - t0).as_secs_f64(),
        t1.elapsed().as_secs_f64()
    );
    Ok(())
}
