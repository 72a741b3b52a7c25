//! How Jinja2 prints a value in `{{ ... }}`: Python's `str()`, so `True`,
//! `None`, `['a', 1]` and `{'k': 'v'}` rather than MiniJinja's `true`,
//! `none` and JSON-like lists; undefined prints nothing.

use minijinja::value::ValueKind;
use minijinja::{Error, Output, State, Value};

use super::pyjson::float_repr;

/// MiniJinja formatter printing values as Python's `str()` does.
pub fn python_formatter(out: &mut Output, _state: &mut State, value: &Value) -> Result<(), Error> {
    let s = python_str(value);
    out.write_str(&s).map_err(Error::from)
}

/// Python's `str(value)`.
pub fn python_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => python_repr(v),
    }
}

/// Python's `repr(value)`.
pub fn python_repr(v: &Value) -> String {
    let mut out = String::new();
    write_repr(&mut out, v, 0);
    out
}

fn write_repr(out: &mut String, v: &Value, depth: usize) {
    if depth > 100 {
        out.push_str("...");
        return;
    }
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => {
            let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
            out.push_str(&match float_repr(f).as_str() {
                "NaN" => "nan".to_string(),
                "Infinity" => "inf".to_string(),
                "-Infinity" => "-inf".to_string(),
                s => s.to_string(),
            });
        }
        ValueKind::String => write_str_repr(out, v.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            let (open, close) = if v.is_tuple() { ('(', ')') } else { ('[', ']') };
            out.push(open);
            let mut n = 0;
            if let Ok(it) = v.try_iter() {
                for (i, item) in it.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &item, depth + 1);
                    n += 1;
                }
            }
            if open == '(' && n == 1 {
                out.push(',');
            }
            out.push(close);
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(it) = v.try_iter() {
                for (i, k) in it.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    write_repr(out, &k, depth + 1);
                    out.push_str(": ");
                    let item = v.get_item(&k).unwrap_or_default();
                    write_repr(out, &item, depth + 1);
                }
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
}

/// A string literal as Python's `repr` writes it: single quotes unless the
/// text has a `'` and no `"`.
fn write_str_repr(out: &mut String, s: &str) {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(q);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_as_python() {
        assert_eq!(python_str(&Value::from(true)), "True");
        assert_eq!(python_str(&Value::from(())), "None");
        assert_eq!(python_str(&Value::UNDEFINED), "");
        assert_eq!(python_str(&Value::from("a'b")), "a'b");
        assert_eq!(
            python_str(&Value::from(vec![
                Value::from("x"),
                Value::from(1.5),
                Value::from("it's")
            ])),
            "['x', 1.5, \"it's\"]"
        );
        assert_eq!(
            python_str(&Value::from_pairs([("k", Value::from(false))])),
            "{'k': False}"
        );
    }
}
