//! The one table of flags, as llama.cpp's `common/arg.cpp`: each flag
//! once ([`table`]), with every spelling (long, short, llama.cpp's
//! multi-letter shorts such as `-ngl`), the tools that take it, its help,
//! its value and typed parser ([`Parse`], [`values`]), and llama.cpp's
//! environment variable (`LLAMA_ARG_*`).
//!
//! Data flows: a tool's clap structs say which field holds each flag
//! (`#[arg(long)]`; the field's name is the entry's id), in what order,
//! under which heading, and how fields relate; [`command`] declares each
//! option from its entry (spellings, help, value name, default, parser).
//! [`parse_from`] then takes the command line through the one
//! [`normalize`]r (llama.cpp's spellings into clap's), adds the
//! environment variables ([`env`]: the command line wins) and lets clap
//! parse it into the structs. `llama-bench`, which parses lists itself,
//! takes its spellings and help from the same table. [`check`] holds the
//! tests' checks: every flag of every `--help` comes from the table.
//!
//! Adding a flag: one entry in the table group of the tools that take it
//! (see `common/README.md`), and the field that holds it.

pub mod check;
pub mod command;
pub mod env;
pub mod normalize;
mod spec;
pub mod table;
pub mod values;

use std::ffi::OsString;

use clap::{ArgMatches, Command, CommandFactory, FromArgMatches};

pub use env::{process_env, Lookup};
pub use spec::{EnvSwitch, Flag, Parse, Refused, Tool, Value};
pub use values::FlashAttn;

/// Why a command line does not parse.
#[derive(Debug)]
pub enum ParseError {
    /// Ours: a llama.cpp flag the tool refuses, or an environment variable
    /// the flag does not take (the text names it).
    Flag(String),
    /// clap's (a usage error, or `--help` / `--version` to print).
    Clap(clap::Error),
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::Flag(s) => f.write_str(s),
            ParseError::Clap(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// `T`'s command (its derived clap command) as `tool`, with the table's
/// declarations.
pub fn command_of<T: CommandFactory>(tool: Tool) -> Command {
    command::apply(tool, T::command())
}

/// The matches of `args` (program name first) for `cmd`, the command of
/// `tool`: normalized, with the environment's variables (`env`) where the
/// command line does not give the flag.
pub fn matches_from(
    tool: Tool,
    cmd: &Command,
    args: impl IntoIterator<Item = OsString>,
    env: Lookup<'_>,
) -> Result<ArgMatches, ParseError> {
    let args = normalize::normalize(tool, cmd, args).map_err(ParseError::Flag)?;
    let args = env::add_env(tool, cmd, args, env).map_err(ParseError::Flag)?;
    cmd.clone()
        .try_get_matches_from(args)
        .map_err(ParseError::Clap)
}

/// Parse `args` (program name first) into `T` as `tool` does: the table's
/// declarations, the one normalizer, the environment's variables.
pub fn parse_from<T: CommandFactory + FromArgMatches>(
    tool: Tool,
    args: impl IntoIterator<Item = OsString>,
    env: Lookup<'_>,
) -> Result<T, ParseError> {
    let mut cmd = command_of::<T>(tool);
    let mut m = matches_from(tool, &cmd, args, env)?;
    T::from_arg_matches_mut(&mut m).map_err(|e| ParseError::Clap(e.format(&mut cmd)))
}

/// [`parse_from`] on the process's arguments and environment; on an error,
/// exits as clap does (usage errors: 2, `--help`: 0), an error of ours
/// printed as `TOOL: error: ...`.
pub fn parse_or_exit<T: CommandFactory + FromArgMatches>(tool: Tool) -> T {
    match parse_from::<T>(tool, std::env::args_os(), &process_env) {
        Ok(t) => t,
        Err(ParseError::Clap(e)) => e.exit(),
        Err(ParseError::Flag(s)) => {
            eprintln!("{}: error: {s}", tool.name());
            std::process::exit(2)
        }
    }
}
