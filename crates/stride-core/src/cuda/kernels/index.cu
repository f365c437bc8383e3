// Index kernels: index validation, gather, scatter and extrema (the masked scans are in
// compact.cu). The host defines, before this file, the section it wants (WANT_CHECK,
// WANT_GATHER, WANT_GATED_COPY, WANT_SCATTER, WANT_EXTREMA) and its types: T (the element, or for moves a word
// of the element's width), I (the index type), and for scatter COMBINE(d, s).
//
// Every operand, outputs included, is addressed through its (Geo, Str); offsets are 64-bit.
// A writing kernel takes its op's check verdict (`gate_closed`, common.cuh).

#ifdef WANT_CHECK
// Index validation, before anything is written. g/sx walk the index in logical (row-major)
// order, so the smallest bad i is the first bad index PyTorch and the CPU backend name.
// res[0] holds ~i of the first bad position (0: none; atomicMax of ~i is atomicMin of i),
// then k_bad_value stores that index's value in res[1]: the host reads both at once.
extern "C" __global__ void k_check_index(const __grid_constant__ Geo g, const __grid_constant__ Str sx, const i64 n, const I* x,
                                         const i64 lo, const i64 hi, u64* res) {
    GRID_LOOP(i, n) {
        i64 v = (i64)x[at(g, sx, i)];
        if (v < lo || v >= hi) atomicMax(&res[0], ~(u64)i);
    }
}
extern "C" __global__ void k_bad_value(const __grid_constant__ Geo g, const __grid_constant__ Str sx, const I* x, u64* res) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && res[0] != 0)
        res[1] = (u64)(i64)x[at(g, sx, (i64)~res[0])];
}
#endif

#ifdef WANT_GATED_COPY
// out = src over the output's merged geometry, unless the gate is closed: the last step of an
// op that computed into scratch because its check could not gate its own kernel.
extern "C" __global__ void k_gated_copy(const __grid_constant__ Geo g, const i64 n, const __grid_constant__ Str so,
                                        const __grid_constant__ Str ss, T* out, const T* src, const u64* gate) {
    if (gate_closed(gate)) return;
    GRID_LOOP(i, n) {
        i64 oo, os;
        at2(g, so, ss, i, oo, os);
        out[oo] = src[os];
    }
}
#endif

#ifdef WANT_GATHER
// out[p] = src[src.offset(p) + wrap(index[p])·stride] over the output's merged geometry.
extern "C" __global__ void k_gather(const __grid_constant__ Geo g, const i64 n, const __grid_constant__ Str so, const __grid_constant__ Str ss,
                                    const __grid_constant__ Str sx, T* out, const T* src, const I* x,
                                    const i64 size, const i64 stride, const int wrap, const u64* gate) {
    if (gate_closed(gate)) return;
    GRID_LOOP(i, n) {
        i64 oo, os, ox;
        at3(g, so, ss, sx, i, oo, os, ox);
        i64 v = (i64)x[ox];
        if (wrap && v < 0) v += size;
        out[oo] = src[os + v * stride];
    }
}
#endif

#ifdef WANT_SCATTER
// One thread per fiber: g/sd/sx/ss walk every position off the scatter axis (no two of them
// can reach one destination), and the thread walks the axis (n positions, index stride xd,
// source stride sa) in order, so each destination combines its sources in logical order —
// exactly the CPU's sequence of roundings, and the last assignment wins. With has_init, a
// first pass sets every destination the fiber hits to the op's identity (include_self =
// false). init and alpha are the elements' bits, made on the host by the CPU's conversions.
extern "C" __global__ void k_scatter(const __grid_constant__ Geo g, const i64 m, const __grid_constant__ Str sd, const __grid_constant__ Str sx,
                                     const __grid_constant__ Str ss, const i64 n, const i64 xd, const i64 sa,
                                     T* dst, const I* x, const T* src, const i64 size,
                                     const i64 stride, const int wrap, const int has_init,
                                     const u64 init_bits, const int use_alpha,
                                     const u64 alpha_bits, const u64* gate) {
    if (gate_closed(gate)) return;
    const T init = from_bits<T>(init_bits);
    const T alpha = from_bits<T>(alpha_bits);
    (void)alpha;
    (void)use_alpha;
    GRID_LOOP(o, m) {
        i64 d0, x0, s0;
        at3(g, sd, sx, ss, o, d0, x0, s0);
        if (has_init) {
            for (i64 k = 0; k < n; ++k) {
                i64 v = (i64)x[x0 + k * xd];
                if (wrap && v < 0) v += size;
                dst[d0 + v * stride] = init;
            }
        }
        for (i64 k = 0; k < n; ++k) {
            i64 v = (i64)x[x0 + k * xd];
            if (wrap && v < 0) v += size;
            T* p = dst + d0 + v * stride;
            const T s = src[s0 + k * sa];
            const T d = *p;
            (void)d;
            *p = COMBINE(d, s);
        }
    }
}

// When the index varies along the axis only (index_add, index_copy, embedding backward, a
// 1-D scatter), every fiber sees the same destination rows: the host sorts the axis positions
// by destination (k_scatter_keys, then the merge module: stable, by (row, position)), and
// one thread per (destination row hit, fiber) combines that row's sources in position order —
// the same sequence as the per-fiber walk, with parallelism over rows too. Threads run over
// (sorted position j, fiber o); those whose j does not start a row return at once.
extern "C" __global__ void k_scatter_keys(const i64 n, const I* x, const i64 x0, const i64 xd,
                                          const i64 size, const int wrap, SK* a) {
    GRID_LOOP(k, n) {
        i64 v = (i64)x[x0 + k * xd];
        if (wrap && v < 0) v += size;
        SK s;
        s.key = (u64)v;
        s.pos = (unsigned int)k;
        s.pad = 0;
        a[k] = s;
    }
}
extern "C" __global__ void k_scatter_sorted(const __grid_constant__ Geo g, const i64 m, const __grid_constant__ Str sd,
                                            const __grid_constant__ Str ss, const i64 n, const i64 sa, T* dst,
                                            const T* src, const SK* keys, const i64 stride,
                                            const int has_init, const u64 init_bits,
                                            const int use_alpha, const u64 alpha_bits,
                                            const u64* gate) {
    if (gate_closed(gate)) return;
    const T init = from_bits<T>(init_bits);
    const T alpha = from_bits<T>(alpha_bits);
    (void)alpha;
    (void)use_alpha;
    GRID_LOOP(t, n * m) {
        const i64 j = t / m, o = t - j * m;
        const u64 v = keys[j].key;
        if (j > 0 && keys[j - 1].key == v) continue;
        i64 d0, s0;
        at2(g, sd, ss, o, d0, s0);
        T* p = dst + d0 + (i64)v * stride;
        T d = has_init ? init : *p;
        for (i64 q = j; q < n && keys[q].key == v; ++q) {
            const T s = src[s0 + (i64)keys[q].pos * sa];
            d = COMBINE(d, s);
        }
        *p = d;
    }
}
#endif

#ifdef WANT_EXTREMA
// The smallest and largest element, as the CPU folds them: in the order of the input's
// merged geometry (its memory order), a later element replacing an equal one (so the sign
// of a zero extremum is the CPU's). A NaN anywhere makes both NaN. ACC is double for floats
// and i64 otherwise; TOACC(x) converts. Partials per block in part[4·b ..]: (lo, lo's
// position, hi, hi's position), merged by k_extrema_final into part[0..4].
struct Ext { ACC lo; i64 il; ACC hi; i64 ih; };
__device__ __forceinline__ bool acc_nan(ACC v) { return v != v; }
__device__ __forceinline__ Ext ext_merge(Ext a, Ext b) {
    // a NaN is kept as such (its position no longer matters)
    Ext r;
    if (acc_nan(a.lo) || acc_nan(b.lo)) { r.lo = acc_nan(a.lo) ? a.lo : b.lo; r.il = 0; }
    else if (b.il < 0 || (a.il >= 0 && (a.lo < b.lo || (a.lo == b.lo && a.il > b.il)))) { r.lo = a.lo; r.il = a.il; }
    else { r.lo = b.lo; r.il = b.il; }
    if (acc_nan(a.hi) || acc_nan(b.hi)) { r.hi = acc_nan(a.hi) ? a.hi : b.hi; r.ih = 0; }
    else if (b.ih < 0 || (a.ih >= 0 && (a.hi > b.hi || (a.hi == b.hi && a.ih > b.ih)))) { r.hi = a.hi; r.ih = a.ih; }
    else { r.hi = b.hi; r.ih = b.ih; }
    return r;
}
#define EBLOCK 256
__device__ __forceinline__ Ext ext_block(Ext e) {
    __shared__ Ext sh[EBLOCK];
    sh[threadIdx.x] = e;
    __syncthreads();
    for (int s = EBLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = ext_merge(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    return sh[0];
}
extern "C" __global__ void k_extrema_part(const __grid_constant__ Geo g, const i64 n, const __grid_constant__ Str s, const T* x,
                                          Ext* part) {
    Ext e; e.lo = 0; e.il = -1; e.hi = 0; e.ih = -1;
    GRID_LOOP(i, n) {
        ACC v = TOACC(x[at(g, s, i)]);
        Ext f; f.lo = v; f.il = i; f.hi = v; f.ih = i;
        e = ext_merge(e, f);
    }
    e = ext_block(e);
    if (threadIdx.x == 0) part[blockIdx.x] = e;
}
extern "C" __global__ void k_extrema_final(const i64 nb, Ext* part) {
    Ext e; e.lo = 0; e.il = -1; e.hi = 0; e.ih = -1;
    for (i64 b = threadIdx.x; b < nb; b += EBLOCK) e = ext_merge(e, part[b]);
    e = ext_block(e);
    if (threadIdx.x == 0) part[0] = e;
}
#endif
