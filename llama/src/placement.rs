//! Tensor placement: which backend each weight lives on, with llama.cpp's
//! flags and semantics (`--device A,B`, `-ngl`, `-sm none|layer`, `-ts`,
//! `-mg`, `-ot REGEX=BACKEND`, `--cpu-moe`, `--n-cpu-moe N`).
//!
//! Rules are applied per tensor name: the override rules first, in order
//! (regex *search*, first match wins), then the layer rule
//! ([`Placement::layer_device`]): layers `n_layer - ngl ..` and, when
//! `ngl > n_layer`, the output head go to a device, split over the device
//! list by `tensor_split` as llama.cpp's `llama_model::load_tensors` splits
//! them; the token embedding always stays in host memory.
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

/// How layers are spread over several devices (llama.cpp's `-sm`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplitMode {
    /// `-sm none`: one device, `main_gpu`, holds every offloaded layer.
    None,
    /// `-sm layer` (the default): consecutive layers per device, in
    /// `tensor_split` proportions.
    #[default]
    Layer,
}

impl std::str::FromStr for SplitMode {
    type Err = String;
    /// `none` or `layer`; `row` (llama.cpp's row split) is refused by name.
    fn from_str(s: &str) -> std::result::Result<SplitMode, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "none" => Ok(SplitMode::None),
            "layer" => Ok(SplitMode::Layer),
            "row" => Err(
                "split mode 'row' (rows of each weight across devices) is not supported: use layer or none"
                    .into(),
            ),
            _ => Err(format!(
                "'{s}' is not a split mode (give none or layer)"
            )),
        }
    }
}

impl std::fmt::Display for SplitMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SplitMode::None => "none",
            SplitMode::Layer => "layer",
        })
    }
}

/// How to place a model's weights.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// The devices, in `--device` order (`SIM0`, `CUDA1`, ...); empty: the
    /// CPU only (or, for a [`crate::ModelParams`] with one device backend,
    /// that device).
    pub devices: Vec<String>,
    /// `-sm`: how offloaded layers spread over `devices`.
    pub split_mode: SplitMode,
    /// `-ts`: each device's share of the offloaded layers, one value per
    /// device (any scale); empty or all zero: by free memory where every
    /// device reports it, else even (as llama.cpp).
    pub tensor_split: Vec<f32>,
    /// `-mg`: the device of `-sm none` (an index into `devices`).
    pub main_gpu: usize,
    /// Layers on the devices (`-ngl`); `None` = all, when a device is used.
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

    /// Parse `-ts 3,1` (also `3/1`, as llama.cpp): one share per device,
    /// each a finite number >= 0, not all zero.
    pub fn parse_tensor_split(arg: &str) -> Result<Vec<f32>> {
        let mut out = Vec::new();
        for part in arg.split([',', '/']) {
            let v: f32 = part.trim().parse().map_err(|_| {
                LlamaError::Placement(format!("tensor split '{arg}': '{part}' is not a number"))
            })?;
            out.push(v);
        }
        check_split_values(&out)?;
        Ok(out)
    }

    /// Check the device list and split flags against each other: no device
    /// twice, one `tensor_split` value per device (each >= 0, not all zero),
    /// `main_gpu` a listed device.
    pub fn check(&self) -> Result<()> {
        for (i, d) in self.devices.iter().enumerate() {
            if d.is_empty() {
                return Err(LlamaError::Placement(
                    "the device list has an empty name".into(),
                ));
            }
            if d.eq_ignore_ascii_case("CPU") || d.eq_ignore_ascii_case("none") {
                return Err(LlamaError::Placement(format!(
                    "device list {}: '{d}' is the host, not a device (give only devices, or CPU alone)",
                    self.devices.join(",")
                )));
            }
            if self.devices[..i].iter().any(|e| e.eq_ignore_ascii_case(d)) {
                return Err(LlamaError::Placement(format!(
                    "device list {}: device '{d}' is listed twice",
                    self.devices.join(",")
                )));
            }
        }
        if !self.tensor_split.is_empty() {
            if self.tensor_split.len() != self.devices.len() {
                return Err(LlamaError::Placement(format!(
                    "tensor split {}: {} values for {} device{} ({}): give one per device",
                    fmt_split(&self.tensor_split),
                    self.tensor_split.len(),
                    self.devices.len(),
                    if self.devices.len() == 1 { "" } else { "s" },
                    if self.devices.is_empty() {
                        "none given".to_string()
                    } else {
                        self.devices.join(",")
                    }
                )));
            }
            check_split_values(&self.tensor_split)?;
        }
        if self.main_gpu > 0 && self.main_gpu >= self.devices.len() {
            return Err(LlamaError::Placement(format!(
                "main device {} is out of range: {} device{} listed ({})",
                self.main_gpu,
                self.devices.len(),
                if self.devices.len() == 1 { "" } else { "s" },
                if self.devices.is_empty() {
                    "none".to_string()
                } else {
                    self.devices.join(",")
                }
            )));
        }
        Ok(())
    }

    /// Where no `tensor_split` is given, split by each device's free memory
    /// (bytes, `None` where unknown), as llama.cpp does; where any device
    /// does not know its memory the split stays even.
    pub fn split_by_free_memory(&mut self, free: &[Option<usize>]) {
        let explicit = self.tensor_split.iter().any(|&v| v > 0.0);
        if explicit || free.len() != self.devices.len() || free.is_empty() {
            return;
        }
        if let Some(f) = free.iter().copied().collect::<Option<Vec<usize>>>() {
            if f.iter().any(|&b| b > 0) {
                self.tensor_split = f.iter().map(|&b| b as f32).collect();
            }
        }
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

    /// Decide where the tensor `name` goes among [`Placement::devices`],
    /// given the layer count and the rules of
    /// [`Placement::effective_overrides`].
    pub fn target(&self, rules: &[OverrideRule], name: &str, n_layer: usize) -> Result<Target> {
        for r in rules {
            if r.pattern.is_match(name) {
                if r.backend.eq_ignore_ascii_case("CPU") {
                    return Ok(Target::Host);
                }
                return match self
                    .devices
                    .iter()
                    .find(|d| d.eq_ignore_ascii_case(&r.backend))
                {
                    Some(d) => Ok(Target::Device(d.clone())),
                    None => Err(LlamaError::Placement(format!(
                        "override sends '{name}' to backend '{}', which is not in use (available: CPU{})",
                        r.backend,
                        self.devices
                            .iter()
                            .map(|d| format!(", {d}"))
                            .collect::<String>()
                    ))),
                };
            }
        }
        let layer = if let Some(rest) = name.strip_prefix("blk.") {
            rest.split('.').next().and_then(|n| n.parse::<usize>().ok())
        } else if name.starts_with("output") {
            Some(n_layer)
        } else {
            None // token_embd and anything outside the layers: input layer, host
        };
        match layer.and_then(|il| self.layer_device(il, n_layer)) {
            Some(d) => Ok(Target::Device(self.devices[d].clone())),
            None => Ok(Target::Host),
        }
    }

    /// The device of layer `il` (`il == n_layer`: the output head), as an
    /// index into [`Placement::devices`], or `None` for host memory.
    ///
    /// llama.cpp's rule: the last `ngl` layers are offloaded (`i_gpu_start
    /// = n_layer - ngl`; the head too when `ngl > n_layer`); with `-sm
    /// none` they all go to `main_gpu`; with `-sm layer` the offloaded
    /// layer `il` goes to the first device whose normalized cumulative
    /// split exceeds `(il - i_gpu_start) / act_gpu_layers` (an
    /// `upper_bound` over the split points).
    pub fn layer_device(&self, il: usize, n_layer: usize) -> Option<usize> {
        let n_dev = self.devices.len();
        if n_dev == 0 {
            return None;
        }
        let ngl = self.n_gpu_layers.unwrap_or(n_layer + 1);
        let start = n_layer.saturating_sub(ngl);
        let act = ngl.min(n_layer + 1);
        if il < start || il - start >= act {
            return None;
        }
        if self.split_mode == SplitMode::None || n_dev == 1 {
            return Some(self.main_gpu.min(n_dev - 1));
        }
        let points = self.split_points();
        let frac = (il - start) as f32 / act as f32;
        let idx = points.iter().take_while(|&&p| p <= frac).count();
        Some(idx.min(n_dev - 1))
    }

    /// The normalized cumulative split points, one per device (the last
    /// is 1): `tensor_split` where it has a positive value, else even.
    pub fn split_points(&self) -> Vec<f32> {
        let n_dev = self.devices.len();
        let use_given = self.tensor_split.len() == n_dev
            && self.tensor_split.iter().all(|v| v.is_finite() && *v >= 0.0)
            && self.tensor_split.iter().any(|&v| v > 0.0);
        let shares: Vec<f32> = if use_given {
            self.tensor_split.clone()
        } else {
            vec![1.0; n_dev]
        };
        let mut sum = 0.0f32;
        let mut points: Vec<f32> = shares
            .iter()
            .map(|&s| {
                sum += s;
                sum
            })
            .collect();
        for p in &mut points {
            *p /= sum;
        }
        points
    }

    /// The layers (`0..=n_layer`, `n_layer` being the output head) each
    /// device holds, by [`Placement::layer_device`].
    pub fn device_layers(&self, n_layer: usize) -> Vec<Vec<usize>> {
        let mut out = vec![Vec::new(); self.devices.len()];
        for il in 0..=n_layer {
            if let Some(d) = self.layer_device(il, n_layer) {
                out[d].push(il);
            }
        }
        out
    }
}

fn fmt_split(v: &[f32]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn check_split_values(v: &[f32]) -> Result<()> {
    if let Some(bad) = v.iter().find(|x| !x.is_finite() || **x < 0.0) {
        return Err(LlamaError::Placement(format!(
            "tensor split {}: {bad} is not a share (give numbers >= 0)",
            fmt_split(v)
        )));
    }
    if v.iter().all(|&x| x == 0.0) {
        return Err(LlamaError::Placement(format!(
            "tensor split {}: every share is zero (give at least one device a share > 0)",
            fmt_split(v)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(devs: &[&str]) -> Placement {
        Placement {
            devices: devs.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn cpu_moe_keeps_experts_on_host() {
        let p = Placement {
            cpu_moe: true,
            ..on(&["SIM0"])
        };
        let rules = p.effective_overrides();
        let t = |n: &str| p.target(&rules, n, 2).unwrap();
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
            ..on(&["SIM0"])
        };
        let rules = p.effective_overrides();
        let t = |n: &str| p.target(&rules, n, 3).unwrap();
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
        let p = on(&["SIM0"]);
        let e = p.target(&rules, "blk.0.ffn_up_exps.weight", 2).unwrap_err();
        assert!(e.to_string().contains("CUDA3"));
    }

    /// llama.cpp's split: 4 layers + head on 2 devices, even: fractions
    /// 0, .2, .4 below .5 go to device 0; .6, .8 to device 1.
    #[test]
    fn layer_split_follows_llama_cpp() {
        let p = on(&["SIM0", "SIM1"]);
        let got: Vec<_> = (0..=4).map(|il| p.layer_device(il, 4)).collect();
        assert_eq!(got, [Some(0), Some(0), Some(0), Some(1), Some(1)]);
        // -ts 3,1: split point .75: fractions 0, .2, .4, .6 -> 0; .8 -> 1
        let p = Placement {
            tensor_split: vec![3.0, 1.0],
            ..on(&["SIM0", "SIM1"])
        };
        let got: Vec<_> = (0..=4).map(|il| p.layer_device(il, 4)).collect();
        assert_eq!(got, [Some(0), Some(0), Some(0), Some(0), Some(1)]);
        // a fraction equal to a split point goes to the next device
        // (upper_bound): 4 layers, ngl 4 (no head): .5 -> device 1
        let p = Placement {
            n_gpu_layers: Some(4),
            ..on(&["SIM0", "SIM1"])
        };
        let got: Vec<_> = (0..=4).map(|il| p.layer_device(il, 4)).collect();
        assert_eq!(got, [Some(0), Some(0), Some(1), Some(1), None]);
        // -ngl 2 of 4: layers 2, 3 offloaded, one per device
        let p = Placement {
            n_gpu_layers: Some(2),
            ..on(&["SIM0", "SIM1"])
        };
        let got: Vec<_> = (0..=4).map(|il| p.layer_device(il, 4)).collect();
        assert_eq!(got, [None, None, Some(0), Some(1), None]);
        // -sm none -mg 1: everything offloaded on device 1
        let p = Placement {
            split_mode: SplitMode::None,
            main_gpu: 1,
            ..on(&["SIM0", "SIM1"])
        };
        assert!((0..=4).all(|il| p.layer_device(il, 4) == Some(1)));
        assert_eq!(p.device_layers(4), vec![vec![], vec![0, 1, 2, 3, 4]]);
        // -ts 1,0: device 1 gets nothing
        let p = Placement {
            tensor_split: vec![1.0, 0.0],
            ..on(&["SIM0", "SIM1"])
        };
        assert!((0..=4).all(|il| p.layer_device(il, 4) == Some(0)));
        // no device: host
        assert_eq!(Placement::default().layer_device(0, 4), None);
    }

    #[test]
    fn free_memory_splits_when_no_ts() {
        let mut p = on(&["SIM0", "SIM1"]);
        p.split_by_free_memory(&[Some(3 << 20), Some(1 << 20)]);
        assert_eq!(p.tensor_split, vec![3145728.0, 1048576.0]);
        let mut q = on(&["SIM0", "SIM1"]);
        q.split_by_free_memory(&[Some(3 << 20), None]);
        assert!(q.tensor_split.is_empty(), "unknown memory: even");
        let mut r = Placement {
            tensor_split: vec![1.0, 1.0],
            ..on(&["SIM0", "SIM1"])
        };
        r.split_by_free_memory(&[Some(3 << 20), Some(1 << 20)]);
        assert_eq!(r.tensor_split, vec![1.0, 1.0], "-ts wins");
    }

    #[test]
    fn override_to_any_listed_device() {
        let p = Placement {
            overrides: Placement::parse_overrides(r"blk\.0\.=sim1").unwrap(),
            ..on(&["SIM0", "SIM1"])
        };
        let rules = p.effective_overrides();
        assert_eq!(
            p.target(&rules, "blk.0.attn_q.weight", 4).unwrap(),
            Target::Device("SIM1".into())
        );
        let p = Placement {
            overrides: Placement::parse_overrides("exps=SIM2").unwrap(),
            ..on(&["SIM0", "SIM1"])
        };
        let e = p
            .target(&p.effective_overrides(), "blk.0.ffn_up_exps.weight", 4)
            .unwrap_err()
            .to_string();
        assert!(e.contains("SIM2") && e.contains("CPU, SIM0, SIM1"), "{e}");
    }

    #[test]
    fn bad_split_flags_are_errors_naming_the_value() {
        let e = |p: Placement| p.check().unwrap_err().to_string();
        let two = on(&["SIM0", "SIM1"]);
        let m = e(Placement {
            tensor_split: vec![1.0, 2.0, 3.0],
            ..two.clone()
        });
        assert!(m.contains("3 values for 2 devices"), "{m}");
        let m = e(Placement {
            main_gpu: 2,
            ..two.clone()
        });
        assert!(m.contains("main device 2"), "{m}");
        let m = e(on(&["SIM0", "sim0"]));
        assert!(m.contains("'sim0' is listed twice"), "{m}");
        let m = e(on(&["SIM0", "CPU"]));
        assert!(m.contains("'CPU' is the host"), "{m}");
        let m = Placement::parse_tensor_split("3,-1")
            .unwrap_err()
            .to_string();
        assert!(m.contains("-1 is not a share"), "{m}");
        let m = Placement::parse_tensor_split("0,0")
            .unwrap_err()
            .to_string();
        assert!(m.contains("every share is zero"), "{m}");
        let m = Placement::parse_tensor_split("3,x")
            .unwrap_err()
            .to_string();
        assert!(m.contains("'x' is not a number"), "{m}");
        assert_eq!(
            Placement::parse_tensor_split("3/1").unwrap(),
            vec![3.0, 1.0]
        );
        let m = "row".parse::<SplitMode>().unwrap_err();
        assert!(m.contains("'row'") && m.contains("not supported"), "{m}");
        assert!("bogus"
            .parse::<SplitMode>()
            .unwrap_err()
            .contains("'bogus'"));
        assert!(Placement {
            tensor_split: vec![3.0, 1.0],
            main_gpu: 1,
            ..two
        }
        .check()
        .is_ok());
    }
}
