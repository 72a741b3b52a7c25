//! The worker pool's fixed cost per op, back to back as a decode's ops run:
//! `ThreadPool::run` of a job that does nothing, and of one whose slots
//! each work 5 µs (a small decode op), on 1 and 2 threads. Prints ns per
//! run beyond the work (best and median of 200 rounds of 200 runs), how
//! often the worker ran a slot (the rest the caller ran itself: the worker
//! came too late), and the sleeps the pool took.
//!
//! `cargo bench -p ggml-core --bench pool`

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ggml_core::cpu::ThreadPool;

fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn main() {
    const RUNS: usize = 200;
    for nth in [1usize, 2] {
        let pool = ThreadPool::new(nth);
        let caller = std::thread::current().id();
        for work in [Duration::ZERO, Duration::from_micros(5)] {
            let by_worker = AtomicU64::new(0);
            let s0 = pool.stats();
            let mut per_run: Vec<f64> = (0..200)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..RUNS {
                        pool.run(&|_, _| {
                            if !work.is_zero() {
                                spin_for(work);
                                if std::thread::current().id() != caller {
                                    by_worker.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        });
                    }
                    let per = t.elapsed().as_secs_f64() * 1e9 / RUNS as f64;
                    // the work of one slot, or of all when one thread ran them
                    per - work.as_secs_f64() * 1e9
                })
                .collect();
            per_run.sort_by(f64::total_cmp);
            let s = pool.stats();
            let runs = 200 * RUNS as u64;
            println!(
                "{nth} thread(s), slots of {:>4} ns: beyond one slot's work best {:>6.0} ns, \
                 median {:>6.0} ns per run; worker ran {:>5.1}% of the slots; \
                 caller sleeps {}, worker sleeps {} in {runs} runs",
                work.as_nanos(),
                per_run[0],
                per_run[per_run.len() / 2],
                100.0 * by_worker.load(Ordering::Relaxed) as f64 / (runs * nth as u64) as f64,
                s.caller_sleeps - s0.caller_sleeps,
                s.worker_sleeps - s0.worker_sleeps,
            );
        }
    }
}
