// ------------------------- asynchronous copies and tensor-core instructions
//
// The warp-level instructions of the prompt kernels (MMQ, flash attention)
// as inline PTX on a GPU and as the emulator's warp-wide calls on the CPU
// (`emu/prelude.h`, which documents each fragment layout; the emulator's
// tests check them against a scalar model of the PTX spec):
// - `cp_async16/8/4` + `cp_async_commit` + `cp_async_wait<N>`: global to
//   shared copies that do not block the thread (sm_80+; plain loads and
//   stores elsewhere, where the wait is a no-op);
// - `ldmatrix_x1/x2/x4` (sm_75+): 8 x 8 tiles of 16-bit elements from
//   shared memory into the MMA fragment layout (for int8: 8 rows of 16
//   bytes), and `ldmatrix_x2_trans` / `ldmatrix_x4_trans` transposed;
// - `mma_s8_16x8x32` (int8, int32 accumulators): m16n8k32 on sm_80+, four
//   m8n8k16 on sm_75, shuffles and `__dp4a` before;
// - `mma_f16_16x8x16` / `mma_bf16_16x8x16` (f32 accumulators): m16n8k16 on
//   sm_80+ (f16 also on sm_75 as two m16n8k8).
// Every lane of the warp must call the warp-wide ones together.

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define GGML_CUDA_CP_ASYNC 1
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
#define GGML_CUDA_LDMATRIX 1
#endif

// The shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ u32 smem_addr(const void* p) {
#if defined(__CUDA_ARCH__)
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
#else
    return (u32)(u64)p;
#endif
}

// `bytes` (16, 8 or 4) from global `src` to shared `dst`, both aligned to
// it, completed by a later `cp_async_wait` covering its commit group.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
#if defined(GGML_CUDA_CP_ASYNC)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src));
#elif defined(GGML_CUDA_EMU_CP_ASYNC)
    emu_cp_async(dst, src, 16);
#else
    *(uint4*)dst = *(const uint4*)src;
#endif
}

__device__ __forceinline__ void cp_async8(void* dst, const void* src) {
#if defined(GGML_CUDA_CP_ASYNC)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(smem_addr(dst)), "l"(src));
#elif defined(GGML_CUDA_EMU_CP_ASYNC)
    emu_cp_async(dst, src, 8);
#else
    *(u64*)dst = *(const u64*)src;
#endif
}

__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
#if defined(GGML_CUDA_CP_ASYNC)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src));
#elif defined(GGML_CUDA_EMU_CP_ASYNC)
    emu_cp_async(dst, src, 4);
#else
    *(u32*)dst = *(const u32*)src;
#endif
}

// Close this thread's group of copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#if defined(GGML_CUDA_CP_ASYNC)
    asm volatile("cp.async.commit_group;");
#elif defined(GGML_CUDA_EMU_CP_ASYNC)
    emu_cp_async_commit();
#endif
}

// Wait until at most `N` of this thread's committed groups are in flight
// (then `__syncthreads` makes every thread's copies visible to the block).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(GGML_CUDA_CP_ASYNC)
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
#elif defined(GGML_CUDA_EMU_CP_ASYNC)
    emu_cp_async_wait(N);
#endif
}

#if !defined(GGML_CUDA_LDMATRIX) && !defined(GGML_CUDA_EMU_WARP_MMA)
// ldmatrix before sm_75: every lane reads its own elements of the tiles
// whose row addresses the lanes hold (shuffles of the addresses).
__device__ __forceinline__ u32 ldmatrix_lane(const void* row, int i, int trans) {
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int t = lane & 3;
    if (trans) {
        const u8* r0 = (const u8*)__shfl_sync(0xffffffffu, (u64)row, 8 * i + 2 * t);
        const u8* r1 = (const u8*)__shfl_sync(0xffffffffu, (u64)row, 8 * i + 2 * t + 1);
        return (u32)*(const u16*)(r0 + 2 * g) | ((u32) * (const u16*)(r1 + 2 * g) << 16);
    }
    const u8* r = (const u8*)__shfl_sync(0xffffffffu, (u64)row, 8 * i + g);
    return *(const u32*)(r + 4 * t);
}
#endif

// One 8 x 8 tile of 16-bit elements (row address from lanes 0..7).
__device__ __forceinline__ void ldmatrix_x1(u32* r, const void* row) {
#if defined(GGML_CUDA_LDMATRIX)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
                 : "=r"(r[0])
                 : "r"(smem_addr(row)));
#elif defined(GGML_CUDA_EMU_WARP_MMA)
    emu_ldmatrix(r, row, 1, 0);
#else
    r[0] = ldmatrix_lane(row, 0, 0);
#endif
}

// Two tiles (rows from lanes 0..7 and 8..15).
__device__ __forceinline__ void ldmatrix_x2(u32* r, const void* row) {
#if defined(GGML_CUDA_LDMATRIX)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(row)));
#elif defined(GGML_CUDA_EMU_WARP_MMA)
    emu_ldmatrix(r, row, 2, 0);
#else
    for (int i = 0; i < 2; i++) {
        r[i] = ldmatrix_lane(row, i, 0);
    }
#endif
}

// Four tiles (rows from lanes 8i..8i + 7 for tile i).
__device__ __forceinline__ void ldmatrix_x4(u32* r, const void* row) {
#if defined(GGML_CUDA_LDMATRIX)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
#elif defined(GGML_CUDA_EMU_WARP_MMA)
    emu_ldmatrix(r, row, 4, 0);
#else
    for (int i = 0; i < 4; i++) {
        r[i] = ldmatrix_lane(row, i, 0);
    }
#endif
}

// Two tiles, transposed (16-bit elements only).
__device__ __forceinline__ void ldmatrix_x2_trans(u32* r, const void* row) {
#if defined(GGML_CUDA_LDMATRIX)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(smem_addr(row)));
#elif defined(GGML_CUDA_EMU_WARP_MMA)
    emu_ldmatrix(r, row, 2, 1);
#else
    for (int i = 0; i < 2; i++) {
        r[i] = ldmatrix_lane(row, i, 1);
    }
#endif
}

// Four tiles, transposed.
__device__ __forceinline__ void ldmatrix_x4_trans(u32* r, const void* row) {
#if defined(GGML_CUDA_LDMATRIX)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
#elif defined(GGML_CUDA_EMU_WARP_MMA)
    emu_ldmatrix(r, row, 4, 1);
#else
    for (int i = 0; i < 4; i++) {
        r[i] = ldmatrix_lane(row, i, 1);
    }
#endif
}

// m8n8k16 int8 (sm_75): c (8 x 8) += A (8 x 16) * B (16 x 8), a =
// A[g][4t..4t+3], b = B[4t..4t+3][g], c = C[g][2t], C[g][2t + 1].
__device__ __forceinline__ void mma_s8_8x8x16(int* c, int a, int b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0, %1}, {%2}, {%3}, {%0, %1};"
                 : "+r"(c[0]), "+r"(c[1])
                 : "r"(a), "r"(b));
#elif defined(GGML_CUDA_EMU_WARP_MMA)
    emu_mma_s8_8x8x16(c, a, b);
#else
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int t = lane & 3;
    for (int j = 0; j < 4; j++) {
        int aj = __shfl_sync(0xffffffffu, a, 4 * g + j);
        int b0 = __shfl_sync(0xffffffffu, b, 8 * t + j);
        int b1 = __shfl_sync(0xffffffffu, b, 8 * t + 4 + j);
        c[0] = __dp4a(aj, b0, c[0]);
        c[1] = __dp4a(aj, b1, c[1]);
    }
#endif
}

// m16n8k32 as four m8n8k16: rows g (c[0..1]) and g + 8 (c[2..3]), k 0..15
// (a[0] / a[1] with b[0]) and 16..31 (a[2] / a[3] with b[1]).
__device__ __forceinline__ void mma_s8_16x8x32_by_m8n8(int* c, const int* a, const int* b) {
    mma_s8_8x8x16(c, a[0], b[0]);
    mma_s8_8x8x16(c, a[2], b[1]);
    mma_s8_8x8x16(c + 2, a[1], b[0]);
    mma_s8_8x8x16(c + 2, a[3], b[1]);
}

// c (16 x 8 int32) += A (16 x 32 int8) * B (32 x 8 int8), PTX's m16n8k32
// fragments (prelude.h: `emu_mma_s8_16x8x32`).
__device__ __forceinline__ void mma_s8_16x8x32(int* c, const int* a, const int* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(GGML_CUDA_EMU_WARP_MMA)
    if (emu_arch() >= 800) {
        emu_mma_s8_16x8x32(c, a, b);
    } else {
        mma_s8_16x8x32_by_m8n8(c, a, b);
    }
#else
    mma_s8_16x8x32_by_m8n8(c, a, b);
#endif
}

// c (16 x 8 f32) += A (16 x 16 f16) * B (16 x 8 f16), PTX's m16n8k16
// fragments (prelude.h: `emu_mma_f16_16x8x16`); a, b hold two halves each.
__device__ __forceinline__ void mma_f16_16x8x16(float* c, const u32* a, const u32* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 750
    // two m16n8k8: k 0..7 (a[0], a[1], b[0]) and 8..15 (a[2], a[3], b[1])
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, "
                 "{%6}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, "
                 "{%6}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[2]), "r"(a[3]), "r"(b[1]));
#elif defined(GGML_CUDA_EMU_WARP_MMA)
    if (emu_arch() >= 800) {
        emu_mma_f16_16x8x16(c, a, b, 0);
    } else {
        emu_mma_f16_16x8x8(c, a, b[0]);
        emu_mma_f16_16x8x8(c, a + 2, b[1]);
    }
#else
    // shuffles: lane (g, t) needs A rows g, g + 8 and B column 2t, 2t + 1
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int t = lane & 3;
    for (int k = 0; k < 16; k++) {
        int q = (k & 7) >> 1;
        int hi = k & 1;
        int ra = (k >> 3) * 2;
        u32 a0 = __shfl_sync(0xffffffffu, a[ra], 4 * g + q);
        u32 a1 = __shfl_sync(0xffffffffu, a[ra + 1], 4 * g + q);
        u32 b0 = __shfl_sync(0xffffffffu, b[k >> 3], 4 * (2 * t) + q);
        u32 b1 = __shfl_sync(0xffffffffu, b[k >> 3], 4 * (2 * t + 1) + q);
        float av0 = h2f((u16)(a0 >> (16 * hi)));
        float av1 = h2f((u16)(a1 >> (16 * hi)));
        float bv0 = h2f((u16)(b0 >> (16 * hi)));
        float bv1 = h2f((u16)(b1 >> (16 * hi)));
        c[0] += av0 * bv0;
        c[1] += av0 * bv1;
        c[2] += av1 * bv0;
        c[3] += av1 * bv1;
    }
#endif
}

// The same with bfloat16 inputs (sm_80+; the emulator; shuffles elsewhere).
__device__ __forceinline__ void mma_bf16_16x8x16(float* c, const u32* a, const u32* b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, "
        "%7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(GGML_CUDA_EMU_WARP_MMA)
    emu_mma_f16_16x8x16(c, a, b, 1);
#else
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int t = lane & 3;
    for (int k = 0; k < 16; k++) {
        int q = (k & 7) >> 1;
        int hi = k & 1;
        int ra = (k >> 3) * 2;
        u32 a0 = __shfl_sync(0xffffffffu, a[ra], 4 * g + q);
        u32 a1 = __shfl_sync(0xffffffffu, a[ra + 1], 4 * g + q);
        u32 b0 = __shfl_sync(0xffffffffu, b[k >> 3], 4 * (2 * t) + q);
        u32 b1 = __shfl_sync(0xffffffffu, b[k >> 3], 4 * (2 * t + 1) + q);
        float av0 = bf2f((u16)(a0 >> (16 * hi)));
        float av1 = bf2f((u16)(a1 >> (16 * hi)));
        float bv0 = bf2f((u16)(b0 >> (16 * hi)));
        float bv1 = bf2f((u16)(b1 >> (16 * hi)));
        c[0] += av0 * bv0;
        c[1] += av0 * bv1;
        c[2] += av1 * bv0;
        c[3] += av1 * bv1;
    }
#endif
}
