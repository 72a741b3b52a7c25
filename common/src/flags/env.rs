//! llama.cpp's environment variables (`LLAMA_ARG_N_GPU_LAYERS=99`): for a
//! tool that reads them ([`Tool::reads_env`]), each flag of the table with
//! a variable that is set, and not given on the command line, is added to
//! the (normalized) command line as if given there: the command line wins,
//! as in llama.cpp, and the variable's value goes through the flag's own
//! parser. Switches read it as llama.cpp does ([`EnvSwitch`]).

use std::collections::HashSet;
use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command};

use super::command::check_value;
use super::normalize::rewrite_value;
use super::spec::{EnvSwitch, Flag, Tool};
use super::table;
use super::values::{falsey, truthy};

/// Where the variables come from: the process's environment, or a map in
/// tests (`None`: unset).
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<OsString>;

/// The process's environment.
pub fn process_env(var: &str) -> Option<OsString> {
    std::env::var_os(var)
}

/// `LLAMA_ARG_NO_X` of `LLAMA_ARG_X` (llama.cpp's negated variable).
pub fn negated(var: &str) -> Option<String> {
    var.strip_prefix("LLAMA_ARG_")
        .map(|rest| format!("LLAMA_ARG_NO_{rest}"))
}

/// The ids the command line gives (`args`, normalized), as clap parses it
/// without stopping at an error (`None` for `--help`, `--version`).
fn given(cmd: &Command, args: &[OsString]) -> Option<ArgMatches> {
    cmd.clone()
        .ignore_errors(true)
        .try_get_matches_from(args)
        .ok()
}

fn from_command_line(m: &ArgMatches, id: &str) -> bool {
    m.try_get_raw(id).is_ok() && m.value_source(id) == Some(ValueSource::CommandLine)
}

/// `args` (normalized, program name first) with the variables of `tool`'s
/// flags added where the command line does not give the flag; an error
/// names a variable whose value the flag does not take.
pub fn add_env(
    tool: Tool,
    cmd: &Command,
    mut args: Vec<OsString>,
    lookup: Lookup<'_>,
) -> Result<Vec<OsString>, String> {
    if !tool.reads_env() {
        return Ok(args);
    }
    let mut built = cmd.clone();
    built.build();
    let Some(m) = given(&built, &args) else {
        return Ok(args);
    };
    let on_line: HashSet<&str> = built
        .get_arguments()
        .map(|a| a.get_id().as_str())
        .filter(|id| from_command_line(&m, id))
        .collect();
    let conflicts_with_line = |id: &str| {
        built
            .get_arguments()
            .find(|a| a.get_id() == id)
            .is_some_and(|a| {
                built
                    .get_arg_conflicts_with(a)
                    .iter()
                    .any(|c| on_line.contains(c.get_id().as_str()))
            })
    };
    let flags: Vec<&Flag> = table::for_tool(tool)
        .filter(|f| f.env.is_some() && built.get_arguments().any(|a| a.get_id() == f.id))
        .collect();
    let mut added: Vec<OsString> = Vec::new();
    let mut done: HashSet<&str> = HashSet::new();
    for f in &flags {
        let Some(var) = f.env else { continue };
        if !done.insert(var) {
            continue;
        }
        // every flag of this variable: a switch and its `--no-` form
        let same: Vec<&Flag> = flags
            .iter()
            .copied()
            .filter(|g| g.env == Some(var))
            .collect();
        if same
            .iter()
            .any(|g| on_line.contains(g.id) || conflicts_with_line(g.id))
        {
            continue;
        }
        let strict = same.iter().any(|g| g.env_switch == EnvSwitch::Bool);
        let no_var = negated(var).filter(|_| strict);
        let raw = match no_var.as_deref().and_then(lookup) {
            Some(_) => Some(OsString::from("0")),
            None => lookup(var),
        };
        let Some(raw) = raw else { continue };
        let value = raw
            .into_string()
            .map_err(|v| format!("{var}={v:?}: not valid UTF-8"))?;
        for g in &same {
            added.extend(env_args(&built, g, var, &value, strict)?);
        }
    }
    // before `--`, after what the command line gives
    let at = args.iter().position(|a| a == "--").unwrap_or(args.len());
    args.splice(at..at, added);
    Ok(args)
}

/// The command-line arguments `f` gets from `var=value`.
fn env_args(
    cmd: &Command,
    f: &Flag,
    var: &str,
    value: &str,
    strict: bool,
) -> Result<Vec<OsString>, String> {
    let Some(long) = f.long() else {
        return Ok(Vec::new());
    };
    let long = format!("--{long}");
    let Some(v) = f.value else {
        // a switch: on when truthy, its `--no-` form when falsey
        let on = if truthy(value) {
            true
        } else if falsey(value) {
            false
        } else if strict {
            return Err(format!("{var}={value}: invalid boolean value (1, true, on, enabled or 0, false, off, disabled)"));
        } else {
            return Ok(Vec::new());
        };
        let set = if f.negates.is_some() { !on } else { on };
        return Ok(if set {
            vec![OsString::from(long)]
        } else {
            Vec::new()
        });
    };
    let Some(value) = rewrite_value(&long, value.to_string()) else {
        return Ok(Vec::new());
    };
    // the flag's own parser says whether it takes the value
    if let Some(arg) = cmd.get_arguments().find(|a| a.get_id() == f.id) {
        let parts: Vec<&str> = if v.list {
            value.split(',').collect()
        } else {
            vec![value.as_str()]
        };
        for p in parts {
            check_value(f, arg.get_value_parser().clone(), p)
                .map_err(|e| format!("{var}={value}: {e}"))?;
        }
    }
    Ok(vec![OsString::from(format!("{long}={value}"))])
}
