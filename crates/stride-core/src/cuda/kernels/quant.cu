// Products with GGUF block-quantized weights (cuda/quant.rs): y = x · Wᵀ, W as GGUF blocks of
// 32 values, x rounded per row to Q8_0/Q8_1 blocks first (k_q8_quantize), then integer block
// dot products (__dp4a) times f32 scales (k_qmv_*).
//
// Every operation is stride-quant's CPU kernel's, in its order, so the results are the CPU's
// bits: the activation rounding is ggml's reference (IEEE division, round half away from
// zero, the scale rounded to f16), the integer sums are exact, and block b's terms are added
// by fmaf into accumulation lane b % 8 in block order, the eight lanes then summed in the
// CPU's tree ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). Compiled with --fmad=false.

typedef signed char i8;
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef long long i64;

#define FULL 0xffffffffu

__device__ __forceinline__ float h2f(u16 b) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
    return f;
}
__device__ __forceinline__ u16 f2h(float f) {
    u16 b;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
}

// ---- activations: one warp per 32-value block, a lane per value ----
// x: f32, m × k row-major (k = 32·nb). qs: i8 values, d: f32 scales (the f16's value), s:
// d·Σq per block (Q8_1; null for Q8_0). A block holding a NaN or an infinity gets d = s = NaN
// and q = 0, as on the CPU.
extern "C" __global__ void __launch_bounds__(256)
    k_q8_quantize(const float *x, const i64 blocks, i8 *qs, float *d, float *s) {
    const int lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 b = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; b < blocks; b += warps) {
        const float v = x[b * 32 + lane];
        const bool finite = fabsf(v) <= 3.40282347e38f;
        float a = fabsf(v);
#pragma unroll
        for (int o = 16; o; o >>= 1) a = fmaxf(a, __shfl_xor_sync(FULL, a, o));
        if (!__all_sync(FULL, finite)) {
            qs[b * 32 + lane] = 0;
            if (lane == 0) {
                d[b] = __int_as_float(0x7fc00000);
                if (s) s[b] = __int_as_float(0x7fc00000);
            }
            continue;
        }
        const float dd = a / 127.0f;
        const float id = dd == 0.0f ? 0.0f : 1.0f / dd;
        // round half away from zero, saturating as Rust's `as i8`
        const float r = fminf(fmaxf(roundf(v * id), -128.0f), 127.0f);
        int q = (int)r;
        qs[b * 32 + lane] = (i8)q;
#pragma unroll
        for (int o = 16; o; o >>= 1) q += __shfl_xor_sync(FULL, q, o);
        if (lane == 0) {
            const float dh = h2f(f2h(dd));
            d[b] = dh;
            if (s) s[b] = dh * (float)q; // exact: 11-bit scale times a 12-bit sum
        }
    }
}

// ---- weight blocks: the 32 integer values as 8 words of 4 signed bytes, in value order ----
__device__ __forceinline__ u32 ld16x2(const u8 *p) { // 4 bytes at a 2-byte-aligned address
    const u16 *h = (const u16 *)p;
    return (u32)h[0] | ((u32)h[1] << 16);
}
__device__ __forceinline__ u32 ld32(const u8 *p) { return *(const u32 *)p; }

// The fifth bits of values 4t..4t+3 (bits `nib` of qh) moved to bit 4 of each byte.
__device__ __forceinline__ u32 spread4(u32 nib) {
    return ((nib & 1u) << 4) | ((nib & 2u) << 11) | ((nib & 4u) << 18) | ((nib & 8u) << 25);
}

// FMT: 0 Q4_0 (18 bytes), 1 Q4_1 (20), 2 Q5_0 (22), 3 Q5_1 (24), 4 Q8_0 (34).
template <int FMT> struct Blk;

template <> struct Blk<0> {
    enum { TS = 18, MIN = 0 };
    static __device__ __forceinline__ void load(const u8 *p, int *w, float &dw, float &mw) {
        dw = h2f(*(const u16 *)p);
        mw = 0.0f;
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const u32 q = ld16x2(p + 2 + 4 * t);
            w[t] = (int)__vsub4(q & 0x0F0F0F0Fu, 0x08080808u);
            w[t + 4] = (int)__vsub4((q >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
    }
};
template <> struct Blk<1> {
    enum { TS = 20, MIN = 1 };
    static __device__ __forceinline__ void load(const u8 *p, int *w, float &dw, float &mw) {
        const u32 dm = ld32(p);
        dw = h2f((u16)(dm & 0xFFFF));
        mw = h2f((u16)(dm >> 16));
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const u32 q = ld32(p + 4 + 4 * t);
            w[t] = (int)(q & 0x0F0F0F0Fu);
            w[t + 4] = (int)((q >> 4) & 0x0F0F0F0Fu);
        }
    }
};
template <> struct Blk<2> {
    enum { TS = 22, MIN = 0 };
    static __device__ __forceinline__ void load(const u8 *p, int *w, float &dw, float &mw) {
        dw = h2f(*(const u16 *)p);
        mw = 0.0f;
        const u32 qh = ld16x2(p + 2);
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const u32 q = ld16x2(p + 6 + 4 * t);
            const u32 lo = (q & 0x0F0F0F0Fu) | spread4((qh >> (4 * t)) & 0xF);
            const u32 hi = ((q >> 4) & 0x0F0F0F0Fu) | spread4((qh >> (16 + 4 * t)) & 0xF);
            w[t] = (int)__vsub4(lo, 0x10101010u);
            w[t + 4] = (int)__vsub4(hi, 0x10101010u);
        }
    }
};
template <> struct Blk<3> {
    enum { TS = 24, MIN = 1 };
    static __device__ __forceinline__ void load(const u8 *p, int *w, float &dw, float &mw) {
        const u32 dm = ld32(p);
        dw = h2f((u16)(dm & 0xFFFF));
        mw = h2f((u16)(dm >> 16));
        const u32 qh = ld32(p + 4);
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            const u32 q = ld32(p + 8 + 4 * t);
            w[t] = (int)((q & 0x0F0F0F0Fu) | spread4((qh >> (4 * t)) & 0xF));
            w[t + 4] = (int)(((q >> 4) & 0x0F0F0F0Fu) | spread4((qh >> (16 + 4 * t)) & 0xF));
        }
    }
};
template <> struct Blk<4> {
    enum { TS = 34, MIN = 0 };
    static __device__ __forceinline__ void load(const u8 *p, int *w, float &dw, float &mw) {
        dw = h2f(*(const u16 *)p);
        mw = 0.0f;
#pragma unroll
        for (int t = 0; t < 8; ++t) w[t] = (int)ld16x2(p + 2 + 4 * t);
    }
};

// ---- the product: a warp per output feature, R activation rows per warp ----
// W: n rows of nb blocks; qs/d/s: the quantized activations (m rows); y: f32, m × n.
// Lane l decodes block c + l of each 32-block chunk once (in registers) and computes its
// exact integer dot product with each of the R rows; lanes 0..7 then add the chunk's terms
// into their accumulation lane in block order (the CPU's), through shuffles.
template <int FMT, int R>
__device__ __forceinline__ void qmv(const u8 *__restrict__ W, const i64 n, const int nb,
                                    const i8 *__restrict__ qs, const float *__restrict__ d,
                                    const float *__restrict__ s, const i64 m,
                                    float *__restrict__ y) {
    typedef Blk<FMT> B;
    const int lane = threadIdx.x & 31;
    const i64 row = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= n) return; // whole warps leave together
    const u8 *wrow = W + row * (i64)nb * B::TS;
    const i64 k = (i64)nb * 32;
    for (i64 r0 = (i64)blockIdx.y * R; r0 < m; r0 += (i64)gridDim.y * R) {
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
        for (int c = 0; c < nb; c += 32) {
            const int b = c + lane;
            int w[8];
            float dw = 0.0f, mw = 0.0f;
            if (b < nb) B::load(wrow + (i64)b * B::TS, w, dw, mw);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float sc = 0.0f, sf = 0.0f, sm = 0.0f;
                const i64 rr = r0 + r;
                if (b < nb && rr < m) {
                    const int4 *a = (const int4 *)(qs + rr * k + (i64)b * 32);
                    const int4 a0 = a[0], a1 = a[1];
                    int isum = __dp4a(w[0], a0.x, 0);
                    isum = __dp4a(w[1], a0.y, isum);
                    isum = __dp4a(w[2], a0.z, isum);
                    isum = __dp4a(w[3], a0.w, isum);
                    isum = __dp4a(w[4], a1.x, isum);
                    isum = __dp4a(w[5], a1.y, isum);
                    isum = __dp4a(w[6], a1.z, isum);
                    isum = __dp4a(w[7], a1.w, isum);
                    sc = dw * d[rr * nb + b];
                    sf = (float)isum;
                    if (B::MIN) sm = s[rr * nb + b];
                }
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int src = (lane & 7) + 8 * j;
                    const float tsc = __shfl_sync(FULL, sc, src);
                    const float tsf = __shfl_sync(FULL, sf, src);
                    float tmw = 0.0f, tsm = 0.0f;
                    if (B::MIN) {
                        tmw = __shfl_sync(FULL, mw, src);
                        tsm = __shfl_sync(FULL, sm, src);
                    }
                    if (c + src < nb) {
                        acc[r] = fmaf(tsc, tsf, acc[r]);
                        if (B::MIN) acc[r] = fmaf(tmw, tsm, acc[r]);
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            // lanes 0..7 hold l0..l7: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) lands in lane 0
            float l = acc[r];
            l = l + __shfl_down_sync(FULL, l, 4);
            l = l + __shfl_down_sync(FULL, l, 2);
            l = l + __shfl_down_sync(FULL, l, 1);
            if (lane == 0 && r0 + r < m) y[(r0 + r) * n + row] = l;
        }
    }
}

#define QMV(FMT, NAME, R)                                                                     \
    extern "C" __global__ void __launch_bounds__(128)                                         \
        k_qmv_##NAME##_##R(const u8 *W, const i64 n, const int nb, const i8 *qs,               \
                           const float *d, const float *s, const i64 m, float *y) {           \
        qmv<FMT, R>(W, n, nb, qs, d, s, m, y);                                                 \
    }
#define QMV_ALL(FMT, NAME) QMV(FMT, NAME, 1) QMV(FMT, NAME, 2) QMV(FMT, NAME, 4) QMV(FMT, NAME, 8)

QMV_ALL(0, q4_0)
QMV_ALL(1, q4_1)
QMV_ALL(2, q5_0)
QMV_ALL(3, q5_1)
QMV_ALL(4, q8_0)
