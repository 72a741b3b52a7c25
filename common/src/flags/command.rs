//! The table made into clap arguments: a tool's derived command (its
//! structs say which field holds each flag, in what order, under which
//! heading, and how fields relate: conflicts, requirements) gets each
//! flag's spellings, help, value name, default and parser from its entry.

use clap::{Arg, Command};

use super::spec::{Flag, Tool};
use super::table;

/// `cmd` (a tool's derived command) with every option that has an entry
/// for `tool` in the table declared as the entry says. An option without
/// one keeps what its field declares (the table's tests name it).
pub fn apply(tool: Tool, cmd: Command) -> Command {
    cmd.mut_args(|a| {
        if a.is_positional() {
            return a;
        }
        match table::find(tool, a.get_id().as_str()) {
            Some(f) => declare(f, a),
            None => a,
        }
    })
}

/// `a` declared as `f` says.
fn declare(f: &Flag, a: Arg) -> Arg {
    let mut a = a
        .long(f.long())
        .short(f.short())
        .help(f.help_text())
        .long_help(None)
        .hide(f.hidden);
    for alias in f.aliases() {
        a = a.alias(alias);
    }
    let Some(v) = f.value else {
        return a;
    };
    a = a.value_name(v.name);
    if let Some(p) = v.parse.value_parser() {
        a = a.value_parser(p);
    }
    if let Some(d) = v.default {
        a = a.default_value(d).required(false);
    }
    if let Some(alone) = v.alone {
        a = a.num_args(0..=1).default_missing_value(alone);
    }
    if v.list {
        a = a.value_delimiter(',');
    }
    if v.negative {
        a = a.allow_negative_numbers(true);
    }
    if v.hyphen {
        a = a.allow_hyphen_values(true);
    }
    a
}

/// Whether the flag `f`, parsed by `parser`, takes `value` (for values
/// that come from elsewhere than the command line: environment
/// variables, the table's defaults); the error is clap's, without its
/// `error: ` and usage lines.
pub fn check_value(
    f: &Flag,
    parser: clap::builder::ValueParser,
    value: &str,
) -> Result<(), String> {
    let long = f.long().unwrap_or(f.id);
    let arg = Arg::new("value")
        .long(long)
        .value_name(f.value.map_or("VALUE", |v| v.name))
        .value_parser(parser)
        .num_args(1)
        .allow_hyphen_values(true);
    match Command::new(f.id)
        .arg(arg)
        .try_get_matches_from([f.id.to_string(), format!("--{long}={value}")])
    {
        Ok(_) => Ok(()),
        Err(e) => {
            // the message and its details, up to the usage hint
            let text = e.to_string();
            let lines: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect();
            let joined = lines.join(" ");
            Err(joined
                .strip_prefix("error: ")
                .unwrap_or(&joined)
                .to_string())
        }
    }
}
