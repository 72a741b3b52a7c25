//! Chat messages as the server reads them, the [`ChatRender`] function
//! type the endpoints render them with (the Jinja template of
//! [`crate::chat`]), and a plain ChatML rendering for tests.

use anyhow::{bail, Result};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    pub content: String,
    /// Its other fields as given (`tool_calls`, with their arguments as
    /// objects; `tool_call_id`; `name`), passed to the template.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Message {
    /// A message of a role and text.
    pub fn new(role: &str, content: &str) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            extra: serde_json::Map::new(),
        }
    }
}

/// Renders messages (and the request's `tools`, when given) into a prompt;
/// `add_generation_prompt` opens the assistant's turn. A closure, so that
/// a compiled template (the model's `tokenizer.chat_template` with its
/// BOS/EOS text) can be captured.
pub type ChatRender = std::sync::Arc<
    dyn Fn(&[Message], Option<&serde_json::Value>, bool) -> Result<String> + Send + Sync,
>;

/// ChatML: `<|im_start|>ROLE\nCONTENT<|im_end|>\n` per message, then
/// `<|im_start|>assistant\n` when asked. A stand-in for the model's template.
pub fn render_chatml_fallback(
    messages: &[Message],
    _tools: Option<&serde_json::Value>,
    add_generation_prompt: bool,
) -> Result<String> {
    if messages.is_empty() {
        bail!("'messages' must hold at least one message");
    }
    let mut s = String::new();
    for m in messages {
        if !matches!(
            m.role.as_str(),
            "system" | "user" | "assistant" | "tool" | "developer"
        ) {
            bail!(
                "message role '{}' is not one of system, developer, user, assistant, tool",
                m.role
            );
        }
        s.push_str("<|im_start|>");
        s.push_str(&m.role);
        s.push('\n');
        s.push_str(&m.content);
        s.push_str("<|im_end|>\n");
    }
    if add_generation_prompt {
        s.push_str("<|im_start|>assistant\n");
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_layout() {
        let m = [
            Message::new("system", "Be brief."),
            Message::new("user", "Hi"),
        ];
        assert_eq!(
            render_chatml_fallback(&m, None, true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(render_chatml_fallback(&[], None, true).is_err());
        let bad = [Message::new("wizard", "")];
        assert!(render_chatml_fallback(&bad, None, true)
            .unwrap_err()
            .to_string()
            .contains("role 'wizard'"));
    }
}
