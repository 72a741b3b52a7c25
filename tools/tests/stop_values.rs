//! Every `stop` value the code can write (`stop = "..."` in llama-run (`tools::run::generate`) and
//! the conversation loop) is one of `summary::STOP_VALUES`, and each is
//! documented on `RunSummary::stop` and in docs/running.md's summary table.

use ::common::summary::STOP_VALUES;

fn read(rel: &str) -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/");
    std::fs::read_to_string(format!("{p}{rel}")).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The string literals assigned to a `stop` in `src`.
fn assigned(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    for pat in ["stop = \"", "stop: \""] {
        let mut rest = src;
        while let Some(i) = rest.find(pat) {
            rest = &rest[i + pat.len()..];
            let end = rest.find('"').expect("closing quote");
            out.push(rest[..end].to_string());
        }
    }
    out
}

#[test]
fn every_stop_value_is_listed_and_documented() {
    let mut found = Vec::new();
    for f in ["src/run/generate.rs", "../common/src/chat/conversation.rs"] {
        let v = assigned(&read(f));
        assert!(!v.is_empty(), "{f}: no stop values found");
        found.extend(v);
    }
    for v in &found {
        assert!(
            STOP_VALUES.contains(&v.as_str()),
            "stop value {v:?} not in STOP_VALUES"
        );
    }
    let summary = read("../common/src/summary.rs");
    let doc_start = summary
        .find("/// Why generation stopped")
        .expect("RunSummary::stop doc");
    let doc = &summary[doc_start..summary[doc_start..].find("pub stop").unwrap() + doc_start];
    let running = read("../docs/running.md");
    let row = running
        .lines()
        .find(|l| l.starts_with("| stopped by |"))
        .expect("the summary table's stop row");
    for v in STOP_VALUES {
        assert!(
            found.iter().any(|f| f == v),
            "{v} is listed but never produced"
        );
        assert!(
            doc.contains(&format!("`{v}`")),
            "RunSummary::stop doc lacks {v}"
        );
        assert!(row.contains(&format!("`{v}`")), "docs/running.md lacks {v}");
    }
}
