//! Faults under the host expert cache, through a context: a read error
//! (`EIO`, injected into the running cache's source) and a model file
//! truncated while running are clear errors naming the file, never a panic
//! or a wrong answer; after an injected error the cache trusts none of the
//! slots it was filling, so the same context, cleared, gives the logits of
//! a run without the cache bit for bit. A file shorter than its header says
//! is refused at load.

mod common;

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{or_skip, Fixture};
use ggml_core::gguf::LoadMode;
use llama::moe_cache::cache::layout::model_groups;
use llama::moe_cache::host::disk::ReadAt;
use llama::moe_cache::host::HostCacheParams;
use llama::moe_cache::{CacheSize, PolicyKind};
use llama::{Context, ContextParams, Model, ModelParams, MoeParams};

const FIXTURE: &str = "tiny-qwen3moe-f32";

fn ctx(model: &Arc<Model>, bytes: u64) -> llama::Result<Context> {
    let p = ContextParams {
        n_ctx: 256,
        n_batch: 256,
        n_ubatch: 512,
        n_threads: 2,
        moe: MoeParams {
            host_cache: HostCacheParams {
                size: CacheSize::Bytes(bytes),
                policy: PolicyKind::default(),
            },
            ..Default::default()
        },
        ..Default::default()
    };
    Context::new(Arc::clone(model), p)
}

/// Half the experts of the fixture's one group.
fn half(model: &Model) -> u64 {
    let g = &model_groups(model)[0];
    g.bank_bytes(g.n_expert * g.layers.len() as u32 / 2)
}

/// The model file, failing every read with `EIO` while `fail` is set.
struct Flaky {
    file: File,
    fail: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
}

impl ReadAt for Flaky {
    fn read_at(&self, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if self.fail.load(Ordering::Relaxed) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        std::os::unix::fs::FileExt::read_at(&self.file, buf, off)
    }
}

/// Prompt logits, then 4 teacher-forced rows.
fn logits(c: &mut Context, fx: &Fixture) -> Vec<f32> {
    let (mut out, forced) = fx.prompt_and_forced(c, 4);
    out.extend(forced);
    out
}

#[test]
fn an_eio_is_an_error_and_no_slot_it_was_filling_is_trusted() {
    let fx = or_skip!(Fixture::load(FIXTURE), return);
    let model = fx.model_with_host_experts(None);
    let want = logits(
        &mut Context::new(
            Arc::clone(&model),
            ContextParams {
                n_ctx: 256,
                n_batch: 256,
                n_threads: 2,
                ..Default::default()
            },
        )
        .expect("context"),
        &fx,
    );
    let mut c = ctx(&model, half(&model)).expect("context");
    let fail = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let flaky = Flaky {
        file: File::open(&fx.gguf).expect("open"),
        fail: Arc::clone(&fail),
        reads: Arc::clone(&reads),
    };
    assert!(c.set_host_cache_source(Box::new(flaky)), "no host cache");
    // the prompt runs; the first forced token's misses fail
    c.decode(&fx.tokens, true).expect("prompt");
    assert!(reads.load(Ordering::Relaxed) > 0, "the prompt read nothing");
    fail.store(true, Ordering::Relaxed);
    let mut err = None;
    for &t in &fx.gen[..8] {
        if let Err(e) = c.decode(&[t], true) {
            err = Some(e.to_string());
            break;
        }
    }
    let e = err.expect("an injected EIO was not an error");
    assert!(
        e.contains("host expert cache") && e.contains(FIXTURE) && e.contains("Input/output error"),
        "{e}"
    );
    // the same context, cleared, with a healthy disk: the logits of a run
    // without the cache, bit for bit (no slot holds a half-read expert)
    fail.store(false, Ordering::Relaxed);
    c.clear();
    let got = logits(&mut c, &fx);
    assert!(
        common::same_bits(&got, &want),
        "logits differ after an injected EIO"
    );
    c.verify_host_cache().expect("maps agree with the slots");
}

#[test]
fn a_file_truncated_while_running_is_an_error_naming_it() {
    let fx = or_skip!(Fixture::load(FIXTURE), return);
    let dir = std::env::temp_dir().join(format!("host-cache-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("copy.gguf");
    std::fs::copy(&fx.gguf, &path).expect("copy");
    // read into memory: the truncation reaches only the host cache's reads
    let model = Arc::new(
        Model::load(
            &path,
            ModelParams {
                load_mode: LoadMode::None,
                ..Default::default()
            },
        )
        .expect("load"),
    );
    let mut c = ctx(&model, half(&model)).expect("context");
    File::options()
        .write(true)
        .open(&path)
        .and_then(|f| f.set_len(0))
        .expect("truncate");
    let e = match c.decode(&fx.tokens, true) {
        Ok(_) => panic!("a truncated file was read"),
        Err(e) => e.to_string(),
    };
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        e.contains("copy.gguf") && e.contains("truncated while running"),
        "{e}"
    );
}

#[test]
fn a_file_shorter_than_its_header_says_is_refused_at_load() {
    let fx = or_skip!(Fixture::load(FIXTURE), return);
    let dir = std::env::temp_dir().join(format!("host-cache-short-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("short.gguf");
    let bytes = std::fs::read(&fx.gguf).expect("read");
    std::fs::write(&path, &bytes[..bytes.len() - 4096]).expect("write");
    // the host cache's load mode: a lazy mapping
    let r = Model::load(
        &path,
        ModelParams {
            load_mode: LoadMode::Mmap,
            lazy_map: true,
            ..Default::default()
        },
    );
    std::fs::remove_dir_all(&dir).ok();
    let e = match r {
        Ok(_) => panic!("a file shorter than its header says was loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("out of bounds") && e.contains("the file is") && e.contains("_exps"),
        "{e}"
    );
}
