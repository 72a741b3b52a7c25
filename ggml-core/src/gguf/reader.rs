//! The GGUF reader: a strict parser over a byte slice, and [`GgufFile`],
//! which owns the bytes (a read-only mapping or a vector) and the parsed
//! header.
//!
//! The parser never panics and never allocates based on a count it has not
//! first bounded by the bytes left in the file.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use memmap2::{Mmap, MmapOptions};

use super::error::GgufError;
use super::load_mode::{read_direct, LoadMode};
use super::value::{GgufArray, GgufString, GgufValue, GgufValueType};
use crate::types::GgmlType;

/// `"GGUF"` as the first four bytes.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the tensor data when `general.alignment` is absent.
pub const GGUF_DEFAULT_ALIGNMENT: usize = 32;
/// The metadata key that overrides the alignment.
pub const GGUF_KEY_ALIGNMENT: &str = "general.alignment";
/// Most dimensions a tensor may have (`GGML_MAX_DIMS`).
pub const GGUF_MAX_DIMS: usize = 4;
/// Deepest nesting of arrays accepted (an array of scalars is depth 1).
pub const GGUF_MAX_ARRAY_DEPTH: usize = 8;

/// Smallest encoding of one metadata entry: key length (8), type (4).
const MIN_KV_BYTES: usize = 12;
/// Smallest encoding of one tensor info: name length (8), n_dims (4),
/// type (4), offset (8).
const MIN_TENSOR_INFO_BYTES: usize = 24;
/// Smallest encoding of a string: its length.
const MIN_STRING_BYTES: usize = 8;
/// Smallest encoding of a nested array: element type (4) and count (8).
const MIN_ARRAY_BYTES: usize = 12;

enum Backing {
    /// A read-only mapping of the file.
    Mmap(Mmap),
    /// The file's first `.1` bytes read into anonymous memory (huge pages
    /// asked for, see `anon.rs`).
    Anon(Mmap, usize),
    /// Bytes in a vector.
    Owned(Vec<u8>),
}

/// The bytes behind a [`GgufFile`]: a read-only memory map or an owned
/// vector, shared through an `Arc` so that it is cheap to clone (a host
/// buffer can keep the mapping alive without copying it).
#[derive(Clone)]
pub struct GgufBytes(Arc<Backing>);

impl GgufBytes {
    /// Wrap owned bytes.
    pub fn from_vec(bytes: Vec<u8>) -> GgufBytes {
        GgufBytes(Arc::new(Backing::Owned(bytes)))
    }

    /// All bytes of the file.
    pub fn as_slice(&self) -> &[u8] {
        match &*self.0 {
            Backing::Mmap(m) => m,
            Backing::Anon(m, len) => &m[..*len],
            Backing::Owned(v) => v,
        }
    }

    /// Whether the bytes are a memory map of a file.
    pub fn is_mmap(&self) -> bool {
        matches!(&*self.0, Backing::Mmap(_))
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }
}

impl std::ops::Deref for GgufBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for GgufBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl fmt::Debug for GgufBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufBytes")
            .field("len", &self.len())
            .field("mmap", &self.is_mmap())
            .finish()
    }
}

/// One tensor's header entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// The tensor's name.
    pub name: String,
    /// Dimensions stored in the file (0..=4).
    pub n_dims: u32,
    /// Elements per dimension, ggml order (`ne[0]` is the row length);
    /// dimensions past `n_dims` are 1.
    pub ne: [i64; 4],
    /// Element type.
    pub ty: GgmlType,
    /// Offset of the data, relative to the start of the data section.
    pub offset: u64,
    /// Size of the data in bytes.
    pub size: usize,
}

impl GgufTensorInfo {
    /// Total number of elements (validated not to overflow at parse time).
    pub fn n_elements(&self) -> i64 {
        self.ne.iter().fold(1i64, |a, &n| a.saturating_mul(n))
    }

    /// The used dimensions (`&ne[..n_dims]`).
    pub fn shape(&self) -> &[i64] {
        &self.ne[..(self.n_dims as usize).min(GGUF_MAX_DIMS)]
    }
}

/// A parsed GGUF file: header, metadata and tensor infos, with the bytes
/// they were parsed from.
pub struct GgufFile {
    bytes: GgufBytes,
    parsed: Parsed,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("version", &self.parsed.version)
            .field("alignment", &self.parsed.alignment)
            .field("n_kv", &self.parsed.metadata.len())
            .field("n_tensors", &self.parsed.tensors.len())
            .field("data_offset", &self.parsed.data_offset)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl GgufFile {
    /// Map the file read-only and parse it. Pages are read and mapped as
    /// they are first touched.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        GgufFile::map(path.as_ref(), false)
    }

    /// Map the file as [`GgufFile::open`] does, `populate`: with every page
    /// read and mapped up front (`MAP_POPULATE`, as llama.cpp maps model
    /// files), so that no kernel later waits on a first-touch page fault.
    fn map(path: &Path, populate: bool) -> Result<GgufFile, GgufError> {
        let io = |source| GgufError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        // SAFETY: mapping a file is unsafe because the file may be modified
        // or truncated by another process while it is mapped; Rust would
        // then observe memory changing under a `&[u8]` (undefined behaviour)
        // or the process would get SIGBUS on truncation. No API can prevent
        // that for a file we do not control, so, like ripgrep and
        // llama.cpp, we accept the risk for model files, which are written
        // once and then only read. We limit it: the map is read-only (we
        // never write through it), the header is parsed and every offset
        // validated against the mapping's length once, at open, into our
        // own structures, and later accesses only slice the mapping by
        // those validated ranges (never re-reading offsets from it), so a
        // concurrent change can alter the values read but not make us
        // index out of bounds. Callers who cannot accept this use
        // `GgufFile::read`, which copies the file into memory.
        let mut opts = MmapOptions::new();
        if populate {
            opts.populate();
        }
        let map = unsafe { opts.map(&file) }.map_err(io)?;
        GgufFile::from_backing(GgufBytes(Arc::new(Backing::Mmap(map))))
    }

    /// Open the file the way `mode` says (`--load-mode`) and parse it; the
    /// second value lists what did not go as asked (an `mlock` refused,
    /// `O_DIRECT` refused by the filesystem) and what was done instead, one
    /// line each, for the caller to print. `pin` maps the file as `mmap`
    /// does: page-locking is the device backend's job.
    pub fn open_with(
        path: impl AsRef<Path>,
        mode: LoadMode,
    ) -> Result<(GgufFile, Vec<String>), GgufError> {
        GgufFile::open_with_lazy(path, mode, false)
    }

    /// [`GgufFile::open_with`]; `lazy`: a mapping (`mmap`, `pin`) reads
    /// pages as they are first touched instead of up front, for a caller
    /// that reads most of the file itself (the host expert cache).
    pub fn open_with_lazy(
        path: impl AsRef<Path>,
        mode: LoadMode,
        lazy: bool,
    ) -> Result<(GgufFile, Vec<String>), GgufError> {
        let path = path.as_ref();
        let mut notes = Vec::new();
        let mode = match mode {
            LoadMode::Auto => LoadMode::auto_for(path),
            m => m,
        };
        let file = match mode {
            // a model's weights are all read soon: map them up front
            LoadMode::Mmap | LoadMode::Pin | LoadMode::Auto => GgufFile::map(path, !lazy)?,
            LoadMode::None => GgufFile::read(path)?,
            LoadMode::Mlock => {
                let f = GgufFile::map(path, false)?;
                if let Backing::Mmap(m) = &*f.bytes.0 {
                    if let Err(e) = m.lock() {
                        notes.push(format!(
                            "--load-mode mlock: cannot lock the {} bytes of '{}' in memory: {e}{}; the file stays mapped without locking",
                            m.len(),
                            path.display(),
                            if e.raw_os_error() == Some(libc::ENOMEM) || e.raw_os_error() == Some(libc::EPERM) || e.raw_os_error() == Some(libc::EAGAIN) {
                                " (the locked-memory limit, RLIMIT_MEMLOCK / ulimit -l, is too small)"
                            } else {
                                ""
                            }
                        ));
                    }
                }
                f
            }
            LoadMode::Dio => {
                let (bytes, note) = read_direct(path)?;
                notes.extend(note);
                GgufFile::from_bytes(bytes)?
            }
        };
        Ok((file, notes))
    }

    /// Read the whole file into anonymous memory (no file mapping; huge
    /// pages asked for, so decoding streams the weights with fewer TLB
    /// misses) and parse it.
    pub fn read(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref();
        let (m, len) = super::anon::read_anon(path)?;
        GgufFile::from_backing(GgufBytes(Arc::new(Backing::Anon(m, len))))
    }

    /// Parse owned bytes.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        GgufFile::from_backing(GgufBytes::from_vec(bytes))
    }

    /// Parse bytes already wrapped in a [`GgufBytes`].
    pub fn from_backing(bytes: GgufBytes) -> Result<GgufFile, GgufError> {
        let parsed = parse(bytes.as_slice())?;
        Ok(GgufFile { bytes, parsed })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.parsed.version
    }

    /// Alignment of the tensor data: `general.alignment`, or 32.
    pub fn alignment(&self) -> usize {
        self.parsed.alignment
    }

    /// All metadata entries, in file order.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.parsed.metadata
    }

    /// The value of a key.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.parsed
            .key_index
            .get(key)
            .map(|&i| &self.parsed.metadata[i].1)
    }

    /// An integer value as `u32`: any integer type is accepted when the
    /// value fits (llama.cpp is lenient about `u32`/`i32`).
    pub fn get_u32(&self, key: &str) -> Result<Option<u32>, GgufError> {
        self.get_int(key, "u32")
    }

    /// An integer value as `i32` (any integer type whose value fits).
    pub fn get_i32(&self, key: &str) -> Result<Option<i32>, GgufError> {
        self.get_int(key, "i32")
    }

    /// An integer value as `u64` (any integer type whose value fits).
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>, GgufError> {
        self.get_int(key, "u64")
    }

    /// An integer value as `i64` (any integer type whose value fits).
    pub fn get_i64(&self, key: &str) -> Result<Option<i64>, GgufError> {
        self.get_int(key, "i64")
    }

    fn get_int<T: TryFrom<i128>>(
        &self,
        key: &str,
        expected: &'static str,
    ) -> Result<Option<T>, GgufError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        int_value(key, v, expected).map(Some)
    }

    /// A float value as `f32` (`f32`, or `f64` rounded to `f32`).
    pub fn get_f32(&self, key: &str) -> Result<Option<f32>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::F32(x)) => Ok(Some(*x)),
            Some(GgufValue::F64(x)) => Ok(Some(*x as f32)),
            Some(v) => Err(type_error(key, "f32", v)),
        }
    }

    /// A bool value.
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(type_error(key, "bool", v)),
        }
    }

    /// A string value as text (an error if it is not UTF-8).
    pub fn get_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::Str(s)) => s.as_str().map(Some).ok_or(GgufError::ValueNotUtf8 {
                key: key.to_string(),
            }),
            Some(v) => Err(type_error(key, "string", v)),
        }
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Result<Option<&GgufArray>, GgufError> {
        match self.get(key) {
            None => Ok(None),
            Some(GgufValue::Array(a)) => Ok(Some(a)),
            Some(v) => Err(type_error(key, "array", v)),
        }
    }

    /// All tensor infos, in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.parsed.tensors
    }

    /// The tensor with this name.
    pub fn tensor(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.parsed
            .tensor_index
            .get(name)
            .map(|&i| &self.parsed.tensors[i])
    }

    /// The tensor's data: a zero-copy slice of the backing bytes. `t` must
    /// come from this file; for a foreign info whose range lies outside the
    /// file the slice is empty.
    pub fn tensor_data(&self, t: &GgufTensorInfo) -> &[u8] {
        let start = usize::try_from(t.offset)
            .ok()
            .and_then(|o| o.checked_add(self.parsed.data_offset));
        start
            .and_then(|s| Some(s..s.checked_add(t.size)?))
            .and_then(|r| self.bytes.as_slice().get(r))
            .unwrap_or(&[])
    }

    /// Absolute file offset of the tensor data section. For a file without
    /// tensors this may be past the end of the file (no padding written).
    pub fn data_offset(&self) -> usize {
        self.parsed.data_offset
    }

    /// The backing bytes.
    pub fn bytes(&self) -> &GgufBytes {
        &self.bytes
    }
}

fn type_error(key: &str, expected: &'static str, v: &GgufValue) -> GgufError {
    GgufError::KeyType {
        key: key.to_string(),
        expected,
        actual: v.type_name(),
    }
}

pub(crate) fn int_value<T: TryFrom<i128>>(
    key: &str,
    v: &GgufValue,
    expected: &'static str,
) -> Result<T, GgufError> {
    let Some(i) = v.as_integer() else {
        return Err(type_error(key, expected, v));
    };
    T::try_from(i).map_err(|_| GgufError::ValueOutOfRange {
        key: key.to_string(),
        value: i.to_string(),
        expected,
    })
}

/// The alignment a metadata list asks for.
pub(crate) fn alignment_of(metadata: &[(String, GgufValue)]) -> Result<usize, GgufError> {
    let Some((_, v)) = metadata.iter().find(|(k, _)| k == GGUF_KEY_ALIGNMENT) else {
        return Ok(GGUF_DEFAULT_ALIGNMENT);
    };
    let a: u64 = int_value(GGUF_KEY_ALIGNMENT, v, "u32")?;
    if a == 0 || !a.is_power_of_two() || a > u64::from(u32::MAX) {
        return Err(GgufError::BadAlignment { value: a });
    }
    usize::try_from(a).map_err(|_| GgufError::BadAlignment { value: a })
}

/// Byte size of a tensor of shape `ne` and type `ty`, rejecting negative
/// dimensions, element-count or size overflow and a row length that is not a
/// multiple of the block size.
pub(crate) fn tensor_size(name: &str, ne: [i64; 4], ty: GgmlType) -> Result<usize, GgufError> {
    let overflow = || GgufError::ElementCountOverflow {
        tensor: name.to_string(),
        ne,
    };
    for (dim, &n) in ne.iter().enumerate() {
        if n < 0 {
            return Err(GgufError::BadDim {
                tensor: name.to_string(),
                dim,
                value: n,
            });
        }
    }
    ne.iter()
        .try_fold(1i64, |acc, &n| acc.checked_mul(n))
        .ok_or_else(overflow)?;
    let blck = ty.blck_size();
    if ne[0] % blck as i64 != 0 {
        return Err(GgufError::BlockSize {
            tensor: name.to_string(),
            ty,
            ne0: ne[0],
            blck,
        });
    }
    let row = ty.row_size(ne[0] as u64).ok_or_else(overflow)?;
    ne[1..]
        .iter()
        .try_fold(row, |acc, &n| acc.checked_mul(usize::try_from(n).ok()?))
        .ok_or_else(overflow)
}

pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    let r = x % align;
    if r == 0 {
        Some(x)
    } else {
        x.checked_add(align - r)
    }
}

/// What [`parse`] reads from the bytes: header, metadata and tensor infos.
struct Parsed {
    version: u32,
    alignment: usize,
    metadata: Vec<(String, GgufValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
    data_offset: usize,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], GgufError> {
        let left = self.left();
        match usize::try_from(n) {
            Ok(n) if n <= left => {
                let s = &self.buf[self.pos..self.pos + n];
                self.pos += n;
                Ok(s)
            }
            _ => Err(GgufError::Truncated {
                what: what(),
                offset: self.pos,
                need: n,
                left,
                file_len: self.buf.len(),
            }),
        }
    }

    fn arr<const N: usize>(&mut self, what: impl FnOnce() -> String) -> Result<[u8; N], GgufError> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: impl FnOnce() -> String) -> Result<u32, GgufError> {
        self.arr(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: impl FnOnce() -> String) -> Result<u64, GgufError> {
        self.arr(what).map(u64::from_le_bytes)
    }

    /// Read a count and check that `count * min_each` bytes remain.
    fn count(&mut self, min_each: usize, what: impl Fn() -> String) -> Result<usize, GgufError> {
        let offset = self.pos;
        let count = self.u64(|| format!("{} count", what()))?;
        let left = self.left();
        let max = (left / min_each) as u64;
        if count > max {
            return Err(GgufError::CountTooLarge {
                what: what(),
                count,
                offset,
                left,
                max,
            });
        }
        // `count <= left`, so it fits in usize.
        Ok(count as usize)
    }

    /// A length-prefixed string's raw bytes.
    fn string(&mut self, what: impl Fn() -> String) -> Result<&'a [u8], GgufError> {
        let offset = self.pos;
        let len = self.u64(|| format!("{} length", what()))?;
        let left = self.left();
        if len > left as u64 {
            return Err(GgufError::Truncated {
                what: format!("{} (string of {len} bytes)", what()),
                offset,
                need: len,
                left,
                file_len: self.buf.len(),
            });
        }
        self.take(len, what)
    }

    fn utf8_string(&mut self, what: impl Fn() -> String) -> Result<String, GgufError> {
        let offset = self.pos;
        let raw = self.string(&what)?;
        match std::str::from_utf8(raw) {
            Ok(s) => Ok(s.to_string()),
            Err(_) => Err(GgufError::InvalidUtf8 {
                what: what(),
                offset,
            }),
        }
    }
}

fn le_vec<const N: usize, T>(bytes: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            f(a)
        })
        .collect()
}

fn value_type(c: &mut Cursor<'_>, key: &str) -> Result<GgufValueType, GgufError> {
    let offset = c.pos;
    let id = c.u32(|| format!("value type of key '{key}'"))?;
    GgufValueType::from_id(id).ok_or_else(|| GgufError::UnknownValueType {
        key: key.to_string(),
        id,
        offset,
    })
}

fn read_bool(c: &mut Cursor<'_>, key: &str) -> Result<bool, GgufError> {
    let offset = c.pos;
    let [b] = c.arr(|| format!("bool value of key '{key}'"))?;
    match b {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(GgufError::InvalidBool {
            key: key.to_string(),
            value,
            offset,
        }),
    }
}

fn read_value(c: &mut Cursor<'_>, ty: GgufValueType, key: &str) -> Result<GgufValue, GgufError> {
    use GgufValueType as T;
    let what = || format!("value of key '{key}'");
    Ok(match ty {
        T::U8 => GgufValue::U8(u8::from_le_bytes(c.arr(what)?)),
        T::I8 => GgufValue::I8(i8::from_le_bytes(c.arr(what)?)),
        T::U16 => GgufValue::U16(u16::from_le_bytes(c.arr(what)?)),
        T::I16 => GgufValue::I16(i16::from_le_bytes(c.arr(what)?)),
        T::U32 => GgufValue::U32(u32::from_le_bytes(c.arr(what)?)),
        T::I32 => GgufValue::I32(i32::from_le_bytes(c.arr(what)?)),
        T::F32 => GgufValue::F32(f32::from_le_bytes(c.arr(what)?)),
        T::U64 => GgufValue::U64(u64::from_le_bytes(c.arr(what)?)),
        T::I64 => GgufValue::I64(i64::from_le_bytes(c.arr(what)?)),
        T::F64 => GgufValue::F64(f64::from_le_bytes(c.arr(what)?)),
        T::Bool => GgufValue::Bool(read_bool(c, key)?),
        T::Str => GgufValue::Str(GgufString::from_bytes(c.string(what)?.to_vec())),
        T::Array => GgufValue::Array(read_array(c, key, 1)?),
    })
}

fn read_array(c: &mut Cursor<'_>, key: &str, depth: usize) -> Result<GgufArray, GgufError> {
    use GgufValueType as T;
    if depth > GGUF_MAX_ARRAY_DEPTH {
        return Err(GgufError::ArrayTooDeep {
            key: key.to_string(),
            limit: GGUF_MAX_ARRAY_DEPTH,
            offset: c.pos,
        });
    }
    let ty = value_type(c, key)?;
    let min_each = match ty {
        T::Str => MIN_STRING_BYTES,
        T::Array => MIN_ARRAY_BYTES,
        t => t.fixed_size().unwrap_or(1),
    };
    let what = || format!("array of key '{key}'");
    let n = c.count(min_each, what)?;
    // Fixed-size elements: `n * size <= left` was checked by `count`.
    let mut fixed = |size: usize| c.take((n * size) as u64, what);
    Ok(match ty {
        T::U8 => GgufArray::U8(fixed(1)?.to_vec()),
        T::I8 => GgufArray::I8(le_vec(fixed(1)?, i8::from_le_bytes)),
        T::U16 => GgufArray::U16(le_vec(fixed(2)?, u16::from_le_bytes)),
        T::I16 => GgufArray::I16(le_vec(fixed(2)?, i16::from_le_bytes)),
        T::U32 => GgufArray::U32(le_vec(fixed(4)?, u32::from_le_bytes)),
        T::I32 => GgufArray::I32(le_vec(fixed(4)?, i32::from_le_bytes)),
        T::F32 => GgufArray::F32(le_vec(fixed(4)?, f32::from_le_bytes)),
        T::U64 => GgufArray::U64(le_vec(fixed(8)?, u64::from_le_bytes)),
        T::I64 => GgufArray::I64(le_vec(fixed(8)?, i64::from_le_bytes)),
        T::F64 => GgufArray::F64(le_vec(fixed(8)?, f64::from_le_bytes)),
        T::Bool => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_bool(c, key)?);
            }
            GgufArray::Bool(v)
        }
        T::Str => {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                let s = c.string(|| format!("element {i} of array of key '{key}'"))?;
                v.push(GgufString::from_bytes(s.to_vec()));
            }
            GgufArray::Str(v)
        }
        T::Array => {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(read_array(c, key, depth + 1)?);
            }
            GgufArray::Array(v)
        }
    })
}

fn parse(buf: &[u8]) -> Result<Parsed, GgufError> {
    let mut c = Cursor { buf, pos: 0 };

    let magic: [u8; 4] = c.arr(|| "magic".to_string()).map_err(|e| match e {
        GgufError::Truncated { .. } => GgufError::BadMagic {
            found: buf.to_vec(),
        },
        e => e,
    })?;
    if magic != GGUF_MAGIC {
        return Err(GgufError::BadMagic {
            found: magic.to_vec(),
        });
    }
    let version = c.u32(|| "version".to_string())?;
    match version {
        2 | 3 => {}
        1 => return Err(GgufError::UnsupportedVersion(version)),
        _ => return Err(GgufError::UnknownVersion(version)),
    }

    let n_tensors_off = c.pos;
    let n_tensors = c.u64(|| "tensor count".to_string())?;
    let n_kv_off = c.pos;
    let n_kv = c.u64(|| "metadata kv count".to_string())?;
    let left = c.left();
    let max_kv = (left / MIN_KV_BYTES) as u64;
    if n_kv > max_kv {
        return Err(GgufError::CountTooLarge {
            what: "metadata kv".to_string(),
            count: n_kv,
            offset: n_kv_off,
            left,
            max: max_kv,
        });
    }
    // Every kv and every tensor info must fit in what is left.
    let max_tensors = ((left - n_kv as usize * MIN_KV_BYTES) / MIN_TENSOR_INFO_BYTES) as u64;
    if n_tensors > max_tensors {
        return Err(GgufError::CountTooLarge {
            what: "tensor".to_string(),
            count: n_tensors,
            offset: n_tensors_off,
            left,
            max: max_tensors,
        });
    }
    let (n_kv, n_tensors) = (n_kv as usize, n_tensors as usize);

    let mut metadata = Vec::with_capacity(n_kv);
    let mut key_index = HashMap::with_capacity(n_kv);
    for i in 0..n_kv {
        let key = c.utf8_string(|| format!("key of metadata entry {i}"))?;
        if key_index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { key });
        }
        let ty = value_type(&mut c, &key)?;
        let value = read_value(&mut c, ty, &key)?;
        key_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }
    let alignment = alignment_of(&metadata)?;

    let mut tensors = Vec::with_capacity(n_tensors);
    let mut tensor_index = HashMap::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let name = c.utf8_string(|| format!("name of tensor {i}"))?;
        if tensor_index.contains_key(&name) {
            return Err(GgufError::DuplicateTensor { name });
        }
        let n_dims = c.u32(|| format!("n_dims of tensor '{name}'"))?;
        if n_dims as usize > GGUF_MAX_DIMS {
            return Err(GgufError::TooManyDims {
                tensor: name,
                n_dims,
            });
        }
        let mut ne = [1i64; 4];
        for (dim, slot) in ne.iter_mut().enumerate().take(n_dims as usize) {
            let v = c.u64(|| format!("ne[{dim}] of tensor '{name}'"))?;
            // Reinterpret as ggml's int64_t; `tensor_size` rejects negatives.
            *slot = v as i64;
        }
        let ty_id = c.u32(|| format!("type of tensor '{name}'"))?;
        let ty = GgmlType::from_id(ty_id).ok_or_else(|| GgufError::UnknownTensorType {
            tensor: name.clone(),
            id: ty_id,
        })?;
        let offset = c.u64(|| format!("data offset of tensor '{name}'"))?;
        let size = tensor_size(&name, ne, ty)?;
        tensor_index.insert(name.clone(), tensors.len());
        tensors.push(GgufTensorInfo {
            name,
            n_dims,
            ne,
            ty,
            offset,
            size,
        });
    }

    let data_offset = align_up(c.pos as u64, alignment as u64)
        .and_then(|x| usize::try_from(x).ok())
        .ok_or(GgufError::BadAlignment {
            value: alignment as u64,
        })?;
    check_tensor_layout(&tensors, alignment, data_offset as u64, buf.len())?;

    Ok(Parsed {
        version,
        alignment,
        metadata,
        key_index,
        tensors,
        tensor_index,
        data_offset,
    })
}

/// Offsets aligned, data inside the file, no two tensors overlapping.
fn check_tensor_layout(
    tensors: &[GgufTensorInfo],
    alignment: usize,
    data_offset: u64,
    file_len: usize,
) -> Result<(), GgufError> {
    for t in tensors {
        if t.offset % alignment as u64 != 0 {
            return Err(GgufError::Misaligned {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        let abs = data_offset.checked_add(t.offset);
        let end = abs.and_then(|a| a.checked_add(t.size as u64));
        if !matches!(end, Some(e) if e <= file_len as u64) {
            return Err(GgufError::TensorOutOfBounds {
                tensor: t.name.clone(),
                offset: t.offset,
                abs: abs.unwrap_or(u64::MAX),
                size: t.size as u64,
                file_len,
            });
        }
    }
    check_overlap(
        tensors
            .iter()
            .map(|t| (t.name.as_str(), t.offset, t.size as u64)),
    )
}

/// Reject overlapping `(name, offset, size)` ranges; empty ranges overlap
/// nothing.
pub(crate) fn check_overlap<'a>(
    ranges: impl Iterator<Item = (&'a str, u64, u64)>,
) -> Result<(), GgufError> {
    let mut sorted: Vec<_> = ranges.filter(|r| r.2 > 0).collect();
    sorted.sort_by_key(|r| r.1);
    let mut prev: Option<(&str, u64, u64)> = None;
    for (name, off, size) in sorted {
        let end = off.saturating_add(size);
        if let Some((pname, poff, pend)) = prev {
            if off < pend {
                return Err(GgufError::TensorOverlap {
                    a: pname.to_string(),
                    a_offset: poff,
                    a_end: pend,
                    b: name.to_string(),
                    b_offset: off,
                });
            }
        }
        if !matches!(prev, Some(p) if end <= p.2) {
            prev = Some((name, off, end));
        }
    }
    Ok(())
}
