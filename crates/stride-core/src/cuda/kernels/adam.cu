// Adam/AdamW steps (backend/optim.rs): p, m, v (and vmax: amsgrad) updated in place from g.
// Each position is computed as the composed ops compute it (Backend::adam's default body):
// R() rounds to T wherever the composed path stores an intermediate tensor, the scalars
// arrive rounded as the composed ops round them, and with --fmad=false every product and sum
// rounds on its own. k_adam walks one parameter's operands through their layouts; k_adam_multi
// steps up to MT dense parameters in one launch. The host defines T, C, L and S.

#define R(v) L(S(v))
#define ADAM_MAXIMIZE 1
#define ADAM_DECOUPLED 2
#define ADAM_L2 4
#define ADAM_L2_ONE 8
#define ADAM_AMSGRAD 16
#define ADAM_DEVICE_STEP 32

// The flags and scalars of one step (AdamScalars on the host). With ADAM_DEVICE_STEP (a step
// a gradient scaler may skip) bc2s and neg_step come from the step count on the device
// instead: `found` (a const float*) nonzero skips the step, and each parameter's counter
// (two doubles) is read at slot rslot and count + 1 (+ 0 when skipped) written to the other.
struct AdamArgs {
    int flags;
    double decay, wd, w1, b2, omb2, bc2s, eps, neg_step;
    double lr, beta1, beta2;
    u64 found;
    int rslot;
};

// b^n by squaring (pow_by_squaring on the host multiplies in the same order).
__device__ __forceinline__ double pow_sq(double b, u64 n) {
    double r = 1.0;
    while (n) {
        if (n & 1) r *= b;
        b *= b;
        n >>= 1;
    }
    return r;
}

// This step's bc2s and neg_step into (bc2s, neg_step): from the host's scalars, or with
// ADAM_DEVICE_STEP from the counter (the leader thread writes the new count). False when the
// step is skipped.
__device__ __forceinline__ bool step_scalars(const AdamArgs& s, double* counter, bool leader,
                                             double& bc2s, double& neg_step) {
    bc2s = s.bc2s;
    neg_step = s.neg_step;
    if (!(s.flags & ADAM_DEVICE_STEP)) return true;
    const bool skip = *(const float*)s.found != 0.0f;
    const double n = counter[s.rslot] + (skip ? 0.0 : 1.0);
    if (leader) counter[1 - s.rslot] = n;
    if (skip) return false;
    const u64 k = (u64)n;
    bc2s = E<T>::to_f64(E<T>::from_f64(sqrt(1.0 - pow_sq(s.beta2, k))));
    neg_step = -(s.lr / (1.0 - pow_sq(s.beta1, k)));
    return true;
}

// One position, in registers; `vmax` is read and written only with ADAM_AMSGRAD.
__device__ __forceinline__ void adam_v(const AdamArgs& s, const C bc2s, const C neg_step,
                                       T& p, const T gr, T& m, T& v, T& vmax) {
    const int flags = s.flags;
    C gi = L(gr);
    if (flags & ADAM_MAXIMIZE) gi = R(-gi);
    C pi = L(p);
    if (flags & ADAM_DECOUPLED) pi = R(pi * (C)s.decay);
    if (flags & ADAM_L2) gi = R(gi + ((flags & ADAM_L2_ONE) ? pi : R(pi * (C)s.wd)));
    const C mi = R(lerp_f(L(m), gi, (C)s.w1));
    C vi = R(L(v) * (C)s.b2);
    vi = R(vi + (C)s.omb2 * gi * gi);
    C root;
    if (flags & ADAM_AMSGRAD) {
        const C mx = R(max_nan(L(vmax), vi));
        vmax = S(mx);
        root = R(m_sqrt(mx));
    } else {
        root = R(m_sqrt(vi));
    }
    C denom = R(root / bc2s);
    denom = R(denom + (C)s.eps);
    pi = R(pi + neg_step * (mi / denom));
    p = S(pi);
    m = S(mi);
    v = S(vi);
}

// One position through pointers.
__device__ __forceinline__ void adam_at(const AdamArgs& s, const C bc2s, const C neg_step, T* p,
                                        const T* gr, T* m, T* v, T* vmax) {
    const bool ams = s.flags & ADAM_AMSGRAD;
    T pv = *p, mv = *m, vv = *v, xv = ams ? *vmax : pv;
    adam_v(s, bc2s, neg_step, pv, *gr, mv, vv, xv);
    *p = pv;
    *m = mv;
    *v = vv;
    if (ams) *vmax = xv;
}

extern "C" __global__ void k_adam(const __grid_constant__ Geo g, const i64 n, const int contig,
                                  T* p, const __grid_constant__ Str sp,
                                  const T* gr, const __grid_constant__ Str sg,
                                  T* m, const __grid_constant__ Str sm,
                                  T* v, const __grid_constant__ Str sv,
                                  T* vmax, const __grid_constant__ Str svmax,
                                  const __grid_constant__ AdamArgs s, double* counter) {
    double bc2s_d, neg_step_d;
    const bool leader = blockIdx.x == 0 && threadIdx.x == 0;
    if (!step_scalars(s, counter, leader, bc2s_d, neg_step_d)) return;
    const C bc2s = (C)bc2s_d, neg_step = (C)neg_step_d;
    GRID_LOOP(i, n) {
#define OFF(st) (contig ? (st).off + i : at(g, (st), i))
        adam_at(s, bc2s, neg_step, p + OFF(sp), gr + OFF(sg), m + OFF(sm), v + OFF(sv), vmax + OFF(svmax));
#undef OFF
    }
}

// Up to MT dense parameters (each operand one run of n[t] elements from its base address):
// block b takes CHUNK elements of the parameter t whose blocks chunk0[t]..chunk0[t + 1]
// include b. With `vec` (every address aligned to PER elements) a thread takes PER
// consecutive positions with one vector access per operand.
#define MT 36
#define CHUNK 65536
#define PER 4
struct AdamMulti {
    u64 p[MT], g[MT], m[MT], v[MT], vmax[MT], counter[MT];
    i64 n[MT];
    int chunk0[MT + 1];
};
struct __align__(PER * sizeof(T)) TV { T v[PER]; };

extern "C" __global__ void k_adam_multi(const __grid_constant__ AdamMulti a, const int count,
                                        const int vec, const __grid_constant__ AdamArgs s) {
    const int b = blockIdx.x;
    int t = 0;
    while (t + 1 < count && a.chunk0[t + 1] <= b) ++t;
    T* p = (T*)a.p[t];
    const T* gr = (const T*)a.g[t];
    T* m = (T*)a.m[t];
    T* v = (T*)a.v[t];
    T* vmax = (T*)a.vmax[t];
    double bc2s_d, neg_step_d;
    const bool leader = b == a.chunk0[t] && threadIdx.x == 0;
    if (!step_scalars(s, (double*)a.counter[t], leader, bc2s_d, neg_step_d)) return;
    const C bc2s = (C)bc2s_d, neg_step = (C)neg_step_d;
    const i64 start = (i64)(b - a.chunk0[t]) * CHUNK;
    const i64 end = start + CHUNK < a.n[t] ? start + CHUNK : a.n[t];
    i64 tail = start;
    if (vec) {
        const bool ams = s.flags & ADAM_AMSGRAD;
        tail = start + (end - start) / PER * PER;
        for (i64 i = start + (i64)PER * threadIdx.x; i < tail; i += (i64)PER * blockDim.x) {
            TV pv = *(TV*)(p + i), mv = *(TV*)(m + i), vv = *(TV*)(v + i);
            const TV gv = *(const TV*)(gr + i);
            TV xv = ams ? *(TV*)(vmax + i) : pv;
#pragma unroll
            for (int e = 0; e < PER; ++e)
                adam_v(s, bc2s, neg_step, pv.v[e], gv.v[e], mv.v[e], vv.v[e], xv.v[e]);
            *(TV*)(p + i) = pv;
            *(TV*)(m + i) = mv;
            *(TV*)(v + i) = vv;
            if (ams) *(TV*)(vmax + i) = xv;
        }
    }
    for (i64 i = tail + threadIdx.x; i < end; i += blockDim.x)
        adam_at(s, bc2s, neg_step, p + i, gr + i, m + i, v + i, vmax + i);
}
