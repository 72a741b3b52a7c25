//! Reading the tokenizer metadata out of a GGUF file (filled in once the
//! `ggml_core::gguf` reader lands).
