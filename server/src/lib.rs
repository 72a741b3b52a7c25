//! # server
//!
//! `llama-server`: an OpenAI-compatible HTTP server over the `llama` crate,
//! with llama.cpp's flags. [`routes`] holds the router; each request's
//! preamble (API key, JSON body) is [`extract`]'s axum extractors, its
//! body read by [`json`] and [`request`]; handlers share [`state`]. The
//! generation endpoints ([`http`]) tokenize the prompt ([`prompt`]), queue
//! it, and one decode thread ([`engine`]) batches every active slot's
//! tokens into each decode (continuous batching over a KV cache holding
//! one sequence per slot); the answers are made of [`answer`]'s pieces,
//! llama.cpp's native ones written by [`native`]. Its other endpoints
//! (`/props`, `/slots`, `/apply-template`, embeddings) are in
//! [`endpoints`], CORS in [`cors`]; [`chat`] picks and compiles the chat template, whose
//! messages are [`chat_fallback`]'s; [`tools`] reads tool calls back out of
//! the generated text. [`metrics`] keeps the counters `/metrics` prints;
//! [`args`] holds the flags; [`error`] the OpenAI-style JSON errors;
//! [`serve`] the accept loop. [`speculative`] loads each slot's draft
//! source (a draft model, or the n-gram lookup) for speculative decoding,
//! which the decode thread verifies in its batches. [`constraint`] is constrained decoding
//! (`grammar`, `json_schema`, `response_format`) with llguidance over the
//! vocabulary of [`token_env`], GBNF read by [`gbnf`]. [`webui`] is the chat
//! page at `/`.

pub mod answer;
pub mod args;
pub mod chat;
pub mod chat_fallback;
pub mod constraint;
pub mod cors;
pub mod endpoints;
pub mod engine;
pub mod error;
pub mod extract;
pub mod gbnf;
pub mod http;
pub mod json;
pub mod metrics;
pub mod native;
pub mod prompt;
pub mod request;
pub mod routes;
pub mod serve;
pub mod speculative;
pub mod state;
pub mod stop;
pub mod token_env;
pub mod tools;
pub mod webui;
