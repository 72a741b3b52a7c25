//! llama.cpp's native answers: `/completion`'s result and stream chunks
//! (`content`, `tokens`, `stop`, `stop_type`, `timings`,
//! `generation_settings`, `completion_probabilities`, ...),
//! `response_fields` filtering, and the `params` object of generation
//! settings that `/props` and `/slots` show too.

use serde_json::{json, Map, Value};

use crate::answer::{detokenize_special, logprobs_json, timings_json, Answer, Collected, Kind};
use crate::engine::{Timings, TokenLogprobs};
use crate::request::GenParams;
use crate::state::AppState;

/// llama.cpp's `LLAMA_DEFAULT_SEED`: the seed shown when each request draws its own.
pub const DEFAULT_SEED: u64 = 0xFFFF_FFFF;

/// The generation settings of a request (`generation_settings`, and
/// `params` of `/props` and `/slots`).
pub fn params_json(p: &GenParams, n_predict: i64) -> Value {
    json!({
        "n_predict": n_predict,
        "seed": p.seed.unwrap_or(DEFAULT_SEED),
        "temperature": p.temperature,
        "top_k": p.top_k,
        "top_p": p.top_p,
        "min_p": p.min_p,
        "repeat_penalty": p.repeat_penalty,
        "repeat_last_n": p.repeat_last_n,
        "n_keep": p.n_keep,
        "n_probs": p.logprobs.unwrap_or(0),
        "post_sampling_probs": p.post_sampling_probs,
        "stop": p.stop,
        "stream": p.stream,
        "ignore_eos": p.ignore_eos,
        "timings_per_token": p.timings_per_token,
        "cache_prompt": p.cache_prompt,
        "speculative.n_max": p.spec_n_max,
        "speculative.n_min": p.spec_n_min,
        "speculative.p_min": p.spec_p_min,
    })
}

/// `generation_settings` of an answer.
fn generation_settings(st: &AppState, a: &Answer) -> Value {
    let mut g = params_json(&a.params, a.n_predict);
    g["n_ctx"] = json!(st.n_slot_ctx);
    g["model"] = json!(st.model_id);
    g
}

/// `completion_probabilities` of tokens.
fn probabilities(st: &AppState, a: &Answer, lps: &[(i32, TokenLogprobs, usize)]) -> Value {
    logprobs_json(st, Kind::Native, a.params.post_sampling_probs, lps)["content"].take()
}

/// The last answer of `/completion` (whole, or the stream's last chunk).
pub(crate) fn final_json(st: &AppState, a: &Answer, c: &Collected, index: usize) -> Value {
    let u = &c.usage;
    let mut v = json!({
        "index": index,
        "content": c.text,
        "tokens": if a.params.return_tokens { c.tokens.clone() } else { Vec::new() },
        "id_slot": u.id_slot,
        "stop": true,
        "model": st.model_id,
        "tokens_predicted": u.completion_tokens,
        "tokens_evaluated": u.prompt_tokens,
        "generation_settings": generation_settings(st, a),
        "prompt": detokenize_special(st, &a.prompt),
        "has_new_line": c.text.contains('\n'),
        "truncated": u.truncated,
        "stop_type": u.stop_type,
        "stopping_word": u.stopping_word,
        "tokens_cached": u.prompt_tokens + u.completion_tokens,
        "timings": timings_json(&u.timings),
    });
    if a.params.logprobs.is_some() {
        v["completion_probabilities"] = probabilities(st, a, &c.lps);
    }
    if a.params.response_fields.is_empty() {
        v
    } else {
        select_fields(&v, &a.params.response_fields)
    }
}

/// One streamed token of `/completion`.
pub(crate) fn stream_chunk(
    st: &AppState,
    a: &Answer,
    text: &str,
    id: i32,
    lp: Option<&TokenLogprobs>,
    t: &Timings,
) -> axum::response::sse::Event {
    let mut v = json!({
        "index": 0,
        "content": text,
        "tokens": [id],
        "stop": false,
        "id_slot": -1,
        "tokens_predicted": t.predicted_n,
        "tokens_evaluated": a.prompt.len(),
    });
    if let Some(l) = lp {
        v["completion_probabilities"] = probabilities(st, a, &[(id, l.clone(), 0)]);
    }
    if a.params.timings_per_token {
        v["timings"] = timings_json(t);
    }
    axum::response::sse::Event::default().data(v.to_string())
}

/// llama.cpp's `response_fields`: only the listed fields, each under its
/// path as the key (`generation_settings/n_predict`); absent ones left out.
pub fn select_fields(v: &Value, fields: &[String]) -> Value {
    let mut out = Map::new();
    for f in fields {
        let ptr = format!("/{}", f.trim_start_matches('/'));
        if let Some(x) = v.pointer(&ptr) {
            out.insert(f.clone(), x.clone());
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_fields_by_path() {
        let v = json!({"content": "x", "generation_settings": {"n_predict": 8}, "prompt": "p"});
        let f =
            |fs: &[&str]| select_fields(&v, &fs.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            f(&["content", "generation_settings/n_predict"]),
            json!({"content": "x", "generation_settings/n_predict": 8})
        );
        assert_eq!(f(&["nope"]), json!({}));
    }
}
