// Elementwise kernels. A module is generated per (family, dtype): the host defines T (the
// element type), then one line per op, e.g. `UNARY(exp, T, E<T>::st(m_exp(E<T>::ld(x))))`.
//
// Every kernel addresses every operand — the output included — through its (Geo, Str):
// `contig` is a fast path the host picks when all operands are one dense run (DESIGN.md
// invariant 1), never a different semantics.

#define LOAD(p, s, i) (contig ? (p)[(s).off + (i)] : (p)[at(g, (s), (i))])
#define STORE(p, s, i, v) do { if (contig) (p)[(s).off + (i)] = (v); else (p)[at(g, (s), (i))] = (v); } while (0)

// out[i] = EXPR(x)
#define UNARY(NAME, OUT, EXPR) \
    extern "C" __global__ void k_##NAME(const Geo g, const i64 n, const int contig, \
                                    OUT* __restrict__ o, const Str so, const T* a, const Str sa) { \
        GRID_LOOP(i, n) { T x = LOAD(a, sa, i); STORE(o, so, i, (OUT)(EXPR)); } \
    }

// out[i] = EXPR(x, y)
#define BINARY(NAME, OUT, EXPR) \
    extern "C" __global__ void k_##NAME(const Geo g, const i64 n, const int contig, \
                                    OUT* o, const Str so, const T* a, const Str sa, \
                                    const T* b, const Str sb) { \
        GRID_LOOP(i, n) { T x = LOAD(a, sa, i); T y = LOAD(b, sb, i); STORE(o, so, i, (OUT)(EXPR)); } \
    }

// out[i] = EXPR(x, y, z); x has type A (bool for `where`), vf/vi carry a scalar operand.
#define TERNARY(NAME, A, EXPR) \
    extern "C" __global__ void k_##NAME(const Geo g, const i64 n, const int contig, \
                                    T* o, const Str so, const A* a, const Str sa, \
                                    const T* b, const Str sb, const T* c, const Str sc, \
                                    const double vf, const i64 vi) { \
        GRID_LOOP(i, n) { A x = LOAD(a, sa, i); T y = LOAD(b, sb, i); T z = LOAD(c, sc, i); \
                          STORE(o, so, i, (T)(EXPR)); } \
    }

// *flag = 1 if any element of b is zero (mode 0) or negative (mode 1): integer division and
// integer pow refuse such operands before writing anything, as on the CPU.
#define ANY_BAD(NAME) \
    extern "C" __global__ void k_##NAME(const Geo g, const i64 n, const T* b, const Str sb, \
                                    const int mode, int* flag) { \
        const int contig = 0; \
        GRID_LOOP(i, n) { T y = LOAD(b, sb, i); if (mode == 0 ? y == (T)0 : is_neg(y)) *flag = 1; } \
    }

// out[i] = cast(x) from T to D, by T's category (Element::cast of the CPU backend).
#define CAST(NAME, D, HOW) \
    extern "C" __global__ void k_##NAME(const Geo g, const i64 n, const int contig, \
                                    D* o, const Str so, const T* a, const Str sa) { \
        GRID_LOOP(i, n) { T x = LOAD(a, sa, i); STORE(o, so, i, (HOW)); } \
    }
