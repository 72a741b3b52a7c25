//! Converting a GGUF model to another weight type, as `llama-quantize`
//! does: each matrix gets the type the mix chooses for it ([`mix`]: a
//! llama.cpp mix such as Q4_K_M, or one type for all with `--pure`); 1-d
//! tensors (norms, biases) and the expert router (`ffn_gate_inp`) keep
//! their type; a matrix whose rows do not divide into the type's blocks gets
//! llama.cpp's fallback type (q4_K -> q5_0, q6_K -> q8_0, ...), F16 when even
//! that does not fit. Re-quantizing an already quantized tensor needs
//! `allow_requantize`.

pub mod cli;
pub mod mix;

use anyhow::{bail, Context as _, Result};
use ggml_core::gguf::{GgufFile, GgufValue, GgufWriter};
use ggml_core::quants::cpu_traits;
pub use mix::{Ftype, Mix, ModelShape, TypeChooser, MIXES};
pub use synth::ftype::{pure_file_type as file_type, row_type};

/// What happened to each tensor.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuantizeReport {
    /// Tensors converted (to the target type or its fallback).
    pub converted: usize,
    /// Tensors kept as they were.
    pub kept: usize,
    /// Bytes of tensor data before.
    pub bytes_in: usize,
    /// Bytes of tensor data after.
    pub bytes_out: usize,
}

/// The layer count, expert count and GQA ratio of a GGUF model
/// (`{arch}.block_count`, `.expert_count`, `.attention.head_count[_kv]`).
pub fn model_shape(input: &GgufFile) -> Result<ModelShape> {
    let arch = input
        .get_str("general.architecture")
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .unwrap_or("llama")
        .to_string();
    let u = |k: &str| -> Result<Option<u64>> {
        let key = format!("{arch}.{k}");
        Ok(match input.get(&key) {
            None => None,
            Some(GgufValue::U32(v)) => Some(u64::from(*v)),
            Some(GgufValue::I32(v)) => u64::try_from(*v).ok(),
            Some(GgufValue::U64(v)) => Some(*v),
            Some(GgufValue::I64(v)) => u64::try_from(*v).ok(),
            // per-layer arrays (some architectures): the first layer's
            Some(_) => None,
        })
    };
    let n_layer = u("block_count")?.context("the model has no block_count")? as usize;
    let n_head = u("attention.head_count")?.unwrap_or(1).max(1) as usize;
    let n_head_kv = u("attention.head_count_kv")?
        .unwrap_or(n_head as u64)
        .max(1) as usize;
    Ok(ModelShape {
        n_layer,
        n_expert: u("expert_count")?.unwrap_or(0) as usize,
        n_gqa: n_head / n_head_kv,
    })
}

/// How to quantize.
#[derive(Debug, Clone, Copy)]
pub struct QuantizeParams {
    /// The mix (or one type for all).
    pub mix: Mix,
    /// Convert tensors that are already quantized (quality suffers).
    pub allow_requantize: bool,
}

/// Convert `input` with the mix of `params`; `progress` gets the fraction
/// of tensor bytes done.
pub fn quantize(
    input: &GgufFile,
    params: &QuantizeParams,
    progress: &mut dyn FnMut(f32),
) -> Result<(GgufWriter, QuantizeReport)> {
    let mix = params.mix;
    let Some(ftype) = mix.file_type() else {
        bail!(
            "cannot quantize to {}: not a weight type (use a mix such as Q4_K_M, or f32, f16, bf16, q8_0, q4_0, q4_K, q6_K, ...)",
            mix.default_type()
        );
    };
    let dims = model_shape(input)?;
    let mut chooser = TypeChooser::new(mix, dims, input.tensors().iter().map(|t| t.name.as_str()));
    let total: usize = input
        .tensors()
        .iter()
        .map(|t| input.tensor_data(t).len())
        .sum();
    let mut done = 0usize;
    let mut w = GgufWriter::new();
    w.set_version(input.version())?;
    for (k, v) in input.metadata() {
        w.set_kv(k.clone(), v.clone());
    }
    w.set_kv("general.file_type", GgufValue::U32(ftype));
    w.set_kv("general.quantization_version", GgufValue::U32(2));
    let mut report = QuantizeReport::default();
    for t in input.tensors() {
        let data = input.tensor_data(t);
        report.bytes_in += data.len();
        let shape = t.shape().to_vec();
        done += data.len();
        let chosen = chooser
            .choose(&t.name, &t.ne[..t.n_dims as usize], t.n_dims)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let target = chosen.filter(|&x| x != t.ty);
        if target.is_some() && t.ty.is_quantized() && !params.allow_requantize {
            bail!(
                "tensor '{}' is already quantized ({}): re-quantizing loses quality; pass --allow-requantize to do it anyway",
                t.name,
                t.ty
            );
        }
        let Some(target) = target else {
            w.add_tensor(t.name.clone(), &shape, t.ty, data.to_vec())?;
            report.bytes_out += data.len();
            report.kept += 1;
            progress(done as f32 / total.max(1) as f32);
            continue;
        };
        let to = cpu_traits(target).with_context(|| format!("no CPU kernels for {target}"))?;
        let from = cpu_traits(t.ty)
            .with_context(|| format!("tensor '{}': cannot read type {}", t.name, t.ty))?;
        let ne0 = t.ne[0] as usize;
        let rows = (t.n_elements() as usize) / ne0.max(1);
        let (row_in, row_out) = (t.ty.row_size(ne0 as u64), target.row_size(ne0 as u64));
        let (Some(row_in), Some(row_out)) = (row_in, row_out) else {
            bail!(
                "tensor '{}': rows of {ne0} do not split into blocks",
                t.name
            );
        };
        let mut out = vec![0u8; rows * row_out];
        let mut f = vec![0f32; ne0];
        for r in 0..rows {
            (from.to_float)(&data[r * row_in..(r + 1) * row_in], &mut f);
            (to.from_float)(&f, &mut out[r * row_out..(r + 1) * row_out]);
        }
        report.bytes_out += out.len();
        report.converted += 1;
        w.add_tensor(t.name.clone(), &shape, target, out)?;
        progress(done as f32 / total.max(1) as f32);
    }
    Ok((w, report))
}
