//! The fields of one result, in llama.cpp's order and with its types
//! ([`LLAMA_FIELDS`], from llama.cpp's `test::get_fields` and
//! `get_field_type`), then ours, present only where they apply: our own
//! test parameters ([`ParamSpec::ours`]) when a device is in use or the flag
//! was given, the median of the repetitions ([`MEDIAN_FIELDS`]) always, and
//! the host-to-device traffic when a device is in use.
//!
//! Values are written as llama.cpp's `get_values` writes them (numbers as
//! `std::to_string`, bools `0`/`1`, floats `%f`); each format then renders
//! them by type.
//!
//! [`ParamSpec::ours`]: crate::bench::params::ParamSpec::ours

use crate::bench::args::Params;
use crate::bench::matrix::Instance;
use crate::bench::params::PARAMS;
use crate::bench::sysinfo;

/// llama.cpp's field types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// Quoted text.
    Str,
    /// `true`/`false` in JSON, `0`/`1` elsewhere.
    Bool,
    /// An integer.
    Int,
    /// A real number (`%f`).
    Float,
}

use FieldType::{Bool, Float, Int, Str};

/// llama.cpp's fields, in its order.
pub const LLAMA_FIELDS: &[(&str, FieldType)] = &[
    ("build_commit", Str),
    ("build_number", Int),
    ("cpu_info", Str),
    ("gpu_info", Str),
    ("backends", Str),
    ("model_filename", Str),
    ("model_type", Str),
    ("model_size", Int),
    ("model_n_params", Int),
    ("n_batch", Int),
    ("n_ubatch", Int),
    ("n_threads", Int),
    ("cpu_mask", Str),
    ("cpu_strict", Bool),
    ("poll", Int),
    ("type_k", Str),
    ("type_v", Str),
    ("n_gpu_layers", Int),
    ("n_cpu_moe", Int),
    ("split_mode", Str),
    ("main_gpu", Int),
    ("no_kv_offload", Bool),
    ("flash_attn", Int),
    ("devices", Str),
    ("tensor_split", Str),
    ("tensor_buft_overrides", Str),
    ("load_mode", Str),
    ("lazy_mode", Str),
    ("embeddings", Bool),
    ("no_op_offload", Int),
    ("no_host", Bool),
    ("repack", Bool),
    ("fit_target", Int),
    ("fit_min_ctx", Int),
    ("n_prompt", Int),
    ("n_gen", Int),
    ("n_depth", Int),
    ("test_time", Str),
    ("avg_ns", Int),
    ("stddev_ns", Int),
    ("avg_ts", Float),
    ("stddev_ts", Float),
];

/// Our statistics, written for every test: the median of the repetitions
/// (llama.cpp writes the mean, `avg_ns`/`avg_ts`).
pub const MEDIAN_FIELDS: &[(&str, FieldType)] = &[("median_ns", Int), ("median_ts", Float)];

/// Our fields that are not test parameters, in order, with their types:
/// per-token host-to-device traffic, written where a device is in use.
pub const TRAFFIC_FIELDS: &[(&str, FieldType)] = &[
    ("expert_copy", Bool),
    ("h2d_bytes_experts_per_token", Float),
    ("h2d_bytes_full_copy_per_token", Float),
    ("h2d_bytes_other_per_token", Float),
    ("experts_copied_per_token", Float),
];

/// Our simulated-clock fields, written for tests on a sim device: the
/// profile, simulated tokens per second (mean over the repetitions) and
/// the link and device busy times per repetition (simulated seconds).
pub const SIM_FIELDS: &[(&str, FieldType)] = &[
    ("sim_avg_ts", Float),
    ("sim_link_busy_s", Float),
    ("sim_device_busy_s", Float),
    ("sim_link_hidden_s", Float),
];

/// Our expert-cache fields, written where a device is in use.
pub const CACHE_FIELDS: &[(&str, FieldType)] = &[
    ("moe_cache_budget_mib", Float),
    ("moe_cache_hit_rate", Float),
    ("moe_cache_hit_rate_prompt", Float),
    ("moe_cache_bytes_uploaded_per_token", Float),
];

/// Our host-expert-cache fields, written where `--moe-host-cache-mib` was
/// given (zeros for a test without the cache): its hit rate, the bytes it
/// read from disk per token, the rate of those reads (bytes per second
/// over the wall time of the batches of reads) and their latency's median
/// and 99th percentile (microseconds); means over the repetitions.
pub const HOST_CACHE_FIELDS: &[(&str, FieldType)] = &[
    ("moe_host_cache_hit_rate", Float),
    ("moe_host_cache_disk_bytes_per_token", Float),
    ("moe_host_cache_disk_read_rate", Float),
    ("moe_host_cache_read_p50_us", Float),
    ("moe_host_cache_read_p99_us", Float),
];

/// Our hybrid-expert fields, written where a device is in use: experts
/// computed on the CPU, on the device from the cache, on the device after
/// an upload (means per repetition), in all, in prompt ubatches and in
/// decode ubatches.
pub const HYBRID_FIELDS: &[(&str, FieldType)] = &[
    ("experts_cpu", Float),
    ("experts_device_cached", Float),
    ("experts_device_uploaded", Float),
    ("experts_cpu_prompt", Float),
    ("experts_device_cached_prompt", Float),
    ("experts_device_uploaded_prompt", Float),
    ("experts_cpu_decode", Float),
    ("experts_device_cached_decode", Float),
    ("experts_device_uploaded_decode", Float),
];

/// A count of prompt ubatches and one of decode ubatches.
#[derive(Clone, Copy, Debug, Default)]
pub struct PerKind {
    /// In prompt (multi-token) ubatches.
    pub prompt: f64,
    /// In decode (one-token) ubatches.
    pub decode: f64,
}

impl PerKind {
    /// Add one repetition's counts, divided by the repetitions `r`.
    pub fn add(&mut self, prompt: u64, decode: u64, r: f64) {
        self.prompt += prompt as f64 / r;
        self.decode += decode as f64 / r;
    }
}

/// The expert cache's figures of a test (means over the repetitions).
#[derive(Clone, Copy, Debug, Default)]
pub struct CacheFields {
    /// The budget the cache used, MiB (0: no cache).
    pub budget_mib: f64,
    /// Hit rate of decode ubatches.
    pub hit_rate: f64,
    /// Hit rate of prompt ubatches.
    pub hit_rate_prompt: f64,
    /// Bytes uploaded into the cache per token.
    pub bytes_uploaded_per_token: f64,
    /// Misses computed on the CPU (hybrid experts).
    pub experts_cpu: PerKind,
    /// Hits: computed on the device from the cache.
    pub experts_device_cached: PerKind,
    /// Misses computed on the device after an upload.
    pub experts_device_uploaded: PerKind,
}

/// The host expert cache's figures of a test (means over the
/// repetitions; [`HOST_CACHE_FIELDS`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct HostCacheFields {
    /// Hit rate over every ubatch.
    pub hit_rate: f64,
    /// Bytes read from disk per token.
    pub disk_bytes_per_token: f64,
    /// Bytes per second over the wall time of the batches of reads.
    pub disk_read_rate: f64,
    /// Median read latency, microseconds.
    pub read_p50_us: f64,
    /// 99th percentile of the read latency, microseconds.
    pub read_p99_us: f64,
}

/// Simulated-clock figures of a test (every number simulated).
#[derive(Clone, Debug, Default)]
pub struct SimStats {
    /// Profile name.
    pub profile: String,
    /// Simulated tokens per second, mean over repetitions.
    pub avg_ts: f64,
    /// Simulated seconds the link was busy, per repetition.
    pub link_busy_s: f64,
    /// Simulated seconds the device computed, per repetition.
    pub device_busy_s: f64,
    /// Simulated seconds of link time hidden under compute, per repetition.
    pub link_hidden_s: f64,
}

/// What the model and the device report for a result.
#[derive(Clone, Debug, Default)]
pub struct ModelInfo {
    /// The file, as given (or the embedded model's cache path).
    pub filename: String,
    /// llama.cpp's `llama_model_desc`: `qwen3moe 30B.A3B Q4_K - Medium`.
    pub model_type: String,
    /// Bytes of all weights.
    pub size: u64,
    /// Parameters.
    pub n_params: u64,
    /// `CPU`, or the device's kind (`SIM`, `CUDA`).
    pub backends: String,
    /// Descriptions of the device in use, `""` without one.
    pub gpu_info: String,
}

/// Bytes moved host to device, per token, averaged over the repetitions.
#[derive(Clone, Copy, Debug, Default)]
pub struct Traffic {
    /// Expert weight bytes (the expert copy policy).
    pub experts: f64,
    /// What whole-tensor copies of the same inputs would move.
    pub full_copy: f64,
    /// Other bytes.
    pub other: f64,
    /// Experts copied.
    pub experts_copied: f64,
}

/// One finished test.
#[derive(Clone, Debug)]
pub struct TestResult {
    /// The test.
    pub inst: Instance,
    /// Model and device.
    pub model: ModelInfo,
    /// When the test started (ISO 8601, UTC).
    pub test_time: String,
    /// Nanoseconds of each repetition.
    pub samples_ns: Vec<u64>,
    /// Traffic, where a device is in use.
    pub traffic: Option<Traffic>,
    /// Simulated-clock figures, on a sim device.
    pub sim: Option<SimStats>,
    /// Expert-cache figures, where a device is in use.
    pub cache: Option<CacheFields>,
    /// Host-expert-cache figures, where `--moe-host-cache-mib` was given.
    pub host_cache: Option<HostCacheFields>,
    /// `--no-expert-copy` was given.
    pub no_expert_copy: bool,
    /// Which of our own parameters were given (aligned with `PARAMS`).
    pub given: Vec<bool>,
    /// The MoE layers routed by a trace (`--expert-trace-in`).
    pub forced_routing: bool,
}

impl TestResult {
    /// Tokens per second of each repetition.
    pub fn samples_ts(&self) -> Vec<f64> {
        let n = (self.inst.n_prompt + self.inst.n_gen) as f64;
        self.samples_ns
            .iter()
            .map(|&ns| 1e9 * n / ns.max(1) as f64)
            .collect()
    }

    /// Mean and sample standard deviation of tokens per second.
    pub fn ts(&self) -> (f64, f64) {
        mean_sd(&self.samples_ts())
    }

    /// Mean and sample standard deviation of the nanoseconds, truncated as
    /// llama.cpp's integer arithmetic does.
    pub fn ns(&self) -> (u64, u64) {
        let v: Vec<f64> = self.samples_ns.iter().map(|&x| x as f64).collect();
        let (m, sd) = mean_sd(&v);
        (m as u64, sd as u64)
    }

    /// Median nanoseconds and median tokens per second of the repetitions
    /// (the mean of the middle two for an even count).
    pub fn median(&self) -> (u64, f64) {
        let mut ns = self.samples_ns.clone();
        ns.sort_unstable();
        let mut ts = self.samples_ts();
        ts.sort_by(f64::total_cmp);
        let n = ns.len();
        if n == 0 {
            return (0, 0.0);
        }
        if n % 2 == 1 {
            (ns[n / 2], ts[n / 2])
        } else {
            (
                (ns[n / 2 - 1] + ns[n / 2]) / 2,
                (ts[n / 2 - 1] + ts[n / 2]) / 2.0,
            )
        }
    }

    /// `pp512`, `tg128`, `pp512+tg128`, with ` @ d4096` for a depth.
    pub fn test_name(&self) -> String {
        let (p, g) = (self.inst.n_prompt, self.inst.n_gen);
        let mut s = if p > 0 && g == 0 {
            format!("pp{p}")
        } else if g > 0 && p == 0 {
            format!("tg{g}")
        } else {
            format!("pp{p}+tg{g}")
        };
        let d = self.inst.int("n_depth");
        if d > 0 {
            s.push_str(&format!(" @ d{d}"));
        }
        s
    }

    /// Every field written for this result: llama.cpp's, then ours that
    /// apply. `(name, type, value)`.
    pub fn fields(&self) -> Vec<(&'static str, FieldType, String)> {
        let mut out: Vec<(&'static str, FieldType, String)> = LLAMA_FIELDS
            .iter()
            .map(|&(name, ty)| (name, ty, self.llama_value(name)))
            .collect();
        out.extend(self.own_fields());
        out
    }

    /// Our fields for this result.
    pub fn own_fields(&self) -> Vec<(&'static str, FieldType, String)> {
        let dev = self.inst.device().is_some();
        let mut out = Vec::new();
        for (i, spec) in PARAMS.iter().enumerate() {
            if spec.written(dev, self.given[i]) {
                let v = &self.inst.values[i];
                let ty = match v {
                    crate::bench::params::Value::Str(_) => Str,
                    crate::bench::params::Value::Bool(_) => Bool,
                    crate::bench::params::Value::Int(_) => Int,
                };
                out.push((spec.field, ty, v.text()));
            }
        }
        let (med_ns, med_ts) = self.median();
        out.push(("median_ns", Int, med_ns.to_string()));
        out.push(("median_ts", Float, format!("{med_ts:.6}")));
        if let Some(t) = &self.traffic {
            let vals = [
                u8::from(!self.no_expert_copy).to_string(),
                format!("{:.6}", t.experts),
                format!("{:.6}", t.full_copy),
                format!("{:.6}", t.other),
                format!("{:.6}", t.experts_copied),
            ];
            for (&(name, ty), v) in TRAFFIC_FIELDS.iter().zip(vals) {
                out.push((name, ty, v));
            }
        }
        if let Some(c) = &self.cache {
            let vals = [
                c.budget_mib,
                c.hit_rate,
                c.hit_rate_prompt,
                c.bytes_uploaded_per_token,
            ];
            for (&(name, ty), v) in CACHE_FIELDS.iter().zip(vals) {
                out.push((name, ty, format!("{v:.6}")));
            }
            let k = [
                c.experts_cpu,
                c.experts_device_cached,
                c.experts_device_uploaded,
            ];
            let vals = k
                .map(|x| x.prompt + x.decode)
                .into_iter()
                .chain(k.map(|x| x.prompt))
                .chain(k.map(|x| x.decode));
            for (&(name, ty), v) in HYBRID_FIELDS.iter().zip(vals) {
                out.push((name, ty, format!("{v:.3}")));
            }
        }
        if let Some(h) = &self.host_cache {
            let vals = [
                h.hit_rate,
                h.disk_bytes_per_token,
                h.disk_read_rate,
                h.read_p50_us,
                h.read_p99_us,
            ];
            for (&(name, ty), v) in HOST_CACHE_FIELDS.iter().zip(vals) {
                out.push((name, ty, format!("{v:.6}")));
            }
        }
        if self.forced_routing {
            out.push(("forced_routing", Bool, "1".into()));
        }
        if let Some(sm) = &self.sim {
            let vals = [
                sm.avg_ts,
                sm.link_busy_s,
                sm.device_busy_s,
                sm.link_hidden_s,
            ];
            for (&(name, ty), v) in SIM_FIELDS.iter().zip(vals) {
                out.push((name, ty, format!("{v:.9}")));
            }
        }
        out
    }

    fn llama_value(&self, name: &str) -> String {
        let (avg_ns, sd_ns) = self.ns();
        let (avg_ts, sd_ts) = self.ts();
        match name {
            "build_commit" => sysinfo::BUILD_COMMIT.to_string(),
            "build_number" => sysinfo::build_number().to_string(),
            "cpu_info" => sysinfo::cpu_info(),
            "gpu_info" => self.model.gpu_info.clone(),
            "backends" => self.model.backends.clone(),
            "model_filename" => self.model.filename.clone(),
            "model_type" => self.model.model_type.clone(),
            "model_size" => self.model.size.to_string(),
            "model_n_params" => self.model.n_params.to_string(),
            // no such option here: llama.cpp's default, and weights are
            // never repacked
            "lazy_mode" => "auto".into(),
            "repack" => "0".into(),
            "n_prompt" => self.inst.n_prompt.to_string(),
            "n_gen" => self.inst.n_gen.to_string(),
            "test_time" => self.test_time.clone(),
            "avg_ns" => avg_ns.to_string(),
            "stddev_ns" => sd_ns.to_string(),
            "avg_ts" => format!("{avg_ts:.6}"),
            "stddev_ts" => format!("{sd_ts:.6}"),
            f => match PARAMS.iter().position(|p| p.field == f) {
                Some(i) => self.inst.values[i].text(),
                None => String::new(),
            },
        }
    }
}

/// Mean and sample standard deviation (0 for fewer than two values).
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// Whether `--moe-host-cache-mib` was given (the host cache's fields are
/// written).
pub fn host_cache_given(p: &Params) -> bool {
    PARAMS
        .iter()
        .position(|s| s.field == "moe_host_cache_mib")
        .is_some_and(|i| p.given[i])
}

/// The own-field columns any of `results`' tests will have (for the
/// formats with one header: csv, sql), in order.
pub fn own_columns(p: &Params, insts: &[Instance]) -> Vec<(&'static str, FieldType)> {
    let any_dev = insts.iter().any(|i| i.device().is_some());
    let mut out = Vec::new();
    for (i, spec) in PARAMS.iter().enumerate() {
        if spec.written(any_dev, p.given[i]) {
            let ty = match (spec.default)().first() {
                Some(crate::bench::params::Value::Str(_)) => Str,
                Some(crate::bench::params::Value::Bool(_)) => Bool,
                _ => Int,
            };
            out.push((spec.field, ty));
        }
    }
    out.extend_from_slice(MEDIAN_FIELDS);
    if any_dev {
        out.extend_from_slice(TRAFFIC_FIELDS);
        out.extend_from_slice(CACHE_FIELDS);
        out.extend_from_slice(HYBRID_FIELDS);
    }
    if host_cache_given(p) {
        out.extend_from_slice(HOST_CACHE_FIELDS);
    }
    if p.expert_trace_in.is_some() {
        out.push(("forced_routing", Bool));
    }
    if insts.iter().any(|i| i.on_sim_device()) {
        out.extend_from_slice(SIM_FIELDS);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_llama_field_has_a_value_source() {
        // fields that are test parameters come from the instance; the rest
        // are named in llama_value
        let computed = [
            "build_commit",
            "build_number",
            "cpu_info",
            "gpu_info",
            "backends",
            "model_filename",
            "model_type",
            "model_size",
            "model_n_params",
            "lazy_mode",
            "repack",
            "n_prompt",
            "n_gen",
            "test_time",
            "avg_ns",
            "stddev_ns",
            "avg_ts",
            "stddev_ts",
        ];
        for (f, _) in LLAMA_FIELDS {
            assert!(
                computed.contains(f) || PARAMS.iter().any(|p| p.field == *f && !p.ours),
                "{f}"
            );
        }
    }

    #[test]
    fn medians() {
        let inst = crate::bench::matrix::Instance {
            values: PARAMS.iter().map(|p| (p.default)()[0].clone()).collect(),
            n_prompt: 0,
            n_gen: 10,
        };
        let mut r = TestResult {
            inst,
            model: ModelInfo::default(),
            test_time: String::new(),
            samples_ns: vec![4_000_000_000, 1_000_000_000, 2_000_000_000],
            traffic: None,
            sim: None,
            cache: None,
            host_cache: None,
            no_expert_copy: false,
            given: vec![false; PARAMS.len()],
            forced_routing: false,
        };
        assert_eq!(r.median(), (2_000_000_000, 5.0));
        r.samples_ns.push(3_000_000_000);
        let (ns, ts) = r.median();
        assert_eq!(ns, 2_500_000_000);
        assert!((ts - (10.0 / 3.0 + 5.0) / 2.0).abs() < 1e-12);
        assert_eq!(r.test_name(), "tg10");
        let names: Vec<&str> = r.fields().iter().map(|f| f.0).collect();
        assert_eq!(names.len(), LLAMA_FIELDS.len() + 2, "{names:?}");
    }

    #[test]
    fn sample_statistics() {
        let (m, sd) = mean_sd(&[1.0, 2.0, 3.0]);
        assert_eq!(m, 2.0);
        assert!((sd - 1.0).abs() < 1e-12);
        assert_eq!(mean_sd(&[5.0]), (5.0, 0.0));
    }
}
