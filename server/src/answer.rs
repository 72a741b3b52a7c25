//! What an answer is made of, for both OpenAI's JSON ([`crate::http`]) and
//! llama.cpp's native one ([`crate::native`]): which endpoint it answers
//! (`Kind`), its description (`Answer`), a finished choice
//! (`Collected`), and the objects both write: `timings`, `logprobs`,
//! token pieces, the prompt with its special tokens.

use serde_json::{json, Map, Value};

use crate::engine::{Timings, TokenLogprobs, Usage};
use crate::request::GenParams;
use crate::state::AppState;
use crate::tools::ToolFormat;

/// `system_fingerprint` of OpenAI answers: `b` (llama.cpp's build-number
/// prefix) and this build's version.
pub const SYSTEM_FINGERPRINT: &str = concat!("b", env!("CARGO_PKG_VERSION"), "-ggml-rs");

/// Which endpoint a generation answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Completion,
    Chat,
    /// llama.cpp's `/completion`.
    Native,
}

/// What an answer carries besides the generated tokens.
#[derive(Clone)]
pub(crate) struct Answer {
    pub kind: Kind,
    pub id: String,
    /// The model name answered.
    pub model: String,
    /// The prompt's tokens (after truncation).
    pub prompt: Vec<i32>,
    /// `generation_settings.n_predict` (-1: none).
    pub n_predict: i64,
    /// The request's parameters.
    pub params: GenParams,
    /// The tool call format to parse the answer with (chat with tools).
    pub tools: Option<ToolFormat>,
}

/// One finished choice.
pub(crate) struct Collected {
    pub text: String,
    pub tokens: Vec<i32>,
    /// (id, log-probabilities, byte offset of its text)
    pub lps: Vec<(i32, TokenLogprobs, usize)>,
    pub usage: Usage,
}

/// A prompt's text with its special tokens (`__verbose`, `prompt`).
pub(crate) fn detokenize_special(st: &AppState, toks: &[i32]) -> String {
    st.model
        .tokenizer
        .detokenize_lossy(toks, false, true)
        .unwrap_or_default()
}

/// llama.cpp's `timings` object.
pub(crate) fn timings_json(t: &Timings) -> Value {
    let per = |n: usize, ms: f64| if n == 0 { 0.0 } else { ms / n as f64 };
    let rate = |n: usize, ms: f64| if ms <= 0.0 { 0.0 } else { 1e3 * n as f64 / ms };
    let mut v = json!({
        "prompt_n": t.prompt_n,
        "prompt_ms": t.prompt_ms,
        "prompt_per_token_ms": per(t.prompt_n, t.prompt_ms),
        "prompt_per_second": rate(t.prompt_n, t.prompt_ms),
        "predicted_n": t.predicted_n,
        "predicted_ms": t.predicted_ms,
        "predicted_per_token_ms": per(t.predicted_n, t.predicted_ms),
        "predicted_per_second": rate(t.predicted_n, t.predicted_ms),
    });
    // the expert cache while the request ran (the web page shows its hit
    // rate); only in a finished request's timings
    if let Some((h, m)) = t.expert_cache {
        v["expert_cache"] = json!({
            "hits": h,
            "misses": m,
            "hit_rate": if h + m == 0 { 0.0 } else { h as f64 / (h + m) as f64 },
        });
    }
    // speculative decoding (llama.cpp's names; only when the server speculates)
    if let Some((n, accepted)) = t.draft {
        v["draft_n"] = json!(n);
        v["draft_n_accepted"] = json!(accepted);
    }
    v
}

/// A token's text (lossy) and its bytes.
pub(crate) fn piece(st: &AppState, id: i32) -> (String, Vec<u8>) {
    let b = st.model.tokenizer.token_to_piece(id, false);
    (String::from_utf8_lossy(&b).into_owned(), b)
}

/// OpenAI's `logprobs` object of the tokens `lps` (id, log-probabilities,
/// byte offset of the token's text in the completion):
/// - completions: OpenAI's `tokens` / `token_logprobs` / `top_logprobs`
///   (one `{text: logprob}` map per token) / `text_offset` arrays, and
///   llama.cpp's `content` list (`id`, `token`, `bytes`, `logprob`,
///   `top_logprobs`; with `post_sampling_probs`, llama.cpp's `prob` and
///   `top_probs` there, linear probabilities);
/// - chat: OpenAI's `content` list (`token`, `logprob`, `bytes`,
///   `top_logprobs`) and `refusal: null`.
pub(crate) fn logprobs_json(
    st: &AppState,
    kind: Kind,
    post: bool,
    lps: &[(i32, TokenLogprobs, usize)],
) -> Value {
    let entry = |id: i32, lp: f32, with_id: bool| {
        let (t, b) = piece(st, id);
        let mut e = json!({"token": t, "bytes": b});
        if with_id {
            e["id"] = json!(id);
        }
        if with_id && post {
            e["prob"] = json!(lp.exp());
        } else {
            e["logprob"] = json!(lp);
        }
        e
    };
    let content = |with_id: bool| -> Vec<Value> {
        lps.iter()
            .map(|(id, l, _)| {
                let mut e = entry(*id, l.logprob, with_id);
                let top: Vec<Value> = l.top.iter().map(|&(a, p)| entry(a, p, with_id)).collect();
                e[if with_id && post {
                    "top_probs"
                } else {
                    "top_logprobs"
                }] = json!(top);
                e
            })
            .collect()
    };
    match kind {
        Kind::Completion | Kind::Native => {
            let tops: Vec<Value> = lps
                .iter()
                .map(|(_, l, _)| {
                    let m: Map<String, Value> = l
                        .top
                        .iter()
                        .map(|&(t, p)| (piece(st, t).0, json!(p)))
                        .collect();
                    Value::Object(m)
                })
                .collect();
            json!({
                "tokens": lps.iter().map(|(id, _, _)| piece(st, *id).0).collect::<Vec<_>>(),
                "token_logprobs": lps.iter().map(|(_, l, _)| l.logprob).collect::<Vec<_>>(),
                "top_logprobs": tops,
                "text_offset": lps.iter().map(|(_, _, o)| *o).collect::<Vec<_>>(),
                "content": content(true),
            })
        }
        Kind::Chat => json!({ "content": content(false), "refusal": null }),
    }
}
