//! A persistent worker pool: threads are spawned once per backend and woken
//! for each op, since decoding runs thousands of tiny ops per token.
//!
//! Both sides spin briefly before sleeping: workers for the next job, the
//! caller for the workers to finish (an op's last task usually ends within
//! microseconds of the caller's), so that back-to-back ops cost no futex
//! wake-ups. A job is published through atomics, so neither side takes a
//! lock unless one of them sleeps (`cargo bench -p ggml-core --bench pool`
//! measures the cost per op). [`ThreadPool::stats`] counts the sleeps that
//! did happen.
//!
//! A job's `nth` slots (`f(ith, nth)` for `ith < nth`) are claimed from a
//! shared counter by whichever thread comes first, the caller included, and
//! the caller runs the slots nobody claimed. A job therefore never waits for
//! a worker that has not started it: on a machine with more runnable threads
//! than cores, a worker that is not scheduled when an op starts (for
//! milliseconds, at times) no longer stalls every op until it runs; the
//! caller does its share, and the job is closed so that a worker waking
//! later skips it. Only a slot a worker has claimed is waited for.
//!
//! A pool is made with the most threads it will use; each job has
//! [`ThreadPool::n_threads`] slots (llama.cpp's `n_threads` for a token,
//! `n_threads_batch` for a prompt batch, on one thread pool:
//! [`ThreadPool::set_n_threads`]), so at most that many threads work on it.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

type Job = dyn Fn(usize, usize) + Sync;

/// What the caller and the workers share. A job is published through
/// atomics alone: a worker takes the mutex only to sleep, and the caller
/// only to wake a sleeping worker or to sleep itself, so that back-to-back
/// ops cost no lock hand-offs (a worker blocking on a lock the caller holds
/// yields its core, which on a busy machine can cost a time slice).
struct Shared {
    /// Held only around sleeping on and notifying `wake` and `done`.
    sleep: Mutex<()>,
    wake: Condvar,
    done: Condvar,
    /// The current job's number (written by the caller only).
    generation: AtomicUsize,
    shutdown: AtomicBool,
    /// The current job: a pointer to the caller's `&Job`, valid while the
    /// job is open or a worker is inside it.
    job: AtomicPtr<()>,
    /// Slots of the current job.
    nth: AtomicUsize,
    /// The current job's next unclaimed slot, on a cache line of its own:
    /// the caller claims its first slot right after publishing the job,
    /// and on the job's line that would take the line from a worker that
    /// is reading the job to enter it.
    next_slot: OwnLine<AtomicUsize>,
    /// The current job's admission word: its generation's low 32 bits,
    /// [`CLOSED`], and the workers inside it (below [`CLOSED`]). A worker
    /// enters only an open job of the generation it saw, and reads the job
    /// only once inside; the caller closes the job once every slot is
    /// claimed and waits for the workers inside.
    admission: AtomicU64,
    /// Workers asleep on `wake` (or about to be, under `sleep`).
    sleepers: AtomicUsize,
    /// The caller is asleep on `done` (or about to be, under `sleep`).
    caller_waiting: AtomicBool,
    /// Test hook: workers do not enter jobs (as if never scheduled).
    #[cfg(test)]
    hold_workers: AtomicBool,
    /// Counted by the caller on every job: kept off the job's line too.
    runs: OwnLine<AtomicU64>,
    caller_sleeps: AtomicU64,
    worker_sleeps: AtomicU64,
}

/// A value on cache lines of its own (128 bytes: a line and the one the
/// x86 prefetcher pairs with it), so that writes to it do not move the
/// lines its neighbours are read from between cores.
#[repr(align(128))]
struct OwnLine<T>(T);

impl<T> std::ops::Deref for OwnLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Spin iterations before a thread sleeps on a condition variable.
const SPINS: usize = 20_000;

/// The closed bit of [`Shared::admission`].
const CLOSED: u64 = 1 << 31;
/// The inside-count bits of [`Shared::admission`].
const INSIDE: u64 = CLOSED - 1;

/// The admission word of an open, empty job of generation `gen`.
fn admission_open(gen: usize) -> u64 {
    (gen as u64 & 0xffff_ffff) << 32
}

/// Claim and run slots of the current job until none is left.
fn run_slots(shared: &Shared, f: &(dyn Fn(usize, usize) + Sync), nth: usize) {
    loop {
        let s = shared.next_slot.fetch_add(1, Ordering::AcqRel);
        if s >= nth {
            return;
        }
        f(s, nth);
    }
}

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
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            done: Condvar::new(),
            generation: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            job: AtomicPtr::new(std::ptr::null_mut()),
            nth: AtomicUsize::new(n_threads),
            next_slot: OwnLine(AtomicUsize::new(0)),
            admission: AtomicU64::new(admission_open(0) | CLOSED),
            sleepers: AtomicUsize::new(0),
            caller_waiting: AtomicBool::new(false),
            #[cfg(test)]
            hold_workers: AtomicBool::new(false),
            runs: OwnLine(AtomicU64::new(0)),
            caller_sleeps: AtomicU64::new(0),
            worker_sleeps: AtomicU64::new(0),
        });
        let workers = (1..n_threads)
            .map(|ith| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("ggml-cpu-{ith}"))
                    .spawn(move || worker(shared))
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

    /// Threads (slots) the next jobs run on.
    pub fn n_threads(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// Threads the pool was made with: the most [`Self::set_n_threads`]
    /// can ask for.
    pub fn max_threads(&self) -> usize {
        self.n_threads
    }

    /// Run the next jobs with `n` slots (clamped to `1..=max_threads`); the
    /// other threads stay idle.
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

    /// Run `f(ith, nth)` once for every slot `ith < nth`, on whichever of
    /// the pool's threads claim them (the caller runs the slots no worker
    /// claimed), and wait for all of them. Slots may run one after another
    /// on one thread, so a job must not make one slot wait for another.
    pub fn run(&self, f: &(dyn Fn(usize, usize) + Sync)) {
        let nth = self.n_threads();
        if nth == 1 {
            f(0, 1);
            return;
        }
        let _serial = self.run_lock.lock();
        let sh = &*self.shared;
        // SAFETY: lifetime erased; `run` does not return before the job is
        // closed and no worker is inside it (below), and a worker reads the
        // job only once admitted.
        let job: &Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize, usize) + Sync), &'static Job>(f) };
        // only this thread (under `run_lock`) writes the generation
        let gen = sh.generation.load(Ordering::Relaxed).wrapping_add(1);
        sh.job
            .store(&job as *const &Job as *mut (), Ordering::Relaxed);
        sh.nth.store(nth, Ordering::Relaxed);
        sh.next_slot.store(0, Ordering::Relaxed);
        // publishes the three stores above to the worker that enters
        sh.admission.store(admission_open(gen), Ordering::Release);
        sh.generation.store(gen, Ordering::SeqCst);
        // a worker counts itself asleep before its last look at the
        // generation (both SeqCst): it sees the new job, or is woken here
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = sh.sleep.lock();
            sh.wake.notify_all();
        }
        sh.runs.fetch_add(1, Ordering::Relaxed);
        run_slots(sh, f, nth);
        // every slot is claimed: close the job, then wait for the workers
        // running the slots they claimed
        let inside = sh.admission.fetch_or(CLOSED, Ordering::SeqCst) & INSIDE;
        if inside > 0 {
            let mut spins = 0;
            while sh.admission.load(Ordering::Acquire) & INSIDE > 0 && spins < SPINS {
                std::hint::spin_loop();
                spins += 1;
            }
            if sh.admission.load(Ordering::Acquire) & INSIDE > 0 {
                let mut g = sh.sleep.lock();
                // the last worker out looks at this after leaving (both
                // SeqCst): it sees it and notifies, or this sees it gone
                sh.caller_waiting.store(true, Ordering::SeqCst);
                if sh.admission.load(Ordering::SeqCst) & INSIDE > 0 {
                    sh.caller_sleeps.fetch_add(1, Ordering::Relaxed);
                }
                while sh.admission.load(Ordering::SeqCst) & INSIDE > 0 {
                    sh.done.wait(&mut g);
                }
                sh.caller_waiting.store(false, Ordering::Relaxed);
            }
        }
        // `job` goes out of scope: the job is closed and empty, and no
        // worker can enter it any more
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

fn worker(shared: Arc<Shared>) {
    let sh = &*shared;
    let mut seen = 0usize;
    loop {
        // spin briefly: the next op usually follows within microseconds
        let mut spins = 0;
        while sh.generation.load(Ordering::Acquire) == seen
            && !sh.shutdown.load(Ordering::Relaxed)
            && spins < SPINS
        {
            std::hint::spin_loop();
            spins += 1;
        }
        if sh.generation.load(Ordering::Acquire) == seen {
            let mut g = sh.sleep.lock();
            sh.sleepers.fetch_add(1, Ordering::SeqCst);
            let idle = || {
                sh.generation.load(Ordering::SeqCst) == seen && !sh.shutdown.load(Ordering::SeqCst)
            };
            if idle() {
                sh.worker_sleeps.fetch_add(1, Ordering::Relaxed);
            }
            while idle() {
                sh.wake.wait(&mut g);
            }
            sh.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        if sh.shutdown.load(Ordering::Acquire) {
            return;
        }
        seen = sh.generation.load(Ordering::Acquire);
        #[cfg(test)]
        if sh.hold_workers.load(Ordering::Acquire) {
            continue;
        }
        // enter the job of generation `seen` if it is still open
        let tag = admission_open(seen);
        let mut a = sh.admission.load(Ordering::Acquire);
        let entered = loop {
            if a & !INSIDE & !CLOSED != tag || a & CLOSED != 0 {
                break false;
            }
            match sh
                .admission
                .compare_exchange_weak(a, a + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break true,
                Err(now) => a = now,
            }
        };
        if !entered {
            continue;
        }
        let nth = sh.nth.load(Ordering::Relaxed);
        let job = sh.job.load(Ordering::Relaxed) as *const &Job;
        // SAFETY: admitted to the open job of this generation (the CAS
        // acquired the caller's stores of `job` and `nth`), so `run` keeps
        // its `&Job` and the closure alive until this worker leaves.
        run_slots(sh, unsafe { *job }, nth);
        let before = sh.admission.fetch_sub(1, Ordering::SeqCst);
        if before & CLOSED != 0 && before & INSIDE == 1 && sh.caller_waiting.load(Ordering::SeqCst)
        {
            // under the lock, so a caller between its check and its wait
            // cannot miss it
            let _g = sh.sleep.lock();
            sh.done.notify_all();
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.sleep.lock();
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
    fn each_slot_runs_once_under_contention() {
        let pool = ThreadPool::new(4);
        for _ in 0..2000 {
            let seen: [AtomicU64; 4] = Default::default();
            pool.run(&|ith, nth| {
                assert_eq!(nth, 4);
                seen[ith].fetch_add(1, Ordering::Relaxed);
            });
            for s in &seen {
                assert_eq!(s.load(Ordering::Relaxed), 1);
            }
        }
    }

    #[test]
    fn a_job_does_not_wait_for_workers_that_never_start_it() {
        let pool = ThreadPool::new(3);
        // let the workers go idle, then keep them out of every job, as if
        // the OS never scheduled them: the caller must run all the slots
        pool.run(&|_, _| {});
        pool.shared.hold_workers.store(true, Ordering::Release);
        let caller = std::thread::current().id();
        for _ in 0..100 {
            let slots = AtomicU64::new(0);
            pool.run(&|ith, nth| {
                assert_eq!(nth, 3);
                assert_eq!(std::thread::current().id(), caller, "slot {ith}");
                slots.fetch_add(1 << (8 * ith), Ordering::Relaxed);
            });
            assert_eq!(slots.load(Ordering::Relaxed), 0x01_01_01);
        }
        // released, the workers take part again and skip the closed jobs
        pool.shared.hold_workers.store(false, Ordering::Release);
        let sum = AtomicU64::new(0);
        for _ in 0..100 {
            pool.run(&|ith, _| {
                sum.fetch_add(ith as u64 + 1, Ordering::Relaxed);
            });
        }
        assert_eq!(sum.load(Ordering::Relaxed), 600);
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
