//! llama.cpp's GBNF grammars, parsed as llama.cpp's `llama_grammar_parser`
//! reads them and rewritten as the Lark-like grammar `llguidance` compiles
//! ([`gbnf_to_lark`]).
//!
//! GBNF is matched character by character, while llguidance lexes its
//! terminals greedily; so every terminal is written as one character (a
//! string literal becomes a sequence of one-character literals, a character
//! class one single-character regex), which keeps GBNF's meaning exactly:
//! no two terminals can compete for a longer match.
//!
//! The syntax: rules `name ::= alternatives`, one per line (a newline ends
//! a rule except inside parentheses or after `|`); `"literal"` with the
//! escapes `\x.. \u.... \U........ \t \r \n \\ \" \[ \]`; character classes
//! `[a-z]`, `[^...]`; `.` (any character); rule references; `( ... )`
//! groups; the postfix `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}`; `#` comments.
//! The grammar must define `root`, and every rule it references.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One element of a sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    /// A literal string (possibly empty).
    Literal(Vec<char>),
    /// A character class: inclusive ranges, negated or not.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// Any character.
    Any,
    /// A rule reference.
    Rule(String),
    /// A parenthesized group of alternatives.
    Group(Vec<Vec<Item>>),
    /// An item repeated `min..=max` times (`None`: unbounded).
    Repeat {
        item: Box<Item>,
        min: u32,
        max: Option<u32>,
    },
}

/// A parsed grammar: rule name -> alternatives (each a sequence).
#[derive(Debug)]
struct Grammar {
    rules: BTreeMap<String, Vec<Vec<Item>>>,
    /// Names in order of first definition.
    order: Vec<String>,
}

/// Largest count a `{m,n}` repetition may use (llama.cpp expands them; a
/// bigger one is surely a mistake).
const MAX_REPEAT: u32 = 100_000;

/// Deepest nesting of groups and of repetitions of repetitions (the
/// parser, and the rewriting after it, recurse once per level).
const MAX_DEPTH: usize = 200;

struct Parser<'a> {
    src: &'a str,
    pos: usize,
    /// Groups open around the current position.
    depth: usize,
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-'
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek2(&self) -> Option<char> {
        self.rest().chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// Where we are, for messages: line, column and the text that follows.
    fn here(&self) -> String {
        let before = &self.src[..self.pos];
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        let after: String = self.rest().chars().take(20).collect();
        if after.is_empty() {
            format!("line {line}, column {col} (end of grammar)")
        } else {
            format!("line {line}, column {col} ('{}')", after.escape_debug())
        }
    }

    fn err(&self, what: &str) -> String {
        format!("{what} at {}", self.here())
    }

    /// Skip spaces, tabs and `#` comments; newlines too when `newline_ok`.
    fn space(&mut self, newline_ok: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => {
                    self.bump();
                }
                '#' => {
                    while let Some(c) = self.peek() {
                        if c == '\r' || c == '\n' {
                            break;
                        }
                        self.bump();
                    }
                }
                '\r' | '\n' if newline_ok => {
                    self.bump();
                }
                _ => break,
            }
        }
    }

    fn name(&mut self) -> Result<String, String> {
        let start = self.pos;
        while self.peek().is_some_and(is_word_char) {
            self.bump();
        }
        if self.pos == start {
            return Err(self.err("expecting a rule name"));
        }
        Ok(self.src[start..self.pos].to_string())
    }

    fn hex(&mut self, n: usize) -> Result<char, String> {
        let mut v: u32 = 0;
        for _ in 0..n {
            let d = self
                .peek()
                .and_then(|c| c.to_digit(16))
                .ok_or_else(|| self.err(&format!("expecting {n} hex digits")))?;
            self.bump();
            v = v * 16 + d;
        }
        char::from_u32(v).ok_or_else(|| self.err(&format!("U+{v:X} is not a character")))
    }

    /// One character of a literal or class, escapes decoded.
    fn char_(&mut self) -> Result<char, String> {
        match self.bump() {
            None => Err(self.err("unexpected end of grammar")),
            Some('\\') => match self.bump() {
                Some('x') => self.hex(2),
                Some('u') => self.hex(4),
                Some('U') => self.hex(8),
                Some('t') => Ok('\t'),
                Some('r') => Ok('\r'),
                Some('n') => Ok('\n'),
                Some(c @ ('\\' | '"' | '[' | ']')) => Ok(c),
                Some(c) => Err(format!(
                    "unknown escape '\\{}' at {}",
                    c.escape_debug(),
                    self.here()
                )),
                None => Err(self.err("unexpected end of grammar after '\\'")),
            },
            Some(c) => Ok(c),
        }
    }

    fn alternates(&mut self, nested: bool) -> Result<Vec<Vec<Item>>, String> {
        let mut alts = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.bump();
            self.space(true);
            alts.push(self.sequence(nested)?);
        }
        Ok(alts)
    }

    fn repeat(&mut self, seq: &mut [Item], min: u32, max: Option<u32>) -> Result<(), String> {
        let Some(last) = seq.last_mut() else {
            return Err(self.err("a repetition with no item before it"));
        };
        let mut nested = 0;
        let mut it: &Item = last;
        while let Item::Repeat { item, .. } = it {
            nested += 1;
            it = item;
        }
        if self.depth + nested >= MAX_DEPTH {
            return Err(self.err(&format!(
                "more than {MAX_DEPTH} nested groups and repetitions"
            )));
        }
        let item = std::mem::replace(last, Item::Any);
        *last = Item::Repeat {
            item: Box::new(item),
            min,
            max,
        };
        Ok(())
    }

    fn count(&mut self) -> Result<u32, String> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.bump();
        }
        if start == self.pos {
            return Err(self.err("expecting a number"));
        }
        match self.src[start..self.pos].parse::<u32>() {
            Ok(n) if n <= MAX_REPEAT => Ok(n),
            _ => Err(format!(
                "repetition count {} is larger than {MAX_REPEAT} at {}",
                &self.src[start..self.pos],
                self.here()
            )),
        }
    }

    fn sequence(&mut self, nested: bool) -> Result<Vec<Item>, String> {
        let mut seq = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                '"' => {
                    self.bump();
                    let mut s = Vec::new();
                    loop {
                        match self.peek() {
                            None => return Err(self.err("unterminated string literal")),
                            Some('"') => {
                                self.bump();
                                break;
                            }
                            Some(_) => s.push(self.char_()?),
                        }
                    }
                    seq.push(Item::Literal(s));
                    self.space(nested);
                }
                '[' => {
                    self.bump();
                    let negated = self.peek() == Some('^');
                    if negated {
                        self.bump();
                    }
                    let mut ranges = Vec::new();
                    loop {
                        match self.peek() {
                            None => return Err(self.err("unterminated character class")),
                            Some(']') => {
                                self.bump();
                                break;
                            }
                            Some(_) => {
                                let lo = self.char_()?;
                                let hi = if self.peek() == Some('-')
                                    && self.peek2().is_some_and(|c| c != ']')
                                {
                                    self.bump();
                                    self.char_()?
                                } else {
                                    lo
                                };
                                if hi < lo {
                                    return Err(self.err(&format!(
                                        "character range '{}-{}' runs backwards",
                                        lo.escape_debug(),
                                        hi.escape_debug()
                                    )));
                                }
                                ranges.push((lo, hi));
                            }
                        }
                    }
                    seq.push(Item::Class { negated, ranges });
                    self.space(nested);
                }
                '.' => {
                    self.bump();
                    seq.push(Item::Any);
                    self.space(nested);
                }
                '(' => {
                    if self.depth >= MAX_DEPTH {
                        return Err(self.err(&format!("more than {MAX_DEPTH} nested groups")));
                    }
                    self.bump();
                    self.space(true);
                    self.depth += 1;
                    let alts = self.alternates(true);
                    self.depth -= 1;
                    let alts = alts?;
                    if self.peek() != Some(')') {
                        return Err(self.err("expecting ')'"));
                    }
                    self.bump();
                    seq.push(Item::Group(alts));
                    self.space(nested);
                }
                '*' | '+' | '?' => {
                    self.bump();
                    let (min, max) = match c {
                        '*' => (0, None),
                        '+' => (1, None),
                        _ => (0, Some(1)),
                    };
                    self.repeat(&mut seq, min, max)?;
                    self.space(nested);
                }
                '{' => {
                    self.bump();
                    self.space(nested);
                    let min = self.count()?;
                    self.space(nested);
                    let max = if self.peek() == Some(',') {
                        self.bump();
                        self.space(nested);
                        if self.peek() == Some('}') {
                            None
                        } else {
                            Some(self.count()?)
                        }
                    } else {
                        Some(min)
                    };
                    self.space(nested);
                    if self.peek() != Some('}') {
                        return Err(self.err("expecting '}'"));
                    }
                    self.bump();
                    if max.is_some_and(|m| m < min) {
                        return Err(self.err("repetition {m,n} with n < m"));
                    }
                    self.repeat(&mut seq, min, max)?;
                    self.space(nested);
                }
                '<' => return Err(self.err("token references (<...>) are not supported")),
                c if is_word_char(c) => {
                    let name = self.name()?;
                    seq.push(Item::Rule(name));
                    self.space(nested);
                }
                _ => break,
            }
        }
        Ok(seq)
    }

    fn rule(&mut self, g: &mut Grammar) -> Result<(), String> {
        let name = self.name()?;
        self.space(false);
        if !self.rest().starts_with("::=") {
            return Err(self.err("expecting '::='"));
        }
        self.pos += 3;
        self.space(true);
        let alts = self.alternates(false)?;
        match self.peek() {
            None => {}
            Some('\r') => {
                self.bump();
                if self.peek() == Some('\n') {
                    self.bump();
                }
            }
            Some('\n') => {
                self.bump();
            }
            Some(_) => return Err(self.err("expecting a newline or the end")),
        }
        if !g.rules.contains_key(&name) {
            g.order.push(name.clone());
        }
        // a second definition replaces the first, as in llama.cpp
        g.rules.insert(name, alts);
        self.space(true);
        Ok(())
    }
}

fn parse(src: &str) -> Result<Grammar, String> {
    let mut p = Parser {
        src,
        pos: 0,
        depth: 0,
    };
    let mut g = Grammar {
        rules: BTreeMap::new(),
        order: Vec::new(),
    };
    p.space(true);
    while p.peek().is_some() {
        p.rule(&mut g)?;
    }
    if !g.rules.contains_key("root") {
        return Err("the grammar has no 'root' rule".into());
    }
    fn check(items: &[Item], g: &Grammar, rule: &str) -> Result<(), String> {
        for it in items {
            match it {
                Item::Rule(r) if !g.rules.contains_key(r) => {
                    return Err(format!("rule '{rule}' uses the undefined rule '{r}'"))
                }
                Item::Group(alts) => {
                    for a in alts {
                        check(a, g, rule)?;
                    }
                }
                Item::Repeat { item, .. } => check(std::slice::from_ref(item), g, rule)?,
                _ => {}
            }
        }
        Ok(())
    }
    for (name, alts) in &g.rules {
        for a in alts {
            check(a, &g, name)?;
        }
    }
    Ok(g)
}

/// A Lark string literal of one character (JSON string syntax; llguidance's
/// lexer takes no raw control characters nor DEL).
fn lark_char(out: &mut String, c: char) {
    out.push('"');
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        c if (c as u32) < 0x20 || c == '\u{7f}' => {
            let _ = write!(out, "\\u{:04x}", c as u32);
        }
        c => out.push(c),
    }
    out.push('"');
}

fn regex_char(out: &mut String, c: char) {
    let _ = write!(out, "\\x{{{:x}}}", c as u32);
}

/// Lark's name of a GBNF rule: lower case (upper-case names are Lark
/// terminals), prefixed with its index so names stay distinct.
fn lark_name(names: &BTreeMap<&str, usize>, r: &str) -> String {
    let idx = names.get(r).copied().unwrap_or(0);
    let clean: String = r
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("r{idx}_{clean}")
}

/// Write `items` as one Lark sequence; `false` when it matches only the
/// empty string (nothing written).
fn emit_seq(out: &mut String, items: &[Item], names: &BTreeMap<&str, usize>) -> bool {
    let mut any = false;
    for it in items {
        let start = out.len();
        if any {
            out.push(' ');
        }
        if emit_item(out, it, names) {
            any = true;
        } else {
            out.truncate(start);
        }
    }
    any
}

fn emit_alts(out: &mut String, alts: &[Vec<Item>], names: &BTreeMap<&str, usize>) -> bool {
    // an empty alternative makes the whole group optional
    let mut parts = Vec::new();
    let mut empty = false;
    for a in alts {
        let mut s = String::new();
        if emit_seq(&mut s, a, names) {
            parts.push(s);
        } else {
            empty = true;
        }
    }
    if parts.is_empty() {
        return false;
    }
    if empty {
        let _ = write!(out, "({})?", parts.join(" | "));
    } else {
        out.push_str(&parts.join(" | "));
    }
    true
}

fn emit_item(out: &mut String, it: &Item, names: &BTreeMap<&str, usize>) -> bool {
    match it {
        Item::Literal(s) => {
            for (i, &c) in s.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                lark_char(out, c);
            }
            !s.is_empty()
        }
        Item::Class { negated, ranges } if ranges.is_empty() => {
            // [^] is any character; [] matches nothing
            out.push_str(if *negated { "/(?s:.)/" } else { "/[a&&b]/" });
            true
        }
        Item::Class { negated, ranges } => {
            out.push_str("/[");
            if *negated {
                out.push('^');
            }
            for &(lo, hi) in ranges {
                regex_char(out, lo);
                if hi != lo {
                    out.push('-');
                    regex_char(out, hi);
                }
            }
            out.push_str("]/");
            true
        }
        Item::Any => {
            out.push_str("/(?s:.)/");
            true
        }
        Item::Rule(r) => {
            out.push_str(&lark_name(names, r));
            true
        }
        Item::Group(alts) => {
            let mut s = String::new();
            if !emit_alts(&mut s, alts, names) {
                return false;
            }
            let _ = write!(out, "({s})");
            true
        }
        Item::Repeat { item, min, max } => {
            if *max == Some(0) {
                return false;
            }
            let mut s = String::new();
            if !emit_item(&mut s, item, names) {
                return false;
            }
            let _ = write!(out, "({s})");
            match (*min, *max) {
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (0, Some(1)) => out.push('?'),
                (m, None) => {
                    let _ = write!(out, "{{{m},}}");
                }
                (m, Some(n)) if m == n => {
                    let _ = write!(out, "{{{m}}}");
                }
                (m, Some(n)) => {
                    let _ = write!(out, "{{{m},{n}}}");
                }
            }
            true
        }
    }
}

/// The Lark grammar (llguidance's syntax) matching exactly what the GBNF
/// grammar `src` matches from its `root` rule; or a message naming the
/// problem and where it is.
pub fn gbnf_to_lark(src: &str) -> Result<String, String> {
    let g = parse(src)?;
    let names: BTreeMap<&str, usize> = g
        .order
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();
    let mut out = format!("start: {}\n", lark_name(&names, "root"));
    for name in &g.order {
        let alts = &g.rules[name];
        let mut body = String::new();
        if !emit_alts(&mut body, alts, &names) {
            // a rule matching only the empty string
            body.push_str("\"\"");
        }
        let _ = writeln!(out, "{}: {body}", lark_name(&names, name));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_repeat_and_classes() {
        let l = gbnf_to_lark("root ::= \"a\"{5,5}").unwrap();
        assert_eq!(l, "start: r0_root\nr0_root: (\"a\"){5}\n");
        let l = gbnf_to_lark("root ::= [a-z]+ \"\\n\" ws\nws ::= [ \\t]*  # c\n").unwrap();
        assert!(
            l.contains("r0_root: (/[\\x{61}-\\x{7a}]/)+ \"\\u000a\" r1_ws"),
            "{l}"
        );
        assert!(l.contains("r1_ws: (/[\\x{20}\\x{9}]/)*"), "{l}");
        let l = gbnf_to_lark("root ::= (\"ab\" | \"\") .").unwrap();
        assert!(l.contains("r0_root: ((\"a\" \"b\")?) /(?s:.)/"), "{l}");
    }

    #[test]
    fn multiline_alternatives_and_names() {
        let g = "root ::= (\n  Foo-bar |\n  \"x\"\n)\nFoo-bar ::= [^\"]{2,}\n";
        let l = gbnf_to_lark(g).unwrap();
        assert!(l.contains("r1_foo_bar: (/[^\\x{22}]/){2,}"), "{l}");
        assert!(l.contains("r0_root: (r1_foo_bar | \"x\")"), "{l}");
    }

    /// Whether the grammar, compiled by llguidance over a one-byte-per-token
    /// vocabulary, takes `text` byte by byte and may end after it.
    fn accepts(gbnf: &str, text: &str) -> bool {
        use llguidance::api::TopLevelGrammar;
        use llguidance::toktrie::ApproximateTokEnv;
        use llguidance::{Matcher, ParserFactory};
        let env = ApproximateTokEnv::single_byte_env();
        let mut f = ParserFactory::new_simple(&env).unwrap();
        f.quiet();
        let lark = gbnf_to_lark(gbnf).unwrap();
        let mut m = Matcher::new(f.create_parser(TopLevelGrammar::from_lark(lark)));
        assert!(!m.is_error(), "{:?}", m.get_error());
        for &b in text.as_bytes() {
            let mask = m.compute_mask_or_eos().unwrap();
            if !mask.is_allowed(u32::from(b)) {
                return false;
            }
            m.consume_token(u32::from(b)).unwrap();
        }
        m.is_accepting().unwrap()
    }

    #[test]
    fn matches_character_by_character_as_gbnf() {
        // a greedy lexer would take "abc" (or all of "abx") and fail: GBNF does not
        let g = "root ::= (\"ab\" | \"abc\") \"cd\"";
        assert!(accepts(g, "abcd") && accepts(g, "abccd") && !accepts(g, "abd"));
        let g = "root ::= [a-z]+ \"x\"";
        assert!(accepts(g, "abx") && accepts(g, "xx") && !accepts(g, "ab"));
        let g = "root ::= [α-ω]+";
        assert!(accepts(g, "αβγ") && !accepts(g, "abc"));
        assert!(accepts("root ::= [^\"]*", "a\nb") && !accepts("root ::= [^\"]*", "a\"b"));
        assert!(accepts("root ::= \"a\"{2,3}", "aaa") && !accepts("root ::= \"a\"{2,3}", "aaaa"));
    }

    #[test]
    fn a_json_grammar() {
        let g = r#"
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-7]?)? ws
ws     ::= | " " | "\n" [ \t]{0,20}
"#;
        assert!(accepts(g, r#"{"a": [1, -2.5e3, "x\n\u00e9"], "b": null}"#));
        assert!(accepts(g, "{\n  \"k\": {\"t\": true}}"));
        assert!(!accepts(g, r#"{"a": }"#));
        assert!(!accepts(g, "{'a': 1}"));
        assert!(!accepts(g, "{\"a\": \"tab\there\"}"));
    }

    #[test]
    fn errors_name_the_problem() {
        let e = |g: &str| gbnf_to_lark(g).unwrap_err();
        assert!(e("root ::= foo").contains("undefined rule 'foo'"));
        assert!(e("main ::= \"a\"").contains("no 'root' rule"));
        assert!(e("root ::= \"a").contains("unterminated string"));
        assert!(e("root = \"a\"").contains("expecting '::='"));
        assert!(e("root ::= [a-").contains("unterminated character class"));
        assert!(e("root ::= \"\\q\"").contains("unknown escape"));
        assert!(e("root ::= * \"a\"").contains("no item before it"));
        assert!(e("root ::= \"a\"{3,1}").contains("n < m"));
        assert!(e("root ::= (\"a\"").contains("expecting ')'"));
        assert!(e("root ::= \"a\" )").contains("line 1, column 14"));
        // deep nesting is refused, not a stack overflow
        let deep = format!(
            "root ::= {}\"a\"{}",
            "(".repeat(100_000),
            ")".repeat(100_000)
        );
        assert!(e(&deep).contains("nested groups"));
        let stars = format!("root ::= \"a\"{}", "*".repeat(100_000));
        assert!(e(&stars).contains("nested groups and repetitions"));
    }
}
