// The CPU backend's Box–Muller uses the `libm` crate (a port of FreeBSD's msun) for log and
// sincos. CUDA's own log/sin/cos differ from it in the last bit now and then, which would
// make randn differ between devices. These are the same algorithms, step for step, so that
// the GPU's normals are bit-identical to the CPU's (with --fmad=false nothing is contracted).
// Only the argument ranges Box–Muller uses are needed: log on (0, 1] and sincos on [0, 2π);
// the reduction for huge arguments (rem_pio2_large) is left out and never reached.

__device__ __forceinline__ u32 hi_word(double x) { return (u32)((u64)__double_as_longlong(x) >> 32); }

// libm::log (e_log.c)
__device__ double lm_log(double x) {
    const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
    const double LG1 = 6.666666666666735130e-01, LG2 = 3.999999999940941908e-01,
                 LG3 = 2.857142874366239149e-01, LG4 = 2.222219843214978396e-01,
                 LG5 = 1.818357216161805012e-01, LG6 = 1.531383769920937332e-01,
                 LG7 = 1.479819860511658591e-01;
    u64 ui = (u64)__double_as_longlong(x);
    u32 hx = (u32)(ui >> 32);
    int k = 0;
    if (hx < 0x00100000u || (hx >> 31) != 0) {
        if ((ui << 1) == 0) return -1. / (x * x);
        if ((hx >> 31) != 0) return (x - x) / 0.0;
        k -= 54;
        x *= 18014398509481984.0; // 2^54
        ui = (u64)__double_as_longlong(x);
        hx = (u32)(ui >> 32);
    } else if (hx >= 0x7ff00000u) {
        return x;
    } else if (hx == 0x3ff00000u && (ui << 32) == 0) {
        return 0.;
    }
    hx += 0x3ff00000u - 0x3fe6a09eu;
    k += (int)(hx >> 20) - 0x3ff;
    hx = (hx & 0x000fffffu) + 0x3fe6a09eu;
    ui = ((u64)hx << 32) | (ui & 0xffffffffull);
    x = __longlong_as_double((i64)ui);
    double f = x - 1.0;
    double hfsq = 0.5 * f * f;
    double s = f / (2.0 + f);
    double z = s * s;
    double w = z * z;
    double t1 = w * (LG2 + w * (LG4 + w * LG6));
    double t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)));
    double r = t2 + t1;
    double dk = (double)k;
    return s * (hfsq + r) + dk * LN2_LO - hfsq + f + dk * LN2_HI;
}

// libm's k_sin (k_sin.c)
__device__ __forceinline__ double lm_k_sin(double x, double y, int iy) {
    const double S1 = -1.66666666666666324348e-01, S2 = 8.33333333332248946124e-03,
                 S3 = -1.98412698298579493134e-04, S4 = 2.75573137070700676789e-06,
                 S5 = -2.50507602534068634195e-08, S6 = 1.58969099521155010221e-10;
    double z = x * x;
    double w = z * z;
    double r = S2 + z * (S3 + z * S4) + z * w * (S5 + z * S6);
    double v = z * x;
    if (iy == 0) return x + v * (S1 + z * r);
    return x - ((z * (0.5 * y - v * r) - y) - v * S1);
}

// libm's k_cos (k_cos.c)
__device__ __forceinline__ double lm_k_cos(double x, double y) {
    const double C1 = 4.16666666666666019037e-02, C2 = -1.38888888888741095749e-03,
                 C3 = 2.48015872894767294178e-05, C4 = -2.75573143513906633035e-07,
                 C5 = 2.08757232129817482790e-09, C6 = -1.13596475577881948265e-11;
    double z = x * x;
    double w = z * z;
    double r = z * (C1 + z * (C2 + z * C3)) + w * w * (C4 + z * (C5 + z * C6));
    double hz = 0.5 * z;
    double w2 = 1.0 - hz;
    return w2 + (((1.0 - w2) - hz) + (z * r - x * y));
}

// libm's rem_pio2 (e_rem_pio2.c) for |x| < 2^20·π/2; returns n, writes y0 + y1 = x − n·π/2.
__device__ int lm_rem_pio2_medium(double x, u32 ix, double* y0o, double* y1o) {
    const double TO_INT = 1.5 / 2.2204460492503131e-16;
    const double INV_PIO2 = 6.36619772367581382433e-01;
    const double PIO2_1 = 1.57079632673412561417e+00, PIO2_1T = 6.07710050650619224932e-11;
    const double PIO2_2 = 6.07710050630396597660e-11, PIO2_2T = 2.02226624879595063154e-21;
    const double PIO2_3 = 2.02226624871116645580e-21, PIO2_3T = 8.47842766036889956997e-32;
    double tmp = x * INV_PIO2 + TO_INT;
    double f_n = tmp - TO_INT;
    int n = (int)f_n;
    double r = x - f_n * PIO2_1;
    double w = f_n * PIO2_1T;
    double y0 = r - w;
    int ey = (int)(((u64)__double_as_longlong(y0) >> 52) & 0x7ff);
    int ex = (int)(ix >> 20);
    if (ex - ey > 16) {
        double t = r;
        w = f_n * PIO2_2;
        r = t - w;
        w = f_n * PIO2_2T - ((t - r) - w);
        y0 = r - w;
        ey = (int)(((u64)__double_as_longlong(y0) >> 52) & 0x7ff);
        if (ex - ey > 49) {
            t = r;
            w = f_n * PIO2_3;
            r = t - w;
            w = f_n * PIO2_3T - ((t - r) - w);
            y0 = r - w;
        }
    }
    *y0o = y0;
    *y1o = (r - y0) - w;
    return n;
}

__device__ int lm_rem_pio2(double x, double* y0, double* y1) {
    const double PIO2_1 = 1.57079632673412561417e+00, PIO2_1T = 6.07710050650619224932e-11;
    int sign = (int)((u64)__double_as_longlong(x) >> 63);
    u32 ix = hi_word(x) & 0x7fffffffu;
    if (ix <= 0x400f6a7au) {
        if ((ix & 0xfffffu) == 0x921fbu) return lm_rem_pio2_medium(x, ix, y0, y1);
        int m = ix <= 0x4002d97cu ? 1 : 2;
        double z;
        if (sign == 0) {
            z = x - m * PIO2_1;
            *y0 = z - m * PIO2_1T;
            *y1 = (z - *y0) - m * PIO2_1T;
            return m;
        }
        z = x + m * PIO2_1;
        *y0 = z + m * PIO2_1T;
        *y1 = (z - *y0) + m * PIO2_1T;
        return -m;
    }
    if (ix <= 0x401c463bu) {
        int m;
        if (ix <= 0x4015fdbcu) {
            if (ix == 0x4012d97cu) return lm_rem_pio2_medium(x, ix, y0, y1);
            m = 3;
        } else {
            if (ix == 0x401921fbu) return lm_rem_pio2_medium(x, ix, y0, y1);
            m = 4;
        }
        double z;
        if (sign == 0) {
            z = x - m * PIO2_1;
            *y0 = z - m * PIO2_1T;
            *y1 = (z - *y0) - m * PIO2_1T;
            return m;
        }
        z = x + m * PIO2_1;
        *y0 = z + m * PIO2_1T;
        *y1 = (z - *y0) + m * PIO2_1T;
        return -m;
    }
    // |x| ≥ 9π/4: the medium reduction (Box–Muller's arguments stay below 2π)
    return lm_rem_pio2_medium(x, ix, y0, y1);
}

// libm::sincos (s_sincos.c)
__device__ void lm_sincos(double x, double* so, double* co) {
    u32 ix = hi_word(x) & 0x7fffffffu;
    if (ix <= 0x3fe921fbu) {
        if (ix < 0x3e46a09eu) { *so = x; *co = 1.0; return; }
        *so = lm_k_sin(x, 0.0, 0);
        *co = lm_k_cos(x, 0.0);
        return;
    }
    if (ix >= 0x7ff00000u) { *so = x - x; *co = x - x; return; }
    double y0, y1;
    int n = lm_rem_pio2(x, &y0, &y1);
    double s = lm_k_sin(y0, y1, 1), c = lm_k_cos(y0, y1);
    switch (n & 3) {
        case 0: *so = s; *co = c; break;
        case 1: *so = c; *co = -s; break;
        case 2: *so = -s; *co = -c; break;
        default: *so = -c; *co = s; break;
    }
}
