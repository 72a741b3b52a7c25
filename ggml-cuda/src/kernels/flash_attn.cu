// ------------------------------------------------------- flash attention
//
// flash_attn_ext: dst[:, h, i, i3] = softmax(scale * q·k + slope * mask
// (+ sink)) · v for each query row, with an online softmax. Two kernels:
//
// - `k_fa_vec_*` (decode, and prompts the tensor-core kernel does not
//   take): the rows of one KV head, (query, head) pairs with the head
//   fastest, are packed `rt` to a block so every K/V cell read serves all
//   of them (grouped-query sharing); each warp takes its own segment of the
//   cells (split-KV: the segments of a row spread over many blocks, so a
//   decode step over a long cache fills the GPU) and within it a lane per
//   cell in chunks of 32: the lane's scores for its cell and every packed
//   row (16-byte loads of an F16/BF16 K row, aligned words of a Q8_0 one),
//   the chunk's maximum and sum by warp shuffles, then every lane
//   accumulates its own output dimensions (pairs 2 lane + 64 j) over the
//   chunk's cells. With one segment per row the kernel writes the result;
//   with several it writes each segment's (max, sum, unnormalized output)
//   and `k_fa_combine` merges them (and adds the sinks).
// - `k_fa_mma_*` (prompts, F16/BF16 K and V, head dimension 64 or 128):
//   tensor cores, see below.
//
// Numerics follow the CPU backend: q is rounded to F16 (BF16) when k is
// F16 (BF16); a block-quantized k (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL
// caches) is dotted with q quantized to 8 bits per 32 (`unpack_sub` and
// `__dp4a`, as the CPU's Q8_0 vec_dot); v of any weight type is
// dequantized and accumulated in f32 (the CPU accumulates an F16 v in an
// F16 row: within the op tests' F16 bound). Sinks (gpt-oss) join the
// softmax after the cells; MLA's shapes (head dimension 576 for k, 512 for
// v) fit FA_DMAX.

// Largest head dimension of q/k and of v (deepseek2's MLA: 576 / 512).
#define FA_DMAX 576
// Warps (= KV segments) per block of the vector kernel.
#define FAV_WARPS 4
// Floats of packed q rows in shared memory (rows x head dimension): 4 rows
// of MLA's 576, 8 of 256.
#define FAV_QMAX 2304
// Most rows one vector block packs (its instances take 8 or 4).
#define FAV_RT 8

// The slope of head h for ALiBi (1 without max_bias), as k_soft_max.
__device__ __forceinline__ float alibi_slope(float max_bias, int h, int n_head_log2, float m0,
                                             float m1) {
    if (max_bias <= 0.0f) {
        return 1.0f;
    }
    return h < n_head_log2 ? powf(m0, (float)(h + 1))
                           : powf(m1, (float)(2 * (h - n_head_log2) + 1));
}

// The problem as the kernels see it: q [dk, n_q, n_head, ne3], k [dk, n_kv,
// n_head_kv, ne3k], v [dv, ...]; the rows of KV head (ik2, iq3) are
// r = query * g + (head - ik2 * g), g = n_head / n_head_kv.
struct FaShape {
    int dk, dv, n_kv, n_q, n_head, g, n_rows;
};

__device__ __forceinline__ FaShape fa_shape(const T4& tq, const T4& tk, const T4& tv) {
    FaShape s;
    s.dk = (int)tq.ne[0];
    s.dv = (int)tv.ne[0];
    s.n_kv = (int)tk.ne[1];
    s.n_q = (int)tq.ne[1];
    s.n_head = (int)tq.ne[2];
    s.g = (int)(tq.ne[2] / tk.ne[2]);
    s.n_rows = s.n_q * s.g;
    return s;
}

// The sinks' share of a finished row: (m, l, the output's scale).
__device__ __forceinline__ float fa_sink(float sk, float* m, float* l) {
    float ms = 1.0f;
    float vs = 1.0f;
    if (sk > *m) {
        ms = *m == neg_inf() ? 0.0f : expf(*m - sk);
        *m = sk;
    } else {
        vs = expf(sk - *m);
    }
    *l = *l * ms + vs;
    return ms;
}

// Two consecutive elements d, d + 1 (d even) of a V row of type `ty`:
// with `pairs` (F16/BF16 rows of dense, 4-byte aligned elements) one 32-bit
// load; F32 and the other float layouts element by element (stride nb0);
// Q8_0 by its scale and one 16-bit load; other block types by element.
__device__ __forceinline__ void fa_v2(const u8* row, int ty, int d, i64 nb0, int pairs,
                                      float* o) {
    switch (ty) {
    case T_F16:
    case T_BF16: {
        if (pairs) {
            u32 w = *(const u32*)(row + 2 * d);
            o[0] = ty == T_BF16 ? bf2f((u16)w) : h2f((u16)w);
            o[1] = ty == T_BF16 ? bf2f((u16)(w >> 16)) : h2f((u16)(w >> 16));
        } else {
            o[0] = load_f(row + d * nb0, ty);
            o[1] = load_f(row + (d + 1) * nb0, ty);
        }
        break;
    }
    case T_F32: {
        o[0] = *(const float*)(row + d * nb0);
        o[1] = *(const float*)(row + (d + 1) * nb0);
        break;
    }
    case T_Q8_0: {
        const u8* b = row + (d >> 5) * 34;
        float s = h2f(*(const u16*)b);
        u32 w = *(const u16*)(b + 2 + (d & 31));
        o[0] = s * (float)(i8)(w & 0xffu);
        o[1] = s * (float)(i8)(w >> 8);
        break;
    }
    default:
        o[0] = load_row_elem(row, ty, d);
        o[1] = load_row_elem(row, ty, d + 1);
        break;
    }
}

// One 32-element block of a quantized K row as int8 and its affine map
// (Q8_0 by aligned words: its blocks are 2-byte aligned; the other types by
// `unpack_sub`).
__device__ __forceinline__ void fa_k_block(int ty, const u8* b, int* w, float* a, float* m) {
    if (ty == T_Q8_0) {
        a[0] = a[1] = h2f(*(const u16*)b);
        m[0] = m[1] = 0.0f;
        ld_words<8>(b + 2, (u32*)w);
    } else {
        unpack_sub(ty, b, 0, w, a, m);
    }
}

// The vector kernel's shared memory: the packed rows' q (as f32, or as
// int8 with scales and sums of 16 for a quantized k), their mask offsets
// and slopes, and each warp's probabilities of its chunk.
struct FaVecSmem {
    float* q;
    int* q8;
    float* qd;
    float* qs;
    float* p;
    i64* moff;
    float* slope;
};

// The vector kernel for NV pairs of output dimensions per lane (dv <= 64
// NV) and RT packed rows: grid (ceil(n_seg / FAV_WARPS), ceil(n_rows / rt),
// n_head_kv * ne3), block 32 * FAV_WARPS. Segment `seg` covers cells
// [seg * seg_cells, (seg + 1) * seg_cells). `part` (n_seg > 1): per row
// and segment dv + 2 floats (max, sum, output). `vec`: bit 0, F32/F16/BF16
// K rows of dense elements at 16-byte aligned addresses (16-byte loads);
// bit 1, F16/BF16 V rows of dense elements at 4-byte aligned addresses.
template <int NV, int RT>
__device__ __forceinline__ void fa_vec(u8* dst, const T4& td, float* part, int n_seg,
                                       int seg_cells, const u8* q, const T4& tq, int tyq,
                                       const u8* k, const T4& tk, int tyk, const u8* v,
                                       const T4& tv, int tyv, const u8* mask, const T4& tm,
                                       int tym, int has_mask, const float* sinks, int has_sinks,
                                       float scale, float max_bias, float m0, float m1,
                                       int n_head_log2, float softcap, int rt, int vec,
                                       FaVecSmem sm) {
    FaShape sh = fa_shape(tq, tk, tv);
    int wid = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    int n_head_kv = (int)tk.ne[2];
    int ik2 = (int)blockIdx.z % n_head_kv;
    int iq3 = (int)blockIdx.z / n_head_kv;
    int ik3 = (int)(iq3 / (tq.ne[3] / tk.ne[3]));
    int r0 = (int)blockIdx.y * rt;
    int nr = sh.n_rows - r0 < rt ? sh.n_rows - r0 : rt;
    int quant_k = !(tyk == T_F32 || tyk == T_F16 || tyk == T_BF16);
    int dk = sh.dk;
    // the packed rows' q, mask rows and slopes
    for (int r = wid; r < nr; r += FAV_WARPS) {
        int row = r0 + r;
        int iq1 = row / sh.g;
        int h = ik2 * sh.g + row % sh.g;
        const u8* qrow = q + t4_off(tq, 0, iq1, h, iq3);
        float* qf = sm.q + r * dk;
        for (int d = lane; d < dk; d += 32) {
            qf[d] = act_round(load_f(qrow + (i64)d * tq.nb[0], tyq), tyk);
        }
        if (lane == 0) {
            sm.moff[r] = has_mask ? t4_off(tm, 0, iq1, h % tm.ne[2], iq3 % tm.ne[3]) : 0;
            sm.slope[r] = alibi_slope(max_bias, h, n_head_log2, m0, m1);
        }
        __syncwarp();
        if (quant_k) {
            // q to 8 bits per 32 (the CPU's Q8_0: d = amax / 127 rounded to f16)
            for (int b0 = 0; b0 < dk; b0 += 32) {
                float x = qf[b0 + lane];
                float amax = warp_max(fabsf(x));
                float d = amax / 127.0f;
                float id = d != 0.0f ? 1.0f / d : 0.0f;
                ((i8*)(sm.q8 + r * (dk / 4)))[b0 + lane] = (i8)(int)roundf(x * id);
                if (lane == 0) {
                    sm.qd[r * (dk / 32) + (b0 >> 5)] = h2f(f2h(d));
                }
            }
            __syncwarp();
            for (int hh = lane; hh < (dk >> 4); hh += 32) {
                int s = 0;
                for (int i = 0; i < 4; i++) {
                    s = __dp4a(0x01010101, sm.q8[r * (dk / 4) + hh * 4 + i], s);
                }
                sm.qs[r * (dk / 16) + hh] = (float)s;
            }
        }
    }
    __syncthreads();
    int seg = (int)blockIdx.x * FAV_WARPS + wid;
    if (seg >= n_seg) {
        return; // whole warp leaves together (after the block's barrier)
    }
    int c_begin = seg * seg_cells;
    int c_end = c_begin + seg_cells < sh.n_kv ? c_begin + seg_cells : sh.n_kv;
    int bs = blck_size(tyk);
    int ts = type_size(tyk);
    float acc[RT][2 * NV];
    float m_run[RT], l_run[RT];
    UNROLL
    for (int r = 0; r < RT; r++) {
        m_run[r] = neg_inf();
        l_run[r] = 0.0f;
        UNROLL
        for (int j = 0; j < 2 * NV; j++) {
            acc[r][j] = 0.0f;
        }
    }
    float* p = sm.p + wid * (RT * 32);
    for (int c0 = c_begin; c0 < c_end; c0 += 32) {
        int ic = c0 + lane;
        float s[RT];
        int live = 0;
        UNROLL
        for (int r = 0; r < RT; r++) {
            s[r] = neg_inf();
            if (r < nr && ic < c_end) {
                float mv = has_mask ? sm.slope[r] * load_f(mask + sm.moff[r] + (i64)ic * tm.nb[0], tym)
                                    : 0.0f;
                s[r] = mv; // the mask term until the score is known
                live |= mv != neg_inf();
            }
        }
        if (live) {
            const u8* krow = k + t4_off(tk, 0, ic, ik2, ik3);
            float dot[RT];
            UNROLL
            for (int r = 0; r < RT; r++) {
                dot[r] = 0.0f;
            }
            if (quant_k) {
                for (int b0 = 0; b0 < dk; b0 += 32) {
                    int w[8];
                    float a[2], mm[2];
                    fa_k_block(tyk, krow + (b0 / bs) * ts, w, a, mm);
                    UNROLL
                    for (int r = 0; r < RT; r++) {
                        if (r < nr) {
                            const int* x = sm.q8 + r * (dk / 4) + (b0 >> 2);
                            int si0 = 0, si1 = 0;
                            UNROLL
                            for (int i = 0; i < 4; i++) {
                                si0 = __dp4a(w[i], x[i], si0);
                                si1 = __dp4a(w[4 + i], x[4 + i], si1);
                            }
                            const float* qs = sm.qs + r * (dk / 16) + (b0 >> 4);
                            dot[r] += sm.qd[r * (dk / 32) + (b0 >> 5)] *
                                      (a[0] * (float)si0 + a[1] * (float)si1 + mm[0] * qs[0] +
                                       mm[1] * qs[1]);
                        }
                    }
                }
            } else if (vec & 1) {
                // 16-byte loads of the row: 8 halves (F16/BF16) or 4 floats
                int per = tyk == T_F32 ? 4 : 8;
                for (int d0 = 0; d0 < dk; d0 += per) {
                    uint4 kv = *(const uint4*)(krow + (i64)d0 * (tyk == T_F32 ? 4 : 2));
                    float kf[8];
                    if (tyk == T_F32) {
                        kf[0] = u2f(kv.x);
                        kf[1] = u2f(kv.y);
                        kf[2] = u2f(kv.z);
                        kf[3] = u2f(kv.w);
                        kf[4] = kf[5] = kf[6] = kf[7] = 0.0f;
                    } else {
                        unpack8(kv, tyk == T_BF16, kf);
                    }
                    UNROLL
                    for (int r = 0; r < RT; r++) {
                        if (r < nr) {
                            const float* qf = sm.q + r * dk + d0;
                            float t = 0.0f;
                            UNROLL
                            for (int i = 0; i < 8; i++) {
                                if (i < per) {
                                    t += qf[i] * kf[i];
                                }
                            }
                            dot[r] += t;
                        }
                    }
                }
            } else {
                for (int d = 0; d < dk; d++) {
                    float kd = load_f(krow + (i64)d * tk.nb[0], tyk);
                    UNROLL
                    for (int r = 0; r < RT; r++) {
                        if (r < nr) {
                            dot[r] += sm.q[r * dk + d] * kd;
                        }
                    }
                }
            }
            UNROLL
            for (int r = 0; r < RT; r++) {
                if (s[r] != neg_inf()) {
                    float t = dot[r] * scale;
                    if (softcap != 0.0f) {
                        t = softcap * tanhf(t);
                    }
                    s[r] += t;
                }
            }
        }
        // online softmax per row over the chunk (uniform over the warp)
        UNROLL
        for (int r = 0; r < RT; r++) {
            if (r < nr) {
                float mc = warp_max(s[r]);
                float pl = 0.0f;
                if (mc != neg_inf()) {
                    float m_new = fmaxf(m_run[r], mc);
                    float ms = m_run[r] == neg_inf() ? 0.0f : expf(m_run[r] - m_new);
                    pl = s[r] == neg_inf() ? 0.0f : expf(s[r] - m_new);
                    l_run[r] = l_run[r] * ms + warp_sum(pl);
                    m_run[r] = m_new;
                    UNROLL
                    for (int j = 0; j < 2 * NV; j++) {
                        acc[r][j] *= ms;
                    }
                }
                p[r * 32 + lane] = pl;
            }
        }
        __syncwarp();
        int nc = c_end - c0 < 32 ? c_end - c0 : 32;
        for (int l = 0; l < nc; l++) {
            const u8* vrow = v + t4_off(tv, 0, c0 + l, ik2, ik3);
            float vv[2 * NV];
            UNROLL
            for (int j = 0; j < NV; j++) {
                int d = 2 * lane + 64 * j;
                if (d < sh.dv) {
                    fa_v2(vrow, tyv, d, tv.nb[0], vec & 2, vv + 2 * j);
                } else {
                    vv[2 * j] = vv[2 * j + 1] = 0.0f;
                }
            }
            UNROLL
            for (int r = 0; r < RT; r++) {
                if (r < nr) {
                    float pv = p[r * 32 + l];
                    UNROLL
                    for (int j = 0; j < 2 * NV; j++) {
                        acc[r][j] += pv * vv[j];
                    }
                }
            }
        }
        __syncwarp(); // p is reused by the next chunk
    }
    UNROLL
    for (int r = 0; r < RT; r++) {
        if (r >= nr) {
            continue;
        }
        int row = r0 + r;
        int iq1 = row / sh.g;
        int h = ik2 * sh.g + row % sh.g;
        if (n_seg > 1) {
            float* o = part + ((i64)(blockIdx.z * sh.n_rows + row) * n_seg + seg) * (sh.dv + 2);
            if (lane == 0) {
                o[0] = m_run[r];
                o[1] = l_run[r];
            }
            UNROLL
            for (int j = 0; j < NV; j++) {
                int d = 2 * lane + 64 * j;
                if (d < sh.dv) {
                    o[2 + d] = acc[r][2 * j];
                    o[3 + d] = acc[r][2 * j + 1];
                }
            }
            continue;
        }
        float ms = 1.0f;
        if (has_sinks) {
            ms = fa_sink(sinks[h], &m_run[r], &l_run[r]);
        }
        float inv = l_run[r] == 0.0f ? 0.0f : ms / l_run[r];
        UNROLL
        for (int j = 0; j < NV; j++) {
            int d = 2 * lane + 64 * j;
            if (d < sh.dv) {
                *(float*)(dst + t4_off(td, d, h, iq1, iq3)) = acc[r][2 * j] * inv;
                *(float*)(dst + t4_off(td, d + 1, h, iq1, iq3)) = acc[r][2 * j + 1] * inv;
            }
        }
    }
}

// The instances, one per output width: dv <= 64 NV with RT rows packed
// (the host picks the smallest that holds dv and `rt` <= RT rows with
// rt * dk <= FAV_QMAX). Each is a plain `extern "C"` kernel (build.rs reads
// their parameters and shared memory from the text).
extern "C" __global__ void k_fa_vec_64(u8* dst, T4 td, float* part, int n_seg, int seg_cells,
                                  const u8* q, T4 tq, int tyq, const u8* k, T4 tk, int tyk,
                                  const u8* v, T4 tv, int tyv, const u8* mask, T4 tm, int tym,
                                  int has_mask, const float* sinks, int has_sinks, float scale,
                                  float max_bias, float m0, float m1, int n_head_log2,
                                  float softcap, int rt, int vec) {
    __shared__ float sq[FAV_QMAX];
    __shared__ int sq8[FAV_QMAX / 4];
    __shared__ float sqd[FAV_QMAX / 32];
    __shared__ float sqs[FAV_QMAX / 16];
    __shared__ float sp[FAV_WARPS * FAV_RT * 32];
    __shared__ i64 smoff[FAV_RT];
    __shared__ float sslope[FAV_RT];
    FaVecSmem sm = {sq, sq8, sqd, sqs, sp, smoff, sslope};
    fa_vec<1, 8>(dst, td, part, n_seg, seg_cells, q, tq, tyq, k, tk, tyk, v, tv, tyv, mask, tm,
                 tym, has_mask, sinks, has_sinks, scale, max_bias, m0, m1, n_head_log2, softcap,
                 rt, vec, sm);
}

extern "C" __global__ void k_fa_vec_128(u8* dst, T4 td, float* part, int n_seg, int seg_cells,
                                  const u8* q, T4 tq, int tyq, const u8* k, T4 tk, int tyk,
                                  const u8* v, T4 tv, int tyv, const u8* mask, T4 tm, int tym,
                                  int has_mask, const float* sinks, int has_sinks, float scale,
                                  float max_bias, float m0, float m1, int n_head_log2,
                                  float softcap, int rt, int vec) {
    __shared__ float sq[FAV_QMAX];
    __shared__ int sq8[FAV_QMAX / 4];
    __shared__ float sqd[FAV_QMAX / 32];
    __shared__ float sqs[FAV_QMAX / 16];
    __shared__ float sp[FAV_WARPS * FAV_RT * 32];
    __shared__ i64 smoff[FAV_RT];
    __shared__ float sslope[FAV_RT];
    FaVecSmem sm = {sq, sq8, sqd, sqs, sp, smoff, sslope};
    fa_vec<2, 8>(dst, td, part, n_seg, seg_cells, q, tq, tyq, k, tk, tyk, v, tv, tyv, mask, tm,
                 tym, has_mask, sinks, has_sinks, scale, max_bias, m0, m1, n_head_log2, softcap,
                 rt, vec, sm);
}

extern "C" __global__ void k_fa_vec_256(u8* dst, T4 td, float* part, int n_seg, int seg_cells,
                                  const u8* q, T4 tq, int tyq, const u8* k, T4 tk, int tyk,
                                  const u8* v, T4 tv, int tyv, const u8* mask, T4 tm, int tym,
                                  int has_mask, const float* sinks, int has_sinks, float scale,
                                  float max_bias, float m0, float m1, int n_head_log2,
                                  float softcap, int rt, int vec) {
    __shared__ float sq[FAV_QMAX];
    __shared__ int sq8[FAV_QMAX / 4];
    __shared__ float sqd[FAV_QMAX / 32];
    __shared__ float sqs[FAV_QMAX / 16];
    __shared__ float sp[FAV_WARPS * FAV_RT * 32];
    __shared__ i64 smoff[FAV_RT];
    __shared__ float sslope[FAV_RT];
    FaVecSmem sm = {sq, sq8, sqd, sqs, sp, smoff, sslope};
    fa_vec<4, 4>(dst, td, part, n_seg, seg_cells, q, tq, tyq, k, tk, tyk, v, tv, tyv, mask, tm,
                 tym, has_mask, sinks, has_sinks, scale, max_bias, m0, m1, n_head_log2, softcap,
                 rt, vec, sm);
}

extern "C" __global__ void k_fa_vec_512(u8* dst, T4 td, float* part, int n_seg, int seg_cells,
                                  const u8* q, T4 tq, int tyq, const u8* k, T4 tk, int tyk,
                                  const u8* v, T4 tv, int tyv, const u8* mask, T4 tm, int tym,
                                  int has_mask, const float* sinks, int has_sinks, float scale,
                                  float max_bias, float m0, float m1, int n_head_log2,
                                  float softcap, int rt, int vec) {
    __shared__ float sq[FAV_QMAX];
    __shared__ int sq8[FAV_QMAX / 4];
    __shared__ float sqd[FAV_QMAX / 32];
    __shared__ float sqs[FAV_QMAX / 16];
    __shared__ float sp[FAV_WARPS * FAV_RT * 32];
    __shared__ i64 smoff[FAV_RT];
    __shared__ float sslope[FAV_RT];
    FaVecSmem sm = {sq, sq8, sqd, sqs, sp, smoff, sslope};
    fa_vec<8, 4>(dst, td, part, n_seg, seg_cells, q, tq, tyq, k, tk, tyk, v, tv, tyv, mask, tm,
                 tym, has_mask, sinks, has_sinks, scale, max_bias, m0, m1, n_head_log2, softcap,
                 rt, vec, sm);
}

// Merge the segments of `k_fa_vec_*` (n_seg > 1): per row the maximum of
// the segments' maxima, their sums and outputs rescaled to it, the sink,
// the division. One warp per row of `part` (rows of KV head z at z *
// n_rows); grid ceil(rows / 4), block 128.
extern "C" __global__ void k_fa_combine(u8* dst, T4 td, const float* part, int n_seg, T4 tq,
                                        T4 tk, int dv, const float* sinks, int has_sinks) {
    int wid = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    int g = (int)(tq.ne[2] / tk.ne[2]);
    int n_rows = (int)tq.ne[1] * g;
    i64 grow = (i64)blockIdx.x * 4 + wid;
    int n_head_kv = (int)tk.ne[2];
    if (grow >= (i64)n_rows * n_head_kv * tq.ne[3]) {
        return;
    }
    int z = (int)(grow / n_rows);
    int row = (int)(grow % n_rows);
    int ik2 = z % n_head_kv;
    int iq3 = z / n_head_kv;
    int iq1 = row / g;
    int h = ik2 * g + row % g;
    const float* o = part + grow * n_seg * (dv + 2);
    float m = neg_inf();
    for (int s = 0; s < n_seg; s++) {
        m = fmaxf(m, o[s * (dv + 2)]);
    }
    float l = 0.0f;
    for (int s = 0; s < n_seg; s++) {
        float ms = o[s * (dv + 2)];
        if (ms != neg_inf()) {
            l += o[s * (dv + 2) + 1] * expf(ms - m);
        }
    }
    float mo = m;
    float sink_scale = 1.0f;
    if (has_sinks) {
        sink_scale = fa_sink(sinks[h], &mo, &l);
    }
    float inv = l == 0.0f ? 0.0f : sink_scale / l;
    for (int d = lane; d < dv; d += 32) {
        float a = 0.0f;
        for (int s = 0; s < n_seg; s++) {
            float ms = o[s * (dv + 2)];
            if (ms != neg_inf()) {
                a += o[s * (dv + 2) + 2 + d] * expf(ms - m);
            }
        }
        *(float*)(dst + t4_off(td, d, h, iq1, iq3)) = a * inv;
    }
}

// ----------------------------------------- tensor-core kernel (prompts)
//
// `k_fa_mma_64` / `k_fa_mma_128`: F16 or BF16 K and V (one type), head
// dimension D = dk = dv of 64 or 128, K/V rows 16-byte aligned. A block of
// FAM_WARPS warps takes 16 * FAM_WARPS rows of one KV head (the rows
// packed as in the vector kernel: (query, head) with the head fastest, so a
// KV head's query heads share every K/V tile) and walks the cells in tiles
// of FAM_KC:
// - the tiles go global -> shared by `cp.async` (16 bytes per copy),
//   double-buffered: tile t + 1 is in flight while tile t is used;
// - per warp S (16 rows x FAM_KC cells) = Q K^T by m16n8k16 MMAs, Q's
//   fragments held in registers for the whole kernel (read once from q,
//   rounded to the K type), K's from shared by `ldmatrix` (4 tiles a call);
// - scale, softcap and slope * mask on S's fragments, an online softmax
//   per row (quad shuffles: a row's values sit on the 4 lanes of a quad),
//   the probabilities rounded to the V type and repacked in registers as
//   the A fragments of O += P V (the C layout of m16n8 is the A layout of
//   m16n8k16), V's B fragments by `ldmatrix.trans`;
// - a warp whose rows are all masked for a tile (causal prompts) skips it.
// F32 accumulators throughout; the result divides by the row sums (with
// the sink) at the end. The fragment layouts are PTX's (`prelude.h`).

#define FAM_WARPS 4
#define FAM_KC 32
// halves per shared K/V row: D + 8 (16 bytes of padding: the 8 rows an
// ldmatrix reads fall in different banks)
#define FAM_PAD 8

// Two f32 rounded to the 16-bit type (F16 or BF16) packed low, high.
__device__ __forceinline__ u32 fa_pack2(float lo, float hi, int bf) {
    u16 a = bf ? f2bf(lo) : f2h(lo);
    u16 b = bf ? f2bf(hi) : f2h(hi);
    return (u32)a | ((u32)b << 16);
}

// The tensor-core kernel for head dimension D; `smem` holds 2 buffers x
// (K, V) x FAM_KC rows of D + FAM_PAD halves.
template <int D>
__device__ __forceinline__ void fa_mma(u8* dst, const T4& td, const u8* q, const T4& tq, int tyq,
                                       const u8* k, const T4& tk, int tykv, const u8* v,
                                       const T4& tv, const u8* mask, const T4& tm, int tym,
                                       int has_mask, const float* sinks, int has_sinks,
                                       float scale, float max_bias, float m0, float m1,
                                       int n_head_log2, float softcap, u16* smem) {
    const int RS = D + FAM_PAD; // halves per shared row
    FaShape sh = fa_shape(tq, tk, tv);
    int bf = tykv == T_BF16;
    int wid = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    int g = lane >> 2;
    int t = lane & 3;
    int n_head_kv = (int)tk.ne[2];
    int ik2 = (int)blockIdx.y % n_head_kv;
    int iq3 = (int)blockIdx.y / n_head_kv;
    int ik3 = (int)(iq3 / (tq.ne[3] / tk.ne[3]));
    // this lane's two rows (g and g + 8 of the warp's 16)
    int rows[2];
    int live_row[2];
    int heads[2];
    int iq1s[2];
    i64 moff[2];
    float slope[2];
    for (int i = 0; i < 2; i++) {
        rows[i] = (int)blockIdx.x * (16 * FAM_WARPS) + 16 * wid + g + 8 * i;
        live_row[i] = rows[i] < sh.n_rows;
        int r = live_row[i] ? rows[i] : 0;
        iq1s[i] = r / sh.g;
        heads[i] = ik2 * sh.g + r % sh.g;
        moff[i] = has_mask ? t4_off(tm, 0, iq1s[i], heads[i] % tm.ne[2], iq3 % tm.ne[3]) : 0;
        slope[i] = alibi_slope(max_bias, heads[i], n_head_log2, m0, m1);
    }
    // Q's A fragments: k-step ks, register j: rows g (j even) / g + 8 (j
    // odd), dims 16 ks + 2t (j < 2) / 16 ks + 8 + 2t (j >= 2)
    u32 qa[D / 16][4];
    UNROLL
    for (int ks = 0; ks < D / 16; ks++) {
        UNROLL
        for (int j = 0; j < 4; j++) {
            int i = j & 1;
            int d = 16 * ks + 8 * (j >> 1) + 2 * t;
            float x0 = 0.0f, x1 = 0.0f;
            if (live_row[i]) {
                const u8* qrow = q + t4_off(tq, 0, iq1s[i], heads[i], iq3);
                x0 = load_f(qrow + (i64)d * tq.nb[0], tyq);
                x1 = load_f(qrow + (i64)(d + 1) * tq.nb[0], tyq);
            }
            qa[ks][j] = fa_pack2(x0, x1, bf);
        }
    }
    float o[D / 8][4];
    UNROLL
    for (int dn = 0; dn < D / 8; dn++) {
        UNROLL
        for (int j = 0; j < 4; j++) {
            o[dn][j] = 0.0f;
        }
    }
    float m_run[2] = {neg_inf(), neg_inf()};
    float l_run[2] = {0.0f, 0.0f}; // this lane's share of the row sums
    int n_tiles = (sh.n_kv + FAM_KC - 1) / FAM_KC;
    // tile `tile` into buffer `buf`: 16-byte pieces, cells past the end zero
    const int PIECES = FAM_KC * D / 8; // per K or V tile
    auto load_tile = [&](int tile, int buf) {
        u16* sk = smem + buf * 2 * FAM_KC * RS;
        u16* sv = sk + FAM_KC * RS;
        for (int i = threadIdx.x; i < 2 * PIECES; i += 32 * FAM_WARPS) {
            int isv = i >= PIECES;
            int pi = isv ? i - PIECES : i;
            int c = pi / (D / 8);
            int d8 = pi % (D / 8);
            int cell = tile * FAM_KC + c;
            u16* to = (isv ? sv : sk) + c * RS + 8 * d8;
            if (cell < sh.n_kv) {
                const u8* from = isv ? v + t4_off(tv, 8 * d8, cell, ik2, ik3)
                                     : k + t4_off(tk, 8 * d8, cell, ik2, ik3);
                cp_async16(to, from);
            } else {
                uint4 z;
                z.x = z.y = z.z = z.w = 0u;
                *(uint4*)to = z;
            }
        }
        cp_async_commit();
    };
    load_tile(0, 0);
    for (int tile = 0; tile < n_tiles; tile++) {
        if (tile + 1 < n_tiles) {
            load_tile(tile + 1, (tile + 1) & 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const u16* sk = smem + (tile & 1) * 2 * FAM_KC * RS;
        const u16* sv = sk + FAM_KC * RS;
        int c0 = tile * FAM_KC;
        // the mask term of each of this lane's S elements: [n-tile][j]
        float mv[FAM_KC / 8][4];
        int any = 0;
        UNROLL
        for (int nt = 0; nt < FAM_KC / 8; nt++) {
            UNROLL
            for (int j = 0; j < 4; j++) {
                int i = j >> 1;
                int cell = c0 + 8 * nt + 2 * t + (j & 1);
                float x = neg_inf();
                if (live_row[i] && cell < sh.n_kv) {
                    x = has_mask ? slope[i] * load_f(mask + moff[i] + (i64)cell * tm.nb[0], tym)
                                 : 0.0f;
                }
                mv[nt][j] = x;
                any |= x != neg_inf();
            }
        }
        if (__any_sync(0xffffffffu, any)) {
            float s[FAM_KC / 8][4];
            UNROLL
            for (int nt = 0; nt < FAM_KC / 8; nt++) {
                UNROLL
                for (int j = 0; j < 4; j++) {
                    s[nt][j] = 0.0f;
                }
                UNROLL
                for (int ks = 0; ks < D / 16; ks += 2) {
                    // K rows 8 nt .. 8 nt + 7, dims 16 ks .. 16 ks + 31
                    u32 b[4];
                    ldmatrix_x4(b, sk + (8 * nt + (lane & 7)) * RS + 16 * ks + 8 * (lane >> 3));
                    if (bf) {
                        mma_bf16_16x8x16(s[nt], qa[ks], b);
                        mma_bf16_16x8x16(s[nt], qa[ks + 1], b + 2);
                    } else {
                        mma_f16_16x8x16(s[nt], qa[ks], b);
                        mma_f16_16x8x16(s[nt], qa[ks + 1], b + 2);
                    }
                }
            }
            // scores, the tile's row maxima (the quad's lanes), new maxima
            float mt[2] = {neg_inf(), neg_inf()};
            UNROLL
            for (int nt = 0; nt < FAM_KC / 8; nt++) {
                UNROLL
                for (int j = 0; j < 4; j++) {
                    float x = neg_inf();
                    if (mv[nt][j] != neg_inf()) {
                        x = s[nt][j] * scale;
                        if (softcap != 0.0f) {
                            x = softcap * tanhf(x);
                        }
                        x += mv[nt][j];
                    }
                    s[nt][j] = x;
                    mt[j >> 1] = fmaxf(mt[j >> 1], x);
                }
            }
            float ms[2];
            UNROLL
            for (int i = 0; i < 2; i++) {
                mt[i] = fmaxf(mt[i], __shfl_xor_sync(0xffffffffu, mt[i], 1));
                mt[i] = fmaxf(mt[i], __shfl_xor_sync(0xffffffffu, mt[i], 2));
                float m_new = fmaxf(m_run[i], mt[i]);
                ms[i] = m_new == neg_inf() || m_run[i] == neg_inf() ? (m_new == neg_inf() ? 1.0f : 0.0f)
                                                                    : expf(m_run[i] - m_new);
                m_run[i] = m_new;
                l_run[i] *= ms[i];
            }
            UNROLL
            for (int dn = 0; dn < D / 8; dn++) {
                UNROLL
                for (int j = 0; j < 4; j++) {
                    o[dn][j] *= ms[j >> 1];
                }
            }
            // P, as the A fragments of P V (k = cells): k-step kc takes the
            // n-tiles 2 kc and 2 kc + 1
            u32 pa[FAM_KC / 16][4];
            UNROLL
            for (int nt = 0; nt < FAM_KC / 8; nt++) {
                float p[4];
                UNROLL
                for (int j = 0; j < 4; j++) {
                    int i = j >> 1;
                    p[j] = s[nt][j] == neg_inf() ? 0.0f : expf(s[nt][j] - m_run[i]);
                    l_run[i] += p[j];
                }
                pa[nt >> 1][2 * (nt & 1)] = fa_pack2(p[0], p[1], bf);
                pa[nt >> 1][2 * (nt & 1) + 1] = fa_pack2(p[2], p[3], bf);
            }
            UNROLL
            for (int kc = 0; kc < FAM_KC / 16; kc++) {
                UNROLL
                for (int dn = 0; dn < D / 8; dn += 2) {
                    // V cells 16 kc .. 16 kc + 15, dims 8 dn .. 8 dn + 15,
                    // transposed: b[0..1] for dn, b[2..3] for dn + 1
                    u32 b[4];
                    ldmatrix_x4_trans(b, sv + (16 * kc + 8 * ((lane >> 3) & 1) + (lane & 7)) * RS +
                                             8 * (dn + (lane >> 4)));
                    if (bf) {
                        mma_bf16_16x8x16(o[dn], pa[kc], b);
                        mma_bf16_16x8x16(o[dn + 1], pa[kc], b + 2);
                    } else {
                        mma_f16_16x8x16(o[dn], pa[kc], b);
                        mma_f16_16x8x16(o[dn + 1], pa[kc], b + 2);
                    }
                }
            }
        }
        __syncthreads(); // the buffer is refilled two tiles on
    }
    // row sums over the quad, the sink, the division
    UNROLL
    for (int i = 0; i < 2; i++) {
        l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 1);
        l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 2);
        float msk = 1.0f;
        if (has_sinks) {
            msk = fa_sink(sinks[heads[i]], &m_run[i], &l_run[i]);
        }
        float inv = l_run[i] == 0.0f ? 0.0f : msk / l_run[i];
        if (!live_row[i]) {
            continue;
        }
        UNROLL
        for (int dn = 0; dn < D / 8; dn++) {
            int d = 8 * dn + 2 * t;
            *(float*)(dst + t4_off(td, d, heads[i], iq1s[i], iq3)) = o[dn][2 * i] * inv;
            *(float*)(dst + t4_off(td, d + 1, heads[i], iq1s[i], iq3)) = o[dn][2 * i + 1] * inv;
        }
    }
}

// Shared memory of the instances (uint4 for its 16-byte alignment): 2
// buffers x (K, V) x FAM_KC rows of D + FAM_PAD halves.
#define FAM_SMEM_64 (2 * 2 * FAM_KC * (64 + FAM_PAD) * 2 / 16)
#define FAM_SMEM_128 (2 * 2 * FAM_KC * (128 + FAM_PAD) * 2 / 16)

// Grid (ceil(n_rows / (16 * FAM_WARPS)), n_head_kv * ne3), block
// 32 * FAM_WARPS.
extern "C" __global__ void k_fa_mma_64(u8* dst, T4 td, const u8* q, T4 tq, int tyq, const u8* k, T4 tk,
                                   int tykv, const u8* v, T4 tv, const u8* mask, T4 tm, int tym,
                                   int has_mask, const float* sinks, int has_sinks, float scale,
                                   float max_bias, float m0, float m1, int n_head_log2,
                                   float softcap) {
    __shared__ uint4 smem[FAM_SMEM_64];
    fa_mma<64>(dst, td, q, tq, tyq, k, tk, tykv, v, tv, mask, tm, tym, has_mask, sinks, has_sinks,
             scale, max_bias, m0, m1, n_head_log2, softcap, (u16*)smem);
}

extern "C" __global__ void k_fa_mma_128(u8* dst, T4 td, const u8* q, T4 tq, int tyq, const u8* k, T4 tk,
                                   int tykv, const u8* v, T4 tv, const u8* mask, T4 tm, int tym,
                                   int has_mask, const float* sinks, int has_sinks, float scale,
                                   float max_bias, float m0, float m1, int n_head_log2,
                                   float softcap) {
    __shared__ uint4 smem[FAM_SMEM_128];
    fa_mma<128>(dst, td, q, tq, tyq, k, tk, tykv, v, tv, mask, tm, tym, has_mask, sinks, has_sinks,
             scale, max_bias, m0, m1, n_head_log2, softcap, (u16*)smem);
}
