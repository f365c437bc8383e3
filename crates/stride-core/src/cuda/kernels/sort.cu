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

// SK, sk_less and sk_max are in index_common.cuh.

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
extern "C" __global__ void k_sort_rows(const __grid_constant__ Geo go, const __grid_constant__ Str si, const __grid_constant__ Str sv, const __grid_constant__ Str sx,
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

// topk of long rows by selection (one block of SORT_THREADS threads per row, half as many for
// rows of at most 8,192 keys, k <= KSEL): the
// k smallest (key, position) pairs of a row are exactly those with key < t, plus the first
// (by position) of those with key == t, where t is the k-th smallest key. t is found by a
// radix select on the key's bytes, most significant first (a histogram of the digit among
// the keys that match the digits chosen so far); an ordered pass then collects the pairs
// (block-wide ranks by warp ballots, so ties go to the smallest positions), and a bitonic
// sort of the k pairs orders them. The same k pairs in the same order as the full sort, so
// the same values and indices as the CPU.
//
// Global reads: the first digit's histogram reads the row once. When the chosen top digit's
// bucket holds at most CAND keys (typical: k = 64 of 24,576 N(0,1) values leaves ~600), one
// more ordered pass moves the keys below that digit (winners) to sel and the bucket's keys
// (candidates, in position order) to shared memory, and the other digits and the collection
// run on those: two reads of the row instead of one per key byte plus one. A larger bucket
// (values bunched within one binade) takes the next digit from the row, and so on until the
// bucket fits: one read more per digit. Both reads keep RS_UNROLL loads per thread in flight
// (at most 64 registers: two blocks of 512 threads, or four of 256, fit an SM).
#define KSEL 1024
#define CAND 2048
#define RS_UNROLL 4

// keys of a row in global memory / of the candidates in shared memory
struct RowKeys {
    const T* row; i64 ss; int desc;
    __device__ __forceinline__ u64 operator()(const i64 j) const { return key_of(row[j * ss], desc); }
};
struct CandKeys {
    const u64* k;
    __device__ __forceinline__ u64 operator()(const i64 j) const { return k[j]; }
};

// One radix-select step over keys g(0..n): the digit at `shift` of the krem-th smallest key
// among those matching prefix under hmask; updates prefix, hmask and krem (krem: how many of
// the keys equal to the new prefix are still wanted) and returns how many keys match the new
// prefix. Every thread of the block calls it (it synchronises).
template <class G>
__device__ __forceinline__ unsigned int radix_step(const G& g, const i64 n, const int shift,
                                                   u64& prefix, u64& hmask, i64& krem,
                                                   unsigned int* hist, unsigned int* s3) {
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (unsigned int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    // RS_UNROLL keys loaded before they are counted (loads in flight; counts add in any order)
    const i64 step = blockDim.x;
    for (i64 jb = 0; jb < n; jb += RS_UNROLL * step) {
        u64 kk[RS_UNROLL];
#pragma unroll
        for (int u = 0; u < RS_UNROLL; ++u) {
            const i64 j = jb + u * step + threadIdx.x;
            kk[u] = j < n ? g(j) : 0;
        }
#pragma unroll
        for (int u = 0; u < RS_UNROLL; ++u) {
            const i64 j = jb + u * step + threadIdx.x;
            unsigned int d = 256;
            if (j < n && (kk[u] & hmask) == prefix) d = (unsigned int)(kk[u] >> shift) & 255u;
            // lanes with one digit add once (many keys share their top digits)
            const unsigned int same = __match_any_sync(0xffffffffu, d);
            if (d < 256 && (__ffs(same) - 1) == (int)lane) atomicAdd(&hist[d], __popc(same));
        }
    }
    __syncthreads();
    if (warp == 0) {
        unsigned int c[8], sum = 0;
#pragma unroll
        for (int q = 0; q < 8; ++q) { c[q] = hist[lane * 8 + q]; sum += c[q]; }
        unsigned int inc = sum;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned int v = __shfl_up_sync(0xffffffffu, inc, o);
            if (lane >= (unsigned int)o) inc += v;
        }
        const unsigned int exc = inc - sum;
        if ((i64)exc < krem && krem <= (i64)inc) {
            unsigned int cum = exc, cnt = c[7];
            int d = lane * 8 + 7;
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                if ((i64)(cum + c[q]) >= krem) { d = lane * 8 + q; cnt = c[q]; break; }
                cum += c[q];
            }
            s3[0] = d;
            s3[1] = cum;
            s3[2] = cnt;
        }
    }
    __syncthreads();
    prefix |= (u64)s3[0] << shift;
    hmask |= (u64)255 << shift;
    krem -= s3[1];
    const unsigned int cnt = s3[2];
    __syncthreads();
    return cnt;
}

// The block-wide ordered compaction step shared by the passes below: per-warp ballot counts
// in wl/we, then each thread's rank among the flagged lanes before it (bl_before/be_before:
// earlier warps) and the step's totals tl/te. Every thread calls it (it synchronises once).
__device__ __forceinline__ void ballot_ranks(const bool isl, const bool ise, unsigned int* wl,
                                             unsigned int* we, unsigned int& bl,
                                             unsigned int& be, i64& bl_before, i64& be_before,
                                             i64& tl, i64& te) {
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned int nwarps = blockDim.x >> 5;
    bl = __ballot_sync(0xffffffffu, isl);
    be = __ballot_sync(0xffffffffu, ise);
    if (lane == 0) { wl[warp] = __popc(bl); we[warp] = __popc(be); }
    __syncthreads();
    bl_before = 0; be_before = 0; tl = 0; te = 0;
    for (unsigned int w = 0; w < nwarps; ++w) {
        if (w < warp) { bl_before += wl[w]; be_before += we[w]; }
        tl += wl[w];
        te += we[w];
    }
}

// ballot_ranks for RS_UNROLL consecutive sub-blocks of blockDim positions at once (position
// jb + u·blockDim + thread for sub-block u), with two barriers instead of two per sub-block:
// the per-(sub-block, warp) counts of both flags go to cl/cc, warp 0 turns them into exclusive
// prefixes in position order (sub-block, then warp) and the totals into tot[0..2]. After it,
// a flagged lane's rank is cl[u·nwarps + warp] + its rank in the warp's ballot.
__device__ __forceinline__ void ballot_ranks_unrolled(const bool (&isl)[RS_UNROLL],
                                                      const bool (&isc)[RS_UNROLL],
                                                      unsigned int (&bl)[RS_UNROLL],
                                                      unsigned int (&bc)[RS_UNROLL],
                                                      unsigned int* cl, unsigned int* cc,
                                                      unsigned int* tot) {
    const unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned int nwarps = blockDim.x >> 5, e_all = RS_UNROLL * nwarps;
#pragma unroll
    for (int u = 0; u < RS_UNROLL; ++u) {
        bl[u] = __ballot_sync(0xffffffffu, isl[u]);
        bc[u] = __ballot_sync(0xffffffffu, isc[u]);
        if (lane == 0) { cl[u * nwarps + warp] = __popc(bl[u]); cc[u * nwarps + warp] = __popc(bc[u]); }
    }
    __syncthreads();
    if (warp == 0) {
        // lane owns entries [lane·per, lane·per + per) (e_all ≤ 32·per)
        const unsigned int per = (e_all + 31) / 32;
        unsigned int sl = 0, sc = 0;
        for (unsigned int q = 0; q < per; ++q) {
            const unsigned int e = lane * per + q;
            if (e < e_all) { sl += cl[e]; sc += cc[e]; }
        }
        unsigned int il = sl, ic = sc;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned int vl = __shfl_up_sync(0xffffffffu, il, o);
            const unsigned int vc = __shfl_up_sync(0xffffffffu, ic, o);
            if (lane >= (unsigned int)o) { il += vl; ic += vc; }
        }
        unsigned int xl = il - sl, xc = ic - sc;
        for (unsigned int q = 0; q < per; ++q) {
            const unsigned int e = lane * per + q;
            if (e < e_all) {
                const unsigned int a = cl[e], b = cc[e];
                cl[e] = xl; cc[e] = xc;
                xl += a; xc += b;
            }
        }
        if (lane == 31) { tot[0] = il; tot[1] = ic; }
    }
    __syncthreads();
}

// two blocks per SM (at most 64 registers): one block's barriers overlap the other's loads
extern "C" __global__ void __launch_bounds__(SORT_THREADS, 2)
k_topk_select(const __grid_constant__ Geo go, const __grid_constant__ Str si,
              const __grid_constant__ Str sv, const __grid_constant__ Str sx, const i64 n_rows,
              const i64 n, const i64 ss, const i64 vs, const i64 xs, const unsigned int P,
              const int desc, const i64 k, const T* src, T* vals, i64* idx) {
    __shared__ unsigned int hist[256];
    __shared__ SK sel[KSEL];
    __shared__ u64 ck[CAND];
    __shared__ unsigned int cp[CAND];
    __shared__ unsigned int wl[SORT_THREADS / 32], we[SORT_THREADS / 32];
    __shared__ unsigned int s3[3];
    __shared__ unsigned int cl[RS_UNROLL * SORT_THREADS / 32], cc[RS_UNROLL * SORT_THREADS / 32], tot[2];
    const u64 kmask = (u64)(KMASK);
    const int bits = 64 - __clzll((long long)kmask);
    const unsigned int lane = threadIdx.x & 31;
    const unsigned int lt = (1u << lane) - 1;
    for (i64 r = blockIdx.x; r < n_rows; r += gridDim.x) {
        i64 oi, ov, ox;
        at3(go, si, sv, sx, r, oi, ov, ox);
        const T* row = src + oi;
        const RowKeys rk = {row, ss, desc};
        // the top digit, from the whole row, and the next ones from the row while the chosen
        // bucket is too large for the candidate buffer
        u64 prefix = 0, hmask = 0;
        i64 krem = k;
        int shift = bits - 8;
        unsigned int cnt = radix_step(rk, n, shift, prefix, hmask, krem, hist, s3);
        while (cnt > CAND && shift >= 8) {
            shift -= 8;
            cnt = radix_step(rk, n, shift, prefix, hmask, krem, hist, s3);
        }
        if (cnt <= CAND) {
            // keys below the chosen digits (all winners) to sel[0, nl1), in any order (the
            // sort below orders them); the bucket's keys to ck/cp, in position order
            // RS_UNROLL sub-blocks per step, all loaded before any is ranked (the loads of a
            // step are in flight together; two barriers per step)
            const i64 nl1 = k - krem;
            const unsigned int nwarps = blockDim.x >> 5, warp = threadIdx.x >> 5;
            i64 got_l = 0, got_c = 0;
            for (i64 jb = 0; jb < n && (got_l < nl1 || got_c < (i64)cnt);
                 jb += RS_UNROLL * blockDim.x) {
                u64 kk[RS_UNROLL];
                bool isl[RS_UNROLL], isc[RS_UNROLL];
#pragma unroll
                for (int u = 0; u < RS_UNROLL; ++u) {
                    const i64 j = jb + u * blockDim.x + threadIdx.x;
                    kk[u] = j < n ? rk(j) : 0;
                }
#pragma unroll
                for (int u = 0; u < RS_UNROLL; ++u) {
                    const i64 j = jb + u * blockDim.x + threadIdx.x;
                    isl[u] = j < n && kk[u] < prefix;
                    isc[u] = j < n && (kk[u] & hmask) == prefix;
                }
                unsigned int bl[RS_UNROLL], bc[RS_UNROLL];
                ballot_ranks_unrolled(isl, isc, bl, bc, cl, cc, tot);
#pragma unroll
                for (int u = 0; u < RS_UNROLL; ++u) {
                    const i64 j = jb + u * blockDim.x + threadIdx.x;
                    if (isl[u]) {
                        const i64 slot = got_l + cl[u * nwarps + warp] + __popc(bl[u] & lt);
                        sel[slot].key = kk[u]; sel[slot].pos = (unsigned int)j; sel[slot].pad = 0;
                    }
                    if (isc[u]) {
                        const i64 slot = got_c + cc[u * nwarps + warp] + __popc(bc[u] & lt);
                        ck[slot] = kk[u];
                        cp[slot] = (unsigned int)j;
                    }
                }
                got_l += tot[0];
                got_c += tot[1];
                __syncthreads();
            }
            // the other digits, among the candidates
            const CandKeys cand = {ck};
            for (int sh = shift - 8; sh >= 0; sh -= 8)
                radix_step(cand, (i64)cnt, sh, prefix, hmask, krem, hist, s3);
            // candidates below t to sel[nl1, nless), the first krem equal to t after them
            const i64 nless = k - krem;
            got_l = 0;
            i64 got_e = 0;
            for (i64 jb = 0; jb < (i64)cnt && (got_l < nless - nl1 || got_e < krem); jb += blockDim.x) {
                const i64 j = jb + threadIdx.x;
                u64 kk = 0;
                bool isl = false, ise = false;
                if (j < (i64)cnt) {
                    kk = ck[j];
                    isl = kk < prefix;
                    ise = kk == prefix;
                }
                unsigned int bl, be;
                i64 bl_before, be_before, tl, te;
                ballot_ranks(isl, ise, wl, we, bl, be, bl_before, be_before, tl, te);
                if (isl) {
                    const i64 slot = nl1 + got_l + bl_before + __popc(bl & lt);
                    sel[slot].key = kk; sel[slot].pos = cp[j]; sel[slot].pad = 0;
                }
                if (ise) {
                    const i64 e = got_e + be_before + __popc(be & lt);
                    if (e < krem) {
                        const i64 slot = nless + e;
                        sel[slot].key = kk; sel[slot].pos = cp[j]; sel[slot].pad = 0;
                    }
                }
                got_l += tl;
                got_e += te;
                __syncthreads();
            }
        } else {
            // every digit chosen from the row (t = prefix, over CAND keys equal to it): one
            // ordered pass over the row, every key < t and the first krem keys == t
            const i64 nless = k - krem;
            i64 got_l = 0, got_e = 0;
            for (i64 jb = 0; jb < n && (got_l < nless || got_e < krem); jb += blockDim.x) {
                const i64 j = jb + threadIdx.x;
                u64 kk = 0;
                bool isl = false, ise = false;
                if (j < n) {
                    kk = rk(j);
                    isl = kk < prefix;
                    ise = kk == prefix;
                }
                unsigned int bl, be;
                i64 bl_before, be_before, tl, te;
                ballot_ranks(isl, ise, wl, we, bl, be, bl_before, be_before, tl, te);
                if (isl) {
                    const i64 slot = got_l + bl_before + __popc(bl & lt);
                    sel[slot].key = kk; sel[slot].pos = (unsigned int)j; sel[slot].pad = 0;
                }
                if (ise) {
                    const i64 e = got_e + be_before + __popc(be & lt);
                    if (e < krem) {
                        const i64 slot = nless + e;
                        sel[slot].key = kk; sel[slot].pos = (unsigned int)j; sel[slot].pad = 0;
                    }
                }
                got_l += tl;
                got_e += te;
                __syncthreads();
            }
        }
        for (unsigned int e = k + threadIdx.x; e < P; e += blockDim.x) sel[e] = sk_max();
        __syncthreads();
        bitonic(sel, P, P);
        for (i64 j = threadIdx.x; j < k; j += blockDim.x) {
            const i64 pos = sel[j].pos;
            vals[ov + j * vs] = row[pos * ss];
            idx[ox + j * xs] = pos;
        }
        __syncthreads();
    }
}

// Long rows: the SKs of every row, row after row (a[r·n + j]).
extern "C" __global__ void k_sort_init(const __grid_constant__ Geo go, const __grid_constant__ Str si, const i64 n_rows,
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

extern "C" __global__ void k_sort_write(const __grid_constant__ Geo go, const __grid_constant__ Str si, const __grid_constant__ Str sv, const __grid_constant__ Str sx,
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
extern "C" __global__ void k_searchsorted(const __grid_constant__ Geo g, const i64 N, const __grid_constant__ Str so, const __grid_constant__ Str sv,
                                          const __grid_constant__ Str sq, const i64 m, const i64 rs,
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
extern "C" __global__ void k_histc_count(const __grid_constant__ Geo g, const i64 n, const __grid_constant__ Str s, const T* x,
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
