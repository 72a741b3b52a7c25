//! `llama-timeline`: a `--timeline-out` trace (Chrome trace JSON) read and
//! drawn as an SVG picture ([`svg`]): the trace's spans go in, one lane per
//! backend and stream comes out.

pub mod svg;
