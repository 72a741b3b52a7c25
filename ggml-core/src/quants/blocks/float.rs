//! The plain float types F32, F16 and BF16: row conversion and the dot
//! products `ggml_vec_dot_f32`, `ggml_vec_dot_f16`, `ggml_vec_dot_bf16`.
//!
//! Rows are little-endian element bytes at any alignment. The scalar dots
//! accumulate `f32` products in `f64` (ggml's `ggml_float`); the SIMD
//! levels' dots accumulate in `f32` lanes with FMA, as ggml's SIMD paths do.

use half::f16;

pub(crate) fn check_len(what: &str, n: usize, bytes: usize, elem: usize, exact: bool) {
    let need = n * elem;
    if exact {
        assert_eq!(bytes, need, "{what}: byte count of a row of {n} elements");
    } else {
        assert!(
            bytes >= need,
            "{what}: row of {n} elements needs {need} bytes, got {bytes}"
        );
    }
}

/// Element `i` of a little-endian `u16` row.
#[inline]
fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_le_bytes([b[2 * i], b[2 * i + 1]])
}

/// ggml's `GGML_FP32_TO_BF16`: round to nearest even, NaN kept quiet.
#[inline]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let u = x.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        // NaN: truncate and force the quiet bit
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

/// `GGML_BF16_TO_FP32`: the bf16 bits as the top half of an f32.
#[inline]
pub fn bf16_bits_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

// ---- F32 ----

/// F32 bytes → f32. Panics unless `src.len() == 4 * dst.len()`.
pub fn f32_to_float(src: &[u8], dst: &mut [f32]) {
    check_len("f32", dst.len(), src.len(), 4, true);
    for (d, s) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    }
}

/// f32 → F32 bytes. Panics unless `dst.len() == 4 * src.len()`.
pub fn f32_from_float(src: &[f32], dst: &mut [u8]) {
    check_len("f32", src.len(), dst.len(), 4, true);
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(4)) {
        d.copy_from_slice(&s.to_le_bytes());
    }
}

/// Scalar `ggml_vec_dot_f32`. Panics when a row is shorter than `n` elements.
pub fn f32_vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    check_len("f32", n, x.len(), 4, false);
    check_len("f32", n, y.len(), 4, false);
    let mut sum = 0f64;
    for (a, b) in x[..4 * n].chunks_exact(4).zip(y.chunks_exact(4)) {
        let a = f32::from_le_bytes([a[0], a[1], a[2], a[3]]);
        let b = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        sum += (a * b) as f64;
    }
    sum as f32
}

// ---- F16 ----

/// F16 bytes → f32 (exact). Panics unless `src.len() == 2 * dst.len()`.
pub fn f16_to_float_scalar(src: &[u8], dst: &mut [f32]) {
    check_len("f16", dst.len(), src.len(), 2, true);
    for (i, d) in dst.iter_mut().enumerate() {
        *d = f16::from_bits(u16_at(src, i)).to_f32();
    }
}

/// f32 → F16 bytes, round to nearest even (NaNs kept quiet as `half`
/// narrows them). Panics unless `dst.len() == 2 * src.len()`.
pub fn f16_from_float_scalar(src: &[f32], dst: &mut [u8]) {
    check_len("f16", src.len(), dst.len(), 2, true);
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f16::from_f32(*s).to_bits().to_le_bytes());
    }
}

/// Scalar `ggml_vec_dot_f16`. Panics when a row is shorter than `n` elements.
pub fn f16_vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    check_len("f16", n, x.len(), 2, false);
    check_len("f16", n, y.len(), 2, false);
    let mut sum = 0f64;
    for i in 0..n {
        let a = f16::from_bits(u16_at(x, i)).to_f32();
        let b = f16::from_bits(u16_at(y, i)).to_f32();
        sum += (a * b) as f64;
    }
    sum as f32
}

// ---- BF16 ----

/// BF16 bytes → f32 (exact). Panics unless `src.len() == 2 * dst.len()`.
pub fn bf16_to_float(src: &[u8], dst: &mut [f32]) {
    check_len("bf16", dst.len(), src.len(), 2, true);
    for (i, d) in dst.iter_mut().enumerate() {
        *d = bf16_bits_to_f32(u16_at(src, i));
    }
}

/// f32 → BF16 bytes as ggml rounds. Panics unless `dst.len() == 2 * src.len()`.
pub fn bf16_from_float(src: &[f32], dst: &mut [u8]) {
    check_len("bf16", src.len(), dst.len(), 2, true);
    for (s, d) in src.iter().zip(dst.chunks_exact_mut(2)) {
        d.copy_from_slice(&f32_to_bf16_bits(*s).to_le_bytes());
    }
}

/// Scalar `ggml_vec_dot_bf16`. Panics when a row is shorter than `n` elements.
pub fn bf16_vec_dot_scalar(n: usize, x: &[u8], y: &[u8]) -> f32 {
    check_len("bf16", n, x.len(), 2, false);
    check_len("bf16", n, y.len(), 2, false);
    let mut sum = 0f64;
    for i in 0..n {
        let a = bf16_bits_to_f32(u16_at(x, i));
        let b = bf16_bits_to_f32(u16_at(y, i));
        sum += (a * b) as f64;
    }
    sum as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounding_matches_ggml() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // halfway cases round to even
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(f32::NAN) & 0x7fc0, 0x7fc0);
        assert_eq!(
            half::bf16::from_bits(0x3f80).to_f32(),
            bf16_bits_to_f32(0x3f80)
        );
    }
}
