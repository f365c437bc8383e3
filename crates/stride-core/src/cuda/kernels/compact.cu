// Stream compaction in logical order: the masked scans (count_nonzero, nonzero,
// masked_select, masked_scatter) and unique_consecutive. The host defines, before this file:
// - PARAMS: the op's kernel parameters (operands and their layouts);
// - FLAG(i): whether logical position i (0 <= i < n) is selected;
// - EACH(i, r, f): what position i does, given its flag f and r = the number of selected
//   positions before it (the output slot of a selected one).
//
// Three kernels, one chunk of CCHUNK positions per block: k_chunk_count counts each chunk,
// k_scan_counts turns the counts into exclusive starts (and counts[nc] = the total, which the
// host reads where it must size or check something), k_emit ranks the positions of a chunk in
// order with warp ballots and calls EACH. Deterministic: no atomics.

#define CBLOCK 256
#define CITEMS 16
#define CCHUNK (CBLOCK * CITEMS)
#define CWARPS (CBLOCK / 32)

extern "C" __global__ void k_chunk_count(PARAMS, const i64 n, u64* counts) {
    __shared__ u64 sh[CWARPS];
    const i64 base = (i64)blockIdx.x * CCHUNK;
    u64 c = 0;
    for (int j = 0; j < CITEMS; ++j) {
        const i64 i = base + (i64)j * CBLOCK + threadIdx.x;
        if (i < n && (FLAG(i))) ++c;
    }
    for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 t = 0;
        for (int w = 0; w < CWARPS; ++w) t += sh[w];
        counts[blockIdx.x] = t;
    }
}

// One block of 1024 threads: counts[0..nc] become exclusive prefix sums, counts[nc] the total.
#define SBLOCK 1024
extern "C" __global__ void k_scan_counts(u64* counts, const i64 nc) {
    __shared__ u64 sh[SBLOCK];
    const int t = threadIdx.x;
    u64 carry = 0;
    for (i64 base = 0; base < nc; base += SBLOCK) {
        const i64 i = base + t;
        const u64 v = i < nc ? counts[i] : 0;
        sh[t] = v;
        __syncthreads();
        for (int o = 1; o < SBLOCK; o <<= 1) {
            const u64 a = t >= o ? sh[t - o] : 0;
            __syncthreads();
            sh[t] += a;
            __syncthreads();
        }
        if (i < nc) counts[i] = carry + sh[t] - v;
        carry += sh[SBLOCK - 1];
        __syncthreads();
    }
    if (t == 0) counts[nc] = carry;
}

extern "C" __global__ void k_emit(PARAMS, const i64 n, const u64* starts) {
    __shared__ unsigned int wsum[CWARPS];
    const int t = threadIdx.x, lane = t & 31, w = t >> 5;
    const i64 base = (i64)blockIdx.x * CCHUNK;
    u64 run = starts[blockIdx.x];
    for (int j = 0; j < CITEMS; ++j) {
        const i64 i = base + (i64)j * CBLOCK + t;
        const bool f = i < n && (FLAG(i));
        const unsigned int b = __ballot_sync(0xffffffffu, f);
        if (lane == 0) wsum[w] = __popc(b);
        __syncthreads();
        unsigned int before = 0, total = 0;
        for (int q = 0; q < CWARPS; ++q) {
            const unsigned int c = wsum[q];
            if (q < w) before += c;
            total += c;
        }
        const u64 r = run + before + __popc(b & ((1u << lane) - 1u));
        if (i < n) { EACH(i, r, f); }
        run += total;
        __syncthreads();
    }
}
