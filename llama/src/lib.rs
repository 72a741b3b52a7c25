//! llama (work in progress)
