//! Shared pieces of the CPU matmul benchmarks: plain `Instant` timing,
//! best-of-N, and the memory-read yardstick measured in the same run.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Instant;

use ggml_core::{Backend, BufferUsage, Graph, TensorData, TensorId};

/// Seconds of the fastest of `reps` runs of `f` (after one warm-up run).
pub fn best_of(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Seconds of each of `reps` runs of `f` (after one warm-up run), sorted:
/// `[0]` is the best, `[reps / 2]` the median.
pub fn sorted_times(reps: usize, mut f: impl FnMut()) -> Vec<f64> {
    f();
    let mut t: Vec<f64> = (0..reps.max(1))
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t
}

/// A 256 MiB buffer of u64 to read: the bandwidth yardstick.
pub struct MemRead {
    buf: Vec<u64>,
}

impl MemRead {
    pub fn new() -> MemRead {
        MemRead {
            buf: (0..(256usize << 20) / 8).map(|i| i as u64).collect(),
        }
    }

    /// Bytes of the buffer.
    pub fn bytes(&self) -> usize {
        self.buf.len() * 8
    }

    fn sum(s: &[u64]) -> u64 {
        // four independent chains so the loop is bound by loads, not adds
        let mut acc = [0u64; 4];
        let mut it = s.chunks_exact(4);
        for c in &mut it {
            for (a, x) in acc.iter_mut().zip(c) {
                *a = a.wrapping_add(*x);
            }
        }
        it.remainder()
            .iter()
            .fold(acc.iter().fold(0, |a, x| a.wrapping_add(*x)), |a, x| {
                a.wrapping_add(*x)
            })
    }

    /// GB/s of summing the whole buffer with `nth` threads, best of `reps`.
    pub fn gbps(&self, nth: usize, reps: usize) -> f64 {
        let per = self.buf.len().div_ceil(nth);
        let secs = best_of(reps, || {
            let total = std::thread::scope(|s| {
                let hs: Vec<_> = self
                    .buf
                    .chunks(per)
                    .map(|c| s.spawn(move || MemRead::sum(std::hint::black_box(c))))
                    .collect();
                hs.into_iter()
                    .map(|h| h.join().unwrap())
                    .fold(0u64, u64::wrapping_add)
            });
            std::hint::black_box(total);
        });
        (self.buf.len() * 8) as f64 / secs / 1e9
    }
}

impl MemRead {
    /// GB/s of the fastest 8 MiB slice read with `nth` threads, over all
    /// slices of the buffer (`rounds` passes): on a busy machine a slice
    /// takes about as long as one timed op, so it is as likely to run
    /// uninterrupted. The threads are started once and meet at a spinning
    /// barrier before and after each slice.
    pub fn burst_gbps(&self, nth: usize, rounds: usize) -> f64 {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let slice = (8usize << 20) / 8;
        let n_slices = self.buf.len() / slice;
        let arrived = AtomicUsize::new(0);
        let barrier = |k: &mut usize| {
            *k += 1;
            arrived.fetch_add(1, Ordering::AcqRel);
            while arrived.load(Ordering::Acquire) < *k * nth {
                std::hint::spin_loop();
            }
        };
        let best = std::thread::scope(|s| {
            let hs: Vec<_> = (0..nth)
                .map(|ith| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        let (mut k, mut best, mut acc) = (0usize, f64::INFINITY, 0u64);
                        for _ in 0..rounds {
                            for i in 0..n_slices {
                                let part = &self.buf[i * slice..(i + 1) * slice];
                                let per = slice / nth;
                                barrier(&mut k);
                                let t = Instant::now();
                                acc = acc.wrapping_add(MemRead::sum(std::hint::black_box(
                                    &part[ith * per..(ith + 1) * per],
                                )));
                                barrier(&mut k);
                                best = best.min(t.elapsed().as_secs_f64());
                            }
                        }
                        std::hint::black_box(acc);
                        best
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap())
                .fold(f64::INFINITY, f64::min)
        });
        (slice * 8) as f64 / best / 1e9
    }
}

/// Give every non-view tensor of `g` memory in one buffer of `be`.
pub fn alloc(g: &mut Graph, be: &dyn Backend) {
    let ids: Vec<TensorId> = g
        .ids()
        .filter(|&t| g.tensor(t).view_src.is_none())
        .collect();
    let total: usize = ids
        .iter()
        .map(|&t| g.tensor(t).nbytes().next_multiple_of(64))
        .sum();
    let buf = be.alloc_buffer(total, BufferUsage::Compute).unwrap();
    let mut off = 0;
    for t in ids {
        let n = g.tensor(t).nbytes().next_multiple_of(64);
        g.tensor_mut(t).data = Some(TensorData {
            buffer: Arc::clone(&buf),
            offset: off,
        });
        off += n;
    }
}

/// Deterministic values in [-1, 1).
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A weight matrix of `rows` rows of `k` elements of `ty`: 61 distinct
/// rows quantized by the active level's `from_float`, repeated (the
/// values do not matter for speed, and the reference quantizers are slow).
pub fn weight_rows(ty: ggml_core::GgmlType, k: usize, rows: usize) -> Vec<u8> {
    let tr = ggml_core::quants::cpu_traits(ty).unwrap();
    let row = ty.row_size(k as u64).unwrap();
    let distinct: Vec<Vec<u8>> = (0..61)
        .map(|r| {
            let mut b = vec![0u8; row];
            (tr.from_float)(&values(r as u64 + 1, k), &mut b);
            b
        })
        .collect();
    let mut out = vec![0u8; row * rows];
    for (r, dst) in out.chunks_exact_mut(row).enumerate() {
        dst.copy_from_slice(&distinct[r % 61]);
    }
    out
}

/// Command-line filters (arguments not starting with `-`), lower-cased.
pub fn filters() -> Vec<String> {
    std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .map(|a| a.to_lowercase())
        .collect()
}

/// Whether `name` passes the filters (no filters: everything).
pub fn wanted(filters: &[String], name: &str) -> bool {
    filters.is_empty()
        || filters
            .iter()
            .any(|f| name.to_lowercase().contains(f.as_str()))
}

/// The machine's load averages, as `uptime` prints them.
pub fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}
