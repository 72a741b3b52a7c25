//! The shipped kernel images (`ggml-cuda/shipped/`, made by
//! `scripts/ship-kernels`) and the loader that picks one per device,
//! proven on the emulator: it pretends a compute capability and a driver
//! version, checks each image as a driver would, and refuses a cubin of
//! another architecture or PTX of a newer ISA than its driver's.

use ggml_cuda::emulator::{self, Config};
use ggml_cuda::kernel_load::{self, Candidate};
use ggml_cuda::kernels::KERNEL_NAMES;
use ggml_cuda::shipped::{self, ShippedKind, ARCHS, SHIP_COMMAND};
use ggml_cuda::CudaBackend;

#[test]
fn the_shipped_images_are_of_this_kernel_source() {
    if let Some(why) = shipped::stale() {
        panic!(
            "{why}\n(the kernel source changed: run {SHIP_COMMAND} and commit ggml-cuda/shipped/ \
             and the README with it)"
        );
    }
}

#[test]
fn every_architecture_is_shipped_and_defines_every_kernel() {
    let m = shipped::manifest().expect("the manifest");
    let (mut raw, mut xz) = (0usize, 0usize);
    for &sm in &ARCHS {
        let i = m
            .images
            .iter()
            .find(|i| i.kind == ShippedKind::Cubin && i.arch == sm)
            .unwrap_or_else(|| panic!("no shipped cubin for sm_{sm}: run {SHIP_COMMAND}"));
        let bytes = i.bytes().expect("decompresses to the manifest's bytes");
        let info = ggml_cuda::cubin::parse(&bytes).expect("a cubin");
        assert_eq!(info.sm, sm, "{}", i.file);
        for k in KERNEL_NAMES {
            assert!(info.kernels.iter().any(|e| e == k), "{}: no {k}", i.file);
        }
        raw += bytes.len();
        xz += i.compressed_len();
    }
    let p = m.ptx().expect("a shipped PTX");
    let text = String::from_utf8(p.bytes().expect("decompresses")).expect("text");
    let h = ggml_cuda::ptx_isa::header(&text).expect("a PTX header");
    assert_eq!((h.target, Some(h.isa)), (75, p.isa));
    assert_eq!(p.floor, Some(shipped::PTX_FLOOR));
    for k in KERNEL_NAMES {
        assert!(
            text.contains(&format!(".visible .entry {k}(")),
            "PTX: no {k}"
        );
    }
    raw += text.len();
    xz += p.compressed_len();
    println!(
        "shipped: {} images, {:.2} MiB compressed ({:.2} MiB raw), NVRTC {}",
        m.images.len(),
        xz as f64 / 1048576.0,
        raw as f64 / 1048576.0,
        m.nvrtc
    );
    assert!(xz < 3 << 20, "the shipped images grew to {xz} bytes");
}

#[test]
fn the_readme_table_is_of_the_shipped_images() {
    let m = shipped::manifest().expect("the manifest");
    let readme = include_str!("../README.md");
    let hash = format!("source fnv1a64 `{:016x}`", m.source_hash);
    assert!(
        readme.contains(&hash),
        "ggml-cuda/README.md's entry-point table is not of the shipped images ({hash}): run {SHIP_COMMAND}"
    );
    for k in KERNEL_NAMES {
        assert!(
            readme.contains(&format!("| `{k}` |")),
            "README table: no {k}"
        );
    }
    assert!(
        !readme.contains("**missing**"),
        "README table: a kernel is missing"
    );
}

/// A thread config pretending `cc` and `driver` (and a JIT limit).
fn pretend(cc: (u32, u32), driver: i32, jit: Option<(u32, u32)>) {
    emulator::enable();
    emulator::set_thread_config(Some(Config {
        cc,
        driver_version: driver,
        ptx_isa_max: jit,
        ..emulator::config()
    }));
}

#[test]
fn each_architecture_loads_its_shipped_cubin() {
    for (cc, want) in [
        ((9, 0), 90),
        ((8, 9), 89),
        ((8, 7), 86),
        ((12, 1), 120),
        ((7, 5), 75),
    ] {
        pretend(cc, 12090, None);
        let b = CudaBackend::new(0).expect("CUDA0");
        let image = format!("cubin sm_{want} (shipped sm_{want}.cubin.xz)");
        assert_eq!(b.kernel_image(), image, "compute capability {cc:?}");
        assert_eq!(b.kernel_tries(), [format!("{image}: loaded")]);
        assert!(emulator::loaded_images(0).contains(&image));
    }
    emulator::set_thread_config(None);
}

#[test]
fn kernels_load_once_per_process_and_device() {
    pretend((8, 0), 12080, None);
    let before = emulator::loaded_images(0).len();
    let a = CudaBackend::new(0).expect("CUDA0");
    let b = CudaBackend::new(0).expect("CUDA0 again");
    assert_eq!(a.kernel_image(), "cubin sm_80 (shipped sm_80.cubin.xz)");
    assert_eq!(a.kernel_image(), b.kernel_image());
    let loads = emulator::loaded_images(0)[before..]
        .iter()
        .filter(|i| i.contains("sm_80"))
        .count();
    assert_eq!(loads, 1, "{:?}", emulator::loaded_images(0));
    emulator::set_thread_config(None);
}

#[test]
fn ptx_is_declared_at_the_drivers_isa_where_no_cubin_runs() {
    // compute capability 15.0: no shipped cubin, nothing NVRTC compiles
    pretend((15, 0), 12040, None);
    let b = CudaBackend::new(0).expect("CUDA0 from the shipped PTX");
    let tries = b.kernel_tries().join("\n");
    println!("{tries}");
    assert_eq!(
        b.kernel_image(),
        "PTX compute_75 ISA 8.4 (shipped compute_75.ptx.xz)"
    );
    assert!(
        tries.contains("shipped cubin: none runs on sm_150"),
        "{tries}"
    );
    assert!(
        tries.contains("cubin sm_150 (NVRTC at run time): not available"),
        "{tries}"
    );
    emulator::set_thread_config(None);
}

#[test]
fn ptx_newer_than_the_driver_is_refused_and_a_lower_isa_loads() {
    // a driver whose JIT stops at ISA 8.4 though it says 12.9: the loader
    // declares 8.8 (the table's for 12.9), the driver refuses it, and the
    // loader falls back to the floor, naming each try
    pretend((14, 0), 12090, Some((8, 4)));
    let b = CudaBackend::new(0).expect("CUDA0 from the PTX at a lower ISA");
    let tries = b.kernel_tries();
    println!("{}", tries.join("\n"));
    assert_eq!(
        b.kernel_image(),
        "PTX compute_75 ISA 8.0 (shipped compute_75.ptx.xz)"
    );
    let refused = &tries[tries.len() - 2];
    assert!(
        refused.starts_with("PTX compute_75 ISA 8.8 (shipped compute_75.ptx.xz): refused:")
            && refused.contains("CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
        "{refused}"
    );
    assert!(tries[tries.len() - 1].ends_with(": loaded"));
    emulator::set_thread_config(None);
}

#[test]
fn a_driver_older_than_every_image_is_an_error_naming_each_try() {
    pretend((13, 0), 11080, None);
    let e = CudaBackend::new(0)
        .err()
        .expect("no image loads")
        .to_string();
    println!("{e}");
    assert!(
        e.contains("no kernel image loads on CUDA0 (compute capability 13.0, CUDA driver 11.8)"),
        "{e}"
    );
    assert!(e.contains("(1) shipped cubin: none runs on sm_130"), "{e}");
    assert!(
        e.contains("PTX compute_75.ptx.xz: skipped: CUDA driver 11.8 accepts PTX ISA up to 7.8"),
        "{e}"
    );
    emulator::set_thread_config(None);
}

#[test]
fn the_emulated_driver_refuses_images_a_driver_would() {
    pretend((9, 0), 12090, None);
    let m = shipped::manifest().expect("manifest");
    let dev = ggml_cuda::driver::open(0).expect("emulated CUDA0");
    let sm86 = m
        .images
        .iter()
        .find(|i| i.arch == 86)
        .cloned()
        .expect("sm_86");
    // a cubin of another major
    let e = kernel_load::load_candidates(
        dev.as_ref(),
        "CUDA0",
        &[Candidate::ShippedCubin(sm86)],
        vec![],
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(e.contains("CUDA_ERROR_NO_BINARY_FOR_GPU"), "{e}");
    // PTX declared newer than the driver's ISA
    let p = m.ptx().cloned().expect("ptx");
    let e = kernel_load::load_candidates(
        dev.as_ref(),
        "CUDA0",
        &[Candidate::ShippedPtx(p.clone(), (9, 0))],
        vec![],
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(e.contains("CUDA_ERROR_UNSUPPORTED_PTX_VERSION"), "{e}");
    // garbage named as a cubin
    let img = ggml_cuda::driver::ModuleImage {
        kind: ggml_cuda::driver::ImageKind::Cubin { sm: 90 },
        bytes: b".version 8.8\n.target sm_90\n".to_vec(),
        origin: "test".into(),
    };
    let e = dev
        .load_module(&img, KERNEL_NAMES)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("CUDA_ERROR_INVALID_IMAGE"), "{e}");
    // a PTX without one of the kernels
    let text = String::from_utf8(p.bytes().expect("ptx")).expect("text");
    let img = ggml_cuda::driver::ModuleImage {
        kind: ggml_cuda::driver::ImageKind::Ptx {
            isa: (8, 8),
            target: 75,
        },
        bytes: text
            .replace(".visible .entry k_rope(", ".visible .entry k_ropx(")
            .into_bytes(),
        origin: "test".into(),
    };
    let e = dev
        .load_module(&img, KERNEL_NAMES)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        e.contains("CUDA_ERROR_NOT_FOUND") && e.contains("k_rope"),
        "{e}"
    );
    emulator::set_thread_config(None);
}
