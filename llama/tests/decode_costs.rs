//! The fixed costs of a decode, counted on a fixture model: one token after
//! another plans its graph once (the cells it stores at are an input,
//! which is not a new plan), and the allocations per token are
//! counted: the first token after the prompt builds its graph, every later
//! one computes it again and allocates nothing (the CPU ops allocate
//! nothing, and neither do the kept graph's inputs and the scheduler's
//! re-run).
//! The logits stay llama.cpp's, so the counted decodes are real ones.
//!
//! One test in this binary: the allocation counter is process-wide.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::{nmse, or_skip, Fixture};
use llama::{Context, ContextParams, Model, ModelParams};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn tokens_reuse_one_plan_and_allocations_are_counted() {
    let fx = or_skip!(Fixture::load("tiny-qwen3moe-q8_0"));
    let model = Arc::new(Model::load(&fx.gguf, ModelParams::default()).expect("model"));
    let params = ContextParams {
        n_ctx: 256,
        n_threads: 2,
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::clone(&model), params).expect("context");
    ctx.decode(&fx.tokens, false).expect("prompt");
    let plans0 = ctx.sched_plans();
    let pool0 = ctx.cpu_backend().pool_stats();
    let mut forced = Vec::new();
    let mut allocs = 0;
    let mut per_token = Vec::with_capacity(fx.gen.len());
    for &t in &fx.gen {
        let before = ALLOCS.load(Ordering::Relaxed);
        ctx.decode(&[t], false).expect("one token");
        let n = ALLOCS.load(Ordering::Relaxed) - before;
        allocs += n;
        per_token.push(n);
        forced.extend_from_slice(ctx.logits(0).expect("row"));
    }
    let e = nmse(&forced, &fx.genlogits);
    assert!(e <= fx.bound, "forced NMSE {e:e}");
    // the prompt (34 tokens) and the tokens (positions 34..50) attend the
    // same padded 64 cells: the first token plans, the others reuse it
    assert_eq!(
        ctx.sched_plans() - plans0,
        1,
        "plans for {} tokens",
        fx.gen.len()
    );
    let n = fx.gen.len() as u64;
    let pool = ctx.cpu_backend().pool_stats();
    eprintln!(
        "{n} tokens: {:.0} allocations per token; pool runs {:.1}, caller sleeps {:.2}, \
         worker sleeps {:.2} per token",
        allocs as f64 / n as f64,
        (pool.runs - pool0.runs) as f64 / n as f64,
        (pool.caller_sleeps - pool0.caller_sleeps) as f64 / n as f64,
        (pool.worker_sleeps - pool0.worker_sleeps) as f64 / n as f64,
    );
    eprintln!("allocations per token: {per_token:?}");
    // the first token builds and plans its graph (the prompt's had another
    // shape); every later one computes the kept graph again: its inputs
    // (the cells it stores at among them) written, the scheduler's plan, splits and memory as
    // they were, and nothing allocated (280 a token before graphs were
    // kept: the graph's tensor names, the input buffers, the scheduler's
    // per-graph lists)
    assert!(per_token[0] > 0, "the first token builds a graph");
    assert_eq!(
        &per_token[1..],
        &vec![0; per_token.len() - 1][..],
        "allocations of the tokens after the first"
    );
    let h = ctx.host_time();
    assert!(h.graphs_reused >= n - 1, "{h:?}");
}
