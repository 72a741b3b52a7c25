//! The GGUF writer. Layout as gguf-py writes it: header, metadata, tensor
//! infos, zero padding to the alignment (only when there are tensors), then
//! each tensor's data followed by zero padding to the alignment.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::error::GgufError;
use super::reader::{
    align_up, alignment_of, check_overlap, tensor_size, GgufBytes, GgufFile, GGUF_MAX_ARRAY_DEPTH,
    GGUF_MAX_DIMS,
};
use super::value::{GgufArray, GgufString, GgufValue};
use crate::types::GgmlType;

enum TensorBytes {
    Owned(Vec<u8>),
    /// A range of another file's bytes (zero-copy for `from_file`).
    Shared {
        bytes: GgufBytes,
        start: usize,
        len: usize,
    },
}

impl TensorBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            TensorBytes::Owned(v) => v,
            TensorBytes::Shared { bytes, start, len } => bytes
                .as_slice()
                .get(*start..start.saturating_add(*len))
                .unwrap_or(&[]),
        }
    }
}

struct WriterTensor {
    name: String,
    n_dims: u32,
    ne: [i64; 4],
    ty: GgmlType,
    size: usize,
    data: TensorBytes,
    /// Offset in the data section; `None` = next aligned offset.
    offset: Option<u64>,
}

/// Builds a GGUF file: ordered metadata and tensors.
pub struct GgufWriter {
    version: u32,
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<WriterTensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty GGUF v3 file.
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            metadata: Vec::new(),
            tensors: Vec::new(),
        }
    }

    /// A writer holding everything of `file`: version, metadata in order,
    /// tensors in order at their offsets, sharing the file's bytes (no
    /// copy). Writing it back reproduces a gguf-py-written file exactly.
    pub fn from_file(file: &GgufFile) -> GgufWriter {
        let tensors = file
            .tensors()
            .iter()
            .map(|t| WriterTensor {
                name: t.name.clone(),
                n_dims: t.n_dims,
                ne: t.ne,
                ty: t.ty,
                size: t.size,
                data: TensorBytes::Shared {
                    bytes: file.bytes().clone(),
                    // validated at parse time to lie inside the file
                    start: file.data_offset() + t.offset as usize,
                    len: t.size,
                },
                offset: Some(t.offset),
            })
            .collect();
        GgufWriter {
            version: file.version(),
            metadata: file.metadata().to_vec(),
            tensors,
        }
    }

    /// The version that will be written.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Write GGUF version 2 or 3 (the formats are the same for
    /// little-endian files).
    pub fn set_version(&mut self, version: u32) -> Result<(), GgufError> {
        if !(2..=3).contains(&version) {
            return Err(GgufError::WriteVersion(version));
        }
        self.version = version;
        Ok(())
    }

    /// The metadata so far, in order.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.metadata
    }

    /// Append a metadata entry; an error if the key exists.
    pub fn add_kv(
        &mut self,
        key: impl Into<String>,
        value: impl Into<GgufValue>,
    ) -> Result<(), GgufError> {
        let key = key.into();
        if self.metadata.iter().any(|(k, _)| *k == key) {
            return Err(GgufError::DuplicateKey { key });
        }
        self.metadata.push((key, value.into()));
        Ok(())
    }

    /// Set a metadata entry, replacing the value in place if the key exists.
    pub fn set_kv(&mut self, key: impl Into<String>, value: impl Into<GgufValue>) {
        let key = key.into();
        let value = value.into();
        match self.metadata.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key, value)),
        }
    }

    /// Remove a metadata entry, returning its value.
    pub fn remove_kv(&mut self, key: &str) -> Option<GgufValue> {
        let i = self.metadata.iter().position(|(k, _)| k == key)?;
        Some(self.metadata.remove(i).1)
    }

    /// Append a tensor with shape `ne` (ggml order, 0..=4 dims) and its raw
    /// data, which must be exactly the tensor's byte size. It is placed at
    /// the next aligned offset.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ne: &[i64],
        ty: GgmlType,
        data: impl Into<Vec<u8>>,
    ) -> Result<(), GgufError> {
        let name = name.into();
        let data = data.into();
        if ne.len() > GGUF_MAX_DIMS {
            return Err(GgufError::TooManyDims {
                tensor: name,
                n_dims: ne.len() as u32,
            });
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(GgufError::DuplicateTensor { name });
        }
        let mut full = [1i64; 4];
        full[..ne.len()].copy_from_slice(ne);
        let size = tensor_size(&name, full, ty)?;
        if data.len() != size {
            return Err(GgufError::TensorDataSize {
                tensor: name,
                ne: full,
                ty,
                expected: size,
                actual: data.len(),
            });
        }
        self.tensors.push(WriterTensor {
            name,
            n_dims: ne.len() as u32,
            ne: full,
            ty,
            size,
            data: TensorBytes::Owned(data),
            offset: None,
        });
        Ok(())
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// The alignment the file will use (`general.alignment`, or 32).
    pub fn alignment(&self) -> Result<usize, GgufError> {
        alignment_of(&self.metadata)
    }

    /// Data-section offsets of the tensors, in tensor order.
    fn layout(&self, alignment: usize) -> Result<Vec<u64>, GgufError> {
        let align = alignment as u64;
        let mut next = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            let off = match t.offset {
                Some(o) => o,
                None => align_up(next, align).ok_or_else(|| overflow(t))?,
            };
            if off % align != 0 {
                return Err(GgufError::Misaligned {
                    tensor: t.name.clone(),
                    offset: off,
                    alignment,
                });
            }
            let end = off.checked_add(t.size as u64).ok_or_else(|| overflow(t))?;
            next = next.max(end);
            offsets.push(off);
        }
        check_overlap(
            self.tensors
                .iter()
                .zip(&offsets)
                .map(|(t, &o)| (t.name.as_str(), o, t.size as u64)),
        )?;
        Ok(offsets)
    }

    /// Serialize the header, metadata and tensor infos, padded to the
    /// alignment when there are tensors.
    fn header(&self, alignment: usize, offsets: &[u64]) -> Result<Vec<u8>, GgufError> {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        b.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (i, (key, value)) in self.metadata.iter().enumerate() {
            if self.metadata[..i].iter().any(|(k, _)| k == key) {
                return Err(GgufError::DuplicateKey { key: key.clone() });
            }
            put_str(&mut b, key.as_bytes());
            b.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut b, value, key)?;
        }
        for (t, off) in self.tensors.iter().zip(offsets) {
            put_str(&mut b, t.name.as_bytes());
            b.extend_from_slice(&t.n_dims.to_le_bytes());
            for &n in &t.ne[..t.n_dims as usize] {
                b.extend_from_slice(&(n as u64).to_le_bytes());
            }
            b.extend_from_slice(&t.ty.id().to_le_bytes());
            b.extend_from_slice(&off.to_le_bytes());
        }
        if !self.tensors.is_empty() {
            let padded = align_up(b.len() as u64, alignment as u64).unwrap_or(b.len() as u64);
            b.resize(padded as usize, 0);
        }
        Ok(b)
    }

    /// Write the file to a stream.
    pub fn write_to(&self, w: &mut impl Write) -> Result<(), GgufError> {
        let alignment = self.alignment()?;
        let offsets = self.layout(alignment)?;
        let header = self.header(alignment, &offsets)?;
        w.write_all(&header).map_err(GgufError::Write)?;

        let mut order: Vec<usize> = (0..self.tensors.len()).collect();
        order.sort_by_key(|&i| offsets[i]);
        let mut pos = 0u64;
        for i in order {
            let t = &self.tensors[i];
            let data = t.data.as_slice();
            if data.len() != t.size {
                return Err(GgufError::TensorDataSize {
                    tensor: t.name.clone(),
                    ne: t.ne,
                    ty: t.ty,
                    expected: t.size,
                    actual: data.len(),
                });
            }
            write_zeros(w, offsets[i].saturating_sub(pos))?;
            w.write_all(data).map_err(GgufError::Write)?;
            pos = pos.max(offsets[i] + data.len() as u64);
        }
        let end = align_up(pos, alignment as u64).unwrap_or(pos);
        write_zeros(w, end - pos)?;
        Ok(())
    }

    /// Write the file to memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>, GgufError> {
        let mut v = Vec::new();
        self.write_to(&mut v)?;
        Ok(v)
    }

    /// Create (or truncate) `path` and write the file.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<(), GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut w = BufWriter::new(File::create(path).map_err(io)?);
        self.write_to(&mut w).map_err(|e| match e {
            GgufError::Write(source) => io(source),
            e => e,
        })?;
        w.flush().map_err(io)
    }
}

fn overflow(t: &WriterTensor) -> GgufError {
    GgufError::ElementCountOverflow {
        tensor: t.name.clone(),
        ne: t.ne,
    }
}

fn write_zeros(w: &mut impl Write, mut n: u64) -> Result<(), GgufError> {
    const ZEROS: [u8; 4096] = [0; 4096];
    while n > 0 {
        let k = n.min(ZEROS.len() as u64) as usize;
        w.write_all(&ZEROS[..k]).map_err(GgufError::Write)?;
        n -= k as u64;
    }
    Ok(())
}

fn put_str(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s);
}

fn put_value(b: &mut Vec<u8>, v: &GgufValue, key: &str) -> Result<(), GgufError> {
    match v {
        GgufValue::U8(x) => b.push(*x),
        GgufValue::I8(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U16(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => b.push(u8::from(*x)),
        GgufValue::Str(s) => put_str(b, s.as_bytes()),
        GgufValue::Array(a) => put_array(b, a, key, 1)?,
        GgufValue::U64(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => b.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => b.extend_from_slice(&x.to_le_bytes()),
    }
    Ok(())
}

fn put_array(b: &mut Vec<u8>, a: &GgufArray, key: &str, depth: usize) -> Result<(), GgufError> {
    if depth > GGUF_MAX_ARRAY_DEPTH {
        return Err(GgufError::ArrayTooDeep {
            key: key.to_string(),
            limit: GGUF_MAX_ARRAY_DEPTH,
            offset: b.len(),
        });
    }
    b.extend_from_slice(&a.elem_type().id().to_le_bytes());
    b.extend_from_slice(&(a.len() as u64).to_le_bytes());
    macro_rules! le {
        ($v:expr) => {
            for x in $v {
                b.extend_from_slice(&x.to_le_bytes());
            }
        };
    }
    match a {
        GgufArray::U8(v) => b.extend_from_slice(v),
        GgufArray::I8(v) => le!(v),
        GgufArray::U16(v) => le!(v),
        GgufArray::I16(v) => le!(v),
        GgufArray::U32(v) => le!(v),
        GgufArray::I32(v) => le!(v),
        GgufArray::F32(v) => le!(v),
        GgufArray::Bool(v) => b.extend(v.iter().map(|&x| u8::from(x))),
        GgufArray::Str(v) => {
            for s in v {
                put_str(b, GgufString::as_bytes(s));
            }
        }
        GgufArray::Array(v) => {
            for inner in v {
                put_array(b, inner, key, depth + 1)?;
            }
        }
        GgufArray::U64(v) => le!(v),
        GgufArray::I64(v) => le!(v),
        GgufArray::F64(v) => le!(v),
    }
    Ok(())
}
