//! ggml-sched (work in progress)
