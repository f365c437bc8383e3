// Row normalisation (backend/norm.rs has the math and the operand order): rms_norm and
// layer_norm over the rows of 2-d views, forward and backward. One block per row (grid-stride
// over rows). A thread handles chunks of VW neighbouring elements, chunk q = t + j * blockDim
// for j = 0, 1, ...: VW = 1 for any strides, VW = 16 bytes' worth (one vector load) when the
// rows are dense and 16-byte aligned (the host checks). A row of at most CK * blockDim
// elements is read once into registers; a longer one is read again from memory (L2) for each
// pass. Sums are a fixed tree (warp butterflies, then the warp totals in order): the same bits
// every run. rows.cuh comes first.
//
// RES (the fused residual add: add_rms_norm): x is one addend, res the other, and the row
// normalised is their sum h = x + res as the add kernel computes it (in C, rounded to T),
// written to h and read back from T. The host picks the path (VW, warp or block, block size)
// from h's layout as it would for a norm of h, so the sums run in the plain forward's order
// and the result is the composed ops' bit for bit; x and res then need not be vector-aligned
// themselves (`iv`: bit 0 x, bit 1 res may take one 16-byte load).

// Elements of a row a thread holds: forward, and backward (which also holds dy and two
// gradient accumulators per element)
#define CK_FWD 16
#define CK_BWD 8
// (x - mean) * rstd * w + b: the CPU's order of operations (--fmad=false: each rounds once)
__device__ __forceinline__ C norm_affine(C xv, C mu, C rs, const T* w, C wv, const T* b, C bv) {
    C o = (xv - mu) * rs;
    if (w) o = o * wv;
    if (b) o = o + bv;
    return o;
}

// The weight's and bias's VW elements from element i (each if present; vectors like the
// rows': the host's vector check covers them)
template <int VW>
__device__ __forceinline__ void affine_chunk(const T* w, i64 wo, i64 wc, const T* b, i64 bo,
                                             i64 bc, i64 i, C* wv, C* bv) {
    if (w) load_chunk<VW>(w + wo, i, wc, wv);
    if (b) load_chunk<VW>(b + bo, i, bc, bv);
}

// VW elements of a row from element i, by one 16-byte load where `vec` says it may, else one
// by one (the same values either way)
template <int VW>
__device__ __forceinline__ void load_any(const T* row, i64 i, i64 s, bool vec, C* out) {
    if (VW == 1 || vec) {
        load_chunk<VW>(row, i, s, out);
    } else {
#pragma unroll
        for (int e = 0; e < VW; ++e) out[e] = L(row[(i + e) * s]);
    }
}

// The first read of a row's VW elements from element i: x's own, or (RES) the sum x + res,
// stored to h and returned as read back from it
template <int VW, bool RES>
__device__ __forceinline__ void load_x(const T* xrow, i64 xc, const T* rrow, i64 rc, T* hrow,
                                       i64 hc, int iv, i64 i, C* out) {
    if (!RES) {
        load_chunk<VW>(xrow, i, xc, out);
        return;
    }
    C a[VW], r[VW];
    load_any<VW>(xrow, i, xc, iv & 1, a);
    load_any<VW>(rrow, i, rc, iv & 2, r);
#pragma unroll
    for (int e = 0; e < VW; ++e) out[e] = L(S(a[e] + r[e]));
    store_chunk<VW>(hrow, i, hc, out);
}

template <int VW, bool RES>
__device__ __forceinline__ void norm_fwd(const i64 R, const i64 N, const int layer,
                                         const double eps, const T* x, const i64 xo,
                                         const i64 xr, const i64 xc, const T* w, const i64 wo,
                                         const i64 wc, const T* b, const i64 bo, const i64 bc,
                                         T* y, const i64 yo, const i64 yr, const i64 yc,
                                         C* rstd, const i64 so, const i64 ss, C* mean,
                                         const i64 mo, const i64 ms, const T* res,
                                         const i64 ro, const i64 rr, const i64 rc, T* h,
                                         const i64 ho, const i64 hr, const i64 hc,
                                         const int iv) {
    constexpr int NCH = CK_FWD / VW;
    __shared__ C sh[32];
    const int t = threadIdx.x, bd = blockDim.x;
    const bool cached = N <= (i64)bd * CK_FWD;
    const C cn = (C)N;
    for (i64 r = blockIdx.x; r < R; r += gridDim.x) {
        const T* xrow = x + xo + r * xr;
        T* yrow = y + yo + r * yr;
        const T* rrow = RES ? res + ro + r * rr : nullptr;
        T* hrow = RES ? h + ho + r * hr : nullptr;
        // after the first read, the row is read from h (RES: what was stored there)
        const T* prow = RES ? hrow : xrow;
        const i64 pc = RES ? hc : xc;
        C v[CK_FWD];
        C mu = 0, var;
        if (cached) {
#pragma unroll
            for (int j = 0; j < NCH; ++j) {
                const i64 i = (t + (i64)j * bd) * VW;
                if (i < N) {
                    load_x<VW, RES>(xrow, xc, rrow, rc, hrow, hc, iv, i, v + j * VW);
                } else {
#pragma unroll
                    for (int e = 0; e < VW; ++e) v[j * VW + e] = 0;
                }
            }
            if (layer) {
                C s = 0;
#pragma unroll
                for (int k = 0; k < CK_FWD; ++k) s += v[k];
                mu = block_sum(s, sh) / cn;
            }
            C s2 = 0;
#pragma unroll
            for (int j = 0; j < NCH; ++j) {
                const bool in = (t + (i64)j * bd) * VW < N;
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    const C d = in ? v[j * VW + e] - mu : (C)0;
                    s2 += d * d;
                }
            }
            var = block_sum(s2, sh) / cn;
        } else {
            C tmp[VW];
            if (layer) {
                C s = 0;
                for (i64 i = (i64)t * VW; i < N; i += (i64)bd * VW) {
                    load_x<VW, RES>(xrow, xc, rrow, rc, hrow, hc, iv, i, tmp);
#pragma unroll
                    for (int e = 0; e < VW; ++e) s += tmp[e];
                }
                mu = block_sum(s, sh) / cn;
            }
            C s2 = 0;
            for (i64 i = (i64)t * VW; i < N; i += (i64)bd * VW) {
                // the first read unless layer norm's mean pass came first
                if (layer)
                    load_chunk<VW>(prow, i, pc, tmp);
                else
                    load_x<VW, RES>(xrow, xc, rrow, rc, hrow, hc, iv, i, tmp);
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    const C d = tmp[e] - mu;
                    s2 += d * d;
                }
            }
            var = block_sum(s2, sh) / cn;
        }
        const C rs = (C)1 / m_sqrt(var + (C)eps);
        if (cached) {
#pragma unroll
            for (int j = 0; j < NCH; ++j) {
                const i64 i = (t + (i64)j * bd) * VW;
                if (i < N) {
                    C o[VW], wv[VW], bv[VW];
                    affine_chunk<VW>(w, wo, wc, b, bo, bc, i, wv, bv);
#pragma unroll
                    for (int e = 0; e < VW; ++e)
                        o[e] = norm_affine(v[j * VW + e], mu, rs, w, wv[e], b, bv[e]);
                    store_chunk<VW>(yrow, i, yc, o);
                }
            }
        } else {
            C tmp[VW], wv[VW], bv[VW];
            for (i64 i = (i64)t * VW; i < N; i += (i64)bd * VW) {
                load_chunk<VW>(prow, i, pc, tmp);
                affine_chunk<VW>(w, wo, wc, b, bo, bc, i, wv, bv);
#pragma unroll
                for (int e = 0; e < VW; ++e) tmp[e] = norm_affine(tmp[e], mu, rs, w, wv[e], b, bv[e]);
                store_chunk<VW>(yrow, i, yc, tmp);
            }
        }
        if (t == 0) {
            rstd[so + r * ss] = rs;
            if (mean) mean[mo + r * ms] = mu;
        }
    }
}

// Forward with one warp per row, for dense 16-byte-aligned rows of at most WARP_VECS * 32
// vectors (the host checks): a lane holds its vectors of the row raw (16 bytes each, not
// widened: half the registers of f32 values), so many rows are in flight per SM, and the sums
// are warp butterflies (a fixed tree, no block barriers). The statistics and the output are
// computed as norm_fwd computes them.
#define WARP_VECS 8
template <int WV, bool RES>
__device__ __forceinline__ void norm_fwd_warp(const i64 R, const i64 N, const int layer,
                                              const double eps, const T* x, const i64 xo,
                                              const i64 xr, const i64 xc, const T* w,
                                              const i64 wo, const T* b, const i64 bo, T* y,
                                              const i64 yo, const i64 yr, C* rstd,
                                              const i64 so, const i64 ss, C* mean,
                                              const i64 mo, const i64 ms, const T* res,
                                              const i64 ro, const i64 rr, const i64 rc, T* h,
                                              const i64 ho, const i64 hr, const int iv) {
    union V { uint4 u; T e[VEC]; };
    const int lane = threadIdx.x & 31, per_block = blockDim.x >> 5;
    const i64 nv = N / VEC, warps = (i64)gridDim.x * per_block;
    const C cn = (C)N;
    for (i64 r = (i64)blockIdx.x * per_block + (threadIdx.x >> 5); r < R; r += warps) {
        const T* xrow = x + xo + r * xr;
        V raw[WV];
#pragma unroll
        for (int j = 0; j < WV; ++j) {
            const i64 q = lane + (i64)j * 32;
            if (q < nv) {
                if (RES) {
                    // the sum, stored to h (dense like y: the host checks) and held rounded
                    C hv[VEC];
                    load_x<VEC, true>(xrow, xc, res + ro + r * rr, rc, h + ho + r * hr, 1, iv,
                                      q * VEC, hv);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) raw[j].e[e] = S(hv[e]);
                } else {
                    raw[j].u = *(const uint4*)(xrow + q * VEC);
                }
            }
        }
        C mu = 0;
        if (layer) {
            C s = 0;
#pragma unroll
            for (int j = 0; j < WV; ++j)
                if (lane + (i64)j * 32 < nv) {
#pragma unroll
                    for (int e = 0; e < VEC; ++e) s += L(raw[j].e[e]);
                }
            mu = warp_sum(s) / cn;
        }
        C s2 = 0;
#pragma unroll
        for (int j = 0; j < WV; ++j)
            if (lane + (i64)j * 32 < nv) {
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const C d = L(raw[j].e[e]) - mu;
                    s2 += d * d;
                }
            }
        const C var = warp_sum(s2) / cn;
        const C rs = (C)1 / m_sqrt(var + (C)eps);
        T* yrow = y + yo + r * yr;
#pragma unroll
        for (int j = 0; j < WV; ++j) {
            const i64 q = lane + (i64)j * 32;
            if (q < nv) {
                V wv, bv, o;
                if (w) wv.u = *(const uint4*)(w + wo + q * VEC);
                if (b) bv.u = *(const uint4*)(b + bo + q * VEC);
#pragma unroll
                for (int e = 0; e < VEC; ++e)
                    o.e[e] = S(norm_affine(L(raw[j].e[e]), mu, rs, w, w ? L(wv.e[e]) : (C)0, b,
                                           b ? L(bv.e[e]) : (C)0));
                *(uint4*)(yrow + q * VEC) = o.u;
            }
        }
        if (lane == 0) {
            rstd[so + r * ss] = rs;
            if (mean) mean[mo + r * ms] = mu;
        }
    }
}

// dx of each row; with `part` (the affine gradients wanted), block k also writes
// part[k][0][c] = sum over its rows of dy * xhat and part[k][1][c] = sum of dy, which the host
// folds over k in order. gridDim.x <= R: every block has a row.
template <int VW>
__device__ __forceinline__ void norm_bwd(const i64 R, const i64 N, const int layer,
                                         const T* dy, const i64 go, const i64 gr, const i64 gc,
                                         const T* x, const i64 xo, const i64 xr, const i64 xc,
                                         const C* rstd, const i64 so, const i64 ss,
                                         const C* mean, const i64 mo, const i64 ms,
                                         const T* w, const i64 wo, const i64 wc, T* dx,
                                         const i64 dxo, const i64 dxr, const i64 dxc, C* part) {
    constexpr int NCH = CK_BWD / VW;
    __shared__ C sh[32];
    const int t = threadIdx.x, bd = blockDim.x;
    const bool cached = N <= (i64)bd * CK_BWD;
    const C cn = (C)N;
    C* pw = part ? part + (i64)blockIdx.x * 2 * N : nullptr;
    C* pb = pw ? pw + N : nullptr;
    C aw[CK_BWD], ab[CK_BWD];
#pragma unroll
    for (int k = 0; k < CK_BWD; ++k) aw[k] = ab[k] = 0;
    bool first = true;
    for (i64 r = blockIdx.x; r < R; r += gridDim.x) {
        const T* gy = dy + go + r * gr;
        const T* xrow = x + xo + r * xr;
        T* dxrow = dx + dxo + r * dxr;
        const C mu = mean ? mean[mo + r * ms] : (C)0, rs = rstd[so + r * ss];
        if (cached) {
            // g = dy * w is recomputed in the second loop (w is read from cache) rather than
            // held: more registers would spill
            C xh[CK_BWD], dv[CK_BWD];
            C sg = 0, sgx = 0;
#pragma unroll
            for (int j = 0; j < NCH; ++j) {
                const i64 i = (t + (i64)j * bd) * VW;
                C wv[VW];
                if (i < N) {
                    load_chunk<VW>(xrow, i, xc, xh + j * VW);
                    load_chunk<VW>(gy, i, gc, dv + j * VW);
                    if (w) load_chunk<VW>(w + wo, i, wc, wv);
                }
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    const int k = j * VW + e;
                    xh[k] = i < N ? (xh[k] - mu) * rs : (C)0;
                    dv[k] = i < N ? dv[k] : (C)0;
                    const C g = i < N && w ? dv[k] * wv[e] : dv[k];
                    sg += g;
                    sgx += g * xh[k];
                }
            }
            const C mg = layer ? block_sum(sg, sh) / cn : (C)0;
            const C mgx = block_sum(sgx, sh) / cn;
#pragma unroll
            for (int j = 0; j < NCH; ++j) {
                const i64 i = (t + (i64)j * bd) * VW;
                C o[VW], wv[VW];
                if (i < N && w) load_chunk<VW>(w + wo, i, wc, wv);
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    const int k = j * VW + e;
                    const C g = i < N && w ? dv[k] * wv[e] : dv[k];
                    o[e] = rs * (g - mg - xh[k] * mgx);
                    aw[k] += dv[k] * xh[k];
                    ab[k] += dv[k];
                }
                if (i < N) store_chunk<VW>(dxrow, i, dxc, o);
            }
        } else {
            C tx[VW], td[VW], wv[VW];
            C sg = 0, sgx = 0;
            for (i64 i = (i64)t * VW; i < N; i += (i64)bd * VW) {
                load_chunk<VW>(xrow, i, xc, tx);
                load_chunk<VW>(gy, i, gc, td);
                if (w) load_chunk<VW>(w + wo, i, wc, wv);
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    const C xv = (tx[e] - mu) * rs;
                    const C gv = w ? td[e] * wv[e] : td[e];
                    sg += gv;
                    sgx += gv * xv;
                }
            }
            const C mg = layer ? block_sum(sg, sh) / cn : (C)0;
            const C mgx = block_sum(sgx, sh) / cn;
            for (i64 i = (i64)t * VW; i < N; i += (i64)bd * VW) {
                load_chunk<VW>(xrow, i, xc, tx);
                load_chunk<VW>(gy, i, gc, td);
                if (w) load_chunk<VW>(w + wo, i, wc, wv);
                C o[VW];
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    const C xv = (tx[e] - mu) * rs, d = td[e];
                    const C gv = w ? d * wv[e] : d;
                    o[e] = rs * (gv - mg - xv * mgx);
                    if (pw) {
                        pw[i + e] = (first ? (C)0 : pw[i + e]) + d * xv;
                        pb[i + e] = (first ? (C)0 : pb[i + e]) + d;
                    }
                }
                store_chunk<VW>(dxrow, i, dxc, o);
            }
        }
        first = false;
    }
    if (pw && cached) {
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            const i64 i = (t + (i64)j * bd) * VW;
            if (i < N) {
#pragma unroll
                for (int e = 0; e < VW; ++e) {
                    pw[i + e] = aw[j * VW + e];
                    pb[i + e] = ab[j * VW + e];
                }
            }
        }
    }
}

#define NORM_FWD_PARAMS                                                                        \
    const i64 R, const i64 N, const int layer, const double eps, const T *x, const i64 xo,    \
        const i64 xr, const i64 xc, const T *w, const i64 wo, const i64 wc, const T *b,       \
        const i64 bo, const i64 bc, T *y, const i64 yo, const i64 yr, const i64 yc, C *rstd,  \
        const i64 so, const i64 ss, C *mean, const i64 mo, const i64 ms, const T *res,       \
        const i64 ro, const i64 rr, const i64 rc, T *h, const i64 ho, const i64 hr,           \
        const i64 hc, const int iv
#define NORM_FWD_ARGS                                                                          \
    R, N, layer, eps, x, xo, xr, xc, w, wo, wc, b, bo, bc, y, yo, yr, yc, rstd, so, ss, mean, mo, \
        ms, res, ro, rr, rc, h, ho, hr, hc, iv
#define NORM_WARP_ARGS                                                                         \
    R, N, layer, eps, x, xo, xr, xc, w, wo, b, bo, y, yo, yr, rstd, so, ss, mean, mo, ms, res, ro, \
        rr, rc, h, ho, hr, iv
#define NORM_BWD_PARAMS                                                                        \
    const i64 R, const i64 N, const int layer, const T *dy, const i64 go, const i64 gr,       \
        const i64 gc, const T *x, const i64 xo, const i64 xr, const i64 xc, const C *rstd,    \
        const i64 so, const i64 ss, const C *mean, const i64 mo, const i64 ms, const T *w,    \
        const i64 wo, const i64 wc, T *dx, const i64 dxo, const i64 dxr, const i64 dxc,       \
        C *part
#define NORM_BWD_ARGS                                                                          \
    R, N, layer, dy, go, gr, gc, x, xo, xr, xc, rstd, so, ss, mean, mo, ms, w, wo, wc, dx, dxo, \
        dxr, dxc, part

extern "C" __global__ void __launch_bounds__(1024) k_norm(NORM_FWD_PARAMS) {
    norm_fwd<1, false>(NORM_FWD_ARGS);
}
extern "C" __global__ void __launch_bounds__(1024) k_norm_vec(NORM_FWD_PARAMS) {
    norm_fwd<VEC, false>(NORM_FWD_ARGS);
}
extern "C" __global__ void __launch_bounds__(256) k_norm_warp(NORM_FWD_PARAMS) {
    norm_fwd_warp<WARP_VECS, false>(NORM_WARP_ARGS);
}
// the same three with the residual add (RES above)
extern "C" __global__ void __launch_bounds__(1024) k_norm_res(NORM_FWD_PARAMS) {
    norm_fwd<1, true>(NORM_FWD_ARGS);
}
extern "C" __global__ void __launch_bounds__(1024) k_norm_vec_res(NORM_FWD_PARAMS) {
    norm_fwd<VEC, true>(NORM_FWD_ARGS);
}
extern "C" __global__ void __launch_bounds__(256) k_norm_warp_res(NORM_FWD_PARAMS) {
    norm_fwd_warp<WARP_VECS, true>(NORM_WARP_ARGS);
}
extern "C" __global__ void __launch_bounds__(1024) k_norm_bwd(NORM_BWD_PARAMS) {
    norm_bwd<1>(NORM_BWD_ARGS);
}
extern "C" __global__ void __launch_bounds__(1024) k_norm_bwd_vec(NORM_BWD_PARAMS) {
    norm_bwd<VEC>(NORM_BWD_ARGS);
}
