// Fused attention (FlashAttention-2's algorithm) on tensor cores: mma.sync m16n8k16 with f16
// or bf16 operands and f32 accumulation, tiles staged in shared memory by cp.async and read
// by ldmatrix. The math and operand order: backend/attention.rs; the host side:
// cuda/attention.rs.
//
// The module defines T (f16 or bf16), MT (its PTX type name) and HD (the head dim rounded up
// to 16; the columns past E are zero-filled). Four warps per block, each owning 16 rows of
// the block's 64 (queries in the dq kernel, keys in the dk/dv kernel; the forward's warps own
// 32 query rows up to head dim 64); the grid is (batch × heads, row blocks).
//
// Scores are kept in log2 units (x·log2 e) so that every exponential is one exp2f; the saved
// log-sum-exp is natural (lse = (m + log2 l)·ln 2). A row with no visible key has l = 0: its
// output is 0 and its lse −∞, and the backward gives it no probability (never NaN).

#define NW 4
#define BM 64
#define LDS (HD + 8)   // shared row stride in halves: rows land on distinct banks for ldmatrix
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f
#define INFINITY __int_as_float(0x7f800000)

struct AttnArgs {
    u64 q, k, v, o, lse, mask, d_o, dq, dk, dv, delta;
    i64 qs[3], ks[3], vs[3], os[3], ls[3], gs[3], dqs[3], dks[3], dvs[3];
    i64 ms[4];
    i64 causal_off;
    // split-KV forward (decode): `splits` key ranges of `chunk` keys each write f32 partials
    u64 part_o, part_lse;
    int B, Hq, Hk, L, S, E, groups, causal, mask_kind, splits, chunk;
    float scale_log2, scale;
};


// Rows [r0, r0 + R) of a (row, E) operand into a shared [R][LDS] tile, 16 bytes per copy;
// rows past n and columns past E read as zero. All threads of the block take part.
template <int R>
__device__ __forceinline__ void load_tile(h16* tile, const T* base, i64 row_stride, int r0, int n, int E) {
    const int per_row = HD / 8;
    for (int c = threadIdx.x; c < R * per_row; c += NW * 32) {
        const int r = c / per_row, col = (c % per_row) * 8;
        const bool ok = r0 + r < n && col < E;
        const T* src = ok ? base + (i64)(r0 + r) * row_stride + col : base;
        cp16(tile + r * LDS + col, src, ok);
    }
}

// The A fragments (16 rows × HD) of rows row0.. of a (row, E) operand, straight from global
// memory: register kk·4 + j holds two halves of k-step kk (PTX's m16n8k16 A layout).
__device__ __forceinline__ void load_a(u32 (*f)[4], const T* base, i64 row_stride, int row0, int n, int E) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + (lane >> 2) + ((j & 1) ? 8 : 0);
            const int c = kk * 16 + (lane & 3) * 2 + ((j & 2) ? 8 : 0);
            f[kk][j] = (r < n && c < E) ? *(const u32*)(base + (i64)r * row_stride + c) : 0u;
        }
    }
}

// A score x (log2 units) of query i and key j of head (b, h) after the causal rule, the key
// count and the mask: −∞ where the key is not visible.
__device__ __forceinline__ float masked(const AttnArgs& a, int b, int h, int i, int j, float x) {
    if (j >= a.S || i >= a.L) return -INFINITY;
    if (a.causal && (i64)j > (i64)i + a.causal_off) return -INFINITY;
    if (a.mask_kind) {
        const i64 o = b * a.ms[0] + h * a.ms[1] + i * a.ms[2] + j * a.ms[3];
        if (a.mask_kind == 1) {
            if (!((const u8*)a.mask)[o]) return -INFINITY;
        } else {
            x += ((const float*)a.mask)[o] * LOG2E;
        }
    }
    return x;
}

// One past the last key any of queries [m0, m0 + rows) may see.
__device__ __forceinline__ int key_end(const AttnArgs& a, int m0, int rows) {
    if (!a.causal) return a.S;
    const i64 e = (i64)m0 + rows + a.causal_off;
    return (int)(e < 0 ? 0 : (e < a.S ? e : a.S));
}

// Forward: each warp owns RW tiles of 16 query rows (two where the head dim leaves the
// registers for it: every K/V fragment read from shared memory then feeds two products).
#define BN 64
#define RW (HD <= 64 ? 2 : 1)
#define BMF (NW * 16 * RW)
extern "C" __global__ void __launch_bounds__(NW * 32) k_attn_fwd(const AttnArgs a) {
    __shared__ __align__(16) h16 Ks[BN * LDS];
    __shared__ __align__(16) h16 Vs[BN * LDS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / a.Hq, h = blockIdx.x % a.Hq, hk = h / a.groups;
    const int m0 = blockIdx.y * BMF;
    const T* q = (const T*)a.q + b * a.qs[0] + h * a.qs[1];
    const T* k = (const T*)a.k + b * a.ks[0] + hk * a.ks[1];
    const T* v = (const T*)a.v + b * a.vs[0] + hk * a.vs[1];
    u32 qf[RW][HD / 16][4];
    float acc[RW][HD / 8][4];
    float mrow[RW][2], lrow[RW][2];
    int row[RW][2];
#pragma unroll
    for (int w = 0; w < RW; ++w) {
        const int r0 = m0 + (warp * RW + w) * 16;
        load_a(qf[w], q, a.qs[2], r0, a.L, a.E);
#pragma unroll
        for (int d = 0; d < HD / 8; ++d) acc[w][d][0] = acc[w][d][1] = acc[w][d][2] = acc[w][d][3] = 0.f;
        mrow[w][0] = mrow[w][1] = -INFINITY;
        lrow[w][0] = lrow[w][1] = 0.f;
        row[w][0] = r0 + (lane >> 2);
        row[w][1] = r0 + (lane >> 2) + 8;
    }
    // this block's key tiles: all of them, or its split's chunk
    const int nend = key_end(a, m0, min(BMF, a.L - m0));
    const int z = blockIdx.z;
    const int t0 = z * (a.chunk / BN);
    const int tiles = min((nend + BN - 1) / BN, (z + 1) * (a.chunk / BN));
    if (t0 < tiles) {
        load_tile<BN>(Ks, k, a.ks[2], t0 * BN, a.S, a.E);
        cp_commit();
        load_tile<BN>(Vs, v, a.vs[2], t0 * BN, a.S, a.E);
        cp_commit();
    }
    const int mi = lane >> 3;
    for (int t = t0; t < tiles; ++t) {
        const int n0 = t * BN;
        cp_wait<1>();
        __syncthreads();
        float s[RW][BN / 8][4];
#pragma unroll
        for (int w = 0; w < RW; ++w)
#pragma unroll
            for (int n = 0; n < BN / 8; ++n) s[w][n][0] = s[w][n][1] = s[w][n][2] = s[w][n][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
            for (int n = 0; n < BN / 8; n += 2) {
                u32 r[4];
                ldm4(r, Ks + (n * 8 + (mi >> 1) * 8 + (lane & 7)) * LDS + kk * 16 + (mi & 1) * 8);
#pragma unroll
                for (int w = 0; w < RW; ++w) {
                    mma(s[w][n], qf[w][kk], r[0], r[1]);
                    mma(s[w][n + 1], qf[w][kk], r[2], r[3]);
                }
            }
        }
        __syncthreads();
        if (t + 1 < tiles) load_tile<BN>(Ks, k, a.ks[2], n0 + BN, a.S, a.E);
        cp_commit();
        // a tile every key of which every row of the block sees needs no mask (rows past L
        // are computed and never stored)
        const bool open = !a.mask_kind && n0 + BN <= a.S &&
                          (!a.causal || (i64)(n0 + BN - 1) <= (i64)m0 + a.causal_off);
        u32 pf[RW][BN / 16][4];
#pragma unroll
        for (int w = 0; w < RW; ++w) {
            // scale and mask, then the online softmax of the thread's two rows
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < BN / 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[w][n][e] * a.scale_log2;
                    if (!open) x = masked(a, b, h, row[w][e >> 1], n0 + n * 8 + (lane & 3) * 2 + (e & 1), x);
                    s[w][n][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float alpha[2], use[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                const float mnew = fmaxf(mrow[w][r], mx[r]);
                use[r] = mnew == -INFINITY ? 0.f : mnew;   // nothing visible yet: every p is 0
                alpha[r] = exp2f(mrow[w][r] - use[r]);
                mrow[w][r] = mnew;
                lrow[w][r] *= alpha[r];
            }
#pragma unroll
            for (int d = 0; d < HD / 8; ++d) {
                acc[w][d][0] *= alpha[0]; acc[w][d][1] *= alpha[0];
                acc[w][d][2] *= alpha[1]; acc[w][d][3] *= alpha[1];
            }
#pragma unroll
            for (int n = 0; n < BN / 8; ++n) {
                const float p0 = exp2f(s[w][n][0] - use[0]), p1 = exp2f(s[w][n][1] - use[0]);
                const float p2 = exp2f(s[w][n][2] - use[1]), p3 = exp2f(s[w][n][3] - use[1]);
                lrow[w][0] += p0 + p1;
                lrow[w][1] += p2 + p3;
                pf[w][n >> 1][(n & 1) * 2 + 0] = pack(p0, p1);
                pf[w][n >> 1][(n & 1) * 2 + 1] = pack(p2, p3);
            }
        }
        cp_wait<1>();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
            for (int d = 0; d < HD / 8; d += 2) {
                u32 r[4];
                ldm4t(r, Vs + (kk * 16 + (mi & 1) * 8 + (lane & 7)) * LDS + d * 8 + (mi >> 1) * 8);
#pragma unroll
                for (int w = 0; w < RW; ++w) {
                    mma(acc[w][d], pf[w][kk], r[0], r[1]);
                    mma(acc[w][d + 1], pf[w][kk], r[2], r[3]);
                }
            }
        }
        __syncthreads();
        if (t + 1 < tiles) load_tile<BN>(Vs, v, a.vs[2], n0 + BN, a.S, a.E);
        cp_commit();
    }
    cp_wait<0>();
    T* o = (T*)a.o + b * a.os[0] + h * a.os[1];
    float* lse = (float*)a.lse + b * a.ls[0] + h * a.ls[1];
#pragma unroll
    for (int w = 0; w < RW; ++w)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = lrow[w][r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const bool dead = l == 0.f;
        const float inv = dead ? 0.f : 1.f / l;
        const int i = row[w][r];
        const float lse_i = dead ? -INFINITY : (mrow[w][r] + log2f(l)) * LN2;
        if (i < a.L && a.splits > 1) {
            // this split's normalised partial output and log-sum-exp (k_attn_combine)
            const i64 pr = ((i64)z * a.B * a.Hq + (i64)b * a.Hq + h) * a.L + i;
            float* po = (float*)a.part_o + pr * a.E;
#pragma unroll
            for (int d = 0; d < HD / 8; ++d) {
                const int c = d * 8 + (lane & 3) * 2;
                if (c < a.E) {
                    po[c] = acc[w][d][r * 2] * inv;
                    po[c + 1] = acc[w][d][r * 2 + 1] * inv;
                }
            }
            if ((lane & 3) == 0) ((float*)a.part_lse)[pr] = lse_i;
        } else if (i < a.L) {
#pragma unroll
            for (int d = 0; d < HD / 8; ++d) {
                const int c = d * 8 + (lane & 3) * 2;
                if (c < a.E) {
                    const T lo = S(acc[w][d][r * 2] * inv), hi = S(acc[w][d][r * 2 + 1] * inv);
                    *(u32*)(o + (i64)i * a.os[2] + c) = (u32)lo.b | ((u32)hi.b << 16);
                }
            }
            if ((lane & 3) == 0) lse[(i64)i * a.ls[2]] = lse_i;
        }
    }
}

// The split-KV forward's last step: per query row (a warp each), the splits' partial outputs
// weighted by exp(lse_s − max), in split order; the row's lse from the same sums.
extern "C" __global__ void k_attn_combine(const AttnArgs a) {
    const i64 rows = (i64)a.B * a.Hq * a.L;
    const i64 stride = (i64)a.B * a.Hq * a.L;
    const int lane = threadIdx.x & 31;
    for (i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows;
         w += ((i64)gridDim.x * blockDim.x) >> 5) {
        const float* pl = (const float*)a.part_lse + w;
        float m = -INFINITY;
        for (int z = 0; z < a.splits; ++z) m = fmaxf(m, pl[z * stride]);
        const int i = (int)(w % a.L);
        const i64 bh = w / a.L;
        const int b = (int)(bh / a.Hq), h = (int)(bh % a.Hq);
        T* o = (T*)a.o + b * a.os[0] + h * a.os[1] + i * a.os[2];
        float sum = 0.f;
        for (int z = 0; z < a.splits; ++z)
            if (m != -INFINITY) sum += exp2f((pl[z * stride] - m) * LOG2E);
        for (int c = lane; c < a.E; c += 32) {
            float acc = 0.f;
            if (m != -INFINITY)
                for (int z = 0; z < a.splits; ++z) {
                    const float wz = exp2f((pl[z * stride] - m) * LOG2E);
                    acc += wz * ((const float*)a.part_o)[(w + z * stride) * a.E + c];
                }
            o[c] = S(m == -INFINITY ? 0.f : acc / sum);
        }
        if (lane == 0) {
            float* lse = (float*)a.lse + b * a.ls[0] + h * a.ls[1];
            lse[(i64)i * a.ls[2]] = m == -INFINITY ? -INFINITY : m + logf(sum);
        }
    }
}
#undef RW
#undef BMF
#undef BN

// D_i = do_i·o_i (f32), one warp per query row.
extern "C" __global__ void k_attn_bwd_delta(const AttnArgs a) {
    const i64 rows = (i64)a.B * a.Hq * a.L;
    const int lane = threadIdx.x & 31;
    for (i64 w = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; w < rows;
         w += ((i64)gridDim.x * blockDim.x) >> 5) {
        const int i = (int)(w % a.L);
        const i64 bh = w / a.L;
        const int b = (int)(bh / a.Hq), h = (int)(bh % a.Hq);
        const T* g = (const T*)a.d_o + b * a.gs[0] + h * a.gs[1] + i * a.gs[2];
        const T* o = (const T*)a.o + b * a.os[0] + h * a.os[1] + i * a.os[2];
        float s = 0.f;
        for (int c = lane; c < a.E; c += 32) s += L(g[c]) * L(o[c]);
#pragma unroll
        for (int m = 16; m > 0; m >>= 1) s += __shfl_xor_sync(0xffffffffu, s, m);
        if (lane == 0) ((float*)a.delta)[w] = s;
    }
}

// The probability (f32) of score x (log2 units) of a row with log-sum-exp lse2 (log2 units):
// 0 for a row with no visible key.
__device__ __forceinline__ float prob(float x, float lse2) {
    return lse2 == -INFINITY ? 0.f : exp2f(x - lse2);
}

// dq: per block 64 query rows (16 a warp), over key tiles of BN.
#define BN (HD <= 64 ? 64 : 32)
extern "C" __global__ void __launch_bounds__(NW * 32) k_attn_bwd_dq(const AttnArgs a) {
    __shared__ __align__(16) h16 Ks[BN * LDS];
    __shared__ __align__(16) h16 Vs[BN * LDS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / a.Hq, h = blockIdx.x % a.Hq, hk = h / a.groups;
    const int m0 = blockIdx.y * BM;
    const T* q = (const T*)a.q + b * a.qs[0] + h * a.qs[1];
    const T* g = (const T*)a.d_o + b * a.gs[0] + h * a.gs[1];
    const T* k = (const T*)a.k + b * a.ks[0] + hk * a.ks[1];
    const T* v = (const T*)a.v + b * a.vs[0] + hk * a.vs[1];
    u32 qf[HD / 16][4], gf[HD / 16][4];
    load_a(qf, q, a.qs[2], m0 + warp * 16, a.L, a.E);
    load_a(gf, g, a.gs[2], m0 + warp * 16, a.L, a.E);
    const int row[2] = {m0 + warp * 16 + (lane >> 2), m0 + warp * 16 + (lane >> 2) + 8};
    float lse2[2], dl[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const bool in = row[r] < a.L;
        const float* lse = (const float*)a.lse + b * a.ls[0] + h * a.ls[1];
        lse2[r] = in ? lse[(i64)row[r] * a.ls[2]] * LOG2E : -INFINITY;
        dl[r] = in ? ((const float*)a.delta)[((i64)b * a.Hq + h) * a.L + row[r]] : 0.f;
    }
    float acc[HD / 8][4];
#pragma unroll
    for (int d = 0; d < HD / 8; ++d) acc[d][0] = acc[d][1] = acc[d][2] = acc[d][3] = 0.f;
    const int tiles = (key_end(a, m0, min(BM, a.L - m0)) + BN - 1) / BN;
    for (int t = 0; t < tiles; ++t) {
        const int n0 = t * BN;
        __syncthreads();
        load_tile<BN>(Ks, k, a.ks[2], n0, a.S, a.E);
        load_tile<BN>(Vs, v, a.vs[2], n0, a.S, a.E);
        cp_commit();
        cp_wait<0>();
        __syncthreads();
        float s[BN / 8][4], dp[BN / 8][4];
#pragma unroll
        for (int n = 0; n < BN / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
            for (int n = 0; n < BN / 8; n += 2) {
                u32 r[4];
                const int mi = lane >> 3;
                const int off = (n * 8 + (mi >> 1) * 8 + (lane & 7)) * LDS + kk * 16 + (mi & 1) * 8;
                ldm4(r, Ks + off);
                mma(s[n], qf[kk], r[0], r[1]);
                mma(s[n + 1], qf[kk], r[2], r[3]);
                ldm4(r, Vs + off);
                mma(dp[n], gf[kk], r[0], r[1]);
                mma(dp[n + 1], gf[kk], r[2], r[3]);
            }
        }
        const bool open = !a.mask_kind && n0 + BN <= a.S &&
                          (!a.causal || (i64)(n0 + BN - 1) <= (i64)m0 + a.causal_off);
        u32 sf[BN / 16][4];
#pragma unroll
        for (int n = 0; n < BN / 8; ++n) {
            float ds[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = n0 + n * 8 + (lane & 3) * 2 + (e & 1);
                float x = s[n][e] * a.scale_log2;
                if (!open) x = masked(a, b, h, row[e >> 1], j, x);
                const float p = prob(x, lse2[e >> 1]);
                ds[e] = p * (dp[n][e] - dl[e >> 1]);
            }
            sf[n >> 1][(n & 1) * 2 + 0] = pack(ds[0], ds[1]);
            sf[n >> 1][(n & 1) * 2 + 1] = pack(ds[2], ds[3]);
        }
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
#pragma unroll
            for (int d = 0; d < HD / 8; d += 2) {
                u32 r[4];
                const int mi = lane >> 3;
                ldm4t(r, Ks + (kk * 16 + (mi & 1) * 8 + (lane & 7)) * LDS + d * 8 + (mi >> 1) * 8);
                mma(acc[d], sf[kk], r[0], r[1]);
                mma(acc[d + 1], sf[kk], r[2], r[3]);
            }
        }
    }
    T* dq = (T*)a.dq + b * a.dqs[0] + h * a.dqs[1];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = row[r];
        if (i >= a.L) continue;
#pragma unroll
        for (int d = 0; d < HD / 8; ++d) {
            const int c = d * 8 + (lane & 3) * 2;
            if (c < a.E) {
                const T lo = S(acc[d][r * 2] * a.scale), hi = S(acc[d][r * 2 + 1] * a.scale);
                *(u32*)(dq + (i64)i * a.dqs[2] + c) = (u32)lo.b | ((u32)hi.b << 16);
            }
        }
    }
}
#undef BN

// dk, dv: per block 64 keys (16 a warp), over the group's query heads and tiles of QT rows.
#define QT (HD <= 64 ? 32 : 16)
extern "C" __global__ void __launch_bounds__(NW * 32) k_attn_bwd_dkdv(const AttnArgs a) {
    __shared__ __align__(16) h16 Ks[BM * LDS];
    __shared__ __align__(16) h16 Vs[BM * LDS];
    __shared__ __align__(16) h16 Qs[QT * LDS];
    __shared__ __align__(16) h16 Gs[QT * LDS];
    __shared__ float lse2s[QT], dls[QT];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int b = blockIdx.x / a.Hk, hk = blockIdx.x % a.Hk;
    const int n0 = blockIdx.y * BM;
    const T* k = (const T*)a.k + b * a.ks[0] + hk * a.ks[1];
    const T* v = (const T*)a.v + b * a.vs[0] + hk * a.vs[1];
    load_tile<BM>(Ks, k, a.ks[2], n0, a.S, a.E);
    load_tile<BM>(Vs, v, a.vs[2], n0, a.S, a.E);
    cp_commit();
    float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
    for (int d = 0; d < HD / 8; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.f;
    // the warp's keys: rows of its C fragments
    const int key[2] = {n0 + warp * 16 + (lane >> 2), n0 + warp * 16 + (lane >> 2) + 8};
    // the first query that can see key n0 (causal: j ≤ i + off)
    int first = 0;
    if (a.causal) {
        const i64 f = (i64)n0 - a.causal_off;
        first = f <= 0 ? 0 : (f >= a.L ? a.L : (int)(f / QT * QT));
    }
    const int mi = lane >> 3;
    for (int h = hk * a.groups; h < (hk + 1) * a.groups; ++h) {
        const T* q = (const T*)a.q + b * a.qs[0] + h * a.qs[1];
        const T* g = (const T*)a.d_o + b * a.gs[0] + h * a.gs[1];
        const float* lse = (const float*)a.lse + b * a.ls[0] + h * a.ls[1];
        const float* delta = (const float*)a.delta + ((i64)b * a.Hq + h) * a.L;
        for (int m0 = first; m0 < a.L; m0 += QT) {
            __syncthreads();
            load_tile<QT>(Qs, q, a.qs[2], m0, a.L, a.E);
            load_tile<QT>(Gs, g, a.gs[2], m0, a.L, a.E);
            cp_commit();
            if (threadIdx.x < QT) {
                const int i = m0 + threadIdx.x;
                lse2s[threadIdx.x] = i < a.L ? lse[(i64)i * a.ls[2]] * LOG2E : -INFINITY;
                dls[threadIdx.x] = i < a.L ? delta[i] : 0.f;
            }
            cp_wait<0>();
            __syncthreads();
            // sᵀ = K Qᵀ and dpᵀ = V dOᵀ: 16 keys × QT queries
            float s[QT / 8][4], dp[QT / 8][4];
#pragma unroll
            for (int n = 0; n < QT / 8; ++n)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < HD / 16; ++kk) {
                u32 ka[4], va[4];
                const int aoff = (warp * 16 + (mi & 1) * 8 + (lane & 7)) * LDS + kk * 16 + (mi >> 1) * 8;
                ldm4(ka, Ks + aoff);
                ldm4(va, Vs + aoff);
#pragma unroll
                for (int n = 0; n < QT / 8; n += 2) {
                    u32 r[4];
                    const int boff = (n * 8 + (mi >> 1) * 8 + (lane & 7)) * LDS + kk * 16 + (mi & 1) * 8;
                    ldm4(r, Qs + boff);
                    mma(s[n], ka, r[0], r[1]);
                    mma(s[n + 1], ka, r[2], r[3]);
                    ldm4(r, Gs + boff);
                    mma(dp[n], va, r[0], r[1]);
                    mma(dp[n + 1], va, r[2], r[3]);
                }
            }
            const bool open = !a.mask_kind && n0 + BM <= a.S &&
                              (!a.causal || (i64)(n0 + BM - 1) <= (i64)m0 + a.causal_off);
            u32 pf[QT / 16][4], sf[QT / 16][4];
#pragma unroll
            for (int n = 0; n < QT / 8; ++n) {
                float p[4], ds[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int qi = n * 8 + (lane & 3) * 2 + (e & 1);
                    float x = s[n][e] * a.scale_log2;
                    if (!open) x = masked(a, b, h, m0 + qi, key[e >> 1], x);
                    p[e] = prob(x, lse2s[qi]);
                    ds[e] = p[e] * (dp[n][e] - dls[qi]);
                }
                pf[n >> 1][(n & 1) * 2 + 0] = pack(p[0], p[1]);
                pf[n >> 1][(n & 1) * 2 + 1] = pack(p[2], p[3]);
                sf[n >> 1][(n & 1) * 2 + 0] = pack(ds[0], ds[1]);
                sf[n >> 1][(n & 1) * 2 + 1] = pack(ds[2], ds[3]);
            }
            // dv += pᵀ dO, dk += dsᵀ Q (queries are the k dim)
#pragma unroll
            for (int kk = 0; kk < QT / 16; ++kk) {
#pragma unroll
                for (int d = 0; d < HD / 8; d += 2) {
                    u32 r[4];
                    const int off = (kk * 16 + (mi & 1) * 8 + (lane & 7)) * LDS + d * 8 + (mi >> 1) * 8;
                    ldm4t(r, Gs + off);
                    mma(dv[d], pf[kk], r[0], r[1]);
                    mma(dv[d + 1], pf[kk], r[2], r[3]);
                    ldm4t(r, Qs + off);
                    mma(dk[d], sf[kk], r[0], r[1]);
                    mma(dk[d + 1], sf[kk], r[2], r[3]);
                }
            }
        }
    }
    cp_wait<0>();
    T* gk = (T*)a.dk + b * a.dks[0] + hk * a.dks[1];
    T* gv = (T*)a.dv + b * a.dvs[0] + hk * a.dvs[1];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int j = key[r];
        if (j >= a.S) continue;
#pragma unroll
        for (int d = 0; d < HD / 8; ++d) {
            const int c = d * 8 + (lane & 3) * 2;
            if (c < a.E) {
                T lo = S(dk[d][r * 2] * a.scale), hi = S(dk[d][r * 2 + 1] * a.scale);
                *(u32*)(gk + (i64)j * a.dks[2] + c) = (u32)lo.b | ((u32)hi.b << 16);
                lo = S(dv[d][r * 2]);
                hi = S(dv[d][r * 2 + 1]);
                *(u32*)(gv + (i64)j * a.dvs[2] + c) = (u32)lo.b | ((u32)hi.b << 16);
            }
        }
    }
}
#undef QT
