//! tests (work in progress)
