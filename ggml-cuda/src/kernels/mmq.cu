// ------------------------------------------------- prompt mat-mat (MMQ)
//
// Matrix products for prompt batches (more than MMVQ_MAX_COLS columns) with
// quantized weights, after llama.cpp's MMQ design: the activations are
// quantized once per op (`k_quantize_q8_1`, the same rounding as the CPU
// backend's activation types), and each block computes a tile of
// MMQ_TM weight rows x MMQ_TN columns on int8 tensor cores: per K step of
// MMQ_TK elements the block unpacks its rows' sub-blocks to int8 in shared
// memory (with the affine map of each 16-element half) and stages the
// columns' int8 values and scales beside them; each of the 8 warps then
// takes one 16 x 8 sub-tile through `mma_s8_16x8x16` (m16n8k16 int8 MMA on
// sm_80+, its shuffle + `__dp4a` form elsewhere), one product per 16
// elements, scaled per half into f32 accumulators.
//
// `mul_mat_id` for prompts is grouped by expert: `k_moe_group` counts the
// ubatch's (slot, token) pairs per expert id on the device, sorts them by
// expert and lists tiles of at most MMQ_TN pairs of one expert;
// `k_mmq_id` runs one tile per block over that expert's rows and scatters
// the results back to (slot, token). Id -1 and bad ids go to an extra
// bucket whose tiles write zeros (bad ids also set the error flag).

#define MMQ_TM 32
#define MMQ_TN 32
#define MMQ_TK 256
// ints per staged row of MMQ_TK int8 values, padded against bank conflicts
#define MMQ_ROW_INTS 65

// The block's shared tiles (one set per block).
struct MmqSmem {
    int* w;     // [MMQ_TM][MMQ_ROW_INTS] weight int8
    float* wa;  // [MMQ_TM][16] scale of each 16-element half
    float* wm;  // [MMQ_TM][16] offset of each half
    int* x;     // [MMQ_TN][MMQ_ROW_INTS] activation int8
    float* xd;  // [MMQ_TN][8] activation scale of each 32
    float* xs;  // [MMQ_TN][16] sum of the int8 of each half
};

// One tile: rows row0.. of the weight (`rows` at `a_base`, stride `nbr`
// bytes, type `ty`, `nrows` valid rows), columns given by `qcol` (index in
// the quantized activations) and `dsto` (byte offset of the column in dst),
// `ncols` valid. dst element (row0 + r, column c) at dst + dsto[c] +
// (row0 + r) * nb0d. Block 256 threads.
__device__ void mmq_tile(const u8* a_base, i64 nbr, int ty, i64 nrows, i64 row0, i64 K,
                         const i8* q8, const Q8Ds* ds, const i64* qcol, const i64* dsto,
                         int ncols, u8* dst, i64 nb0d, MmqSmem sm) {
    int tid = threadIdx.x;
    int bs = blck_size(ty);
    int ts = type_size(ty);
    i64 nsub_row = K >> 5;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int lane = tid & 31;
    int wid = tid >> 5;
    int g = lane >> 2;
    int t = lane & 3;
    int wr = 16 * (wid & 1); // this warp's 16 x 8 sub-tile
    int wc = 8 * (wid >> 1);
    for (i64 k0 = 0; k0 < K; k0 += MMQ_TK) {
        // stage: thread -> (row or column tid / 8, sub-block tid % 8)
        {
            int rr = tid >> 3;
            int s = tid & 7;
            i64 kb = (k0 >> 5) + s;
            int w[8];
            float wa[2], wm[2];
            if (row0 + rr < nrows && kb < nsub_row) {
                const u8* row = a_base + (row0 + rr) * nbr;
                i64 e = kb * 32;
                unpack_sub(ty, row + (e / bs) * ts, (int)((e % bs) >> 5), w, wa, wm);
            } else {
                for (int i = 0; i < 8; i++) {
                    w[i] = 0;
                }
                wa[0] = wa[1] = wm[0] = wm[1] = 0.0f;
            }
            for (int i = 0; i < 8; i++) {
                sm.w[rr * MMQ_ROW_INTS + s * 8 + i] = w[i];
            }
            for (int h = 0; h < 2; h++) {
                sm.wa[rr * 16 + 2 * s + h] = wa[h];
                sm.wm[rr * 16 + 2 * s + h] = wm[h];
            }
            int c = rr;
            int x[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float d = 0.0f;
            if (c < ncols && kb < nsub_row) {
                const uint4* xq = (const uint4*)(q8 + qcol[c] * K + kb * 32);
                uint4 x0 = xq[0];
                uint4 x1 = xq[1];
                x[0] = (int)x0.x;
                x[1] = (int)x0.y;
                x[2] = (int)x0.z;
                x[3] = (int)x0.w;
                x[4] = (int)x1.x;
                x[5] = (int)x1.y;
                x[6] = (int)x1.z;
                x[7] = (int)x1.w;
                d = ds[qcol[c] * nsub_row + kb].d;
            }
            int s0 = 0, s1 = 0;
            for (int i = 0; i < 4; i++) {
                s0 = __dp4a(0x01010101, x[i], s0);
                s1 = __dp4a(0x01010101, x[4 + i], s1);
            }
            for (int i = 0; i < 8; i++) {
                sm.x[c * MMQ_ROW_INTS + s * 8 + i] = x[i];
            }
            sm.xd[c * 8 + s] = d;
            sm.xs[c * 16 + 2 * s] = (float)s0;
            sm.xs[c * 16 + 2 * s + 1] = (float)s1;
        }
        __syncthreads();
        // warp wid: rows 16 * (wid & 1).., columns 8 * (wid >> 1)..; one
        // tensor-core product per 16-element half (each half has its own
        // weight scale)
        for (int s = 0; s < 8; s++) {
            for (int h = 0; h < 2; h++) {
                int k4 = s * 8 + h * 4 + t;
                int a[2] = {sm.w[(wr + g) * MMQ_ROW_INTS + k4],
                            sm.w[(wr + g + 8) * MMQ_ROW_INTS + k4]};
                int bq = sm.x[(wc + g) * MMQ_ROW_INTS + k4];
                int ci[4] = {0, 0, 0, 0};
                mma_s8_16x8x16(ci, a, bq);
                for (int i = 0; i < 4; i++) {
                    int rr = wr + g + 8 * (i >> 1);
                    int cc = wc + 2 * t + (i & 1);
                    acc[i] += sm.xd[cc * 8 + s] *
                              (sm.wa[rr * 16 + 2 * s + h] * (float)ci[i] +
                               sm.wm[rr * 16 + 2 * s + h] * sm.xs[cc * 16 + 2 * s + h]);
                }
            }
        }
        __syncthreads();
    }
    for (int i = 0; i < 4; i++) {
        int rr = wr + g + 8 * (i >> 1);
        int cc = wc + 2 * t + (i & 1);
        if (cc < ncols && row0 + rr < nrows) {
            *(float*)(dst + dsto[cc] + (row0 + rr) * nb0d) = acc[i];
        }
    }
}

// mul_mat with quantized `a` for prompts: dst[i0, i1, i2, i3] = dot(a[:,
// i0, i2 / r2, i3 / r3], b[:, i1, i2, i3]) with b quantized by
// `k_quantize_q8_1` (q8/ds; `tb` gives b's shape). Grid (ceil(ne0 /
// MMQ_TM), ceil(ne1 / MMQ_TN), ne2 * ne3), block 256.
extern "C" __global__ void k_mmq(u8* dst, T4 td, const u8* a, T4 ta, int tya, T4 tb,
                                 const i8* q8, const Q8Ds* ds, i64 r2, i64 r3) {
    __shared__ int sw[MMQ_TM * MMQ_ROW_INTS];
    __shared__ float swa[MMQ_TM * 16];
    __shared__ float swm[MMQ_TM * 16];
    __shared__ int sx[MMQ_TN * MMQ_ROW_INTS];
    __shared__ float sxd[MMQ_TN * 8];
    __shared__ float sxs[MMQ_TN * 16];
    __shared__ i64 sqc[MMQ_TN];
    __shared__ i64 sdo[MMQ_TN];
    i64 i2 = blockIdx.z % td.ne[2];
    i64 i3 = blockIdx.z / td.ne[2];
    i64 col0 = (i64)blockIdx.y * MMQ_TN;
    i64 left = td.ne[1] - col0;
    int ncols = left < MMQ_TN ? (int)left : MMQ_TN;
    if (threadIdx.x < MMQ_TN) {
        i64 i1 = col0 + (threadIdx.x < (u32)ncols ? threadIdx.x : 0);
        sqc[threadIdx.x] = i1 + tb.ne[1] * (i2 + tb.ne[2] * i3);
        sdo[threadIdx.x] = t4_off(td, 0, i1, i2, i3);
    }
    __syncthreads();
    MmqSmem sm = {sw, swa, swm, sx, sxd, sxs};
    const u8* a_base = a + t4_off(ta, 0, 0, i2 / r2, i3 / r3);
    mmq_tile(a_base, ta.nb[1], tya, ta.ne[1], (i64)blockIdx.x * MMQ_TM, ta.ne[0], q8, ds, sqc,
             sdo, ncols, dst, td.nb[0], sm);
}

// Group the (slot, token) pairs of `ids` [n_used, n_tokens] by expert: one
// block. `cnt` and `fill` have n_expert + 1 ints, `off` n_expert + 2,
// `sorted` n_used * n_tokens, `tiles` 2 ints per tile (bucket, first pair
// in the bucket), `n_tiles` 1. Bucket n_expert holds -1 and bad ids (these
// set *err).
extern "C" __global__ void k_moe_group(const u8* ids, T4 ti, int n_expert, int* cnt, int* fill,
                                       int* off, int* sorted, int* tiles, int* n_tiles,
                                       u32* err) {
    i64 n_used = ti.ne[0];
    i64 np = n_used * ti.ne[1];
    for (int e = threadIdx.x; e <= n_expert; e += blockDim.x) {
        cnt[e] = 0;
        fill[e] = 0;
    }
    __syncthreads();
    for (i64 p = threadIdx.x; p < np; p += blockDim.x) {
        int ex = *(const int*)(ids + t4_off(ti, p % n_used, p / n_used, 0, 0));
        int bucket = (ex >= 0 && ex < n_expert) ? ex : n_expert;
        if (ex < -1 || ex >= n_expert) {
            atomicOr(err, 8u);
        }
        atomicAdd(&cnt[bucket], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0;
        int nt = 0;
        for (int e = 0; e <= n_expert; e++) {
            off[e] = o;
            for (int s = 0; s < cnt[e]; s += MMQ_TN) {
                tiles[2 * nt] = e;
                tiles[2 * nt + 1] = s;
                nt++;
            }
            o += cnt[e];
        }
        off[n_expert + 1] = o;
        *n_tiles = nt;
    }
    __syncthreads();
    for (i64 p = threadIdx.x; p < np; p += blockDim.x) {
        int ex = *(const int*)(ids + t4_off(ti, p % n_used, p / n_used, 0, 0));
        int bucket = (ex >= 0 && ex < n_expert) ? ex : n_expert;
        sorted[off[bucket] + atomicAdd(&fill[bucket], 1)] = (int)p;
    }
}

// mul_mat_id for prompts, one tile of `k_moe_group` per block:
// dst[i0, slot, t] = dot(as[:, i0, e], b[:, slot % b.ne1, t]) for the
// tile's pairs (slot, t) of expert e; the extra bucket writes zeros.
// Grid (ceil(ne0 / MMQ_TM), max tiles), block 256.
extern "C" __global__ void k_mmq_id(u8* dst, T4 td, const u8* as, T4 ta, int tya, T4 tb,
                                    const i8* q8, const Q8Ds* ds, const int* off,
                                    const int* sorted, const int* tiles, const int* n_tiles) {
    __shared__ int sw[MMQ_TM * MMQ_ROW_INTS];
    __shared__ float swa[MMQ_TM * 16];
    __shared__ float swm[MMQ_TM * 16];
    __shared__ int sx[MMQ_TN * MMQ_ROW_INTS];
    __shared__ float sxd[MMQ_TN * 8];
    __shared__ float sxs[MMQ_TN * 16];
    __shared__ i64 sqc[MMQ_TN];
    __shared__ i64 sdo[MMQ_TN];
    if ((int)blockIdx.y >= *n_tiles) {
        return; // the whole block leaves together
    }
    int e = tiles[2 * blockIdx.y];
    int first = tiles[2 * blockIdx.y + 1];
    int n_expert = (int)ta.ne[2];
    int left = off[e + 1] - off[e] - first;
    int ncols = left < MMQ_TN ? left : MMQ_TN;
    i64 n_used = td.ne[1];
    if (threadIdx.x < MMQ_TN) {
        int c = threadIdx.x < (u32)ncols ? (int)threadIdx.x : 0;
        i64 p = sorted[off[e] + first + c];
        i64 slot = p % n_used;
        i64 t = p / n_used;
        sqc[threadIdx.x] = slot % tb.ne[1] + tb.ne[1] * t;
        sdo[threadIdx.x] = t4_off(td, 0, slot, t, 0);
    }
    __syncthreads();
    i64 row0 = (i64)blockIdx.x * MMQ_TM;
    if (e == n_expert) {
        for (int i = threadIdx.x; i < MMQ_TM * MMQ_TN; i += blockDim.x) {
            int r = i & 31;
            int c = i >> 5;
            if (c < ncols && row0 + r < td.ne[0]) {
                *(float*)(dst + sdo[c] + (row0 + r) * td.nb[0]) = 0.0f;
            }
        }
        return;
    }
    MmqSmem sm = {sw, swa, swm, sx, sxd, sxs};
    mmq_tile(as + t4_off(ta, 0, 0, e, 0), ta.nb[1], tya, ta.ne[1], row0, ta.ne[0], q8, ds, sqc,
             sdo, ncols, dst, td.nb[0], sm);
}

// The float-expert form of `k_mmq_id` (F32/F16/BF16 experts): the same
// tiles of `k_moe_group`, a SIMT tile product over K steps of 32 with the
// activations (F32 rows `b`) rounded to the expert type as the CPU does.
// Grid (ceil(ne0 / MMQ_TM), max tiles), block 256.
extern "C" __global__ void k_mmf_id(u8* dst, T4 td, const u8* as, T4 ta, int tya, const u8* b,
                                    T4 tb, const int* off, const int* sorted, const int* tiles,
                                    const int* n_tiles) {
    __shared__ float sw[MMQ_TM * 33];
    __shared__ float sx[MMQ_TN * 33];
    __shared__ i64 sbo[MMQ_TN];
    __shared__ i64 sdo[MMQ_TN];
    if ((int)blockIdx.y >= *n_tiles) {
        return; // the whole block leaves together
    }
    int e = tiles[2 * blockIdx.y];
    int first = tiles[2 * blockIdx.y + 1];
    int n_expert = (int)ta.ne[2];
    int left = off[e + 1] - off[e] - first;
    int ncols = left < MMQ_TN ? left : MMQ_TN;
    i64 n_used = td.ne[1];
    int tid = threadIdx.x;
    if (tid < MMQ_TN) {
        int c = tid < ncols ? tid : 0;
        i64 p = sorted[off[e] + first + c];
        i64 slot = p % n_used;
        i64 t = p / n_used;
        sbo[tid] = t4_off(tb, 0, slot % tb.ne[1], t, 0);
        sdo[tid] = t4_off(td, 0, slot, t, 0);
    }
    __syncthreads();
    i64 row0 = (i64)blockIdx.x * MMQ_TM;
    i64 nrows = td.ne[0];
    int r = tid & 31;
    int cw = tid >> 5;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (e != n_expert) {
        const u8* a_base = as + t4_off(ta, 0, 0, e, 0);
        i64 K = ta.ne[0];
        for (i64 k0 = 0; k0 < K; k0 += 32) {
            // stage 32 x 32 of each: thread -> (row or column tid / 8, 4 k)
            int rr = tid >> 3;
            int kq = (tid & 7) * 4;
            for (int i = 0; i < 4; i++) {
                i64 k = k0 + kq + i;
                float w = 0.0f;
                float x = 0.0f;
                if (k < K && row0 + rr < nrows) {
                    w = load_f(a_base + (row0 + rr) * ta.nb[1] + k * ta.nb[0], tya);
                }
                if (k < K && rr < ncols) {
                    x = act_round(*(const float*)(b + sbo[rr] + k * tb.nb[0]), tya);
                }
                sw[rr * 33 + kq + i] = w;
                sx[rr * 33 + kq + i] = x;
            }
            __syncthreads();
            for (int j = 0; j < 4; j++) {
                int c = cw + 8 * j;
                float s = 0.0f;
                for (int k = 0; k < 32; k++) {
                    s += sw[r * 33 + k] * sx[c * 33 + k];
                }
                acc[j] += s;
            }
            __syncthreads();
        }
    }
    for (int j = 0; j < 4; j++) {
        int c = cw + 8 * j;
        if (c < ncols && row0 + r < nrows) {
            *(float*)(dst + sdo[c] + (row0 + r) * td.nb[0]) = acc[j];
        }
    }
}
