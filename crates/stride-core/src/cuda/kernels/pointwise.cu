// Fused pointwise ops (the math and the operand order: backend/pointwise.rs). Prepended:
// common.cuh and `typedef <dtype> T; typedef E<T>::C C;`.
//
// Every operand is walked over one merged geometry (launch.rs). A thread takes PER
// consecutive positions: it locates the first with one division per dim and steps to the next
// ones by adding strides (a carry on a dim's end), so the divisions are paid once per PER
// elements; 32-bit divisions when the geometry fits.

#define PER 4

struct Ptrs6 { u64 p[6]; };
struct Strs6 { Str s[6]; };

template <int N> struct Cursor { i64 o[N]; i64 c[MAXD]; };

template <int N>
__device__ __forceinline__ void seek(const Geo& g, const Str* s, i64 i, bool narrow, Cursor<N>& u) {
    for (int k = 0; k < N; ++k) u.o[k] = s[k].off;
    for (int d = g.ndim - 1; d > 0; --d) {
        i64 n = g.size[d], q;
        if (narrow) q = (i64)((u32)i / (u32)n); else q = i / n;
        i64 r = i - q * n;
        u.c[d] = r;
        for (int k = 0; k < N; ++k) u.o[k] += r * s[k].st[d];
        i = q;
    }
    u.c[0] = i;
    for (int k = 0; k < N; ++k) u.o[k] += i * s[k].st[0];
}

template <int N>
__device__ __forceinline__ void step(const Geo& g, const Str* s, Cursor<N>& u) {
    int d = g.ndim - 1;
    while (true) {
        for (int k = 0; k < N; ++k) u.o[k] += s[k].st[d];
        if (++u.c[d] < g.size[d] || d == 0) break;
        for (int k = 0; k < N; ++k) u.o[k] -= g.size[d] * s[k].st[d];
        u.c[d] = 0;
        --d;
    }
}

// Visits positions [i0, min(i0 + PER, n)) of the walk with `f(cursor offsets)`.
#define WALK(N, ...) \
    const i64 i0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) * PER; \
    if (i0 >= n) return; \
    Cursor<N> u; \
    seek<N>(g, s.s, i0, narrow, u); \
    const int len = (int)(n - i0 < PER ? n - i0 : PER); \
    for (int e = 0; e < len; ++e) { \
        if (e) step<N>(g, s.s, u); \
        const i64* o = u.o; \
        __VA_ARGS__ \
    }

// Rotary: [ya, yb, a, b, cos, sin]; inverse negates sin.
extern "C" __global__ void k_rotary(Geo g, i64 n, int narrow, Ptrs6 p, Strs6 s, int inverse) {
    T* ya = (T*)p.p[0]; T* yb = (T*)p.p[1];
    const T* a = (const T*)p.p[2]; const T* b = (const T*)p.p[3];
    const C* cs = (const C*)p.p[4]; const C* sn = (const C*)p.p[5];
    WALK(6, {
        C x = L(a[o[2]]), y = L(b[o[3]]);
        C c = cs[o[4]], t = sn[o[5]];
        if (inverse) t = -t;
        ya[o[0]] = S(x * c - y * t);
        yb[o[1]] = S(x * t + y * c);
    })
}

// act(x) (act: 0 silu, 1 gelu, 2 gelu_tanh), as the unary ops compute it.
__device__ __forceinline__ C gate(int act, C x) {
    if (act == 0) return x * sigmoid(x);
    if (act == 1) return gelu_erf(x);
    return gelu_tanh(x);
}

// act'(x), in the order of the CPU's gate_grad (cpu/pointwise.rs).
__device__ __forceinline__ C gate_slope(int act, C x) {
    const C one = (C)1, half = (C)0.5;
    if (act == 0) {
        C s = sigmoid(x);
        return s * (x * (one - s) + one);
    }
    if (act == 1) {
        C cdf = half * (one + m_erf(x * (C)0.7071067811865476));
        C pdf = m_exp(-half * x * x) * (C)0.3989422804014327;
        return cdf + x * pdf;
    }
    const C beta = (C)0.7978845608028654, kappa = (C)0.044715;
    C x2 = x * x;
    C t = m_tanh(beta * (x + kappa * x2 * x));
    return half * (one + t) + half * x * (one - t * t) * (one + (C)3 * kappa * x2) * beta;
}

// Gated: [y, gate, up].
extern "C" __global__ void k_gated(Geo g, i64 n, int narrow, Ptrs6 p, Strs6 s, int act) {
    T* y = (T*)p.p[0];
    const T* gt = (const T*)p.p[1]; const T* up = (const T*)p.p[2];
    WALK(3, {
        C x = L(gt[o[1]]);
        y[o[0]] = S(gate(act, x) * L(up[o[2]]));
    })
}

// Gated backward: [dgate, dup, dy, gate, up].
extern "C" __global__ void k_gated_backward(Geo g, i64 n, int narrow, Ptrs6 p, Strs6 s, int act) {
    T* dg = (T*)p.p[0]; T* du = (T*)p.p[1];
    const T* dy = (const T*)p.p[2]; const T* gt = (const T*)p.p[3]; const T* up = (const T*)p.p[4];
    WALK(5, {
        C d = L(dy[o[2]]), x = L(gt[o[3]]), v = L(up[o[4]]);
        dg[o[0]] = S(d * v * gate_slope(act, x));
        du[o[1]] = S(d * gate(act, x));
    })
}
