// Row normalisation (backend/norm.rs has the math and the operand order): rms_norm and
// layer_norm over the rows of 2-d views, forward and backward. One block per row (grid-stride
// over rows). A row of at most NK * blockDim elements is read once into registers (thread t
// holds elements t, t + blockDim, ...); a longer one is read again from memory (L2) for each
// pass. Sums are a fixed tree (warp butterflies, then the warp totals in order): the same bits
// every run. The host defines T, C, L and S; blockDim.x is a multiple of 32.

#define NK 8

// The sum of v over the block, in every thread (all threads of the block call it).
__device__ __forceinline__ C block_sum(C v, C* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();  // the previous call's readers are done with sh
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    C s = 0;
    const int warps = blockDim.x >> 5;
    for (int k = 0; k < warps; ++k) s += sh[k];
    return s;
}

// (x - mean) * rstd * w + b: the CPU's order of operations (--fmad=false: each rounds once)
__device__ __forceinline__ C norm_affine(C xv, C mu, C rs, const T* w, i64 wi, const T* b,
                                         i64 bi) {
    C o = (xv - mu) * rs;
    if (w) o = o * L(w[wi]);
    if (b) o = o + L(b[bi]);
    return o;
}

extern "C" __global__ void __launch_bounds__(1024)
k_norm(const i64 R, const i64 N, const int layer, const double eps,
       const T* x, const i64 xo, const i64 xr, const i64 xc,
       const T* w, const i64 wo, const i64 wc,
       const T* b, const i64 bo, const i64 bc,
       T* y, const i64 yo, const i64 yr, const i64 yc,
       C* rstd, const i64 so, const i64 ss,
       C* mean, const i64 mo, const i64 ms) {
    __shared__ C sh[32];
    const int t = threadIdx.x, bd = blockDim.x;
    const bool cached = N <= (i64)bd * NK;
    const C cn = (C)N;
    for (i64 r = blockIdx.x; r < R; r += gridDim.x) {
        const T* xrow = x + xo + r * xr;
        T* yrow = y + yo + r * yr;
        C v[NK];
        C mu = 0, var;
        if (cached) {
#pragma unroll
            for (int k = 0; k < NK; ++k) {
                const i64 c = t + (i64)k * bd;
                v[k] = c < N ? L(xrow[c * xc]) : (C)0;
            }
            if (layer) {
                C s = 0;
#pragma unroll
                for (int k = 0; k < NK; ++k) s += v[k];
                mu = block_sum(s, sh) / cn;
            }
            C s2 = 0;
#pragma unroll
            for (int k = 0; k < NK; ++k) {
                const C d = t + (i64)k * bd < N ? v[k] - mu : (C)0;
                s2 += d * d;
            }
            var = block_sum(s2, sh) / cn;
        } else {
            if (layer) {
                C s = 0;
                for (i64 c = t; c < N; c += bd) s += L(xrow[c * xc]);
                mu = block_sum(s, sh) / cn;
            }
            C s2 = 0;
            for (i64 c = t; c < N; c += bd) {
                const C d = L(xrow[c * xc]) - mu;
                s2 += d * d;
            }
            var = block_sum(s2, sh) / cn;
        }
        const C rs = (C)1 / m_sqrt(var + (C)eps);
        if (cached) {
#pragma unroll
            for (int k = 0; k < NK; ++k) {
                const i64 c = t + (i64)k * bd;
                if (c < N) yrow[c * yc] = S(norm_affine(v[k], mu, rs, w, wo + c * wc, b, bo + c * bc));
            }
        } else {
            for (i64 c = t; c < N; c += bd)
                yrow[c * yc] = S(norm_affine(L(xrow[c * xc]), mu, rs, w, wo + c * wc, b, bo + c * bc));
        }
        if (t == 0) {
            rstd[so + r * ss] = rs;
            if (mean) mean[mo + r * ms] = mu;
        }
    }
}

// dx of each row; with `part` (the affine gradients wanted), block k also writes
// part[k][0][c] = sum over its rows of dy * xhat and part[k][1][c] = sum of dy, which the host
// folds over k in order. gridDim.x <= R: every block has a row.
extern "C" __global__ void __launch_bounds__(1024)
k_norm_bwd(const i64 R, const i64 N, const int layer,
           const T* dy, const i64 go, const i64 gr, const i64 gc,
           const T* x, const i64 xo, const i64 xr, const i64 xc,
           const C* rstd, const i64 so, const i64 ss,
           const C* mean, const i64 mo, const i64 ms,
           const T* w, const i64 wo, const i64 wc,
           T* dx, const i64 dxo, const i64 dxr, const i64 dxc,
           C* part) {
    __shared__ C sh[32];
    const int t = threadIdx.x, bd = blockDim.x;
    const bool cached = N <= (i64)bd * NK;
    const C cn = (C)N;
    C* pw = part ? part + (i64)blockIdx.x * 2 * N : nullptr;
    C* pb = pw ? pw + N : nullptr;
    C aw[NK], ab[NK];
#pragma unroll
    for (int k = 0; k < NK; ++k) aw[k] = ab[k] = 0;
    bool first = true;
    for (i64 r = blockIdx.x; r < R; r += gridDim.x) {
        const T* gy = dy + go + r * gr;
        const T* xrow = x + xo + r * xr;
        T* dxrow = dx + dxo + r * dxr;
        const C mu = mean ? mean[mo + r * ms] : (C)0, rs = rstd[so + r * ss];
        if (cached) {
            // g = dy * w is recomputed in the second loop (w is read from cache) rather than
            // held: 8 more registers would spill
            C xh[NK], dv[NK];
            C sg = 0, sgx = 0;
#pragma unroll
            for (int k = 0; k < NK; ++k) {
                const i64 c = t + (i64)k * bd;
                const bool in = c < N;
                xh[k] = in ? (L(xrow[c * xc]) - mu) * rs : (C)0;
                dv[k] = in ? L(gy[c * gc]) : (C)0;
                const C g = in && w ? dv[k] * L(w[wo + c * wc]) : dv[k];
                sg += g;
                sgx += g * xh[k];
            }
            const C mg = layer ? block_sum(sg, sh) / cn : (C)0;
            const C mgx = block_sum(sgx, sh) / cn;
#pragma unroll
            for (int k = 0; k < NK; ++k) {
                const i64 c = t + (i64)k * bd;
                const C g = c < N && w ? dv[k] * L(w[wo + c * wc]) : dv[k];
                if (c < N) dxrow[c * dxc] = S(rs * (g - mg - xh[k] * mgx));
                aw[k] += dv[k] * xh[k];
                ab[k] += dv[k];
            }
        } else {
            C sg = 0, sgx = 0;
            for (i64 c = t; c < N; c += bd) {
                const C xv = (L(xrow[c * xc]) - mu) * rs, d = L(gy[c * gc]);
                const C gv = w ? d * L(w[wo + c * wc]) : d;
                sg += gv;
                sgx += gv * xv;
            }
            const C mg = layer ? block_sum(sg, sh) / cn : (C)0;
            const C mgx = block_sum(sgx, sh) / cn;
            for (i64 c = t; c < N; c += bd) {
                const C xv = (L(xrow[c * xc]) - mu) * rs, d = L(gy[c * gc]);
                const C gv = w ? d * L(w[wo + c * wc]) : d;
                dxrow[c * dxc] = S(rs * (gv - mg - xv * mgx));
                if (pw) {
                    pw[c] = (first ? (C)0 : pw[c]) + d * xv;
                    pb[c] = (first ? (C)0 : pb[c]) + d;
                }
            }
        }
        first = false;
    }
    if (pw && cached) {
#pragma unroll
        for (int k = 0; k < NK; ++k) {
            const i64 c = t + (i64)k * bd;
            if (c < N) {
                pw[c] = aw[k];
                pb[c] = ab[k];
            }
        }
    }
}
