// Elementwise kernels. A module is generated per (family, dtype): the host defines T (the
// element type), then one line per op, e.g. `UNARY(exp, T, E<T>::st(m_exp(E<T>::ld(x))))`.
//
// Every kernel addresses every operand — the output included — through its (Geo, Str):
// `contig` is a fast path the host picks when all operands are one dense run (DESIGN.md
// invariant 1), never a different semantics.

#define LOAD(p, s, i) (contig ? (p)[(s).off + (i)] : (p)[at(g, (s), (i))])

// ---- the vectorised dense path (contig == 2) ------------------------------------------------
// Every operand is one dense run whose first element is aligned to 4 elements (the host
// checks), so each thread moves 4 consecutive elements per access: 16-byte loads for f32,
// which HBM needs to reach its bandwidth. The tail (n mod 4) goes element by element.
template <class X> struct alignas(4 * sizeof(X)) V4 { X v[4]; };
#define VEC_BEGIN \
    if (contig == 2) { \
        const i64 nv_ = n >> 2; \
        for (i64 k_ = (i64)blockIdx.x * blockDim.x + threadIdx.x; k_ < nv_; k_ += (i64)gridDim.x * blockDim.x) {
#define VEC_TAIL \
        } \
        for (i64 i = (nv_ << 2) + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
#define VEC_END } return; }
// operand P (element type X, strides S) as 4-vectors
#define VP(X, P, S) ((const V4<X>*)((P) + (S).off))
#define VO(X, P, S) ((V4<X>*)((P) + (S).off))

// ---- the tiled walk: an input whose fastest dim is not the output's -------------------------
// The host moves that input's fastest dim to Geo position ndim-2, so a tile is 32 x 32
// positions of the last two dims (rows, cols) at one batch index. Each input is staged
// through shared memory, read along whichever of the two dims is its fastest (bit k+1 of
// `tmask` for input k; bit 0 for the output), so every global access is coalesced. Blocks
// are 32 x 4 threads; each thread moves 8 elements per operand per tile. Results do not
// depend on the walk: an elementwise op computes each position on its own.
#define TILE_LOOP(NB) \
    const int nd = g.ndim; \
    const i64 rows_ = g.size[nd - 2], cols_ = g.size[nd - 1]; \
    const i64 tr = (rows_ + 31) / 32, tc = (cols_ + 31) / 32, per = tr * tc; \
    const int tx = threadIdx.x, ty = threadIdx.y; /* blocks of 32 x 4 threads */ \
    for (i64 tile = blockIdx.x; tile < (NB) * per; tile += gridDim.x)
#define TILE_ORIGIN \
    const i64 bt = tile / per, rem = tile - bt * per; \
    const i64 r0 = (rem / tc) * 32, c0 = (rem - (rem / tc) * tc) * 32; \
    const i64 lin = (bt * rows_ + r0) * cols_ + c0;
// stage input P (strides S) into shared tile SH, read along its fastest dim (flag TR)
#define TILE_STAGE(SH_, P_, S_, TR_) do { \
        const i64 base_ = at(g, (S_), lin), sr_ = (S_).st[nd - 2], sc_ = (S_).st[nd - 1]; \
        _Pragma("unroll") for (int j = 0; j < 8; ++j) { \
            const int r = (TR_) ? tx : ty + 4 * j, c = (TR_) ? ty + 4 * j : tx; \
            if (r0 + r < rows_ && c0 + c < cols_) SH_[r][c] = (P_)[base_ + r * sr_ + c * sc_]; \
        } } while (0)
// for each position (r, c) of the tile held by this thread, in the output's fast order: BODY
// with `oi` = the output's element offset
#define TILE_EMIT(S_, TR_, BODY_) do { \
        const i64 base_ = at(g, (S_), lin), sr_ = (S_).st[nd - 2], sc_ = (S_).st[nd - 1]; \
        _Pragma("unroll") for (int j = 0; j < 8; ++j) { \
            const int r = (TR_) ? tx : ty + 4 * j, c = (TR_) ? ty + 4 * j : tx; \
            if (r0 + r < rows_ && c0 + c < cols_) { const i64 oi = base_ + r * sr_ + c * sc_; BODY_; } \
        } } while (0)
#define STORE(p, s, i, v) do { if (contig) (p)[(s).off + (i)] = (v); else (p)[at(g, (s), (i))] = (v); } while (0)

// out[i] = EXPR(x)
#define UNARY(NAME, OUT, EXPR) \
    extern "C" __global__ void k_##NAME(const Geo g, const i64 n, const int contig, \
                                    OUT* __restrict__ o, const Str so, const T* a, const Str sa) { \
        VEC_BEGIN V4<T> xa_ = VP(T, a, sa)[k_]; V4<OUT> r_; \
            _Pragma("unroll") for (int j_ = 0; j_ < 4; ++j_) { T x = xa_.v[j_]; r_.v[j_] = (OUT)(EXPR); } \
            VO(OUT, o, so)[k_] = r_; \
        VEC_TAIL T x = a[sa.off + i]; o[so.off + i] = (OUT)(EXPR); VEC_END \
        GRID_LOOP(i, n) { T x = LOAD(a, sa, i); STORE(o, so, i, (OUT)(EXPR)); } \
    } \
    extern "C" __global__ void k_tiled(const Geo g, const i64 nb, const int tmask, \
                                   OUT* o, const Str so, const T* a, const Str sa) { \
        __shared__ T ta[32][33]; \
        TILE_LOOP(nb) { TILE_ORIGIN \
            TILE_STAGE(ta, a, sa, tmask & 2); __syncthreads(); \
            TILE_EMIT(so, tmask & 1, { T x = ta[r][c]; o[oi] = (OUT)(EXPR); }); __syncthreads(); } \
    }

// out[i] = EXPR(x, y)
#define BINARY(NAME, OUT, EXPR) \
    extern "C" __global__ void k_##NAME(const Geo g, const i64 n, const int contig, \
                                    OUT* o, const Str so, const T* a, const Str sa, \
                                    const T* b, const Str sb) { \
        VEC_BEGIN V4<T> xa_ = VP(T, a, sa)[k_]; V4<T> yb_ = VP(T, b, sb)[k_]; V4<OUT> r_; \
            _Pragma("unroll") for (int j_ = 0; j_ < 4; ++j_) { T x = xa_.v[j_]; T y = yb_.v[j_]; r_.v[j_] = (OUT)(EXPR); } \
            VO(OUT, o, so)[k_] = r_; \
        VEC_TAIL T x = a[sa.off + i]; T y = b[sb.off + i]; o[so.off + i] = (OUT)(EXPR); VEC_END \
        GRID_LOOP(i, n) { T x = LOAD(a, sa, i); T y = LOAD(b, sb, i); STORE(o, so, i, (OUT)(EXPR)); } \
    } \
    extern "C" __global__ void k_tiled(const Geo g, const i64 nb, const int tmask, \
                                   OUT* o, const Str so, const T* a, const Str sa, \
                                   const T* b, const Str sb) { \
        __shared__ T ta[32][33]; \
        __shared__ T tb[32][33]; \
        TILE_LOOP(nb) { TILE_ORIGIN \
            TILE_STAGE(ta, a, sa, tmask & 2); TILE_STAGE(tb, b, sb, tmask & 4); __syncthreads(); \
            TILE_EMIT(so, tmask & 1, { T x = ta[r][c]; T y = tb[r][c]; o[oi] = (OUT)(EXPR); }); \
            __syncthreads(); } \
    }

// out[i] = EXPR(x, y, z); x has type A (bool for `where`), vf/vi carry a scalar operand.
#define TERNARY(NAME, A, EXPR) \
    extern "C" __global__ void k_##NAME(const Geo g, const i64 n, const int contig, \
                                    T* o, const Str so, const A* a, const Str sa, \
                                    const T* b, const Str sb, const T* c, const Str sc, \
                                    const double vf, const i64 vi) { \
        VEC_BEGIN V4<A> xa_ = VP(A, a, sa)[k_]; V4<T> yb_ = VP(T, b, sb)[k_]; \
            V4<T> zc_ = VP(T, c, sc)[k_]; V4<T> r_; \
            _Pragma("unroll") for (int j_ = 0; j_ < 4; ++j_) { \
                A x = xa_.v[j_]; T y = yb_.v[j_]; T z = zc_.v[j_]; r_.v[j_] = (T)(EXPR); } \
            VO(T, o, so)[k_] = r_; \
        VEC_TAIL A x = a[sa.off + i]; T y = b[sb.off + i]; T z = c[sc.off + i]; \
            o[so.off + i] = (T)(EXPR); VEC_END \
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
        VEC_BEGIN V4<T> xa_ = VP(T, a, sa)[k_]; V4<D> r_; \
            _Pragma("unroll") for (int j_ = 0; j_ < 4; ++j_) { T x = xa_.v[j_]; r_.v[j_] = (HOW); } \
            VO(D, o, so)[k_] = r_; \
        VEC_TAIL T x = a[sa.off + i]; o[so.off + i] = (HOW); VEC_END \
        GRID_LOOP(i, n) { T x = LOAD(a, sa, i); STORE(o, so, i, (HOW)); } \
    } \
    extern "C" __global__ void k_tiled(const Geo g, const i64 nb, const int tmask, \
                                   D* o, const Str so, const T* a, const Str sa) { \
        __shared__ T ta[32][33]; \
        TILE_LOOP(nb) { TILE_ORIGIN \
            TILE_STAGE(ta, a, sa, tmask & 2); __syncthreads(); \
            TILE_EMIT(so, tmask & 1, { T x = ta[r][c]; o[oi] = (HOW); }); __syncthreads(); } \
    }
