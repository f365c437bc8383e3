// stride wgpu backend: the prelude every compute shader starts with.
//
// Dtype conversions bit-exact with the CPU backend (cpu/math.rs, cuda/kernels/common.cuh) and
// the scalar math the op tables name. Buffers are raw 32-bit words: f16/bf16 travel as 16-bit
// patterns in the low bits of a u32 (WGSL's f16 type is never used). Floats compute in f32,
// I32/I8 in i32 and U32/U8 in u32 (wrapping), bool in bool. WGSL has no overloading, so each
// name carries its compute type (_f32, _i32, _u32).
//
// Defences against WGSL/driver latitude, used throughout:
// - NaN/inf are tested on the bits: naga emits FOrdNotEqual for `!=`, so `x != x` is false
//   for NaN and `NaN != 0.0` is false too; write `!(a == b)` where NaN must count as unequal.
// - Non-finite values come from bitcasts of runtime values (pl_f), never from
//   const-expressions: a constant NaN/inf, or a constant that overflows, is a shader error.
// - pow, %, exp, log, sqrt, sin, ... builtins have loose precision and undefined edge cases;
//   they are replaced by integer-exact code (sqrt, fmod, rounding) or by ports of the musl /
//   FreeBSD single-precision algorithms, which run in f32 only.
// - Float -> int conversion clamps first (WGSL does not promise saturation).
// - Drivers reassociate and fuse inexact float ops (naga emits no NoContraction): pl_opaque and
//   pl_mul pin the steps whose rounding the algorithms (or bit-exactness with the CPU) need.
// - A literal-only subexpression (`1.0 - 0.845`) folds in abstract (f64) precision: constants
//   that must round as f32 first are bound to typed lets.

// ---- bits ---------------------------------------------------------------------------------

// The f32 with bit pattern b (a function, so constants like inf/NaN are never const-folded).
fn pl_f(b: u32) -> f32 {
    return bitcast<f32>(b);
}

fn m_isnan_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u;
}

fn m_isinf_f32(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u;
}

// Rust's f32::NAN.
fn m_nan_f32() -> f32 {
    return pl_f(0x7fc00000u);
}

fn pl_inf() -> f32 {
    return pl_f(0x7f800000u);
}

fn m_copysign_f32(x: f32, y: f32) -> f32 {
    return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(y) & 0x80000000u));
}

fn m_fabs_f32(x: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(x) & 0x7fffffffu);
}

// v unchanged, through integer ops that float simplifiers do not see through: drivers
// reassociate inexact float ops (Mesa folds x - ((1 + x) - 1) to 0), which would erase the
// rounding-error terms the algorithms below compute on purpose.
fn pl_opaque(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    return bitcast<f32>((b & 0xffff0000u) + (b & 0x0000ffffu));
}

// a * b rounded on its own: drivers may fuse `c + a * b` into an fma (lavapipe does, in
// polynomials), which the CPU never does; used where the CPU runs the same algorithm.
fn pl_mul(a: f32, b: f32) -> f32 {
    return pl_opaque(a * b);
}

// x * 2^n with one rounding (musl scalbnf): scales in steps that stay normal.
fn pl_scalbn(x: f32, n0: i32) -> f32 {
    var y = x;
    var n = n0;
    if (n > 127) {
        y = y * pl_f(0x7f000000u);
        n = n - 127;
        if (n > 127) {
            y = y * pl_f(0x7f000000u);
            n = min(n - 127, 127);
        }
    } else if (n < -126) {
        y = y * pl_f(0x0c800000u); // 2^-102
        n = n + 102;
        if (n < -126) {
            y = y * pl_f(0x0c800000u);
            n = max(n + 102, -126);
        }
    }
    return y * bitcast<f32>(u32(127 + n) << 23u);
}

// (lo, hi) words of the 64-bit product a * b.
fn pl_mul32(a: u32, b: u32) -> vec2<u32> {
    let al = a & 0xffffu;
    let ah = a >> 16u;
    let bl = b & 0xffffu;
    let bh = b >> 16u;
    let ll = al * bl;
    let hl = ah * bl;
    let mid = al * bh + (ll >> 16u) + (hl & 0xffffu);
    return vec2<u32>((mid << 16u) | (ll & 0xffffu), ah * bh + (mid >> 16u) + (hl >> 16u));
}

// ---- half types (bit-exact with `half` and common.cuh) --------------------------------------

// f16 -> f32, exact; NaN keeps its payload and gets the quiet bit (as `half` does).
fn f16_to_f32(h: u32) -> f32 {
    let s = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1fu;
    let m = h & 0x3ffu;
    if (e == 0x1fu) {
        if (m == 0u) {
            return bitcast<f32>(s | 0x7f800000u);
        }
        return bitcast<f32>(s | 0x7fc00000u | (m << 13u));
    }
    if (e == 0u) {
        if (m == 0u) {
            return bitcast<f32>(s);
        }
        // subnormal m * 2^-24: normalise on the bits (no float op that could flush it)
        let p = firstLeadingBit(m);
        return bitcast<f32>(s | ((p + 103u) << 23u) | ((m << (23u - p)) & 0x7fffffu));
    }
    return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}

// f32 -> f16, round to nearest even from all 32 bits (`half`'s f32_to_f16_fallback).
fn f32_to_f16(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    let sg = (x & 0x80000000u) >> 16u;
    let ex = x & 0x7f800000u;
    let man = x & 0x007fffffu;
    if (ex == 0x7f800000u) {
        return sg | 0x7c00u | select(0u, 0x0200u, man != 0u) | (man >> 13u);
    }
    let he = i32(ex >> 23u) - 127 + 15;
    if (he >= 0x1f) {
        return sg | 0x7c00u;
    }
    if (he <= 0) {
        if (14 - he > 24) {
            return sg;
        }
        let m = man | 0x00800000u;
        var hm = m >> u32(14 - he);
        let rb = 1u << u32(13 - he);
        if ((m & rb) != 0u && (m & (3u * rb - 1u)) != 0u) {
            hm = hm + 1u;
        }
        return sg | hm;
    }
    let r = sg | (u32(he) << 10u) | (man >> 13u);
    if ((man & 0x1000u) != 0u && (man & 0x2fffu) != 0u) {
        return r + 1u;
    }
    return r;
}

fn bf16_to_f32(h: u32) -> f32 {
    var u = h & 0xffffu;
    if ((u & 0x7fffu) > 0x7f80u) {
        u = u | 0x40u;
    }
    return bitcast<f32>(u << 16u);
}

fn f32_to_bf16(f: f32) -> u32 {
    let x = bitcast<u32>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (x >> 16u) | 0x40u;
    }
    let up = (x & 0x8000u) != 0u && (x & 0x17fffu) != 0u;
    return ((x >> 16u) + select(0u, 1u, up)) & 0xffffu;
}

// ---- integers to floats: one rounding (to nearest even) from the exact integer -------------

// The bit pattern (sign and overflow aside) of the nonzero integer u rounded to a format with
// mb stored mantissa bits and exponent bias `bias`. A carry out of the mantissa bumps the
// exponent, as it should.
fn pl_uint_round(u: u32, mb: u32, bias: u32) -> u32 {
    let n = firstLeadingBit(u);
    var q: u32;
    if (n <= mb) {
        q = u << (mb - n);
    } else {
        let sh = n - mb;
        q = u >> sh;
        let rem = u & ((1u << sh) - 1u);
        let hw = 1u << (sh - 1u);
        if (rem > hw || (rem == hw && (q & 1u) == 1u)) {
            q = q + 1u;
        }
    }
    return ((n + bias - 1u) << mb) + q;
}

// |i| as u32 (i32::MIN gives 2^31).
fn pl_iabs(i: i32) -> u32 {
    return select(bitcast<u32>(i), 0u - bitcast<u32>(i), i < 0);
}

fn u32_to_f32(u: u32) -> f32 {
    if (u == 0u) {
        return 0.0;
    }
    return bitcast<f32>(pl_uint_round(u, 23u, 127u));
}

fn i32_to_f32(i: i32) -> f32 {
    if (i == 0) {
        return 0.0;
    }
    return bitcast<f32>(pl_uint_round(pl_iabs(i), 23u, 127u) | select(0u, 0x80000000u, i < 0));
}

fn pl_mag_to_f16(u: u32) -> u32 {
    if (u == 0u) {
        return 0u;
    }
    return min(pl_uint_round(u, 10u, 15u), 0x7c00u); // 65520 and up round to inf
}

fn u32_to_f16(u: u32) -> u32 {
    return pl_mag_to_f16(u);
}

fn i32_to_f16(i: i32) -> u32 {
    return pl_mag_to_f16(pl_iabs(i)) | select(0u, 0x8000u, i < 0);
}

fn u32_to_bf16(u: u32) -> u32 {
    if (u == 0u) {
        return 0u;
    }
    return pl_uint_round(u, 7u, 127u);
}

fn i32_to_bf16(i: i32) -> u32 {
    if (i == 0) {
        return 0u;
    }
    return pl_uint_round(pl_iabs(i), 7u, 127u) | select(0u, 0x8000u, i < 0);
}

// ---- floats to integers: Rust's `as` (saturating, NaN -> 0) --------------------------------
// The f32 thresholds equal the CPU's f64 ones on f32 inputs (no f32 lies strictly between).

fn sat_i32(x: f32) -> i32 {
    if (m_isnan_f32(x)) {
        return 0;
    }
    if (x >= 2147483648.0) {
        return 2147483647;
    }
    if (x <= -2147483648.0) {
        return bitcast<i32>(0x80000000u);
    }
    return i32(x);
}

fn sat_u32(x: f32) -> u32 {
    if (m_isnan_f32(x) || !(x > 0.0)) {
        return 0u;
    }
    if (x >= 4294967296.0) {
        return 0xffffffffu;
    }
    return u32(x);
}

fn sat_i8(x: f32) -> i32 {
    if (m_isnan_f32(x)) {
        return 0;
    }
    if (x <= -128.0) {
        return -128;
    }
    if (x >= 127.0) {
        return 127;
    }
    return i32(x);
}

fn sat_u8(x: f32) -> u32 {
    if (m_isnan_f32(x) || !(x > 0.0)) {
        return 0u;
    }
    if (x >= 255.0) {
        return 255u;
    }
    return u32(x);
}

// ---- rounding to integers, on the bits (exact, signed zeros kept) ---------------------------

fn m_trunc_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    let e = i32((u >> 23u) & 0xffu) - 127;
    if (e >= 23) {
        return x;
    }
    if (e < 0) {
        return bitcast<f32>(u & 0x80000000u);
    }
    return bitcast<f32>(u & ~(0x007fffffu >> u32(e)));
}

fn m_floor_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    let e = i32((u >> 23u) & 0xffu) - 127;
    if (e >= 23) {
        return x;
    }
    if (e < 0) {
        if ((u & 0x7fffffffu) == 0u || (u >> 31u) == 0u) {
            return bitcast<f32>(u & 0x80000000u);
        }
        return -1.0;
    }
    let m = 0x007fffffu >> u32(e);
    if ((u & m) == 0u) {
        return x;
    }
    return bitcast<f32>((u + select(0u, m, (u >> 31u) != 0u)) & ~m);
}

fn m_ceil_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    let e = i32((u >> 23u) & 0xffu) - 127;
    if (e >= 23) {
        return x;
    }
    if (e < 0) {
        if ((u & 0x7fffffffu) == 0u || (u >> 31u) != 0u) {
            return bitcast<f32>(u & 0x80000000u);
        }
        return 1.0;
    }
    let m = 0x007fffffu >> u32(e);
    if ((u & m) == 0u) {
        return x;
    }
    return bitcast<f32>((u + select(m, 0u, (u >> 31u) != 0u)) & ~m);
}

// Round half to even.
fn m_rint_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    let s = u & 0x80000000u;
    let e = i32((u >> 23u) & 0xffu) - 127;
    if (e >= 23) {
        return x;
    }
    if (e < -1) {
        return bitcast<f32>(s);
    }
    if (e == -1) {
        // |x| in [0.5, 1): 0.5 goes to the even 0
        return bitcast<f32>(s | select(0u, 0x3f800000u, (u & 0x7fffffffu) > 0x3f000000u));
    }
    let m = 0x007fffffu >> u32(e);
    let fr = u & m;
    let hw = (m + 1u) >> 1u;
    let odd = ((((u & 0x007fffffu) | 0x00800000u) >> u32(23 - e)) & 1u) == 1u;
    var r = u & ~m;
    if (fr > hw || (fr == hw && odd)) {
        r = r + m + 1u;
    }
    return bitcast<f32>(r);
}

// ---- sqrt and fmod, exact -----------------------------------------------------------------

// Correctly rounded square root, by integer digit recurrence (the builtin is not correctly
// rounded on every GPU, and may flush subnormals).
fn m_sqrt_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    if (u == 0u || u == 0x80000000u || u == 0x7f800000u) {
        return x;
    }
    if (u > 0x7f800000u) {
        // NaN (kept) or a negative number
        return select(m_nan_f32(), x, m_isnan_f32(x));
    }
    // x = mx * 2^ex, mx with its top bit at bit 23
    var mx: u32;
    var ex: i32;
    if ((u >> 23u) == 0u) {
        let p = firstLeadingBit(u);
        mx = u << (23u - p);
        ex = -149 - i32(23u - p);
    } else {
        mx = (u & 0x007fffffu) | 0x00800000u;
        ex = i32(u >> 23u) - 150;
    }
    // even exponent, and M in [2^24, 2^26)
    var mm: u32;
    if ((ex & 1) != 0) {
        mm = mx << 1u;
        ex = ex - 1;
    } else {
        mm = mx << 2u;
        ex = ex - 2;
    }
    // q = floor(sqrt(M * 2^24)): 25 bits (24 of mantissa + a round bit)
    var q = 0u;
    var rem = 0u;
    for (var i = 24; i >= 0; i = i - 1) {
        var pair = 0u;
        if (i >= 12) {
            pair = (mm >> u32(2 * (i - 12))) & 3u;
        }
        rem = (rem << 2u) | pair;
        let trial = (q << 2u) | 1u;
        q = q << 1u;
        if (rem >= trial) {
            rem = rem - trial;
            q = q | 1u;
        }
    }
    var mant = q >> 1u;
    // the exact root is never a tie: round up on the round bit
    if ((q & 1u) == 1u) {
        mant = mant + 1u;
    }
    return bitcast<f32>((u32(ex / 2 + 138) << 23u) + mant);
}

// IEEE fmod, exact (musl's fmodf: long division on the integer mantissas). NaN for x inf/NaN
// or y zero/NaN.
fn m_fmod_f32(x: f32, y: f32) -> f32 {
    let ux0 = bitcast<u32>(x);
    var uy = bitcast<u32>(y);
    var ex = i32((ux0 >> 23u) & 0xffu);
    var ey = i32((uy >> 23u) & 0xffu);
    let sx = ux0 & 0x80000000u;
    if ((uy << 1u) == 0u || m_isnan_f32(y) || ex == 0xff) {
        return select(m_nan_f32(), x, m_isnan_f32(x));
    }
    if ((ux0 << 1u) <= (uy << 1u)) {
        if ((ux0 << 1u) == (uy << 1u)) {
            return bitcast<f32>(sx);
        }
        return x;
    }
    var uxi = ux0;
    if (ex == 0) {
        let p = i32(firstLeadingBit(uxi & 0x007fffffu));
        ex = p - 22;
        uxi = uxi << u32(23 - p);
    } else {
        uxi = (uxi & 0x007fffffu) | 0x00800000u;
    }
    if (ey == 0) {
        let p = i32(firstLeadingBit(uy & 0x007fffffu));
        ey = p - 22;
        uy = uy << u32(23 - p);
    } else {
        uy = (uy & 0x007fffffu) | 0x00800000u;
    }
    // x mod y
    loop {
        if (ex <= ey) {
            break;
        }
        if (uxi >= uy) {
            if (uxi == uy) {
                return bitcast<f32>(sx);
            }
            uxi = uxi - uy;
        }
        uxi = uxi << 1u;
        ex = ex - 1;
    }
    if (uxi >= uy) {
        if (uxi == uy) {
            return bitcast<f32>(sx);
        }
        uxi = uxi - uy;
    }
    let sh = 23 - i32(firstLeadingBit(uxi));
    uxi = uxi << u32(sh);
    ex = ex - sh;
    // scale the result back
    if (ex > 0) {
        uxi = (uxi - 0x00800000u) | (u32(ex) << 23u);
    } else {
        uxi = uxi >> u32(1 - ex);
    }
    return bitcast<f32>(uxi | sx);
}

// ---- exp / log family (FreeBSD/musl single-precision algorithms, f32 only) ------------------

// Division by a zero y (the quotient IEEE gives, which WGSL does not promise).
fn pl_div0(a: f32, y: f32) -> f32 {
    if (m_isnan_f32(a) || (bitcast<u32>(a) & 0x7fffffffu) == 0u) {
        return m_nan_f32();
    }
    return bitcast<f32>(0x7f800000u | ((bitcast<u32>(a) ^ bitcast<u32>(y)) & 0x80000000u));
}

// expf (FreeBSD e_expf.c), < 1 ulp.
fn m_exp_f32(x0: f32) -> f32 {
    var x = x0;
    var hx = bitcast<u32>(x);
    let sg = hx >> 31u;
    hx = hx & 0x7fffffffu;
    if (hx >= 0x42aeac50u) {
        if (hx > 0x7f800000u) {
            return x;
        }
        if (hx >= 0x42b17218u && sg == 0u) {
            return pl_inf();
        }
        if (sg == 1u && hx >= 0x42cff1b5u) {
            return 0.0;
        }
    }
    var k = 0;
    var hi: f32;
    var lo: f32;
    if (hx > 0x3eb17218u) {
        if (hx > 0x3f851592u) {
            k = i32(1.4426950216e+00 * x + select(0.5, -0.5, sg == 1u));
        } else {
            k = 1 - i32(sg) - i32(sg);
        }
        let kf = f32(k);
        hi = x - kf * 6.9314575195e-01; // k*ln2hi is exact
        lo = kf * 1.4286067653e-06;
        x = hi - lo;
    } else if (hx > 0x39000000u) {
        hi = x;
        lo = 0.0;
    } else {
        return 1.0 + x;
    }
    let xx = x * x;
    let c = x - xx * (1.6666625440e-1 + xx * -2.7667332906e-3);
    let y = 1.0 + (x * c / (2.0 - c) - lo + hi);
    if (k == 0) {
        return y;
    }
    return pl_scalbn(y, k);
}

// 2^x: x = k + r exactly, r*ln2 carried as hi + lo, then expf's kernel. < 1 ulp.
fn m_exp2_f32(x: f32) -> f32 {
    let ux = bitcast<u32>(x);
    let ax = ux & 0x7fffffffu;
    if (ax > 0x7f800000u) {
        return x;
    }
    if (x >= 128.0) {
        return pl_inf();
    }
    if (x < -150.0) {
        return 0.0;
    }
    if (ax < 0x33000000u) {
        return 1.0 + x; // |x| < 2^-25
    }
    let kf = m_rint_f32(x);
    let k = i32(kf);
    let r = x - kf; // exact, |r| <= 1/2
    // ln2 = L1 + L2, L1 with 12 significant bits; r = rh + rl, rh with 12: rh*L1 is exact
    let l1 = 6.9311523438e-01; // 0x3f317000
    let l2 = 3.1946183e-05; // ln2 - l1
    let rh = bitcast<f32>(bitcast<u32>(r) & 0xfffff000u);
    let rl = r - rh;
    let hi = rh * l1;
    let lo = -(rl * l1 + r * l2);
    let t = hi - lo;
    let tt = t * t;
    let c = t - tt * (1.6666625440e-1 + tt * -2.7667332906e-3);
    let y = 1.0 + (t * c / (2.0 - c) - lo + hi);
    return pl_scalbn(y, k);
}

// The reduction shared by logf and log2f: x = 2^k * (1 + f), 1 + f in [sqrt(2)/2, sqrt(2)).
struct PlLogRed {
    k: i32,
    f: f32,
}

fn pl_log_reduce(u0: u32) -> PlLogRed {
    var u = u0;
    var k = 0;
    if (u < 0x00800000u) {
        // subnormal: normalise on the bits
        let p = firstLeadingBit(u);
        k = i32(p) - 23;
        u = ((u << (23u - p)) & 0x007fffffu) | 0x00800000u;
    }
    u = u + (0x3f800000u - 0x3f3504f3u);
    k = k + i32(u >> 23u) - 0x7f;
    u = (u & 0x007fffffu) + 0x3f3504f3u;
    return PlLogRed(k, bitcast<f32>(u) - 1.0);
}

// logf (FreeBSD e_logf.c), < 1 ulp.
fn m_log_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) == 0u) {
        return -pl_inf();
    }
    if (u >= 0x7f800000u) {
        // +inf, NaN (kept) or negative
        return select(m_nan_f32(), x, u == 0x7f800000u || m_isnan_f32(x));
    }
    if (u == 0x3f800000u) {
        return 0.0;
    }
    let rd = pl_log_reduce(u);
    let f = rd.f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (0.40000972152 + w * 0.24279078841);
    let t2 = z * (0.66666662693 + w * 0.28498786688);
    let r = t2 + t1;
    let hfsq = 0.5 * f * f;
    let dk = f32(rd.k);
    return s * (hfsq + r) + dk * 9.0580006145e-06 - hfsq + f + dk * 6.9313812256e-01;
}

// log2f (FreeBSD e_log2f.c), < 1 ulp.
fn m_log2_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) == 0u) {
        return -pl_inf();
    }
    if (u >= 0x7f800000u) {
        return select(m_nan_f32(), x, u == 0x7f800000u || m_isnan_f32(x));
    }
    if (u == 0x3f800000u) {
        return 0.0;
    }
    let rd = pl_log_reduce(u);
    let f = rd.f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (0.40000972152 + w * 0.24279078841);
    let t2 = z * (0.66666662693 + w * 0.28498786688);
    let r = t2 + t1;
    let hfsq = 0.5 * f * f;
    let hi = bitcast<f32>(bitcast<u32>(f - hfsq) & 0xfffff000u);
    let lo = f - hi - hfsq + s * (hfsq + r);
    return (lo + hi) * -1.7605285393e-04 + lo * 1.4428710938e+00 + hi * 1.4428710938e+00
        + f32(rd.k);
}

// log1pf (FreeBSD s_log1pf.c).
fn m_log1p_f32(x: f32) -> f32 {
    let ix = bitcast<u32>(x);
    var k = 1;
    var f = 0.0;
    var c = 0.0;
    if (ix < 0x3ed413d0u || (ix >> 31u) != 0u) {
        if (ix >= 0xbf800000u) {
            // x <= -1 or a negative NaN
            if (ix == 0xbf800000u) {
                return -pl_inf();
            }
            return select(m_nan_f32(), x, m_isnan_f32(x));
        }
        if ((ix << 1u) < (0x33800000u << 1u)) {
            return x; // |x| < 2^-24
        }
        if (ix <= 0xbe95f619u) {
            // sqrt(2)/2 <= 1+x < sqrt(2)
            k = 0;
            f = x;
        }
    } else if (ix >= 0x7f800000u) {
        return x;
    }
    if (k > 0) {
        let uf = pl_opaque(1.0 + x);
        var iu = bitcast<u32>(uf) + (0x3f800000u - 0x3f3504f3u);
        k = i32(iu >> 23u) - 0x7f;
        // correction term ~ log(1+x) - log(u)
        if (k < 25) {
            if (k >= 2) {
                c = 1.0 - (uf - x);
            } else {
                c = x - (uf - 1.0);
            }
            c = c / uf;
        } else {
            c = 0.0;
        }
        iu = (iu & 0x007fffffu) + 0x3f3504f3u;
        f = bitcast<f32>(iu) - 1.0;
    }
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (0.40000972152 + w * 0.24279078841);
    let t2 = z * (0.66666662693 + w * 0.28498786688);
    let r = t2 + t1;
    let hfsq = 0.5 * f * f;
    let dk = f32(k);
    return s * (hfsq + r) + (dk * 9.0580006145e-06 + c) - hfsq + f + dk * 6.9313812256e-01;
}

// expm1f (FreeBSD s_expm1f.c).
fn m_expm1_f32(x0: f32) -> f32 {
    var x = x0;
    var hx = bitcast<u32>(x);
    let neg = (hx >> 31u) != 0u;
    hx = hx & 0x7fffffffu;
    if (hx >= 0x4195b844u) {
        // |x| >= 27 ln2
        if (hx > 0x7f800000u) {
            return x;
        }
        if (neg) {
            return -1.0;
        }
        if (hx > 0x42b17217u) {
            return pl_inf();
        }
    }
    var k = 0;
    var c = 0.0;
    if (hx > 0x3eb17218u) {
        var hi: f32;
        var lo: f32;
        if (hx < 0x3f851592u) {
            if (!neg) {
                hi = x - 6.9313812256e-01;
                lo = 9.0580006145e-06;
                k = 1;
            } else {
                hi = x + 6.9313812256e-01;
                lo = -9.0580006145e-06;
                k = -1;
            }
        } else {
            k = i32(1.4426950216e+00 * x + select(0.5, -0.5, neg));
            let t = f32(k);
            hi = x - t * 6.9313812256e-01; // t*ln2hi is exact
            lo = t * 9.0580006145e-06;
        }
        x = pl_opaque(hi - lo);
        c = (hi - x) - lo;
    } else if (hx < 0x33000000u) {
        return x; // |x| < 2^-25
    }
    let hfx = 0.5 * x;
    let hxs = x * hfx;
    let r1 = 1.0 + hxs * (-3.3333212137e-2 + hxs * 1.5807170421e-3);
    let t = 3.0 - r1 * hfx;
    var e = hxs * ((r1 - t) / (6.0 - x * t));
    if (k == 0) {
        return x - (x * e - hxs);
    }
    e = x * (e - c) - c;
    e = e - hxs;
    if (k == -1) {
        return 0.5 * (x - e) - 0.5;
    }
    if (k == 1) {
        if (x < -0.25) {
            return -2.0 * (e - (x + 0.5));
        }
        return 1.0 + 2.0 * (x - e);
    }
    if (k < 0 || k > 56) {
        let y = x - e + 1.0;
        return pl_scalbn(y, k) - 1.0;
    }
    let twopk = bitcast<f32>(u32(0x7f + k) << 23u);
    if (k < 23) {
        let uf = bitcast<f32>(u32(0x7f - k) << 23u);
        return (x - e + (1.0 - uf)) * twopk;
    }
    let uf = bitcast<f32>(u32(0x7f - k) << 23u);
    return (pl_opaque(x - (e + uf)) + 1.0) * twopk;
}

// tanhf (musl), through expm1f; never NaN for large |x|.
fn m_tanh_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    let w = u & 0x7fffffffu;
    let ax = bitcast<f32>(w);
    var t: f32;
    if (w > 0x7f800000u) {
        return x;
    }
    if (w > 0x3f0c9f54u) {
        // |x| > log(3)/2
        if (w > 0x41200000u) {
            t = 1.0;
        } else {
            let e = m_expm1_f32(2.0 * ax);
            t = 1.0 - 2.0 / (e + 2.0);
        }
    } else if (w > 0x3e82c578u) {
        // |x| > log(5/3)/2
        let e = m_expm1_f32(2.0 * ax);
        t = e / (e + 2.0);
    } else if (w >= 0x00800000u) {
        let e = m_expm1_f32(-2.0 * ax);
        t = -e / (e + 2.0);
    } else {
        return x; // subnormal or zero
    }
    return bitcast<f32>(bitcast<u32>(t) | (u & 0x80000000u));
}

// erff (FreeBSD s_erff.c).
fn pl_erfc_mid(ax: f32) -> f32 {
    // erfc on [0.84375, 1.25)
    let s = ax - 1.0;
    var p = -2.1663755178e-03;
    p = 3.5478305072e-02 + pl_mul(s, p);
    p = -1.1089469492e-01 + pl_mul(s, p);
    p = 3.1834661961e-01 + pl_mul(s, p);
    p = -3.7220788002e-01 + pl_mul(s, p);
    p = 4.1485610604e-01 + pl_mul(s, p);
    p = -2.3621185683e-03 + pl_mul(s, p);
    var q = 1.1984500103e-02;
    q = 1.3637083583e-02 + pl_mul(s, q);
    q = 1.2617121637e-01 + pl_mul(s, q);
    q = 7.1828655899e-02 + pl_mul(s, q);
    q = 5.4039794207e-01 + pl_mul(s, q);
    q = 1.0642088205e-01 + pl_mul(s, q);
    q = 1.0 + pl_mul(s, q);
    let erx: f32 = 8.4506291151e-01; // typed: `1.0 - literal` would fold in abstract (f64) precision
    return 1.0 - erx - p / q;
}

fn pl_erfc_tail(ix: u32, ax: f32) -> f32 {
    // erfc on [1.25, 6)
    if (ix < 0x3fa00000u) {
        return pl_erfc_mid(ax);
    }
    let s = 1.0 / (ax * ax);
    var r: f32;
    var bs: f32;
    if (ix < 0x4036db6du) {
        // |x| < 1/0.35
        var ra = -9.8143291473e+00;
        ra = -8.1287437439e+01 + pl_mul(s, ra);
        ra = -1.8460508728e+02 + pl_mul(s, ra);
        ra = -1.6239666748e+02 + pl_mul(s, ra);
        ra = -6.2375331879e+01 + pl_mul(s, ra);
        ra = -1.0558626175e+01 + pl_mul(s, ra);
        ra = -6.9385856390e-01 + pl_mul(s, ra);
        ra = -9.8649440333e-03 + pl_mul(s, ra);
        var sa = -6.0424413532e-02;
        sa = 6.5702495575e+00 + pl_mul(s, sa);
        sa = 1.0863500214e+02 + pl_mul(s, sa);
        sa = 4.2900814819e+02 + pl_mul(s, sa);
        sa = 6.4538726807e+02 + pl_mul(s, sa);
        sa = 4.3456588745e+02 + pl_mul(s, sa);
        sa = 1.3765776062e+02 + pl_mul(s, sa);
        sa = 1.9651271820e+01 + pl_mul(s, sa);
        sa = 1.0 + pl_mul(s, sa);
        r = ra;
        bs = sa;
    } else {
        var rb = -4.8351919556e+02;
        rb = -1.0250950928e+03 + pl_mul(s, rb);
        rb = -6.3756646729e+02 + pl_mul(s, rb);
        rb = -1.6063638306e+02 + pl_mul(s, rb);
        rb = -1.7757955551e+01 + pl_mul(s, rb);
        rb = -7.9928326607e-01 + pl_mul(s, rb);
        rb = -9.8649431020e-03 + pl_mul(s, rb);
        var sb = -2.2440952301e+01;
        sb = 4.7452853394e+02 + pl_mul(s, sb);
        sb = 2.5530502930e+03 + pl_mul(s, sb);
        sb = 3.1998581543e+03 + pl_mul(s, sb);
        sb = 1.5367296143e+03 + pl_mul(s, sb);
        sb = 3.2579251099e+02 + pl_mul(s, sb);
        sb = 3.0338060379e+01 + pl_mul(s, sb);
        sb = 1.0 + pl_mul(s, sb);
        r = rb;
        bs = sb;
    }
    let z = bitcast<f32>(bitcast<u32>(ax) & 0xffffe000u);
    return m_exp_f32(-z * z - 0.5625) * m_exp_f32(pl_mul(z - ax, z + ax) + r / bs) / ax;
}

fn m_erf_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    let ix = u & 0x7fffffffu;
    let sgn = u & 0x80000000u;
    if (ix > 0x7f800000u) {
        return x;
    }
    if (ix == 0x7f800000u) {
        return bitcast<f32>(0x3f800000u | sgn);
    }
    if (ix < 0x3f580000u) {
        // |x| < 0.84375
        if (ix < 0x31800000u) {
            return 0.125 * (pl_mul(8.0, x) + 1.0270333290e+00 * x); // not refactored
        }
        let z = x * x;
        var r = -2.3763017452e-05;
        r = -5.7702702470e-03 + pl_mul(z, r);
        r = -2.8481749818e-02 + pl_mul(z, r);
        r = -3.2504209876e-01 + pl_mul(z, r);
        r = 1.2837916613e-01 + pl_mul(z, r);
        var s = -3.9602282413e-06;
        s = 1.3249473704e-04 + pl_mul(z, s);
        s = 5.0813062117e-03 + pl_mul(z, s);
        s = 6.5022252500e-02 + pl_mul(z, s);
        s = 3.9791721106e-01 + pl_mul(z, s);
        s = 1.0 + pl_mul(z, s);
        return x + pl_mul(x, r / s);
    }
    var y: f32;
    if (ix < 0x40c00000u) {
        y = 1.0 - pl_opaque(pl_erfc_tail(ix, bitcast<f32>(ix))); // 1 - (1 - erx - p/q) kept
    } else {
        y = 1.0 - pl_f(0x03800000u);
    }
    return bitcast<f32>(bitcast<u32>(y) | sgn);
}

fn pl_is_snan(b: i32) -> bool {
    return (b & 0x7fc00000) == 0x7f800000 && (b & 0x003fffff) != 0;
}

// powf (FreeBSD e_powf.c: log2 and exp2 carried in extended precision by hi/lo splits), with
// C's special cases.
fn m_pow_f32(x: f32, y: f32) -> f32 {
    let hx = bitcast<i32>(x);
    let hy = bitcast<i32>(y);
    var ix = hx & 0x7fffffff;
    let iy = hy & 0x7fffffff;
    // x^0 = 1 and 1^y = 1 even for a quiet NaN; a signalling one gives NaN (glibc, the CPU's)
    if (iy == 0) {
        return select(1.0, m_nan_f32(), pl_is_snan(hx));
    }
    if (hx == 0x3f800000) {
        return select(1.0, m_nan_f32(), pl_is_snan(hy));
    }
    if (ix > 0x7f800000 || iy > 0x7f800000) {
        return m_nan_f32();
    }
    // for x < 0: yisint 0 = y not an integer, 1 = odd, 2 = even
    var yisint = 0;
    if (hx < 0) {
        if (iy >= 0x4b800000) {
            yisint = 2;
        } else if (iy >= 0x3f800000) {
            let k = (iy >> 23u) - 0x7f;
            let j = iy >> u32(23 - k);
            if ((j << u32(23 - k)) == iy) {
                yisint = 2 - (j & 1);
            }
        }
    }
    if (iy == 0x7f800000) {
        // y = +-inf
        if (ix == 0x3f800000) {
            return 1.0;
        }
        if (ix > 0x3f800000) {
            return select(0.0, y, hy >= 0);
        }
        return select(-y, 0.0, hy >= 0);
    }
    if (iy == 0x3f800000) {
        // y = +-1
        if (hy >= 0) {
            return x;
        }
        if (ix == 0) {
            return pl_div0(1.0, x);
        }
        return 1.0 / x;
    }
    if (hy == 0x40000000) {
        return x * x;
    }
    if (hy == 0x3f000000 && hx >= 0) {
        return m_sqrt_f32(x);
    }
    var ax = m_fabs_f32(x);
    if (ix == 0x7f800000 || ix == 0 || ix == 0x3f800000) {
        // x = +-0, +-inf, +-1
        var z = ax;
        if (hy < 0) {
            if (ix == 0) {
                z = pl_inf();
            } else if (ix == 0x7f800000) {
                z = 0.0;
            }
        }
        if (hx < 0) {
            if (((ix - 0x3f800000) | yisint) == 0) {
                z = m_nan_f32(); // (-1)^non-integer
            } else if (yisint == 1) {
                z = -z;
            }
        }
        return z;
    }
    var sn = 1.0;
    if (hx < 0) {
        if (yisint == 0) {
            return m_nan_f32(); // (x<0)^non-integer
        }
        if (yisint == 1) {
            sn = -1.0;
        }
    }
    var t1: f32;
    var t2: f32;
    if (iy > 0x4d000000) {
        // |y| > 2^27: over/underflow unless x is within 2^-20 of 1
        if (ix < 0x3f7ffff8) {
            return select(sn * 0.0, sn * pl_inf(), hy < 0);
        }
        if (ix > 0x3f800007) {
            return select(sn * 0.0, sn * pl_inf(), hy > 0);
        }
        let t = ax - 1.0;
        let w = (t * t) * (0.5 - t * (0.333333333333 - t * 0.25));
        let u = 1.4426879883e+00 * t;
        let v = t * 7.0526075433e-06 - w * 1.4426950216e+00;
        t1 = bitcast<f32>(bitcast<u32>(u + v) & 0xfffff000u);
        t2 = v - (t1 - u);
    } else {
        var n = 0;
        if (ix < 0x00800000) {
            // subnormal x: normalise on the bits
            let p = i32(firstLeadingBit(u32(ix)));
            n = p - 23;
            ix = ((ix << u32(23 - p)) & 0x007fffff) | 0x00800000;
        }
        n = n + ((ix >> 23u) - 0x7f);
        let j = ix & 0x007fffff;
        ix = j | 0x3f800000;
        var k = 0;
        if (j <= 0x1cc471) {
            k = 0; // |x| < sqrt(3/2)
        } else if (j < 0x5db3d7) {
            k = 1; // |x| < sqrt(3)
        } else {
            k = 0;
            n = n + 1;
            ix = ix - 0x00800000;
        }
        ax = bitcast<f32>(ix);
        let bp = select(1.0, 1.5, k == 1);
        let dp_h = select(0.0, 5.84960938e-01, k == 1);
        let dp_l = select(0.0, 1.56322085e-06, k == 1);
        // s = s_h + s_l = (x - bp) / (x + bp)
        var u = ax - bp;
        var v = 1.0 / (ax + bp);
        let s = u * v;
        let s_h = bitcast<f32>(bitcast<u32>(s) & 0xfffff000u);
        var t_h = bitcast<f32>(((((u32(ix) >> 1u) & 0xfffff000u) | 0x20000000u) + 0x00400000u)
            + (u32(k) << 21u));
        var t_l = ax - (t_h - bp);
        let s_l = v * ((u - s_h * t_h) - s_h * t_l);
        // log(ax)
        var s2 = s * s;
        var r = s2 * s2 * (6.0000002384e-01 + s2 * (4.2857143283e-01 + s2 * (3.3333334327e-01
            + s2 * (2.7272811532e-01 + s2 * (2.3066075146e-01 + s2 * 2.0697501302e-01)))));
        r = r + s_l * (s_h + s);
        s2 = s_h * s_h;
        t_h = bitcast<f32>(bitcast<u32>(3.0 + s2 + r) & 0xfffff000u);
        t_l = r - ((t_h - 3.0) - s2);
        u = s_h * t_h;
        v = s_l * t_h + t_l * s;
        let p_h = bitcast<f32>(bitcast<u32>(u + v) & 0xfffff000u);
        let p_l = v - (p_h - u);
        // 2/(3 log2) * (s + ...)
        let z_h = 9.6191406250e-01 * p_h;
        let z_l = -1.1736857402e-04 * p_h + p_l * 9.6179670095e-01 + dp_l;
        // log2(ax) = n + dp_h + z_h + z_l
        let t = f32(n);
        t1 = bitcast<f32>(bitcast<u32>(((z_h + z_l) + dp_h) + t) & 0xfffff000u);
        t2 = z_l - (((t1 - t) - dp_h) - z_h);
    }
    // (y1 + y2) * (t1 + t2)
    let y1 = bitcast<f32>(bitcast<u32>(y) & 0xfffff000u);
    let p_l = (y - y1) * t1 + y * t2;
    var p_h = y1 * t1;
    var z = p_l + p_h;
    var j = bitcast<i32>(z);
    if (j > 0x43000000) {
        return sn * pl_inf();
    } else if (j == 0x43000000) {
        if (p_l + 4.2995665694e-08 > z - p_h) {
            return sn * pl_inf();
        }
    } else if ((j & 0x7fffffff) > 0x43160000) {
        return sn * 0.0;
    } else if (bitcast<u32>(j) == 0xc3160000u && p_l <= z - p_h) {
        return sn * 0.0;
    }
    // 2^(p_h + p_l)
    let i = j & 0x7fffffff;
    var k = (i >> 23u) - 0x7f;
    var n = 0;
    if (i > 0x3f000000) {
        // |z| > 1/2: n = [z + 1/2]
        n = j + (0x00800000 >> u32(k + 1));
        k = ((n & 0x7fffffff) >> 23u) - 0x7f;
        let t = bitcast<f32>(u32(n) & ~(0x007fffffu >> u32(k)));
        n = ((n & 0x007fffff) | 0x00800000) >> u32(23 - k);
        if (j < 0) {
            n = -n;
        }
        p_h = p_h - t;
    }
    let t = bitcast<f32>(bitcast<u32>(p_l + p_h) & 0xffff8000u);
    let u = t * 6.93145752e-01;
    let v = (p_l - (t - p_h)) * 6.9314718246e-01 + t * 1.42860654e-06;
    z = pl_opaque(u + v);
    let w = v - (z - u);
    let tt = z * z;
    let tp = z - tt * (1.6666667163e-01 + tt * (-2.7777778450e-03 + tt * (6.6137559770e-05
        + tt * (-1.6533901999e-06 + tt * 4.1381369442e-08))));
    let r = (z * tp) / (tp - 2.0) - (w + z * w);
    z = 1.0 - (r - z);
    j = bitcast<i32>(z) + (n << 23u);
    if ((j >> 23u) <= 0) {
        z = pl_scalbn(z, n); // subnormal result
    } else {
        z = bitcast<f32>(j);
    }
    return sn * z;
}

// ---- trigonometry ---------------------------------------------------------------------------

// 2/pi in binary, 32 bits a word, after a zero word (bit i of 2/pi, weight 2^-i, is bit
// i + 31 of this stream, counted from the top of word 0).
const PL_2OPI = array<u32, 8>(0u, 0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u,
    0xdb629599u, 0x3c439041u, 0xfe5163abu);

// |x| - n*pi/2 = hi + lo, |hi| <= pi/4, n mod 4.
struct PlRed {
    n: u32,
    hi: f32,
    lo: f32,
}

// Payne-Hanek reduction in integer arithmetic, for finite |x| >= pi/4 (ux: bits of |x|).
// x = m * 2^(e-23); the 96 bits of 2/pi from bit e-24 on give the product's quadrant (2 bits)
// and 94 bits of fraction; the bits before contribute multiples of 4.
fn pl_rem_pio2(ux: u32) -> PlRed {
    var tab = PL_2OPI;
    let e = i32(ux >> 23u) - 127;
    let m = (ux & 0x007fffffu) | 0x00800000u;
    let q = u32(e + 7);
    let wi = q >> 5u;
    let sh = q & 31u;
    var w0 = tab[wi];
    var w1 = tab[wi + 1u];
    var w2 = tab[wi + 2u];
    if (sh != 0u) {
        w0 = (w0 << sh) | (tab[wi + 1u] >> (32u - sh));
        w1 = (w1 << sh) | (tab[wi + 2u] >> (32u - sh));
        w2 = (w2 << sh) | (tab[wi + 3u] >> (32u - sh));
    }
    // low 96 bits of m * (w0:w1:w2)
    let p2 = pl_mul32(m, w2);
    let p1 = pl_mul32(m, w1);
    let f0 = p2.x;
    let f1 = p2.y + p1.x;
    let f2 = p1.y + m * w0 + select(0u, 1u, f1 < p2.y);
    var n = f2 >> 30u;
    // the fraction, bits 93..0: a 64-bit fixed point a1:a0 (weight 2^-64) of its top bits;
    // past one half, take the next quadrant and the negated remainder
    var g2 = f2 & 0x3fffffffu;
    var g1 = f1;
    var g0 = f0;
    let neg = (g2 & 0x20000000u) != 0u;
    if (neg) {
        n = n + 1u;
        g0 = ~g0 + 1u;
        g1 = ~g1 + select(0u, 1u, g0 == 0u);
        g2 = (~g2 + select(0u, 1u, g0 == 0u && g1 == 0u)) & 0x3fffffffu;
    }
    let a1 = (g2 << 2u) | (g1 >> 30u);
    let a0 = (g1 << 2u) | (g0 >> 30u);
    // times pi/2 = 0xc90fdaa22168c234 * 2^-63: the top 64 bits of the 128-bit product
    let b1 = 0xc90fdaa2u;
    let b0 = 0x2168c234u;
    let x00 = pl_mul32(a0, b0);
    let x01 = pl_mul32(a0, b1);
    let x10 = pl_mul32(a1, b0);
    let x11 = pl_mul32(a1, b1);
    var s1 = x00.y + x01.x;
    var c1 = select(0u, 1u, s1 < x01.x);
    s1 = s1 + x10.x;
    c1 = c1 + select(0u, 1u, s1 < x10.x);
    var s2 = x01.y + x10.y;
    var c2 = select(0u, 1u, s2 < x10.y);
    s2 = s2 + x11.x;
    c2 = c2 + select(0u, 1u, s2 < x11.x);
    s2 = s2 + c1;
    c2 = c2 + select(0u, 1u, s2 < c1);
    let s3 = x11.y + c2;
    // r = (s3:s2) * 2^-63 as hi + lo, 24 bits each
    var lz: u32;
    var nh: u32;
    var nl: u32;
    if (s3 != 0u) {
        lz = 31u - firstLeadingBit(s3);
        nh = s3;
        nl = s2;
        if (lz != 0u) {
            nh = (s3 << lz) | (s2 >> (32u - lz));
            nl = s2 << lz;
        }
    } else {
        if (s2 == 0u) {
            return PlRed(n & 3u, 0.0, 0.0);
        }
        lz = 63u - firstLeadingBit(s2);
        nh = s2 << (lz - 32u);
        nl = 0u;
    }
    let hi = f32(nh >> 8u) * bitcast<f32>((104u - lz) << 23u);
    let lo = f32(((nh & 0xffu) << 16u) | (nl >> 16u)) * bitcast<f32>((80u - lz) << 23u);
    if (neg) {
        return PlRed(n & 3u, -hi, -lo);
    }
    return PlRed(n & 3u, hi, lo);
}

fn pl_reduce(ax: f32) -> PlRed {
    let ux = bitcast<u32>(ax);
    if (ux < 0x3f490fdbu) {
        return PlRed(0u, ax, 0.0);
    }
    return pl_rem_pio2(ux);
}

// sin(x + y) and cos(x + y) for |x| <= pi/4, |y| << ulp(x) (fdlibm's kernels, f64
// coefficients rounded to f32).
fn pl_ksin(x: f32, y: f32) -> f32 {
    let z = x * x;
    let w = z * z;
    let r = 8.33333333332248946124e-03 + z * (-1.98412698298579493134e-04 + z * 2.75573137070700676789e-06)
        + z * w * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10);
    let v = z * x;
    return x - ((z * (0.5 * y - v * r) - y) - v * -1.66666666666666324348e-01);
}

fn pl_kcos(x: f32, y: f32) -> f32 {
    let z = x * x;
    let w = z * z;
    let r = z * (4.16666666666666019037e-02 + z * (-1.38888888888741095749e-03 + z * 2.48015872894767294178e-05))
        + w * w * (-2.75573143513906633035e-07 + z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11));
    let hz = 0.5 * z;
    let c = pl_opaque(1.0 - hz);
    return c + (((1.0 - c) - hz) + (z * r - x * y));
}

fn m_sin_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) >= 0x7f800000u) {
        return select(m_nan_f32(), x, m_isnan_f32(x));
    }
    let rd = pl_reduce(m_fabs_f32(x));
    var s: f32;
    switch rd.n {
        case 0u: { s = pl_ksin(rd.hi, rd.lo); }
        case 1u: { s = pl_kcos(rd.hi, rd.lo); }
        case 2u: { s = -pl_ksin(rd.hi, rd.lo); }
        default: { s = -pl_kcos(rd.hi, rd.lo); }
    }
    return bitcast<f32>(bitcast<u32>(s) ^ (u & 0x80000000u));
}

fn m_cos_f32(x: f32) -> f32 {
    if (m_isnan_f32(x) || m_isinf_f32(x)) {
        return select(m_nan_f32(), x, m_isnan_f32(x));
    }
    let rd = pl_reduce(m_fabs_f32(x));
    switch rd.n {
        case 0u: { return pl_kcos(rd.hi, rd.lo); }
        case 1u: { return -pl_ksin(rd.hi, rd.lo); }
        case 2u: { return -pl_kcos(rd.hi, rd.lo); }
        default: { return pl_ksin(rd.hi, rd.lo); }
    }
}

fn m_tan_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    if ((u & 0x7fffffffu) >= 0x7f800000u) {
        return select(m_nan_f32(), x, m_isnan_f32(x));
    }
    if ((u & 0x7fffffffu) < 0x39800000u) {
        return x; // |x| < 2^-12
    }
    let rd = pl_reduce(m_fabs_f32(x));
    let s = pl_ksin(rd.hi, rd.lo);
    let c = pl_kcos(rd.hi, rd.lo);
    let t = select(s / c, -c / s, (rd.n & 1u) == 1u);
    return bitcast<f32>(bitcast<u32>(t) ^ (u & 0x80000000u));
}

// atanf (FreeBSD s_atanf.c).
fn pl_atan(x0: f32) -> f32 {
    var x = x0;
    let u = bitcast<u32>(x);
    let ix = u & 0x7fffffffu;
    if (ix >= 0x4c800000u) {
        // |x| >= 2^26
        if (m_isnan_f32(x)) {
            return x;
        }
        // pi/2 correctly rounded (musl's atanhi[3] + 0x1p-120 is one ulp below)
        return bitcast<f32>(0x3fc90fdbu | (u & 0x80000000u));
    }
    var id = -1;
    if (ix < 0x3ee00000u) {
        // |x| < 0.4375
        if (ix < 0x39800000u) {
            return x;
        }
    } else {
        x = m_fabs_f32(x);
        if (ix < 0x3f980000u) {
            if (ix < 0x3f300000u) {
                id = 0;
                x = (2.0 * x - 1.0) / (2.0 + x);
            } else {
                id = 1;
                x = (x - 1.0) / (x + 1.0);
            }
        } else if (ix < 0x401c0000u) {
            id = 2;
            x = (x - 1.5) / (1.0 + 1.5 * x);
        } else {
            id = 3;
            x = -1.0 / x;
        }
    }
    let z = x * x;
    let w = z * z;
    let s1 = z * (3.3333328366e-01 + w * (1.4253635705e-01 + w * 6.1687607318e-02));
    let s2 = w * (-1.9999158382e-01 + w * -1.0648017377e-01);
    if (id < 0) {
        return x - x * (s1 + s2);
    }
    var hi = array<f32, 4>(4.6364760399e-01, 7.8539812565e-01, 9.8279368877e-01, 1.5707962513e+00);
    var lo = array<f32, 4>(5.0121582440e-09, 3.7748947079e-08, 3.4473217170e-08, 7.5497894159e-08);
    let r = hi[id] - ((x * (s1 + s2) - lo[id]) - x);
    return bitcast<f32>(bitcast<u32>(r) | (u & 0x80000000u));
}

// atan2f (FreeBSD e_atan2f.c).
fn m_atan2_f32(y: f32, x: f32) -> f32 {
    if (m_isnan_f32(x) || m_isnan_f32(y)) {
        return m_nan_f32();
    }
    let pi = 3.1415927410e+00;
    let pi_lo = -8.7422776573e-08;
    var ix = bitcast<u32>(x);
    var iy = bitcast<u32>(y);
    if (ix == 0x3f800000u) {
        return pl_atan(y);
    }
    let m = ((iy >> 31u) & 1u) | ((ix >> 30u) & 2u); // 2*sign(x) + sign(y)
    ix = ix & 0x7fffffffu;
    iy = iy & 0x7fffffffu;
    if (iy == 0u) {
        switch m {
            case 0u, 1u: { return y; }
            case 2u: { return pi; }
            default: { return -pi; }
        }
    }
    if (ix == 0u) {
        return select(pi / 2.0, -pi / 2.0, (m & 1u) != 0u);
    }
    if (ix == 0x7f800000u) {
        if (iy == 0x7f800000u) {
            switch m {
                case 0u: { return pi / 4.0; }
                case 1u: { return -pi / 4.0; }
                case 2u: { return 3.0 * pi / 4.0; }
                default: { return -3.0 * pi / 4.0; }
            }
        }
        switch m {
            case 0u: { return 0.0; }
            case 1u: { return -0.0; }
            case 2u: { return pi; }
            default: { return -pi; }
        }
    }
    if (ix + (26u << 23u) < iy || iy == 0x7f800000u) {
        return select(pi / 2.0, -pi / 2.0, (m & 1u) != 0u);
    }
    var z: f32;
    if ((m & 2u) != 0u && iy + (26u << 23u) < ix) {
        z = 0.0; // |y/x| < 2^-26, x < 0
    } else {
        z = pl_atan(m_fabs_f32(y / x));
    }
    switch m {
        case 0u: { return z; }
        case 1u: { return -z; }
        case 2u: { return pi - pl_opaque(z - pi_lo); }
        default: { return pl_opaque(z - pi_lo) - pi; }
    }
}

// ---- the op tables' float functions (cpu/math.rs, step for step) ---------------------------

// On the bits: Mesa pattern-matches the compare form into an fsign that gives -0 for +0.
fn sign_f_f32(x: f32) -> f32 {
    let u = bitcast<u32>(x);
    if (m_isnan_f32(x)) {
        return x;
    }
    if ((u & 0x7fffffffu) == 0u) {
        return 0.0;
    }
    return bitcast<f32>(0x3f800000u | (u & 0x80000000u));
}

fn relu_f_f32(x: f32) -> f32 {
    if (m_isnan_f32(x) || x > 0.0) {
        return x;
    }
    return 0.0;
}

fn sigmoid_f32(x: f32) -> f32 {
    return 1.0 / (1.0 + m_exp_f32(-x));
}

fn gelu_erf_f32(x: f32) -> f32 {
    return 0.5 * x * (1.0 + m_erf_f32(x * 0.7071067811865476));
}

fn gelu_tanh_f32(x: f32) -> f32 {
    let k = 0.7978845608028654; // sqrt(2/pi) rounded to f32, as the CPU computes it
    return 0.5 * x * (1.0 + m_tanh_f32(k * (x + pl_mul(0.044715 * x * x, x))));
}

fn softplus_f32(x: f32) -> f32 {
    if (x > 20.0) {
        return x;
    }
    return m_log1p_f32(m_exp_f32(x));
}

fn floor_div_real_f32(a: f32, b: f32) -> f32 {
    if ((bitcast<u32>(b) & 0x7fffffffu) == 0u) {
        return pl_div0(a, b);
    }
    let m = m_fmod_f32(a, b);
    var div = (a - m) / b;
    if (!(m == 0.0) && ((b < 0.0) != (m < 0.0))) {
        div = div - 1.0;
    }
    if (div == 0.0) {
        return m_copysign_f32(0.0, a / b);
    }
    var fd = m_floor_f32(div);
    if (div - fd > 0.5) {
        fd = fd + 1.0;
    }
    return fd;
}

fn remainder_real_f32(a: f32, b: f32) -> f32 {
    let m = m_fmod_f32(a, b);
    if (!(m == 0.0) && ((b < 0.0) != (m < 0.0))) {
        return m + b;
    }
    return m;
}

fn max_nan_f32(a: f32, b: f32) -> f32 {
    if (m_isnan_f32(a) || m_isnan_f32(b)) {
        return m_nan_f32();
    }
    return select(b, a, a > b);
}

fn min_nan_f32(a: f32, b: f32) -> f32 {
    if (m_isnan_f32(a) || m_isnan_f32(b)) {
        return m_nan_f32();
    }
    return select(b, a, a < b);
}

// PyTorch's lerp: from the nearer end, exact at both.
fn lerp_f_f32(s: f32, e: f32, w: f32) -> f32 {
    let d = e - s;
    if (m_fabs_f32(w) < 0.5) {
        return s + pl_mul(w, d);
    }
    return e - pl_mul(d, 1.0 - w);
}

// ---- integers (IntElem in cpu/math.rs: wrapping, Python-style division) ---------------------

fn w_add_i32(a: i32, b: i32) -> i32 {
    return bitcast<i32>(bitcast<u32>(a) + bitcast<u32>(b));
}
fn w_add_u32(a: u32, b: u32) -> u32 {
    return a + b;
}
fn w_sub_i32(a: i32, b: i32) -> i32 {
    return bitcast<i32>(bitcast<u32>(a) - bitcast<u32>(b));
}
fn w_sub_u32(a: u32, b: u32) -> u32 {
    return a - b;
}
fn w_mul_i32(a: i32, b: i32) -> i32 {
    return bitcast<i32>(bitcast<u32>(a) * bitcast<u32>(b));
}
fn w_mul_u32(a: u32, b: u32) -> u32 {
    return a * b;
}
fn w_neg_i32(a: i32) -> i32 {
    return bitcast<i32>(0u - bitcast<u32>(a));
}
fn w_neg_u32(a: u32) -> u32 {
    return 0u - a;
}
fn is_neg_i32(a: i32) -> bool {
    return a < 0;
}
fn is_neg_u32(a: u32) -> bool {
    return false;
}
fn w_abs_i32(a: i32) -> i32 {
    return select(a, w_neg_i32(a), a < 0);
}
fn w_abs_u32(a: u32) -> u32 {
    return a;
}
fn sign_i_i32(a: i32) -> i32 {
    return select(select(0, -1, a < 0), 1, a > 0);
}
fn sign_i_u32(a: u32) -> u32 {
    return select(0u, 1u, a > 0u);
}

// wrapping_div / wrapping_rem (MIN / -1 = MIN, MIN % -1 = 0); b != 0 is the caller's.
fn pl_wdiv_i32(a: i32, b: i32) -> i32 {
    if (b == -1) {
        return w_neg_i32(a);
    }
    return a / b;
}
fn pl_wrem_i32(a: i32, b: i32) -> i32 {
    if (b == -1) {
        return 0;
    }
    return a % b;
}

fn floor_div_i_i32(a: i32, b: i32) -> i32 {
    let q = pl_wdiv_i32(a, b);
    if (pl_wrem_i32(a, b) != 0 && ((a < 0) != (b < 0))) {
        return w_sub_i32(q, 1);
    }
    return q;
}
fn floor_div_i_u32(a: u32, b: u32) -> u32 {
    return a / b;
}
fn py_rem_i_i32(a: i32, b: i32) -> i32 {
    let r = pl_wrem_i32(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) {
        return w_add_i32(r, b);
    }
    return r;
}
fn py_rem_i_u32(a: u32, b: u32) -> u32 {
    return a % b;
}

// a^b by squaring, wrapping. The CPU walks the bits of b as u64: a negative b's sign
// extension is 32 more one bits.
fn w_pow_i32(a: i32, b: i32) -> i32 {
    var e = bitcast<u32>(b);
    var base = bitcast<u32>(a);
    var acc = 1u;
    loop {
        if (e == 0u) {
            break;
        }
        if ((e & 1u) == 1u) {
            acc = acc * base;
        }
        base = base * base;
        e = e >> 1u;
    }
    if (b < 0) {
        for (var i = 0; i < 32; i = i + 1) {
            acc = acc * base;
            base = base * base;
        }
    }
    return bitcast<i32>(acc);
}
fn w_pow_u32(a: u32, b: u32) -> u32 {
    var e = b;
    var base = a;
    var acc = 1u;
    loop {
        if (e == 0u) {
            break;
        }
        if ((e & 1u) == 1u) {
            acc = acc * base;
        }
        base = base * base;
        e = e >> 1u;
    }
    return acc;
}

// Shifts past the width (or by a negative amount) give 0, or the sign fill for >>.
fn shl_i_i32(a: i32, o: i32) -> i32 {
    if (o < 0 || o >= 32) {
        return 0;
    }
    return bitcast<i32>(bitcast<u32>(a) << u32(o));
}
fn shl_i_u32(a: u32, o: u32) -> u32 {
    if (o >= 32u) {
        return 0u;
    }
    return a << o;
}
fn shr_i_i32(a: i32, o: i32) -> i32 {
    if (o < 0 || o >= 32) {
        return select(0, -1, a < 0);
    }
    return a >> u32(o);
}
fn shr_i_u32(a: u32, o: u32) -> u32 {
    if (o >= 32u) {
        return 0u;
    }
    return a >> o;
}

// ---- 64-bit integers on (low, high) word pairs: wrapping, as i64 on the CPU ------------------

fn i64_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn i64_mul(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let p = pl_mul32(a.x, b.x);
    return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}
fn i64_from_i32(x: i32) -> vec2<u32> {
    return vec2<u32>(bitcast<u32>(x), select(0u, 0xffffffffu, x < 0));
}
fn i64_from_u32(x: u32) -> vec2<u32> {
    return vec2<u32>(x, 0u);
}
// Signed a < b.
fn i64_lt(a: vec2<u32>, b: vec2<u32>) -> bool {
    let ah = bitcast<i32>(a.y);
    let bh = bitcast<i32>(b.y);
    return ah < bh || (ah == bh && a.x < b.x);
}

// ---- double-f32: a pair (hi, lo) of f32 with hi = fl(hi + lo) -------------------------------
// The stand-in for the f64 accumulator of f32 sums, means and products (WGSL has no f64): about
// 48 significant bits, so the result rounded to f32 is the f64 accumulator's but for sums that
// fall within 2^-48 of a rounding boundary. Its exponent range is f32's: a partial sum or
// product past f32's largest value is inf here where f64 would hold it. Every step is pinned
// (pl_opaque): reassociated, the error terms would fold to zero.

fn pl_finite(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7f800000u) != 0x7f800000u;
}

// (s, e) with s + e = a + b exactly (Knuth's TwoSum); e = 0 when s is not finite.
fn df_two_sum(a: f32, b: f32) -> vec2<f32> {
    let s = pl_opaque(a + b);
    if (!pl_finite(s)) {
        return vec2<f32>(s, 0.0);
    }
    let bb = pl_opaque(s - a);
    let e = pl_opaque(pl_opaque(a - pl_opaque(s - bb)) + pl_opaque(b - bb));
    return vec2<f32>(s, e);
}

// (p, e) with p + e = a * b exactly (Dekker's product, by 12-bit halves) where the halves'
// products neither overflow nor underflow; else e = 0 (p alone, one rounding).
fn df_two_prod(a: f32, b: f32) -> vec2<f32> {
    let p = pl_mul(a, b);
    let ea = (bitcast<u32>(a) >> 23u) & 0xffu;
    let eb = (bitcast<u32>(b) >> 23u) & 0xffu;
    let ep = (bitcast<u32>(p) >> 23u) & 0xffu;
    if (ea == 0u || eb == 0u || ea > 237u || eb > 237u || ep > 252u || ea + eb < 176u) {
        return vec2<f32>(p, 0.0);
    }
    let ta = pl_mul(4097.0, a);
    let ah = pl_opaque(ta - pl_opaque(ta - a));
    let al = pl_opaque(a - ah);
    let tb = pl_mul(4097.0, b);
    let bh = pl_opaque(tb - pl_opaque(tb - b));
    let bl = pl_opaque(b - bh);
    let e1 = pl_opaque(pl_mul(ah, bh) - p);
    let e2 = pl_opaque(e1 + pl_mul(ah, bl));
    let e3 = pl_opaque(e2 + pl_mul(al, bh));
    return vec2<f32>(p, pl_opaque(e3 + pl_mul(al, bl)));
}

fn df_add_f(a: vec2<f32>, x: f32) -> vec2<f32> {
    let s = df_two_sum(a.x, x);
    if (!pl_finite(s.x)) {
        return s;
    }
    return df_two_sum(s.x, pl_opaque(s.y + a.y));
}

fn df_add(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let s = df_two_sum(a.x, b.x);
    if (!pl_finite(s.x)) {
        return s;
    }
    return df_two_sum(s.x, pl_opaque(pl_opaque(s.y + a.y) + b.y));
}

fn df_mul_f(a: vec2<f32>, x: f32) -> vec2<f32> {
    let p = df_two_prod(a.x, x);
    if (!pl_finite(p.x)) {
        return vec2<f32>(p.x, 0.0);
    }
    return df_two_sum(p.x, pl_opaque(p.y + pl_mul(a.y, x)));
}

fn df_mul(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
    let p = df_two_prod(a.x, b.x);
    if (!pl_finite(p.x)) {
        return vec2<f32>(p.x, 0.0);
    }
    let c = pl_opaque(pl_mul(a.x, b.y) + pl_mul(a.y, b.x));
    return df_two_sum(p.x, pl_opaque(p.y + c));
}

// a / n rounded to f32 (n > 0, a double-f32 count): the quotient corrected by its remainder,
// so the driver's division (WGSL promises 2.5 ulp) does not decide the last bit.
fn df_div_f32(a: vec2<f32>, n: vec2<f32>) -> f32 {
    let q1 = a.x / n.x;
    if (!pl_finite(q1) || a.x == 0.0) {
        return q1;
    }
    let p = df_two_prod(q1, n.x);
    let r0 = pl_opaque(pl_opaque(a.x - p.x) - p.y);
    let r = pl_opaque(pl_opaque(r0 + a.y) - pl_mul(q1, n.y));
    return q1 + pl_opaque(r / n.x);
}
