//! TEMPORARY stand-in for `crate::quants` (branch `quants`) with the same
//! API, covering F32, F16 and BF16 only. Deleted once `quants` is merged.

use half::{bf16, f16};

use crate::types::GgmlType;

/// Per-type CPU kernels, as `ggml_type_traits_cpu` (same fields as `quants`).
pub struct CpuTypeTraits {
    /// The weight type.
    pub ty: GgmlType,
    /// Type activations are converted to before `vec_dot`.
    pub vec_dot_type: GgmlType,
    /// Row bytes → f32.
    pub to_float: fn(&[u8], &mut [f32]),
    /// f32 → row bytes.
    pub from_float: fn(&[f32], &mut [u8]),
    /// Dot of a weight row with an activation row in `vec_dot_type`.
    pub vec_dot: fn(usize, &[u8], &[u8]) -> f32,
    /// Scalar reference of `vec_dot`.
    #[allow(dead_code)]
    pub vec_dot_scalar: fn(usize, &[u8], &[u8]) -> f32,
}

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}

fn f32_at(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]])
}

fn f32_to_float(s: &[u8], d: &mut [f32]) {
    for (i, o) in d.iter_mut().enumerate() {
        *o = f32_at(s, i);
    }
}
fn f32_from_float(s: &[f32], d: &mut [u8]) {
    for (x, o) in s.iter().zip(d.chunks_exact_mut(4)) {
        o.copy_from_slice(&x.to_le_bytes());
    }
}
fn f16_to_float(s: &[u8], d: &mut [f32]) {
    for (i, o) in d.iter_mut().enumerate() {
        *o = f16::from_bits(u16_at(s, i)).to_f32();
    }
}
fn f16_from_float(s: &[f32], d: &mut [u8]) {
    for (x, o) in s.iter().zip(d.chunks_exact_mut(2)) {
        o.copy_from_slice(&f16::from_f32(*x).to_bits().to_le_bytes());
    }
}
fn bf16_to_float(s: &[u8], d: &mut [f32]) {
    for (i, o) in d.iter_mut().enumerate() {
        *o = bf16::from_bits(u16_at(s, i)).to_f32();
    }
}
fn bf16_from_float(s: &[f32], d: &mut [u8]) {
    for (x, o) in s.iter().zip(d.chunks_exact_mut(2)) {
        o.copy_from_slice(&bf16::from_f32(*x).to_bits().to_le_bytes());
    }
}

fn dot_lanes(n: usize, get: impl Fn(usize) -> (f32, f32)) -> f32 {
    let mut acc = [0f32; 16];
    let full = n / 16 * 16;
    for base in (0..full).step_by(16) {
        for (l, a) in acc.iter_mut().enumerate() {
            let (x, y) = get(base + l);
            *a += x * y;
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in full..n {
        let (x, y) = get(i);
        s += x * y;
    }
    s
}

fn f32_dot(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (&x[..4 * n], &y[..4 * n]);
    dot_lanes(n, |i| (f32_at(x, i), f32_at(y, i)))
}
fn f16_dot(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (&x[..2 * n], &y[..2 * n]);
    dot_lanes(n, |i| {
        (
            f16::from_bits(u16_at(x, i)).to_f32(),
            f16::from_bits(u16_at(y, i)).to_f32(),
        )
    })
}
fn bf16_dot(n: usize, x: &[u8], y: &[u8]) -> f32 {
    let (x, y) = (&x[..2 * n], &y[..2 * n]);
    dot_lanes(n, |i| {
        (
            bf16::from_bits(u16_at(x, i)).to_f32(),
            bf16::from_bits(u16_at(y, i)).to_f32(),
        )
    })
}

static F32: CpuTypeTraits = CpuTypeTraits {
    ty: GgmlType::F32,
    vec_dot_type: GgmlType::F32,
    to_float: f32_to_float,
    from_float: f32_from_float,
    vec_dot: f32_dot,
    vec_dot_scalar: f32_dot,
};
static F16: CpuTypeTraits = CpuTypeTraits {
    ty: GgmlType::F16,
    vec_dot_type: GgmlType::F16,
    to_float: f16_to_float,
    from_float: f16_from_float,
    vec_dot: f16_dot,
    vec_dot_scalar: f16_dot,
};
static BF16: CpuTypeTraits = CpuTypeTraits {
    ty: GgmlType::BF16,
    vec_dot_type: GgmlType::BF16,
    to_float: bf16_to_float,
    from_float: bf16_from_float,
    vec_dot: bf16_dot,
    vec_dot_scalar: bf16_dot,
};

/// The CPU traits of `ty`, where this stand-in has them.
pub fn cpu_traits(ty: GgmlType) -> Option<&'static CpuTypeTraits> {
    match ty {
        GgmlType::F32 => Some(&F32),
        GgmlType::F16 => Some(&F16),
        GgmlType::BF16 => Some(&BF16),
        _ => None,
    }
}
