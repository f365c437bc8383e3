// Random fills, bit-identical to the CPU backend (cpu/random.rs, random/mod.rs): element i in
// logical (row-major) order takes the Philox4x32-10 words the mapping assigns to it, so its
// value depends only on (seed, offset, i) — never on the output's strides or the launch.
// The output is walked with a row-major "logical" operand whose offset is the logical index.

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

// Block `index` of the stream of `seed`: counter (lo, hi, 0, 0), key (lo32(seed), hi32(seed)).
__device__ __forceinline__ void philox_block(u64 seed, u64 index, u32 out[4]) {
    u32 c0 = (u32)index, c1 = (u32)(index >> 32), c2 = 0, c3 = 0;
    u32 k0 = (u32)seed, k1 = (u32)(seed >> 32);
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) { k0 += PHILOX_W0; k1 += PHILOX_W1; }
        u32 hi0 = __umulhi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
        u32 hi1 = __umulhi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
        u32 n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
        c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

// Reads consecutive words of one stream, computing each Philox block once.
struct Words {
    u64 seed, index;
    u32 b[4];
    __device__ Words(u64 s) : seed(s), index(~0ull) {}
    __device__ __forceinline__ u32 get(u64 w) {
        u64 i = w >> 2;
        if (i != index) { index = i; philox_block(seed, i, b); }
        return b[w & 3];
    }
};

// (w >> 8)·2⁻²⁴ and (((a << 32) | b) >> 11)·2⁻⁵³, exact in double
__device__ __forceinline__ double u24(u32 w) { return (double)(w >> 8) * (1.0 / 16777216.0); }
__device__ __forceinline__ double u53(u32 a, u32 b) {
    return (double)((((u64)a << 32) | (u64)b) >> 11) * (1.0 / 9007199254740992.0);
}

// Distribution codes (RandomDist on the host).
#define DIST_UNIFORM 0
#define DIST_NORMAL 1
#define DIST_RANDINT 2
#define DIST_BERNOULLI 3
#define DIST_BITS64 4

// a, b: (low, high) | (mean, std) | (p, value); cap: what replaces a uniform that rounded up
// to `high`; ilow, irange: randint's low and (high − low) as u64.
extern "C" __global__ void k_random(const __grid_constant__ Geo g, const i64 n, const int contig, T* o,
                                    const __grid_constant__ Str so, const __grid_constant__ Str sl, const int dist,
                                    const double a, const double b, const double cap,
                                    const i64 ilow, const u64 irange, const u64 seed,
                                    const u64 offset, const int wide) {
    Words words(seed);
    GRID_LOOP(i, n) {
        const u64 li = (u64)(contig ? sl.off + i : at(g, sl, i));
        T v;
        if (dist == DIST_UNIFORM) {
            double u = wide ? u53(words.get(offset + 2 * li), words.get(offset + 2 * li + 1))
                            : u24(words.get(offset + li));
            v = E<T>::from_f64(a + (b - a) * u);
            if (E<T>::to_f64(v) >= b) v = E<T>::from_f64(cap);
        } else if (dist == DIST_NORMAL) {
            const u64 p = li / 2;
            double u1, u2;
            if (wide) {
                u32 w0 = words.get(offset + 4 * p), w1 = words.get(offset + 4 * p + 1);
                u32 w2 = words.get(offset + 4 * p + 2), w3 = words.get(offset + 4 * p + 3);
                u1 = u53(w0, w1);
                u2 = u53(w2, w3);
            } else {
                u1 = u24(words.get(offset + 2 * p));
                u2 = u24(words.get(offset + 2 * p + 1));
            }
            double r = sqrt(-2.0 * lm_log(1.0 - u1));
            double s, c;
            lm_sincos(2.0 * 3.141592653589793 * u2, &s, &c);
            v = E<T>::from_f64(a + b * ((li & 1) == 0 ? r * c : r * s));
        } else if (dist == DIST_BERNOULLI) {
            v = E<T>::from_f64(u24(words.get(offset + li)) < a ? b : 0.0);
        } else {
            u64 x = ((u64)words.get(offset + 2 * li) << 32) | (u64)words.get(offset + 2 * li + 1);
            if (dist == DIST_RANDINT) x = (u64)ilow + __umul64hi(x, irange);
            v = E<T>::from_i64((i64)x);
        }
        if (contig) o[so.off + i] = v; else o[at(g, so, i)] = v;
    }
}
