//! A persistent worker pool: threads are spawned once per backend and woken
//! for each op, since decoding runs thousands of tiny ops per token.
//!
//! Both sides spin briefly before sleeping: workers for the next job, the
//! caller for the workers to finish (an op's last task usually ends within
//! microseconds of the caller's), so that back-to-back ops cost no futex
//! wake-ups. [`ThreadPool::stats`] counts the sleeps that did happen.
//!
//! A pool is made with the most threads it will use; each job runs on the
//! first [`ThreadPool::n_threads`] of them (llama.cpp's `n_threads` for a
//! token, `n_threads_batch` for a prompt batch, on one thread pool:
//! [`ThreadPool::set_n_threads`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

type Job = dyn Fn(usize, usize) + Sync;

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    done: Condvar,
    generation: AtomicUsize,
    /// Workers still running the current job; the last one to finish
    /// notifies `done` under the state lock.
    pending: AtomicUsize,
    runs: AtomicU64,
    caller_sleeps: AtomicU64,
    worker_sleeps: AtomicU64,
}

struct State {
    job: Option<*const Job>,
    /// Threads the current job runs on (the first `nth` of the pool).
    nth: usize,
    generation: usize,
    shutdown: bool,
}

/// Spin iterations before a thread sleeps on a condition variable.
const SPINS: usize = 20_000;

/// What a pool did since it was made: jobs run on all threads, and how often
/// the caller or a worker had to sleep and be woken (each a futex round
/// trip, tens of microseconds on a busy machine).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Calls of [`ThreadPool::run`] that used the workers.
    pub runs: u64,
    /// Times the caller slept waiting for workers to finish a job.
    pub caller_sleeps: u64,
    /// Times a worker slept waiting for the next job.
    pub worker_sleeps: u64,
}

// SAFETY: the raw job pointer is only dereferenced while `run` blocks, which
// keeps the closure alive; the closure itself is `Sync`.
unsafe impl Send for State {}

/// A fixed set of worker threads that run one closure at a time on all of
/// them (the caller's thread takes part as worker 0).
pub struct ThreadPool {
    n_threads: usize,
    active: AtomicUsize,
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
                nth: n_threads,
                generation: 0,
                shutdown: false,
            }),
            wake: Condvar::new(),
            done: Condvar::new(),
            generation: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            runs: AtomicU64::new(0),
            caller_sleeps: AtomicU64::new(0),
            worker_sleeps: AtomicU64::new(0),
        });
        let workers = (1..n_threads)
            .map(|ith| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("ggml-cpu-{ith}"))
                    .spawn(move || worker(shared, ith))
                    .expect("spawning a CPU worker thread")
            })
            .collect();
        ThreadPool {
            n_threads,
            active: AtomicUsize::new(n_threads),
            shared,
            workers,
            run_lock: Mutex::new(()),
        }
    }

    /// Threads the next jobs run on.
    pub fn n_threads(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Threads the pool was made with: the most [`Self::set_n_threads`]
    /// can ask for.
    pub fn max_threads(&self) -> usize {
        self.n_threads
    }

    /// Run the next jobs on the first `n` threads (clamped to
    /// `1..=max_threads`); the others stay idle.
    pub fn set_n_threads(&self, n: usize) {
        self.active
            .store(n.clamp(1, self.n_threads), Ordering::Relaxed);
    }

    /// Jobs run and sleeps taken so far (see [`PoolStats`]).
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            runs: self.shared.runs.load(Ordering::Relaxed),
            caller_sleeps: self.shared.caller_sleeps.load(Ordering::Relaxed),
            worker_sleeps: self.shared.worker_sleeps.load(Ordering::Relaxed),
        }
    }

    /// Run `f(ith, nth)` on every thread and wait for all of them.
    pub fn run(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        let nth = self.n_threads();
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
            st.nth = nth;
            // every worker takes the job; those past `nth` only check in
            self.shared
                .pending
                .store(self.n_threads - 1, Ordering::Relaxed);
            st.generation += 1;
            self.shared
                .generation
                .store(st.generation, Ordering::Release);
            self.shared.wake.notify_all();
        }
        self.shared.runs.fetch_add(1, Ordering::Relaxed);
        f(0, nth);
        let mut spins = 0;
        while self.shared.pending.load(Ordering::Acquire) > 0 && spins < SPINS {
            std::hint::spin_loop();
            spins += 1;
        }
        let mut st = self.shared.state.lock();
        if self.shared.pending.load(Ordering::Acquire) > 0 {
            self.shared.caller_sleeps.fetch_add(1, Ordering::Relaxed);
            // the last worker decrements, then notifies under this lock
            while self.shared.pending.load(Ordering::Acquire) > 0 {
                self.shared.done.wait(&mut st);
            }
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
        let nth = self
            .n_threads()
            .min(n.div_ceil(min_per_thread.max(1)))
            .max(1);
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

fn worker(shared: Arc<Shared>, ith: usize) {
    let mut seen = 0usize;
    loop {
        // spin briefly: the next op usually follows within microseconds
        let mut spins = 0;
        while shared.generation.load(Ordering::Acquire) == seen && spins < SPINS {
            std::hint::spin_loop();
            spins += 1;
        }
        let job = {
            let mut st = shared.state.lock();
            if st.generation == seen && !st.shutdown {
                shared.worker_sleeps.fetch_add(1, Ordering::Relaxed);
            }
            while st.generation == seen && !st.shutdown {
                shared.wake.wait(&mut st);
            }
            if st.shutdown {
                return;
            }
            seen = st.generation;
            (st.job, st.nth)
        };
        let (job, nth) = job;
        if let Some(job) = job.filter(|_| ith < nth) {
            // SAFETY: `run` keeps the closure alive until pending hits zero.
            let f = unsafe { &*job };
            f(ith, nth);
        }
        if shared.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            // under the lock, so a caller between its check and its wait
            // cannot miss it
            let _st = shared.state.lock();
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
        assert_eq!(pool.stats().runs, 1000);
        let hits = AtomicU64::new(0);
        pool.for_ranges(1001, 1, &|r| {
            hits.fetch_add(r.len() as u64, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 1001);
    }

    #[test]
    fn jobs_run_on_the_threads_asked_for() {
        let pool = ThreadPool::new(4);
        assert_eq!((pool.n_threads(), pool.max_threads()), (4, 4));
        for (n, want) in [(2usize, 2usize), (1, 1), (9, 4), (0, 1), (3, 3)] {
            pool.set_n_threads(n);
            assert_eq!(pool.n_threads(), want);
            let seen = AtomicU64::new(0);
            for _ in 0..200 {
                pool.run(&|ith, nth| {
                    assert_eq!(nth, want);
                    assert!(ith < want, "thread {ith} of {want}");
                    seen.fetch_or(1 << ith, Ordering::Relaxed);
                });
            }
            assert_eq!(seen.load(Ordering::Relaxed), (1 << want) - 1, "n {n}");
            let hits = AtomicU64::new(0);
            pool.for_ranges(1001, 1, &|r| {
                hits.fetch_add(r.len() as u64, Ordering::Relaxed);
            });
            assert_eq!(hits.load(Ordering::Relaxed), 1001);
        }
    }
}
