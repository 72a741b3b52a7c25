//! Checks of the kernel source that need no GPU:
//! - every kernel the Rust side launches is defined, and every defined kernel
//!   is listed; the source has no `#include` (NVRTC gets no headers);
//! - the source compiles as C++ with the host `g++` under a small CUDA
//!   emulation prelude, and the pieces that run correctly on one host thread
//!   (grid-stride kernels, the half/bfloat16 conversions, the quant layouts)
//!   are run and compared with Rust references: `half` for the conversions,
//!   and dequantizers written here from ggml's `dequantize_row_*` loops
//!   (ggml-core's for the types added later).
//!
//! Without `g++` the compile-and-run part prints `skipped: <reason>`.

use std::path::PathBuf;
use std::process::Command;

use ggml_cuda::kernels::{KERNELS_SRC, KERNEL_NAMES};

/// The names of the kernels `src` defines: every `extern "C" __global__
/// void NAME(`, with an optional `__launch_bounds__(...)` before the name.
fn defined_kernels(src: &str) -> Vec<&str> {
    src.split("extern \"C\" __global__ void ")
        .skip(1)
        .map(|s| {
            let s = s.trim_start();
            let s = match s.strip_prefix("__launch_bounds__(") {
                Some(rest) => rest.split_once(')').map_or("", |(_, r)| r.trim_start()),
                None => s,
            };
            s.split('(').next().unwrap_or("").trim_end()
        })
        .collect()
}

#[test]
fn defined_kernels_reads_launch_bounds() {
    let src = "extern \"C\" __global__ void k_a(int x) {}\n\
               extern \"C\" __global__ void __launch_bounds__(256) k_b(int y) {}\n\
               extern \"C\" __global__ void __launch_bounds__(MMQ_THREADS, 2) k_c() {}";
    assert_eq!(defined_kernels(src), ["k_a", "k_b", "k_c"]);
}

#[test]
fn every_launched_kernel_is_defined_and_listed() {
    let defined = defined_kernels(KERNELS_SRC);
    for name in KERNEL_NAMES {
        let n = defined.iter().filter(|d| *d == name).count();
        assert_eq!(n, 1, "kernel {name} defined {n} times (want once)");
    }
    assert_eq!(defined.len(), KERNEL_NAMES.len());
    for d in defined {
        assert!(
            KERNEL_NAMES.contains(&d),
            "kernel {d} defined but not listed"
        );
    }
    assert!(
        !KERNELS_SRC
            .lines()
            .any(|l| l.trim_start().starts_with("#include")),
        "NVRTC gets no toolkit headers: no #include"
    );
    // the Rust-side constants match the source
    assert!(KERNELS_SRC.contains("#define MV_WARPS 4"));
    assert!(KERNELS_SRC.contains("#define GT 16"));
    use ggml_cuda::kernels::{FAM_WARPS, FAV_QMAX, FAV_WARPS, FA_DMAX};
    for (name, v) in [
        ("FA_DMAX", FA_DMAX),
        ("FAV_WARPS", FAV_WARPS as i64),
        ("FAV_QMAX", FAV_QMAX),
        ("FAM_WARPS", FAM_WARPS as i64),
    ] {
        assert!(
            KERNELS_SRC.contains(&format!("#define {name} {v}\n")),
            "{name} differs between kernels.rs and the source"
        );
    }
}

/// `KERNELS_SRC` is `KERNEL_PARTS` joined, and the parts are `kernels.cu`
/// then every `src/kernels/*.cu` in name order: the files `build.rs` joins
/// for the emulator.
#[test]
fn kernel_parts_match_the_files_build_rs_joins() {
    use ggml_cuda::kernels::KERNEL_PARTS;
    let joined: String = KERNEL_PARTS.iter().map(|(_, text)| *text).collect();
    assert_eq!(
        joined, KERNELS_SRC,
        "KERNELS_SRC is not KERNEL_PARTS joined"
    );
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut families: Vec<String> = std::fs::read_dir(dir.join("kernels"))
        .expect("src/kernels")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cu"))
        .map(|n| format!("kernels/{n}"))
        .collect();
    families.sort();
    let mut want = vec!["kernels.cu".to_string()];
    want.extend(families);
    let names: Vec<&str> = KERNEL_PARTS.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, want, "KERNEL_PARTS vs the files build.rs joins");
    for (name, text) in KERNEL_PARTS {
        let on_disk = std::fs::read_to_string(dir.join(name)).expect("a kernel part");
        assert_eq!(&on_disk, text, "{name} changed since the build");
    }
}

const PRELUDE: &str = r#"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
// CUDA emulation, one host thread per launch: enough for grid-stride
// kernels (blockDim = gridDim = 1). Warp shuffles and barriers are stubs
// that only make the block-cooperative kernels compile.
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
struct dim3 { unsigned x, y, z; };
static dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
static inline unsigned atomicOr(unsigned* p, unsigned v) { unsigned o = *p; *p |= v; return o; }
static inline int atomicAdd(int* p, int v) { int o = *p; *p += v; return o; }
#define __constant__ static
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
static inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
static inline float2 make_float2(float x, float y) { return {x, y}; }
// The launch's dynamic shared memory: `extern __shared__ T x[];` lines are
// rewritten into pointers to it (as build.rs does for the emulator).
static unsigned char emu_dyn_shared_area[1 << 16] __attribute__((aligned(16)));
static inline void* emu_dynamic_shared() { return emu_dyn_shared_area; }
template <class T> static inline T __shfl_xor_sync(unsigned, T v, int) { return v; }
template <class T> static inline T __shfl_sync(unsigned, T v, int) { return v; }
static inline void __syncthreads() {}
static inline void __syncwarp(unsigned = 0xffffffffu) {}
static inline int __any_sync(unsigned, int p) { return p; }
static inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
}
"#;

const HARNESS: &str = r#"
static std::vector<unsigned char> slurp(const char* path) {
    FILE* f = fopen(path, "rb");
    std::vector<unsigned char> v;
    if (!f) return v;
    int c;
    while ((c = fgetc(f)) != EOF) v.push_back((unsigned char)c);
    fclose(f);
    return v;
}
static void dump(const char* path, const void* p, size_t n) {
    FILE* f = fopen(path, "wb");
    fwrite(p, 1, n, f);
    fclose(f);
}
static T4 dense(long long ne0, long long ne1, long long es, long long ne2 = 1) {
    T4 t;
    t.ne[0] = ne0; t.ne[1] = ne1; t.ne[2] = ne2; t.ne[3] = 1;
    t.nb[0] = es; t.nb[1] = es * ne0; t.nb[2] = es * ne0 * ne1; t.nb[3] = t.nb[2] * ne2;
    return t;
}
int main(int argc, char** argv) {
    if (argc < 4) return 2;
    const char* cmd = argv[1];
    std::vector<unsigned char> in = slurp(argv[2]);
    const char* out = argv[3];
    if (!strcmp(cmd, "h2f")) {
        std::vector<unsigned> r(65536);
        for (unsigned h = 0; h < 65536; h++) r[h] = f2u(h2f((u16)h));
        dump(out, r.data(), r.size() * 4);
    } else if (!strcmp(cmd, "f2h")) {
        size_t n = in.size() / 4;
        std::vector<u16> r(2 * n);
        for (size_t i = 0; i < n; i++) {
            float f; memcpy(&f, &in[4 * i], 4);
            r[i] = f2h(f);
            r[n + i] = f2bf(f);
        }
        dump(out, r.data(), r.size() * 2);
    } else if (!strcmp(cmd, "deq")) {
        int ty = atoi(argv[4]);
        long long n = atoll(argv[5]);
        std::vector<float> r(n);
        T4 t = dense(n, 1, 1);
        t.nb[0] = 0; t.nb[1] = (long long)in.size();
        k_to_f32(r.data(), in.data(), t, ty);
        dump(out, r.data(), r.size() * 4);
    } else if (!strcmp(cmd, "get_rows")) {
        // 4 rows of 8 floats, ids {2, 7, 0}: row 7 is out of range
        float a[32];
        for (int i = 0; i < 32; i++) a[i] = (float)i;
        int ids[3] = {2, 7, 0};
        float d[24];
        unsigned err = 0;
        k_get_rows((u8*)d, dense(8, 3, 4), T_F32, (const u8*)a, dense(8, 4, 4), T_F32,
                   (const u8*)ids, dense(3, 1, 4), &err);
        std::vector<float> r(d, d + 24);
        r.push_back((float)err);
        dump(out, r.data(), r.size() * 4);
    } else if (!strcmp(cmd, "binary")) {
        // a [4, 3] - b [4, 1] broadcast, b in F16
        float a[12];
        for (int i = 0; i < 12; i++) a[i] = (float)i;
        u16 b[4];
        for (int i = 0; i < 4; i++) b[i] = f2h(0.5f * (float)i);
        float d[12];
        k_binary((u8*)d, dense(4, 3, 4), (const u8*)a, dense(4, 3, 4), T_F32, (const u8*)b,
                 dense(4, 1, 2), T_F16, 1);
        dump(out, d, sizeof d);
    } else if (!strcmp(cmd, "sort")) {
        float a[6] = {0.5f, -1.0f, 2.0f, 0.5f, 3.0f, -2.0f};
        int asc[6], top[3];
        k_rank_sort((u8*)asc, dense(6, 1, 4), (const u8*)a, dense(6, 1, 4), T_F32, 0);
        k_rank_sort((u8*)top, dense(3, 1, 4), (const u8*)a, dense(6, 1, 4), T_F32, 1);
        std::vector<float> r;
        for (int i = 0; i < 6; i++) r.push_back((float)asc[i]);
        for (int i = 0; i < 3; i++) r.push_back((float)top[i]);
        dump(out, r.data(), r.size() * 4);
    } else {
        return 3;
    }
    return 0;
}
"#;

/// `src` with each `extern __shared__ T name[];` line made a pointer to the
/// prelude's dynamic shared area (`__shared__` is `static` here, and
/// `extern static` is no C++).
fn rewrite_dynamic_shared(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let t = line.trim_start();
        let decl = t
            .strip_prefix("extern __shared__ ")
            .and_then(|r| r.trim_end().strip_suffix("[];"))
            .map(|d| match d.split_once("__align__(") {
                // `__align__(N) T name`: the prelude's area is 16-aligned
                Some((a, b)) => format!("{a}{}", b.split_once(')').map_or(b, |(_, r)| r)),
                None => d.to_string(),
            })
            .map(|d| d.trim().to_string());
        match decl.as_deref().and_then(|d| d.rsplit_once(' ')) {
            Some((ty, name)) => {
                let indent = &line[..line.len() - t.len()];
                out.push_str(&format!(
                    "{indent}{ty}* const {name} = ({ty}*)emu_dynamic_shared();\n"
                ));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

#[test]
fn dynamic_shared_lines_become_pointers() {
    let src = "a\n    extern __shared__ u8 buf[];\nextern __shared__ __align__(16) float f[];\nb";
    assert_eq!(
        rewrite_dynamic_shared(src),
        "a\n    u8* const buf = (u8*)emu_dynamic_shared();\n\
         float* const f = (float*)emu_dynamic_shared();\nb\n"
    );
}

struct Emu {
    dir: PathBuf,
    exe: PathBuf,
}

impl Emu {
    /// Compile the kernels as C++; `Err(reason)` when g++ is unavailable.
    fn build() -> Result<Emu, String> {
        let gxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
        if Command::new(&gxx).arg("--version").output().is_err() {
            return Err(format!("no host C++ compiler ({gxx})"));
        }
        let dir = std::env::temp_dir().join(format!("ggml-cuda-emu-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let src = dir.join("emu.cpp");
        let kernels = rewrite_dynamic_shared(KERNELS_SRC);
        std::fs::write(&src, format!("{PRELUDE}\n{kernels}\n{HARNESS}"))
            .map_err(|e| e.to_string())?;
        let exe = dir.join("emu");
        let out = Command::new(&gxx)
            .args([
                "-std=c++17",
                "-O1",
                "-ffp-contract=off",
                "-Wall",
                "-Wno-unused-function",
                "-o",
            ])
            .arg(&exe)
            .arg(&src)
            .output()
            .map_err(|e| e.to_string())?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kernels.cu does not compile as C++:\n{stderr}"
        );
        assert!(
            !stderr.contains("warning"),
            "kernels.cu has warnings under g++ -Wall:\n{stderr}"
        );
        Ok(Emu { dir, exe })
    }

    fn run(&self, cmd: &str, input: &[u8], extra: &[&str]) -> Vec<u8> {
        let inp = self.dir.join(format!("{cmd}.in"));
        let outp = self.dir.join(format!("{cmd}.out"));
        std::fs::write(&inp, input).unwrap();
        let st = Command::new(&self.exe)
            .arg(cmd)
            .arg(&inp)
            .arg(&outp)
            .args(extra)
            .status()
            .unwrap();
        assert!(st.success(), "emulated {cmd} failed: {st}");
        std::fs::read(&outp).unwrap()
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn h(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    if j < 4 {
        ((q[j] & 63) as f32, (q[j + 4] & 63) as f32)
    } else {
        (
            ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4)) as f32,
            ((q[j + 4] >> 4) | ((q[j] >> 6) << 4)) as f32,
        )
    }
}

/// Reference dequantization following ggml's `dequantize_row_*` loops.
fn dequant_ref(ty: ggml_core::GgmlType, data: &[u8]) -> Vec<f32> {
    use ggml_core::GgmlType as T;
    let bs = ty.type_size();
    let mut y = Vec::new();
    for b in data.chunks_exact(bs) {
        match ty {
            T::Q8_0 => {
                let d = h(b, 0);
                y.extend((0..32).map(|j| d * (b[2 + j] as i8) as f32));
            }
            T::Q4_0 => {
                let d = h(b, 0);
                let mut out = [0f32; 32];
                for j in 0..16 {
                    out[j] = ((b[2 + j] & 0xF) as i32 - 8) as f32 * d;
                    out[j + 16] = ((b[2 + j] >> 4) as i32 - 8) as f32 * d;
                }
                y.extend(out);
            }
            T::Q4K | T::Q5K => {
                let (d, min) = (h(b, 0), h(b, 2));
                let scales = &b[4..16];
                let (qh, mut ql) = if ty == T::Q5K {
                    (&b[16..48], &b[48..176])
                } else {
                    (&b[0..0], &b[16..144])
                };
                let (mut u1, mut u2) = (1u8, 2u8);
                let mut is = 0;
                for _ in 0..4 {
                    let (sc, m) = scale_min_k4(is, scales);
                    let (d1, m1) = (d * sc, min * m);
                    let (sc, m) = scale_min_k4(is + 1, scales);
                    let (d2, m2) = (d * sc, min * m);
                    for l in 0..32 {
                        let hb = if ty == T::Q5K && qh[l] & u1 != 0 {
                            16
                        } else {
                            0
                        };
                        y.push(d1 * ((ql[l] & 0xF) + hb) as f32 - m1);
                    }
                    for l in 0..32 {
                        let hb = if ty == T::Q5K && qh[l] & u2 != 0 {
                            16
                        } else {
                            0
                        };
                        y.push(d2 * ((ql[l] >> 4) + hb) as f32 - m2);
                    }
                    ql = &ql[32..];
                    is += 2;
                    u1 <<= 2;
                    u2 <<= 2;
                }
            }
            T::Q6K => {
                let d = h(b, 208);
                let mut out = [0f32; 256];
                for n in 0..2 {
                    let ql = &b[n * 64..];
                    let qh = &b[128 + n * 32..];
                    let sc = &b[192 + n * 8..];
                    for l in 0..32 {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                        let s = |k: usize| sc[k] as i8 as f32;
                        out[n * 128 + l] = d * s(is) * q1 as f32;
                        out[n * 128 + l + 32] = d * s(is + 2) * q2 as f32;
                        out[n * 128 + l + 64] = d * s(is + 4) * q3 as f32;
                        out[n * 128 + l + 96] = d * s(is + 6) * q4 as f32;
                    }
                }
                y.extend(out);
            }
            other => panic!("no reference for {other}"),
        }
    }
    y
}

#[test]
fn kernels_compile_and_run_as_cpp() {
    let emu = match Emu::build() {
        Ok(e) => e,
        Err(reason) => {
            println!("skipped: {reason}");
            return;
        }
    };
    // half -> float, all 65536 values
    let got = emu.run("h2f", &[], &[]);
    for (i, c) in got.chunks_exact(4).enumerate() {
        let g = u32::from_le_bytes(c.try_into().unwrap());
        let want = half::f16::from_bits(i as u16).to_f32().to_bits();
        assert_eq!(g, want, "h2f({i:#06x})");
    }
    // float -> half / bfloat16: specials, boundaries and a sweep
    let mut xs: Vec<f32> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        65519.99,
        65520.0,
        1e9,
        -1e9,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        6.1e-5,
        5.96e-8,
        2.98e-8,
        2.9802322e-8,
        1e-10,
        0.33333334,
        1.0009766,
        1.0004883,
        1.0014648,
    ];
    let mut bits = 0x0000_1234u32;
    for _ in 0..200_000 {
        bits = bits.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        xs.push(f32::from_bits(bits));
    }
    let inp: Vec<u8> = xs.iter().flat_map(|x| x.to_le_bytes()).collect();
    let got = emu.run("f2h", &inp, &[]);
    let n = xs.len();
    for (i, &x) in xs.iter().enumerate() {
        let gh = u16::from_le_bytes([got[2 * i], got[2 * i + 1]]);
        let gb = u16::from_le_bytes([got[2 * (n + i)], got[2 * (n + i) + 1]]);
        let (wh, wb) = (half::f16::from_f32(x), half::bf16::from_f32(x));
        if x.is_nan() {
            assert!(half::f16::from_bits(gh).is_nan() && half::bf16::from_bits(gb).is_nan());
        } else {
            assert_eq!(
                gh,
                wh.to_bits(),
                "f2h({x:e}) = {gh:#06x}, want {:#06x}",
                wh.to_bits()
            );
            assert_eq!(gb, wb.to_bits(), "f2bf({x:e})");
        }
    }
    // dequantization of every quant type against ggml's loops
    use ggml_core::GgmlType as T;
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for ty in [
        T::Q8_0,
        T::Q4_0,
        T::Q4K,
        T::Q5K,
        T::Q6K,
        T::Q4_1,
        T::Q5_0,
        T::Q5_1,
        T::Q2K,
        T::Q3K,
        T::IQ4NL,
        T::IQ4XS,
        T::MXFP4,
    ] {
        let nblocks = 6;
        let mut data = vec![0u8; nblocks * ty.type_size()];
        for x in data.iter_mut() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *x = seed as u8;
        }
        // sane scales: random f16 bits could be inf or nan
        for b in data.chunks_mut(ty.type_size()) {
            let d = half::f16::from_f32(0.0123).to_le_bytes();
            let m = half::f16::from_f32(0.0071).to_le_bytes();
            match ty {
                T::Q6K => b[208..210].copy_from_slice(&d),
                T::Q4K | T::Q5K | T::Q4_1 | T::Q5_1 => {
                    b[0..2].copy_from_slice(&d);
                    b[2..4].copy_from_slice(&m);
                }
                T::Q2K => {
                    b[80..82].copy_from_slice(&d);
                    b[82..84].copy_from_slice(&m);
                }
                T::Q3K => b[108..110].copy_from_slice(&d),
                T::MXFP4 => b[0] = 121,
                _ => b[0..2].copy_from_slice(&d),
            }
        }
        let n = nblocks * ty.blck_size();
        let got = f32s(&emu.run("deq", &data, &[&(ty.id()).to_string(), &n.to_string()]));
        let want = match ty {
            T::Q8_0 | T::Q4_0 | T::Q4K | T::Q5K | T::Q6K => dequant_ref(ty, &data),
            // the types without a loop here: ggml-core's dequantizers
            _ => {
                let mut v = vec![0f32; n];
                let traits = ggml_core::quants::cpu_traits(ty).expect("a CPU type");
                (traits.to_float)(&data, &mut v);
                v
            }
        };
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1e-3),
                "{ty} element {i}: {g} vs {w}"
            );
        }
    }
    // get_rows: a bad id sets the error flag and reads nothing
    let got = f32s(&emu.run("get_rows", &[], &[]));
    let mut want_rows: Vec<f32> = (16..24).map(|x| x as f32).collect();
    want_rows.extend([0.0; 8]);
    want_rows.extend((0..8).map(|x| x as f32));
    assert_eq!(&got[..24], &want_rows[..]);
    assert_eq!(got[24], 1.0, "error flag");
    // binary op with a broadcast F16 operand
    let got = f32s(&emu.run("binary", &[], &[]));
    let want: Vec<f32> = (0..12).map(|i| i as f32 - 0.5 * (i % 4) as f32).collect();
    assert_eq!(got, want);
    // rank sort: stable ascending order and top-k (ties: lower index first)
    let got = f32s(&emu.run("sort", &[], &[]));
    assert_eq!(got, vec![5.0, 1.0, 0.0, 3.0, 2.0, 4.0, 4.0, 2.0, 0.0]);
}
