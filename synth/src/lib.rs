#![doc = include_str!("../README.md")]
//!
//! ## How it works
//!
//! The synthetic model generator: a [`SynthParams`] (architecture, shape,
//! weight type, seed) goes into [`synthesize`], which lays out every key and
//! tensor a real GGUF file of that architecture carries ([`model`] for
//! qwen3moe, [`arch`] for the deepseek2 and gpt-oss layouts), draws the
//! weights from the seed in parallel chunks (the same bytes whatever the
//! thread count), quantizes matrices to the asked type (with llama.cpp's
//! row fallbacks, [`ftype`]), and adds the vocabulary ([`vocab`]). The
//! result is a `GgufWriter`; [`write_atomic`] puts it on disk. [`budget`]
//! says before anything is allocated whether a shape fits in memory, and
//! [`cache`] names where the tools keep their embedded default model.

#![warn(missing_docs)]

pub mod arch;
pub mod budget;
pub mod cache;
pub mod ftype;
pub mod model;
pub mod vocab;

pub use model::{
    fnv64, supported_types, synthesize, write_atomic, Init, SynthParams, DEFAULT_MODEL_TYPE,
    GENERATOR_VERSION, POOL_MIN_ELEMENTS, SYNTH_ARCHS,
};
