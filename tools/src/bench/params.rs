//! The test parameters: every llama-bench parameter that takes a list, in
//! one table ([`PARAMS`]), with its flags, value syntax, default, the values
//! this engine can honour, where it shows in the markdown table, and whether
//! changing it needs the model loaded again.
//!
//! The table's order is the test matrix's nesting order (llama.cpp's
//! `get_cmd_params_instances`: the first entry is the outermost loop), so
//! [`crate::bench::matrix`] expands it generically. See the module doc of
//! [`crate::bench`] for how to add a parameter.

use common::flags::{table, Flag, Tool};

use crate::bench::range::parse_int_range;

/// One value of a parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Text (`type_k`, `devices`, `tensor_buft_overrides`, ...).
    Str(String),
    /// A switch (`0`/`1` on the command line).
    Bool(bool),
    /// A number.
    Int(i64),
}

impl Value {
    /// The value as llama.cpp's `get_values` writes it (`std::to_string`
    /// of numbers and bools, strings as they are).
    pub fn text(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            Value::Bool(b) => u8::from(*b).to_string(),
            Value::Int(i) => i.to_string(),
        }
    }

    /// The number (bools as 0/1), `0` for text.
    pub fn int(&self) -> i64 {
        match self {
            Value::Int(i) => *i,
            Value::Bool(b) => i64::from(*b),
            Value::Str(_) => 0,
        }
    }

    /// The text, empty for numbers.
    pub fn str(&self) -> &str {
        match self {
            Value::Str(s) => s,
            _ => "",
        }
    }

    /// The switch (numbers: non-zero).
    pub fn bool(&self) -> bool {
        self.int() != 0
    }
}

/// How one command-line argument of a parameter becomes values.
#[derive(Clone, Copy, Debug)]
pub enum Syntax {
    /// Integers and ranges ([`parse_int_range`]) of at least `min`.
    Ints {
        /// Smallest value accepted (negative allows `-1`).
        min: i64,
        /// Largest value accepted.
        max: i64,
    },
    /// `0`/`1` (also `true`/`false`), comma-separated.
    Bools,
    /// One of `(name, value)`, comma-separated; names are matched
    /// case-insensitively.
    Choice(&'static [(&'static str, i64)]),
    /// Names, comma-separated, each canonicalised by the function (an error
    /// names the problem).
    Text(fn(&str) -> Result<String, String>),
    /// `-ot`: `,` separates tests, `;` separates the rules of one test.
    Overrides,
}

/// Whether a change of this parameter needs the model loaded again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Placement and device: a new model load.
    Model,
    /// Only the context (batch sizes, threads, cache type...).
    Context,
}

/// Where a parameter shows in the markdown table.
#[derive(Clone, Copy, Debug)]
pub struct MdColumn {
    /// Column title (llama.cpp's display name: `ngl`, `fa`, `ot`...).
    pub name: &'static str,
    /// printf width: negative = left-aligned; 0 = llama.cpp's rule
    /// (`max(len(field), 10)`, left-aligned for text).
    pub width: i32,
}

/// One test parameter.
#[derive(Clone, Copy, Debug)]
pub struct ParamSpec {
    /// Field name in json/jsonl/csv/sql (llama.cpp's, or ours), and the
    /// id of its flag's entry in [`common::flags::table`] (its spellings,
    /// value name and help).
    pub field: &'static str,
    /// How values are written.
    pub syntax: Syntax,
    /// The default list.
    pub default: fn() -> Vec<Value>,
    /// Values this engine can run; an error says why not.
    pub accept: fn(&Value) -> Result<(), String>,
    /// Markdown column, shown when the list differs from the default.
    pub md: Option<MdColumn>,
    /// Model or context.
    pub scope: Scope,
    /// Ours rather than llama.cpp's: its field is written only where it
    /// applies (a device is in use, or the flag was given).
    pub ours: bool,
}

fn any(_: &Value) -> Result<(), String> {
    Ok(())
}

const fn md(name: &'static str, width: i32) -> Option<MdColumn> {
    Some(MdColumn { name, width })
}

fn only(v: &Value, want: &Value, why: &str) -> Result<(), String> {
    if v == want {
        Ok(())
    } else {
        Err(format!("{} is not supported: {why}", v.text()))
    }
}

/// `-fa` names (llama.cpp's truthy/falsey/auto words).
const FLASH_ATTN: &[(&str, i64)] = &[
    ("on", 1),
    ("enabled", 1),
    ("true", 1),
    ("1", 1),
    ("off", 0),
    ("disabled", 0),
    ("false", 0),
    ("0", 0),
    ("auto", -1),
    ("-1", -1),
];

/// KV cache types llama-bench knows (plus `f32`); only some run here.
fn cache_type(s: &str) -> Result<String, String> {
    const KNOWN: &[&str] = &[
        "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl",
    ];
    let l = s.to_ascii_lowercase();
    if KNOWN.contains(&l.as_str()) {
        Ok(l)
    } else {
        Err(format!(
            "unknown cache type '{s}' (known: {})",
            KNOWN.join(", ")
        ))
    }
}

fn cache_type_ok(v: &Value) -> Result<(), String> {
    let held = llama::kv_cache::KV_CACHE_TYPES;
    if held.iter().any(|t| t.name() == v.str()) {
        return Ok(());
    }
    let names: Vec<&str> = held.iter().map(|t| t.name()).collect();
    Err(format!(
        "cache type {} is not supported by this engine's KV cache ({})",
        v.str(),
        names.join(", ")
    ))
}

fn split_mode(s: &str) -> Result<String, String> {
    match s {
        "none" | "layer" | "row" | "tensor" => Ok(s.into()),
        _ => Err(format!(
            "unknown split mode '{s}' (none, layer, row, tensor)"
        )),
    }
}

fn split_mode_ok(v: &Value) -> Result<(), String> {
    match v.str() {
        "none" | "layer" => Ok(()),
        m => Err(format!("split mode {m} is not supported (none, layer)")),
    }
}

fn load_mode(s: &str) -> Result<String, String> {
    if s == "mmap+mlock" || s.parse::<ggml_core::gguf::LoadMode>().is_ok() {
        Ok(s.into())
    } else {
        Err(format!(
            "unknown load mode '{s}' (auto, mmap, none, mlock, mmap+mlock, pin, dio)"
        ))
    }
}

fn load_mode_ok(_v: &Value) -> Result<(), String> {
    Ok(())
}

/// The `--load-mode` of a (checked) `-lm` value (llama.cpp's
/// `mmap+mlock` is `mlock`).
pub fn load_mode_of(v: &str) -> ggml_core::gguf::LoadMode {
    use ggml_core::gguf::LoadMode;
    match v {
        "mmap+mlock" => LoadMode::Mlock,
        _ => v.parse().unwrap_or_default(),
    }
}

/// `-dev`: `auto`, `none`, or a device name (`SIM0`, `CUDA0`); llama.cpp's
/// `/`-separated device sets name one device at most here.
fn sim_mem_mib(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t == "none" {
        return Ok(t.to_string());
    }
    match t.parse::<f64>() {
        Ok(m) if m.is_finite() && m > 0.0 => Ok(t.to_string()),
        _ => Err(format!(
            "'{t}': give the device's memory in MiB, a number > 0, or none"
        )),
    }
}

fn moe_cache_mib(s: &str) -> Result<String, String> {
    s.trim()
        .parse::<llama::moe_cache::CacheSize>()
        .map(|_| s.trim().to_string())
}

/// `--moe-host-cache-mib`'s value when the flag is not given: on, as
/// `auto`, only where a CPU-only test's file does not fit in the memory
/// available (as llama-run's default).
pub const HOST_CACHE_DEFAULT: &str = "default";

fn moe_host_cache_mib(s: &str) -> Result<String, String> {
    if s == HOST_CACHE_DEFAULT {
        return Ok(s.into());
    }
    moe_cache_mib(s)
}

/// The `--moe-host-cache-mib` of a (checked) value: `None` for the
/// default.
pub fn host_cache_mib_of(v: &str) -> Option<&str> {
    (v != HOST_CACHE_DEFAULT).then_some(v)
}

/// Fields of our parameters written only where their flag was given (not
/// for every test on a device): the host cache's, which serve CPU-only
/// tests.
pub const WRITTEN_WHEN_GIVEN: &[&str] = &["moe_host_cache_mib", "moe_host_cache_policy"];

impl ParamSpec {
    /// Whether this parameter's field is written for a test (`dev`: on a
    /// device; `given`: its flag was given).
    pub fn written(&self, dev: bool, given: bool) -> bool {
        if !self.ours {
            return false;
        }
        given || (dev && !WRITTEN_WHEN_GIVEN.contains(&self.field))
    }
}

fn moe_cache_policy(s: &str) -> Result<String, String> {
    s.trim()
        .parse::<llama::moe_cache::PolicyKind>()
        .map(|_| s.trim().to_string())
}

fn moe_cache_cpu_share(s: &str) -> Result<String, String> {
    s.trim()
        .parse::<llama::moe_cache::hybrid::CpuShare>()
        .map(|_| s.trim().to_string())
}

fn moe_hybrid(s: &str) -> Result<String, String> {
    llama::moe_cache::hybrid::parse_switch(s).map(|on| if on { "on" } else { "off" }.to_string())
}

fn sim_profile(s: &str) -> Result<String, String> {
    ggml_core::SimProfile::from_name_or_file(s.trim()).map(|_| s.trim().to_string())
}

fn device(s: &str) -> Result<String, String> {
    let t = s.trim();
    match t.to_ascii_lowercase().as_str() {
        "" => return Err("no device given".into()),
        "auto" => return Ok("auto".into()),
        "none" | "cpu" => return Ok("none".into()),
        _ => {}
    }
    // llama.cpp's device set of one test: `SIM0/SIM1`
    let mut out: Vec<String> = Vec::new();
    for part in t.split('/') {
        let up = part.trim().to_ascii_uppercase();
        let ok = ["SIM", "CUDA", "RPC"].iter().any(|p| {
            up.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        });
        if !ok {
            return Err(format!(
                "unknown device '{}' in '{t}' (auto, none, SIM0, SIM1, ..., CUDA0, CUDA1, ..., RPC0, RPC1, ... with -rpc; a set of one test: SIM0/SIM1)",
                part.trim()
            ));
        }
        if out.contains(&up) {
            return Err(format!("'{t}': device {up} is listed twice"));
        }
        out.push(up);
    }
    Ok(out.join("/"))
}

/// `-ts`: proportions separated by `/` or `;`, written as llama.cpp does
/// (`%.2f` up to the last non-zero one).
fn tensor_split(s: &str) -> Result<String, String> {
    let mut v = Vec::new();
    for p in s.split(['/', ';']) {
        let x: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("'{p}' in '{s}' is not a number"))?;
        if !(x >= 0.0 && x.is_finite()) {
            return Err(format!("'{p}' in '{s}' is not a proportion"));
        }
        v.push(x);
    }
    let last = v.iter().rposition(|&x| x > 0.0).unwrap_or(0);
    Ok(v[..=last]
        .iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join("/"))
}

fn threads_default() -> Vec<Value> {
    vec![Value::Int(common::cli::default_threads() as i64)]
}

macro_rules! default {
    ($($v:expr),*) => {{
        fn f() -> Vec<Value> {
            vec![$($v),*]
        }
        f
    }};
}

fn s(x: &str) -> Value {
    Value::Str(x.into())
}

/// Every test parameter, outermost loop first.
pub static PARAMS: &[ParamSpec] = &[
    ParamSpec {
        field: "model_filename",
        syntax: Syntax::Text(|s| Ok(s.to_string())),
        default: default!(s("")),
        accept: any,
        md: None,
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "fit_target",
        syntax: Syntax::Ints {
            min: 0,
            max: i64::MAX,
        },
        default: default!(Value::Int(0)),
        accept: |v| {
            only(
                v,
                &Value::Int(0),
                "fitting to device memory is not implemented",
            )
        },
        md: md("fitt", 0),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "fit_min_ctx",
        syntax: Syntax::Ints {
            min: 0,
            max: i64::MAX,
        },
        default: default!(Value::Int(0)),
        accept: |v| {
            only(
                v,
                &Value::Int(0),
                "fitting to device memory is not implemented",
            )
        },
        md: md("fitc", 0),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "n_gpu_layers",
        syntax: Syntax::Ints {
            min: i64::MIN,
            max: i64::MAX,
        },
        default: default!(Value::Int(-1)),
        accept: any,
        md: md("ngl", 3),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "n_cpu_moe",
        syntax: Syntax::Ints {
            min: 0,
            max: i64::MAX,
        },
        default: default!(Value::Int(0)),
        accept: any,
        md: md("n_cpu_moe", 0),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "cpu_moe",
        syntax: Syntax::Bools,
        default: default!(Value::Bool(false)),
        accept: any,
        md: md("cmoe", 4),
        scope: Scope::Model,
        ours: true,
    },
    ParamSpec {
        field: "split_mode",
        syntax: Syntax::Text(split_mode),
        default: default!(s("layer")),
        accept: split_mode_ok,
        md: md("sm", 6),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "load_mode",
        syntax: Syntax::Text(load_mode),
        default: default!(s("auto")),
        accept: load_mode_ok,
        md: md("lm", 10),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "moe_host_cache_mib",
        syntax: Syntax::Text(moe_host_cache_mib),
        default: default!(s(HOST_CACHE_DEFAULT)),
        accept: any,
        md: md("host_cache", 10),
        scope: Scope::Model,
        ours: true,
    },
    ParamSpec {
        field: "moe_host_cache_policy",
        syntax: Syntax::Text(moe_cache_policy),
        default: default!(s("hlfu")),
        accept: any,
        md: md("host_policy", 11),
        scope: Scope::Context,
        ours: true,
    },
    ParamSpec {
        field: "main_gpu",
        syntax: Syntax::Ints {
            min: 0,
            max: i64::MAX,
        },
        default: default!(Value::Int(0)),
        accept: any,
        md: md("main_gpu", 0),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "devices",
        syntax: Syntax::Text(device),
        default: default!(s("auto")),
        accept: any,
        md: md("dev", -12),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "tensor_split",
        syntax: Syntax::Text(tensor_split),
        default: default!(s("0.00")),
        accept: any,
        md: md("ts", 0),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "tensor_buft_overrides",
        syntax: Syntax::Overrides,
        default: default!(s("none")),
        accept: any,
        md: md("ot", 0),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "no_host",
        syntax: Syntax::Bools,
        default: default!(Value::Bool(false)),
        accept: |v| {
            only(
                v,
                &Value::Bool(false),
                "host weights are always used in place",
            )
        },
        md: md("noh", 4),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "embeddings",
        syntax: Syntax::Bools,
        default: default!(Value::Bool(false)),
        accept: |v| only(v, &Value::Bool(false), "no embeddings output"),
        md: md("embd", 0),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "no_op_offload",
        syntax: Syntax::Bools,
        default: default!(Value::Bool(false)),
        accept: any,
        md: md("nopo", 4),
        scope: Scope::Model,
        ours: false,
    },
    ParamSpec {
        field: "offload_min_batch",
        syntax: Syntax::Ints {
            min: 1,
            max: i64::MAX,
        },
        default: default!(Value::Int(32)),
        accept: any,
        md: md("nomb", 5),
        scope: Scope::Model,
        ours: true,
    },
    ParamSpec {
        field: "sim_profile",
        syntax: Syntax::Text(sim_profile),
        default: default!(s("pcie4-x16")),
        accept: any,
        md: md("sim", 10),
        scope: Scope::Model,
        ours: true,
    },
    ParamSpec {
        field: "sim_mem_mib",
        syntax: Syntax::Text(sim_mem_mib),
        default: default!(s("none")),
        accept: any,
        md: md("sim_mem", 7),
        scope: Scope::Model,
        ours: true,
    },
    ParamSpec {
        field: "moe_cache_mib",
        syntax: Syntax::Text(moe_cache_mib),
        default: default!(s("auto")),
        accept: any,
        md: md("cache", 5),
        scope: Scope::Context,
        ours: true,
    },
    ParamSpec {
        field: "prefetch_experts_slots",
        syntax: Syntax::Ints {
            min: -1,
            max: i32::MAX as i64,
        },
        default: default!(Value::Int(0)),
        accept: any,
        md: md("pf_slots", 8),
        scope: Scope::Context,
        ours: true,
    },
    ParamSpec {
        field: "prefetch_selective",
        syntax: Syntax::Ints { min: 0, max: 2 },
        default: default!(Value::Int(1)),
        accept: any,
        md: md("pf_sel", 6),
        scope: Scope::Context,
        ours: true,
    },
    ParamSpec {
        field: "moe_predict",
        syntax: Syntax::Ints { min: 0, max: 2 },
        default: default!(Value::Int(0)),
        accept: any,
        md: md("predict", 7),
        scope: Scope::Context,
        ours: true,
    },
    ParamSpec {
        field: "moe_cache_policy",
        syntax: Syntax::Text(moe_cache_policy),
        default: default!(s("hlfu")),
        accept: any,
        md: md("policy", 6),
        scope: Scope::Context,
        ours: true,
    },
    ParamSpec {
        field: "moe_cache_max_batch",
        syntax: Syntax::Ints {
            min: 1,
            max: i64::MAX,
        },
        default: default!(Value::Int(llama::moe_cache::DEFAULT_MAX_BATCH as i64)),
        accept: any,
        md: md("cmb", 4),
        scope: Scope::Context,
        ours: true,
    },
    ParamSpec {
        field: "moe_cache_cpu_share",
        syntax: Syntax::Text(moe_cache_cpu_share),
        default: default!(s("auto")),
        accept: any,
        md: md("cpu_share", 9),
        scope: Scope::Context,
        ours: true,
    },
    ParamSpec {
        field: "moe_hybrid",
        syntax: Syntax::Text(moe_hybrid),
        default: default!(s("on")),
        accept: any,
        md: md("hybrid", 6),
        scope: Scope::Context,
        ours: true,
    },
    ParamSpec {
        field: "n_batch",
        syntax: Syntax::Ints {
            min: 1,
            max: i64::MAX,
        },
        default: default!(Value::Int(2048)),
        accept: any,
        md: md("n_batch", 7),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "n_ubatch",
        syntax: Syntax::Ints {
            min: 1,
            max: i64::MAX,
        },
        default: default!(Value::Int(512)),
        accept: any,
        md: md("n_ubatch", 8),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "type_k",
        syntax: Syntax::Text(cache_type),
        default: default!(s("f16")),
        accept: cache_type_ok,
        md: md("type_k", 6),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "type_v",
        syntax: Syntax::Text(cache_type),
        default: default!(s("f16")),
        accept: cache_type_ok,
        md: md("type_v", 6),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "no_kv_offload",
        syntax: Syntax::Bools,
        default: default!(Value::Bool(false)),
        accept: |v| {
            only(
                v,
                &Value::Bool(false),
                "each layer's cache lives with its layer",
            )
        },
        md: md("nkvo", 0),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "flash_attn",
        syntax: Syntax::Choice(FLASH_ATTN),
        default: default!(Value::Int(-1)),
        accept: any,
        md: md("fa", 3),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "n_threads",
        syntax: Syntax::Ints { min: 1, max: 4096 },
        default: threads_default,
        accept: any,
        md: md("threads", 7),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "cpu_mask",
        syntax: Syntax::Text(|s| Ok(s.to_string())),
        default: default!(s("0x0")),
        accept: |v| only(v, &s("0x0"), "threads are not pinned"),
        md: md("cpu_mask", 0),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "cpu_strict",
        syntax: Syntax::Bools,
        default: default!(Value::Bool(false)),
        accept: |v| only(v, &Value::Bool(false), "threads are not pinned"),
        md: md("cpu_strict", 0),
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "n_depth",
        syntax: Syntax::Ints {
            min: 0,
            max: i64::MAX,
        },
        default: default!(Value::Int(0)),
        accept: any,
        md: None,
        scope: Scope::Context,
        ours: false,
    },
    ParamSpec {
        field: "poll",
        syntax: Syntax::Ints { min: 0, max: 100 },
        default: default!(Value::Int(50)),
        accept: |v| only(v, &Value::Int(50), "the worker pool has no polling level"),
        md: md("poll", 0),
        scope: Scope::Context,
        ours: false,
    },
];

/// The index of `field` in [`PARAMS`].
///
/// # Panics
/// On a name not in the table (a programming error, caught by the tests).
pub fn index(field: &str) -> usize {
    PARAMS
        .iter()
        .position(|p| p.field == field)
        .unwrap_or_else(|| panic!("no test parameter '{field}'"))
}

impl ParamSpec {
    /// Its flag: the table's entry for its field.
    ///
    /// # Panics
    /// When the table has none (a programming error, caught by the tests).
    pub fn flag(&self) -> &'static Flag {
        table::find(Tool::Bench, self.field)
            .unwrap_or_else(|| panic!("no llama-bench flag '{}' in the flag table", self.field))
    }
}

/// The spec with this flag.
pub fn by_flag(flag: &str) -> Option<&'static ParamSpec> {
    let f = table::lookup(Tool::Bench, flag)?;
    PARAMS.iter().find(|p| p.field == f.id)
}

/// Parse one command-line argument of `spec` into values.
pub fn parse(spec: &ParamSpec, arg: &str) -> Result<Vec<Value>, String> {
    let vals = match spec.syntax {
        Syntax::Ints { min, max } => {
            let v = parse_int_range(arg, min < 0)?;
            if let Some(x) = v.iter().find(|&&x| x < min || x > max) {
                return Err(if max == i64::MAX {
                    format!("{x} is below the minimum {min}")
                } else {
                    format!("{x} is outside {min}..{max}")
                });
            }
            v.into_iter().map(Value::Int).collect()
        }
        Syntax::Bools => arg
            .split(',')
            .map(|p| match p.to_ascii_lowercase().as_str() {
                "0" | "false" => Ok(Value::Bool(false)),
                "1" | "true" => Ok(Value::Bool(true)),
                _ => Err(format!("'{p}' is not 0 or 1")),
            })
            .collect::<Result<_, _>>()?,
        Syntax::Choice(names) => arg
            .split(',')
            .map(|p| {
                names
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(p))
                    .map(|(_, v)| Value::Int(*v))
                    .ok_or_else(|| {
                        let mut all: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
                        all.dedup();
                        format!("'{p}' is not one of {}", all.join(", "))
                    })
            })
            .collect::<Result<_, _>>()?,
        Syntax::Text(f) => arg
            .split(',')
            .map(|p| {
                if p.is_empty() {
                    Err("empty value in the list".to_string())
                } else {
                    f(p).map(Value::Str)
                }
            })
            .collect::<Result<_, _>>()?,
        Syntax::Overrides => crate::bench::overrides::parse_groups(arg)?
            .into_iter()
            .map(Value::Str)
            .collect(),
    };
    for v in &vals {
        (spec.accept)(v)?;
    }
    Ok(vals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_flags_are_unique() {
        for (i, p) in PARAMS.iter().enumerate() {
            assert_eq!(index(p.field), i);
            for f in p.flag().names {
                assert_eq!(by_flag(f).map(|q| q.field), Some(p.field), "{f}");
            }
            // defaults pass their own checks
            for v in (p.default)() {
                (p.accept)(&v).unwrap();
            }
        }
    }

    #[test]
    fn lists_parse_per_syntax() {
        let p = |f: &str, a: &str| parse(by_flag(f).unwrap(), a);
        assert_eq!(
            p("-fa", "on,off,auto,1").unwrap(),
            [Value::Int(1), Value::Int(0), Value::Int(-1), Value::Int(1)]
        );
        assert!(p("-fa", "maybe").unwrap_err().contains("'maybe'"));
        assert_eq!(p("-nkvo", "0").unwrap(), [Value::Bool(false)]);
        assert!(p("-nkvo", "1").unwrap_err().contains("not supported"));
        assert_eq!(p("-dev", "none,sim0").unwrap(), [s("none"), s("SIM0")]);
        assert!(p("-dev", "GPU0").unwrap_err().contains("GPU0"));
        assert_eq!(p("-dev", "SIM0/sim1").unwrap(), [s("SIM0/SIM1")]);
        assert!(p("-dev", "SIM0/SIM0").unwrap_err().contains("listed twice"));
        assert!(p("-dev", "SIM0/GPU1").unwrap_err().contains("'GPU1'"));
        assert_eq!(p("-ctk", "F16,f32").unwrap(), [s("f16"), s("f32")]);
        assert_eq!(
            p("-ctk", "f16,q8_0,Q4_0,bf16").unwrap(),
            [s("f16"), s("q8_0"), s("q4_0"), s("bf16")]
        );
        assert!(p("-ctv", "q5_1")
            .unwrap_err()
            .contains("q5_1 is not supported"));
        assert!(p("-ctk", "q9").unwrap_err().contains("unknown cache type"));
        assert_eq!(p("-ts", "0").unwrap(), [s("0.00")]);
        assert_eq!(p("-ts", "3/1").unwrap(), [s("3.00/1.00")]);
        assert!(p("-ts", "3/-1").is_err());
        assert_eq!(p("-ngl", "-1,0-2").unwrap().len(), 4);
        assert!(p("-t", "0").unwrap_err().contains("0"));
        assert!(p("--poll", "101").unwrap_err().contains("outside"));
        assert!(p("-ncmoe", "x").unwrap_err().contains("'x'"));
        assert!(p("-ncmoe", "-1").unwrap_err().contains("'-1'"));
    }
}
