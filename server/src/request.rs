//! Request bodies of the generation endpoints, checked field by field so
//! that a bad field gets a 400 naming it (rather than a serde message).

use serde_json::{Map, Value};

use crate::chat_fallback::Message;
use crate::constraint::Constraint;
use crate::error::ApiError;

/// Sampling and stopping settings of one request (llama.cpp's server
/// defaults where a field is absent).
#[derive(Clone, Debug, PartialEq)]
pub struct GenParams {
    /// `model`, when given.
    pub model: Option<String>,
    /// `max_tokens` (`max_completion_tokens`, `n_predict`); `None`: the server's `-n`.
    pub max_tokens: Option<usize>,
    /// `temperature` (0.8); `<= 0` is greedy.
    pub temperature: f32,
    /// `top_p` (0.95).
    pub top_p: f32,
    /// `top_k` (40; `<= 0`: all).
    pub top_k: i32,
    /// `min_p` (0.05).
    pub min_p: f32,
    /// `seed`; `None`: a fresh one per request.
    pub seed: Option<u64>,
    /// `stop`: up to any number of strings.
    pub stop: Vec<String>,
    /// `stream`.
    pub stream: bool,
    /// `n`: choices, each in a slot of its own, sharing the prompt's cells
    /// (at most the server's slots; 1 when streaming).
    pub n: usize,
    /// `return_tokens` (llama.cpp's): add the generated token ids to each choice / chunk.
    pub return_tokens: bool,
    /// Log-probabilities of the chosen tokens and of this many top
    /// alternatives: completions' `logprobs: N` (or llama.cpp's `n_probs`),
    /// chat's `logprobs: true` with `top_logprobs: N`. `None`: none.
    pub logprobs: Option<usize>,
    /// llama.cpp's `post_sampling_probs`: report the distribution the
    /// token was drawn from (after top-k, top-p, min-p and temperature)
    /// instead of the model's (log-softmax of the logits, the default).
    pub post_sampling_probs: bool,
    /// `grammar` / `json_schema` / `response_format`, compiled (set by the
    /// handler with [`crate::constraint::from_request`]; `None`: free text).
    pub constraint: Option<Constraint>,
}

/// Most alternatives `logprobs` / `top_logprobs` may ask for.
pub const MAX_TOP_LOGPROBS: i64 = 20;

/// A completion prompt: text or token ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Prompt {
    /// Text, tokenized with the model's BOS rules.
    Text(String),
    /// Token ids as given.
    Tokens(Vec<i32>),
}

/// The JSON object of a body, or 400.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("request body is not valid JSON: {e}")))?;
    match v {
        Value::Object(m) => Ok(m),
        other => Err(ApiError::bad_request(format!(
            "request body must be a JSON object, not {}",
            type_name(&other)
        ))),
    }
}

/// The JSON type of a value, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn wrong(key: &str, want: &str, v: &Value) -> ApiError {
    ApiError::bad_request(format!("'{key}' must be {want}, not {}", type_name(v)))
}

fn opt_f32(m: &Map<String, Value>, key: &str, lo: f32, hi: f32) -> Result<Option<f32>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(n)) => {
            let x = n.as_f64().ok_or_else(|| wrong(key, "a number", v))? as f32;
            if !(lo..=hi).contains(&x) {
                return Err(ApiError::bad_request(format!(
                    "'{key}' is {x}: must be in [{lo}, {hi}]"
                )));
            }
            Ok(Some(x))
        }
        Some(v) => Err(wrong(key, "a number", v)),
    }
}

fn opt_int(m: &Map<String, Value>, key: &str, lo: i64) -> Result<Option<i64>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v @ Value::Number(n)) => {
            let x = n
                .as_i64()
                .or_else(|| n.as_u64().map(|u| u as i64))
                .ok_or_else(|| wrong(key, "an integer", v))?;
            if x < lo {
                return Err(ApiError::bad_request(format!(
                    "'{key}' is {x}: must be at least {lo}"
                )));
            }
            Ok(Some(x))
        }
        Some(v) => Err(wrong(key, "an integer", v)),
    }
}

fn opt_bool(m: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(wrong(key, "a boolean", v)),
    }
}

/// The sampling, stopping and streaming fields shared by both endpoints.
pub fn parse_params(m: &Map<String, Value>) -> Result<GenParams, ApiError> {
    let model = match m.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(wrong("model", "a string", v)),
    };
    let mut max_tokens = None;
    for key in ["max_tokens", "max_completion_tokens", "n_predict"] {
        if let Some(n) = opt_int(m, key, if key == "n_predict" { -1 } else { 0 })? {
            max_tokens = usize::try_from(n).ok();
        }
    }
    let n = opt_int(m, "n", 1)?.unwrap_or(1);
    if n > 1 && opt_bool(m, "stream")?.unwrap_or(false) {
        return Err(ApiError::bad_request(format!(
            "'n' is {n}: several choices are not streamed; ask for one choice per stream"
        )));
    }
    let stop = match m.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                v => Err(wrong("stop[]", "a string", v)),
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(wrong("stop", "a string or an array of strings", v)),
    };
    Ok(GenParams {
        model,
        max_tokens,
        temperature: opt_f32(m, "temperature", 0.0, 100.0)?.unwrap_or(0.8),
        top_p: opt_f32(m, "top_p", 0.0, 1.0)?.unwrap_or(0.95),
        top_k: opt_int(m, "top_k", -1)?.map_or(40, |k| k.min(i32::MAX as i64) as i32),
        min_p: opt_f32(m, "min_p", 0.0, 1.0)?.unwrap_or(0.05),
        seed: match opt_int(m, "seed", i64::MIN)? {
            Some(s) if s >= 0 => Some(s as u64),
            _ => None,
        },
        stop,
        stream: opt_bool(m, "stream")?.unwrap_or(false),
        n: usize::try_from(n).unwrap_or(usize::MAX),
        return_tokens: opt_bool(m, "return_tokens")?.unwrap_or(false),
        logprobs: parse_logprobs(m)?,
        post_sampling_probs: opt_bool(m, "post_sampling_probs")?.unwrap_or(false),
        constraint: None,
    })
}

fn parse_logprobs(m: &Map<String, Value>) -> Result<Option<usize>, ApiError> {
    let top = |key: &str| -> Result<Option<usize>, ApiError> {
        match opt_int(m, key, 0)? {
            Some(n) if n > MAX_TOP_LOGPROBS => Err(ApiError::bad_request(format!(
                "'{key}' is {n}: at most {MAX_TOP_LOGPROBS}"
            ))),
            n => Ok(n.map(|n| n as usize)),
        }
    };
    match m.get("logprobs") {
        // chat: a boolean, with top_logprobs alternatives
        Some(Value::Bool(true)) => Ok(Some(top("top_logprobs")?.unwrap_or(0))),
        Some(Value::Bool(false)) | Some(Value::Null) => Ok(None),
        // completions: the number of alternatives
        Some(Value::Number(_)) => top("logprobs"),
        Some(v) => Err(wrong("logprobs", "a boolean or an integer", v)),
        None => top("n_probs"),
    }
}

/// `/v1/completions`: the prompt (a string, one string in an array, or token ids).
pub fn parse_prompt(m: &Map<String, Value>) -> Result<Prompt, ApiError> {
    match m.get("prompt") {
        None | Some(Value::Null) => Err(ApiError::bad_request("'prompt' is required")),
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(a)) if a.len() == 1 && a[0].is_string() => {
            Ok(Prompt::Text(a[0].as_str().unwrap_or_default().to_string()))
        }
        Some(Value::Array(a)) if !a.is_empty() && a.iter().all(Value::is_number) => a
            .iter()
            .map(|v| {
                v.as_i64()
                    .and_then(|t| i32::try_from(t).ok())
                    .ok_or_else(|| {
                        ApiError::bad_request(format!("'prompt' token {v} is not a token id"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Prompt::Tokens),
        Some(Value::Array(_)) => Err(ApiError::bad_request(
            "'prompt' must be a string, an array of one string, or an array of token ids",
        )),
        Some(v) => Err(wrong("prompt", "a string or an array of token ids", v)),
    }
}

/// `/v1/chat/completions`: the messages (content a string or text parts).
pub fn parse_messages(m: &Map<String, Value>) -> Result<Vec<Message>, ApiError> {
    let arr = match m.get("messages") {
        None | Some(Value::Null) => return Err(ApiError::bad_request("'messages' is required")),
        Some(Value::Array(a)) => a,
        Some(v) => return Err(wrong("messages", "an array", v)),
    };
    if arr.is_empty() {
        return Err(ApiError::bad_request(
            "'messages' must hold at least one message",
        ));
    }
    arr.iter()
        .enumerate()
        .map(|(i, v)| {
            let o = v
                .as_object()
                .ok_or_else(|| wrong(&format!("messages[{i}]"), "an object", v))?;
            let role = match o.get("role") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => return Err(wrong(&format!("messages[{i}].role"), "a string", v)),
                None => return Err(ApiError::bad_request(format!("messages[{i}] has no 'role'"))),
            };
            let content = match o.get("content") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => {
                    let mut s = String::new();
                    for (k, p) in parts.iter().enumerate() {
                        match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                            (Some("text"), Some(t)) => s.push_str(t),
                            _ => {
                                return Err(ApiError::bad_request(format!(
                                    "messages[{i}].content[{k}]: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported"
                                )))
                            }
                        }
                    }
                    s
                }
                Some(v) => return Err(wrong(&format!("messages[{i}].content"), "a string or an array of parts", v)),
            };
            Ok(Message { role, content })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn defaults_and_fields() {
        let p = parse_params(&obj(json!({}))).unwrap();
        assert_eq!(
            (p.temperature, p.top_k, p.top_p, p.min_p),
            (0.8, 40, 0.95, 0.05)
        );
        assert_eq!(p.max_tokens, None);
        let p = parse_params(&obj(
            json!({"max_tokens": 5, "temperature": 0, "seed": 3, "stop": "x", "stream": true}),
        ))
        .unwrap();
        assert_eq!(
            (p.max_tokens, p.temperature, p.seed, p.stream),
            (Some(5), 0.0, Some(3), true)
        );
        assert_eq!(p.stop, vec!["x".to_string()]);
        assert_eq!(p.logprobs, None);
        let lp = |v: Value| parse_params(&obj(v)).map(|p| p.logprobs);
        assert_eq!(lp(json!({"logprobs": 3})).unwrap(), Some(3));
        assert_eq!(
            lp(json!({"logprobs": true, "top_logprobs": 2})).unwrap(),
            Some(2)
        );
        assert_eq!(lp(json!({"logprobs": true})).unwrap(), Some(0));
        assert_eq!(lp(json!({"n_probs": 4})).unwrap(), Some(4));
        assert!(lp(json!({"logprobs": 21}))
            .unwrap_err()
            .message
            .contains("at most 20"));
        assert!(lp(json!({"logprobs": "x"})).is_err());
        assert!(!parse_params(&obj(json!({}))).unwrap().post_sampling_probs);
        assert!(
            parse_params(&obj(json!({"post_sampling_probs": true})))
                .unwrap()
                .post_sampling_probs
        );
        assert!(parse_params(&obj(json!({"post_sampling_probs": 1})))
            .unwrap_err()
            .message
            .contains("'post_sampling_probs' must be a boolean"));
    }

    #[test]
    fn wrong_types_name_the_field() {
        let e = parse_params(&obj(json!({"temperature": "hot"}))).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        assert!(
            e.message
                .contains("'temperature' must be a number, not a string"),
            "{}",
            e.message
        );
        let e = parse_params(&obj(json!({"max_tokens": -3}))).unwrap_err();
        assert!(e.message.contains("'max_tokens' is -3"), "{}", e.message);
        let e = parse_params(&obj(json!({"stop": [1]}))).unwrap_err();
        assert!(
            e.message.contains("'stop[]' must be a string"),
            "{}",
            e.message
        );
        assert_eq!(parse_params(&obj(json!({"n": 3}))).unwrap().n, 3);
        assert_eq!(parse_params(&obj(json!({}))).unwrap().n, 1);
        let e = parse_params(&obj(json!({"n": 0}))).unwrap_err();
        assert!(e.message.contains("'n' is 0"), "{}", e.message);
        let e = parse_params(&obj(json!({"n": 2, "stream": true}))).unwrap_err();
        assert!(e.message.contains("not streamed"), "{}", e.message);
        assert!(parse_object(b"{not json")
            .unwrap_err()
            .message
            .contains("not valid JSON"));
        assert!(parse_object(b"[1]")
            .unwrap_err()
            .message
            .contains("not an array"));
        assert!(parse_prompt(&obj(json!({"prompt": 5}))).is_err());
        assert_eq!(
            parse_prompt(&obj(json!({"prompt": [1, 2]}))).unwrap(),
            Prompt::Tokens(vec![1, 2])
        );
        let e = parse_messages(&obj(json!({"messages": [{"role": "user", "content": 3}]})))
            .unwrap_err();
        assert!(e.message.contains("messages[0].content"), "{}", e.message);
        let m = parse_messages(&obj(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}))).unwrap();
        assert_eq!(m[0].content, "ab");
    }
}
