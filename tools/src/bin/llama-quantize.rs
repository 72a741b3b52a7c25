//! llama-quantize: convert a GGUF model's matrices to another type
//! (llama.cpp's tool, pure mode: `llama-quantize IN.gguf OUT.gguf TYPE`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Parser;
use ggml_core::gguf::GgufFile;
use ggml_core::GgmlType;
use tools::cli;
use tools::quantize::quantize;

const TOOL: &str = "llama-quantize";

#[derive(Parser, Debug)]
#[command(
    name = "llama-quantize",
    version,
    about = "Convert every matrix of a GGUF model to TYPE (llama.cpp's llama-quantize, pure mode); norms, biases and the expert router keep their type."
)]
struct Args {
    /// input GGUF model
    input: PathBuf,
    /// output GGUF file
    output: PathBuf,
    /// target type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs, mxfp4
    #[arg(value_name = "TYPE")]
    ty: String,
}

fn run(a: Args) -> Result<()> {
    let ty = GgmlType::from_name(&a.ty).with_context(|| format!("unknown type '{}'", a.ty))?;
    cli::check_model_path(&a.input)?;
    let input =
        GgufFile::open(&a.input).with_context(|| format!("reading {}", a.input.display()))?;
    let (w, r) = quantize(&input, ty)?;
    w.write_file(&a.output)
        .with_context(|| format!("writing {}", a.output.display()))?;
    eprintln!(
        "{TOOL}: {} tensors converted to {ty}, {} kept; {:.2} MiB -> {:.2} MiB",
        r.converted,
        r.kept,
        r.bytes_in as f64 / (1 << 20) as f64,
        r.bytes_out as f64 / (1 << 20) as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    cli::main_wrapper(TOOL, || run(args))
}
