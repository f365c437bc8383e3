// Sorting and selection kernels. The host defines, before this file, the section it wants
// (WANT_SORT, WANT_MERGE, WANT_SEARCH, WANT_BINCOUNT, WANT_HISTC) and, where it needs them,
// T (the element), KEY(x) and KMASK.
//
// KEY(x) maps an element to an unsigned key of the dtype's width (zero-extended to u64) whose
// order is stride's total order: numbers by value, NaN above +inf with every NaN the same key
// (KMASK, all ones), -0.0 == 0.0, false < true; exactly the CPU backend's `SortKey`. A key
// with the element's position in its row (SK) is unique, so any correct sort of SKs gives the
// stable order, and both backends give one answer, values and indices alike.
//
// Rows of up to TILE elements sort in shared memory (a bitonic network per row, several rows
// per block); longer rows (any length below 2^32) go through global memory: k_sort_init makes
// the SKs, k_sort_tiles sorts each TILE of a row, then k_merge passes merge runs of L, 2L, ...
// within each row (a merge by rank: an element's slot is its rank in its run plus the number
// of smaller elements in the partner run; exact because SKs are unique), and k_sort_write
// writes values and indices through their layouts.

// The key of a float from its raw bits b (sign bit S, exponent mask INF): NaN -> all ones,
// -0.0 -> 0.0, negative numbers bit-inverted, non-negative ones with the sign bit set.
__device__ __forceinline__ u64 fkey(u64 b, const u64 S, const u64 INF) {
    const u64 M = S | (S - 1);
    if ((b & (S - 1)) > INF) return M;
    if (b == S) b = 0;
    return (b & S) ? (~b & M) : (b | S);
}

struct SK { u64 key; unsigned int pos; unsigned int pad; };

__device__ __forceinline__ bool sk_less(const SK a, const SK b) {
    return a.key < b.key || (a.key == b.key && a.pos < b.pos);
}
// Above every real SK (rows are shorter than 2^32 - 1, so no position is all ones).
__device__ __forceinline__ SK sk_max() {
    SK s;
    s.key = ~0ull;
    s.pos = 0xffffffffu;
    s.pad = 0;
    return s;
}

#define TILE 2048
#define SORT_THREADS 512

// Sorts s[0..E) ascending in independent segments of P elements (P, E powers of two, P <= E):
// the bitonic network of a P-sort, its last merge ascending in every segment.
__device__ __forceinline__ void bitonic(SK* s, const unsigned int E, const unsigned int P) {
    for (unsigned int k = 2; k <= P; k <<= 1) {
        for (unsigned int j = k >> 1; j > 0; j >>= 1) {
            for (unsigned int p = threadIdx.x; p < E / 2; p += blockDim.x) {
                const unsigned int i = ((p & ~(j - 1)) << 1) | (p & (j - 1));
                const unsigned int l = i + j;
                const bool up = (k == P) || ((i & k) == 0);
                const SK a = s[i], b = s[l];
                if (up ? sk_less(b, a) : sk_less(a, b)) {
                    s[i] = b;
                    s[l] = a;
                }
            }
            __syncthreads();
        }
    }
}

// The first position j in row[0..n) whose key is KMASK (the first NaN in position order),
// or -1 when the row has no NaN (its largest key is not KMASK).
__device__ __forceinline__ i64 first_nan(const SK* row, const i64 n, const u64 kmask) {
    if (row[n - 1].key != kmask) return -1;
    i64 lo = 0, hi = n - 1;
    while (lo < hi) {
        const i64 mid = lo + (hi - lo) / 2;
        if (row[mid].key < kmask) lo = mid + 1; else hi = mid;
    }
    return lo;
}

#ifdef WANT_SORT
__device__ __forceinline__ u64 key_of(const T x, const int desc) {
    const u64 k = KEY(x);
    return desc ? (k ^ (u64)(KMASK)) : k;
}

// Rows are enumerated by go (the shape off the dim) with si/sv/sx the row offsets of the
// source, values and indices; along the dim their strides are ss/vs/xs. mode 0 (sort, topk):
// the first `k` sorted elements of each row; mode 1 (kth): sorted element k, or with nanprop
// the row's first NaN if it has one.

// Short rows (n <= TILE): E = max(P, 1024) elements per block, R = E / P rows.
extern "C" __global__ void k_sort_rows(const Geo go, const Str si, const Str sv, const Str sx,
                                       const i64 n_rows, const i64 n, const i64 ss,
                                       const i64 vs, const i64 xs, const unsigned int P,
                                       const int desc, const int mode, const i64 k,
                                       const int nanprop, const T* src, T* vals, i64* idx) {
    __shared__ SK s[TILE];
    const unsigned int E = P < 1024 ? 1024 : P;
    const i64 R = E / P;
    for (i64 r0 = (i64)blockIdx.x * R; r0 < n_rows; r0 += (i64)gridDim.x * R) {
        for (unsigned int e = threadIdx.x; e < E; e += blockDim.x) {
            const i64 r = r0 + e / P;
            const unsigned int j = e & (P - 1);
            SK v = sk_max();
            if (r < n_rows && j < n) {
                v.key = key_of(src[at(go, si, r) + (i64)j * ss], desc);
                v.pos = j;
            }
            s[e] = v;
        }
        __syncthreads();
        bitonic(s, E, P);
        if (mode == 0) {
            for (unsigned int e = threadIdx.x; e < E; e += blockDim.x) {
                const i64 r = r0 + e / P;
                const i64 j = e & (P - 1);
                if (r >= n_rows || j >= k) continue;
                i64 oi, ov, ox;
                at3(go, si, sv, sx, r, oi, ov, ox);
                const i64 pos = s[e].pos;
                vals[ov + j * vs] = src[oi + pos * ss];
                idx[ox + j * xs] = pos;
            }
        } else {
            for (i64 q = threadIdx.x; q < R; q += blockDim.x) {
                const i64 r = r0 + q;
                if (r >= n_rows) continue;
                const SK* row = s + q * P;
                i64 j = nanprop ? first_nan(row, n, (u64)(KMASK)) : -1;
                if (j < 0) j = k;
                i64 oi, ov, ox;
                at3(go, si, sv, sx, r, oi, ov, ox);
                const i64 pos = row[j].pos;
                vals[ov] = src[oi + pos * ss];
                idx[ox] = pos;
            }
        }
        __syncthreads();
    }
}

// Long rows: the SKs of every row, row after row (a[r·n + j]).
extern "C" __global__ void k_sort_init(const Geo go, const Str si, const i64 n_rows,
                                       const i64 n, const i64 ss, const int desc, const T* src,
                                       SK* a) {
    GRID_LOOP(g, n_rows * n) {
        const i64 r = g / n, j = g - r * n;
        SK v;
        v.key = key_of(src[at(go, si, r) + j * ss], desc);
        v.pos = (unsigned int)j;
        v.pad = 0;
        a[g] = v;
    }
}

extern "C" __global__ void k_sort_write(const Geo go, const Str si, const Str sv, const Str sx,
                                        const i64 n_rows, const i64 n, const i64 ss,
                                        const i64 vs, const i64 xs, const int mode,
                                        const i64 k, const int nanprop, const T* src, T* vals,
                                        i64* idx, const SK* a) {
    if (mode == 0) {
        GRID_LOOP(g, n_rows * k) {
            const i64 r = g / k, j = g - r * k;
            i64 oi, ov, ox;
            at3(go, si, sv, sx, r, oi, ov, ox);
            const i64 pos = a[r * n + j].pos;
            vals[ov + j * vs] = src[oi + pos * ss];
            idx[ox + j * xs] = pos;
        }
    } else {
        GRID_LOOP(r, n_rows) {
            const SK* row = a + r * n;
            i64 j = nanprop ? first_nan(row, n, (u64)(KMASK)) : -1;
            if (j < 0) j = k;
            i64 oi, ov, ox;
            at3(go, si, sv, sx, r, oi, ov, ox);
            const i64 pos = row[j].pos;
            vals[ov] = src[oi + pos * ss];
            idx[ox] = pos;
        }
    }
}
#endif

#ifdef WANT_MERGE
// Sorts each TILE of every row of a (n_rows rows of n SKs; tpr tiles per row) in place.
extern "C" __global__ void k_sort_tiles(SK* a, const i64 n_rows, const i64 n, const i64 tpr) {
    __shared__ SK s[TILE];
    for (i64 b = blockIdx.x; b < n_rows * tpr; b += gridDim.x) {
        const i64 r = b / tpr, t = b - r * tpr;
        const i64 j0 = t * TILE;
        const i64 len = n - j0 < TILE ? n - j0 : TILE;
        SK* p = a + r * n + j0;
        for (unsigned int e = threadIdx.x; e < TILE; e += blockDim.x) s[e] = e < len ? p[e] : sk_max();
        __syncthreads();
        bitonic(s, TILE, TILE);
        for (unsigned int e = threadIdx.x; e < len; e += blockDim.x) p[e] = s[e];
        __syncthreads();
    }
}

// One merge pass within each row: sorted runs of L become sorted runs of 2L.
extern "C" __global__ void k_merge(const SK* in, SK* out, const i64 n_rows, const i64 n,
                                   const i64 L) {
    GRID_LOOP(g, n_rows * n) {
        const i64 r = g / n, j = g - r * n;
        const i64 run = j / L, a = j - run * L;
        const i64 ps = (run ^ 1) * L;
        const SK x = in[g];
        const SK* row = in + r * n;
        if (ps >= n) {
            out[g] = x;
            continue;
        }
        const i64 pe = ps + L < n ? ps + L : n;
        i64 lo = ps, hi = pe;
        while (lo < hi) {
            const i64 mid = lo + (hi - lo) / 2;
            if (sk_less(row[mid], x)) lo = mid + 1; else hi = mid;
        }
        out[r * n + (run & ~(i64)1) * L + a + (lo - ps)] = x;
    }
}
#endif

#ifdef WANT_SEARCH
// out[p] = the number of elements of p's sorted row that are < values[p] (<= with right), in
// key order; g/so/sv/sq walk the output, the values and the rows' starts.
extern "C" __global__ void k_searchsorted(const Geo g, const i64 N, const Str so, const Str sv,
                                          const Str sq, const i64 m, const i64 rs,
                                          const int right, i64* out, const T* vals,
                                          const T* seq) {
    GRID_LOOP(i, N) {
        i64 oo, ov, oq;
        at3(g, so, sv, sq, i, oo, ov, oq);
        const u64 v = KEY(vals[ov]);
        i64 lo = 0, hi = m;
        while (lo < hi) {
            const i64 mid = lo + (hi - lo) / 2;
            const u64 kk = KEY(seq[oq + mid * rs]);
            if (right ? kk <= v : kk < v) lo = mid + 1; else hi = mid;
        }
        out[oo] = lo;
    }
}
#endif

#ifdef WANT_BINCOUNT
// I: the input's integer type (validated before: every value is in 0..bins).
// Counts: integer atomics (exact in any order).
extern "C" __global__ void k_bincount_count(const i64 n, const I* x, const i64 xo,
                                            const i64 xs, i64* out, const i64 oo,
                                            const i64 os) {
    GRID_LOOP(i, n) {
        const i64 v = (i64)x[xo + i * xs];
        atomicAdd((unsigned long long*)(out + oo + v * os), 1ull);
    }
}
// Weighted sums add in input order, as the CPU: the (value, position) SKs are sorted (by the
// merge module), then one thread per bin adds its weights in position order.
extern "C" __global__ void k_bincount_keys(const i64 n, const I* x, const i64 xo,
                                           const i64 xs, SK* a) {
    GRID_LOOP(i, n) {
        SK s;
        s.key = (u64)(i64)x[xo + i * xs];
        s.pos = (unsigned int)i;
        s.pad = 0;
        a[i] = s;
    }
}
template <class W>
__device__ __forceinline__ void bincount_sum(const i64 n, const i64 bins, const SK* a,
                                             const W* w, const i64 wo, const i64 ws, W* out,
                                             const i64 oo, const i64 os) {
    GRID_LOOP(b, bins) {
        i64 lo = 0, hi = n;
        while (lo < hi) {
            const i64 mid = lo + (hi - lo) / 2;
            if (a[mid].key < (u64)b) lo = mid + 1; else hi = mid;
        }
        W o = out[oo + b * os];
        for (i64 j = lo; j < n && a[j].key == (u64)b; ++j) o = o + w[wo + (i64)a[j].pos * ws];
        out[oo + b * os] = o;
    }
}
extern "C" __global__ void k_bincount_sum_f32(const i64 n, const i64 bins, const SK* a,
                                              const float* w, const i64 wo, const i64 ws,
                                              float* out, const i64 oo, const i64 os) {
    bincount_sum<float>(n, bins, a, w, wo, ws, out, oo, os);
}
extern "C" __global__ void k_bincount_sum_f64(const i64 n, const i64 bins, const SK* a,
                                              const double* w, const i64 wo, const i64 ws,
                                              double* out, const i64 oo, const i64 os) {
    bincount_sum<double>(n, bins, a, w, wo, ws, out, oo, os);
}
#endif

#ifdef WANT_HISTC
// T: a float dtype; C its compute type. The CPU's arithmetic: edges and the bin count in C,
// bin = (x - l)·nb / (h - l) truncated (Rust's saturating float -> usize), the last bin
// taking h. Counts are integers (atomics are exact), then cast to T.
typedef E<T>::C C;
extern "C" __global__ void k_histc_count(const Geo g, const i64 n, const Str s, const T* x,
                                         const double l64, const double h64,
                                         const double nb64, const i64 bins, u64* cnt) {
    const C l = (C)l64, h = (C)h64, nb = (C)nb64;
    GRID_LOOP(i, n) {
        const C v = E<T>::ld(x[at(g, s, i)]);
        if (!(v >= l && v <= h)) continue;
        const C t = ((v - l) * nb) / (h - l);
        u64 b;
        if (!(t > (C)0)) b = 0;
        else if ((double)t >= 18446744073709551616.0) b = ~0ull;
        else b = (u64)t;
        if (b > (u64)(bins - 1)) b = (u64)(bins - 1);
        atomicAdd((unsigned long long*)&cnt[b], 1ull);
    }
}
extern "C" __global__ void k_histc_write(const i64 bins, const u64* cnt, T* out, const i64 oo,
                                         const i64 os) {
    GRID_LOOP(b, bins) out[oo + b * os] = E<T>::from_f64((double)cnt[b]);
}
#endif
