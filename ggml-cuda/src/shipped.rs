//! The kernel images shipped inside the binary: cubins for every listed
//! architecture ([`ARCHS`]) and one `compute_75` PTX, compiled from
//! [`crate::kernels::KERNELS_SRC`] by NVRTC (PyPI's wheels) and committed
//! xz-compressed in `ggml-cuda/shipped/` with a manifest. A plain `cargo
//! build` embeds them (`build.rs`), so a machine with only a CUDA driver
//! runs CUDA0: no toolkit, no NVRTC, no network.
//!
//! One command makes them again: [`SHIP_COMMAND`] (`scripts/ship-kernels`,
//! documented in the crate README). The manifest records the FNV-1a hash of
//! the source they were compiled from; when the source changes without
//! them ([`stale`]), the loader skips them, saying why and naming the
//! command, and compiles with NVRTC where it can; the `shipped_kernels`
//! test fails naming the command.
//!
//! Data flow: `build.rs` -> `FILES` (name, xz bytes) and `MANIFEST` ->
//! [`manifest`] (parsed once) -> [`ShippedImage::bytes`] (decompressed and
//! checked against the manifest's length and hash on use).

use std::sync::OnceLock;

use crate::ptx_isa::{isa_text, parse_isa, Isa};

mod files {
    include!(concat!(env!("OUT_DIR"), "/shipped_files.rs"));
}

/// The command that compiles and commits the shipped images again.
pub const SHIP_COMMAND: &str = "scripts/ship-kernels";

/// The architectures a cubin is shipped for (`sm_XY` as XY).
pub const ARCHS: [u32; 7] = [75, 80, 86, 89, 90, 100, 120];

/// The architecture of the shipped PTX (the oldest CUDA 12 and 13 both
/// compile for; any newer GPU JIT-compiles it).
pub const PTX_ARCH: u32 = 75;

/// The lowest PTX ISA the shipped PTX is declared at (the oldest CUDA 12
/// driver's, 12.0): `scripts/ship-kernels` assembles it at this ISA with
/// `ptxas`, which rejects an instruction the ISA lacks.
pub const PTX_FLOOR: Isa = (8, 0);

/// FNV-1a, 64 bits: the manifest's hash of sources and images.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The hash of the kernel source this binary was built from.
pub fn source_hash() -> u64 {
    static H: OnceLock<u64> = OnceLock::new();
    *H.get_or_init(|| fnv1a64(crate::kernels::KERNELS_SRC.as_bytes()))
}

/// What one shipped image is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShippedKind {
    /// A cubin for `sm_XY`.
    Cubin,
    /// PTX for `.target sm_XY`.
    Ptx,
}

/// One image of the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShippedImage {
    /// Its file in `shipped/` (`sm_90.cubin.xz`).
    pub file: String,
    /// Cubin or PTX.
    pub kind: ShippedKind,
    /// `sm_XY` as XY.
    pub arch: u32,
    /// Bytes once decompressed.
    pub len: usize,
    /// [`fnv1a64`] of the decompressed bytes.
    pub hash: u64,
    /// PTX: the ISA NVRTC declared.
    pub isa: Option<Isa>,
    /// PTX: the lowest ISA it was checked to assemble at.
    pub floor: Option<Isa>,
}

impl ShippedImage {
    /// The decompressed image, checked against the manifest.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        let xz = files::FILES
            .iter()
            .find(|(n, _)| *n == self.file)
            .map(|(_, b)| *b)
            .ok_or_else(|| format!("{} is not embedded in this build", self.file))?;
        let mut out = Vec::with_capacity(self.len);
        lzma_rs::xz_decompress(&mut std::io::BufReader::new(xz), &mut out)
            .map_err(|e| format!("decompressing {}: {e}", self.file))?;
        if out.len() != self.len || fnv1a64(&out) != self.hash {
            return Err(format!(
                "{} decompresses to {} bytes of hash {:016x}, the manifest says {} bytes of {:016x}",
                self.file,
                out.len(),
                fnv1a64(&out),
                self.len,
                self.hash
            ));
        }
        Ok(out)
    }

    /// Its compressed size in the binary.
    pub fn compressed_len(&self) -> usize {
        files::FILES
            .iter()
            .find(|(n, _)| *n == self.file)
            .map_or(0, |(_, b)| b.len())
    }
}

/// The shipped images and what they were made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// [`fnv1a64`] of the kernel source they were compiled from.
    pub source_hash: u64,
    /// The NVRTC that compiled them (`12.9`).
    pub nvrtc: String,
    /// Every image, in the manifest's order.
    pub images: Vec<ShippedImage>,
}

const HEADER: &str =
    "# ggml-cuda's shipped kernel images, made by scripts/ship-kernels: do not edit.";

impl Manifest {
    /// The manifest's text (what `scripts/ship-kernels` writes).
    pub fn render(&self) -> String {
        let mut s = format!(
            "{HEADER}\nsource-fnv1a64 {:016x}\nnvrtc {}\n",
            self.source_hash, self.nvrtc
        );
        for i in &self.images {
            let kind = match i.kind {
                ShippedKind::Cubin => "cubin",
                ShippedKind::Ptx => "ptx",
            };
            s.push_str(&format!(
                "image {} {kind} sm_{} bytes {} fnv1a64 {:016x}",
                i.file, i.arch, i.len, i.hash
            ));
            if let (Some(isa), Some(floor)) = (i.isa, i.floor) {
                s.push_str(&format!(" isa {} floor {}", isa_text(isa), isa_text(floor)));
            }
            s.push('\n');
        }
        s
    }

    /// Parse a manifest's text.
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let mut source_hash = None;
        let mut nvrtc = None;
        let mut images = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let bad = || format!("shipped/manifest.txt line {}: cannot read '{line}'", n + 1);
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                [] => {}
                [c, ..] if c.starts_with('#') => {}
                ["source-fnv1a64", h] => {
                    source_hash = Some(u64::from_str_radix(h, 16).map_err(|_| bad())?)
                }
                ["nvrtc", v] => nvrtc = Some(v.to_string()),
                ["image", file, kind, arch, "bytes", len, "fnv1a64", hash, rest @ ..] => {
                    let kind = match *kind {
                        "cubin" => ShippedKind::Cubin,
                        "ptx" => ShippedKind::Ptx,
                        _ => return Err(bad()),
                    };
                    let (isa, floor) = match rest {
                        [] => (None, None),
                        ["isa", i, "floor", f] => (parse_isa(i), parse_isa(f)),
                        _ => return Err(bad()),
                    };
                    if kind == ShippedKind::Ptx && (isa.is_none() || floor.is_none()) {
                        return Err(bad());
                    }
                    images.push(ShippedImage {
                        file: file.to_string(),
                        kind,
                        arch: arch
                            .strip_prefix("sm_")
                            .and_then(|a| a.parse().ok())
                            .ok_or_else(bad)?,
                        len: len.parse().map_err(|_| bad())?,
                        hash: u64::from_str_radix(hash, 16).map_err(|_| bad())?,
                        isa,
                        floor,
                    });
                }
                _ => return Err(bad()),
            }
        }
        Ok(Manifest {
            source_hash: source_hash.ok_or("shipped/manifest.txt has no source-fnv1a64 line")?,
            nvrtc: nvrtc.ok_or("shipped/manifest.txt has no nvrtc line")?,
            images,
        })
    }

    /// The cubin to run on a device of compute capability `cc`: the one of
    /// the same major version with the highest minor not above the
    /// device's (a cubin runs on later minors of its major: sm_86 on 8.9).
    pub fn cubin_for(&self, cc: (u32, u32)) -> Option<&ShippedImage> {
        self.images
            .iter()
            .filter(|i| i.kind == ShippedKind::Cubin && i.arch / 10 == cc.0 && i.arch % 10 <= cc.1)
            .max_by_key(|i| i.arch)
    }

    /// The shipped PTX, if any.
    pub fn ptx(&self) -> Option<&ShippedImage> {
        self.images.iter().find(|i| i.kind == ShippedKind::Ptx)
    }
}

/// The shipped manifest, parsed once (`Err`: none shipped in this build,
/// or unreadable).
pub fn manifest() -> Result<&'static Manifest, String> {
    static M: OnceLock<Result<Manifest, String>> = OnceLock::new();
    M.get_or_init(|| {
        if files::MANIFEST.is_empty() {
            return Err(format!(
                "no kernel images are shipped in this build (ggml-cuda/shipped/manifest.txt is missing: run {SHIP_COMMAND})"
            ));
        }
        Manifest::parse(files::MANIFEST)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Why the shipped images cannot serve this build's kernels (`None`: they
/// were compiled from this very source).
pub fn stale() -> Option<String> {
    match manifest() {
        Err(e) => Some(e),
        Ok(m) if m.source_hash != source_hash() => Some(format!(
            "the shipped kernel images were compiled from another kernel source (hash {:016x}, this source {:016x}): run {SHIP_COMMAND}",
            m.source_hash,
            source_hash()
        )),
        Ok(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_round_trip_and_bad_lines_are_errors() {
        let m = Manifest {
            source_hash: 0x0123_4567_89ab_cdef,
            nvrtc: "12.9".into(),
            images: vec![
                ShippedImage {
                    file: "sm_86.cubin.xz".into(),
                    kind: ShippedKind::Cubin,
                    arch: 86,
                    len: 10,
                    hash: 7,
                    isa: None,
                    floor: None,
                },
                ShippedImage {
                    file: "compute_75.ptx.xz".into(),
                    kind: ShippedKind::Ptx,
                    arch: 75,
                    len: 11,
                    hash: 8,
                    isa: Some((8, 8)),
                    floor: Some((8, 0)),
                },
            ],
        };
        assert_eq!(Manifest::parse(&m.render()), Ok(m.clone()));
        assert_eq!(m.cubin_for((8, 9)).map(|i| i.arch), Some(86));
        assert_eq!(m.cubin_for((8, 0)), None);
        assert_eq!(m.cubin_for((9, 0)), None);
        assert!(Manifest::parse("image x cubin sm_9 bytes 1").is_err());
        assert!(Manifest::parse("nvrtc 12.9\n").is_err());
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
