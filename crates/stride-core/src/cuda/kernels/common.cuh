// Shared by every stride CUDA module: element types, the exact casts of the CPU backend,
// strided addressing, and the scalar math each dtype computes in.
//
// Compiled by NVRTC with --fmad=false so that a*b+c rounds twice, as the CPU computes it:
// elementwise results are then bit-identical to the CPU's wherever the CPU's libm and CUDA's
// agree (all of + - * /, sqrt, floor/ceil/trunc/rint, comparisons, casts).

typedef signed char i8;
typedef unsigned char u8;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
struct f16 { unsigned short b; };
struct bf16 { unsigned short b; };

#define MAXD 12
// The common shape of an op's operands after merging dims (outermost first).
struct Geo { int ndim; i64 size[MAXD]; };
// One operand over a Geo: element offset and element strides.
struct Str { i64 off; i64 st[MAXD]; };

// Element offset of logical (row-major over Geo) position i.
__device__ __forceinline__ i64 at(const Geo& g, const Str& s, i64 i) {
    i64 o = s.off;
    for (int d = g.ndim - 1; d > 0; --d) {
        i64 n = g.size[d];
        i64 q = i / n;
        o += (i - q * n) * s.st[d];
        i = q;
    }
    return o + i * s.st[0];
}

#define GRID_LOOP(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// ---- half types (bit-exact with the CPU: `half`'s f32 paths, stride's half_round for f64) ----
__device__ __forceinline__ float f16_to_f32(f16 h) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.b)); return f;
}
__device__ __forceinline__ f16 f32_to_f16(float f) {
    f16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.b) : "f"(f)); return h;
}
__device__ __forceinline__ float bf16_to_f32(bf16 h) {
    unsigned int u = h.b;
    if ((u & 0x7fffu) > 0x7f80u) u |= 0x40u;
    return __uint_as_float(u << 16);
}
__device__ __forceinline__ bf16 f32_to_bf16(float f) {
    unsigned int x = __float_as_uint(f);
    bf16 r;
    if ((x & 0x7fffffffu) > 0x7f800000u) { r.b = (unsigned short)((x >> 16) | 0x40u); return r; }
    const unsigned int rb = 0x8000u;
    r.b = (unsigned short)((x >> 16) + (((x & rb) != 0 && (x & (3 * rb - 1)) != 0) ? 1 : 0));
    return r;
}
// f64 -> f16/bf16, correctly rounded (round to nearest even, once, from all 64 bits): mirrors
// stride_core::half_round::f64_to_half_bits line by line so CPU and GPU agree bit for bit.
// EB/MB: exponent / stored mantissa bits (f16 5/10, bf16 8/7). NaN -> quiet NaN keeping the
// top payload bits; overflow -> +-inf; subnormals rounded; signed zeros kept.
template <int EB, int MB>
__device__ __forceinline__ unsigned short f64_to_half_bits(double v) {
    const u64 bits = (u64)__double_as_longlong(v);
    const unsigned short sign = (unsigned short)((bits >> 48) & 0x8000u);
    const u64 abs = bits & 0x7fffffffffffffffull;
    const unsigned short inf = (unsigned short)(((1u << EB) - 1u) << MB);
    if (abs >= 0x7ff0000000000000ull) {
        if (abs == 0x7ff0000000000000ull) return (unsigned short)(sign | inf);
        const unsigned short quiet = (unsigned short)(1u << (MB - 1));
        const unsigned short payload = (unsigned short)((abs & 0x000fffffffffffffull) >> (52 - MB));
        return (unsigned short)(sign | inf | quiet | payload);
    }
    const i64 bias = (1ll << (EB - 1)) - 1;
    const i64 e = (i64)(abs >> 52);
    const i64 he = e - 1023 + bias;
    if (he >= (1ll << EB) - 1) return (unsigned short)(sign | inf);
    u64 head, sig;
    i64 shift;
    if (he >= 1) {
        head = ((u64)he) << MB;
        sig = abs & 0x000fffffffffffffull;
        shift = 52 - MB;
    } else {
        shift = 53 - MB - he;
        if (shift >= 54) return sign;
        head = 0;
        sig = (abs & 0x000fffffffffffffull) | (1ull << 52);
    }
    const u64 q = sig >> shift;
    const u64 rem = sig & ((1ull << shift) - 1ull);
    const u64 halfway = 1ull << (shift - 1);
    u64 out = head | q;
    if (rem > halfway || (rem == halfway && (q & 1ull) == 1ull)) out += 1;
    return (unsigned short)(sign | (unsigned short)out);
}
__device__ __forceinline__ bf16 f64_to_bf16(double v) {
    bf16 r; r.b = f64_to_half_bits<8, 7>(v); return r;
}
__device__ __forceinline__ f16 f64_to_f16(double v) {
    f16 r; r.b = f64_to_half_bits<5, 10>(v); return r;
}

// ---- element traits: the CPU's Element::{to_f64, to_i64, from_f64, from_i64, from_bool} ----
// Float -> int saturates and sends NaN to 0 (Rust's `as`); int -> int wraps; int -> float goes
// through f64; f64 -> f16/bf16 round once from the double (f64_to_half_bits).
__device__ __forceinline__ i8 sat_i8(double v) { if (v != v) return 0; if (v <= -128.0) return -128; if (v >= 127.0) return 127; return (i8)v; }
__device__ __forceinline__ i32 sat_i32(double v) { if (v != v) return 0; if (v <= -2147483648.0) return (-2147483647 - 1); if (v >= 2147483647.0) return 2147483647; return (i32)v; }
__device__ __forceinline__ i64 sat_i64(double v) { if (v != v) return 0; if (v <= -9223372036854775808.0) return (-9223372036854775807LL - 1); if (v >= 9223372036854775808.0) return 9223372036854775807LL; return (i64)v; }
__device__ __forceinline__ u8 sat_u8(double v) { if (!(v > 0.0)) return 0; if (v >= 255.0) return 255; return (u8)v; }
__device__ __forceinline__ u32 sat_u32(double v) { if (!(v > 0.0)) return 0; if (v >= 4294967295.0) return 4294967295u; return (u32)v; }

template <class T> struct E;
#define FLOAT_E(T, CT, LD, ST, TO64, FROM64) \
    template <> struct E<T> { \
        typedef CT C; \
        static const bool is_float = true; \
        __device__ static __forceinline__ C ld(T x) { return LD; } \
        __device__ static __forceinline__ T st(C c) { return ST; } \
        __device__ static __forceinline__ double to_f64(T x) { return TO64; } \
        __device__ static __forceinline__ i64 to_i64(T x) { return sat_i64(TO64); } \
        __device__ static __forceinline__ bool nonzero(T x) { return TO64 != 0.0; } \
        __device__ static __forceinline__ T from_f64(double v) { return FROM64; } \
        __device__ static __forceinline__ T from_i64(i64 i) { return from_f64((double)i); } \
        __device__ static __forceinline__ T from_bool(bool b) { return from_f64(b ? 1.0 : 0.0); } \
    };
FLOAT_E(double, double, x, c, x, v)
FLOAT_E(float, float, x, c, (double)x, (float)v)
FLOAT_E(f16, float, f16_to_f32(x), f32_to_f16(c), (double)f16_to_f32(x), f64_to_f16(v))
FLOAT_E(bf16, float, bf16_to_f32(x), f32_to_bf16(c), (double)bf16_to_f32(x), f64_to_bf16(v))

#define INT_E(T) \
    template <> struct E<T> { \
        static const bool is_float = false; \
        __device__ static __forceinline__ double to_f64(T x) { return (double)x; } \
        __device__ static __forceinline__ i64 to_i64(T x) { return (i64)x; } \
        __device__ static __forceinline__ bool nonzero(T x) { return x != 0; } \
        __device__ static __forceinline__ T from_f64(double v) { return sat_##T(v); } \
        __device__ static __forceinline__ T from_i64(i64 i) { return (T)(u64)i; } \
        __device__ static __forceinline__ T from_bool(bool b) { return b ? 1 : 0; } \
    };
INT_E(i8) INT_E(u8) INT_E(i32) INT_E(u32) INT_E(i64)

template <> struct E<bool> {
    static const bool is_float = false;
    __device__ static __forceinline__ double to_f64(bool x) { return x ? 1.0 : 0.0; }
    __device__ static __forceinline__ i64 to_i64(bool x) { return x ? 1 : 0; }
    __device__ static __forceinline__ bool nonzero(bool x) { return x; }
    __device__ static __forceinline__ bool from_f64(double v) { return v != 0.0; }
    __device__ static __forceinline__ bool from_i64(i64 i) { return i != 0; }
    __device__ static __forceinline__ bool from_bool(bool b) { return b; }
};

// ---- float math in the compute type (f32 for f32/f16/bf16, f64 for f64) --------------------
#define M1(NAME, FF, DF) \
    __device__ __forceinline__ float NAME(float x) { return FF(x); } \
    __device__ __forceinline__ double NAME(double x) { return DF(x); }
M1(m_exp, expf, exp) M1(m_exp2, exp2f, exp2) M1(m_log, logf, log) M1(m_log2, log2f, log2)
M1(m_log1p, log1pf, log1p) M1(m_expm1, expm1f, expm1) M1(m_sqrt, sqrtf, sqrt)
M1(m_sin, sinf, sin) M1(m_cos, cosf, cos) M1(m_tan, tanf, tan) M1(m_tanh, tanhf, tanh)
M1(m_floor, floorf, floor) M1(m_ceil, ceilf, ceil) M1(m_rint, rintf, rint) M1(m_trunc, truncf, trunc)
M1(m_erf, erff, erf) M1(m_erfc, erfcf, erfc) M1(m_fabs, fabsf, fabs)
#define M2(NAME, FF, DF) \
    __device__ __forceinline__ float NAME(float x, float y) { return FF(x, y); } \
    __device__ __forceinline__ double NAME(double x, double y) { return DF(x, y); }
M2(m_pow, powf, pow) M2(m_atan2, atan2f, atan2) M2(m_fmod, fmodf, fmod) M2(m_copysign, copysignf, copysign)

template <class F> __device__ __forceinline__ bool m_isnan(F x) { return x != x; }
template <class F> __device__ __forceinline__ bool m_isinf(F x) { return x == (F)(1.0 / 0.0) || x == -(F)(1.0 / 0.0); }
template <class F> __device__ __forceinline__ F m_nan() { return (F)(0.0 / 0.0); }

template <class F> __device__ __forceinline__ F floor_div_real(F a, F b) {
    if (b == (F)0) return a / b;
    F m = m_fmod(a, b);
    F div = (a - m) / b;
    if (m != (F)0 && ((b < (F)0) != (m < (F)0))) div = div - (F)1;
    if (div == (F)0) return m_copysign((F)0, a / b);
    F fd = m_floor(div);
    if (div - fd > (F)0.5) fd = fd + (F)1;
    return fd;
}
template <class F> __device__ __forceinline__ F remainder_real(F a, F b) {
    F m = m_fmod(a, b);
    return (m != (F)0 && ((b < (F)0) != (m < (F)0))) ? m + b : m;
}
template <class F> __device__ __forceinline__ F max_nan(F a, F b) {
    return (m_isnan(a) || m_isnan(b)) ? m_nan<F>() : (a > b ? a : b);
}
template <class F> __device__ __forceinline__ F min_nan(F a, F b) {
    return (m_isnan(a) || m_isnan(b)) ? m_nan<F>() : (a < b ? a : b);
}
template <class F> __device__ __forceinline__ F sigmoid(F x) { return (F)1 / ((F)1 + m_exp(-x)); }
template <class F> __device__ __forceinline__ F gelu_erf(F x) {
    return (F)0.5 * x * ((F)1 + m_erf(x * (F)0.7071067811865476));
}
template <class F> __device__ __forceinline__ F gelu_tanh(F x) {
    const F k = (F)0.7978845608028654; // sqrt(2/pi) rounded as the CPU computes it
    return (F)0.5 * x * ((F)1 + m_tanh(k * (x + (F)0.044715 * x * x * x)));
}
template <class F> __device__ __forceinline__ F softplus(F x) { return x > (F)20 ? x : m_log1p(m_exp(x)); }
template <class F> __device__ __forceinline__ F relu_f(F x) { return (m_isnan(x) || x > (F)0) ? x : (F)0; }
template <class F> __device__ __forceinline__ F sign_f(F x) {
    return m_isnan(x) ? x : (x > (F)0 ? (F)1 : (x < (F)0 ? (F)-1 : (F)0));
}

// ---- integer math with PyTorch's semantics (wrapping; Python-style floor division) --------
template <class T> struct U;
template <> struct U<i8> { typedef u8 T; static const int bits = 8; static const bool sgn = true; };
template <> struct U<u8> { typedef u8 T; static const int bits = 8; static const bool sgn = false; };
template <> struct U<i32> { typedef u32 T; static const int bits = 32; static const bool sgn = true; };
template <> struct U<u32> { typedef u32 T; static const int bits = 32; static const bool sgn = false; };
template <> struct U<i64> { typedef u64 T; static const int bits = 64; static const bool sgn = true; };

template <class T> __device__ __forceinline__ T w_add(T a, T b) { typedef typename U<T>::T u; return (T)(u)((u)a + (u)b); }
template <class T> __device__ __forceinline__ T w_sub(T a, T b) { typedef typename U<T>::T u; return (T)(u)((u)a - (u)b); }
template <class T> __device__ __forceinline__ T w_mul(T a, T b) { typedef typename U<T>::T u; return (T)(u)((u)a * (u)b); }
template <class T> __device__ __forceinline__ T w_neg(T a) { typedef typename U<T>::T u; return (T)(u)((u)0 - (u)a); }
template <class T> __device__ __forceinline__ bool is_neg(T a) { return U<T>::sgn && a < (T)0; }
template <class T> __device__ __forceinline__ T w_abs(T a) { return is_neg(a) ? w_neg(a) : a; }
template <class T> __device__ __forceinline__ T sign_i(T a) { return a > (T)0 ? (T)1 : (is_neg(a) ? w_neg((T)1) : (T)0); }
// wrapping_div / wrapping_rem: MIN / -1 = MIN and MIN % -1 = 0 (C leaves them undefined).
template <class T> __device__ __forceinline__ T w_div(T a, T b) { return (U<T>::sgn && b == w_neg((T)1)) ? w_neg(a) : a / b; }
template <class T> __device__ __forceinline__ T w_rem(T a, T b) { return (U<T>::sgn && b == w_neg((T)1)) ? (T)0 : a % b; }
template <class T> __device__ __forceinline__ T floor_div_i(T a, T b) {
    T q = w_div(a, b);
    return (U<T>::sgn && w_rem(a, b) != 0 && (is_neg(a) != is_neg(b))) ? w_sub(q, (T)1) : q;
}
template <class T> __device__ __forceinline__ T py_rem_i(T a, T b) {
    T r = w_rem(a, b);
    return (U<T>::sgn && r != 0 && (is_neg(r) != is_neg(b))) ? w_add(r, b) : r;
}
template <class T> __device__ __forceinline__ T w_pow(T a, T b) {
    u64 e = (u64)(i64)b;
    T base = a, acc = (T)1;
    while (e > 0) { if (e & 1) acc = w_mul(acc, base); base = w_mul(base, base); e >>= 1; }
    return acc;
}
template <class T> __device__ __forceinline__ T shl_i(T a, T o) {
    typedef typename U<T>::T u;
    if (is_neg(o) || (u64)(i64)o >= (u64)U<T>::bits) return (T)0;
    return (T)(u)((u)a << (int)o);
}
template <class T> __device__ __forceinline__ T shr_i(T a, T o) {
    if (is_neg(o) || (u64)(i64)o >= (u64)U<T>::bits) return is_neg(a) ? w_neg((T)1) : (T)0;
    return (T)(a >> (int)o);
}

// PyTorch's numerically careful lerp (as the CPU backend computes it).
template <class F> __device__ __forceinline__ F lerp_f(F s, F e, F w) {
    F d = e - s;
    return m_fabs(w) < (F)0.5 ? s + w * d : e - d * ((F)1 - w);
}

// A writing kernel's gate: the verdict of its op's device-side check (deferred.rs). Closed
// (write nothing) when the check found a bad value; a null gate is always open.
__device__ __forceinline__ bool gate_closed(const u64* gate) {
    return gate != nullptr && *gate != 0;
}
