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
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
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
    BadMagic {
        /// The bytes found where the magic should be.
        found: Vec<u8>,
    },

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
        /// The field being read.
        what: String,
        /// Byte offset of the field.
        offset: usize,
        /// Bytes the field needs.
        need: u64,
        /// Bytes left in the file after the offset.
        left: usize,
        /// Length of the file in bytes.
        file_len: usize,
    },

    /// A count that cannot fit in what is left of the file.
    #[error("{what} count {count} at offset {offset} is out of range: the remaining {left} bytes can hold at most {max}")]
    CountTooLarge {
        /// What is counted (keys, tensors, array elements, string bytes).
        what: String,
        /// The count read.
        count: u64,
        /// Byte offset of the count.
        offset: usize,
        /// Bytes left in the file after the count.
        left: usize,
        /// The largest count those bytes can hold.
        max: u64,
    },

    /// An unknown value type id in the metadata.
    #[error("metadata key '{key}': unknown value type id {id} at offset {offset}")]
    UnknownValueType {
        /// The metadata key.
        key: String,
        /// The type id read.
        id: u32,
        /// Byte offset of the type id.
        offset: usize,
    },

    /// Arrays nested deeper than the limit.
    #[error("metadata key '{key}': arrays nested deeper than {limit} levels at offset {offset}")]
    ArrayTooDeep {
        /// The metadata key.
        key: String,
        /// The nesting limit.
        limit: usize,
        /// Byte offset of the array too deep.
        offset: usize,
    },

    /// A bool byte other than 0 or 1.
    #[error(
        "metadata key '{key}': invalid bool value {value} at offset {offset} (must be 0 or 1)"
    )]
    InvalidBool {
        /// The metadata key.
        key: String,
        /// The byte read.
        value: u8,
        /// Byte offset of the value.
        offset: usize,
    },

    /// A key or tensor name that is not UTF-8.
    #[error("{what} at offset {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// What the string is (a key, a tensor name).
        what: String,
        /// Byte offset of the string.
        offset: usize,
    },

    /// The same key twice.
    #[error("duplicate metadata key '{key}'")]
    DuplicateKey {
        /// The repeated key.
        key: String,
    },

    /// The same tensor name twice.
    #[error("duplicate tensor name '{name}'")]
    DuplicateTensor {
        /// The repeated tensor name.
        name: String,
    },

    /// `general.alignment` is zero or not a power of two.
    #[error("invalid general.alignment {value}: must be a non-zero power of two")]
    BadAlignment {
        /// The alignment read.
        value: u64,
    },

    /// A tensor with more than four dimensions.
    #[error("tensor '{tensor}': n_dims {n_dims} is out of range (at most 4)")]
    TooManyDims {
        /// The tensor name.
        tensor: String,
        /// The dimension count read.
        n_dims: u32,
    },

    /// A negative dimension (a stored `u64` above `i64::MAX`).
    #[error("tensor '{tensor}': ne[{dim}] = {value} is negative (out of range)")]
    BadDim {
        /// The tensor name.
        tensor: String,
        /// Which dimension.
        dim: usize,
        /// The stored value, read as `i64`.
        value: i64,
    },

    /// The element count or byte size overflows.
    #[error("tensor '{tensor}': element count or byte size of shape {ne:?} overflows")]
    ElementCountOverflow {
        /// The tensor name.
        tensor: String,
        /// The shape (`ne`, padded with 1).
        ne: [i64; 4],
    },

    /// `ne[0]` is not a multiple of the type's block size.
    #[error(
        "tensor '{tensor}': ne[0] = {ne0} is not a multiple of the block size {blck} of type {ty}"
    )]
    BlockSize {
        /// The tensor name.
        tensor: String,
        /// The tensor type.
        ty: GgmlType,
        /// The first dimension.
        ne0: i64,
        /// The type's block size.
        blck: usize,
    },

    /// An unknown tensor type id.
    #[error("tensor '{tensor}': unknown tensor type id {id}")]
    UnknownTensorType {
        /// The tensor name.
        tensor: String,
        /// The type id read.
        id: u32,
    },

    /// A tensor offset that is not a multiple of the alignment.
    #[error(
        "tensor '{tensor}': data offset {offset} is not a multiple of the alignment {alignment}"
    )]
    Misaligned {
        /// The tensor name.
        tensor: String,
        /// Data offset, relative to the start of the data section.
        offset: u64,
        /// The file's alignment.
        alignment: usize,
    },

    /// Tensor data that does not lie inside the file.
    #[error("tensor '{tensor}': data at offset {offset} (absolute {abs}) with size {size} is out of bounds: the file is {file_len} bytes")]
    TensorOutOfBounds {
        /// The tensor name.
        tensor: String,
        /// Data offset, relative to the start of the data section.
        offset: u64,
        /// Absolute file offset of the data.
        abs: u64,
        /// Size of the tensor data in bytes.
        size: u64,
        /// Length of the file in bytes.
        file_len: usize,
    },

    /// Two tensors whose data overlap.
    #[error("tensor '{b}' (offset {b_offset}) overlaps tensor '{a}' (offset {a_offset}, ends at {a_end})")]
    TensorOverlap {
        /// The earlier tensor.
        a: String,
        /// Data offset of the earlier tensor.
        a_offset: u64,
        /// End (exclusive) of the earlier tensor's data.
        a_end: u64,
        /// The tensor that starts inside it.
        b: String,
        /// Data offset of that tensor.
        b_offset: u64,
    },

    /// A typed getter found a value of another type.
    #[error("metadata key '{key}': expected {expected}, found {actual}")]
    KeyType {
        /// The metadata key.
        key: String,
        /// The type asked for.
        expected: &'static str,
        /// The type found.
        actual: String,
    },

    /// A typed getter found a value that does not fit the requested type.
    #[error("metadata key '{key}': value {value} is out of range for {expected}")]
    ValueOutOfRange {
        /// The metadata key.
        key: String,
        /// The value found, as text.
        value: String,
        /// The type asked for.
        expected: &'static str,
    },

    /// A string value that is not UTF-8 where text was requested.
    #[error("metadata key '{key}': string value is not valid UTF-8")]
    ValueNotUtf8 {
        /// The metadata key.
        key: String,
    },

    /// The writer was given tensor data of the wrong length.
    #[error(
        "tensor '{tensor}': data is {actual} bytes, but shape {ne:?} of type {ty} needs {expected}"
    )]
    TensorDataSize {
        /// The tensor name.
        tensor: String,
        /// The tensor shape.
        ne: [i64; 4],
        /// The tensor type.
        ty: GgmlType,
        /// Bytes the shape and type need.
        expected: usize,
        /// Bytes given.
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
