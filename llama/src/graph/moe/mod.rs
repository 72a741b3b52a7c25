//! The MoE features' parts of a layer's graph: the expert cache's slot
//! lookup and banks ([`cache`]), the CPU path of hybrid experts
//! ([`hybrid`]), the router's guess of the next layer's experts
//! ([`predict`]), and forced routing's ids inputs ([`forced`]). Each is a
//! method of [`super::GraphBuilder`] that the shared MoE FFN blocks call;
//! each does nothing unless its feature is on for the graph.

pub mod cache;
pub mod forced;
pub mod hybrid;
pub mod predict;
