//! Errors of the GGUF reader and writer. Every variant names what was wrong
//! and where: the key, the tensor, the file offset, the count.

use std::path::PathBuf;

use crate::types::GgmlType;

/// An error reading, validating or writing a GGUF file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    /// Opening, mapping, reading or writing a file failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Writing to a stream failed.
    #[error("I/O error while writing GGUF: {0}")]
    Write(#[source] std::io::Error),

    /// The first four bytes are not `GGUF`.
    #[error(
        "bad magic {}: not a GGUF file (expected 0x47 0x47 0x55 0x46 = \"GGUF\")",
        magic_text(found)
    )]
    BadMagic { found: Vec<u8> },

    /// GGUF version 1 (32-bit counts) is not supported.
    #[error("unsupported GGUF version {0} (only versions 2 and 3 are supported)")]
    UnsupportedVersion(u32),

    /// A version number that no GGUF revision uses (a big-endian file reads
    /// as a huge number).
    #[error("unknown GGUF version {0} (0x{0:08x}){hint}; only little-endian versions 2 and 3 are supported", hint = big_endian_hint(*.0))]
    UnknownVersion(u32),

    /// The file ends inside a field.
    #[error("unexpected end of file: {what} at offset {offset} needs {need} bytes, but only {left} are left (out of data, file is {file_len} bytes)")]
    Truncated {
        what: String,
        offset: usize,
        need: u64,
        left: usize,
        file_len: usize,
    },

    /// A count that cannot fit in what is left of the file.
    #[error("{what} count {count} at offset {offset} is out of range: the remaining {left} bytes can hold at most {max}")]
    CountTooLarge {
        what: String,
        count: u64,
        offset: usize,
        left: usize,
        max: u64,
    },

    /// An unknown value type id in the metadata.
    #[error("metadata key '{key}': unknown value type id {id} at offset {offset}")]
    UnknownValueType { key: String, id: u32, offset: usize },

    /// Arrays nested deeper than the limit.
    #[error("metadata key '{key}': arrays nested deeper than {limit} levels at offset {offset}")]
    ArrayTooDeep {
        key: String,
        limit: usize,
        offset: usize,
    },

    /// A bool byte other than 0 or 1.
    #[error(
        "metadata key '{key}': invalid bool value {value} at offset {offset} (must be 0 or 1)"
    )]
    InvalidBool {
        key: String,
        value: u8,
        offset: usize,
    },

    /// A key or tensor name that is not UTF-8.
    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 { what: String, offset: usize },

    /// The same key twice.
    #[error("duplicate metadata key '{key}'")]
    DuplicateKey { key: String },

    /// The same tensor name twice.
    #[error("duplicate tensor name '{name}'")]
    DuplicateTensor { name: String },

    /// `general.alignment` is zero or not a power of two.
    #[error("invalid general.alignment {value}: must be a non-zero power of two")]
    BadAlignment { value: u64 },

    /// A tensor with more than four dimensions.
    #[error("tensor '{tensor}': n_dims {n_dims} is out of range (at most 4)")]
    TooManyDims { tensor: String, n_dims: u32 },

    /// A negative dimension (a stored `u64` above `i64::MAX`).
    #[error("tensor '{tensor}': ne[{dim}] = {value} is negative (out of range)")]
    BadDim {
        tensor: String,
        dim: usize,
        value: i64,
    },

    /// The element count or byte size overflows.
    #[error("tensor '{tensor}': element count or byte size of shape {ne:?} overflows")]
    ElementCountOverflow { tensor: String, ne: [i64; 4] },

    /// `ne[0]` is not a multiple of the type's block size.
    #[error(
        "tensor '{tensor}': ne[0] = {ne0} is not a multiple of the block size {blck} of type {ty}"
    )]
    BlockSize {
        tensor: String,
        ty: GgmlType,
        ne0: i64,
        blck: usize,
    },

    /// An unknown tensor type id.
    #[error("tensor '{tensor}': unknown tensor type id {id}")]
    UnknownTensorType { tensor: String, id: u32 },

    /// A tensor offset that is not a multiple of the alignment.
    #[error(
        "tensor '{tensor}': data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    Misaligned {
        tensor: String,
        offset: u64,
        alignment: usize,
    },

    /// Tensor data that does not lie inside the file.
    #[error("tensor '{tensor}': data at offset {offset} (absolute {abs}) with size {size} is out of bounds: the file is {file_len} bytes")]
    TensorOutOfBounds {
        tensor: String,
        offset: u64,
        abs: u64,
        size: u64,
        file_len: usize,
    },

    /// Two tensors whose data overlap.
    #[error("tensor '{b}' (offset {b_offset}) overlaps tensor '{a}' (offset {a_offset}, ends at {a_end})")]
    TensorOverlap {
        a: String,
        a_offset: u64,
        a_end: u64,
        b: String,
        b_offset: u64,
    },

    /// A typed getter found a value of another type.
    #[error("metadata key '{key}': expected {expected}, found {actual}")]
    KeyType {
        key: String,
        expected: &'static str,
        actual: String,
    },

    /// A typed getter found a value that does not fit the requested type.
    #[error("metadata key '{key}': value {value} is out of range for {expected}")]
    ValueOutOfRange {
        key: String,
        value: String,
        expected: &'static str,
    },

    /// A string value that is not UTF-8 where text was requested.
    #[error("metadata key '{key}': string value is not valid UTF-8")]
    ValueNotUtf8 { key: String },

    /// The writer was given tensor data of the wrong length.
    #[error(
        "tensor '{tensor}': data is {actual} bytes, but shape {ne:?} of type {ty} needs {expected}"
    )]
    TensorDataSize {
        tensor: String,
        ne: [i64; 4],
        ty: GgmlType,
        expected: usize,
        actual: usize,
    },

    /// The writer was asked for a GGUF version it cannot write.
    #[error("cannot write GGUF version {0} (only 2 and 3)")]
    WriteVersion(u32),
}

fn big_endian_hint(v: u32) -> &'static str {
    if v > 0xffff && v.swap_bytes() <= 0xffff {
        " (a big-endian file reads like this)"
    } else {
        ""
    }
}

/// The first bytes of a file as `0x47 0x47 0x55 0x58 ("GGUX")`, or a note
/// that there are none.
fn magic_text(found: &[u8]) -> String {
    if found.is_empty() {
        return "(the file is empty)".into();
    }
    let hex: Vec<String> = found.iter().map(|b| format!("0x{b:02x}")).collect();
    let ascii: String = found
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            }
        })
        .collect();
    format!("{} (\"{ascii}\")", hex.join(" "))
}

#[cfg(test)]
mod magic_tests {
    use super::*;

    #[test]
    fn magic_bytes_print_as_hex() {
        let e = GgufError::BadMagic {
            found: b"GGUX".to_vec(),
        };
        assert_eq!(
            e.to_string(),
            "bad magic 0x47 0x47 0x55 0x58 (\"GGUX\"): not a GGUF file (expected 0x47 0x47 0x55 0x46 = \"GGUF\")"
        );
        let e = GgufError::BadMagic { found: vec![] };
        assert!(e.to_string().starts_with("bad magic (the file is empty)"));
    }
}
