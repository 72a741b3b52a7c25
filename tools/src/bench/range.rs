//! llama-bench's integer list syntax: comma-separated values, each a number
//! or a range `first-last` (step 1), `first-last+step` or `first-last*mult`,
//! expanded in order (`16-64+16` = 16,32,48,64; `1-8*2` = 1,2,4,8).
//!
//! Stricter than llama.cpp where it would go silently wrong: an empty range
//! (`8-1`) is an error here, not an empty list.

/// Expand `s`. `allow_negative` lets a single value (or a range's first
/// value) be negative, as `-ngl -1`.
pub fn parse_int_range(s: &str, allow_negative: bool) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    if s.is_empty() {
        return Err("empty value".into());
    }
    for item in s.split(',') {
        out.extend(parse_item(item, allow_negative)?);
    }
    Ok(out)
}

/// A non-negative decimal number (digits only).
fn number(s: &str, whole: &str) -> Result<i64, String> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "'{whole}' is not a number or a range (N, FIRST-LAST, FIRST-LAST+STEP, FIRST-LAST*MULT)"
        ));
    }
    s.parse::<i64>()
        .map_err(|_| format!("'{whole}': {s} is too large"))
}

fn parse_item(item: &str, allow_negative: bool) -> Result<Vec<i64>, String> {
    if item.is_empty() {
        return Err("empty value in the list".into());
    }
    let (neg, body) = match item.strip_prefix('-') {
        Some(rest) if allow_negative => (true, rest),
        _ => (false, item),
    };
    let (first_s, rest) = match body.find('-') {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mut first = number(first_s, item)?;
    if neg {
        first = -first;
    }
    let Some(rest) = rest else {
        return Ok(vec![first]);
    };
    let (last_s, op, step_s) = match rest.find(['+', '*']) {
        Some(i) => (&rest[..i], rest.as_bytes()[i], Some(&rest[i + 1..])),
        None => (rest, b'+', None),
    };
    let last = number(last_s, item)?;
    let step = match step_s {
        Some(s) => number(s, item)?,
        None => 1,
    };
    if last < first {
        return Err(format!(
            "range '{item}' is empty: its last value {last} is below its first {first}"
        ));
    }
    let mut v = Vec::new();
    let mut i = first;
    while i <= last {
        v.push(i);
        let next = if op == b'+' {
            i.checked_add(step)
        } else {
            i.checked_mul(step)
        };
        match next {
            Some(n) if n > i => i = n,
            _ => {
                return Err(format!(
                    "range '{item}' does not advance (step {}{step} from {i})",
                    op as char
                ))
            }
        }
        if v.len() > 1_000_000 {
            return Err(format!("range '{item}' has more than a million values"));
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_ranges_expand_in_order() {
        assert_eq!(parse_int_range("512", false).unwrap(), [512]);
        assert_eq!(parse_int_range("16,32", false).unwrap(), [16, 32]);
        assert_eq!(parse_int_range("1-2", false).unwrap(), [1, 2]);
        assert_eq!(
            parse_int_range("16-64+16", false).unwrap(),
            [16, 32, 48, 64]
        );
        assert_eq!(parse_int_range("1-8*2", false).unwrap(), [1, 2, 4, 8]);
        assert_eq!(parse_int_range("1-10*3", false).unwrap(), [1, 3, 9]);
        assert_eq!(
            parse_int_range("0,4-6,1-8*4", false).unwrap(),
            [0, 4, 5, 6, 1, 4]
        );
        assert_eq!(parse_int_range("-1", true).unwrap(), [-1]);
        assert_eq!(parse_int_range("-1,0-2", true).unwrap(), [-1, 0, 1, 2]);
    }

    #[test]
    fn bad_lists_say_what_is_wrong() {
        let e = parse_int_range("8-1", false).unwrap_err();
        assert!(e.contains("'8-1'") && e.contains("below"), "{e}");
        let e = parse_int_range("16,abc", false).unwrap_err();
        assert!(e.contains("'abc'"), "{e}");
        assert!(parse_int_range("x", false).unwrap_err().contains("'x'"));
        assert!(parse_int_range("-1", false).unwrap_err().contains("'-1'"));
        assert!(parse_int_range("16,,32", false)
            .unwrap_err()
            .contains("empty"));
        assert!(parse_int_range("", false).unwrap_err().contains("empty"));
        assert!(parse_int_range("0-8*2", false)
            .unwrap_err()
            .contains("does not advance"));
        assert!(parse_int_range("1-8+0", false)
            .unwrap_err()
            .contains("does not advance"));
        assert!(parse_int_range("1-8/2", false).is_err());
        assert!(parse_int_range("99999999999999999999", false)
            .unwrap_err()
            .contains("too large"));
    }
}
