// One Adam/AdamW step of one parameter (backend/optim.rs): p, m, v (and vmax: amsgrad)
// updated in place from g, every operand through its own (Geo, Str). Each position is
// computed as the composed ops compute it (Backend::adam's default body): R() rounds to T
// wherever the composed path stores an intermediate tensor, the scalars arrive rounded as
// the composed ops round them, and with --fmad=false every product and sum rounds on its own.
// The host defines T, C, L and S.

#define R(v) L(S(v))
#define ADAM_MAXIMIZE 1
#define ADAM_DECOUPLED 2
#define ADAM_L2 4
#define ADAM_L2_ONE 8
#define ADAM_AMSGRAD 16

extern "C" __global__ void k_adam(const __grid_constant__ Geo g, const i64 n, const int contig,
                                  T* p, const __grid_constant__ Str sp,
                                  const T* gr, const __grid_constant__ Str sg,
                                  T* m, const __grid_constant__ Str sm,
                                  T* v, const __grid_constant__ Str sv,
                                  T* vmax, const __grid_constant__ Str svmax,
                                  const int flags, const double decay, const double wd,
                                  const double w1, const double b2, const double omb2,
                                  const double bc2s, const double eps, const double neg_step) {
    GRID_LOOP(i, n) {
        C gi = L(LOAD(gr, sg, i));
        if (flags & ADAM_MAXIMIZE) gi = R(-gi);
        C pi = L(LOAD(p, sp, i));
        if (flags & ADAM_DECOUPLED) pi = R(pi * (C)decay);
        if (flags & ADAM_L2) gi = R(gi + ((flags & ADAM_L2_ONE) ? pi : R(pi * (C)wd)));
        const C mi = R(lerp_f(L(LOAD(m, sm, i)), gi, (C)w1));
        C vi = R(L(LOAD(v, sv, i)) * (C)b2);
        vi = R(vi + (C)omb2 * gi * gi);
        C root;
        if (flags & ADAM_AMSGRAD) {
            const C mx = R(max_nan(L(LOAD(vmax, svmax, i)), vi));
            STORE(vmax, svmax, i, S(mx));
            root = R(m_sqrt(mx));
        } else {
            root = R(m_sqrt(vi));
        }
        C denom = R(root / (C)bc2s);
        denom = R(denom + (C)eps);
        pi = R(pi + (C)neg_step * (mi / denom));
        STORE(p, sp, i, S(pi));
        STORE(m, sm, i, S(mi));
        STORE(v, sv, i, S(vi));
    }
}
