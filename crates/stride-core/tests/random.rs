//! Random numbers: Philox known answers, the documented word → element mapping (recomputed
//! here from `philox::word` with independent formulas), reproducibility (same seed, any
//! layout, any thread count, resumption from (seed, offset)), statistics, and errors that
//! leave the operands and the generator unchanged.
//!
//! Only `default_generator_and_manual_seed` touches the default generator: tests run in
//! parallel threads, so every other test uses its own `Generator`.

use stride_core::random::philox::{philox4x32_10, word};
use stride_core::{DType, Device, Error, Generator, GeneratorState, Tensor};

const CPU: Device = Device::Cpu;

fn u24(w: u32) -> f64 {
    (w >> 8) as f64 / 16_777_216.0
}
fn u53(a: u32, b: u32) -> f64 {
    ((((a as u64) << 32) | b as u64) >> 11) as f64 / 9_007_199_254_740_992.0
}
fn bits64(seed: u64, w: u64) -> u64 {
    ((word(seed, w) as u64) << 32) | word(seed, w + 1) as u64
}

fn state(g: &Generator) -> GeneratorState {
    g.get_state()
}

// ----- Philox --------------------------------------------------------------------------------

#[test]
fn philox_random123_known_answers() {
    assert_eq!(
        philox4x32_10([0; 4], [0; 2]),
        [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
    );
    assert_eq!(
        philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
        [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
    );
    assert_eq!(
        philox4x32_10(
            [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
            [0xa4093822, 0x299f31d0]
        ),
        [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
    );
    // the stream: word w is lane w % 4 of counter (w / 4, 0, 0, 0) under key (lo, hi) of seed
    let seed = 0xdead_beef_0000_0007u64;
    let b = philox4x32_10([3, 0, 0, 0], [0x0000_0007, 0xdead_beef]);
    assert_eq!(word(seed, 13), b[1]);
}

// ----- the documented mapping ---------------------------------------------------------------

#[test]
fn rand_follows_the_documented_mapping() {
    let g = Generator::new(1234);
    // f32: one word per element, (w >> 8) * 2^-24
    let a = Tensor::rand([3, 5], DType::F32, &CPU, Some(&g)).unwrap();
    let want: Vec<f32> = (0..15).map(|i| u24(word(1234, i)) as f32).collect();
    assert_eq!(a.to_vec::<f32>().unwrap(), want);
    assert_eq!(state(&g).offset, 15);
    // f64: two words per element, 53 bits, starting where the last draw ended
    let b = Tensor::rand([7], DType::F64, &CPU, Some(&g)).unwrap();
    let want: Vec<f64> = (0..7)
        .map(|i| u53(word(1234, 15 + 2 * i), word(1234, 16 + 2 * i)))
        .collect();
    assert_eq!(b.to_vec::<f64>().unwrap(), want);
    assert_eq!(state(&g).offset, 29);
    // f16/bf16: the f32 draw, rounded once (and kept below 1)
    for dt in [DType::F16, DType::BF16] {
        let s = state(&g);
        let h = Tensor::rand([1000], dt, &CPU, Some(&g))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        for (i, &x) in h.iter().enumerate() {
            let u = u24(word(1234, s.offset + i as u64));
            let r = Tensor::from_vec(vec![u], [1])
                .unwrap()
                .to_dtype(dt)
                .unwrap()
                .to_f64_vec()
                .unwrap()[0];
            assert!(
                x == r || (r == 1.0 && x < 1.0 && x > 0.99),
                "{dt} {i}: {x} vs {u}"
            );
        }
        assert_eq!(state(&g).offset, s.offset + 1000);
    }
    // uniform_(lo, hi) = lo + (hi - lo)·u in f64, rounded once
    let s = state(&g);
    let x = Tensor::zeros([6], DType::F64, &CPU).unwrap();
    x.uniform_(-2.0, 3.0, Some(&g)).unwrap();
    let want: Vec<f64> = (0..6)
        .map(|i| {
            -2.0 + 5.0
                * u53(
                    word(1234, s.offset + 2 * i),
                    word(1234, s.offset + 2 * i + 1),
                )
        })
        .collect();
    assert_eq!(x.to_vec::<f64>().unwrap(), want);
}

#[test]
fn randn_is_box_muller_on_documented_pairs() {
    let g = Generator::new(99);
    g.set_state(GeneratorState {
        seed: 99,
        offset: 5,
    }); // an unaligned start
    let n = 9u64;
    let x = Tensor::randn([n as usize], DType::F64, &CPU, Some(&g))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(state(&g).offset, 5 + 4 * n.div_ceil(2));
    for i in 0..n {
        let p = i / 2;
        let w = |k: u64| word(99, 5 + 4 * p + k);
        let (u1, u2) = (u53(w(0), w(1)), u53(w(2), w(3)));
        let r = (-2.0 * (1.0 - u1).ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        let z = if i % 2 == 0 { r * t.cos() } else { r * t.sin() };
        assert!(
            (x[i as usize] - z).abs() <= 1e-12 * (1.0 + z.abs()),
            "{i}: {} vs {z}",
            x[i as usize]
        );
    }
    let s = state(&g);
    let y = Tensor::randn([5], DType::F32, &CPU, Some(&g))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(state(&g).offset, s.offset + 6);
    for i in 0..5u64 {
        let p = i / 2;
        let (u1, u2) = (
            u24(word(99, s.offset + 2 * p)),
            u24(word(99, s.offset + 2 * p + 1)),
        );
        let r = (-2.0 * (1.0 - u1).ln()).sqrt();
        let t = 2.0 * std::f64::consts::PI * u2;
        let z = if i % 2 == 0 { r * t.cos() } else { r * t.sin() };
        assert!(
            (y[i as usize] as f64 - z).abs() <= 1e-6 * (1.0 + z.abs()),
            "{i}"
        );
    }
    // normal_(mean, std) = mean + std·z
    let s = state(&g);
    let a = Tensor::zeros([4], DType::F64, &CPU).unwrap();
    a.normal_(3.0, 0.5, Some(&g)).unwrap();
    g.set_state(s);
    let z = Tensor::randn([4], DType::F64, &CPU, Some(&g))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let want: Vec<f64> = z.iter().map(|z| 3.0 + 0.5 * z).collect();
    assert_eq!(a.to_vec::<f64>().unwrap(), want);
}

#[test]
fn randint_bernoulli_randperm_follow_the_mapping() {
    let g = Generator::new(7);
    let x = Tensor::randint(-5, 12, [50], DType::I64, &CPU, Some(&g))
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    for (i, &v) in x.iter().enumerate() {
        let b = bits64(7, 2 * i as u64);
        assert_eq!(v, -5 + ((b as u128 * 17) >> 64) as i64);
    }
    assert_eq!(state(&g).offset, 100);
    // every integer dtype gets the same values
    for dt in [DType::I32, DType::U8, DType::F32, DType::F16] {
        g.set_state(GeneratorState { seed: 7, offset: 0 });
        let y = Tensor::randint(0, 100, [50], dt, &CPU, Some(&g)).unwrap();
        assert_eq!(y.dtype(), dt);
        g.set_state(GeneratorState { seed: 7, offset: 0 });
        let z = Tensor::randint(0, 100, [50], DType::I64, &CPU, Some(&g)).unwrap();
        assert_eq!(y.to_f64_vec().unwrap(), z.to_f64_vec().unwrap());
    }
    // bernoulli: u24 < p
    let s = state(&g);
    let b = Tensor::bernoulli_scalar([64], 0.3, DType::U8, &CPU, Some(&g))
        .unwrap()
        .to_vec::<u8>()
        .unwrap();
    for (i, &v) in b.iter().enumerate() {
        assert_eq!(v == 1, u24(word(7, s.offset + i as u64)) < 0.3);
    }
    // bernoulli(probs) uses the same draw, per element probability
    let p: Vec<f64> = (0..64).map(|i| i as f64 / 63.0).collect();
    let pt = Tensor::from_vec(p.clone(), [8, 8]).unwrap();
    let s = state(&g);
    let b = pt.bernoulli(Some(&g)).unwrap();
    assert_eq!(b.dtype(), DType::F64);
    for (i, &v) in b.to_vec::<f64>().unwrap().iter().enumerate() {
        let want = u24(word(7, s.offset + i as u64)) < p[i];
        assert_eq!(v, want as u8 as f64);
    }
    // randperm: indices sorted by their 64-bit keys
    let s = state(&g);
    let r = Tensor::randperm(20, DType::I64, &CPU, Some(&g))
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    let mut want: Vec<i64> = (0..20).collect();
    want.sort_by_key(|&i| bits64(7, s.offset + 2 * i as u64));
    assert_eq!(r, want);
    assert_eq!(state(&g).offset, s.offset + 40);
}

// ----- reproducibility -----------------------------------------------------------------------

#[test]
fn same_seed_same_values_different_seed_different_values() {
    for dt in DType::FLOATS {
        let a = Tensor::rand([100], dt, &CPU, Some(&Generator::new(5))).unwrap();
        let b = Tensor::rand([100], dt, &CPU, Some(&Generator::new(5))).unwrap();
        let c = Tensor::rand([100], dt, &CPU, Some(&Generator::new(6))).unwrap();
        assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
        assert_ne!(a.to_f64_vec().unwrap(), c.to_f64_vec().unwrap());
        let a = Tensor::randn([100], dt, &CPU, Some(&Generator::new(5))).unwrap();
        let b = Tensor::randn([100], dt, &CPU, Some(&Generator::new(5))).unwrap();
        assert_eq!(a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    }
    let g = Generator::new(11);
    let a = Tensor::rand([10], DType::F32, &CPU, Some(&g)).unwrap();
    g.manual_seed(11);
    let b = Tensor::rand([10], DType::F32, &CPU, Some(&g)).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    assert_eq!(g.initial_seed(), 11);
    // seed() reseeds non-deterministically and reports the seed
    let s = g.seed();
    assert_eq!(g.get_state(), GeneratorState { seed: s, offset: 0 });
}

#[test]
fn resuming_from_seed_and_offset() {
    for dt in DType::FLOATS {
        let g = Generator::new(77);
        let whole = Tensor::rand([20], dt, &CPU, Some(&g))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        g.manual_seed(77);
        let mut parts = Tensor::rand([10], dt, &CPU, Some(&g))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        parts.extend(
            Tensor::rand([10], dt, &CPU, Some(&g))
                .unwrap()
                .to_f64_vec()
                .unwrap(),
        );
        assert_eq!(whole, parts, "rand {dt}");
        // normals resume exactly when the first count is even
        g.manual_seed(77);
        let whole = Tensor::randn([20], dt, &CPU, Some(&g))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        g.manual_seed(77);
        let mut parts = Tensor::randn([6], dt, &CPU, Some(&g))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        parts.extend(
            Tensor::randn([14], dt, &CPU, Some(&g))
                .unwrap()
                .to_f64_vec()
                .unwrap(),
        );
        assert_eq!(whole, parts, "randn {dt}");
    }
    let g = Generator::new(3);
    let whole = Tensor::randint(0, 1000, [20], DType::I64, &CPU, Some(&g)).unwrap();
    g.manual_seed(3);
    let a = Tensor::randint(0, 1000, [10], DType::I64, &CPU, Some(&g)).unwrap();
    let b = Tensor::randint(0, 1000, [10], DType::I64, &CPU, Some(&g)).unwrap();
    assert_eq!(
        Tensor::cat(&[&a, &b], 0).unwrap().to_vec::<i64>().unwrap(),
        whole.to_vec::<i64>().unwrap()
    );
    // get_state / set_state replay, and a state moves between generators
    let s = g.get_state();
    let x = Tensor::randn([33], DType::F32, &CPU, Some(&g)).unwrap();
    let h = Generator::new(0);
    h.set_state(s);
    let y = Tensor::randn([33], DType::F32, &CPU, Some(&h)).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), y.to_vec::<f32>().unwrap());
    assert_eq!(g.get_state(), h.get_state());
}

/// Output views of one logical shape in many layouts (transposed, stepped, offset), inside
/// buffers filled with a guard.
fn views(shape: [usize; 2], dtype: DType) -> Vec<(Tensor, Tensor)> {
    let [r, c] = shape;
    let g = |n: usize| Tensor::full([n], -7.0, dtype, &CPU).unwrap();
    let b = g(r * c);
    let t = b.as_strided(&[r, c], &[1, r], 0).unwrap();
    let b2 = g(4 * r * c + 3);
    let s = b2.as_strided(&[r, c], &[4 * c, 2], 3).unwrap();
    let b3 = g(r * c + 9);
    let o = b3.as_strided(&[r, c], &[c, 1], 9).unwrap();
    vec![(b.clone(), b.clone()), (b, t), (b2, s), (b3, o)]
}

#[test]
fn values_do_not_depend_on_the_output_layout() {
    for dt in DType::FLOATS {
        let want_u = Tensor::rand([37, 29], dt, &CPU, Some(&Generator::new(8)))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        let want_n = Tensor::randn([37, 29], dt, &CPU, Some(&Generator::new(8)))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        for (buf, v) in views([37, 29], dt).into_iter().skip(1) {
            let g = Generator::new(8);
            v.uniform_(0.0, 1.0, Some(&g)).unwrap();
            assert_eq!(v.to_f64_vec().unwrap(), want_u, "{dt} {:?}", v.stride());
            let g = Generator::new(8);
            v.normal_(0.0, 1.0, Some(&g)).unwrap();
            assert_eq!(v.to_f64_vec().unwrap(), want_n, "{dt} {:?}", v.stride());
            let guards = buf
                .to_f64_vec()
                .unwrap()
                .iter()
                .filter(|&&x| x == -7.0)
                .count();
            assert_eq!(guards, buf.numel() - v.numel(), "stray writes");
        }
        // *_like follow the logical order too, whatever the source's strides
        let t = Tensor::zeros([29, 37], dt, &CPU).unwrap().t().unwrap();
        let r = t.rand_like(Some(&Generator::new(8))).unwrap();
        assert_eq!(r.stride(), t.stride());
        assert_eq!(r.to_f64_vec().unwrap(), want_u);
        let r = t.randn_like(Some(&Generator::new(8))).unwrap();
        assert_eq!(r.to_f64_vec().unwrap(), want_n);
    }
    // integer and bool fills through views
    let want = Tensor::bernoulli_scalar([37, 29], 0.5, DType::I32, &CPU, Some(&Generator::new(2)))
        .unwrap();
    for (_, v) in views([37, 29], DType::I32) {
        v.bernoulli_(0.5, Some(&Generator::new(2))).unwrap();
        assert_eq!(v.to_vec::<i32>().unwrap(), want.to_vec::<i32>().unwrap());
    }
}

#[test]
fn values_do_not_depend_on_the_thread_count() {
    let draw = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            let g = Generator::new(21);
            let a = Tensor::rand([300, 701], DType::F32, &CPU, Some(&g)).unwrap();
            let b = Tensor::zeros([701, 300], DType::F64, &CPU)
                .unwrap()
                .t()
                .unwrap();
            b.normal_(0.0, 1.0, Some(&g)).unwrap();
            (
                a.to_vec::<f32>().unwrap(),
                b.to_vec::<f64>().unwrap(),
                g.get_state(),
            )
        })
    };
    let one = draw(1);
    assert_eq!(one, draw(4));
    assert_eq!(one, draw(3));
}

#[test]
fn concurrent_draws_take_disjoint_parts_of_the_stream() {
    let g = Generator::new(5);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let g = g.clone();
            std::thread::spawn(move || {
                (0..50)
                    .flat_map(|_| {
                        Tensor::rand([8], DType::F32, &CPU, Some(&g))
                            .unwrap()
                            .to_vec::<f32>()
                            .unwrap()
                    })
                    .collect::<Vec<f32>>()
            })
        })
        .collect();
    let mut all: Vec<u32> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .map(|x| (x * 16_777_216.0) as u32)
        .collect();
    assert_eq!(g.get_state().offset, 4 * 50 * 8);
    all.sort_unstable();
    let mut want: Vec<u32> = (0..1600).map(|i| word(5, i) >> 8).collect();
    want.sort_unstable();
    assert_eq!(all, want);
}

#[test]
fn default_generator_and_manual_seed() {
    // the only test using the default generator (see the module docs)
    stride_core::manual_seed(42);
    let a = Tensor::rand([16], DType::F32, &CPU, None).unwrap();
    let b = Tensor::randn([16], DType::F64, &CPU, None).unwrap();
    assert_eq!(
        stride_core::default_generator().get_state(),
        GeneratorState {
            seed: 42,
            offset: 16 + 32
        }
    );
    stride_core::manual_seed(42);
    assert_eq!(
        Tensor::rand([16], DType::F32, &CPU, None)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        a.to_vec::<f32>().unwrap()
    );
    assert_eq!(
        Tensor::randn([16], DType::F64, &CPU, None)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        b.to_vec::<f64>().unwrap()
    );
    // the same as an explicit generator with that seed
    let g = Generator::new(42);
    assert_eq!(
        Tensor::rand([16], DType::F32, &CPU, Some(&g))
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        a.to_vec::<f32>().unwrap()
    );
}

// ----- statistics ----------------------------------------------------------------------------

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    (
        m,
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0),
    )
}

#[test]
fn uniform_and_normal_moments() {
    let n = 1 << 20;
    for dt in DType::FLOATS {
        let g = Generator::new(1000 + dt as u64);
        let u = Tensor::rand([n], dt, &CPU, Some(&g))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        let (m, v) = mean_var(&u);
        // σ(mean) = 0.000282, σ(var) ≈ 0.000073: bounds are > 5σ
        assert!((m - 0.5).abs() < 0.0015, "{dt} uniform mean {m}");
        assert!((v - 1.0 / 12.0).abs() < 0.0006, "{dt} uniform var {v}");
        assert!(
            u.iter().all(|&x| (0.0..1.0).contains(&x)),
            "{dt} uniform range"
        );
        let z = Tensor::randn([n], dt, &CPU, Some(&g))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        let (m, v) = mean_var(&z);
        // σ(mean) = 0.00098, σ(var) = 0.0014
        assert!(m.abs() < 0.005, "{dt} normal mean {m}");
        assert!((v - 1.0).abs() < 0.008, "{dt} normal var {v}");
        let tail = z.iter().filter(|x| x.abs() > 1.959964).count() as f64 / n as f64;
        assert!((tail - 0.05).abs() < 0.002, "{dt} normal tails {tail}");
    }
    let g = Generator::new(4);
    let x = Tensor::zeros([n], DType::F32, &CPU).unwrap();
    x.uniform_(-3.0, 5.0, Some(&g)).unwrap();
    let u = x.to_f64_vec().unwrap();
    assert!(u.iter().all(|&x| (-3.0..5.0).contains(&x)));
    let (m, _) = mean_var(&u);
    assert!((m - 1.0).abs() < 0.015, "uniform_ mean {m}");
    x.normal_(2.0, 3.0, Some(&g)).unwrap();
    let (m, v) = mean_var(&x.to_f64_vec().unwrap());
    assert!(
        (m - 2.0).abs() < 0.015 && (v - 9.0).abs() < 0.08,
        "normal_ {m} {v}"
    );
    // bf16 rounding never reaches the upper bound
    let b = Tensor::rand([n], DType::BF16, &CPU, Some(&g))
        .unwrap()
        .to_f64_vec()
        .unwrap();
    assert!(b.iter().cloned().fold(0.0, f64::max) < 1.0);
}

fn chi2(counts: &[usize], probs: &[f64]) -> f64 {
    let n: usize = counts.iter().sum();
    counts
        .iter()
        .zip(probs)
        .filter(|(_, &p)| p > 0.0)
        .map(|(&c, &p)| {
            let e = n as f64 * p;
            (c as f64 - e).powi(2) / e
        })
        .sum()
}

#[test]
fn randint_is_uniform() {
    let g = Generator::new(17);
    let x = Tensor::randint(-3, 7, [200_000], DType::I32, &CPU, Some(&g))
        .unwrap()
        .to_vec::<i32>()
        .unwrap();
    let mut counts = vec![0usize; 10];
    for v in x {
        assert!((-3..7).contains(&v));
        counts[(v + 3) as usize] += 1;
    }
    // χ²(9): P(> 33.7) = 1e-4
    assert!(chi2(&counts, &[0.1; 10]) < 33.7, "{counts:?}");
    // a huge range still spans it
    let x = Tensor::randint(i64::MIN, i64::MAX, [1000], DType::I64, &CPU, Some(&g))
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    assert!(x.iter().any(|&v| v < -(1 << 62)) && x.iter().any(|&v| v > 1 << 62));
    let b = Tensor::randint(0, 2, [1000], DType::Bool, &CPU, Some(&g))
        .unwrap()
        .to_vec::<bool>()
        .unwrap();
    let t = b.iter().filter(|&&x| x).count();
    assert!((400..600).contains(&t));
}

#[test]
fn multinomial_with_and_without_replacement() {
    let probs = [0.1, 0.0, 0.2, 0.3, 0.4];
    let weights = [1.0f32, 0.0, 2.0, 3.0, 4.0]; // = 10 · probs, exactly
    let p = Tensor::from_vec(weights.to_vec(), [5]).unwrap();
    let g = Generator::new(23);
    let s = p.multinomial(100_000, true, Some(&g)).unwrap();
    assert_eq!((s.shape(), s.dtype()), (&[100_000usize][..], DType::I64));
    let mut counts = vec![0usize; 5];
    for v in s.to_vec::<i64>().unwrap() {
        counts[v as usize] += 1;
    }
    assert_eq!(counts[1], 0, "a zero-probability category was drawn");
    // χ²(3): P(> 21.1) = 1e-4
    assert!(chi2(&counts, &probs) < 21.1, "{counts:?}");
    // documented algorithm: first category whose running sum exceeds u·total
    let st = g.get_state();
    let s = p
        .multinomial(50, true, Some(&g))
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    for (j, &c) in s.iter().enumerate() {
        let w = st.offset + 2 * j as u64;
        let u = u53(word(23, w), word(23, w + 1));
        let x = u * 10.0;
        let mut acc = 0.0;
        let want = weights.iter().position(|&q| {
            acc += q as f64;
            acc > x
        });
        assert_eq!(Some(c as usize), want);
    }
    // without replacement: distinct, non-zero categories; first draws follow the probabilities
    let rows = 20_000;
    let p2 = Tensor::from_vec(probs.repeat(rows), [rows, 5]).unwrap();
    let s = p2.multinomial(3, false, Some(&g)).unwrap();
    assert_eq!(s.shape(), &[rows, 3]);
    let v = s.to_vec::<i64>().unwrap();
    let mut first = vec![0usize; 5];
    for r in v.chunks(3) {
        assert!(r[0] != r[1] && r[1] != r[2] && r[0] != r[2], "{r:?}");
        assert!(r.iter().all(|&c| c != 1));
        first[r[0] as usize] += 1;
    }
    assert!(chi2(&first, &probs) < 21.1, "{first:?}");
    // all four non-zero categories: a permutation of them
    let s = p
        .multinomial(4, false, Some(&g))
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    let mut sorted = s.clone();
    sorted.sort();
    assert_eq!(sorted, vec![0, 2, 3, 4]);
}

#[test]
fn randperm_bernoulli_dropout() {
    let g = Generator::new(31);
    for n in [0usize, 1, 2, 1000] {
        let p = Tensor::randperm(n, DType::I64, &CPU, Some(&g))
            .unwrap()
            .to_vec::<i64>()
            .unwrap();
        let mut s = p.clone();
        s.sort();
        assert_eq!(s, (0..n as i64).collect::<Vec<_>>());
        if n == 1000 {
            assert_ne!(p, s, "not shuffled");
        }
    }
    let p = Tensor::randperm(200, DType::U8, &CPU, Some(&g)).unwrap();
    assert_eq!(p.dtype(), DType::U8);
    // bernoulli means, and the edge probabilities
    let n = 1 << 18;
    for dt in [DType::F32, DType::Bool, DType::I64, DType::BF16] {
        let b = Tensor::bernoulli_scalar([n], 0.25, dt, &CPU, Some(&g)).unwrap();
        assert_eq!(b.dtype(), dt);
        let v = b.to_f64_vec().unwrap();
        assert!(v.iter().all(|&x| x == 0.0 || x == 1.0));
        let m = v.iter().sum::<f64>() / n as f64;
        assert!((m - 0.25).abs() < 0.005, "{dt} {m}");
        let z = Tensor::bernoulli_scalar([100], 0.0, dt, &CPU, Some(&g))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        let o = Tensor::bernoulli_scalar([100], 1.0, dt, &CPU, Some(&g))
            .unwrap()
            .to_f64_vec()
            .unwrap();
        assert!(z.iter().all(|&x| x == 0.0) && o.iter().all(|&x| x == 1.0));
    }
    let probs = Tensor::from_vec(vec![0.0f32, 1.0, 0.5], [3])
        .unwrap()
        .expand(&[n as i64, 3])
        .unwrap();
    let b = probs.bernoulli(Some(&g)).unwrap();
    assert_eq!((b.dtype(), b.shape()), (DType::F32, &[n, 3][..]));
    let v = b.to_vec::<f32>().unwrap();
    let col = |j: usize| v.iter().skip(j).step_by(3).sum::<f32>() / n as f32;
    assert_eq!((col(0), col(1)), (0.0, 1.0));
    assert!((col(2) - 0.5).abs() < 0.01);
    // dropout: {0, 1/(1-p)}, keep rate 1 - p, and the bool mask has the same draws
    let st = g.get_state();
    let m = Tensor::dropout_mask([n], 0.2, DType::F32, &CPU, Some(&g))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    g.set_state(st);
    let k = Tensor::dropout_mask_bool([n], 0.2, &CPU, Some(&g))
        .unwrap()
        .to_vec::<bool>()
        .unwrap();
    assert!(m
        .iter()
        .zip(&k)
        .all(|(&x, &keep)| if keep { x == 1.25 } else { x == 0.0 }));
    let kept = k.iter().filter(|&&x| x).count() as f64 / n as f64;
    assert!((kept - 0.8).abs() < 0.005, "{kept}");
    let all = Tensor::dropout_mask([64], 1.0, DType::F64, &CPU, Some(&g))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert!(all.iter().all(|&x| x == 0.0));
    let none = Tensor::dropout_mask([64], 0.0, DType::F16, &CPU, Some(&g))
        .unwrap()
        .to_f64_vec()
        .unwrap();
    assert!(none.iter().all(|&x| x == 1.0));
}

// ----- errors --------------------------------------------------------------------------------

/// Expects an error mentioning the needles, with the tensors and the generator unchanged.
fn expect_err<T: std::fmt::Debug>(
    tensors: &[&Tensor],
    g: &Generator,
    needles: &[&str],
    f: impl FnOnce() -> Result<T, Error>,
) {
    let snap = |t: &Tensor| (t.to_f64_vec().unwrap(), t.version(), t.stride().to_vec());
    let before: Vec<_> = tensors.iter().map(|t| snap(t)).collect();
    let gs = g.get_state();
    let msg = f().expect_err("expected an error").to_string();
    for n in needles {
        assert!(msg.contains(n), "error {msg:?} should mention {n:?}");
    }
    let after: Vec<_> = tensors.iter().map(|t| snap(t)).collect();
    assert_eq!(before, after, "a failed op changed an operand");
    assert_eq!(g.get_state(), gs, "a failed op advanced the generator");
}

#[test]
fn errors_leave_operands_and_generator_unchanged() {
    let g = Generator::new(1);
    let gg = Some(&g);
    expect_err(&[], &g, &["rand", "int64", "randint"], || {
        Tensor::rand([2], DType::I64, &CPU, gg)
    });
    expect_err(&[], &g, &["randn", "bool"], || {
        Tensor::randn([2], DType::Bool, &CPU, gg)
    });
    expect_err(&[], &g, &["low < high", "[3, 3)"], || {
        Tensor::randint(3, 3, [2], DType::I64, &CPU, gg)
    });
    expect_err(&[], &g, &["[0, 300)", "uint8"], || {
        Tensor::randint(0, 300, [2], DType::U8, &CPU, gg)
    });
    expect_err(&[], &g, &["[-1, 1)", "uint32"], || {
        Tensor::randint(-1, 1, [2], DType::U32, &CPU, gg)
    });
    expect_err(&[], &g, &["bool"], || {
        Tensor::randint(0, 3, [2], DType::Bool, &CPU, gg)
    });
    expect_err(&[], &g, &["float16"], || {
        Tensor::randint(0, 5000, [2], DType::F16, &CPU, gg)
    });
    let x = Tensor::zeros([2, 3], DType::F32, &CPU).unwrap();
    expect_err(&[&x], &g, &["uniform_", "low <= high"], || {
        x.uniform_(1.0, 0.0, gg)
    });
    expect_err(&[&x], &g, &["uniform_", "finite"], || {
        x.uniform_(0.0, f64::INFINITY, gg)
    });
    let h = Tensor::zeros([2], DType::F16, &CPU).unwrap();
    expect_err(&[&h], &g, &["float16", "range"], || {
        h.uniform_(0.0, 1e6, gg)
    });
    expect_err(&[&x], &g, &["normal_", "std"], || x.normal_(0.0, -1.0, gg));
    let i = Tensor::zeros([2], DType::I32, &CPU).unwrap();
    expect_err(&[&i], &g, &["normal_", "int32"], || i.normal_(0.0, 1.0, gg));
    expect_err(&[&i], &g, &["rand_like", "int32"], || i.rand_like(gg));
    let ex = x.narrow(0, 0, 1).unwrap().expand(&[4, 3]).unwrap();
    expect_err(&[&ex], &g, &["uniform_", "share memory"], || {
        ex.uniform_(0.0, 1.0, gg)
    });
    expect_err(&[&ex], &g, &["bernoulli_", "share memory"], || {
        ex.bernoulli_(0.5, gg)
    });
    expect_err(&[&x], &g, &["p", "[0, 1]", "1.5"], || x.bernoulli_(1.5, gg));
    let bad = Tensor::from_vec(vec![0.5f32, 1.5], [2]).unwrap();
    expect_err(&[&bad], &g, &["bernoulli", "1.5"], || bad.bernoulli(gg));
    expect_err(&[&i], &g, &["bernoulli", "int32"], || i.bernoulli(gg));
    expect_err(&[], &g, &["dropout_mask", "1.2"], || {
        Tensor::dropout_mask([3], 1.2, DType::F32, &CPU, gg)
    });
    expect_err(&[], &g, &["dropout_mask", "int64"], || {
        Tensor::dropout_mask([3], 0.2, DType::I64, &CPU, gg)
    });
    expect_err(&[], &g, &["randperm", "uint8", "300"], || {
        Tensor::randperm(300, DType::U8, &CPU, gg)
    });
    // multinomial
    let p = Tensor::from_vec(vec![0.5f32, 0.0, 0.5], [3]).unwrap();
    expect_err(&[&p], &g, &["without replacement", "2 non-zero"], || {
        p.multinomial(3, false, gg)
    });
    expect_err(&[&p], &g, &["4 samples", "3 categories"], || {
        p.multinomial(4, false, gg)
    });
    expect_err(&[&p], &g, &["positive"], || p.multinomial(0, true, gg));
    let neg = Tensor::from_vec(vec![0.5f32, -0.1], [2]).unwrap();
    expect_err(&[&neg], &g, &["non-negative", "-0.1"], || {
        neg.multinomial(1, true, gg)
    });
    let zero = Tensor::zeros([2, 3], DType::F64, &CPU).unwrap();
    expect_err(&[&zero], &g, &["row 0", "sums to 0"], || {
        zero.multinomial(1, true, gg)
    });
    let cube = Tensor::ones([2, 2, 2], DType::F32, &CPU).unwrap();
    expect_err(&[&cube], &g, &["1-d or 2-d", "[2, 2, 2]"], || {
        cube.multinomial(1, true, gg)
    });
    let ip = Tensor::ones([3], DType::I64, &CPU).unwrap();
    expect_err(&[&ip], &g, &["multinomial", "int64"], || {
        ip.multinomial(1, true, gg)
    });
}
