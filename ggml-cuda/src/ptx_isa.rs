//! PTX ISA versions: which ISA a CUDA driver accepts, and the header of a
//! PTX text (its `.version` and `.target`).
//!
//! A driver JIT-compiles PTX only up to the ISA of its own CUDA release:
//! PTX ISA 8.8 (what NVRTC 12.9 writes) makes a CUDA 12.4 driver fail with
//! `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`. [`max_isa_for_driver`] is NVIDIA's
//! table of which release introduced each ISA, so the loader
//! (`kernel_load.rs`) writes the shipped PTX's `.version` as the newest ISA
//! the driver accepts ([`with_version`]), never below the floor
//! `scripts/ship-kernels` checked the PTX assembles at.
//!
//! Source: the PTX ISA's release history, "PTX ISA Version / CUDA Release"
//! (docs.nvidia.com/cuda/parallel-thread-execution, section "Release
//! Notes"): ISA 7.0 came with CUDA 11.0, one minor step per CUDA 11.x
//! through 7.8 / 11.8; 8.0 with 12.0 through 8.5 / 12.5 (CUDA 12.6 added no
//! ISA); 8.6 with 12.7, 8.7 with 12.8, 8.8 with 12.9; 9.0 with 13.0 and
//! 9.1 with 13.1.

/// A PTX ISA version, `(major, minor)`: `(8, 8)` is `.version 8.8`.
pub type Isa = (u32, u32);

/// `(first CUDA release as cuDriverGetVersion writes it, ISA it accepts)`,
/// newest first (see the module docs for the source).
pub const DRIVER_ISA: &[(i32, Isa)] = &[
    (13010, (9, 1)),
    (13000, (9, 0)),
    (12090, (8, 8)),
    (12080, (8, 7)),
    (12070, (8, 6)),
    (12050, (8, 5)),
    (12040, (8, 4)),
    (12030, (8, 3)),
    (12020, (8, 2)),
    (12010, (8, 1)),
    (12000, (8, 0)),
    (11080, (7, 8)),
    (11070, (7, 7)),
    (11060, (7, 6)),
    (11050, (7, 5)),
    (11040, (7, 4)),
    (11030, (7, 3)),
    (11020, (7, 2)),
    (11010, (7, 1)),
    (11000, (7, 0)),
];

/// The newest PTX ISA a driver of version `driver` (`cuDriverGetVersion`:
/// 12040 for CUDA 12.4) loads; `None` for a driver older than CUDA 11.0.
/// A driver newer than the table's last row gets that row's ISA (it
/// accepts at least that).
pub fn max_isa_for_driver(driver: i32) -> Option<Isa> {
    DRIVER_ISA
        .iter()
        .find(|(first, _)| driver >= *first)
        .map(|&(_, isa)| isa)
}

/// The first CUDA release that loads `isa` (`None`: newer than the table).
pub fn first_driver_for(isa: Isa) -> Option<i32> {
    DRIVER_ISA
        .iter()
        .rev()
        .find(|(_, i)| *i >= isa)
        .map(|&(d, _)| d)
}

/// `12.4` for 12040.
pub fn driver_text(driver: i32) -> String {
    format!("{}.{}", driver / 1000, (driver % 1000) / 10)
}

/// `8.8` for (8, 8).
pub fn isa_text(isa: Isa) -> String {
    format!("{}.{}", isa.0, isa.1)
}

/// What a PTX text's header declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtxHeader {
    /// `.version X.Y`.
    pub isa: Isa,
    /// `.target sm_XY` as XY (75 for `sm_75`).
    pub target: u32,
}

/// The `.version` and `.target` of a PTX text (the first of each, before
/// any code), or why they cannot be read.
pub fn header(ptx: &str) -> Result<PtxHeader, String> {
    let mut isa = None;
    let mut target = None;
    for line in ptx.lines().take(200) {
        let t = line.trim();
        if let Some(v) = t.strip_prefix(".version ") {
            isa = Some(parse_isa(v.trim()).ok_or_else(|| format!("bad PTX '.version {v}'"))?);
        } else if let Some(v) = t.strip_prefix(".target ") {
            let first = v.split([',', ' ']).next().unwrap_or_default();
            let n = first
                .strip_prefix("sm_")
                .map(|s| s.trim_end_matches(|c: char| c.is_ascii_alphabetic()))
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("bad PTX '.target {v}'"))?;
            target = Some(n);
        }
        if isa.is_some() && target.is_some() {
            break;
        }
    }
    match (isa, target) {
        (Some(isa), Some(target)) => Ok(PtxHeader { isa, target }),
        (None, _) => Err("the PTX has no '.version' line".into()),
        (_, None) => Err("the PTX has no '.target' line".into()),
    }
}

/// `8.8` as (8, 8).
pub fn parse_isa(s: &str) -> Option<Isa> {
    let (a, b) = s.split_once('.')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

/// The PTX text with its `.version` line declaring `isa` instead (the rest
/// unchanged). The caller knows the code is valid at `isa`
/// (`scripts/ship-kernels` assembles the shipped PTX at its floor with
/// `ptxas`, which rejects an instruction newer than the declared version).
pub fn with_version(ptx: &str, isa: Isa) -> Result<String, String> {
    let mut out = String::with_capacity(ptx.len());
    let mut done = false;
    for line in ptx.split_inclusive('\n') {
        if !done && line.trim_start().starts_with(".version ") {
            out.push_str(&format!(".version {}\n", isa_text(isa)));
            done = true;
        } else {
            out.push_str(line);
        }
    }
    if done {
        Ok(out)
    } else {
        Err("the PTX has no '.version' line".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_maps_drivers_to_isas() {
        assert_eq!(max_isa_for_driver(12040), Some((8, 4)));
        assert_eq!(max_isa_for_driver(12060), Some((8, 5))); // 12.6 added none
        assert_eq!(max_isa_for_driver(12090), Some((8, 8)));
        assert_eq!(max_isa_for_driver(13000), Some((9, 0)));
        assert_eq!(max_isa_for_driver(13050), Some((9, 1)));
        assert_eq!(max_isa_for_driver(10020), None);
        assert_eq!(first_driver_for((8, 8)), Some(12090));
        assert_eq!(first_driver_for((8, 6)), Some(12070));
        assert_eq!(first_driver_for((9, 9)), None);
        assert_eq!(driver_text(12040), "12.4");
    }

    #[test]
    fn headers_read_and_rewrite() {
        let p = "//\n// Generated by NVIDIA NVVM Compiler\n.version 8.8\n.target sm_75\n.address_size 64\n.visible .entry k(\n";
        assert_eq!(
            header(p),
            Ok(PtxHeader {
                isa: (8, 8),
                target: 75
            })
        );
        let low = with_version(p, (8, 0)).unwrap();
        assert_eq!(header(&low).unwrap().isa, (8, 0));
        assert_eq!(low.len(), p.len());
        assert!(header(".target sm_90\n").is_err());
        assert!(header(".version x\n").is_err());
        assert!(with_version(".target sm_90\n", (8, 0)).is_err());
        assert_eq!(header(".version 9.0\n.target sm_90a\n").unwrap().target, 90);
    }
}
