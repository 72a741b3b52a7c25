//! The one normalizer: llama.cpp's command-line spellings rewritten into
//! what clap parses, before parsing: multi-letter short flags (`-ngl`,
//! `-tb`, `-sys`, `-cnv`) from the table, `--long_name` as `--long-name`
//! (llama.cpp's `_` for `-`), negative values after a space (`--temp -1`,
//! `-t -1`), `-ngl auto|all`; and llama.cpp flags this project does not
//! have, refused by name ([`super::table::REFUSED`]) instead of misparsed.

use std::ffi::OsString;

use super::spec::Tool;
use super::table;

/// Whether `s` is a number with a minus sign (`-1`, `-0.5`, `-1e3`).
pub fn is_negative_number(s: &str) -> bool {
    s.starts_with('-') && s.len() > 1 && s[1..].parse::<f64>().is_ok()
}

/// `--name_x=v` as (`--name-x`, `Some(v)`), as llama.cpp reads long flags;
/// anything else as it is.
pub fn split_long(raw: &str) -> (String, Option<String>) {
    if let Some(long) = raw.strip_prefix("--") {
        let (name, val) = match long.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (long, None),
        };
        return (format!("--{}", name.replace('_', "-")), val);
    }
    (raw.to_string(), None)
}

/// A flag as typed, and its inline value: `--long_x=v` as (`--long-x`,
/// `v`), `-x=v` as (`-x`, `v`).
fn split_flag(raw: &str) -> (String, Option<String>) {
    if raw.starts_with("--") {
        return split_long(raw);
    }
    match raw.split_once('=') {
        Some((f, v)) => (f.to_string(), Some(v.to_string())),
        None => (raw.to_string(), None),
    }
}

/// The long name of a flag of `cmd` spelled `flag` (`--temp`, `-t`), and
/// whether it takes a value.
fn takes_value(cmd: &clap::Command, flag: &str) -> Option<(String, bool)> {
    let arg = if let Some(long) = flag.strip_prefix("--") {
        cmd.get_arguments().find(|a| {
            a.get_long() == Some(long) || a.get_all_aliases().is_some_and(|al| al.contains(&long))
        })?
    } else {
        let mut chars = flag.strip_prefix('-')?.chars();
        let c = chars.next()?;
        if chars.next().is_some() {
            return None;
        }
        cmd.get_arguments().find(|a| a.get_short() == Some(c))?
    };
    let takes = arg.get_action().takes_values();
    let long = arg.get_long().map(|l| format!("--{l}"))?;
    Some((long, takes))
}

/// A value as llama.cpp reads it for the flag `long`: `None` drops the
/// flag (`-ngl auto`: fit to the device, our default), `-ngl all` is -1.
pub fn rewrite_value(long: &str, value: String) -> Option<String> {
    match (long, value.as_str()) {
        ("--n-gpu-layers", "auto") => None,
        ("--n-gpu-layers", "all") => Some("-1".to_string()),
        _ => Some(value),
    }
}

/// Rewrite llama.cpp's spellings in `args` (program name first) into what
/// `cmd` (the command of `tool`) parses: every flag `cmd` knows becomes
/// `--long` or `--long=value`. An error names a llama.cpp flag that
/// `tool` refuses. Nothing after `--` is touched.
pub fn normalize(
    tool: Tool,
    cmd: &clap::Command,
    args: impl IntoIterator<Item = OsString>,
) -> Result<Vec<OsString>, String> {
    let mut cmd = cmd.clone();
    cmd.build();
    let args: Vec<OsString> = args.into_iter().collect();
    let mut out = Vec::with_capacity(args.len());
    let mut i = 0;
    let mut verbatim = false;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if verbatim || out.is_empty() {
            // the program name, or after `--`
            out.push(a.clone());
            continue;
        }
        let Some(s) = a.to_str() else {
            out.push(a.clone());
            continue;
        };
        if s == "--" {
            verbatim = true;
            out.push(a.clone());
            continue;
        }
        if !s.starts_with('-') || is_negative_number(s) {
            out.push(a.clone());
            continue;
        }
        let (flag, inline) = split_flag(s);
        if let Some(r) = table::refused(tool, &flag) {
            return Err(format!("{flag}: not supported: {}", r.why));
        }
        let flag = table::long_of_multi_letter(tool, &flag).unwrap_or(flag);
        let Some((long, takes)) = takes_value(&cmd, &flag) else {
            // unknown to this tool: let clap report it
            out.push(match &inline {
                Some(v) => OsString::from(format!("{flag}={v}")),
                None => OsString::from(flag),
            });
            continue;
        };
        if !takes {
            match inline {
                Some(v) => out.push(OsString::from(format!("{long}={v}"))),
                None => out.push(OsString::from(long)),
            }
            continue;
        }
        // a value: inline, or the next argument (also when it is negative)
        let value = match inline {
            Some(v) => Some(v),
            None => match args.get(i).and_then(|v| v.to_str()) {
                Some(v) if !v.starts_with('-') || is_negative_number(v) => {
                    i += 1;
                    Some(v.to_string())
                }
                _ => None,
            },
        };
        let Some(value) = value else {
            out.push(OsString::from(long));
            continue;
        };
        if let Some(value) = rewrite_value(&long, value) {
            out.push(OsString::from(format!("{long}={value}")));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::values::FlashAttn;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct T {
        #[arg(short = 't', long = "threads", allow_negative_numbers = true)]
        threads: Option<i64>,
        #[arg(long = "threads-batch", allow_negative_numbers = true)]
        threads_batch: Option<i64>,
        #[arg(short = 's', long = "seed", allow_negative_numbers = true)]
        seed: Option<i64>,
        #[arg(long = "system-prompt")]
        system_prompt: Option<String>,
        #[arg(long = "temp")]
        temp: Option<f32>,
        #[arg(
            long = "n-gpu-layers",
            alias = "gpu-layers",
            allow_negative_numbers = true
        )]
        ngl: Option<i64>,
        #[arg(long = "flash-attn", num_args = 0..=1, default_missing_value = "on", value_parser = FlashAttn::value_parser())]
        fa: Option<FlashAttn>,
        #[arg(long = "conversation")]
        cnv: bool,
        #[arg(short = 'p', long = "prompt")]
        prompt: Option<String>,
    }

    fn parse(a: &[&str]) -> Result<T, String> {
        let args = std::iter::once("prog")
            .chain(a.iter().copied())
            .map(OsString::from);
        let v = normalize(Tool::Run, &T::command(), args)?;
        T::try_parse_from(v).map_err(|e| e.to_string())
    }

    #[test]
    fn llama_cpp_spellings_parse() {
        let t = parse(&["-tb", "2", "-sys", "X", "-t", "-1", "--temp", "-1", "-cnv"]).unwrap();
        assert_eq!(t.threads_batch, Some(2));
        assert_eq!(t.system_prompt.as_deref(), Some("X"));
        assert_eq!(t.threads, Some(-1));
        assert_eq!(t.temp, Some(-1.0));
        assert!(t.cnv);
        assert_eq!(t.seed, None);
        assert_eq!(parse(&["-ngl", "all"]).unwrap().ngl, Some(-1));
        assert_eq!(parse(&["-ngl", "auto"]).unwrap().ngl, None);
        assert_eq!(parse(&["-ngl", "99"]).unwrap().ngl, Some(99));
        assert_eq!(parse(&["--gpu-layers", "3"]).unwrap().ngl, Some(3));
        assert_eq!(parse(&["-fa", "off"]).unwrap().fa, Some(FlashAttn::Off));
        assert_eq!(parse(&["-fa", "enabled"]).unwrap().fa, Some(FlashAttn::On));
        assert_eq!(parse(&["-fa", "-1"]).unwrap().fa, Some(FlashAttn::Auto));
        assert_eq!(parse(&["-fa"]).unwrap().fa, Some(FlashAttn::On));
        assert_eq!(parse(&["-fa", "-p", "x"]).unwrap().fa, Some(FlashAttn::On));
        // a prompt that looks like a flag, written inline or after --
        assert_eq!(parse(&["-p", "-1"]).unwrap().prompt.as_deref(), Some("-1"));
        assert_eq!(
            parse(&["--prompt=-ngl"]).unwrap().prompt.as_deref(),
            Some("-ngl")
        );
        // llama.cpp's `_` for `-` in long names
        assert_eq!(parse(&["--n_gpu_layers", "5"]).unwrap().ngl, Some(5));
        assert_eq!(
            parse(&["--threads_batch=4"]).unwrap().threads_batch,
            Some(4)
        );
    }

    #[test]
    fn multi_letter_shorts_are_rewritten() {
        let v: Vec<OsString> = ["x", "-ngl", "3", "-cnv", "--", "-ot"]
            .iter()
            .map(OsString::from)
            .collect();
        let out = normalize(Tool::Run, &T::command(), v).unwrap();
        assert_eq!(
            out,
            ["x", "--n-gpu-layers=3", "--conversation", "--", "-ot"]
                .iter()
                .map(OsString::from)
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn unsupported_flags_are_named() {
        let e = parse(&["-hf", "repo/x"]).unwrap_err();
        assert_eq!(e, "-hf: not supported: this tool runs local GGUF files");
        assert!(parse(&["--lora=x.gguf"])
            .unwrap_err()
            .starts_with("--lora: not supported"));
        // unknown flags still reach clap's own error
        assert!(parse(&["--nonsense"]).unwrap_err().contains("--nonsense"));
    }
}
