//! The emulated CUDA device's runtime through the real backend: memory
//! capacity and out-of-memory, pinned/pageable copy accounting, streams
//! ordered by events under seeded random delays, and the hazard detector
//! catching a missing wait (naming both operations and streams). Runs
//! everywhere: the emulator is enabled programmatically.

use std::sync::{Arc, Mutex, MutexGuard};

use ggml_core::{
    BackendDevice, BackendError, BackendStream, BufferUsage, GgmlType, Graph, Stream, TensorData,
};
use ggml_cuda::{emulator, CudaBackend};

/// Tests here change the emulator's configuration: one at a time.
fn setup() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    let g = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    emulator::enable();
    g
}

fn with_seed(seed: Option<u64>) {
    let mut c = emulator::config();
    c.seed = seed;
    c.hazards = true;
    c.drop_wait = None;
    emulator::set_config(c);
}

#[test]
fn emulated_device_is_named_and_has_a_capacity() {
    let _g = setup();
    with_seed(None);
    let be = CudaBackend::new(0).expect("emulated CUDA0");
    assert_eq!(be.name(), "CUDA0");
    assert!(be.is_emulated());
    let name = be.device_name().unwrap();
    assert!(name.contains("emulated"), "{name}");
    let total = be.total_memory().unwrap();
    assert_eq!(total, emulator::config().mem_bytes);
    let free0 = be.free_memory().unwrap();
    let buf = be.alloc_buffer(64 << 20, BufferUsage::Weights).unwrap();
    let free1 = be.free_memory().unwrap();
    assert!(free0 - free1 >= 64 << 20, "{free0} -> {free1}");
    // beyond the capacity: CUDA's out-of-memory, as an error
    let e = be
        .alloc_buffer(total + 1, BufferUsage::Compute)
        .unwrap_err();
    assert!(matches!(e, BackendError::OutOfMemory(_)), "{e:?}");
    assert!(e.to_string().contains("OUT_OF_MEMORY"), "{e}");
    drop(buf);
    assert_eq!(be.free_memory().unwrap(), free0);
    // fresh device buffers read as zeros (the backend clears them)
    let b = be.alloc_buffer(1000, BufferUsage::Compute).unwrap();
    let mut out = vec![1u8; 1000];
    b.read(0, &mut out).unwrap();
    assert!(out.iter().all(|&x| x == 0));
    // no device beyond the configured count
    assert!(matches!(
        CudaBackend::new(emulator::device_count()),
        Err(BackendError::NoDevice(_))
    ));
}

#[test]
fn pinned_registered_and_pageable_copies_are_counted() {
    let _g = setup();
    with_seed(None);
    let be = CudaBackend::new(0).unwrap();
    let buf = be.alloc_buffer(1 << 16, BufferUsage::Compute).unwrap();
    let td = TensorData {
        buffer: buf.clone(),
        offset: 0,
    };
    let before = emulator::stats(0);
    let pageable = vec![3u8; 4096];
    be.write_async(&td, 0, &pageable).unwrap();
    be.synchronize().unwrap();
    let mid = emulator::stats(0);
    assert_eq!(mid.h2d_pageable_bytes - before.h2d_pageable_bytes, 4096);
    assert_eq!(mid.h2d_pinned_bytes, before.h2d_pinned_bytes);
    // from page-locked memory
    let pinned = be.alloc_pinned(8192, BufferUsage::Compute).unwrap();
    let p = pinned.base_ptr().expect("host memory");
    // SAFETY: the pinned buffer holds 8192 bytes and outlives the slice.
    let src = unsafe { std::slice::from_raw_parts(p, 8192) };
    be.write_async(&td, 0, src).unwrap();
    // from a registered range
    let bytes: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(vec![5u8; 1 << 12]);
    let reg = be.register_host(Arc::clone(&bytes)).unwrap();
    be.write_async(&td, 100, (*bytes).as_ref()).unwrap();
    be.synchronize().unwrap();
    let after = emulator::stats(0);
    assert_eq!(after.h2d_pinned_bytes - mid.h2d_pinned_bytes, 8192 + 4096);
    assert_eq!(after.h2d_pageable_bytes, mid.h2d_pageable_bytes);
    let mut out = vec![0u8; 4];
    buf.read(100, &mut out).unwrap();
    assert_eq!(out, [5; 4]);
    drop(reg);
    // unregistered again: pageable
    be.write_async(&td, 0, (*bytes).as_ref()).unwrap();
    be.synchronize().unwrap();
    assert_eq!(
        emulator::stats(0).h2d_pageable_bytes - after.h2d_pageable_bytes,
        4096
    );
}

/// A graph `out = a + b` over F32 `[n]` tensors in `buf`, at offsets 0, n*4
/// and 2*n*4.
fn add_graph(buf: &Arc<dyn ggml_core::Buffer>, n: i64) -> (Graph, [ggml_core::TensorId; 3]) {
    let mut g = Graph::new();
    let a = g.new_tensor_1d(GgmlType::F32, n);
    let b = g.new_tensor_1d(GgmlType::F32, n);
    let o = g.add(a, b);
    g.build_forward_expand(o);
    for (i, id) in [a, b, o].into_iter().enumerate() {
        g.tensor_mut(id).data = Some(TensorData {
            buffer: buf.clone(),
            offset: i * n as usize * 4,
        });
    }
    (g, [a, b, o])
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn events_order_streams_under_random_delays() {
    let _g = setup();
    let n = 4096i64;
    for seed in 1..=8u64 {
        with_seed(Some(seed));
        let be = CudaBackend::new(0).unwrap();
        let buf = be
            .alloc_buffer(3 * n as usize * 4, BufferUsage::Compute)
            .unwrap();
        let (g, [a, b, o]) = add_graph(&buf, n);
        let av: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let bv: Vec<f32> = (0..n).map(|i| (seed as f32) * 0.5 - i as f32).collect();
        let (ab, bb) = (f32_bytes(&av), f32_bytes(&bv));
        // uploads on the copy stream; compute waits for them by event
        let td = |id| g.tensor(id).data.clone().unwrap();
        be.write_on(Stream::Copy(0), &td(a), 0, &ab).unwrap();
        be.write_on(Stream::Copy(0), &td(b), 0, &bb).unwrap();
        let up = be.record_event_on(Stream::Copy(0)).unwrap();
        be.wait_event_on(Stream::Compute, &up).unwrap();
        be.compute(&g, g.nodes()).unwrap();
        // read back on the copy stream after the compute, by event
        let done = be.record_event_on(Stream::Compute).unwrap();
        be.wait_event_on(Stream::Copy(0), &done).unwrap();
        let mut out = vec![0u8; n as usize * 4];
        be.read_on(Stream::Copy(0), &td(o), 0, &mut out).unwrap();
        let fin = be.record_event_on(Stream::Copy(0)).unwrap();
        be.event_synchronize(&fin).unwrap();
        let got: Vec<f32> = out
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let want: Vec<f32> = av.iter().zip(&bv).map(|(x, y)| x + y).collect();
        assert_eq!(got, want, "seed {seed}");
        drop(ab); // the uploads completed before the compute that waited
    }
    assert!(emulator::take_hazards().is_empty());
}

#[test]
fn a_missing_wait_is_a_hazard_naming_both_operations() {
    let _g = setup();
    with_seed(None);
    let n = 256i64;
    let be = CudaBackend::new(0).unwrap();
    let buf = be
        .alloc_buffer(3 * n as usize * 4, BufferUsage::Compute)
        .unwrap();
    let (g, [a, _b, _o]) = add_graph(&buf, n);
    let data = f32_bytes(&vec![1.0; n as usize]);
    let td = g.tensor(a).data.clone().unwrap();
    // the upload on the copy stream, and no wait before the compute
    be.write_on(Stream::Copy(0), &td, 0, &data).unwrap();
    let e = be.compute(&g, g.nodes()).unwrap_err().to_string();
    assert!(e.contains("hazard (read after write)"), "{e}");
    assert!(e.contains("k_binary on CUDA0 compute"), "{e}");
    assert!(e.contains("host-to-device copy on CUDA0 copy"), "{e}");
    let found = emulator::take_hazards();
    assert_eq!(found.len(), 1, "{found:?}");
    be.synchronize().unwrap();
    // after a synchronize the host ordered everything: no hazard
    be.compute(&g, g.nodes()).unwrap();
    // the copy stream overwriting what compute reads, without waiting
    let e = be.write_on(Stream::Copy(0), &td, 0, &data).unwrap_err();
    assert!(e.to_string().contains("write after read"), "{e}");
    be.synchronize().unwrap();
    // with the wait: ordered
    let ev = be.record_event_on(Stream::Compute).unwrap();
    be.compute(&g, g.nodes()).unwrap();
    let ev2 = be.record_event_on(Stream::Compute).unwrap();
    be.wait_event_on(Stream::Copy(0), &ev2).unwrap();
    be.write_on(Stream::Copy(0), &td, 0, &data).unwrap();
    be.synchronize().unwrap();
    drop(ev);
    let _ = emulator::take_hazards();
}

/// A launch a GPU would refuse fails on the emulated device too, naming the
/// kernel and the limit: 2048 threads per block through the driver
/// interface (the stream's sticky error, reported by its synchronize), and
/// 64 KiB of static shared memory (a test-only kernel, launched directly).
#[test]
fn launches_over_the_limits_fail_naming_kernel_and_limit() {
    use ggml_cuda::driver::{self, KernelArg, LaunchDims, T4};
    let _g = setup();
    with_seed(None);
    let dev = driver::open(0).unwrap();
    let stream = dev.new_stream("test").unwrap();
    let f = dev.load_kernels(&["k_unary"]).unwrap().remove(0);
    let buf = dev.malloc(4096).unwrap();
    let t = T4 {
        ne: [16, 1, 1, 1],
        nb: [4, 64, 64, 64],
    };
    // k_unary(dst, td, a, ta, tya, op, p0, p1): scale 16 floats in place
    let args = [
        KernelArg::Ptr(buf),
        KernelArg::T4(t),
        KernelArg::Ptr(buf),
        KernelArg::T4(t),
        KernelArg::I32(0),
        KernelArg::I32(0),
        KernelArg::F32(2.0),
        KernelArg::F32(0.0),
    ];
    let dims = LaunchDims {
        grid: [1, 1, 1],
        block: [2048, 1, 1],
        shared_bytes: 0,
    };
    // SAFETY: the arguments match k_unary's parameters; `buf` holds the
    // 16 floats both tensors span.
    unsafe { stream.memset_d8(buf, 0, 4096) }.unwrap();
    // SAFETY: as above.
    unsafe { stream.launch(&f, dims, &args, None) }.unwrap();
    let e = stream.synchronize().unwrap_err().to_string();
    println!("{e}");
    assert!(e.contains("k_unary") && e.contains("1024"), "{e}");
    // SAFETY: nothing queued uses `buf` any more (the stream failed).
    unsafe { dev.free(buf) };
    let mut out = [0f32; 32];
    let p = out.as_mut_ptr() as u64;
    let params = [&p as *const u64 as *const std::ffi::c_void];
    // SAFETY: t_big_shared(float* out) writes 32 floats of `out` (it is
    // refused before running).
    let e = unsafe {
        ggml_cuda::emu_kernels::launch("t_big_shared", [1, 1, 1], [32, 1, 1], 0, &params)
    }
    .unwrap_err()
    .to_string();
    println!("{e}");
    assert!(e.contains("t_big_shared") && e.contains("shared"), "{e}");
}

/// `GGML_CUDA_EMULATOR_DEVICES=2` (here through the configuration): `CUDA1`
/// with its own memory, ordered with `CUDA0` by events across devices.
#[test]
fn a_second_emulated_device() {
    let _g = setup();
    let mut c = emulator::config();
    let old = c.devices;
    c.devices = 2;
    c.seed = Some(7);
    c.drop_wait = None;
    emulator::set_config(c.clone());
    let (d0, d1) = (CudaBackend::new(0).unwrap(), CudaBackend::new(1).unwrap());
    assert_eq!(ggml_cuda::cuda_device_count().unwrap(), 2);
    assert_eq!(d1.name(), "CUDA1");
    assert!(d1.device_name().unwrap().contains("emulated CUDA device 1"));
    let n = 1024i64;
    let b0 = d0
        .alloc_buffer(3 * n as usize * 4, BufferUsage::Compute)
        .unwrap();
    let b1 = d1
        .alloc_buffer(3 * n as usize * 4, BufferUsage::Compute)
        .unwrap();
    assert!(!d0.can_use_buffer(b1.as_ref()) && d1.can_use_buffer(b1.as_ref()));
    let (g0, [a0, b0t, o0]) = add_graph(&b0, n);
    let ones = f32_bytes(&vec![1.0; n as usize]);
    for id in [a0, b0t] {
        d0.write_async(&g0.tensor(id).data.clone().unwrap(), 0, &ones)
            .unwrap();
    }
    d0.compute(&g0, g0.nodes()).unwrap();
    // CUDA1 reads CUDA0's result through the host after an event on CUDA0
    let ev = d0.record_event().unwrap();
    d0.event_synchronize(&ev).unwrap();
    let mut host = vec![0u8; n as usize * 4];
    d0.read_on(
        Stream::Compute,
        &g0.tensor(o0).data.clone().unwrap(),
        0,
        &mut host,
    )
    .unwrap();
    d0.synchronize().unwrap();
    let (g1, [a1, b1t, o1]) = add_graph(&b1, n);
    d1.write_async(&g1.tensor(a1).data.clone().unwrap(), 0, &host)
        .unwrap();
    d1.write_async(&g1.tensor(b1t).data.clone().unwrap(), 0, &host)
        .unwrap();
    d1.wait_event(&ev).unwrap(); // an event of the other device
    d1.compute(&g1, g1.nodes()).unwrap();
    d1.synchronize().unwrap();
    let mut out = vec![0u8; 4];
    g1.tensor(o1)
        .data
        .as_ref()
        .unwrap()
        .buffer
        .read(2 * n as usize * 4, &mut out)
        .unwrap();
    assert_eq!(f32::from_le_bytes([out[0], out[1], out[2], out[3]]), 4.0);
    c.devices = old;
    c.seed = None;
    emulator::set_config(c);
    assert!(emulator::take_hazards().is_empty());
}

/// A peer copy between two emulated devices through the backend
/// (`Backend::copy_from_peer`): after an event of CUDA0's compute it copies
/// CUDA0's result into CUDA1's memory on CUDA1's copy stream, counted as
/// peer bytes and not as host traffic; without that event the hazard
/// detector names the copy and CUDA0's kernel; with peer access off
/// (`GGML_CUDA_EMULATOR_PEER=0`) the backend declines and nothing is queued.
#[test]
fn peer_copies_between_two_emulated_devices() {
    let _g = setup();
    let mut c = emulator::config();
    let old = c.clone();
    c.devices = 2;
    c.seed = Some(3);
    c.drop_wait = None;
    c.peer = true;
    emulator::set_config(c.clone());
    let (d0, d1) = (CudaBackend::new(0).unwrap(), CudaBackend::new(1).unwrap());
    let n = 1024i64;
    let len = n as usize * 4;
    let b0 = d0.alloc_buffer(3 * len, BufferUsage::Compute).unwrap();
    let b1 = d1.alloc_buffer(len, BufferUsage::Compute).unwrap();
    let dst = TensorData {
        buffer: b1.clone(),
        offset: 0,
    };
    let (g0, [a0, b0t, o0]) = add_graph(&b0, n);
    let src = g0.tensor(o0).data.clone().unwrap();
    let twos = f32_bytes(&vec![2.0; n as usize]);
    for id in [a0, b0t] {
        d0.write_async(&g0.tensor(id).data.clone().unwrap(), 0, &twos)
            .unwrap();
    }
    d0.synchronize().unwrap();
    let before = (emulator::stats(0), emulator::stats(1));
    for round in 0..2 {
        d0.compute(&g0, g0.nodes()).unwrap();
        let ev = d0.record_event_on(Stream::Compute).unwrap();
        assert!(d1
            .copy_from_peer(&d0, &src, &dst, len, Stream::Copy(0), Some(&ev))
            .unwrap());
        let done = d1.record_event_on(Stream::Copy(0)).unwrap();
        // CUDA0 waits for the copy before it may overwrite the source
        d0.wait_event_on(Stream::Compute, &done).unwrap();
        d1.event_synchronize(&done).unwrap();
        let mut out = vec![0u8; 4];
        b1.read((n as usize - 1) * 4, &mut out).unwrap();
        assert_eq!(
            f32::from_le_bytes([out[0], out[1], out[2], out[3]]),
            4.0,
            "round {round}"
        );
    }
    d0.synchronize().unwrap();
    let after = (emulator::stats(0), emulator::stats(1));
    assert_eq!(
        after.1.peer_in_bytes - before.1.peer_in_bytes,
        2 * len as u64
    );
    assert_eq!(
        after.0.d2h_bytes, before.0.d2h_bytes,
        "no read back to the host"
    );
    assert_eq!(after.1.h2d_pageable_bytes, before.1.h2d_pageable_bytes);
    assert!(emulator::take_hazards().is_empty());
    // the copy without the wait on CUDA0's compute: a hazard naming both
    d0.compute(&g0, g0.nodes()).unwrap();
    let e = d1
        .copy_from_peer(&d0, &src, &dst, len, Stream::Copy(0), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("hazard (read after write)"), "{e}");
    assert!(e.contains("peer copy on CUDA1 copy"), "{e}");
    assert!(e.contains("on CUDA0 compute"), "{e}");
    let _ = emulator::take_hazards();
    d0.synchronize().unwrap();
    d1.synchronize().unwrap();
    // peer access off: declined, nothing queued (fresh backends ask again)
    c.peer = false;
    emulator::set_config(c);
    let (e0, e1) = (CudaBackend::new(0).unwrap(), CudaBackend::new(1).unwrap());
    let c0 = e0.alloc_buffer(len, BufferUsage::Compute).unwrap();
    let c1 = e1.alloc_buffer(len, BufferUsage::Compute).unwrap();
    let (s, d) = (
        TensorData {
            buffer: c0,
            offset: 0,
        },
        TensorData {
            buffer: c1,
            offset: 0,
        },
    );
    let peer_before = emulator::stats(1).peer_in_bytes;
    assert!(!e1
        .copy_from_peer(&e0, &s, &d, len, Stream::Copy(0), None)
        .unwrap());
    assert_eq!(emulator::stats(1).peer_in_bytes, peer_before);
    // a copy within one device is not a peer copy
    assert!(!d1
        .copy_from_peer(&d1, &dst, &dst, len, Stream::Copy(0), None)
        .unwrap());
    emulator::set_config(old);
    assert!(emulator::take_hazards().is_empty());
}

/// As CUDA does, a host-to-device copy from pageable memory blocks the
/// calling thread until the stream has reached it and taken the bytes;
/// from page-locked memory it returns at once and the copy overlaps the
/// host. Shown with an emulated 200 MB/s link: 4 MiB take >= 20 ms.
#[test]
fn a_pageable_upload_blocks_the_host_and_a_pinned_one_does_not() {
    let _g = setup();
    with_seed(None);
    let mut c = emulator::config();
    c.h2d_bytes_per_s = Some(200_000_000);
    emulator::set_thread_config(Some(c));
    let be = CudaBackend::new(0).unwrap();
    let n = 4 << 20;
    let buf = be.alloc_buffer(n, BufferUsage::Compute).unwrap();
    let td = TensorData {
        buffer: buf.clone(),
        offset: 0,
    };
    let lasts = std::time::Duration::from_millis(20);
    let before = emulator::stats(0);
    let pageable = vec![7u8; n];
    let t = std::time::Instant::now();
    be.write_async(&td, 0, &pageable).unwrap();
    let pageable_call = t.elapsed();
    be.synchronize().unwrap();
    let mid = emulator::stats(0);
    assert_eq!(mid.h2d_pageable_copies - before.h2d_pageable_copies, 1);
    assert!(mid.host_blocked_ns - before.host_blocked_ns >= lasts.as_nanos() as u64);
    assert!(
        pageable_call >= lasts,
        "pageable call took {pageable_call:?}"
    );
    let pinned = be.alloc_pinned(n, BufferUsage::Compute).unwrap();
    let p = pinned.base_ptr().expect("host memory");
    // SAFETY: the pinned buffer holds n bytes and outlives the slice (the
    // copy is waited for below).
    let src = unsafe { std::slice::from_raw_parts(p, n) };
    let t = std::time::Instant::now();
    be.write_async(&td, 0, src).unwrap();
    let pinned_call = t.elapsed();
    let t_sync = std::time::Instant::now();
    be.synchronize().unwrap();
    let waited = t_sync.elapsed();
    let after = emulator::stats(0);
    assert_eq!(after.h2d_pageable_copies, mid.h2d_pageable_copies);
    assert_eq!(after.host_blocked_ns, mid.host_blocked_ns);
    assert!(
        pinned_call < lasts / 2 && waited + pinned_call >= lasts,
        "pinned call {pinned_call:?}, then synchronize {waited:?}"
    );
    println!("emulated: pageable write_async {pageable_call:?}, pinned {pinned_call:?} (+{waited:?} at synchronize)");
    emulator::set_thread_config(None);
}

/// Under `GGML_CUDA_REQUIRE_DEVICE=1` (what `scripts/gpu-check-run`
/// sets) a test's fallback to the emulator is a failure naming why the
/// device did not open. Run in a child process of this test binary.
#[test]
fn the_fallback_fails_when_a_device_is_required() {
    if std::env::var_os("GGML_CUDA_FALLBACK_CHILD").is_some() {
        ggml_cuda::emulator::fallback("no CUDA device: libcuda.so (CUDA driver) not found");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let run = |require: bool| {
        let mut c = std::process::Command::new(&exe);
        c.args([
            "--exact",
            "the_fallback_fails_when_a_device_is_required",
            "--nocapture",
        ])
        .env("GGML_CUDA_FALLBACK_CHILD", "1")
        .env_remove("GGML_CUDA_EMULATOR");
        if require {
            c.env("GGML_CUDA_REQUIRE_DEVICE", "1");
        } else {
            c.env_remove("GGML_CUDA_REQUIRE_DEVICE");
        }
        c.output().unwrap()
    };
    let ok = run(false);
    assert!(ok.status.success());
    let failed = run(true);
    assert!(!failed.status.success());
    let text = String::from_utf8_lossy(&failed.stdout).to_string()
        + &String::from_utf8_lossy(&failed.stderr);
    assert!(
        text.contains("GGML_CUDA_REQUIRE_DEVICE=1: no fallback to the emulator: the CUDA device did not open: no CUDA device: libcuda.so"),
        "{text}"
    );
}
