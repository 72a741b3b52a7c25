// ------------------------------- weight pieces of the register-fed mat-vec
//
// The decode mat-vec kernels (`mmvq.cu`, `mmvq_fused.cu`) split every
// weight block into PPB pieces of 16 bytes of quants (plus the high bits
// and scales they need); consecutive lanes of a warp take consecutive
// pieces of a row, so each warp-wide load reads one contiguous stretch of
// the row. A piece goes straight from global memory into registers with
// the widest loads its alignment allows (blocks are at their type's natural
// alignment when the row is, which the host checks):
// - 16-byte loads: Q4_K, Q5_K (144 and 176-byte blocks);
// - 8-byte loads: Q5_1, IQ4_XS;
// - 4-byte loads: Q4_1, Q2_K;
// - 2-byte aligned blocks (Q4_0, Q5_0, Q8_0, IQ4_NL, Q3_K, Q6_K) and
//   MXFP4's 17-byte ones: aligned 4-byte words joined by funnel shifts
//   (`ld_words`), never the byte loads of a staged copy.
// `dot` then takes the piece's share of the block's dot product with one
// activation column of `k_quantize_q8_1`: int8 dot products (`__dp4a`),
// the sub-block scales applied to the integer sums, and the offset terms
// (mins, the -8 / -16 / -32 / -4 biases) from the activations' sums of 16
// computed once by the quantizer. The sum over a block's pieces is the
// CPU backend's block dot product (the same integers).

#define M4 0x0F0F0F0Fu
// Activation columns one weight read serves (decode: up to 8 tokens).
#define MMVQ_MAX_COLS 8

// The non-linear tables of IQ4_NL / IQ4_XS and MXFP4 (`KV_IQ4NL`,
// `KV_MXFP4`) as 4 words each, for `table16`.
__constant__ u32 KV_IQ4NL_W[4] = {0xBFAD9881u, 0xF6EADDCFu, 0x26190D01u, 0x71594535u};
__constant__ u32 KV_MXFP4_W[4] = {0x03020100u, 0x0C080604u, 0xFDFEFF00u, 0xF4F8FAFCu};

__device__ __forceinline__ int dp4(u32 w, u32 x, int acc) { return __dp4a((int)w, (int)x, acc); }

// Sum of 4 int8 products of each of the 4 words w with the 4 words of x.
__device__ __forceinline__ int dot4(const u32* w, uint4 x) {
    int s = dp4(w[0], x.x, 0);
    s = dp4(w[1], x.y, s);
    s = dp4(w[2], x.z, s);
    return dp4(w[3], x.w, s);
}

// The low nibbles of q (4 words: elements 0..15 of a 32) against `lo`,
// the high ones (elements 16..31) against `hi`.
__device__ __forceinline__ int dot_nibbles(const u32* q, uint4 lo, uint4 hi) {
    u32 l[4], h[4];
    UNROLL
    for (int i = 0; i < 4; i++) {
        l[i] = q[i] & M4;
        h[i] = (q[i] >> 4) & M4;
    }
    return dot4(l, lo) + dot4(h, hi);
}

// The same with the nibbles mapped through a 16-entry table first.
__device__ __forceinline__ int dot_nibbles_table(const u32* q, const u32* t, uint4 lo, uint4 hi) {
    u32 l[4], h[4];
    UNROLL
    for (int i = 0; i < 4; i++) {
        table16(q[i], t, &l[i], &h[i]);
    }
    return dot4(l, lo) + dot4(h, hi);
}

__device__ __forceinline__ uint4 ld_x(const i8* x, int off) { return *(const uint4*)(x + off); }

// The sum of the first (hh 0) or second (hh 1) 16 activations of a Q8Ds.
__device__ __forceinline__ int q8ds_half(int s, int hh) { return hh ? q8ds_s1(s) : q8ds_s0(s); }

__device__ __forceinline__ int q8ds_sum(int s) { return q8ds_s0(s) + q8ds_s1(s); }

// Q8_1's `s` (d times the block's sum, rounded to f16 as ggml stores it:
// `k_quantize_q8_1` with `q8_1`), the activation term of Q4_1's and Q5_1's
// minimum.
__device__ __forceinline__ float q8_1_s(Q8Ds e) { return h2f((u16)e.s); }

// Byte k (run-time, 0..11) of the little-endian words w0, w1, w2, by
// selects and shifts (an indexed register array would go to local memory).
__device__ __forceinline__ u32 wbyte3(u32 w0, u32 w1, u32 w2, int k) {
    u32 v = k < 4 ? w0 : (k < 8 ? w1 : w2);
    return (v >> (8 * (k & 3))) & 0xffu;
}

template <int TY>
struct Piece;

// Q4_0 {f16 d; u8 qs[16]} (18 B): one piece per block, q = nibble - 8.
template <>
struct Piece<T_Q4_0> {
    enum { QK = 32, TS = 18, PPB = 1, AL = 2 };
    u32 q[4];
    float d;
    __device__ __forceinline__ void load(const u8* b, int) {
        d = h2f(*(const u16*)b);
        ld_words<4>(b + 2, q);
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        Q8Ds e = xd[0];
        int s = dot_nibbles(q, ld_x(x, 0), ld_x(x, 16));
        return d * e.d * (float)(s - 8 * q8ds_sum(e.s));
    }
};

// Q4_1 {f16 d, m; u8 qs[16]} (20 B): q = d * nibble + m.
template <>
struct Piece<T_Q4_1> {
    enum { QK = 32, TS = 20, PPB = 1, AL = 4 };
    u32 q[4];
    float d, m;
    __device__ __forceinline__ void load(const u8* b, int) {
        u32 dm = *(const u32*)b;
        d = h2f((u16)dm);
        m = h2f((u16)(dm >> 16));
        ld_words4<4>(b + 4, q);
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        Q8Ds e = xd[0];
        int s = dot_nibbles(q, ld_x(x, 0), ld_x(x, 16));
        return d * e.d * (float)s + m * q8_1_s(e);
    }
};

// The 5th bits of 4 elements (bits 0..3 of h) as bit 4 of 4 bytes.
__device__ __forceinline__ u32 bit4_of_bytes(u32 h) {
    return ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
}

// The 5-bit quants of a Q5_0 / Q5_1 block: low nibbles (elements 0..15)
// in l, high (16..31) in h, bit 4 from qh.
__device__ __forceinline__ void q5_quants(const u32* q, u32 qh, u32* l, u32* h) {
    UNROLL
    for (int i = 0; i < 4; i++) {
        l[i] = (q[i] & M4) | bit4_of_bytes(qh >> (4 * i));
        h[i] = ((q[i] >> 4) & M4) | bit4_of_bytes(qh >> (16 + 4 * i));
    }
}

// Q5_0 {f16 d; u8 qh[4]; u8 qs[16]} (22 B): q = 5-bit value - 16.
template <>
struct Piece<T_Q5_0> {
    enum { QK = 32, TS = 22, PPB = 1, AL = 2 };
    u32 l[4], h[4];
    float d;
    __device__ __forceinline__ void load(const u8* b, int) {
        d = h2f(*(const u16*)b);
        u32 w[5];
        ld_words<5>(b + 2, w); // qh, then the 4 words of qs
        q5_quants(w + 1, w[0], l, h);
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        Q8Ds e = xd[0];
        int s = dot4(l, ld_x(x, 0)) + dot4(h, ld_x(x, 16));
        return d * e.d * (float)(s - 16 * q8ds_sum(e.s));
    }
};

// Q5_1 {f16 d, m; u8 qh[4]; u8 qs[16]} (24 B, 8-byte aligned).
template <>
struct Piece<T_Q5_1> {
    enum { QK = 32, TS = 24, PPB = 1, AL = 8 };
    u32 l[4], h[4];
    float d, m;
    __device__ __forceinline__ void load(const u8* b, int) {
        u64 hd = *(const u64*)b;
        d = h2f((u16)hd);
        m = h2f((u16)(hd >> 16));
        u64 q0 = *(const u64*)(b + 8);
        u64 q1 = *(const u64*)(b + 16);
        u32 q[4] = {(u32)q0, (u32)(q0 >> 32), (u32)q1, (u32)(q1 >> 32)};
        q5_quants(q, (u32)(hd >> 32), l, h);
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        Q8Ds e = xd[0];
        int s = dot4(l, ld_x(x, 0)) + dot4(h, ld_x(x, 16));
        return d * e.d * (float)s + m * q8_1_s(e);
    }
};

// Q8_0 {f16 d; i8 qs[32]} (34 B): two pieces of 16 quants.
template <>
struct Piece<T_Q8_0> {
    enum { QK = 32, TS = 34, PPB = 2, AL = 2 };
    u32 q[4];
    float d;
    int p;
    __device__ __forceinline__ void load(const u8* b, int pc) {
        p = pc;
        d = h2f(*(const u16*)b);
        ld_words<4>(b + 2 + 16 * pc, q);
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        return d * xd[0].d * (float)dot4(q, ld_x(x, 16 * p));
    }
};

// IQ4_NL {f16 d; u8 qs[16]} (18 B): nibbles through the IQ4_NL table.
template <>
struct Piece<T_IQ4_NL> {
    enum { QK = 32, TS = 18, PPB = 1, AL = 2 };
    u32 q[4];
    float d;
    __device__ __forceinline__ void load(const u8* b, int) {
        d = h2f(*(const u16*)b);
        ld_words<4>(b + 2, q);
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        u32 t[4] = {KV_IQ4NL_W[0], KV_IQ4NL_W[1], KV_IQ4NL_W[2], KV_IQ4NL_W[3]};
        return d * xd[0].d * (float)dot_nibbles_table(q, t, ld_x(x, 0), ld_x(x, 16));
    }
};

// MXFP4 {u8 e; u8 qs[16]} (17 B, byte aligned): E2M1 through its table in
// units of half the E8M0 scale.
template <>
struct Piece<T_MXFP4> {
    enum { QK = 32, TS = 17, PPB = 1, AL = 1 };
    u32 q[4];
    float d;
    __device__ __forceinline__ void load(const u8* b, int) {
        d = e8m0_half(b[0]);
        ld_words<4>(b + 1, q);
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        u32 t[4] = {KV_MXFP4_W[0], KV_MXFP4_W[1], KV_MXFP4_W[2], KV_MXFP4_W[3]};
        return d * xd[0].d * (float)dot_nibbles_table(q, t, ld_x(x, 0), ld_x(x, 16));
    }
};

// The 6-bit scale and min of sub-block j of a Q4_K / Q5_K block (the 12
// scale bytes are bytes 4..15 of the header words h).
__device__ __forceinline__ void k4_scale_min(uint4 h, int j, int* sc, int* mn) {
    u32 a = h.y, b = h.z, c = h.w;
    if (j < 4) {
        *sc = (int)(wbyte3(a, b, c, j) & 63u);
        *mn = (int)(wbyte3(a, b, c, j + 4) & 63u);
    } else {
        *sc = (int)((wbyte3(a, b, c, j + 4) & 0xFu) | ((wbyte3(a, b, c, j - 4) >> 6) << 4));
        *mn = (int)((wbyte3(a, b, c, j + 4) >> 4) | ((wbyte3(a, b, c, j) >> 6) << 4));
    }
}

// What Q4_K and Q5_K pieces share: piece p = (chunk c = p / 2, half hh =
// p % 2) holds elements 16 hh .. 16 hh + 15 of sub-blocks 2c (in `l`) and
// 2c + 1 (in `h`).
struct K45 {
    u32 l[4], h[4];
    float d, dmin;
    int sc0, mn0, sc1, mn1, c, hh;
    __device__ __forceinline__ void header(const u8* b, int p) {
        uint4 hd = *(const uint4*)b;
        d = h2f((u16)hd.x);
        dmin = h2f((u16)(hd.x >> 16));
        c = p >> 1;
        hh = p & 1;
        k4_scale_min(hd, 2 * c, &sc0, &mn0);
        k4_scale_min(hd, 2 * c + 1, &sc1, &mn1);
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        int s0 = dot4(l, ld_x(x, 64 * c + 16 * hh));
        int s1 = dot4(h, ld_x(x, 64 * c + 32 + 16 * hh));
        Q8Ds e0 = xd[2 * c];
        int e1 = xd[2 * c + 1].s;
        int isum = sc0 * s0 + sc1 * s1;
        int msum = mn0 * q8ds_half(e0.s, hh) + mn1 * q8ds_half(e1, hh);
        return e0.d * (d * (float)isum - dmin * (float)msum);
    }
};

// Q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]} (144 B, 16-byte aligned).
template <>
struct Piece<T_Q4_K> : K45 {
    enum { QK = 256, TS = 144, PPB = 8, AL = 16 };
    __device__ __forceinline__ void load(const u8* b, int p) {
        header(b, p);
        uint4 v = *(const uint4*)(b + 16 + 32 * c + 16 * hh);
        u32 q[4] = {v.x, v.y, v.z, v.w};
        UNROLL
        for (int i = 0; i < 4; i++) {
            l[i] = q[i] & M4;
            h[i] = (q[i] >> 4) & M4;
        }
    }
};

// Q5_K {f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]} (176 B).
template <>
struct Piece<T_Q5_K> : K45 {
    enum { QK = 256, TS = 176, PPB = 8, AL = 16 };
    __device__ __forceinline__ void load(const u8* b, int p) {
        header(b, p);
        uint4 v = *(const uint4*)(b + 48 + 32 * c + 16 * hh);
        uint4 hb = *(const uint4*)(b + 16 + 16 * hh);
        u32 q[4] = {v.x, v.y, v.z, v.w};
        u32 qh[4] = {hb.x, hb.y, hb.z, hb.w};
        UNROLL
        for (int i = 0; i < 4; i++) {
            l[i] = (q[i] & M4) | (((qh[i] >> (2 * c)) & 0x01010101u) << 4);
            h[i] = ((q[i] >> 4) & M4) | (((qh[i] >> (2 * c + 1)) & 0x01010101u) << 4);
        }
    }
};

// Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d} (210 B): piece p =
// (half n = p / 4, j = p / 2 % 2, hh = p % 2) holds elements 16 hh ..
// 16 hh + 15 of the groups j (in a) and j + 2 (in b) of half n.
template <>
struct Piece<T_Q6_K> {
    enum { QK = 256, TS = 210, PPB = 8, AL = 2 };
    u32 a[4], b4[4];
    float d;
    int sca, scb, n, j, hh;
    __device__ __forceinline__ void load(const u8* b, int p) {
        n = p >> 2;
        j = (p >> 1) & 1;
        hh = p & 1;
        u32 ql[4], qh[4];
        ld_words<4>(b + 64 * n + 32 * j + 16 * hh, ql);
        ld_words<4>(b + 128 + 32 * n + 16 * hh, qh);
        UNROLL
        for (int i = 0; i < 4; i++) {
            a[i] = (ql[i] & M4) | (((qh[i] >> (2 * j)) & 0x03030303u) << 4);
            b4[i] = ((ql[i] >> 4) & M4) | (((qh[i] >> (2 * j + 4)) & 0x03030303u) << 4);
        }
        sca = (int)((const i8*)b)[192 + 8 * n + 2 * j + hh];
        scb = (int)((const i8*)b)[192 + 8 * n + 2 * j + 4 + hh];
        d = h2f(*(const u16*)(b + 208));
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        int sa = dot4(a, ld_x(x, 128 * n + 32 * j + 16 * hh));
        int sb = dot4(b4, ld_x(x, 128 * n + 32 * (j + 2) + 16 * hh));
        Q8Ds ea = xd[4 * n + j];
        int eb = xd[4 * n + j + 2].s;
        int isum = sca * (sa - 32 * q8ds_half(ea.s, hh)) + scb * (sb - 32 * q8ds_half(eb, hh));
        return d * ea.d * (float)isum;
    }
};

// Q2_K {u8 scales[16]; u8 qs[64]; f16 d, dmin} (84 B, 4-byte aligned):
// piece p = (half n = p / 2, hh = p % 2) holds elements 16 hh .. 16 hh + 15
// of the 4 sub-blocks 4n .. 4n + 3 (the 4 shifts of the same bytes).
template <>
struct Piece<T_Q2_K> {
    enum { QK = 256, TS = 84, PPB = 4, AL = 4 };
    u32 q[4], sc[2];
    float d, dmin;
    int n, hh;
    __device__ __forceinline__ void load(const u8* b, int p) {
        n = p >> 1;
        hh = p & 1;
        ld_words4<4>(b + 16 + 32 * n + 16 * hh, q);
        ld_words4<2>(b + 8 * n, sc);
        u32 dm = *(const u32*)(b + 80);
        d = h2f((u16)dm);
        dmin = h2f((u16)(dm >> 16));
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        int isum = 0, msum = 0;
        UNROLL
        for (int s4 = 0; s4 < 4; s4++) {
            u32 w[4];
            UNROLL
            for (int i = 0; i < 4; i++) {
                w[i] = (q[i] >> (2 * s4)) & 0x03030303u;
            }
            int s = dot4(w, ld_x(x, 128 * n + 32 * s4 + 16 * hh));
            u32 scb = wbyte3(sc[0], sc[1], 0u, 2 * s4 + hh);
            isum += (int)(scb & 0xFu) * s;
            msum += (int)(scb >> 4) * q8ds_half(xd[4 * n + s4].s, hh);
        }
        return xd[0].d * (d * (float)isum - dmin * (float)msum);
    }
};

// Q3_K {u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d} (110 B): pieces as
// Q2_K's, with the third bit from hmask (value = 3 bits - 4) and 6-bit
// signed scales per 16.
template <>
struct Piece<T_Q3_K> {
    enum { QK = 256, TS = 110, PPB = 4, AL = 2 };
    u32 q[4], hm[4], sc[3];
    float d;
    int n, hh;
    __device__ __forceinline__ void load(const u8* b, int p) {
        n = p >> 1;
        hh = p & 1;
        ld_words<4>(b + 32 + 32 * n + 16 * hh, q);
        ld_words<4>(b + 16 * hh, hm);
        ld_words<3>(b + 96, sc);
        d = h2f(*(const u16*)(b + 108));
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        int isum = 0;
        UNROLL
        for (int s4 = 0; s4 < 4; s4++) {
            u32 w[4];
            UNROLL
            for (int i = 0; i < 4; i++) {
                w[i] = ((q[i] >> (2 * s4)) & 0x03030303u) |
                       (((hm[i] >> (4 * n + s4)) & 0x01010101u) << 2);
            }
            int s = dot4(w, ld_x(x, 128 * n + 32 * s4 + 16 * hh));
            int idx = 8 * n + 2 * s4 + hh;
            u32 low = idx < 8 ? (wbyte3(sc[0], sc[1], sc[2], idx) & 0xFu)
                               : (wbyte3(sc[0], sc[1], sc[2], idx - 8) >> 4);
            u32 high = (wbyte3(sc[0], sc[1], sc[2], 8 + (idx & 3)) >> (2 * (idx >> 2))) & 3u;
            int scale = (int)(low | (high << 4)) - 32;
            isum += scale * (s - 4 * q8ds_half(xd[4 * n + s4].s, hh));
        }
        return d * xd[0].d * (float)isum;
    }
};

// IQ4_XS {f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]} (136 B,
// 8-byte aligned): one piece per 32-element sub-block.
template <>
struct Piece<T_IQ4_XS> {
    enum { QK = 256, TS = 136, PPB = 8, AL = 8 };
    u32 q[4];
    float d;
    int ls, s;
    __device__ __forceinline__ void load(const u8* b, int p) {
        s = p;
        u64 hd = *(const u64*)b;
        d = h2f((u16)hd);
        u32 sh = (u32)(hd >> 16) & 0xffffu;
        u32 sl = (u32)(hd >> 32);
        ls = (int)(((sl >> (4 * p)) & 0xFu) | (((sh >> (2 * p)) & 3u) << 4)) - 32;
        u64 q0 = *(const u64*)(b + 8 + 16 * p);
        u64 q1 = *(const u64*)(b + 16 + 16 * p);
        q[0] = (u32)q0;
        q[1] = (u32)(q0 >> 32);
        q[2] = (u32)q1;
        q[3] = (u32)(q1 >> 32);
    }
    __device__ __forceinline__ float dot(const i8* x, const Q8Ds* xd) const {
        u32 t[4] = {KV_IQ4NL_W[0], KV_IQ4NL_W[1], KV_IQ4NL_W[2], KV_IQ4NL_W[3]};
        int v = dot_nibbles_table(q, t, ld_x(x, 32 * s), ld_x(x, 32 * s + 16));
        return d * xd[s].d * (float)(ls * v);
    }
};

// The columns one warp segment multiplies its rows with: byte offsets of
// each column's int8 values in the quantized activations (its Q8Ds at
// offset / 32), MMVQ_MAX_COLS of them, `n` used.
struct MmvCols {
    int n;
    u32 off[MMVQ_MAX_COLS];
};

// acc[j] += dot(row, column j) over the `nblk` blocks of a row, the
// segment's lanes (`seg_lane` of `width`) taking its pieces in turn.
template <int TY>
__device__ __forceinline__ void mmvq_row_t(const u8* row, int nblk, const i8* q8, const Q8Ds* ds,
                                           const MmvCols& cols, float* acc, int seg_lane,
                                           int width) {
    typedef Piece<TY> P;
    int npieces = nblk * P::PPB;
    for (int t = seg_lane; t < npieces; t += width) {
        int blk = t / P::PPB;
        P w;
        w.load(row + (i64)blk * P::TS, t % P::PPB);
        u32 e0 = (u32)blk * P::QK;
        UNROLL
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            if (j < cols.n) {
                u32 o = cols.off[j] + e0;
                acc[j] += w.dot(q8 + o, ds + (o >> 5));
            }
        }
    }
}

// The same for the weight type `ty` (a switch over the instances).
__device__ __forceinline__ void mmvq_row(int ty, const u8* row, i64 K, const i8* q8,
                                         const Q8Ds* ds, const MmvCols& cols, float* acc,
                                         int seg_lane, int width) {
    int k = (int)K;
    switch (ty) {
    case T_Q4_0: mmvq_row_t<T_Q4_0>(row, k / 32, q8, ds, cols, acc, seg_lane, width); break;
    case T_Q4_1: mmvq_row_t<T_Q4_1>(row, k / 32, q8, ds, cols, acc, seg_lane, width); break;
    case T_Q5_0: mmvq_row_t<T_Q5_0>(row, k / 32, q8, ds, cols, acc, seg_lane, width); break;
    case T_Q5_1: mmvq_row_t<T_Q5_1>(row, k / 32, q8, ds, cols, acc, seg_lane, width); break;
    case T_Q8_0: mmvq_row_t<T_Q8_0>(row, k / 32, q8, ds, cols, acc, seg_lane, width); break;
    case T_IQ4_NL: mmvq_row_t<T_IQ4_NL>(row, k / 32, q8, ds, cols, acc, seg_lane, width); break;
    case T_MXFP4: mmvq_row_t<T_MXFP4>(row, k / 32, q8, ds, cols, acc, seg_lane, width); break;
    case T_Q2_K: mmvq_row_t<T_Q2_K>(row, k / 256, q8, ds, cols, acc, seg_lane, width); break;
    case T_Q3_K: mmvq_row_t<T_Q3_K>(row, k / 256, q8, ds, cols, acc, seg_lane, width); break;
    case T_Q4_K: mmvq_row_t<T_Q4_K>(row, k / 256, q8, ds, cols, acc, seg_lane, width); break;
    case T_Q5_K: mmvq_row_t<T_Q5_K>(row, k / 256, q8, ds, cols, acc, seg_lane, width); break;
    case T_Q6_K: mmvq_row_t<T_Q6_K>(row, k / 256, q8, ds, cols, acc, seg_lane, width); break;
    case T_IQ4_XS: mmvq_row_t<T_IQ4_XS>(row, k / 256, q8, ds, cols, acc, seg_lane, width); break;
    default: break;
    }
}
