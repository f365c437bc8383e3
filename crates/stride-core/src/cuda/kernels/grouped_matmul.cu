// Grouped matrix products (the semantics: backend/grouped_matmul.rs; the host side:
// cuda/grouped_matmul.rs). The module defines T and C (float_preamble) and, for f16/bf16, MT
// (the PTX type name), which adds the tensor-core kernels.
//
// Every block first finds its job from the offsets, on the device: in Rows mode the grid
// runs over every row tile any grouping could need (⌈R/BM⌉ + G + 1); warp 0 scans the groups
// (32 at a time) and the block takes the tile its index lands on, or returns. The group G is
// the tail past the last offset, written as zeros. In Contraction mode the grid's z is the
// group and warp 0 finds the group's contraction range.
//
// Operands: A(m, k) = a[m·sa0 + k·sa1], B(k, n) = b[g·sbg + k·sb0 + n·sb1],
// D(m, n) = d[g·sdg + m·sd0 + n·sd1]. Each output element is one sum in k order, in C (f32
// for halves): the same bits every run.

struct GArgs {
    u64 a, b, d, offs, gate;
    i64 sa0, sa1, sbg, sb0, sb1, sdg, sd0, sd1, os;
    // R: the ragged dim's length (Rows: M = R; Contraction: K = R)
    int G, M, N, K, R, rows_mode, off64;
};

#define FULL 0xffffffffu

// Offset g as read (g < G).
__device__ __forceinline__ i64 raw_off(const GArgs& a, int g) {
    return a.off64 ? ((const i64*)a.offs)[(i64)g * a.os] : (i64)((const int*)a.offs)[(i64)g * a.os];
}
// The clamped end e_g; R for g ≥ G (the tail group).
__device__ __forceinline__ int off_end(const GArgs& a, int g) {
    if (g >= a.G) return a.R;
    const i64 v = raw_off(a, g);
    return (int)(v < 0 ? 0 : (v > a.R ? a.R : v));
}

// Warp 0: the row tile `tile` of Rows mode → job = {group, first row, end row}; group −1 when
// the tile is past every group's tiles.
__device__ void rows_job(const GArgs& a, int tile, int bm, int* job) {
    const int lane = threadIdx.x & 31;
    int prev = 0, acc = 0;
    for (int base = 0; base <= a.G; base += 32) {
        const int g = base + lane;
        int m = max(off_end(a, g), prev);
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(FULL, m, o);
            if (lane >= o) m = max(m, y);
        }
        int start = __shfl_up_sync(FULL, m, 1);
        if (lane == 0) start = prev;
        const int nt = g <= a.G ? (m - start + bm - 1) / bm : 0;
        int c = nt;
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(FULL, c, o);
            if (lane >= o) c += y;
        }
        const int lo = acc + c - nt;
        const bool hit = nt > 0 && tile >= lo && tile < acc + c;
        const unsigned hm = __ballot_sync(FULL, hit);
        if (hm) {
            if (lane == __ffs(hm) - 1) {
                job[0] = g;
                job[1] = start + (tile - lo) * bm;
                job[2] = min(m, start + (tile - lo + 1) * bm);
            }
            return;
        }
        acc += __shfl_sync(FULL, c, 31);
        prev = __shfl_sync(FULL, m, 31);
    }
    if (lane == 0) job[0] = -1;
}

// Warp 0: group g's contraction range of Contraction mode → job = {g, start, end}.
__device__ void contraction_job(const GArgs& a, int g, int* job) {
    const int lane = threadIdx.x & 31;
    int m = 0;
    for (int base = 0; base < g; base += 32) {
        if (base + lane < g) m = max(m, off_end(a, base + lane));
    }
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(FULL, m, o));
    if (lane == 0) {
        job[0] = g;
        job[1] = m;
        job[2] = max(m, off_end(a, g));
    }
}

// The rows [m_lo, m_hi) × columns [n0, n0 + bn) of the tail group: zeros.
__device__ __forceinline__ void zero_tile(const GArgs& a, T* D, int m_lo, int m_hi, int n0, int bm, int bn) {
    for (int i = threadIdx.x; i < bm * bn; i += blockDim.x) {
        const int r = m_lo + i / bn, c = n0 + i % bn;
        if (r < m_hi && c < a.N) D[(i64)r * a.sd0 + (i64)c * a.sd1] = S((C)0);
    }
}

// Starts the block: finds its job {group, m_lo, m_hi, k_lo, k_hi} (bm × bn tiles); false
// when there is nothing to multiply — the offsets' check failed, no job, or the job was the
// tail group's zeros, written here. Every thread calls it (it synchronises the block).
__device__ __forceinline__ bool start_job(const GArgs& a, int bm, int bn, int* job, int& g, int& m_lo,
                                          int& m_hi, int& k_lo, int& k_hi) {
    if (gate_closed((const u64*)a.gate)) return false;
    if (threadIdx.x < 32) {
        if (a.rows_mode) rows_job(a, blockIdx.x, bm, job);
        else contraction_job(a, blockIdx.z, job);
    }
    __syncthreads();
    g = job[0];
    if (g < 0) return false;
    if (a.rows_mode) {
        m_lo = job[1]; m_hi = job[2]; k_lo = 0; k_hi = a.K;
    } else {
        m_lo = blockIdx.x * bm; m_hi = min(a.M, m_lo + bm); k_lo = job[1]; k_hi = job[2];
    }
    if (g == a.G) {
        zero_tile(a, (T*)a.d, m_lo, m_hi, blockIdx.y * bn, bm, bn);
        return false;
    }
    return true;
}

// ---- the fallback for every dtype and layout: 64 × 64 tiles, 4 × 4 outputs a thread -------
#define SBM 64
#define SBN 64
#define SBK 16
extern "C" __global__ void __launch_bounds__(256) k_gmm_simt(const GArgs a) {
    __shared__ C sA[SBK][SBM];
    __shared__ C sB[SBK][SBN];
    __shared__ int job[4];
    int g, m_lo, m_hi, k_lo, k_hi;
    if (!start_job(a, SBM, SBN, job, g, m_lo, m_hi, k_lo, k_hi)) return;
    const int n0 = blockIdx.y * SBN;
    T* D = (T*)a.d + (i64)g * a.sdg;
    const T* A = (const T*)a.a;
    const T* B = (const T*)a.b + (i64)g * a.sbg;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    C acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = (C)0;
    // the walk along m (or n) goes with the operand's smaller stride, so loads coalesce
    const bool a_m_fast = a.sa0 <= a.sa1, b_n_fast = a.sb1 <= a.sb0;
    for (int k0 = k_lo; k0 < k_hi; k0 += SBK) {
        for (int i = threadIdx.x; i < SBK * SBM; i += 256) {
            const int kk = a_m_fast ? i / SBM : i % SBK, mm = a_m_fast ? i % SBM : i / SBK;
            const int gm = m_lo + mm, gk = k0 + kk;
            sA[kk][mm] = (gm < m_hi && gk < k_hi) ? L(A[(i64)gm * a.sa0 + (i64)gk * a.sa1]) : (C)0;
        }
        for (int i = threadIdx.x; i < SBK * SBN; i += 256) {
            const int kk = b_n_fast ? i / SBN : i % SBK, nn = b_n_fast ? i % SBN : i / SBK;
            const int gn = n0 + nn, gk = k0 + kk;
            sB[kk][nn] = (gn < a.N && gk < k_hi) ? L(B[(i64)gk * a.sb0 + (i64)gn * a.sb1]) : (C)0;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < SBK; ++kk) {
            C av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) av[i] = sA[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = sB[kk][tx * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = m_lo + ty * 4 + i, c = n0 + tx * 4 + j;
            if (r < m_hi && c < a.N) D[(i64)r * a.sd0 + (i64)c * a.sd1] = S(acc[i][j]);
        }
}

// The offsets' check, before anything is written (one block): every offset within [0, R]
// and none below the one before it. res[0] is set for a bad one, res[1] is the first.
extern "C" __global__ void k_gmm_check(const GArgs a, u64* res) {
    __shared__ int first;
    if (threadIdx.x == 0) first = 0x7fffffff;
    __syncthreads();
    for (int g = threadIdx.x; g < a.G; g += blockDim.x) {
        const i64 v = raw_off(a, g);
        const i64 prev = g > 0 ? raw_off(a, g - 1) : 0;
        if (v < 0 || v > a.R || v < prev) atomicMin(&first, g);
    }
    __syncthreads();
    if (threadIdx.x == 0 && first != 0x7fffffff) {
        res[0] = 1;
        res[1] = (u64)first;
    }
}

#ifdef MT
// ---- f16/bf16 on tensor cores: mma.sync m16n8k16, f32 accumulators ------------------------
// 128 × 128 tiles, k steps of 32, 8 warps (2 × 4, each 64 × 32); tiles double-buffered in
// shared memory, filled by 16-byte cp.async where a chunk of 8 elements along the operand's
// unit-stride dim is whole and aligned (element by element elsewhere: group edges). AK: A's
// unit stride is along k (else along m); BKI: B's is along k (else along n) — ldmatrix reads
// each as it lies, .trans where the fragment wants the other order.
#define BM 128
#define BN 128
#define BK 32
#define PAD 8

// 8 elements src[0..8) (unit stride) into dst (16-byte aligned); element e is valid for
// lo <= e < hi, the rest read as zero.
__device__ __forceinline__ void chunk(h16* dst, const T* src, int lo, int hi) {
    if (lo <= 0 && hi >= 8 && (((u64)src) & 15) == 0) {
        cp16(dst, src, true);
    } else if (hi <= 0 || lo >= 8 || lo >= hi) {
        *(uint4*)dst = make_uint4(0, 0, 0, 0);
    } else {
        const h16* s = (const h16*)src;
#pragma unroll
        for (int e = 0; e < 8; ++e) dst[e] = (e >= lo && e < hi) ? s[e] : (h16)0;
    }
}

template <bool AK, bool BKI>
__device__ __forceinline__ void gmm_mma(const GArgs& a) {
    constexpr int LA = AK ? BK + PAD : BM + PAD;   // shared row stride of A's tile
    constexpr int LB = BKI ? BK + PAD : BN + PAD;
    constexpr int SA = AK ? BM * LA : BK * LA;     // one stage, in halves
    constexpr int SB = BKI ? BN * LB : BK * LB;
    __shared__ __align__(16) h16 sA[2 * SA];
    __shared__ __align__(16) h16 sB[2 * SB];
    __shared__ int job[4];
    int g, m_lo, m_hi, k_lo, k_hi;
    if (!start_job(a, BM, BN, job, g, m_lo, m_hi, k_lo, k_hi)) return;
    const int n0 = blockIdx.y * BN;
    T* D = (T*)a.d + (i64)g * a.sdg;
    const T* A = (const T*)a.a;
    const T* B = (const T*)a.b + (i64)g * a.sbg;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, mi = lane >> 3;
    const int wm = warp >> 2, wn = warp & 3;
    // k tiles start on multiples of BK, so 16-byte chunks along k stay aligned
    const int kb = k_hi > k_lo ? (k_lo / BK) * BK : k_lo;
    const int tiles = k_hi > k_lo ? (k_hi - kb + BK - 1) / BK : 0;

    auto load = [&](int stage, int k0) {
        h16* dA = sA + stage * SA;
        h16* dB = sB + stage * SB;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int c = tid + j * 256;
            if (AK) {   // rows m, chunks along k
                const int r = c >> 2, kc = (c & 3) * 8, gm = m_lo + r, gk = k0 + kc;
                const int hi = gm < m_hi ? k_hi - gk : 0;
                chunk(dA + r * LA + kc, A + (i64)gm * a.sa0 + gk, k_lo - gk, hi);
            } else {    // rows k, chunks along m
                const int r = c >> 4, mc = (c & 15) * 8, gk = k0 + r, gm = m_lo + mc;
                const int hi = (gk >= k_lo && gk < k_hi) ? m_hi - gm : 0;
                chunk(dA + r * LA + mc, A + (i64)gk * a.sa1 + gm, 0, hi);
            }
            if (BKI) {  // rows n, chunks along k
                const int r = c >> 2, kc = (c & 3) * 8, gn = n0 + r, gk = k0 + kc;
                const int hi = gn < a.N ? k_hi - gk : 0;
                chunk(dB + r * LB + kc, B + (i64)gn * a.sb1 + gk, k_lo - gk, hi);
            } else {    // rows k, chunks along n
                const int r = c >> 4, nc = (c & 15) * 8, gk = k0 + r, gn = n0 + nc;
                const int hi = (gk >= k_lo && gk < k_hi) ? a.N - gn : 0;
                chunk(dB + r * LB + nc, B + (i64)gk * a.sb0 + gn, 0, hi);
            }
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int n = 0; n < 4; ++n) acc[i][n][0] = acc[i][n][1] = acc[i][n][2] = acc[i][n][3] = 0.f;

    if (tiles > 0) load(0, kb);
    cp_commit();
    for (int t = 0; t < tiles; ++t) {
        if (t + 1 < tiles) load((t + 1) & 1, kb + (t + 1) * BK);
        cp_commit();
        cp_wait<1>();
        __syncthreads();
        const h16* tA = sA + (t & 1) * SA;
        const h16* tB = sB + (t & 1) * SB;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            u32 af[4][4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int m = wm * 64 + i * 16;
                if (AK) ldm4(af[i], tA + (m + (lane & 15)) * LA + kk * 16 + (lane >> 4) * 8);
                else ldm4t(af[i], tA + (kk * 16 + (lane & 7) + (mi >> 1) * 8) * LA + m + (mi & 1) * 8);
            }
#pragma unroll
            for (int n = 0; n < 4; n += 2) {
                const int nn = wn * 32 + n * 8;
                u32 r[4];
                if (BKI) ldm4(r, tB + (nn + (mi >> 1) * 8 + (lane & 7)) * LB + kk * 16 + (mi & 1) * 8);
                else ldm4t(r, tB + (kk * 16 + (mi & 1) * 8 + (lane & 7)) * LB + nn + (mi >> 1) * 8);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    mma(acc[i][n], af[i], r[0], r[1]);
                    mma(acc[i][n + 1], af[i], r[2], r[3]);
                }
            }
        }
        __syncthreads();
    }
    cp_wait<0>();
    const bool pairs = a.sd1 == 1;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = m_lo + wm * 64 + i * 16 + (lane >> 2) + h * 8;
                const int c = n0 + wn * 32 + n * 8 + (lane & 3) * 2;
                if (r >= m_hi || c >= a.N) continue;
                T* p = D + (i64)r * a.sd0 + (i64)c * a.sd1;
                const float v0 = acc[i][n][2 * h], v1 = acc[i][n][2 * h + 1];
                if (pairs && c + 1 < a.N && (((u64)p) & 3) == 0) {
                    *(u32*)p = pack(v0, v1);
                } else {
                    p[0] = S(v0);
                    if (c + 1 < a.N) p[a.sd1] = S(v1);
                }
            }
}

extern "C" __global__ void __launch_bounds__(256) k_gmm_mma_kk(const GArgs a) { gmm_mma<true, true>(a); }
extern "C" __global__ void __launch_bounds__(256) k_gmm_mma_kn(const GArgs a) { gmm_mma<true, false>(a); }
extern "C" __global__ void __launch_bounds__(256) k_gmm_mma_mk(const GArgs a) { gmm_mma<false, true>(a); }
extern "C" __global__ void __launch_bounds__(256) k_gmm_mma_mn(const GArgs a) { gmm_mma<false, false>(a); }
#endif
