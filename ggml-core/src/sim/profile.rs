//! Timing profiles of the simulated clock: how fast the simulated device
//! computes, how fast its link to the host moves bytes, and how fast the CPU
//! computes, so that a run over the CPU and `SIM0` has one simulated
//! timeline.
//!
//! A profile is a preset (`pcie4-x16`, `pcie5-x16`, `h200-pcie5`) or a JSON
//! file with the same fields ([`SimProfile::from_json`]); every field of the
//! file is optional and defaults to the `pcie4-x16` preset:
//!
//! ```json
//! {
//!   "name": "my-card",
//!   "device": { "flops": 8.0e13, "mem_bw": 1.0e12, "launch_s": 4.0e-6 },
//!   "link":   { "h2d_bw": 2.5e10, "d2h_bw": 2.5e10, "latency_s": 1.0e-5 },
//!   "copy_engines": 2,
//!   "cpu":    { "flops": 1.0e11, "mem_bw": 2.5e10, "op_s": 1.0e-6 },
//!   "host_time_scale": 1.0,
//!   "shared_host_link": false,
//!   "d2d_bw": null
//! }
//! ```
//!
//! Units: FLOP/s, bytes/s and seconds. `host_time_scale` weighs the one
//! input that is measured rather than given: the host's own wall-clock
//! time (graph building, planning, the scheduler's loop, the copy hook),
//! which enters the clock as host time ([`crate::sim::SimClock::host_work`]);
//! 1 (every preset) takes it as measured, 0 leaves it out (simulated times
//! then repeat exactly from run to run and machine to machine). `copy_engines` is the number of copy
//! streams the device offers; with one, host-to-device and device-to-host
//! copies share one engine, with two or more they run side by side.
//! `shared_host_link` says how several sim devices of one run (`--device
//! SIM0,SIM1`, one clock) reach the host: `false` (every preset) gives each
//! device a link of its own (each card in its own x16 slot, transfers of
//! the devices overlap); `true` puts them behind one link (one root
//! complex or a switch with one upstream x16: the transfers of all devices
//! serialize on it, direction by direction as for one device).
//!
//! `d2d_bw` is the rate of a **peer copy** between two devices of one run
//! (an activation crossing a layer-split boundary, CUDA's
//! `cuMemcpyPeerAsync`), bytes/s; `null` or absent (every preset) takes the
//! link's, `min(h2d_bw, d2h_bw)` (PCIe peer-to-peer through the root
//! complex), `0` turns peer copies off (activations then cross through host
//! memory: a read back to the host, then an upload). A peer copy lasts
//! `latency_s + bytes / d2d_bw` on the destination's copy stream and holds
//! two link directions for that time: the source's device-to-host one (the
//! bytes leave that card) and the destination's host-to-device one (they
//! enter this one), so it queues behind and ahead of the uploads and reads
//! back on either. With `shared_host_link` both directions are the one
//! shared link's, so a peer copy serializes with every device's copies.
//! With one copy engine a link's two directions are one, as for any copy.

use serde::{Deserialize, Serialize};

/// Roofline numbers of a compute unit (device or CPU).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceProfile {
    /// Sustained FLOP/s of matrix work.
    pub flops: f64,
    /// Memory bandwidth, bytes/s.
    pub mem_bw: f64,
    /// Fixed cost of one op (kernel launch), seconds.
    pub launch_s: f64,
}

/// The host <-> device link.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkProfile {
    /// Host-to-device bandwidth, bytes/s.
    pub h2d_bw: f64,
    /// Device-to-host bandwidth, bytes/s.
    pub d2h_bw: f64,
    /// Fixed cost of one copy, seconds.
    pub latency_s: f64,
}

/// Roofline numbers of the CPU backend.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuProfile {
    /// Sustained FLOP/s of the CPU's matrix kernels (all threads).
    pub flops: f64,
    /// Memory bandwidth the CPU's threads get, bytes/s.
    pub mem_bw: f64,
    /// Fixed cost of one op (thread wake-up and barrier), seconds.
    pub op_s: f64,
}

/// A complete timing profile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimProfile {
    /// Name printed next to simulated figures.
    pub name: String,
    /// The simulated device.
    pub device: DeviceProfile,
    /// Its link to the host.
    pub link: LinkProfile,
    /// Copy engines (copy streams) of the device, at least 1.
    pub copy_engines: usize,
    /// The CPU, for CPU splits on the same timeline.
    pub cpu: CpuProfile,
    /// Weight of the host's measured own time in the clock (see the
    /// module docs): 1 as measured, 0 left out.
    #[serde(default = "one")]
    pub host_time_scale: f64,
    /// Whether several devices share one host link (see the module docs):
    /// their copies then serialize; `false` (the default): a link each.
    #[serde(default)]
    pub shared_host_link: bool,
    /// Peer-copy rate between two devices, bytes/s (see the module docs):
    /// `None` (every preset) the link's, `Some(0.0)` no peer copies.
    #[serde(default)]
    pub d2d_bw: Option<f64>,
}

fn one() -> f64 {
    1.0
}

/// A JSON profile file: every field optional, missing ones from the default
/// preset.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    name: Option<String>,
    device: Option<PartialDevice>,
    link: Option<PartialLink>,
    copy_engines: Option<usize>,
    cpu: Option<PartialCpu>,
    host_time_scale: Option<f64>,
    shared_host_link: Option<bool>,
    d2d_bw: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartialDevice {
    flops: Option<f64>,
    mem_bw: Option<f64>,
    launch_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartialLink {
    h2d_bw: Option<f64>,
    d2h_bw: Option<f64>,
    latency_s: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartialCpu {
    flops: Option<f64>,
    mem_bw: Option<f64>,
    op_s: Option<f64>,
}

/// The CPU numbers of every preset: 2 Zen 4 cores as measured on this
/// project's machines (about 25 GB/s of memory read, 100 GFLOP/s of
/// quantized GEMM). Give your own in a profile file.
const CPU_2_CORES: CpuProfile = CpuProfile {
    flops: 1.0e11,
    mem_bw: 2.5e10,
    op_s: 1.0e-6,
};

impl SimProfile {
    /// Names of the presets.
    pub const PRESETS: &'static [&'static str] = &["pcie4-x16", "pcie5-x16", "h200-pcie5"];

    /// A preset by name: `pcie4-x16` (a consumer card on PCIe 4.0 x16),
    /// `pcie5-x16` (a consumer card on PCIe 5.0 x16), `h200-pcie5` (an H200
    /// NVL on PCIe 5.0 x16).
    pub fn preset(name: &str) -> Option<SimProfile> {
        let (device, link) = match name {
            // RTX 4090 class: ~80 TFLOP/s of FP16 tensor work sustained,
            // 1 TB/s of memory; PCIe 4.0 x16 moves ~25 GB/s in practice.
            "pcie4-x16" => (
                DeviceProfile {
                    flops: 8.0e13,
                    mem_bw: 1.0e12,
                    launch_s: 4.0e-6,
                },
                LinkProfile {
                    h2d_bw: 2.5e10,
                    d2h_bw: 2.5e10,
                    latency_s: 1.0e-5,
                },
            ),
            // RTX 5090 class: ~100 TFLOP/s, 1.8 TB/s; PCIe 5.0 x16 ~50 GB/s.
            "pcie5-x16" => (
                DeviceProfile {
                    flops: 1.0e14,
                    mem_bw: 1.8e12,
                    launch_s: 4.0e-6,
                },
                LinkProfile {
                    h2d_bw: 5.0e10,
                    d2h_bw: 5.0e10,
                    latency_s: 8.0e-6,
                },
            ),
            // H200: ~700 TFLOP/s of dense FP16 sustained, 4.8 TB/s of HBM3e;
            // PCIe 5.0 x16 ~55 GB/s.
            "h200-pcie5" => (
                DeviceProfile {
                    flops: 7.0e14,
                    mem_bw: 4.8e12,
                    launch_s: 3.0e-6,
                },
                LinkProfile {
                    h2d_bw: 5.5e10,
                    d2h_bw: 5.5e10,
                    latency_s: 8.0e-6,
                },
            ),
            _ => return None,
        };
        Some(SimProfile {
            name: name.to_string(),
            device,
            link,
            copy_engines: 2,
            cpu: CPU_2_CORES,
            host_time_scale: 1.0,
            shared_host_link: false,
            d2d_bw: None,
        })
    }

    /// The peer-copy rate in bytes/s (`d2d_bw`, else the link's), or `None`
    /// when the profile turns peer copies off (`d2d_bw` 0).
    pub fn peer_bw(&self) -> Option<f64> {
        match self.d2d_bw {
            Some(bw) if bw > 0.0 => Some(bw),
            Some(_) => None,
            None => Some(self.link.h2d_bw.min(self.link.d2h_bw)),
        }
    }

    /// The default profile (`pcie4-x16`).
    pub fn default_profile() -> SimProfile {
        Self::preset("pcie4-x16").unwrap_or_else(|| unreachable!("pcie4-x16 is a preset"))
    }

    /// Parse a profile file (see the module docs); missing fields come from
    /// the default preset. Errors name the field.
    pub fn from_json(text: &str) -> Result<SimProfile, String> {
        let f: ProfileFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut p = Self::default_profile();
        p.name = f.name.unwrap_or_else(|| "custom".to_string());
        if let Some(d) = f.device {
            p.device.flops = d.flops.unwrap_or(p.device.flops);
            p.device.mem_bw = d.mem_bw.unwrap_or(p.device.mem_bw);
            p.device.launch_s = d.launch_s.unwrap_or(p.device.launch_s);
        }
        if let Some(l) = f.link {
            p.link.h2d_bw = l.h2d_bw.unwrap_or(p.link.h2d_bw);
            p.link.d2h_bw = l.d2h_bw.unwrap_or(p.link.d2h_bw);
            p.link.latency_s = l.latency_s.unwrap_or(p.link.latency_s);
        }
        p.copy_engines = f.copy_engines.unwrap_or(p.copy_engines);
        if let Some(c) = f.cpu {
            p.cpu.flops = c.flops.unwrap_or(p.cpu.flops);
            p.cpu.mem_bw = c.mem_bw.unwrap_or(p.cpu.mem_bw);
            p.cpu.op_s = c.op_s.unwrap_or(p.cpu.op_s);
        }
        p.host_time_scale = f.host_time_scale.unwrap_or(p.host_time_scale);
        p.shared_host_link = f.shared_host_link.unwrap_or(p.shared_host_link);
        p.d2d_bw = f.d2d_bw.or(p.d2d_bw);
        p.validate()?;
        Ok(p)
    }

    /// A preset name or a path to a JSON profile file.
    pub fn from_name_or_file(spec: &str) -> Result<SimProfile, String> {
        if let Some(p) = Self::preset(spec) {
            return Ok(p);
        }
        let path = std::path::Path::new(spec);
        if !path.exists() {
            return Err(format!(
                "'{spec}' is neither a preset ({}) nor an existing profile file",
                Self::PRESETS.join(", ")
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("{spec}: {e}"))?;
        Self::from_json(&text).map_err(|e| format!("{spec}: {e}"))
    }

    /// Check that every rate is positive and finite and every fixed cost is
    /// finite and not negative.
    pub fn validate(&self) -> Result<(), String> {
        let rates = [
            ("device.flops", self.device.flops),
            ("device.mem_bw", self.device.mem_bw),
            ("link.h2d_bw", self.link.h2d_bw),
            ("link.d2h_bw", self.link.d2h_bw),
            ("cpu.flops", self.cpu.flops),
            ("cpu.mem_bw", self.cpu.mem_bw),
        ];
        for (k, v) in rates {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{k} must be a positive number, got {v}"));
            }
        }
        let costs = [
            ("device.launch_s", self.device.launch_s),
            ("link.latency_s", self.link.latency_s),
            ("cpu.op_s", self.cpu.op_s),
        ];
        for (k, v) in costs {
            if !(v.is_finite() && (0.0..=1.0).contains(&v)) {
                return Err(format!("{k} must be between 0 and 1 second, got {v}"));
            }
        }
        if !(self.host_time_scale.is_finite() && (0.0..=100.0).contains(&self.host_time_scale)) {
            return Err(format!(
                "host_time_scale must be between 0 and 100, got {}",
                self.host_time_scale
            ));
        }
        if let Some(v) = self.d2d_bw {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!(
                    "d2d_bw must be a positive number (0: no peer copies), got {v}"
                ));
            }
        }
        if self.copy_engines == 0 || self.copy_engines > 8 {
            return Err(format!(
                "copy_engines must be 1..8, got {}",
                self.copy_engines
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_valid() {
        for name in SimProfile::PRESETS {
            let p = SimProfile::preset(name).unwrap();
            p.validate().unwrap();
            assert_eq!(p.name, *name);
        }
        assert!(SimProfile::preset("pcie9").is_none());
    }

    #[test]
    fn json_fills_missing_fields_from_the_default() {
        let p = SimProfile::from_json(r#"{"link": {"h2d_bw": 1e9}, "copy_engines": 1}"#).unwrap();
        assert_eq!(p.link.h2d_bw, 1e9);
        assert_eq!(p.copy_engines, 1);
        assert_eq!(p.device, SimProfile::default_profile().device);
        assert_eq!(p.name, "custom");
    }

    #[test]
    fn json_errors_name_the_problem() {
        let e = SimProfile::from_json(r#"{"link": {"h2d": 1e9}}"#).unwrap_err();
        assert!(e.contains("h2d"), "{e}");
        let e = SimProfile::from_json(r#"{"device": {"flops": -1}}"#).unwrap_err();
        assert!(e.contains("device.flops"), "{e}");
        let e = SimProfile::from_json(r#"{"copy_engines": 0}"#).unwrap_err();
        assert!(e.contains("copy_engines"), "{e}");
        let e = SimProfile::from_name_or_file("/nonexistent/x.json").unwrap_err();
        assert!(e.contains("neither a preset"), "{e}");
    }
}
