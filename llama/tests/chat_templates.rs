//! Every case of `tests/data/chat/cases.json` (real chat templates, three
//! conversations, generation prompt on and off) renders to exactly the bytes
//! the reference (Python jinja2 as transformers sets it up) rendered, or
//! raises the message the reference raised.

use llama::chat::{ChatError, ChatTemplate, DateTime, Message, RenderOptions};

/// `chat/FILE`: the chat fixtures are in the lean set tracked in tests/data.
fn chat(file: &str) -> std::path::PathBuf {
    fixtures::lean_path(&format!("chat/{file}"))
}

/// 2026-12-01 00:00:00 UTC: the date the reference fixed `strftime_now` at.
const REFERENCE_NOW: i64 = 1_796_083_200;

/// The few fields of a JSON value this test reads, parsed by hand to keep
/// the crate free of a JSON dependency.
mod json {
    #[derive(Debug, Clone)]
    pub enum J {
        Null,
        Bool(bool),
        Num(#[allow(dead_code)] f64),
        Str(String),
        Arr(Vec<J>),
        Obj(Vec<(String, J)>),
    }

    impl J {
        pub fn get(&self, k: &str) -> Option<&J> {
            match self {
                J::Obj(v) => v.iter().find(|(n, _)| n == k).map(|(_, v)| v),
                _ => None,
            }
        }
        pub fn str(&self) -> &str {
            match self {
                J::Str(s) => s,
                _ => panic!("not a string: {self:?}"),
            }
        }
        pub fn arr(&self) -> &[J] {
            match self {
                J::Arr(a) => a,
                _ => panic!("not an array: {self:?}"),
            }
        }
        pub fn obj(&self) -> &[(String, J)] {
            match self {
                J::Obj(o) => o,
                _ => panic!("not an object: {self:?}"),
            }
        }
        pub fn bool(&self) -> bool {
            matches!(self, J::Bool(true))
        }
    }

    pub fn parse(s: &str) -> J {
        let b: Vec<char> = s.chars().collect();
        let mut i = 0;
        let v = value(&b, &mut i);
        ws(&b, &mut i);
        assert_eq!(i, b.len(), "trailing data in JSON");
        v
    }

    fn ws(b: &[char], i: &mut usize) {
        while *i < b.len() && b[*i].is_whitespace() {
            *i += 1;
        }
    }

    fn value(b: &[char], i: &mut usize) -> J {
        ws(b, i);
        match b[*i] {
            '{' => {
                *i += 1;
                let mut o = Vec::new();
                loop {
                    ws(b, i);
                    if b[*i] == '}' {
                        *i += 1;
                        return J::Obj(o);
                    }
                    let J::Str(k) = value(b, i) else {
                        panic!("object key")
                    };
                    ws(b, i);
                    assert_eq!(b[*i], ':');
                    *i += 1;
                    let v = value(b, i);
                    o.push((k, v));
                    ws(b, i);
                    if b[*i] == ',' {
                        *i += 1;
                    }
                }
            }
            '[' => {
                *i += 1;
                let mut a = Vec::new();
                loop {
                    ws(b, i);
                    if b[*i] == ']' {
                        *i += 1;
                        return J::Arr(a);
                    }
                    a.push(value(b, i));
                    ws(b, i);
                    if b[*i] == ',' {
                        *i += 1;
                    }
                }
            }
            '"' => {
                *i += 1;
                let mut s = String::new();
                while b[*i] != '"' {
                    if b[*i] == '\\' {
                        *i += 1;
                        match b[*i] {
                            'n' => s.push('\n'),
                            't' => s.push('\t'),
                            'r' => s.push('\r'),
                            'b' => s.push('\u{8}'),
                            'f' => s.push('\u{c}'),
                            'u' => {
                                let h: String = b[*i + 1..*i + 5].iter().collect();
                                let mut cp = u32::from_str_radix(&h, 16).expect("hex");
                                *i += 4;
                                if (0xd800..0xdc00).contains(&cp) {
                                    let l: String = b[*i + 3..*i + 7].iter().collect();
                                    let lo = u32::from_str_radix(&l, 16).expect("hex");
                                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                                    *i += 6;
                                }
                                s.push(char::from_u32(cp).expect("code point"));
                            }
                            c => s.push(c),
                        }
                    } else {
                        s.push(b[*i]);
                    }
                    *i += 1;
                }
                *i += 1;
                J::Str(s)
            }
            't' => {
                *i += 4;
                J::Bool(true)
            }
            'f' => {
                *i += 5;
                J::Bool(false)
            }
            'n' => {
                *i += 4;
                J::Null
            }
            _ => {
                let st = *i;
                while *i < b.len() && "+-0123456789.eE".contains(b[*i]) {
                    *i += 1;
                }
                let t: String = b[st..*i].iter().collect();
                J::Num(t.parse().expect("number"))
            }
        }
    }
}

#[test]
fn every_reference_case_renders_exactly() {
    let cases = json::parse(&std::fs::read_to_string(chat("cases.json")).unwrap());
    let bos = cases.get("bos_token").unwrap().str().to_string();
    let eos = cases.get("eos_token").unwrap().str().to_string();
    let convs = cases.get("conversations").unwrap();
    let mut failures = Vec::new();
    let mut n = 0;
    for case in cases.get("cases").unwrap().arr() {
        n += 1;
        let name = case.get("template").unwrap().str();
        let conv_name = case.get("conversation").unwrap().str();
        let gen = case.get("add_generation_prompt").unwrap().bool();
        let label = format!("{name} / {conv_name} / gen={gen}");
        let src = std::fs::read_to_string(chat(&format!("{name}.jinja"))).unwrap();
        let msgs: Vec<Message> = convs
            .get(conv_name)
            .unwrap()
            .arr()
            .iter()
            .map(|m| {
                assert_eq!(m.obj().len(), 2, "messages carry role and content only");
                Message::new(
                    m.get("role").unwrap().str(),
                    m.get("content").unwrap().str(),
                )
            })
            .collect();
        let opts = RenderOptions {
            add_generation_prompt: gen,
            bos_token: bos.clone(),
            eos_token: eos.clone(),
            now: Some(DateTime::from_unix(REFERENCE_NOW)),
            extra: Vec::new(),
        };
        let got = ChatTemplate::new(&src).and_then(|t| t.render(&msgs, &opts));
        match (case.get("output"), case.get("error")) {
            (Some(file), _) => {
                let want = std::fs::read_to_string(chat(file.str())).unwrap();
                match got {
                    Ok(text) if text == want => {}
                    Ok(text) => {
                        let at = text
                            .bytes()
                            .zip(want.bytes())
                            .position(|(a, b)| a != b)
                            .unwrap_or(text.len().min(want.len()));
                        failures.push(format!(
                            "{label}: differs at byte {at}\n  got:  {:?}\n  want: {:?}",
                            &text[text.floor_char_boundary(at.saturating_sub(20))..],
                            &want[want.floor_char_boundary(at.saturating_sub(20))..]
                        ))
                    }
                    Err(e) => failures.push(format!("{label}: {e}")),
                }
            }
            (None, Some(err)) => match got {
                Err(ChatError::Raised(m)) if m == err.str() => {}
                other => failures.push(format!(
                    "{label}: expected raise_exception({:?}), got {other:?}",
                    err.str()
                )),
            },
            (None, None) => panic!("{label}: case has neither output nor error"),
        }
    }
    assert!(n >= 88, "only {n} cases read");
    assert!(
        failures.is_empty(),
        "{} of {n} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
