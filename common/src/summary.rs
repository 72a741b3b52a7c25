//! `llama-run`'s closing summary: times, speeds and expert traffic, as text
//! (stderr) and as one JSON object (`--stats-out`).

use llama::moe_cache::CacheStats;
use llama::{MoeStats, TransferStats};
use serde::Serialize;

use crate::cli::fmt_bytes;
use crate::simtime::SimReport;

/// Every value [`RunSummary::stop`] takes.
pub const STOP_VALUES: [&str; 8] = [
    "n_predict",
    "eog",
    "reverse_prompt",
    "context_full",
    "interrupted",
    "stdout_closed",
    "exit",
    "eof",
];

/// Everything the summary reports. Field names are the JSON keys.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunSummary {
    /// Model file.
    pub model: String,
    /// `--device` in use (`CPU` when none).
    pub device: String,
    /// Whether only the experts the router picked are copied (not
    /// `--no-expert-copy`).
    pub expert_copy: bool,
    /// `--offload-min-batch`.
    pub offload_min_batch: usize,
    /// Seconds to load the model (mapping, checks, copies to the device).
    pub load_s: f64,
    /// Prompt tokens (BOS included when the vocabulary adds one).
    pub prompt_tokens: usize,
    /// Seconds to decode the prompt.
    pub prompt_s: f64,
    /// Prompt tokens per second.
    pub prompt_tps: f64,
    /// Tokens generated (sampled), EOG included when it ended the run.
    pub gen_tokens: usize,
    /// Seconds from the first sample to the end of generation.
    pub gen_s: f64,
    /// Generated tokens per second.
    pub gen_tps: f64,
    /// Single-token decodes during generation.
    pub gen_decodes: usize,
    /// Wall-clock seconds per generated token the host spent on its own
    /// work: generation's wall time outside backend work (kernels, queued
    /// copies, waits on a device), i.e. graphs, planning, inputs, the
    /// scheduler's loop, the copy hook, sampling and detokenizing. Measured
    /// on every device, never simulated.
    pub host_s_per_token: f64,
    /// Why generation stopped, one of [`STOP_VALUES`]: `n_predict` (`-n`
    /// reached), `eog` (an end-of-generation token, or a prompt ending in
    /// one), `reverse_prompt` (`-r`), `context_full`, `interrupted`
    /// (SIGINT), `stdout_closed`; a conversation (`-cnv`) ends with `exit`
    /// (`/exit`), `eof` (Ctrl-D), `interrupted`, `context_full` or
    /// `stdout_closed`.
    pub stop: String,
    /// Host -> device traffic of the whole run (its fields are keys of the
    /// summary itself).
    #[serde(flatten)]
    pub traffic: TransferStats,
    /// Expert bytes per generated-token decode.
    pub h2d_bytes_experts_per_token: f64,
    /// Full-copy bytes per generated-token decode.
    pub h2d_bytes_full_copy_per_token: f64,
    /// Experts copied per generated-token decode.
    pub experts_copied_per_token: f64,
    /// Simulated figures (`sim_*` keys), on a sim device only.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimReport>,
    /// The expert cache's policy (empty when there is no cache).
    pub moe_cache_policy: String,
    /// The cache's budget in MiB (what `--moe-cache-mib` resolved to; 0 =
    /// no cache); with several devices the sum of their budgets (each in
    /// `devices`).
    pub moe_cache_mib: f64,
    /// Needed experts found in the cache (every ubatch).
    pub moe_cache_hits: u64,
    /// Needed experts uploaded into the cache (every ubatch).
    pub moe_cache_misses: u64,
    /// Hit rate of decode (one-token) ubatches.
    pub moe_cache_hit_rate: f64,
    /// Hit rate of prompt ubatches.
    pub moe_cache_hit_rate_prompt: f64,
    /// Expert bytes uploaded into the cache (part of `h2d_bytes_experts`).
    pub moe_cache_bytes_uploaded: u64,
    /// Expert bytes the hits read from the cache instead of host memory.
    pub moe_cache_bytes_from_bank: u64,
    /// Experts evicted.
    pub moe_cache_evictions: u64,
    /// Reads of the router's ids by the cache (one per cached layer per ubatch).
    pub moe_cache_id_reads: u64,
    /// Where the cache's experts were computed (hybrid experts).
    #[serde(flatten)]
    pub hybrid: crate::hybrid_summary::HybridCounts,
    /// The cache's full counters (text summary only).
    #[serde(skip)]
    pub moe_cache: Option<CacheStats>,
    /// The host expert cache's figures (`moe_host_cache_*` keys), when the
    /// run had one.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub host_cache: Option<crate::host_cache_summary::HostCacheSummary>,
    /// The prefetch's counters (`prefetch_*`, `critical_path_h2d_bytes`,
    /// `moe_predict_recall` keys).
    #[serde(flatten)]
    pub prefetch: crate::prefetch_report::PrefetchReport,
    /// The device pipeline's counts per generated token
    /// (`device_syncs_per_token`, `id_reads_per_token`,
    /// `launches_per_token`, `graph_replays`, `splits_per_token` keys).
    #[serde(flatten)]
    pub pipeline: crate::pipeline_summary::PipelineSummary,
    /// The RPC workers' wire traffic (`rpc_*` keys), when a device is an
    /// RPC worker's.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub rpc: Option<crate::rpc_summary::RpcSummary>,
    /// Speculative decoding's figures (`spec_*` keys), when the run
    /// speculates.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub spec: Option<crate::spec_summary::SpecSummary>,
    /// CPU threads the prompt's ubatches ran on (`-tb`; as `-t` without
    /// it), as the CPU backend reports them.
    pub n_threads_batch: usize,
    /// CPU threads the one-token decodes ran on (`-t`).
    pub n_threads: usize,
    /// The MoE layers were routed by a trace (`--expert-trace-in`): the
    /// text is not the model's.
    pub forced_routing: bool,
    /// One object per `--device`, in order (empty on the CPU alone):
    /// `name`, `layers` (how many of the model's layers it holds),
    /// `moe_cache_mib` (its cache's budget), `moe_cache_hit_rate` (its
    /// cache's decode hit rate) and `h2d_bytes_experts` (expert bytes
    /// uploaded to it; the devices' values sum to `h2d_bytes_experts`).
    pub devices: Vec<llama::DeviceStats>,
    /// The summary's line about the forced routing (text summary only).
    #[serde(skip)]
    pub forced_routing_text: Option<String>,
    /// The ubatch the prompt was cut into (`-ub`, or fewer tokens when the
    /// compute alias shrank it to fit in the cache's memory).
    pub n_ubatch: usize,
    /// Whether prompt ubatches computed in the expert cache's memory
    /// (`--moe-cache-alias`; false without a cache).
    pub moe_cache_alias: bool,
    /// Why the compute alias is on or off, and the ubatch (empty without
    /// a cache).
    pub moe_cache_alias_reason: String,
    /// The compute alias's line (text summary only).
    #[serde(skip)]
    pub moe_cache_alias_text: Option<String>,
    /// What the devices upload the weights in host memory from: `pinned`
    /// (page-locked for the device: asynchronous DMA; the default on CUDA),
    /// `pageable` (`--no-host`, or a device that does not page-lock), or
    /// `none` (no device, or every weight on the devices).
    pub host_weights_upload: String,
}

/// [`RunSummary::host_weights_upload`] of a loaded model.
pub fn host_weights_upload(model: &llama::Model) -> String {
    let host = model
        .weights
        .iter()
        .any(|w| matches!(w.target, llama::placement::Target::Host));
    match (model.devices.is_empty() || !host, model.host_pinned) {
        (true, _) => "none",
        (false, true) => "pinned",
        (false, false) => "pageable",
    }
    .to_string()
}

/// `b - a`, field by field.
pub fn stats_delta(a: &TransferStats, b: &TransferStats) -> TransferStats {
    TransferStats {
        h2d_bytes_experts: b.h2d_bytes_experts - a.h2d_bytes_experts,
        h2d_bytes_other: b.h2d_bytes_other - a.h2d_bytes_other,
        d2d_bytes: b.d2d_bytes - a.d2d_bytes,
        d2d_bytes_via_host: b.d2d_bytes_via_host - a.d2d_bytes_via_host,
        h2d_bytes_full_copy: b.h2d_bytes_full_copy - a.h2d_bytes_full_copy,
        experts_copied: b.experts_copied - a.experts_copied,
        experts_full_copy: b.experts_full_copy - a.experts_full_copy,
        graphs: b.graphs - a.graphs,
    }
}

impl RunSummary {
    /// Fill the traffic fields from the whole run's counters and the
    /// generation phase's.
    pub fn set_traffic(&mut self, total: &TransferStats, gen: &TransferStats) {
        self.traffic = *total;
        let n = self.gen_decodes.max(1) as f64;
        if self.gen_decodes > 0 {
            self.h2d_bytes_experts_per_token = gen.h2d_bytes_experts as f64 / n;
            self.h2d_bytes_full_copy_per_token = gen.h2d_bytes_full_copy as f64 / n;
            self.experts_copied_per_token = gen.experts_copied as f64 / n;
        }
    }

    /// Fill the MoE fields from the context's MoE counters
    /// ([`llama::Context::moe_stats`]): the cache's (and hybrid experts').
    pub fn set_moe(&mut self, m: &MoeStats) {
        self.set_cache(m.cache.clone());
    }

    /// Fill the cache fields from the cache's counters (`None`: no cache).
    pub fn set_cache(&mut self, c: Option<CacheStats>) {
        let Some(c) = c else { return };
        let t = c.total();
        self.moe_cache_policy = c.policy.clone();
        self.moe_cache_mib = c.budget_bytes as f64 / 1048576.0;
        self.moe_cache_hits = t.hits();
        self.moe_cache_misses = t.misses();
        self.moe_cache_hit_rate = t.hit_rate_decode();
        self.moe_cache_hit_rate_prompt = t.hit_rate_prompt();
        self.moe_cache_bytes_uploaded = t.bytes_uploaded;
        self.moe_cache_bytes_from_bank = t.bytes_from_bank;
        self.moe_cache_evictions = t.evictions;
        self.moe_cache_id_reads = t.id_reads;
        self.hybrid = crate::hybrid_summary::HybridCounts::of(&t);
        self.moe_cache = Some(c);
    }

    /// The summary as llama.cpp-style lines.
    pub fn to_text(&self) -> String {
        let mut t = self.forced_routing_text.clone().unwrap_or_default();
        t.push_str(&self.traffic_text());
        let (d2d, via) = (self.traffic.d2d_bytes, self.traffic.d2d_bytes_via_host);
        if d2d + via > 0 {
            t.push_str(&format!(
                "between devs = {} device to device, {} through host memory (activations at the split boundaries)\n",
                fmt_bytes(d2d as f64),
                fmt_bytes(via as f64)
            ));
        }
        if let Some(a) = &self.moe_cache_alias_text {
            t.push_str(&format!("{a}\n"));
        }
        if let Some(c) = &self.moe_cache {
            t.push_str(&cache_text(c, &self.device));
            t.push_str(&self.hybrid.to_text(&self.device));
        }
        if let Some(h) = &self.host_cache {
            t.push_str(&h.to_text());
        }
        match self.host_weights_upload.as_str() {
            "pinned" => t.push_str(&format!(
                "host weights  = pinned: page-locked for {}, uploads are asynchronous DMA (--no-host: pageable)\n",
                self.device
            )),
            "pageable" => t.push_str(&format!(
                "host weights  = pageable: uploads to {} copy from pageable memory (--no-host, or a device that does not page-lock; on CUDA each blocks the host until the driver has staged it)\n",
                self.device
            )),
            _ => {}
        }
        t.push_str(&self.prefetch.to_text());
        t.push_str(&self.pipeline.to_text(&self.device));
        if let Some(r) = &self.rpc {
            t.push_str(&r.to_text(&self.device));
        }
        if let Some(sp) = &self.spec {
            t.push_str(&sp.to_text());
        }
        if self.devices.len() > 1 {
            for d in &self.devices {
                t.push_str(&format!(
                    "device {:<6} = {} layers, expert cache {:.2} MiB (decode hit rate {}), expert h2d {}\n",
                    d.name,
                    d.layers,
                    d.moe_cache_mib,
                    pct(d.moe_cache_hit_rate),
                    fmt_bytes(d.h2d_bytes_experts as f64)
                ));
            }
        }
        t
    }

    /// Two lines that say what a run with the experts in host memory did:
    /// the expert bytes copied to the device, the cache's decode hit rate,
    /// and the generation speed, simulated (on a sim device) beside
    /// wall-clock. The default run (`llama-run` with no `-m` and no
    /// `--device`) prints them after the summary.
    pub fn offload_text(&self) -> String {
        let cache = if self.moe_cache.is_some() {
            format!(
                ", expert cache decode hit rate {}",
                pct(self.moe_cache_hit_rate)
            )
        } else {
            String::new()
        };
        let mut t = format!(
            "offload       = experts in host memory, {} computes: {} of experts copied to it ({} per generated token){cache}\n",
            self.device,
            fmt_bytes(self.traffic.h2d_bytes_experts as f64),
            fmt_bytes(self.h2d_bytes_experts_per_token),
        );
        t.push_str(&match &self.sim {
            Some(sim) => format!(
                "speed         = generation {:.2} tokens per second simulated ({} clock), {:.2} tokens per second wall-clock (CPU kernels standing in for {})\n",
                sim.sim_gen_tps, sim.sim_profile, self.gen_tps, self.device
            ),
            None => format!(
                "speed         = generation {:.2} tokens per second wall-clock\n",
                self.gen_tps
            ),
        });
        t
    }

    fn traffic_text(&self) -> String {
        let ms = |s: f64| s * 1e3;
        let per = |s: f64, n: usize| if n > 0 { ms(s) / n as f64 } else { 0.0 };
        let mut t = String::new();
        t.push_str(&format!("load time     = {:10.2} ms\n", ms(self.load_s)));
        t.push_str(&format!(
            "prompt eval   = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:10.2} tokens per second)\n",
            ms(self.prompt_s),
            self.prompt_tokens,
            per(self.prompt_s, self.prompt_tokens),
            self.prompt_tps
        ));
        t.push_str(&format!(
            "generation    = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:10.2} tokens per second)\n",
            ms(self.gen_s),
            self.gen_tokens,
            per(self.gen_s, self.gen_tokens),
            self.gen_tps
        ));
        t.push_str(&format!("stopped by    = {}\n", self.stop));
        if let Some(sim) = &self.sim {
            t.push_str(&sim.to_text());
        }
        if self.device == "CPU" {
            t.push_str("expert h2d    = none (no --device: experts are used in host memory)\n");
            return t;
        }
        if self.traffic.h2d_bytes_full_copy == 0 {
            t.push_str(&format!(
                "expert h2d    = none: no expert matmul ran on {} with experts in host memory (batches below --offload-min-batch {} run them on the CPU; experts on the device need no copy)\n",
                self.device, self.offload_min_batch
            ));
            t.push_str(&format!(
                "other h2d     = {} (inputs copied to {})\n",
                fmt_bytes(self.traffic.h2d_bytes_other as f64),
                self.device
            ));
            return t;
        }
        if !self.expert_copy {
            t.push_str(&format!(
                "expert h2d    = {} total, {} per generated token: whole expert tensors (--no-expert-copy)\n",
                fmt_bytes(self.traffic.h2d_bytes_full_copy as f64),
                fmt_bytes(self.h2d_bytes_full_copy_per_token),
            ));
            t.push_str(&format!(
                "other h2d     = {} (all inputs copied to {}, whole expert tensors included)\n",
                fmt_bytes(self.traffic.h2d_bytes_other as f64),
                self.device
            ));
            return t;
        }
        let ratio = |a: u64, b: u64| {
            if b > 0 {
                format!("{:.1}%", 100.0 * a as f64 / b as f64)
            } else {
                "-".into()
            }
        };
        t.push_str(&format!(
            "expert h2d    = {} total, {} per generated token; full copies would move {} ({} per token): {} of that\n",
            fmt_bytes(self.traffic.h2d_bytes_experts as f64),
            fmt_bytes(self.h2d_bytes_experts_per_token),
            fmt_bytes(self.traffic.h2d_bytes_full_copy as f64),
            fmt_bytes(self.h2d_bytes_full_copy_per_token),
            ratio(self.traffic.h2d_bytes_experts, self.traffic.h2d_bytes_full_copy)
        ));
        t.push_str(&format!(
            "experts       = {} copied of {} a full copy moves ({}), {:.1} per generated token\n",
            self.traffic.experts_copied,
            self.traffic.experts_full_copy,
            ratio(self.traffic.experts_copied, self.traffic.experts_full_copy),
            self.experts_copied_per_token
        ));
        t.push_str(&format!(
            "other h2d     = {} (non-expert inputs copied to {})\n",
            fmt_bytes(self.traffic.h2d_bytes_other as f64),
            self.device
        ));
        t
    }
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn layer_list(layers: &[u32]) -> String {
    match (layers.first(), layers.last()) {
        (Some(a), Some(b)) if (b - a) as usize + 1 == layers.len() && a != b => format!("{a}-{b}"),
        _ => layers
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// The cache's lines: the total, one per group, the worst and best layer.
pub fn cache_text(c: &CacheStats, device: &str) -> String {
    let t = c.total();
    let mut s = format!(
        "moe cache     = {}, {} on {device}: decode hit rate {} ({} hits, {} misses), prompt hit rate {}; {} uploaded, {} served from the cache, {} evictions, {} id reads\n",
        c.policy,
        fmt_bytes(c.budget_bytes as f64),
        pct(t.hit_rate_decode()),
        t.hits_decode,
        t.misses_decode,
        pct(t.hit_rate_prompt()),
        fmt_bytes(t.bytes_uploaded as f64),
        fmt_bytes(t.bytes_from_bank as f64),
        t.evictions,
        t.id_reads
    );
    for (gi, g) in c.groups.iter().enumerate() {
        if g.fallback {
            s.push_str(&format!(
                "moe cache g{gi}  = layers {}: too small (a budget of {} gives fewer slots than the {} experts a token uses): selective copy instead\n",
                layer_list(&g.layers),
                fmt_bytes(c.budget_bytes as f64),
                g.n_used
            ));
            continue;
        }
        let gt = c.group_total(gi);
        let all = g.n_expert as u64 * g.layers.len() as u64;
        s.push_str(&format!(
            "moe cache g{gi}  = layers {}: {} slots of {} ({} of the experts, {}), hit rate {} decode / {} prompt, {} uploaded, {} evictions{}\n",
            layer_list(&g.layers),
            g.n_slots,
            fmt_bytes(g.slot_bytes as f64),
            pct(g.n_slots as f64 / all.max(1) as f64),
            fmt_bytes(g.bank_bytes as f64),
            pct(gt.hit_rate_decode()),
            pct(gt.hit_rate_prompt()),
            fmt_bytes(gt.bytes_uploaded as f64),
            gt.evictions,
            if gt.bypassed > 0 {
                format!(
                    ", {} layer-ubatches too large for it ({} experts read from the cache for them)",
                    gt.bypassed, gt.bypass_reads
                )
            } else {
                String::new()
            }
        ));
    }
    let ran: Vec<(u32, f64)> = c
        .layers
        .iter()
        .filter(|(_, l)| l.hits() + l.misses() > 0)
        .map(|(&i, l)| (i, l.hit_rate()))
        .collect();
    let worst = ran.iter().min_by(|a, b| a.1.total_cmp(&b.1));
    let best = ran.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    if let (Some(w), Some(b)) = (worst, best) {
        s.push_str(&format!(
            "moe cache     = worst layer {} ({} hits), best layer {} ({} hits)\n",
            w.0,
            pct(w.1),
            b.0,
            pct(b.1)
        ));
    }
    s
}
