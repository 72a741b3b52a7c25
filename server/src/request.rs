//! Request bodies of the generation endpoints, checked field by field so
//! that a bad field gets a 400 naming it (rather than a serde message).

use serde_json::{Map, Value};

use crate::chat_fallback::Message;
use crate::constraint::Constraint;
use crate::error::ApiError;
use crate::json::type_name;

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
    /// `repeat_penalty` (the server's `--repeat-penalty`, 1.0: off).
    pub repeat_penalty: f32,
    /// `repeat_last_n` (the server's `--repeat-last-n`).
    pub repeat_last_n: usize,
    /// `n_keep`: prompt tokens kept when the context shifts (-1: all; the
    /// server's `--keep`).
    pub n_keep: i64,
    /// `cache_prompt` (true): reuse the slot's cached prefix of the prompt.
    pub cache_prompt: bool,
    /// `id_slot`: the slot to run in (`None` or -1: the idle slot with the
    /// longest common prefix).
    pub id_slot: Option<usize>,
    /// `response_fields` of `/completion`: only these fields (`a/b` reaches
    /// into an object) are answered.
    pub response_fields: Vec<String>,
    /// `timings_per_token`: streamed chunks carry the timings so far.
    pub timings_per_token: bool,
    /// `ignore_eos`: generate past the end-of-generation token.
    pub ignore_eos: bool,
    /// `grammar` / `json_schema` / `response_format`, compiled (set by the
    /// handler with [`crate::constraint::from_request`]; `None`: free text).
    pub constraint: Option<Constraint>,
    /// llama.cpp's `speculative.n_max`: most draft tokens per verify batch
    /// (the server's `--draft-max`; 0: no speculation for the request).
    pub spec_n_max: usize,
    /// `speculative.n_min`: a draft shorter than this is not verified
    /// (`--draft-min`; at most `speculative.n_max`).
    pub spec_n_min: usize,
    /// `speculative.p_min`: the draft model's least probability (greedy;
    /// `--draft-p-min`).
    pub spec_p_min: f32,
}

/// The server's generation defaults (its sampling flags), for fields a
/// request leaves out.
#[derive(Clone, Debug, PartialEq)]
pub struct Defaults {
    /// `--temp`.
    pub temperature: f32,
    /// `--top-k`.
    pub top_k: i32,
    /// `--top-p`.
    pub top_p: f32,
    /// `--min-p`.
    pub min_p: f32,
    /// `--seed` (`None`: a fresh one per request).
    pub seed: Option<u64>,
    /// `--repeat-penalty`.
    pub repeat_penalty: f32,
    /// `--repeat-last-n`.
    pub repeat_last_n: usize,
    /// `--keep`.
    pub n_keep: i64,
    /// `--draft-max`.
    pub spec_n_max: usize,
    /// `--draft-min`.
    pub spec_n_min: usize,
    /// `--draft-p-min`.
    pub spec_p_min: f32,
}

impl Default for Defaults {
    /// llama.cpp's defaults.
    fn default() -> Defaults {
        Defaults {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: None,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            n_keep: 0,
            spec_n_max: 3,
            spec_n_min: 0,
            spec_p_min: 0.0,
        }
    }
}

/// Most alternatives `logprobs` / `top_logprobs` may ask for.
pub const MAX_TOP_LOGPROBS: i64 = 20;

/// One piece of a prompt: text (tokenized) or a token id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Text, tokenized with the model's BOS rules when it opens the prompt.
    Text(String),
    /// A token id as given.
    Token(i32),
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

/// The sampling, stopping and streaming fields shared by the generation
/// endpoints, with llama.cpp's defaults.
pub fn parse_params(m: &Map<String, Value>) -> Result<GenParams, ApiError> {
    parse_params_with(m, &Defaults::default())
}

/// [`parse_params`] with the server's defaults `d` for absent fields.
pub fn parse_params_with(m: &Map<String, Value>, d: &Defaults) -> Result<GenParams, ApiError> {
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
    // speculative decoding, as llama.cpp's server reads it: n_min at most n_max
    let spec_n_max = opt_int(m, "speculative.n_max", 0)?.map_or(d.spec_n_max, |n| n as usize);
    let spec_n_min = opt_int(m, "speculative.n_min", 0)?
        .map_or(d.spec_n_min, |n| n as usize)
        .min(spec_n_max);
    let spec_p_min = opt_f32(m, "speculative.p_min", 0.0, 1.0)?.unwrap_or(d.spec_p_min);
    if spec_p_min != d.spec_p_min {
        return Err(ApiError::bad_request(format!(
            "'speculative.p_min' is {spec_p_min}: a draft probability per request is not implemented; the server drafts with --draft-p-min {}",
            d.spec_p_min
        )));
    }
    Ok(GenParams {
        model,
        max_tokens,
        temperature: opt_f32(m, "temperature", 0.0, 100.0)?.unwrap_or(d.temperature),
        top_p: opt_f32(m, "top_p", 0.0, 1.0)?.unwrap_or(d.top_p),
        top_k: opt_int(m, "top_k", -1)?.map_or(d.top_k, |k| k.min(i32::MAX as i64) as i32),
        min_p: opt_f32(m, "min_p", 0.0, 1.0)?.unwrap_or(d.min_p),
        seed: match opt_int(m, "seed", i64::MIN)? {
            // llama.cpp's LLAMA_DEFAULT_SEED (0xFFFFFFFF) is "random" too
            Some(s) if s >= 0 && s != 0xFFFF_FFFF => Some(s as u64),
            Some(_) => None,
            None => d.seed,
        },
        stop,
        stream: opt_bool(m, "stream")?.unwrap_or(false),
        n: usize::try_from(n).unwrap_or(usize::MAX),
        return_tokens: opt_bool(m, "return_tokens")?.unwrap_or(false),
        logprobs: parse_logprobs(m)?,
        post_sampling_probs: opt_bool(m, "post_sampling_probs")?.unwrap_or(false),
        repeat_penalty: opt_f32(m, "repeat_penalty", 0.0, 100.0)?.unwrap_or(d.repeat_penalty),
        repeat_last_n: match opt_int(m, "repeat_last_n", -1)? {
            Some(n) if n >= 0 => n as usize,
            _ => d.repeat_last_n,
        },
        n_keep: opt_int(m, "n_keep", -1)?.unwrap_or(d.n_keep),
        cache_prompt: opt_bool(m, "cache_prompt")?.unwrap_or(true),
        id_slot: match opt_int(m, "id_slot", -1)? {
            Some(n) if n >= 0 => Some(n as usize),
            _ => None,
        },
        response_fields: match m.get("response_fields") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    v => Err(wrong("response_fields[]", "a string", v)),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => return Err(wrong("response_fields", "an array of strings", v)),
        },
        timings_per_token: opt_bool(m, "timings_per_token")?.unwrap_or(false),
        ignore_eos: opt_bool(m, "ignore_eos")?.unwrap_or(false),
        constraint: None,
        spec_n_max,
        spec_n_min,
        spec_p_min,
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

/// The prompts of `/completion`, `/v1/completions` and the embedding
/// endpoints (field `key`), as llama.cpp reads them: a string; an array of
/// token ids and strings (one prompt, its pieces joined); or an array of
/// strings and such arrays (several prompts).
pub fn parse_prompts(m: &Map<String, Value>, key: &str) -> Result<Vec<Vec<Piece>>, ApiError> {
    let piece = |v: &Value, at: &str| -> Result<Piece, ApiError> {
        match v {
            Value::String(s) => Ok(Piece::Text(s.clone())),
            Value::Number(n) => n
                .as_i64()
                .and_then(|t| i32::try_from(t).ok())
                .map(Piece::Token)
                .ok_or_else(|| ApiError::bad_request(format!("'{at}': {v} is not a token id"))),
            v => Err(wrong(at, "a string or a token id", v)),
        }
    };
    let mixed = |a: &[Value], at: &str| -> Result<Vec<Piece>, ApiError> {
        a.iter().map(|v| piece(v, at)).collect()
    };
    match m.get(key) {
        None | Some(Value::Null) => Err(ApiError::bad_request(format!("'{key}' is required"))),
        Some(Value::String(s)) => Ok(vec![vec![Piece::Text(s.clone())]]),
        Some(Value::Array(a)) if a.is_empty() => {
            Err(ApiError::bad_request(format!("'{key}' is an empty array")))
        }
        // token ids, possibly mixed with strings: one prompt
        Some(Value::Array(a)) if a.iter().any(Value::is_number) => {
            Ok(vec![mixed(a, &format!("{key}[]"))?])
        }
        // several prompts: strings and arrays of token ids / strings
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(vec![Piece::Text(s.clone())]),
                Value::Array(inner) if !inner.is_empty() => mixed(inner, &format!("{key}[{i}]")),
                v => Err(wrong(
                    &format!("{key}[{i}]"),
                    "a string or a non-empty array of token ids",
                    v,
                )),
            })
            .collect(),
        Some(v) => Err(wrong(key, "a string or an array of token ids", v)),
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
            let mut extra = Map::new();
            for (k, v) in o {
                if k == "role" || k == "content" {
                    continue;
                }
                let v = if k == "tool_calls" { tool_calls_for_template(v) } else { v.clone() };
                extra.insert(k.clone(), v);
            }
            Ok(Message { role, content, extra })
        })
        .collect()
}

/// An assistant message's `tool_calls` as chat templates read them: each
/// `function.arguments` JSON string parsed into an object (kept as given
/// when it is not JSON).
fn tool_calls_for_template(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(calls) = v.as_array_mut() {
        for c in calls {
            if let Some(a) = c.pointer_mut("/function/arguments") {
                if let Some(parsed) = a
                    .as_str()
                    .and_then(|t| serde_json::from_str::<Value>(t).ok())
                {
                    *a = parsed;
                }
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_object;
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
        let pp = |v: Value| parse_prompts(&obj(json!({ "prompt": v })), "prompt");
        assert!(pp(json!(5)).is_err());
        assert!(pp(json!([])).unwrap_err().message.contains("empty array"));
        assert!(pp(json!([true])).unwrap_err().message.contains("prompt[0]"));
        assert_eq!(
            pp(json!([1, 2])).unwrap(),
            vec![vec![Piece::Token(1), Piece::Token(2)]]
        );
        // mixed ids and text: one prompt
        assert_eq!(
            pp(json!([1, "a", 2])).unwrap(),
            vec![vec![
                Piece::Token(1),
                Piece::Text("a".into()),
                Piece::Token(2)
            ]]
        );
        // several prompts
        assert_eq!(
            pp(json!([[1, 2], "a"])).unwrap(),
            vec![
                vec![Piece::Token(1), Piece::Token(2)],
                vec![Piece::Text("a".into())]
            ]
        );
        assert_eq!(pp(json!(["a"])).unwrap().len(), 1);
        // the server's defaults fill absent fields
        let d = Defaults {
            temperature: 0.0,
            seed: Some(42),
            ..Defaults::default()
        };
        let p = parse_params_with(&obj(json!({})), &d).unwrap();
        assert_eq!((p.temperature, p.seed), (0.0, Some(42)));
        let p = parse_params_with(
            &obj(json!({"seed": -1, "id_slot": 1, "cache_prompt": false})),
            &d,
        )
        .unwrap();
        assert_eq!((p.seed, p.id_slot, p.cache_prompt), (None, Some(1), false));
        let e = parse_messages(&obj(json!({"messages": [{"role": "user", "content": 3}]})))
            .unwrap_err();
        assert!(e.message.contains("messages[0].content"), "{}", e.message);
        let m = parse_messages(&obj(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}))).unwrap();
        assert_eq!(m[0].content, "ab");
    }
}
