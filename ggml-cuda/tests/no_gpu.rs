//! Tests that run everywhere: the clean no-device errors, and the pure parts
//! of the backend (op support, YaRN dims). The device tests run on the real
//! device where there is one, else on the emulated `CUDA0` (enabled by
//! [`device_setup`] after the no-device checks ran, once per process).

use ggml_core::op::{RopeMode, RopeParams};
use ggml_core::{BackendDevice, BackendStream, BufferUsage, GgmlType, Graph};
use ggml_cuda::backend::{rope_yarn_corr_dims, supports_node};
use ggml_cuda::{cuda_device_count, CudaBackend, NO_DRIVER};
use std::sync::OnceLock;

/// What the machine offered before the emulator was enabled: `None` with a
/// real device, else the reason there is none.
fn device_setup() -> &'static Option<String> {
    static SETUP: OnceLock<Option<String>> = OnceLock::new();
    SETUP.get_or_init(|| {
        let reason = ggml_cuda::unavailable_reason();
        no_device_checks(reason.as_deref());
        if let Some(why) = &reason {
            ggml_cuda::emulator::fallback(why);
        }
        reason
    })
}

#[test]
fn new_without_cuda_is_a_clean_no_device_error() {
    // the checks run inside the setup, before any test enables the emulator
    let _ = device_setup();
}

fn no_device_checks(reason: Option<&str>) {
    match reason {
        Some(reason) => {
            let err = CudaBackend::new(0).err().expect("no device here");
            let msg = err.to_string();
            println!("CudaBackend::new(0): {msg}");
            assert!(
                matches!(err, ggml_core::BackendError::NoDevice(_)),
                "{err:?}"
            );
            assert_eq!(msg, reason);
            if ggml_cuda::probe_driver().is_err() {
                assert_eq!(err, ggml_core::BackendError::NoDevice(NO_DRIVER.into()));
                assert!(cuda_device_count().is_err());
            }
        }
        None => {
            let be = CudaBackend::new(0).expect("device 0");
            assert_eq!(be.name(), "CUDA0");
            assert!(cuda_device_count().unwrap() >= 1);
            println!(
                "{}: {} free bytes",
                be.device_name().unwrap(),
                be.free_memory().unwrap()
            );
            let n = cuda_device_count().unwrap();
            assert!(matches!(
                CudaBackend::new(n),
                Err(ggml_core::BackendError::NoDevice(_))
            ));
        }
    }
}

#[test]
fn buffers_and_events_on_a_device() {
    device_setup();
    let be = CudaBackend::new(0).unwrap();
    println!("{}", be.device_name().unwrap());
    let buf = be.alloc_buffer(1000, BufferUsage::Compute).unwrap();
    assert!(!buf.is_host());
    assert!(buf.base_ptr().is_none());
    assert!(be.can_use_buffer(buf.as_ref()));
    let data: Vec<u8> = (0..100u8).collect();
    buf.write(900, &data).unwrap();
    let mut out = vec![0u8; 100];
    buf.read(900, &mut out).unwrap();
    assert_eq!(out, data);
    assert!(buf.write(950, &data).is_err());
    // async write ordered before a later read
    let td = ggml_core::TensorData {
        buffer: buf.clone(),
        offset: 0,
    };
    let src = vec![7u8; 64];
    be.write_async(&td, 10, &src).unwrap();
    let ev = be.record_event().unwrap();
    be.wait_event(&ev).unwrap();
    be.synchronize().unwrap();
    let mut out = vec![0u8; 64];
    buf.read(10, &mut out).unwrap();
    assert_eq!(out, src);
    // pinned host memory
    let pinned = be.alloc_pinned(4096, BufferUsage::Weights).unwrap();
    assert!(pinned.is_host() && pinned.base_ptr().is_some());
    pinned.write(0, &data).unwrap();
    // registration of an existing range: supported or a clean error
    let bytes: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> =
        std::sync::Arc::new(vec![1u8; 1 << 20]);
    match be.register_host(bytes) {
        Ok(r) => println!(
            "registered {} bytes (read-only flag: {})",
            r.len(),
            r.is_read_only()
        ),
        Err(e) => println!("host registration unavailable: {e}"),
    }
    assert_eq!(be.read_overhang(), 0);
}

#[test]
fn supports_op_is_truthful_about_types() {
    let mut g = Graph::new();
    let w = g.new_tensor_2d(GgmlType::Q4K, 256, 8);
    let w1 = g.new_tensor_2d(GgmlType::Q4_1, 256, 8);
    let w8k = g.new_tensor_2d(GgmlType::Q8K, 256, 8);
    let x = g.new_tensor_2d(GgmlType::F32, 256, 3);
    let mm = g.mul_mat(w, x);
    let mm1 = g.mul_mat(w1, x);
    let mm8k = g.mul_mat(w8k, x);
    assert!(supports_node(&g, mm));
    assert!(
        supports_node(&g, mm1),
        "Q4_1 has MMVQ and dequantize kernels"
    );
    assert!(
        !supports_node(&g, mm8k),
        "Q8_K (an activation type) has no CUDA weight kernel"
    );
    let q = g.new_tensor_3d(GgmlType::F32, 64, 4, 2);
    let fa = g.flash_attn_ext(q, q, q, None, 1.0, 0.0, 0.0);
    assert!(supports_node(&g, fa), "flash attention takes F32 q/k/v");
    // a K-quant K cache: q would need Q8_K rounding, not implemented
    let kq = g.new_tensor_3d(GgmlType::Q4K, 256, 4, 2);
    let q256 = g.new_tensor_3d(GgmlType::F32, 256, 4, 2);
    let fa_k = g.flash_attn_ext(q256, kq, q256, None, 1.0, 0.0, 0.0);
    assert!(!supports_node(&g, fa_k));
    let pos = g.new_tensor_1d(GgmlType::I32, 2);
    let p = RopeParams {
        n_dims: 32,
        mode: RopeMode::Neox,
        n_ctx_orig: 4096,
        freq_base: 10000.0.into(),
        freq_scale: 1.0.into(),
        ext_factor: 0.0.into(),
        attn_factor: 1.0.into(),
        beta_fast: 32.0.into(),
        beta_slow: 1.0.into(),
    };
    let r = g.rope_ext(q, pos, None, p);
    assert!(supports_node(&g, r));
    let dst = g.new_tensor_2d(GgmlType::Q8_0, 64, 8);
    let src = g.new_tensor_2d(GgmlType::F32, 64, 8);
    let c = g.cpy(src, dst);
    assert!(!supports_node(&g, c), "no quantizing copies");
}

#[test]
fn yarn_corr_dims_match_ggml() {
    // ggml_rope_yarn_corr_dims(128, 4096, 10000, 32, 1) = [20, 46]
    let (a, b) = rope_yarn_corr_dims(128, 4096, 10000.0, 32.0, 1.0);
    assert_eq!((a, b), (20.0, 46.0));
    // clamped to [0, n_dims - 1]
    let (a, b) = rope_yarn_corr_dims(8, 4096, 10000.0, 1e9, 1e-9);
    assert_eq!((a, b), (0.0, 7.0));
}

/// The pinned / pageable host-to-device bandwidth: bad sizes are refused,
/// a machine without CUDA gets "no CUDA device: ...", and on a device both
/// copies run and give a positive rate. The `h2d-bandwidth` example (built
/// by a plain `cargo test`) says the same and exits 0 without a device.
#[test]
fn h2d_bandwidth_measures_or_says_no_device() {
    let bad = ggml_cuda::measure_h2d_bandwidth(0, 0, 3).unwrap_err();
    assert!(
        matches!(bad, ggml_core::BackendError::InvalidInput(_)),
        "{bad:?}"
    );
    let small = 16 << 20;
    let driverless = ggml_cuda::probe_driver().is_err();
    // emulated: enabled by the setup (no GPU), or by GGML_CUDA_EMULATOR=1
    let _ = device_setup();
    let emulated = ggml_cuda::emulator::enabled();
    match ggml_cuda::measure_h2d_bandwidth(0, small, 2) {
        Ok(r) => {
            println!(
                "{}: pinned {:.2} GB/s, pageable {:.2} GB/s ({} MiB)",
                r.device_name,
                r.pinned_gbs,
                r.pageable_gbs,
                small >> 20
            );
            assert!(r.pinned_gbs > 0.0 && r.pageable_gbs > 0.0, "{r:?}");
            assert_eq!((r.bytes, r.reps), (small, 2));
            assert_eq!(r.emulated, emulated);
            if emulated {
                assert!(r.device_name.contains("emulated"), "{r:?}");
            }
        }
        Err(ggml_core::BackendError::NoDevice(m)) => {
            assert!(m.starts_with("no CUDA device"), "{m}");
            if driverless {
                assert_eq!(m, NO_DRIVER);
            }
        }
        Err(e) => panic!("h2d bandwidth failed: {e:?}"),
    }
    // the example binary next to the test binaries (target/PROFILE/examples)
    let exe = std::env::current_exe().expect("test binary path");
    let ex = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("examples").join("h2d-bandwidth"));
    let Some(ex) = ex.filter(|p| p.is_file()) else {
        println!("skipped the example: not built (run the whole `cargo test -p ggml-cuda`)");
        return;
    };
    // without the emulator's variable (this test may run under
    // GGML_CUDA_EMULATOR=1, as the packed GPU check's rehearsal does)
    let run = |args: &[&str]| {
        std::process::Command::new(&ex)
            .args(args)
            .env_remove("GGML_CUDA_EMULATOR")
            .output()
            .expect("run h2d-bandwidth")
    };
    let o = run(&["--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown argument '--bogus'"));
    if driverless {
        let o = run(&[]);
        assert!(o.status.success());
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(out.trim(), NO_DRIVER, "{out}");
        let o = run(&["--json", "--mib", "1"]);
        assert!(o.status.success());
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(out.trim(), format!("{{\"skipped\": \"{NO_DRIVER}\"}}"));
        // GGML_CUDA_EMULATOR=1: the emulated device, labelled as such
        let o = std::process::Command::new(&ex)
            .args(["--mib", "1", "--reps", "1"])
            .env("GGML_CUDA_EMULATOR", "1")
            .output()
            .expect("run h2d-bandwidth");
        assert!(o.status.success(), "{o:?}");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("emulated CUDA device 0") && out.contains("not a GPU measurement"),
            "{out}"
        );
    } else if ggml_cuda::unavailable_reason().is_none() {
        let o = run(&["--json", "--mib", "16", "--reps", "2"]);
        assert!(o.status.success(), "{o:?}");
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains("\"pinned_gbs\"") && out.contains("\"pageable_gbs\""),
            "{out}"
        );
    }
}
