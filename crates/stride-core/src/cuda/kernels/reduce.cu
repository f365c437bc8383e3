// Reductions over dims. The host splits the input's dims into kept dims (gk: one output per
// position; ik/ok: input/output offsets and strides over them) and reduced dims (gr, ir: in
// logical row-major order, so `r` is the index arg reductions report).
//
// The host defines T, ACC, OUT and the fold: INIT, STEP(a, x, r), MERGE(a, b) (associative
// and, for arg reductions, independent of order: ties and NaNs pick the smallest index), and
// FIN(a) (the output value). Two schedules, chosen by the host from the layout alone:
// - per_thread = 1: one thread per output folds its elements in order (neighbouring threads
//   read neighbouring input columns: a reduction over outer dims);
// - per_thread = 0: one block of RBLOCK threads per output, each thread folding r = t, t+RBLOCK,
//   ... then a fixed tree merge (a reduction over the input's contiguous dim).
// Either way the grouping depends only on shapes and strides, so results are reproducible.

#define RBLOCK 256

#ifdef WANT_REDUCE
extern "C" __global__ void k_reduce(const Geo gk, const Str ik, const Str ok, const i64 n_out,
                                    const Geo gr, const Str ir, const i64 n_red,
                                    const T* __restrict__ in, OUT* out, const int per_thread) {
    __shared__ ACC sh[RBLOCK];
    if (per_thread) {
        GRID_LOOP(o, n_out) {
            const T* p = in + at(gk, ik, o);
            ACC a = INIT;
            for (i64 r = 0; r < n_red; ++r) { T x = p[at(gr, ir, r)]; a = STEP(a, x, r); }
            out[at(gk, ok, o)] = FIN(a);
        }
        return;
    }
    for (i64 o = blockIdx.x; o < n_out; o += gridDim.x) {
        const T* p = in + at(gk, ik, o);
        ACC a = INIT;
        for (i64 r = threadIdx.x; r < n_red; r += RBLOCK) { T x = p[at(gr, ir, r)]; a = STEP(a, x, r); }
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

#endif

#ifdef WANT_ARG
// Arg reductions: ACC is KeyIdx; values (optional) and i64 indices.

extern "C" __global__ void k_arg_reduce(const Geo gk, const Str ik, const Str ok, const Str oi,
                                        const i64 n_out, const Geo gr, const Str ir,
                                        const i64 n_red, const T* __restrict__ in, T* vals,
                                        i64* idx, const int per_thread) {
    __shared__ KeyIdx sh[RBLOCK];
    if (per_thread) {
        GRID_LOOP(o, n_out) {
            const T* p = in + at(gk, ik, o);
            KeyIdx a = INIT;
            for (i64 r = 0; r < n_red; ++r) { T x = p[at(gr, ir, r)]; a = STEP(a, x, r); }
            if (vals) vals[at(gk, ok, o)] = p[at(gr, ir, a.i)];
            idx[at(gk, oi, o)] = a.i;
        }
        return;
    }
    for (i64 o = blockIdx.x; o < n_out; o += gridDim.x) {
        const T* p = in + at(gk, ik, o);
        KeyIdx a = INIT;
        for (i64 r = threadIdx.x; r < n_red; r += RBLOCK) { T x = p[at(gr, ir, r)]; a = STEP(a, x, r); }
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

#endif

#ifdef WANT_SCAN
// Inclusive scans along one dim: one thread per line, in order (as the CPU).
extern "C" __global__ void k_scan(const Geo gl, const Str il, const Str ol, const i64 n_lines,
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
