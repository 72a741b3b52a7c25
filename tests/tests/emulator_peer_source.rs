//! The planted bug `GGML_CUDA_EMULATOR_DROP_WAIT=peer-source` at scheduler
//! level, on two emulated CUDA devices (`CUDA0`, `CUDA1`, peer access on)
//! and the CPU.
//!
//! After a split's peer copies, each source device's compute stream and
//! upload stream wait for the copies (`ggml-sched`'s `run_split`): a device
//! whose memory a peer copy reads does not overwrite it before the copy is
//! done. `peer-source` drops both waits on the source device. In the
//! model-level harness (`llama`'s `cuda_emulator_hazards`, the layers split
//! over the two devices) the waits are implied (see there); here two small
//! graphs have the source device overwrite a peer copy's source later in
//! the same graph:
//! - by its **compute**: `v1` (split 0, CUDA0) crosses to CUDA1, and
//!   CUDA0's next split writes its outputs into `v1`'s memory;
//! - by its **upload stream**: the graph the scheduler property test found
//!   the race in (`sched_props`'s
//!   `a_peer_copys_source_is_not_overwritten_by_later_uploads`): `v3` crosses
//!   to CUDA1 while CUDA0's upload stream copies a later split's host
//!   weight into `v3`'s memory.
//!
//! Each runs over 20 seeds of stream delays: with the waits dropped the
//! hazard detector names the peer copy and the overwriting operation (its
//! verdict depends on the order work is queued in, not on the delays); with
//! them kept no hazard, and the results are exact. Each case needs its own
//! wait: with only the upload-stream wait dropped (a local experiment, not
//! a planted-bug kind) the upload case is caught and the compute case is
//! not; with only the compute-stream wait dropped, the reverse.

mod peer_race;

use std::sync::Arc;

use ggml_core::backend::{Buffer, BufferUsage};
use ggml_core::cpu::MappedBuffer;
use ggml_core::{Backend, CpuBackend, GgmlType, Graph, TensorData, TensorId};
use ggml_cuda::{emulator, CudaBackend};
use ggml_sched::Scheduler;

const SEEDS: u64 = 20;

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// CUDA0, CUDA1 (emulated, peer access on, this seed, `peer-source`
/// dropped or not: this thread's configuration) and the CPU; host weights
/// are offloaded at any batch.
fn backends(seed: u64, drop: bool) -> Vec<Arc<dyn Backend>> {
    emulator::enable();
    emulator::set_thread_config(None);
    let mut c = emulator::config();
    c.devices = c.devices.max(2);
    c.peer = true;
    c.hazards = true;
    c.seed = Some(seed);
    c.drop_wait = drop.then(|| "peer-source".to_string());
    emulator::set_thread_config(Some(c));
    let cuda = |d: usize| -> Arc<dyn Backend> {
        Arc::new(
            CudaBackend::new(d)
                .expect("emulated CUDA device")
                .with_offload_min_batch(1),
        )
    };
    vec![cuda(0), cuda(1), Arc::new(CpuBackend::new(1))]
}

/// A weight of `n` floats at `offset` in `buf`.
fn weight(g: &mut Graph, buf: &Arc<dyn Buffer>, offset: usize, n: i64) -> TensorId {
    let w = g.new_tensor_1d(GgmlType::F32, n);
    g.tensor_mut(w).flags.weight = true;
    g.tensor_mut(w).data = Some(TensorData {
        buffer: buf.clone(),
        offset,
    });
    w
}

/// A device weight buffer holding `vals`.
fn device_weights(be: &Arc<dyn Backend>, vals: &[f32]) -> Arc<dyn Buffer> {
    let b = be
        .alloc_buffer(vals.len() * 4, BufferUsage::Weights)
        .expect("weights");
    b.write(0, &f32_bytes(vals)).expect("write weights");
    b
}

/// What one run gave.
#[derive(Debug)]
enum Outcome {
    /// The run failed: the hazard detector's first message, else the
    /// error (which the checks then reject: it names no hazard).
    Hazard(String),
    /// The outputs, in the order the case lists them.
    Values(Vec<Vec<f32>>),
}

/// One run of a case: its outcome, the waits the planted bug dropped, the
/// peer bytes and the plan.
struct Run {
    outcome: Outcome,
    dropped: u64,
    peer_bytes: u64,
    plan: String,
}

/// Schedule and compute `g` (whose inputs `fill` writes) once, reading
/// `outs` back.
fn run_graph(
    backends: Vec<Arc<dyn Backend>>,
    mut g: Graph,
    fill: impl Fn(&mut Graph),
    outs: &[TensorId],
) -> Run {
    let mut s = Scheduler::new(backends.clone()).expect("scheduler");
    s.alloc_graph(&mut g).expect("alloc_graph");
    fill(&mut g);
    let res = s.compute(&mut g);
    let plan = s.plan_dump();
    let hazards = emulator::take_hazards();
    let dropped = emulator::dropped_waits();
    let peer_bytes = res.as_ref().map_or(0, |st| st.peer_bytes());
    let outcome = match (res, hazards.first()) {
        (_, Some(h)) => Outcome::Hazard(h.clone()),
        (Err(e), None) => Outcome::Hazard(e.to_string()),
        (Ok(_), None) => Outcome::Values(
            outs.iter()
                .map(|&o| g.read_f32(o).expect("read output"))
                .collect(),
        ),
    };
    // a failed run leaves work queued: let it finish before the next seed
    for be in &backends {
        let _ = be.synchronize();
    }
    let _ = emulator::take_hazards();
    Run {
        outcome,
        dropped,
        peer_bytes,
        plan,
    }
}

/// A case: one run for a seed, the waits dropped or not, and the outputs
/// it should give.
type Case = fn(u64, bool) -> (Run, Vec<Vec<f32>>);

const N: i64 = 64;

/// The compute case: `v1 = (x + w0) * 0.5` on CUDA0 crosses to CUDA1
/// (`v2 = v1 + w1`); then CUDA0 computes `v5 = ((v0 + w0) * 2) + w0`, whose
/// nodes the planner puts in `v1`'s memory (dead after the copy).
fn compute_case(seed: u64, drop: bool) -> (Run, Vec<Vec<f32>>) {
    let be = backends(seed, drop);
    let w0v: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let w1v: Vec<f32> = (0..N).map(|i| 100.0 - i as f32).collect();
    let (b0, b1) = (device_weights(&be[0], &w0v), device_weights(&be[1], &w1v));
    let mut g = Graph::new();
    let x = g.new_tensor_2d(GgmlType::F32, N, 1);
    g.set_input(x);
    let w0 = weight(&mut g, &b0, 0, N);
    let w1 = weight(&mut g, &b1, 0, N);
    let v0 = g.add(x, w0);
    let v1 = g.scale(v0, 0.5);
    let v2 = g.add(v1, w1);
    let v3 = g.add(v0, w0);
    let v4 = g.scale(v3, 2.0);
    let v5 = g.add(v4, w0);
    g.set_output(v2);
    g.set_output(v5);
    g.build_forward_expand(v2);
    g.build_forward_expand(v5);
    let xs: Vec<f32> = (0..N).map(|i| (i % 7) as f32 - 3.0).collect();
    let v0w: Vec<f32> = xs.iter().zip(&w0v).map(|(a, w)| a + w).collect();
    let want = vec![
        v0w.iter().zip(&w1v).map(|(v, w)| v * 0.5 + w).collect(),
        v0w.iter()
            .zip(&w0v)
            .map(|(v, w)| (v + w) * 2.0 + w)
            .collect(),
    ];
    let run = run_graph(be, g, |g| g.write_f32(x, &xs).expect("input"), &[v2, v5]);
    (run, want)
}

/// The upload case (`sched_props`'s fixed case, on the emulator): `v3`
/// (CUDA0) crosses to CUDA1 (`v8 = v3 + w13`) while CUDA0's upload stream
/// copies the host weight `w11` of its next split into `v3`'s memory.
fn upload_case(seed: u64, drop: bool) -> (Run, Vec<Vec<f32>>) {
    let be = backends(seed, drop);
    let host_w: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let host_buf: Arc<dyn Buffer> = Arc::new(MappedBuffer::new(Arc::new(f32_bytes(&host_w))));
    let (d0, d1) = (
        device_weights(&be[0], &[0.5; 4]),
        device_weights(&be[1], &[0.5; 4]),
    );
    let mut g = Graph::new();
    let x = g.new_tensor_2d(GgmlType::F32, 4, 1);
    g.set_input(x);
    let w4 = weight(&mut g, &host_buf, 0, 4);
    let w7 = weight(&mut g, &d0, 0, 4);
    let w11 = weight(&mut g, &host_buf, 16, 4);
    let w13 = weight(&mut g, &d1, 0, 4);
    let [v8, v7] = peer_race::build(&mut g, x, w4, w7, w11, w13);
    let xs = [1.0f32, -2.0, 3.0, 0.25];
    let v2w: Vec<f32> = xs.iter().zip(&host_w).map(|(a, w)| 2.0 * a + w).collect();
    let want = vec![
        v2w.iter().map(|v| v * 0.5 + 0.5).collect(),
        v2w.iter()
            .zip(&host_w[4..])
            .map(|(v, w)| v + 0.5 + w)
            .collect(),
    ];
    let run = run_graph(be, g, |g| g.write_f32(x, &xs).expect("input"), &[v8, v7]);
    (run, want)
}

/// Every seed with the waits dropped is caught by the hazard detector,
/// whose message names the peer copy and `overwriter` (the operation on
/// CUDA0 that overwrote its source); every seed with them kept runs
/// hazard-free with exact results, device to device.
fn check(name: &str, case: Case, overwriter: &str) {
    let t0 = std::time::Instant::now();
    let mut first = None;
    for seed in 1..=SEEDS {
        let (r, _) = case(seed, true);
        assert!(
            r.dropped > 0,
            "{name}, seed {seed}: no wait dropped\n{}",
            r.plan
        );
        match r.outcome {
            Outcome::Hazard(h) => {
                assert!(
                    h.contains("hazard (write after read)")
                        && h.contains("is not ordered after peer copy on CUDA1 copy")
                        && h.contains(overwriter),
                    "{name}, seed {seed}: {h}\n{}",
                    r.plan
                );
                first.get_or_insert(h);
            }
            Outcome::Values(v) => panic!(
                "{name} dropped, seed {seed}: not caught ({v:?})\n{}",
                r.plan
            ),
        }
    }
    println!(
        "DROP_WAIT=peer-source ({name}): {SEEDS} seeds caught by the hazard detector in {:.1} s; seed 1: {}",
        t0.elapsed().as_secs_f64(),
        first.unwrap_or_default()
    );
    let t0 = std::time::Instant::now();
    for seed in 1..=SEEDS {
        let (r, want) = case(seed, false);
        assert_eq!(r.dropped, 0, "{name} kept, seed {seed}: a wait was dropped");
        match r.outcome {
            Outcome::Hazard(h) => panic!("{name} kept, seed {seed}: {h}\n{}", r.plan),
            Outcome::Values(v) => {
                assert_eq!(v, want, "{name} kept, seed {seed}\n{}", r.plan);
                assert!(
                    r.peer_bytes > 0,
                    "{name}, seed {seed}: no peer copy\n{}",
                    r.plan
                );
            }
        }
    }
    println!(
        "no wait dropped ({name}): {SEEDS} seeds pass (no hazard, exact results) in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    emulator::set_thread_config(None);
}

#[test]
fn dropped_peer_source_wait_is_caught_when_the_source_computes_again() {
    check("compute", compute_case, "on CUDA0 compute");
}

#[test]
fn dropped_peer_source_wait_is_caught_when_the_source_uploads_again() {
    check(
        "upload",
        upload_case,
        "host-to-device copy on CUDA0 copy0 (uploads)",
    );
}
