// Copies and fills that move bits: one kernel per element size (1, 2, 4, 8 bytes), so a copy
// within one dtype keeps NaN payloads, as the CPU's does.

#define COPY_FILL(B, W) \
    extern "C" __global__ void k_copy_##B(const Geo g, const i64 n, const int contig, \
                                        W* o, const Str so, const W* a, const Str sa) { \
        GRID_LOOP(i, n) { W x = LOAD(a, sa, i); STORE(o, so, i, x); } \
    } \
    extern "C" __global__ void k_fill_##B(const Geo g, const i64 n, const int contig, \
                                        W* o, const Str so, const u64 bits) { \
        const W v = (W)bits; \
        GRID_LOOP(i, n) { STORE(o, so, i, v); } \
    }
