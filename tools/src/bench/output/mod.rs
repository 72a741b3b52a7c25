//! The output formats, as llama.cpp's printers write them: `md` (the
//! table), `json`, `jsonl`, `csv`, `sql`. Each printer turns a header, each
//! result and a footer into text; `-o` sends one to stdout and `-oe` one to
//! stderr.

pub mod csv;
pub mod json;
pub mod jsonl;
pub mod md;
pub mod sql;

use crate::bench::args::Params;
use crate::bench::fields::{FieldType, TestResult};
use crate::bench::matrix::Instance;

/// An output format (`-o`, `-oe`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Nothing.
    None,
    /// Comma-separated values, every value quoted.
    Csv,
    /// One JSON array.
    Json,
    /// One JSON object per line.
    Jsonl,
    /// The markdown table.
    Md,
    /// SQLite statements.
    Sql,
}

impl Format {
    /// The format named `s` (`csv`, `json`, `jsonl`, `md`, `sql`, `none`).
    pub fn from_name(s: &str) -> Option<Format> {
        Some(match s {
            "none" => Format::None,
            "csv" => Format::Csv,
            "json" => Format::Json,
            "jsonl" => Format::Jsonl,
            "md" => Format::Md,
            "sql" => Format::Sql,
            _ => return None,
        })
    }
}

/// What a header may depend on: the command line and every test to come.
pub struct Plan<'a> {
    /// The command line.
    pub params: &'a Params,
    /// The tests, in order.
    pub instances: &'a [Instance],
}

/// One output format.
pub trait Printer {
    /// Text before the first result.
    fn header(&mut self, plan: &Plan) -> String;
    /// The text of one result.
    fn test(&mut self, r: &TestResult) -> String;
    /// Text after the last result.
    fn footer(&mut self) -> String {
        String::new()
    }
}

/// The printer for `f` (`None` for [`Format::None`]).
pub fn printer(f: Format) -> Option<Box<dyn Printer>> {
    Some(match f {
        Format::None => return None,
        Format::Csv => Box::new(csv::CsvPrinter::default()),
        Format::Json => Box::new(json::JsonPrinter::default()),
        Format::Jsonl => Box::new(jsonl::JsonlPrinter),
        Format::Md => Box::new(md::MdPrinter::default()),
        Format::Sql => Box::new(sql::SqlPrinter::default()),
    })
}

/// A value in JSON, by its field type (llama.cpp's `format_json_value`).
pub fn json_value(ty: FieldType, text: &str) -> String {
    match ty {
        FieldType::Str => serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into()),
        FieldType::Bool => if text == "0" { "false" } else { "true" }.into(),
        FieldType::Int | FieldType::Float => {
            if text.is_empty() {
                "null".into()
            } else {
                text.into()
            }
        }
    }
}

/// `samples_ns` and `samples_ts` as llama.cpp joins them: `a, b, c`, the
/// reals as C++ streams write doubles (6 significant digits, `%g`).
pub fn samples(r: &TestResult) -> (String, String) {
    let ns: Vec<String> = r.samples_ns.iter().map(u64::to_string).collect();
    let ts: Vec<String> = r.samples_ts().iter().map(|&x| fmt_g(x)).collect();
    (ns.join(", "), ts.join(", "))
}

/// `x` as C's `%g` with 6 significant digits (an `ostream`'s default).
pub fn fmt_g(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if !x.is_finite() {
        return if x.is_nan() {
            "nan"
        } else if x > 0.0 {
            "inf"
        } else {
            "-inf"
        }
        .into();
    }
    // the exponent after rounding to 6 significant digits
    let sci = format!("{x:.5e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let mant = strip_zeros(mant);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{:02}", exp.abs());
    }
    let decimals = (5 - exp).max(0) as usize;
    strip_zeros(&format!("{x:.decimals$}")).to_string()
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_format_as_cpp_streams() {
        // the fixture's samples_ts
        assert_eq!(fmt_g(31262.883727), "31262.9");
        assert_eq!(fmt_g(31394.9564), "31395");
        assert_eq!(fmt_g(9309.946747), "9309.95");
        assert_eq!(fmt_g(1234567.0), "1.23457e+06");
        assert_eq!(fmt_g(999999.7), "1e+06");
        assert_eq!(fmt_g(0.000123456), "0.000123456");
        assert_eq!(fmt_g(0.0000123456), "1.23456e-05");
        assert_eq!(fmt_g(12.5), "12.5");
        assert_eq!(fmt_g(0.0), "0");
    }

    #[test]
    fn json_values_by_type() {
        assert_eq!(json_value(FieldType::Str, "a\"b"), "\"a\\\"b\"");
        assert_eq!(json_value(FieldType::Bool, "0"), "false");
        assert_eq!(json_value(FieldType::Bool, "1"), "true");
        assert_eq!(json_value(FieldType::Int, "-1"), "-1");
        assert_eq!(json_value(FieldType::Float, "1.500000"), "1.500000");
    }
}
