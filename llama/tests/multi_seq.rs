//! Several sequences in one KV cache: two different prompts decoded
//! together in one batch (tokens interleaved, so every ubatch mixes both
//! sequences) give the logits each gives alone, and the first still
//! matches llama.cpp's reference; then both generate one token per batch;
//! `seq_rm` and a shared prefix (`seq_cp`) give the logits of a fresh
//! decode; bad batches are refused with a message; requests coming and
//! going on four sequences, as a server's slots, reuse the freed cells and
//! keep the attended range bounded.
//!
//! Together is bit-identical to alone, row for row, on every path:
//! flash attention walks a row's cells in order and skips the masked
//! ones; without it, the softmax total is a fixed-point sum that does not
//! depend on where in the row the unmasked cells sit, and `kq·V` runs over
//! V rows in cell order (ggml-core's `matmul/transposed.rs`), so masked
//! cells of other sequences, wherever they are, add nothing. (With
//! llama.cpp's lane-parallel softmax sums and its transposed-V dot, an
//! interleaved sequence gets ~1e-14 NMSE differences, enough to flip a
//! router near-tie or a greedy token now and then.) The bound vs alone is
//! therefore exact bits; rows are compared with llama.cpp's reference
//! within the fixture bound.

mod common;

use std::sync::Arc;

use common::{nmse, or_skip, same_bits, Fixture, MODELS};
use ggml_core::GgmlType;
use llama::{Batch, Context, ContextParams, LlamaError, Model, ModelParams};

/// The KV cache of a run: K and V types and flash attention.
#[derive(Clone, Copy)]
struct Kv(GgmlType, GgmlType, bool);

const F16: Kv = Kv(GgmlType::F16, GgmlType::F16, false);

fn params(n_ubatch: usize, kv: Kv) -> ContextParams {
    ContextParams {
        n_ctx: 512,
        n_batch: 512,
        n_ubatch,
        n_threads: 2,
        kv_type: kv.0,
        kv_type_v: Some(kv.1),
        flash_attn: kv.2,
        ..Default::default()
    }
}

/// Every row's logits of `tokens` decoded alone, then of `gen` fed one at a time.
fn alone(model: &Arc<Model>, tokens: &[i32], gen: &[i32], n_ubatch: usize) -> Vec<Vec<f32>> {
    alone_kv(model, tokens, gen, n_ubatch, F16)
}

fn alone_kv(
    model: &Arc<Model>,
    tokens: &[i32],
    gen: &[i32],
    n_ubatch: usize,
    kv: Kv,
) -> Vec<Vec<f32>> {
    let mut ctx = Context::new(Arc::clone(model), params(n_ubatch, kv)).expect("context");
    ctx.decode(tokens, true).expect("decode alone");
    let mut rows: Vec<Vec<f32>> = (0..tokens.len())
        .map(|i| ctx.logits(i).expect("row").to_vec())
        .collect();
    for &t in gen {
        ctx.decode(&[t], false).expect("decode one");
        rows.push(ctx.logits(0).expect("row").to_vec());
    }
    rows
}

/// `tokens` at positions 0, 1, ... of sequence `seq`, every row's logits
/// wanted or none.
fn seq_batch(tokens: &[i32], seq: i32, logits: bool) -> Batch {
    let mut b = Batch::new();
    for (i, &t) in tokens.iter().enumerate() {
        b.add(t, i as i32, seq, logits);
    }
    b
}

/// A batch of one token of sequence 0, with its logits.
fn one(t: i32, pos: i32) -> Batch {
    let mut b = Batch::new();
    b.add(t, pos, 0, true);
    b
}

/// The second prompt: the fixture's prompt tokens reversed and shifted,
/// a different sequence of a different length.
fn other_prompt(fx: &Fixture) -> Vec<i32> {
    let n = fx.n_vocab() as i32;
    let mut b: Vec<i32> = fx.tokens.iter().rev().map(|&t| (t + 7) % n).collect();
    b.truncate(fx.tokens.len().saturating_sub(2).max(3));
    b
}

fn check(name: &str) {
    let fx = or_skip!(Fixture::load(name));
    let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("load"));
    check_model(name, &fx, &model);
}

fn check_model(name: &str, fx: &Fixture, model: &Arc<Model>) {
    check_model_kv(name, fx, model, F16, true);
}

/// [`check_model`] with a KV cache of `kv`; `vs_ref`: also hold the first
/// sequence to llama.cpp's logits.
fn check_model_kv(name: &str, fx: &Fixture, model: &Arc<Model>, kv: Kv, vs_ref_bound: bool) {
    let (fx, model) = (fx, model.clone());
    let a = fx.tokens.clone();
    let b = other_prompt(fx);
    let gen_a: Vec<i32> = fx.gen.iter().copied().take(4).collect();
    let gen_b: Vec<i32> = gen_a.iter().rev().copied().collect();
    for n_ubatch in [512, 7] {
        let ra = alone_kv(&model, &a, &gen_a, n_ubatch, kv);
        let rb = alone_kv(&model, &b, &gen_b, n_ubatch, kv);
        let mut ctx = Context::new(Arc::clone(&model), params(n_ubatch, kv)).expect("context");
        // both prompts, interleaved, in one batch
        let mut batch = Batch::new();
        let mut where_ = Vec::new();
        for i in 0..a.len().max(b.len()) {
            if i < a.len() {
                batch.add(a[i], i as i32, 0, true);
                where_.push((0, i));
            }
            if i < b.len() {
                batch.add(b[i], i as i32, 1, true);
                where_.push((1, i));
            }
        }
        ctx.decode_batch(&batch).expect("decode together");
        let mut worst = 0f64;
        let mut differ = 0;
        let mut a_rows = Vec::new();
        for (j, &(s, i)) in where_.iter().enumerate() {
            let got = ctx.batch_logits(j).expect("row of batch token");
            let want = if s == 0 { &ra[i] } else { &rb[i] };
            worst = worst.max(nmse(got, want));
            differ += usize::from(!same_bits(got, want));
            if s == 0 {
                a_rows.extend_from_slice(got);
            }
        }
        let vs_ref = nmse(&a_rows, &fx.logits);
        // then one generated token of each per batch
        for (k, (&ta, &tb)) in gen_a.iter().zip(&gen_b).enumerate() {
            let mut batch = Batch::new();
            batch.add(tb, (b.len() + k) as i32, 1, true);
            batch.add(ta, (a.len() + k) as i32, 0, true);
            ctx.decode_batch(&batch).expect("decode step");
            for (row, want) in [(0, &rb[b.len() + k]), (1, &ra[a.len() + k])] {
                let got = ctx.batch_logits(row).expect("row of batch token");
                worst = worst.max(nmse(got, want));
                differ += usize::from(!same_bits(got, want));
            }
        }
        println!("{name} ubatch {n_ubatch}: together vs alone NMSE <= {worst:.2e} ({differ} rows not bit-identical), prompt vs llama.cpp {vs_ref:.2e}");
        assert_eq!(
            differ, 0,
            "{name} ubatch {n_ubatch}: {differ} rows together differ from alone (NMSE up to {worst:.3e})"
        );
        assert!(
            !vs_ref_bound || vs_ref <= fx.bound,
            "{name} ubatch {n_ubatch}: prompt vs llama.cpp NMSE {vs_ref:.3e} > {:.0e}",
            fx.bound
        );
        assert_eq!(
            ctx.kv_cache().used_cells(),
            a.len() + b.len() + 2 * gen_a.len()
        );

        // seq_rm: drop sequence 1's generated tokens and feed them again
        ctx.seq_rm(1, b.len() as i32, -1);
        assert_eq!(ctx.seq_pos_max(1), Some(b.len() as i32 - 1));
        let mut batch = Batch::new();
        for (k, &t) in gen_b.iter().enumerate() {
            batch.add(t, (b.len() + k) as i32, 1, true);
        }
        ctx.decode_batch(&batch).expect("decode after seq_rm");
        for k in 0..gen_b.len() {
            let got = ctx.batch_logits(k).expect("row");
            assert!(
                same_bits(got, &rb[b.len() + k]),
                "{name}: after seq_rm row {k}: NMSE {:.3e}",
                nmse(got, &rb[b.len() + k])
            );
        }

        // a shared prefix: sequence 2 takes sequence 0's prompt cells and
        // decodes only the generated tokens
        ctx.seq_rm(2, 0, -1);
        ctx.seq_cp(0, 2, 0, a.len() as i32);
        let used = ctx.kv_cache().used_cells();
        let mut batch = Batch::new();
        for (k, &t) in gen_a.iter().enumerate() {
            batch.add(t, (a.len() + k) as i32, 2, true);
        }
        ctx.decode_batch(&batch).expect("decode on a shared prefix");
        assert_eq!(
            ctx.kv_cache().used_cells(),
            used + gen_a.len(),
            "the prefix costs no cell"
        );
        for k in 0..gen_a.len() {
            let got = ctx.batch_logits(k).expect("row");
            assert!(
                same_bits(got, &ra[a.len() + k]),
                "{name}: shared prefix row {k}: NMSE {:.3e}",
                nmse(got, &ra[a.len() + k])
            );
        }
    }
}

#[test]
fn together_qwen3moe_f32() {
    check(MODELS[0]);
}

/// The same on the simulated device with the experts in host memory
/// (the KV cache in device memory, expert copies per ubatch of mixed
/// sequences).
#[test]
fn together_qwen3moe_sim_device_cpu_moe() {
    let fx = or_skip!(Fixture::load(MODELS[0]));
    let dev = llama::device::open_device("SIM0", 2, 1).expect("SIM0");
    let params = ModelParams {
        device: dev,
        placement: llama::placement::Placement {
            cpu_moe: true,
            ..Default::default()
        },
        progress: None,
        ..Default::default()
    };
    let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
    check_model("tiny-qwen3moe-f32 on SIM0 --cpu-moe", &fx, &model);
}

/// A Q8_0 K and V cache with flash attention: rows of mixed sequences
/// quantized cell by cell, `seq_rm` and a shared prefix (`seq_cp`) on the
/// quantized cells; qwen3moe (q4_k) also against llama.cpp, gpt-oss (sliding
/// window, sinks) and deepseek2 (MLA latent rows) against their own alone
/// runs with the same cache (Q8_0 K/V moves gpt-oss's logits by ~1.6e-2
/// NMSE from llama.cpp's F16-cache reference: see kv_types.rs).
#[test]
fn together_with_a_q8_0_cache() {
    let q8 = Kv(GgmlType::Q8_0, GgmlType::Q8_0, true);
    for (name, vs_ref) in [
        ("tiny-qwen3moe-q4_k", true),
        ("tiny-gptoss-mxfp4", false),
        ("tiny-deepseek2-q4_k", false),
    ] {
        let fx = or_skip!(Fixture::load(name), continue);
        let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("load"));
        check_model_kv(&format!("{name} q8_0 cache"), &fx, &model, q8, vs_ref);
    }
}

#[test]
fn together_deepseek2_f32() {
    check(MODELS[9]);
}

#[test]
fn together_gptoss_mxfp4() {
    check(MODELS[11]);
}

/// With a single sequence at a time in a fresh cache, the cells are those
/// of the single-sequence API, so the logits are bit-identical; and a
/// sequence decoded after another one was removed reuses the freed cells
/// at the same indices: bit-identical too.
#[test]
fn freed_cells_bit_identical() {
    let fx = or_skip!(Fixture::load(MODELS[0]));
    let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("load"));
    let ra = alone(&model, &fx.tokens, &[], 512);
    let mut ctx = Context::new(Arc::clone(&model), params(512, F16)).expect("context");
    let other = other_prompt(&fx);
    ctx.decode_batch(&seq_batch(&other, 3, false))
        .expect("other sequence");
    ctx.seq_rm(3, 0, -1);
    assert_eq!(ctx.kv_cache().used_cells(), 0);
    ctx.decode_batch(&seq_batch(&fx.tokens, 5, true))
        .expect("decode");
    for (i, want) in ra.iter().enumerate() {
        assert_eq!(ctx.batch_logits(i).expect("row"), &want[..], "row {i}");
    }
}

/// A sequence whose earlier cells sit after a hole (another sequence,
/// decoded first, was removed) stores its next tokens after its own last
/// cell, not in the hole: its cells stay in position order, and its logits
/// are those it gets alone, bit for bit (attention sums a row's cells in
/// cell order). Each generated token fed one at a time, then two at once.
#[test]
fn tokens_after_a_hole_keep_position_order() {
    let fx = or_skip!(Fixture::load(MODELS[0]));
    let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("load"));
    let gen: Vec<i32> = fx.gen.iter().copied().take(4).collect();
    let ra = alone(&model, &fx.tokens, &gen, 512);
    let mut ctx = Context::new(Arc::clone(&model), params(512, F16)).expect("context");
    let other = other_prompt(&fx);
    ctx.decode_batch(&seq_batch(&other, 1, false))
        .expect("other sequence");
    ctx.decode_batch(&seq_batch(&fx.tokens, 0, true))
        .expect("prompt");
    ctx.seq_rm(1, 0, -1); // a hole of other.len() cells before the prompt
    let n = fx.tokens.len();
    let mut rows = Vec::new();
    for (k, &t) in gen[..2].iter().enumerate() {
        ctx.decode_batch(&one(t, (n + k) as i32)).expect("token");
        rows.push(ctx.batch_logits(0).expect("row").to_vec());
    }
    let mut batch = Batch::new();
    batch.add(gen[2], n as i32 + 2, 0, true);
    batch.add(gen[3], n as i32 + 3, 0, true);
    ctx.decode_batch(&batch).expect("two tokens");
    rows.push(ctx.batch_logits(0).expect("row").to_vec());
    rows.push(ctx.batch_logits(1).expect("row").to_vec());
    // the sequence's cells, in cell order, hold positions 0, 1, 2, ...
    let pos: Vec<i32> = ctx
        .kv_cache()
        .cells()
        .iter()
        .filter(|c| c.has_seq(0))
        .map(|c| c.pos)
        .collect();
    assert_eq!(pos, (0..(n + 4) as i32).collect::<Vec<_>>());
    for (k, got) in rows.iter().enumerate() {
        assert!(
            same_bits(got, &ra[n + k]),
            "generated row {k}: NMSE {:.3e} vs alone",
            nmse(got, &ra[n + k])
        );
    }
    // with no room after the sequence, a token still finds the hole
    let mut ctx = Context::new(
        Arc::clone(&model),
        ContextParams {
            n_ctx: other.len() + n,
            ..params(512, F16)
        },
    )
    .expect("context");
    let mut batch = Batch::new();
    for (i, &t) in other.iter().enumerate() {
        batch.add(t, i as i32, 1, false);
    }
    for (i, &t) in fx.tokens.iter().enumerate() {
        batch.add(t, i as i32, 0, i + 1 == n);
    }
    ctx.decode_batch(&batch)
        .expect("both prompts fill the cache");
    ctx.seq_rm(1, 0, -1);
    ctx.decode_batch(&one(gen[0], n as i32))
        .expect("a token in the hole");
    let e = nmse(ctx.batch_logits(0).expect("row"), &ra[n]);
    assert!(e <= fx.bound, "in the hole: NMSE {e:.3e}");
}

#[test]
fn bad_batches_are_refused() {
    let fx = or_skip!(Fixture::load(MODELS[0]));
    let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("load"));
    let mut ctx = Context::new(
        Arc::clone(&model),
        ContextParams {
            n_ctx: 8,
            ..params(512, F16)
        },
    )
    .expect("context");
    let msg = |b: &Batch, ctx: &mut Context| ctx.decode_batch(b).unwrap_err().to_string();
    let mut b = Batch::new();
    b.add(1, 0, 64, true);
    assert!(msg(&b, &mut ctx).contains("sequence id 64 is out of range"));
    let mut b = Batch::new();
    b.add(1, 1, 0, true);
    assert!(msg(&b, &mut ctx).contains("position 1 of sequence 0 does not follow"));
    let mut b = Batch::new();
    b.add(1, 0, 0, true);
    b.pos.push(1);
    assert!(msg(&b, &mut ctx).contains("batch arrays differ in length"));
    let mut b = Batch::new();
    for s in 0..3 {
        for p in 0..3 {
            b.add(1, p, s, false);
        }
    }
    let e = ctx.decode_batch(&b).unwrap_err();
    assert!(matches!(e, LlamaError::ContextFull(_)), "{e}");
    // nothing was stored; the context still works
    assert_eq!(ctx.kv_cache().used_cells(), 0);
    let mut b = Batch::new();
    for s in 0..2 {
        for p in 0..4 {
            b.add(2, p, s, p == 3);
        }
    }
    ctx.decode_batch(&b).expect("decode after errors");
    assert_eq!(ctx.n_outputs(), 2);
    assert!(ctx.batch_logits(0).is_none());
    assert!(ctx.batch_logits(3).is_some());
}

/// Requests coming and going on four sequences, as a server's slots: each
/// request decodes its prompt, then generates one token per batch beside
/// the others, and is removed (`seq_rm`) when done; the next request on
/// that sequence starts at position 0 in the freed cells. Over many more
/// tokens than the cache has cells, every row of every request gives the
/// bits it gives alone (each sequence's cells stay in position order), and
/// the attended range (one past the last cell in use) stays within twice
/// the most cells ever in use at once: freed cells are used again, the
/// range does not march to the end of the cache.
fn come_and_go(name: &str, fx: &Fixture, model: &Arc<Model>) {
    const N_CTX: usize = 512;
    const GEN: usize = 5;
    let n_vocab = fx.n_vocab() as i32;
    // six different requests: prompt and generated tokens, and their rows alone
    let reqs: Vec<(Vec<i32>, Vec<i32>)> = (0..6)
        .map(|k| {
            let n = fx.tokens.len();
            let mut p: Vec<i32> = (0..n)
                .map(|i| (fx.tokens[(i + k) % n] + 3 * k as i32) % n_vocab)
                .collect();
            p.truncate(n.saturating_sub(2 * k).max(3));
            let g: Vec<i32> = (0..GEN)
                .map(|i| (fx.gen[(i + k) % fx.gen.len()] + k as i32) % n_vocab)
                .collect();
            (p, g)
        })
        .collect();
    for n_ubatch in [512, 7] {
        let alone_rows: Vec<Vec<Vec<f32>>> = reqs
            .iter()
            .map(|(p, g)| alone(model, p, g, n_ubatch))
            .collect();
        let mut ctx = Context::new(
            Arc::clone(model),
            ContextParams {
                n_ctx: N_CTX,
                ..params(n_ubatch, F16)
            },
        )
        .expect("context");
        // per slot: (sequence id, request, next row of the request) once started
        let seqs = [0, 5, 9, 2];
        let mut slots: [Option<(usize, usize)>; 4] = [None; 4];
        let (mut next_req, mut done, mut stored) = (0usize, 0usize, 0usize);
        let (mut max_used, mut max_range, mut differ) = (0usize, 0usize, 0usize);
        let mut step = 0;
        while done < 60 {
            // a slot starts its first request at its own step, so requests overlap
            for (j, s) in slots.iter_mut().enumerate() {
                if s.is_none() && step >= j {
                    *s = Some((next_req % reqs.len(), 0));
                    next_req += 1;
                }
            }
            let mut batch = Batch::new();
            let mut rows = Vec::new();
            // the slots in a different order every step
            for j in (0..4).map(|j| (j + step) % 4) {
                let Some((q, at)) = slots[j] else { continue };
                let (p, g) = &reqs[q];
                if at == 0 {
                    for (i, &t) in p.iter().enumerate() {
                        batch.add(t, i as i32, seqs[j], true);
                        rows.push((q, i));
                    }
                } else {
                    let k = at - p.len();
                    batch.add(g[k], at as i32, seqs[j], true);
                    rows.push((q, at));
                }
            }
            ctx.decode_batch(&batch).expect("decode step");
            stored += batch.len();
            for (b, &(q, row)) in rows.iter().enumerate() {
                let got = ctx.batch_logits(b).expect("row of batch token");
                differ += usize::from(!same_bits(got, &alone_rows[q][row]));
            }
            let kv = ctx.kv_cache();
            max_used = max_used.max(kv.used_cells());
            max_range = max_range.max(kv.used_max_p1());
            // advance; a request whose last generated token was fed ends
            for (j, s) in slots.iter_mut().enumerate() {
                let Some((q, at)) = *s else { continue };
                let (p, g) = &reqs[q];
                let at = if at == 0 { p.len() } else { at + 1 };
                if at == p.len() + g.len() {
                    ctx.seq_rm(seqs[j], 0, -1);
                    *s = None;
                    done += 1;
                } else {
                    *s = Some((q, at));
                }
            }
            step += 1;
        }
        println!(
            "{name} ubatch {n_ubatch}: {done} requests, {stored} tokens stored in {N_CTX} cells, at most {max_used} in use, attended range at most {max_range}, {differ} rows not bit-identical to alone"
        );
        assert!(
            stored > 2 * N_CTX,
            "the run reuses every cell: {stored} tokens"
        );
        assert_eq!(
            differ, 0,
            "{name} ubatch {n_ubatch}: rows differ from alone"
        );
        assert!(
            max_range <= 2 * max_used,
            "{name} ubatch {n_ubatch}: the attended range reached {max_range} cells with at most {max_used} in use"
        );
    }
}

#[test]
fn requests_come_and_go_qwen3moe_f32() {
    let fx = or_skip!(Fixture::load(MODELS[0]));
    let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("load"));
    come_and_go(MODELS[0], &fx, &model);
}

/// The same on the simulated device with the experts in host memory.
#[test]
fn requests_come_and_go_sim_device_cpu_moe() {
    let fx = or_skip!(Fixture::load(MODELS[0]));
    let model = fx.model_with_host_experts(Some("SIM0"));
    come_and_go("tiny-qwen3moe-f32 on SIM0 --cpu-moe", &fx, &model);
}
