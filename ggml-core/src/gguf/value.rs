//! Metadata values: the thirteen GGUF value types, strings that keep their
//! raw bytes, and arrays stored as typed vectors.

use std::fmt;

/// A GGUF value type id (`enum gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GgufValueType {
    /// `GGUF_TYPE_U8`: an unsigned 8-bit integer.
    U8 = 0,
    /// `GGUF_TYPE_I8`: a signed 8-bit integer.
    I8 = 1,
    /// `GGUF_TYPE_U16`: an unsigned 16-bit integer.
    U16 = 2,
    /// `GGUF_TYPE_I16`: a signed 16-bit integer.
    I16 = 3,
    /// `GGUF_TYPE_U32`: an unsigned 32-bit integer.
    U32 = 4,
    /// `GGUF_TYPE_I32`: a signed 32-bit integer.
    I32 = 5,
    /// `GGUF_TYPE_F32`: a 32-bit float.
    F32 = 6,
    /// `GGUF_TYPE_BOOL`: a bool (one byte, 0 or 1).
    Bool = 7,
    /// `GGUF_TYPE_STRING`: a string (u64 length, then bytes).
    Str = 8,
    /// `GGUF_TYPE_ARRAY`: an array (element type, u64 count, elements).
    Array = 9,
    /// `GGUF_TYPE_U64`: an unsigned 64-bit integer.
    U64 = 10,
    /// `GGUF_TYPE_I64`: a signed 64-bit integer.
    I64 = 11,
    /// `GGUF_TYPE_F64`: a 64-bit float.
    F64 = 12,
}

impl GgufValueType {
    /// The type with this id, or `None` for an unknown id.
    pub fn from_id(id: u32) -> Option<GgufValueType> {
        use GgufValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => Str,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The id written to the file.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Bytes of one value of a fixed-size type; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<usize> {
        use GgufValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            Str | Array => None,
        }
    }

    /// Lower-case name, as used in error messages (`"u32"`, `"string"`).
    pub fn name(self) -> &'static str {
        use GgufValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            Str => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

impl fmt::Display for GgufValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A GGUF string: the raw bytes as stored (GGUF does not enforce UTF-8, and
/// keeping the bytes makes write-back byte-identical).
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct GgufString(Vec<u8>);

impl GgufString {
    /// Wrap raw bytes.
    pub fn from_bytes(bytes: Vec<u8>) -> GgufString {
        GgufString(bytes)
    }

    /// The text, or `None` when the bytes are not UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The text with invalid UTF-8 replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.0)
    }

    /// Consume into the raw bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the string is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for GgufString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_string_lossy(), f)
    }
}

impl fmt::Display for GgufString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

impl From<&str> for GgufString {
    fn from(s: &str) -> Self {
        GgufString(s.as_bytes().to_vec())
    }
}

impl From<String> for GgufString {
    fn from(s: String) -> Self {
        GgufString(s.into_bytes())
    }
}

impl From<Vec<u8>> for GgufString {
    fn from(b: Vec<u8>) -> Self {
        GgufString(b)
    }
}

impl PartialEq<str> for GgufString {
    fn eq(&self, other: &str) -> bool {
        self.0 == other.as_bytes()
    }
}

impl PartialEq<&str> for GgufString {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

/// A homogeneous GGUF array, stored as a typed vector. Nested arrays hold
/// their own element types (each inner array may differ).
#[derive(Clone, Debug, PartialEq)]
pub enum GgufArray {
    /// An array of unsigned 8-bit integers.
    U8(Vec<u8>),
    /// An array of signed 8-bit integers.
    I8(Vec<i8>),
    /// An array of unsigned 16-bit integers.
    U16(Vec<u16>),
    /// An array of signed 16-bit integers.
    I16(Vec<i16>),
    /// An array of unsigned 32-bit integers.
    U32(Vec<u32>),
    /// An array of signed 32-bit integers.
    I32(Vec<i32>),
    /// An array of 32-bit floats.
    F32(Vec<f32>),
    /// An array of bools.
    Bool(Vec<bool>),
    /// An array of strings.
    Str(Vec<GgufString>),
    /// An array of nested arrays.
    Array(Vec<GgufArray>),
    /// An array of unsigned 64-bit integers.
    U64(Vec<u64>),
    /// An array of signed 64-bit integers.
    I64(Vec<i64>),
    /// An array of 64-bit floats.
    F64(Vec<f64>),
}

macro_rules! int_vec {
    ($self:ident, $t:ty) => {{
        match $self {
            GgufArray::U8(v) => v.iter().map(|&x| <$t>::try_from(x).ok()).collect(),
            GgufArray::I8(v) => v.iter().map(|&x| <$t>::try_from(x).ok()).collect(),
            GgufArray::U16(v) => v.iter().map(|&x| <$t>::try_from(x).ok()).collect(),
            GgufArray::I16(v) => v.iter().map(|&x| <$t>::try_from(x).ok()).collect(),
            GgufArray::U32(v) => v.iter().map(|&x| <$t>::try_from(x).ok()).collect(),
            GgufArray::I32(v) => v.iter().map(|&x| <$t>::try_from(x).ok()).collect(),
            GgufArray::U64(v) => v.iter().map(|&x| <$t>::try_from(x).ok()).collect(),
            GgufArray::I64(v) => v.iter().map(|&x| <$t>::try_from(x).ok()).collect(),
            _ => None,
        }
    }};
}

impl GgufArray {
    /// The element type.
    pub fn elem_type(&self) -> GgufValueType {
        use GgufArray as A;
        use GgufValueType as T;
        match self {
            A::U8(_) => T::U8,
            A::I8(_) => T::I8,
            A::U16(_) => T::U16,
            A::I16(_) => T::I16,
            A::U32(_) => T::U32,
            A::I32(_) => T::I32,
            A::F32(_) => T::F32,
            A::Bool(_) => T::Bool,
            A::Str(_) => T::Str,
            A::Array(_) => T::Array,
            A::U64(_) => T::U64,
            A::I64(_) => T::I64,
            A::F64(_) => T::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            GgufArray::U8(v) => v.len(),
            GgufArray::I8(v) => v.len(),
            GgufArray::U16(v) => v.len(),
            GgufArray::I16(v) => v.len(),
            GgufArray::U32(v) => v.len(),
            GgufArray::I32(v) => v.len(),
            GgufArray::F32(v) => v.len(),
            GgufArray::Bool(v) => v.len(),
            GgufArray::Str(v) => v.len(),
            GgufArray::Array(v) => v.len(),
            GgufArray::U64(v) => v.len(),
            GgufArray::I64(v) => v.len(),
            GgufArray::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The strings of a string array; `None` for other element types.
    pub fn as_strings(&self) -> Option<&[GgufString]> {
        match self {
            GgufArray::Str(v) => Some(v),
            _ => None,
        }
    }

    /// The strings as `&str`; `None` when this is not a string array or any
    /// element is not UTF-8.
    pub fn as_str_vec(&self) -> Option<Vec<&str>> {
        self.as_strings()?.iter().map(|s| s.as_str()).collect()
    }

    /// An iterator over the strings (`None` items for non-UTF-8 elements);
    /// `None` when this is not a string array.
    pub fn str_iter(&self) -> Option<impl ExactSizeIterator<Item = Option<&str>> + '_> {
        Some(self.as_strings()?.iter().map(|s| s.as_str()))
    }

    /// The values of an `f32` array.
    pub fn as_f32_slice(&self) -> Option<&[f32]> {
        match self {
            GgufArray::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The values of an `i32` array.
    pub fn as_i32_slice(&self) -> Option<&[i32]> {
        match self {
            GgufArray::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The values of a `u32` array.
    pub fn as_u32_slice(&self) -> Option<&[u32]> {
        match self {
            GgufArray::U32(v) => Some(v),
            _ => None,
        }
    }

    /// The values of a `u8` array.
    pub fn as_u8_slice(&self) -> Option<&[u8]> {
        match self {
            GgufArray::U8(v) => Some(v),
            _ => None,
        }
    }

    /// The values of a bool array.
    pub fn as_bool_slice(&self) -> Option<&[bool]> {
        match self {
            GgufArray::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The elements of an array of arrays.
    pub fn as_arrays(&self) -> Option<&[GgufArray]> {
        match self {
            GgufArray::Array(v) => Some(v),
            _ => None,
        }
    }

    /// Any integer array converted to `i32`; `None` when this is not an
    /// integer array or a value does not fit.
    pub fn as_i32_vec(&self) -> Option<Vec<i32>> {
        int_vec!(self, i32)
    }

    /// Any integer array converted to `u32`; `None` when this is not an
    /// integer array or a value does not fit.
    pub fn as_u32_vec(&self) -> Option<Vec<u32>> {
        int_vec!(self, u32)
    }

    /// Any integer array converted to `i64`; `None` when this is not an
    /// integer array or a value does not fit.
    pub fn as_i64_vec(&self) -> Option<Vec<i64>> {
        int_vec!(self, i64)
    }

    /// An `f32` or `f64` array as `f32`s (f64 values are rounded).
    pub fn as_f32_vec(&self) -> Option<Vec<f32>> {
        match self {
            GgufArray::F32(v) => Some(v.clone()),
            GgufArray::F64(v) => Some(v.iter().map(|&x| x as f32).collect()),
            _ => None,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    /// A value of type `GGUF_TYPE_U8`: an unsigned 8-bit integer.
    U8(u8),
    /// A value of type `GGUF_TYPE_I8`: a signed 8-bit integer.
    I8(i8),
    /// A value of type `GGUF_TYPE_U16`: an unsigned 16-bit integer.
    U16(u16),
    /// A value of type `GGUF_TYPE_I16`: a signed 16-bit integer.
    I16(i16),
    /// A value of type `GGUF_TYPE_U32`: an unsigned 32-bit integer.
    U32(u32),
    /// A value of type `GGUF_TYPE_I32`: a signed 32-bit integer.
    I32(i32),
    /// A value of type `GGUF_TYPE_F32`: a 32-bit float.
    F32(f32),
    /// A value of type `GGUF_TYPE_BOOL`: a bool (one byte, 0 or 1).
    Bool(bool),
    /// A value of type `GGUF_TYPE_STRING`: a string (u64 length, then bytes).
    Str(GgufString),
    /// A value of type `GGUF_TYPE_ARRAY`: an array (element type, u64 count, elements).
    Array(GgufArray),
    /// A value of type `GGUF_TYPE_U64`: an unsigned 64-bit integer.
    U64(u64),
    /// A value of type `GGUF_TYPE_I64`: a signed 64-bit integer.
    I64(i64),
    /// A value of type `GGUF_TYPE_F64`: a 64-bit float.
    F64(f64),
}

impl GgufValue {
    /// The value's type.
    pub fn value_type(&self) -> GgufValueType {
        use GgufValue as V;
        use GgufValueType as T;
        match self {
            V::U8(_) => T::U8,
            V::I8(_) => T::I8,
            V::U16(_) => T::U16,
            V::I16(_) => T::I16,
            V::U32(_) => T::U32,
            V::I32(_) => T::I32,
            V::F32(_) => T::F32,
            V::Bool(_) => T::Bool,
            V::Str(_) => T::Str,
            V::Array(_) => T::Array,
            V::U64(_) => T::U64,
            V::I64(_) => T::I64,
            V::F64(_) => T::F64,
        }
    }

    /// A human-readable type name for error messages; arrays include their
    /// element type (`"array of string"`).
    pub fn type_name(&self) -> String {
        match self {
            GgufValue::Array(a) => format!("array of {}", a.elem_type()),
            v => v.value_type().name().to_string(),
        }
    }

    /// Any integer value, widened to `i128` (so every GGUF integer fits).
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            GgufValue::U8(x) => x.into(),
            GgufValue::I8(x) => x.into(),
            GgufValue::U16(x) => x.into(),
            GgufValue::I16(x) => x.into(),
            GgufValue::U32(x) => x.into(),
            GgufValue::I32(x) => x.into(),
            GgufValue::U64(x) => x.into(),
            GgufValue::I64(x) => x.into(),
            _ => return None,
        })
    }

    /// The string, if this is a UTF-8 string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => s.as_str(),
            _ => None,
        }
    }

    /// The array, if this is an array value.
    pub fn as_array(&self) -> Option<&GgufArray> {
        match self {
            GgufValue::Array(a) => Some(a),
            _ => None,
        }
    }
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for GgufValue {
            fn from(x: $t) -> Self { GgufValue::$v(x) }
        }
        impl From<Vec<$t>> for GgufArray {
            fn from(x: Vec<$t>) -> Self { GgufArray::$v(x) }
        }
        impl From<Vec<$t>> for GgufValue {
            fn from(x: Vec<$t>) -> Self { GgufValue::Array(GgufArray::$v(x)) }
        }
    )*};
}

from_scalar!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, u64 => U64, i64 => I64, f64 => F64);

impl From<GgufString> for GgufValue {
    fn from(s: GgufString) -> Self {
        GgufValue::Str(s)
    }
}

impl From<&str> for GgufValue {
    fn from(s: &str) -> Self {
        GgufValue::Str(s.into())
    }
}

impl From<String> for GgufValue {
    fn from(s: String) -> Self {
        GgufValue::Str(s.into())
    }
}

impl From<GgufArray> for GgufValue {
    fn from(a: GgufArray) -> Self {
        GgufValue::Array(a)
    }
}

impl From<Vec<GgufString>> for GgufArray {
    fn from(v: Vec<GgufString>) -> Self {
        GgufArray::Str(v)
    }
}

impl From<Vec<&str>> for GgufArray {
    fn from(v: Vec<&str>) -> Self {
        GgufArray::Str(v.into_iter().map(GgufString::from).collect())
    }
}

impl From<Vec<String>> for GgufArray {
    fn from(v: Vec<String>) -> Self {
        GgufArray::Str(v.into_iter().map(GgufString::from).collect())
    }
}

impl From<Vec<GgufArray>> for GgufArray {
    fn from(v: Vec<GgufArray>) -> Self {
        GgufArray::Array(v)
    }
}

impl From<Vec<&str>> for GgufValue {
    fn from(v: Vec<&str>) -> Self {
        GgufValue::Array(v.into())
    }
}

impl From<Vec<String>> for GgufValue {
    fn from(v: Vec<String>) -> Self {
        GgufValue::Array(v.into())
    }
}

impl From<Vec<GgufArray>> for GgufValue {
    fn from(v: Vec<GgufArray>) -> Self {
        GgufValue::Array(GgufArray::Array(v))
    }
}
