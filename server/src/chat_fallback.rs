//! A minimal ChatML rendering of chat messages, used by
//! `/v1/chat/completions` until the shared chat-template module
//! (`llama::chat`, the model's own Jinja template) is merged: the server
//! calls chat rendering only through a [`ChatRender`] function, so the
//! integrator swaps [`render_chatml_fallback`] for the template renderer
//! at one place (`chat_render` of `llama-server`'s `main`, stored in
//! [`crate::http::AppState::chat_render`]).

use anyhow::{bail, Result};

/// One chat message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// Renders messages into a prompt; `add_generation_prompt` opens the
/// assistant's turn. A closure, so that a compiled template (the model's
/// `tokenizer.chat_template` with its BOS/EOS text) can be captured.
pub type ChatRender = std::sync::Arc<dyn Fn(&[Message], bool) -> Result<String> + Send + Sync>;

/// ChatML: `<|im_start|>ROLE\nCONTENT<|im_end|>\n` per message, then
/// `<|im_start|>assistant\n` when asked. A stand-in for the model's template.
pub fn render_chatml_fallback(messages: &[Message], add_generation_prompt: bool) -> Result<String> {
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
            Message {
                role: "system".into(),
                content: "Be brief.".into(),
            },
            Message {
                role: "user".into(),
                content: "Hi".into(),
            },
        ];
        assert_eq!(
            render_chatml_fallback(&m, true).unwrap(),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert!(render_chatml_fallback(&[], true).is_err());
        let bad = [Message {
            role: "wizard".into(),
            content: String::new(),
        }];
        assert!(render_chatml_fallback(&bad, true)
            .unwrap_err()
            .to_string()
            .contains("role 'wizard'"));
    }
}
