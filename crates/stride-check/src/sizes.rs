//! Sizes: small, odd, 0 and 1, and both sides of every power of two up to 1025, in every dim
//! position of 1-D to 4-D shapes, so tile and vector-width boundaries are crossed.
//!
//! The full sweep ([`sweep_shapes`]) is what `stride check --full` runs for every op, form,
//! dtype and layout. The default run samples it ([`sampled_shapes`]): each (op, form, dtype,
//! layout) combination gets one small "core" shape plus four sweep shapes, rotated so that
//! across an op's combinations every sweep shape is visited.

/// 0, 1, small odd sizes, and 2^k − 1, 2^k, 2^k + 1 for 2^k up to 1024.
pub fn sweep_sizes() -> Vec<usize> {
    let mut v = vec![0, 1, 2, 3, 5, 7];
    let mut p = 4;
    while p <= 1024 {
        for n in [p - 1, p, p + 1] {
            if !v.contains(&n) {
                v.push(n);
            }
        }
        p *= 2;
    }
    v.sort_unstable();
    v
}

/// The filler dims each rank uses; one position at a time is replaced by a sweep size.
const BASES: [&[usize]; 4] = [&[1], &[3, 2], &[2, 3, 2], &[2, 1, 3, 2]];

/// Every sweep size in every dim position of 1-D … 4-D shapes, plus the 0-d shape.
pub fn sweep_shapes() -> Vec<Vec<usize>> {
    static SWEEP: std::sync::OnceLock<Vec<Vec<usize>>> = std::sync::OnceLock::new();
    SWEEP.get_or_init(make_sweep).clone()
}

fn make_sweep() -> Vec<Vec<usize>> {
    let mut out = vec![vec![]];
    for n in sweep_sizes() {
        for base in BASES {
            for pos in 0..base.len() {
                let mut s = base.to_vec();
                s[pos] = n;
                if !out.contains(&s) {
                    out.push(s);
                }
            }
        }
    }
    out
}

/// Small shapes every combination starts from: 0-d, empty, single element, odd 2-D … 4-D,
/// size-1 and size-0 dims in the middle.
pub const CORE: [&[usize]; 10] = [
    &[],
    &[5],
    &[3, 4],
    &[2, 3, 4],
    &[0],
    &[1],
    &[2, 1, 3, 4],
    &[3, 0, 2],
    &[1, 1],
    &[7, 1, 5],
];

/// The shapes of one combination: a core shape and `extra` sweep shapes, chosen by `counter`
/// (the combination's sequence number within its op) so consecutive combinations walk the
/// whole sweep.
pub fn sampled_shapes(counter: usize, extra: usize) -> Vec<Vec<usize>> {
    static SWEEP: std::sync::OnceLock<Vec<Vec<usize>>> = std::sync::OnceLock::new();
    let sweep = SWEEP.get_or_init(make_sweep);
    let mut out = vec![CORE[counter % CORE.len()].to_vec()];
    for j in 0..extra {
        // 97 is coprime with the sweep's length, so the walk covers it evenly
        let s = sweep[(counter * extra + j) * 97 % sweep.len()].clone();
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sweep_crosses_powers_of_two() {
        let s = sweep_sizes();
        for n in [0, 1, 31, 32, 33, 1023, 1024, 1025] {
            assert!(s.contains(&n));
        }
        let shapes = sweep_shapes();
        assert!(shapes.contains(&vec![2, 1, 3, 1025]));
        assert!(shapes.contains(&vec![1025, 2]));
        // the rotation visits every sweep shape
        let mut seen = std::collections::HashSet::new();
        for c in 0..shapes.len() {
            for sh in sampled_shapes(c, crate::runner::SWEEP_SHAPES_PER_COMBINATION)
                .into_iter()
                .skip(1)
            {
                seen.insert(sh);
            }
        }
        assert_eq!(seen.len(), shapes.len());
    }
}
