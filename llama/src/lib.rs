//! llama (work in progress)

pub mod tokenizer;
