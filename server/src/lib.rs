//! # server
//!
//! `llama-server`: an OpenAI-compatible HTTP server over the `llama` crate,
//! with llama.cpp's flags. Requests are parsed and validated on the async
//! side ([`http`], [`request`]), queued, and served by one decode thread
//! ([`engine`]) that batches every active slot's tokens into each decode
//! (continuous batching over a KV cache holding one sequence per slot).
//! [`metrics`] keeps the counters `/metrics` prints; [`chat_fallback`]
//! renders chat messages until the shared chat-template module lands;
//! [`args`] holds the flags; [`error`] the OpenAI-style JSON errors.
//! [`constraint`] is constrained decoding (`grammar`, `json_schema`,
//! `response_format`) with llguidance over the vocabulary of
//! [`token_env`], GBNF read by [`gbnf`]. [`webui`] is the chat page at `/`.

pub mod args;
pub mod chat_fallback;
pub mod constraint;
pub mod engine;
pub mod error;
pub mod gbnf;
pub mod http;
pub mod metrics;
pub mod request;
pub mod stop;
pub mod token_env;
pub mod webui;
