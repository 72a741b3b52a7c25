//! `--load-mode` on the CPU and the sim device: every fixture gives the
//! same logits, bit for bit, whichever way the file was read (`pin` and
//! `dio` against `mmap`, `none` and `mlock` too), `pin` without a device
//! that pins says so and behaves as `mmap`, and `dio` reads every fixture
//! byte-identically (their sizes are not multiples of the alignment).

mod common;

use std::sync::Arc;

use common::{or_skip, Fixture, MODELS};
use ggml_core::gguf::{read_direct, GgufFile, LoadMode, DIO_ALIGN};
use llama::device::open_device;
use llama::placement::Placement;
use llama::{Context, ContextParams, Model, ModelParams};

/// The prompt's logits with the model read as `mode`, on the CPU or with
/// the experts in host memory of a sim device; and the model's notes.
fn prompt_logits(fx: &Fixture, mode: LoadMode, sim: bool) -> (Vec<f32>, Vec<String>, bool) {
    let (device, placement) = if sim {
        (
            open_device("SIM0", 2, 1).expect("SIM0"),
            Placement {
                cpu_moe: true,
                ..Default::default()
            },
        )
    } else {
        (None, Placement::default())
    };
    let params = ModelParams {
        device,
        placement,
        load_mode: mode,
        ..Default::default()
    };
    let model = Arc::new(Model::load(&fx.gguf, params).expect("load"));
    let cp = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 256,
        n_threads: 2,
        ..Default::default()
    };
    let mut ctx = Context::new(Arc::clone(&model), cp).expect("context");
    ctx.decode(&fx.tokens, true).expect("prompt");
    let mut out = Vec::new();
    for i in 0..fx.tokens.len() {
        out.extend_from_slice(ctx.logits(i).expect("row"));
    }
    (out, model.load_notes.clone(), model.host_pinned)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn every_load_mode_gives_mmaps_logits_bit_for_bit() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        for sim in [false, true] {
            let (base, notes, _) = prompt_logits(&fx, LoadMode::Mmap, sim);
            assert!(notes.is_empty(), "{name}: mmap notes {notes:?}");
            assert_eq!(base.len(), fx.tokens.len() * fx.n_vocab());
            let modes: &[LoadMode] = if sim {
                &[LoadMode::Pin, LoadMode::Dio]
            } else {
                &[
                    LoadMode::Pin,
                    LoadMode::Dio,
                    LoadMode::None,
                    LoadMode::Mlock,
                ]
            };
            for &mode in modes {
                let (ours, notes, pinned) = prompt_logits(&fx, mode, sim);
                assert!(
                    bits(&ours) == bits(&base),
                    "{name} (sim {sim}): --load-mode {mode} logits differ from mmap's"
                );
                if mode == LoadMode::Pin {
                    assert!(!pinned, "{name}: nothing pins on the CPU or sim device");
                    assert_eq!(notes.len(), 1, "{name}: pin says so once: {notes:?}");
                    assert!(notes[0].contains("behaves as mmap"), "{}", notes[0]);
                    if sim {
                        assert!(notes[0].contains("SIM0"), "{}", notes[0]);
                    }
                }
            }
        }
    }
}

#[test]
fn dio_reads_every_fixture_byte_identically() {
    for name in MODELS {
        let fx = or_skip!(Fixture::load(name), continue);
        let want = std::fs::read(&fx.gguf).expect("read");
        assert_ne!(want.len() % DIO_ALIGN, 0, "{name}: wanted an odd size");
        let (got, note) = read_direct(&fx.gguf).expect("dio");
        if let Some(n) = note {
            println!("{name}: {n}");
        }
        assert!(got == want, "{name}: O_DIRECT bytes differ");
        let (f, _) = GgufFile::open_with(&fx.gguf, LoadMode::Dio).expect("open dio");
        assert!(!f.bytes().is_mmap());
        assert!(f.bytes().as_slice() == want.as_slice(), "{name}");
    }
}

#[test]
fn dio_reads_odd_sizes_and_empty_files() {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    // sizes around the alignment and the 8 MiB chunk, none a multiple of both
    for len in [
        0usize,
        1,
        DIO_ALIGN - 1,
        DIO_ALIGN + 1,
        3 * DIO_ALIGN + 5,
        (8 << 20) + 7,
    ] {
        let p = dir.join(format!("dio-{len}.bin"));
        let want: Vec<u8> = (0..len).map(|i| (i * 31 + i / 4099) as u8).collect();
        std::fs::write(&p, &want).expect("write");
        let (got, note) = read_direct(&p).expect("dio");
        if let Some(n) = note {
            println!("{len} bytes: {n}");
        }
        assert!(got == want, "{len} bytes differ");
        let _ = std::fs::remove_file(&p);
    }
}

#[test]
fn dio_on_tmpfs_reads_the_same_bytes() {
    // older tmpfs refuses O_DIRECT (the fallback path), newer accepts it:
    // either way the bytes are the file's (the fallback itself is a unit
    // test in ggml-core)
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        println!("skipped: no /dev/shm");
        return;
    }
    let p = shm.join(format!("llama-dio-{}.bin", std::process::id()));
    let want: Vec<u8> = (0..3 * DIO_ALIGN + 1).map(|i| i as u8).collect();
    std::fs::write(&p, &want).expect("write");
    let r = read_direct(&p);
    let _ = std::fs::remove_file(&p);
    let (got, note) = r.expect("dio on tmpfs");
    println!("tmpfs: {}", note.as_deref().unwrap_or("O_DIRECT accepted"));
    assert!(got == want);
}

#[test]
fn dio_and_mlock_name_a_missing_file() {
    let p = std::path::Path::new("/nonexistent/model.gguf");
    for mode in LoadMode::ALL {
        let e = GgufFile::open_with(p, mode).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/model.gguf"), "{mode}: {e}");
    }
}
