//! The table's checks, for the tools' tests: the table itself
//! ([`table_problems`]: a spelling taken twice by one tool, a help text
//! that types a spelling by hand, a default its parser refuses), a tool's
//! clap command ([`command_problems`]: every option has its entry and
//! every entry its option), and a tool's `--help` text as printed
//! ([`help_problems`]: every flag line is an entry's spellings and help,
//! every flag named anywhere in the text is a spelling the table knows).
//! Each returns what is wrong, one line a problem (empty: all is well).

use std::collections::HashSet;

use clap::Command;

use super::command::check_value;
use super::spec::{Flag, Tool};
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

/// Every token of `text` that reads as a flag (`-ngl`, `--moe-cache-mib`).
fn named_flags(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for tok in text.split(|c: char| c.is_whitespace() || "(/`\"',;[".contains(c)) {
        let tok = tok.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
        let name = tok.trim_start_matches('-');
        let dashes = tok.len() - name.len();
        if (dashes == 1 || dashes == 2)
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            out.push(tok.split('=').next().unwrap_or(tok));
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
        let help = f.help_text();
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
