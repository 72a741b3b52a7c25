//! The cache proper: which experts a device holds and where.
//!
//! - [`layout`]: the groups of cached layers (equal expert shapes on one
//!   device), their banks `[ne0, ne1, n_slots]` in device memory and each
//!   layer's slot map in host memory, sized from a budget.
//! - [`bank`]: a group's slots, its eviction policy and the plan of one
//!   layer access (hits, misses, evictions, merged upload runs).
//! - [`stats`]: the cache's counters, per layer and per group.
//! - [`replay`]: the same banks and policies driven by a routing trace
//!   instead of the copy hook (no device).

pub mod bank;
pub mod layout;
pub mod replay;
pub mod shared;
pub mod stats;
