//! Speculative decoding on `llama-run`: greedy output with speculation is
//! token for token (and logits row for row, bit for bit) the output
//! without it, on every fixture, with a draft model and with the n-gram
//! lookup, on the CPU and on SIM0 with the experts in host memory and the
//! expert cache; llama.cpp's error for a draft of another vocabulary; the
//! flags' bad values.

mod common;
use common::*;

const RUN: &str = env!("CARGO_BIN_EXE_llama-run");

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

/// Tokens, logits and the stats JSON of one greedy run.
fn greedy(
    gguf: &str,
    prompt: &str,
    device: &[&str],
    spec: &[&str],
) -> (Vec<i32>, Vec<f32>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let (t, l, s) = (
        dir.path().join("t"),
        dir.path().join("l"),
        dir.path().join("s"),
    );
    let mut args = vec![
        "-m",
        gguf,
        "-f",
        prompt,
        "-n",
        "24",
        "--temp",
        "0",
        "-t",
        "2",
        "--tokens-out",
        t.to_str().unwrap(),
        "--logits-out",
        l.to_str().unwrap(),
        "--stats-out",
        s.to_str().unwrap(),
    ];
    args.extend_from_slice(device);
    args.extend_from_slice(spec);
    let o = run(RUN, &args, dir.path());
    ok(&o);
    let json = serde_json::from_str(&std::fs::read_to_string(&s).unwrap()).unwrap();
    (read_i32(&t), read_f32(&l), json)
}

fn n(j: &serde_json::Value, k: &str) -> u64 {
    j[k].as_u64().unwrap_or_else(|| panic!("no {k} in {j}"))
}

#[test]
fn speculation_changes_no_token_on_any_fixture() {
    let mut present = 0;
    let (mut accepted, mut rejected, mut verify_bytes) = (0, 0, 0);
    for name in FIXTURES {
        let file = |ext: &str| model(&format!("{name}{ext}"));
        let (Ok(gguf), Ok(prompt)) = (file(".gguf"), file(".prompt.txt")) else {
            println!("skipped: fixture {name} absent");
            continue;
        };
        present += 1;
        let (gguf, prompt) = (
            gguf.to_str().unwrap().to_string(),
            prompt.to_str().unwrap().to_string(),
        );
        // a draft of the same vocabulary that disagrees (another fixture),
        // and the model as its own draft (agrees); the SPM fixture has no
        // sibling of its vocabulary
        let other = match *name {
            "small-qwen3moe-spm-f16" => None,
            "tiny-qwen3moe-q4_0" => Some("tiny-mixtral-f16"),
            _ => Some("tiny-qwen3moe-q4_0"),
        };
        let other = other.and_then(|o| model(&format!("{o}.gguf")).ok());
        let other = other.as_ref().map(|p| p.to_str().unwrap().to_string());
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
            let (t0, l0, _) = greedy(&gguf, &prompt, device, &[]);
            for spec in &specs {
                let (t1, l1, j) = greedy(&gguf, &prompt, device, spec);
                assert_eq!(t1, t0, "{name} {device:?} {spec:?}: tokens differ");
                assert_eq!(l1.len(), l0.len(), "{name} {device:?} {spec:?}");
                assert!(
                    l1.iter().zip(&l0).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{name} {device:?} {spec:?}: logits differ"
                );
                let (d, a) = (n(&j, "spec_n_drafted"), n(&j, "spec_n_accepted"));
                assert!(a <= d, "{j}");
                accepted += a;
                rejected += d - a;
                verify_bytes += n(&j, "spec_verify_expert_bytes");
                if spec[1] == gguf {
                    assert!(
                        d > 0 && a == d,
                        "{name} {device:?}: its own draft is always right: {j}"
                    );
                }
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
        verify_bytes > 0,
        "the verify batches on SIM0 copied experts"
    );
}

#[test]
fn a_draft_of_another_vocabulary_gets_llama_cpp_error() {
    let target = or_skip!(model("small-qwen3moe-spm-f16.gguf"));
    fails_with_exit_1(
        RUN,
        &[
            "-m",
            target.to_str().unwrap(),
            "-p",
            "hi",
            "-n",
            "2",
            "-md",
            &f32_model(),
        ],
        &[
            "the target and draft vocabs are not compatible",
            "draft model vocab type must match target model to use speculation",
        ],
    );
}

#[test]
fn bad_speculation_flags_are_named() {
    let m = f32_model();
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
            &["--spec-type", "ngram-simple", "-md", &m][..],
            "needs no draft model",
        ),
        (&["-md", &m, "-ngld", "x"][..], "-ngld x"),
    ] {
        let mut a = vec!["-m", &m, "-p", "hi", "-n", "2"];
        a.extend_from_slice(args);
        fails_with_exit_1(RUN, &a, &[needle]);
    }
}

#[test]
fn a_draft_that_does_not_fit_beside_the_target_gets_the_fit_shortfall() {
    let target = f32_model();
    let draft = or_skip!(model("tiny-mixtral-f16.gguf"));
    let args = |mem: &'static str| -> Vec<String> {
        [
            "-m",
            &target,
            "-p",
            "hi",
            "-n",
            "4",
            "--temp",
            "0",
            "-c",
            "256",
            "--device",
            "SIM0",
            "--sim-mem-mib",
            mem,
            "--fit",
            "on",
            "-md",
            draft.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    // the target alone fits in 16 MiB, the draft beside it does not
    let a16 = args("16");
    let a16: Vec<&str> = a16.iter().map(String::as_str).collect();
    fails_with_exit_1(
        RUN,
        &a16,
        &[
            "the draft model (-md) does not fit beside the target (--fit on)",
            "--fit: the model does not fit",
            "missing",
        ],
    );
    // with room for both, the run speculates
    let a28 = args("28");
    let a28: Vec<&str> = a28.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    let o = run(RUN, &a28, dir.path());
    ok(&o);
    assert!(
        stderr(&o).contains("speculative   = draft-simple"),
        "{}",
        stderr(&o)
    );
}
