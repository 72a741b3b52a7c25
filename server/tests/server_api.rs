//! llama-server end to end on the embedded default model, on a free
//! loopback port: curl and the official `openai` Python package (installed
//! into target/ by the test; skipped with a message when it cannot be)
//! drive completion, chat, streaming, models, health, tokenize and metrics;
//! 8 concurrent greedy streams equal the same requests run alone; and each
//! fault (malformed JSON, wrong types, a 1 MB prompt, a wrong key, a full
//! queue, a client killed mid-stream) gets its status while the next
//! request succeeds. llama.cpp's native API (`/completion`, `/props`,
//! `/slots`, `/apply-template`, CORS, context shift, tool calls) and its
//! bad input (a slot action on a missing file, an unknown tool format)
//! are checked in `native_api_and_bad_input`.

mod common;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{python_with_openai, start, Server};
use serde_json::{json, Value};

const KEY: &str = "sk-test-key";

/// `curl` a path: (status, body). `body` None = GET.
fn curl(s: &Server, path: &str, body: Option<&str>, key: Option<&str>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "--max-time", "60", "-w", "\n%{http_code}"]);
    if let Some(k) = key {
        c.args(["-H", &format!("Authorization: Bearer {k}")]);
    }
    if let Some(b) = body {
        let f = tmp_file(b);
        c.args(["-H", "Content-Type: application/json", "--data-binary"]);
        c.arg(format!("@{}", f.display()));
    }
    c.arg(format!("{}{path}", s.base));
    let out = c.output().expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("curl output");
    (code.trim().parse().expect("status code"), body.to_string())
}

fn tmp_file(content: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let p = std::env::temp_dir().join(format!(
        "llama-server-test-{}-{}.json",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&p, content).expect("write body");
    p
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Tokens and text of an SSE stream of chunks with `return_tokens`.
fn parse_stream(body: &str) -> (Vec<i32>, String, Option<String>) {
    let (mut toks, mut text, mut finish) = (Vec::new(), String::new(), None);
    let mut done = false;
    for line in body.lines() {
        let Some(d) = line.strip_prefix("data: ") else {
            continue;
        };
        if d == "[DONE]" {
            done = true;
            continue;
        }
        let v = json_of(d);
        let c = &v["choices"][0];
        if let Some(t) = c["tokens"].as_array() {
            toks.extend(t.iter().map(|x| x.as_i64().unwrap() as i32));
        }
        if let Some(t) = c["text"].as_str().or(c["delta"]["content"].as_str()) {
            text.push_str(t);
        }
        if let Some(f) = c["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    assert!(done, "stream without [DONE]: {body}");
    (toks, text, finish)
}

fn metric(s: &Server, name: &str) -> f64 {
    let (code, body) = curl(s, "/metrics", None, Some(KEY));
    assert_eq!(code, 200, "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
        .unwrap_or_else(|| panic!("no metric {name}: {body}"))
        .parse()
        .expect("metric value")
}

fn ok_completion(s: &Server) {
    let (code, body) = curl(
        s,
        "/v1/completions",
        Some(r#"{"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}"#),
        Some(KEY),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(json_of(&body)["usage"]["completion_tokens"], 4);
}

fn stream_req(prompt: &str) -> String {
    json!({"prompt": prompt, "max_tokens": 24, "temperature": 0, "stream": true, "return_tokens": true}).to_string()
}

#[test]
fn server_end_to_end() {
    if Command::new("curl").arg("--version").output().is_err() {
        println!("SKIP: curl is not installed");
        return;
    }
    let t0 = Instant::now();
    let s = start(&["-np", "8", "-c", "4096", "--api-key", KEY]);

    // health, models, tokenize/detokenize
    let (code, body) = curl(&s, "/health", None, None);
    assert_eq!((code, json_of(&body)["status"].as_str()), (200, Some("ok")));
    let (code, body) = curl(&s, "/v1/models", None, Some(KEY));
    assert_eq!(code, 200, "{body}");
    let models = json_of(&body);
    let model_id = models["data"][0]["id"]
        .as_str()
        .expect("model id")
        .to_string();
    assert_eq!(models["object"], "list");
    let (code, body) = curl(
        &s,
        "/tokenize",
        Some(r#"{"content": "Once upon a time"}"#),
        Some(KEY),
    );
    assert_eq!(code, 200, "{body}");
    let toks = json_of(&body)["tokens"].clone();
    assert!(!toks.as_array().unwrap().is_empty());
    let (code, body) = curl(
        &s,
        "/detokenize",
        Some(&json!({"tokens": toks}).to_string()),
        Some(KEY),
    );
    assert_eq!(
        (code, json_of(&body)["content"].as_str()),
        (200, Some("Once upon a time"))
    );

    // completion: greedy, max_tokens, the same twice (the second reuses the cached prefix)
    let req = json!({"model": model_id, "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "return_tokens": true}).to_string();
    let (code, body) = curl(&s, "/v1/completions", Some(&req), Some(KEY));
    assert_eq!(code, 200, "{body}");
    let a = json_of(&body);
    assert_eq!(a["object"], "text_completion");
    assert_eq!(a["choices"][0]["finish_reason"], "length");
    assert_eq!(a["usage"]["completion_tokens"], 12);
    let (_, body) = curl(&s, "/v1/completions", Some(&req), Some(KEY));
    let b = json_of(&body);
    assert_eq!(a["choices"][0]["tokens"], b["choices"][0]["tokens"]);
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    assert!(metric(&s, "prompt_cache_hit_ratio") > 0.0);
    // stop strings cut the text before the stop
    let text = a["choices"][0]["text"].as_str().unwrap().to_string();
    let stop: String = text.chars().skip(3).take(2).collect();
    if !stop.trim().is_empty() {
        let req = json!({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "stop": [stop]}).to_string();
        let (_, body) = curl(&s, "/v1/completions", Some(&req), Some(KEY));
        let c = json_of(&body);
        let cut = &text[..text.find(&stop).unwrap()];
        assert_eq!(c["choices"][0]["text"].as_str(), Some(cut), "stop {stop:?}");
        assert_eq!(c["choices"][0]["finish_reason"], "stop");
    }
    // streaming gives the same tokens as the plain answer
    let sreq = json!({"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "stream": true, "return_tokens": true}).to_string();
    let (code, body) = curl(&s, "/v1/completions", Some(&sreq), Some(KEY));
    assert_eq!(code, 200);
    let (st, stext, fin) = parse_stream(&body);
    assert_eq!(json!(st), a["choices"][0]["tokens"]);
    assert_eq!(Some(stext.as_str()), a["choices"][0]["text"].as_str());
    assert_eq!(fin.as_deref(), Some("length"));
    // logprobs: greedy picks the most likely token, so its logprob is the top one
    let req =
        json!({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "logprobs": 3})
            .to_string();
    let (code, body) = curl(&s, "/v1/completions", Some(&req), Some(KEY));
    assert_eq!(code, 200, "{body}");
    let lp = &json_of(&body)["choices"][0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().map(Vec::len), Some(5), "{lp}");
    for (i, top) in lp["top_logprobs"].as_array().unwrap().iter().enumerate() {
        let top = top.as_object().unwrap();
        assert!(top.len() <= 3 && !top.is_empty());
        let chosen = lp["token_logprobs"][i].as_f64().unwrap();
        let best = top
            .values()
            .map(|v| v.as_f64().unwrap())
            .fold(f64::MIN, f64::max);
        assert!(chosen <= 0.0 && (chosen - best).abs() < 1e-6, "{lp}");
    }
    // text_offset: the byte offset of each token's text, 0 first, growing;
    // the stream's per-chunk offsets equal the whole answer's
    let offs = lp["text_offset"].clone();
    assert_eq!(offs[0], 0, "{lp}");
    let o: Vec<u64> = offs
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(o.windows(2).all(|w| w[0] <= w[1]), "{lp}");
    // llama.cpp's `content` list beside OpenAI's arrays, same numbers
    assert_eq!(lp["content"].as_array().map(Vec::len), Some(5), "{lp}");
    assert_eq!(lp["content"][0]["logprob"], lp["token_logprobs"][0]);
    assert!(lp["content"][0]["id"].is_i64() && lp["content"][0]["bytes"].is_array());
    let mut sreq: Value = serde_json::from_str(&req).unwrap();
    sreq["stream"] = json!(true);
    let (_, body) = curl(&s, "/v1/completions", Some(&sreq.to_string()), Some(KEY));
    let streamed: Vec<u64> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| json_of(d)["choices"][0]["logprobs"]["text_offset"][0].as_u64())
        .collect();
    assert_eq!(streamed, o, "{body}");
    // post_sampling_probs (llama.cpp's): the distribution the token was
    // drawn from. Greedy: the chosen token with probability 1, and (as
    // llama.cpp lists n alternatives) the next ones at probability 0.
    let req = json!({"prompt": "Once upon a time", "max_tokens": 3, "temperature": 0, "logprobs": 3, "post_sampling_probs": true});
    let (code, body) = curl(&s, "/v1/completions", Some(&req.to_string()), Some(KEY));
    assert_eq!(code, 200, "{body}");
    let lp = &json_of(&body)["choices"][0]["logprobs"];
    assert_eq!(lp["token_logprobs"], json!([0.0, 0.0, 0.0]), "{lp}");
    assert_eq!(lp["content"][0]["prob"], 1.0, "{lp}");
    assert_eq!(
        lp["content"][0]["top_probs"].as_array().map(Vec::len),
        Some(3),
        "{lp}"
    );
    assert_eq!(lp["content"][0]["top_probs"][1]["prob"], 0.0, "{lp}");
    // sampled with top-k 3: 5 alternatives, at most 3 above 0, summing to 1
    let req = json!({"prompt": "Once upon a time", "max_tokens": 6, "temperature": 1.0, "top_k": 3, "top_p": 1.0, "min_p": 0.0, "seed": 5, "logprobs": 5, "post_sampling_probs": true});
    let (code, body) = curl(&s, "/v1/completions", Some(&req.to_string()), Some(KEY));
    assert_eq!(code, 200, "{body}");
    let v = json_of(&body);
    for c in v["choices"][0]["logprobs"]["content"].as_array().unwrap() {
        let top = c["top_probs"].as_array().unwrap();
        assert_eq!(top.len(), 5, "{c}");
        let kept = top
            .iter()
            .filter(|t| t["prob"].as_f64() > Some(0.0))
            .count();
        assert!((1..=3).contains(&kept), "{c}");
        let sum: f64 = top.iter().map(|t| t["prob"].as_f64().unwrap()).sum();
        assert!(
            (sum - 1.0).abs() < 1e-4,
            "post-sampling probabilities sum to {sum}: {c}"
        );
        assert!(
            top.iter().any(|t| t["id"] == c["id"]),
            "the chosen token is not in its distribution: {c}"
        );
    }
    // the same request without it: the model's 5 most likely, summing below 1
    let mut pre = req.clone();
    pre["post_sampling_probs"] = json!(false);
    let (_, body) = curl(&s, "/v1/completions", Some(&pre.to_string()), Some(KEY));
    let w = json_of(&body);
    assert_eq!(w["choices"][0]["tokens"], v["choices"][0]["tokens"]);
    for c in w["choices"][0]["logprobs"]["content"].as_array().unwrap() {
        let top = c["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 5, "{c}");
        let sum: f64 = top
            .iter()
            .map(|t| t["logprob"].as_f64().unwrap().exp())
            .sum();
        assert!(sum < 1.0 + 1e-6, "{c}");
    }
    let req = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0, "logprobs": true, "top_logprobs": 2});
    let (code, body) = curl(
        &s,
        "/v1/chat/completions",
        Some(&req.to_string()),
        Some(KEY),
    );
    assert_eq!(code, 200, "{body}");
    let content = json_of(&body)["choices"][0]["logprobs"]["content"].clone();
    assert_eq!(content.as_array().map(Vec::len), Some(3), "{content}");
    assert_eq!(content[0]["top_logprobs"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        content[0]["top_logprobs"][0]["logprob"],
        content[0]["logprob"]
    );
    assert!(content[0]["bytes"].is_array(), "{content}");
    assert_eq!(
        json_of(&body)["choices"][0]["logprobs"]["refusal"],
        Value::Null
    );
    // chat, plain and streamed
    let creq = json!({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0});
    let (code, body) = curl(
        &s,
        "/v1/chat/completions",
        Some(&creq.to_string()),
        Some(KEY),
    );
    assert_eq!(code, 200, "{body}");
    let c = json_of(&body);
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["choices"][0]["message"]["role"], "assistant");
    let mut sc = creq.clone();
    sc["stream"] = json!(true);
    let (_, body) = curl(&s, "/v1/chat/completions", Some(&sc.to_string()), Some(KEY));
    let (_, stext, _) = parse_stream(&body);
    assert_eq!(
        Some(stext.as_str()),
        c["choices"][0]["message"]["content"].as_str()
    );
    assert!(body.contains("\"role\":\"assistant\""));

    // n > 1: the choices share the prompt's cells (decoded once); greedy
    // choices all equal the request alone
    let one = json!({"prompt": "Several choices of one prompt", "max_tokens": 8, "temperature": 0, "return_tokens": true});
    let (code, body) = curl(&s, "/v1/completions", Some(&one.to_string()), Some(KEY));
    assert_eq!(code, 200, "{body}");
    let alone = json_of(&body);
    let mut three = one.clone();
    three["n"] = json!(3);
    three["prompt"] = json!("Three choices of one prompt");
    let prompt0 = metric(&s, "prompt_tokens_total");
    let (code, body) = curl(&s, "/v1/completions", Some(&three.to_string()), Some(KEY));
    assert_eq!(code, 200, "{body}");
    let v = json_of(&body);
    let decoded = metric(&s, "prompt_tokens_total") - prompt0;
    let u = &v["usage"];
    assert_eq!(
        decoded,
        (u["prompt_tokens"].as_u64().unwrap()
            - u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap()) as f64,
        "the prompt was not decoded once: {v}"
    );
    let (_, body) = curl(
        &s,
        "/v1/completions",
        Some(
            &{
                let mut x = three.clone();
                x["n"] = json!(1);
                x
            }
            .to_string(),
        ),
        Some(KEY),
    );
    let three_alone = json_of(&body);
    let ch = v["choices"].as_array().unwrap();
    assert_eq!(ch.len(), 3, "{v}");
    for (i, c) in ch.iter().enumerate() {
        assert_eq!(c["index"], i, "{v}");
        assert_eq!(
            c["tokens"], three_alone["choices"][0]["tokens"],
            "greedy choice {i}: {v}"
        );
        assert_eq!(c["text"], three_alone["choices"][0]["text"]);
    }
    assert_eq!(u["completion_tokens"], 24, "{v}");
    assert_eq!(alone["choices"].as_array().map(Vec::len), Some(1));
    // sampled choices draw apart; chat too
    let (code, body) = curl(&s, "/v1/completions", Some(&json!({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 1.5, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": 9, "n": 4, "return_tokens": true}).to_string()), Some(KEY));
    assert_eq!(code, 200, "{body}");
    let v = json_of(&body);
    let toks: Vec<&Value> = v["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["tokens"])
        .collect();
    assert_eq!(toks.len(), 4);
    assert!(
        toks.iter().any(|t| *t != toks[0]),
        "4 sampled choices all equal: {v}"
    );
    let (code, body) = curl(&s, "/v1/chat/completions", Some(&json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0, "n": 2}).to_string()), Some(KEY));
    assert_eq!(code, 200, "{body}");
    let v = json_of(&body);
    assert_eq!(v["choices"][1]["index"], 1, "{v}");
    assert_eq!(v["choices"][0]["message"], v["choices"][1]["message"]);
    for (req, msg) in [
        (
            json!({"prompt": "x", "n": 9}),
            "more choices than the server's 8 slots",
        ),
        (
            json!({"prompt": "x", "n": 2, "stream": true}),
            "not streamed",
        ),
    ] {
        let (code, body) = curl(&s, "/v1/completions", Some(&req.to_string()), Some(KEY));
        assert_eq!(code, 400, "{body}");
        assert!(
            json_of(&body)["error"]["message"]
                .as_str()
                .unwrap()
                .contains(msg),
            "{body}"
        );
    }
    ok_completion(&s);

    // 8 concurrent greedy streams, different prompts, each equal to itself alone
    let prompts: Vec<String> = (0..8)
        .map(|i| {
            format!(
                "Story {i}: the {} expert",
                ["red", "blue", "old", "tiny", "brave", "lost", "first", "last"][i]
            )
        })
        .collect();
    let alone: Vec<(Vec<i32>, String)> = prompts
        .iter()
        .map(|p| {
            let (code, body) = curl(&s, "/v1/completions", Some(&stream_req(p)), Some(KEY));
            assert_eq!(code, 200, "{body}");
            let (t, x, _) = parse_stream(&body);
            (t, x)
        })
        .collect();
    let decodes0 = metric(&s, "n_decode_total");
    let together: Vec<(Vec<i32>, String)> = std::thread::scope(|sc| {
        let hs: Vec<_> = prompts
            .iter()
            .map(|p| {
                let s = &s;
                sc.spawn(move || {
                    let (code, body) = curl(s, "/v1/completions", Some(&stream_req(p)), Some(KEY));
                    assert_eq!(code, 200, "{body}");
                    let (t, x, _) = parse_stream(&body);
                    (t, x)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    let decodes = metric(&s, "n_decode_total") - decodes0;
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        assert_eq!(a.0.len(), 24, "request {i} alone");
        assert_eq!(
            a, t,
            "request {i}: concurrent stream differs from the request alone"
        );
    }
    println!(
        "8 concurrent streams of 24 tokens in {decodes} decodes (alone: {} decodes)",
        8 * 25
    );
    assert!(
        decodes < 8.0 * 24.0,
        "the 8 streams were not batched: {decodes} decodes"
    );

    // faults, each followed by a request that succeeds
    let cases: [(&str, String, u16, &str); 5] = [
        (
            "/v1/completions",
            "{\"prompt\": \"x\", ".into(),
            400,
            "not valid JSON",
        ),
        (
            "/v1/completions",
            r#"{"prompt": "x", "max_tokens": "ten"}"#.into(),
            400,
            "'max_tokens' must be an integer",
        ),
        (
            "/v1/chat/completions",
            r#"{"messages": "hi"}"#.into(),
            400,
            "'messages' must be an array",
        ),
        (
            "/v1/completions",
            r#"{"prompt": 12.5}"#.into(),
            400,
            "'prompt' must be a string",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a".repeat(1 << 20)}).to_string(),
            400,
            "more than a slot's context",
        ),
    ];
    for (path, body, want, msg) in &cases {
        let (code, got) = curl(&s, path, Some(body), Some(KEY));
        assert_eq!(code, *want, "{path} {}: {got}", &body[..body.len().min(60)]);
        let e = json_of(&got);
        assert!(
            e["error"]["message"].as_str().unwrap_or("").contains(msg),
            "{got}"
        );
        assert_eq!(e["error"]["code"], *want);
        ok_completion(&s);
    }
    let (code, got) = curl(
        &s,
        "/v1/completions",
        Some(r#"{"prompt": "x"}"#),
        Some("sk-wrong"),
    );
    assert_eq!(code, 401, "{got}");
    assert_eq!(json_of(&got)["error"]["type"], "authentication_error");
    let (code, _) = curl(&s, "/v1/completions", Some(r#"{"prompt": "x"}"#), None);
    assert_eq!(code, 401);
    // max_tokens 0: no token, finish "length"
    let (code, got) = curl(
        &s,
        "/v1/completions",
        Some(r#"{"prompt": "x", "max_tokens": 0}"#),
        Some(KEY),
    );
    assert_eq!(code, 200, "{got}");
    let v = json_of(&got);
    assert_eq!(
        (
            v["usage"]["completion_tokens"].as_u64(),
            v["choices"][0]["text"].as_str()
        ),
        (Some(0), Some(""))
    );
    ok_completion(&s);

    // a client killed mid-stream frees its slot
    let cancelled0 = metric(&s, "requests_cancelled_total");
    let f = tmp_file(
        &json!({"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0, "stream": true})
            .to_string(),
    );
    let mut c = Command::new("curl")
        .args([
            "-sN",
            "--max-time",
            "60",
            "-H",
            &format!("Authorization: Bearer {KEY}"),
            "--data-binary",
        ])
        .arg(format!("@{}", f.display()))
        .arg(format!("{}/v1/completions", s.base))
        .stdout(Stdio::piped())
        .spawn()
        .expect("curl");
    let mut out = c.stdout.take().expect("stdout");
    let mut first = [0u8; 6];
    out.read_exact(&mut first)
        .expect("first bytes of the stream");
    assert_eq!(&first, b"data: ");
    assert_eq!(metric(&s, "requests_processing"), 1.0);
    c.kill().expect("kill curl");
    let _ = c.wait();
    drop(out);
    let killed_at = metric(&s, "n_decode_total");
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&s, "requests_processing") != 0.0 {
        assert!(
            Instant::now() < deadline,
            "the killed client's slot was not freed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let after = metric(&s, "n_decode_total") - killed_at;
    println!("killed client's slot freed {after} decodes after the kill was seen");
    // the disconnect shows when the next token is written: the slot is
    // gone by the decode after that
    assert!(
        after <= 2.0,
        "slot freed only {after} decodes after the kill"
    );
    assert_eq!(metric(&s, "requests_cancelled_total"), cancelled0 + 1.0);
    assert_eq!(metric(&s, "slots_idle"), 8.0);
    ok_completion(&s);

    // the official openai client
    openai_client(&s, &model_id);
    drop(s);

    // a full queue: one slot, one waiting place, three long requests at once
    let s = start(&[
        "-np",
        "1",
        "-c",
        "512",
        "--max-queue",
        "1",
        "--api-key",
        KEY,
    ]);
    // long enough (most of the 512-token context) that the first is still
    // decoding when the third arrives, however fast decoding gets
    let long =
        json!({"prompt": "Once upon a time", "max_tokens": 480, "temperature": 0}).to_string();
    let codes: Vec<u16> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..3)
            .map(|i| {
                let (s, long) = (&s, &long);
                sc.spawn(move || {
                    std::thread::sleep(Duration::from_millis(25 * i));
                    curl(s, "/v1/completions", Some(long), Some(KEY)).0
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("client")).collect()
    });
    let mut sorted = codes.clone();
    sorted.sort();
    assert_eq!(sorted, vec![200, 200, 503], "{codes:?}");
    ok_completion(&s);
    println!("server test done in {:.1} s", t0.elapsed().as_secs_f64());
}

/// Run a script with the official openai package (installed into
/// target/ by `common::python_with_openai`) against the server; skip (with
/// a message) when it cannot be installed.
fn openai_client(s: &Server, model_id: &str) {
    let (py, dir) = match python_with_openai() {
        Ok(x) => x,
        Err(why) => {
            println!("SKIP openai client: {why}");
            return;
        }
    };
    let script = r#"
import sys, openai
base, key, model = sys.argv[1], sys.argv[2], sys.argv[3]
c = openai.OpenAI(base_url=base + "/v1", api_key=key, timeout=60, max_retries=0)
assert [m.id for m in c.models.list().data] == [model]
r = c.completions.create(model=model, prompt="Once upon a time", max_tokens=6, temperature=0)
assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 6, r
rn = c.completions.create(model=model, prompt="Once upon a time", max_tokens=6, temperature=0, n=2)
assert [x.index for x in rn.choices] == [0, 1] and all(x.text == r.choices[0].text for x in rn.choices), rn
text = "".join(ch.choices[0].text for ch in c.completions.create(model=model, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True))
assert text == r.choices[0].text, (text, r.choices[0].text)
ch = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=5, temperature=0)
assert ch.choices[0].message.role == "assistant" and ch.usage.completion_tokens == 5, ch
lp = c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=5, temperature=0, logprobs=True, top_logprobs=2).choices[0].logprobs
assert len(lp.content) == 5 and len(lp.content[0].top_logprobs) == 2 and lp.content[0].logprob <= 0, lp
assert lp.refusal is None and isinstance(lp.content[0].bytes, list), lp
cl = c.completions.create(model=model, prompt="Once upon a time", max_tokens=4, temperature=0, logprobs=2).choices[0].logprobs
assert len(cl.tokens) == 4 and len(cl.token_logprobs) == 4 and len(cl.text_offset) == 4, cl
assert all(isinstance(t, dict) and 1 <= len(t) <= 2 for t in cl.top_logprobs), cl
assert cl.text_offset[0] == 0 and abs(cl.token_logprobs[0] - max(cl.top_logprobs[0].values())) < 1e-6, cl
post = c.completions.create(model=model, prompt="Once upon a time", max_tokens=4, temperature=1.0, top_p=1.0, seed=3, logprobs=5,
                            extra_body={"top_k": 2, "min_p": 0.0, "post_sampling_probs": True}).choices[0].logprobs
for e in post.model_extra["content"]:
    # top_k 2 keeps two tokens; the other three of the five asked for are at 0
    assert len(e["top_probs"]) == 5 and sum(t["prob"] > 0 for t in e["top_probs"]) <= 2, e
    assert abs(sum(t["prob"] for t in e["top_probs"]) - 1) < 1e-4, e
parts = [k.choices[0].delta.content or "" for k in c.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hello"}], max_tokens=5, temperature=0, stream=True)]
assert "".join(parts) == ch.choices[0].message.content, parts
try:
    openai.OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0).completions.create(model=model, prompt="x", max_tokens=1)
    raise SystemExit("no error for a wrong key")
except openai.AuthenticationError:
    pass
# any model name is answered by the loaded model, as llama.cpp does
assert c.completions.create(model="no-such-model", prompt="x", max_tokens=1).model == "no-such-model"
try:
    c.completions.create(model=model, prompt="x", max_tokens=1, temperature="hot")
    raise SystemExit("no error for a bad temperature")
except openai.BadRequestError:
    pass
print("openai client ok:", repr(ch.choices[0].message.content))
"#;
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .args([&s.base, KEY, model_id])
        .env("PYTHONPATH", &dir)
        .output()
        .expect("run python");
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "openai client script failed:\n{so}\n{se}"
    );
    println!("{}", so.trim());
}

/// `/metrics` on a sim device with host experts and the expert cache:
/// the cache's hits, misses and uploaded bytes appear and move, and a
/// repeated request finds its experts in the cache.
#[test]
fn metrics_expert_cache_on_sim_device() {
    if Command::new("curl").arg("--version").output().is_err() {
        println!("SKIP: curl is not installed");
        return;
    }
    let s = start(&[
        "-np",
        "2",
        "-c",
        "1024",
        "--api-key",
        KEY,
        "--device",
        "SIM0",
        "--cpu-moe",
        "-nomb",
        "1",
        "--moe-cache-mib",
        "auto",
        // the upload cache: every miss uploaded (hybrid placement would
        // compute the tiny model's latency-bound misses on the CPU)
        "--moe-hybrid",
        "off",
    ]);
    assert_eq!(metric(&s, "moe_cache_enabled"), 1.0);
    assert_eq!(metric(&s, "moe_cache_hits_total"), 0.0);
    assert_eq!(metric(&s, "moe_cache_misses_total"), 0.0);
    ok_completion(&s);
    let (h1, m1) = (
        metric(&s, "moe_cache_hits_total"),
        metric(&s, "moe_cache_misses_total"),
    );
    let up1 = metric(&s, "moe_cache_bytes_uploaded_total");
    assert!(m1 > 0.0, "the first request uploaded no expert");
    assert!(up1 > 0.0);
    assert!(metric(&s, "expert_bytes_uploaded_total") >= up1);
    let r1 = metric(&s, "moe_cache_hit_ratio");
    assert!((r1 - h1 / (h1 + m1)).abs() < 1e-9, "{r1} vs {h1}/{m1}");
    // the same request again: its experts are resident, so hits grow and
    // no new bytes are needed for them
    ok_completion(&s);
    let (h2, m2) = (
        metric(&s, "moe_cache_hits_total"),
        metric(&s, "moe_cache_misses_total"),
    );
    assert!(h2 > h1, "hits did not move: {h1} -> {h2}");
    assert!(m2 >= m1);
    assert!(
        h2 - h1 > m2 - m1,
        "a repeated request mostly missed: {h1}/{m1} -> {h2}/{m2}"
    );
    assert!(metric(&s, "moe_cache_hit_ratio") > r1);
    assert!(metric(&s, "moe_cache_bytes_uploaded_total") >= up1);
    drop(s);

    // decode prediction on: the prefetch metrics appear and add up
    let s = start(&[
        "-np",
        "1",
        "-c",
        "512",
        "--api-key",
        KEY,
        "--device",
        "SIM0",
        "--cpu-moe",
        "-nomb",
        "1",
        "--moe-cache-mib",
        "auto",
        "--moe-hybrid",
        "off",
        "--moe-predict",
        "on",
    ]);
    assert_eq!(metric(&s, "prefetch_bytes_total"), 0.0);
    ok_completion(&s);
    let (pb, pu) = (
        metric(&s, "prefetch_bytes_total"),
        metric(&s, "prefetch_bytes_used_total"),
    );
    assert!(pb > 0.0, "the prediction uploaded nothing");
    assert!(pu <= pb, "used {pu} > prefetched {pb}");
    let ratio = metric(&s, "prefetch_hit_ratio");
    assert!((ratio - pu / pb).abs() < 1e-9, "{ratio} vs {pu}/{pb}");
    drop(s);

    // no device: the cache is off and says so
    let s = start(&["-np", "1", "-c", "256", "--api-key", KEY]);
    ok_completion(&s);
    assert_eq!(metric(&s, "moe_cache_enabled"), 0.0);
    assert_eq!(metric(&s, "moe_cache_hits_total"), 0.0);
}

/// llama.cpp's native API and server endpoints, and bad input to them:
/// `/completion` (content, tokens, stop_type, timings, generation
/// settings, probabilities, several prompts, response_fields, id_slot with
/// cache_prompt), context shift, `/slots` save / erase / restore (a
/// missing file is a 400 naming it), `/props`, `/apply-template`, CORS,
/// tools of an unknown format (400), and `--no-context-shift` /
/// no `--slots` (400 / 501); the server answers after each fault.
#[test]
fn native_api_and_bad_input() {
    if Command::new("curl").arg("--version").output().is_err() {
        println!("SKIP: curl is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("llama-server-slots-{}", std::process::id()));
    let dir_s = dir.display().to_string();
    let s = start(&[
        "-np",
        "2",
        "-c",
        "256",
        "--slots",
        "--slot-save-path",
        &dir_s,
        "--seed",
        "42",
        "--temp",
        "0",
        "-n",
        "300",
    ]);
    let post = |path: &str, body: &str| {
        let (code, b) = curl(&s, path, Some(body), None);
        (code, json_of(&b))
    };

    // /completion
    let (code, v) = post(
        "/completion",
        r#"{"prompt": "Once upon a time", "n_predict": 8, "return_tokens": true, "n_probs": 3}"#,
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["timings"]["predicted_n"], 8, "{v}");
    assert_eq!(
        (v["stop"].as_bool(), v["stop_type"].as_str()),
        (Some(true), Some("limit"))
    );
    assert_eq!(v["tokens"].as_array().map(Vec::len), Some(8));
    assert_eq!(v["generation_settings"]["seed"], 42);
    assert_eq!(v["generation_settings"]["n_predict"], 8);
    assert_eq!(v["truncated"], false);
    let probs = v["completion_probabilities"]
        .as_array()
        .expect("probabilities");
    assert_eq!(probs.len(), 8);
    assert!(probs
        .iter()
        .all(|p| p["top_logprobs"].as_array().map(Vec::len) == Some(3)));
    let content = v["content"].as_str().unwrap().to_string();
    // a server limit below the request's: the smaller one
    let (_, v) = post(
        "/completion",
        r#"{"prompt": "Once upon a time", "n_predict": 400, "response_fields": ["generation_settings/n_predict"]}"#,
    );
    assert_eq!(v["generation_settings/n_predict"], 300, "{v}");
    // several prompts (ids and text): one answer each, greedy so equal
    let (_, t) = post(
        "/tokenize",
        r#"{"content": "Once upon a time", "add_special": true}"#,
    );
    let toks = t["tokens"].clone();
    let (code, v) = post(
        "/completion",
        &json!({"prompt": [toks, "Once upon a time"], "n_predict": 8}).to_string(),
    );
    assert_eq!(code, 200, "{v}");
    let a = v.as_array().expect("one answer per prompt");
    assert_eq!(a.len(), 2);
    assert_eq!(a[0]["content"], a[1]["content"]);
    assert_eq!(a[0]["content"].as_str(), Some(content.as_str()));
    // response_fields
    let (_, v) = post(
        "/completion",
        r#"{"prompt": "Once upon a time", "n_predict": 4, "response_fields": ["content", "generation_settings/n_predict"]}"#,
    );
    assert_eq!(v.as_object().map(|o| o.len()), Some(2), "{v}");
    assert_eq!(v["generation_settings/n_predict"], 4);
    // id_slot + cache_prompt: the same prompt again in slot 1 decodes one token
    let req =
        r#"{"prompt": "The quick brown fox", "n_predict": 4, "id_slot": 1, "cache_prompt": true}"#;
    let (_, v1) = post("/completion", req);
    assert_eq!(v1["id_slot"], 1);
    let (_, v2) = post("/completion", req);
    assert_eq!(v2["timings"]["prompt_n"], 1, "{v2}");
    let n_prompt = v1["timings"]["prompt_n"].as_u64().unwrap();

    // slots: save slot 1, erase it, restore into slot 0
    let (code, v) = post("/slots/1?action=save", r#"{"filename": "s1.bin"}"#);
    assert_eq!(code, 200, "{v}");
    let n_saved = v["n_saved"].as_u64().unwrap();
    assert!(n_saved >= n_prompt, "{v}");
    let (code, v) = post("/slots/1?action=erase", "");
    assert_eq!((code, v["n_erased"].as_u64()), (200, Some(n_saved)), "{v}");
    let (_, v) = post("/completion", req);
    assert_eq!(v["timings"]["prompt_n"].as_u64(), Some(n_prompt), "{v}");
    let (code, v) = post("/slots/0?action=restore", r#"{"filename": "s1.bin"}"#);
    assert_eq!(
        (code, v["n_restored"].as_u64()),
        (200, Some(n_saved)),
        "{v}"
    );
    let (_, v) = post(
        "/completion",
        r#"{"prompt": "The quick brown fox", "n_predict": 4, "id_slot": 0}"#,
    );
    assert_eq!(v["timings"]["prompt_n"], 1, "{v}");
    // bad slot actions: 4xx naming the problem
    for (path, body, want, msg) in [
        (
            "/slots/0?action=restore",
            r#"{"filename": "missing.bin"}"#,
            400,
            "missing.bin",
        ),
        (
            "/slots/0?action=save",
            r#"{"filename": "../x"}"#,
            400,
            "invalid filename",
        ),
        ("/slots/0?action=fly", "{}", 400, "invalid action 'fly'"),
        ("/slots/7?action=erase", "{}", 400, "no slot 7"),
        ("/completion", "{not json", 400, "not valid JSON"),
        (
            "/completion",
            r#"{"prompt": "x", "id_slot": 9}"#,
            400,
            "'id_slot' is 9",
        ),
    ] {
        let (code, v) = post(path, body);
        assert_eq!(code, want, "{path}: {v}");
        let m = v["error"]["message"].as_str().unwrap_or("");
        assert!(m.contains(msg), "{path}: {m}");
    }
    // a tool of an unknown format
    let (code, v) = post(
        "/v1/chat/completions",
        r#"{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "retrieval"}]}"#,
    );
    assert_eq!(code, 400, "{v}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("unknown tool format"));

    // /slots, /props, /apply-template
    let (code, body) = curl(&s, "/slots", None, None);
    let sl = json_of(&body);
    assert_eq!(code, 200, "{sl}");
    assert_eq!(sl.as_array().map(Vec::len), Some(2));
    assert_eq!(
        (sl[0]["n_ctx"].as_u64(), sl[0]["is_processing"].as_bool()),
        (Some(128), Some(false))
    );
    let (_, body) = curl(&s, "/props", None, None);
    let p = json_of(&body);
    assert_eq!(p["total_slots"], 2);
    assert_eq!(p["default_generation_settings"]["params"]["seed"], 42);
    assert!(p["model_path"].as_str().unwrap().ends_with(".gguf"));
    let (code, v) = post(
        "/apply-template",
        r#"{"messages": [{"role": "user", "content": "Hi there"}]}"#,
    );
    assert_eq!(code, 200, "{v}");
    assert!(v["prompt"].as_str().unwrap().contains("Hi there"), "{v}");
    // POST /props needs --props
    let (code, _) = post("/props", r#"{"temperature": 1.0}"#);
    assert_eq!(code, 501);

    // context shift: a long prompt is cut, a long generation goes on
    let (code, v) = post(
        "/completion",
        &json!({"prompt": "a b c d ".repeat(60), "n_predict": 8}).to_string(),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["truncated"], true);
    assert!(v["timings"]["prompt_n"].as_u64().unwrap() < 128);
    let (code, v) = post(
        "/completion",
        r#"{"prompt": "Once", "n_predict": 200, "ignore_eos": true}"#,
    );
    assert_eq!(code, 200, "{v}");
    // (a slot holds 128 tokens: the context shifted)
    assert_eq!(
        (
            v["timings"]["predicted_n"].as_u64(),
            v["truncated"].as_bool()
        ),
        (Some(200), Some(true)),
        "{v}"
    );

    // CORS preflight, with no key
    let out = Command::new("curl")
        .args([
            "-s",
            "-i",
            "-X",
            "OPTIONS",
            "-H",
            "Origin: web.example",
            "-H",
        ])
        .arg("Access-Control-Request-Method: POST")
        .arg(format!("{}/completions", s.base))
        .output()
        .expect("curl");
    let h = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(h.starts_with("http/1.1 200"), "{h}");
    assert!(
        h.contains("access-control-allow-origin: web.example"),
        "{h}"
    );
    assert!(h.contains("access-control-allow-methods: get, post"), "{h}");

    // still serving
    let (code, v) = post(
        "/completion",
        r#"{"prompt": "Once upon a time", "n_predict": 8}"#,
    );
    assert_eq!((code, v["content"].as_str()), (200, Some(content.as_str())));
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);

    // no context shift, no --slots, no --slot-save-path
    let s = start(&[
        "-np",
        "1",
        "-c",
        "64",
        "--no-context-shift",
        "--embedding",
        "--pooling",
        "mean",
        "--reranking",
    ]);
    let (code, body) = curl(
        &s,
        "/completion",
        Some(&json!({"prompt": "a b c d ".repeat(40)}).to_string()),
        None,
    );
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("exceeds the available context size"),
        "{body}"
    );
    let (code, body) = curl(
        &s,
        "/completion",
        Some(r#"{"prompt": "Once", "ignore_eos": true}"#),
        None,
    );
    let v = json_of(&body);
    assert_eq!((code, v["truncated"].as_bool()), (200, Some(true)), "{v}");
    assert_eq!(
        v["timings"]["predicted_n"].as_u64(),
        Some(64 - v["tokens_evaluated"].as_u64().unwrap())
    );
    let (code, _) = curl(&s, "/slots", None, None);
    assert_eq!(code, 501);
    let (code, body) = curl(
        &s,
        "/slots/0?action=save",
        Some(r#"{"filename": "a.bin"}"#),
        None,
    );
    assert_eq!(code, 501, "{body}");
    assert!(body.contains("--slot-save-path"), "{body}");
    // embeddings: pooled (mean), of unit length, the same for the same input
    let (code, body) = curl(
        &s,
        "/v1/embeddings",
        Some(r#"{"input": ["Once upon a time", "Once upon a time", "other"]}"#),
        None,
    );
    let v = json_of(&body);
    assert_eq!(code, 200, "{v}");
    let e: Vec<Vec<f64>> = (0..3)
        .map(|i| {
            v["data"][i]["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect();
    assert!(e[0].len() > 1);
    assert!((e[0].iter().map(|x| x * x).sum::<f64>() - 1.0).abs() < 1e-4);
    assert_eq!(e[0], e[1]);
    assert_ne!(e[0], e[2]);
    assert!(v["usage"]["prompt_tokens"].as_u64() > Some(0));
    let (code, body) = curl(
        &s,
        "/v1/embeddings",
        Some(&json!({"input": "a b ".repeat(100)}).to_string()),
        None,
    );
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("too large"), "{body}");
    // rerank and infill: bad input is a 400 naming it; this model can do neither (501)
    for (path, body, want, msg) in [
        (
            "/rerank",
            r#"{"query": "q", "documents": [1, 2]}"#,
            400,
            "'documents'",
        ),
        (
            "/rerank",
            r#"{"query": "q", "documents": ["a", "b"]}"#,
            501,
            "classification head",
        ),
        (
            "/infill",
            r#"{"input_extra": [{"filename": 1, "text": "x"}]}"#,
            400,
            "input_extra[0].filename",
        ),
        (
            "/infill",
            r#"{"input_prefix": "a", "input_suffix": "b"}"#,
            501,
            "fill-in-the-middle",
        ),
    ] {
        let (code, b) = curl(&s, path, Some(body), None);
        assert_eq!(code, want, "{path} {body}: {b}");
        assert!(b.contains(msg), "{path}: {b}");
    }
}
