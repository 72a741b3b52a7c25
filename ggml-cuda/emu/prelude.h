// CUDA C++ on the CPU: the emulation prelude that `build.rs` puts in front of
// `src/kernels.cu` and `emu/test_kernels.cu` when it compiles them with the
// host C++ compiler for `ggml_cuda::emu_kernels`.
//
// Each CUDA thread of a block is a fiber (see `runtime.cpp`); this header
// maps the CUDA language onto that runtime:
// - qualifiers (`__global__`, `__device__`, `__forceinline__`,
//   `__launch_bounds__`, ...) become plain C++;
// - `threadIdx`, `blockIdx`, `blockDim`, `gridDim` are per-OS-thread
//   variables the scheduler sets on every fiber switch;
// - `__shared__` variables are `static __thread`: one copy per OS thread, so
//   shared by the fibers of the block that thread runs (dynamic
//   `extern __shared__ T x[];` is rewritten by build.rs into a pointer to the
//   launch's dynamic shared area);
// - `__syncthreads` and the warp shuffles/votes call the runtime, which
//   suspends the calling fiber until every participant has arrived;
// - atomics are real atomic read-modify-writes (sequentially consistent).
#pragma once

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__ static
#define __shared__ static __thread
#define __align__(n) __attribute__((aligned(n)))
// `__restrict__` is a GNU C++ keyword already.

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
};

constexpr int warpSize = 32;

// The built-in vector types (NVRTC has them without headers), with CUDA's
// alignment, and their make_* constructors.
#define EMU_VEC2(T, N, A)                                             \
    struct __attribute__((aligned(A))) N##2 {                         \
        T x, y;                                                       \
    };                                                                \
    __forceinline__ N##2 make_##N##2(T x, T y) { return N##2{x, y}; }
#define EMU_VEC4(T, N, A)                                                         \
    struct __attribute__((aligned(A))) N##4 {                                     \
        T x, y, z, w;                                                             \
    };                                                                            \
    __forceinline__ N##4 make_##N##4(T x, T y, T z, T w) { return N##4{x, y, z, w}; }
EMU_VEC2(float, float, 8)
EMU_VEC4(float, float, 16)
EMU_VEC2(int, int, 8)
EMU_VEC4(int, int, 16)
EMU_VEC2(unsigned, uint, 8)
EMU_VEC4(unsigned, uint, 16)
EMU_VEC4(signed char, char, 4)
EMU_VEC4(unsigned char, uchar, 4)

// ------------------------------------------------------------ runtime ABI

// Kinds of warp collectives (`emu_warp_op`).
enum {
    EMU_SHFL_IDX = 0,
    EMU_SHFL_UP = 1,
    EMU_SHFL_DOWN = 2,
    EMU_SHFL_XOR = 3,
    EMU_BALLOT = 4,
    EMU_ALL = 5,
    EMU_ANY = 6,
    EMU_SYNCWARP = 7,
    EMU_REDUCE_ADD = 8,
    EMU_REDUCE_MIN = 9,
    EMU_REDUCE_MAX = 10,
    EMU_REDUCE_AND = 11,
    EMU_REDUCE_OR = 12,
    EMU_REDUCE_XOR = 13,
    EMU_MMA_S8 = 14,
    EMU_GATHER = 15,
    EMU_WARP_CALL = 16,
};

// `EMU_WARP_CALL`: every lane of the warp passes a pointer to its operand
// block, whose first member is this head; when the last lane arrives, the
// runtime calls `fn` once with the 32 blocks (lane order) while the other
// lanes wait, so `fn` reads every lane's operands and writes every lane's
// results. How the warp-wide instructions (mma.sync, ldmatrix) run here.
typedef void (*EmuWarpFn)(void* const* lanes);
struct EmuWarpCallHead {
    EmuWarpFn fn;
};

// Block-barrier reductions (`emu_syncthreads_op`).
enum {
    EMU_BAR_PLAIN = 0,
    EMU_BAR_COUNT = 1,
    EMU_BAR_AND = 2,
    EMU_BAR_OR = 3,
};

extern "C" {
extern __thread uint3 threadIdx;
extern __thread uint3 blockIdx;
extern __thread dim3 blockDim;
extern __thread dim3 gridDim;

// Block barrier at source position file:line; returns the reduction of
// `pred` over the block for the counting/and/or variants.
int emu_syncthreads_op(const char* file, int line, int op, int pred);
// A warp collective over the lanes of `mask`: every lane named waits until
// all of them have arrived; returns this lane's result.
unsigned long long emu_warp_op(int kind, unsigned mask, unsigned long long val, int arg,
                               int width);
// The second result word of the caller's last warp collective (the
// high row half of `EMU_MMA_S8`).
unsigned long long emu_warp_result2(void);
// The lanes of the caller's warp that have not exited.
unsigned emu_activemask(void);
// The launch's dynamic shared memory (`extern __shared__`).
void* emu_dynamic_shared(void);
// The emulated compute capability x10 (`emu_kernels::set_emulated_arch`):
// which of the architecture-dependent instruction paths the kernels take.
int emu_arch(void);
// cp.async of `bytes` (4, 8, 16; both addresses aligned to it) from global
// `src` to shared `dst`, in the calling thread's open commit group: the
// destination is poisoned (0xA5) now and written when a wait covers the
// group, so a read the wait does not order sees the poison.
void emu_cp_async(void* dst, const void* src, unsigned bytes);
// cp.async.commit_group: closes the open group.
void emu_cp_async_commit(void);
// cp.async.wait_group N: completes the calling thread's copies of every
// committed group but the newest N.
void emu_cp_async_wait(unsigned pending);
}

#define __syncthreads() ((void)emu_syncthreads_op(__FILE__, __LINE__, EMU_BAR_PLAIN, 0))
#define __syncthreads_count(p) emu_syncthreads_op(__FILE__, __LINE__, EMU_BAR_COUNT, (p) != 0)
#define __syncthreads_and(p) emu_syncthreads_op(__FILE__, __LINE__, EMU_BAR_AND, (p) != 0)
#define __syncthreads_or(p) emu_syncthreads_op(__FILE__, __LINE__, EMU_BAR_OR, (p) != 0)

// ------------------------------------------------------------ warp level

template <class T>
__forceinline__ unsigned long long emu_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}

template <class T>
__forceinline__ T emu_from_bits(unsigned long long b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

template <class T>
__forceinline__ T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
    return emu_from_bits<T>(emu_warp_op(EMU_SHFL_IDX, mask, emu_bits(var), srcLane, width));
}
template <class T>
__forceinline__ T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return emu_from_bits<T>(emu_warp_op(EMU_SHFL_UP, mask, emu_bits(var), (int)delta, width));
}
template <class T>
__forceinline__ T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
    return emu_from_bits<T>(emu_warp_op(EMU_SHFL_DOWN, mask, emu_bits(var), (int)delta, width));
}
template <class T>
__forceinline__ T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
    return emu_from_bits<T>(emu_warp_op(EMU_SHFL_XOR, mask, emu_bits(var), laneMask, width));
}
__forceinline__ unsigned __ballot_sync(unsigned mask, int pred) {
    return (unsigned)emu_warp_op(EMU_BALLOT, mask, pred != 0, 0, warpSize);
}
__forceinline__ int __all_sync(unsigned mask, int pred) {
    return (int)emu_warp_op(EMU_ALL, mask, pred != 0, 0, warpSize);
}
__forceinline__ int __any_sync(unsigned mask, int pred) {
    return (int)emu_warp_op(EMU_ANY, mask, pred != 0, 0, warpSize);
}
__forceinline__ void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)emu_warp_op(EMU_SYNCWARP, mask, 0, 0, warpSize);
}
__forceinline__ unsigned __activemask() { return emu_activemask(); }
// sm_80 warp reductions over the lanes of the mask (arg 1: signed).
__forceinline__ unsigned __reduce_add_sync(unsigned mask, unsigned v) {
    return (unsigned)emu_warp_op(EMU_REDUCE_ADD, mask, v, 0, warpSize);
}
__forceinline__ int __reduce_add_sync(unsigned mask, int v) {
    return (int)emu_warp_op(EMU_REDUCE_ADD, mask, (unsigned)v, 1, warpSize);
}
__forceinline__ unsigned __reduce_min_sync(unsigned mask, unsigned v) {
    return (unsigned)emu_warp_op(EMU_REDUCE_MIN, mask, v, 0, warpSize);
}
__forceinline__ int __reduce_min_sync(unsigned mask, int v) {
    return (int)emu_warp_op(EMU_REDUCE_MIN, mask, (unsigned)v, 1, warpSize);
}
__forceinline__ unsigned __reduce_max_sync(unsigned mask, unsigned v) {
    return (unsigned)emu_warp_op(EMU_REDUCE_MAX, mask, v, 0, warpSize);
}
__forceinline__ int __reduce_max_sync(unsigned mask, int v) {
    return (int)emu_warp_op(EMU_REDUCE_MAX, mask, (unsigned)v, 1, warpSize);
}
__forceinline__ unsigned __reduce_and_sync(unsigned mask, unsigned v) {
    return (unsigned)emu_warp_op(EMU_REDUCE_AND, mask, v, 0, warpSize);
}
__forceinline__ unsigned __reduce_or_sync(unsigned mask, unsigned v) {
    return (unsigned)emu_warp_op(EMU_REDUCE_OR, mask, v, 0, warpSize);
}
__forceinline__ unsigned __reduce_xor_sync(unsigned mask, unsigned v) {
    return (unsigned)emu_warp_op(EMU_REDUCE_XOR, mask, v, 0, warpSize);
}

// The int8 tensor-core product `mma.sync.aligned.m16n8k16.row.col.s32.s8.
// s8.s32` of a whole warp, with PTX's fragment layout (see
// `mma_s8_16x8x16` in kernels/dot_q8.cu): one warp collective, whose two
// result words are this lane's elements of the two row halves of C. Every
// lane of the warp must call it.
#define GGML_CUDA_EMU_MMA 1
__forceinline__ void emu_mma_s8_16x8x16(int* c, const int* a, int b) {
    unsigned long long av =
        (unsigned long long)(unsigned)a[0] | ((unsigned long long)(unsigned)a[1] << 32);
    unsigned long long lo = emu_warp_op(EMU_MMA_S8, 0xffffffffu, av, b, warpSize);
    unsigned long long hi = emu_warp_result2();
    c[0] += (int)(unsigned)lo;
    c[1] += (int)(unsigned)(lo >> 32);
    c[2] += (int)(unsigned)hi;
    c[3] += (int)(unsigned)(hi >> 32);
}

// ---------------------------------------------- warp-wide instructions
//
// The tensor-core and matrix-load instructions the kernels use as inline
// PTX on a GPU (`kernels/mma.cu`), with PTX's fragment layouts. In every
// layout g = lane / 4 (groupID) and t = lane % 4 (threadID_in_group); int8
// elements are packed 4 to a register and 16-bit ones 2 to a register, the
// lower k (or column) in the low bits. Each is one `EMU_WARP_CALL`: every
// lane of the warp must call it (the runtime reports anything else).
#define GGML_CUDA_EMU_WARP_MMA 1

template <class F>
__forceinline__ void emu_warp_call(F* self) {
    (void)emu_warp_op(EMU_WARP_CALL, 0xffffffffu, (unsigned long long)(uintptr_t)self, 0,
                      warpSize);
}

__forceinline__ int emu_s8(unsigned w, int i) { return (int)(signed char)(w >> (8 * i)); }

// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32, D = A * B + C:
// A 16 x 32 (row-major): a[0] = A[g][4t..4t+3], a[1] = A[g + 8][4t..4t+3],
//   a[2] = A[g][16 + 4t..], a[3] = A[g + 8][16 + 4t..];
// B 32 x 8 (column-major): b[0] = B[4t..4t+3][g], b[1] = B[16 + 4t..][g];
// C, D 16 x 8 int32: c[0], c[1] = C[g][2t], C[g][2t + 1]; c[2], c[3] the
//   same columns of row g + 8.
struct EmuMmaS8k32 {
    EmuWarpCallHead head;
    unsigned a[4], b[2];
    int c[4];
};
inline void emu_mma_s8k32_run(void* const* lanes) {
    int d[32][4];
    for (unsigned l = 0; l < 32; l++) {
        unsigned g = l >> 2, t = l & 3;
        for (unsigned i = 0; i < 4; i++) {
            unsigned row = g + 8 * (i >> 1);
            unsigned col = 2 * t + (i & 1);
            int acc = ((const EmuMmaS8k32*)lanes[l])->c[i];
            for (unsigned k = 0; k < 32; k++) {
                // A[row][k] sits in lane 4 * (row % 8) + (k % 16) / 4, register
                // (row / 8) + 2 * (k / 16); B[k][col] in lane 4 * col + (k % 16) / 4,
                // register k / 16; byte k % 4
                const EmuMmaS8k32* la = (const EmuMmaS8k32*)lanes[4 * (row & 7) + ((k & 15) >> 2)];
                const EmuMmaS8k32* lb = (const EmuMmaS8k32*)lanes[4 * col + ((k & 15) >> 2)];
                int av = emu_s8(la->a[(row >> 3) + 2 * (k >> 4)], (int)(k & 3));
                int bv = emu_s8(lb->b[k >> 4], (int)(k & 3));
                acc += av * bv;
            }
            d[l][i] = acc;
        }
    }
    for (unsigned l = 0; l < 32; l++) {
        memcpy(((EmuMmaS8k32*)lanes[l])->c, d[l], sizeof d[l]);
    }
}
__forceinline__ void emu_mma_s8_16x8x32(int* c, const int* a, const int* b) {
    EmuMmaS8k32 m;
    m.head.fn = emu_mma_s8k32_run;
    for (int i = 0; i < 4; i++) {
        m.a[i] = (unsigned)a[i];
        m.c[i] = c[i];
    }
    m.b[0] = (unsigned)b[0];
    m.b[1] = (unsigned)b[1];
    emu_warp_call(&m);
    for (int i = 0; i < 4; i++) {
        c[i] = m.c[i];
    }
}

// mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 (sm_75), D = A * B + C:
// A 8 x 16: a = A[g][4t..4t+3]; B 16 x 8: b = B[4t..4t+3][g]; C, D 8 x 8
// int32: c[0], c[1] = C[g][2t], C[g][2t + 1].
struct EmuMmaS8m8 {
    EmuWarpCallHead head;
    unsigned a, b;
    int c[2];
};
inline void emu_mma_s8m8_run(void* const* lanes) {
    int d[32][2];
    for (unsigned l = 0; l < 32; l++) {
        unsigned g = l >> 2, t = l & 3;
        for (unsigned i = 0; i < 2; i++) {
            unsigned col = 2 * t + i;
            int acc = ((const EmuMmaS8m8*)lanes[l])->c[i];
            for (unsigned k = 0; k < 16; k++) {
                int av = emu_s8(((const EmuMmaS8m8*)lanes[4 * g + (k >> 2)])->a, (int)(k & 3));
                int bv = emu_s8(((const EmuMmaS8m8*)lanes[4 * col + (k >> 2)])->b, (int)(k & 3));
                acc += av * bv;
            }
            d[l][i] = acc;
        }
    }
    for (unsigned l = 0; l < 32; l++) {
        memcpy(((EmuMmaS8m8*)lanes[l])->c, d[l], sizeof d[l]);
    }
}
__forceinline__ void emu_mma_s8_8x8x16(int* c, int a, int b) {
    EmuMmaS8m8 m;
    m.head.fn = emu_mma_s8m8_run;
    m.a = (unsigned)a;
    m.b = (unsigned)b;
    m.c[0] = c[0];
    m.c[1] = c[1];
    emu_warp_call(&m);
    c[0] = m.c[0];
    c[1] = m.c[1];
}

// IEEE half and bfloat16 to float (exact), for the float MMAs.
__forceinline__ float emu_h2f(unsigned h) {
    unsigned sign = (h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (ex == 0) {
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    unsigned bits = ex == 31 ? (sign | 0x7f800000u | (man << 13))
                             : (sign | ((ex + 112u) << 23) | (man << 13));
    return emu_from_bits<float>(bits);
}
__forceinline__ float emu_bf2f(unsigned b) { return emu_from_bits<float>((b & 0xffffu) << 16); }

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32,
// D = A * B + C, products exact and summed in f32 in k order:
// A 16 x 16: a[0] = A[g][2t, 2t + 1], a[1] = A[g + 8][2t, 2t + 1],
//   a[2] = A[g][8 + 2t, 8 + 2t + 1], a[3] = A[g + 8][8 + 2t, ..];
// B 16 x 8: b[0] = B[2t, 2t + 1][g], b[1] = B[8 + 2t, 8 + 2t + 1][g];
// C, D 16 x 8 f32: as the int8 MMAs (c[0], c[1] row g, c[2], c[3] row g + 8).
// m16n8k8 (sm_75, f16 only): the first two registers of A and the first
// of B, k 0..7.
struct EmuMmaF16 {
    EmuWarpCallHead head;
    unsigned a[4], b[2];
    float c[4];
    int bf, k;
};
inline void emu_mma_f16_run(void* const* lanes) {
    float d[32][4];
    int bf = ((const EmuMmaF16*)lanes[0])->bf;
    unsigned kk = (unsigned)((const EmuMmaF16*)lanes[0])->k;
    for (unsigned l = 0; l < 32; l++) {
        unsigned g = l >> 2, t = l & 3;
        for (unsigned i = 0; i < 4; i++) {
            unsigned row = g + 8 * (i >> 1);
            unsigned col = 2 * t + (i & 1);
            float acc = ((const EmuMmaF16*)lanes[l])->c[i];
            for (unsigned k = 0; k < kk; k++) {
                // A[row][k]: lane 4 * (row % 8) + (k % 8) / 2, register
                // (row / 8) + 2 * (k / 8), half k % 2; B[k][col]: lane
                // 4 * col + (k % 8) / 2, register k / 8, half k % 2
                const EmuMmaF16* la = (const EmuMmaF16*)lanes[4 * (row & 7) + ((k & 7) >> 1)];
                const EmuMmaF16* lb = (const EmuMmaF16*)lanes[4 * col + ((k & 7) >> 1)];
                unsigned aw = la->a[(row >> 3) + 2 * (k >> 3)] >> (16 * (k & 1));
                unsigned bw = lb->b[k >> 3] >> (16 * (k & 1));
                float av = bf ? emu_bf2f(aw) : emu_h2f(aw & 0xffffu);
                float bv = bf ? emu_bf2f(bw) : emu_h2f(bw & 0xffffu);
                acc += av * bv;
            }
            d[l][i] = acc;
        }
    }
    for (unsigned l = 0; l < 32; l++) {
        memcpy(((EmuMmaF16*)lanes[l])->c, d[l], sizeof d[l]);
    }
}
__forceinline__ void emu_mma_f16_16x8x16(float* c, const unsigned* a, const unsigned* b, int bf) {
    EmuMmaF16 m;
    m.head.fn = emu_mma_f16_run;
    m.bf = bf;
    m.k = 16;
    for (int i = 0; i < 4; i++) {
        m.a[i] = a[i];
        m.c[i] = c[i];
    }
    m.b[0] = b[0];
    m.b[1] = b[1];
    emu_warp_call(&m);
    for (int i = 0; i < 4; i++) {
        c[i] = m.c[i];
    }
}
__forceinline__ void emu_mma_f16_16x8x8(float* c, const unsigned* a, unsigned b) {
    EmuMmaF16 m;
    m.head.fn = emu_mma_f16_run;
    m.bf = 0;
    m.k = 8;
    m.a[0] = a[0];
    m.a[1] = a[1];
    m.a[2] = m.a[3] = 0;
    m.b[0] = b;
    m.b[1] = 0;
    for (int i = 0; i < 4; i++) {
        m.c[i] = c[i];
    }
    emu_warp_call(&m);
    for (int i = 0; i < 4; i++) {
        c[i] = m.c[i];
    }
}

// ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: n 8 x 8 matrices
// of 16-bit elements (8 rows of 16 bytes each); lane 8i + r gives the
// address of row r of matrix i (lanes past 8n give none). Lane l receives
// r[i] = M_i[l / 4][2(l % 4)], M_i[l / 4][2(l % 4) + 1] (low, high), and
// with .trans M_i[2(l % 4)][l / 4], M_i[2(l % 4) + 1][l / 4]. For int8 data
// (rows of 16 bytes) that is bytes 4(l % 4)..4(l % 4) + 3 of row l / 4.
struct EmuLdmatrix {
    EmuWarpCallHead head;
    const unsigned char* row;
    unsigned r[4];
    int n, trans;
};
inline unsigned emu_ld_u16(const unsigned char* p) { return (unsigned)p[0] | ((unsigned)p[1] << 8); }
inline void emu_ldmatrix_run(void* const* lanes) {
    const EmuLdmatrix* l0 = (const EmuLdmatrix*)lanes[0];
    int n = l0->n;
    for (unsigned l = 0; l < 32; l++) {
        EmuLdmatrix* me = (EmuLdmatrix*)lanes[l];
        for (int i = 0; i < n; i++) {
            unsigned g = l >> 2, t = l & 3;
            unsigned lo, hi;
            if (l0->trans) {
                lo = emu_ld_u16(((const EmuLdmatrix*)lanes[8 * i + 2 * t])->row + 2 * g);
                hi = emu_ld_u16(((const EmuLdmatrix*)lanes[8 * i + 2 * t + 1])->row + 2 * g);
            } else {
                const unsigned char* row = ((const EmuLdmatrix*)lanes[8 * i + g])->row;
                lo = emu_ld_u16(row + 4 * t);
                hi = emu_ld_u16(row + 4 * t + 2);
            }
            me->r[i] = lo | (hi << 16);
        }
    }
}
__forceinline__ void emu_ldmatrix(unsigned* r, const void* row, int n, int trans) {
    EmuLdmatrix m;
    m.head.fn = emu_ldmatrix_run;
    m.row = (const unsigned char*)row;
    m.n = n;
    m.trans = trans;
    emu_warp_call(&m);
    for (int i = 0; i < n; i++) {
        r[i] = m.r[i];
    }
}

// cp.async (the runtime's queue, see `emu_cp_async`).
#define GGML_CUDA_EMU_CP_ASYNC 1

// The butterfly reductions of kernels.cu (`warp_sum`, `warp_max`: five
// `__shfl_xor_sync` steps over the full warp, offsets 16 down to 1, each
// lane combining its own value with its partner's) as one warp collective
// instead of five: `EMU_GATHER` hands every lane the 32 values the lanes
// brought, and each lane evaluates its own result of the five steps with
// the kernel's operation, in the same operand order (31 operations), so it
// gets the bits the shuffles give. The GPU (and NVRTC) compile the
// shuffles themselves.
#define GGML_CUDA_EMU_WARP_BUTTERFLY 1
// The calling thread's lane.
__forceinline__ unsigned emu_lane() {
    return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u;
}
// Lane l's result of the five steps from the 32 values `all`, with the 31
// operations it depends on: before the step of offset h (16, 8, ..., 1),
// b[m] holds lane (l ^ m)'s value for m < 2h, and lane (l ^ m) combines its
// own value with lane (l ^ m ^ h)'s, which is b[m + h].
template <class Op>
__forceinline__ float emu_butterfly_value(const unsigned long long* all, unsigned l, Op op) {
    float b[32];
    for (unsigned m = 0; m < 32; m++) {
        b[m] = emu_from_bits<float>(all[l ^ m]);
    }
    for (unsigned h = 16; h > 0; h >>= 1) {
        for (unsigned m = 0; m < h; m++) {
            b[m] = op(b[m], b[m + h]);
        }
    }
    return b[0];
}
// The 32 values the lanes of the warp bring (lane order), valid until the
// warp's next collective completes.
__forceinline__ const unsigned long long* emu_warp_gather(unsigned long long v) {
    return (const unsigned long long*)(uintptr_t)emu_warp_op(EMU_GATHER, 0xffffffffu, v, 0,
                                                              warpSize);
}
// Lane l's result of the butterfly within its segment of `width` lanes
// (offsets width / 2 down to 1), as the shuffles compute it.
template <class Op>
__forceinline__ float emu_butterfly_value_w(const unsigned long long* all, unsigned l,
                                            unsigned width, Op op) {
    float b[32];
    for (unsigned m = 0; m < width; m++) {
        b[m] = emu_from_bits<float>(all[l ^ m]);
    }
    for (unsigned h = width / 2; h > 0; h >>= 1) {
        for (unsigned m = 0; m < h; m++) {
            b[m] = op(b[m], b[m + h]);
        }
    }
    return b[0];
}
template <class Op>
__forceinline__ float emu_warp_butterfly(float v, Op op) {
    const unsigned long long* all = (const unsigned long long*)(uintptr_t)emu_warp_op(
        EMU_GATHER, 0xffffffffu, emu_bits(v), 0, warpSize);
    return emu_butterfly_value(all, emu_lane(), op);
}

// --------------------------------------------------------------- atomics

#define EMU_SC __ATOMIC_SEQ_CST

#define EMU_ATOMIC_INT(T)                                                                   \
    __forceinline__ T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, EMU_SC); }    \
    __forceinline__ T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, EMU_SC); }    \
    __forceinline__ T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, EMU_SC); }      \
    __forceinline__ T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, EMU_SC); }    \
    __forceinline__ T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, EMU_SC); }    \
    __forceinline__ T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, EMU_SC); }  \
    __forceinline__ T atomicCAS(T* p, T cmp, T v) {                                        \
        __atomic_compare_exchange_n(p, &cmp, v, false, EMU_SC, EMU_SC);                     \
        return cmp;                                                                         \
    }                                                                                       \
    __forceinline__ T atomicMax(T* p, T v) {                                               \
        T old = __atomic_load_n(p, EMU_SC);                                                 \
        while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, EMU_SC, EMU_SC)) { \
        }                                                                                   \
        return old;                                                                         \
    }                                                                                       \
    __forceinline__ T atomicMin(T* p, T v) {                                               \
        T old = __atomic_load_n(p, EMU_SC);                                                 \
        while (old > v && !__atomic_compare_exchange_n(p, &old, v, false, EMU_SC, EMU_SC)) { \
        }                                                                                   \
        return old;                                                                         \
    }

EMU_ATOMIC_INT(int)
EMU_ATOMIC_INT(unsigned)
EMU_ATOMIC_INT(long long)
EMU_ATOMIC_INT(unsigned long long)

// Floating-point read-modify-write through a compare-and-swap on the bits.
template <class F, class U, class Op>
__forceinline__ F emu_atomic_float(F* p, F v, Op op) {
    U* u = (U*)p;
    U old = __atomic_load_n(u, EMU_SC);
    for (;;) {
        F cur = emu_from_bits<F>(old);
        U next = (U)emu_bits(op(cur, v));
        if (__atomic_compare_exchange_n(u, &old, next, false, EMU_SC, EMU_SC)) {
            return cur;
        }
    }
}

__forceinline__ float atomicAdd(float* p, float v) {
    return emu_atomic_float<float, unsigned>(p, v, [](float a, float b) { return a + b; });
}
__forceinline__ double atomicAdd(double* p, double v) {
    return emu_atomic_float<double, unsigned long long>(p, v,
                                                        [](double a, double b) { return a + b; });
}
__forceinline__ float atomicExch(float* p, float v) {
    return emu_from_bits<float>(__atomic_exchange_n((unsigned*)p, (unsigned)emu_bits(v), EMU_SC));
}
// CUDA's wrapping increment/decrement.
__forceinline__ unsigned atomicInc(unsigned* p, unsigned limit) {
    unsigned old = __atomic_load_n(p, EMU_SC);
    while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1u, false, EMU_SC,
                                        EMU_SC)) {
    }
    return old;
}
__forceinline__ unsigned atomicDec(unsigned* p, unsigned limit) {
    unsigned old = __atomic_load_n(p, EMU_SC);
    while (!__atomic_compare_exchange_n(p, &old, (old == 0u || old > limit) ? limit : old - 1u,
                                        false, EMU_SC, EMU_SC)) {
    }
    return old;
}

__forceinline__ void __threadfence() { __atomic_thread_fence(EMU_SC); }
__forceinline__ void __threadfence_block() { __atomic_thread_fence(EMU_SC); }

// ------------------------------------------------------------ intrinsics

template <class T>
__forceinline__ T __ldg(const T* p) {
    return *p;
}

// Four int8 (or uint8) products summed into an int32 accumulator.
__forceinline__ int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) {
        c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    }
    return c;
}
__forceinline__ unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; i++) {
        c += ((a >> (8 * i)) & 0xffu) * ((b >> (8 * i)) & 0xffu);
    }
    return c;
}

// Fast-math intrinsics, here at full precision.
__forceinline__ float __expf(float x) { return expf(x); }
__forceinline__ float __logf(float x) { return logf(x); }
__forceinline__ float __sinf(float x) { return sinf(x); }
__forceinline__ float __cosf(float x) { return cosf(x); }
__forceinline__ float __powf(float x, float y) { return powf(x, y); }
__forceinline__ float __fdividef(float x, float y) { return x / y; }
__forceinline__ float __frcp_rn(float x) { return 1.0f / x; }
__forceinline__ float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
__forceinline__ float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
__forceinline__ float rsqrtf(float x) { return 1.0f / sqrtf(x); }

__forceinline__ float __int_as_float(int x) { return emu_from_bits<float>((unsigned)x); }
__forceinline__ int __float_as_int(float x) { return (int)(unsigned)emu_bits(x); }
__forceinline__ float __uint_as_float(unsigned x) { return emu_from_bits<float>(x); }
__forceinline__ unsigned __float_as_uint(float x) { return (unsigned)emu_bits(x); }

__forceinline__ int __popc(unsigned x) { return __builtin_popcount(x); }
__forceinline__ int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
__forceinline__ int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
__forceinline__ int __ffs(int x) { return __builtin_ffs(x); }

#define EMU_MINMAX(T)                                          \
    __forceinline__ T min(T a, T b) { return a < b ? a : b; } \
    __forceinline__ T max(T a, T b) { return a > b ? a : b; }
EMU_MINMAX(int)
EMU_MINMAX(unsigned)
EMU_MINMAX(long long)
EMU_MINMAX(unsigned long long)
__forceinline__ float min(float a, float b) { return fminf(a, b); }
__forceinline__ float max(float a, float b) { return fmaxf(a, b); }
