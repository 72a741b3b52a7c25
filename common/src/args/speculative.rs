//! The speculative decoding flags, llama.cpp's spellings and defaults:
//! `-md/--model-draft`, `--spec-type`, `--spec-draft-n-max` (and the older
//! `--draft-max`), `--spec-draft-n-min` (`--draft-min`),
//! `--spec-draft-p-min` (`--draft-p-min`), the draft's placement
//! (`-ngld`, `-devd`, `-cmoed`, `-ncmoed`, `-otd`) and the `ngram-simple`
//! sizes. [`SpecArgs::source`] turns them into what `llama` drafts with.

use anyhow::{bail, Result};
use clap::Args;
use llama::speculative::ngram::NgramSimple;
use llama::speculative::SpecParams;

use crate::cli::PlacementArgs;

/// The `--spec-type` values implemented (llama.cpp's names).
pub const SPEC_TYPES: &[&str] = &["none", "draft-simple", "ngram-simple"];

/// What speculation a run asked for.
#[derive(Clone, Debug, PartialEq)]
pub enum SpecSource {
    /// A draft model (`-md`).
    Draft(std::path::PathBuf),
    /// llama.cpp's `ngram-simple` lookup.
    Ngram(NgramSimple),
}

/// Speculative decoding (`llama-run`, `llama-server`); the entries of
/// [`crate::flags::table::speculative`] declare each field.
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// `-md`: the draft model.
    #[arg(long, help_heading = "Speculative decoding")]
    pub model_draft: Option<std::path::PathBuf>,

    /// `--spec-type`: the speculation types, comma-separated.
    #[arg(long, help_heading = "Speculative decoding")]
    pub spec_type: String,

    /// `--spec-draft-n-max`: tokens drafted per step at most.
    #[arg(long, help_heading = "Speculative decoding")]
    pub draft_n_max: usize,

    /// `--spec-draft-n-min`: fewest draft tokens used.
    #[arg(long, help_heading = "Speculative decoding")]
    pub draft_n_min: usize,

    /// `--spec-draft-p-min`: the draft's least probability (greedy).
    #[arg(long, help_heading = "Speculative decoding")]
    pub draft_p_min: f32,

    /// `-ngld`: the draft's layers on the device: a number, auto or all.
    #[arg(long, help_heading = "Speculative decoding")]
    pub ngl_draft: Option<String>,

    /// `-devd`: the draft's devices.
    #[arg(long, help_heading = "Speculative decoding")]
    pub device_draft: Option<String>,

    /// `-cmoed`: all the draft's experts in host memory.
    #[arg(long, help_heading = "Speculative decoding")]
    pub cpu_moe_draft: bool,

    /// `-ncmoed`: the draft's first N layers' experts in host memory.
    #[arg(long, help_heading = "Speculative decoding")]
    pub n_cpu_moe_draft: Option<usize>,

    /// `-otd`: the draft's tensor overrides.
    #[arg(long, help_heading = "Speculative decoding")]
    pub override_tensor_draft: Vec<String>,

    /// `--spec-ngram-simple-size-n`: the ngram-simple lookup n-gram's length.
    #[arg(long, help_heading = "Speculative decoding")]
    pub ngram_simple_size_n: usize,

    /// `--spec-ngram-simple-size-m`: the ngram-simple draft m-gram's length.
    #[arg(long, help_heading = "Speculative decoding")]
    pub ngram_simple_size_m: usize,
}

impl SpecArgs {
    /// The draft parameters, checked.
    pub fn params(&self) -> Result<SpecParams> {
        if !(0.0..=1.0).contains(&self.draft_p_min) {
            bail!("--spec-draft-p-min {}: must be in [0, 1]", self.draft_p_min);
        }
        Ok(SpecParams {
            n_max: self.draft_n_max,
            n_min: self.draft_n_min,
            p_min: self.draft_p_min,
        })
    }

    /// The speculation asked for (`None`: none), checked.
    pub fn source(&self) -> Result<Option<SpecSource>> {
        self.params()?;
        let types: Vec<&str> = self.spec_type.split(',').map(str::trim).collect();
        if let Some(t) = types.iter().find(|t| !SPEC_TYPES.contains(t)) {
            bail!(
                "--spec-type {t}: unknown or not implemented type (one of {})",
                SPEC_TYPES.join(", ")
            );
        }
        let has = |t: &str| types.contains(&t);
        for (flag, v) in [
            ("--spec-ngram-simple-size-n", self.ngram_simple_size_n),
            ("--spec-ngram-simple-size-m", self.ngram_simple_size_m),
        ] {
            if !(1..=1024).contains(&v) {
                bail!("{flag} {v}: ngram size must be between 1 and 1024 inclusive");
            }
        }
        if has("draft-simple") && has("ngram-simple") {
            bail!("--spec-type: draft-simple and ngram-simple together are not implemented (give one)");
        }
        if has("ngram-simple") {
            if self.model_draft.is_some() {
                bail!("--spec-type ngram-simple needs no draft model: drop -md, or use --spec-type draft-simple");
            }
            return Ok(Some(SpecSource::Ngram(NgramSimple {
                size_n: self.ngram_simple_size_n,
                size_m: self.ngram_simple_size_m,
            })));
        }
        match &self.model_draft {
            Some(p) => Ok(Some(SpecSource::Draft(p.clone()))),
            None if has("draft-simple") => {
                bail!("--spec-type draft-simple needs a draft model (-md FNAME)")
            }
            None => Ok(None),
        }
    }

    /// The draft model's placement: the target's devices unless `-devd`,
    /// and the draft's own layer and expert flags.
    pub fn draft_placement(&self, target: &PlacementArgs) -> Result<PlacementArgs> {
        let n_gpu_layers = match self.ngl_draft.as_deref() {
            None | Some("auto") => None,
            Some("all") => Some(-1),
            Some(v) => Some(
                v.parse::<i64>()
                    .map_err(|_| anyhow::anyhow!("-ngld {v}: expected a number, auto or all"))?,
            ),
        };
        let mut p = PlacementArgs {
            n_gpu_layers,
            override_tensor: self.override_tensor_draft.clone(),
            cpu_moe: self.cpu_moe_draft,
            n_cpu_moe: self.n_cpu_moe_draft,
            ..target.clone()
        };
        if let Some(d) = &self.device_draft {
            p.device = Some(d.clone());
            p.rpc = None;
            if !d.to_ascii_uppercase().contains("SIM") {
                p.sim_mem_mib = None;
                p.sim_profile = None;
            }
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::{parse_from, Tool};
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        s: SpecArgs,
    }

    fn parse(args: &[&str]) -> SpecArgs {
        let args = std::iter::once("t")
            .chain(args.iter().copied())
            .map(std::ffi::OsString::from);
        parse_from::<T>(Tool::Run, args, &|_| None).unwrap().s
    }

    #[test]
    fn llama_cpp_defaults_and_spellings() {
        let s = parse(&[]);
        assert_eq!(s.params().unwrap(), SpecParams::default());
        assert_eq!(s.source().unwrap(), None);
        let s = parse(&[
            "--draft-max",
            "8",
            "--draft-min",
            "2",
            "--draft-p-min",
            "0.5",
        ]);
        assert_eq!(
            s.params().unwrap(),
            SpecParams {
                n_max: 8,
                n_min: 2,
                p_min: 0.5
            }
        );
        let s = parse(&["--spec-draft-n-max", "5", "--model-draft", "d.gguf"]);
        assert_eq!(s.draft_n_max, 5);
        assert_eq!(
            s.source().unwrap(),
            Some(SpecSource::Draft("d.gguf".into()))
        );
        let s = parse(&["--spec-type", "ngram-simple"]);
        assert_eq!(
            s.source().unwrap(),
            Some(SpecSource::Ngram(NgramSimple::default()))
        );
    }

    #[test]
    fn bad_values_are_named() {
        let e = |a: &[&str]| parse(a).source().unwrap_err().to_string();
        assert!(e(&["--spec-type", "ngram-mod"]).contains("--spec-type ngram-mod"));
        assert!(e(&["--spec-type", "draft-simple"]).contains("needs a draft model"));
        assert!(e(&["--draft-p-min", "2"]).contains("--spec-draft-p-min 2"));
        assert!(e(&[
            "--spec-type",
            "ngram-simple",
            "--spec-ngram-simple-size-n",
            "0"
        ])
        .contains("between 1 and 1024"));
    }

    #[test]
    fn draft_placement_follows_the_target_devices() {
        let target = PlacementArgs {
            device: Some("SIM0".into()),
            cpu_moe: true,
            ..Default::default()
        };
        let p = parse(&["--spec-draft-ngl", "all"])
            .draft_placement(&target)
            .unwrap();
        assert_eq!(p.device.as_deref(), Some("SIM0"));
        assert_eq!(p.n_gpu_layers, Some(-1));
        assert!(!p.cpu_moe, "the draft has its own -cmoed");
        let p = parse(&["--device-draft", "none"])
            .draft_placement(&target)
            .unwrap();
        assert_eq!(p.device.as_deref(), Some("none"));
        assert!(parse(&["--gpu-layers-draft", "x"])
            .draft_placement(&target)
            .is_err());
    }

    #[test]
    fn llama_cpp_variables_set_them_and_the_server_takes_them() {
        let env = |v: &str| match v {
            "LLAMA_ARG_SPEC_DRAFT_MODEL" => Some("d.gguf".into()),
            "LLAMA_ARG_SPEC_DRAFT_N_MAX" => Some("6".into()),
            "LLAMA_ARG_N_GPU_LAYERS_DRAFT" => Some("all".into()),
            _ => None,
        };
        let args = ["t", "--draft-max", "7"].map(std::ffi::OsString::from);
        let s = parse_from::<T>(Tool::Run, args, &env).unwrap().s;
        assert_eq!(s.model_draft.as_deref(), Some("d.gguf".as_ref()));
        assert_eq!(s.draft_n_max, 7, "the command line wins");
        assert_eq!(s.ngl_draft.as_deref(), Some("all"));
        // llama-server takes the same flags
        let args = ["t", "-md", "d.gguf", "--draft-max", "8", "-devd", "none"]
            .map(std::ffi::OsString::from);
        let s = parse_from::<T>(Tool::Server, args, &|_| None).unwrap().s;
        assert_eq!(s.model_draft.as_deref(), Some("d.gguf".as_ref()));
        assert_eq!(
            (s.draft_n_max, s.device_draft.as_deref()),
            (8, Some("none"))
        );
        let args = ["t", "--spec-type", "ngram-simple"].map(std::ffi::OsString::from);
        let s = parse_from::<T>(Tool::Server, args, &|_| None).unwrap().s;
        assert!(matches!(s.source(), Ok(Some(SpecSource::Ngram(_)))));
    }
}
