//! AVX-512 (F, BW, VL, DQ) and AVX-512 VNNI kernels: the dots and prompt
//! GEMMs of the types MoE models ship in, each bit for bit its AVX2 kernel
//! (the same f32 accumulators in the same order; the integer sums, exact
//! whatever forms them, from wider or VNNI instructions).
//!
//! Every kernel is an `unsafe fn` compiled with the level's target
//! features; its only safety precondition is that the CPU has them, which
//! `quants::tables` guarantees (a level's table is handed out only on such
//! a CPU). Memory accesses go through block slices.
#![cfg(target_arch = "x86_64")]

pub(crate) mod k_gemm;
pub(crate) mod k_min;
pub(crate) mod q4_k;
pub(crate) mod q5_k;
pub(crate) mod q6_k;
pub(crate) mod q8_0;
