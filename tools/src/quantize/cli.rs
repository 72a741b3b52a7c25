//! `llama-quantize`'s command line: the flags (input, output, a mix or a
//! type, `--pure`, `--allow-requantize`), the check that the output is not
//! the input, and the run: the input read, [`super::quantize`] with a
//! progress display, the output written atomically, a one-line report.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use common::cli;
use common::progress::Progress;
use ggml_core::gguf::GgufFile;

use super::{quantize, Mix, QuantizeParams, MIXES};

/// The tool's name, the prefix of its messages.
pub const TOOL: &str = "llama-quantize";

fn mixes_help() -> String {
    let mut s = String::from("Mixes (TYPE), as llama.cpp's:\n");
    for (name, _, desc) in MIXES {
        s.push_str(&format!("  {name:<8} {desc}\n"));
    }
    s.push_str(
        "Any other ggml type name (q4_K, iq4_nl, mxfp4, ...) or --pure converts every matrix to that one type.\n\
Example:\n  llama-quantize model-f16.gguf model-Q4_K_M.gguf Q4_K_M",
    );
    s
}

#[derive(Parser, Debug)]
#[command(
    name = "llama-quantize",
    version,
    about = "Quantize a GGUF model (llama.cpp's llama-quantize): each matrix gets the type the mix chooses for it; norms, biases and the expert router keep their type.",
    after_help = mixes_help()
)]
/// `llama-quantize`'s flags (each declared by the entry of
/// [`common::flags::table`] named as its field) and its three arguments.
pub struct Args {
    #[arg(long)]
    pub(crate) allow_requantize: bool,
    #[arg(long)]
    pub(crate) pure: bool,
    /// input GGUF model
    pub(crate) input: PathBuf,
    /// output GGUF file
    pub(crate) output: PathBuf,
    /// a mix (Q4_K_M, Q4_K_S, Q5_K_M, Q6_K, Q8_0, ... see below) or a ggml type
    #[arg(value_name = "TYPE")]
    pub(crate) ty: String,
}

/// Refuse to write over the input: the same path, or another name of the
/// same file (a hard or symbolic link).
fn check_distinct(input: &Path, output: &Path) -> Result<()> {
    let same_path = match (input.canonicalize(), output.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => input == output,
    };
    #[cfg(unix)]
    let same_inode = {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(input), std::fs::metadata(output)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    };
    #[cfg(not(unix))]
    let same_inode = false;
    if same_path || same_inode {
        bail!(
            "output '{}' is the input file: give another output name",
            output.display()
        );
    }
    Ok(())
}

/// Convert the input as the flags ask and write the output atomically,
/// then say what changed on stderr.
pub fn run(a: Args) -> Result<()> {
    let mix = Mix::parse(&a.ty, a.pure).with_context(|| {
        format!(
            "unknown type '{}' (mixes: {})",
            a.ty,
            MIXES.iter().map(|m| m.0).collect::<Vec<_>>().join(", ")
        )
    })?;
    cli::check_model_path(&a.input)?;
    check_distinct(&a.input, &a.output)?;
    let input = GgufFile::open(&a.input)
        .map_err(|e| anyhow::anyhow!("cannot read '{}': {e}", a.input.display()))?;
    let params = QuantizeParams {
        mix,
        allow_requantize: a.allow_requantize,
    };
    let mut bar = Progress::new("quantizing");
    let result = quantize(&input, &params, &mut |f| bar.set(f));
    bar.finish();
    let (w, r) = result?;
    synth::write_atomic(&w, &a.output)?;
    let name = match mix {
        Mix::Named(f) => f.name().to_string(),
        Mix::Pure(t) => format!("{t} (pure)"),
    };
    eprintln!(
        "{TOOL}: {} tensors converted ({name}), {} kept; {:.2} MiB -> {:.2} MiB",
        r.converted,
        r.kept,
        r.bytes_in as f64 / (1 << 20) as f64,
        r.bytes_out as f64 / (1 << 20) as f64
    );
    Ok(())
}
