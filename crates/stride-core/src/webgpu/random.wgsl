// Random fills (random.rs): the CPU's Philox4x32-10 stream and word -> element mapping
// (random/mod.rs), in u32 arithmetic. 64-bit quantities (seed, offset, word indices, i64
// values, f64 bit patterns) are vec2<u32>(lo, hi). Shift amounts stay below 32: WGSL takes a
// runtime shift amount modulo 32.

// ---- 64-bit integers ------------------------------------------------------------------------

fn rnd_add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

fn rnd_sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}

// x >> s, s in [0, 63]
fn rnd_shr(x: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) {
        return x;
    }
    if (s < 32u) {
        return vec2<u32>((x.x >> s) | (x.y << (32u - s)), x.y >> s);
    }
    return vec2<u32>(x.y >> (s - 32u), 0u);
}

// x << s, s in [0, 63]
fn rnd_shl(x: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) {
        return x;
    }
    if (s < 32u) {
        return vec2<u32>(x.x << s, (x.y << s) | (x.x >> (32u - s)));
    }
    return vec2<u32>(0u, x.x << (s - 32u));
}

// the low s bits set, s in [0, 32]
fn rnd_mask(s: u32) -> u32 {
    return select((1u << min(s, 31u)) - 1u, 0xffffffffu, s >= 32u);
}

// whether any bit of x below bit s is set, s in [0, 64]
fn rnd_low_nz(x: vec2<u32>, s: u32) -> bool {
    if (s <= 32u) {
        return (x.x & rnd_mask(s)) != 0u;
    }
    return x.x != 0u || (x.y & rnd_mask(s - 32u)) != 0u;
}

// bit i of x, i in [0, 63]
fn rnd_bit(x: vec2<u32>, i: u32) -> u32 {
    if (i < 32u) {
        return (x.x >> i) & 1u;
    }
    return (x.y >> (i - 32u)) & 1u;
}

// x >> s rounded to nearest, ties to even, s in [1, 63]
fn rnd_shr_rne(x: vec2<u32>, s: u32) -> vec2<u32> {
    let q = rnd_shr(x, s);
    if (rnd_bit(x, s - 1u) == 1u && (rnd_low_nz(x, s - 1u) || (q.x & 1u) == 1u)) {
        return rnd_add64(q, vec2<u32>(1u, 0u));
    }
    return q;
}

// x >> s with the bits shifted out OR-ed into bit 0 (sticky), any s
fn rnd_shr_sticky(x: vec2<u32>, s: u32) -> vec2<u32> {
    if (s == 0u) {
        return x;
    }
    if (s >= 64u) {
        return vec2<u32>(select(0u, 1u, (x.x | x.y) != 0u), 0u);
    }
    let q = rnd_shr(x, s);
    return vec2<u32>(q.x | select(0u, 1u, rnd_low_nz(x, s)), q.y);
}

// The high 64 bits of the 128-bit product x * y.
fn rnd_mulhi64(x: vec2<u32>, y: vec2<u32>) -> vec2<u32> {
    let p0 = pl_mul32(x.x, y.x);
    let p1 = pl_mul32(x.x, y.y);
    let p2 = pl_mul32(x.y, y.x);
    let p3 = pl_mul32(x.y, y.y);
    // word 1 of the product: p0.hi + p1.lo + p2.lo; its carries go up
    let t = p0.y + p1.x;
    let t2 = t + p2.x;
    let carry = select(0u, 1u, t < p0.y) + select(0u, 1u, t2 < t);
    var h = rnd_add64(p3, vec2<u32>(p1.y, 0u));
    h = rnd_add64(h, vec2<u32>(p2.y, 0u));
    return rnd_add64(h, vec2<u32>(carry, 0u));
}

// ---- the stream -----------------------------------------------------------------------------

// Philox4x32-10 of counter (idx.x, idx.y, 0, 0) under key (lo32(seed), hi32(seed)).
fn rnd_block(idx: vec2<u32>, key: vec2<u32>) -> vec4<u32> {
    var c = vec4<u32>(idx.x, idx.y, 0u, 0u);
    var k = key;
    for (var r = 0u; r < 10u; r = r + 1u) {
        if (r > 0u) {
            k = k + vec2<u32>(0x9E3779B9u, 0xBB67AE85u);
        }
        let p0 = pl_mul32(0xD2511F53u, c.x);
        let p1 = pl_mul32(0xCD9E8D57u, c.z);
        c = vec4<u32>(p1.y ^ c.y ^ k.x, p1.x, p0.y ^ c.w ^ k.y, p0.x);
    }
    return c;
}

fn rnd_pick(b: vec4<u32>, j: u32) -> u32 {
    return select(select(b.x, b.y, j == 1u), select(b.z, b.w, j == 3u), j >= 2u);
}

// Word w of the stream: word w % 4 of block w / 4.
fn rnd_word(w: vec2<u32>, key: vec2<u32>) -> u32 {
    let idx = vec2<u32>((w.x >> 2u) | (w.y << 30u), w.y >> 2u);
    return rnd_pick(rnd_block(idx, key), w.x & 3u);
}

// Words w and w + 1 (one block unless w ends one).
fn rnd_word2(w: vec2<u32>, key: vec2<u32>) -> vec2<u32> {
    let j = w.x & 3u;
    let b = rnd_block(vec2<u32>((w.x >> 2u) | (w.y << 30u), w.y >> 2u), key);
    if (j != 3u) {
        return vec2<u32>(rnd_pick(b, j), rnd_pick(b, j + 1u));
    }
    return vec2<u32>(b.w, rnd_word(rnd_add64(w, vec2<u32>(1u, 0u)), key));
}

// ---- f64 arithmetic on the bits (uniform draws) ---------------------------------------------
// The CPU computes a uniform as T(low + (high - low) * u24) in f64: one f64 product, one f64
// sum, one rounding to T. WGSL has no f64, so these three steps are done here exactly as IEEE
// round-to-nearest-even does them. A number is (-1)^s * m * 2^e with m in [2^52, 2^53), or
// zero (m = 0). Only normal operands reach this code (the host sends tiny ones to the CPU),
// and then every product and sum is normal too.

struct RndF {
    s: u32,
    e: i32,
    m: vec2<u32>,
}

// f64 bits (normal or zero) -> RndF
fn rnd_unpack(b: vec2<u32>) -> RndF {
    let be = (b.y >> 20u) & 0x7ffu;
    if (be == 0u) {
        return RndF(b.y >> 31u, 0, vec2<u32>(0u, 0u));
    }
    return RndF(b.y >> 31u, i32(be) - 1075, vec2<u32>(b.x, (b.y & 0xfffffu) | 0x100000u));
}

// d * (k * 2^-24) rounded to f64, d nonzero, k in [1, 2^24)
fn rnd_mul_u24(d: RndF, k: u32) -> RndF {
    let p0 = pl_mul32(d.m.x, k);
    let p1 = pl_mul32(d.m.y, k);
    // the exact product: 77 bits at most, in words w0, w1, w2
    let w0 = p0.x;
    let w1 = p0.y + p1.x;
    let w2 = p1.y + select(0u, 1u, w1 < p0.y);
    var bits: u32;
    if (w2 != 0u) {
        bits = 65u + firstLeadingBit(w2);
    } else {
        bits = 33u + firstLeadingBit(w1);
    }
    // drop s in [0, 24] bits (all of them in w0), rounding to nearest even
    var s = bits - 53u;
    var q = vec2<u32>(w0, w1);
    if (s > 0u) {
        q = vec2<u32>((w0 >> s) | (w1 << (32u - s)), (w1 >> s) | (w2 << (32u - s)));
        let rb = (w0 >> (s - 1u)) & 1u;
        let sticky = (w0 & rnd_mask(s - 1u)) != 0u;
        if (rb == 1u && (sticky || (q.x & 1u) == 1u)) {
            q = rnd_add64(q, vec2<u32>(1u, 0u));
        }
        if (q.y == 0x200000u) {
            q = vec2<u32>(0u, 0x100000u);
            s = s + 1u;
        }
    }
    return RndF(d.s, d.e + i32(s) - 24, q);
}

// a + b rounded to f64, both nonzero. Ten guard bits and a sticky bit: the shifted-out bits
// of the smaller operand only decide the rounding, which they decide as the exact sum does.
fn rnd_add(a: RndF, b: RndF) -> RndF {
    let a_big = a.e > b.e || (a.e == b.e && (a.m.y > b.m.y || (a.m.y == b.m.y && a.m.x >= b.m.x)));
    var x = b;
    var y = a;
    if (a_big) {
        x = a;
        y = b;
    }
    let mx = rnd_shl(x.m, 10u);
    let my = rnd_shr_sticky(rnd_shl(y.m, 10u), u32(x.e - y.e));
    var e = x.e - 10;
    var r: vec2<u32>;
    if (x.s == y.s) {
        r = rnd_add64(mx, my);
        if ((r.y >> 31u) == 1u) {
            r = vec2<u32>((r.x >> 1u) | (r.y << 31u) | (r.x & 1u), r.y >> 1u);
            e = e + 1;
        }
    } else {
        r = rnd_sub64(mx, my);
        if ((r.x | r.y) == 0u) {
            return RndF(0u, 0, vec2<u32>(0u, 0u)); // x - x is +0
        }
        var top: u32;
        if (r.y != 0u) {
            top = 32u + firstLeadingBit(r.y);
        } else {
            top = firstLeadingBit(r.x);
        }
        r = rnd_shl(r, 62u - top);
        e = e - i32(62u - top);
    }
    var q = rnd_shr_rne(r, 10u);
    e = e + 10;
    if (q.y == 0x200000u) {
        q = vec2<u32>(0u, 0x100000u);
        e = e + 1;
    }
    return RndF(x.s, e, q);
}

// x (nonzero) rounded to a float with ebits exponent and mbits mantissa bits, to nearest even
// from all 53 bits (the CPU's `as f32` and half_round::f64_to_half_bits): its bit pattern.
fn rnd_round(x: RndF, ebits: u32, mbits: u32) -> u32 {
    let sg = x.s << (ebits + mbits);
    let emax = i32((1u << ebits) - 1u);
    let he = x.e + 52 + (emax >> 1u);
    if (he >= emax) {
        return sg | (u32(emax) << mbits);
    }
    var head = 0u;
    var sig = x.m;
    var shift: u32;
    if (he >= 1) {
        head = u32(he) << mbits;
        sig = vec2<u32>(x.m.x, x.m.y & 0xfffffu);
        shift = 52u - mbits;
    } else {
        let sh = 53 - i32(mbits) - he;
        if (sh >= 54) {
            return sg;
        }
        shift = u32(sh);
    }
    let q = rnd_shr(sig, shift).x;
    let up = rnd_bit(sig, shift - 1u) == 1u && (rnd_low_nz(sig, shift - 1u) || (q & 1u) == 1u);
    return sg | (head + q + select(0u, 1u, up));
}

// The bits of T(low + d * k * 2^-24), low and d as f64 bits.
fn rnd_uniform(low: vec2<u32>, d: vec2<u32>, k: u32, ebits: u32, mbits: u32) -> u32 {
    let l = rnd_unpack(low);
    let dd = rnd_unpack(d);
    var s = l;
    if (k != 0u && dd.m.y != 0u) {
        let m = rnd_mul_u24(dd, k);
        if (l.m.y == 0u) {
            s = m;
        } else {
            s = rnd_add(l, m);
        }
    }
    if (s.m.y == 0u) {
        return 0u; // low + 0 with low = ±0, or an exact cancellation: +0
    }
    return rnd_round(s, ebits, mbits);
}

// An order-preserving key of a float's bits (width bits wide, not NaN), -0 and +0 equal.
fn rnd_key(b: u32, width: u32) -> u32 {
    let sb = 1u << (width - 1u);
    let mag = b & (sb - 1u);
    return select(0x80000000u + mag, 0x80000000u - mag, (b & sb) != 0u);
}
