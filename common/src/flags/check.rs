//! The table's checks, for the tools' tests: the table itself
//! ([`table_problems`]: a spelling taken twice by one tool, a help text
//! that types a spelling by hand, a default its parser refuses), a tool's
//! clap command ([`command_problems`]: every option has its entry and
//! every entry its option), and a tool's `--help` text as printed
//! ([`help_problems`]: every flag line is an entry's spellings and help,
//! every flag named anywhere in the text is a spelling the table knows),
//! a tool's parsers ([`type_problems`]: each flag reaches its field, in
//! the field's type) and its environment variables ([`env_problems`]:
//! each sets its flag through the tool's real parser, the command line
//! wins).
//! Each returns what is wrong, one line a problem (empty: all is well).

use std::collections::HashSet;
use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{ArgMatches, Command, CommandFactory, FromArgMatches};

use super::command::check_value;
use super::spec::{Flag, Parse, Tool};
use super::table;

/// clap's own flags, not in the table.
const CLAP_OWN: [&str; 2] = ["help", "version"];

/// What is wrong with the table itself.
pub fn table_problems() -> Vec<String> {
    let mut out = Vec::new();
    for tool in Tool::ALL {
        let mut seen: HashSet<&str> = HashSet::new();
        let mut ids: HashSet<&str> = HashSet::new();
        for f in table::for_tool(tool) {
            if !ids.insert(f.id) {
                out.push(format!("{}: id {} is in two entries", tool.name(), f.id));
            }
            for n in f.names {
                if !seen.insert(n) {
                    out.push(format!("{}: {n} is spelled by two entries", tool.name()));
                }
            }
        }
    }
    for f in table::all() {
        let who = format!("{} ({})", f.id, f.names.join(", "));
        if f.names
            .iter()
            .any(|n| !n.starts_with('-') || n.contains(' '))
        {
            out.push(format!("{who}: a spelling is not a flag"));
        }
        if f.tools.is_empty() {
            out.push(format!("{who}: no tool takes it"));
        }
        let clap_tool = f.tools.iter().any(|t| *t != Tool::Bench);
        if clap_tool && f.long().is_none() {
            out.push(format!("{who}: no long name"));
        }
        if f.help.starts_with('[') {
            out.push(format!(
                "{who}: the help types spellings by hand (the multi-letter ones are shown from the names)"
            ));
        }
        if let Some(var) = f.env {
            if !var.chars().all(|c| c.is_ascii_uppercase() || c == '_') {
                out.push(format!("{who}: {var} is not a variable name"));
            }
            if f.tools.iter().all(|t| !t.reads_env()) {
                out.push(format!(
                    "{who}: {var} is read by none of its tools (only llama.cpp's common-parser tools read variables)"
                ));
            }
        }
        if f.negates.is_some() && f.value.is_some() {
            out.push(format!("{who}: a --no- form takes no value"));
        }
        let Some(v) = f.value else { continue };
        if let (Some(d), Some(p)) = (v.default, v.parse.value_parser()) {
            let parts: Vec<&str> = if v.list {
                d.split(',').collect()
            } else {
                vec![d]
            };
            for part in parts {
                if let Err(e) = check_value(f, p.clone(), part) {
                    out.push(format!("{who}: its default '{d}': {e}"));
                }
            }
        }
    }
    out
}

/// What is wrong with `cmd`, the command of `tool` (as the tool builds it,
/// table applied): an option without an entry, an entry without an
/// option, an option the entry did not declare.
pub fn command_problems(tool: Tool, cmd: &Command) -> Vec<String> {
    let mut cmd = cmd.clone();
    cmd.build();
    let mut out = Vec::new();
    let mut ids = HashSet::new();
    for a in cmd.get_arguments() {
        let id = a.get_id().as_str();
        ids.insert(id);
        if a.is_positional() || CLAP_OWN.contains(&id) {
            continue;
        }
        let Some(f) = table::find(tool, id) else {
            out.push(format!(
                "{}: --{} (field {id}) has no entry in the flag table",
                tool.name(),
                a.get_long().unwrap_or("?")
            ));
            continue;
        };
        let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
        if a.get_long() != f.long() || a.get_short() != f.short() || help != f.help_text() {
            out.push(format!(
                "{}: --{} is not declared as its entry says",
                tool.name(),
                a.get_long().unwrap_or("?")
            ));
        }
    }
    for f in table::for_tool(tool) {
        if !ids.contains(f.id) {
            out.push(format!(
                "{}: the table's {} ({}) is no option of the tool",
                tool.name(),
                f.id,
                f.names.join(", ")
            ));
        }
    }
    out
}

/// One flag line of a help text: the spellings, the value hint, the help.
struct FlagLine<'a> {
    spellings: Vec<&'a str>,
    help: &'a str,
}

/// The flag lines of a help text (clap's layouts, llama-bench's).
fn flag_lines(text: &str) -> Vec<FlagLine<'_>> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let indent = line.len() - line.trim_start().len();
        if !(2..=6).contains(&indent) || !line.trim_start().starts_with('-') {
            continue;
        }
        let body = line.trim_start();
        let (head, inline) = match body.find("  ") {
            Some(k) => (&body[..k], body[k..].trim_start()),
            None => (body, ""),
        };
        let spellings: Vec<&str> = head
            .split([',', ' '])
            .filter(|t| t.starts_with('-'))
            .collect();
        let help = if inline.is_empty() {
            match lines.get(i + 1) {
                Some(next)
                    if next.len() - next.trim_start().len() >= 8
                        && !next.trim_start().starts_with('-') =>
                {
                    next.trim()
                }
                _ => "",
            }
        } else {
            inline
        };
        out.push(FlagLine { spellings, help });
    }
    out
}

/// The spellings the help shows for `f` (the multi-letter shorts show in
/// the help text, `[-ngl] ...`, where the tool is a clap tool).
fn shown_spellings(tool: Tool, f: &Flag) -> Vec<String> {
    if tool == Tool::Bench {
        return f.names.iter().map(|n| n.to_string()).collect();
    }
    let mut v = Vec::new();
    if let Some(c) = f.short() {
        v.push(format!("-{c}"));
    }
    if let Some(l) = f.long() {
        v.push(format!("--{l}"));
    }
    v
}

/// Every token of `text` that reads as a flag (`-ngl`, `--moe-cache-mib`;
/// `-sm/-ts/-mg` is three).
fn named_flags(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || "(`\",;[".contains(c)) {
        if !word.starts_with('-') {
            continue;
        }
        for tok in word.split('/') {
            let tok = tok.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
            let tok = tok.split('=').next().unwrap_or(tok);
            let name = tok.trim_start_matches('-');
            let dashes = tok.len() - name.len();
            if (dashes == 1 || dashes == 2)
                && name.starts_with(|c: char| c.is_ascii_lowercase())
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            {
                out.push(tok);
            }
        }
    }
    out
}

/// What is wrong with `text`, the `--help` output of `tool`: a flag line
/// whose spellings are no entry of the tool's, or whose help is not the
/// entry's; an entry of the tool the help does not show; a flag named in
/// the text that no entry spells.
pub fn help_problems(tool: Tool, text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut shown: HashSet<&str> = HashSet::new();
    for line in flag_lines(text) {
        let Some(first) = line.spellings.last() else {
            continue;
        };
        let long = line
            .spellings
            .iter()
            .find(|s| s.starts_with("--"))
            .unwrap_or(first);
        if tool != Tool::Bench
            && (line.help == "Print help" || line.help == "Print version")
            && matches!(*long, "--help" | "--version")
        {
            continue;
        }
        let Some(f) = table::lookup(tool, long) else {
            out.push(format!(
                "{}: {} is shown but is no flag of the table for it",
                tool.name(),
                line.spellings.join(", ")
            ));
            continue;
        };
        shown.insert(f.id);
        let want = shown_spellings(tool, f);
        if line.spellings != want {
            out.push(format!(
                "{}: shows {} where the table spells {}",
                tool.name(),
                line.spellings.join(", "),
                want.join(", ")
            ));
        }
        // llama-bench shows every spelling before the help, clap the
        // multi-letter ones in it
        let help = if tool == Tool::Bench {
            f.help.to_string()
        } else {
            f.help_text()
        };
        let first_line = help.lines().next().unwrap_or_default();
        if !line.help.starts_with(first_line) {
            out.push(format!(
                "{}: {long}'s help is '{}', the table's is '{first_line}'",
                tool.name(),
                line.help
            ));
        }
    }
    for f in table::for_tool(tool) {
        if !f.hidden && !shown.contains(f.id) {
            out.push(format!(
                "{}: the table's {} is not in the help",
                tool.name(),
                f.names.join(", ")
            ));
        }
    }
    let known: HashSet<&str> = table::all()
        .flat_map(|f| f.names.iter().copied())
        .chain(["--help", "--version", "-h", "-V"])
        .collect();
    for name in named_flags(text) {
        if !known.contains(name) {
            out.push(format!(
                "{}: the help names {name}, which no entry of the table spells",
                tool.name()
            ));
        }
    }
    out
}

/// A value `f` takes and another one (`own`: for [`Parse::Own`] parsers,
/// by id).
fn samples(f: &Flag, own: &[(&str, &str)]) -> Option<(String, String)> {
    let v = f.value?;
    if let Some((_, s)) = own.iter().find(|(id, _)| *id == f.id) {
        return Some((s.to_string(), s.to_string()));
    }
    let one = v.parse.sample()?;
    let other = match v.parse {
        Parse::Str => "other",
        Parse::Path => "other.gguf",
        Parse::F32 | Parse::F64 => "0.25",
        Parse::OnOff | Parse::FlashAttn => "off",
        Parse::LoadMode => "none",
        Parse::Choice(words) => words.first().copied().unwrap_or(one),
        Parse::Own => one,
        _ => "5",
    };
    Some((one.to_string(), other.to_string()))
}

fn args_of(tool: Tool, base: &[&str], more: &[String]) -> Vec<OsString> {
    std::iter::once(tool.name().to_string())
        .chain(base.iter().map(|s| s.to_string()))
        .chain(more.iter().cloned())
        .map(OsString::from)
        .collect()
}

/// Whether `T` reads the matches (a field whose type is not its parser's
/// panics in clap: caught and reported).
fn reads<T: FromArgMatches>(m: &ArgMatches) -> Result<(), String> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| T::from_arg_matches(m)));
    std::panic::set_hook(hook);
    match r {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => Err(p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into())),
    }
}

/// What is wrong with the parsers of `tool`'s flags: each flag given
/// alone (after `base`, the arguments the tool needs) must reach its
/// field, through its parser, into the field's type (`own`: a sample for
/// each [`Parse::Own`] value, by id). Returns the flags checked and the
/// problems.
pub fn type_problems<T: CommandFactory + FromArgMatches>(
    tool: Tool,
    base: &[&str],
    own: &[(&str, &str)],
) -> (usize, Vec<String>) {
    let cmd = super::command_of::<T>(tool).ignore_errors(true);
    let mut out = Vec::new();
    let mut n = 0;
    for f in table::for_tool(tool) {
        let Some(long) = f.long() else { continue };
        let arg = match (f.value, samples(f, own)) {
            (None, _) => format!("--{long}"),
            (Some(_), Some((one, _))) => format!("--{long}={one}"),
            (Some(_), None) => {
                out.push(format!("{}: --{long}: no sample value", tool.name()));
                continue;
            }
        };
        n += 1;
        // the tool's needed arguments, less this flag (`-m x` when testing -m)
        let mut rest: Vec<&str> = Vec::new();
        let mut it = base.iter();
        while let Some(b) = it.next() {
            if f.spelled(b) {
                it.next();
            } else {
                rest.push(b);
            }
        }
        let argv = args_of(tool, &rest, std::slice::from_ref(&arg));
        let m = match cmd.clone().try_get_matches_from(argv) {
            Ok(m) => m,
            Err(e) => {
                out.push(format!("{}: {arg}: {e}", tool.name()));
                continue;
            }
        };
        if m.value_source(f.id) != Some(ValueSource::CommandLine) {
            out.push(format!("{}: {arg} does not reach {}", tool.name(), f.id));
        }
        if let Err(e) = reads::<T>(&m) {
            out.push(format!(
                "{}: {arg} does not parse into its field: {e}",
                tool.name()
            ));
        }
    }
    (n, out)
}

/// What is wrong with `tool`'s environment variables, driving the tool's
/// real parser ([`super::matches_from`], then `T`): every variable of
/// the table sets its flag (and the typed field), the command line wins
/// over it, `LLAMA_ARG_NO_X` turns a switch's `--no-` form on; a tool
/// that reads none ignores them. Returns the variables checked and the
/// problems.
pub fn env_problems<T: CommandFactory + FromArgMatches>(
    tool: Tool,
    base: &[&str],
) -> (usize, Vec<String>) {
    let cmd = super::command_of::<T>(tool);
    let mut out = Vec::new();
    let mut n = 0;
    let parse = |env: &[(String, String)], more: &[String]| {
        let lookup = |k: &str| {
            env.iter()
                .find(|(var, _)| var == k)
                .map(|(_, v)| OsString::from(v))
        };
        let m = super::matches_from(tool, &cmd, args_of(tool, base, more), &lookup);
        let typed = super::parse_from::<T>(tool, args_of(tool, base, more), &lookup);
        (m, typed.err())
    };
    for f in table::for_tool(tool) {
        let (Some(var), Some(long)) = (f.env, f.long()) else {
            continue;
        };
        n += 1;
        let name = tool.name();
        let (value, other) = match (f.value, samples(f, &[])) {
            (None, _) if f.negates.is_some() => ("0".to_string(), String::new()),
            (None, _) => ("1".to_string(), String::new()),
            (Some(_), Some(s)) => s,
            (Some(_), None) => {
                out.push(format!("{name}: {var}: no sample value"));
                continue;
            }
        };
        let env = [(var.to_string(), value.clone())];
        let (m, typed) = parse(&env, &[]);
        let m = match m {
            Ok(m) => m,
            Err(e) => {
                out.push(format!("{name}: {var}={value}: {e}"));
                continue;
            }
        };
        if let Some(e) = typed {
            out.push(format!(
                "{name}: {var}={value}: the fields do not parse: {e}"
            ));
        }
        let set = m.value_source(f.id) == Some(ValueSource::CommandLine);
        if set != tool.reads_env() {
            out.push(format!(
                "{name}: {var}={value} {} --{long}",
                if set {
                    "sets, though the tool reads no variables,"
                } else {
                    "does not set"
                }
            ));
            continue;
        }
        if !tool.reads_env() {
            continue;
        }
        match f.value {
            Some(v) => {
                let got: Vec<String> = m
                    .get_raw(f.id)
                    .map(|r| r.map(|s| s.to_string_lossy().into_owned()).collect())
                    .unwrap_or_default();
                let want: Vec<String> = if v.list {
                    value.split(',').map(String::from).collect()
                } else {
                    vec![value.clone()]
                };
                if got != want {
                    out.push(format!("{name}: {var}={value} gives --{long} {got:?}"));
                }
                // the command line wins
                let (m, _) = parse(&env, &[format!("--{long}={other}")]);
                let got: Vec<String> = m
                    .ok()
                    .and_then(|m| {
                        m.get_raw(f.id)
                            .map(|r| r.map(|s| s.to_string_lossy().into_owned()).collect())
                    })
                    .unwrap_or_default();
                if got != [other.clone()] {
                    out.push(format!(
                        "{name}: {var}={value} with --{long}={other} on the command line gives {got:?}"
                    ));
                }
            }
            None => {
                if !m.get_flag(f.id) {
                    out.push(format!("{name}: {var}={value} does not turn --{long} on"));
                }
            }
        }
    }
    // a switch and its `--no-` form: LLAMA_ARG_NO_X, and the command line wins
    for f in table::for_tool(tool).filter(|f| f.negates.is_some() && f.env.is_some()) {
        let (Some(var), Some(long)) = (f.env, f.long()) else {
            continue;
        };
        let Some(no_var) = super::env::negated(var) else {
            continue;
        };
        let name = tool.name();
        let (m, _) = parse(&[(no_var.clone(), "1".to_string())], &[]);
        if tool.reads_env() && !m.as_ref().is_ok_and(|m| m.get_flag(f.id)) {
            out.push(format!("{name}: {no_var}=1 does not turn --{long} on"));
        }
        let positive = table::for_tool(tool).find(|g| g.id == f.negates.unwrap_or_default());
        if let Some(p) = positive.and_then(|p| p.long().map(|l| (p, l))) {
            let (m, _) = parse(
                &[(var.to_string(), "0".to_string())],
                &[format!("--{}", p.1)],
            );
            if !m
                .as_ref()
                .is_ok_and(|m| m.get_flag(p.0.id) && !m.get_flag(f.id))
            {
                out.push(format!(
                    "{name}: {var}=0 with --{} on the command line: the variable wins",
                    p.1
                ));
            }
        }
    }
    (n, out)
}
