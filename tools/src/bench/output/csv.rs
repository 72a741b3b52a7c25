//! `-o csv`: llama.cpp's `csv_printer`: a header of field names, then every
//! value quoted (`"` doubled). Our own columns follow llama.cpp's when any
//! test has them; a test without one leaves it empty.

use crate::bench::fields::{own_columns, FieldType, TestResult, LLAMA_FIELDS};
use crate::bench::output::{Plan, Printer};

/// The CSV printer.
#[derive(Default)]
pub struct CsvPrinter {
    own: Vec<(&'static str, FieldType)>,
}

fn quote(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

impl Printer for CsvPrinter {
    fn header(&mut self, plan: &Plan) -> String {
        self.own = own_columns(plan.params, plan.instances);
        let names: Vec<&str> = LLAMA_FIELDS
            .iter()
            .chain(&self.own)
            .map(|(n, _)| *n)
            .collect();
        format!("{}\n", names.join(","))
    }

    fn test(&mut self, r: &TestResult) -> String {
        let fields = r.fields();
        let mut vals: Vec<String> = fields[..LLAMA_FIELDS.len()]
            .iter()
            .map(|(_, _, v)| quote(v))
            .collect();
        for (name, _) in &self.own {
            let v = fields
                .iter()
                .find(|(n, _, _)| n == name)
                .map_or("", |(_, _, v)| v.as_str());
            vals.push(quote(v));
        }
        format!("{}\n", vals.join(","))
    }
}
