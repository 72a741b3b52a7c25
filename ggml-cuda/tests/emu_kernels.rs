//! The CPU emulator of CUDA kernels (`ggml_cuda::emu_kernels`), no GPU
//! needed:
//! - each test-only kernel of `emu/test_kernels.cu` (block reduction with
//!   `__syncthreads`, every shuffle kind, votes, atomics from many threads,
//!   3D blocks and grids, dynamic shared memory) against a Rust reference;
//! - divergent barriers and shuffles are reported as deadlocks, not hangs;
//! - the launch limits: 2048 threads per block and 64 KiB of static shared
//!   memory fail with errors naming the kernel and the limit (these run
//!   even where the emulator is unavailable: limits are checked first);
//! - real kernels of `kernels.cu` (matrix-vector with warp reductions, the
//!   tiled GEMM, soft_max, rms_norm, argmax, argsort/top_k), launched with
//!   the backend's grids, blocks and argument packing, against references
//!   computed here;
//! - a timing print of representative launches (not an assertion).
//!
//! Without a C++ compiler at build time the running tests print
//! `skipped: emulator unavailable: <reason>`.

use core::ffi::c_void;
use std::time::Instant;

use ggml_cuda::emu_kernels::{self as emu, LaunchError};

/// `struct T4` of kernels.cu: ne in elements, nb in bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct T4 {
    ne: [i64; 4],
    nb: [i64; 4],
}

/// A dense tensor layout with element size `es`.
fn dense(ne: [i64; 4], es: i64) -> T4 {
    let mut nb = [es, 0, 0, 0];
    for i in 1..4 {
        nb[i] = nb[i - 1] * ne[i - 1];
    }
    T4 { ne, nb }
}

/// A kernel argument, packed as the backend packs it.
enum A {
    /// A device pointer: a host address in the emulator.
    P(u64),
    I(i32),
    L(i64),
    F(f32),
    T(T4),
}

fn p<T>(v: &mut [T]) -> A {
    A::P(v.as_mut_ptr() as u64)
}

fn pc<T>(v: &[T]) -> A {
    A::P(v.as_ptr() as u64)
}

/// `launch` with `params[i]` pointing at `args[i]`'s value.
fn run(
    kernel: &str,
    grid: [u32; 3],
    block: [u32; 3],
    dynamic: u32,
    args: &[A],
) -> Result<(), LaunchError> {
    let params: Vec<*const c_void> = args
        .iter()
        .map(|a| match a {
            A::P(v) => v as *const u64 as *const c_void,
            A::I(v) => v as *const i32 as *const c_void,
            A::L(v) => v as *const i64 as *const c_void,
            A::F(v) => v as *const f32 as *const c_void,
            A::T(v) => v as *const T4 as *const c_void,
        })
        .collect();
    // SAFETY: every pointer argument of every call in this file points to
    // a live Vec sized for the extents the kernel touches (the layouts
    // passed with it describe that Vec); the values outlive the call.
    unsafe { emu::launch(kernel, grid, block, dynamic, &params) }
}

/// `true` (after printing why) when the emulator cannot run kernels here.
fn skip() -> bool {
    match emu::unavailable_reason() {
        Some(r) => {
            println!("skipped: {r}");
            true
        }
        None => false,
    }
}

/// Deterministic pseudo-random numbers (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn i(&mut self, n: u64) -> i32 {
        (self.next() % n) as i32
    }
}

fn close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

// ------------------------------------------------------------ test kernels

#[test]
fn block_reduction_with_syncthreads() {
    if skip() {
        return;
    }
    let mut rng = Rng(7);
    let (rows, n) = (5usize, 1000usize);
    let x: Vec<f32> = (0..rows * n).map(|_| rng.f()).collect();
    let want: Vec<f32> = x.chunks(n).map(|r| r.iter().sum()).collect();
    for threads in [32u32, 256, 1024] {
        let mut out = vec![0f32; rows];
        run(
            "t_block_sum",
            [rows as u32, 1, 1],
            [threads, 1, 1],
            0,
            &[pc(&x), p(&mut out), A::I(n as i32)],
        )
        .unwrap();
        close(&out, &want, 1e-4, &format!("block sum, {threads} threads"));
    }
}

#[test]
fn warp_shuffles_of_every_kind() {
    if skip() {
        return;
    }
    let mut rng = Rng(11);
    let n = 2 * 64;
    let v: Vec<i32> = (0..n).map(|_| rng.i(1000) - 500).collect();
    let mut out = vec![0i32; 8 * n];
    run(
        "t_warp_shuffles",
        [2, 1, 1],
        [64, 1, 1],
        0,
        &[pc(&v), p(&mut out)],
    )
    .unwrap();
    for w in v.chunks(32).enumerate() {
        let (wi, lanes) = w;
        let sum: i32 = lanes.iter().sum();
        // tree with __shfl_down_sync: out-of-range sources keep their value
        let mut d = lanes.to_vec();
        for k in [16, 8, 4, 2, 1] {
            d = (0..32)
                .map(|l| d[l] + if l + k < 32 { d[l + k] } else { d[l] })
                .collect();
        }
        for l in 0..32 {
            let t = wi * 32 + l;
            let o = &out[8 * t..8 * t + 8];
            let seg = l & !7;
            let prefix: i32 = lanes[..=l].iter().sum();
            let seg_sum: i32 = lanes[seg..seg + 8].iter().sum();
            let down2 = if (l & 7) + 2 < 8 {
                lanes[l + 2]
            } else {
                lanes[l]
            };
            let want = [
                sum,
                d[l],
                prefix,
                lanes[5],
                lanes[(l + 3) % 32],
                seg_sum,
                down2,
                lanes[l ^ 1],
            ];
            assert_eq!(o, &want, "warp {wi} lane {l}");
        }
    }
}

#[test]
fn warp_reductions_and_vector_types() {
    if skip() {
        return;
    }
    let mut rng = Rng(37);
    let n = 64usize;
    let v: Vec<i32> = (0..n).map(|_| rng.i(2001) - 1000).collect();
    let v4: Vec<f32> = (0..4 * n).map(|i| (i % 7) as f32).collect();
    let v2: Vec<i32> = (0..2 * n).map(|i| i as i32).collect();
    let mut out = vec![0i32; 8 * n];
    run(
        "t_warp_reduce",
        [1, 1, 1],
        [64, 1, 1],
        0,
        &[pc(&v), pc(&v4), pc(&v2), p(&mut out)],
    )
    .unwrap();
    for t in 0..n {
        let w = &v[t / 32 * 32..][..32];
        let vec_sum = v4[4 * t..4 * t + 4].iter().sum::<f32>() as i32 + v2[2 * t] + v2[2 * t + 1];
        let want = [
            w.iter().sum::<i32>(),
            *w.iter().min().unwrap(),
            *w.iter().max().unwrap(),
            w.iter().map(|&x| x as u32).min().unwrap() as i32,
            w.iter().fold(!0u32, |a, &x| a & x as u32) as i32,
            w.iter().fold(0u32, |a, &x| a | x as u32) as i32,
            w.iter().fold(0u32, |a, &x| a ^ x as u32) as i32,
            vec_sum,
        ];
        assert_eq!(&out[8 * t..8 * t + 8], &want, "thread {t}");
    }
}

/// The emulator runs kernels.cu's `warp_sum` / `warp_max` as one warp
/// collective: bit for bit what the five `__shfl_xor_sync` steps give, on
/// values whose sum depends on the order (wide magnitudes), signed zeros
/// and NaN.
#[test]
fn warp_butterfly_collective_matches_the_shuffles_bit_for_bit() {
    if skip() {
        return;
    }
    let mut rng = Rng(7);
    let n = 128;
    let mut v: Vec<f32> = (0..n)
        .map(|i| {
            let x = (rng.i(2001) - 1000) as f32 / 7.0;
            x * 10f32.powi((i % 9) as i32 - 4)
        })
        .collect();
    // warp 2: signed zeros and equal values; warp 3: a NaN lane
    for (l, x) in v[64..96].iter_mut().enumerate() {
        *x = if l % 2 == 0 { 0.0 } else { -0.0 };
    }
    v[100] = f32::NAN;
    let mut out = vec![0u32; 4 * n];
    run(
        "t_warp_butterfly",
        [2, 1, 1],
        [64, 1, 1],
        0,
        &[pc(&v), p(&mut out)],
    )
    .unwrap();
    for t in 0..n {
        let o = &out[4 * t..4 * t + 4];
        assert_eq!(o[0], o[1], "sum, thread {t}");
        assert_eq!(o[2], o[3], "max, thread {t}");
    }
}

#[test]
fn votes_and_counting_barriers() {
    if skip() {
        return;
    }
    let n = 64;
    // warp 0: every third lane true; warp 1: all true
    let v: Vec<i32> = (0..n)
        .map(|t| if t >= 32 || t % 3 == 0 { 1 } else { 0 })
        .collect();
    let mut out = vec![0u32; 7 * n];
    run("t_votes", [1, 1, 1], [64, 1, 1], 0, &[pc(&v), p(&mut out)]).unwrap();
    let count = v.iter().filter(|&&x| x != 0).count() as u32;
    for t in 0..n {
        let w = &v[t / 32 * 32..t / 32 * 32 + 32];
        let ballot = w
            .iter()
            .enumerate()
            .fold(0u32, |b, (l, &x)| b | ((x != 0) as u32) << l);
        let o = &out[7 * t..7 * t + 7];
        let last = if t % 32 < 16 { 0x0000_ffff } else { 0xdead };
        let want = [
            count,
            0,
            1,
            ballot,
            (ballot == u32::MAX) as u32,
            (ballot != 0) as u32,
            last,
        ];
        assert_eq!(o, &want, "thread {t}");
    }
}

#[test]
fn atomics_from_many_threads() {
    if skip() {
        return;
    }
    let (blocks, threads) = (8u32, 128u32);
    let n = (blocks * threads) as i64;
    let mut i = vec![0i32, 0, -1, i32::MAX, 0];
    let mut u = vec![0u32, u32::MAX];
    let mut f = vec![0f32];
    let mut ull = vec![0u64];
    run(
        "t_atomics",
        [blocks, 1, 1],
        [threads, 1, 1],
        0,
        &[p(&mut i), p(&mut u), p(&mut f), p(&mut ull)],
    )
    .unwrap();
    assert_eq!(i, vec![n as i32, n as i32, n as i32 - 1, 0, n as i32]);
    assert_eq!(u[0], u32::MAX);
    assert!((u[1] as i64) < n, "atomicExch left an id: {}", u[1]);
    assert_eq!(f[0], 0.5 * n as f32);
    assert_eq!(ull[0], (n * (n - 1) / 2) as u64);
}

#[test]
fn three_dimensional_blocks_and_grids() {
    if skip() {
        return;
    }
    let grid = [2u32, 3, 2];
    let block = [8u32, 4, 2];
    let nb = 12usize;
    let nt = 64usize;
    let mut out = vec![-1i32; nb * nt];
    let mut tr = vec![-1i32; nb * 32];
    run("t_dims3", grid, block, 0, &[p(&mut out), p(&mut tr)]).unwrap();
    for b in 0..nb {
        for t in 0..nt {
            assert_eq!(
                out[b * nt + t],
                ((b << 16) | t) as i32,
                "block {b} thread {t}"
            );
        }
        for lin in 0..32 {
            let want = ((lin % 4) * 8 + lin / 4) as i32;
            assert_eq!(tr[b * 32 + lin], want, "block {b} transposed {lin}");
        }
    }
}

#[test]
fn dynamic_shared_memory_and_its_limit() {
    let name = "t_dynamic_shared";
    let (blocks, threads) = (3u32, 128u32);
    let x: Vec<f32> = (0..blocks * threads).map(|i| i as f32).collect();
    let mut out = vec![0f32; x.len()];
    // over 48 KiB without an opt-in: refused before anything runs
    let err = run(
        name,
        [blocks, 1, 1],
        [threads, 1, 1],
        48 * 1024 + 4,
        &[pc(&x), p(&mut out)],
    )
    .unwrap_err();
    assert!(matches!(err, LaunchError::Limit { .. }), "{err}");
    assert!(err.to_string().contains(name), "{err}");
    assert!(err.to_string().contains("dynamic shared memory"), "{err}");
    if skip() {
        return;
    }
    run(
        name,
        [blocks, 1, 1],
        [threads, 1, 1],
        threads * 4,
        &[pc(&x), p(&mut out)],
    )
    .unwrap();
    for (i, o) in out.iter().enumerate() {
        let (b, t) = (i / threads as usize, i % threads as usize);
        assert_eq!(*o, x[b * threads as usize + threads as usize - 1 - t]);
    }
    // with the opt-in, 100 KiB is accepted
    emu::set_max_dynamic_shared_bytes(name, 100 * 1024).unwrap();
    run(
        name,
        [blocks, 1, 1],
        [threads, 1, 1],
        100 * 1024,
        &[pc(&x), p(&mut out)],
    )
    .unwrap();
    let err = emu::set_max_dynamic_shared_bytes(name, 228 * 1024).unwrap_err();
    assert!(err.to_string().contains("227 KiB"), "{err}");
}

#[test]
fn divergent_barriers_and_shuffles_are_reported_not_hung() {
    if skip() {
        return;
    }
    let mut out = vec![0i32; 64];
    // a deadlock of `kernel` on one output buffer, its message holding each
    // of `needles`
    let mut deadlock = |kernel: &str, grid: [u32; 3], block: [u32; 3], needles: &[&str]| {
        let err = run(kernel, grid, block, 0, &[p(&mut out)]).unwrap_err();
        let text = err.to_string();
        println!("{text}");
        assert!(matches!(err, LaunchError::Deadlock { .. }), "{text}");
        for n in needles {
            assert!(text.contains(n), "{kernel}: no '{n}' in: {text}");
        }
    };
    deadlock(
        "t_divergent_barrier",
        [2, 1, 1],
        [64, 1, 1],
        &[
            "t_divergent_barrier",
            "deadlock",
            "32 exited",
            "32 wait at __syncthreads",
        ],
    );
    deadlock(
        "t_split_barrier",
        [1, 1, 1],
        [64, 1, 1],
        &["t_split_barrier", "divergent __syncthreads"],
    );
    deadlock(
        "t_divergent_shuffle",
        [1, 1, 1],
        [32, 1, 1],
        &["__shfl_xor_sync", "0xffff0000"],
    );

    // a full-warp shuffle in a block of 48 threads: lanes 16-31 of warp 1
    // do not exist
    let mut shfl = vec![0i32; 8 * 48];
    let v = vec![1i32; 48];
    let err = run(
        "t_warp_shuffles",
        [1, 1, 1],
        [48, 1, 1],
        0,
        &[pc(&v), p(&mut shfl)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("do not exist"), "{err}");

    let err = run("t_bad_mask", [1, 1, 1], [32, 1, 1], 0, &[p(&mut out)]).unwrap_err();
    assert!(matches!(err, LaunchError::Misuse { .. }), "{err}");
    assert!(
        err.to_string().contains("does not name its own lane"),
        "{err}"
    );

    // the thread's emulator state is clean afterwards
    let x = vec![1f32; 64];
    let mut sum = vec![0f32; 1];
    run(
        "t_block_sum",
        [1, 1, 1],
        [64, 1, 1],
        0,
        &[pc(&x), p(&mut sum), A::I(64)],
    )
    .unwrap();
    assert_eq!(sum[0], 64.0);
}

#[test]
fn intrinsics() {
    if skip() {
        return;
    }
    let mut rng = Rng(19);
    let n = 64usize;
    let a: Vec<i32> = (0..n).map(|_| rng.next() as i32).collect();
    let b: Vec<i32> = (0..n).map(|_| rng.next() as i32).collect();
    let mut io = vec![0i32; 8 * n];
    let mut fo = vec![0f32; 4 * n];
    run(
        "t_intrinsics",
        [2, 1, 1],
        [32, 1, 1],
        0,
        &[pc(&a), pc(&b), p(&mut io), p(&mut fo)],
    )
    .unwrap();
    for t in 0..n {
        let (x, y) = (a[t], b[t]);
        let (xb, yb) = (x.to_le_bytes(), y.to_le_bytes());
        let dp_s: i32 = 7
            + (0..4)
                .map(|i| xb[i] as i8 as i32 * yb[i] as i8 as i32)
                .sum::<i32>();
        let dp_u = (0..4).fold(7u32, |c, i| c.wrapping_add(xb[i] as u32 * yb[i] as u32));
        let want = [
            dp_s,
            dp_u as i32,
            x,
            x.min(y),
            x.max(y),
            x.count_ones() as i32,
            x.leading_zeros() as i32,
            1.5f32.to_bits() as i32,
        ];
        assert_eq!(&io[8 * t..8 * t + 8], &want, "thread {t}");
        let f = (x & 0xff) as f32 / 64.0;
        let wantf = [
            f.exp(),
            f / 3.0,
            1.0 / (f + 1.0).sqrt(),
            (f - 1.0).clamp(0.0, 1.0),
        ];
        close(&fo[4 * t..4 * t + 4], &wantf, 1e-6, &format!("thread {t}"));
    }
}

#[test]
fn shared_memory_of_called_device_functions_counts() {
    // 3 doubles in the kernel + 64 floats in the __device__ helper it calls
    assert_eq!(emu::static_shared_bytes("t_helper_shared"), Some(24 + 256));
    if skip() {
        return;
    }
    let mut rng = Rng(31);
    let x: Vec<f32> = (0..3 * 64).map(|_| rng.f()).collect();
    let mut out = vec![0f32; 3];
    run(
        "t_helper_shared",
        [3, 1, 1],
        [64, 1, 1],
        0,
        &[pc(&x), p(&mut out)],
    )
    .unwrap();
    for (b, o) in out.iter().enumerate() {
        let m = x[b * 64..][..64].iter().fold(f32::MIN, |m, &v| m.max(v));
        assert_eq!(*o, m + 1.0, "block {b}");
    }
}

// ------------------------------------------------------------ launch limits

#[test]
fn launch_limits_name_the_kernel_and_the_limit() {
    let x = vec![0f32; 4096];
    let mut out = vec![0f32; 4096];
    // 2048 threads per block (exact issue requirement)
    let err = run(
        "t_block_sum",
        [1, 1, 1],
        [2048, 1, 1],
        0,
        &[pc(&x), p(&mut out), A::I(16)],
    )
    .unwrap_err();
    let text = err.to_string();
    println!("{text}");
    assert!(matches!(err, LaunchError::Limit { .. }), "{text}");
    assert!(
        text.contains("t_block_sum")
            && text.contains("2048 threads per block")
            && text.contains("limit of 1024"),
        "{text}"
    );
    // 64 KiB of static shared memory (exact issue requirement)
    assert_eq!(emu::static_shared_bytes("t_big_shared"), Some(65536));
    let err = run("t_big_shared", [1, 1, 1], [32, 1, 1], 0, &[p(&mut out)]).unwrap_err();
    let text = err.to_string();
    println!("{text}");
    assert!(matches!(err, LaunchError::Limit { .. }), "{text}");
    assert!(
        text.contains("t_big_shared")
            && text.contains("static shared memory of 65536 bytes")
            && text.contains("limit of 49152 bytes"),
        "{text}"
    );
    // other limits
    let cases: [(&str, [u32; 3], [u32; 3], &str); 5] = [
        (
            "t_bounded",
            [1, 1, 1],
            [128, 1, 1],
            "__launch_bounds__ of 64",
        ),
        (
            "t_block_sum",
            [1, 1, 1],
            [8, 1, 65],
            "block dimension z = 65",
        ),
        (
            "t_block_sum",
            [1, 65536, 1],
            [32, 1, 1],
            "grid dimension y = 65536",
        ),
        (
            "t_block_sum",
            [1, 1, 1],
            [32, 32, 2],
            "2048 threads per block",
        ),
        ("t_block_sum", [0, 1, 1], [32, 1, 1], "zero dimension"),
    ];
    for (k, grid, block, want) in cases {
        let err = run(k, grid, block, 0, &[pc(&x), p(&mut out), A::I(16)]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(k) && text.contains(want),
            "{text} (want '{want}')"
        );
    }
    // unknown kernel, wrong parameter count
    let err = run("k_nope", [1, 1, 1], [1, 1, 1], 0, &[]).unwrap_err();
    assert_eq!(err, LaunchError::UnknownKernel("k_nope".into()));
    let err = run("t_block_sum", [1, 1, 1], [32, 1, 1], 0, &[pc(&x)]).unwrap_err();
    assert!(
        err.to_string()
            .contains("1 parameters given, the kernel takes 3"),
        "{err}"
    );
}

#[test]
fn kernel_table_matches_kernels_rs() {
    let names = emu::kernel_names();
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    let mut launched = ggml_cuda::kernels::KERNEL_NAMES.to_vec();
    launched.sort_unstable();
    assert_eq!(sorted, launched, "kernels.cu vs kernels::KERNEL_NAMES");
    assert!(emu::test_kernel_names().contains(&"t_big_shared"));
    assert!(!names.contains(&"t_big_shared"));
    // static shared memory from the declarations (float sh[32], float
    // shv[1024] + int shi[1024], two float[16][17] tiles)
    assert_eq!(emu::static_shared_bytes("k_row_reduce"), Some(128));
    assert_eq!(emu::static_shared_bytes("k_soft_max"), Some(128));
    assert_eq!(emu::static_shared_bytes("k_argmax"), Some(8192));
    assert_eq!(
        emu::static_shared_bytes("k_mul_mat_tiled"),
        Some(2 * 16 * 17 * 4)
    );
    assert_eq!(emu::static_shared_bytes("k_binary"), Some(0));
    assert_eq!(emu::static_shared_bytes("k_nope"), None);
    assert_eq!(
        emu::kernel_params("k_rank_sort"),
        Some(
            &[
                "u8* dst",
                "T4 td",
                "const u8* a",
                "T4 ta",
                "int tya",
                "int desc"
            ][..]
        )
    );
}

// ------------------------------------------------------- kernels of kernels.cu

const F32: i32 = 0;
const Q8_0: i32 = 8;

/// Q8_0 blocks (f16 scale + 32 int8) of a row-major [rows, k] matrix, and
/// their dequantized values.
fn q8_0(rng: &mut Rng, rows: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
    let mut bytes = Vec::new();
    let mut vals = Vec::new();
    for _ in 0..rows * k / 32 {
        let d = half::f16::from_f32(0.01 + 0.02 * rng.f().abs());
        bytes.extend(d.to_le_bytes());
        for _ in 0..32 {
            let q = (rng.i(255) - 127) as i8;
            bytes.push(q as u8);
            vals.push(d.to_f32() * q as f32);
        }
    }
    (bytes, vals)
}

/// `k_mul_mat_vec` as the backend launches it: dst[m, n] = a[:, m] . b[:, n].
fn mul_mat_vec(a: &[u8], ty: i32, ta: T4, b: &[f32], k: usize, ncols: usize) -> Vec<f32> {
    let m = ta.ne[1] as usize;
    let mut dst = vec![0f32; m * ncols];
    let td = dense([m as i64, ncols as i64, 1, 1], 4);
    let tb = dense([k as i64, ncols as i64, 1, 1], 4);
    run(
        "k_mul_mat_vec",
        [(m as u32).div_ceil(4), ncols as u32, 1],
        [128, 1, 1],
        0,
        &[
            p(&mut dst),
            A::T(td),
            pc(a),
            A::T(ta),
            A::I(ty),
            pc(b),
            A::T(tb),
            A::L(1),
            A::L(1),
        ],
    )
    .unwrap();
    dst
}

fn matmul_ref(a: &[f32], b: &[f32], k: usize, m: usize, n: usize) -> Vec<f32> {
    let mut d = vec![0f32; m * n];
    for j in 0..n {
        for i in 0..m {
            d[j * m + i] = (0..k).map(|x| a[i * k + x] * b[j * k + x]).sum();
        }
    }
    d
}

#[test]
fn mul_mat_vec_f32_and_q8_0() {
    if skip() {
        return;
    }
    let mut rng = Rng(3);
    let (k, m, n) = (256usize, 37usize, 2usize);
    let a: Vec<f32> = (0..k * m).map(|_| rng.f()).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.f()).collect();
    let ab: Vec<u8> = a.iter().flat_map(|x| x.to_le_bytes()).collect();
    let got = mul_mat_vec(&ab, F32, dense([k as i64, m as i64, 1, 1], 4), &b, k, n);
    close(&got, &matmul_ref(&a, &b, k, m, n), 1e-5, "mul_mat_vec f32");

    let (q, deq) = q8_0(&mut rng, m, k);
    let row_bytes = (k / 32 * 34) as i64;
    let ta = T4 {
        ne: [k as i64, m as i64, 1, 1],
        nb: [34, row_bytes, row_bytes * m as i64, row_bytes * m as i64],
    };
    let got = mul_mat_vec(&q, Q8_0, ta, &b, k, n);
    close(
        &got,
        &matmul_ref(&deq, &b, k, m, n),
        1e-5,
        "mul_mat_vec q8_0",
    );
}

#[test]
fn mul_mat_tiled_gemm() {
    if skip() {
        return;
    }
    let mut rng = Rng(5);
    let (k, m, n) = (40usize, 35usize, 19usize);
    let a: Vec<f32> = (0..k * m).map(|_| rng.f()).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.f()).collect();
    let mut dst = vec![0f32; m * n];
    run(
        "k_mul_mat_tiled",
        [(m as u32).div_ceil(16), (n as u32).div_ceil(16), 1],
        [16, 16, 1],
        0,
        &[
            p(&mut dst),
            A::T(dense([m as i64, n as i64, 1, 1], 4)),
            pc(&a),
            A::T(dense([k as i64, m as i64, 1, 1], 4)),
            A::I(F32),
            pc(&b),
            A::T(dense([k as i64, n as i64, 1, 1], 4)),
            A::L(1),
            A::L(1),
        ],
    )
    .unwrap();
    close(&dst, &matmul_ref(&a, &b, k, m, n), 1e-5, "mul_mat_tiled");
}

#[test]
fn soft_max_with_mask_scale_and_sinks() {
    if skip() {
        return;
    }
    let mut rng = Rng(9);
    let (ne0, ne1, heads) = (300usize, 3usize, 2usize);
    let a: Vec<f32> = (0..ne0 * ne1 * heads).map(|_| 4.0 * rng.f()).collect();
    let mask: Vec<f32> = (0..ne0 * ne1)
        .map(|i| {
            if i % 7 == 3 {
                f32::NEG_INFINITY
            } else {
                0.5 * rng.f()
            }
        })
        .collect();
    let sinks = vec![0.25f32, -1.5];
    let scale = 0.7f32;
    let mut dst = vec![0f32; a.len()];
    let ta = dense([ne0 as i64, ne1 as i64, heads as i64, 1], 4);
    let tm = dense([ne0 as i64, ne1 as i64, 1, 1], 4);
    run(
        "k_soft_max",
        [(ne1 * heads) as u32, 1, 1],
        [256, 1, 1],
        0,
        &[
            p(&mut dst),
            A::T(ta),
            pc(&a),
            A::T(ta),
            A::I(F32),
            pc(&mask),
            A::T(tm),
            A::I(F32),
            A::I(1),
            pc(&sinks),
            A::I(1),
            A::F(scale),
            A::F(0.0),
            A::F(1.0),
            A::F(1.0),
            A::I(2),
        ],
    )
    .unwrap();
    for h in 0..heads {
        for r in 0..ne1 {
            let row = &a[(h * ne1 + r) * ne0..][..ne0];
            let w: Vec<f32> = (0..ne0)
                .map(|i| row[i] * scale + mask[r * ne0 + i])
                .collect();
            let mx = w.iter().fold(sinks[h], |m, &x| m.max(x));
            let s: f32 = w.iter().map(|x| (x - mx).exp()).sum::<f32>() + (sinks[h] - mx).exp();
            let want: Vec<f32> = w.iter().map(|x| (x - mx).exp() / s).collect();
            close(
                &dst[(h * ne1 + r) * ne0..][..ne0],
                &want,
                1e-5,
                &format!("soft_max head {h} row {r}"),
            );
        }
    }
}

#[test]
fn rms_norm_and_argmax() {
    if skip() {
        return;
    }
    let mut rng = Rng(13);
    let (ne0, rows) = (1000usize, 4usize);
    let a: Vec<f32> = (0..ne0 * rows).map(|_| rng.f()).collect();
    let ta = dense([ne0 as i64, rows as i64, 1, 1], 4);
    let mut dst = vec![0f32; a.len()];
    let eps = 1e-6f32;
    run(
        "k_row_reduce",
        [rows as u32, 1, 1],
        [256, 1, 1],
        0,
        &[
            p(&mut dst),
            A::T(ta),
            pc(&a),
            A::T(ta),
            A::I(F32),
            A::I(0),
            A::F(eps),
        ],
    )
    .unwrap();
    for r in 0..rows {
        let row = &a[r * ne0..][..ne0];
        let ms = row.iter().map(|x| x * x).sum::<f32>() / ne0 as f32;
        let want: Vec<f32> = row.iter().map(|x| x / (ms + eps).sqrt()).collect();
        close(&dst[r * ne0..][..ne0], &want, 1e-5, "rms_norm");
    }
    let mut am = vec![-1i32; rows];
    run(
        "k_argmax",
        [rows as u32, 1, 1],
        [256, 1, 1],
        0,
        &[p(&mut am), pc(&a), A::T(ta), A::I(F32)],
    )
    .unwrap();
    for r in 0..rows {
        let row = &a[r * ne0..][..ne0];
        let best = (0..ne0).fold(0, |b, i| if row[i] > row[b] { i } else { b });
        assert_eq!(am[r], best as i32, "argmax row {r}");
    }
}

#[test]
fn argsort_and_top_k() {
    if skip() {
        return;
    }
    let mut rng = Rng(17);
    let (ne0, rows, k) = (128usize, 3usize, 8usize);
    let a: Vec<f32> = (0..ne0 * rows).map(|_| (rng.i(50) as f32) * 0.5).collect();
    let ta = dense([ne0 as i64, rows as i64, 1, 1], 4);
    let n = (ne0 * rows) as u32;
    for (desc, width) in [(0, ne0), (1, k)] {
        let mut dst = vec![-1i32; width * rows];
        run(
            "k_rank_sort",
            [n.div_ceil(256), 1, 1],
            [256, 1, 1],
            0,
            &[
                p(&mut dst),
                A::T(dense([width as i64, rows as i64, 1, 1], 4)),
                pc(&a),
                A::T(ta),
                A::I(F32),
                A::I(desc),
            ],
        )
        .unwrap();
        for r in 0..rows {
            let row = &a[r * ne0..][..ne0];
            let mut idx: Vec<i32> = (0..ne0 as i32).collect();
            // stable: ties keep the lower index first
            if desc == 1 {
                idx.sort_by(|&x, &y| row[y as usize].total_cmp(&row[x as usize]));
            } else {
                idx.sort_by(|&x, &y| row[x as usize].total_cmp(&row[y as usize]));
            }
            assert_eq!(
                &dst[r * width..][..width],
                &idx[..width],
                "row {r} desc {desc}"
            );
        }
    }
}

#[test]
fn mul_mat_id_vec_with_skipped_and_bad_ids() {
    if skip() {
        return;
    }
    let mut rng = Rng(29);
    let (k, m, experts, used, tokens) = (64usize, 9usize, 3usize, 2usize, 3usize);
    let a: Vec<f32> = (0..k * m * experts).map(|_| rng.f()).collect();
    let b: Vec<f32> = (0..k * used * tokens).map(|_| rng.f()).collect();
    // token 1 slot 0 is not this backend's (-1): an exact 0; token 2 slot
    // 1 names expert 7 of 3: the error flag, and 0
    let ids: Vec<i32> = vec![2, 0, -1, 1, 1, 7];
    let mut dst = vec![f32::NAN; m * used * tokens];
    let mut err = vec![0u32];
    run(
        "k_mul_mat_id_vec",
        [(m as u32).div_ceil(4), used as u32, tokens as u32],
        [128, 1, 1],
        0,
        &[
            p(&mut dst),
            A::T(dense([m as i64, used as i64, tokens as i64, 1], 4)),
            pc(&a),
            A::T(dense([k as i64, m as i64, experts as i64, 1], 4)),
            A::I(F32),
            pc(&b),
            A::T(dense([k as i64, used as i64, tokens as i64, 1], 4)),
            pc(&ids),
            A::T(dense([used as i64, tokens as i64, 1, 1], 4)),
            p(&mut err),
        ],
    )
    .unwrap();
    assert_eq!(
        err[0], 8,
        "the bad id sets mul_mat_id's bit (8) of the error flag"
    );
    for t in 0..tokens {
        for e in 0..used {
            let id = ids[t * used + e];
            for i in 0..m {
                let want = if (0..experts as i32).contains(&id) {
                    let row = &a[(id as usize * m + i) * k..][..k];
                    let col = &b[(t * used + e) * k..][..k];
                    row.iter().zip(col).map(|(x, y)| x * y).sum()
                } else {
                    0.0
                };
                let got = dst[(t * used + e) * m + i];
                assert!(
                    (got - want).abs() <= 1e-5,
                    "t {t} e {e} row {i}: {got} vs {want}"
                );
            }
        }
    }
}

#[test]
fn concurrent_launches_from_several_threads() {
    if skip() {
        return;
    }
    // each OS thread has its own fibers and shared memory; atomics on a
    // common counter stay exact
    let mut counter = vec![0i32, 0, -1, i32::MAX, 0];
    // the threads reach it only through the kernels' atomics, joined below
    let base = counter.as_mut_ptr() as u64;
    let handles: Vec<_> = (0..3)
        .map(|seed| {
            std::thread::spawn(move || {
                let mut rng = Rng(100 + seed);
                let (rows, n) = (4usize, 777usize);
                for _ in 0..5 {
                    let x: Vec<f32> = (0..rows * n).map(|_| rng.f()).collect();
                    let mut out = vec![0f32; rows];
                    run(
                        "t_block_sum",
                        [rows as u32, 1, 1],
                        [128, 1, 1],
                        0,
                        &[pc(&x), p(&mut out), A::I(n as i32)],
                    )
                    .unwrap();
                    let want: Vec<f32> = x.chunks(n).map(|r| r.iter().sum()).collect();
                    close(&out, &want, 1e-4, "block sum on a thread");
                    let mut u = vec![0u32, 0];
                    let mut f = vec![0f32];
                    let mut ull = vec![0u64];
                    run(
                        "t_atomics",
                        [2, 1, 1],
                        [64, 1, 1],
                        0,
                        &[A::P(base), p(&mut u), p(&mut f), p(&mut ull)],
                    )
                    .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(counter[0], 3 * 5 * 128, "atomicAdd from three threads");
    assert_eq!(
        counter[1],
        3 * 5 * 128,
        "atomicCAS loops from three threads"
    );
}

// ------------------------------------------------------------------ timing

#[test]
fn timing_of_representative_launches() {
    if skip() {
        return;
    }
    // warp shuffles: one fiber switch per lane per shuffle
    let (blocks, threads, iters) = (64u32, 256u32, 200i32);
    let mut out = vec![0f32; (blocks * threads) as usize];
    let s0 = emu::context_switches();
    let t = Instant::now();
    run(
        "t_shuffle_loop",
        [blocks, 1, 1],
        [threads, 1, 1],
        0,
        &[p(&mut out), A::I(iters)],
    )
    .unwrap();
    let dt = t.elapsed().as_secs_f64();
    let switches = emu::context_switches() - s0;
    println!(
        "t_shuffle_loop: {} threads x {iters} shuffles in {:.1} ms: {switches} switches, {:.1} M switches/s",
        blocks * threads,
        dt * 1e3,
        switches as f64 / dt / 1e6
    );
    assert!(switches > 0);
    // a decode-sized matrix-vector product: 2048 x 2048 Q8_0 weights
    let mut rng = Rng(23);
    let (k, m) = (2048usize, 2048usize);
    let (q, _) = q8_0(&mut rng, m, k);
    let b: Vec<f32> = (0..k).map(|_| rng.f()).collect();
    let row_bytes = (k / 32 * 34) as i64;
    let ta = T4 {
        ne: [k as i64, m as i64, 1, 1],
        nb: [34, row_bytes, row_bytes * m as i64, row_bytes * m as i64],
    };
    let t = Instant::now();
    let got = mul_mat_vec(&q, Q8_0, ta, &b, k, 1);
    println!(
        "k_mul_mat_vec 2048x2048 Q8_0, 1 column: {:.1} ms ({} warps)",
        t.elapsed().as_secs_f64() * 1e3,
        m
    );
    assert_eq!(got.len(), m);
    // a grid-stride element-wise kernel over 1M elements (4096 blocks of 256)
    let n = 1 << 20;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut d = vec![0f32; n];
    let ta = dense([n as i64, 1, 1, 1], 4);
    let t = Instant::now();
    run(
        "k_unary",
        [(n as u32).div_ceil(256), 1, 1],
        [256, 1, 1],
        0,
        &[
            p(&mut d),
            A::T(ta),
            pc(&a),
            A::T(ta),
            A::I(F32),
            A::I(0),
            A::F(2.0),
            A::F(1.0),
        ],
    )
    .unwrap();
    println!(
        "k_unary (scale) over {n} elements, 4096 blocks x 256 threads: {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(d[12345], 12345.0 * 2.0 + 1.0);
}

// ------------------------------------------------- warp-wide instructions

/// A random int8 matrix of `n` elements.
fn rand_i8(rng: &mut Rng, n: usize) -> Vec<i8> {
    (0..n).map(|_| (rng.i(256) - 128) as i8).collect()
}

#[test]
fn int8_mma_matches_a_scalar_product_by_the_ptx_fragment_tables() {
    if skip() {
        return;
    }
    let mut rng = Rng(11);
    // m16n8k32: A [16][32], B [8][32] (columns), C [16][8]
    let a = rand_i8(&mut rng, 16 * 32);
    let b = rand_i8(&mut rng, 8 * 32);
    let c0: Vec<i32> = (0..128).map(|_| rng.i(200_001) - 100_000).collect();
    let mut c = c0.clone();
    run(
        "t_mma_s8_k32",
        [1, 1, 1],
        [32, 1, 1],
        0,
        &[pc(&a), pc(&b), p(&mut c)],
    )
    .unwrap();
    for m in 0..16 {
        for n in 0..8 {
            let dot: i32 = (0..32)
                .map(|k| a[32 * m + k] as i32 * b[32 * n + k] as i32)
                .sum();
            assert_eq!(c[8 * m + n], c0[8 * m + n] + dot, "m16n8k32 C[{m}][{n}]");
        }
    }
    // m8n8k16: A [8][16], B [8][16], C [8][8]
    let a = rand_i8(&mut rng, 8 * 16);
    let b = rand_i8(&mut rng, 8 * 16);
    let c0: Vec<i32> = (0..64).map(|_| rng.i(2001) - 1000).collect();
    let mut c = c0.clone();
    run(
        "t_mma_s8_m8n8k16",
        [1, 1, 1],
        [32, 1, 1],
        0,
        &[pc(&a), pc(&b), p(&mut c)],
    )
    .unwrap();
    for m in 0..8 {
        for n in 0..8 {
            let dot: i32 = (0..16)
                .map(|k| a[16 * m + k] as i32 * b[16 * n + k] as i32)
                .sum();
            assert_eq!(c[8 * m + n], c0[8 * m + n] + dot, "m8n8k16 C[{m}][{n}]");
        }
    }
}

#[test]
fn float_mma_matches_a_scalar_product_by_the_ptx_fragment_tables() {
    if skip() {
        return;
    }
    let mut rng = Rng(12);
    // (bf16, k = 8): m16n8k16 f16, m16n8k16 bf16, m16n8k8 f16
    for (bf, k8) in [(0, 0), (1, 0), (0, 1)] {
        let bits = |x: f32| {
            if bf == 1 {
                half::bf16::from_f32(x).to_bits()
            } else {
                half::f16::from_f32(x).to_bits()
            }
        };
        let val = |b: u16| {
            if bf == 1 {
                half::bf16::from_bits(b).to_f32()
            } else {
                half::f16::from_bits(b).to_f32()
            }
        };
        let a: Vec<u16> = (0..16 * 16).map(|_| bits(rng.f() * 4.0)).collect();
        let b: Vec<u16> = (0..8 * 16).map(|_| bits(rng.f() * 4.0)).collect();
        let c0: Vec<f32> = (0..128).map(|_| rng.f() * 10.0).collect();
        let mut c = c0.clone();
        run(
            "t_mma_f16",
            [1, 1, 1],
            [32, 1, 1],
            0,
            &[pc(&a), pc(&b), p(&mut c), A::I(bf), A::I(k8)],
        )
        .unwrap();
        let kk = if k8 == 1 { 8 } else { 16 };
        for m in 0..16 {
            for n in 0..8 {
                // products exact in f32, summed in k order onto C
                let mut want = c0[8 * m + n];
                for k in 0..kk {
                    want += val(a[16 * m + k]) * val(b[16 * n + k]);
                }
                assert_eq!(
                    c[8 * m + n].to_bits(),
                    want.to_bits(),
                    "bf16 {bf} k8 {k8} C[{m}][{n}]: {} vs {want}",
                    c[8 * m + n]
                );
            }
        }
    }
}

#[test]
fn ldmatrix_gives_each_lane_its_fragment_plain_and_transposed() {
    if skip() {
        return;
    }
    let mut rng = Rng(13);
    let src: Vec<u16> = (0..32 * 8).map(|i| 1000 + i as u16).collect();
    // a shuffled row order: tile rows need not be consecutive in memory
    let mut perm: Vec<i32> = (0..32).collect();
    for i in (1..32).rev() {
        perm.swap(i, rng.i(i as u64 + 1) as usize);
    }
    for n in [1, 2, 4] {
        for trans in [0, 1] {
            let mut out = vec![0u32; 4 * 32];
            run(
                "t_ldmatrix",
                [1, 1, 1],
                [32, 1, 1],
                0,
                &[pc(&src), pc(&perm), p(&mut out), A::I(n), A::I(trans)],
            )
            .unwrap();
            // tile i, row r, column c
            let m = |i: usize, r: usize, c: usize| src[8 * perm[8 * i + r] as usize + c] as u32;
            for l in 0..32 {
                for i in 0..4 {
                    let (g, t) = (l / 4, l % 4);
                    let want = if i >= n as usize {
                        0
                    } else if trans == 1 {
                        m(i, 2 * t, g) | (m(i, 2 * t + 1, g) << 16)
                    } else {
                        m(i, g, 2 * t) | (m(i, g, 2 * t + 1) << 16)
                    };
                    assert_eq!(out[4 * l + i], want, "x{n} trans {trans} lane {l} reg {i}");
                }
            }
        }
    }
}

#[test]
fn cp_async_lands_at_its_wait_and_is_poison_before() {
    if skip() {
        return;
    }
    let mut rng = Rng(14);
    let src: Vec<u32> = (0..64 * 8).map(|_| rng.next() as u32).collect();
    let mut out = vec![0u32; 64 * 12];
    run(
        "t_cp_async",
        [1, 1, 1],
        [64, 1, 1],
        0,
        &[pc(&src), p(&mut out)],
    )
    .unwrap();
    let poison = 0xA5A5_A5A5u32;
    for t in 0..64 {
        // words 0 (group 0), 4 (group 1), 6 and 7 (group 2)
        let words = [0usize, 4, 6, 7];
        let group = [0usize, 1, 2, 2];
        for step in 0..3 {
            for j in 0..4 {
                let got = out[12 * t + 4 * step + j];
                // after wait_group (2 - step): groups 0..=step have landed
                let want = if group[j] <= step {
                    src[8 * t + words[j]]
                } else {
                    poison
                };
                assert_eq!(got, want, "thread {t} step {step} word {}", words[j]);
            }
        }
    }
    let bytes = [0u8; 64];
    // 4 bytes past a 16-byte boundary inside `bytes`
    let at = (bytes.as_ptr() as u64).div_ceil(16) * 16 + 4;
    let err = run(
        "t_cp_async_misaligned",
        [1, 1, 1],
        [1, 1, 1],
        0,
        &[A::P(at)],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("must be aligned"), "{err}");
}
