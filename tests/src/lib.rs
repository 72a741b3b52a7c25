//! # tests
//!
//! Cross-crate tests of the workspace; the library itself is empty. The
//! tests live in `tests/tests/`:
//!
//! - `sched_props.rs`: property tests of `ggml-sched` on random graphs and
//!   placements over the CPU and sim devices (results bit-identical to one
//!   CPU backend, plan invariants, copy-hook order, failure paths);
//! - `offload_experts64.rs`: the expert copy policy on a 64-expert model,
//!   measured against full copies.
//!
//! Reference data from llama.cpp: a lean set in `tests/data/`, the larger
//! fixtures in `../shared/fixtures/`; tests find both through the `fixtures`
//! crate (see `tests/data/README.md`).
