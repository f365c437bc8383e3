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

// Every loop over dims is unrolled over MAXD with a guard, so the cursor's arrays are indexed
// by constants and stay in registers.
template <int N>
__device__ __forceinline__ void seek(const Geo& g, const Str* s, i64 i, bool narrow, Cursor<N>& u) {
#pragma unroll
    for (int k = 0; k < N; ++k) u.o[k] = s[k].off;
#pragma unroll
    for (int d = MAXD - 1; d > 0; --d) {
        if (d >= g.ndim) continue;
        i64 n = g.size[d], q;
        if (narrow) q = (i64)((u32)i / (u32)n); else q = i / n;
        i64 r = i - q * n;
        u.c[d] = r;
#pragma unroll
        for (int k = 0; k < N; ++k) u.o[k] += r * s[k].st[d];
        i = q;
    }
    u.c[0] = i;
#pragma unroll
    for (int k = 0; k < N; ++k) u.o[k] += i * s[k].st[0];
}

template <int N>
__device__ __forceinline__ void step(const Geo& g, const Str* s, Cursor<N>& u) {
#pragma unroll
    for (int d = MAXD - 1; d >= 0; --d) {
        if (d >= g.ndim) continue;
#pragma unroll
        for (int k = 0; k < N; ++k) u.o[k] += s[k].st[d];
        if (++u.c[d] < g.size[d] || d == 0) break;
#pragma unroll
        for (int k = 0; k < N; ++k) u.o[k] -= g.size[d] * s[k].st[d];
        u.c[d] = 0;
    }
}

// Visits positions [i0, min(i0 + PER, n)) of the walk, `o` the offsets of each.
#define WALK(N, ...) \
    const i64 i0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) * PER; \
    if (i0 >= n) return; \
    Cursor<N> u; \
    seek<N>(g, s.s, i0, narrow, u); \
    const int len = (int)(n - i0 < PER ? n - i0 : PER); \
    _Pragma("unroll") \
    for (int e = 0; e < PER; ++e) { \
        if (e >= len) break; \
        if (e) step<N>(g, s.s, u); \
        const i64* o = u.o; \
        __VA_ARGS__ \
    }

// Rotary: [ya, yb, a, b, cos, sin]; inverse negates sin.
extern "C" __global__ void k_rotary(const __grid_constant__ Geo g, const i64 n, const int narrow,
                                  const __grid_constant__ Ptrs6 p, const __grid_constant__ Strs6 s, int inverse) {
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

// act(x) (act: 0 silu, 1 gelu, 2 gelu_tanh) and act'(x), in the order of the CPU's
// gate_grad (cpu/pointwise.rs). The GELUs use forms without cancellation for negative x:
// 1 + erf(z) = erfc(−z), and with s = sigmoid(2y), 1 + tanh(y) = 2s, 1 − tanh²(y) = 4s(1 − s).
__device__ __forceinline__ C tanh_arg(C x) {
    const C beta = (C)0.7978845608028654, kappa = (C)0.044715;
    return (C)2 * (beta * (x + kappa * x * x * x));
}
__device__ __forceinline__ C gate(int act, C x) {
    if (act == 0) return x * sigmoid(x);
    if (act == 1) return (C)0.5 * x * m_erfc(-x * (C)0.7071067811865476);
    return x * sigmoid(tanh_arg(x));
}
__device__ __forceinline__ C gate_slope(int act, C x) {
    const C one = (C)1, half = (C)0.5;
    if (act == 0) {
        C s = sigmoid(x);
        return s * (x * (one - s) + one);
    }
    if (act == 1) {
        C cdf = half * m_erfc(-x * (C)0.7071067811865476);
        C pdf = m_exp(-half * x * x) * (C)0.3989422804014327;
        return cdf + x * pdf;
    }
    const C beta = (C)0.7978845608028654, kappa = (C)0.044715;
    C s = sigmoid(tanh_arg(x));
    return s + (C)2 * x * (s * (one - s)) * (one + (C)3 * kappa * x * x) * beta;
}

// Gated: [y, gate, up].
extern "C" __global__ void k_gated(const __grid_constant__ Geo g, const i64 n, const int narrow,
                                  const __grid_constant__ Ptrs6 p, const __grid_constant__ Strs6 s, int act) {
    T* y = (T*)p.p[0];
    const T* gt = (const T*)p.p[1]; const T* up = (const T*)p.p[2];
    WALK(3, {
        C x = L(gt[o[1]]);
        y[o[0]] = S(gate(act, x) * L(up[o[2]]));
    })
}

// Gated backward: [dgate, dup, dy, gate, up].
extern "C" __global__ void k_gated_backward(const __grid_constant__ Geo g, const i64 n, const int narrow,
                                  const __grid_constant__ Ptrs6 p, const __grid_constant__ Strs6 s, int act) {
    T* dg = (T*)p.p[0]; T* du = (T*)p.p[1];
    const T* dy = (const T*)p.p[2]; const T* gt = (const T*)p.p[3]; const T* up = (const T*)p.p[4];
    WALK(5, {
        C d = L(dy[o[2]]), x = L(gt[o[3]]), v = L(up[o[4]]);
        dg[o[0]] = S(d * v * gate_slope(act, x));
        du[o[1]] = S(d * gate(act, x));
    })
}
