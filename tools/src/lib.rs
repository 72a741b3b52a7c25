//! tools (work in progress)
