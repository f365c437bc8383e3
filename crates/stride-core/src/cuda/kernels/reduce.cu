// Reductions over dims. The host splits the input's dims into kept dims (gk: one output per
// position; ik/ok: input/output offsets and strides over them) and reduced dims (gr, ir: in
// logical row-major order, so `r` is the index arg reductions report).
//
// The host defines T, ACC, OUT and the fold: INIT, STEP(a, x, r), MERGE(a, b) (associative
// and, for arg reductions, independent of order: ties and NaNs pick the smallest index), and
// FIN(a) (the output value). Schedules, chosen by the host from the layout alone:
// - per-thread (k_reduce_cols with one part): blocks of 32 x 8 threads; x picks one of 32
//   neighbouring outputs (so a warp reads neighbouring input columns: a reduction over outer
//   dims), y one of 8 contiguous eighths of the reduced range, folded in order; the eighths
//   merge in order (also k_arg_reduce with per_thread = 1);
// - block per output (k_reduce; k_arg_reduce with per_thread = 0): one block of RBLOCK threads
//   per output, each thread folding r = t, t+RBLOCK, ... then a fixed tree merge (a reduction
//   over the input's contiguous dim);
// - split (few outputs, long reduced ranges; the block-per-output schedule would leave most
//   SMs idle: one output is one block): block b folds part c = b % parts of output
//   o = b / parts, the reduced indices [c·chunk, (c+1)·chunk) strided by RBLOCK as above, and
//   writes its tree-merged ACC to part[b]; the block that finishes output o's parts last (a
//   ticket: tickets[o] counts arrivals and wraps back to 0) folds them in a fixed order
//   (thread t: parts t, t+RBLOCK, ..., then the same tree) and writes FIN. One launch, no
//   atomics on data: the same bits every run, whichever block arrives last;
// - column split (k_reduce_cols with several parts: a reduction over outer dims, the input's
//   kept innermost dim contiguous, too few outputs for the per-thread schedule to fill the
//   GPU, as a bias gradient [B, n] -> [n]): blockIdx.y one part of the reduced range; the last
//   block of a group (tickets[group]) folds the group's parts in a fixed order.
// Loops load U_THREAD / U_BLOCK elements before folding them (in order), to keep enough loads
// in flight.
// Either way the grouping depends only on shapes and strides, so results are reproducible.

#define RBLOCK 256

// fold elements r0, r0+STEPR, ... < r1 of row p into a, in order, U loads issued before
// they are folded (the fold order, and so the result, does not depend on U)
#define FOLD_RANGE(A, P, R0, R1, STEPR, U) do { \
        i64 r_ = (R0); \
        for (; r_ + ((U) - 1) * (STEPR) < (R1); r_ += (U) * (STEPR)) { \
            T x_[U]; \
            _Pragma("unroll") for (int u_ = 0; u_ < (U); ++u_) x_[u_] = (P)[at(gr, ir, r_ + u_ * (STEPR))]; \
            _Pragma("unroll") for (int u_ = 0; u_ < (U); ++u_) A = STEP(A, x_[u_], r_ + u_ * (STEPR)); \
        } \
        for (; r_ < (R1); r_ += (STEPR)) { T x = (P)[at(gr, ir, r_)]; A = STEP(A, x, r_); } \
    } while (0)
// loads in flight per thread (8 x 4 bytes x ~1000 threads per SM covers HBM's latency); the
// kernels are bounded to 64 registers so that 4 blocks fit per SM (unbounded, ptxas took 80:
// 3 blocks, and a 16k-column first-dim sum's 512 blocks ran in two waves)
#define U_THREAD 8
#define U_BLOCK 8
// the per-thread schedule's loop header: o = this thread's output (may be >= n_out), and its
// eighth [lo, hi) of the reduced range
#define PER_THREAD_LOOP \
    const i64 chunk_ = (n_red + 7) / 8; \
    const i64 lo = threadIdx.y * chunk_, hi = lo + chunk_ < n_red ? lo + chunk_ : n_red; \
    for (i64 ob_ = (i64)blockIdx.x * 32; ob_ < n_out; ob_ += (i64)gridDim.x * 32)

// M = the merge of SH[y·32 + threadIdx.x] over the eighths y = 0..8, in order (the per-thread
// schedules' 32 x 8 blocks)
#define MERGE_EIGHTHS(M, SH) do { \
        M = SH[threadIdx.x]; \
        for (int y_ = 1; y_ < 8; ++y_) M = MERGE(M, SH[y_ * 32 + threadIdx.x]); \
    } while (0)

// merges sh[0..RBLOCK) into sh[0] by a fixed tree (every thread of the block calls it)
#define TREE_MERGE(SH) do { \
        __syncthreads(); \
        for (int s_ = RBLOCK / 2; s_ > 0; s_ >>= 1) { \
            if (threadIdx.x < s_) SH[threadIdx.x] = MERGE(SH[threadIdx.x], SH[threadIdx.x + s_]); \
            __syncthreads(); \
        } \
    } while (0)

// a partial written by another block of this launch, read from L2 (never a stale L1 line)
template <class X> __device__ __forceinline__ X load_cg(const X* p) {
    X x;
    if (sizeof(X) % 4 == 0) {
        _Pragma("unroll") for (int i = 0; i < (int)(sizeof(X) / 4); ++i)
            ((unsigned*)&x)[i] = __ldcg((const unsigned*)p + i);
    } else {
        _Pragma("unroll") for (int i = 0; i < (int)sizeof(X); ++i)
            ((unsigned char*)&x)[i] = ((const volatile unsigned char*)p)[i];
    }
    return x;
}
// After this block wrote its partial: true in every thread of the block that arrived last of
// the `parts` blocks of ticket T (the ticket is back at 0 afterwards, ready for the next launch).
__device__ __forceinline__ bool last_arrival(unsigned* tickets, i64 t, i64 parts) {
    __shared__ bool last_;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0)
        last_ = atomicInc(tickets + t, (unsigned)(parts - 1)) == (unsigned)(parts - 1);
    __syncthreads();
    if (last_) __threadfence();
    return last_;
}

#ifdef WANT_REDUCE
extern "C" __global__ void __launch_bounds__(RBLOCK, 4) k_reduce(const __grid_constant__ Geo gk, const __grid_constant__ Str ik, const __grid_constant__ Str ok, const i64 n_out,
                                    const __grid_constant__ Geo gr, const __grid_constant__ Str ir, const i64 n_red,
                                    const T* __restrict__ in, OUT* out) {
    __shared__ ACC sh[RBLOCK];
    for (i64 o = blockIdx.x; o < n_out; o += gridDim.x) {
        const T* p = in + at(gk, ik, o);
        ACC a = INIT;
        FOLD_RANGE(a, p, (i64)threadIdx.x, n_red, (i64)RBLOCK, U_BLOCK);
        sh[threadIdx.x] = a;
        __syncthreads();
        for (int s = RBLOCK / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) sh[threadIdx.x] = MERGE(sh[threadIdx.x], sh[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0) out[at(gk, ok, o)] = FIN(sh[0]);
        __syncthreads();
    }
}

// The split schedule: part[b] = the fold of part c = b % parts of output o = b / parts
// (reduced indices [c·chunk, min((c+1)·chunk, n_red))); the last block of output o folds
// part[o·parts .. (o+1)·parts) in a fixed order and writes FIN.
extern "C" __global__ void __launch_bounds__(RBLOCK, 4) k_reduce_split(const __grid_constant__ Geo gk, const __grid_constant__ Str ik, const __grid_constant__ Str ok, const i64 n_out,
                                         const __grid_constant__ Geo gr, const __grid_constant__ Str ir, const i64 n_red,
                                         const i64 chunk, const i64 parts,
                                         const T* __restrict__ in, ACC* part, unsigned* tickets, OUT* out) {
    __shared__ ACC sh[RBLOCK];
    for (i64 b = blockIdx.x; b < n_out * parts; b += gridDim.x) {
        const i64 o = b / parts, c = b - o * parts;
        const i64 r0 = c * chunk, r1 = r0 + chunk < n_red ? r0 + chunk : n_red;
        const T* p = in + at(gk, ik, o);
        ACC a = INIT;
        FOLD_RANGE(a, p, r0 + (i64)threadIdx.x, r1, (i64)RBLOCK, U_BLOCK);
        sh[threadIdx.x] = a;
        TREE_MERGE(sh);
        if (threadIdx.x == 0) part[b] = sh[0];
        if (last_arrival(tickets, o, parts)) {
            ACC m = INIT;
            for (i64 q = threadIdx.x; q < parts; q += RBLOCK) m = MERGE(m, load_cg(part + o * parts + q));
            sh[threadIdx.x] = m;
            TREE_MERGE(sh);
            if (threadIdx.x == 0) out[at(gk, ok, o)] = FIN(sh[0]);
        }
        __syncthreads();
    }
}

// The per-thread schedule and its column split: blocks of 32 x 8 threads; block (g, c) folds
// part c (reduced indices [c·chunk, min((c+1)·chunk, n_red)), cut in eighths by threadIdx.y,
// folded in order) of outputs o = 32·g + threadIdx.x. With one part (chunk = n_red; part and
// tickets unused) it writes FIN of the merged eighths; with more, it writes part[c·n_out + o]
// and the last block of group g folds each of its outputs' parts in a fixed order (thread y:
// parts y, y+8, ...; then the eighths in order) and writes FIN. The grid is exactly
// (groups, parts).
extern "C" __global__ void __launch_bounds__(RBLOCK, 4) k_reduce_cols(const __grid_constant__ Geo gk, const __grid_constant__ Str ik, const __grid_constant__ Str ok, const i64 n_out,
                                         const __grid_constant__ Geo gr, const __grid_constant__ Str ir, const i64 n_red,
                                         const i64 chunk, const i64 parts,
                                         const T* __restrict__ in, ACC* part, unsigned* tickets, OUT* out) {
    __shared__ ACC sh[RBLOCK];
    const i64 c = blockIdx.y, groups = (n_out + 31) / 32;
    const i64 r0 = c * chunk, r1 = r0 + chunk < n_red ? r0 + chunk : n_red;
    const i64 e = (r1 - r0 + 7) / 8, lo = r0 + threadIdx.y * e, hi = lo + e < r1 ? lo + e : r1;
    // a grid-stride loop over the groups (one pass with several parts: the grid has them all)
    for (i64 g = blockIdx.x; g < groups; g += gridDim.x) {
        const i64 o = g * 32 + threadIdx.x;
        ACC a = INIT;
        if (o < n_out) { const T* p = in + at(gk, ik, o); FOLD_RANGE(a, p, lo, hi, 1, U_THREAD); }
        sh[threadIdx.y * 32 + threadIdx.x] = a;
        __syncthreads();
        if (threadIdx.y == 0 && o < n_out) {
            ACC m;
            MERGE_EIGHTHS(m, sh);
            if (parts == 1) out[at(gk, ok, o)] = FIN(m);
            else part[c * n_out + o] = m;
        }
        if (parts > 1 && last_arrival(tickets, g, parts)) {
            ACC m = INIT;
            if (o < n_out) for (i64 q = threadIdx.y; q < parts; q += 8) m = MERGE(m, load_cg(part + q * n_out + o));
            sh[threadIdx.y * 32 + threadIdx.x] = m;
            __syncthreads();
            if (threadIdx.y == 0 && o < n_out) {
                ACC f;
                MERGE_EIGHTHS(f, sh);
                out[at(gk, ok, o)] = FIN(f);
            }
        }
        __syncthreads();
    }
}

#endif

#ifdef WANT_ARG
// Arg reductions: ACC is KeyIdx; values (optional) and i64 indices.

extern "C" __global__ void __launch_bounds__(RBLOCK, 4) k_arg_reduce(const __grid_constant__ Geo gk, const __grid_constant__ Str ik, const __grid_constant__ Str ok, const __grid_constant__ Str oi,
                                        const i64 n_out, const __grid_constant__ Geo gr, const __grid_constant__ Str ir,
                                        const i64 n_red, const T* __restrict__ in, T* vals,
                                        i64* idx, const int per_thread) {
    __shared__ KeyIdx sh[RBLOCK];
    if (per_thread) {
        PER_THREAD_LOOP {
            const i64 o = ob_ + threadIdx.x;
            KeyIdx a = INIT;
            const T* p = in + (o < n_out ? at(gk, ik, o) : 0);
            if (o < n_out) FOLD_RANGE(a, p, lo, hi, 1, U_THREAD);
            sh[threadIdx.y * 32 + threadIdx.x] = a;
            __syncthreads();
            if (threadIdx.y == 0 && o < n_out) {
                KeyIdx m;
                MERGE_EIGHTHS(m, sh);
                if (vals) vals[at(gk, ok, o)] = p[at(gr, ir, m.i)];
                idx[at(gk, oi, o)] = m.i;
            }
            __syncthreads();
        }
        return;
    }
    for (i64 o = blockIdx.x; o < n_out; o += gridDim.x) {
        const T* p = in + at(gk, ik, o);
        KeyIdx a = INIT;
        FOLD_RANGE(a, p, (i64)threadIdx.x, n_red, (i64)RBLOCK, U_BLOCK);
        sh[threadIdx.x] = a;
        __syncthreads();
        for (int s = RBLOCK / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s) sh[threadIdx.x] = MERGE(sh[threadIdx.x], sh[threadIdx.x + s]);
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            if (vals) vals[at(gk, ok, o)] = p[at(gr, ir, sh[0].i)];
            idx[at(gk, oi, o)] = sh[0].i;
        }
        __syncthreads();
    }
}

// The split schedule of arg reductions: as k_reduce_split, with KeyIdx parts (r is the index
// over the whole reduced range, so a merge in any order picks the same).
extern "C" __global__ void __launch_bounds__(RBLOCK, 4) k_arg_split(const __grid_constant__ Geo gk, const __grid_constant__ Str ik, const __grid_constant__ Str ok, const __grid_constant__ Str oi,
                                      const i64 n_out, const __grid_constant__ Geo gr, const __grid_constant__ Str ir, const i64 n_red,
                                      const i64 chunk, const i64 parts,
                                      const T* __restrict__ in, KeyIdx* part, unsigned* tickets, T* vals, i64* idx) {
    __shared__ KeyIdx sh[RBLOCK];
    for (i64 b = blockIdx.x; b < n_out * parts; b += gridDim.x) {
        const i64 o = b / parts, c = b - o * parts;
        const i64 r0 = c * chunk, r1 = r0 + chunk < n_red ? r0 + chunk : n_red;
        const T* p = in + at(gk, ik, o);
        KeyIdx a = INIT;
        FOLD_RANGE(a, p, r0 + (i64)threadIdx.x, r1, (i64)RBLOCK, U_BLOCK);
        sh[threadIdx.x] = a;
        TREE_MERGE(sh);
        if (threadIdx.x == 0) part[b] = sh[0];
        if (last_arrival(tickets, o, parts)) {
            KeyIdx m = INIT;
            for (i64 q = threadIdx.x; q < parts; q += RBLOCK) m = MERGE(m, load_cg(part + o * parts + q));
            sh[threadIdx.x] = m;
            TREE_MERGE(sh);
            if (threadIdx.x == 0) {
                if (vals) vals[at(gk, ok, o)] = p[at(gr, ir, sh[0].i)];
                idx[at(gk, oi, o)] = sh[0].i;
            }
        }
        __syncthreads();
    }
}

#endif

#ifdef WANT_SCAN
// Inclusive scans along one dim: one thread per line, in order (as the CPU).
extern "C" __global__ void k_scan(const __grid_constant__ Geo gl, const __grid_constant__ Str il, const __grid_constant__ Str ol, const i64 n_lines,
                                  const i64 len, const i64 ist, const i64 ost,
                                  const T* __restrict__ in, OUT* out) {
    GRID_LOOP(l, n_lines) {
        const T* p = in + at(gl, il, l);
        OUT* q = out + at(gl, ol, l);
        ACC a = INIT;
        for (i64 r = 0; r < len; ++r) { T x = p[r * ist]; a = STEP(a, x, r); q[r * ost] = FIN(a); }
    }
}
#endif
