// Cross-entropy over the rows of 2-d logits (backend/cross_entropy.rs has the math and the
// operand order), forward and backward, each reading a row once: a block per row (grid-stride
// over rows). Forward: each thread keeps a running max and a sum of exponentials rescaled to
// it (an online log-sum-exp), merged over the block by fixed trees. Backward: the gradient of
// each logit from the saved log-sum-exp. rows.cuh comes first.

// exp in the compute type: f32 through exp2f (the MUFU unit, ≤ 2 ulp; expf's range reduction
// made the forward compute-bound), f64 through exp
__device__ __forceinline__ float ce_exp(float v) { return exp2f(v * 1.4426950408889634f); }
__device__ __forceinline__ double ce_exp(double v) { return exp(v); }

// Pushes logit z into a running (max m, sum s of exp(. - m)); -inf adds nothing, NaN poisons.
__device__ __forceinline__ void lse_push(C& m, C& s, C z) {
    if (z == -(C)(1.0 / 0.0)) return;
    if (z > m) {
        s = s * ce_exp(m - z) + (C)1;
        m = z;
    } else {
        s += ce_exp(z - m);
    }
}

// Forward: lse[r] = log Σ exp(z), and, unless target[r] is ignore_index, loss[r] =
// (1 − eps)(lse − z[t]) + eps (lse − mean z) + zl · lse². A target outside [0, V) sets the
// gate (word 0: 1, word 1: the value) and gives a NaN loss.
template <int VW>
__device__ __forceinline__ void ce_fwd(const i64 R, const i64 V, const T* x, const i64 xo,
                                       const i64 xr, const i64 xc, const i64* tg, const i64 to,
                                       const i64 ts, const i64 ignore, const double ls,
                                       const double zl, C* loss, const i64 lo, const i64 lst,
                                       C* lse, const i64 eo, const i64 es, u64* gate) {
    __shared__ C sh[32];
    const int t = threadIdx.x, bd = blockDim.x;
    for (i64 r = blockIdx.x; r < R; r += gridDim.x) {
        const T* row = x + xo + r * xr;
        C m = -(C)(1.0 / 0.0), s = 0, sz = 0;
        C tmp[VW];
        for (i64 i = (i64)t * VW; i < V; i += (i64)bd * VW) {
            load_chunk<VW>(row, i, xc, tmp);
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                lse_push(m, s, tmp[e]);
                sz += tmp[e];
            }
        }
        const C mx = block_max(m, sh);
        // a thread that saw only -inf has s = 0 (and m = -inf: exp(m - mx) would be NaN)
        const C total = block_sum(s == (C)0 ? (C)0 : s * ce_exp(m - mx), sh);
        const C sumz = ls != 0.0 ? block_sum(sz, sh) : (C)0;
        const C l = mx + m_log(total);
        if (t == 0) {
            const i64 target = tg[to + r * ts];
            C out = 0;
            if (target != ignore) {
                if (target < 0 || target >= V) {
                    if (atomicCAS(gate, 0ull, 1ull) == 0ull) gate[1] = (u64)target;
                    out = m_nan<C>();
                } else {
                    const C zt = L(row[target * xc]);
                    out = ((C)1 - (C)ls) * (l - zt);
                    if (ls != 0.0) out = out + (C)ls * (l - sumz / (C)V);
                    if (zl != 0.0) out = out + (C)zl * l * l;
                }
            }
            loss[lo + r * lst] = out;
            lse[eo + r * es] = l;
        }
    }
}

// Backward: dx[r][j] = g[r] ((1 + 2 zl lse) exp(z[j] − lse) − eps/V − (1 − eps)[j = t]), and 0
// on rows whose target is ignore_index.
template <int VW>
__device__ __forceinline__ void ce_bwd(const i64 R, const i64 V, const T* x, const i64 xo,
                                       const i64 xr, const i64 xc, const i64* tg, const i64 to,
                                       const i64 ts, const i64 ignore, const double ls,
                                       const double zl, const C* g, const i64 go, const i64 gs,
                                       const C* lse, const i64 eo, const i64 es, T* dx,
                                       const i64 dxo, const i64 dxr, const i64 dxc) {
    const int t = threadIdx.x, bd = blockDim.x;
    for (i64 r = blockIdx.x; r < R; r += gridDim.x) {
        const T* row = x + xo + r * xr;
        T* drow = dx + dxo + r * dxr;
        const i64 target = tg[to + r * ts];
        const bool skip = target == ignore;
        const C gr = g[go + r * gs], l = lse[eo + r * es];
        const C scale = (C)1 + (C)2 * (C)zl * l;
        const C smooth = (C)ls / (C)V, hit = (C)1 - (C)ls;
        C tmp[VW];
        for (i64 i = (i64)t * VW; i < V; i += (i64)bd * VW) {
            load_chunk<VW>(row, i, xc, tmp);
#pragma unroll
            for (int e = 0; e < VW; ++e) {
                C d = ce_exp(tmp[e] - l) * scale - smooth;
                if (i + e == target) d = d - hit;
                tmp[e] = skip ? (C)0 : gr * d;
            }
            store_chunk<VW>(drow, i, dxc, tmp);
        }
    }
}

#define CE_FWD_PARAMS                                                                          \
    const i64 R, const i64 V, const T *x, const i64 xo, const i64 xr, const i64 xc,           \
        const i64 *tg, const i64 to, const i64 ts, const i64 ignore, const double ls,         \
        const double zl, C *loss, const i64 lo, const i64 lst, C *lse, const i64 eo,          \
        const i64 es, u64 *gate
#define CE_FWD_ARGS R, V, x, xo, xr, xc, tg, to, ts, ignore, ls, zl, loss, lo, lst, lse, eo, es, gate
#define CE_BWD_PARAMS                                                                          \
    const i64 R, const i64 V, const T *x, const i64 xo, const i64 xr, const i64 xc,           \
        const i64 *tg, const i64 to, const i64 ts, const i64 ignore, const double ls,         \
        const double zl, const C *g, const i64 go, const i64 gs, const C *lse, const i64 eo,  \
        const i64 es, T *dx, const i64 dxo, const i64 dxr, const i64 dxc
#define CE_BWD_ARGS \
    R, V, x, xo, xr, xc, tg, to, ts, ignore, ls, zl, g, go, gs, lse, eo, es, dx, dxo, dxr, dxc

extern "C" __global__ void __launch_bounds__(1024) k_ce(CE_FWD_PARAMS) { ce_fwd<1>(CE_FWD_ARGS); }
extern "C" __global__ void __launch_bounds__(1024) k_ce_vec(CE_FWD_PARAMS) {
    ce_fwd<VEC>(CE_FWD_ARGS);
}
extern "C" __global__ void __launch_bounds__(1024) k_ce_bwd(CE_BWD_PARAMS) {
    ce_bwd<1>(CE_BWD_ARGS);
}
extern "C" __global__ void __launch_bounds__(1024) k_ce_bwd_vec(CE_BWD_PARAMS) {
    ce_bwd<VEC>(CE_BWD_ARGS);
}
