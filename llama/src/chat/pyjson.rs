//! `tojson` as Hugging Face defines it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)`, byte for byte (`", "` and `": "` separators, or `","`
//! with an indent; floats as Python's `repr`; non-ASCII kept unless
//! `ensure_ascii`).

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// How `json.dumps` lays the text out.
#[derive(Debug, Clone)]
pub struct JsonStyle {
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    /// Pretty-print with this indent (Python's `indent=`; `Some("")` puts
    /// every item on its own line without indentation).
    pub indent: Option<String>,
    /// Between items.
    pub item_sep: String,
    /// Between a key and its value.
    pub key_sep: String,
    /// Sort object keys.
    pub sort_keys: bool,
}

impl Default for JsonStyle {
    fn default() -> Self {
        JsonStyle {
            ensure_ascii: false,
            indent: None,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
            sort_keys: false,
        }
    }
}

/// The `tojson` filter: `tojson(x, ensure_ascii=False, indent=None,
/// separators=None, sort_keys=False)`, positionally or by keyword.
pub fn tojson_filter(value: &Value, args: &[Value], kwargs: Kwargs) -> Result<Value, Error> {
    let names = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > names.len() {
        return Err(Error::new(
            ErrorKind::TooManyArguments,
            "tojson takes at most 4 arguments",
        ));
    }
    let arg = |i: usize| -> Result<Option<Value>, Error> {
        if let Some(v) = args.get(i) {
            return Ok(Some(v.clone()));
        }
        let v: Option<Value> = kwargs.get(names[i])?;
        Ok(v)
    };
    let mut style = JsonStyle::default();
    if let Some(v) = arg(0)? {
        style.ensure_ascii = v.is_true();
    }
    if let Some(v) = arg(1)? {
        style.indent = match v.kind() {
            ValueKind::None | ValueKind::Undefined => None,
            ValueKind::Number => {
                let n = i64::try_from(v.clone()).map_err(|_| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: indent must be an integer",
                    )
                })?;
                Some(" ".repeat(n.max(0) as usize))
            }
            ValueKind::String => Some(v.as_str().unwrap_or_default().to_string()),
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: indent must be an integer or a string",
                ))
            }
        };
        if style.indent.is_some() {
            style.item_sep = ",".into();
        }
    }
    if let Some(v) = arg(2)? {
        if !v.is_none() && !v.is_undefined() {
            let parts: Vec<Value> = v
                .try_iter()
                .map_err(|_| bad_separators())?
                .collect::<Vec<_>>();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => {
                    style.item_sep = a.as_str().unwrap_or_default().to_string();
                    style.key_sep = b.as_str().unwrap_or_default().to_string();
                }
                _ => return Err(bad_separators()),
            }
        }
    }
    if let Some(v) = arg(3)? {
        style.sort_keys = v.is_true();
    }
    kwargs.assert_all_used()?;
    Ok(Value::from(dumps(value, &style)?))
}

fn bad_separators() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        "tojson: separators must be a pair of strings",
    )
}

/// `json.dumps(value)` with `style`.
pub fn dumps(value: &Value, style: &JsonStyle) -> Result<String, Error> {
    let mut out = String::new();
    write_value(&mut out, value, style, 0)?;
    Ok(out)
}

fn newline_indent(out: &mut String, style: &JsonStyle, depth: usize) {
    if let Some(ind) = &style.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

fn write_value(out: &mut String, v: &Value, style: &JsonStyle, depth: usize) -> Result<(), Error> {
    if depth > 500 {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson: value nested too deeply",
        ));
    }
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                out.push_str(&float_repr(f));
            }
        }
        ValueKind::String => write_str(out, v.as_str().unwrap_or_default(), style.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline_indent(out, style, depth + 1);
                write_value(out, item, style, depth + 1)?;
            }
            newline_indent(out, style, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if style.sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&style.item_sep);
                }
                newline_indent(out, style, depth + 1);
                let ks = match k.kind() {
                    ValueKind::String => k.as_str().unwrap_or_default().to_string(),
                    ValueKind::None => "null".into(),
                    ValueKind::Bool => if k.is_true() { "true" } else { "false" }.into(),
                    ValueKind::Number if k.is_integer() => k.to_string(),
                    ValueKind::Number => float_repr(f64::try_from(k.clone()).unwrap_or(f64::NAN)),
                    _ => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            format!("tojson: keys must be str, int, float, bool or None, not {k}"),
                        ))
                    }
                };
                write_str(out, &ks, style.ensure_ascii);
                out.push_str(&style.key_sep);
                let item = v.get_item(k)?;
                write_value(out, &item, style, depth + 1)?;
            }
            newline_indent(out, style, depth);
            out.push('}');
        }
        ValueKind::Bytes | ValueKind::Plain | ValueKind::Invalid => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!(
                    "tojson: object of kind {} is not JSON serializable",
                    v.kind()
                ),
            ))
        }
        _ => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: value is not JSON serializable",
            ))
        }
    }
    Ok(())
}

/// A JSON string literal as Python writes it.
fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && (c as u32) == 0x7f) => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)` (as `json.dumps` writes floats): the shortest
/// digits that round-trip, positional for exponents in [-4, 16), else
/// `1e+16` / `1.5e-05`; `NaN`, `Infinity`, `-Infinity`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "1.5e-5", "-1e16"
    let e = format!("{f:e}");
    let (mant, exp) = e.split_once('e').unwrap_or((e.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mant) = match mant.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mant),
    };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let s = if exp < 0 {
            format!("0.{}{}", "0".repeat((-exp - 1) as usize), digits)
        } else if exp + 1 >= n {
            format!("{}{}.0", digits, "0".repeat((exp + 1 - n) as usize))
        } else {
            let (a, b) = digits.split_at((exp + 1) as usize);
            format!("{a}.{b}")
        };
        format!("{sign}{s}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits.clone()
        };
        let es = if exp < 0 { "-" } else { "+" };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_as_python_repr() {
        for (f, s) in [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1.5e-5, "1.5e-05"),
            (1e16, "1e+16"),
            (1.2345e16, "1.2345e+16"),
            (123456789012345.6, "123456789012345.6"),
            (0.0001, "0.0001"),
            (-2.5, "-2.5"),
            (100.0, "100.0"),
            (1e-7, "1e-07"),
        ] {
            assert_eq!(float_repr(f), s, "{f}");
        }
    }

    #[test]
    fn dumps_as_python() {
        let v: Value = Value::from_pairs([
            ("name", Value::from("é\"\n")),
            ("list", Value::from(vec![Value::from(1), Value::from(true)])),
            ("none", Value::from(())),
        ]);
        assert_eq!(
            dumps(&v, &JsonStyle::default()).unwrap(),
            "{\"name\": \"é\\\"\\n\", \"list\": [1, true], \"none\": null}"
        );
        let ascii = JsonStyle {
            ensure_ascii: true,
            ..JsonStyle::default()
        };
        assert_eq!(
            dumps(&Value::from("é😀"), &ascii).unwrap(),
            "\"\\u00e9\\ud83d\\ude00\""
        );
        let pretty = JsonStyle {
            indent: Some("  ".into()),
            item_sep: ",".into(),
            ..JsonStyle::default()
        };
        assert_eq!(
            dumps(&Value::from_pairs([("a", vec![1, 2])]), &pretty).unwrap(),
            "{\n  \"a\": [\n    1,\n    2\n  ]\n}"
        );
        assert_eq!(
            dumps(&Value::from(Vec::<i32>::new()), &pretty).unwrap(),
            "[]"
        );
    }
}
