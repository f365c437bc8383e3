// Copies and fills that move bits: one kernel per element size (1, 2, 4, 8 bytes), so a copy
// within one dtype keeps NaN payloads, as the CPU's does.

#define COPY_FILL(B, W) \
    extern "C" __global__ void k_copy_##B(const Geo g, const i64 n, const int contig, \
                                        W* o, const Str so, const W* a, const Str sa) { \
        VEC_BEGIN VO(W, o, so)[k_] = VP(W, a, sa)[k_]; \
        VEC_TAIL o[so.off + i] = a[sa.off + i]; VEC_END \
        GRID_LOOP(i, n) { W x = LOAD(a, sa, i); STORE(o, so, i, x); } \
    } \
    extern "C" __global__ void k_fill_##B(const Geo g, const i64 n, const int contig, \
                                        W* o, const Str so, const u64 bits) { \
        const W v = (W)bits; \
        VEC_BEGIN V4<W> r_; r_.v[0] = v; r_.v[1] = v; r_.v[2] = v; r_.v[3] = v; VO(W, o, so)[k_] = r_; \
        VEC_TAIL o[so.off + i] = v; VEC_END \
        GRID_LOOP(i, n) { STORE(o, so, i, v); } \
    } \
    extern "C" __global__ void k_tiled_##B(const Geo g, const i64 nb, const int tmask, \
                                         W* o, const Str so, const W* a, const Str sa) { \
        __shared__ W ta[32][33]; \
        TILE_LOOP(nb) { TILE_ORIGIN \
            TILE_STAGE(ta, a, sa, tmask & 2); __syncthreads(); \
            TILE_EMIT(so, tmask & 1, { o[oi] = ta[r][c]; }); __syncthreads(); } \
    }
