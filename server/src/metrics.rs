//! The server's counters and their Prometheus text form (llama.cpp's
//! `llamacpp:` metric names, plus expert-copy and prompt-cache metrics).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Counters updated by the decode thread and the HTTP handlers.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Requests accepted into the queue.
    pub requests_total: AtomicU64,
    /// Requests answered with an error status.
    pub requests_failed: AtomicU64,
    /// Requests whose client went away before the end.
    pub requests_cancelled: AtomicU64,
    /// Prompt tokens decoded (not counting reused prefix tokens).
    pub prompt_tokens: AtomicU64,
    /// Prompt tokens taken from the cache (common prefix reuse).
    pub prompt_tokens_cached: AtomicU64,
    /// Tokens generated.
    pub predicted_tokens: AtomicU64,
    /// Microseconds spent in decodes that held prompt tokens.
    pub prompt_us: AtomicU64,
    /// Microseconds spent in decodes of generated tokens only.
    pub predicted_us: AtomicU64,
    /// Decode calls.
    pub decodes: AtomicU64,
    /// Sum over decodes of the slots in the batch.
    pub busy_slots_sum: AtomicU64,
    /// Slots generating or processing a prompt now.
    pub slots_busy: AtomicU64,
    /// Requests waiting for a slot now.
    pub queued: AtomicU64,
    /// KV cells in use now.
    pub kv_used: AtomicU64,
    /// KV cells in all.
    pub kv_size: AtomicU64,
    /// Expert weight bytes copied to the device.
    pub expert_bytes: AtomicU64,
    /// Expert weight bytes whole copies would have moved.
    pub expert_full_bytes: AtomicU64,
    /// Slots configured.
    pub n_slots: AtomicU64,
}

impl Metrics {
    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let g = |a: &AtomicU64| a.load(Relaxed);
        let secs = |us: u64| us as f64 / 1e6;
        let rate = |n: u64, us: u64| if us == 0 { 0.0 } else { n as f64 / secs(us) };
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let (pt, pc) = (g(&self.prompt_tokens), g(&self.prompt_tokens_cached));
        let rows: [(&str, &str, &str, f64); 18] = [
            (
                "requests_total",
                "counter",
                "Requests accepted.",
                g(&self.requests_total) as f64,
            ),
            (
                "requests_failed_total",
                "counter",
                "Requests answered with an error.",
                g(&self.requests_failed) as f64,
            ),
            (
                "requests_cancelled_total",
                "counter",
                "Requests whose client disconnected.",
                g(&self.requests_cancelled) as f64,
            ),
            (
                "prompt_tokens_total",
                "counter",
                "Number of prompt tokens processed.",
                pt as f64,
            ),
            (
                "prompt_seconds_total",
                "counter",
                "Prompt process time.",
                secs(g(&self.prompt_us)),
            ),
            (
                "tokens_predicted_total",
                "counter",
                "Number of generation tokens processed.",
                g(&self.predicted_tokens) as f64,
            ),
            (
                "tokens_predicted_seconds_total",
                "counter",
                "Predict process time.",
                secs(g(&self.predicted_us)),
            ),
            (
                "n_decode_total",
                "counter",
                "Total number of llama_decode() calls.",
                g(&self.decodes) as f64,
            ),
            (
                "n_busy_slots_per_decode",
                "counter",
                "Average number of busy slots per llama_decode() call.",
                ratio(g(&self.busy_slots_sum), g(&self.decodes)),
            ),
            (
                "prompt_tokens_seconds",
                "gauge",
                "Average prompt throughput in tokens/s.",
                rate(pt, g(&self.prompt_us)),
            ),
            (
                "predicted_tokens_seconds",
                "gauge",
                "Average generation throughput in tokens/s.",
                rate(g(&self.predicted_tokens), g(&self.predicted_us)),
            ),
            (
                "kv_cache_usage_ratio",
                "gauge",
                "KV-cache usage. 1 means 100 percent usage.",
                ratio(g(&self.kv_used), g(&self.kv_size)),
            ),
            (
                "kv_cache_tokens",
                "gauge",
                "KV-cache tokens.",
                g(&self.kv_used) as f64,
            ),
            (
                "requests_processing",
                "gauge",
                "Number of requests processing.",
                g(&self.slots_busy) as f64,
            ),
            (
                "requests_deferred",
                "gauge",
                "Number of requests deferred.",
                g(&self.queued) as f64,
            ),
            (
                "slots_idle",
                "gauge",
                "Slots free for a request.",
                g(&self.n_slots).saturating_sub(g(&self.slots_busy)) as f64,
            ),
            (
                "expert_bytes_uploaded_total",
                "counter",
                "Expert weight bytes copied host to device.",
                g(&self.expert_bytes) as f64,
            ),
            (
                "prompt_cache_hit_ratio",
                "gauge",
                "Share of prompt tokens reused from the KV cache.",
                ratio(pc, pt + pc),
            ),
        ];
        let mut s = String::new();
        for (name, ty, help, v) in rows {
            let _ = writeln!(s, "# HELP llamacpp:{name} {help}");
            let _ = writeln!(s, "# TYPE llamacpp:{name} {ty}");
            let _ = writeln!(s, "llamacpp:{name} {v}");
        }
        let full = g(&self.expert_full_bytes);
        let _ = writeln!(s, "# HELP llamacpp:expert_copy_saved_ratio Share of whole-tensor expert bytes the per-expert copy avoided.");
        let _ = writeln!(s, "# TYPE llamacpp:expert_copy_saved_ratio gauge");
        let saved = if full == 0 {
            0.0
        } else {
            1.0 - ratio(g(&self.expert_bytes), full).min(1.0)
        };
        let _ = writeln!(s, "llamacpp:expert_copy_saved_ratio {saved}");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_lines() {
        let m = Metrics::default();
        m.prompt_tokens.store(30, Relaxed);
        m.prompt_tokens_cached.store(10, Relaxed);
        m.prompt_us.store(2_000_000, Relaxed);
        m.n_slots.store(4, Relaxed);
        m.slots_busy.store(1, Relaxed);
        let t = m.render();
        assert!(t.contains("llamacpp:prompt_tokens_total 30\n"), "{t}");
        assert!(t.contains("llamacpp:prompt_tokens_seconds 15\n"), "{t}");
        assert!(t.contains("llamacpp:prompt_cache_hit_ratio 0.25\n"), "{t}");
        assert!(t.contains("llamacpp:slots_idle 3\n"), "{t}");
        assert!(t.contains("# TYPE llamacpp:kv_cache_tokens gauge\n"), "{t}");
        for line in t.lines().filter(|l| !l.starts_with('#')) {
            let (name, v) = line.split_once(' ').unwrap();
            assert!(name.starts_with("llamacpp:"));
            assert!(v.parse::<f64>().is_ok(), "{line}");
        }
    }
}
