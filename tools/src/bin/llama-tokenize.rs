//! llama-tokenize: print the tokens of a text with a GGUF model's
//! vocabulary (only the vocabulary is read: vocabulary-only files work).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use common::cli;
use common::tok;

const TOOL: &str = "llama-tokenize";

#[derive(Parser, Debug)]
#[command(
    name = "llama-tokenize",
    version,
    about = "Tokenize a text with a GGUF model's vocabulary (llama.cpp's llama-tokenize)."
)]
struct Args {
    /// model or vocabulary-only GGUF file
    #[arg(short = 'm', long = "model", value_name = "FNAME")]
    model: PathBuf,

    /// text to tokenize (escapes such as \n are processed unless --no-escape)
    #[arg(short = 'p', long = "prompt", value_name = "TEXT", conflicts_with_all = ["file", "stdin"])]
    prompt: Option<String>,

    /// file whose content is tokenized, byte for byte
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FNAME",
        conflicts_with = "stdin"
    )]
    file: Option<PathBuf>,

    /// read the text from standard input
    #[arg(long = "stdin")]
    stdin: bool,

    /// print only the ids, as one list: [1, 2, 3]
    #[arg(long = "ids")]
    ids: bool,

    /// do not add BOS (or EOS) even if the vocabulary asks for it
    /// (add_special = false)
    #[arg(long = "no-bos", conflicts_with = "add_special")]
    no_bos: bool,

    /// add BOS/EOS as the vocabulary asks (the default)
    #[arg(long = "add-special")]
    add_special: bool,

    /// turn control-token text such as <|im_start|> into those tokens (the default)
    #[arg(long = "parse-special", conflicts_with = "no_parse_special")]
    parse_special: bool,

    /// tokenize control-token text as plain text
    #[arg(long = "no-parse-special")]
    no_parse_special: bool,

    /// do not process escapes in -p (\n, \t, \\, ...)
    #[arg(long = "no-escape")]
    no_escape: bool,

    /// print the number of tokens at the end
    #[arg(long = "show-count")]
    show_count: bool,

    /// accepted for llama.cpp compatibility (nothing is logged anyway)
    #[arg(long = "log-disable", hide = true)]
    log_disable: bool,
}

fn main() -> ExitCode {
    let args = Args::parse_from(cli::normalize_args(std::env::args_os()));
    cli::main_wrapper(TOOL, || run(&args))
}

fn run(a: &Args) -> Result<()> {
    let text = match (&a.prompt, &a.file, a.stdin) {
        (Some(p), _, _) => {
            if a.no_escape {
                p.clone()
            } else {
                cli::process_escapes(p)
            }
        }
        (None, Some(f), _) => cli::read_text_file(f)?,
        (None, None, true) => {
            let mut b = Vec::new();
            std::io::stdin()
                .read_to_end(&mut b)
                .context("cannot read standard input")?;
            String::from_utf8(b).context("standard input is not valid UTF-8")?
        }
        (None, None, false) => bail!("no text: give one of -p TEXT, -f FILE or --stdin"),
    };
    let _ = (a.add_special, a.log_disable);
    let add_special = !a.no_bos;
    let parse_special = !a.no_parse_special;
    let t = tok::load_vocab(&a.model)?;
    let ids = tok::tokenize(&t, &text, add_special, parse_special)?;

    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let res: std::io::Result<()> = (|| {
        if a.ids {
            let list: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
            writeln!(out, "[{}]", list.join(", "))?;
        } else {
            for &id in &ids {
                let piece = tok::piece(&t, id, true);
                write!(out, "{id:6} -> '")?;
                match std::str::from_utf8(&piece) {
                    Ok(s) => writeln!(out, "{s}'")?,
                    Err(_) => {
                        let hex: Vec<String> = piece.iter().map(|b| format!("{b:02x}")).collect();
                        writeln!(out, "{}' (utf-8 decode failure)", hex.join(" "))?;
                    }
                }
            }
        }
        if a.show_count {
            writeln!(out, "Total number of tokens: {}", ids.len())?;
        }
        out.flush()
    })();
    match res {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("cannot write to standard output"),
    }
}
