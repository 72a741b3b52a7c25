//! `ship-kernels`: compile the kernel source into the images shipped in the
//! binary (`ggml-cuda/shipped/`), as `scripts/ship-kernels` runs it:
//!
//! ```sh
//! cargo run --release -p ggml-cuda --example ship-kernels -- \
//!     --nvrtc PATH/libnvrtc.so.12 --ptxas PATH/ptxas --out DIR
//! ```
//!
//! Writes into `DIR`: `sm_XY.cubin` for every architecture of
//! `ggml_cuda::shipped::ARCHS` (NVRTC, `--gpu-architecture=sm_XY`),
//! `compute_75.ptx`, and `manifest.txt` naming each as the `.xz` the script
//! compresses it to, with its length, FNV-1a hash and (PTX) ISA. Every
//! cubin is checked to be for its architecture and to define every kernel
//! the backend looks up; the PTX to define them all and to assemble with
//! `ptxas` for sm_75 with its `.version` lowered to the floor
//! (`shipped::PTX_FLOOR`), which is what lets the loader declare any ISA
//! from the floor to NVRTC's own. Exit 1 with the reason on any failure.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use ggml_cuda::kernels::{KERNELS_FILE_NAME, KERNELS_SRC, KERNEL_NAMES};
use ggml_cuda::libraries::{FoundLibrary, Origin};
use ggml_cuda::nvrtc::Nvrtc;
use ggml_cuda::ptx_isa::{self, isa_text};
use ggml_cuda::shipped::{self, Manifest, ShippedImage, ShippedKind};

struct Opts {
    nvrtc: PathBuf,
    ptxas: PathBuf,
    out: PathBuf,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let (mut nvrtc, mut ptxas, mut out) = (None, None, None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--nvrtc" => nvrtc = Some(val()?),
            "--ptxas" => ptxas = Some(val()?),
            "--out" => out = Some(val()?),
            _ => return Err(format!("unknown argument '{a}'")),
        }
    }
    let usage = "usage: ship-kernels --nvrtc LIBNVRTC --ptxas PTXAS --out DIR";
    Ok(Opts {
        nvrtc: nvrtc.ok_or(usage)?,
        ptxas: ptxas.ok_or(usage)?,
        out: out.ok_or(usage)?,
    })
}

fn compile(nvrtc: &Nvrtc, arch: &str) -> Result<(Vec<u8>, String), String> {
    let options = vec![format!("--gpu-architecture={arch}")];
    let out = nvrtc
        .compile(KERNELS_SRC, KERNELS_FILE_NAME, &options)
        .map_err(|e| e.to_string())?;
    if let Some(status) = out.error {
        return Err(format!("NVRTC for {arch}: {status}\n{}", out.log));
    }
    Ok((out.cubin, out.ptx))
}

fn cubin(nvrtc: &Nvrtc, sm: u32, out: &Path) -> Result<ShippedImage, String> {
    let (bytes, _) = compile(nvrtc, &format!("sm_{sm}"))?;
    let info = ggml_cuda::cubin::parse(&bytes)?;
    if info.sm != sm {
        return Err(format!("NVRTC's cubin for sm_{sm} says sm_{}", info.sm));
    }
    if let Some(k) = KERNEL_NAMES
        .iter()
        .find(|k| !info.kernels.iter().any(|e| e == *k))
    {
        return Err(format!("the cubin for sm_{sm} lacks kernel {k}"));
    }
    let name = format!("sm_{sm}.cubin");
    std::fs::write(out.join(&name), &bytes).map_err(|e| format!("writing {name}: {e}"))?;
    eprintln!("ship-kernels: {name}: {} bytes", bytes.len());
    Ok(ShippedImage {
        file: format!("{name}.xz"),
        kind: ShippedKind::Cubin,
        arch: sm,
        len: bytes.len(),
        hash: shipped::fnv1a64(&bytes),
        isa: None,
        floor: None,
    })
}

fn ptx(nvrtc: &Nvrtc, ptxas: &Path, out: &Path) -> Result<ShippedImage, String> {
    let arch = shipped::PTX_ARCH;
    let (_, text) = compile(nvrtc, &format!("compute_{arch}"))?;
    let h = ptx_isa::header(&text)?;
    for k in KERNEL_NAMES {
        let entry = format!(".visible .entry {k}(");
        if !text.lines().any(|l| l.trim_start().starts_with(&entry)) {
            return Err(format!("the PTX lacks kernel {k}"));
        }
    }
    let floor = shipped::PTX_FLOOR;
    let low = ptx_isa::with_version(&text, floor)?;
    let probe = out.join("floor-check.ptx");
    std::fs::write(&probe, &low).map_err(|e| format!("writing {}: {e}", probe.display()))?;
    let r = Command::new(ptxas)
        .arg(format!("-arch=sm_{arch}"))
        .arg(&probe)
        .arg("-o")
        .arg(out.join("floor-check.cubin"))
        .output()
        .map_err(|e| format!("running {}: {e}", ptxas.display()))?;
    let _ = std::fs::remove_file(&probe);
    let _ = std::fs::remove_file(out.join("floor-check.cubin"));
    if !r.status.success() {
        return Err(format!(
            "the PTX does not assemble at ISA {} ({}): {}",
            isa_text(floor),
            r.status,
            String::from_utf8_lossy(&r.stderr)
        ));
    }
    let name = format!("compute_{arch}.ptx");
    std::fs::write(out.join(&name), &text).map_err(|e| format!("writing {name}: {e}"))?;
    eprintln!(
        "ship-kernels: {name}: {} bytes, ISA {}, assembles at ISA {}",
        text.len(),
        isa_text(h.isa),
        isa_text(floor)
    );
    Ok(ShippedImage {
        file: format!("{name}.xz"),
        kind: ShippedKind::Ptx,
        arch,
        len: text.len(),
        hash: shipped::fnv1a64(text.as_bytes()),
        isa: Some(h.isa),
        floor: Some(floor),
    })
}

fn run(o: &Opts) -> Result<(), String> {
    let nvrtc = Nvrtc::load(FoundLibrary {
        path: o.nvrtc.clone(),
        major: None,
        origin: Origin::PythonWheel,
    })
    .map_err(|e| e.to_string())?;
    eprintln!("ship-kernels: {}", nvrtc.describe());
    std::fs::create_dir_all(&o.out).map_err(|e| format!("{}: {e}", o.out.display()))?;
    // two compiles at a time (NVRTC programs are independent)
    let mut work: Vec<Option<u32>> = shipped::ARCHS.iter().map(|&sm| Some(sm)).collect();
    work.push(None); // the PTX
    let mut images: Vec<Result<ShippedImage, String>> = Vec::new();
    for pair in work.chunks(2) {
        std::thread::scope(|s| {
            let handles: Vec<_> = pair
                .iter()
                .map(|&w| {
                    let nvrtc = &nvrtc;
                    s.spawn(move || match w {
                        Some(sm) => cubin(nvrtc, sm, &o.out),
                        None => ptx(nvrtc, &o.ptxas, &o.out),
                    })
                })
                .collect();
            for h in handles {
                images.push(
                    h.join()
                        .unwrap_or_else(|_| Err("a compile panicked".into())),
                );
            }
        });
    }
    let images = images.into_iter().collect::<Result<Vec<_>, _>>()?;
    let (major, minor) = nvrtc.version();
    let m = Manifest {
        source_hash: shipped::source_hash(),
        nvrtc: format!("{major}.{minor}"),
        images,
    };
    let path = o.out.join("manifest.txt");
    std::fs::write(&path, m.render()).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args).and_then(|o| run(&o)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ship-kernels: {e}");
            ExitCode::FAILURE
        }
    }
}
