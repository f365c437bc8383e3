//! Moving a block of 4-byte elements across a transposition, bit for bit: the inner step of
//! a transposing copy and of staging a transposed operand (see `strided::Tiling`). With AVX2
//! it goes 8×8 at a time through registers — eight full-width loads along the source's
//! contiguous dim, eight full-width stores along the destination's — otherwise element by
//! element. Either way every element is moved exactly once; only the speed differs.

/// `dst[r·drow + c] = src[r + c·scol]` for `r < rows`, `c < cols` (the source contiguous along
/// `r`, the destination along `c`). With `ahead` > 0, source rows (`c`) that many ahead of the
/// eight being moved are prefetched ([`STAGE_AHEAD`] for staging).
///
/// # Safety
/// Both blocks lie inside live allocations; they don't overlap.
#[inline]
pub(crate) unsafe fn transpose_block_4(
    src: *const u32,
    scol: isize,
    dst: *mut u32,
    drow: isize,
    rows: usize,
    cols: usize,
    ahead: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if rows >= 8 && cols >= 8 && std::arch::is_x86_feature_detected!("avx2") {
            let (r8, c8) = (rows / 8 * 8, cols / 8 * 8);
            // eight source rows at a time, each read along its whole stretch of the block
            for c in (0..c8).step_by(8) {
                if ahead > 0 {
                    prefetch_rows(src, scol, c + ahead, (c + ahead + 8).min(cols), r8);
                }
                for r in (0..r8).step_by(8) {
                    let s = src.offset(r as isize + c as isize * scol);
                    avx2::t8x8(s, scol, dst.offset(r as isize * drow + c as isize), drow);
                }
            }
            // the ragged edges: the last rows % 8 rows, then the last cols % 8 columns
            scalar(
                src.add(r8),
                scol,
                dst.offset(r8 as isize * drow),
                drow,
                rows - r8,
                cols,
            );
            scalar(
                src.offset(c8 as isize * scol),
                scol,
                dst.add(c8),
                drow,
                r8,
                cols - c8,
            );
            return;
        }
    }
    scalar(src, scol, dst, drow, rows, cols)
}

/// How many source rows ahead of the eight being moved a staging transposition asks for. The
/// block's source rows are short stretches of rows far apart, which the hardware prefetcher
/// does not follow; asking early lets their memory latency overlap the shuffles of the rows
/// before. Measured on the 2-core EPYC VM (4096² f32, `stride bench cpu`, six alternating
/// runs of builds with and without, best times): `mul_` into `w.t()` 8.5-9.0 ms against
/// 8.1-10.2 without (medians 9.1-11.2 against 10.6-14.3), `neg` of `.t()` 7.3-8.5 against
/// 8.2-9.4; `a.t() + b` level within the VM's noise. The transposing copy into a fresh tensor
/// (`contiguous()`) measured slower with it in one series (11.7-12.3 ms against 10.1-10.9)
/// and level in another, so the copy passes 0.
pub(crate) const STAGE_AHEAD: usize = 16;

/// Asks for source rows `from..to` (each `len` elements from `src + row·scol`) to be brought
/// into L1.
#[inline(always)]
fn prefetch_rows(src: *const u32, scol: isize, from: usize, to: usize, len: usize) {
    for row in from..to {
        let p = src.wrapping_offset(row as isize * scol);
        super::prefetch::stretch(p, len * 4, super::prefetch::Level::L1);
    }
}

#[inline(always)]
unsafe fn scalar(
    src: *const u32,
    scol: isize,
    dst: *mut u32,
    drow: isize,
    rows: usize,
    cols: usize,
) {
    for c in 0..cols {
        let s = src.offset(c as isize * scol);
        for r in 0..rows {
            *dst.offset(r as isize * drow + c as isize) = *s.add(r);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// `dst[i·ds + j] = src[i + j·ss]` for an 8×8 block.
    #[target_feature(enable = "avx2")]
    pub unsafe fn t8x8(src: *const u32, ss: isize, dst: *mut u32, ds: isize) {
        let s = src as *const f32;
        let d = dst as *mut f32;
        let ld = |j: isize| _mm256_loadu_ps(s.offset(j * ss));
        let (r0, r1, r2, r3) = (ld(0), ld(1), ld(2), ld(3));
        let (r4, r5, r6, r7) = (ld(4), ld(5), ld(6), ld(7));
        let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
        let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
        let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
        let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
        let (u0, u1) = (
            _mm256_shuffle_ps::<0x44>(t0, t2),
            _mm256_shuffle_ps::<0xEE>(t0, t2),
        );
        let (u2, u3) = (
            _mm256_shuffle_ps::<0x44>(t1, t3),
            _mm256_shuffle_ps::<0xEE>(t1, t3),
        );
        let (u4, u5) = (
            _mm256_shuffle_ps::<0x44>(t4, t6),
            _mm256_shuffle_ps::<0xEE>(t4, t6),
        );
        let (u6, u7) = (
            _mm256_shuffle_ps::<0x44>(t5, t7),
            _mm256_shuffle_ps::<0xEE>(t5, t7),
        );
        let st = |i: isize, v| _mm256_storeu_ps(d.offset(i * ds), v);
        st(0, _mm256_permute2f128_ps::<0x20>(u0, u4));
        st(1, _mm256_permute2f128_ps::<0x20>(u1, u5));
        st(2, _mm256_permute2f128_ps::<0x20>(u2, u6));
        st(3, _mm256_permute2f128_ps::<0x20>(u3, u7));
        st(4, _mm256_permute2f128_ps::<0x31>(u0, u4));
        st(5, _mm256_permute2f128_ps::<0x31>(u1, u5));
        st(6, _mm256_permute2f128_ps::<0x31>(u2, u6));
        st(7, _mm256_permute2f128_ps::<0x31>(u3, u7));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn moves_every_element_once_at_any_size() {
        // the shuffles move bits: NaN payloads survive
        let nan = f32::from_bits(0x7fa0_0001).to_bits();
        for (rows, cols) in [(1, 1), (8, 8), (9, 17), (16, 8), (7, 30), (33, 64)] {
            let scol = rows as isize + 3;
            let src: Vec<u32> = (0..(cols as u32 * scol as u32))
                .map(|i| if i == 5 { nan } else { i })
                .collect();
            let drow = cols as isize + 2;
            // with and without prefetching ahead (a hint: the result must not change)
            for ahead in [0, super::STAGE_AHEAD] {
                let mut dst = vec![u32::MAX; rows * drow as usize];
                unsafe {
                    super::transpose_block_4(
                        src.as_ptr(),
                        scol,
                        dst.as_mut_ptr(),
                        drow,
                        rows,
                        cols,
                        ahead,
                    )
                };
                for r in 0..rows {
                    for c in 0..drow as usize {
                        let got = dst[r * drow as usize + c];
                        let want = if c < cols {
                            src[r + c * scol as usize]
                        } else {
                            u32::MAX
                        };
                        assert_eq!(got, want, "{rows}x{cols} ahead {ahead} at ({r}, {c})");
                    }
                }
            }
        }
    }
}
