//! Stop strings over streamed text: find the first stop string in the
//! generated text, and hold back a tail that may be the start of one.

/// Where the text must end: `Some(i)` when a stop string starts at byte `i`.
pub fn find_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min()
}

/// The length of `text` that is safe to send: everything but the longest
/// suffix that is a proper prefix of a stop string (on a char boundary).
pub fn safe_len(text: &str, stops: &[String]) -> usize {
    let mut hold = 0;
    for s in stops {
        for k in (1..s.len()).rev() {
            if k <= text.len() && s.is_char_boundary(k) && text.ends_with(&s[..k]) {
                hold = hold.max(k);
                break;
            }
        }
    }
    let mut end = text.len() - hold;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops() {
        let st = vec!["END".to_string(), "\n\n".to_string()];
        assert_eq!(find_stop("abc END x", &st), Some(4));
        assert_eq!(find_stop("a\n\nEND", &st), Some(1));
        assert_eq!(find_stop("abc", &st), None);
        assert_eq!(safe_len("abc EN", &st), 4);
        assert_eq!(safe_len("abc\n", &st), 3);
        assert_eq!(safe_len("abc", &st), 3);
        assert_eq!(safe_len("abc", &[]), 3);
    }
}
