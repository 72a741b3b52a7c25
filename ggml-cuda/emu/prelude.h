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
