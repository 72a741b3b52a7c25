// ---------------------------------------------------- decode mat-vec (MMVQ)
//
// Matrix-vector products for 1..MMVQ_MAX_COLS activation columns (decode),
// after llama.cpp's MMVQ design:
// - activations are quantized once per op (`k_quantize_q8_1`) to 8-bit
//   values with one float scale per 32 elements (shared by 256 for the
//   K-quants, rounded as the CPU backend's Q8_K);
// - each warp owns one weight row and streams it in chunks of whole blocks
//   into shared memory with 16-byte loads (the row is read once for all the
//   columns of the op);
// - each lane unpacks one 32-element sub-block to int8 (`unpack_sub`) and
//   takes int8 dot products (`__dp4a`) with every column;
// - the lanes' partial sums meet in a warp-shuffle reduction.
// F32/F16/BF16 weights take the float path (activations rounded to the
// weight type as the CPU backend does, 16-byte loads of the row straight
// from global memory).
// `mul_mat_id` groups the (slot, token) columns that select the same expert,
// so each selected expert's rows are read once per group of columns.

#define MMVQ_MAX_COLS 8
// 16-byte words of one warp's staged chunk: the largest chunk is 2048 Q6_K
// elements (8 blocks of 210 bytes = 1680 bytes).
#define MMVQ_SH16 105

// Elements of a row a warp stages per step: whole blocks, and a byte count
// that is a multiple of 16 for every type (so 16-byte loads stay aligned
// when the row is).
__device__ __forceinline__ int mmvq_chunk(int ty) {
    return (ty == T_Q3_K || ty == T_Q6_K) ? 2048 : 1024;
}

// Copy `nbytes` from global `src` to this warp's shared `dst` (16-byte
// aligned), with 16-byte loads when `src` and `nbytes` allow, else 4-byte,
// else byte loads. Never reads past `src + nbytes`.
__device__ void warp_stage(uint4* dst, const u8* src, int nbytes, int lane) {
    if ((((u64)src) & 15) == 0 && (nbytes & 15) == 0) {
        const uint4* s = (const uint4*)src;
        for (int i = lane; i < (nbytes >> 4); i += 32) {
            dst[i] = s[i];
        }
    } else if ((((u64)src) & 3) == 0 && (nbytes & 3) == 0) {
        const u32* s = (const u32*)src;
        u32* d = (u32*)dst;
        for (int i = lane; i < (nbytes >> 2); i += 32) {
            d[i] = s[i];
        }
    } else {
        u8* d = (u8*)dst;
        for (int i = lane; i < nbytes; i += 32) {
            d[i] = src[i];
        }
    }
}

// The columns one warp multiplies a row with: quantized activations (index
// of the column in the `k_quantize_q8_1` output) or F32 rows.
struct MmvCols {
    int n;
    i64 qcol[MMVQ_MAX_COLS];
    const float* f[MMVQ_MAX_COLS];
};

// acc[j] += dot(row, column j) over the K elements of a quantized row,
// staged through `sh` (this warp's MMVQ_SH16 words).
__device__ void mmvq_row(const u8* row, int ty, i64 K, const i8* q8, const float* ds,
                         const MmvCols& cols, float* acc, uint4* sh, int lane) {
    int bs = blck_size(ty);
    int ts = type_size(ty);
    int ch = mmvq_chunk(ty);
    i64 nsub_row = K >> 5;
    for (i64 c0 = 0; c0 < K; c0 += ch) {
        int n_el = (int)(K - c0 < ch ? K - c0 : ch);
        __syncwarp(); // the previous chunk has been consumed
        warp_stage(sh, row + (c0 / bs) * ts, n_el / bs * ts, lane);
        __syncwarp();
        int nsub = n_el >> 5;
        for (int s = lane; s < nsub; s += 32) {
            int w[8];
            float a[2], m[2];
            int e = s * 32;
            unpack_sub(ty, (const u8*)sh + (e / bs) * ts, (e % bs) >> 5, w, a, m);
            i64 kb = (c0 >> 5) + s;
            for (int j = 0; j < MMVQ_MAX_COLS; j++) {
                if (j < cols.n) {
                    const uint4* xq = (const uint4*)(q8 + cols.qcol[j] * K + kb * 32);
                    uint4 x0 = xq[0];
                    uint4 x1 = xq[1];
                    int x[8] = {(int)x0.x, (int)x0.y, (int)x0.z, (int)x0.w,
                                (int)x1.x, (int)x1.y, (int)x1.z, (int)x1.w};
                    int si0 = 0, si1 = 0, sx0 = 0, sx1 = 0;
                    for (int i = 0; i < 4; i++) {
                        si0 = __dp4a(w[i], x[i], si0);
                        si1 = __dp4a(w[4 + i], x[4 + i], si1);
                        sx0 = __dp4a(0x01010101, x[i], sx0);
                        sx1 = __dp4a(0x01010101, x[4 + i], sx1);
                    }
                    float d8 = ds[cols.qcol[j] * nsub_row + kb];
                    acc[j] += d8 * (a[0] * (float)si0 + a[1] * (float)si1 + m[0] * (float)sx0 +
                                    m[1] * (float)sx1);
                }
            }
        }
    }
}

// Eight halves (or bfloat16s) of a 16-byte word to floats.
__device__ __forceinline__ void unpack8(uint4 v, int bf, float* o) {
    u32 u[4] = {v.x, v.y, v.z, v.w};
    for (int i = 0; i < 4; i++) {
        u16 lo = (u16)(u[i] & 0xffffu);
        u16 hi = (u16)(u[i] >> 16);
        o[2 * i] = bf ? bf2f(lo) : h2f(lo);
        o[2 * i + 1] = bf ? bf2f(hi) : h2f(hi);
    }
}

// acc[j] += dot(row, column j) over the K elements of an F32/F16/BF16 row:
// 16-byte loads of the row when it is 16-byte aligned, else element loads.
__device__ void mmvf_row(const u8* row, int ty, i64 K, const MmvCols& cols, float* acc,
                         int lane) {
    int es = ty == T_F32 ? 4 : 2;
    int per = 16 / es; // elements per 16-byte word
    i64 nvec = (((u64)row) & 15) == 0 ? K / per : 0;
    for (i64 g = lane; g < nvec; g += 32) {
        uint4 v = ((const uint4*)row)[g];
        float wv[8];
        if (ty == T_F32) {
            wv[0] = u2f(v.x);
            wv[1] = u2f(v.y);
            wv[2] = u2f(v.z);
            wv[3] = u2f(v.w);
        } else {
            unpack8(v, ty == T_BF16, wv);
        }
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            if (j < cols.n) {
                const float* x = cols.f[j] + g * per;
                float s = 0.0f;
                for (int i = 0; i < per; i++) {
                    s += wv[i] * act_round(x[i], ty);
                }
                acc[j] += s;
            }
        }
    }
    for (i64 k = nvec * per + lane; k < K; k += 32) {
        float wk = load_f(row + k * es, ty);
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            if (j < cols.n) {
                acc[j] += wk * act_round(cols.f[j][k], ty);
            }
        }
    }
}

__device__ __forceinline__ int is_float_ty(int ty) {
    return ty == T_F32 || ty == T_F16 || ty == T_BF16;
}

// mul_mat for ne11 <= MMVQ_MAX_COLS: dst[i0, i1, i2, i3] = dot(a[:, i0,
// i2 / r2, i3 / r3], b[:, i1, i2, i3]), one warp per row i0 and all ne11
// columns at once. Quantized `a`: `q8`/`ds` are b quantized by
// `k_quantize_q8_1` (b unused); float `a`: `b` is F32 with dense rows.
// Grid (ceil(ne0 / MV_WARPS), 1, ne2 * ne3), block 32 * MV_WARPS.
extern "C" __global__ void k_mmvq(float* dst, T4 td, const u8* a, T4 ta, int tya, const u8* b,
                                  T4 tb, const i8* q8, const float* ds, i64 r2, i64 r3) {
    __shared__ uint4 sh[MV_WARPS * MMVQ_SH16];
    int wid = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    i64 i0 = (i64)blockIdx.x * MV_WARPS + wid;
    i64 i2 = blockIdx.z % td.ne[2];
    i64 i3 = blockIdx.z / td.ne[2];
    if (i0 >= td.ne[0]) {
        return; // whole warp leaves together
    }
    MmvCols cols;
    cols.n = (int)td.ne[1];
    for (int j = 0; j < MMVQ_MAX_COLS; j++) {
        i64 jj = j < cols.n ? j : 0;
        cols.qcol[j] = jj + tb.ne[1] * (i2 + tb.ne[2] * i3);
        cols.f[j] = (const float*)(b + t4_off(tb, 0, jj, i2, i3));
    }
    const u8* row = a + t4_off(ta, 0, i0, i2 / r2, i3 / r3);
    float acc[MMVQ_MAX_COLS];
    for (int j = 0; j < MMVQ_MAX_COLS; j++) {
        acc[j] = 0.0f;
    }
    if (is_float_ty(tya)) {
        mmvf_row(row, tya, ta.ne[0], cols, acc, lane);
    } else {
        mmvq_row(row, tya, ta.ne[0], q8, ds, cols, acc, sh + wid * MMVQ_SH16, lane);
    }
    // only the used columns are reduced (cols.n is the same on every lane:
    // a uniform branch, and the loop still unrolls with acc in registers)
    for (int j = 0; j < MMVQ_MAX_COLS; j++) {
        if (j < cols.n) {
            float s = warp_sum(acc[j]);
            if (lane == 0) {
                *(float*)((u8*)dst + t4_off(td, i0, j, i2, i3)) = s;
            }
        }
    }
}

// mul_mat_id for few tokens: dst[i0, e, t] = dot(as[:, i0, ids[e, t]],
// b[:, e % b.ne1, t]). Block (x, p) with p = e + n_used * t leads the
// columns of its expert when no earlier pair selects the same id; the leader
// multiplies each of its rows with all those columns, MMVQ_MAX_COLS at a
// time (the expert's rows are read once per group). Id -1 gives exact zeros
// (hybrid placement: "not mine"); other bad ids set *err and give zeros.
// Quantized/float inputs as `k_mmvq` (q8 columns in b's dense order).
// Grid (ceil(ne0 / MV_WARPS), n_used * n_tokens), block 32 * MV_WARPS.
extern "C" __global__ void k_mmvq_id(float* dst, T4 td, const u8* as, T4 ta, int tya,
                                     const u8* b, T4 tb, const i8* q8, const float* ds,
                                     const u8* ids, T4 ti, u32* err) {
    __shared__ uint4 sh[MV_WARPS * MMVQ_SH16];
    int wid = threadIdx.x >> 5;
    int lane = threadIdx.x & 31;
    i64 i0 = (i64)blockIdx.x * MV_WARPS + wid;
    i64 n_used = td.ne[1];
    i64 np = n_used * td.ne[2];
    i64 p = blockIdx.y;
    if (i0 >= td.ne[0]) {
        return;
    }
    int ex = *(const int*)(ids + t4_off(ti, p % n_used, p / n_used, 0, 0));
    for (i64 q = 0; q < p; q++) {
        if (*(const int*)(ids + t4_off(ti, q % n_used, q / n_used, 0, 0)) == ex) {
            return; // an earlier block leads this expert
        }
    }
    int bad = ex < -1 || (ex >= 0 && (i64)ex >= ta.ne[2]);
    if (bad && lane == 0) {
        atomicOr(err, 8u);
    }
    const u8* row = (ex >= 0 && !bad) ? as + t4_off(ta, 0, i0, ex, 0) : 0;
    i64 next = p;
    while (next < np) {
        MmvCols cols;
        i64 pe[MMVQ_MAX_COLS];
        cols.n = 0;
        for (; next < np && cols.n < MMVQ_MAX_COLS; next++) {
            i64 e = next % n_used;
            i64 t = next / n_used;
            if (*(const int*)(ids + t4_off(ti, e, t, 0, 0)) != ex) {
                continue;
            }
            pe[cols.n] = next;
            cols.qcol[cols.n] = e % tb.ne[1] + tb.ne[1] * t;
            cols.f[cols.n] = (const float*)(b + t4_off(tb, 0, e % tb.ne[1], t, 0));
            cols.n++;
        }
        if (cols.n == 0) {
            break;
        }
        float acc[MMVQ_MAX_COLS];
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            acc[j] = 0.0f;
        }
        if (row) {
            if (is_float_ty(tya)) {
                mmvf_row(row, tya, ta.ne[0], cols, acc, lane);
            } else {
                mmvq_row(row, tya, ta.ne[0], q8, ds, cols, acc, sh + wid * MMVQ_SH16, lane);
            }
        }
        for (int j = 0; j < MMVQ_MAX_COLS; j++) {
            if (j < cols.n) { // uniform over the warp
                float s = warp_sum(acc[j]);
                if (lane == 0) {
                    *(float*)((u8*)dst + t4_off(td, i0, pe[j] % n_used, pe[j] / n_used, 0)) = s;
                }
            }
        }
    }
}
