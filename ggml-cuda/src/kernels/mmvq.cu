// ---------------------------------------------------- decode mat-vec (MMVQ)
//
// Matrix-vector products for 1..MMVQ_MAX_COLS activation columns (decode):
// - activations are quantized once per op (`k_quantize_q8_1`) to 8-bit
//   values with a `Q8Ds` per 32 (scale and the sums of each 16);
// - weight rows go from global memory straight into registers, one piece
//   per lane (`mmv_pieces.cu`): no shared-memory staging; each piece is
//   dotted with every column, so a row is read once for all of them;
// - a warp takes `rpw` rows (1, 2 or 4, chosen by the host per type and
//   row length so that short rows still keep the lanes busy), each row on
//   a segment of 32 / rpw lanes whose partial sums meet in a segmented
//   butterfly;
// - F32/F16/BF16 weights take the float path (activations rounded to the
//   weight type as the CPU backend does, 16-byte loads of the row).
// `mul_mat_id` groups the (slot, token) columns that select the same
// expert, so each selected expert's rows are read once per group of
// columns; `mmvq_fused.cu` fuses the FFN around it.

// acc[j] += dot(row, column j) over the K elements of an F32/F16/BF16 row,
// column j the F32 values at b + cols.off[j] (bytes): 16-byte loads of the
// row when it is 16-byte aligned, else element loads; the segment's lanes
// take the row's words in turn.
__device__ __forceinline__ void mmvf_row(const u8* row, int ty, i64 K, const u8* b, const MmvCols& cols,
                         float* acc, int seg_lane, int width) {
    int es = ty == T_F32 ? 4 : 2;
    int per = 16 / es; // elements per 16-byte word
    int nvec = (((u64)row) & 15) == 0 ? (int)(K / per) : 0;
    for (int g = seg_lane; g < nvec; g += width) {
        uint4 v = ((const uint4*)row)[g];
        float wv[8];
        if (ty == T_F32) {
            wv[0] = u2f(v.x);
            wv[1] = u2f(v.y);
            wv[2] = u2f(v.z);
            wv[3] = u2f(v.w);
            wv[4] = wv[5] = wv[6] = wv[7] = 0.0f;
        } else {
            unpack8(v, ty == T_BF16, wv);
        }
UNROLL
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            if (j < cols.n) {
                const float* x = (const float*)(b + cols.off[j]) + g * per;
                float s = 0.0f;
                if (ty == T_F32) {
UNROLL
                    for (int i = 0; i < 4; i++) {
                        s += wv[i] * x[i];
                    }
                } else {
UNROLL
                    for (int i = 0; i < 8; i++) {
                        s += wv[i] * act_round(x[i], ty);
                    }
                }
                acc[j] += s;
            }
        }
    }
    for (int k = nvec * per + seg_lane; k < (int)K; k += width) {
        float wk = load_f(row + (i64)k * es, ty);
        UNROLL
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            if (j < cols.n) {
                acc[j] += wk * act_round(((const float*)(b + cols.off[j]))[k], ty);
            }
        }
    }
}

__device__ __forceinline__ int is_float_ty(int ty) {
    return ty == T_F32 || ty == T_F16 || ty == T_BF16;
}

// acc[j] += dot(row, column j) for a row of any weight type: quantized
// rows against the int8 columns at q8 + cols.off[j], float rows against
// the F32 ones at b + cols.off[j].
__device__ __forceinline__ void mmv_row(int ty, const u8* row, i64 K, const u8* b, const i8* q8,
                                        const Q8Ds* ds, const MmvCols& cols, float* acc,
                                        int seg_lane, int width) {
    if (is_float_ty(ty)) {
        mmvf_row(row, ty, K, b, cols, acc, seg_lane, width);
    } else {
        mmvq_row(ty, row, K, q8, ds, cols, acc, seg_lane, width);
    }
}

// A warp's place in an MMVQ block: `rpw` rows per warp, each on a segment
// of `width` lanes; `row` is this lane's row, `first` the warp's first.
struct MmvLane {
    int width, seg_lane;
    i64 row, first;
};

__device__ __forceinline__ MmvLane mmv_lane(int rpw) {
    MmvLane m;
    int wid = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    m.width = 32 / rpw;
    m.seg_lane = lane % m.width;
    m.first = ((i64)blockIdx.x * MV_WARPS + wid) * rpw;
    m.row = m.first + lane / m.width;
    return m;
}

// The expert id of (slot, token) pair p of a mul_mat_id's ids [n_used, n_tok].
__device__ __forceinline__ int mmv_id(const u8* ids, const T4& ti, int n_used, int p) {
    return *(const int*)(ids + (i64)(p % n_used) * ti.nb[0] + (i64)(p / n_used) * ti.nb[1]);
}

// mul_mat for ne11 <= MMVQ_MAX_COLS: dst[i0, i1, i2, i3] = dot(a[:, i0,
// i2 / r2, i3 / r3], b[:, i1, i2, i3]), `rpw` rows per warp and all ne11
// columns at once. Quantized `a`: `q8`/`ds` are b quantized by
// `k_quantize_q8_1` (b unused); float `a`: `b` is F32 with dense rows.
// Grid (ceil(ne0 / (MV_WARPS * rpw)), 1, ne2 * ne3), block 32 * MV_WARPS.
extern "C" __global__ void k_mmvq(float* dst, T4 td, const u8* a, T4 ta, int tya, const u8* b,
                                  T4 tb, const i8* q8, const Q8Ds* ds, i64 r2, i64 r3,
                                  int rpw) {
    MmvLane ml = mmv_lane(rpw);
    i64 i2 = blockIdx.z % td.ne[2];
    i64 i3 = blockIdx.z / td.ne[2];
    if (ml.first >= td.ne[0]) {
        return; // whole warp leaves together
    }
    int live = ml.row < td.ne[0];
    MmvCols cols;
    cols.n = (int)td.ne[1];
    int fl = is_float_ty(tya);
    UNROLL
    for (int j = 0; j < MMVQ_MAX_COLS; j++) {
        i64 jj = j < cols.n ? j : 0;
        i64 col = jj + tb.ne[1] * (i2 + tb.ne[2] * i3);
        cols.off[j] = fl ? (u32)t4_off(tb, 0, jj, i2, i3) : (u32)(col * ta.ne[0]);
    }
    float acc[MMVQ_MAX_COLS];
    UNROLL
    for (int j = 0; j < MMVQ_MAX_COLS; j++) {
        acc[j] = 0.0f;
    }
    if (live) {
        const u8* row = a + t4_off(ta, 0, ml.row, i2 / r2, i3 / r3);
        mmv_row(tya, row, ta.ne[0], b, q8, ds, cols, acc, ml.seg_lane, ml.width);
    }
    // only the used columns are reduced (cols.n is the same on every lane:
    // a uniform branch, and the loop still unrolls with acc in registers)
    UNROLL
    for (int j = 0; j < MMVQ_MAX_COLS; j++) {
        if (j < cols.n) {
            float s = warp_sum_w(acc[j], ml.width);
            if (live && ml.seg_lane == 0) {
                *(float*)((u8*)dst + t4_off(td, ml.row, j, i2, i3)) = s;
            }
        }
    }
}

// The columns of mul_mat_id pair p's expert from pair `*next` on: up to
// MMVQ_MAX_COLS pairs q >= *next with ids[q] == ex, in order (`pe`), their
// activation offsets in `cols`; *next moves past the last one taken.
// Uniform over the block (every thread reads the same ids).
__device__ __forceinline__ void mmv_id_group(const u8* ids, const T4& ti, int n_used, int np,
                                             int ex, int* next, const T4& tb, i64 K, int fl,
                                             MmvCols* cols, int* pe) {
    cols->n = 0;
    UNROLL
    for (int j = 0; j < MMVQ_MAX_COLS; j++) {
        int q = *next;
        while (q < np && mmv_id(ids, ti, n_used, q) != ex) {
            q++;
        }
        pe[j] = q < np ? q : 0;
        i64 slot = pe[j] % n_used;
        i64 t = pe[j] / n_used;
        cols->off[j] =
            fl ? (u32)t4_off(tb, 0, slot % tb.ne[1], t, 0) : (u32)((slot % tb.ne[1] + tb.ne[1] * t) * K);
        if (q < np) {
            cols->n = j + 1;
            *next = q + 1;
        } else {
            *next = np;
        }
    }
}

// Whether pair p leads its expert (no earlier pair selects the same id).
__device__ __forceinline__ int mmv_id_leads(const u8* ids, const T4& ti, int n_used, int p,
                                            int ex) {
    for (int q = 0; q < p; q++) {
        if (mmv_id(ids, ti, n_used, q) == ex) {
            return 0;
        }
    }
    return 1;
}

// mul_mat_id for few tokens: dst[i0, e, t] = dot(as[:, i0, ids[e, t]],
// b[:, e % b.ne1, t]). Block (x, p) with p = e + n_used * t leads the
// columns of its expert when no earlier pair selects the same id; the leader
// multiplies each of its rows with all those columns, MMVQ_MAX_COLS at a
// time (the expert's rows are read once per group). Id -1 gives exact zeros
// (hybrid placement: "not mine"); other bad ids set *err and give zeros.
// Quantized/float inputs as `k_mmvq` (q8 columns in b's dense order).
// Grid (ceil(ne0 / (MV_WARPS * rpw)), n_used * n_tokens), block
// 32 * MV_WARPS.
extern "C" __global__ void k_mmvq_id(float* dst, T4 td, const u8* as, T4 ta, int tya,
                                     const u8* b, T4 tb, const i8* q8, const Q8Ds* ds,
                                     const u8* ids, T4 ti, u32* err, int rpw) {
    MmvLane ml = mmv_lane(rpw);
    int n_used = (int)td.ne[1];
    int np = n_used * (int)td.ne[2];
    int p = blockIdx.y;
    if (ml.first >= td.ne[0]) {
        return;
    }
    int ex = mmv_id(ids, ti, n_used, p);
    if (!mmv_id_leads(ids, ti, n_used, p, ex)) {
        return; // an earlier block leads this expert
    }
    int bad = ex < -1 || (ex >= 0 && (i64)ex >= ta.ne[2]);
    if (bad && threadIdx.x == 0 && blockIdx.x == 0) {
        atomicOr(err, 8u);
    }
    int live = ml.row < td.ne[0];
    const u8* row = (ex >= 0 && !bad && live) ? as + t4_off(ta, 0, ml.row, ex, 0) : 0;
    int fl = is_float_ty(tya);
    int next = p;
    while (next < np) {
        MmvCols cols;
        int pe[MMVQ_MAX_COLS];
        mmv_id_group(ids, ti, n_used, np, ex, &next, tb, ta.ne[0], fl, &cols, pe);
        if (cols.n == 0) {
            break;
        }
        float acc[MMVQ_MAX_COLS];
        UNROLL
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            acc[j] = 0.0f;
        }
        if (row) {
            mmv_row(tya, row, ta.ne[0], b, q8, ds, cols, acc, ml.seg_lane, ml.width);
        }
        UNROLL
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            if (j < cols.n) { // uniform over the warp
                float s = warp_sum_w(acc[j], ml.width);
                if (live && ml.seg_lane == 0) {
                    *(float*)((u8*)dst +
                              t4_off(td, ml.row, pe[j] % n_used, pe[j] / n_used, 0)) = s;
                }
            }
        }
    }
}
