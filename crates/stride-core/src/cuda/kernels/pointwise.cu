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

// PER consecutive elements of one operand, one vector access (the host sets `vec` only when
// every operand's innermost dim is unit-stride, a multiple of PER long and PER-aligned, so a
// thread's PER positions are one aligned run of each operand).
struct __align__(PER * sizeof(T)) TV { T v[PER]; };
struct __align__(PER * sizeof(C)) CV { C v[PER]; };

// The thread's first position and its cursor; returns from the kernel past the end.
#define START(N) \
    const i64 i0 = ((i64)blockIdx.x * blockDim.x + threadIdx.x) * PER; \
    if (i0 >= n) return; \
    Cursor<N> u; \
    seek<N>(g, s.s, i0, narrow, u); \
    const int len = (int)(n - i0 < PER ? n - i0 : PER);

// Visits the thread's positions one by one (`o`: their offsets), stepping the cursor.
#define EACH(N, ...) \
    _Pragma("unroll") \
    for (int e = 0; e < PER; ++e) { \
        if (e >= len) break; \
        if (e) step<N>(g, s.s, u); \
        const i64* o = u.o; \
        __VA_ARGS__ \
    }

__device__ __forceinline__ void rotate(C x, C y, C c, C t, int inverse, T& ra, T& rb) {
    if (inverse) t = -t;
    ra = S(x * c - y * t);
    rb = S(x * t + y * c);
}

// Rotary: [ya, yb, a, b, cos, sin]; inverse negates sin.
extern "C" __global__ void k_rotary(const __grid_constant__ Geo g, const i64 n, const int narrow,
                                    const int vec, const __grid_constant__ Ptrs6 p,
                                    const __grid_constant__ Strs6 s, const int inverse) {
    T* ya = (T*)p.p[0]; T* yb = (T*)p.p[1];
    const T* a = (const T*)p.p[2]; const T* b = (const T*)p.p[3];
    const C* cs = (const C*)p.p[4]; const C* sn = (const C*)p.p[5];
    START(6)
    if (vec) {
        const TV va = *(const TV*)(a + u.o[2]), vb = *(const TV*)(b + u.o[3]);
        const CV vc = *(const CV*)(cs + u.o[4]), vs = *(const CV*)(sn + u.o[5]);
        TV ra, rb;
#pragma unroll
        for (int e = 0; e < PER; ++e)
            rotate(L(va.v[e]), L(vb.v[e]), vc.v[e], vs.v[e], inverse, ra.v[e], rb.v[e]);
        *(TV*)(ya + u.o[0]) = ra;
        *(TV*)(yb + u.o[1]) = rb;
        return;
    }
    EACH(6, rotate(L(a[o[2]]), L(b[o[3]]), cs[o[4]], sn[o[5]], inverse, ya[o[0]], yb[o[1]]);)
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
                                   const int vec, const __grid_constant__ Ptrs6 p,
                                   const __grid_constant__ Strs6 s, const int act) {
    T* y = (T*)p.p[0];
    const T* gt = (const T*)p.p[1]; const T* up = (const T*)p.p[2];
    START(3)
    if (vec) {
        const TV vg = *(const TV*)(gt + u.o[1]), vu = *(const TV*)(up + u.o[2]);
        TV r;
#pragma unroll
        for (int e = 0; e < PER; ++e) r.v[e] = S(gate(act, L(vg.v[e])) * L(vu.v[e]));
        *(TV*)(y + u.o[0]) = r;
        return;
    }
    EACH(3, y[o[0]] = S(gate(act, L(gt[o[1]])) * L(up[o[2]]));)
}

__device__ __forceinline__ void gated_grads(int act, C d, C x, C v, T& dg, T& du) {
    dg = S(d * v * gate_slope(act, x));
    du = S(d * gate(act, x));
}

// Gated backward: [dgate, dup, dy, gate, up].
extern "C" __global__ void k_gated_backward(const __grid_constant__ Geo g, const i64 n,
                                            const int narrow, const int vec,
                                            const __grid_constant__ Ptrs6 p,
                                            const __grid_constant__ Strs6 s, const int act) {
    T* dg = (T*)p.p[0]; T* du = (T*)p.p[1];
    const T* dy = (const T*)p.p[2]; const T* gt = (const T*)p.p[3]; const T* up = (const T*)p.p[4];
    START(5)
    if (vec) {
        const TV vd = *(const TV*)(dy + u.o[2]), vg = *(const TV*)(gt + u.o[3]);
        const TV vu = *(const TV*)(up + u.o[4]);
        TV rg, ru;
#pragma unroll
        for (int e = 0; e < PER; ++e)
            gated_grads(act, L(vd.v[e]), L(vg.v[e]), L(vu.v[e]), rg.v[e], ru.v[e]);
        *(TV*)(dg + u.o[0]) = rg;
        *(TV*)(du + u.o[1]) = ru;
        return;
    }
    EACH(5, gated_grads(act, L(dy[o[2]]), L(gt[o[3]]), L(up[o[4]]), dg[o[0]], du[o[1]]);)
}
