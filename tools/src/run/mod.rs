//! `llama-run`: generate text with a GGUF MoE model, streaming it, then
//! print load time, prompt and generation speed, and expert traffic.
//!
//! With no `-m`, runs on an embedded default model (a small synthetic
//! qwen3moe generated into the cache on first use). With `--synth OUT`,
//! writes a synthetic model of any shape instead of running.
//!
//! Data flows: the binary parses [`Args`] ([`flags`], with the extra
//! llama.cpp flags of [`args`]) and calls [`main`], which either writes a
//! synthetic model ([`synthesize`]), lists devices, renders a chat, or
//! generates ([`generate`], speculatively with [`speculative`], on the device [`default_device`] picks when
//! neither `-m` nor `--device` is given: prompt, sampling, streaming, summary; a chat
//! loop in [`conversation`]; the files it writes in [`outputs`]).

pub mod args;
pub mod conversation;
pub mod default_device;
pub mod flags;
pub mod generate;
pub mod outputs;
pub mod speculative;
pub mod synthesize;

use anyhow::Result;

pub use flags::Args;

/// The tool's name, the prefix of its messages.
pub const TOOL: &str = "llama-run";
/// The prompt when neither `-p` nor `-f` is given.
pub const DEFAULT_PROMPT: &str = "Once upon a time";

/// Do what the flags ask: write a synthetic model, list the devices,
/// render a chat, or generate.
pub fn main(a: &Args) -> Result<()> {
    match &a.synth {
        Some(out) => synthesize::synthesize(a, out),
        None if a.extra.list_devices => {
            common::devices::print_devices(&a.placement.rpc_devices(1)?)
        }
        None if a.chat.chat_render.is_some() => {
            common::chat::render_mode(&a.chat, a.model.as_deref())
        }
        None => generate::run(a),
    }
}
