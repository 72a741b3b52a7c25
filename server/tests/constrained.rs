//! Constrained decoding end to end on the embedded (random-weight)
//! default model: 50 requests with JSON schemas, over both endpoints and
//! the three ways to give a schema (`json_schema`, `response_format`
//! `json_schema` and `json_object` with `schema`), each answer checked
//! with the `jsonschema` validator; GBNF grammars; and each unusable
//! grammar or schema answered 400 naming the problem while the server
//! keeps serving.

mod common;

use serde_json::{json, Value};

use common::{post, start, Server};

/// Value schemas whose JSON is bounded in length, so that a complete
/// answer fits in `max_tokens` whatever the random model prefers.
fn blocks() -> Vec<Value> {
    vec![
        json!({"type": "integer", "minimum": -50, "maximum": 500}),
        json!({"type": "boolean"}),
        json!({"type": "string", "maxLength": 12}),
        json!({"enum": ["red", "green", "blue"]}),
        json!({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 4}),
        json!({"type": "string", "pattern": "^[a-z]{2,6}$"}),
        json!({"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "maximum": 99}]}),
        json!({"const": "fixed"}),
        json!({"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}, "y": {"type": "boolean"}}, "required": ["x", "y"]}),
        json!({"type": "array", "items": {"enum": [1, 2, 3]}, "minItems": 1, "maxItems": 3}),
        json!({"type": "string", "minLength": 2, "maxLength": 5}),
        json!({"type": "number", "minimum": 0, "maximum": 10}),
    ]
}

/// The i-th test schema: mostly objects of 1 to 4 properties drawn from
/// [`blocks`], some required, some not; every seventh a bare block; one
/// with `$defs` and `$ref`.
fn schema(i: usize) -> Value {
    let b = blocks();
    if i == 49 {
        return json!({
            "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["x"]}},
            "type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 1, "maxItems": 3
        });
    }
    if i % 7 == 6 {
        return b[(i / 7) % b.len()].clone();
    }
    let n = 1 + i % 4;
    let mut props = serde_json::Map::new();
    let mut required = Vec::new();
    for j in 0..n {
        let name = format!("p{j}_{}", (i * 3 + j * 5) % b.len());
        props.insert(name.clone(), b[(i * 3 + j * 5) % b.len()].clone());
        if !(i + j).is_multiple_of(3) {
            required.push(name);
        }
    }
    json!({"type": "object", "properties": props, "required": required})
}

/// The request body of test `i`: chat with `json_schema`, chat with
/// `response_format` (json_schema or json_object), or a completion.
fn body(i: usize, s: &Value) -> (&'static str, Value) {
    let msgs = json!([{"role": "user", "content": format!("Give me JSON number {i}.")}]);
    let base = json!({"max_tokens": 400, "seed": i, "temperature": 1.0});
    let mut b = base.as_object().cloned().unwrap_or_default();
    let path = match i % 4 {
        0 => {
            b.insert("messages".into(), msgs);
            b.insert("json_schema".into(), s.clone());
            "/v1/chat/completions"
        }
        1 => {
            b.insert("messages".into(), msgs);
            b.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {"name": "answer", "schema": s, "strict": true}}),
            );
            "/v1/chat/completions"
        }
        2 => {
            b.insert("messages".into(), msgs);
            b.insert(
                "response_format".into(),
                json!({"type": "json_object", "schema": s}),
            );
            "/v1/chat/completions"
        }
        _ => {
            b.insert("prompt".into(), json!(format!("JSON {i}:")));
            b.insert("json_schema".into(), s.clone());
            "/v1/completions"
        }
    };
    (path, Value::Object(b))
}

fn answer_text(v: &Value) -> Option<&str> {
    let c = &v["choices"][0];
    c["message"]["content"].as_str().or(c["text"].as_str())
}

/// Run test `i`: `Err` with what went wrong.
fn run_one(s: &Server, i: usize) -> Result<(), String> {
    let sc = schema(i);
    let (path, b) = body(i, &sc);
    let r = post(s, path, &b);
    if r.status != 200 {
        return Err(format!("#{i}: status {} {}", r.status, r.body));
    }
    let v = r.json();
    let text = answer_text(&v).ok_or(format!("#{i}: no text in {v}"))?;
    let finish = v["choices"][0]["finish_reason"].as_str().unwrap_or("");
    let out: Value = serde_json::from_str(text)
        .map_err(|e| format!("#{i}: not JSON ({e}, finish {finish}): {text:?}"))?;
    let validator =
        jsonschema::validator_for(&sc).map_err(|e| format!("#{i}: test schema invalid: {e}"))?;
    let errors: Vec<String> = validator.iter_errors(&out).map(|e| e.to_string()).collect();
    if !errors.is_empty() {
        return Err(format!(
            "#{i}: {text} is not valid against {sc}: {errors:?}"
        ));
    }
    if finish != "stop" {
        return Err(format!("#{i}: finish_reason {finish}, not stop"));
    }
    eprintln!("#{i} {path}: {text}");
    Ok(())
}

#[test]
fn fifty_schemas_give_valid_json() {
    let s = start(&["-np", "4"]);
    let failures: Vec<String> = std::thread::scope(|sc| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let s = &s;
                sc.spawn(move || {
                    (t..50)
                        .step_by(4)
                        .filter_map(|i| run_one(s, i).err())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec!["a client thread panicked".into()])
            })
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} of 50 failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn grammars_shape_the_answer() {
    let s = start(&[]);
    let chat = |g: &str, max: usize| {
        let r = post(
            &s,
            "/v1/chat/completions",
            &json!({"messages": [{"role": "user", "content": "Does not matter what I say, does it?"}],
                    "max_tokens": max, "grammar": g, "seed": 7}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
        answer_text(&r.json()).unwrap_or_default().to_string()
    };
    // llama.cpp's test: exactly five a's, then the grammar is complete
    assert_eq!(chat("root ::= \"a\"{5,5}", 6), "aaaaa");
    let t = chat(
        "root ::= \"(\" item (\", \" item)* \")\"\nitem ::= [a-z]{1,4} | [0-9]+ # words or numbers\n",
        200,
    );
    let inner = t
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{t:?}"));
    for item in inner.split(", ") {
        let words = (1..=4).contains(&item.len()) && item.bytes().all(|b| b.is_ascii_lowercase());
        let digits = !item.is_empty() && item.bytes().all(|b| b.is_ascii_digit());
        assert!(words || digits, "{item:?} in {t:?}");
    }
    // a completion with a grammar, streamed
    let r = post(
        &s,
        "/v1/completions",
        &json!({"prompt": "Yes or no?", "max_tokens": 20, "stream": true,
                "grammar": "root ::= (\"yes\" | \"no\") \".\""}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let text: String = r
        .body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["choices"][0]["text"].as_str().map(str::to_string))
        .collect();
    assert!(text == "yes." || text == "no.", "{text:?}");
}

#[test]
fn unusable_constraints_are_400_and_the_server_goes_on() {
    let s = start(&[]);
    let msgs = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (json!({"grammar": "root ::= \"a"}), "unterminated string"),
        (json!({"grammar": "root ::= item"}), "undefined rule 'item'"),
        (json!({"grammar": "start ::= \"a\""}), "no 'root' rule"),
        (json!({"grammar": 12}), "'grammar' must be a string"),
        // nesting past the parser's depth limit: refused up front
        (
            json!({"grammar": format!("root ::= {}\"a\"{}", "(".repeat(5000), ")".repeat(5000))}),
            "nested groups",
        ),
        (json!({"json_schema": {"type": "hiccup"}}), "hiccup"),
        (
            json!({"json_schema": {"type": 123}}),
            "'json_schema' cannot be used",
        ),
        (
            json!({"json_schema": "{}"}),
            "'json_schema' must be a JSON schema",
        ),
        (json!({"response_format": {"type": "sound"}}), "\"sound\""),
        (
            json!({"response_format": {"type": "json_object", "schema": 123}}),
            "'response_format.schema'",
        ),
        (
            json!({"response_format": {"type": "json_object", "schema": {"type": "hiccup"}}}),
            "hiccup",
        ),
        (
            json!({"json_schema": {"$ref": "#/$defs/missing"}}),
            "'json_schema' cannot be used",
        ),
        (
            json!({"grammar": "root ::= \"a\"", "json_schema": {}}),
            "not both",
        ),
    ];
    for (extra, want) in &cases {
        let mut b = extra.as_object().cloned().unwrap_or_default();
        b.insert("messages".into(), msgs.clone());
        b.insert("max_tokens".into(), json!(4));
        let r = post(&s, "/v1/chat/completions", &Value::Object(b));
        assert_eq!(r.status, 400, "{extra}: {}", r.body);
        let msg = r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(msg.contains(want), "{extra}: {msg:?} lacks {want:?}");
        // the same on the completions endpoint
        let mut b = extra.as_object().cloned().unwrap_or_default();
        b.insert("prompt".into(), json!("x"));
        let r = post(&s, "/v1/completions", &Value::Object(b));
        assert_eq!(r.status, 400, "{extra}: {}", r.body);
    }
    let r = post(
        &s,
        "/v1/chat/completions",
        &json!({"messages": msgs, "max_tokens": 6, "json_schema": {"const": "42"}}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(answer_text(&r.json()), Some("\"42\""));
}
