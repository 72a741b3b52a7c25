//! Simulated figures of a run on a sim device: the clock's totals taken
//! before the prompt, after it and after generation, turned into the
//! summary's `sim_*` keys, and the recorded timeline written as a Chrome
//! trace (`--timeline-out`). Every figure here is simulated time, never
//! mixed with wall-clock time.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use ggml_core::sim::SimTotals;
use ggml_core::SimClock;
use serde::Serialize;

/// The simulated part of a run summary (JSON keys as named).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SimReport {
    /// The timing profile's name.
    pub sim_profile: String,
    /// Simulated seconds of the prompt.
    pub sim_prompt_s: f64,
    /// Simulated seconds of generation.
    pub sim_gen_s: f64,
    /// Simulated prompt tokens per second.
    pub sim_prompt_tps: f64,
    /// Simulated generated tokens per second.
    pub sim_gen_tps: f64,
    /// Simulated seconds the host-to-device link was busy (whole run).
    pub sim_link_busy_s: f64,
    /// Simulated seconds the device computed (whole run).
    pub sim_device_busy_s: f64,
    /// Simulated seconds of link time that overlapped device compute.
    pub sim_link_hidden_s: f64,
}

/// Snapshots of one run's clock.
pub struct SimRun {
    clock: Arc<SimClock>,
    start: SimTotals,
    after_prompt: SimTotals,
}

impl SimRun {
    /// Start measuring (before the prompt); records spans when `timeline`.
    pub fn start(clock: Arc<SimClock>, timeline: bool) -> SimRun {
        if timeline {
            clock.set_recording(true);
        }
        let start = clock.totals();
        SimRun {
            clock,
            start,
            after_prompt: start,
        }
    }

    /// The prompt is done.
    pub fn prompt_done(&mut self) {
        self.after_prompt = self.clock.totals();
    }

    /// The clock.
    pub fn clock(&self) -> &Arc<SimClock> {
        &self.clock
    }

    /// The report, after generation.
    pub fn report(&self, prompt_tokens: usize, gen_tokens: usize) -> SimReport {
        let end = self.clock.totals();
        let prompt = self.after_prompt.since(&self.start);
        let gen = end.since(&self.after_prompt);
        let all = end.since(&self.start);
        let s = |ns: u64| ns as f64 / 1e9;
        let tps = |n: usize, ns: u64| if ns > 0 { n as f64 / s(ns) } else { 0.0 };
        SimReport {
            sim_profile: self.clock.profile().name.clone(),
            sim_prompt_s: s(prompt.now_ns),
            sim_gen_s: s(gen.now_ns),
            sim_prompt_tps: tps(prompt_tokens, prompt.now_ns),
            sim_gen_tps: tps(gen_tokens, gen.now_ns),
            sim_link_busy_s: s(all.link_busy_ns),
            sim_device_busy_s: s(all.device_busy_ns),
            sim_link_hidden_s: s(all.link_hidden_ns),
        }
    }

    /// Write the spans recorded since [`SimRun::start`] as a Chrome trace.
    pub fn write_timeline(&self, path: &Path) -> Result<()> {
        let t = self.clock.take_timeline();
        let title = format!("simulated clock, profile {}", self.clock.profile().name);
        std::fs::write(path, t.to_chrome_json(&title))
            .with_context(|| format!("cannot write '{}'", path.display()))
    }
}

impl SimReport {
    /// Add `ns` of simulated time spent on another device between the
    /// generation's decodes (a draft model's), over `gen_tokens` tokens.
    pub fn add_serial_gen_ns(&mut self, ns: u64, gen_tokens: usize) {
        self.sim_gen_s += ns as f64 / 1e9;
        self.sim_gen_tps = if self.sim_gen_s > 0.0 {
            gen_tokens as f64 / self.sim_gen_s
        } else {
            0.0
        };
    }

    /// The summary's lines, labelled simulated.
    pub fn to_text(&self) -> String {
        let hidden = if self.sim_link_busy_s > 0.0 {
            100.0 * self.sim_link_hidden_s / self.sim_link_busy_s
        } else {
            0.0
        };
        format!(
            "simulated     = prompt {:.2} tokens per second, generation {:.2} tokens per second (simulated clock, profile {}; not wall-clock)\n\
             simulated     = link busy {:.3} ms, device busy {:.3} ms, link hidden under compute {:.3} ms ({:.1}% of link time)\n",
            self.sim_prompt_tps,
            self.sim_gen_tps,
            self.sim_profile,
            self.sim_link_busy_s * 1e3,
            self.sim_device_busy_s * 1e3,
            self.sim_link_hidden_s * 1e3,
            hidden
        )
    }
}

/// Write a device's event timeline (CUDA events: wall-clock time, not
/// simulated) as a Chrome trace.
pub fn write_event_timeline(device: &dyn ggml_core::Backend, path: &Path) -> Result<()> {
    let t = match device.diagnostics() {
        Some(d) => d
            .take_event_timeline()
            .with_context(|| format!("reading {}'s timeline", device.name()))?
            .unwrap_or_default(),
        None => Default::default(),
    };
    // the CUDA backend names an emulated device's track "CUDA0 (emulated)"
    let emulated = t.spans.iter().any(|s| s.backend.ends_with("(emulated)"));
    let title = if emulated {
        format!(
            "{} events (emulated: wall-clock of the CPU emulator, not GPU durations)",
            device.name()
        )
    } else {
        format!("{} events (wall-clock)", device.name())
    };
    std::fs::write(path, t.to_chrome_json(&title))
        .with_context(|| format!("cannot write '{}'", path.display()))
}
