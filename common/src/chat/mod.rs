//! Chat in the tools: the chat flags (`--chat-template`, `-cnv`, `-sys`,
//! the render-only mode), choosing the template (a file, a GGUF's own,
//! ChatML as the fallback) and reading a conversation from JSON.
//! Rendering itself is `llama::chat`.

pub mod conversation;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use ggml_core::gguf::GgufFile;
use llama::chat::{self, ChatTemplate, DateTime, RenderOptions, Value};
use llama::tokenizer::Tokenizer;

/// ChatML, the template llama.cpp falls back to when a model has none.
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/// The chat flags of `llama-run`.
#[derive(Args, Debug, Clone, Default)]
pub struct ChatArgs {
    /// `-cnv`: conversation mode.
    #[arg(long, help_heading = "Chat")]
    pub conversation: bool,

    /// `-no-cnv`: never conversation mode.
    #[arg(long, conflicts_with = "conversation", help_heading = "Chat")]
    pub no_conversation: bool,

    /// `-sys`: the system prompt.
    #[arg(long, help_heading = "Chat")]
    pub system_prompt: Option<String>,

    /// `--chat-template`: a file, a named template of the model, or
    /// `chatml`.
    #[arg(long, help_heading = "Chat")]
    pub chat_template: Option<String>,

    /// `--chat-template-file`: the template from a file.
    #[arg(long, conflicts_with = "chat_template", help_heading = "Chat")]
    pub chat_template_file: Option<PathBuf>,

    /// `--chat-render`: render a conversation (JSON) and exit.
    #[arg(long, help_heading = "Chat")]
    pub chat_render: Option<PathBuf>,

    /// `--chat-bos`: bos_token for the template.
    #[arg(long, help_heading = "Chat")]
    pub chat_bos: Option<String>,

    /// `--chat-eos`: eos_token for the template.
    #[arg(long, help_heading = "Chat")]
    pub chat_eos: Option<String>,

    /// `--no-generation-prompt`: with `--chat-render`, no assistant turn
    /// opening at the end.
    #[arg(long, help_heading = "Chat")]
    pub no_generation_prompt: bool,

    /// `--jinja`: accepted (the Jinja template is always used).
    #[arg(long, help_heading = "Chat")]
    pub jinja: bool,
}

/// Where a chat template came from (for messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateSource {
    /// A file given on the command line.
    File(PathBuf),
    /// The model's `tokenizer.chat_template` (or `.NAME`).
    Model(String),
    /// The built-in ChatML fallback.
    ChatMl,
}

/// The template text and where it came from: `--chat-template-file`, then
/// `--chat-template` (a file, `chatml`, or a name in the model), then the
/// model's default, then ChatML.
pub fn template_text(args: &ChatArgs, gguf: Option<&GgufFile>) -> Result<(String, TemplateSource)> {
    if let Some(p) = &args.chat_template_file {
        let text = crate::cli::read_text_file(p).context("--chat-template-file")?;
        return Ok((text, TemplateSource::File(p.clone())));
    }
    if let Some(name) = &args.chat_template {
        let p = Path::new(name);
        if p.is_file() {
            let text = crate::cli::read_text_file(p).context("--chat-template")?;
            return Ok((text, TemplateSource::File(p.to_path_buf())));
        }
        if name.eq_ignore_ascii_case("chatml") {
            return Ok((CHATML_TEMPLATE.to_string(), TemplateSource::ChatMl));
        }
        if let Some(f) = gguf {
            if let Some(t) = chat::template_from_gguf(f, Some(name)).map_err(anyhow::Error::msg)? {
                return Ok((
                    t,
                    TemplateSource::Model(format!("tokenizer.chat_template.{name}")),
                ));
            }
        }
        bail!("--chat-template {name}: no such file, not `chatml`, and the model has no template of that name");
    }
    if let Some(f) = gguf {
        if let Some(t) = chat::template_from_gguf(f, None).map_err(anyhow::Error::msg)? {
            return Ok((
                t,
                TemplateSource::Model(chat::GGUF_CHAT_TEMPLATE_KEY.into()),
            ));
        }
    }
    Ok((CHATML_TEMPLATE.to_string(), TemplateSource::ChatMl))
}

/// Whether to run the conversation loop: `-cnv`, or (unless `-no-cnv`)
/// the model has a template, no prompt was given and stdin is a terminal.
pub fn conversation_mode(args: &ChatArgs, gguf: &GgufFile, prompt_given: bool) -> bool {
    args.conversation
        || (!args.no_conversation
            && !prompt_given
            && model_has_template(gguf)
            && std::io::stdin().is_terminal())
}

/// The template and render options for a loaded model: flags first, then
/// the model's own template and BOS / EOS texts.
pub fn model_chat(
    args: &ChatArgs,
    gguf: &GgufFile,
    tok: &Tokenizer,
) -> Result<(ChatTemplate, RenderOptions, TemplateSource)> {
    let (text, source) = template_text(args, Some(gguf))?;
    let t = ChatTemplate::new(&text).map_err(anyhow::Error::msg)?;
    let opts = RenderOptions {
        add_generation_prompt: true,
        bos_token: args
            .chat_bos
            .clone()
            .unwrap_or_else(|| token_text(tok, tok.bos())),
        eos_token: args
            .chat_eos
            .clone()
            .unwrap_or_else(|| token_text(tok, tok.eos())),
        now: Some(render_time()?),
        extra: Vec::new(),
    };
    Ok((t, opts, source))
}

/// Whether the model carries a chat template of its own.
pub fn model_has_template(gguf: &GgufFile) -> bool {
    matches!(chat::template_from_gguf(gguf, None), Ok(Some(_)))
}

/// The text of a special token (empty when the model has none).
pub fn token_text(tok: &Tokenizer, id: Option<i32>) -> String {
    id.and_then(|i| tok.token_text(i))
        .unwrap_or_default()
        .to_string()
}

/// The time `strftime_now` reports: `$SOURCE_DATE_EPOCH` when set (for
/// reproducible renders), else the clock.
pub fn render_time() -> Result<DateTime> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => {
            let secs: i64 = s
                .trim()
                .parse()
                .with_context(|| format!("SOURCE_DATE_EPOCH={s}: not a number of seconds"))?;
            Ok(DateTime::from_unix(secs))
        }
        Err(_) => Ok(DateTime::now()),
    }
}

/// A conversation from JSON text: a list of message objects, or an object
/// whose `messages` is one. Each message needs a string `role`; `content`
/// may be a string, a list of parts or null.
pub fn parse_messages(text: &str, what: &str) -> Result<Value> {
    let v: serde_json::Value =
        serde_json::from_str(text).with_context(|| format!("{what}: not valid JSON"))?;
    let list = match &v {
        serde_json::Value::Array(_) => &v,
        serde_json::Value::Object(o) => match o.get("messages") {
            Some(m @ serde_json::Value::Array(_)) => m,
            _ => bail!("{what}: an object must have a \"messages\" list"),
        },
        _ => bail!("{what}: expected a list of messages"),
    };
    if let serde_json::Value::Array(items) = list {
        for (i, m) in items.iter().enumerate() {
            match m.get("role") {
                Some(serde_json::Value::String(_)) => {}
                _ => bail!("{what}: message {i} has no string \"role\""),
            }
            match m.get("content") {
                None
                | Some(serde_json::Value::String(_))
                | Some(serde_json::Value::Array(_))
                | Some(serde_json::Value::Null) => {}
                Some(_) => {
                    bail!("{what}: message {i}: \"content\" must be a string, a list or null")
                }
            }
        }
    }
    // Parse again straight into template values: this keeps the keys in
    // the order written (Python dicts do; serde_json's map sorts them).
    let all: Value =
        serde_json::from_str(text).with_context(|| format!("{what}: not valid JSON"))?;
    if matches!(v, serde_json::Value::Object(_)) {
        return all
            .get_attr("messages")
            .map_err(|e| anyhow::anyhow!("{what}: {e}"));
    }
    Ok(all)
}

/// `--chat-render`: print the rendered conversation to stdout byte for
/// byte. `model` (with `-m`) supplies the template and the BOS/EOS texts
/// unless flags give them; only its metadata is read.
pub fn render_mode(args: &ChatArgs, model: Option<&Path>) -> Result<()> {
    let Some(msgs_path) = &args.chat_render else {
        bail!("--chat-render: no messages file given");
    };
    let gguf = match model {
        Some(p) => {
            crate::cli::check_model_path(p)?;
            Some(
                GgufFile::open(p)
                    .map_err(|e| anyhow::anyhow!("cannot open '{}': {e}", p.display()))?,
            )
        }
        None => None,
    };
    let tok = match &gguf {
        Some(f) if args.chat_bos.is_none() || args.chat_eos.is_none() => {
            Some(Tokenizer::from_gguf(f).map_err(|e| anyhow::anyhow!("tokenizer: {e}"))?)
        }
        _ => None,
    };
    let (text, _source) = template_text(args, gguf.as_ref())?;
    let messages = parse_messages(
        &crate::cli::read_text_file(msgs_path).context("--chat-render")?,
        &msgs_path.display().to_string(),
    )?;
    let opts = RenderOptions {
        add_generation_prompt: !args.no_generation_prompt,
        bos_token: match (&args.chat_bos, &tok) {
            (Some(s), _) => s.clone(),
            (None, Some(t)) => token_text(t, t.bos()),
            (None, None) => String::new(),
        },
        eos_token: match (&args.chat_eos, &tok) {
            (Some(s), _) => s.clone(),
            (None, Some(t)) => token_text(t, t.eos()),
            (None, None) => String::new(),
        },
        now: Some(render_time()?),
        extra: Vec::new(),
    };
    let rendered = ChatTemplate::new(&text)
        .and_then(|t| t.render_value(messages, &opts))
        .map_err(anyhow::Error::msg)?;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(rendered.as_bytes())
        .and_then(|()| out.flush())
        .context("cannot write the rendered text to stdout")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_as_list_or_object() {
        let v = parse_messages(r#"[{"role":"user","content":"hi","z":1,"a":2}]"#, "m").unwrap();
        let m = v.get_item_by_index(0).unwrap();
        let keys: Vec<String> = m.try_iter().unwrap().map(|k| k.to_string()).collect();
        assert_eq!(keys, ["role", "content", "z", "a"]);
        let v = parse_messages(r#"{"messages":[{"role":"user","content":"hi"}]}"#, "m").unwrap();
        assert_eq!(v.len(), Some(1));
        for bad in [
            "{",
            "3",
            r#"{"x":[]}"#,
            r#"[{"content":"x"}]"#,
            r#"[{"role":"user","content":3}]"#,
        ] {
            assert!(parse_messages(bad, "m").is_err(), "{bad}");
        }
    }

    #[test]
    fn chatml_fallback_renders() {
        let t = ChatTemplate::new(CHATML_TEMPLATE).unwrap();
        let out = t
            .render(
                &[chat::Message::new("user", "Hi")],
                &RenderOptions {
                    add_generation_prompt: true,
                    ..Default::default()
                },
            )
            .unwrap();
        assert_eq!(
            out,
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }
}
