//! Tool calls of `/v1/chat/completions`: the request's `tools` and
//! `tool_choice` checked, the template's tool call format recognized from
//! its text, and the tool calls parsed back out of the generated text
//! (parallel calls included) in that format:
//! Hermes / Qwen `<tool_call>{...}</tool_call>`, Llama 3.x JSON
//! (`{"name", "parameters"}`, `<|python_tag|>`), Mistral
//! `[TOOL_CALLS][...]`, Functionary v3.2 `>>>name\n{...}` and v3.1
//! `<function=name>{...}</function>`, Command R `<|START_ACTION|>[...]`
//! and `Action: ```json [...]````, DeepSeek R1 `<｜tool▁call▁begin｜>`,
//! FireFunction `functools[...]`, and llama.cpp's generic JSON
//! (`{"tool_call": ...}` / `{"tool_calls": [...]}`) for other templates.

use serde_json::{json, Map, Value};

use crate::error::ApiError;

/// How a template's model writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// `<tool_call>{"name", "arguments"}</tool_call>` (Hermes 2 Pro / 3, Qwen 2.5).
    Hermes,
    /// `{"name", "parameters"}` JSON, or `<|python_tag|>code` (Llama 3.1-3.3).
    Llama3,
    /// `[TOOL_CALLS][{"name", "arguments", "id"}, ...]` (Mistral Nemo).
    Mistral,
    /// `>>>name\n{args}` (Functionary v3.2).
    FunctionaryV32,
    /// `<function=name>{args}</function>` (Functionary v3.1 on Llama 3.1).
    FunctionaryV31,
    /// `<|START_ACTION|>[{"tool_name", "parameters"}]<|END_ACTION|>` or
    /// `Action: ```json [...] ```` (Command R / R+ / R7B).
    CommandR,
    /// `<｜tool▁call▁begin｜>function<｜tool▁sep｜>name ```json {...}``` ` (DeepSeek R1).
    DeepSeekR1,
    /// ` functools[{"name", "arguments"}]` (FireFunction v2).
    FireFunction,
    /// llama.cpp's generic JSON: `{"tool_call": {"name", "arguments"}}`,
    /// `{"tool_calls": [...]}` or `{"response": "..."}`.
    Generic,
}

impl ToolFormat {
    /// The format of a template, from the markers its text holds.
    pub fn detect(template: &str) -> ToolFormat {
        let has = |s: &str| template.contains(s);
        if has("<｜tool▁calls▁begin｜>") {
            ToolFormat::DeepSeekR1
        } else if has("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if has(">>>all") {
            ToolFormat::FunctionaryV32
        } else if has("<function=") {
            ToolFormat::FunctionaryV31
        } else if has("<|START_ACTION|>") || has("<|CHATBOT_TOKEN|>") && has("Action:") {
            ToolFormat::CommandR
        } else if has(" functools[") {
            ToolFormat::FireFunction
        } else if has("<tool_call>") {
            ToolFormat::Hermes
        } else if has("<|start_header_id|>") && (has("ipython") || has("<|python_tag|>")) {
            ToolFormat::Llama3
        } else {
            ToolFormat::Generic
        }
    }

    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            ToolFormat::Hermes => "Hermes 2 Pro",
            ToolFormat::Llama3 => "Llama 3.x",
            ToolFormat::Mistral => "Mistral Nemo",
            ToolFormat::FunctionaryV32 => "Functionary v3.2",
            ToolFormat::FunctionaryV31 => "Functionary v3.1 Llama 3.1",
            ToolFormat::CommandR => "Command R",
            ToolFormat::DeepSeekR1 => "DeepSeek R1",
            ToolFormat::FireFunction => "FireFunction v2",
            ToolFormat::Generic => "Generic",
        }
    }
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model may call tools (the default).
    Auto,
    /// No tools: they are left out of the prompt.
    None,
    /// The model must call a tool.
    Required,
    /// The model must call this function.
    Function(String),
}

/// A request's tools: the `tools` array (checked) and the choice.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolRequest {
    /// The tools as given (each `{"type": "function", "function": {...}}`).
    pub tools: Value,
    /// `tool_choice`.
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true).
    pub parallel: bool,
}

/// The `tools` / `tool_choice` / `parallel_tool_calls` fields, or `None`
/// when the request has no tools. A tool of another type than `function`,
/// or without a function name, is a 400 naming it.
pub fn parse_tools(m: &Map<String, Value>) -> Result<Option<ToolRequest>, ApiError> {
    let tools = match m.get("tools") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) if a.is_empty() => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'tools' must be an array, not {}",
                crate::json::type_name(v)
            )))
        }
    };
    for (i, t) in tools.iter().enumerate() {
        let ty = t.get("type").and_then(Value::as_str).unwrap_or("");
        if ty != "function" {
            return Err(ApiError::bad_request(format!(
                "tools[{i}]: unknown tool format (type '{ty}'); only {{\"type\": \"function\", \"function\": {{\"name\", \"parameters\"}}}} tools are supported"
            )));
        }
        if t.pointer("/function/name")
            .and_then(Value::as_str)
            .is_none()
        {
            return Err(ApiError::bad_request(format!(
                "tools[{i}]: the function has no 'name'"
            )));
        }
    }
    let choice = match m.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            s => {
                return Err(ApiError::bad_request(format!(
                    "'tool_choice' is '{s}': must be auto, none, required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
                )))
            }
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(n) => ToolChoice::Function(n.to_string()),
            None => {
                return Err(ApiError::bad_request(
                    "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}",
                ))
            }
        },
    };
    let parallel = match m.get("parallel_tool_calls") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'parallel_tool_calls' must be a boolean, not {}",
                crate::json::type_name(v)
            )))
        }
    };
    Ok(Some(ToolRequest {
        tools: Value::Array(tools.clone()),
        choice,
        parallel,
    }))
}

/// For a template without a tool call format (llama.cpp's generic
/// format): tell the model the tools and the JSON answer expected, in the
/// system message (a new first one when there is none).
pub fn describe_generic(messages: &mut Vec<crate::chat_fallback::Message>, req: &ToolRequest) {
    let text = format!(
        "You can call any of the following tools to satisfy the user's requests: {}\n\nRespond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to the user's request",
        req.tools
    );
    match messages.iter_mut().find(|m| m.role == "system") {
        Some(m) => {
            m.content.push_str("\n\n");
            m.content.push_str(&text);
        }
        None => messages.insert(0, crate::chat_fallback::Message::new("system", &text)),
    }
}

/// A parsed tool call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The function.
    pub name: String,
    /// Its arguments as a JSON text.
    pub arguments: String,
    /// The id the model gave, if any.
    pub id: Option<String>,
}

/// What the model wrote: text, thoughts, and tool calls.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    /// The text besides the tool calls.
    pub content: String,
    /// Thoughts (`<think>...</think>`, DeepSeek R1).
    pub reasoning: Option<String>,
    /// The calls, in order.
    pub calls: Vec<ToolCall>,
}

fn args_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "{}".into(),
        v => v.to_string(),
    }
}

/// A call from `{"name", "arguments" | "parameters"}`.
fn call_of(v: &Value) -> Option<ToolCall> {
    let name = v
        .get("name")
        .or_else(|| v.get("tool_name"))
        .and_then(Value::as_str)?;
    let args = v
        .get("arguments")
        .or_else(|| v.get("parameters"))
        .unwrap_or(&Value::Null);
    Some(ToolCall {
        name: name.to_string(),
        arguments: args_text(args),
        id: v
            .get("id")
            .or_else(|| v.get("tool_call_id"))
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// The first JSON value at the start of `s` (after spaces) and the rest.
fn json_prefix(s: &str) -> Option<(Value, &str)> {
    let t = s.trim_start();
    let mut it = serde_json::Deserializer::from_str(t).into_iter::<Value>();
    let v = it.next()?.ok()?;
    let used = it.byte_offset();
    Some((v, &t[used..]))
}

/// Calls from an array of call objects.
fn calls_of_array(v: &Value) -> Vec<ToolCall> {
    v.as_array()
        .map(|a| a.iter().filter_map(call_of).collect())
        .unwrap_or_default()
}

/// Every `open ... close` span of `text`: the text outside them and the
/// insides.
fn spans<'a>(text: &'a str, open: &str, close: &str) -> (String, Vec<&'a str>) {
    let mut outside = String::new();
    let mut inside = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(open) {
        outside.push_str(&rest[..i]);
        let after = &rest[i + open.len()..];
        match after.find(close) {
            Some(j) => {
                inside.push(&after[..j]);
                rest = &after[j + close.len()..];
            }
            None => {
                inside.push(after);
                rest = "";
            }
        }
    }
    outside.push_str(rest);
    (outside, inside)
}

/// Parse the generated text in `format`. Text that is not a well-formed
/// call stays content.
pub fn parse_output(format: ToolFormat, text: &str) -> Parsed {
    let mut p = Parsed::default();
    let mut body = text.to_string();
    // thoughts
    if let Some(end) = body.find("</think>") {
        let start = body.find("<think>").map_or(0, |i| i + "<think>".len());
        if start <= end {
            p.reasoning = Some(body[start..end].trim().to_string());
            body = body[end + "</think>".len()..].to_string();
        }
    }
    match format {
        ToolFormat::Hermes => {
            let (out, ins) = spans(&body, "<tool_call>", "</tool_call>");
            let mut rest = out;
            for s in ins {
                match json_prefix(s).and_then(|(v, _)| call_of(&v)) {
                    Some(c) => p.calls.push(c),
                    None => rest.push_str(s),
                }
            }
            p.content = rest;
        }
        ToolFormat::Mistral => match body.find("[TOOL_CALLS]") {
            Some(i) => {
                let (v, rest) =
                    json_prefix(&body[i + "[TOOL_CALLS]".len()..]).unwrap_or((Value::Null, ""));
                p.calls = calls_of_array(&v);
                p.content = format!("{}{}", &body[..i], rest);
            }
            None => p.content = body,
        },
        ToolFormat::FireFunction => match body.find("functools[") {
            Some(i) => {
                let (v, rest) =
                    json_prefix(&body[i + "functools".len()..]).unwrap_or((Value::Null, ""));
                p.calls = calls_of_array(&v);
                p.content = format!("{}{}", &body[..i], rest);
            }
            None => p.content = body,
        },
        ToolFormat::Llama3 => {
            if let Some(i) = body.find("<|python_tag|>") {
                let code = body[i + "<|python_tag|>".len()..].trim_end_matches("<|eom_id|>");
                p.calls.push(ToolCall {
                    name: "python".into(),
                    arguments: json!({ "code": code }).to_string(),
                    id: None,
                });
                p.content = body[..i].to_string();
            } else {
                // one or more `{"name", "parameters"}` objects, `;` apart
                let mut rest = body.as_str();
                let mut calls = Vec::new();
                while let Some((v, r)) = json_prefix(rest) {
                    match call_of(&v) {
                        Some(c) => calls.push(c),
                        None => break,
                    }
                    rest = r.trim_start().trim_start_matches(';');
                }
                if calls.is_empty() {
                    p.content = body;
                } else {
                    p.calls = calls;
                    p.content = rest.to_string();
                }
            }
        }
        ToolFormat::FunctionaryV32 => {
            // `>>>name\n{args}` segments; `all\n` is text
            let mut content = String::new();
            let segs: Vec<&str> = body.split(">>>").collect();
            for (k, seg) in segs.iter().enumerate() {
                if seg.is_empty() {
                    continue;
                }
                let (name, rest) = seg.split_once('\n').unwrap_or((seg, ""));
                let name = name.trim();
                if k == 0 && !body.starts_with(">>>") && !seg.contains('\n') {
                    content.push_str(seg);
                    continue;
                }
                if name == "all" {
                    content.push_str(rest);
                } else if name == "python" && json_prefix(rest).is_none() {
                    p.calls.push(ToolCall {
                        name: "python".into(),
                        arguments: json!({ "code": rest }).to_string(),
                        id: None,
                    });
                } else if let Some((v, after)) = json_prefix(rest) {
                    p.calls.push(ToolCall {
                        name: name.to_string(),
                        arguments: args_text(&v),
                        id: None,
                    });
                    content.push_str(after);
                } else {
                    content.push_str(seg);
                }
            }
            p.content = content;
        }
        ToolFormat::FunctionaryV31 => {
            let mut content = String::new();
            let mut rest = body.as_str();
            while let Some(i) = rest.find("<function=") {
                content.push_str(&rest[..i]);
                let after = &rest[i + "<function=".len()..];
                let Some(j) = after.find('>') else {
                    content.push_str(&rest[i..]);
                    rest = "";
                    break;
                };
                let name = &after[..j];
                let inner = &after[j + 1..];
                let (args, tail) = match inner.find("</function>") {
                    Some(k) => (&inner[..k], &inner[k + "</function>".len()..]),
                    None => (inner, ""),
                };
                p.calls.push(ToolCall {
                    name: name.to_string(),
                    arguments: json_prefix(args)
                        .map_or_else(|| args.trim().to_string(), |(v, _)| args_text(&v)),
                    id: None,
                });
                rest = tail;
            }
            content.push_str(rest);
            p.content = content;
        }
        ToolFormat::CommandR => {
            let (out, ins) = spans(&body, "<|START_ACTION|>", "<|END_ACTION|>");
            let mut content = out;
            for s in ins {
                if let Some((v, _)) = json_prefix(s) {
                    p.calls.extend(calls_of_array(&v));
                }
            }
            if p.calls.is_empty() {
                if let Some(i) = content.find("Action:") {
                    let after = content[i + "Action:".len()..].trim_start();
                    let after = after
                        .trim_start_matches("```json")
                        .trim_start_matches("```");
                    if let Some((v, _)) = json_prefix(after) {
                        p.calls = calls_of_array(&v);
                        if !p.calls.is_empty() {
                            content = content[..i].to_string();
                        }
                    }
                }
            }
            let (c, _) = spans(&content, "<|START_RESPONSE|>", "<|END_RESPONSE|>");
            p.content = if c.trim().is_empty() {
                spans(&content, "<|START_RESPONSE|>", "<|END_RESPONSE|>")
                    .1
                    .concat()
            } else {
                content
            };
        }
        ToolFormat::DeepSeekR1 => {
            let (out, ins) = spans(&body, "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>");
            for s in ins {
                // function<｜tool▁sep｜>NAME\n```json\n{...}\n```
                let Some((_, rest)) = s.split_once("<｜tool▁sep｜>") else {
                    continue;
                };
                let (name, rest) = rest.split_once('\n').unwrap_or((rest, ""));
                let rest = rest.trim_start().trim_start_matches("```json");
                if let Some((v, _)) = json_prefix(rest) {
                    p.calls.push(ToolCall {
                        name: name.trim().to_string(),
                        arguments: args_text(&v),
                        id: None,
                    });
                }
            }
            p.content = out
                .replace("<｜tool▁calls▁begin｜>", "")
                .replace("<｜tool▁calls▁end｜>", "");
        }
        ToolFormat::Generic => match json_prefix(&body) {
            Some((v, rest)) if rest.trim().is_empty() => {
                if let Some(c) = v.get("tool_call").and_then(call_of) {
                    p.calls.push(c);
                } else if let Some(a) = v.get("tool_calls") {
                    p.calls = calls_of_array(a);
                } else if let Some(r) = v.get("response") {
                    p.content = match r {
                        Value::String(s) => s.clone(),
                        r => r.to_string(),
                    };
                } else {
                    p.content = body;
                }
            }
            _ => p.content = body,
        },
    }
    p
}

/// What `tool_choice: required` (or a named function) must make the model
/// write: a tool call in the template's format, for the constrained
/// decoder to enforce (llama.cpp builds the same from its grammar). JSON
/// formats as a JSON schema; tagged ones as a Lark grammar in llguidance's
/// syntax (`%json {...}` for the JSON parts).
#[derive(Clone, Debug, PartialEq)]
pub enum RequiredCall {
    /// The whole output is JSON matching this schema.
    JsonSchema(Value),
    /// The output matches this Lark grammar.
    Lark(String),
}

/// A Lark string literal.
fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// A `%json` part of a Lark grammar: `schema` read as llama.cpp reads it
/// and written compactly ([`crate::constraint::llguidance_schema`]), so a
/// model can neither add properties nor pad a call with whitespace.
fn json_part(schema: &Value) -> String {
    crate::constraint::llguidance_schema(schema).to_string()
}

/// The grammar a required tool call must follow, or `None` when the
/// choice leaves the model free (`auto`, `none`).
pub fn required_call(format: ToolFormat, req: &ToolRequest) -> Option<RequiredCall> {
    let only = match &req.choice {
        ToolChoice::Required => None,
        ToolChoice::Function(n) => Some(n.as_str()),
        ToolChoice::Auto | ToolChoice::None => return None,
    };
    // (name, parameters schema) of the tools the model may call
    let tools: Vec<(String, Value)> = req
        .tools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let name = t.pointer("/function/name")?.as_str()?;
            let params = t
                .pointer("/function/parameters")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"}));
            Some((name.to_string(), params))
        })
        .filter(|(n, _)| only.is_none_or(|o| o == n))
        .collect();
    if tools.is_empty() {
        return None;
    }
    // one call object: {name_key: const name, args_key: parameters}
    let call = |name_key: &str, args_key: &str| -> Value {
        json!({"anyOf": tools.iter().map(|(n, p)| json!({
            "type": "object",
            "properties": {name_key: {"const": n}, args_key: p},
            "required": [name_key, args_key],
        })).collect::<Vec<_>>()})
    };
    let array = |item: Value| -> Value {
        let mut a = json!({"type": "array", "items": item, "minItems": 1});
        if !req.parallel {
            a["maxItems"] = json!(1);
        }
        a
    };
    let rep = if req.parallel { "+" } else { "" };
    // Lark: a rule per tool from a prefix, the name, a middle and a suffix
    let per_tool = |pre: &dyn Fn(&str) -> String, post: &str, outer: (&str, &str)| -> String {
        let mut g = format!("start: {} (call){rep} {}\n", outer.0, outer.1)
            .replace("  ", " ")
            .replace(" \n", "\n");
        let alts: Vec<String> = (0..tools.len()).map(|i| format!("call_{i}")).collect();
        g.push_str(&format!("call: {}\n", alts.join(" | ")));
        for (i, (n, p)) in tools.iter().enumerate() {
            let post = if post.is_empty() {
                String::new()
            } else {
                format!(" {}", lit(post))
            };
            g.push_str(&format!(
                "call_{i}: {} args_{i}{post}\nargs_{i}: %json {}\n",
                pre(n),
                json_part(p)
            ));
        }
        g
    };
    Some(match format {
        ToolFormat::Generic => {
            if req.parallel {
                RequiredCall::JsonSchema(json!({
                    "type": "object",
                    "properties": {"tool_calls": array(call("name", "arguments"))},
                    "required": ["tool_calls"],
                }))
            } else {
                RequiredCall::JsonSchema(json!({
                    "type": "object",
                    "properties": {"tool_call": call("name", "arguments")},
                    "required": ["tool_call"],
                }))
            }
        }
        ToolFormat::Llama3 => RequiredCall::JsonSchema(call("name", "parameters")),
        ToolFormat::Hermes => RequiredCall::Lark(format!(
            "start: (\"<tool_call>\\n\" call \"\\n</tool_call>\"){rep}\ncall: %json {}\n",
            json_part(&call("name", "arguments"))
        )),
        ToolFormat::Mistral => RequiredCall::Lark(format!(
            "start: \"[TOOL_CALLS]\" calls\ncalls: %json {}\n",
            json_part(&array(call("name", "arguments")))
        )),
        ToolFormat::FireFunction => RequiredCall::Lark(format!(
            "start: \" functools\" calls\ncalls: %json {}\n",
            json_part(&array(call("name", "arguments")))
        )),
        ToolFormat::CommandR => {
            let item = json!({"anyOf": tools.iter().map(|(n, p)| json!({
                "type": "object",
                "properties": {"tool_call_id": {"type": "string"}, "tool_name": {"const": n}, "parameters": p},
                "required": ["tool_call_id", "tool_name", "parameters"],
            })).collect::<Vec<_>>()});
            RequiredCall::Lark(format!(
                "start: \"<|START_ACTION|>\" calls \"<|END_ACTION|>\"\ncalls: %json {}\n",
                json_part(&array(item))
            ))
        }
        ToolFormat::FunctionaryV32 => {
            RequiredCall::Lark(per_tool(&|n| lit(&format!(">>>{n}\n")), "", ("", "")))
        }
        ToolFormat::FunctionaryV31 => RequiredCall::Lark(per_tool(
            &|n| lit(&format!("<function={n}>")),
            "</function>",
            ("", ""),
        )),
        ToolFormat::DeepSeekR1 => RequiredCall::Lark(per_tool(
            &|n| {
                lit(&format!(
                    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{n}\n```json\n"
                ))
            },
            "\n```<｜tool▁call▁end｜>",
            ("\"<｜tool▁calls▁begin｜>\"", "\"<｜tool▁calls▁end｜>\""),
        )),
    })
}

/// The OpenAI `tool_calls` of an answer (ids `call_<k>` where the model
/// gave none).
pub fn tool_calls_json(calls: &[ToolCall], request_id: &str) -> Value {
    Value::Array(
        calls
            .iter()
            .enumerate()
            .map(|(k, c)| {
                json!({
                    "type": "function",
                    "id": c.id.clone().unwrap_or_else(|| format!("call_{request_id}_{k}")),
                    "function": {"name": c.name, "arguments": c.arguments},
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(f: ToolFormat, text: &str) -> Vec<(String, Value)> {
        parse_output(f, text)
            .calls
            .into_iter()
            .map(|c| (c.name, serde_json::from_str(&c.arguments).unwrap()))
            .collect()
    }

    #[test]
    fn formats_from_the_suite_templates() {
        let dir = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../shared/conformance/llama-server-tests/upstream/models/templates"
        );
        let want = [
            (
                "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
                ToolFormat::Hermes,
            ),
            ("Qwen-Qwen2.5-7B-Instruct", ToolFormat::Hermes),
            ("meta-llama-Llama-3.3-70B-Instruct", ToolFormat::Llama3),
            ("meta-llama-Llama-3.2-3B-Instruct", ToolFormat::Llama3),
            ("mistralai-Mistral-Nemo-Instruct-2407", ToolFormat::Mistral),
            (
                "meetkai-functionary-medium-v3.2",
                ToolFormat::FunctionaryV32,
            ),
            (
                "meetkai-functionary-medium-v3.1",
                ToolFormat::FunctionaryV31,
            ),
            (
                "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
                ToolFormat::CommandR,
            ),
            (
                "CohereForAI-c4ai-command-r-plus-tool_use",
                ToolFormat::CommandR,
            ),
            ("llama-cpp-deepseek-r1", ToolFormat::DeepSeekR1),
            (
                "fireworks-ai-llama-3-firefunction-v2",
                ToolFormat::FireFunction,
            ),
            ("google-gemma-2-2b-it", ToolFormat::Generic),
        ];
        for (name, f) in want {
            let path = format!("{dir}/{name}.jinja");
            let Ok(text) = std::fs::read_to_string(&path) else {
                // the shared suite is not beside this checkout
                return;
            };
            assert_eq!(ToolFormat::detect(&text), f, "{name}");
        }
    }

    #[test]
    fn parses_each_format_with_parallel_calls() {
        let a = json!({"a": 1});
        let b = json!({"b": "x"});
        assert_eq!(
            calls(ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {\"b\": \"x\"}}</tool_call>"),
            vec![("f".into(), a.clone()), ("g".into(), b.clone())]
        );
        assert_eq!(
            calls(ToolFormat::Llama3, "{\"name\": \"f\", \"parameters\": {\"a\": 1}}; {\"name\": \"g\", \"parameters\": {\"b\": \"x\"}}"),
            vec![("f".into(), a.clone()), ("g".into(), b.clone())]
        );
        assert_eq!(
            calls(ToolFormat::Llama3, "<|python_tag|>print(1)"),
            vec![("python".into(), json!({"code": "print(1)"}))]
        );
        assert_eq!(
            calls(ToolFormat::Mistral, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}, \"id\": \"123456789\"}, {\"name\": \"g\", \"arguments\": {\"b\": \"x\"}}]"),
            vec![("f".into(), a.clone()), ("g".into(), b.clone())]
        );
        assert_eq!(
            calls(
                ToolFormat::FunctionaryV32,
                ">>>f\n{\"a\": 1}>>>g\n{\"b\": \"x\"}"
            ),
            vec![("f".into(), a.clone()), ("g".into(), b.clone())]
        );
        let p = parse_output(ToolFormat::FunctionaryV32, "all\nHello");
        assert!(p.calls.is_empty());
        assert_eq!(p.content, "Hello");
        assert_eq!(
            calls(
                ToolFormat::FunctionaryV31,
                "<function=f>{\"a\": 1}</function><function=g>{\"b\": \"x\"}</function>"
            ),
            vec![("f".into(), a.clone()), ("g".into(), b.clone())]
        );
        assert_eq!(
            calls(ToolFormat::CommandR, "<|START_THINKING|>hm<|END_THINKING|><|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"f\", \"parameters\": {\"a\": 1}}, {\"tool_call_id\": \"1\", \"tool_name\": \"g\", \"parameters\": {\"b\": \"x\"}}]<|END_ACTION|>"),
            vec![("f".into(), a.clone()), ("g".into(), b.clone())]
        );
        assert_eq!(
            calls(
                ToolFormat::CommandR,
                "Action: ```json\n[{\"tool_name\": \"f\", \"parameters\": {\"a\": 1}}]\n```"
            ),
            vec![("f".into(), a.clone())]
        );
        let ds = "<think>let me see</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```<｜tool▁call▁end｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{\"b\": \"x\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        assert_eq!(
            calls(ToolFormat::DeepSeekR1, ds),
            vec![("f".into(), a.clone()), ("g".into(), b.clone())]
        );
        assert_eq!(
            parse_output(ToolFormat::DeepSeekR1, ds)
                .reasoning
                .as_deref(),
            Some("let me see")
        );
        assert_eq!(
            calls(
                ToolFormat::FireFunction,
                " functools[{\"name\": \"f\", \"arguments\": {\"a\": 1}}]"
            ),
            vec![("f".into(), a.clone())]
        );
        assert_eq!(
            calls(ToolFormat::Generic, "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", \"arguments\": {\"b\": \"x\"}}]}"),
            vec![("f".into(), a), ("g".into(), b)]
        );
        let p = parse_output(ToolFormat::Generic, "{\"response\": \"hi\"}");
        assert_eq!((p.content.as_str(), p.calls.len()), ("hi", 0));
        // text that is no call stays text
        let p = parse_output(ToolFormat::Hermes, "just words");
        assert_eq!((p.content.as_str(), p.calls.len()), ("just words", 0));
    }

    #[test]
    fn required_calls_follow_the_format() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let req = |choice: Value, parallel: bool| {
            parse_tools(&m(json!({
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
                          {"type": "function", "function": {"name": "g"}}],
                "tool_choice": choice,
                "parallel_tool_calls": parallel,
            })))
            .unwrap()
            .unwrap()
        };
        assert_eq!(
            required_call(ToolFormat::Hermes, &req(json!("auto"), true)),
            None
        );
        // generic: one tool_call object whose name is one of the tools
        let Some(RequiredCall::JsonSchema(s)) =
            required_call(ToolFormat::Generic, &req(json!("required"), false))
        else {
            panic!("generic is a schema")
        };
        let alts = s
            .pointer("/properties/tool_call/anyOf")
            .unwrap()
            .as_array()
            .unwrap();
        assert_eq!(alts.len(), 2);
        assert_eq!(alts[0].pointer("/properties/name/const"), Some(&json!("f")));
        // a named function: only it
        let Some(RequiredCall::JsonSchema(s)) = required_call(
            ToolFormat::Llama3,
            &req(
                json!({"type": "function", "function": {"name": "g"}}),
                false,
            ),
        ) else {
            panic!("llama 3 is a schema")
        };
        assert_eq!(s["anyOf"].as_array().map(Vec::len), Some(1));
        assert_eq!(
            s.pointer("/anyOf/0/properties/name/const"),
            Some(&json!("g"))
        );
        // tagged formats: Lark with the tags and %json parts
        let Some(RequiredCall::Lark(g)) =
            required_call(ToolFormat::Hermes, &req(json!("required"), true))
        else {
            panic!("hermes is lark")
        };
        assert!(
            g.starts_with("start: (\"<tool_call>\\n\" call \"\\n</tool_call>\")+\ncall: %json {"),
            "{g}"
        );
        // the JSON part: compact, and only the listed properties (as llama.cpp)
        let part: Value = g
            .split_once("call: %json ")
            .and_then(|(_, j)| serde_json::from_str(j.trim()).ok())
            .expect("a JSON schema after %json");
        assert_eq!(
            part["x-guidance"]["whitespace_flexible"],
            json!(false),
            "{g}"
        );
        assert_eq!(
            part["anyOf"][0]["additionalProperties"],
            json!(false),
            "{g}"
        );
        let Some(RequiredCall::Lark(g)) =
            required_call(ToolFormat::FunctionaryV31, &req(json!("required"), false))
        else {
            panic!("functionary is lark")
        };
        assert!(
            g.contains("call_0: \"<function=f>\" args_0 \"</function>\"\nargs_0: %json {"),
            "{g}"
        );
        assert!(
            g.starts_with("start: (call)\ncall: call_0 | call_1\n"),
            "{g}"
        );
    }

    #[test]
    fn tool_fields_are_checked() {
        let m = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(parse_tools(&m(json!({}))).unwrap(), None);
        let t = parse_tools(&m(json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"})))
            .unwrap()
            .unwrap();
        assert_eq!(t.choice, ToolChoice::Required);
        let e = parse_tools(&m(json!({"tools": [{"type": "retrieval"}]}))).unwrap_err();
        assert!(
            e.message.contains("unknown tool format (type 'retrieval')"),
            "{}",
            e.message
        );
        let e = parse_tools(&m(json!({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "maybe"}))).unwrap_err();
        assert!(
            e.message.contains("'tool_choice' is 'maybe'"),
            "{}",
            e.message
        );
    }
}
