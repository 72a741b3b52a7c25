// ------------------------------------------ int8 dot-product building blocks
//
// What the quantized mat-vec (MMVQ, `mmvq.cu`) and mat-mat (MMQ, `mmq.cu`)
// kernels share: the activation quantizer `k_quantize_q8_1` and
// `unpack_sub`, which turns one 32-element sub-block of any weight block
// type into int8 values plus the affine map of each 16-element half, so a
// dot product is two `__dp4a` chains and four multiply-adds.

// Four bytes at any address (little-endian).
__device__ __forceinline__ int ld32(const u8* p) {
    return (int)((u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24));
}

// Spread the 4 low bits of `h` to bit 0 of each byte.
__device__ __forceinline__ int spread4(u32 h) {
    return (int)((h & 1u) | ((h & 2u) << 7) | ((h & 4u) << 14) | ((h & 8u) << 21));
}

// Sub-block `s` (32 elements) of the block at `b`: its quants as int8 in
// `w` (4 per int, in element order) and the affine map of each 16-element
// half h: weight = a[h] * w + m[h].
__device__ void unpack_sub(int ty, const u8* b, int s, int* w, float* a, float* m) {
    switch (ty) {
    case T_Q8_0: {
        float d = h2f(ld16(b));
        for (int i = 0; i < 8; i++) {
            w[i] = ld32(b + 2 + 4 * i);
        }
        a[0] = a[1] = d;
        m[0] = m[1] = 0.0f;
        break;
    }
    case T_Q4_0:
    case T_Q4_1:
    case T_IQ4_NL:
    case T_MXFP4: {
        int off = ty == T_Q4_1 ? 4 : (ty == T_MXFP4 ? 1 : 2);
        for (int i = 0; i < 4; i++) {
            int v = ld32(b + off + 4 * i);
            w[i] = v & 0x0F0F0F0F;
            w[4 + i] = (v >> 4) & 0x0F0F0F0F;
        }
        if (ty == T_IQ4_NL || ty == T_MXFP4) {
            const i8* kv = ty == T_IQ4_NL ? KV_IQ4NL : KV_MXFP4;
            for (int i = 0; i < 8; i++) {
                u32 v = (u32)w[i];
                w[i] = (int)((u32)(u8)kv[v & 15] | ((u32)(u8)kv[(v >> 8) & 15] << 8) |
                             ((u32)(u8)kv[(v >> 16) & 15] << 16) |
                             ((u32)(u8)kv[(v >> 24) & 15] << 24));
            }
        }
        float d = ty == T_MXFP4 ? e8m0_half(b[0]) : h2f(ld16(b));
        a[0] = a[1] = d;
        float mm = ty == T_Q4_0 ? -8.0f * d : (ty == T_Q4_1 ? h2f(ld16(b + 2)) : 0.0f);
        m[0] = m[1] = mm;
        break;
    }
    case T_Q5_0:
    case T_Q5_1: {
        int one = ty == T_Q5_1;
        u32 qh = (u32)ld32(b + 2 + 2 * one);
        const u8* qs = b + 6 + 2 * one;
        for (int i = 0; i < 4; i++) {
            int v = ld32(qs + 4 * i);
            w[i] = (v & 0x0F0F0F0F) | (spread4(qh >> (4 * i)) << 4);
            w[4 + i] = ((v >> 4) & 0x0F0F0F0F) | (spread4(qh >> (16 + 4 * i)) << 4);
        }
        float d = h2f(ld16(b));
        a[0] = a[1] = d;
        m[0] = m[1] = one ? h2f(ld16(b + 2)) : -16.0f * d;
        break;
    }
    case T_Q2_K: {
        int n = s >> 2;
        int j = s & 3;
        for (int i = 0; i < 8; i++) {
            w[i] = (ld32(b + 16 + 32 * n + 4 * i) >> (2 * j)) & 0x03030303;
        }
        float d = h2f(ld16(b + 80));
        float dmin = h2f(ld16(b + 82));
        for (int h = 0; h < 2; h++) {
            u8 sc = b[2 * s + h];
            a[h] = d * (float)(sc & 0xF);
            m[h] = -dmin * (float)(sc >> 4);
        }
        break;
    }
    case T_Q3_K: {
        int n = s >> 2;
        int j = s & 3;
        for (int i = 0; i < 8; i++) {
            int lo = (ld32(b + 32 + 32 * n + 4 * i) >> (2 * j)) & 0x03030303;
            int hi = (ld32(b + 4 * i) >> s) & 0x01010101;
            w[i] = lo | (hi << 2); // 0..7, the value plus 4
        }
        float d = h2f(ld16(b + 108));
        for (int h = 0; h < 2; h++) {
            a[h] = d * (float)q3k_scale(b + 96, 2 * s + h);
            m[h] = -4.0f * a[h];
        }
        break;
    }
    case T_Q4_K:
    case T_Q5_K: {
        int five = ty == T_Q5_K;
        const u8* q = b + (five ? 48 : 16) + (s >> 1) * 32;
        for (int i = 0; i < 8; i++) {
            w[i] = (ld32(q + 4 * i) >> (4 * (s & 1))) & 0x0F0F0F0F;
            if (five) {
                w[i] |= ((ld32(b + 16 + 4 * i) >> s) & 0x01010101) << 4;
            }
        }
        float sc, mn;
        scale_min_k4(s, b + 4, &sc, &mn);
        a[0] = a[1] = h2f(ld16(b)) * sc;
        m[0] = m[1] = -h2f(ld16(b + 2)) * mn;
        break;
    }
    case T_Q6_K: {
        int n = s >> 2;
        int g = s & 3;
        const u8* ql = b + n * 64 + (g & 1) * 32;
        const u8* qh = b + 128 + n * 32;
        for (int i = 0; i < 8; i++) {
            int lo = (ld32(ql + 4 * i) >> (4 * (g >> 1))) & 0x0F0F0F0F;
            int hi = (ld32(qh + 4 * i) >> (2 * g)) & 0x03030303;
            w[i] = lo | (hi << 4); // 0..63, the value plus 32
        }
        const i8* sc = (const i8*)(b + 192) + n * 8;
        float d = h2f(ld16(b + 208));
        for (int h = 0; h < 2; h++) {
            a[h] = d * (float)sc[h + 2 * g];
            m[h] = -32.0f * a[h];
        }
        break;
    }
    case T_IQ4_XS: {
        const u8* qs = b + 8 + 16 * s;
        for (int i = 0; i < 4; i++) {
            int v = ld32(qs + 4 * i);
            w[i] = v & 0x0F0F0F0F;
            w[4 + i] = (v >> 4) & 0x0F0F0F0F;
        }
        for (int i = 0; i < 8; i++) {
            u32 v = (u32)w[i];
            w[i] = (int)((u32)(u8)KV_IQ4NL[v & 15] | ((u32)(u8)KV_IQ4NL[(v >> 8) & 15] << 8) |
                         ((u32)(u8)KV_IQ4NL[(v >> 16) & 15] << 16) |
                         ((u32)(u8)KV_IQ4NL[(v >> 24) & 15] << 24));
        }
        a[0] = a[1] = h2f(ld16(b)) * (float)iq4xs_scale(b, s);
        m[0] = m[1] = 0.0f;
        break;
    }
    default:
        for (int i = 0; i < 8; i++) {
            w[i] = 0;
        }
        a[0] = a[1] = m[0] = m[1] = 0.0f;
        break;
    }
}

// The scale and sums of 32 quantized activations (`k_quantize_q8_1`):
// `d` (the value of one int8 step) and in `s` the sums of the first and
// of the second 16 int8 values (low and high 16 bits, signed), so a
// weight's offset term (its min or its -8, -16, -32 bias) costs one
// multiply per half instead of a sum of the activations per row.
struct Q8Ds {
    float d;
    int s;
};

__device__ __forceinline__ int q8ds_s0(int s) { return (int)(short)(s & 0xffff); }
__device__ __forceinline__ int q8ds_s1(int s) { return s >> 16; }

// Quantize every column of `b` (any float type and strides; columns in
// ggml order over ne1, ne2, ne3) to 8-bit values `q` (column c at
// q + c * ne0, dense) with one `Q8Ds` per 32 elements `ds` (column c at
// ds + c * ne0 / 32), rounding as the CPU backend's activation types do:
// - group 32 (Q8_0/Q8_1, for the 32-element block types): d = amax / 127
//   rounded to f16, q = round(x / d) (ties away from zero);
// - group 256 (Q8_K, for the K-quants and IQ4_XS): with `max` the first
//   value of largest magnitude, q = clamp(rint(-127 / max * x), -128, 127)
//   and d = 1 / (-127 / max), the same d for the group's 8 sub-blocks.
// The sums of each 16 are computed here once, for every weight row; with
// `q8_1` (the activations of Q4_1 and Q5_1, ggml's Q8_1) `s` holds instead
// the f16 bits of d * (sum of the 32), d before its f16 rounding, as ggml
// computes it.
// ne0 is a multiple of `group`. One warp per 32 elements; block 256.
extern "C" __global__ void k_quantize_q8_1(i8* q, Q8Ds* ds, const u8* b, T4 tb, int tyb,
                                           int group, int q8_1) {
    i64 nsub = tb.ne[0] / 32;
    i64 sub = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    i64 total = nsub * tb.ne[1] * tb.ne[2] * tb.ne[3];
    if (sub >= total) {
        return; // whole warp leaves together
    }
    i64 col = sub / nsub;
    i64 k = (sub % nsub) * 32 + lane;
    i64 c1 = col % tb.ne[1];
    i64 c2 = (col / tb.ne[1]) % tb.ne[2];
    i64 c3 = col / (tb.ne[1] * tb.ne[2]);
    const u8* pb = b + t4_off(tb, 0, c1, c2, c3);
    float x = load_f(pb + k * tb.nb[0], tyb);
    int v;
    float d;
    float d_raw = 0.0f;
    if (group == 256) {
        // this lane's 8 elements of the group, in order, then the lanes in order
        i64 g0 = (k / 256) * 256 + lane * 8;
        float amax = 0.0f;
        float mx = 0.0f;
        for (int i = 0; i < 8; i++) {
            float y = load_f(pb + (g0 + i) * tb.nb[0], tyb);
            if (fabsf(y) > amax) {
                amax = fabsf(y);
                mx = y;
            }
        }
        for (int o = 1; o < 32; o <<= 1) {
            float oa = __shfl_xor_sync(0xffffffffu, amax, o);
            float om = __shfl_xor_sync(0xffffffffu, mx, o);
            // the lower lane holds the earlier elements: it wins ties
            int other_first = (lane & o) != 0;
            if (oa > amax || (oa == amax && other_first)) {
                amax = oa;
                mx = om;
            }
        }
        if (amax == 0.0f) {
            v = 0;
            d = 0.0f;
        } else {
            float iscale = -127.0f / mx;
            float r = rintf(iscale * x);
            v = (int)fminf(127.0f, fmaxf(-128.0f, r));
            d = 1.0f / iscale;
        }
    } else {
        float amax = warp_max(fabsf(x));
        d = amax / 127.0f;
        d_raw = d;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        v = (int)roundf(x * id);
        d = h2f(f2h(d));
    }
    q[col * tb.ne[0] + k] = (i8)v;
    int s0, s1;
    half_warp_sums(v, &s0, &s1);
    if (lane == 0) {
        Q8Ds e;
        e.d = d;
        e.s = q8_1 ? (int)f2h((float)(s0 + s1) * d_raw) : ((s0 & 0xffff) | (s1 << 16));
        ds[sub] = e;
    }
}


// Tensor-core int8 product of one warp: c (16 x 8, int32) += A (16 x 16
// int8) * B (16 x 8 int8), as PTX `mma.sync.aligned.m16n8k16.row.col.s32.
// s8.s8.s32`. Fragments (g = lane / 4, t = lane % 4): a[0] = A[g][4t..4t+3]
// and a[1] = A[g + 8][4t..4t+3] (4 int8 each), b = B[4t..4t+3][g],
// c[0..1] = C[g][2t..2t+1] and c[2..3] = C[g + 8][2t..2t+1]. The MMA
// instruction needs sm_80; the CPU emulator's prelude emulates it with
// these fragment semantics (`emu_mma_s8_16x8x16`); elsewhere (sm_75) the
// warp gathers the fragments with shuffles and takes the products with
// `__dp4a` (`mma_s8_16x8x16_shfl`). Every lane of the warp must call it.
__device__ __forceinline__ void mma_s8_16x8x16_shfl(int* c, const int* a, int b) {
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int t = lane & 3;
    for (int j = 0; j < 4; j++) {
        // k = 4j..4j+3: rows g and g + 8 of A from lane 4g + j, columns 2t
        // and 2t + 1 of B from lanes 8t + j and 8t + 4 + j
        int a0 = __shfl_sync(0xffffffffu, a[0], 4 * g + j);
        int a1 = __shfl_sync(0xffffffffu, a[1], 4 * g + j);
        int b0 = __shfl_sync(0xffffffffu, b, 8 * t + j);
        int b1 = __shfl_sync(0xffffffffu, b, 8 * t + 4 + j);
        c[0] = __dp4a(a0, b0, c[0]);
        c[1] = __dp4a(a0, b1, c[1]);
        c[2] = __dp4a(a1, b0, c[2]);
        c[3] = __dp4a(a1, b1, c[3]);
    }
}

__device__ __forceinline__ void mma_s8_16x8x16(int* c, const int* a, int b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(b));
#elif defined(GGML_CUDA_EMU_MMA)
    emu_mma_s8_16x8x16(c, a, b);
#else
    mma_s8_16x8x16_shfl(c, a, b);
#endif
}
