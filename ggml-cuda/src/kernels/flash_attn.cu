// ------------------------------------------------------- flash attention
//
// flash_attn_ext: dst[:, h, i, i3] = softmax(scale * q·k + slope * mask
// (+ sink)) · v for each query row, with an online softmax, one warp per
// (query, head) row. Per chunk of 32 cached cells each lane takes one cell:
// its score (q·k over the head dimension), then the chunk's maximum and sum
// by warp shuffles; the chunk's probabilities go through shared memory and
// every lane accumulates its own output dimensions (lane + 32 j) over the
// chunk's cells. Decode (1 query) and prompts (many) run the same kernel.
//
// Numerics follow the CPU backend: q is rounded to F16 (BF16) when k is
// F16 (BF16); a block-quantized k (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL
// caches) is dotted with q quantized to 8 bits per 32 (`unpack_sub` and
// `__dp4a`, as the CPU's Q8_0 vec_dot); v of any weight type is
// dequantized per element and accumulated in f32 (the CPU accumulates an
// F16 v in an F16 row: within the op tests' F16 bound). Sinks (gpt-oss)
// join the softmax after the cells; MLA's shapes (head dimension 576 for
// k, 512 for v) fit FA_DMAX.

#define FA_WARPS 4
// Largest head dimension of q/k and of v (deepseek2's MLA: 576 / 512).
#define FA_DMAX 576
#define FA_DV_LANE (FA_DMAX / 32)

// The slope of head h for ALiBi (1 without max_bias), as k_soft_max.
__device__ __forceinline__ float alibi_slope(float max_bias, int h, int n_head_log2, float m0,
                                             float m1) {
    if (max_bias <= 0.0f) {
        return 1.0f;
    }
    return h < n_head_log2 ? powf(m0, (float)(h + 1))
                           : powf(m1, (float)(2 * (h - n_head_log2) + 1));
}

// Grid (ceil(rows / FA_WARPS)) with rows = n_q * n_head * ne3 (head
// fastest), block 32 * FA_WARPS. `q8` selects the quantized-k path (k of a
// 32-element block type); dst is F32 [dv, n_head, n_q, ne3].
extern "C" __global__ void k_flash_attn(u8* dst, T4 td, const u8* q, T4 tq, int tyq,
                                        const u8* k, T4 tk, int tyk, const u8* v, T4 tv,
                                        int tyv, const u8* mask, T4 tm, int tym, int has_mask,
                                        const float* sinks, int has_sinks, float scale,
                                        float max_bias, float m0, float m1, int n_head_log2,
                                        float softcap) {
    __shared__ float sq[FA_WARPS * FA_DMAX];
    __shared__ int sq8[FA_WARPS * FA_DMAX / 4];
    __shared__ float sqd[FA_WARPS * FA_DMAX / 32];
    __shared__ float sqs[FA_WARPS * FA_DMAX / 16];
    __shared__ float sp[FA_WARPS * 32];
    int wid = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    i64 dk = tq.ne[0];
    i64 dv = tv.ne[0];
    i64 n_kv = tk.ne[1];
    i64 n_head = tq.ne[2];
    i64 n_q = tq.ne[1];
    i64 row = (i64)blockIdx.x * FA_WARPS + wid;
    if (row >= n_q * n_head * tq.ne[3]) {
        return; // whole warp leaves together
    }
    i64 iq2 = row % n_head;
    i64 iq1 = (row / n_head) % n_q;
    i64 iq3 = row / (n_head * n_q);
    i64 ik2 = iq2 / (n_head / tk.ne[2]);
    i64 ik3 = iq3 / (tq.ne[3] / tk.ne[3]);
    float slope = alibi_slope(max_bias, (int)iq2, n_head_log2, m0, m1);
    float* qf = sq + wid * FA_DMAX;
    int* q8 = sq8 + wid * (FA_DMAX / 4);
    float* qd = sqd + wid * (FA_DMAX / 32);
    float* qs = sqs + wid * (FA_DMAX / 16);
    float* p = sp + wid * 32;
    int quant_k = !(tyk == T_F32 || tyk == T_F16 || tyk == T_BF16);
    const u8* qrow = q + t4_off(tq, 0, iq1, iq2, iq3);
    for (i64 d = lane; d < dk; d += 32) {
        qf[d] = act_round(load_f(qrow + d * tq.nb[0], tyq), tyk);
    }
    __syncwarp();
    if (quant_k) {
        // q to 8 bits per 32 (the CPU's Q8_0: d = amax / 127 rounded to f16)
        for (i64 b0 = 0; b0 < dk; b0 += 32) {
            float x = qf[b0 + lane];
            float amax = warp_max(fabsf(x));
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            ((i8*)q8)[b0 + lane] = (i8)(int)roundf(x * id);
            if (lane == 0) {
                qd[b0 >> 5] = h2f(f2h(d));
            }
        }
        __syncwarp();
        for (i64 h = lane; h < (dk >> 4); h += 32) {
            int s = 0;
            for (int i = 0; i < 4; i++) {
                s = __dp4a(0x01010101, q8[h * 4 + i], s);
            }
            qs[h] = (float)s;
        }
        __syncwarp();
    }
    int bs = blck_size(tyk);
    int ts = type_size(tyk);
    float acc[FA_DV_LANE];
    for (int j = 0; j < FA_DV_LANE; j++) {
        acc[j] = 0.0f;
    }
    float m_run = neg_inf();
    float s_run = 0.0f;
    const u8* mrow = has_mask ? mask + t4_off(tm, 0, iq1, iq2 % tm.ne[2], iq3 % tm.ne[3]) : 0;
    for (i64 c0 = 0; c0 < n_kv; c0 += 32) {
        i64 ic = c0 + lane;
        float s = neg_inf();
        if (ic < n_kv) {
            float mv = has_mask ? slope * load_f(mrow + ic * tm.nb[0], tym) : 0.0f;
            if (mv != neg_inf()) {
                const u8* krow = k + t4_off(tk, 0, ic, ik2, ik3);
                float dot = 0.0f;
                if (quant_k) {
                    for (i64 b0 = 0; b0 < dk; b0 += 32) {
                        int w[8];
                        float a[2], m[2];
                        unpack_sub(tyk, krow + (b0 / bs) * ts, (int)((b0 % bs) >> 5), w, a, m);
                        const int* x = q8 + (b0 >> 2);
                        int si0 = 0, si1 = 0;
                        for (int i = 0; i < 4; i++) {
                            si0 = __dp4a(w[i], x[i], si0);
                            si1 = __dp4a(w[4 + i], x[4 + i], si1);
                        }
                        dot += qd[b0 >> 5] * (a[0] * (float)si0 + a[1] * (float)si1 +
                                              m[0] * qs[b0 >> 4] + m[1] * qs[(b0 >> 4) + 1]);
                    }
                } else {
                    for (i64 d = 0; d < dk; d++) {
                        dot += qf[d] * load_f(krow + d * tk.nb[0], tyk);
                    }
                }
                s = dot * scale;
                if (softcap != 0.0f) {
                    s = softcap * tanhf(s);
                }
                s += mv;
            }
        }
        float mc = warp_max(s);
        if (mc == neg_inf()) {
            continue; // every cell of the chunk masked (warp-uniform)
        }
        float m_new = fmaxf(m_run, mc);
        float ms = m_run == neg_inf() ? 0.0f : expf(m_run - m_new);
        float pl = s == neg_inf() ? 0.0f : expf(s - m_new);
        s_run = s_run * ms + warp_sum(pl);
        m_run = m_new;
        p[lane] = pl;
        __syncwarp();
        for (int j = 0; j < FA_DV_LANE; j++) {
            acc[j] *= ms;
        }
        i64 nc = n_kv - c0 < 32 ? n_kv - c0 : 32;
        for (i64 l = 0; l < nc; l++) {
            float pv = p[l];
            if (pv == 0.0f) {
                continue;
            }
            const u8* vrow = v + t4_off(tv, 0, c0 + l, ik2, ik3);
            for (int j = 0; j < FA_DV_LANE; j++) {
                i64 d = lane + 32 * j;
                if (d < dv) {
                    acc[j] += pv * (tyv == T_F32 || tyv == T_F16 || tyv == T_BF16
                                        ? load_f(vrow + d * tv.nb[0], tyv)
                                        : load_row_elem(vrow, tyv, d));
                }
            }
        }
        __syncwarp(); // p is reused by the next chunk
    }
    if (has_sinks) {
        float sk = sinks[iq2];
        float ms = 1.0f;
        float vs = 1.0f;
        if (sk > m_run) {
            ms = m_run == neg_inf() ? 0.0f : expf(m_run - sk);
            for (int j = 0; j < FA_DV_LANE; j++) {
                acc[j] *= ms;
            }
        } else {
            vs = expf(sk - m_run);
        }
        s_run = s_run * ms + vs;
    }
    float inv = s_run == 0.0f ? 0.0f : 1.0f / s_run;
    for (int j = 0; j < FA_DV_LANE; j++) {
        i64 d = lane + 32 * j;
        if (d < dv) {
            *(float*)(dst + t4_off(td, d, iq2, iq1, iq3)) = acc[j] * inv;
        }
    }
}
