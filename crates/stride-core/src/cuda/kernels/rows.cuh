// Shared by the row kernels (norm.cu, cross_entropy.cu): a block works on one row at a time;
// a thread handles chunks of VW neighbouring elements (VW = 1 for any strides, VEC = one
// 16-byte vector when the rows are dense and aligned: the host checks), and the block's sums
// are a fixed tree (warp butterflies, then the warp totals in order): the same bits every run.
// The host defines T, C, L and S; blockDim.x is a multiple of 32.

// Elements of one 16-byte vector
#define VEC (16 / (int)sizeof(T))

// The sum of v over the warp, in every lane (a butterfly: every lane adds the same pairs).
__device__ __forceinline__ C warp_sum(C v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The sum of v over the block, in every thread (all threads of the block call it).
__device__ __forceinline__ C block_sum(C v, C* sh) {
    v = warp_sum(v);
    __syncthreads();  // the previous call's readers are done with sh
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    C s = 0;
    const int warps = blockDim.x >> 5;
    for (int k = 0; k < warps; ++k) s += sh[k];
    return s;
}

// The max of v over the block (NaN wins), in every thread.
__device__ __forceinline__ C block_max(C v, C* sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    C m = sh[0];
    const int warps = blockDim.x >> 5;
    for (int k = 1; k < warps; ++k) m = max_nan(m, sh[k]);
    return m;
}

// The VW elements of a row from element i (VW > 1: one 16-byte load; column stride 1)
template <int VW>
__device__ __forceinline__ void load_chunk(const T* row, i64 i, i64 s, C* out) {
    if (VW == 1) {
        out[0] = L(row[i * s]);
    } else {
        union { uint4 u; T e[VW]; } v;
        v.u = *(const uint4*)(row + i);
#pragma unroll
        for (int e = 0; e < VW; ++e) out[e] = L(v.e[e]);
    }
}

template <int VW>
__device__ __forceinline__ void store_chunk(T* row, i64 i, i64 s, const C* in) {
    if (VW == 1) {
        row[i * s] = S(in[0]);
    } else {
        union { uint4 u; T e[VW]; } v;
#pragma unroll
        for (int e = 0; e < VW; ++e) v.e[e] = S(in[e]);
        *(uint4*)(row + i) = v.u;
    }
}
