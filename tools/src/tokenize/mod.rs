//! `llama-tokenize`: the tokens of a text with a GGUF model's vocabulary
//! (only the vocabulary is read: vocabulary-only files work). The text
//! comes from `-p`, `-f` or stdin, goes through `common::tok` with
//! llama.cpp's `add_special` / `parse_special`, and each id is printed with
//! its piece (or the ids as one list).

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use common::cli;
use common::tok;

/// The tool's name, the prefix of its messages.
pub const TOOL: &str = "llama-tokenize";

#[derive(Parser, Debug)]
#[command(
    name = "llama-tokenize",
    version,
    about = "Tokenize a text with a GGUF model's vocabulary (llama.cpp's llama-tokenize)."
)]
/// `llama-tokenize`'s flags, each declared by the entry of
/// [`common::flags::table`] named as its field.
pub struct Args {
    #[arg(long)]
    pub(crate) model: PathBuf,

    #[arg(long, conflicts_with_all = ["file", "stdin"])]
    pub(crate) prompt: Option<String>,

    #[arg(long, conflicts_with = "stdin")]
    pub(crate) file: Option<PathBuf>,

    #[arg(long)]
    pub(crate) stdin: bool,

    #[arg(long)]
    pub(crate) ids: bool,

    #[arg(long, conflicts_with = "add_special")]
    pub(crate) no_bos: bool,

    #[arg(long)]
    pub(crate) add_special: bool,

    #[arg(long, conflicts_with = "no_parse_special")]
    pub(crate) parse_special: bool,

    #[arg(long)]
    pub(crate) no_parse_special: bool,

    #[arg(long)]
    pub(crate) no_escape: bool,

    #[arg(long)]
    pub(crate) show_count: bool,

    #[arg(long)]
    pub(crate) log_disable: bool,
}

/// Tokenize the text the flags give and print the tokens (or only the
/// ids, the count) on stdout; a closed stdout ends quietly.
pub fn run(a: &Args) -> Result<()> {
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
