//! `-o md`: llama.cpp's `markdown_printer`: the fixed columns (model, size,
//! params, backend, test, t/s), `ngl` where a device is in use, `threads`
//! on the CPU, and a column for each test parameter whose list is not its
//! default, in llama.cpp's column order, then ours; `experts h2d/tok` (our
//! column) where a device is in use, and `t/s simulated` (ours) after
//! `t/s` where a test runs on a sim device: `t/s` is always the wall clock,
//! which on a sim device measures the CPU standing in for it, while the
//! simulated clock's rate (json/csv `sim_avg_ts`) is the figure the device
//! profile predicts. Widths and alignment are llama.cpp's.

use crate::bench::args::Params;
use crate::bench::fields::TestResult;
use crate::bench::output::{Plan, Printer};
use crate::bench::params::{self, Value, PARAMS};
use crate::bench::sysinfo;

/// llama.cpp's optional columns, in its order (after `backend`).
const LLAMA_COLUMNS: &[&str] = &[
    "n_cpu_moe",
    "n_threads",
    "cpu_mask",
    "cpu_strict",
    "poll",
    "n_batch",
    "n_ubatch",
    "type_k",
    "type_v",
    "main_gpu",
    "split_mode",
    "no_kv_offload",
    "flash_attn",
    "devices",
    "tensor_split",
    "tensor_buft_overrides",
    "load_mode",
    "embeddings",
    "no_op_offload",
    "no_host",
    "fit_target",
    "fit_min_ctx",
];

/// Our column of expert bytes copied per token.
const TRAFFIC_COLUMN: &str = "experts h2d/tok";

/// Our column of the simulated clock's tokens per second (sim devices).
const SIM_COLUMN: &str = "t/s simulated";

#[derive(Clone, Debug)]
struct Column {
    key: &'static str,
    title: &'static str,
    width: i32,
}

/// The markdown printer.
#[derive(Default)]
pub struct MdPrinter {
    columns: Vec<Column>,
}

fn fixed(key: &'static str, width: i32) -> Column {
    Column {
        key,
        title: key,
        width,
    }
}

fn param_column(field: &'static str) -> Column {
    let spec = &PARAMS[params::index(field)];
    let md = spec.md.unwrap_or(params::MdColumn {
        name: spec.field,
        width: 0,
    });
    let width = if md.width != 0 {
        md.width
    } else {
        let w = field.len().max(10) as i32;
        match (spec.default)().first() {
            Some(Value::Str(_)) => -w,
            _ => w,
        }
    };
    Column {
        key: field,
        title: md.name,
        width,
    }
}

/// The columns for a run.
fn columns(p: &Params, any_device: bool, any_sim: bool) -> Vec<Column> {
    let mut c = vec![
        fixed("model", -30),
        fixed("size", 10),
        fixed("params", 10),
        fixed("backend", -10),
    ];
    if any_device {
        c.push(param_column("n_gpu_layers"));
    }
    for &f in LLAMA_COLUMNS {
        if p.non_default(f) || (f == "n_threads" && !any_device) {
            c.push(param_column(f));
        }
    }
    for spec in PARAMS {
        if spec.ours && spec.md.is_some() && p.non_default(spec.field) {
            c.push(param_column(spec.field));
        }
    }
    if any_device {
        c.push(fixed(TRAFFIC_COLUMN, 15));
    }
    c.push(fixed("test", 15));
    c.push(fixed("t/s", 20));
    if any_sim {
        c.push(fixed(SIM_COLUMN, 15));
    }
    c
}

fn cell(width: i32, s: &str) -> String {
    let w = width.unsigned_abs() as usize;
    if width < 0 {
        format!(" {s:<w$} |")
    } else {
        format!(" {s:>w$} |")
    }
}

impl Printer for MdPrinter {
    fn header(&mut self, plan: &Plan) -> String {
        let any_device = plan.instances.iter().any(|i| i.device().is_some());
        let any_sim = plan.instances.iter().any(|i| i.on_sim_device());
        self.columns = columns(plan.params, any_device, any_sim);
        let mut s = String::from("|");
        for c in &self.columns {
            s.push_str(&cell(c.width, c.title));
        }
        s.push_str("\n|");
        for c in &self.columns {
            let w = c.width.unsigned_abs() as usize;
            let end = if c.width > 0 { ':' } else { '-' };
            s.push_str(&format!(" {}{end} |", "-".repeat(w.saturating_sub(1))));
        }
        s.push('\n');
        s
    }

    fn test(&mut self, r: &TestResult) -> String {
        let mut s = String::from("|");
        for c in &self.columns {
            let v = match c.key {
                "model" => r.model.model_type.clone(),
                "size" => {
                    let b = r.model.size as f64;
                    if r.model.size < 1024 * 1024 * 1024 {
                        format!("{:.2} MiB", b / 1024.0 / 1024.0)
                    } else {
                        format!("{:.2} GiB", b / 1024.0 / 1024.0 / 1024.0)
                    }
                }
                "params" => {
                    let n = r.model.n_params as f64;
                    if r.model.n_params < 1_000_000_000 {
                        format!("{:.2} M", n / 1e6)
                    } else {
                        format!("{:.2} B", n / 1e9)
                    }
                }
                "backend" => r.model.backends.clone(),
                "test" => r.test_name(),
                "t/s" => {
                    let (avg, sd) = r.ts();
                    format!("{avg:.2} ± {sd:.2}")
                }
                SIM_COLUMN => r
                    .sim
                    .as_ref()
                    .map_or("-".into(), |m| format!("{:.2}", m.avg_ts)),
                TRAFFIC_COLUMN => r
                    .traffic
                    .map_or("-".into(), |t| common::cli::fmt_bytes(t.experts)),
                f => r.inst.get(f).text(),
            };
            s.push_str(&cell(c.width, &v));
        }
        s.push('\n');
        s
    }

    fn footer(&mut self) -> String {
        format!(
            "\nbuild: {} ({})\n",
            sysinfo::BUILD_COMMIT,
            sysinfo::build_number()
        )
    }
}
