//! Converting a GGUF model to another weight type, as `llama-quantize` does
//! for the pure case: every matrix becomes the target type; 1-d tensors
//! (norms, biases) and the expert router (`ffn_gate_inp`) keep their type;
//! a matrix whose rows do not divide into 256-element K-quant blocks gets
//! llama.cpp's fallback type (q4_K -> q5_0, q6_K -> q8_0, ...), and keeps its
//! type when even that does not fit.

use anyhow::{bail, Context as _, Result};
use ggml_core::gguf::{GgufFile, GgufValue, GgufWriter};
use ggml_core::quants::cpu_traits;
use ggml_core::GgmlType;

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

/// llama.cpp's `general.file_type` for a model whose matrices are all `ty`
/// (the K-quants as their "small" mixes, the closest to a pure file).
pub fn file_type(ty: GgmlType) -> Option<u32> {
    Some(match ty {
        GgmlType::F32 => 0,
        GgmlType::F16 => 1,
        GgmlType::Q4_0 => 2,
        GgmlType::Q4_1 => 3,
        GgmlType::Q8_0 => 7,
        GgmlType::Q5_0 => 8,
        GgmlType::Q5_1 => 9,
        GgmlType::Q2K => 10,
        GgmlType::Q3K => 11,
        GgmlType::Q4K => 14,
        GgmlType::Q5K => 16,
        GgmlType::Q6K => 18,
        GgmlType::IQ4NL => 25,
        GgmlType::IQ4XS => 30,
        GgmlType::BF16 => 32,
        GgmlType::MXFP4 => 38,
        _ => return None,
    })
}

/// The type a matrix gets: `ty`, or llama.cpp's fallback when its rows do
/// not split into `ty`'s blocks; `None` to keep it as it is (1-d tensors,
/// the router, non-weights, rows that fit no block).
fn target_type(name: &str, ne: &[i64; 4], n_dims: u32, ty: GgmlType) -> Option<GgmlType> {
    if n_dims < 2 || !name.ends_with(".weight") || name.contains("ffn_gate_inp") {
        return None;
    }
    row_type(ne[0], ty)
}

/// The type rows of `ne0` values get when asked for `ty`: `ty` when they
/// split into its blocks, else llama.cpp's fallback (q4_K -> q5_0, ...),
/// `None` when neither fits.
pub fn row_type(ne0: i64, ty: GgmlType) -> Option<GgmlType> {
    let fits = |t: GgmlType| ne0 % t.blck_size() as i64 == 0;
    if fits(ty) {
        return Some(ty);
    }
    let fallback = match ty {
        GgmlType::Q2K | GgmlType::Q3K | GgmlType::IQ4XS => GgmlType::IQ4NL,
        GgmlType::Q4K => GgmlType::Q5_0,
        GgmlType::Q5K => GgmlType::Q5_1,
        GgmlType::Q6K => GgmlType::Q8_0,
        _ => return None,
    };
    fits(fallback).then_some(fallback)
}

/// Convert `input` so that its matrices are of type `ty`.
pub fn quantize(input: &GgufFile, ty: GgmlType) -> Result<(GgufWriter, QuantizeReport)> {
    let Some(ftype) = file_type(ty) else {
        bail!("cannot quantize to {ty}: not a weight type (use f32, f16, bf16, q8_0, q4_0, q4_K, q6_K, ...)");
    };
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
        let target = target_type(&t.name, &t.ne, t.n_dims, ty).filter(|&x| x != t.ty);
        let Some(target) = target else {
            w.add_tensor(t.name.clone(), &shape, t.ty, data.to_vec())?;
            report.bytes_out += data.len();
            report.kept += 1;
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
    }
    Ok((w, report))
}
