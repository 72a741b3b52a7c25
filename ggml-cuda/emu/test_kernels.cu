// Test-only kernels for the CPU emulator (`tests/emu_kernels.rs`): compiled
// into the emulator library by build.rs, never sent to NVRTC. Each one
// exercises one part of the execution model; `launch` finds them by name
// like the kernels of kernels.cu.

#define BIG_SHARED_FLOATS (16 * 1024)

// Sum of each row of `x` ([rows, n], one block per row) by a shared-memory
// tree with __syncthreads (blockDim.x a power of 2, at most 1024).
extern "C" __global__ void t_block_sum(const float* x, float* out, int n) {
    __shared__ float sh[1024];
    const float* row = x + (long long)blockIdx.x * n;
    float s = 0.0f;
    for (int k = threadIdx.x; k < n; k += blockDim.x) {
        s += row[k];
    }
    sh[threadIdx.x] = s;
    __syncthreads();
    for (unsigned h = blockDim.x / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) {
            sh[threadIdx.x] += sh[threadIdx.x + h];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = sh[0];
    }
}

// Every shuffle kind on int values; 8 results per thread in `out`.
extern "C" __global__ void t_warp_shuffles(const int* in, int* out) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int v = in[t];
    int* o = out + 8 * t;
    // butterfly sum: every lane gets the warp's sum
    int s = v;
    for (int m = 16; m > 0; m >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, m);
    }
    o[0] = s;
    // tree sum down to lane 0
    int d = v;
    for (int k = 16; k > 0; k >>= 1) {
        d += __shfl_down_sync(0xffffffffu, d, k);
    }
    o[1] = d;
    // inclusive prefix sum
    int p = v;
    for (int k = 1; k < 32; k <<= 1) {
        int y = __shfl_up_sync(0xffffffffu, p, k);
        if (lane >= k) {
            p += y;
        }
    }
    o[2] = p;
    // broadcast of lane 5, and a rotation by 3 (srcLane per lane)
    o[3] = __shfl_sync(0xffffffffu, v, 5);
    o[4] = __shfl_sync(0xffffffffu, v, lane + 3);
    // 8-lane segments: butterfly within the segment, shift down within it
    int s8 = v;
    for (int m = 4; m > 0; m >>= 1) {
        s8 += __shfl_xor_sync(0xffffffffu, s8, m, 8);
    }
    o[5] = s8;
    o[6] = __shfl_down_sync(0xffffffffu, v, 2, 8);
    // a shuffle of a 64-bit value
    long long big = ((long long)v << 32) | (unsigned)lane;
    o[7] = (int)(__shfl_xor_sync(0xffffffffu, big, 1) >> 32);
}

// Votes, __activemask and the counting barriers; 7 results per thread.
// pred = in[t] != 0. Threads with in[t] < 0 leave before the warp votes
// (their lanes are not in the mask the others use).
extern "C" __global__ void t_votes(const int* in, unsigned* out) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    int pred = in[t] != 0;
    unsigned* o = out + 7 * t;
    o[0] = (unsigned)__syncthreads_count(pred);
    o[1] = (unsigned)__syncthreads_and(pred);
    o[2] = (unsigned)__syncthreads_or(pred);
    o[3] = __ballot_sync(0xffffffffu, pred);
    o[4] = (unsigned)__all_sync(0xffffffffu, pred);
    o[5] = (unsigned)__any_sync(0xffffffffu, pred);
    // the upper half of each warp leaves; the lower half votes among itself
    if ((threadIdx.x & 31) >= 16) {
        o[6] = 0xdeadu;
        return;
    }
    __syncwarp(0x0000ffffu);
    o[6] = __activemask();
}

// Atomics from every thread of the grid:
// i[0] += 1 per thread, i[1] += 1 by a CAS loop, i[2] = max(global id),
// i[3] = min(global id), u[0] |= 1 << (id % 32), u[1] = exch (someone's id),
// f[0] += 0.5 per thread, ull[0] += id.
extern "C" __global__ void t_atomics(int* i, unsigned* u, float* f, unsigned long long* ull) {
    int id = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    atomicAdd(&i[0], 1);
    int old = i[1];
    for (;;) {
        int seen = atomicCAS(&i[1], old, old + 1);
        if (seen == old) {
            break;
        }
        old = seen;
    }
    atomicMax(&i[2], id);
    atomicMin(&i[3], id);
    atomicOr(&u[0], 1u << (id % 32));
    atomicExch(&u[1], (unsigned)id);
    atomicAdd(&f[0], 0.5f);
    atomicAdd(&ull[0], (unsigned long long)id);
    // a barrier between atomics: still every thread in the block
    __syncthreads();
    atomicAdd(&i[4], 1);
}

// Coordinates of a 3D block in a 3D grid: out[linear global id] =
// (linear block id << 16) | linear thread id in the block (x fastest). In
// the z == 0 slice of an (8, 4, z) block, thread lin = y * 8 + x writes
// tile[y][x] = lin and, after the barrier, reads tile[lin % 4][lin / 4]
// (another thread's write) into transposed[block * 32 + lin].
extern "C" __global__ void t_dims3(int* out, int* transposed) {
    __shared__ int tile[4][8];
    unsigned lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    unsigned nb = blockDim.x * blockDim.y * blockDim.z;
    unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    out[b * nb + lin] = (int)((b << 16) | lin);
    if (threadIdx.z == 0) {
        tile[threadIdx.y][threadIdx.x] = (int)lin;
    }
    __syncthreads();
    if (threadIdx.z == 0) {
        transposed[b * 32 + lin] = tile[lin % 4][lin / 4];
    }
}

// Dynamic shared memory: each block reverses its slice of `in`.
extern "C" __global__ void t_dynamic_shared(const float* in, float* out) {
    extern __shared__ float buf[];
    unsigned base = blockIdx.x * blockDim.x;
    buf[threadIdx.x] = in[base + threadIdx.x];
    __syncthreads();
    out[base + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

// A barrier only the first warp reaches: hangs a GPU.
extern "C" __global__ void t_divergent_barrier(int* out) {
    if (threadIdx.x < 32) {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}

// Two different __syncthreads for the two halves of the block.
extern "C" __global__ void t_split_barrier(int* out) {
    if (threadIdx.x < blockDim.x / 2) {
        __syncthreads();
        out[threadIdx.x] = 1;
    } else {
        __syncthreads();
        out[threadIdx.x] = 2;
    }
}

// A full-warp shuffle that half of the warp never reaches.
extern "C" __global__ void t_divergent_shuffle(int* out) {
    if ((threadIdx.x & 31) >= 16) {
        return;
    }
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}

// A lane that calls a shuffle with a mask that does not name it.
extern "C" __global__ void t_bad_mask(int* out) {
    out[threadIdx.x] = __shfl_xor_sync(0x1u, (int)threadIdx.x, 1);
}

// 64 KiB of static shared memory: over the 48 KiB static limit.
extern "C" __global__ void t_big_shared(float* out) {
    __shared__ float big[BIG_SHARED_FLOATS];
    big[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = big[BIG_SHARED_FLOATS - 1 - threadIdx.x];
}

// A kernel compiled for at most 64 threads per block.
extern "C" __global__ void __launch_bounds__(64) t_bounded(int* out) {
    out[threadIdx.x] = (int)threadIdx.x;
}

// Switch-heavy loop for timing: `iters` warp shuffles per thread.
extern "C" __global__ void t_shuffle_loop(float* out, int iters) {
    float v = (float)threadIdx.x;
    for (int i = 0; i < iters; i++) {
        v += __shfl_xor_sync(0xffffffffu, v, 1 + (i & 15));
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

// The intrinsics kernels use or will use, one thread per input pair:
// io[8 t ..] = dp4a signed, dp4a unsigned, __ldg, min, max, __popc, __clz,
// __float_as_int(1.5f); fo[4 t ..] = __expf, __fdividef, rsqrtf, __saturatef.
extern "C" __global__ void t_intrinsics(const int* a, const int* b, int* io, float* fo) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    int x = __ldg(&a[t]);
    int y = __ldg(&b[t]);
    int* o = io + 8 * t;
    o[0] = __dp4a(x, y, 7);
    o[1] = (int)__dp4a((unsigned)x, (unsigned)y, 7u);
    o[2] = __ldg(a + t);
    o[3] = min(x, y);
    o[4] = max(x, y);
    o[5] = __popc((unsigned)x);
    o[6] = __clz(x);
    o[7] = __float_as_int(1.5f);
    float f = (float)(x & 0xff) / 64.0f;
    float* p = fo + 4 * t;
    p[0] = __expf(f);
    p[1] = __fdividef(f, 3.0f);
    p[2] = rsqrtf(f + 1.0f);
    p[3] = __saturatef(f - 1.0f);
}

// A helper with its own __shared__ scratch: counted in the static shared
// memory of every kernel that calls it (here 3 doubles + 64 floats = 280
// bytes). Every thread gets the block's maximum (blockDim.x <= 64).
__device__ float helper_block_max(float v) {
    __shared__ float scratch[64];
    scratch[threadIdx.x] = v;
    __syncthreads();
    float m = scratch[0];
    for (unsigned i = 1; i < blockDim.x; i++) {
        m = fmaxf(m, scratch[i]);
    }
    __syncthreads();
    return m;
}

extern "C" __global__ void t_helper_shared(const float* x, float* out) {
    __shared__ double extra[3];
    if (threadIdx.x < 3) {
        extra[threadIdx.x] = 1.0;
    }
    float m = helper_block_max(x[blockIdx.x * blockDim.x + threadIdx.x]);
    if (threadIdx.x == 0) {
        out[blockIdx.x] = m + (float)extra[2];
    }
}

// sm_80 warp reductions and the vector types: out[8 t ..] = add (signed),
// min (signed), max (signed), min (unsigned), and, or, xor, and the sum of
// a float4 and an int2 loaded from `v4` / `v2`.
extern "C" __global__ void t_warp_reduce(const int* in, const float4* v4, const int2* v2,
                                         int* out) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t];
    int* o = out + 8 * t;
    o[0] = __reduce_add_sync(0xffffffffu, v);
    o[1] = __reduce_min_sync(0xffffffffu, v);
    o[2] = __reduce_max_sync(0xffffffffu, v);
    o[3] = (int)__reduce_min_sync(0xffffffffu, (unsigned)v);
    o[4] = (int)__reduce_and_sync(0xffffffffu, (unsigned)v);
    o[5] = (int)__reduce_or_sync(0xffffffffu, (unsigned)v);
    o[6] = (int)__reduce_xor_sync(0xffffffffu, (unsigned)v);
    float4 f = v4[t];
    int2 i = v2[t];
    float4 g = make_float4(f.x, f.y, f.z, f.w);
    o[7] = (int)(g.x + g.y + g.z + g.w) + i.x + i.y;
}

// The emulator's one-collective butterflies (`emu_warp_butterfly`, which
// kernels.cu's warp_sum / warp_max use on the emulator)
// against the five __shfl_xor_sync steps they stand for; 4 results per
// thread: shuffle sum, collective sum, shuffle max, collective max (bits).
extern "C" __global__ void t_warp_butterfly(const float* in, unsigned* out) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    float v = in[t];
    float s = v, m = v;
    for (int o = 16; o > 0; o >>= 1) {
        s += __shfl_xor_sync(0xffffffffu, s, o);
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    }
    float cs = emu_warp_butterfly(v, [](float a, float b) { return a + b; });
    float cm = emu_warp_butterfly(v, [](float a, float b) { return fmaxf(a, b); });
    unsigned* o = out + 4 * t;
    o[0] = __float_as_uint(s);
    o[1] = __float_as_uint(cs);
    o[2] = __float_as_uint(m);
    o[3] = __float_as_uint(cm);
}

// ------------------------------------------- warp-wide instructions
//
// Each test kernel below builds every lane's fragments from matrices in
// global memory by the PTX ISA's fragment tables (written out here, apart
// from the emulation's own indexing), runs one emulated instruction of the
// whole warp (one warp per launch) and writes every lane's results back by
// the same tables; the test compares with a scalar product.

// mma.sync m16n8k32 s8: A [16][32] int8 row-major, B [8][32] (column n at
// B + 32 n), C [16][8] int32 in (accumulator) and out.
extern "C" __global__ void t_mma_s8_k32(const signed char* A, const signed char* B, int* C) {
    int l = threadIdx.x, g = l >> 2, t = l & 3;
    int a[4], b[2], c[4];
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i & 1);
        int col0 = 4 * t + 16 * (i >> 1);
        memcpy(&a[i], A + 32 * row + col0, 4);
    }
    for (int i = 0; i < 2; i++) {
        memcpy(&b[i], B + 32 * g + 4 * t + 16 * i, 4);
    }
    for (int i = 0; i < 4; i++) {
        c[i] = C[8 * (g + 8 * (i >> 1)) + 2 * t + (i & 1)];
    }
    emu_mma_s8_16x8x32(c, a, b);
    for (int i = 0; i < 4; i++) {
        C[8 * (g + 8 * (i >> 1)) + 2 * t + (i & 1)] = c[i];
    }
}

// mma.sync m8n8k16 s8: A [8][16], B [8][16] (column n at B + 16 n), C [8][8].
extern "C" __global__ void t_mma_s8_m8n8k16(const signed char* A, const signed char* B, int* C) {
    int l = threadIdx.x, g = l >> 2, t = l & 3;
    int a, b, c[2];
    memcpy(&a, A + 16 * g + 4 * t, 4);
    memcpy(&b, B + 16 * g + 4 * t, 4);
    c[0] = C[8 * g + 2 * t];
    c[1] = C[8 * g + 2 * t + 1];
    emu_mma_s8_8x8x16(c, a, b);
    C[8 * g + 2 * t] = c[0];
    C[8 * g + 2 * t + 1] = c[1];
}

// mma.sync m16n8k16 f16/bf16 (bf 1) with f32 C, or m16n8k8 (k8 1, f16):
// A [16][16] 16-bit row-major, B [8][16] (column n at B + 16 n), C [16][8].
extern "C" __global__ void t_mma_f16(const unsigned short* A, const unsigned short* B, float* C,
                                     int bf, int k8) {
    int l = threadIdx.x, g = l >> 2, t = l & 3;
    unsigned a[4], b[2];
    float c[4];
    for (int i = 0; i < 4; i++) {
        int row = g + 8 * (i & 1);
        int col0 = 2 * t + 8 * (i >> 1);
        a[i] = (unsigned)A[16 * row + col0] | ((unsigned)A[16 * row + col0 + 1] << 16);
    }
    for (int i = 0; i < 2; i++) {
        int k0 = 2 * t + 8 * i;
        b[i] = (unsigned)B[16 * g + k0] | ((unsigned)B[16 * g + k0 + 1] << 16);
    }
    for (int i = 0; i < 4; i++) {
        c[i] = C[8 * (g + 8 * (i >> 1)) + 2 * t + (i & 1)];
    }
    if (k8) {
        emu_mma_f16_16x8x8(c, a, b[0]);
    } else {
        emu_mma_f16_16x8x16(c, a, b, bf);
    }
    for (int i = 0; i < 4; i++) {
        C[8 * (g + 8 * (i >> 1)) + 2 * t + (i & 1)] = c[i];
    }
}

// ldmatrix x{1,2,4} (trans 0/1) from a shared copy of `src` (32 rows of 8
// 16-bit elements, row r of tile i at row 8 i + r): lane 8 i + r passes row
// `perm[8 i + r]` of the copy as row r of tile i, so the tiles' rows need
// not be in order; out[4 l + i] = lane l's register i.
extern "C" __global__ void t_ldmatrix(const unsigned short* src, const int* perm,
                                      unsigned* out, int n, int trans) {
    __shared__ uint4 sh4[32];
    unsigned short* sh = (unsigned short*)sh4;
    int l = threadIdx.x;
    for (int i = 0; i < 8; i++) {
        sh[8 * l + i] = src[8 * l + i];
    }
    __syncwarp();
    unsigned r[4] = {0, 0, 0, 0};
    emu_ldmatrix(r, sh + 8 * perm[l], n, trans);
    for (int i = 0; i < 4; i++) {
        out[4 * l + i] = r[i];
    }
}

// cp.async: each thread copies 4 words of `src` (16, 8 and two 4-byte
// copies) in three commit groups, then reads its shared words after
// wait_group 2, 1 and 0 (and after the barrier each time): out[12 t + 4 s + j]
// = word j after step s.
extern "C" __global__ void t_cp_async(const unsigned* src, unsigned* out) {
    __shared__ uint4 sh4[64 * 2];
    unsigned* sh = (unsigned*)sh4;
    int t = threadIdx.x;
    unsigned* d = sh + 8 * t;
    const unsigned* s = src + 8 * t;
    emu_cp_async(d, s, 16);
    emu_cp_async_commit();
    emu_cp_async(d + 4, s + 4, 8);
    emu_cp_async_commit();
    emu_cp_async(d + 6, s + 6, 4);
    emu_cp_async(d + 7, s + 7, 4);
    emu_cp_async_commit();
    for (int step = 0; step < 3; step++) {
        emu_cp_async_wait((unsigned)(2 - step));
        __syncthreads();
        for (int j = 0; j < 4; j++) {
            // words 0, 4, 6, 7: one of each group's copies
            int w = j == 0 ? 0 : (j == 1 ? 4 : (j == 2 ? 6 : 7));
            out[12 * t + 4 * step + j] = sh[8 * t + w];
        }
    }
}

// A misaligned cp.async (an error, not a copy).
extern "C" __global__ void t_cp_async_misaligned(const unsigned char* src) {
    __shared__ uint4 sh[4];
    emu_cp_async(sh, src, 16);
}
