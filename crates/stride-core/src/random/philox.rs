//! Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): the
//! counter-based generator of Random123, cuRAND's `curand_Philox4x32_10` and PyTorch's CUDA
//! generator. A pure function of a 128-bit counter and a 64-bit key, so any element of a
//! stream can be computed on its own, on any device, by any thread.

/// Round multipliers.
pub const M0: u32 = 0xD251_1F53;
pub const M1: u32 = 0xCD9E_8D57;
/// Key schedule increments (the golden ratio and √3 − 1, as 32-bit fractions).
pub const W0: u32 = 0x9E37_79B9;
pub const W1: u32 = 0xBB67_AE85;

#[inline(always)]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = a as u64 * b as u64;
    ((p >> 32) as u32, p as u32)
}

#[inline(always)]
fn round(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mulhilo(M0, c[0]);
    let (hi1, lo1) = mulhilo(M1, c[2]);
    [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
}

/// The 10-round Philox4x32 bijection of `counter` under `key` (Random123's
/// `philox4x32_R(10, ctr, key)`).
#[inline]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (counter, key);
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        c = round(c, k);
    }
    c
}

/// Block `index` of the stream of `seed`: counter `(lo32(index), hi32(index), 0, 0)`, key
/// `(lo32(seed), hi32(seed))`.
#[inline]
pub fn block(seed: u64, index: u64) -> [u32; 4] {
    philox4x32_10(
        [index as u32, (index >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// Word `w` of the stream of `seed`: word `w % 4` of block `w / 4`.
#[inline]
pub fn word(seed: u64, w: u64) -> u32 {
    block(seed, w / 4)[(w % 4) as usize]
}

/// Reads words of one stream in any order, computing each block once while consecutive reads
/// stay in it.
#[derive(Debug, Clone)]
pub struct Words {
    seed: u64,
    index: u64,
    block: [u32; 4],
}

impl Words {
    pub fn new(seed: u64) -> Words {
        Words {
            seed,
            index: 0,
            block: block(seed, 0),
        }
    }
    /// Word `w` of the stream.
    #[inline]
    pub fn get(&mut self, w: u64) -> u32 {
        let i = w / 4;
        if i != self.index {
            self.index = i;
            self.block = block(self.seed, i);
        }
        self.block[(w % 4) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors (`kat_vectors`, philox4x32 10).
    #[test]
    fn random123_known_answers() {
        let cases: [([u32; 4], [u32; 2], [u32; 4]); 3] = [
            (
                [0; 4],
                [0; 2],
                [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8],
            ),
            (
                [u32::MAX; 4],
                [u32::MAX; 2],
                [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd],
            ),
            (
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0],
                [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1],
            ),
        ];
        for (ctr, key, want) in cases {
            assert_eq!(philox4x32_10(ctr, key), want, "ctr {ctr:x?} key {key:x?}");
        }
    }

    #[test]
    fn stream_layout() {
        let seed = 0x0123_4567_89ab_cdef;
        let b = philox4x32_10([5, 0, 0, 0], [0x89ab_cdef, 0x0123_4567]);
        assert_eq!(block(seed, 5), b);
        assert_eq!(word(seed, 22), b[2]);
        let hi = philox4x32_10([7, 1, 0, 0], [0x89ab_cdef, 0x0123_4567]);
        assert_eq!(block(seed, (1 << 32) + 7), hi);
        let mut w = Words::new(seed);
        for i in [22u64, 21, 0, 3, 4, 1 << 34, 22] {
            assert_eq!(w.get(i), word(seed, i));
        }
    }
}
