//! Speculative decoding on `llama-server`: greedy output with speculation
//! is token for token the output without it, on every fixture, with a
//! draft model (the model itself, and another model of its vocabulary)
//! and with the n-gram lookup, on the CPU and on SIM0 with the experts in
//! host memory and the expert cache, and with two requests at once
//! sharing the decodes (their guesses in one batch); the request fields
//! (`speculative.n_max` ...), the answers' `draft_n` / `draft_n_accepted`
//! and the `/metrics` counters; llama.cpp's error for a draft of another
//! vocabulary, the `--fit on` shortfall of a draft that does not fit
//! beside the target, and the flags' bad values, named.

mod common;
use common::{request, start, Server};
use serde_json::{json, Value};

const FIXTURES: &[&str] = &[
    "tiny-qwen3moe-f32",
    "tiny-qwen3moe-q4_0",
    "tiny-qwen3moe-q4_k",
    "tiny-qwen3moe-q6_k",
    "tiny-qwen3moe-q8_0",
    "tiny-deepseek2-f32",
    "tiny-deepseek2-q4_k",
    "tiny-gptoss-mxfp4",
    "tiny-mixtral-f16",
    "tiny-olmoe-f32",
    "tiny-qwen2moe-f32",
    "small-qwen3moe-spm-f16",
];

fn path(file: &str) -> Option<String> {
    fixtures::fixture_path(&format!("models/{file}"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The greedy completion of `prompt` (24 tokens, past the end of
/// generation) with `extra` request fields: its tokens and its timings.
fn greedy(s: &Server, prompt: &str, extra: &Value) -> (Vec<i64>, Value) {
    let mut body = json!({
        "prompt": prompt,
        "n_predict": 24,
        "temperature": 0,
        "ignore_eos": true,
        "return_tokens": true,
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    let r = request(s, "POST", "/completion", Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    let j = r.json();
    let toks = j["tokens"]
        .as_array()
        .unwrap_or_else(|| panic!("no tokens: {j}"))
        .iter()
        .map(|t| t.as_i64().unwrap())
        .collect();
    (toks, j["timings"].clone())
}

/// A `/metrics` value.
fn metric(s: &Server, name: &str) -> f64 {
    let r = request(s, "GET", "/metrics", None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.body
        .lines()
        .find_map(|l| l.strip_prefix(&format!("llamacpp:{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {}", r.body))
        .parse()
        .unwrap()
}

fn n(t: &Value, k: &str) -> u64 {
    t[k].as_u64().unwrap_or_else(|| panic!("no {k} in {t}"))
}

#[test]
fn speculation_changes_no_token_on_any_fixture() {
    let mut present = 0;
    let (mut accepted, mut rejected, mut verify_bytes) = (0, 0, 0.0);
    for name in FIXTURES {
        let (Some(gguf), Some(prompt)) = (
            path(&format!("{name}.gguf")),
            path(&format!("{name}.prompt.txt")),
        ) else {
            println!("skipped: fixture {name} absent");
            continue;
        };
        present += 1;
        let prompt = std::fs::read_to_string(prompt).unwrap();
        // a draft that disagrees (another fixture of the vocabulary), and
        // the model as its own draft (agrees); the SPM fixture has no
        // sibling of its vocabulary
        let other = match *name {
            "small-qwen3moe-spm-f16" => None,
            "tiny-qwen3moe-q4_0" => path("tiny-mixtral-f16.gguf"),
            _ => path("tiny-qwen3moe-q4_0.gguf"),
        };
        let mut specs: Vec<Vec<&str>> = vec![
            vec!["-md", &gguf, "--draft-max", "4"],
            vec![
                "--spec-type",
                "ngram-simple",
                "--spec-ngram-simple-size-n",
                "1",
                "--spec-ngram-simple-size-m",
                "4",
                "--spec-draft-n-max",
                "3",
            ],
        ];
        if let Some(o) = &other {
            specs.push(vec!["-md", o, "--spec-draft-n-max", "5"]);
        }
        for device in [
            &[][..],
            &["--device", "SIM0", "--cpu-moe", "--moe-cache-mib", "1"][..],
        ] {
            let base = ["-m", &gguf, "-np", "1", "-c", "256", "--metrics"];
            let plain = start(&[&base[..], device].concat());
            let (t0, timings) = greedy(&plain, &prompt, &json!({}));
            assert!(
                timings.get("draft_n").is_none(),
                "no speculation, no draft_n: {timings}"
            );
            drop(plain);
            for spec in &specs {
                let s = start(&[&base[..], device, spec].concat());
                let what = format!("{name} {device:?} {spec:?}");
                let (t1, tm) = greedy(&s, &prompt, &json!({}));
                assert_eq!(t1, t0, "{what}: tokens differ");
                let (d, a) = (n(&tm, "draft_n"), n(&tm, "draft_n_accepted"));
                assert!(a <= d, "{what}: {tm}");
                accepted += a;
                rejected += d - a;
                if spec[1] == gguf {
                    assert!(
                        d > 0 && a == d,
                        "{what}: its own draft is always right: {tm}"
                    );
                }
                // the server's counters are the request's
                assert_eq!(
                    metric(&s, "spec_decode_num_draft_tokens_total") as u64,
                    d,
                    "{what}"
                );
                assert_eq!(
                    metric(&s, "spec_decode_num_accepted_tokens_total") as u64,
                    a,
                    "{what}"
                );
                verify_bytes += metric(&s, "spec_verify_expert_bytes_total");
                // again, the prompt from the slot's cache; and with the
                // request's speculative.n_max 0: no drafting
                let (t2, _) = greedy(&s, &prompt, &json!({}));
                assert_eq!(t2, t0, "{what}: tokens differ on the cached prompt");
                let (t3, tm3) = greedy(&s, &prompt, &json!({"speculative.n_max": 0}));
                assert_eq!(t3, t0, "{what}: tokens differ with speculative.n_max 0");
                assert_eq!(n(&tm3, "draft_n"), 0, "{what}: {tm3}");
            }
        }
    }
    if present == 0 {
        println!("skipped: no fixture models");
        return;
    }
    // both paths ran: guesses kept, and guesses rolled back
    assert!(
        accepted > 0 && rejected > 0,
        "accepted {accepted}, rejected {rejected}"
    );
    assert!(
        verify_bytes > 0.0,
        "the verify batches on SIM0 copied experts"
    );
}

#[test]
fn request_fields_and_props() {
    let m = fixtures::lean_path("models/tiny-qwen3moe-f32.gguf");
    let m = m.to_str().unwrap();
    let s = start(&[
        "-m",
        m,
        "--spec-type",
        "ngram-simple",
        "--draft-max",
        "6",
        "--draft-min",
        "2",
    ]);
    let r = request(&s, "GET", "/props", None);
    let d = &r.json()["default_generation_settings"];
    assert_eq!(d["speculative"], json!(true), "{d}");
    assert_eq!(d["params"]["speculative.n_max"], json!(6), "{d}");
    assert_eq!(d["params"]["speculative.n_min"], json!(2), "{d}");
    for (field, needle) in [
        (
            json!({"speculative.n_max": -1}),
            "'speculative.n_max' is -1",
        ),
        (
            json!({"speculative.n_min": "x"}),
            "'speculative.n_min' must be an integer",
        ),
        (json!({"speculative.p_min": 2}), "'speculative.p_min' is 2"),
        (json!({"speculative.p_min": 0.5}), "--draft-p-min 0"),
    ] {
        let mut body = json!({"prompt": "hi", "n_predict": 2});
        for (k, v) in field.as_object().unwrap() {
            body[k] = v.clone();
        }
        let r = request(&s, "POST", "/completion", Some(&body));
        assert_eq!(r.status, 400, "{field}: {}", r.body);
        assert!(r.body.contains(needle), "{field}: {}", r.body);
    }
    // a request's n_max and n_min are its own
    let body = json!({"prompt": "a b a b a b a b a b a b a b a b", "n_predict": 8,
        "temperature": 0, "speculative.n_max": 1, "speculative.n_min": 0});
    let r = request(&s, "POST", "/completion", Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    // a server without speculation says so
    let plain = start(&["-m", m]);
    let r = request(&plain, "GET", "/props", None);
    assert_eq!(
        r.json()["default_generation_settings"]["speculative"],
        json!(false)
    );
}

/// `llama-server ARGS` fails, naming the problem.
fn fails_naming(args: &[&str], needles: &[&str]) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_llama-server"))
        .args(["--host", "127.0.0.1", "--port", "0", "-t", "2"])
        .args(args)
        .output()
        .expect("run llama-server");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{args:?}: {e}");
    for n in needles {
        assert!(e.contains(n), "{args:?}: no '{n}' in: {e}");
    }
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn bad_speculation_flags_are_named() {
    let m = fixtures::lean_path("models/tiny-qwen3moe-f32.gguf");
    let m = m.to_str().unwrap();
    for (args, needle) in [
        (&["--spec-type", "ngram-mod"][..], "--spec-type ngram-mod"),
        (
            &["--spec-type", "draft-simple"][..],
            "needs a draft model (-md FNAME)",
        ),
        (&["--draft-p-min", "1.5"][..], "--spec-draft-p-min 1.5"),
        (
            &["-md", "/nonexistent/draft.gguf"][..],
            "/nonexistent/draft.gguf",
        ),
        (
            &["--spec-type", "ngram-simple", "-md", m][..],
            "needs no draft model",
        ),
        (&["-md", m, "-ngld", "x"][..], "-ngld x"),
        (
            &[
                "--spec-type",
                "ngram-simple",
                "--spec-ngram-simple-size-m",
                "0",
            ][..],
            "between 1 and 1024",
        ),
    ] {
        let mut a = vec!["-m", m];
        a.extend_from_slice(args);
        fails_naming(&a, &[needle]);
    }
}

#[test]
fn a_draft_of_another_vocabulary_gets_llama_cpp_error() {
    let Some(target) = path("small-qwen3moe-spm-f16.gguf") else {
        println!("skipped: fixture small-qwen3moe-spm-f16 absent");
        return;
    };
    let draft = fixtures::lean_path("models/tiny-qwen3moe-f32.gguf");
    fails_naming(
        &["-m", &target, "-md", draft.to_str().unwrap()],
        &[
            "the target and draft vocabs are not compatible",
            "draft model vocab type must match target model to use speculation",
        ],
    );
}

#[test]
fn a_draft_that_does_not_fit_beside_the_target_gets_the_fit_shortfall() {
    let target = fixtures::lean_path("models/tiny-qwen3moe-f32.gguf");
    let target = target.to_str().unwrap();
    let Some(draft) = path("tiny-mixtral-f16.gguf") else {
        println!("skipped: fixture tiny-mixtral-f16 absent");
        return;
    };
    let args = |mem: &'static str| -> Vec<String> {
        [
            "-m",
            target,
            "-c",
            "256",
            "-np",
            "1",
            "--device",
            "SIM0",
            "--sim-mem-mib",
            mem,
            "--fit",
            "on",
            "-md",
            &draft,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // the target alone fits in 16 MiB, the draft beside it does not
    let a16 = args("16");
    let a16: Vec<&str> = a16.iter().map(String::as_str).collect();
    fails_naming(
        &a16,
        &[
            "the draft model (-md) does not fit beside the target (--fit on)",
            "--fit: the model does not fit",
            "missing",
        ],
    );
    // with room for both, the server speculates
    let a28 = args("28");
    let a28: Vec<&str> = a28.iter().map(String::as_str).collect();
    let s = start(&a28);
    let r = request(&s, "GET", "/props", None);
    assert_eq!(
        r.json()["default_generation_settings"]["speculative"],
        json!(true)
    );
}

#[test]
fn concurrent_requests_speculate_in_one_batch_without_changing_tokens() {
    let m = fixtures::lean_path("models/tiny-qwen3moe-f32.gguf");
    let m = m.to_str().unwrap();
    let prompts = ["the quick brown fox", "one two three four five six seven"];
    // each prompt alone on a server without speculation
    let plain = start(&["-m", m, "-np", "2", "-c", "512"]);
    let want: Vec<Vec<i64>> = prompts
        .iter()
        .map(|p| greedy(&plain, p, &json!({"n_predict": 200})).0)
        .collect();
    drop(plain);
    for spec in [
        &["-md", m, "--draft-max", "3"][..],
        &[
            "--spec-type",
            "ngram-simple",
            "--spec-ngram-simple-size-n",
            "1",
            "--spec-ngram-simple-size-m",
            "4",
        ][..],
    ] {
        let s = std::sync::Arc::new(start(
            &[&["-m", m, "-np", "2", "-c", "512"][..], spec].concat(),
        ));
        // both at once (200 tokens each, so that they overlap): their tokens
        // and guesses share the decodes
        let got: Vec<(Vec<i64>, Value)> = std::thread::scope(|sc| {
            let hs: Vec<_> = prompts
                .iter()
                .map(|p| {
                    let s = std::sync::Arc::clone(&s);
                    sc.spawn(move || greedy(&s, p, &json!({"n_predict": 200})))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for ((toks, tm), w) in got.iter().zip(&want) {
            assert_eq!(toks, w, "{spec:?}: tokens differ");
            // the model as its own draft drafts every token (the n-gram
            // lookup only where the text repeats)
            if spec[0] == "-md" {
                assert!(n(tm, "draft_n") > 0, "{spec:?}: {tm}");
            }
        }
        assert!(
            metric(&s, "n_busy_slots_per_decode") > 1.0,
            "{spec:?}: the requests never shared a decode"
        );
    }
}
