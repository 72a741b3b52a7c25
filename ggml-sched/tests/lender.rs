//! A compute lender: the device's compute memory of a graph is laid out in
//! the range the lender lends, results are those of the scheduler's own
//! memory, the loan is given back at the next allocation, a refusal falls
//! back to the scheduler's own buffer, and a loan that does not hold what
//! was asked is a clear error.

use std::sync::{Arc, Mutex};

use ggml_core::{
    Backend, BackendDevice, Buffer, BufferUsage, CpuBackend, GgmlType, Graph, SimBackend,
    TensorData, TensorId,
};
use ggml_sched::{ComputeLender, Loan, SchedError, Scheduler};

const ROW: usize = 64;
const COLS: usize = 16;

/// `(w x) * 3 + 1` on the device: `w` a device weight, `x` an input.
fn graph(w_buf: &Arc<dyn Buffer>) -> (Graph, TensorId, TensorId) {
    let mut g = Graph::new();
    let w = g.new_tensor_2d(GgmlType::F32, ROW as i64, ROW as i64);
    g.tensor_mut(w).flags.weight = true;
    g.tensor_mut(w).data = Some(TensorData {
        buffer: Arc::clone(w_buf),
        offset: 0,
    });
    let x = g.new_tensor_2d(GgmlType::F32, ROW as i64, COLS as i64);
    g.set_input(x);
    let y = g.mul_mat(w, x);
    let z = g.scale(y, 3.0);
    let one = g.scale(z, 1.0);
    g.set_output(one);
    g.build_forward_expand(one);
    (g, x, one)
}

#[derive(Default)]
struct Log {
    lent: Vec<(usize, usize)>,
    given_back: Vec<usize>,
}

/// Lends `[offset, offset + size)` of its buffer while `open`, `size`
/// being `short` bytes less than asked for when set.
struct TestLender {
    buf: Arc<dyn Buffer>,
    offset: usize,
    open: Arc<Mutex<bool>>,
    short: usize,
    log: Arc<Mutex<Log>>,
}

impl ComputeLender for TestLender {
    fn lend(&mut self, backend: usize, bytes: usize) -> Option<Loan> {
        if !*self.open.lock().unwrap() || self.offset + bytes > self.buf.size() {
            return None;
        }
        self.log.lock().unwrap().lent.push((backend, bytes));
        Some(Loan {
            buffer: Arc::clone(&self.buf),
            offset: self.offset,
            size: bytes - self.short,
        })
    }
    fn give_back(&mut self, backend: usize) {
        self.log.lock().unwrap().given_back.push(backend);
    }
}

fn setup() -> (Vec<Arc<dyn Backend>>, Arc<dyn Buffer>) {
    let sim = SimBackend::new(0, 1);
    let w = sim
        .alloc_buffer(ROW * ROW * 4, BufferUsage::Weights)
        .unwrap();
    let vals: Vec<u8> = (0..ROW * ROW)
        .flat_map(|i| (((i * 7) % 11) as f32 - 5.0).to_le_bytes())
        .collect();
    w.write(0, &vals).unwrap();
    let backends: Vec<Arc<dyn Backend>> = vec![Arc::new(sim), Arc::new(CpuBackend::new(2))];
    (backends, w)
}

fn input() -> Vec<f32> {
    (0..ROW * COLS)
        .map(|i| (i % 13) as f32 * 0.5 - 3.0)
        .collect()
}

fn run(sched: &mut Scheduler, w: &Arc<dyn Buffer>) -> Result<(Graph, Vec<f32>), SchedError> {
    let (mut g, x, out) = graph(w);
    sched.alloc_graph(&mut g)?;
    g.write_f32(x, &input()).unwrap();
    sched.compute(&mut g)?;
    let v = g.read_f32(out).unwrap();
    Ok((g, v))
}

#[test]
fn a_graph_runs_in_lent_memory_and_gives_it_back() {
    let (backends, w) = setup();
    let mut own = Scheduler::new(backends.clone()).unwrap();
    let (_, want) = run(&mut own, &w).unwrap();
    let own_sizes = own.compute_buffer_sizes();
    assert!(own_sizes[0].1 > 0, "{own_sizes:?}");

    let pool = backends[0]
        .alloc_buffer(1 << 20, BufferUsage::Weights)
        .unwrap();
    let open = Arc::new(Mutex::new(true));
    let log = Arc::new(Mutex::new(Log::default()));
    let mut sched = Scheduler::new(backends.clone()).unwrap();
    sched.set_lender(Box::new(TestLender {
        buf: Arc::clone(&pool),
        offset: 4096,
        open: Arc::clone(&open),
        short: 0,
        log: Arc::clone(&log),
    }));
    let (g, got) = run(&mut sched, &w).unwrap();
    assert_eq!(got, want, "lent memory gives the same bits");
    // the device's memory of the graph is the loan's, the scheduler's own
    // device buffer was never allocated
    assert_eq!(sched.compute_buffer_sizes()[0].1, 0);
    let lent = sched.lent_sizes();
    assert_eq!(lent[0].1, own_sizes[0].1, "{lent:?}");
    assert_eq!(lent[1].1, 0, "the CPU is never lent to: {lent:?}");
    let on_device: Vec<&TensorData> = g
        .ids()
        .filter_map(|id| g.tensor(id).data.as_ref())
        .filter(|d| Arc::ptr_eq(&d.buffer, &pool))
        .collect();
    assert!(!on_device.is_empty());
    for d in on_device {
        assert!(
            d.offset >= 4096 && d.offset < 4096 + own_sizes[0].1,
            "{}",
            d.offset
        );
    }
    // `compute` allocates the graph again: the loan went back and was
    // lent once more (every `alloc_graph` asks anew)
    assert_eq!(log.lock().unwrap().lent, vec![(0, own_sizes[0].1); 2]);
    assert_eq!(log.lock().unwrap().given_back, vec![0]);

    // the lender closes: the next graph gives the loan back and takes the
    // scheduler's own memory
    *open.lock().unwrap() = false;
    let (_, again) = run(&mut sched, &w).unwrap();
    assert_eq!(again, want);
    assert_eq!(log.lock().unwrap().given_back, vec![0, 0]);
    assert_eq!(log.lock().unwrap().lent.len(), 2);
    assert_eq!(sched.lent_sizes()[0].1, 0);
    assert_eq!(sched.compute_buffer_sizes()[0].1, own_sizes[0].1);

    // open again: lent again, same bits
    *open.lock().unwrap() = true;
    let (_, third) = run(&mut sched, &w).unwrap();
    assert_eq!(third, want);
    assert_eq!(log.lock().unwrap().lent.len(), 4);
}

#[test]
fn the_same_graph_allocated_again_is_planned_as_before() {
    let (backends, w) = setup();
    let pool = backends[0]
        .alloc_buffer(1 << 20, BufferUsage::Weights)
        .unwrap();
    let log = Arc::new(Mutex::new(Log::default()));
    let mut sched = Scheduler::new(backends).unwrap();
    sched.set_lender(Box::new(TestLender {
        buf: pool,
        offset: 0,
        open: Arc::new(Mutex::new(true)),
        short: 0,
        log: Arc::clone(&log),
    }));
    let (mut g, x, out) = graph(&w);
    sched.alloc_graph(&mut g).unwrap();
    g.write_f32(x, &input()).unwrap();
    sched.compute(&mut g).unwrap();
    let first = g.read_f32(out).unwrap();
    // allocated again: its lent tensors are the scheduler's, not caller
    // memory, so the plan is reused
    sched.alloc_graph(&mut g).unwrap();
    g.write_f32(x, &input()).unwrap();
    sched.compute(&mut g).unwrap();
    assert_eq!(g.read_f32(out).unwrap(), first);
    assert_eq!(sched.n_plans(), 1);
    // four allocations (two by `compute`), each but the first giving back
    // the loan of the one before
    assert_eq!(log.lock().unwrap().given_back, vec![0, 0, 0]);
    assert_eq!(log.lock().unwrap().lent.len(), 4);
    // compute_again keeps the loan: nothing asked, nothing given back
    sched.compute_again(&mut g).unwrap();
    assert_eq!(g.read_f32(out).unwrap(), first);
    assert_eq!(log.lock().unwrap().lent.len(), 4);
}

#[test]
fn a_loan_smaller_than_asked_is_an_error_naming_it() {
    let (backends, w) = setup();
    let pool = backends[0]
        .alloc_buffer(1 << 20, BufferUsage::Weights)
        .unwrap();
    let log = Arc::new(Mutex::new(Log::default()));
    let mut sched = Scheduler::new(backends).unwrap();
    sched.set_lender(Box::new(TestLender {
        buf: pool,
        offset: 0,
        open: Arc::new(Mutex::new(true)),
        short: 256,
        log: Arc::clone(&log),
    }));
    let Err(e) = run(&mut sched, &w) else {
        panic!("a short loan must fail");
    };
    let msg = e.to_string();
    assert!(matches!(e, SchedError::BadLoan { .. }), "{msg}");
    assert!(msg.contains("SIM0") && msg.contains("needed"), "{msg}");
    // the refused loan went back at once
    assert_eq!(log.lock().unwrap().given_back, vec![0]);
}

#[test]
fn a_misaligned_loan_is_an_error_naming_it() {
    let (backends, w) = setup();
    let pool = backends[0]
        .alloc_buffer(1 << 20, BufferUsage::Weights)
        .unwrap();
    let mut sched = Scheduler::new(backends).unwrap();
    sched.set_lender(Box::new(TestLender {
        buf: pool,
        offset: 100,
        open: Arc::new(Mutex::new(true)),
        short: 0,
        log: Arc::new(Mutex::new(Log::default())),
    }));
    let Err(e) = run(&mut sched, &w) else {
        panic!("a misaligned loan must fail");
    };
    let msg = e.to_string();
    assert!(msg.contains("offset 100") && msg.contains("256"), "{msg}");
}
