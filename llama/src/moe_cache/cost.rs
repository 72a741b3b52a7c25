//! The cost model of hybrid experts: how long a cached layer's misses take
//! uploaded to the device and computed there, or computed on the CPU from
//! host memory, and the split of the misses that finishes the layer first.
//!
//! A layer's device path costs its kernels (the hits' and the uploaded
//! misses' bytes at device memory bandwidth, plus launches) and the uploads
//! (per role, link latency + expert bytes / link bandwidth); its CPU path
//! costs a fixed part (reading the activations and ids back, the ops,
//! sending the partial output to the device) and, per expert it computes,
//! the slower of its bytes at host memory bandwidth and its FLOPs (two per
//! weight per routed token) at the CPU's rate. The two paths run at the
//! same time, so the layer takes the longer of them; [`CostModel::plan`]
//! moves misses to the CPU, cheapest first, while that shortens the layer.
//!
//! The numbers come from the sim device's profile ([`CostModel::from_sim`])
//! or, on a real device, from a short calibration
//! ([`CostModel::calibrate`]).

use std::sync::Arc;
use std::time::Instant;

use ggml_core::backend::{Backend, BufferUsage};
use ggml_core::sim::SimProfile;

/// Rates and fixed costs of the device, its link and the CPU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostModel {
    /// Host-to-device link bandwidth, bytes/s.
    pub link_bw: f64,
    /// Fixed cost of one copy over the link, seconds.
    pub link_latency_s: f64,
    /// Device memory bandwidth, bytes/s.
    pub device_bw: f64,
    /// Device FLOP/s.
    pub device_flops: f64,
    /// Fixed cost of one device kernel, seconds.
    pub device_launch_s: f64,
    /// Host memory bandwidth the CPU's threads get, bytes/s.
    pub cpu_bw: f64,
    /// CPU FLOP/s of the matrix kernels (all threads).
    pub cpu_flops: f64,
    /// Fixed cost of one CPU op, seconds.
    pub cpu_op_s: f64,
}

/// One expert of a layer, as the cost model sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExpertCost {
    /// Bytes per role (gate, up, down).
    pub role_bytes: [f64; 3],
    /// FLOPs per routed token per role (`2 * ne0 * ne1`).
    pub role_flops: [f64; 3],
    /// Bytes of the activations the CPU path reads back and of the
    /// partial output it sends, per token (`4 * (n_embd + n_used * n_embd)`).
    pub io_bytes_per_token: f64,
}

/// Ops of the CPU path of one layer (ids lookup, gate, up, GLU, down).
const CPU_PATH_OPS: f64 = 5.0;
/// Copies the CPU path adds (activations and ids back, output forward).
const CPU_PATH_COPIES: f64 = 3.0;
/// Kernels of the device path of one layer (lookup, gate, up, GLU, down).
const DEVICE_PATH_OPS: f64 = 5.0;

impl CostModel {
    /// The numbers of a sim profile.
    pub fn from_sim(p: &SimProfile) -> CostModel {
        CostModel {
            link_bw: p.link.h2d_bw,
            link_latency_s: p.link.latency_s,
            device_bw: p.device.mem_bw,
            device_flops: p.device.flops,
            device_launch_s: p.device.launch_s,
            cpu_bw: p.cpu.mem_bw,
            cpu_flops: p.cpu.flops,
            cpu_op_s: p.cpu.op_s,
        }
    }

    /// Measure a real device: the time of a 64 MiB upload (and of a small
    /// one, for the latency) and of a plain read of 256 MiB of host memory;
    /// the device's own rates are taken as far above the link's (the
    /// device side of a miss is the upload); the CPU's FLOP/s and op cost
    /// stay the default's.
    pub fn calibrate(device: &Arc<dyn Backend>) -> CostModel {
        let mut m = CostModel::default();
        let big = 64usize << 20;
        if let Ok(buf) = device.alloc_buffer(big, BufferUsage::Compute) {
            let data = vec![1u8; big];
            let small = [0u8; 4096];
            let _ = buf.write(0, &small);
            let t0 = Instant::now();
            let ok_small = (0..8).all(|_| buf.write(0, &small).is_ok());
            let lat = t0.elapsed().as_secs_f64() / 8.0;
            let t1 = Instant::now();
            let ok_big = buf.write(0, &data).is_ok();
            let dt = t1.elapsed().as_secs_f64();
            if ok_small && ok_big && dt > 0.0 {
                m.link_latency_s = lat.max(1e-6);
                m.link_bw = big as f64 / (dt - lat).max(dt / 2.0);
            }
        }
        m.cpu_bw = measure_host_read_bw(256 << 20);
        m
    }

    /// Seconds to upload one expert: each role one copy.
    pub fn upload_s(&self, e: &ExpertCost) -> f64 {
        e.role_bytes
            .iter()
            .map(|b| self.link_latency_s + b / self.link_bw)
            .sum()
    }

    /// Seconds the device computes one expert for `tokens` tokens.
    pub fn device_s(&self, e: &ExpertCost, tokens: u32) -> f64 {
        (0..3)
            .map(|r| {
                (e.role_bytes[r] / self.device_bw)
                    .max(e.role_flops[r] * tokens as f64 / self.device_flops)
            })
            .sum()
    }

    /// Seconds the CPU computes one expert for `tokens` tokens from host
    /// memory.
    pub fn cpu_s(&self, e: &ExpertCost, tokens: u32) -> f64 {
        (0..3)
            .map(|r| {
                (e.role_bytes[r] / self.cpu_bw)
                    .max(e.role_flops[r] * tokens as f64 / self.cpu_flops)
            })
            .sum()
    }

    /// The fixed part of a layer's CPU path for a ubatch of `n_tokens`.
    pub fn cpu_fixed_s(&self, e: &ExpertCost, n_tokens: u32) -> f64 {
        CPU_PATH_OPS * self.cpu_op_s
            + CPU_PATH_COPIES * self.link_latency_s
            + e.io_bytes_per_token * n_tokens as f64 / self.link_bw
    }

    /// The fixed part of a layer's device path.
    pub fn device_fixed_s(&self) -> f64 {
        DEVICE_PATH_OPS * self.device_launch_s
    }

    /// Which misses the CPU computes: `hits` and `misses` are
    /// `(expert, tokens routed to it)`; returns the experts of `misses`
    /// to compute on the CPU, ascending. Misses move to the CPU in order
    /// of their CPU time (fewest tokens first, then by expert) while the
    /// layer's time, the longer of the two paths, goes down.
    pub fn plan(
        &self,
        e: &ExpertCost,
        n_tokens: u32,
        hits: &[(u32, u32)],
        misses: &[(u32, u32)],
    ) -> Vec<u32> {
        let mut dev = self.device_fixed_s()
            + hits.iter().map(|&(_, t)| self.device_s(e, t)).sum::<f64>()
            + misses
                .iter()
                .map(|&(_, t)| self.upload_s(e) + self.device_s(e, t))
                .sum::<f64>();
        let mut cpu = self.cpu_fixed_s(e, n_tokens);
        let mut order: Vec<(u32, u32)> = misses.to_vec();
        order.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        let mut out = Vec::new();
        for (x, t) in order {
            let d = dev - self.upload_s(e) - self.device_s(e, t);
            let c = cpu + self.cpu_s(e, t);
            if d.max(c) < dev.max(cpu) {
                dev = d;
                cpu = c;
                out.push(x);
            } else {
                break;
            }
        }
        out.sort_unstable();
        out
    }
}

impl Default for CostModel {
    /// PCIe 4.0 x16 and two desktop cores (the `pcie4-x16` sim preset).
    fn default() -> Self {
        CostModel::from_sim(&SimProfile::default_profile())
    }
}

/// Bytes per second of one thread reading `bytes` of host memory (best
/// of three passes of a plain sum over u64 words).
pub fn measure_host_read_bw(bytes: usize) -> f64 {
    let words = vec![1u64; bytes / 8];
    let mut best = f64::INFINITY;
    let mut sink = 0u64;
    for _ in 0..3 {
        let t = Instant::now();
        let s: u64 = words.iter().fold(0u64, |a, &w| a.wrapping_add(w));
        sink = sink.wrapping_add(std::hint::black_box(s));
        best = best.min(t.elapsed().as_secs_f64());
    }
    std::hint::black_box(sink);
    (words.len() * 8) as f64 / best.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One Qwen3-30B-A3B expert in Q4_K (2048 x 768, 144 bytes per 256).
    fn expert() -> ExpertCost {
        let b = 2048.0 * 768.0 * 144.0 / 256.0;
        let f = 2.0 * 2048.0 * 768.0;
        ExpertCost {
            role_bytes: [b; 3],
            role_flops: [f; 3],
            io_bytes_per_token: 4.0 * 2048.0 * 9.0,
        }
    }

    fn profile(link_bw: f64, cpu_bw: f64) -> CostModel {
        CostModel {
            link_bw,
            cpu_bw,
            ..CostModel::default()
        }
    }

    #[test]
    fn a_fast_link_uploads_and_fast_host_memory_computes_on_the_cpu() {
        let misses: Vec<(u32, u32)> = (0..6).map(|e| (e * 3, 1)).collect();
        let hits = [(1, 1), (2, 1)];
        // link 64 GB/s, host memory 4 GB/s: every miss is uploaded
        let fast_link = profile(64e9, 4e9);
        assert!(fast_link.plan(&expert(), 1, &hits, &misses).is_empty());
        // link 2 GB/s, host memory 200 GB/s (and FLOPs to match): all on the CPU
        let fast_host = CostModel {
            cpu_flops: 1e13,
            ..profile(2e9, 200e9)
        };
        assert_eq!(
            fast_host.plan(&expert(), 1, &hits, &misses),
            vec![0, 3, 6, 9, 12, 15]
        );
        // equal rates: a share of them, the layer shorter than either extreme
        let even = profile(25e9, 25e9);
        let cpu = even.plan(&expert(), 1, &hits, &misses);
        assert!(!cpu.is_empty() && cpu.len() < misses.len(), "{cpu:?}");
    }

    #[test]
    fn the_cpu_takes_the_misses_with_fewest_tokens_first() {
        let m = profile(25e9, 25e9);
        let misses = [(4, 9), (5, 1), (7, 3), (9, 1)];
        let cpu = m.plan(&expert(), 16, &[], &misses);
        assert!(cpu.contains(&5) && cpu.contains(&9), "{cpu:?}");
        assert!(!cpu.contains(&4), "{cpu:?}");
    }

    #[test]
    fn the_host_read_measures_a_plausible_bandwidth() {
        let bw = measure_host_read_bw(8 << 20);
        assert!(bw > 1e8 && bw < 1e13, "{bw}");
    }
}
