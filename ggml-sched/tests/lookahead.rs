//! The scheduler's look-ahead on the sim device, with a hook that stages
//! host weights whole into rotating buffers of its own: same results as
//! without it, every weight staged once, the consumers wait for the early
//! copies and no buffer is overwritten while a split reads it (on the
//! recorded timeline), and a hook misusing the context gets errors. A hook
//! staging only half of each weight (partial staging) is offered every
//! such input again when its split comes and completes it there (or
//! declines, and the scheduler copies it whole into the staged memory).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ggml_core::cpu::MappedBuffer;
use ggml_core::{
    Backend, BackendDevice, BufferUsage, CpuBackend, GgmlType, Graph, SimBackend, SimClock,
    SimProfile, TensorData, TensorId,
};
use ggml_sched::{CopyHook, HookCtx, HookError, PrefetchCtx, Scheduler};

const K: usize = 64;
const T: usize = 4;
const LAYERS: usize = 5;

/// Stages every offered weight into the first of its buffers that is free.
struct RingHook {
    slots: Vec<TensorData>,
    staged: usize,
    declined_to_copy: usize,
    misuse: bool,
    /// Stage only the first half of each weight ...
    partial: bool,
    /// ... and complete it when offered again (else decline).
    complete: bool,
    completions: Arc<AtomicUsize>,
}

impl CopyHook for RingHook {
    fn copy_input(&mut self, cx: &mut HookCtx<'_>) -> Result<bool, HookError> {
        let n = cx.nbytes();
        if cx.completes_staging() {
            assert!(self.partial, "a whole staging offered again");
            self.completions.fetch_add(1, Ordering::Relaxed);
            if !self.complete {
                return Ok(false);
            }
            cx.copy_range(n / 2, n - n / 2)?;
            return Ok(true);
        }
        self.declined_to_copy += 1;
        cx.copy_range(0, n)?;
        Ok(true)
    }

    fn prefetch_input(&mut self, cx: &mut PrefetchCtx<'_>) -> Result<bool, HookError> {
        if self.misuse {
            // a copy before staging, then staging memory twice
            let e = cx.copy_range(0, 4).unwrap_err().to_string();
            assert!(e.contains("before any memory was staged"), "{e}");
            assert!(cx.stage(self.slots[0].clone())?);
            let e = cx.stage(self.slots[1].clone()).unwrap_err().to_string();
            assert!(e.contains("already staged"), "{e}");
            let n = cx.nbytes();
            let e = cx.copy_range(0, n + 1).unwrap_err().to_string();
            assert!(e.contains("out of") || e.contains("bounds"), "{e}");
            return Err(HookError::msg("refused on purpose"));
        }
        for s in &self.slots {
            let n = cx.nbytes();
            if self.partial {
                if cx.stage_partial(s.clone())? {
                    assert!(cx.is_partial());
                    cx.copy_range(0, n / 2)?;
                    self.staged += 1;
                    return Ok(true);
                }
            } else if cx.stage(s.clone())? {
                assert!(!cx.is_partial());
                cx.copy_range(0, n)?;
                self.staged += 1;
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// `LAYERS` matmuls over host weights, each followed by a device op.
fn graph() -> (Graph, TensorId, TensorId, Vec<f32>) {
    let mut g = Graph::new();
    let x = g.new_tensor_2d(GgmlType::F32, K as i64, T as i64);
    g.set_input(x);
    let mut cur = x;
    for l in 0..LAYERS {
        let w: Vec<f32> = (0..K * K)
            .map(|i| ((i * 7 + l * 3) % 11) as f32 / 11.0 - 0.5)
            .collect();
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let host: Arc<dyn ggml_core::Buffer> = Arc::new(MappedBuffer::new(Arc::new(bytes)));
        let wt = g.new_tensor_2d(GgmlType::F32, K as i64, K as i64);
        g.tensor_mut(wt).flags.weight = true;
        g.tensor_mut(wt).data = Some(TensorData {
            buffer: host,
            offset: 0,
        });
        let y = g.mul_mat(wt, cur);
        cur = g.scale(y, 0.5);
    }
    g.set_output(cur);
    g.build_forward_expand(cur);
    let xs: Vec<f32> = (0..K * T).map(|i| (i % 13) as f32 / 13.0).collect();
    (g, x, cur, xs)
}

/// What one run gave: the output, weights staged, hook-handled copies, the
/// timeline, bytes copied early, completions offered, bytes the hook and
/// the scheduler copied at the splits.
struct Ran {
    out: Vec<f32>,
    staged: usize,
    handled: usize,
    tl: ggml_core::timeline::Timeline,
    prefetch_bytes: u64,
    completions: usize,
    split_bytes: u64,
}

fn run(
    lookahead: usize,
    n_slots: usize,
    misuse: bool,
) -> Result<(Vec<f32>, usize, usize, ggml_core::timeline::Timeline, u64), String> {
    let r = run_with(lookahead, n_slots, misuse, None)?;
    Ok((r.out, r.staged, r.handled, r.tl, r.prefetch_bytes))
}

/// `partial`: `Some(complete)` stages half of each weight and completes
/// it (`true`) or declines the completion (`false`).
fn run_with(
    lookahead: usize,
    n_slots: usize,
    misuse: bool,
    partial: Option<bool>,
) -> Result<Ran, String> {
    let clock = SimClock::new(SimProfile::default_profile());
    let sim = Arc::new(
        SimBackend::new(0, 1)
            .with_offload_min_batch(1)
            .with_clock(Arc::clone(&clock)),
    );
    let cpu = Arc::new(CpuBackend::new(1).with_clock(clock.clone()));
    let slots = (0..n_slots)
        .map(|_| TensorData {
            buffer: sim
                .alloc_buffer(K * K * 4, BufferUsage::Compute)
                .expect("slot"),
            offset: 0,
        })
        .collect();
    let backends: Vec<Arc<dyn Backend>> = vec![sim, cpu];
    let mut sched = Scheduler::new(backends).expect("scheduler");
    let (mut g, x, out, xs) = graph();
    let completions = Arc::new(AtomicUsize::new(0));
    sched.set_copy_hook(Box::new(RingHook {
        slots,
        staged: 0,
        declined_to_copy: 0,
        misuse,
        partial: partial.is_some(),
        complete: partial.unwrap_or(false),
        completions: Arc::clone(&completions),
    }));
    sched.set_lookahead(lookahead);
    sched.alloc_graph(&mut g).expect("alloc");
    g.write_f32(x, &xs).expect("input");
    clock.set_recording(true);
    let st = sched.compute(&mut g).map_err(|e| e.to_string())?;
    let tl = clock.take_timeline();
    let got = g.read_f32(out).expect("output");
    let split_bytes = st.splits.iter().map(|s| s.hook_bytes + s.sched_bytes).sum();
    let (staged, handled, prefetch_bytes) = (st.prefetched, st.hook_handled, st.prefetch_bytes);
    let completions = completions.load(Ordering::Relaxed);
    Ok(Ran {
        out: got,
        staged,
        handled,
        tl,
        prefetch_bytes,
        completions,
        split_bytes,
    })
}

#[test]
fn staged_weights_give_the_same_results_and_respect_their_events() {
    let (want, p0, h0, _, _) = run(0, 2, false).expect("run");
    assert_eq!((p0, h0), (0, LAYERS));
    for (lookahead, n_slots) in [(1, 1), (2, 2), (4, 3), (8, 1)] {
        let (got, staged, handled, tl, bytes) = run(lookahead, n_slots, false).expect("run");
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "lookahead {lookahead}, {n_slots} slots"
        );
        // every weight staged (a declined one is offered again up to its
        // own split, when the previous reader of a slot is queued)
        assert_eq!(staged + handled, LAYERS, "lookahead {lookahead}");
        assert_eq!(staged, LAYERS, "lookahead {lookahead}, {n_slots} slots");
        assert_eq!(bytes, (LAYERS * K * K * 4) as u64);
        tl.check_hazards()
            .unwrap_or_else(|e| panic!("lookahead {lookahead}, {n_slots} slots: {e}"));
    }
    // with one slot and no look-ahead past the current split there is none
    let (_, staged, _, _, _) = run(0, 1, false).expect("run");
    assert_eq!(staged, 0);
}

#[test]
fn a_hook_misusing_the_context_gets_errors_not_panics() {
    let e = run(2, 2, true).unwrap_err();
    assert!(e.contains("refused on purpose"), "{e}");
    // the scheduler stays usable
    let (_, staged, _, _, _) = run(2, 2, false).expect("run");
    assert_eq!(staged, LAYERS);
}

#[test]
fn partly_staged_weights_are_completed_by_the_hook_or_copied_whole() {
    let base = run_with(0, 2, false, None).expect("run");
    let want = base.out.clone();
    // what the splits copy besides the weights (the input)
    let other = base.split_bytes - (LAYERS * K * K * 4) as u64;
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let w = K * K * 4;
    for complete in [true, false] {
        for (lookahead, n_slots) in [(1, 1), (2, 2), (4, 3), (8, 1)] {
            let what = format!("complete {complete}, lookahead {lookahead}, {n_slots} slots");
            let r = run_with(lookahead, n_slots, false, Some(complete)).expect("run");
            assert_eq!(bits(&r.out), bits(&want), "{what}");
            assert_eq!(r.staged, LAYERS, "{what}");
            // every partial staging offered again, once, at its split
            assert_eq!(r.completions, LAYERS, "{what}");
            assert_eq!(r.prefetch_bytes, (LAYERS * (w / 2)) as u64, "{what}");
            // completed: the missing half; declined: the whole weight
            let rest = if complete { w - w / 2 } else { w };
            assert_eq!(r.split_bytes, other + (LAYERS * rest) as u64, "{what}");
            // no op reads a staged half or a completion before its copy
            // ended, and no slot is overwritten while read
            r.tl.check_hazards()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    }
}
