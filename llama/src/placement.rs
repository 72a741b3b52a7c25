//! Tensor placement: which backend each weight lives on, with llama.cpp's
//! flags and semantics (`-ngl`, `-ot REGEX=BACKEND`, `--cpu-moe`,
//! `--n-cpu-moe N`).
//!
//! Rules are applied per tensor name: the override rules first, in order
//! (regex *search*, first match wins), then the layer rule: layers
//! `n_layer - ngl ..` and, when `ngl > n_layer`, the output head go to the
//! device; the token embedding always stays in host memory.
//! `--cpu-moe`/`--n-cpu-moe` add override rules after the explicit `-ot`
//! ones (llama.cpp appends them in command-line order; here explicit rules
//! always come first).

use regex::Regex;

use crate::error::{LlamaError, Result};

/// llama.cpp's default pattern for expert tensors.
pub const EXPERT_PATTERN: &str = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps";

/// One `-ot` rule: tensors whose name matches go to `backend`.
#[derive(Clone, Debug)]
pub struct OverrideRule {
    /// The compiled pattern (searched, not anchored).
    pub pattern: Regex,
    /// Backend name (`CPU`, `SIM0`, `CUDA0`, ...).
    pub backend: String,
}

/// How to place a model's weights.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// Layers on the device (`-ngl`); `None` = all, when a device is used.
    pub n_gpu_layers: Option<usize>,
    /// `-ot` rules in order.
    pub overrides: Vec<OverrideRule>,
    /// `--cpu-moe`: every expert tensor in host memory.
    pub cpu_moe: bool,
    /// `--n-cpu-moe N`: expert tensors of layers `0..N` in host memory.
    pub n_cpu_moe: usize,
}

/// Where a weight goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Host memory (used in place from the mapped file).
    Host,
    /// The device backend with this name.
    Device(String),
}

impl Placement {
    /// Parse one `-ot` argument: `REGEX=BACKEND[,REGEX=BACKEND...]`.
    pub fn parse_overrides(arg: &str) -> Result<Vec<OverrideRule>> {
        let mut out = Vec::new();
        for part in arg.split(',').filter(|p| !p.is_empty()) {
            let (pat, be) = part.rsplit_once('=').ok_or_else(|| {
                LlamaError::Placement(format!(
                    "override '{part}' is not of the form REGEX=BACKEND"
                ))
            })?;
            if be.is_empty() {
                return Err(LlamaError::Placement(format!(
                    "override '{part}' names no backend"
                )));
            }
            let pattern = Regex::new(pat).map_err(|e| {
                LlamaError::Placement(format!("override regex '{pat}' does not compile: {e}"))
            })?;
            out.push(OverrideRule {
                pattern,
                backend: be.to_string(),
            });
        }
        Ok(out)
    }

    /// All override rules in the order they apply: explicit ones, then those
    /// implied by `--cpu-moe` / `--n-cpu-moe`.
    pub fn effective_overrides(&self) -> Vec<OverrideRule> {
        let mut rules = self.overrides.clone();
        let cpu = |pat: String| OverrideRule {
            pattern: Regex::new(&pat).expect("built-in expert pattern compiles"),
            backend: "CPU".into(),
        };
        if self.cpu_moe {
            rules.push(cpu(EXPERT_PATTERN.to_string()));
        }
        for il in 0..self.n_cpu_moe {
            rules.push(cpu(format!(r"blk\.{il}{EXPERT_PATTERN}")));
        }
        rules
    }

    /// Decide where the tensor `name` goes, given the device (if any) and
    /// the layer count. `backends` are the names that exist (for checking
    /// override targets).
    pub fn target(
        &self,
        rules: &[OverrideRule],
        name: &str,
        device: Option<&str>,
        n_layer: usize,
    ) -> Result<Target> {
        for r in rules {
            if r.pattern.is_match(name) {
                if r.backend.eq_ignore_ascii_case("CPU") {
                    return Ok(Target::Host);
                }
                return match device {
                    Some(d) if d == r.backend => Ok(Target::Device(d.to_string())),
                    _ => Err(LlamaError::Placement(format!(
                        "override sends '{name}' to backend '{}', which is not in use (available: CPU{})",
                        r.backend,
                        device.map(|d| format!(", {d}")).unwrap_or_default()
                    ))),
                };
            }
        }
        let Some(dev) = device else {
            return Ok(Target::Host);
        };
        let layer = if let Some(rest) = name.strip_prefix("blk.") {
            rest.split('.').next().and_then(|n| n.parse::<usize>().ok())
        } else if name.starts_with("output") {
            Some(n_layer)
        } else {
            None // token_embd and anything outside the layers: input layer, host
        };
        match layer {
            Some(il) if self.layer_on_device(il, n_layer) => Ok(Target::Device(dev.to_string())),
            _ => Ok(Target::Host),
        }
    }

    /// Whether layer `il` (`n_layer` = the output head) is on the device:
    /// the last `ngl` layers are, and the head when `ngl > n_layer`
    /// (llama.cpp's `i_gpu_start` rule).
    pub fn layer_on_device(&self, il: usize, n_layer: usize) -> bool {
        let ngl = self.n_gpu_layers.unwrap_or(n_layer + 1);
        let start = n_layer.saturating_sub(ngl);
        il >= start && il - start < ngl.min(n_layer + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_moe_keeps_experts_on_host() {
        let p = Placement {
            cpu_moe: true,
            ..Default::default()
        };
        let rules = p.effective_overrides();
        let t = |n: &str| p.target(&rules, n, Some("SIM0"), 2).unwrap();
        assert_eq!(t("blk.0.ffn_up_exps.weight"), Target::Host);
        assert_eq!(t("blk.1.ffn_gate_exps.weight"), Target::Host);
        assert_eq!(
            t("blk.1.ffn_gate_inp.weight"),
            Target::Device("SIM0".into())
        );
        assert_eq!(t("token_embd.weight"), Target::Host);
        assert_eq!(t("output.weight"), Target::Device("SIM0".into()));
    }

    #[test]
    fn n_cpu_moe_and_ngl() {
        let p = Placement {
            n_cpu_moe: 1,
            n_gpu_layers: Some(2),
            ..Default::default()
        };
        let rules = p.effective_overrides();
        let t = |n: &str| p.target(&rules, n, Some("SIM0"), 3).unwrap();
        assert_eq!(t("blk.0.ffn_down_exps.weight"), Target::Host);
        assert_eq!(t("blk.1.attn_q.weight"), Target::Device("SIM0".into())); // last 2 of 3 layers
        assert_eq!(t("blk.0.attn_q.weight"), Target::Host);
        assert_eq!(
            t("blk.2.ffn_down_exps.weight"),
            Target::Device("SIM0".into())
        );
        assert_eq!(t("output.weight"), Target::Host); // ngl 2 <= n_layer 3
    }

    #[test]
    fn bad_overrides_are_errors() {
        assert!(Placement::parse_overrides("exps").is_err());
        assert!(Placement::parse_overrides("(unclosed=CPU")
            .unwrap_err()
            .to_string()
            .contains("does not compile"));
        let rules = Placement::parse_overrides("exps=CUDA3").unwrap();
        let p = Placement::default();
        let e = p
            .target(&rules, "blk.0.ffn_up_exps.weight", Some("SIM0"), 2)
            .unwrap_err();
        assert!(e.to_string().contains("CUDA3"));
    }
}
