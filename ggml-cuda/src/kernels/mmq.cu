// ------------------------------------------------- prompt mat-mat (MMQ)
//
// Matrix products for prompt batches (more than MMVQ_MAX_COLS columns) with
// quantized weights, after llama.cpp's MMQ design: the activations are
// quantized once per op (`k_quantize_q8_1`, the same rounding as the CPU
// backend's activation types, with the sums of each 16 computed there), and
// each block of 8 warps computes a tile of `tm` (64 or 128) weight rows x
// `tn` (16, 32 or 64) columns on int8 tensor cores, chosen per shape by the
// launch. K goes in steps of MMQ_TK (256) elements, software-pipelined:
// - `mmq_stage` copies the step's raw weight blocks of the tile's rows and
//   the columns' int8 activations and scales into shared memory with
//   `cp.async` (16-byte copies where the rows allow, 8 or 4 otherwise; Q3_K
//   and Q6_K rows are only 2-byte aligned and take plain copies), into the
//   other of two buffers while the block computes on the first;
// - `mmq_unpack` turns the raw blocks of the step into int8 rows in shared
//   memory (MMQ_PITCH bytes apart, so the 8 rows of an `ldmatrix` tile fall
//   in distinct banks) and the affine map of each 16 elements (scale, min);
//   Q4_K and Q8_0 with 32- and 16-bit shared loads, the other types through
//   `unpack_sub`;
// - each warp takes its (tm / 4) x (tn / 2) sub-tile: per 32 elements of K
//   its A fragments (16 rows) and B fragments (8 columns) come from
//   `ldmatrix_x4` / `ldmatrix_x2`, one `mma_s8_16x8x32` (m16n8k32 on sm_80+,
//   four m8n8k16 on sm_75) gives the int32 dot products of each (row,
//   column) pair, and only then are the block scales, mins and activation
//   scales applied, once per 32 (types with a scale per 16 elements, Q2_K,
//   Q3_K and Q6_K, take two m16n8k16 instead).
// With fewer tiles than the device has SMs the launch splits K (`nsplit`
// ranges of steps, blockIdx.z = batch * nsplit + split): each split writes
// its partial tile to `part`, `k_mmq_reduce` sums them in split order.
//
// `mul_mat_id` for prompts runs the same core over expert-grouped tiles:
// `k_moe_group` counts the ubatch's (slot, token) pairs per expert id on
// the device, sorts them by expert and lists tiles of at most MMQ_TN pairs
// of one expert; `k_mmq_id` runs one tile per block over that expert's
// rows and scatters the results back to (slot, token). Id -1 and bad ids go
// to an extra bucket whose tiles write zeros (bad ids also set the error
// flag).

// columns per `k_moe_group` tile (and the float kernel's tile edge)
#define MMQ_TM 32
#define MMQ_TN 32
// K elements per pipeline step, bytes per staged int8 row
#define MMQ_TK 256
#define MMQ_PITCH 272

// The shared-memory layout of one tile (byte offsets into the launch's
// dynamic shared memory; `mmq_shared_bytes` on the Rust side computes the
// same total): two raw weight buffers of tm rows x rawb bytes, the int8
// rows, scales and mins of each 16, two activation buffers of tn rows of
// int8 and their `Q8Ds` per 32. The double-buffered parts are held as the
// first buffer and the distance to the second (`mmq_buf` picks one by
// arithmetic): an array of the two pointers indexed by the run-time buffer
// number put the struct in local memory (a 72-byte stack frame and 33
// LDL/STL in the K step of the sm_90 image).
struct MmqSmem {
    u8* araw;    // [2][tm][rawb] raw blocks
    int araw_n;  // bytes of one raw buffer
    u8* ai8;     // [tm][MMQ_PITCH] int8
    float* asc;  // [tm][16] scale of each 16
    float* amn;  // [tm][16] min of each 16
    u8* bq;      // [2][tn][MMQ_PITCH] int8
    int bq_n;    // bytes of one int8 activation buffer
    Q8Ds* bds;   // [2][tn][8]
    int bds_n;   // Q8Ds of one scale buffer
};

__device__ __forceinline__ MmqSmem mmq_smem(u8* base, int tm, int tn, int rawb) {
    MmqSmem m;
    u8* p = base;
    m.araw = p;
    m.araw_n = tm * rawb;
    p += 2 * tm * rawb;
    m.ai8 = p;
    p += tm * MMQ_PITCH;
    m.asc = (float*)p;
    p += tm * 64;
    m.amn = (float*)p;
    p += tm * 64;
    m.bq = p;
    m.bq_n = tn * MMQ_PITCH;
    p += 2 * tn * MMQ_PITCH;
    m.bds = (Q8Ds*)p;
    m.bds_n = tn * 8;
    return m;
}

// One of the two pipeline buffers: a step's raw weight rows, int8
// activations and their scales.
struct MmqBuf {
    u8* araw;
    u8* bq;
    Q8Ds* bds;
};

// Buffer `buf` (0 or 1) of `sm`.
__device__ __forceinline__ MmqBuf mmq_buf(const MmqSmem& sm, int buf) {
    MmqBuf b;
    b.araw = sm.araw + buf * sm.araw_n;
    b.bq = sm.bq + buf * sm.bq_n;
    b.bds = sm.bds + buf * sm.bds_n;
    return b;
}

// Raw bytes of 256 elements of `ty`, rounded up to 16.
__device__ __forceinline__ int mmq_rawb(int ty) {
    return ((MMQ_TK / blck_size(ty)) * type_size(ty) + 15) & ~15;
}

// The widest copy (16, 8, 4, else 2) that every row's step start meets.
__device__ __forceinline__ int mmq_chunk(const u8* a_base, i64 nbr, int ty, i64 K) {
    i64 step = (i64)(MMQ_TK / blck_size(ty)) * type_size(ty);
    i64 last = (K % MMQ_TK) / blck_size(ty) * type_size(ty);
    u64 bits = (u64)a_base | (u64)nbr | (u64)step | (u64)last;
    return (bits & 15) == 0 ? 16 : ((bits & 7) == 0 ? 8 : ((bits & 3) == 0 ? 4 : 2));
}

// What one tile works on: the weight rows (`rows` at `a_base`, stride
// `nbr` bytes, type `ty`, `nrows` valid, from `row0`), the activation
// columns (index `qcol[c]` in the quantized activations, `ncols` valid;
// every qcol entry names a real column) and where results go.
struct MmqTile {
    const u8* a_base;
    i64 nbr;
    int ty;
    i64 nrows;
    i64 row0;
    i64 K;
    const i8* q8;
    const Q8Ds* ds;
    const i64* qcol;
    int ncols;
    int tm;
    int tn;
    int rawb;
    int chunk;
};

// Queue the copies of step `k0` into buffer `b` (one commit group).
__device__ __forceinline__ void mmq_stage(const MmqTile& t, const MmqBuf& b, i64 k0) {
    int tid = threadIdx.x;
    int bs = blck_size(t.ty);
    int ts = type_size(t.ty);
    i64 kl = t.K - k0;
    int ke = kl < MMQ_TK ? (int)kl : MMQ_TK;
    int nbytes = ke / bs * ts;
    i64 boff = k0 / bs * ts;
    int per_row = nbytes / t.chunk;
    u8* araw = b.araw;
    for (int i = tid; i < t.tm * per_row; i += blockDim.x) {
        int r = i / per_row;
        int c = i - r * per_row;
        i64 row = t.row0 + r < t.nrows ? t.row0 + r : t.nrows - 1;
        const u8* src = t.a_base + row * t.nbr + boff + c * t.chunk;
        u8* dst = araw + r * t.rawb + c * t.chunk;
        if (t.chunk == 16) {
            cp_async16(dst, src);
        } else if (t.chunk == 8) {
            cp_async8(dst, src);
        } else if (t.chunk == 4) {
            cp_async4(dst, src);
        } else {
            *(u16*)dst = *(const u16*)src;
        }
    }
    // activations: a partial last step (K % 256) is padded with zero
    // values and zero scales, so the MMA loop always takes 8 sub-blocks
    int pc = ke >> 4;
    u8* bq = b.bq;
    for (int i = tid; i < t.tn * 16; i += blockDim.x) {
        int c = i >> 4;
        int j = i & 15;
        u8* dst = bq + c * MMQ_PITCH + 16 * j;
        if (j < pc) {
            cp_async16(dst, t.q8 + t.qcol[c] * t.K + k0 + 16 * j);
        } else {
            *(int4*)dst = make_int4(0, 0, 0, 0);
        }
    }
    int ns = ke >> 5;
    i64 nsub_row = t.K >> 5;
    Q8Ds* bds = b.bds;
    for (int i = tid; i < t.tn * 8; i += blockDim.x) {
        int c = i >> 3;
        int j = i & 7;
        if (j < ns) {
            cp_async8(bds + i, t.ds + t.qcol[c] * nsub_row + (k0 >> 5) + j);
        } else {
            Q8Ds z;
            z.d = 0.0f;
            z.s = 0;
            bds[i] = z;
        }
    }
    cp_async_commit();
}

// A 16-bit aligned int from shared memory (two 16-bit loads).
__device__ __forceinline__ int lds32_h(const u8* p) {
    return (int)((u32) * (const u16*)p | ((u32) * (const u16*)(p + 2) << 16));
}

// Sub-block `s` (0..7, 32 elements) of a step's raw row `raw` (16-byte
// aligned in shared memory) as unpack_sub gives it; TY: the type's own
// code (Q4_K, Q8_0), or -1: any type `ty` through unpack_sub.
template <int TY>
__device__ __forceinline__ void mmq_unpack_sub(int ty, const u8* raw, int s, int* w, float* a,
                                               float* m) {
    if (TY == T_Q4_K) {
        u32 hdr = *(const u32*)raw;
        const u32* q = (const u32*)(raw + 16 + (s >> 1) * 32);
        int sh = 4 * (s & 1);
        for (int i = 0; i < 8; i++) {
            w[i] = (int)((q[i] >> sh) & 0x0F0F0F0Fu);
        }
        float scf, mnf;
        scale_min_k4(s, raw + 4, &scf, &mnf);
        a[0] = a[1] = h2f((u16)(hdr & 0xffff)) * scf;
        m[0] = m[1] = -h2f((u16)(hdr >> 16)) * mnf;
        return;
    }
    if (TY == T_Q8_0) {
        const u8* b = raw + 34 * s;
        if (s & 1) {
            // an odd block starts 2 bytes past a 4-byte boundary, its quants on one
            for (int i = 0; i < 8; i++) {
                w[i] = *(const int*)(b + 2 + 4 * i);
            }
        } else {
            for (int i = 0; i < 8; i++) {
                w[i] = lds32_h(b + 2 + 4 * i);
            }
        }
        a[0] = a[1] = h2f(*(const u16*)b);
        m[0] = m[1] = 0.0f;
        return;
    }
    int bs = blck_size(ty);
    int e = s * 32;
    unpack_sub(ty, raw + (e / bs) * type_size(ty), (e % bs) >> 5, w, a, m);
}

// Unpack the raw rows `araw` of a buffer (`nsub` sub-blocks of 32 this
// step) into `sm`'s int8 rows, scales and mins.
template <int TY>
__device__ __forceinline__ void mmq_unpack(const MmqTile& t, const MmqSmem& sm, const u8* araw,
                                           int nsub) {
    for (int i = threadIdx.x; i < t.tm * 8; i += blockDim.x) {
        int r = i >> 3;
        int s = i & 7;
        int w[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        float a[2] = {0.0f, 0.0f};
        float m[2] = {0.0f, 0.0f};
        if (s < nsub) {
            mmq_unpack_sub<TY>(t.ty, araw + r * t.rawb, s, w, a, m);
        }
        int4* d = (int4*)(sm.ai8 + r * MMQ_PITCH + s * 32);
        d[0] = make_int4(w[0], w[1], w[2], w[3]);
        d[1] = make_int4(w[4], w[5], w[6], w[7]);
        *(float2*)(sm.asc + r * 16 + 2 * s) = make_float2(a[0], a[1]);
        *(float2*)(sm.amn + r * 16 + 2 * s) = make_float2(m[0], m[1]);
    }
}

// The tile's accumulators: per warp up to 2 x 16 rows x 4 x 8 columns.
struct MmqAcc {
    float v[2][4][4];
};

// Steps [s0, s1) of the tile into `acc` (block of 256 threads); TY as
// `mmq_unpack_sub`; PER16: the weight type has a scale per 16 elements
// (two m16n8k16 per 32).
template <int TY, bool PER16>
__device__ __forceinline__ void mmq_tile_t(const MmqTile& t, const MmqSmem& sm, i64 s0, i64 s1,
                                           MmqAcc& acc) {
    int lane = threadIdx.x & 31;
    int wid = threadIdx.x >> 5;
    int g = lane >> 2;
    int q = lane & 3;
    int mi_n = t.tm >> 6;
    int nj_n = t.tn >> 4;
    int wr = (wid & 3) * (t.tm >> 2);
    int wc = (wid >> 2) * (t.tn >> 1);
    int q8_1 = t.ty == T_Q4_1 || t.ty == T_Q5_1;
    for (int mi = 0; mi < 2; mi++) {
        for (int nj = 0; nj < 4; nj++) {
            for (int i = 0; i < 4; i++) {
                acc.v[mi][nj][i] = 0.0f;
            }
        }
    }
    if (s0 >= s1) {
        return;
    }
    mmq_stage(t, mmq_buf(sm, 0), s0 * MMQ_TK);
    for (i64 st = s0; st < s1; st++) {
        int buf = (int)((st - s0) & 1);
        i64 k0 = st * MMQ_TK;
        if (st + 1 < s1) {
            mmq_stage(t, mmq_buf(sm, buf ^ 1), k0 + MMQ_TK);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        i64 kl = t.K - k0;
        int nk = (kl < MMQ_TK ? (int)kl : MMQ_TK) >> 5;
        MmqBuf cur = mmq_buf(sm, buf);
        mmq_unpack<TY>(t, sm, cur.araw, nk);
        __syncthreads();
        const u8* bq = cur.bq;
        const Q8Ds* bds = cur.bds;
        UNROLL
        for (int kc = 0; kc < 8; kc++) {
            u32 af[2][4];
UNROLL
            for (int mi = 0; mi < 2; mi++) {
                if (mi >= mi_n) {
                    break;
                }
                int r = wr + 16 * mi + (lane & 7) + 8 * ((lane >> 3) & 1);
                ldmatrix_x4(af[mi], sm.ai8 + r * MMQ_PITCH + kc * 32 + 16 * (lane >> 4));
            }
            u32 bf[4][2];
            if (nj_n == 1) {
                int c = wc + (lane & 7);
                ldmatrix_x2(bf[0], bq + c * MMQ_PITCH + kc * 32 + 16 * ((lane >> 3) & 1));
            } else {
UNROLL
                for (int p = 0; p < 2; p++) {
                    if (p >= (nj_n >> 1)) {
                        break;
                    }
                    u32 r4[4];
                    int c = wc + 16 * p + (lane & 7) + 8 * (lane >> 4);
                    ldmatrix_x4(r4, bq + c * MMQ_PITCH + kc * 32 + 16 * ((lane >> 3) & 1));
                    bf[2 * p][0] = r4[0];
                    bf[2 * p][1] = r4[1];
                    bf[2 * p + 1][0] = r4[2];
                    bf[2 * p + 1][1] = r4[3];
                }
            }
            // the activation scales of this lane's two columns of each n8
            float cd[4][2], cs0[4][2], cs1[4][2];
UNROLL
            for (int nj = 0; nj < 4; nj++) {
                if (nj >= nj_n) {
                    break;
                }
UNROLL
                for (int j = 0; j < 2; j++) {
                    Q8Ds e = bds[(wc + 8 * nj + 2 * q + j) * 8 + kc];
                    cd[nj][j] = e.d;
                    if (q8_1) {
                        cs0[nj][j] = h2f((u16)(e.s & 0xffff));
                        cs1[nj][j] = 0.0f;
                    } else {
                        cs0[nj][j] = e.d * (float)q8ds_s0(e.s);
                        cs1[nj][j] = e.d * (float)q8ds_s1(e.s);
                    }
                }
            }
UNROLL
            for (int mi = 0; mi < 2; mi++) {
                if (mi >= mi_n) {
                    break;
                }
                // the weight maps of this lane's two rows
                float2 wa[2], wm[2];
UNROLL
                for (int j = 0; j < 2; j++) {
                    int r = wr + 16 * mi + g + 8 * j;
                    wa[j] = *(const float2*)(sm.asc + r * 16 + 2 * kc);
                    wm[j] = *(const float2*)(sm.amn + r * 16 + 2 * kc);
                }
UNROLL
                for (int nj = 0; nj < 4; nj++) {
                    if (nj >= nj_n) {
                        break;
                    }
                    int c[4] = {0, 0, 0, 0};
                    if (!PER16) {
                        mma_s8_16x8x32(c, (const int*)af[mi], (const int*)bf[nj]);
UNROLL
                        for (int i = 0; i < 4; i++) {
                            int j = i >> 1;
                            int k = i & 1;
                            acc.v[mi][nj][i] += wa[j].x * (cd[nj][k] * (float)c[i]) +
                                                wm[j].x * (cs0[nj][k] + cs1[nj][k]);
                        }
                    } else {
                        int c2[4] = {0, 0, 0, 0};
                        int lo[2] = {(int)af[mi][0], (int)af[mi][1]};
                        int hi[2] = {(int)af[mi][2], (int)af[mi][3]};
                        mma_s8_16x8x16(c, lo, (int)bf[nj][0]);
                        mma_s8_16x8x16(c2, hi, (int)bf[nj][1]);
UNROLL
                        for (int i = 0; i < 4; i++) {
                            int j = i >> 1;
                            int k = i & 1;
                            acc.v[mi][nj][i] +=
                                cd[nj][k] * (wa[j].x * (float)c[i] + wa[j].y * (float)c2[i]) +
                                wm[j].x * cs0[nj][k] + wm[j].y * cs1[nj][k];
                        }
                    }
                }
            }
        }
        __syncthreads();
    }
}

__device__ void mmq_tile(const MmqTile& t, const MmqSmem& sm, i64 s0, i64 s1, MmqAcc& acc) {
    switch (t.ty) {
    case T_Q4_K:
        mmq_tile_t<T_Q4_K, false>(t, sm, s0, s1, acc);
        break;
    case T_Q8_0:
        mmq_tile_t<T_Q8_0, false>(t, sm, s0, s1, acc);
        break;
    case T_Q2_K:
    case T_Q3_K:
    case T_Q6_K:
        mmq_tile_t<-1, true>(t, sm, s0, s1, acc);
        break;
    default:
        mmq_tile_t<-1, false>(t, sm, s0, s1, acc);
        break;
    }
}

// Call f(row, column, value) for each of this thread's valid results.
template <typename F>
__device__ __forceinline__ void mmq_each(const MmqTile& t, const MmqAcc& acc, F f) {
    int lane = threadIdx.x & 31;
    int wid = threadIdx.x >> 5;
    int wr = (wid & 3) * (t.tm >> 2);
    int wc = (wid >> 2) * (t.tn >> 1);
UNROLL
    for (int mi = 0; mi < 2; mi++) {
UNROLL
        for (int nj = 0; nj < 4; nj++) {
            if (mi >= (t.tm >> 6) || nj >= (t.tn >> 4)) {
                continue;
            }
UNROLL
            for (int i = 0; i < 4; i++) {
                int r = wr + 16 * mi + (lane >> 2) + 8 * (i >> 1);
                int c = wc + 8 * nj + 2 * (lane & 3) + (i & 1);
                if (c < t.ncols && t.row0 + r < t.nrows) {
                    f(t.row0 + r, c, acc.v[mi][nj][i]);
                }
            }
        }
    }
}

// mul_mat with quantized `a` for prompts: dst[i0, i1, i2, i3] = dot(a[:,
// i0, i2 / r2, i3 / r3], b[:, i1, i2, i3]) with b quantized by
// `k_quantize_q8_1` (q8/ds; `tb` gives b's shape). Tiles of `tm` x `tn`;
// grid (ceil(ne0 / tm), ceil(ne1 / tn), ne2 * ne3 * nsplit), block 256,
// dynamic shared memory for `mmq_smem`. With nsplit > 1 split s writes its
// partial sums to part[((s * ne3 + i3) * ne2 + i2) * ne1 + i1) * ne0 + i0]
// and `k_mmq_reduce` adds them into dst.
// Launch bounds (256 threads, at least 1 block per SM): without the block
// minimum, ptxas for sm_100 and sm_120 holds the kernel to 128 registers
// and spills (12-28 bytes with CUDA 12.9 and 13.0); with it every
// architecture gets the 230-254 registers the 128 x 64 tile's
// accumulators and fragments need, without spills.
extern "C" __global__ void __launch_bounds__(256, 1)
    k_mmq(u8* dst, T4 td, const u8* a, T4 ta, int tya, T4 tb, const i8* q8, const Q8Ds* ds,
          i64 r2, i64 r3, int tm, int tn, int nsplit, float* part) {
    extern __shared__ u8 mmq_dyn[];
    __shared__ i64 sqc[64];
    int nb = (int)(td.ne[2] * td.ne[3]);
    int z = (int)blockIdx.z % nb;
    int split = (int)blockIdx.z / nb;
    i64 i2 = z % td.ne[2];
    i64 i3 = z / td.ne[2];
    i64 col0 = (i64)blockIdx.y * tn;
    i64 left = td.ne[1] - col0;
    int ncols = left < tn ? (int)left : tn;
    if (threadIdx.x < (u32)tn) {
        i64 i1 = col0 + (threadIdx.x < (u32)ncols ? threadIdx.x : 0);
        sqc[threadIdx.x] = i1 + tb.ne[1] * (i2 + tb.ne[2] * i3);
    }
    __syncthreads();
    MmqTile t;
    t.a_base = a + t4_off(ta, 0, 0, i2 / r2, i3 / r3);
    t.nbr = ta.nb[1];
    t.ty = tya;
    t.nrows = ta.ne[1];
    t.row0 = (i64)blockIdx.x * tm;
    t.K = ta.ne[0];
    t.q8 = q8;
    t.ds = ds;
    t.qcol = sqc;
    t.ncols = ncols;
    t.tm = tm;
    t.tn = tn;
    t.rawb = mmq_rawb(tya);
    t.chunk = mmq_chunk(a, ta.nb[1] | ta.nb[2] | ta.nb[3], tya, t.K);
    MmqSmem sm = mmq_smem(mmq_dyn, tm, tn, t.rawb);
    i64 steps = (t.K + MMQ_TK - 1) / MMQ_TK;
    i64 s0 = steps * split / nsplit;
    i64 s1 = steps * (split + 1) / nsplit;
    MmqAcc acc;
    mmq_tile(t, sm, s0, s1, acc);
    if (nsplit == 1) {
        i64 base = t4_off(td, 0, col0, i2, i3);
        mmq_each(t, acc, [&](i64 r, int c, float v) {
            *(float*)(dst + base + c * td.nb[1] + r * td.nb[0]) = v;
        });
    } else {
        i64 ne0 = td.ne[0];
        float* p = part + (((i64)split * nb + z) * td.ne[1] + col0) * ne0;
        mmq_each(t, acc, [&](i64 r, int c, float v) { p[c * ne0 + r] = v; });
    }
}

// dst = the sum of `k_mmq`'s nsplit partial results, in split order. A
// thread per element of dst (dense index over ne0..ne3), grid-strided.
extern "C" __global__ void k_mmq_reduce(u8* dst, T4 td, const float* part, int nsplit) {
    i64 n = td.ne[0] * td.ne[1] * td.ne[2] * td.ne[3];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (i64)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < nsplit; k++) {
            s += part[k * n + i];
        }
        i64 i0 = i % td.ne[0];
        i64 r = i / td.ne[0];
        i64 i1 = r % td.ne[1];
        r /= td.ne[1];
        *(float*)(dst + t4_off(td, i0, i1, r % td.ne[2], r / td.ne[2])) = s;
    }
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
// Tiles of `tm` rows x MMQ_TN pairs; grid (ceil(ne0 / tm), max tiles),
// block 256, dynamic shared memory for `mmq_smem`.
// Launch bounds (256 threads, at least 2 blocks per SM): the 128 x 32
// tile's accumulators fit in 128 registers, so two blocks share an SM
// (Q4_K's 109 KiB of shared memory each); the block minimum makes that
// the limit on every architecture instead of each ptxas's own choice.
extern "C" __global__ void __launch_bounds__(256, 2)
    k_mmq_id(u8* dst, T4 td, const u8* as, T4 ta, int tya, T4 tb, const i8* q8, const Q8Ds* ds,
             const int* off, const int* sorted, const int* tiles, const int* n_tiles, int tm) {
    extern __shared__ u8 mmq_dyn[];
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
    i64 row0 = (i64)blockIdx.x * tm;
    if (e == n_expert) {
        for (int i = threadIdx.x; i < tm * MMQ_TN; i += blockDim.x) {
            int r = i % tm;
            int c = i / tm;
            if (c < ncols && row0 + r < td.ne[0]) {
                *(float*)(dst + sdo[c] + (row0 + r) * td.nb[0]) = 0.0f;
            }
        }
        return;
    }
    MmqTile t;
    t.a_base = as + t4_off(ta, 0, 0, e, 0);
    t.nbr = ta.nb[1];
    t.ty = tya;
    t.nrows = ta.ne[1];
    t.row0 = row0;
    t.K = ta.ne[0];
    t.q8 = q8;
    t.ds = ds;
    t.qcol = sqc;
    t.ncols = ncols;
    t.tm = tm;
    t.tn = MMQ_TN;
    t.rawb = mmq_rawb(tya);
    t.chunk = mmq_chunk(as, ta.nb[2] | ta.nb[1], tya, t.K);
    MmqSmem sm = mmq_smem(mmq_dyn, tm, MMQ_TN, t.rawb);
    MmqAcc acc;
    mmq_tile(t, sm, 0, (t.K + MMQ_TK - 1) / MMQ_TK, acc);
    i64 nb0 = td.nb[0];
    mmq_each(t, acc, [&](i64 r, int c, float v) { *(float*)(dst + sdo[c] + r * nb0) = v; });
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
