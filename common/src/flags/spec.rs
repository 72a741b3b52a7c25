//! What one entry of the flag table says ([`Flag`]): its spellings, the
//! tools that take it, its help, its value ([`Value`], parsed as
//! [`Parse`] says) and its environment variable; and the builder the
//! table is written with (`Flag::new(..).takes(..).env(..)`).

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser, ValueParser};

use super::values;

/// A program of this project that takes flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tool {
    /// `llama-run` (llama.cpp's `llama-cli` / `llama-completion`).
    Run,
    /// `llama-bench` (its own parser: lists of test values).
    Bench,
    /// `llama-server`.
    Server,
    /// `llama-quantize`.
    Quantize,
    /// `llama-tokenize`.
    Tokenize,
    /// `llama-moe-cache` (ours).
    MoeCache,
    /// `llama-timeline` (ours).
    Timeline,
}

impl Tool {
    /// Every tool.
    pub const ALL: [Tool; 7] = [
        Tool::Run,
        Tool::Bench,
        Tool::Server,
        Tool::Quantize,
        Tool::Tokenize,
        Tool::MoeCache,
        Tool::Timeline,
    ];

    /// The binary's name.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Run => "llama-run",
            Tool::Bench => "llama-bench",
            Tool::Server => "llama-server",
            Tool::Quantize => "llama-quantize",
            Tool::Tokenize => "llama-tokenize",
            Tool::MoeCache => "llama-moe-cache",
            Tool::Timeline => "llama-timeline",
        }
    }

    /// Whether the tool reads the flags' environment variables: the tools
    /// whose llama.cpp counterpart parses its command line with
    /// `common_params_parse` (llama-cli, llama-server, llama-tokenize) do;
    /// llama-bench and llama-quantize have parsers of their own that read
    /// none, and the tools of our own have no llama.cpp variables.
    pub fn reads_env(self) -> bool {
        matches!(self, Tool::Run | Tool::Server | Tool::Tokenize)
    }
}

/// How a flag's value is parsed into the field that holds it: the Rust
/// type of that field (a mismatch is caught by the table's tests, which
/// give every flag a value), or a parser of values from a fixed set.
#[derive(Clone, Copy, Debug)]
pub enum Parse {
    /// Text, as given.
    Str,
    /// A file or folder path.
    Path,
    /// `usize`.
    Usize,
    /// `i64`.
    I64,
    /// `i32`.
    I32,
    /// `u16`.
    U16,
    /// `u32`.
    U32,
    /// `u64`.
    U64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `on|off` (llama.cpp's truthy and falsey words) into a `bool`.
    OnOff,
    /// `-fa`'s `on|off|auto` into [`values::FlashAttn`].
    FlashAttn,
    /// `--load-mode` into [`ggml_core::gguf::LoadMode`].
    LoadMode,
    /// One of these words, as text (`[possible values: ..]` in the help).
    Choice(&'static [&'static str]),
    /// The field's own parser, declared at the field (`value_parser = f`):
    /// for types of the tool that holds it.
    Own,
}

impl Parse {
    /// The clap parser (`None` for [`Parse::Own`]: the field's stays).
    pub fn value_parser(self) -> Option<ValueParser> {
        Some(match self {
            Parse::Str => clap::value_parser!(String),
            Parse::Path => clap::value_parser!(std::path::PathBuf),
            Parse::Usize => clap::value_parser!(usize).into(),
            Parse::I64 => clap::value_parser!(i64).into(),
            Parse::I32 => clap::value_parser!(i32).into(),
            Parse::U16 => clap::value_parser!(u16).into(),
            Parse::U32 => clap::value_parser!(u32).into(),
            Parse::U64 => clap::value_parser!(u64).into(),
            Parse::F32 => clap::value_parser!(f32).into(),
            Parse::F64 => clap::value_parser!(f64).into(),
            Parse::OnOff => ValueParser::new(values::parse_on_off),
            Parse::FlashAttn => values::FlashAttn::value_parser(),
            Parse::LoadMode => ValueParser::new(values::parse_load_mode),
            Parse::Choice(words) => PossibleValuesParser::new(words.iter().map(PossibleValue::new))
                .map(String::from)
                .into(),
            Parse::Own => return None,
        })
    }

    /// A value this parser takes (for the table's tests and examples).
    pub fn sample(self) -> Option<&'static str> {
        match self {
            Parse::Str => Some("sample"),
            Parse::Path => Some("sample.gguf"),
            Parse::Usize | Parse::I64 | Parse::I32 | Parse::U16 | Parse::U32 | Parse::U64 => {
                Some("3")
            }
            Parse::F32 | Parse::F64 => Some("0.5"),
            Parse::OnOff | Parse::FlashAttn => Some("on"),
            Parse::LoadMode => Some("mmap"),
            Parse::Choice(words) => words.last().copied(),
            Parse::Own => None,
        }
    }
}

/// The value a flag takes.
#[derive(Clone, Copy, Debug)]
pub struct Value {
    /// Its name in the help (`N`, `FNAME`; llama-bench writes it as is,
    /// `<n>`).
    pub name: &'static str,
    /// How it is parsed.
    pub parse: Parse,
    /// The value when the flag is not given.
    pub default: Option<&'static str>,
    /// The value when the flag is given alone (`-fa` = `-fa on`).
    pub alone: Option<&'static str>,
    /// A comma-separated list (`--moe-cache-mib 64,32`).
    pub list: bool,
    /// Takes negative numbers (`-ngl -1`).
    pub negative: bool,
    /// Takes values that start with `-` (`--sim-mem-mib -5` reaches the
    /// check that names it).
    pub hyphen: bool,
}

/// How a switch reads its environment variable (llama.cpp's two kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvSwitch {
    /// A switch without a `--no-` form in llama.cpp: set when the
    /// variable is truthy (`1`, `true`, `on`, `enabled`), any other value
    /// leaves it off.
    Truthy,
    /// A switch llama.cpp also has as `--no-X`: the variable is truthy or
    /// falsey (`0`, `false`, `off`, `disabled`; anything else is an
    /// error), and `LLAMA_ARG_NO_X` set to anything means falsey.
    Bool,
}

/// One flag: each spelling once, with the tools that take it.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    /// The clap id: the name of the field that holds the value (for
    /// llama-bench, the test parameter's field in its outputs).
    pub id: &'static str,
    /// Every spelling, as typed: llama.cpp's multi-letter shorts
    /// (`-ngl`), a one-letter short (`-t`), the long name (the first
    /// `--` one), more long names (hidden aliases).
    pub names: &'static [&'static str],
    /// The tools that take it.
    pub tools: &'static [Tool],
    /// One line of help (the help shows the multi-letter shorts first,
    /// `[-ngl] ...`, where the tool's parser cannot show them itself).
    pub help: &'static str,
    /// The value, `None` for a switch.
    pub value: Option<Value>,
    /// llama.cpp's environment variable (`LLAMA_ARG_N_GPU_LAYERS`).
    pub env: Option<&'static str>,
    /// How a switch reads [`Flag::env`].
    pub env_switch: EnvSwitch,
    /// For a `--no-X` switch: it turns off X (the id of X, which may not be
    /// a flag of ours), so `X`'s falsey variable sets it.
    pub negates: Option<&'static str>,
    /// Not shown in the help.
    pub hidden: bool,
}

impl Flag {
    /// A switch named `names` that `tools` take, with its help.
    pub const fn new(
        id: &'static str,
        names: &'static [&'static str],
        tools: &'static [Tool],
        help: &'static str,
    ) -> Flag {
        Flag {
            id,
            names,
            tools,
            help,
            value: None,
            env: None,
            env_switch: EnvSwitch::Truthy,
            negates: None,
            hidden: false,
        }
    }

    /// It takes a value named `name`, parsed as `parse`.
    pub const fn takes(mut self, name: &'static str, parse: Parse) -> Flag {
        self.value = Some(Value {
            name,
            parse,
            default: None,
            alone: None,
            list: false,
            negative: false,
            hyphen: false,
        });
        self
    }

    const fn value_mut(self) -> Value {
        match self.value {
            Some(v) => v,
            None => panic!("a value setting on a switch: call takes() first"),
        }
    }

    /// Its value when not given.
    pub const fn default(mut self, v: &'static str) -> Flag {
        let mut value = self.value_mut();
        value.default = Some(v);
        self.value = Some(value);
        self
    }

    /// Its value when given alone.
    pub const fn alone(mut self, v: &'static str) -> Flag {
        let mut value = self.value_mut();
        value.alone = Some(v);
        self.value = Some(value);
        self
    }

    /// It takes a comma-separated list.
    pub const fn list(mut self) -> Flag {
        let mut value = self.value_mut();
        value.list = true;
        self.value = Some(value);
        self
    }

    /// It takes negative numbers.
    pub const fn negative(mut self) -> Flag {
        let mut value = self.value_mut();
        value.negative = true;
        self.value = Some(value);
        self
    }

    /// It takes values that start with `-`.
    pub const fn hyphen(mut self) -> Flag {
        let mut value = self.value_mut();
        value.hyphen = true;
        self.value = Some(value);
        self
    }

    /// llama.cpp's environment variable for it.
    pub const fn env(mut self, var: &'static str) -> Flag {
        self.env = Some(var);
        self
    }

    /// llama.cpp's variable of a switch that llama.cpp has with a `--no-`
    /// form ([`EnvSwitch::Bool`]).
    pub const fn env_bool(mut self, var: &'static str) -> Flag {
        self.env = Some(var);
        self.env_switch = EnvSwitch::Bool;
        self
    }

    /// A `--no-X` switch: it turns off `id`.
    pub const fn negates(mut self, id: &'static str) -> Flag {
        self.negates = Some(id);
        self
    }

    /// Not shown in the help.
    pub const fn hidden(mut self) -> Flag {
        self.hidden = true;
        self
    }

    /// Whether `tool` takes it.
    pub fn is_for(&self, tool: Tool) -> bool {
        self.tools.contains(&tool)
    }

    /// The long name, without `--` (the first `--` spelling).
    pub fn long(&self) -> Option<&'static str> {
        self.names.iter().find_map(|n| n.strip_prefix("--"))
    }

    /// More long names, without `--` (hidden aliases).
    pub fn aliases(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.names
            .iter()
            .filter_map(|n| n.strip_prefix("--"))
            .skip(1)
    }

    /// The one-letter short, `t` of `-t`.
    pub fn short(&self) -> Option<char> {
        self.names.iter().find_map(|n| {
            let rest = n.strip_prefix('-').filter(|r| !r.starts_with('-'))?;
            let mut chars = rest.chars();
            let c = chars.next()?;
            chars.next().is_none().then_some(c)
        })
    }

    /// llama.cpp's multi-letter shorts (`-ngl`), which clap cannot declare.
    pub fn multi_letter(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.names
            .iter()
            .copied()
            .filter(|n| !n.starts_with("--") && n.len() > 2)
    }

    /// The help as clap shows it: the multi-letter shorts first, in
    /// brackets (`[-ngl] number of layers ...`).
    pub fn help_text(&self) -> String {
        let multi: Vec<&str> = self.multi_letter().collect();
        if multi.is_empty() {
            self.help.to_string()
        } else {
            format!("[{}] {}", multi.join(", "), self.help)
        }
    }

    /// Whether `spelling` is one of its names.
    pub fn spelled(&self, spelling: &str) -> bool {
        self.names.contains(&spelling)
    }
}

/// A llama.cpp flag a tool refuses by name, with the reason.
#[derive(Clone, Copy, Debug)]
pub struct Refused {
    /// Its spellings.
    pub names: &'static [&'static str],
    /// The tools that refuse it.
    pub tools: &'static [Tool],
    /// Why (`this tool runs local GGUF files`).
    pub why: &'static str,
}
