//! # server
//!
//! `llama-server`: an OpenAI-compatible HTTP server over the `llama` crate,
//! with llama.cpp's flags. Requests are parsed and validated on the async
//! side ([`http`], [`request`]), queued, and served by one decode thread
//! ([`engine`]) that batches every active slot's tokens into each decode
//! (continuous batching over a KV cache holding one sequence per slot).
//! llama.cpp's native answers are in [`native`], its other endpoints
//! (`/props`, `/slots`, `/apply-template`) in [`endpoints`], CORS in
//! [`cors`]; [`chat`] picks and compiles the chat template, whose
//! messages are [`chat_fallback`]'s; [`tools`] reads tool calls back out of
//! the generated text. [`metrics`] keeps the counters `/metrics` prints;
//! [`args`] holds the flags; [`error`] the OpenAI-style JSON errors;
//! [`serve`] the accept loop. [`constraint`] is constrained decoding
//! (`grammar`, `json_schema`, `response_format`) with llguidance over the
//! vocabulary of [`token_env`], GBNF read by [`gbnf`]. [`webui`] is the chat
//! page at `/`.

pub mod args;
pub mod chat;
pub mod chat_fallback;
pub mod constraint;
pub mod cors;
pub mod endpoints;
pub mod engine;
pub mod error;
pub mod gbnf;
pub mod http;
pub mod metrics;
pub mod native;
pub mod request;
pub mod serve;
pub mod stop;
pub mod token_env;
pub mod tools;
pub mod webui;
