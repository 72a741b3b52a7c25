//! llama.cpp's command-line spellings, rewritten into what clap parses
//! before parsing: multi-letter short flags (`-ngl`, `-tb`, `-sys`, `-cnv`),
//! negative values after a space (`--temp -1`, `-t -1`), `-ngl auto|all`,
//! `-fa on|off|auto` (and `enabled` / `disabled`); and llama.cpp flags this
//! project does not have, refused by name instead of misparsed.

pub mod prefetch;
pub mod speculative;

use std::ffi::OsString;

/// llama.cpp's short flags with more than one letter, which clap cannot
/// declare, and their long forms.
pub const MULTI_LETTER_SHORTS: &[(&str, &str)] = &[
    ("-ngl", "--n-gpu-layers"),
    ("-ub", "--ubatch-size"),
    ("-ot", "--override-tensor"),
    ("-cmoe", "--cpu-moe"),
    ("-ncmoe", "--n-cpu-moe"),
    ("-dev", "--device"),
    ("-sm", "--split-mode"),
    ("-ts", "--tensor-split"),
    ("-mg", "--main-gpu"),
    ("-nomb", "--offload-min-batch"),
    ("-fa", "--flash-attn"),
    ("-tb", "--threads-batch"),
    ("-sys", "--system-prompt"),
    ("-cnv", "--conversation"),
    ("-no-cnv", "--no-conversation"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    ("-fit", "--fit"),
    ("-fitt", "--fit-target"),
    ("-md", "--model-draft"),
    ("-ngld", "--spec-draft-ngl"),
    ("-devd", "--spec-draft-device"),
    ("-cmoed", "--spec-draft-cpu-moe"),
    ("-ncmoed", "--spec-draft-n-cpu-moe"),
    ("-otd", "--spec-draft-override-tensor"),
];

/// llama.cpp flags that this project does not support, with the reason.
pub const UNSUPPORTED: &[(&str, &str)] = &[
    ("-hf", "this tool runs local GGUF files"),
    ("-hfr", "this tool runs local GGUF files"),
    ("--hf-repo", "this tool runs local GGUF files"),
    ("-hff", "this tool runs local GGUF files"),
    ("--hf-file", "this tool runs local GGUF files"),
    ("-hft", "this tool runs local GGUF files"),
    ("--hf-token", "this tool runs local GGUF files"),
    ("-hfd", "this tool runs local GGUF files"),
    ("-hfrd", "this tool runs local GGUF files"),
    ("--hf-repo-draft", "this tool runs local GGUF files"),
    ("-hfv", "this tool runs local GGUF files"),
    ("--hf-repo-v", "this tool runs local GGUF files"),
    ("-mu", "this tool runs local GGUF files"),
    ("--model-url", "this tool runs local GGUF files"),
    ("-dr", "this tool runs local GGUF files"),
    ("--docker-repo", "this tool runs local GGUF files"),
    ("--lora", "LoRA adapters are not implemented"),
    ("--lora-scaled", "LoRA adapters are not implemented"),
    ("--control-vector", "control vectors are not implemented"),
    (
        "--control-vector-scaled",
        "control vectors are not implemented",
    ),
    ("-mm", "multimodal projectors are not implemented"),
    ("--mmproj", "multimodal projectors are not implemented"),
    ("-mmu", "multimodal projectors are not implemented"),
    ("--mmproj-url", "multimodal projectors are not implemented"),
    (
        "-md",
        "speculative decoding is not implemented in this tool (llama-run has it)",
    ),
    (
        "--model-draft",
        "speculative decoding is not implemented in this tool (llama-run has it)",
    ),
    (
        "--grammar",
        "grammar-constrained sampling is not implemented",
    ),
    (
        "--grammar-file",
        "grammar-constrained sampling is not implemented",
    ),
    ("-j", "grammar-constrained sampling is not implemented"),
    (
        "--json-schema",
        "grammar-constrained sampling is not implemented",
    ),
    ("-i", "use -cnv for an interactive chat"),
    ("--interactive", "use -cnv for an interactive chat"),
    ("-if", "use -cnv for an interactive chat"),
    ("--interactive-first", "use -cnv for an interactive chat"),
    ("--mlock", "use --load-mode mlock"),
];

/// Whether `s` is a number with a minus sign (`-1`, `-0.5`, `-1e3`).
fn is_negative_number(s: &str) -> bool {
    s.starts_with('-') && s.len() > 1 && s[1..].parse::<f64>().is_ok()
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

/// Rewrite llama.cpp's spellings in `args` (program name first) into what
/// `cmd` parses; an error names a llama.cpp flag that is not supported.
/// Nothing after `--` is touched.
pub fn normalize(
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
        let (flag, inline) = match s.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (s, None),
        };
        let short = flag;
        let flag = MULTI_LETTER_SHORTS
            .iter()
            .find(|(short, _)| *short == flag)
            .map_or(flag, |(_, long)| *long);
        // refused by name where this tool lacks the flag
        if let Some((f, why)) = UNSUPPORTED.iter().find(|(f, _)| *f == short) {
            if takes_value(&cmd, flag).is_none() {
                return Err(format!("{f}: not supported: {why}"));
            }
        }
        let Some((long, takes)) = takes_value(&cmd, flag) else {
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
        let value = match (long.as_str(), value.as_str()) {
            // llama.cpp: auto = fit to the device (our default), all = every layer
            ("--n-gpu-layers", "auto") => continue,
            ("--n-gpu-layers", "all") => "-1".to_string(),
            ("--flash-attn", "enabled") => "on".to_string(),
            ("--flash-attn", "disabled") => "off".to_string(),
            ("--flash-attn", "-1") => "auto".to_string(),
            _ => value,
        };
        out.push(OsString::from(format!("{long}={value}")));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

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
        #[arg(long = "flash-attn", num_args = 0..=1, default_missing_value = "on")]
        fa: Option<String>,
        #[arg(long = "conversation")]
        cnv: bool,
        #[arg(short = 'p', long = "prompt")]
        prompt: Option<String>,
    }

    fn parse(a: &[&str]) -> Result<T, String> {
        let args = std::iter::once("prog")
            .chain(a.iter().copied())
            .map(OsString::from);
        let v = normalize(&<T as clap::CommandFactory>::command(), args)?;
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
        assert_eq!(parse(&["-fa", "off"]).unwrap().fa.as_deref(), Some("off"));
        assert_eq!(
            parse(&["-fa", "enabled"]).unwrap().fa.as_deref(),
            Some("on")
        );
        assert_eq!(parse(&["-fa"]).unwrap().fa.as_deref(), Some("on"));
        assert_eq!(
            parse(&["-fa", "-p", "x"]).unwrap().fa.as_deref(),
            Some("on")
        );
        // a prompt that looks like a flag, written inline or after --
        assert_eq!(parse(&["-p", "-1"]).unwrap().prompt.as_deref(), Some("-1"));
        assert_eq!(
            parse(&["--prompt=-ngl"]).unwrap().prompt.as_deref(),
            Some("-ngl")
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
