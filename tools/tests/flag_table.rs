//! The flag table (`common::flags`) against the tools that use it: every
//! flag of every tool's `--help` (as the binaries print it) is an entry of
//! the table with its spellings and help, every entry of a tool is in its
//! help and its clap command, each flag's parser fits the field that holds
//! it, and every `LLAMA_ARG_*` variable of the table sets its flag through
//! the tool's real parser (llama-run and llama-tokenize read them; the
//! server's are in server/tests/flag_table.rs).

use std::ffi::OsString;
use std::process::Command;

use ::common::flags::{self, check, table, Tool};
use clap::CommandFactory;

const BINS: [(Tool, &str); 6] = [
    (Tool::Run, env!("CARGO_BIN_EXE_llama-run")),
    (Tool::Bench, env!("CARGO_BIN_EXE_llama-bench")),
    (Tool::Quantize, env!("CARGO_BIN_EXE_llama-quantize")),
    (Tool::Tokenize, env!("CARGO_BIN_EXE_llama-tokenize")),
    (Tool::MoeCache, env!("CARGO_BIN_EXE_llama-moe-cache")),
    (Tool::Timeline, env!("CARGO_BIN_EXE_llama-timeline")),
];

fn help_of(bin: &str) -> String {
    let o = Command::new(bin)
        .arg("--help")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin}: {e}"));
    assert!(o.status.success(), "{bin} --help: {:?}", o.status);
    String::from_utf8(o.stdout).expect("help is UTF-8")
}

fn assert_none(problems: &[String]) {
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_table_spells_each_flag_once_per_tool() {
    assert_none(&check::table_problems());
    // the defaults written as text are the engine's
    let mb = llama::moe_cache::DEFAULT_MAX_BATCH.to_string();
    for (tool, id) in [
        (Tool::Run, "moe_cache_max_batch"),
        (Tool::MoeCache, "max_batch"),
    ] {
        let f = table::find(tool, id).unwrap();
        assert_eq!(f.value.and_then(|v| v.default), Some(mb.as_str()), "{id}");
    }
}

#[test]
fn every_flag_of_every_help_comes_from_the_table() {
    let mut problems = Vec::new();
    let mut shown = 0;
    for (tool, bin) in BINS {
        let help = help_of(bin);
        problems.extend(check::help_problems(tool, &help));
        shown += table::for_tool(tool).filter(|f| !f.hidden).count();
    }
    problems.extend(check::command_problems(
        Tool::Run,
        &flags::command_of::<tools::run::Args>(Tool::Run),
    ));
    problems.extend(check::command_problems(
        Tool::Quantize,
        &flags::command_of::<tools::quantize::cli::Args>(Tool::Quantize),
    ));
    problems.extend(check::command_problems(
        Tool::Tokenize,
        &flags::command_of::<tools::tokenize::Args>(Tool::Tokenize),
    ));
    problems.extend(check::command_problems(
        Tool::MoeCache,
        &flags::command_of::<tools::moe_cache::Args>(Tool::MoeCache),
    ));
    problems.extend(check::command_problems(
        Tool::Timeline,
        &flags::command_of::<tools::timeline::Args>(Tool::Timeline),
    ));
    assert_none(&problems);
    assert!(shown > 150, "{shown} flags shown");
    println!("{shown} flags of 6 tools' --help, each from the table");
}

#[test]
fn a_flag_without_an_entry_is_named() {
    // a derived option the table does not know, and help that names a
    // spelling no entry has, are what the checks report
    #[derive(clap::Parser)]
    struct T {
        #[arg(long)]
        n_gpu_layers: Option<i64>,
        #[arg(long)]
        not_in_table: bool,
    }
    let cmd = flags::command_of::<T>(Tool::Run);
    let p = check::command_problems(Tool::Run, &cmd);
    assert!(
        p.iter()
            .any(|l| l.contains("--not-in-table (field not_in_table) has no entry")),
        "{p:?}"
    );
    let help = "Options:\n      --bogus <N>\n          [-bg] a flag no entry spells (see -xyz)\n";
    let p = check::help_problems(Tool::Run, help);
    assert!(p.iter().any(|l| l.contains("--bogus is shown")), "{p:?}");
    assert!(p.iter().any(|l| l.contains("names -xyz")), "{p:?}");
    // a flag of the table shown with other spellings or other help
    let help = "  -g, --n-gpu-layers <N>\n          [-ngl] other words\n";
    let p = check::help_problems(Tool::Run, help);
    assert!(
        p.iter().any(|l| l.contains("shows -g, --n-gpu-layers")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|l| l.contains("--n-gpu-layers's help is")),
        "{p:?}"
    );
    assert!(
        p.iter().any(|l| l.contains("--cpu-moe is not in the help")
            || l.contains("-cmoe, --cpu-moe is not in the help")),
        "{p:?}"
    );
    let _ = T::command();
}

#[test]
fn every_flag_reaches_its_field_in_its_type() {
    let own = [
        ("synth_trace", "zipf"),
        ("sizes", "4"),
        ("mib", "8"),
        ("policies", "lru"),
    ];
    let mut problems = Vec::new();
    let mut n = 0;
    let mut add = |(k, p): (usize, Vec<String>)| {
        n += k;
        problems.extend(p);
    };
    add(check::type_problems::<tools::run::Args>(
        Tool::Run,
        &[],
        &[],
    ));
    add(check::type_problems::<tools::quantize::cli::Args>(
        Tool::Quantize,
        &["in.gguf", "out.gguf", "Q4_0"],
        &[],
    ));
    add(check::type_problems::<tools::tokenize::Args>(
        Tool::Tokenize,
        &["-m", "x.gguf"],
        &[],
    ));
    add(check::type_problems::<tools::moe_cache::Args>(
        Tool::MoeCache,
        &["t.trace"],
        &own,
    ));
    add(check::type_problems::<tools::timeline::Args>(
        Tool::Timeline,
        &["in.json", "out.svg"],
        &[],
    ));
    assert_none(&problems);
    assert!(n > 100, "{n}");
    println!("{n} flags parsed into their fields");
}

#[test]
fn every_llama_arg_variable_sets_its_flag() {
    let (n_run, p_run) = check::env_problems::<tools::run::Args>(Tool::Run, &[]);
    let (n_tok, p_tok) = check::env_problems::<tools::tokenize::Args>(Tool::Tokenize, &[]);
    assert_none(&p_run);
    assert_none(&p_tok);
    let vars: Vec<&str> = table::for_tool(Tool::Run).filter_map(|f| f.env).collect();
    assert_eq!(n_run, vars.len());
    assert!(n_run >= 30, "{n_run}: {vars:?}");
    assert_eq!(n_tok, 1);
    println!("llama-run: {n_run} variables, llama-tokenize: {n_tok}");
}

fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let lookup = |k: &str| {
        env.iter()
            .find(|(var, _)| *var == k)
            .map(|(_, v)| OsString::from(v))
    };
    let argv = std::iter::once("llama-run")
        .chain(args.iter().copied())
        .map(OsString::from);
    flags::parse_from::<tools::run::Args>(Tool::Run, argv, &lookup)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn a_bad_variable_is_named() {
    let e = run_with_env(&[], &[("LLAMA_ARG_N_GPU_LAYERS", "lots")]).unwrap_err();
    assert!(
        e.starts_with("LLAMA_ARG_N_GPU_LAYERS=lots: invalid value 'lots' for '--n-gpu-layers <N>'"),
        "{e}"
    );
    let e = run_with_env(&[], &[("LLAMA_ARG_FLASH_ATTN", "maybe")]).unwrap_err();
    assert!(
        e.contains("LLAMA_ARG_FLASH_ATTN=maybe") && e.contains("possible values"),
        "{e}"
    );
    // a switch with a --no- form in llama.cpp takes only booleans
    let e = run_with_env(&[], &[("LLAMA_ARG_JINJA", "maybe")]).unwrap_err();
    assert!(
        e.contains("LLAMA_ARG_JINJA=maybe: invalid boolean value"),
        "{e}"
    );
    // one without: anything but a truthy word leaves it off, as llama.cpp
    run_with_env(&[], &[("LLAMA_ARG_CPU_MOE", "maybe")]).unwrap();
    // the command line wins over a bad variable too
    run_with_env(&["-ngl", "3"], &[("LLAMA_ARG_N_GPU_LAYERS", "lots")]).unwrap();
    // -ngl auto|all from the variable, as on the command line
    run_with_env(&[], &[("LLAMA_ARG_N_GPU_LAYERS", "all")]).unwrap();
    run_with_env(&[], &[("LLAMA_ARG_N_GPU_LAYERS", "auto")]).unwrap();
}

#[test]
fn the_binaries_read_the_variables() {
    // llama-tokenize's -m from LLAMA_ARG_MODEL
    let vocab = fixtures::lean_path("tokenizer/ggml-vocab-llama-spm.gguf");
    let o = Command::new(env!("CARGO_BIN_EXE_llama-tokenize"))
        .args(["-p", "Hello", "--ids"])
        .env("LLAMA_ARG_MODEL", &vocab)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let with_flag = Command::new(env!("CARGO_BIN_EXE_llama-tokenize"))
        .args(["-p", "Hello", "--ids", "-m"])
        .arg(&vocab)
        .env("LLAMA_ARG_MODEL", "/nonexistent.gguf")
        .output()
        .unwrap();
    assert!(with_flag.status.success());
    assert_eq!(o.stdout, with_flag.stdout);
    // llama-run names a bad variable and stops before any work
    let o = Command::new(env!("CARGO_BIN_EXE_llama-run"))
        .env("LLAMA_ARG_CTX_SIZE", "-5")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("llama-run: error: LLAMA_ARG_CTX_SIZE=-5"),
        "{err}"
    );
}
