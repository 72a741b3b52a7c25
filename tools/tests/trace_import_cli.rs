//! `llama-moe-cache --import-jsonl` and `--synth-trace`: a JSONL trace of
//! the documented shape converts and replays; bad lines, unknown layers
//! and expert ids out of range are refused with their line number (exit 1,
//! no panic); synthetic traces have the model's shape and the asked length.

mod common;
use common::*;

use llama::moe_cache::Trace;

const TOOL: &str = env!("CARGO_BIN_EXE_llama-moe-cache");

/// Two sequences of the fixture's shape (2 MoE layers, 8 experts, 2 used):
/// `seq` and `problem_id` keys, an ignored key, lines out of order.
fn good_jsonl(n: usize) -> String {
    let mut lines = Vec::new();
    for seq in ["a", "b"] {
        for pos in (0..n).rev() {
            for layer in 0..2 {
                let e0 = (pos + layer) % 8;
                let e1 = (pos + layer + 3) % 8;
                let key = if seq == "a" { "seq" } else { "problem_id" };
                lines.push(format!(
                    "{{\"layer\": {layer}, \"token_pos\": {pos}, \"experts\": [{e0}, {e1}], \"weights\": [0.6, 0.4], \"{key}\": \"{seq}\"}}"
                ));
            }
        }
    }
    lines.join("\n") + "\n"
}

#[test]
fn a_jsonl_trace_converts_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("in.jsonl");
    std::fs::write(&inp, good_jsonl(20)).unwrap();
    let out = dir.path().join("out.trace");
    let m = f32_model();
    let o = run(
        TOOL,
        &[
            "--import-jsonl",
            inp.to_str().unwrap(),
            "-m",
            &m,
            "--trace-out",
            out.to_str().unwrap(),
            "--sizes",
            "4,8",
        ],
        dir.path(),
    );
    ok(&o);
    assert!(
        stderr(&o).contains("imported 80 records: 40 tokens in 2 sequence(s), 2 MoE layers"),
        "{}",
        stderr(&o)
    );
    // the replay's table: every policy and Belady at both sizes
    let table = stdout(&o);
    assert_eq!(
        table
            .lines()
            .filter(|l| l.trim_start().starts_with("belady"))
            .count(),
        2
    );
    let t = Trace::read(&out).unwrap();
    assert_eq!(t.ubatches.len(), 40);
    assert_eq!((t.header.n_expert, t.header.n_expert_used), (8, 2));
    // sequence a (first in the file) comes first, position 0 first
    assert_eq!(t.ubatches[0].layers[0].1, vec![0, 3]);
    assert_eq!(t.ubatches[0].layers[1].1, vec![1, 4]);
    assert_eq!(t.ubatches[19].layers[0].1, vec![3, 6]);
    // the written trace replays as any other, with the same counts
    let o2 = run(TOOL, &[out.to_str().unwrap(), "--sizes", "4,8"], dir.path());
    ok(&o2);
    assert_eq!(stdout(&o2), table);
    // --no-replay only writes the file
    let out2 = dir.path().join("out2.trace");
    let o3 = run(
        TOOL,
        &[
            "--import-jsonl",
            inp.to_str().unwrap(),
            "-m",
            &m,
            "--trace-out",
            out2.to_str().unwrap(),
            "--no-replay",
        ],
        dir.path(),
    );
    ok(&o3);
    assert!(stdout(&o3).is_empty(), "{}", stdout(&o3));
    assert_eq!(std::fs::read(&out2).unwrap(), std::fs::read(&out).unwrap());
}

fn import_fails(body: &str, needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("bad.jsonl");
    std::fs::write(&inp, body).unwrap();
    let m = f32_model();
    let mut want = vec!["bad.jsonl"];
    want.extend_from_slice(needles);
    fails_with_exit_1(
        TOOL,
        &[
            "--import-jsonl",
            inp.to_str().unwrap(),
            "-m",
            &m,
            "--no-replay",
            "--trace-out",
            "/dev/null",
        ],
        &want,
    );
}

#[test]
fn bad_lines_unknown_layers_and_ids_out_of_range_name_the_line() {
    let good = "{\"layer\": 0, \"token_pos\": 0, \"experts\": [0, 1]}\n";
    import_fails(
        &format!("{good}{{\"layer\": 1, \"token_pos\": 0, \"experts\": [0, 1]\n"),
        &["line 2:", "not a JSON object"],
    );
    import_fails(
        &format!("{good}{{\"token_pos\": 0, \"experts\": [0, 1]}}\n"),
        &["line 2:", "no \"layer\""],
    );
    import_fails(
        &format!("{good}\n{{\"layer\": 2, \"token_pos\": 0, \"experts\": [0, 1]}}\n"),
        &["line 3:", "layer 2 is not a MoE layer", "it has 2"],
    );
    import_fails(
        &format!("{good}{{\"layer\": 1, \"token_pos\": 0, \"experts\": [0, 8]}}\n"),
        &["line 2:", "expert id 8", "8 experts"],
    );
    import_fails(
        &format!("{good}{{\"layer\": 1, \"token_pos\": 0, \"experts\": [0, 1, 2]}}\n"),
        &["line 2:", "3 experts", "picks 2"],
    );
    import_fails(good, &["line 1:", "token_pos 0", "MoE layer(s) 1"]);
    import_fails("", &["no routing record"]);
}

#[test]
fn synthetic_traces_have_the_model_shape_and_length() {
    let dir = tempfile::tempdir().unwrap();
    let m = f32_model();
    for kind in ["random", "zipf", "topic"] {
        let out = dir.path().join(format!("{kind}.trace"));
        let o = run(
            TOOL,
            &[
                "--synth-trace",
                kind,
                "-m",
                &m,
                "--tokens",
                "300",
                "--trace-out",
                out.to_str().unwrap(),
                "--sizes",
                "4",
            ],
            dir.path(),
        );
        ok(&o);
        assert!(
            stderr(&o).contains("active within 300 tokens"),
            "{}",
            stderr(&o)
        );
        let t = Trace::read(&out).unwrap();
        assert_eq!(t.token_counts(), (300, 300));
        assert_eq!(t.header.layers.len(), 2);
    }
    fails_with_exit_1(
        TOOL,
        &[
            "--synth-trace",
            "topic",
            "-m",
            &m,
            "--p-global",
            "2",
            "--trace-out",
            "/dev/null",
        ],
        &["--p-global 2", "probability"],
    );
    fails_with_exit_1(
        TOOL,
        &["--synth-trace", "markov", "-m", &m],
        &["'markov'", "random, zipf or topic"],
    );
    fails_with_exit_1(
        TOOL,
        &["--synth-trace", "zipf", "-m", &m, "--no-replay"],
        &["--no-replay", "--trace-out"],
    );
}
