//! The server's chat template: which one (`--chat-template-file`,
//! `--chat-template NAME|TEMPLATE` with llama.cpp's built-in names, the
//! model's own, ChatML), and the [`ChatRender`] function that renders a
//! request's messages and tools through it (`llama::chat`, Jinja as
//! transformers renders it).

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use llama::chat::{ChatTemplate, RenderOptions, Value};

use crate::chat_fallback::{ChatRender, Message};

/// llama.cpp's built-in template names this server knows, with the Jinja
/// text that renders as llama.cpp's built-in does (BOS is the tokenizer's,
/// not the template's).
pub const BUILTIN_TEMPLATES: &[(&str, &str)] = &[
    ("chatml", common::chat::CHATML_TEMPLATE),
    (
        "llama3",
        "{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
    ),
    (
        "command-r",
        "{% for message in messages %}{{ '<|START_OF_TURN_TOKEN|>' }}{% if message['role'] == 'system' %}{{ '<|SYSTEM_TOKEN|>' }}{% elif message['role'] == 'user' %}{{ '<|USER_TOKEN|>' }}{% else %}{{ '<|CHATBOT_TOKEN|>' }}{% endif %}{{ message['content'] | trim + '<|END_OF_TURN_TOKEN|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>' }}{% endif %}",
    ),
    (
        "gemma",
        "{% for message in messages %}{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else 'user') + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}",
    ),
    (
        "phi3",
        "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
    ),
    (
        "zephyr",
        "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|endoftext|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}",
    ),
];

/// The built-in template of a name.
pub fn builtin_template(name: &str) -> Option<&'static str> {
    BUILTIN_TEMPLATES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
}

/// The template text: `--chat-template-file`, else `--chat-template` (a
/// built-in name, a template the model carries under that name, or else
/// the Jinja text itself, as llama.cpp reads it with `--jinja`), else the
/// model's own, else ChatML.
pub fn template_text(
    name_or_text: Option<&str>,
    file: Option<&Path>,
    gguf: &ggml_core::gguf::GgufFile,
) -> Result<String> {
    if let Some(p) = file {
        return common::cli::read_text_file(p).context("--chat-template-file");
    }
    if let Some(v) = name_or_text {
        if let Some(t) = builtin_template(v) {
            return Ok(t.to_string());
        }
        if let Ok(Some(t)) = llama::chat::template_from_gguf(gguf, Some(v)) {
            return Ok(t);
        }
        if v.trim().is_empty() {
            bail!("--chat-template is empty");
        }
        return Ok(v.to_string());
    }
    Ok(llama::chat::template_from_gguf(gguf, None)
        .map_err(anyhow::Error::msg)?
        .unwrap_or_else(|| common::chat::CHATML_TEMPLATE.to_string()))
}

/// A message as the template sees it: `role`, `content` and its other fields.
fn message_value(m: &Message) -> Value {
    let mut o = m.extra.clone();
    o.insert("role".into(), m.role.clone().into());
    o.insert("content".into(), m.content.clone().into());
    to_value(serde_json::Value::Object(o))
}

/// A JSON value as a template value.
fn to_value(v: serde_json::Value) -> Value {
    serde_json::from_value::<Value>(v).unwrap_or_else(|_| Value::from(()))
}

/// Compile `text` into a renderer with the model's BOS / EOS text.
pub fn make_render(text: &str, bos: String, eos: String) -> Result<ChatRender> {
    let tmpl = ChatTemplate::new(text).map_err(|e| anyhow::anyhow!("chat template: {e}"))?;
    Ok(Arc::new(move |messages, tools, add_generation_prompt| {
        if messages.is_empty() {
            bail!("'messages' must hold at least one message");
        }
        let msgs = Value::from(messages.iter().map(message_value).collect::<Vec<_>>());
        let mut opts = RenderOptions {
            add_generation_prompt,
            bos_token: bos.clone(),
            eos_token: eos.clone(),
            ..Default::default()
        };
        if let Some(t) = tools {
            opts.extra.push(("tools".into(), to_value(t.clone())));
        }
        match tmpl.render_value(msgs, &opts) {
            // a template that refuses the system role (Gemma): its text
            // opens the next user message instead, as llama.cpp does
            Err(llama::chat::ChatError::Raised(_))
                if messages.iter().any(|m| m.role == "system") =>
            {
                let merged = merge_system(messages);
                let msgs = Value::from(merged.iter().map(message_value).collect::<Vec<_>>());
                tmpl.render_value(msgs, &opts)
            }
            r => r,
        }
        .map_err(|e| anyhow::anyhow!("chat template: {e}"))
    }))
}

/// The messages with each system message's text moved to the start of
/// the next user message (or kept as a user message when none follows).
pub fn merge_system(messages: &[Message]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    let mut pending = String::new();
    for m in messages {
        if m.role == "system" {
            if !pending.is_empty() {
                pending.push('\n');
            }
            pending.push_str(&m.content);
            continue;
        }
        let mut m = m.clone();
        if m.role == "user" && !pending.is_empty() {
            m.content = if m.content.is_empty() {
                std::mem::take(&mut pending)
            } else {
                format!("{}\n{}", std::mem::take(&mut pending), m.content)
            };
        }
        out.push(m);
    }
    if !pending.is_empty() {
        out.push(Message::new("user", &pending));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_names_render_as_llama_cpp() {
        let m = [
            Message::new("system", "You are a test."),
            Message::new("user", "Hi there"),
        ];
        let r = make_render(
            builtin_template("command-r").unwrap(),
            String::new(),
            String::new(),
        )
        .unwrap();
        assert_eq!(
            r(&m, None, true).unwrap(),
            "<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
        );
        let r = make_render(
            builtin_template("llama3").unwrap(),
            String::new(),
            String::new(),
        )
        .unwrap();
        assert_eq!(
            r(&m[1..], None, true).unwrap(),
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert!(builtin_template("nope").is_none());
        // tools reach the template
        let r = make_render(
            "{% for t in tools %}{{ t.function.name }};{% endfor %}",
            String::new(),
            String::new(),
        )
        .unwrap();
        let tools = serde_json::json!([{"type": "function", "function": {"name": "f"}}]);
        assert_eq!(r(&m, Some(&tools), false).unwrap(), "f;");
        assert!(make_render("{% if %}", String::new(), String::new()).is_err());
        // a template that refuses system messages gets them in the user turn
        let r = make_render(
            "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}[{{ m.role }}:{{ m.content }}]{% endfor %}",
            String::new(),
            String::new(),
        )
        .unwrap();
        assert_eq!(
            r(&m, None, false).unwrap(),
            "[user:You are a test.\nHi there]"
        );
    }
}
