//! `-o sql`: llama.cpp's `sql_printer`: `CREATE TABLE IF NOT EXISTS
//! llama_bench (...)` with TEXT/INTEGER/REAL columns, then one `INSERT` per
//! test, every value quoted (a `'` doubled). Our own columns follow
//! llama.cpp's when any test has them; a test without one writes NULL.

use crate::bench::fields::{own_columns, FieldType, TestResult, LLAMA_FIELDS};
use crate::bench::output::{Plan, Printer};

/// The SQL printer.
#[derive(Default)]
pub struct SqlPrinter {
    own: Vec<(&'static str, FieldType)>,
}

fn sql_type(t: FieldType) -> &'static str {
    match t {
        FieldType::Str => "TEXT",
        FieldType::Bool | FieldType::Int => "INTEGER",
        FieldType::Float => "REAL",
    }
}

impl Printer for SqlPrinter {
    fn header(&mut self, plan: &Plan) -> String {
        self.own = own_columns(plan.params, plan.instances);
        let cols: Vec<String> = LLAMA_FIELDS
            .iter()
            .chain(&self.own)
            .map(|(n, t)| format!("  {n} {}", sql_type(*t)))
            .collect();
        format!(
            "CREATE TABLE IF NOT EXISTS llama_bench (\n{}\n);\n\n",
            cols.join(",\n")
        )
    }

    fn test(&mut self, r: &TestResult) -> String {
        let fields = r.fields();
        let names: Vec<&str> = LLAMA_FIELDS
            .iter()
            .chain(&self.own)
            .map(|(n, _)| *n)
            .collect();
        let mut vals: Vec<String> = fields[..LLAMA_FIELDS.len()]
            .iter()
            .map(|(_, _, v)| format!("'{}'", v.replace('\'', "''")))
            .collect();
        for (name, _) in &self.own {
            vals.push(
                fields
                    .iter()
                    .find(|(n, _, _)| n == name)
                    .map_or("NULL".into(), |(_, _, v)| {
                        format!("'{}'", v.replace('\'', "''"))
                    }),
            );
        }
        format!(
            "INSERT INTO llama_bench ({}) VALUES ({});\n",
            names.join(", "),
            vals.join(", ")
        )
    }
}
