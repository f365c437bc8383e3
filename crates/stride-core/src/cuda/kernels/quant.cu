// Products with GGUF block-quantized weights (cuda/quant.rs): y = x · Wᵀ, W as GGUF blocks of
// 32 values, x rounded per row to Q8_0/Q8_1 blocks (q8_block), then integer block dot
// products (__dp4a) times f32 scales (qmv_row). Two forms:
//
// - k_q8_quantize then k_qmv_*: the activations rounded into a global scratch by one launch,
//   the product by a second (any number of rows);
// - k_qmvf_*: one launch for up to 8 rows and up to QMAXW weights sharing the input: each
//   thread block rounds the rows into shared memory (read from the input's own layout and
//   dtype), then its warps run the product over the weights' rows, grid-stride.
//
// Every operation is stride-quant's CPU kernel's, in its order, so the results are the CPU's
// bits: the activation rounding is ggml's reference (IEEE division, round half away from
// zero, the scale rounded to f16), the integer sums are exact, and block b's terms are added
// by fmaf into accumulation lane b % 8 in block order, the eight lanes then summed in the
// CPU's tree ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). Both forms call the same q8_block and
// qmv_row, so they agree by construction. Compiled with --fmad=false; prepended by
// common.cuh (types, the exact f16/bf16 casts, strided addressing).

typedef unsigned short u16;

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

// ---- activations: T 32-value blocks rounded by a warp at once, a lane per value ----
// v[t]: this lane's value of block t. Out: q[t] its rounded value, d[t] the block's scale (the
// f16's value), sum[t] = d·Σq (used with Q8_1). A block holding a NaN or an infinity gets
// d = sum = NaN and q = 0, as on the CPU. The T blocks' shuffle chains are independent, so
// they overlap (one block's latency for T). The whole warp calls it.
template <int T>
__device__ __forceinline__ void q8_round(const float (&v)[T], int (&q)[T], float (&d)[T],
                                         float (&sum)[T]) {
    float a[T];
    int qs[T];
#pragma unroll
    for (int t = 0; t < T; ++t) a[t] = fabsf(v[t]);
#pragma unroll
    for (int o = 16; o; o >>= 1)
#pragma unroll
        for (int t = 0; t < T; ++t) a[t] = fmaxf(a[t], __shfl_xor_sync(FULL, a[t], o));
    bool finite[T];
#pragma unroll
    for (int t = 0; t < T; ++t) {
        finite[t] = __all_sync(FULL, fabsf(v[t]) <= 3.40282347e38f);
        const float dd = a[t] / 127.0f;
        const float id = dd == 0.0f ? 0.0f : 1.0f / dd;
        // round half away from zero, saturating as Rust's `as i8`
        const float r = fminf(fmaxf(roundf(v[t] * id), -128.0f), 127.0f);
        q[t] = finite[t] ? (int)r : 0;
        qs[t] = q[t];
        d[t] = finite[t] ? h2f(f2h(dd)) : __int_as_float(0x7fc00000);
    }
#pragma unroll
    for (int o = 16; o; o >>= 1)
#pragma unroll
        for (int t = 0; t < T; ++t) qs[t] += __shfl_xor_sync(FULL, qs[t], o);
#pragma unroll
    for (int t = 0; t < T; ++t)
        // exact: 11-bit scale times a 12-bit sum
        sum[t] = finite[t] ? d[t] * (float)qs[t] : __int_as_float(0x7fc00000);
}

// Rounds `blocks` 32-value blocks of x (f32, m × k row-major, k = 32·nb), a warp per block —
// or of swiglu(x, u) when u is set, computed as pointwise.cu's k_gated computes it for f32
// (silu(g) = g·sigmoid(g), times u), so the values are those of the composed
// swiglu-then-product and the SwiGLU costs no launch. qs: i8 values, d: f32 scales, s: the
// block sums (Q8_1; null for Q8_0).
__device__ __forceinline__ void q8_quantize_blocks(const float *x, const float *u, const i64 blocks,
                                                   i8 *qs, float *d, float *s) {
    const int lane = threadIdx.x & 31;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    for (i64 b = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; b < blocks; b += warps) {
        const float xv = x[b * 32 + lane];
        float v[1] = {u ? xv * sigmoid(xv) * u[b * 32 + lane] : xv}, dh[1], sum[1];
        int q[1];
        q8_round<1>(v, q, dh, sum);
        qs[b * 32 + lane] = (i8)q[0];
        if (lane == 0) {
            d[b] = dh[0];
            if (s) s[b] = sum[0];
        }
    }
}
extern "C" __global__ void __launch_bounds__(256)
    k_q8_quantize(const float *x, const i64 blocks, i8 *qs, float *d, float *s) {
    q8_quantize_blocks(x, nullptr, blocks, qs, d, s);
}
extern "C" __global__ void __launch_bounds__(256)
    k_q8_quantize_swiglu(const float *g, const float *u, const i64 blocks, i8 *qs, float *d, float *s) {
    q8_quantize_blocks(g, u, blocks, qs, d, s);
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

// ---- the product of one weight row with up to R activation rows ----
// wrow: the row's nb blocks; qs/d/s: the quantized activations (row strides k = 32·nb and nb;
// global or shared memory); rows: how many of the R rows exist. Lane l decodes block c + l of
// each 32-block chunk once (in registers) and computes its exact integer dot product with each
// row; lanes 0..7 then add the chunk's terms into their accumulation lane in block order (the
// CPU's), through shuffles. Lane 0 ends with the R results. The whole warp calls it.
// PRE: the first chunk's block is already in pw/pdw/pmw (loaded early by the caller).
template <int FMT, int R, bool PRE>
__device__ __forceinline__ void qmv_row(const u8 *__restrict__ wrow, const int nb,
                                        const i8 *qs, const float *d, const float *s,
                                        const i64 rows, float *acc, const int *pw,
                                        const float pdw, const float pmw) {
    typedef Blk<FMT> B;
    const int lane = threadIdx.x & 31;
    const i64 k = (i64)nb * 32;
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    for (int c = 0; c < nb; c += 32) {
        const int b = c + lane;
        int w[8];
        float dw = 0.0f, mw = 0.0f;
        if (PRE && c == 0) {
#pragma unroll
            for (int i = 0; i < 8; ++i) w[i] = pw[i];
            dw = pdw;
            mw = pmw;
        } else if (b < nb) {
            B::load(wrow + (i64)b * B::TS, w, dw, mw);
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float sc = 0.0f, sf = 0.0f, sm = 0.0f;
            if (b < nb && r < rows) {
                const int4 *a = (const int4 *)(qs + r * k + (i64)b * 32);
                const int4 a0 = a[0], a1 = a[1];
                int isum = __dp4a(w[0], a0.x, 0);
                isum = __dp4a(w[1], a0.y, isum);
                isum = __dp4a(w[2], a0.z, isum);
                isum = __dp4a(w[3], a0.w, isum);
                isum = __dp4a(w[4], a1.x, isum);
                isum = __dp4a(w[5], a1.y, isum);
                isum = __dp4a(w[6], a1.z, isum);
                isum = __dp4a(w[7], a1.w, isum);
                sc = dw * d[r * nb + b];
                sf = (float)isum;
                if (B::MIN) sm = s[r * nb + b];
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
        acc[r] = l;
    }
}

// ---- two launches: a warp per output feature, R activation rows per warp ----
// W: n rows of nb blocks; qs/d/s: the quantized activations (m rows, from k_q8_quantize);
// y: f32, m × n.
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
        qmv_row<FMT, R, false>(wrow, nb, qs + r0 * k, d + r0 * nb, B::MIN ? s + r0 * nb : s,
                               m - r0, acc, (const int *)0, 0.0f, 0.0f);
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (lane == 0 && r0 + r < m) y[(r0 + r) * n + row] = acc[r];
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

// Blocks each warp of the fused kernel loads, then rounds, at once.
#define QT 4

// ---- one launch: rounding and product fused, several weights sharing the input ----
// QMany (QMany in cuda/quant.rs): the weights' blocks w[j] (all of one format, nb blocks a
// row), their outputs y[j] (m × n_j in the input's dtype, row-major) and the first global
// feature of each, f0[j] (f0[count] = the total; features of weight j are f0[j]..f0[j+1]).
#define QMAXW 8
struct QMany {
    i64 w[QMAXW];
    i64 y[QMAXW];
    i64 f0[QMAXW + 1];
    int count;
};

// dt: 0 f32, 1 f16, 2 bf16 (the exact casts of common.cuh, as the CPU's to_dtype).
__device__ __forceinline__ float ld_x(const void *x, const int dt, const i64 i) {
    if (dt == 0) return ((const float *)x)[i];
    if (dt == 1) return f16_to_f32(((const f16 *)x)[i]);
    return bf16_to_f32(((const bf16 *)x)[i]);
}
__device__ __forceinline__ void st_y(const i64 y, const int dt, const i64 i, const float v) {
    if (dt == 0) ((float *)y)[i] = v;
    else if (dt == 1) ((f16 *)y)[i] = f32_to_f16(v);
    else ((bf16 *)y)[i] = f32_to_bf16(v);
}

// The weight of global feature f: its blocks, its output, its n and f's row in it (constant
// indices only, so that the parameter struct stays in parameter space).
__device__ __forceinline__ void locate(const QMany &ws, const i64 f, const u8 *&w, i64 &y,
                                       i64 &n, i64 &row) {
    w = (const u8 *)ws.w[0];
    y = ws.y[0];
    n = ws.f0[1] - ws.f0[0];
    row = f - ws.f0[0];
#pragma unroll
    for (int t = 1; t < QMAXW; ++t)
        if (t < ws.count && f >= ws.f0[t]) {
            w = (const u8 *)ws.w[t];
            y = ws.y[t];
            n = ws.f0[t + 1] - ws.f0[t];
            row = f - ws.f0[t];
        }
}

// The element offsets of the input's rows (its leading dims flattened, from its layout).
struct QRows {
    i64 off[8];
};

// The lane's value of activation unit u (row u / nb, block u % nb; 0 past the units).
__device__ __forceinline__ float act_unit(const void *x, const int xdt, const QRows &rows,
                                          const i64 es, const int nb, const int units,
                                          const int u, const int lane) {
    if (u >= units) return 0.0f;
    const int r = u / nb, b = u - r * nb;
    i64 o = rows.off[0];
#pragma unroll
    for (int i = 1; i < 8; ++i)
        if (r == i) o = rows.off[i];
    return ld_x(x, xdt, o + (i64)(b * 32 + lane) * es);
}

// x: the input's first element; row r starts at element rows.off[r], its values are es
// elements apart (the last dim's stride). m ≤ R rows; the block rounds them all into shared
// memory (m·k i8, then m·nb f32 scales and m·nb f32 sums), each warp QT blocks at a time,
// while the first chunk of its first weight row comes into registers and its next rows into
// the L2 (prefetch): the latencies of the input, the rounding and the weights overlap. Then
// warp w of block b takes features b·warps + w, + gridDim·warps, ... (F in all).
template <int FMT, int R>
__device__ __forceinline__ void qmvf(const QMany &ws, const i64 F, const int nb, const void *x,
                                     const int xdt, const QRows &rows, const i64 es,
                                     const int m, const int ydt) {
    typedef Blk<FMT> B;
    extern __shared__ int4 qmvf_smem[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const i64 k = (i64)nb * 32;
    i8 *sq = (i8 *)qmvf_smem;
    float *sd = (float *)(sq + m * k);
    float *ss = sd + m * nb;
    const i64 step = (i64)gridDim.x * warps;
    const i64 first = (i64)blockIdx.x * warps + warp;
    const i64 rowb = (i64)nb * B::TS;

    // the activations first (their loads start the critical path): each warp loads QT blocks,
    // then rounds them together
    const int units = m * nb;
    float v[QT];
#pragma unroll
    for (int t = 0; t < QT; ++t) {
        const int u = warp + t * warps;
        v[t] = act_unit(x, xdt, rows, es, nb, units, u, lane);
    }
    // meanwhile the first chunk of this warp's first weight row, in registers
    int pw[8];
    float pdw = 0.0f, pmw = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) pw[i] = 0;
    if (first < F && lane < nb) {
        const u8 *w;
        i64 y, n, row;
        locate(ws, first, w, y, n, row);
        B::load(w + row * rowb + (i64)lane * B::TS, pw, pdw, pmw);
    }
    // and the next rows of this warp into the L2: the first and last byte of each 128-byte
    // step, so rows not starting on a line are covered
    {
        const int lines = (int)((rowb + 127) / 128) + 1;
        for (int i = lane; i < 7 * lines; i += 32) {
            const int t = i / lines + 1, l = i - (t - 1) * lines;
            const i64 f = first + t * step;
            if (f < F) {
                const u8 *w;
                i64 y, n, row;
                locate(ws, f, w, y, n, row);
                const u8 *p = w + row * rowb + ((i64)l * 128 < rowb ? (i64)l * 128 : rowb - 1);
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
            }
        }
    }
    for (int u0 = warp;; u0 += QT * warps) {
        int q[QT];
        float dh[QT], sum[QT];
        q8_round<QT>(v, q, dh, sum);
#pragma unroll
        for (int t = 0; t < QT; ++t) {
            const int u = u0 + t * warps;
            if (u < units) {
                const int r = u / nb, b = u - r * nb;
                sq[r * k + b * 32 + lane] = (i8)q[t];
                if (lane == 0) {
                    sd[r * nb + b] = dh[t];
                    if (B::MIN) ss[r * nb + b] = sum[t];
                }
            }
        }
        if (u0 + QT * warps >= units) break;
#pragma unroll
        for (int t = 0; t < QT; ++t) {
            const int u = u0 + QT * warps + t * warps;
            v[t] = act_unit(x, xdt, rows, es, nb, units, u, lane);
        }
    }
    __syncthreads();

    for (i64 f = first; f < F; f += step) {
        const u8 *w;
        i64 y, n, row;
        locate(ws, f, w, y, n, row);
        float acc[R];
        if (f == first)
            qmv_row<FMT, R, true>(w + row * rowb, nb, sq, sd, ss, m, acc, pw, pdw, pmw);
        else
            qmv_row<FMT, R, false>(w + row * rowb, nb, sq, sd, ss, m, acc, pw, pdw, pmw);
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (r < m) st_y(y, ydt, r * n + row, acc[r]);
        }
    }
}

#define QMVF(FMT, NAME, R)                                                                    \
    extern "C" __global__ void __launch_bounds__(256)                                         \
        k_qmvf_##NAME##_##R(const QMany ws, const i64 F, const int nb, const void *x,          \
                            const int xdt, const QRows rows, const i64 es, const int m,        \
                            const int ydt) {                                                   \
        qmvf<FMT, R>(ws, F, nb, x, xdt, rows, es, m, ydt);                                     \
    }
#define QMVF_ALL(FMT, NAME)                                                                   \
    QMVF(FMT, NAME, 1) QMVF(FMT, NAME, 2) QMVF(FMT, NAME, 4) QMVF(FMT, NAME, 8)

QMVF_ALL(0, q4_0)
QMVF_ALL(1, q4_1)
QMVF_ALL(2, q5_0)
QMVF_ALL(3, q5_1)
QMVF_ALL(4, q8_0)
