// ggml-cuda kernels, compiled at run time by NVRTC (see kernels.rs).
//
// Rules for this file:
// - no #include: NVRTC gets no toolkit headers; math builtins (expf, sqrtf,
//   tanhf, ...) are available without them.
// - every kernel is `extern "C" __global__` and named `k_*`; the Rust side
//   lists the names in `kernels::KERNEL_NAMES` (a test checks they exist).
// - tensors are passed as a base pointer plus a `T4` (ggml's ne and nb, in
//   elements and bytes), so every kernel handles any strides.
// - reads never go past the tensor extents: `read_overhang() == 0`.
// - type ids are GGUF ids (F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6,
//   Q5_1 = 7, Q8_0 = 8, Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13,
//   Q6_K = 14, IQ4_NL = 20, IQ4_XS = 23, I32 = 26, I64 = 27, BF16 = 30,
//   MXFP4 = 39).
//
// The kernel source is this file followed by the kernel families in
// `src/kernels/*.cu` (see `kernels::KERNEL_PARTS`), one source for NVRTC.
//
// The file also compiles as C++ with a small emulation prelude (the
// kernel-source test does that with the host g++), so keep it to the common
// subset of CUDA C++ and C++11.

#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q2_K 10
#define T_Q3_K 11
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_IQ4_NL 20
#define T_IQ4_XS 23
#define T_I32 26
#define T_I64 27
#define T_BF16 30
#define T_MXFP4 39

// `UNROLL` before a loop of constant trip count: `#pragma unroll` for NVRTC
// (register arrays indexed by such loops stay in registers), nothing for
// the host compilers of the emulator and of the kernel-source test.
#if defined(__CUDACC_RTC__) || defined(__CUDACC__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef signed char i8;

struct T4 {
    i64 ne[4];
    i64 nb[4];
};

// ---------------------------------------------------------------- helpers

__device__ __forceinline__ float u2f(u32 u) {
    union { u32 u; float f; } c;
    c.u = u;
    return c.f;
}

__device__ __forceinline__ u32 f2u(float f) {
    union { u32 u; float f; } c;
    c.f = f;
    return c.u;
}

__device__ __forceinline__ float neg_inf() { return u2f(0xff800000u); }

// IEEE half -> float, exact (subnormals, inf and nan included): one
// conversion instruction on a GPU, the bit manipulation below on the CPU
// (the emulator and the kernel-source test, which checks it against the
// half crate).
__device__ __forceinline__ float h2f(u16 h) {
#if defined(__CUDA_ARCH__)
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
#else
    u32 sign = ((u32)h & 0x8000u) << 16;
    u32 ex = ((u32)h >> 10) & 0x1fu;
    u32 man = (u32)h & 0x3ffu;
    if (ex == 0) {
        // zero or subnormal: man * 2^-24
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (ex == 31) {
        // inf, or nan made quiet (as the half crate and F16C do)
        return u2f(sign | 0x7f800000u | (man ? 0x400000u : 0u) | (man << 13));
    }
    return u2f(sign | ((ex + 112u) << 23) | (man << 13));
#endif
}

// float -> IEEE half, round to nearest even (as the half crate and F16C):
// one conversion instruction on a GPU.
__device__ __forceinline__ u16 f2h(float f) {
#if defined(__CUDA_ARCH__)
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    u32 x = f2u(f);
    u32 sign = (x >> 16) & 0x8000u;
    u32 ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) {
        return (u16)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); // nan stays nan
    }
    if (ax >= 0x47800000u) {
        return (u16)(sign | 0x7c00u); // >= 65536 (and inf): inf
    }
    if (ax < 0x38800000u) {
        // result is subnormal or zero: units of 2^-24
        if (ax < 0x33000000u) {
            return (u16)sign; // < 2^-25 rounds to zero
        }
        u32 e = ax >> 23;
        u32 m = (ax & 0x7fffffu) | 0x800000u;
        u32 shift = 126u - e; // 14..24
        u32 hm = m >> shift;
        u32 rem = m & ((1u << shift) - 1u);
        u32 half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (hm & 1u))) {
            hm++;
        }
        return (u16)(sign | hm);
    }
    u32 h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
    u32 rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) {
        h++; // a carry into the exponent is the right answer (up to inf)
    }
    return (u16)(sign | h);
#endif
}

__device__ __forceinline__ float bf2f(u16 b) { return u2f(((u32)b) << 16); }

// float -> bfloat16, round to nearest even, nan kept quiet (one
// instruction on sm_80+).
__device__ __forceinline__ u16 f2bf(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    u16 h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    u32 x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (u16)((x >> 16) | 0x40u);
    }
    u32 r = x + 0x7fffu + ((x >> 16) & 1u);
    return (u16)(r >> 16);
#endif
}

__device__ __forceinline__ u16 ld16(const u8* p) { return (u16)(p[0] | (p[1] << 8)); }

// The low 32 bits of the 64-bit hi:lo shifted right by `sh` (0..31):
// `__funnelshift_r` on a GPU (one SHF).
__device__ __forceinline__ u32 fshr(u32 lo, u32 hi, u32 sh) {
#if defined(__CUDA_ARCH__)
    return __funnelshift_r(lo, hi, sh);
#else
    return (u32)((((u64)hi << 32) | lo) >> (sh & 31));
#endif
}

// Bytes of y:x picked by the low 3 bits of each of the 4 selector nibbles
// of `s` (`__byte_perm` without its sign-replicate mode: one PRMT).
__device__ __forceinline__ u32 byte_perm(u32 x, u32 y, u32 s) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(x, y, s);
#else
    u64 v = ((u64)y << 32) | x;
    u32 r = 0;
    UNROLL
    for (int k = 0; k < 4; k++) {
        u32 i = (s >> (4 * k)) & 7u;
        r |= (u32)((v >> (8 * i)) & 0xffu) << (8 * k);
    }
    return r;
#endif
}

// N consecutive 32-bit words starting at `a` (any alignment) with aligned
// loads: N words from the 4-byte boundary at or below `a`, the bytes past
// the last one that the range still needs by one 16-bit and one 8-bit load
// (each only when needed), joined by funnel shifts. Reads only bytes in
// [a rounded down to 4, a + 4N): nothing past the range, at most 3 bytes
// before it (which every caller has inside its block or the tensor).
template <int N>
__device__ __forceinline__ void ld_words(const u8* a, u32* out) {
    u32 ph = (u32)(u64)a & 3u;
    const u32* w = (const u32*)(a - ph);
    u32 v[N + 1];
    UNROLL
    for (int i = 0; i < N; i++) {
        v[i] = w[i];
    }
    const u8* t = (const u8*)(w + N);
    u32 tail = ph >= 2 ? (u32) * (const u16*)t : 0u;
    if (ph & 1u) {
        tail |= (u32)t[ph - 1] << (8 * (ph - 1));
    }
    v[N] = tail;
    UNROLL
    for (int i = 0; i < N; i++) {
        out[i] = fshr(v[i], v[i + 1], 8 * ph);
    }
}

// N words at a 4-byte aligned `a` (one load each; the compiler joins
// neighbours into 64- and 128-bit loads where `a`'s alignment allows).
template <int N>
__device__ __forceinline__ void ld_words4(const u8* a, u32* out) {
    UNROLL
    for (int i = 0; i < N; i++) {
        out[i] = ((const u32*)a)[i];
    }
}

// Four 4-bit indices per byte pair of `q` looked up in a 16-entry int8
// table held as 4 words `t`: the values of the low nibbles of q's 4 bytes
// (in byte order) in `lo`, of the high nibbles in `hi`. Six byte
// permutations, no memory access.
__device__ __forceinline__ void table16(u32 q, const u32* t, u32* lo, u32* hi) {
    // for each half of q: its 4 nibbles (low, high of byte 0, then of byte
    // 1) against table bytes 0..7 and 8..15, then pick by each index's bit 3
    u32 r[2];
    UNROLL
    for (int h = 0; h < 2; h++) {
        u32 n = q >> (16 * h);
        u32 a = byte_perm(t[0], t[1], n);
        u32 b = byte_perm(t[2], t[3], n);
        u32 pick = 0x3210u | ((n & 0x8888u) >> 1);
        r[h] = byte_perm(a, b, pick);
    }
    // r[0] = v(b0 lo), v(b0 hi), v(b1 lo), v(b1 hi); r[1] the same of b2, b3
    *lo = byte_perm(r[0], r[1], 0x6420u);
    *hi = byte_perm(r[0], r[1], 0x7531u);
}

// Element `j` (0-based within a block) of one quantized block at `b`.
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, float* sc, float* mn) {
    if (j < 4) {
        *sc = (float)(q[j] & 63);
        *mn = (float)(q[j + 4] & 63);
    } else {
        *sc = (float)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *mn = (float)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

// block_q8_0 {f16 d; i8 qs[32]} (34 B)
__device__ __forceinline__ float dq_q8_0(const u8* b, int j) {
    return h2f(ld16(b)) * (float)((const i8*)(b + 2))[j];
}

// block_q4_0 {f16 d; u8 qs[16]} (18 B): low nibbles 0..15, high 16..31
__device__ __forceinline__ float dq_q4_0(const u8* b, int j) {
    const u8* qs = b + 2;
    int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    return h2f(ld16(b)) * (float)(q - 8);
}

// block_q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]} (144 B)
__device__ __forceinline__ float dq_q4_k(const u8* b, int j) {
    int c = j >> 6;         // 64-element chunk 0..3
    int h = (j >> 5) & 1;   // low or high nibble half
    int l = j & 31;
    u8 q = b[16 + c * 32 + l];
    int v = h ? (q >> 4) : (q & 0xF);
    float sc, mn;
    scale_min_k4(2 * c + h, b + 4, &sc, &mn);
    return h2f(ld16(b)) * sc * (float)v - h2f(ld16(b + 2)) * mn;
}

// block_q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} (176 B)
__device__ __forceinline__ float dq_q5_k(const u8* b, int j) {
    int c = j >> 6;
    int h = (j >> 5) & 1;
    int l = j & 31;
    u8 q = b[48 + c * 32 + l];
    int v = h ? (q >> 4) : (q & 0xF);
    if ((b[16 + l] >> (2 * c + h)) & 1) {
        v += 16;
    }
    float sc, mn;
    scale_min_k4(2 * c + h, b + 4, &sc, &mn);
    return h2f(ld16(b)) * sc * (float)v - h2f(ld16(b + 2)) * mn;
}

// block_q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} (210 B)
__device__ __forceinline__ float dq_q6_k(const u8* b, int j) {
    int n = j >> 7;         // 128-element half
    int g = (j >> 5) & 3;   // quarter within the half
    int l = j & 31;
    const u8* ql = b + n * 64;
    const u8* qh = b + 128 + n * 32;
    const i8* sc = (const i8*)(b + 192) + n * 8;
    u8 lq = ql[l + (g & 1) * 32];
    int lo = (g >= 2) ? (lq >> 4) : (lq & 0xF);
    int hi = (qh[l] >> (2 * g)) & 3;
    int q = (lo | (hi << 4)) - 32;
    return h2f(ld16(b + 208)) * (float)sc[(l >> 4) + 2 * g] * (float)q;
}

// The non-linear 4-bit value tables of IQ4_NL / IQ4_XS and of MXFP4 (the
// latter in units of half the E8M0 scale).
__constant__ i8 KV_IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};
__constant__ i8 KV_MXFP4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// E8M0 exponent -> 2^(e - 128): half the MXFP4 block scale (ggml's
// GGML_E8M0_TO_FP32_HALF, subnormal for e < 2).
__device__ __forceinline__ float e8m0_half(u8 e) {
    return u2f(e < 2 ? (0x00200000u << e) : ((u32)(e - 1) << 23));
}

// block_q4_1 {f16 d, m; u8 qs[16]} (20 B)
__device__ __forceinline__ float dq_q4_1(const u8* b, int j) {
    const u8* qs = b + 4;
    int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    return h2f(ld16(b)) * (float)q + h2f(ld16(b + 2));
}

// The 5-bit value of element j of a q5_0/q5_1 block: qh (32 bits at `qh`)
// holds bit 4 of element j at bit j.
__device__ __forceinline__ int q5_val(const u8* qh, const u8* qs, int j) {
    int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    return q | (((qh[j >> 3] >> (j & 7)) & 1) << 4);
}

// block_q5_0 {f16 d; u8 qh[4]; u8 qs[16]} (22 B)
__device__ __forceinline__ float dq_q5_0(const u8* b, int j) {
    return h2f(ld16(b)) * (float)(q5_val(b + 2, b + 6, j) - 16);
}

// block_q5_1 {f16 d, m; u8 qh[4]; u8 qs[16]} (24 B)
__device__ __forceinline__ float dq_q5_1(const u8* b, int j) {
    return h2f(ld16(b)) * (float)q5_val(b + 4, b + 8, j) + h2f(ld16(b + 2));
}

// block_iq4_nl {f16 d; u8 qs[16]} (18 B)
__device__ __forceinline__ float dq_iq4_nl(const u8* b, int j) {
    const u8* qs = b + 2;
    int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    return h2f(ld16(b)) * (float)KV_IQ4NL[q];
}

// block_mxfp4 {u8 e; u8 qs[16]} (17 B)
__device__ __forceinline__ float dq_mxfp4(const u8* b, int j) {
    const u8* qs = b + 1;
    int q = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    return e8m0_half(b[0]) * (float)KV_MXFP4[q];
}

// block_q2_K {u8 scales[16]; u8 qs[64]; f16 d, dmin} (84 B)
__device__ __forceinline__ float dq_q2_k(const u8* b, int j) {
    int n = j >> 7;
    int s = (j >> 5) & 3;
    int l = j & 31;
    int q = (b[16 + n * 32 + l] >> (2 * s)) & 3;
    u8 sc = b[j >> 4];
    return h2f(ld16(b + 80)) * (float)(sc & 0xF) * (float)q - h2f(ld16(b + 82)) * (float)(sc >> 4);
}

// The 16 signed 6-bit sub-block scales of a q3_K block (12 bytes at `s`).
__device__ __forceinline__ int q3k_scale(const u8* s, int j) {
    int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    int high = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
    return (low | (high << 4)) - 32;
}

// block_q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d} (110 B)
__device__ __forceinline__ float dq_q3_k(const u8* b, int j) {
    int n = j >> 7;
    int s = (j >> 5) & 3;
    int l = j & 31;
    int q = (b[32 + n * 32 + l] >> (2 * s)) & 3;
    if (!((b[l] >> (j >> 5)) & 1)) {
        q -= 4;
    }
    return h2f(ld16(b + 108)) * (float)q3k_scale(b + 96, j >> 4) * (float)q;
}

// The 6-bit sub-block scale (minus 32) of sub-block `s` of an iq4_xs block.
__device__ __forceinline__ int iq4xs_scale(const u8* b, int s) {
    int h = ld16(b + 2);
    return (((b[4 + (s >> 1)] >> (4 * (s & 1))) & 0xF) | (((h >> (2 * s)) & 3) << 4)) - 32;
}

// block_iq4_xs {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]} (136 B)
__device__ __forceinline__ float dq_iq4_xs(const u8* b, int j) {
    int s = j >> 5;
    int l = j & 31;
    const u8* qs = b + 8 + 16 * s;
    int q = l < 16 ? (qs[l] & 0xF) : (qs[l - 16] >> 4);
    return h2f(ld16(b)) * (float)iq4xs_scale(b, s) * (float)KV_IQ4NL[q];
}

// Elements per block and bytes per block of a weight type (1 and the
// element size for the plain types).
__device__ __forceinline__ int blck_size(int ty) {
    switch (ty) {
    case T_Q2_K: case T_Q3_K: case T_Q4_K: case T_Q5_K: case T_Q6_K: case T_IQ4_XS: return 256;
    case T_F32: case T_F16: case T_BF16: case T_I32: return 1;
    default: return 32;
    }
}

__device__ __forceinline__ int type_size(int ty) {
    switch (ty) {
    case T_F32: case T_I32: return 4;
    case T_F16: case T_BF16: return 2;
    case T_Q4_0: return 18;
    case T_Q4_1: return 20;
    case T_Q5_0: return 22;
    case T_Q5_1: return 24;
    case T_Q8_0: return 34;
    case T_Q2_K: return 84;
    case T_Q3_K: return 110;
    case T_Q4_K: return 144;
    case T_Q5_K: return 176;
    case T_Q6_K: return 210;
    case T_IQ4_NL: return 18;
    case T_IQ4_XS: return 136;
    case T_MXFP4: return 17;
    default: return 0;
    }
}

// Element `i` of a row of type `ty` starting at `row` (any supported type).
__device__ float load_row_elem(const u8* row, int ty, i64 i) {
    switch (ty) {
    case T_Q4_1: return dq_q4_1(row + (i >> 5) * 20, (int)(i & 31));
    case T_Q5_0: return dq_q5_0(row + (i >> 5) * 22, (int)(i & 31));
    case T_Q5_1: return dq_q5_1(row + (i >> 5) * 24, (int)(i & 31));
    case T_IQ4_NL: return dq_iq4_nl(row + (i >> 5) * 18, (int)(i & 31));
    case T_MXFP4: return dq_mxfp4(row + (i >> 5) * 17, (int)(i & 31));
    case T_Q2_K: return dq_q2_k(row + (i >> 8) * 84, (int)(i & 255));
    case T_Q3_K: return dq_q3_k(row + (i >> 8) * 110, (int)(i & 255));
    case T_IQ4_XS: return dq_iq4_xs(row + (i >> 8) * 136, (int)(i & 255));
    case T_F32: return ((const float*)row)[i];
    case T_F16: return h2f(((const u16*)row)[i]);
    case T_BF16: return bf2f(((const u16*)row)[i]);
    case T_I32: return (float)((const int*)row)[i];
    case T_Q8_0: return dq_q8_0(row + (i >> 5) * 34, (int)(i & 31));
    case T_Q4_0: return dq_q4_0(row + (i >> 5) * 18, (int)(i & 31));
    case T_Q4_K: return dq_q4_k(row + (i >> 8) * 144, (int)(i & 255));
    case T_Q5_K: return dq_q5_k(row + (i >> 8) * 176, (int)(i & 255));
    case T_Q6_K: return dq_q6_k(row + (i >> 8) * 210, (int)(i & 255));
    default: return 0.0f;
    }
}

// Plain (non-quantized) element at a byte address.
__device__ __forceinline__ float load_f(const u8* p, int ty) {
    switch (ty) {
    case T_F32: return *(const float*)p;
    case T_F16: return h2f(*(const u16*)p);
    case T_BF16: return bf2f(*(const u16*)p);
    case T_I32: return (float)*(const int*)p;
    default: return 0.0f;
    }
}

__device__ __forceinline__ void store_f(u8* p, int ty, float v) {
    switch (ty) {
    case T_F32: *(float*)p = v; break;
    case T_F16: *(u16*)p = f2h(v); break;
    case T_BF16: *(u16*)p = f2bf(v); break;
    case T_I32: *(int*)p = (int)v; break;
    default: break;
    }
}

// An F32 activation rounded to the precision of F16 or BF16 weights (as the
// CPU backend converts activations to the weight type before the dot
// product); F32 weights keep it.
__device__ __forceinline__ float act_round(float x, int wty) {
    if (wty == T_F16) {
        return h2f(f2h(x));
    }
    if (wty == T_BF16) {
        return bf2f(f2bf(x));
    }
    return x;
}

// Eight halves (or bfloat16s) of a 16-byte word to floats.
__device__ __forceinline__ void unpack8(uint4 v, int bf, float* o) {
    u32 u[4] = {v.x, v.y, v.z, v.w};
    UNROLL
    for (int i = 0; i < 4; i++) {
        u16 lo = (u16)(u[i] & 0xffffu);
        u16 hi = (u16)(u[i] >> 16);
        o[2 * i] = bf ? bf2f(lo) : h2f(lo);
        o[2 * i + 1] = bf ? bf2f(hi) : h2f(hi);
    }
}

__device__ __forceinline__ i64 t4_n(const T4& t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

// Split a flat ggml-order index into coordinates.
__device__ __forceinline__ void t4_coords(const T4& t, i64 i, i64* c) {
    c[0] = i % t.ne[0];
    i /= t.ne[0];
    c[1] = i % t.ne[1];
    i /= t.ne[1];
    c[2] = i % t.ne[2];
    c[3] = i / t.ne[2];
}

__device__ __forceinline__ i64 t4_off(const T4& t, i64 c0, i64 c1, i64 c2, i64 c3) {
    return c0 * t.nb[0] + c1 * t.nb[1] + c2 * t.nb[2] + c3 * t.nb[3];
}

__device__ __forceinline__ i64 gtid() { return (i64)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ i64 gstride() { return (i64)gridDim.x * blockDim.x; }

// Butterfly sum / max over the full warp (every lane gets the result).
// The emulator runs the same five steps after one warp collective
// (`GGML_CUDA_EMU_WARP_BUTTERFLY`, emu/prelude.h), bit for bit.
__device__ __forceinline__ float warp_sum(float v) {
#ifdef GGML_CUDA_EMU_WARP_BUTTERFLY
    return emu_warp_butterfly(v, [](float a, float b) { return a + b; });
#else
    for (int o = 16; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
#endif
}

__device__ __forceinline__ float warp_max(float v) {
#ifdef GGML_CUDA_EMU_WARP_BUTTERFLY
    return emu_warp_butterfly(v, [](float a, float b) { return fmaxf(a, b); });
#else
    for (int o = 16; o > 0; o >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    }
    return v;
#endif
}

// Butterfly sum within segments of `width` lanes (a power of 2 up to 32):
// every lane gets its segment's sum (the emulator: one collective, the
// same operations in the same order).
__device__ __forceinline__ float warp_sum_w(float v, int width) {
#ifdef GGML_CUDA_EMU_WARP_BUTTERFLY
    return emu_butterfly_value_w(emu_warp_gather(emu_bits(v)), emu_lane(), (unsigned)width,
                                 [](float a, float b) { return a + b; });
#else
    for (int o = width >> 1; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
#endif
}

// Integer sums over lanes 0..15 and 16..31 of the warp (exact), for lane 0.
__device__ __forceinline__ void half_warp_sums(int v, int* s0, int* s1) {
#ifdef GGML_CUDA_EMU_WARP_BUTTERFLY
    const unsigned long long* all = emu_warp_gather((unsigned long long)(unsigned)v);
    int a = 0, b = 0;
    for (int l = 0; l < 16; l++) {
        a += (int)(unsigned)all[l];
        b += (int)(unsigned)all[16 + l];
    }
    *s0 = a;
    *s1 = b;
#else
    for (int o = 8; o > 0; o >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    *s0 = v;
    *s1 = __shfl_xor_sync(0xffffffffu, v, 16);
#endif
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. `sh` holds 32 floats.
__device__ float block_sum(float v, float* sh) {
    int lane = threadIdx.x & 31;
    int w = threadIdx.x >> 5;
    int nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) {
        sh[w] = v;
    }
    __syncthreads();
    float r = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(r);
}

__device__ float block_max(float v, float* sh) {
    int lane = threadIdx.x & 31;
    int w = threadIdx.x >> 5;
    int nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) {
        sh[w] = v;
    }
    __syncthreads();
    float r = lane < nw ? sh[lane] : neg_inf();
    return warp_max(r);
}

__device__ __forceinline__ float gelu_f(float x) {
    const float k = 0.7978845608028654f; // sqrt(2/pi)
    return 0.5f * x * (1.0f + tanhf(k * x * (1.0f + 0.044715f * x * x)));
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

// The gated linear unit of gate g and up u: op 0 swiglu, 1 geglu,
// 2 swiglu_oai(alpha, limit) (gpt-oss's clamped form). Shared by `k_glu`
// and the fused expert mat-vec's epilogue.
__device__ __forceinline__ float glu_f(int op, float g, float u, float alpha, float limit) {
    if (op == 0) {
        return silu_f(g) * u;
    }
    if (op == 1) {
        return gelu_f(g) * u;
    }
    g = fminf(g, limit);
    u = fmaxf(fminf(u, limit), -limit);
    return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

// ------------------------------------------------------------ element-wise

// dst = a (op) b, b broadcast over a by index modulo its shape.
// op: 0 add, 1 sub, 2 mul, 3 div.
extern "C" __global__ void k_binary(u8* dst, T4 td, const u8* a, T4 ta, int tya,
                                    const u8* b, T4 tb, int tyb, int op) {
    i64 n = t4_n(td);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        t4_coords(td, i, c);
        float x = load_f(a + t4_off(ta, c[0], c[1], c[2], c[3]), tya);
        float y = load_f(b + t4_off(tb, c[0] % tb.ne[0], c[1] % tb.ne[1], c[2] % tb.ne[2],
                                    c[3] % tb.ne[3]),
                         tyb);
        float r;
        switch (op) {
        case 0: r = x + y; break;
        case 1: r = x - y; break;
        case 2: r = x * y; break;
        default: r = x / y; break;
        }
        *(float*)(dst + t4_off(td, c[0], c[1], c[2], c[3])) = r;
    }
}

// Unary ops into an F32 dst of the same shape.
// op: 0 scale (x*p0 + p1), 1 sqr, 2 sqrt, 3 silu, 4 gelu, 5 sigmoid, 6 neg,
// 7 relu, 8 exp.
extern "C" __global__ void k_unary(u8* dst, T4 td, const u8* a, T4 ta, int tya, int op,
                                   float p0, float p1) {
    i64 n = t4_n(td);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        t4_coords(td, i, c);
        float x = load_f(a + t4_off(ta, c[0], c[1], c[2], c[3]), tya);
        float r;
        switch (op) {
        case 0: r = x * p0 + p1; break;
        case 1: r = x * x; break;
        case 2: r = sqrtf(x); break;
        case 3: r = silu_f(x); break;
        case 4: r = gelu_f(x); break;
        case 5: r = 1.0f / (1.0f + expf(-x)); break;
        case 6: r = -x; break;
        case 7: r = x > 0.0f ? x : 0.0f; break;
        default: r = expf(x); break;
        }
        *(float*)(dst + t4_off(td, c[0], c[1], c[2], c[3])) = r;
    }
}

// Gated linear units. With `split` = 0, gate and up are the two halves of
// `a`'s rows (gate first unless `swapped`); with `split` = 1 the gate is `a`
// and up is `b`. op: 0 swiglu, 1 geglu, 2 swiglu_oai(alpha, limit).
extern "C" __global__ void k_glu(u8* dst, T4 td, const u8* a, T4 ta, int tya, const u8* b,
                                 T4 tb, int tyb, int split, int swapped, int op, float alpha,
                                 float limit) {
    i64 n = t4_n(td);
    i64 nc = td.ne[0];
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        t4_coords(td, i, c);
        float g, u;
        if (split) {
            g = load_f(a + t4_off(ta, c[0], c[1], c[2], c[3]), tya);
            u = load_f(b + t4_off(tb, c[0], c[1], c[2], c[3]), tyb);
        } else {
            i64 ig = swapped ? c[0] + nc : c[0];
            i64 iu = swapped ? c[0] : c[0] + nc;
            g = load_f(a + t4_off(ta, ig, c[1], c[2], c[3]), tya);
            u = load_f(a + t4_off(ta, iu, c[1], c[2], c[3]), tya);
        }
        *(float*)(dst + t4_off(td, c[0], c[1], c[2], c[3])) = glu_f(op, g, u, alpha, limit);
    }
}

// ------------------------------------------------------------------ copies

// Copy with type conversion; element i of src (ggml order) goes to element i
// of dst (ggml order), shapes may differ (cpy, cont, dup, reshaping copies).
extern "C" __global__ void k_cpy(u8* dst, T4 td, int tyd, const u8* src, T4 ts, int tys) {
    i64 n = t4_n(ts);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 cs[4], cd[4];
        t4_coords(ts, i, cs);
        t4_coords(td, i, cd);
        const u8* ps = src + t4_off(ts, cs[0], cs[1], cs[2], cs[3]);
        u8* pd = dst + t4_off(td, cd[0], cd[1], cd[2], cd[3]);
        if (tys == tyd && tys == T_I32) {
            *(int*)pd = *(const int*)ps; // exact for all i32 values
        } else {
            store_f(pd, tyd, load_f(ps, tys));
        }
    }
}

// Dequantize (or convert) a whole tensor of any supported type into a dense
// F32 array of the same shape.
extern "C" __global__ void k_to_f32(float* dst, const u8* src, T4 ts, int tys) {
    i64 n = t4_n(ts);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        t4_coords(ts, i, c);
        const u8* row = src + t4_off(ts, 0, c[1], c[2], c[3]);
        dst[i] = load_row_elem(row, tys, c[0]);
    }
}

// get_rows: dst[:, i10, i11, i12] = src[:, ids[i10, i11, i12], i11, i12].
// One thread per dst element; an id outside [0, src.ne1) sets bit 1 of *err
// and writes 0. (set_rows sets bit 2, add_id 4, mul_mat_id 8: err_flag.rs
// names the op kind from them.)
extern "C" __global__ void k_get_rows(u8* dst, T4 td, int tyd, const u8* src, T4 ts, int tys,
                                      const u8* ids, T4 ti, u32* err) {
    i64 n = t4_n(td);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        t4_coords(td, i, c);
        int r = *(const int*)(ids + t4_off(ti, c[1], c[2], c[3], 0));
        u8* pd = dst + t4_off(td, c[0], c[1], c[2], c[3]);
        if (r < 0 || (i64)r >= ts.ne[1]) {
            atomicOr(err, 1u);
            store_f(pd, tyd, 0.0f);
            continue;
        }
        const u8* row = src + t4_off(ts, 0, r, c[2], c[3]);
        if (tys == T_I32 && tyd == T_I32) {
            *(int*)pd = ((const int*)row)[c[0]];
        } else {
            store_f(pd, tyd, load_row_elem(row, tys, c[0]));
        }
    }
}

// set_rows: dst[:, idx[i01, i02 % ni.ne1, i03 % ni.ne2], i02, i03] = src[:, i01, i02, i03].
extern "C" __global__ void k_set_rows(u8* dst, T4 td, int tyd, const u8* src, T4 ts, int tys,
                                      const u8* idx, T4 ti, int tyi, u32* err) {
    i64 n = t4_n(ts);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        t4_coords(ts, i, c);
        const u8* pi = idx + t4_off(ti, c[1], c[2] % ti.ne[1], c[3] % ti.ne[2], 0);
        i64 r = tyi == T_I64 ? *(const i64*)pi : (i64)*(const int*)pi;
        if (r < 0 || r >= td.ne[1]) {
            atomicOr(err, 2u);
            continue;
        }
        float v = load_f(src + t4_off(ts, c[0], c[1], c[2], c[3]), tys);
        store_f(dst + t4_off(td, c[0], r, c[2], c[3]), tyd, v);
    }
}

// concat along `dim`; element size `es` (2, 4 or 8 bytes), raw copies.
extern "C" __global__ void k_concat(u8* dst, T4 td, const u8* a, T4 ta, const u8* b, T4 tb,
                                    int dim, int es) {
    i64 n = t4_n(td);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        t4_coords(td, i, c);
        const u8* ps;
        if (c[dim] < ta.ne[dim]) {
            ps = a + t4_off(ta, c[0], c[1], c[2], c[3]);
        } else {
            c[dim] -= ta.ne[dim];
            ps = b + t4_off(tb, c[0], c[1], c[2], c[3]);
            c[dim] += ta.ne[dim];
        }
        u8* pd = dst + t4_off(td, c[0], c[1], c[2], c[3]);
        for (int k = 0; k < es; k++) {
            pd[k] = ps[k];
        }
    }
}

// ------------------------------------------------------------- reductions

// One block per row. mode: 0 rms_norm, 1 norm, 2 sum_rows, 3 mean.
extern "C" __global__ void k_row_reduce(u8* dst, T4 td, const u8* a, T4 ta, int tya, int mode,
                                        float eps) {
    __shared__ float sh[32];
    i64 row = blockIdx.x;
    i64 i1 = row % ta.ne[1];
    i64 i2 = (row / ta.ne[1]) % ta.ne[2];
    i64 i3 = row / (ta.ne[1] * ta.ne[2]);
    const u8* pa = a + t4_off(ta, 0, i1, i2, i3);
    i64 ne0 = ta.ne[0];
    float s = 0.0f;
    for (i64 k = threadIdx.x; k < ne0; k += blockDim.x) {
        float x = load_f(pa + k * ta.nb[0], tya);
        s += mode == 0 ? x * x : x;
    }
    s = block_sum(s, sh);
    float mean = s / (float)ne0;
    if (mode >= 2) {
        if (threadIdx.x == 0) {
            *(float*)(dst + t4_off(td, 0, i1, i2, i3)) = mode == 2 ? s : mean;
        }
        return;
    }
    float scale;
    float shift = 0.0f;
    if (mode == 0) {
        scale = 1.0f / sqrtf(mean + eps);
    } else {
        shift = mean;
        float v = 0.0f;
        for (i64 k = threadIdx.x; k < ne0; k += blockDim.x) {
            float x = load_f(pa + k * ta.nb[0], tya) - mean;
            v += x * x;
        }
        v = block_sum(v, sh);
        scale = 1.0f / sqrtf(v / (float)ne0 + eps);
    }
    for (i64 k = threadIdx.x; k < ne0; k += blockDim.x) {
        float x = load_f(pa + k * ta.nb[0], tya);
        *(float*)(dst + t4_off(td, k, i1, i2, i3)) = (x - shift) * scale;
    }
}

// argmax of each row (first index of the maximum), one block per row.
extern "C" __global__ void k_argmax(int* dst, const u8* a, T4 ta, int tya) {
    __shared__ float shv[1024];
    __shared__ int shi[1024];
    i64 row = blockIdx.x;
    const u8* pa = a + t4_off(ta, 0, row % ta.ne[1], (row / ta.ne[1]) % ta.ne[2],
                             row / (ta.ne[1] * ta.ne[2]));
    float best = neg_inf();
    int bi = -1;
    for (i64 k = threadIdx.x; k < ta.ne[0]; k += blockDim.x) {
        float x = load_f(pa + k * ta.nb[0], tya);
        if (bi < 0 || x > best) {
            best = x;
            bi = (int)k;
        }
    }
    shv[threadIdx.x] = best;
    shi[threadIdx.x] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            float ov = shv[threadIdx.x + s];
            int oi = shi[threadIdx.x + s];
            int mi = shi[threadIdx.x];
            if (oi >= 0 && (mi < 0 || ov > shv[threadIdx.x] ||
                            (ov == shv[threadIdx.x] && oi < mi))) {
                shv[threadIdx.x] = ov;
                shi[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        dst[row] = shi[0] < 0 ? 0 : shi[0];
    }
}

// soft_max_ext, one block per row of `a` (rows = ne1*ne2*ne3):
// dst = softmax(a*scale + slope*mask) with optional per-head sink logits.
extern "C" __global__ void k_soft_max(u8* dst, T4 td, const u8* a, T4 ta, int tya,
                                      const u8* mask, T4 tm, int tym, int has_mask,
                                      const float* sinks, int has_sinks, float scale,
                                      float max_bias, float m0, float m1, int n_head_log2) {
    __shared__ float sh[32];
    i64 row = blockIdx.x;
    i64 i1 = row % ta.ne[1];
    i64 i2 = (row / ta.ne[1]) % ta.ne[2];
    i64 i3 = row / (ta.ne[1] * ta.ne[2]);
    const u8* pa = a + t4_off(ta, 0, i1, i2, i3);
    const u8* pm = has_mask ? mask + t4_off(tm, 0, i1, i2 % tm.ne[2], i3 % tm.ne[3]) : 0;
    float slope = 1.0f;
    if (max_bias > 0.0f) {
        int h = (int)i2;
        slope = h < n_head_log2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n_head_log2) + 1));
    }
    i64 ne0 = ta.ne[0];
    float mx = neg_inf();
    for (i64 k = threadIdx.x; k < ne0; k += blockDim.x) {
        float w = load_f(pa + k * ta.nb[0], tya) * scale;
        if (has_mask) {
            w += slope * load_f(pm + k * tm.nb[0], tym);
        }
        mx = fmaxf(mx, w);
    }
    mx = block_max(mx, sh);
    float sink = 0.0f;
    if (has_sinks) {
        sink = sinks[i2];
        mx = fmaxf(mx, sink);
    }
    float s = 0.0f;
    for (i64 k = threadIdx.x; k < ne0; k += blockDim.x) {
        float w = load_f(pa + k * ta.nb[0], tya) * scale;
        if (has_mask) {
            w += slope * load_f(pm + k * tm.nb[0], tym);
        }
        s += expf(w - mx);
    }
    s = block_sum(s, sh);
    if (has_sinks) {
        s += expf(sink - mx);
    }
    float inv = 1.0f / s;
    for (i64 k = threadIdx.x; k < ne0; k += blockDim.x) {
        float w = load_f(pa + k * ta.nb[0], tya) * scale;
        if (has_mask) {
            w += slope * load_f(pm + k * tm.nb[0], tym);
        }
        *(float*)(dst + t4_off(td, k, i1, i2, i3)) = expf(w - mx) * inv;
    }
}

// ------------------------------------------------------------------- rope

// rope_ext, one thread per rotated pair or passed-through element pair:
// a is [ne0, n_head, n_tokens, ne3], pos I32 [n_tokens]. mode 0 normal,
// 2 neox. YaRN as ggml's rope_yarn; corr0/corr1 from
// ggml_rope_yarn_corr_dims, computed on the host.
extern "C" __global__ void k_rope(u8* dst, T4 td, const u8* a, T4 ta, int tya, const int* pos,
                                  const float* ff, int has_ff, int n_dims, int mode,
                                  float theta_scale, float freq_scale, float ext_factor,
                                  float attn_factor, float corr0, float corr1) {
    i64 half = td.ne[0] / 2;
    i64 n = half * td.ne[1] * td.ne[2] * td.ne[3];
    for (i64 t = gtid(); t < n; t += gstride()) {
        i64 ip = t % half;
        i64 r = t / half;
        i64 i1 = r % td.ne[1];
        i64 i2 = (r / td.ne[1]) % td.ne[2];
        i64 i3 = r / (td.ne[1] * td.ne[2]);
        i64 i0 = 2 * ip;
        if (i0 >= n_dims) {
            // pass through, both elements of the pair
            for (i64 k = i0; k < i0 + 2; k++) {
                float x = load_f(a + t4_off(ta, k, i1, i2, i3), tya);
                *(float*)(dst + t4_off(td, k, i1, i2, i3)) = x;
            }
            continue;
        }
        float theta_extrap = (float)pos[i2] * powf(theta_scale, (float)ip);
        if (has_ff) {
            theta_extrap /= ff[ip];
        }
        float theta_interp = freq_scale * theta_extrap;
        float theta = theta_interp;
        float mscale = attn_factor;
        if (ext_factor != 0.0f) {
            float y = ((float)ip - corr0) / fmaxf(0.001f, corr1 - corr0);
            float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
            float mix = ramp * ext_factor;
            theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
        }
        float cs = cosf(theta) * mscale;
        float sn = sinf(theta) * mscale;
        i64 j0, j1;
        if (mode == 2) {
            j0 = ip;
            j1 = ip + n_dims / 2;
        } else {
            j0 = i0;
            j1 = i0 + 1;
        }
        float x0 = load_f(a + t4_off(ta, j0, i1, i2, i3), tya);
        float x1 = load_f(a + t4_off(ta, j1, i1, i2, i3), tya);
        *(float*)(dst + t4_off(td, j0, i1, i2, i3)) = x0 * cs - x1 * sn;
        *(float*)(dst + t4_off(td, j1, i1, i2, i3)) = x0 * sn + x1 * cs;
    }
}

// ---------------------------------------------------------------- sorting

// argsort / top_k by counting: the rank of element k in its row is the number
// of elements that sort before it (ties: lower index first). One thread per
// source element; writes dst[rank] = k when rank < dst.ne0. O(n^2) per row,
// meant for router rows (n_expert <= a few hundred).
extern "C" __global__ void k_rank_sort(u8* dst, T4 td, const u8* a, T4 ta, int tya, int desc) {
    i64 n = t4_n(ta);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        t4_coords(ta, i, c);
        const u8* row = a + t4_off(ta, 0, c[1], c[2], c[3]);
        float x = load_f(row + c[0] * ta.nb[0], tya);
        i64 rank = 0;
        for (i64 j = 0; j < ta.ne[0]; j++) {
            float y = load_f(row + j * ta.nb[0], tya);
            bool before = desc ? (y > x) : (y < x);
            if (before || (y == x && j < c[0])) {
                rank++;
            }
        }
        if (rank < td.ne[0]) {
            *(int*)(dst + t4_off(td, rank, c[1], c[2], c[3])) = (int)c[0];
        }
    }
}

// add_id: dst[:, i1, i2] = a[:, i1, i2] + b[:, ids[i1, i2]].
extern "C" __global__ void k_add_id(u8* dst, T4 td, const u8* a, T4 ta, int tya, const u8* b,
                                    T4 tb, int tyb, const u8* ids, T4 ti, u32* err) {
    i64 n = t4_n(td);
    for (i64 i = gtid(); i < n; i += gstride()) {
        i64 c[4];
        t4_coords(td, i, c);
        int e = *(const int*)(ids + t4_off(ti, c[1], c[2], 0, 0));
        float x = load_f(a + t4_off(ta, c[0], c[1], c[2], c[3]), tya);
        float y = 0.0f;
        if (e < 0 || (i64)e >= tb.ne[1]) {
            atomicOr(err, 4u);
        } else {
            y = load_f(b + t4_off(tb, c[0], e, 0, 0), tyb);
        }
        *(float*)(dst + t4_off(td, c[0], c[1], c[2], c[3])) = x + y;
    }
}

// ------------------------------------------------------------ matrix mult

#define MV_WARPS 4

// Matrix-vector products for small batches: one warp per dst element
// dst[i0, i1, i2, i3] = dot(a[:, i0, i2 / r2, i3 / r3], b[:, i1, i2, i3]).
// `a` rows may be quantized (dequantized on the fly); `b` is F32 with dense
// rows. Grid: (ceil(ne0 / MV_WARPS), ne1, ne2 * ne3), block 32 * MV_WARPS.
extern "C" __global__ void k_mul_mat_vec(float* dst, T4 td, const u8* a, T4 ta, int tya,
                                         const u8* b, T4 tb, i64 r2, i64 r3) {
    i64 i0 = (i64)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    i64 i1 = blockIdx.y;
    i64 i2 = blockIdx.z % td.ne[2];
    i64 i3 = blockIdx.z / td.ne[2];
    if (i0 >= td.ne[0]) {
        return; // whole warp leaves together
    }
    const u8* ra = a + t4_off(ta, 0, i0, i2 / r2, i3 / r3);
    const float* rb = (const float*)(b + t4_off(tb, 0, i1, i2, i3));
    float s = 0.0f;
    for (i64 k = lane; k < ta.ne[0]; k += 32) {
        s += load_row_elem(ra, tya, k) * rb[k];
    }
    s = warp_sum(s);
    if (lane == 0) {
        *(float*)((u8*)dst + t4_off(td, i0, i1, i2, i3)) = s;
    }
}

// mul_mat_id, one warp per dst element:
// dst[i0, e, t] = dot(as[:, i0, ids[e, t]], b[:, e % b.ne1, t]).
// Grid: (ceil(ne0 / MV_WARPS), n_used, n_tokens). Id -1 means "this slot is
// not mine" (hybrid placement): the row is 0. Other bad ids set *err, give 0.
extern "C" __global__ void k_mul_mat_id_vec(float* dst, T4 td, const u8* as, T4 ta, int tya,
                                            const u8* b, T4 tb, const u8* ids, T4 ti,
                                            u32* err) {
    i64 i0 = (i64)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    i64 e = blockIdx.y;
    i64 t = blockIdx.z;
    if (i0 >= td.ne[0]) {
        return;
    }
    int ex = *(const int*)(ids + t4_off(ti, e, t, 0, 0));
    float s = 0.0f;
    if (ex == -1) {
        // skipped: an exact zero
    } else if (ex < 0 || (i64)ex >= ta.ne[2]) {
        if (lane == 0) {
            atomicOr(err, 8u);
        }
    } else {
        const u8* ra = as + t4_off(ta, 0, i0, ex, 0);
        const float* rb = (const float*)(b + t4_off(tb, 0, e % tb.ne[1], t, 0));
        for (i64 k = lane; k < ta.ne[0]; k += 32) {
            s += load_row_elem(ra, tya, k) * act_round(rb[k], tya);
        }
        s = warp_sum(s);
    }
    if (lane == 0) {
        *(float*)((u8*)dst + t4_off(td, i0, e, t, 0)) = s;
    }
}

#define GT 16

// Tiled GEMM for prompt batches with float weights: same contract as
// k_mul_mat_vec, `a` F32, F16 or BF16 (activations rounded to its type). Block
// (GT, GT); grid (ceil(ne0 / GT), ceil(ne1 / GT), ne2 * ne3).
extern "C" __global__ void k_mul_mat_tiled(float* dst, T4 td, const u8* a, T4 ta, int tya,
                                           const u8* b, T4 tb, i64 r2, i64 r3) {
    __shared__ float sa[GT][GT + 1];
    __shared__ float sb[GT][GT + 1];
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    i64 row0 = (i64)blockIdx.x * GT;
    i64 col0 = (i64)blockIdx.y * GT;
    i64 i2 = blockIdx.z % td.ne[2];
    i64 i3 = blockIdx.z / td.ne[2];
    i64 K = ta.ne[0];
    float acc = 0.0f;
    for (i64 k0 = 0; k0 < K; k0 += GT) {
        i64 k = k0 + tx;
        i64 ra = row0 + ty;
        i64 cb = col0 + ty;
        float va = 0.0f;
        float vb = 0.0f;
        if (k < K && ra < ta.ne[1]) {
            va = load_f(a + t4_off(ta, k, ra, i2 / r2, i3 / r3), tya);
        }
        if (k < K && cb < tb.ne[1]) {
            vb = act_round(*(const float*)(b + t4_off(tb, k, cb, i2, i3)), tya);
        }
        sa[ty][tx] = va;
        sb[ty][tx] = vb;
        __syncthreads();
        for (int kk = 0; kk < GT; kk++) {
            acc += sa[tx][kk] * sb[ty][kk];
        }
        __syncthreads();
    }
    i64 r = row0 + tx;
    i64 c = col0 + ty;
    if (r < td.ne[0] && c < td.ne[1]) {
        *(float*)((u8*)dst + t4_off(td, r, c, i2, i3)) = acc;
    }
}
