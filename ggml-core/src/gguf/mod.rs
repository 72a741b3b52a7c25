//! GGUF file I/O: a strict reader over a read-only memory map (or owned
//! bytes) and a writer whose layout matches gguf-py, so that a parsed file
//! written back is byte-identical.
//!
//! Format (versions 2 and 3, little-endian): magic `GGUF`, `u32` version,
//! `u64` tensor count, `u64` metadata count, the metadata entries (`key`
//! string, `u32` value type, value), the tensor infos (name string, `u32`
//! n_dims, `u64` ne per dim, `u32` ggml type, `u64` offset relative to the
//! data section), padding to `general.alignment` (default 32), then the
//! tensor data, each tensor at an aligned offset.

mod anon;
mod error;
mod load_mode;
mod reader;
mod value;
mod writer;

pub use error::GgufError;
pub use load_mode::{
    available_memory, cgroup_memory_left, mem_available, open_direct, read_direct, LoadMode,
    DIO_ALIGN,
};
pub use reader::{
    GgufBytes, GgufFile, GgufTensorInfo, GGUF_DEFAULT_ALIGNMENT, GGUF_KEY_ALIGNMENT, GGUF_MAGIC,
    GGUF_MAX_ARRAY_DEPTH, GGUF_MAX_DIMS,
};
pub use value::{GgufArray, GgufString, GgufValue, GgufValueType};
pub use writer::GgufWriter;
