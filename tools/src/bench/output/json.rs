//! `-o json`: one array of objects, llama.cpp's `json_printer` layout (one
//! field per line), our own fields after `samples_ts`.

use crate::bench::fields::TestResult;
use crate::bench::output::{json_value, samples, Plan, Printer};

/// The JSON printer.
#[derive(Default)]
pub struct JsonPrinter {
    first_done: bool,
}

impl Printer for JsonPrinter {
    fn header(&mut self, _plan: &Plan) -> String {
        "[\n".into()
    }

    fn test(&mut self, r: &TestResult) -> String {
        let mut s = String::new();
        if self.first_done {
            s.push_str(",\n");
        }
        self.first_done = true;
        s.push_str("  {\n");
        let fields = r.fields();
        let n_llama = crate::bench::fields::LLAMA_FIELDS.len();
        for (name, ty, v) in &fields[..n_llama] {
            s.push_str(&format!("    \"{name}\": {},\n", json_value(*ty, v)));
        }
        let (ns, ts) = samples(r);
        s.push_str(&format!("    \"samples_ns\": [ {ns} ],\n"));
        let own = &fields[n_llama..];
        s.push_str(&format!(
            "    \"samples_ts\": [ {ts} ]{}\n",
            if own.is_empty() { "" } else { "," }
        ));
        for (i, (name, ty, v)) in own.iter().enumerate() {
            let comma = if i + 1 < own.len() { "," } else { "" };
            s.push_str(&format!("    \"{name}\": {}{comma}\n", json_value(*ty, v)));
        }
        s.push_str("  }");
        s
    }

    fn footer(&mut self) -> String {
        "\n]\n".into()
    }
}
