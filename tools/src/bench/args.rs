//! llama-bench's command line, parsed as llama.cpp parses it: each test
//! parameter ([`PARAMS`]) takes a list and may be repeated (the lists add
//! up), `--long_name` equals `--long-name`, and `--flag=value` is accepted
//! too. Everything else is a plain option (`-r`, `-o`, `-oe`, `--delay`...).

use anyhow::{bail, Result};
use common::flags::normalize::split_long;
use common::flags::{table, Flag, Tool};

use crate::bench::output::Format;
use crate::bench::params::{self, Syntax, Value, PARAMS};
use crate::bench::range::parse_int_range;

/// Everything the command line asks for.
#[derive(Clone, Debug)]
pub struct Params {
    /// Each parameter's list, aligned with [`PARAMS`] (defaults filled in).
    pub lists: Vec<Vec<Value>>,
    /// Whether the parameter was given on the command line.
    pub given: Vec<bool>,
    /// `-p`: prompt lengths (pp tests).
    pub n_prompt: Vec<i64>,
    /// `-n`: generation lengths (tg tests).
    pub n_gen: Vec<i64>,
    /// `-pg`: prompt + generation pairs.
    pub n_pg: Vec<(i64, i64)>,
    /// `-r`: repetitions of each test.
    pub reps: usize,
    /// `--delay`: seconds of pause before each test.
    pub delay: u64,
    /// `-o`: format on stdout.
    pub output: Format,
    /// `-oe`: format on stderr.
    pub output_err: Format,
    /// `-v`: placement table and more on stderr.
    pub verbose: bool,
    /// `--progress`: one line per step on stderr.
    pub progress: bool,
    /// `--no-warmup`.
    pub no_warmup: bool,
    /// `--no-expert-copy`: copy whole expert tensors (for comparison).
    pub no_expert_copy: bool,
    /// `--timeline-out`: the simulated timeline of the last repetition of
    /// the last test on a sim device (Chrome trace JSON).
    pub timeline_out: Option<std::path::PathBuf>,
    /// `--expert-trace-out`: the routing trace of the last repetition of
    /// the last test (for llama-moe-cache).
    pub expert_trace_out: Option<std::path::PathBuf>,
    /// `--expert-trace-in`: route every MoE layer by this trace's ids
    /// (forced routing, `llama::moe_cache::trace::forced`).
    pub expert_trace_in: Option<std::path::PathBuf>,
    /// `-rpc`: the RPC servers (`host:port,...`) whose devices `RPC0`,
    /// `RPC1`, ... the tests may use (llama.cpp registers them for the
    /// whole run; without `-dev`, a test uses them all).
    pub rpc: Option<String>,
}

impl Params {
    /// The list of `field`.
    pub fn list(&self, field: &str) -> &[Value] {
        &self.lists[params::index(field)]
    }

    /// Whether `field`'s list differs from its default (llama.cpp's test
    /// for a markdown column: more than one value, or not the default).
    pub fn non_default(&self, field: &str) -> bool {
        let i = params::index(field);
        self.lists[i].len() > 1 || self.lists[i] != (PARAMS[i].default)()
    }
}

/// What to do.
#[derive(Debug)]
pub enum Command {
    /// Run the benchmarks.
    Run(Box<Params>),
    /// Print this text and exit 0 (`-h`, `--version`).
    Print(String),
    /// `--list-devices` (with the `-rpc` servers' devices).
    ListDevices(Option<String>),
}

/// Parse the arguments (without the program name).
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Command> {
    let mut lists: Vec<Option<Vec<Value>>> = vec![None; PARAMS.len()];
    let mut n_prompt: Option<Vec<i64>> = None;
    let mut n_gen: Option<Vec<i64>> = None;
    let mut n_pg = Vec::new();
    let mut p = Params {
        lists: Vec::new(),
        given: Vec::new(),
        n_prompt: Vec::new(),
        n_gen: Vec::new(),
        n_pg: Vec::new(),
        reps: 5,
        delay: 0,
        output: Format::Md,
        output_err: Format::None,
        verbose: false,
        progress: false,
        no_warmup: false,
        no_expert_copy: false,
        rpc: None,
        timeline_out: None,
        expert_trace_out: None,
        expert_trace_in: None,
    };
    let mut list_devices = false;
    let mut it = args.into_iter().peekable();
    while let Some(raw) = it.next() {
        let (flag, inline) = split_long(&raw);
        let value = |it: &mut std::iter::Peekable<I::IntoIter>, name: &str| -> Result<String> {
            if let Some(v) = &inline {
                return Ok(v.clone());
            }
            match it.next() {
                Some(v) => Ok(v),
                None => bail!("{name} needs a value"),
            }
        };
        if let Some(spec) = params::by_flag(&flag) {
            let i = params::index(spec.field);
            // a switch alone means 1 (`--cpu-moe`)
            let arg = if matches!(spec.syntax, Syntax::Bools) && inline.is_none() {
                match it.peek() {
                    Some(n) if params::parse(spec, n).is_ok() => value(&mut it, &flag)?,
                    _ => "1".into(),
                }
            } else {
                value(&mut it, &flag)?
            };
            let vals =
                params::parse(spec, &arg).map_err(|e| anyhow::anyhow!("{flag} {arg}: {e}"))?;
            lists[i].get_or_insert_with(Vec::new).extend(vals);
            continue;
        }
        let Some(entry) = table::lookup(Tool::Bench, &flag) else {
            bail!("unknown argument '{raw}' (see --help)");
        };
        match entry.id {
            "help" => return Ok(Command::Print(usage())),
            "version" => {
                return Ok(Command::Print(format!(
                    "llama-bench (ggml-rs tools {}) build {} ({})\n",
                    env!("CARGO_PKG_VERSION"),
                    crate::bench::sysinfo::BUILD_COMMIT,
                    crate::bench::sysinfo::build_number()
                )))
            }
            "list_devices" => list_devices = true,
            "rpc" => {
                let v = value(&mut it, &flag)?;
                ggml_rpc_servers(&v).map_err(|e| anyhow::anyhow!(e))?;
                // each -rpc registers more servers, as llama.cpp's
                p.rpc = Some(match p.rpc.take() {
                    Some(before) => format!("{before},{v}"),
                    None => v,
                });
            }
            "n_prompt" | "n_gen" => {
                let v = value(&mut it, &flag)?;
                let nums =
                    parse_int_range(&v, false).map_err(|e| anyhow::anyhow!("{flag} {v}: {e}"))?;
                let dst = if entry.id == "n_prompt" {
                    &mut n_prompt
                } else {
                    &mut n_gen
                };
                dst.get_or_insert_with(Vec::new).extend(nums);
            }
            "n_pg" => {
                let v = value(&mut it, &flag)?;
                let parts: Vec<&str> = v.split(',').collect();
                let pair = match parts.as_slice() {
                    [a, b] => a.parse::<u32>().ok().zip(b.parse::<u32>().ok()),
                    _ => None,
                };
                let Some((pp, tg)) = pair else {
                    bail!("-pg {v}: expected two numbers PP,TG (e.g. -pg 512,128)");
                };
                n_pg.push((i64::from(pp), i64::from(tg)));
            }
            "repetitions" => {
                let v = value(&mut it, &flag)?;
                p.reps = match v.parse::<usize>() {
                    Ok(n) if n >= 1 => n,
                    _ => bail!("-r {v}: the repetitions must be a number of at least 1"),
                };
            }
            "expert_trace_out" => {
                p.expert_trace_out = Some(value(&mut it, &flag)?.into());
            }
            "expert_trace_in" => {
                p.expert_trace_in = Some(value(&mut it, &flag)?.into());
            }
            "timeline_out" => {
                p.timeline_out = Some(value(&mut it, &flag)?.into());
            }
            "delay" => {
                let v = value(&mut it, &flag)?;
                p.delay = v
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--delay {v}: expected seconds (0 or more)"))?;
            }
            "output" | "output_err" => {
                let v = value(&mut it, &flag)?;
                let f = Format::from_name(&v).ok_or_else(|| {
                    anyhow::anyhow!(
                        "{flag} {v}: unknown output format '{v}' (csv, json, jsonl, md, sql, none)"
                    )
                })?;
                if entry.id == "output_err" {
                    p.output_err = f;
                } else {
                    p.output = f;
                }
            }
            // llama.cpp's process options: only their defaults run here
            "prio" => {
                let v = value(&mut it, &flag)?;
                if v != "0" {
                    bail!("--prio {v}: not supported: threads run at normal priority (0)");
                }
            }
            "numa" => {
                let v = value(&mut it, &flag)?;
                bail!("--numa {v}: not supported: no NUMA placement");
            }
            "verbose" => p.verbose = true,
            "progress" => p.progress = true,
            "no_warmup" => p.no_warmup = true,
            "no_expert_copy" => p.no_expert_copy = true,
            _ => bail!("unknown argument '{raw}' (see --help)"),
        }
    }
    if list_devices {
        return Ok(Command::ListDevices(p.rpc));
    }
    p.given = lists.iter().map(Option::is_some).collect();
    p.lists = lists
        .into_iter()
        .zip(PARAMS)
        .map(|(l, spec)| l.unwrap_or_else(spec.default))
        .collect();
    p.n_prompt = n_prompt.unwrap_or_else(|| vec![512]);
    p.n_gen = n_gen.unwrap_or_else(|| vec![128]);
    p.n_pg = n_pg;
    Ok(Command::Run(Box::new(p)))
}

/// The `-rpc` list checked (host:port entries).
fn ggml_rpc_servers(v: &str) -> Result<Vec<String>, String> {
    common::cli::parse_rpc_servers(v)
}

/// The test flags that are not parameters of [`PARAMS`] (shown first
/// under "test parameters").
const TEST_FLAGS: [&str; 3] = ["n_prompt", "n_gen", "n_pg"];

/// One flag's lines of `--help`: its spellings and value name, then its
/// help at column 40 (on the next line where they are longer than 37),
/// more lines of help below it.
fn usage_line(s: &mut String, f: &Flag, suffix: &str) {
    let mut flags = f.names.join(", ");
    if let Some(v) = f.value {
        flags.push(' ');
        flags.push_str(v.name);
    }
    let mut help = f.help.lines();
    let first = help.next().unwrap_or_default();
    if first.is_empty() && suffix.is_empty() {
        s.push_str(&format!("  {flags}\n"));
    } else if flags.len() > 37 {
        s.push_str(&format!("  {flags}\n  {:<37} {first}{suffix}\n", ""));
    } else {
        s.push_str(&format!("  {flags:<37} {first}{suffix}\n"));
    }
    for more in help {
        s.push_str(&format!("  {:<37} {more}\n", ""));
    }
}

/// `--help`: every flag from the table (options, then the test
/// parameters: `-p`, `-n`, `-pg`, then [`PARAMS`] in its order).
pub fn usage() -> String {
    let mut s = String::from(
        "usage: llama-bench [options]\n\n\
Measure prompt processing (pp) and generation (tg) speed, as llama.cpp's llama-bench.\n\n\
options:\n",
    );
    let is_param = |f: &Flag| PARAMS.iter().any(|p| p.field == f.id);
    for f in table::for_tool(Tool::Bench) {
        if !f.hidden && !is_param(f) && !TEST_FLAGS.contains(&f.id) {
            usage_line(&mut s, f, "");
        }
    }
    s.push_str("\ntest parameters:\n");
    for id in TEST_FLAGS {
        if let Some(f) = table::find(Tool::Bench, id) {
            usage_line(&mut s, f, "");
        }
    }
    for spec in PARAMS {
        let def: Vec<String> = (spec.default)()
            .iter()
            .map(|v| match (spec.syntax, v) {
                // a choice's default by its name (`auto`, not -1)
                (Syntax::Choice(names), Value::Int(i)) => names
                    .iter()
                    .find(|(_, x)| x == i)
                    .map_or_else(|| v.text(), |(n, _)| n.to_string()),
                _ => v.text(),
            })
            .collect();
        let def = match def.join(",") {
            d if d.is_empty() => String::new(),
            d => format!(" (default: {d})"),
        };
        usage_line(&mut s, spec.flag(), &def);
    }
    s.push_str(
        "\nMultiple values can be given for each test parameter by separating them with ','\n\
or by giving the parameter several times. Ranges: 'first-last', 'first-last+step',\n\
'first-last*mult' (-p 16-64+16, -t 1-8*2).\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(a: &[&str]) -> Result<Params> {
        match parse_args(a.iter().map(|s| s.to_string()))? {
            Command::Run(p) => Ok(*p),
            c => panic!("{c:?}"),
        }
    }

    #[test]
    fn lists_add_up_and_defaults_fill_in() {
        let p = run(&["-p", "16,32", "-p", "64", "-ncmoe", "0,1", "-fa", "0,1"]).unwrap();
        assert_eq!(p.n_prompt, [16, 32, 64]);
        assert_eq!(p.n_gen, [128]);
        assert_eq!(p.list("n_cpu_moe"), [Value::Int(0), Value::Int(1)]);
        assert!(p.non_default("n_cpu_moe") && p.non_default("flash_attn"));
        assert!(!p.non_default("n_batch"));
        assert_eq!(p.list("n_batch"), [Value::Int(2048)]);
        let p = run(&["--cpu-moe", "-p", "8", "--n_gen=4"]).unwrap();
        assert_eq!(p.list("cpu_moe"), [Value::Bool(true)]);
        assert_eq!(p.n_prompt, [8]);
        assert_eq!(p.n_gen, [4]);
        let p = run(&["-ot", "exps=CPU;norm=CPU", "-ot", "exps=CPU", "-pg", "16,4"]).unwrap();
        assert_eq!(
            p.list("tensor_buft_overrides"),
            [
                Value::Str("exps=CPU;norm=CPU".into()),
                Value::Str("exps=CPU".into())
            ]
        );
        assert_eq!(p.n_pg, [(16, 4)]);
    }

    #[test]
    fn bad_arguments_name_flag_and_value() {
        let e = |a: &[&str]| format!("{:#}", run(a).unwrap_err());
        let m = e(&["-t", "8-1"]);
        assert!(m.contains("-t 8-1") && m.contains("below"), "{m}");
        let m = e(&["-p", "16,abc"]);
        assert!(m.contains("-p 16,abc") && m.contains("'abc'"), "{m}");
        let m = e(&["-ncmoe", "x"]);
        assert!(m.contains("-ncmoe x") && m.contains("'x'"), "{m}");
        let m = e(&["-o", "xml"]);
        assert!(m.contains("xml") && m.contains("jsonl"), "{m}");
        assert!(e(&["-pg", "16"]).contains("PP,TG"));
        assert!(e(&["-r", "0"]).contains("-r"));
        assert!(e(&["--bogus"]).contains("--bogus"));
        assert!(e(&["-p"]).contains("needs a value"));
        assert!(e(&["--prio", "2"]).contains("not supported"));
        assert!(e(&["--numa", "distribute"]).contains("not supported"));
        assert!(run(&["--prio", "0"]).is_ok());
    }

    #[test]
    fn rpc_lists_add_up_as_llama_cpps() {
        let p = run(&["-rpc", "127.0.0.1:50052,10.0.0.2:50052", "--rpc", "h:1"]).unwrap();
        assert_eq!(p.rpc.as_deref(), Some("127.0.0.1:50052,10.0.0.2:50052,h:1"));
        let e = format!("{:#}", run(&["-rpc", "127.0.0.1"]).unwrap_err());
        assert!(e.contains("127.0.0.1"), "{e}");
    }
}
