//! The SIMD levels of the CPU kernels, which ones this CPU has, and the one
//! the process runs, chosen once at start: the best the CPU has, or a lower
//! one named by `GGML_CPU_LEVEL` (for tests and comparisons).
//!
//! | level | CPU features | `GGML_CPU_LEVEL` |
//! | --- | --- | --- |
//! | [`CpuLevel::Scalar`] | none (the reference kernels) | `scalar` |
//! | [`CpuLevel::Avx2`] | AVX2, FMA, F16C | `avx2` |
//! | [`CpuLevel::Avx512`] | the above and AVX-512 F, BW, VL, DQ | `avx512` |
//! | [`CpuLevel::Avx512Vnni`] | the above and AVX-512 VNNI | `avx512vnni` |
//!
//! Each level includes the ones above it in the table; a level's kernel
//! table (see `quants::tables`) fills what it has and falls back to the
//! level below for the rest. A `GGML_CPU_LEVEL` naming no level, or one
//! this CPU lacks, is refused by name ([`CpuLevelError`]): the process then
//! runs the best level the CPU has, and [`cpu_level_checked`] (called by the
//! CPU backend before it computes) reports the error.

use std::fmt;
use std::sync::OnceLock;

/// The environment variable that forces a lower level.
pub const CPU_LEVEL_ENV: &str = "GGML_CPU_LEVEL";

/// A SIMD level of the CPU kernels, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CpuLevel {
    /// The reference kernels, any CPU.
    Scalar,
    /// AVX2 with FMA and F16C.
    Avx2,
    /// AVX-512 F, BW, VL and DQ (and AVX2, FMA, F16C).
    Avx512,
    /// AVX-512 with VNNI (`vpdpbusd`, `vpdpwssd`).
    Avx512Vnni,
}

impl CpuLevel {
    /// Every level, lowest first.
    pub const ALL: [CpuLevel; 4] = [
        CpuLevel::Scalar,
        CpuLevel::Avx2,
        CpuLevel::Avx512,
        CpuLevel::Avx512Vnni,
    ];

    /// The level's `GGML_CPU_LEVEL` name.
    pub fn name(self) -> &'static str {
        match self {
            CpuLevel::Scalar => "scalar",
            CpuLevel::Avx2 => "avx2",
            CpuLevel::Avx512 => "avx512",
            CpuLevel::Avx512Vnni => "avx512vnni",
        }
    }

    /// The level named `name` (as [`CpuLevel::name`], any case).
    pub fn from_name(name: &str) -> Option<CpuLevel> {
        let name = name.trim();
        CpuLevel::ALL
            .into_iter()
            .find(|l| l.name().eq_ignore_ascii_case(name))
    }

    /// The CPU features the level needs, as a reader knows them.
    pub fn features(self) -> &'static str {
        match self {
            CpuLevel::Scalar => "none",
            CpuLevel::Avx2 => "AVX2, FMA, F16C",
            CpuLevel::Avx512 => "AVX2, FMA, F16C, AVX-512 F/BW/VL/DQ",
            CpuLevel::Avx512Vnni => "AVX2, FMA, F16C, AVX-512 F/BW/VL/DQ, AVX-512 VNNI",
        }
    }

    /// The level below, `None` for [`CpuLevel::Scalar`].
    pub fn below(self) -> Option<CpuLevel> {
        match self {
            CpuLevel::Scalar => None,
            CpuLevel::Avx2 => Some(CpuLevel::Scalar),
            CpuLevel::Avx512 => Some(CpuLevel::Avx2),
            CpuLevel::Avx512Vnni => Some(CpuLevel::Avx512),
        }
    }

    /// Whether this CPU has the level's features (detected once).
    pub fn is_supported(self) -> bool {
        self <= detected_level()
    }
}

impl fmt::Display for CpuLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why `GGML_CPU_LEVEL` was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CpuLevelError {
    /// The value names no level.
    Unknown(String),
    /// The CPU lacks the named level's features.
    Missing {
        /// The level asked for.
        asked: CpuLevel,
        /// The best level this CPU has.
        best: CpuLevel,
    },
}

impl fmt::Display for CpuLevelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CpuLevelError::Unknown(v) => write!(
                f,
                "{CPU_LEVEL_ENV}='{v}' names no CPU level (scalar, avx2, avx512, avx512vnni)"
            ),
            CpuLevelError::Missing { asked, best } => write!(
                f,
                "{CPU_LEVEL_ENV}={asked}: this CPU lacks it (it needs {}); the best level here is {best}",
                asked.features()
            ),
        }
    }
}

impl std::error::Error for CpuLevelError {}

/// The best level this CPU has, detected once.
pub fn detected_level() -> CpuLevel {
    static LEVEL: OnceLock<CpuLevel> = OnceLock::new();
    *LEVEL.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> CpuLevel {
    use std::is_x86_feature_detected as has;
    if !(has!("avx2") && has!("fma") && has!("f16c")) {
        return CpuLevel::Scalar;
    }
    if !(has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512dq")) {
        return CpuLevel::Avx2;
    }
    if !has!("avx512vnni") {
        return CpuLevel::Avx512;
    }
    CpuLevel::Avx512Vnni
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> CpuLevel {
    CpuLevel::Scalar
}

/// The level `value` (a `GGML_CPU_LEVEL` setting) asks for on a CPU whose
/// best level is `best`: `None` (unset or empty) is `best`.
pub fn parse_level(value: Option<&str>, best: CpuLevel) -> Result<CpuLevel, CpuLevelError> {
    let Some(v) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(best);
    };
    let asked = CpuLevel::from_name(v).ok_or_else(|| CpuLevelError::Unknown(v.to_string()))?;
    if asked > best {
        return Err(CpuLevelError::Missing { asked, best });
    }
    Ok(asked)
}

/// The chosen level, or why `GGML_CPU_LEVEL` was refused (read once).
pub fn cpu_level_checked() -> Result<CpuLevel, CpuLevelError> {
    static CHOSEN: OnceLock<Result<CpuLevel, CpuLevelError>> = OnceLock::new();
    CHOSEN
        .get_or_init(|| {
            let v = std::env::var(CPU_LEVEL_ENV).ok();
            parse_level(v.as_deref(), detected_level())
        })
        .clone()
}

/// The level the kernels run: `GGML_CPU_LEVEL`'s when it was accepted,
/// else the best this CPU has.
#[inline]
pub fn cpu_level() -> CpuLevel {
    static LEVEL: OnceLock<CpuLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| cpu_level_checked().unwrap_or_else(|_| detected_level()))
}

/// The chosen level in words, for device lists and bench records:
/// `avx512vnni (AVX2, FMA, F16C, ...)`, with the CPU's best level when
/// `GGML_CPU_LEVEL` chose a lower one, or the refusal when it was refused.
pub fn cpu_level_summary() -> String {
    let (chosen, best) = (cpu_level(), detected_level());
    let mut s = format!("{chosen} ({})", chosen.features());
    match cpu_level_checked() {
        Err(e) => s.push_str(&format!("; refused: {e}")),
        Ok(l) if l < best => s.push_str(&format!("; {CPU_LEVEL_ENV}={l}, the CPU has {best}")),
        Ok(_) => {}
    }
    s
}

/// The levels this CPU has, lowest first.
pub fn supported_levels() -> Vec<CpuLevel> {
    CpuLevel::ALL
        .into_iter()
        .filter(|l| l.is_supported())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_ones_are_refused() {
        for l in CpuLevel::ALL {
            assert_eq!(CpuLevel::from_name(l.name()), Some(l));
            assert_eq!(CpuLevel::from_name(&l.name().to_uppercase()), Some(l));
        }
        let e = parse_level(Some("sse4"), CpuLevel::Avx2).unwrap_err();
        assert_eq!(e, CpuLevelError::Unknown("sse4".into()));
        assert!(e.to_string().contains("GGML_CPU_LEVEL='sse4'"), "{e}");
        assert!(e.to_string().contains("avx512vnni"), "{e}");
    }

    #[test]
    fn a_level_above_the_cpu_is_refused_by_name() {
        let e = parse_level(Some("avx512vnni"), CpuLevel::Avx2).unwrap_err();
        assert_eq!(
            e,
            CpuLevelError::Missing {
                asked: CpuLevel::Avx512Vnni,
                best: CpuLevel::Avx2
            }
        );
        let msg = e.to_string();
        assert!(msg.contains("GGML_CPU_LEVEL=avx512vnni"), "{msg}");
        assert!(msg.contains("VNNI") && msg.contains("avx2"), "{msg}");
    }

    #[test]
    fn lower_levels_and_unset_are_accepted() {
        let best = CpuLevel::Avx512Vnni;
        assert_eq!(parse_level(None, best), Ok(best));
        assert_eq!(parse_level(Some(" "), best), Ok(best));
        for l in CpuLevel::ALL {
            assert_eq!(parse_level(Some(l.name()), best), Ok(l));
        }
        assert_eq!(
            parse_level(Some("scalar"), CpuLevel::Scalar),
            Ok(CpuLevel::Scalar)
        );
    }

    #[test]
    fn levels_below_are_ordered() {
        assert_eq!(CpuLevel::Scalar.below(), None);
        for w in CpuLevel::ALL.windows(2) {
            assert!(w[0] < w[1]);
            assert_eq!(w[1].below(), Some(w[0]));
        }
        assert!(CpuLevel::Scalar.is_supported());
        assert!(supported_levels().contains(&cpu_level()));
    }
}
