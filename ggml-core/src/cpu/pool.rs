//! A persistent worker pool: threads are spawned once per backend and woken
//! for each op, since decoding runs thousands of tiny ops per token.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

type Job = dyn Fn(usize, usize) + Sync;

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    done: Condvar,
    generation: AtomicUsize,
}

struct State {
    job: Option<*const Job>,
    generation: usize,
    pending: usize,
    shutdown: bool,
}

// SAFETY: the raw job pointer is only dereferenced while `run` blocks, which
// keeps the closure alive; the closure itself is `Sync`.
unsafe impl Send for State {}

/// A fixed set of worker threads that run one closure at a time on all of
/// them (the caller's thread takes part as worker 0).
pub struct ThreadPool {
    n_threads: usize,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_lock: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `n_threads` (at least 1) threads, including the caller's.
    pub fn new(n_threads: usize) -> ThreadPool {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                job: None,
                generation: 0,
                pending: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            done: Condvar::new(),
            generation: AtomicUsize::new(0),
        });
        let workers = (1..n_threads)
            .map(|ith| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("ggml-cpu-{ith}"))
                    .spawn(move || worker(shared, ith, n_threads))
                    .expect("spawning a CPU worker thread")
            })
            .collect();
        ThreadPool {
            n_threads,
            shared,
            workers,
            run_lock: Mutex::new(()),
        }
    }

    /// Number of threads.
    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    /// Run `f(ith, nth)` on every thread and wait for all of them.
    pub fn run(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        let nth = self.n_threads;
        if nth == 1 {
            f(0, 1);
            return;
        }
        let _serial = self.run_lock.lock();
        {
            let mut st = self.shared.state.lock();
            // SAFETY: lifetime erased; `run` does not return before every
            // worker has finished with the job (pending reaches 0 below).
            let job: *const Job =
                unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync), &'static Job>(f) };
            st.job = Some(job);
            st.pending = nth - 1;
            st.generation += 1;
            self.shared
                .generation
                .store(st.generation, Ordering::Release);
            self.shared.wake.notify_all();
        }
        f(0, nth);
        let mut st = self.shared.state.lock();
        while st.pending > 0 {
            self.shared.done.wait(&mut st);
        }
        st.job = None;
    }

    /// Split `n` items into contiguous ranges, one per thread, and run
    /// `f(range)` on each in parallel. Small `n` runs inline.
    pub fn for_ranges(
        &self,
        n: usize,
        min_per_thread: usize,
        f: &(dyn Fn(std::ops::Range<usize>) + Sync),
    ) {
        let nth = self.n_threads.min(n.div_ceil(min_per_thread.max(1))).max(1);
        if nth <= 1 {
            f(0..n);
            return;
        }
        self.run(&|ith, total| {
            if ith >= nth {
                return;
            }
            let _ = total;
            let per = n.div_ceil(nth);
            let start = (ith * per).min(n);
            let end = ((ith + 1) * per).min(n);
            if start < end {
                f(start..end);
            }
        });
    }
}

fn worker(shared: Arc<Shared>, ith: usize, nth: usize) {
    let mut seen = 0usize;
    loop {
        // spin briefly: the next op usually follows within microseconds
        let mut spins = 0;
        while shared.generation.load(Ordering::Acquire) == seen && spins < 20_000 {
            std::hint::spin_loop();
            spins += 1;
        }
        let job = {
            let mut st = shared.state.lock();
            while st.generation == seen && !st.shutdown {
                shared.wake.wait(&mut st);
            }
            if st.shutdown {
                return;
            }
            seen = st.generation;
            st.job
        };
        if let Some(job) = job {
            // SAFETY: `run` keeps the closure alive until pending hits zero.
            let f = unsafe { &*job };
            f(ith, nth);
        }
        let mut st = shared.state.lock();
        st.pending -= 1;
        if st.pending == 0 {
            shared.done.notify_all();
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        {
            let mut st = self.shared.state.lock();
            st.shutdown = true;
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_thread_runs_each_job() {
        let pool = ThreadPool::new(3);
        let sum = AtomicU64::new(0);
        for _ in 0..1000 {
            pool.run(&|ith, nth| {
                assert_eq!(nth, 3);
                sum.fetch_add(ith as u64 + 1, Ordering::Relaxed);
            });
        }
        assert_eq!(sum.load(Ordering::Relaxed), 6000);
        let hits = AtomicU64::new(0);
        pool.for_ranges(1001, 1, &|r| {
            hits.fetch_add(r.len() as u64, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 1001);
    }
}
