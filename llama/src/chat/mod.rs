//! Chat templates: a conversation (messages in) rendered to the prompt text
//! (text out) by the model's Jinja template, as Hugging Face transformers
//! renders it (and llama.cpp with `--jinja`).
//!
//! The template language is MiniJinja configured like transformers'
//! sandbox: `trim_blocks` and `lstrip_blocks` on, loop controls, Python's
//! string / dict / list methods (`.strip()`, `.startswith()`, `.split()`,
//! `.items()`, ...), `raise_exception(msg)`, `strftime_now(fmt)`, `tojson`
//! as Python's `json.dumps` without ASCII escaping, and values printed as
//! Python prints them (`True`, `None`). The context holds `messages`,
//! `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and
//! `documents` (`None`), and any extra variables given.
//!
//! Nothing here depends on a loaded model: [`template_from_gguf`] reads
//! the `tokenizer.chat_template` text of a GGUF file, and the caller passes
//! the BOS / EOS token text.

mod pyjson;
mod pyrepr;
mod strftime;

use std::fmt;

use ggml_core::gguf::GgufFile;
use minijinja::value::ValueKind;
use minijinja::{Environment, Error, ErrorKind};

pub use minijinja::Value;
pub use pyjson::{dumps as json_dumps, float_repr, JsonStyle};
pub use pyrepr::{python_repr, python_str};
pub use strftime::DateTime;

/// The GGUF key holding the default chat template.
pub const GGUF_CHAT_TEMPLATE_KEY: &str = "tokenizer.chat_template";

/// The name the template is compiled under (shown in error locations).
const TEMPLATE_NAME: &str = "chat_template";

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `system`, `user`, `assistant`, `tool`, ...
    pub role: String,
    /// The message text.
    pub content: String,
}

impl Message {
    /// A message with this role and text.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
        }
    }

    /// As a template value: `{"role": ..., "content": ...}`.
    pub fn to_value(&self) -> Value {
        Value::from_pairs([
            ("role", Value::from(self.role.as_str())),
            ("content", Value::from(self.content.as_str())),
        ])
    }
}

/// What a render needs besides the messages.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// End with the opening of an assistant turn.
    pub add_generation_prompt: bool,
    /// The text of the model's BOS token (`bos_token`).
    pub bos_token: String,
    /// The text of the model's EOS token (`eos_token`).
    pub eos_token: String,
    /// The time `strftime_now` reports (UTC); `None`: the system clock.
    pub now: Option<DateTime>,
    /// More variables (e.g. `enable_thinking`, `tools`), set after the
    /// standard ones so they may override them.
    pub extra: Vec<(String, Value)>,
}

/// Why a template did not compile or render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatError {
    /// The template text is not valid Jinja.
    Syntax(String),
    /// The template called `raise_exception(message)`.
    Raised(String),
    /// Rendering failed otherwise (undefined attribute, bad operation, ...).
    Render(String),
}

impl fmt::Display for ChatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChatError::Syntax(m) => write!(f, "chat template does not compile: {m}"),
            ChatError::Raised(m) => write!(f, "{m}"),
            ChatError::Render(m) => write!(f, "chat template failed to render: {m}"),
        }
    }
}

impl std::error::Error for ChatError {}

/// The message of a `raise_exception` call, carried as the error's source.
#[derive(Debug)]
struct RaisedException(String);

impl fmt::Display for RaisedException {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RaisedException {}

fn raise_exception(msg: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg.clone()).with_source(RaisedException(msg)))
}

/// The `raise_exception` message in an error chain, if any.
fn raised_message(e: &Error) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(r) = err.downcast_ref::<RaisedException>() {
            return Some(r.0.clone());
        }
        cur = err.source();
    }
    None
}

fn error_text(e: &Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(err) = cur {
        s.push_str(&format!(": {err}"));
        cur = err.source();
    }
    s
}

/// Jinja2's `iterable` test: anything Python can iterate (`None` and
/// numbers cannot; an undefined value iterates as empty).
fn is_iterable(v: &Value) -> bool {
    !matches!(
        v.kind(),
        ValueKind::None
            | ValueKind::Bool
            | ValueKind::Number
            | ValueKind::Plain
            | ValueKind::Invalid
    )
}

/// Jinja2's `sequence` test: has a length and indexing, so lists, strings
/// and dicts (and an undefined value).
fn is_sequence(v: &Value) -> bool {
    matches!(
        v.kind(),
        ValueKind::Seq
            | ValueKind::String
            | ValueKind::Map
            | ValueKind::Undefined
            | ValueKind::Bytes
    )
}

/// A compiled chat template.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
}

impl ChatTemplate {
    /// Compile the template text.
    pub fn new(source: &str) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        let mut syntax = minijinja::syntax::SyntaxConfig::builder();
        syntax
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false);
        env.set_syntax(
            syntax
                .build()
                .map_err(|e| ChatError::Syntax(error_text(&e)))?,
        );
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(pyrepr::python_formatter);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", pyjson::tojson_filter);
        env.add_test("iterable", is_iterable);
        env.add_test("sequence", is_sequence);
        env.add_template_owned(TEMPLATE_NAME, source.to_string())
            .map_err(|e| ChatError::Syntax(error_text(&e)))?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
        })
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Render a conversation of plain messages.
    pub fn render(&self, messages: &[Message], opts: &RenderOptions) -> Result<String, ChatError> {
        let msgs = Value::from(messages.iter().map(Message::to_value).collect::<Vec<_>>());
        self.render_value(msgs, opts)
    }

    /// Render a conversation given as a template value: a list of message
    /// maps, which may carry more than `role` and `content` (`tool_calls`,
    /// `reasoning_content`, content parts, ...).
    pub fn render_value(&self, messages: Value, opts: &RenderOptions) -> Result<String, ChatError> {
        let now = opts.now.unwrap_or_else(DateTime::now);
        let mut env = self.env.clone();
        env.add_function("strftime_now", move |fmt: String| now.strftime(&fmt));
        let tmpl = env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatError::Syntax(error_text(&e)))?;
        let mut vars: Vec<(String, Value)> = vec![
            ("messages".into(), messages),
            (
                "add_generation_prompt".into(),
                Value::from(opts.add_generation_prompt),
            ),
            ("bos_token".into(), Value::from(opts.bos_token.as_str())),
            ("eos_token".into(), Value::from(opts.eos_token.as_str())),
            ("tools".into(), Value::from(())),
            ("documents".into(), Value::from(())),
        ];
        for (k, v) in &opts.extra {
            match vars.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = v.clone(),
                None => vars.push((k.clone(), v.clone())),
            }
        }
        let ctx = Value::from_pairs(vars);
        tmpl.render(ctx).map_err(|e| match raised_message(&e) {
            Some(m) => ChatError::Raised(m),
            None => ChatError::Render(error_text(&e)),
        })
    }
}

/// The chat template a GGUF file carries: `tokenizer.chat_template`, or
/// `tokenizer.chat_template.NAME` when `name` is given; `Ok(None)` when the
/// file has none.
pub fn template_from_gguf(file: &GgufFile, name: Option<&str>) -> Result<Option<String>, String> {
    let key = match name {
        Some(n) => format!("{GGUF_CHAT_TEMPLATE_KEY}.{n}"),
        None => GGUF_CHAT_TEMPLATE_KEY.to_string(),
    };
    file.get_str(&key)
        .map(|s| s.map(str::to_string))
        .map_err(|e| format!("{key}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, msgs: &[Message]) -> Result<String, ChatError> {
        ChatTemplate::new(src)?.render(msgs, &RenderOptions::default())
    }

    #[test]
    fn python_methods_and_blocks() {
        let src = "{% for m in messages %}\n  {{ m.role.upper() }}:{{ m.content.strip() }}|{{ m.content.startswith(' a') }}\n{% endfor %}";
        let out = render(src, &[Message::new("user", " a b ")]).unwrap();
        // lstrip_blocks strips before block tags only, not before `{{`
        assert_eq!(out, "  USER:a b|True\n");
    }

    #[test]
    fn raise_exception_is_reported_as_raised() {
        let src = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok";
        assert_eq!(
            render(src, &[Message::new("system", "x")]),
            Err(ChatError::Raised("System role not supported".into()))
        );
        assert_eq!(render(src, &[Message::new("user", "x")]).unwrap(), "ok");
    }

    #[test]
    fn syntax_and_render_errors() {
        assert!(matches!(
            ChatTemplate::new("{% if %}"),
            Err(ChatError::Syntax(_))
        ));
        assert!(matches!(
            render(
                "{{ messages[0].nope.deeper }}",
                &[Message::new("user", "x")]
            ),
            Err(ChatError::Render(_))
        ));
    }

    #[test]
    fn strftime_now_uses_the_given_time() {
        let t = ChatTemplate::new("{{ strftime_now('%d %b %Y') }}").unwrap();
        let opts = RenderOptions {
            now: Some(DateTime::from_unix(1_796_128_496)),
            ..Default::default()
        };
        assert_eq!(t.render(&[], &opts).unwrap(), "01 Dec 2026");
    }

    #[test]
    fn tests_as_jinja2() {
        let out = render(
            "{{ tools is iterable }}{{ undefined_x is iterable }}{{ 'ab' is sequence }}{{ {'a': 1} is sequence }}{{ none is sequence }}",
            &[],
        )
        .unwrap();
        assert_eq!(out, "FalseTrueTrueTrueFalse");
    }

    #[test]
    fn tools_is_defined_none() {
        let out = render(
            "{{ tools is defined }}{{ tools is none }}{% if not tools %}-{% endif %}",
            &[],
        )
        .unwrap();
        assert_eq!(out, "TrueTrue-");
    }
}
