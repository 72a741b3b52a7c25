//! ggml-cuda (work in progress)
