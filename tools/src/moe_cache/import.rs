//! Import of an external routing trace in JSONL (`--import-jsonl`).
//!
//! # Format
//!
//! One JSON object a line:
//!
//! - `layer`: the MoE layer's index, counting MoE layers only, from 0
//!   (a model whose first layer is dense has its first MoE layer at 0);
//! - `token_pos`: the token's position in its sequence (an integer);
//! - `experts`: the ids the router picked for that token at that layer, a
//!   list of `n_expert_used` distinct integers in `0..n_expert`;
//! - `seq` or `problem_id` (optional, any JSON value): the sequence the
//!   token belongs to; lines without either belong to one sequence;
//! - any other key is ignored. Blank lines are skipped.
//!
//! Sequences come in the order of their first line, the tokens of each in
//! ascending `token_pos`; each token becomes one one-token ubatch (as
//! decode records it). Every token must give every MoE layer once. The
//! model gives the shape and the expert bytes; a line that does not fit it
//! is refused with its line number and the mismatch.

use std::collections::{BTreeMap, HashMap};

use llama::moe_cache::cache::replay::TraceUbatch;
use llama::moe_cache::{Trace, TraceHeader};
use serde_json::Value;

/// Where one token's layers were given.
#[derive(Default)]
struct Token {
    first_line: usize,
    /// Per MoE layer (index among MoE layers): the ids and their line.
    layers: BTreeMap<usize, (usize, Vec<u32>)>,
}

/// A sequence's name in messages: `seq X` or `problem_id X`, or nothing.
fn seq_words(key: &Option<(&'static str, String)>) -> String {
    match key {
        Some((k, v)) => format!(" of {k} {v}"),
        None => String::new(),
    }
}

/// An integer field of a line, or an error naming it.
fn int_field(o: &serde_json::Map<String, Value>, key: &str) -> Result<i64, String> {
    match o.get(key) {
        None => Err(format!("no \"{key}\" key")),
        Some(v) => v
            .as_i64()
            .ok_or_else(|| format!("\"{key}\" is {v}, not an integer")),
    }
}

/// An imported trace and what it held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Imported {
    /// The trace: one one-token ubatch per token.
    pub trace: Trace,
    /// Sequences (distinct `seq` / `problem_id`, or 1).
    pub sequences: usize,
    /// Records (non-blank lines).
    pub records: usize,
}

/// Convert the JSONL `text` to a trace for the model `header` describes.
/// Errors start with `line N:` when a line is at fault.
pub fn import_jsonl(text: &str, header: TraceHeader) -> Result<Imported, String> {
    let n_moe = header.layers.len();
    let n_expert = header.n_expert;
    let n_used = header.n_expert_used as usize;
    // sequences in order of first appearance, tokens by position
    let mut seq_order: Vec<Option<(&'static str, String)>> = Vec::new();
    let mut seq_index: HashMap<Option<(&'static str, String)>, usize> = HashMap::new();
    let mut seqs: Vec<BTreeMap<i64, Token>> = Vec::new();
    let mut n_lines = 0usize;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        n_lines += 1;
        let at = |what: String| format!("line {line}: {what}");
        let v: Value =
            serde_json::from_str(raw).map_err(|e| at(format!("not a JSON object: {e}")))?;
        let Value::Object(o) = v else {
            return Err(at(format!("{v} is not a JSON object")));
        };
        let layer = int_field(&o, "layer").map_err(at)?;
        if layer < 0 || layer as usize >= n_moe {
            return Err(at(format!(
                "layer {layer} is not a MoE layer of the model (it has {n_moe}: 0..{n_moe})"
            )));
        }
        let layer = layer as usize;
        let pos = int_field(&o, "token_pos").map_err(at)?;
        let ids = match o.get("experts") {
            None => return Err(at("no \"experts\" key".into())),
            Some(Value::Array(a)) => a,
            Some(v) => return Err(at(format!("\"experts\" is {v}, not a list"))),
        };
        if ids.len() != n_used {
            return Err(at(format!(
                "{} experts, but the model's router picks {n_used} per token",
                ids.len()
            )));
        }
        let mut experts = Vec::with_capacity(n_used);
        for e in ids {
            let id = e
                .as_i64()
                .ok_or_else(|| at(format!("expert id {e} is not an integer")))?;
            if id < 0 || id >= i64::from(n_expert) {
                return Err(at(format!(
                    "expert id {id} of layer {layer} is out of range: the model has {n_expert} experts (0..{n_expert})"
                )));
            }
            if experts.contains(&(id as u32)) {
                return Err(at(format!("expert id {id} is listed twice")));
            }
            experts.push(id as u32);
        }
        let key = ["seq", "problem_id"].iter().find_map(|k| {
            o.get(*k).map(|v| {
                let s = match v {
                    Value::String(s) => s.clone(),
                    v => v.to_string(),
                };
                (*k, s)
            })
        });
        let si = match seq_index.get(&key) {
            Some(&s) => s,
            None => {
                seq_index.insert(key.clone(), seqs.len());
                seq_order.push(key.clone());
                seqs.push(BTreeMap::new());
                seqs.len() - 1
            }
        };
        let tok = seqs[si].entry(pos).or_insert_with(|| Token {
            first_line: line,
            layers: BTreeMap::new(),
        });
        if let Some((prev, _)) = tok.layers.get(&layer) {
            return Err(at(format!(
                "layer {layer} of token_pos {pos}{} was already given on line {prev}",
                seq_words(&key)
            )));
        }
        tok.layers.insert(layer, (line, experts));
    }
    if n_lines == 0 {
        return Err("no line: the file holds no routing record".into());
    }
    let mut trace = Trace::new(header);
    for (key, toks) in seq_order.iter().zip(&seqs) {
        for (pos, tok) in toks {
            if tok.layers.len() != n_moe {
                let missing = (0..n_moe)
                    .filter(|l| !tok.layers.contains_key(l))
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(format!(
                    "line {}: token_pos {pos}{} has no record for MoE layer(s) {missing} (every token needs all {n_moe})",
                    tok.first_line,
                    seq_words(key)
                ));
            }
            let layers = trace
                .header
                .layers
                .iter()
                .zip(tok.layers.values())
                .map(|(l, (_, ids))| (l.layer, ids.clone()))
                .collect();
            trace.ubatches.push(TraceUbatch {
                n_tokens: 1,
                layers,
            });
        }
    }
    Ok(Imported {
        trace,
        sequences: seqs.len(),
        records: n_lines,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ggml_core::GgmlType;
    use llama::moe_cache::cache::layout::RoleShape;
    use llama::moe_cache::trace::TraceLayer;

    /// 3 decoder layers, the first dense: MoE layers 0 and 1 are model
    /// layers 1 and 2; 6 experts, 2 used.
    fn header() -> TraceHeader {
        let role = RoleShape {
            ty: GgmlType::F16,
            ne01: [8, 4],
            expert_bytes: 64,
        };
        TraceHeader {
            model: "t".into(),
            n_layer: 3,
            n_expert: 6,
            n_expert_used: 2,
            layers: vec![
                TraceLayer {
                    layer: 1,
                    roles: [role; 3],
                },
                TraceLayer {
                    layer: 2,
                    roles: [role; 3],
                },
            ],
        }
    }

    fn line(layer: i64, pos: i64, e: [i64; 2], seq: Option<&str>) -> String {
        let s = seq.map_or(String::new(), |s| format!(", \"seq\": \"{s}\""));
        format!(
            "{{\"layer\": {layer}, \"token_pos\": {pos}, \"experts\": [{}, {}], \"score\": 0.5{s}}}",
            e[0], e[1]
        )
    }

    #[test]
    fn sequences_and_positions_order_the_tokens() {
        // seq b first, positions out of order; other keys ignored
        let text = [
            line(1, 1, [4, 5], Some("b")),
            line(0, 1, [3, 2], Some("b")),
            String::new(),
            line(0, 0, [0, 1], Some("b")),
            line(1, 0, [1, 2], Some("b")),
            line(0, 0, [5, 4], Some("a")),
            line(1, 0, [0, 3], Some("a")),
        ]
        .join("\n");
        let t = import_jsonl(&text, header()).unwrap();
        assert_eq!((t.sequences, t.records), (2, 6));
        let t = t.trace;
        let got: Vec<Vec<(u32, Vec<u32>)>> = t.ubatches.iter().map(|u| u.layers.clone()).collect();
        assert_eq!(
            got,
            vec![
                vec![(1, vec![0, 1]), (2, vec![1, 2])],
                vec![(1, vec![3, 2]), (2, vec![4, 5])],
                vec![(1, vec![5, 4]), (2, vec![0, 3])],
            ]
        );
        assert!(t.ubatches.iter().all(|u| u.n_tokens == 1));
        // the file round-trips through the binary format
        assert_eq!(Trace::from_bytes(&t.to_bytes()).unwrap(), t);
    }

    #[test]
    fn problem_id_separates_sequences_like_seq() {
        let text = "{\"layer\":0,\"token_pos\":0,\"experts\":[0,1],\"problem_id\":7}\n\
                    {\"layer\":1,\"token_pos\":0,\"experts\":[0,1],\"problem_id\":7}\n\
                    {\"layer\":0,\"token_pos\":0,\"experts\":[2,3],\"problem_id\":8}\n\
                    {\"layer\":1,\"token_pos\":0,\"experts\":[2,3],\"problem_id\":8}";
        let t = import_jsonl(text, header()).unwrap();
        assert_eq!(t.trace.ubatches.len(), 2);
        assert_eq!(t.sequences, 2);
    }

    fn refused(text: &str, needles: &[&str]) {
        let e = import_jsonl(text, header()).expect_err(text);
        for n in needles {
            assert!(e.contains(n), "{e:?} lacks {n:?}");
        }
    }

    #[test]
    fn bad_lines_are_refused_with_their_number() {
        let ok = line(0, 0, [0, 1], None);
        refused(
            &format!("{ok}\nnot json"),
            &["line 2:", "not a JSON object"],
        );
        refused(&format!("{ok}\n[1, 2]"), &["line 2:", "not a JSON object"]);
        refused(
            "{\"token_pos\": 0, \"experts\": [0, 1]}",
            &["line 1:", "no \"layer\""],
        );
        refused(
            "{\"layer\": \"x\", \"token_pos\": 0, \"experts\": [0, 1]}",
            &["line 1:", "\"layer\"", "not an integer"],
        );
        refused(
            "{\"layer\": 0, \"experts\": [0, 1]}",
            &["line 1:", "no \"token_pos\""],
        );
        refused(
            "{\"layer\": 0, \"token_pos\": 0}",
            &["line 1:", "no \"experts\""],
        );
        refused(
            "{\"layer\": 0, \"token_pos\": 0, \"experts\": 3}",
            &["line 1:", "not a list"],
        );
        refused(
            "{\"layer\": 0, \"token_pos\": 0, \"experts\": [1, 2, 3]}",
            &["line 1:", "3 experts", "picks 2"],
        );
        refused(
            "{\"layer\": 0, \"token_pos\": 0, \"experts\": [1, 1.5]}",
            &["line 1:", "1.5 is not an integer"],
        );
        refused(
            "{\"layer\": 0, \"token_pos\": 0, \"experts\": [1, 1]}",
            &["line 1:", "listed twice"],
        );
        refused(
            &format!("{ok}\n{}", line(0, 0, [2, 3], None)),
            &["line 2:", "already given on line 1"],
        );
        refused("\n\n", &["no routing record"]);
    }

    #[test]
    fn unknown_layers_are_refused_with_their_line() {
        let text = format!("{}\n{}", line(0, 0, [0, 1], None), line(2, 0, [0, 1], None));
        refused(&text, &["line 2:", "layer 2", "has 2: 0..2"]);
        refused(&line(-1, 0, [0, 1], None), &["line 1:", "layer -1"]);
    }

    #[test]
    fn expert_ids_out_of_range_are_refused_with_their_line() {
        let text = format!("{}\n{}", line(0, 0, [0, 1], None), line(1, 0, [6, 1], None));
        refused(&text, &["line 2:", "expert id 6", "6 experts (0..6)"]);
        refused(&line(0, 0, [0, -2], None), &["line 1:", "expert id -2"]);
    }

    #[test]
    fn a_token_missing_a_layer_is_refused_naming_it() {
        let text = format!(
            "{}\n{}\n{}",
            line(0, 0, [0, 1], Some("s")),
            line(1, 0, [0, 1], Some("s")),
            line(0, 1, [0, 1], Some("s"))
        );
        refused(
            &text,
            &["line 3:", "token_pos 1 of seq s", "MoE layer(s) 1"],
        );
    }
}
