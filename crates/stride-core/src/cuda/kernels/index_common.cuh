// Helpers shared by the index and sort kernels (index.cu, compact.cu, sort.cu).

// Offsets of three operands at linear position i of g (one division chain for all three).
__device__ __forceinline__ void at3(const Geo& g, const Str& a, const Str& b, const Str& c, i64 i,
                                    i64& oa, i64& ob, i64& oc) {
    i64 xa = a.off, xb = b.off, xc = c.off;
    for (int d = g.ndim - 1; d > 0; --d) {
        i64 n = g.size[d];
        i64 q = i / n;
        i64 r = i - q * n;
        xa += r * a.st[d];
        xb += r * b.st[d];
        xc += r * c.st[d];
        i = q;
    }
    oa = xa + i * a.st[0];
    ob = xb + i * b.st[0];
    oc = xc + i * c.st[0];
}

// An element from the little-endian bits the host made with the CPU's own conversions.
template <class V> __device__ __forceinline__ V from_bits(u64 b) {
    V v;
    memcpy(&v, &b, sizeof(V));
    return v;
}
