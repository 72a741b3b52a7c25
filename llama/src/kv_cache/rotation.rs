//! llama.cpp's attention rotation for quantized KV caches: with a
//! block-quantized K (V) cache whose heads are a multiple of 64 values, Q and
//! K (V) are multiplied by an orthonormal Walsh-Hadamard matrix in blocks of
//! `n` before the store, and the attention output by the same matrix after
//! it (`H·H = I`, so scores and outputs are unchanged in exact arithmetic,
//! while the quantized rows lose less). `LLAMA_ATTN_ROT_DISABLE=1` turns it
//! off, as in llama.cpp.

use ggml_core::GgmlType;

/// The rotation sizes `(k, v)` for a cache of K type `ty_k` and V type
/// `ty_v` with heads of `head_k` / `head_v` values (`None`: no rotation).
/// K uses the largest power of two (at least 64) that divides its head, V
/// always 64, as llama.cpp's `build_input_k_rot` / `build_input_v_rot`.
pub fn rotation_sizes(
    ty_k: GgmlType,
    ty_v: Option<GgmlType>,
    head_k: usize,
    head_v: usize,
) -> (Option<usize>, Option<usize>) {
    let off = std::env::var("LLAMA_ATTN_ROT_DISABLE")
        .ok()
        .and_then(|v| v.trim().parse::<i64>().ok())
        .is_some_and(|v| v != 0);
    if off {
        return (None, None);
    }
    let k = (ty_k.is_quantized() && head_k > 0 && head_k.is_multiple_of(64)).then(|| {
        let mut n = 64;
        while head_k.is_multiple_of(n * 2) {
            n *= 2;
        }
        n
    });
    let v = ty_v
        .filter(|t| t.is_quantized() && head_v > 0 && head_v.is_multiple_of(64))
        .map(|_| 64);
    (k, v)
}

/// The rotations of one cache: sizes and matrices, made once.
#[derive(Clone, Debug, Default)]
pub struct Rotation {
    /// Block size of the Q/K rotation (`None`: K not rotated).
    pub k: Option<usize>,
    /// Block size of the V / output rotation (`None`: V not rotated).
    pub v: Option<usize>,
    matrices: Vec<(usize, Vec<f32>)>,
}

impl Rotation {
    /// The rotations of a K cache of `ty_k` and V of `ty_v` with heads of
    /// `head_k` / `head_v` values ([`rotation_sizes`]).
    pub fn new(ty_k: GgmlType, ty_v: GgmlType, head_k: usize, head_v: usize) -> Rotation {
        let (k, v) = rotation_sizes(ty_k, Some(ty_v), head_k, head_v);
        let mut matrices: Vec<(usize, Vec<f32>)> = Vec::new();
        for n in [k, v].into_iter().flatten() {
            if !matrices.iter().any(|(m, _)| *m == n) {
                matrices.push((n, hadamard(n)));
            }
        }
        Rotation { k, v, matrices }
    }

    /// The `n x n` matrix (row major), when this cache rotates by `n`.
    pub fn matrix(&self, n: usize) -> Option<&[f32]> {
        self.matrices
            .iter()
            .find(|(m, _)| *m == n)
            .map(|(_, h)| h.as_slice())
    }
}

/// The `n x n` orthonormal Walsh-Hadamard matrix (`n` a power of two), row
/// major, built as ggml's `ggml_gen_hadamard`: `1/sqrt(n)` in the corner,
/// then `[[H, H], [H, -H]]` doubling.
pub fn hadamard(n: usize) -> Vec<f32> {
    debug_assert!(n.is_power_of_two());
    let mut d = vec![0f32; n * n];
    d[0] = (1.0f64 / f64::from((n as f32).sqrt())) as f32;
    let mut s = 1;
    while s < n {
        for i in 0..s {
            for j in 0..s {
                let v = d[i * n + j];
                d[(i + s) * n + j] = v;
                d[i * n + j + s] = v;
                d[(i + s) * n + j + s] = -v;
            }
        }
        s *= 2;
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hadamard_is_orthonormal_and_its_own_inverse() {
        for n in [64usize, 128] {
            let h = hadamard(n);
            for i in 0..n {
                for j in 0..n {
                    let dot: f64 = (0..n)
                        .map(|k| h[i * n + k] as f64 * h[k * n + j] as f64)
                        .sum();
                    let want = if i == j { 1.0 } else { 0.0 };
                    assert!((dot - want).abs() < 1e-6, "n {n} ({i},{j}): {dot}");
                }
            }
        }
    }

    #[test]
    fn sizes_follow_llama_cpp() {
        use GgmlType::*;
        assert_eq!(
            rotation_sizes(Q8_0, Some(Q8_0), 128, 128),
            (Some(128), Some(64))
        );
        assert_eq!(rotation_sizes(Q4_0, Some(F16), 192, 192), (Some(64), None));
        assert_eq!(rotation_sizes(F16, Some(Q4_0), 64, 64), (None, Some(64)));
        assert_eq!(rotation_sizes(Q8_0, Some(Q8_0), 32, 32), (None, None));
    }
}
