//! The flag table (`common::flags`) against llama-server: every flag of
//! its `--help` (as the binary prints it) is an entry of the table with its
//! spellings and help, every entry is an option of its command, each
//! flag's parser fits the field that holds it, and every `LLAMA_ARG_*`
//! variable of the table (and `LLAMA_API_KEY`) sets its flag through the
//! server's real parser, the command line winning.

use std::ffi::OsString;
use std::process::Command;

use common::flags::{self, check, table, Tool};
use server::args::ServerArgs;

fn assert_none(problems: &[String]) {
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_flag_of_the_help_comes_from_the_table() {
    let o = Command::new(env!("CARGO_BIN_EXE_llama-server"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(o.status.success());
    let help = String::from_utf8(o.stdout).unwrap();
    assert_none(&check::help_problems(Tool::Server, &help));
    assert_none(&check::command_problems(
        Tool::Server,
        &flags::command_of::<ServerArgs>(Tool::Server),
    ));
    let n = table::for_tool(Tool::Server).count();
    assert!(n > 60, "{n}");
    println!("{n} flags of llama-server --help, each from the table");
}

#[test]
fn every_flag_reaches_its_field_in_its_type() {
    let (n, p) = check::type_problems::<ServerArgs>(Tool::Server, &[], &[]);
    assert_none(&p);
    println!("{n} flags parsed into their fields");
}

#[test]
fn every_llama_arg_variable_sets_its_flag() {
    let (n, p) = check::env_problems::<ServerArgs>(Tool::Server, &[]);
    assert_none(&p);
    let vars = table::for_tool(Tool::Server)
        .filter(|f| f.env.is_some())
        .count();
    assert_eq!(n, vars);
    assert!(n >= 40, "{n}");
    println!("llama-server: {n} variables");
}

fn parse(args: &str, env: &[(&str, &str)]) -> anyhow::Result<ServerArgs> {
    let lookup = |k: &str| {
        env.iter()
            .find(|(var, _)| *var == k)
            .map(|(_, v)| OsString::from(v))
    };
    ServerArgs::parse_with_env(args.split_whitespace().map(OsString::from), &lookup)
}

#[test]
fn variables_as_llama_cpp_reads_them() {
    let a = parse(
        "llama-server",
        &[
            ("LLAMA_ARG_N_PARALLEL", "2"),
            ("LLAMA_ARG_CTX_SIZE", "512"),
            ("LLAMA_ARG_N_GPU_LAYERS", "all"),
            ("LLAMA_API_KEY", "k"),
            ("LLAMA_ARG_CONT_BATCHING", "false"),
            ("LLAMA_ARG_ENDPOINT_SLOTS", "1"),
            ("LLAMA_ARG_NO_CONTEXT_SHIFT", "1"),
            ("LLAMA_ARG_UI", "off"),
            ("LLAMA_ARG_FLASH_ATTN", "auto"),
        ],
    )
    .unwrap();
    assert_eq!((a.parallel, a.ctx_size), (2, 512));
    assert_eq!(a.placement.n_gpu_layers, Some(-1));
    assert_eq!(a.api_key.as_deref(), Some("k"));
    assert!(!a.continuous_batching() && a.slots_enabled() && !a.context_shift());
    assert!(a.no_webui);
    assert_eq!(a.batch.flash_attn, flags::FlashAttn::Auto);
    // the command line wins
    let a = parse(
        "llama-server -np 3 -cb --no-slots",
        &[
            ("LLAMA_ARG_N_PARALLEL", "2"),
            ("LLAMA_ARG_CONT_BATCHING", "0"),
            ("LLAMA_ARG_ENDPOINT_SLOTS", "1"),
        ],
    )
    .unwrap();
    assert_eq!(a.parallel, 3);
    assert!(a.continuous_batching() && !a.slots_enabled());
    // the server's checks apply to what the variables give
    let e = parse("llama-server", &[("LLAMA_ARG_N_PARALLEL", "0")]).unwrap_err();
    assert!(e.to_string().contains("-np 0"), "{e}");
    let e = parse("llama-server", &[("LLAMA_ARG_PORT", "70000")]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("LLAMA_ARG_PORT=70000: invalid value '70000' for '--port <PORT>'"),
        "{e}"
    );
    let e = parse("llama-server", &[("LLAMA_ARG_CONT_BATCHING", "sometimes")]).unwrap_err();
    assert!(
        e.to_string()
            .contains("LLAMA_ARG_CONT_BATCHING=sometimes: invalid boolean value"),
        "{e}"
    );
}
