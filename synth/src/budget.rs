//! `--synth` size check: the bytes a synthetic model would take, computed
//! before anything is allocated, against the memory available, so a shape
//! too large fails with an error naming the size instead of an abort;
//! and [`fmt_bytes`], how the tools print a byte count.

use anyhow::{bail, Result};

use crate::model::SynthParams;

/// Vocabulary size assumed when `--vocab` is not given (the built-in
/// byte-level BPE vocabulary is about this size).
const DEFAULT_VOCAB: u128 = 1024;

/// Parameters and bytes of the model `p` describes (matrices of `p.ty`,
/// norms and the router F32), in u128 so no shape overflows.
pub fn model_size(p: &SynthParams) -> (u128, u128) {
    let (embd, ff, ne, hd) = (
        p.n_embd as u128,
        p.n_ff_exp as u128,
        p.n_expert as u128,
        p.head_dim as u128,
    );
    let (h, hkv) = (p.n_head as u128, p.n_head_kv as u128);
    let vocab = p.n_vocab.map_or(DEFAULT_VOCAB, |v| v as u128);
    let matrices_per_layer = embd * h * hd * 2 + embd * hkv * hd * 2 + 3 * embd * ff * ne;
    let f32_per_layer = embd * ne + 2 * embd + 2 * hd;
    let matrices = matrices_per_layer * p.n_layer as u128 + 2 * vocab * embd;
    let f32s = f32_per_layer * p.n_layer as u128 + embd;
    let bytes_per = p.ty.type_size() as u128;
    let blck = p.ty.blck_size().max(1) as u128;
    let bytes = matrices.div_ceil(blck) * bytes_per + f32s * 4;
    (matrices + f32s, bytes)
}

/// Memory available for new allocations (`MemAvailable` of
/// `/proc/meminfo`), when the system says.
pub fn available_memory() -> Option<u128> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Err when the model would not fit in memory (it is built in memory before
/// it is written) or in the address space.
pub fn check(p: &SynthParams) -> Result<()> {
    let (params, bytes) = model_size(p);
    if bytes > isize::MAX as u128 {
        bail!(
            "--synth: the model would take {} bytes ({params} parameters): too large for this machine's address space",
            bytes
        );
    }
    if let Some(avail) = available_memory() {
        if bytes > avail {
            bail!(
                "--synth: the model would take {} ({:.2} B parameters), more than the {} of memory available; choose a smaller shape (--layers, --experts, --embd, --ff) or a smaller --type",
                fmt_bytes(bytes as f64),
                params as f64 / 1e9,
                fmt_bytes(avail as f64)
            );
        }
    }
    Ok(())
}

/// Bytes as `12.34 MiB`.
pub fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_core::GgmlType;

    #[test]
    fn sizes_add_up() {
        let p = SynthParams {
            n_layer: 1,
            n_expert: 2,
            n_embd: 8,
            n_ff_exp: 4,
            n_head: 2,
            n_head_kv: 1,
            head_dim: 4,
            n_vocab: Some(10),
            ty: GgmlType::F32,
            ..SynthParams::default_model()
        };
        // q,o: 8*8 each; k,v: 8*4 each; experts 3*8*4*2; embd+output 2*10*8
        let matrices = 64 * 2 + 32 * 2 + 192 + 160;
        // router 16, attn/ffn norms 16, q/k norms 8, output norm 8
        let f32s = 16 + 16 + 8 + 8;
        assert_eq!(
            model_size(&p),
            ((matrices + f32s) as u128, ((matrices + f32s) * 4) as u128)
        );
        let huge = SynthParams {
            n_embd: 1_000_000,
            n_ff_exp: 1_000_000,
            ..SynthParams::default_model()
        };
        let e = check(&huge).unwrap_err().to_string();
        assert!(e.contains("--synth: the model would take"), "{e}");
    }
}
