//! The server's counters and their Prometheus text form (llama.cpp's
//! `llamacpp:` metric names, plus expert-copy, expert-cache,
//! prompt-cache and speculative decoding metrics), and how they are read
//! from the context after each decode ([`Metrics::update_from_context`]).
//! The speculative ones keep llama.cpp's names
//! (`spec_decode_num_draft_tokens_total`,
//! `spec_decode_num_accepted_tokens_total`, `spec_decode_num_drafts_total`)
//! and add the acceptance ratio and the verify batches' expert bytes.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use llama::Context;

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
    /// Needed experts the device cache of host experts held (every ubatch).
    pub cache_hits: AtomicU64,
    /// Needed experts the device cache had to upload.
    pub cache_misses: AtomicU64,
    /// Of the hits, those of decode (one-token) ubatches.
    pub cache_hits_decode: AtomicU64,
    /// Of the misses, those of decode (one-token) ubatches.
    pub cache_misses_decode: AtomicU64,
    /// Expert bytes the cache uploaded into its banks (part of `expert_bytes`).
    pub cache_bytes_uploaded: AtomicU64,
    /// Experts the cache evicted.
    pub cache_evictions: AtomicU64,
    /// Whether the context has an expert cache (off, no device, or no host
    /// experts: false).
    pub cache_on: AtomicBool,
    /// Expert bytes the prefetcher uploaded ahead of need.
    pub prefetch_bytes: AtomicU64,
    /// Of those, bytes a later ubatch used.
    pub prefetch_bytes_used: AtomicU64,
    /// Whether prefetch counters are wired ([`prefetch_counters`] returned
    /// some): only then are the prefetch metrics printed.
    pub prefetch_on: AtomicBool,
    /// Whether the server speculates: only then are the draft metrics
    /// printed.
    pub spec_on: AtomicBool,
    /// Draft tokens sent to the target in verify batches.
    pub draft_tokens: AtomicU64,
    /// Of those, tokens the target's sampled token agreed with.
    pub draft_accepted: AtomicU64,
    /// Drafts verified (one per slot and decode that carried its guesses:
    /// llama.cpp's verification steps).
    pub drafts: AtomicU64,
    /// Decodes that carried draft tokens (verify batches).
    pub verify_decodes: AtomicU64,
    /// Draft tokens and the tokens they follow in those decodes.
    pub verify_tokens: AtomicU64,
    /// Expert bytes copied to the device by those decodes (the whole
    /// batch's, other slots' prompt tokens in it included).
    pub verify_expert_bytes: AtomicU64,
}

/// The prefetcher's byte counters of a context: uploaded ahead of need, and
/// of those used by a later ubatch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefetchCounters {
    /// Bytes uploaded ahead of need (`prefetch_bytes`).
    pub bytes: u64,
    /// Bytes of those a ubatch then used (`prefetch_bytes_used`).
    pub bytes_used: u64,
}

/// The context's prefetch counters (the prefill staging slots'
/// `--prefetch-experts-slots` and the decode prediction's `--moe-predict`
/// uploads together, as `--stats-out`'s `prefetch_bytes` /
/// `prefetch_bytes_used`), or `None` while both are off.
pub fn prefetch_counters(ctx: &Context) -> Option<PrefetchCounters> {
    let (p, q) = (ctx.prefetch_stats(), ctx.predict_stats());
    if p.is_none() && q.is_none() {
        return None;
    }
    let (p, q) = (p.unwrap_or_default(), q.unwrap_or_default());
    Some(PrefetchCounters {
        bytes: p.bytes + q.bytes,
        bytes_used: p.bytes_used + q.bytes_used,
    })
}

impl Metrics {
    /// Read the context's transfer and cache counters (after a decode):
    /// expert bytes uploaded (selective copies and cache uploads), the
    /// cache's hits, misses, uploads and evictions, and the prefetch
    /// counters when [`prefetch_counters`] has them.
    pub fn update_from_context(&self, ctx: &Context) {
        let t = ctx.stats();
        self.expert_bytes.store(t.h2d_bytes_experts, Relaxed);
        self.expert_full_bytes.store(t.h2d_bytes_full_copy, Relaxed);
        match ctx.moe_cache_stats() {
            Some(cs) => {
                let s = cs.total();
                self.cache_on.store(true, Relaxed);
                self.cache_hits.store(s.hits(), Relaxed);
                self.cache_misses.store(s.misses(), Relaxed);
                self.cache_hits_decode.store(s.hits_decode, Relaxed);
                self.cache_misses_decode.store(s.misses_decode, Relaxed);
                self.cache_bytes_uploaded.store(s.bytes_uploaded, Relaxed);
                self.cache_evictions.store(s.evictions, Relaxed);
            }
            None => self.cache_on.store(false, Relaxed),
        }
        self.set_prefetch(prefetch_counters(ctx));
    }

    /// Store prefetch counters (`None`: not wired; the metrics stay out).
    pub fn set_prefetch(&self, p: Option<PrefetchCounters>) {
        self.prefetch_on.store(p.is_some(), Relaxed);
        let p = p.unwrap_or_default();
        self.prefetch_bytes.store(p.bytes, Relaxed);
        self.prefetch_bytes_used.store(p.bytes_used, Relaxed);
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let g = |a: &AtomicU64| a.load(Relaxed);
        let secs = |us: u64| us as f64 / 1e6;
        let rate = |n: u64, us: u64| if us == 0 { 0.0 } else { n as f64 / secs(us) };
        let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
        let (pt, pc) = (g(&self.prompt_tokens), g(&self.prompt_tokens_cached));
        let (ch, cm) = (g(&self.cache_hits), g(&self.cache_misses));
        let (chd, cmd) = (g(&self.cache_hits_decode), g(&self.cache_misses_decode));
        let rows: [(&str, &str, &str, f64); 26] = [
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
            (
                "moe_cache_enabled",
                "gauge",
                "1 when the device cache of host experts is on.",
                u8::from(self.cache_on.load(Relaxed)) as f64,
            ),
            (
                "moe_cache_hits_total",
                "counter",
                "Needed experts found in the device expert cache.",
                ch as f64,
            ),
            (
                "moe_cache_misses_total",
                "counter",
                "Needed experts the device expert cache uploaded.",
                cm as f64,
            ),
            (
                "moe_cache_hit_ratio",
                "gauge",
                "Expert cache hits / (hits + misses), every ubatch.",
                ratio(ch, ch + cm),
            ),
            (
                "moe_cache_hit_ratio_decode",
                "gauge",
                "Expert cache hit ratio of decode (one-token) ubatches.",
                ratio(chd, chd + cmd),
            ),
            (
                "moe_cache_hit_ratio_prompt",
                "gauge",
                "Expert cache hit ratio of prompt ubatches.",
                ratio(ch.saturating_sub(chd), (ch + cm).saturating_sub(chd + cmd)),
            ),
            (
                "moe_cache_bytes_uploaded_total",
                "counter",
                "Expert bytes uploaded into the expert cache (part of expert_bytes_uploaded_total).",
                g(&self.cache_bytes_uploaded) as f64,
            ),
            (
                "moe_cache_evictions_total",
                "counter",
                "Experts evicted from the expert cache.",
                g(&self.cache_evictions) as f64,
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
        if self.spec_on.load(Relaxed) {
            let (dn, da) = (g(&self.draft_tokens), g(&self.draft_accepted));
            let vb = g(&self.verify_expert_bytes);
            for (name, ty, help, v) in [
                (
                    "spec_decode_num_draft_tokens_total",
                    "counter",
                    "Speculative: Total draft tokens generated",
                    dn as f64,
                ),
                (
                    "spec_decode_num_accepted_tokens_total",
                    "counter",
                    "Speculative: Total draft tokens accepted by the target model",
                    da as f64,
                ),
                (
                    "spec_decode_num_drafts_total",
                    "counter",
                    "Speculative: Total speculative decoding verification steps",
                    g(&self.drafts) as f64,
                ),
                (
                    "spec_decode_acceptance_ratio",
                    "gauge",
                    "Accepted over drafted tokens.",
                    ratio(da, dn),
                ),
                (
                    "spec_verify_decodes_total",
                    "counter",
                    "Decodes that carried draft tokens (verify batches).",
                    g(&self.verify_decodes) as f64,
                ),
                (
                    "spec_verify_tokens_total",
                    "counter",
                    "Draft tokens and the tokens they follow, in verify batches.",
                    g(&self.verify_tokens) as f64,
                ),
                (
                    "spec_verify_expert_bytes_total",
                    "counter",
                    "Expert bytes copied host to device by verify batches (part of expert_bytes_uploaded_total).",
                    vb as f64,
                ),
                (
                    "spec_verify_expert_bytes_per_accepted",
                    "gauge",
                    "Verify batches' expert bytes per accepted draft token.",
                    ratio(vb, da),
                ),
            ] {
                let _ = writeln!(s, "# HELP llamacpp:{name} {help}");
                let _ = writeln!(s, "# TYPE llamacpp:{name} {ty}");
                let _ = writeln!(s, "llamacpp:{name} {v}");
            }
        }
        if self.prefetch_on.load(Relaxed) {
            let (pb, pu) = (g(&self.prefetch_bytes), g(&self.prefetch_bytes_used));
            for (name, ty, help, v) in [
                (
                    "prefetch_bytes_total",
                    "counter",
                    "Expert bytes prefetched ahead of need.",
                    pb as f64,
                ),
                (
                    "prefetch_bytes_used_total",
                    "counter",
                    "Prefetched expert bytes a later ubatch used.",
                    pu as f64,
                ),
                (
                    "prefetch_hit_ratio",
                    "gauge",
                    "Share of prefetched expert bytes that were used.",
                    ratio(pu, pb),
                ),
            ] {
                let _ = writeln!(s, "# HELP llamacpp:{name} {help}");
                let _ = writeln!(s, "# TYPE llamacpp:{name} {ty}");
                let _ = writeln!(s, "llamacpp:{name} {v}");
            }
        }
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
        // no prefetch source: no prefetch metrics
        assert!(!t.contains("prefetch"), "{t}");
        assert!(t.contains("llamacpp:moe_cache_hit_ratio 0\n"), "{t}");
    }

    #[test]
    fn expert_cache_and_prefetch_lines() {
        let m = Metrics::default();
        m.cache_on.store(true, Relaxed);
        m.cache_hits.store(30, Relaxed);
        m.cache_misses.store(10, Relaxed);
        m.cache_hits_decode.store(9, Relaxed);
        m.cache_misses_decode.store(1, Relaxed);
        m.cache_bytes_uploaded.store(4096, Relaxed);
        let t = m.render();
        assert!(t.contains("llamacpp:moe_cache_enabled 1\n"), "{t}");
        assert!(t.contains("llamacpp:moe_cache_hits_total 30\n"), "{t}");
        assert!(t.contains("llamacpp:moe_cache_misses_total 10\n"), "{t}");
        assert!(t.contains("llamacpp:moe_cache_hit_ratio 0.75\n"), "{t}");
        assert!(
            t.contains("llamacpp:moe_cache_hit_ratio_decode 0.9\n"),
            "{t}"
        );
        // prompt: 21 hits of 30
        assert!(
            t.contains("llamacpp:moe_cache_hit_ratio_prompt 0.7\n"),
            "{t}"
        );
        assert!(
            t.contains("# TYPE llamacpp:moe_cache_hits_total counter\n"),
            "{t}"
        );
        assert!(
            t.contains("llamacpp:moe_cache_bytes_uploaded_total 4096\n"),
            "{t}"
        );
        m.set_prefetch(Some(PrefetchCounters {
            bytes: 1000,
            bytes_used: 250,
        }));
        let t = m.render();
        assert!(t.contains("llamacpp:prefetch_bytes_total 1000\n"), "{t}");
        assert!(
            t.contains("llamacpp:prefetch_bytes_used_total 250\n"),
            "{t}"
        );
        assert!(t.contains("llamacpp:prefetch_hit_ratio 0.25\n"), "{t}");
        m.set_prefetch(None);
        assert!(!m.render().contains("prefetch"));
    }

    #[test]
    fn speculative_lines_only_when_speculating() {
        let m = Metrics::default();
        m.draft_tokens.store(40, Relaxed);
        m.draft_accepted.store(30, Relaxed);
        m.verify_expert_bytes.store(3000, Relaxed);
        assert!(!m.render().contains("draft"));
        m.spec_on.store(true, Relaxed);
        let t = m.render();
        assert!(
            t.contains("llamacpp:spec_decode_num_draft_tokens_total 40\n"),
            "{t}"
        );
        assert!(
            t.contains("llamacpp:spec_decode_num_accepted_tokens_total 30\n"),
            "{t}"
        );
        assert!(
            t.contains("llamacpp:spec_decode_acceptance_ratio 0.75\n"),
            "{t}"
        );
        assert!(
            t.contains("llamacpp:spec_verify_expert_bytes_per_accepted 100\n"),
            "{t}"
        );
        assert!(
            t.contains("# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\n"),
            "{t}"
        );
    }
}
