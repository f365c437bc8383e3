// Elementwise kernels. A module is generated per (family, dtype): the host defines T (the
// element type), then one line per op, e.g. `UNARY(exp, T, E<T>::st(m_exp(E<T>::ld(x))))`.
//
// Every kernel addresses every operand — the output included — through its (Geo, Str):
// `contig` is a fast path the host picks when all operands are one dense run (DESIGN.md
// invariant 1), never a different semantics; so are the k_<name>_dense kernels below and the
// tiled walk. Geo and Str parameters are __grid_constant__: read in place from the parameter
// space (without it, nvcc copied them to a 300-500 byte per-thread stack frame).

#define LOAD(p, s, i) (contig ? (p)[(s).off + (i)] : (p)[at(g, (s), (i))])

// ---- the dense kernels (k_<name>_dense) ------------------------------------------------------
// The host launches these instead of the strided kernel when the walk is dense row by row:
// `rw.rows` rows of n elements, the output and every input dense (stride 1) within a row, each
// row's first element aligned to 4 elements — or an input one element per row broadcast to the
// whole row (inner stride 0: bit k-1 of `bc` for input k, read as a scalar). Row r of operand
// k starts rw.st[k] · r elements after its pointer (rw.st[k] = 0: the same row for all, a bias).
// A single row (rows = 1) is a plain dense run; several rows (a broadcast along the rows, as a
// bias add [B, n] + [n]) come with n a multiple of 4, so every vector lies in one row.
// No geometry: pointers arrive at the first element. Each thread moves DU 4-element vectors
// per operand per step (16-byte accesses for f32), every load issued before any store, in a
// grid-stride loop over steps of DU x blockDim vectors of all rows (vector u of a thread's step
// is b_ + u * blockDim, so a warp's accesses stay contiguous). The n mod 4 tail of a single row
// goes one by one. Each position is computed exactly as by the strided kernel: only the walk
// differs.
template <class X> struct alignas(4 * sizeof(X)) V4 { X v[4]; };
// rows of a dense walk and each operand's row stride (elements; operand 0 is the output)
struct Rows { i64 rows; i64 st[4]; };
// element offset of the row holding vector v (vectors of nv per row) in operand k, and of the
// vector's first element; 32-bit division (the host keeps rows · nv below 2^31)
__device__ __forceinline__ i64 dense_row(const Rows& rw, int k, i64 v, i64 nv) {
    return rw.rows == 1 ? 0 : (i64)((unsigned)v / (unsigned)nv) * rw.st[k];
}
__device__ __forceinline__ i64 dense_at(const Rows& rw, int k, i64 v, i64 nv) {
    if (rw.rows == 1) return v * 4;
    const i64 q = (unsigned)v / (unsigned)nv;
    return q * rw.st[k] + (v - q * nv) * 4;
}
// DU: vectors per operand per thread per step, set by each kernel (2 for 8-byte elements)
#define DENSE_LOOP(N) \
    const i64 n_ = (N), nv_ = n_ >> 2, tv_ = nv_ * rw.rows, gs_ = (i64)gridDim.x * blockDim.x; \
    for (i64 b_ = (i64)blockIdx.x * blockDim.x * DU + threadIdx.x; b_ < tv_; b_ += gs_ * DU)
#define DK(u) (b_ + (i64)(u) * blockDim.x)
// R_[u] = vector DK(u) of input K at P (elements X), or its row's element splatted when bit K-1
// of bc is set
#define DLOAD(X, R_, P, K) V4<X> R_[DU]; \
    _Pragma("unroll") for (int u_ = 0; u_ < DU; ++u_) if (DK(u_) < tv_) { \
        if (bc & (1 << ((K) - 1))) { const X s_ = (P)[dense_row(rw, (K), DK(u_), nv_)]; \
            R_[u_].v[0] = s_; R_[u_].v[1] = s_; R_[u_].v[2] = s_; R_[u_].v[3] = s_; } \
        else R_[u_] = *(const V4<X>*)((P) + dense_at(rw, (K), DK(u_), nv_)); }
// for each loaded vector u_ and lane j_: BODY, then store vector r_ (elements X) to output P
#define DSTORE(X, P, BODY) \
    _Pragma("unroll") for (int u_ = 0; u_ < DU; ++u_) if (DK(u_) < tv_) { V4<X> r_; \
        _Pragma("unroll") for (int j_ = 0; j_ < 4; ++j_) { BODY; } \
        *(V4<X>*)((P) + dense_at(rw, 0, DK(u_), nv_)) = r_; }
// the n mod 4 tail of a single row (empty when rows > 1: n is then a multiple of 4)
#define DENSE_TAIL for (i64 i = (nv_ << 2) + (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n_; i += gs_)
#define DIN(P, BIT, I) ((bc & (BIT)) ? (P)[0] : (P)[I])
// The host launches DENSE_BLOCKS_PER_SM blocks of 256 threads per SM (a grid-stride loop with
// no second wave), with DU·16 bytes per operand in flight per thread: plenty to saturate HBM.
#define DENSE_KERNEL extern "C" __global__ void __launch_bounds__(256, 4)
#define DUOF(X) constexpr int DU = sizeof(X) >= 8 ? 2 : 4;
#define DUOF2(X, Y) constexpr int DU = (sizeof(X) >= 8 || sizeof(Y) >= 8) ? 2 : 4;

// ---- the tiled walk: an input whose fastest dim is not the output's -------------------------
// The host moves that input's fastest dim to Geo position ndim-2, so a tile is 32 x 32
// positions of the last two dims (rows, cols) at one batch index. Each input is staged
// through shared memory, read along whichever of the two dims is its fastest (bit k+1 of
// `tmask` for input k; bit 0 for the output), so every global access is coalesced. Blocks
// are 32 x 4 threads; each thread moves 8 elements per operand per tile. Results do not
// depend on the walk: an elementwise op computes each position on its own.
// A tile's operand offsets come from its (batch, row, column) origin directly (a division
// chain over the batch dims only), and tile numbers decode with 32-bit divisions where they
// fit: ncu showed the 64-bit division chains per tile taking as many issue slots as the
// copies. Full tiles skip the per-element bounds checks.
#define TILE_LOOP(NB) \
    const int nd = g.ndim; \
    const i64 rows_ = g.size[nd - 2], cols_ = g.size[nd - 1]; \
    const i64 tr = (rows_ + 31) / 32, tc = (cols_ + 31) / 32, per = tr * tc; \
    const bool small_ = (NB) * per < 0x7fffffffLL; \
    const int tx = threadIdx.x, ty = threadIdx.y; /* blocks of 32 x 4 threads */ \
    for (i64 tile = blockIdx.x; tile < (NB) * per; tile += gridDim.x)
#define TILE_ORIGIN \
    i64 bt, ti, tj; \
    if (small_) { \
        const unsigned int t_ = (unsigned int)tile, p_ = (unsigned int)per, c_ = (unsigned int)tc; \
        const unsigned int b_ = t_ / p_, m_ = t_ - b_ * p_, i_ = m_ / c_; \
        bt = b_; ti = i_; tj = m_ - i_ * c_; \
    } else { \
        bt = tile / per; const i64 m_ = tile - bt * per; ti = m_ / tc; tj = m_ - ti * tc; \
    } \
    const i64 r0 = ti * 32, c0 = tj * 32; \
    const bool full_ = r0 + 32 <= rows_ && c0 + 32 <= cols_;
// element offset of the tile origin (bt, r0, c0) in operand S
__device__ __forceinline__ i64 tile_base(const Geo& g, const Str& s, i64 bt, i64 r0, i64 c0) {
    const int nd = g.ndim;
    i64 o = s.off + r0 * s.st[nd - 2] + c0 * s.st[nd - 1];
    for (int d = nd - 3; d > 0; --d) {
        const i64 n = g.size[d], q = bt / n;
        o += (bt - q * n) * s.st[d];
        bt = q;
    }
    return nd > 2 ? o + bt * s.st[0] : o;
}
// stage input P (strides S) into shared tile SH, read along its fastest dim (flag TR)
#define TILE_STAGE(SH_, P_, S_, TR_) do { \
        const i64 base_ = tile_base(g, (S_), bt, r0, c0), sr_ = (S_).st[nd - 2], sc_ = (S_).st[nd - 1]; \
        _Pragma("unroll") for (int j = 0; j < 8; ++j) { \
            const int r = (TR_) ? tx : ty + 4 * j, c = (TR_) ? ty + 4 * j : tx; \
            if (full_ || (r0 + r < rows_ && c0 + c < cols_)) SH_[r][c] = (P_)[base_ + r * sr_ + c * sc_]; \
        } } while (0)
// for each position (r, c) of the tile held by this thread, in the output's fast order: BODY
// with `oi` = the output's element offset
#define TILE_EMIT(S_, TR_, BODY_) do { \
        const i64 base_ = tile_base(g, (S_), bt, r0, c0), sr_ = (S_).st[nd - 2], sc_ = (S_).st[nd - 1]; \
        _Pragma("unroll") for (int j = 0; j < 8; ++j) { \
            const int r = (TR_) ? tx : ty + 4 * j, c = (TR_) ? ty + 4 * j : tx; \
            if (full_ || (r0 + r < rows_ && c0 + c < cols_)) { const i64 oi = base_ + r * sr_ + c * sc_; BODY_; } \
        } } while (0)
#define STORE(p, s, i, v) do { if (contig) (p)[(s).off + (i)] = (v); else (p)[at(g, (s), (i))] = (v); } while (0)

// The tiled kernels hold 8 elements per operand per thread with 64-bit offsets; unbounded,
// ptxas gave them ~250 registers (2 blocks of 128 threads per SM). Bounded to 8 blocks per SM
// they fit in 64 registers without spilling.
#define TILED_KERNEL extern "C" __global__ void __launch_bounds__(128, 8)

// out[i] = EXPR(x)
#define UNARY(NAME, OUT, EXPR) \
    extern "C" __global__ void k_##NAME(const __grid_constant__ Geo g, const i64 n, const int contig, \
                                    OUT* o, const __grid_constant__ Str so, const T* a, const __grid_constant__ Str sa) { \
        GRID_LOOP(i, n) { T x = LOAD(a, sa, i); STORE(o, so, i, (OUT)(EXPR)); } \
    } \
    DENSE_KERNEL k_##NAME##_dense(const i64 n, const int bc, const __grid_constant__ Rows rw, OUT* o, const T* a) { \
        DUOF(T) DENSE_LOOP(n) { DLOAD(T, xa_, a, 1); \
            DSTORE(OUT, o, { T x = xa_[u_].v[j_]; r_.v[j_] = (OUT)(EXPR); }); } \
        DENSE_TAIL { T x = DIN(a, 1, i); o[i] = (OUT)(EXPR); } \
    } \
    TILED_KERNEL k_tiled(const __grid_constant__ Geo g, const i64 nb, const int tmask, \
                         OUT* o, const __grid_constant__ Str so, const T* a, const __grid_constant__ Str sa) { \
        __shared__ T ta[32][33]; \
        TILE_LOOP(nb) { TILE_ORIGIN \
            TILE_STAGE(ta, a, sa, tmask & 2); __syncthreads(); \
            TILE_EMIT(so, tmask & 1, { T x = ta[r][c]; o[oi] = (OUT)(EXPR); }); __syncthreads(); } \
    }

// out[i] = EXPR(x, y)
#define BINARY(NAME, OUT, EXPR) \
    extern "C" __global__ void k_##NAME(const __grid_constant__ Geo g, const i64 n, const int contig, \
                                    OUT* o, const __grid_constant__ Str so, const T* a, const __grid_constant__ Str sa, \
                                    const T* b, const __grid_constant__ Str sb) { \
        GRID_LOOP(i, n) { T x = LOAD(a, sa, i); T y = LOAD(b, sb, i); STORE(o, so, i, (OUT)(EXPR)); } \
    } \
    DENSE_KERNEL k_##NAME##_dense(const i64 n, const int bc, const __grid_constant__ Rows rw, OUT* o, const T* a, \
                                                const T* b) { \
        DUOF(T) DENSE_LOOP(n) { DLOAD(T, xa_, a, 1); DLOAD(T, yb_, b, 2); \
            DSTORE(OUT, o, { T x = xa_[u_].v[j_]; T y = yb_[u_].v[j_]; r_.v[j_] = (OUT)(EXPR); }); } \
        DENSE_TAIL { T x = DIN(a, 1, i); T y = DIN(b, 2, i); o[i] = (OUT)(EXPR); } \
    } \
    TILED_KERNEL k_tiled(const __grid_constant__ Geo g, const i64 nb, const int tmask, \
                         OUT* o, const __grid_constant__ Str so, const T* a, const __grid_constant__ Str sa, \
                         const T* b, const __grid_constant__ Str sb) { \
        __shared__ T ta[32][33]; \
        __shared__ T tb[32][33]; \
        TILE_LOOP(nb) { TILE_ORIGIN \
            TILE_STAGE(ta, a, sa, tmask & 2); TILE_STAGE(tb, b, sb, tmask & 4); __syncthreads(); \
            TILE_EMIT(so, tmask & 1, { T x = ta[r][c]; T y = tb[r][c]; o[oi] = (OUT)(EXPR); }); \
            __syncthreads(); } \
    }

// out[i] = EXPR(x, y, z); x has type A (bool for `where`), vf/vi carry a scalar operand.
#define TERNARY(NAME, A, EXPR) \
    extern "C" __global__ void k_##NAME(const __grid_constant__ Geo g, const i64 n, const int contig, \
                                    T* o, const __grid_constant__ Str so, const A* a, const __grid_constant__ Str sa, \
                                    const T* b, const __grid_constant__ Str sb, const T* c, const __grid_constant__ Str sc, \
                                    const double vf, const i64 vi) { \
        GRID_LOOP(i, n) { A x = LOAD(a, sa, i); T y = LOAD(b, sb, i); T z = LOAD(c, sc, i); \
                          STORE(o, so, i, (T)(EXPR)); } \
    } \
    DENSE_KERNEL k_##NAME##_dense(const i64 n, const int bc, const __grid_constant__ Rows rw, T* o, const A* a, \
                                                const T* b, const T* c, const double vf, \
                                                const i64 vi) { \
        DUOF(T) DENSE_LOOP(n) { DLOAD(A, xa_, a, 1); DLOAD(T, yb_, b, 2); DLOAD(T, zc_, c, 3); \
            DSTORE(T, o, { A x = xa_[u_].v[j_]; T y = yb_[u_].v[j_]; T z = zc_[u_].v[j_]; \
                           r_.v[j_] = (T)(EXPR); }); } \
        DENSE_TAIL { A x = DIN(a, 1, i); T y = DIN(b, 2, i); T z = DIN(c, 4, i); o[i] = (T)(EXPR); } \
    }

// *flag = 1 if any element of b is zero (mode 0) or negative (mode 1): integer division and
// integer pow refuse such operands before writing anything, as on the CPU.
#define ANY_BAD(NAME) \
    extern "C" __global__ void k_##NAME(const __grid_constant__ Geo g, const i64 n, const T* b, \
                                    const __grid_constant__ Str sb, const int mode, int* flag) { \
        const int contig = 0; \
        GRID_LOOP(i, n) { T y = LOAD(b, sb, i); if (mode == 0 ? y == (T)0 : is_neg(y)) *flag = 1; } \
    }

// out[i] = cast(x) from T to D, by T's category (Element::cast of the CPU backend).
#define CAST(NAME, D, HOW) \
    extern "C" __global__ void k_##NAME(const __grid_constant__ Geo g, const i64 n, const int contig, \
                                    D* o, const __grid_constant__ Str so, const T* a, const __grid_constant__ Str sa) { \
        GRID_LOOP(i, n) { T x = LOAD(a, sa, i); STORE(o, so, i, (HOW)); } \
    } \
    DENSE_KERNEL k_##NAME##_dense(const i64 n, const int bc, const __grid_constant__ Rows rw, D* o, const T* a) { \
        DUOF2(T, D) DENSE_LOOP(n) { DLOAD(T, xa_, a, 1); \
            DSTORE(D, o, { T x = xa_[u_].v[j_]; r_.v[j_] = (HOW); }); } \
        DENSE_TAIL { T x = DIN(a, 1, i); o[i] = (HOW); } \
    } \
    TILED_KERNEL k_tiled(const __grid_constant__ Geo g, const i64 nb, const int tmask, \
                         D* o, const __grid_constant__ Str so, const T* a, const __grid_constant__ Str sa) { \
        __shared__ T ta[32][33]; \
        TILE_LOOP(nb) { TILE_ORIGIN \
            TILE_STAGE(ta, a, sa, tmask & 2); __syncthreads(); \
            TILE_EMIT(so, tmask & 1, { T x = ta[r][c]; o[oi] = (HOW); }); __syncthreads(); } \
    }
