//! The typed values of flags with a fixed set of words: `-fa
//! on|off|auto` ([`FlashAttn`]), llama.cpp's truthy and falsey words
//! ([`parse_on_off`], [`truthy`], [`falsey`]) and `--load-mode`.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser, ValueParser};
use ggml_core::gguf::LoadMode;

/// llama.cpp's truthy words (`common_arg_utils::is_truthy`).
pub fn truthy(s: &str) -> bool {
    matches!(s, "on" | "enabled" | "true" | "1")
}

/// llama.cpp's falsey words (`common_arg_utils::is_falsey`).
pub fn falsey(s: &str) -> bool {
    matches!(s, "off" | "disabled" | "false" | "0")
}

/// `on|off` and llama.cpp's other truthy and falsey words, any case.
pub fn parse_on_off(s: &str) -> Result<bool, String> {
    let l = s.to_ascii_lowercase();
    if truthy(&l) {
        Ok(true)
    } else if falsey(&l) {
        Ok(false)
    } else {
        Err(format!("unknown value '{s}' (on or off)"))
    }
}

/// A `--load-mode` name.
pub fn parse_load_mode(s: &str) -> Result<LoadMode, String> {
    s.parse()
}

/// Flash attention, as `-fa` says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FlashAttn {
    /// `on` (`1`, `enabled`, `true`, or `-fa` alone).
    On,
    /// `off` (`0`, `disabled`, `false`), the default.
    #[default]
    Off,
    /// `auto` (`-1`): the mul_mat/soft_max path, except where a quantized
    /// V cache needs flash attention.
    Auto,
}

impl FlashAttn {
    /// The words shown in the help, then llama.cpp's other spellings
    /// (accepted, not shown).
    const SHOWN: [&'static str; 5] = ["on", "off", "auto", "1", "0"];
    const HIDDEN: [&'static str; 5] = ["enabled", "disabled", "true", "false", "-1"];

    /// Whether it is `on` (`auto` decides later, from the KV cache types).
    pub fn is_on(self) -> bool {
        self == FlashAttn::On
    }

    /// The clap parser: `[possible values: on, off, auto, 1, 0]`.
    pub fn value_parser() -> ValueParser {
        let shown = Self::SHOWN.iter().map(|w| PossibleValue::new(*w));
        let hidden = Self::HIDDEN
            .iter()
            .map(|w| PossibleValue::new(*w).hide(true));
        PossibleValuesParser::new(shown.chain(hidden))
            .try_map(|s| s.parse::<FlashAttn>())
            .into()
    }
}

impl std::str::FromStr for FlashAttn {
    type Err = String;
    fn from_str(s: &str) -> Result<FlashAttn, String> {
        match s {
            "auto" | "-1" => Ok(FlashAttn::Auto),
            s if truthy(s) => Ok(FlashAttn::On),
            s if falsey(s) => Ok(FlashAttn::Off),
            _ => Err(format!("unknown value '{s}' (on, off or auto)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flash_attn_words_as_llama_cpp() {
        for (w, v) in [
            ("on", FlashAttn::On),
            ("1", FlashAttn::On),
            ("enabled", FlashAttn::On),
            ("true", FlashAttn::On),
            ("off", FlashAttn::Off),
            ("0", FlashAttn::Off),
            ("disabled", FlashAttn::Off),
            ("auto", FlashAttn::Auto),
            ("-1", FlashAttn::Auto),
        ] {
            assert_eq!(w.parse::<FlashAttn>(), Ok(v), "{w}");
        }
        assert!("maybe".parse::<FlashAttn>().is_err());
        assert_eq!(parse_on_off("ON"), Ok(true));
        assert_eq!(parse_on_off("disabled"), Ok(false));
        assert!(parse_on_off("2").unwrap_err().contains("'2'"));
    }
}
