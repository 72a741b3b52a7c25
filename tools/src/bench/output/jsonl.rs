//! `-o jsonl`: one object per line, llama.cpp's `jsonl_printer` layout,
//! our own fields after `samples_ts`.

use crate::bench::fields::TestResult;
use crate::bench::output::{json_value, samples, Plan, Printer};

/// The JSON-lines printer.
pub struct JsonlPrinter;

impl Printer for JsonlPrinter {
    fn header(&mut self, _plan: &Plan) -> String {
        String::new()
    }

    fn test(&mut self, r: &TestResult) -> String {
        let fields = r.fields();
        let n_llama = crate::bench::fields::LLAMA_FIELDS.len();
        let mut s = String::from("{");
        for (name, ty, v) in &fields[..n_llama] {
            s.push_str(&format!("\"{name}\": {}, ", json_value(*ty, v)));
        }
        let (ns, ts) = samples(r);
        s.push_str(&format!("\"samples_ns\": [ {ns} ],"));
        s.push_str(&format!("\"samples_ts\": [ {ts} ]"));
        for (name, ty, v) in &fields[n_llama..] {
            s.push_str(&format!(", \"{name}\": {}", json_value(*ty, v)));
        }
        s.push_str("}\n");
        s
    }
}
