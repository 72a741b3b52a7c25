//! llama.cpp's file types (`general.file_type`, `llama_ftype`) and the
//! type a matrix gets when its rows do not split into the asked type's
//! blocks: what a GGUF writer (the synthetic generator here, a quantizer)
//! needs to label its output and pick each matrix's type as llama.cpp would.
//!
//! Data flows one way: a weight type and a row width in, a type or a file
//! type number out.

use ggml_core::GgmlType;

/// llama.cpp's `general.file_type` for a model whose matrices are all `ty`.
pub fn pure_file_type(ty: GgmlType) -> Option<u32> {
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

/// `ty`, or llama.cpp's fallback when rows of `ne0` do not split into its
/// blocks (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K / IQ4_XS
/// -> IQ4_NL), or F16 when even that does not fit.
pub fn fit_rows(ty: GgmlType, ne0: i64) -> GgmlType {
    let fits = |t: GgmlType| ne0 % t.blck_size() as i64 == 0;
    if fits(ty) {
        return ty;
    }
    let fallback = match ty {
        GgmlType::Q2K | GgmlType::Q3K | GgmlType::IQ4XS => GgmlType::IQ4NL,
        GgmlType::Q4K => GgmlType::Q5_0,
        GgmlType::Q5K => GgmlType::Q5_1,
        GgmlType::Q6K => GgmlType::Q8_0,
        _ => GgmlType::F16,
    };
    if fits(fallback) {
        fallback
    } else {
        GgmlType::F16
    }
}

/// The type rows of `ne0` values get when asked for `ty`: `ty` when they
/// split into its blocks, else llama.cpp's fallback (q4_K -> q5_0, ...),
/// `None` when neither fits (see [`fit_rows`], which then says F16).
pub fn row_type(ne0: i64, ty: GgmlType) -> Option<GgmlType> {
    let t = fit_rows(ty, ne0);
    (ne0 % t.blck_size() as i64 == 0 && (t == ty || t != GgmlType::F16)).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_types_as_llama_cpp() {
        assert_eq!(fit_rows(GgmlType::Q4K, 64), GgmlType::Q5_0);
        assert_eq!(fit_rows(GgmlType::Q6K, 64), GgmlType::Q8_0);
        assert_eq!(fit_rows(GgmlType::Q4K, 256), GgmlType::Q4K);
        assert_eq!(fit_rows(GgmlType::Q8_0, 20), GgmlType::F16);
        assert_eq!(row_type(20, GgmlType::Q8_0), None);
        assert_eq!(row_type(64, GgmlType::Q4K), Some(GgmlType::Q5_0));
    }

    #[test]
    fn file_types_of_pure_models() {
        assert_eq!(pure_file_type(GgmlType::F16), Some(1));
        assert_eq!(pure_file_type(GgmlType::Q4K), Some(14));
        assert_eq!(pure_file_type(GgmlType::Q8_1), None);
    }
}
