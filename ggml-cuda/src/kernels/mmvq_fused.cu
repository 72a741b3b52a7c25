// ------------------------------------------- fused expert mat-vec (decode)
//
// The MoE FFN of a decode step around `mul_mat_id`, in two kernels instead
// of up to 2 + 2 + 1 + 1 + 1 + (n_used - 1) (the backend matches the graph's
// nodes, as llama.cpp's `ggml_cuda_can_fuse`, see `fusion.rs`):
// - `k_mmvq_id_glu`: gate and up of the selected experts in one pass over
//   the shared quantized activations, each expert's gate and up rows read
//   once per group of columns, the optional per-expert biases (`add_id`)
//   and the GLU (SwiGLU, GeGLU, gpt-oss's clamped SwiGLU) in the epilogue;
// - `k_mmvq_id_down`: down of each token's experts, the optional bias, the
//   router weight and the sum over the experts (`mul` by the weights and
//   the chain of `add`s over the slots) in the epilogue.
// The row loops are MMVQ's (`mmv_pieces.cu`); quantized weights only.

// dst[i0, e, t] = glu(dot(gate[:, i0, x], b_et) + bg[i0, s], dot(up[:, i0,
// x], b_et) + bu[i0, s]) with x = ids[e, t], s = sel[e, t] (the biases'
// ids: the router's, when `ids` are the cache's slots), b_et the
// activation column (e % b.ne1, t) of `q8`/`ds` (`tb` its shape). Gate
// and up share the activations' quantization (the same group). Grouping,
// -1 and bad ids as `k_mmvq_id`; a bad bias id sets the add_id bit.
// Grid (ceil(ne0 / (MV_WARPS * rpw)), n_used * n_tokens), block
// 32 * MV_WARPS.
extern "C" __global__ void k_mmvq_id_glu(float* dst, T4 td, const u8* ag, T4 tag, int tyg,
                                         const u8* au, T4 tau, int tyu, const i8* q8,
                                         const Q8Ds* ds, T4 tb, const u8* ids, T4 ti,
                                         const u8* bg, T4 tbg, const u8* bu, T4 tbu,
                                         const u8* sel, T4 tsel, int op, float alpha,
                                         float limit, u32* err, int rpw) {
    MmvLane ml = mmv_lane(rpw);
    int n_used = (int)td.ne[1];
    int np = n_used * (int)td.ne[2];
    int p = blockIdx.y;
    if (ml.first >= td.ne[0]) {
        return;
    }
    int ex = mmv_id(ids, ti, n_used, p);
    if (!mmv_id_leads(ids, ti, n_used, p, ex)) {
        return;
    }
    int bad = ex < -1 || (ex >= 0 && (i64)ex >= tag.ne[2]);
    if (bad && threadIdx.x == 0 && blockIdx.x == 0) {
        atomicOr(err, 8u);
    }
    int live = ml.row < td.ne[0];
    int use = ex >= 0 && !bad && live;
    const u8* rg = use ? ag + t4_off(tag, 0, ml.row, ex, 0) : 0;
    const u8* ru = use ? au + t4_off(tau, 0, ml.row, ex, 0) : 0;
    i64 K = tag.ne[0];
    int next = p;
    while (next < np) {
        MmvCols cols;
        int pe[MMVQ_MAX_COLS];
        mmv_id_group(ids, ti, n_used, np, ex, &next, tb, K, 0, &cols, pe);
        if (cols.n == 0) {
            break;
        }
        float accg[MMVQ_MAX_COLS], accu[MMVQ_MAX_COLS];
        UNROLL
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            accg[j] = 0.0f;
            accu[j] = 0.0f;
        }
        if (use) {
            mmvq_row(tyg, rg, K, q8, ds, cols, accg, ml.seg_lane, ml.width);
            mmvq_row(tyu, ru, K, q8, ds, cols, accu, ml.seg_lane, ml.width);
        }
        UNROLL
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            if (j < cols.n) {
                float g = warp_sum_w(accg[j], ml.width);
                float u = warp_sum_w(accu[j], ml.width);
                if (live && ml.seg_lane == 0) {
                    int slot = pe[j] % n_used;
                    int t = pe[j] / n_used;
                    if (bg || bu) {
                        int s = *(const int*)(sel + t4_off(tsel, slot, t, 0, 0));
                        if (s < 0 || (bg && (i64)s >= tbg.ne[1]) || (bu && (i64)s >= tbu.ne[1])) {
                            atomicOr(err, 4u);
                        } else {
                            if (bg) {
                                g += *(const float*)(bg + t4_off(tbg, ml.row, s, 0, 0));
                            }
                            if (bu) {
                                u += *(const float*)(bu + t4_off(tbu, ml.row, s, 0, 0));
                            }
                        }
                    }
                    *(float*)((u8*)dst + t4_off(td, ml.row, slot, t, 0)) =
                        glu_f(op, g, u, alpha, limit);
                }
            }
        }
    }
}

// dst[i0, t] = sum over the slots e of w[0, e, t] * (dot(as[:, i0, x],
// b_et) + bd[i0, s]) with x = ids[e, t], s = sel[e, t], b_et the activation
// column (e % b.ne1, t) of `q8`/`ds`: down, its bias, the router weight and
// the sum over the experts in one pass (the experts in slot order, each
// lane weighting its partial sums). Id -1: the slot adds nothing; bad ids
// set *err (the mul_mat_id bit; the add_id bit for `sel`).
// Grid (ceil(ne0 / (MV_WARPS * rpw)), n_tokens), block 32 * MV_WARPS.
extern "C" __global__ void k_mmvq_id_down(float* dst, T4 td, const u8* as, T4 ta, int tya,
                                          const i8* q8, const Q8Ds* ds, T4 tb,
                                          const u8* ids, T4 ti, const u8* w, T4 tw,
                                          const u8* bd, T4 tbd, const u8* sel, T4 tsel,
                                          u32* err, int rpw) {
    MmvLane ml = mmv_lane(rpw);
    if (ml.first >= td.ne[0]) {
        return;
    }
    int n_used = (int)ti.ne[0];
    int t = blockIdx.y;
    int live = ml.row < td.ne[0];
    i64 K = ta.ne[0];
    float acc = 0.0f;
    for (int e = 0; e < n_used; e++) {
        int ex = mmv_id(ids, ti, n_used, e + n_used * t);
        int bad = ex < -1 || (ex >= 0 && (i64)ex >= ta.ne[2]);
        if (bad && threadIdx.x == 0 && blockIdx.x == 0) {
            atomicOr(err, 8u);
        }
        if (ex < 0 || bad) {
            continue; // uniform over the block
        }
        float we = *(const float*)(w + t4_off(tw, 0, e, t, 0));
        float a1[MMVQ_MAX_COLS];
        UNROLL
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            a1[j] = 0.0f;
        }
        if (live) {
            MmvCols cols;
            cols.n = 1;
            UNROLL
            for (int j = 0; j < MMVQ_MAX_COLS; j++) {
                cols.off[j] = (u32)((e % tb.ne[1] + tb.ne[1] * t) * K);
            }
            mmvq_row(tya, as + t4_off(ta, 0, ml.row, ex, 0), K, q8, ds, cols, a1, ml.seg_lane,
                     ml.width);
            float bias = 0.0f;
            if (bd && ml.seg_lane == 0) {
                int s = *(const int*)(sel + t4_off(tsel, e, t, 0, 0));
                if (s < 0 || (i64)s >= tbd.ne[1]) {
                    atomicOr(err, 4u);
                } else {
                    bias = *(const float*)(bd + t4_off(tbd, ml.row, s, 0, 0));
                }
            }
            acc += we * (a1[0] + bias);
        }
    }
    float s = warp_sum_w(acc, ml.width);
    if (live && ml.seg_lane == 0) {
        *(float*)((u8*)dst + t4_off(td, ml.row, t, 0, 0)) = s;
    }
}
