// Copies and fills that move bits: one kernel per element size (1, 2, 4, 8 bytes), so a copy
// within one dtype keeps NaN payloads, as the CPU's does. (A dense copy that does not overlap
// itself is a cuMemcpyDtoDAsync, and a dense fill of 1, 2 or 4 bytes a cuMemsetD*Async, on
// the host; these kernels do the rest.)

#define COPY_FILL(B, W) \
    extern "C" __global__ void k_copy_##B(const __grid_constant__ Geo g, const i64 n, const int contig, \
                                        W* o, const __grid_constant__ Str so, const W* a, \
                                        const __grid_constant__ Str sa) { \
        GRID_LOOP(i, n) { W x = LOAD(a, sa, i); STORE(o, so, i, x); } \
    } \
    DENSE_KERNEL k_copy_dense_##B(const i64 n, const int bc, const __grid_constant__ Rows rw, W* o, const W* a) { \
        DUOF(W) DENSE_LOOP(n) { DLOAD(W, xa_, a, 1); DSTORE(W, o, { r_.v[j_] = xa_[u_].v[j_]; }); } \
        DENSE_TAIL { o[i] = DIN(a, 1, i); } \
    } \
    extern "C" __global__ void k_fill_##B(const __grid_constant__ Geo g, const i64 n, const int contig, \
                                        W* o, const __grid_constant__ Str so, const u64 bits) { \
        const W v = (W)bits; \
        GRID_LOOP(i, n) { STORE(o, so, i, v); } \
    } \
    DENSE_KERNEL k_fill_dense_##B(const i64 n, const int bc, const __grid_constant__ Rows rw, W* o, const u64 bits) { \
        const W v = (W)bits; \
        DUOF(W) DENSE_LOOP(n) { DSTORE(W, o, { r_.v[j_] = v; }); } \
        DENSE_TAIL { o[i] = v; } \
    } \
    TILED_KERNEL k_tiled_##B(const __grid_constant__ Geo g, const i64 nb, const int tmask, \
                             W* o, const __grid_constant__ Str so, const W* a, const __grid_constant__ Str sa) { \
        __shared__ W ta[32][33]; \
        TILE_LOOP(nb) { TILE_ORIGIN \
            TILE_STAGE(ta, a, sa, tmask & 2); __syncthreads(); \
            TILE_EMIT(so, tmask & 1, { o[oi] = ta[r][c]; }); __syncthreads(); } \
    }

// A copy whose innermost dim is contiguous in both operands, in 16-byte words: the host
// passes the geometry in words (each row a whole number of words, every row start aligned),
// so the offset arithmetic runs once per 16 bytes instead of once per element. The permuted
// copies of attention's heads ((B, H, T, D) <-> (B, T, H, D)) take this path.
extern "C" __global__ void k_copy_vec16(const __grid_constant__ Geo g, const i64 n, uint4* o,
                                        const __grid_constant__ Str so, const uint4* a,
                                        const __grid_constant__ Str sa) {
    GRID_LOOP(i, n) { o[at(g, so, i)] = a[at(g, sa, i)]; }
}
