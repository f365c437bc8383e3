//! The wgpu backend: its device, memory, transfers and the properties its kernels promise
//! beyond what the registry checks (`stride check --device wgpu`, and stride-check's
//! `tests/wgpu.rs`): casts and random draws bit for bit the CPU's, no host wait between reads,
//! no write lost between invocations that share a word. Every test but the first skips, saying
//! so, without an adapter (CI installs Mesa's lavapipe; `STRIDE_REQUIRE_WGPU=1` makes them
//! mandatory).

mod wgpu_common;
use stride_core::random::philox;
use stride_core::{
    debug, memory_stats, webgpu, DType, Device, Error, Generator, GeneratorState, Tensor,
};
use wgpu_common::{bits, gpu};

const NATIVE: [DType; 8] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::U32,
    DType::I8,
    DType::U8,
    DType::Bool,
];

#[test]
fn no_adapter_and_no_f64_are_clear_errors() {
    let n = webgpu::adapters().len();
    let e = Device::wgpu(n).unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e}");
    assert!(e.to_string().contains(&format!("wgpu:{n}")), "{e}");
    if n == 0 {
        assert!(e.to_string().contains("lavapipe"), "{e}");
        return;
    }
    // f64 is refused, naming what the device lacks and what to do, never downcast
    let e = Tensor::zeros([3], DType::F64, &Device::Wgpu(0)).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DeviceLacksDType {
                dtype: DType::F64,
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(msg.contains("64-bit float") && msg.contains("f32"), "{msg}");
    let e = Tensor::from_vec(vec![1.0f64], [1])
        .unwrap()
        .to_device(&Device::Wgpu(0))
        .unwrap_err();
    assert!(matches!(e, Error::DeviceLacksDType { .. }), "{e}");
}

/// Values that probe every cast: NaN, infinities, signed zeros, subnormals of each float
/// format, ties of each rounding (f32 from integers, f16/bf16 from f32 and from integers:
/// 2^30 + 2^22 + 2^6 rounds up to bf16 directly but down through f32), integer extremes and
/// the saturation edges of each integer type.
fn probe_values() -> Vec<f64> {
    let mut v = vec![
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        1.5,
        2.5,
        -2.5,
        127.5,
        128.0,
        -128.5,
        -129.0,
        255.5,
        256.0,
        65504.0,
        65520.0,
        65536.0,
        1e-8,
        -6e-8,
        5.96e-8,
        1e-40,
        -1e-45,
        1.17549435e-38,
        3.0e38,
        3.4028235e38,
        16777217.0,
        -16777219.0,
        2147483520.0,
        2147483648.0,
        -2147483648.0,
        -2147483904.0,
        4294967040.0,
        4294967296.0,
        (1u64 << 30) as f64 + (1u64 << 22) as f64 + 64.0,
        1_077_936_193.0,
        -1_077_936_192.0,
        2_139_095_040.0,
        1.0 + f64::powi(2.0, -8),
        1.0 + f64::powi(2.0, -11),
        1.0 + 3.0 * f64::powi(2.0, -11),
        0.1,
        -0.3,
        3.14159,
    ];
    // every f16 bit pattern's value, and a spread of bf16 ones
    for b in (0..=u16::MAX).step_by(7) {
        v.push(half::f16::from_bits(b).to_f64());
        v.push(half::bf16::from_bits(b).to_f64());
    }
    v
}

#[test]
fn casts_are_the_cpus_bits() {
    let Some((d, _turn)) = gpu("casts_are_the_cpus_bits") else {
        return;
    };
    let values = Tensor::from_vec(probe_values(), [probe_values().len()]).unwrap();
    for from in NATIVE.into_iter().chain([DType::I64]) {
        // the source values as the CPU rounds them into `from`
        let src = values.to_dtype(from).unwrap();
        let on_gpu = src.to_device(&d).unwrap();
        for to in NATIVE.into_iter().chain([DType::I64]) {
            let want = bits(&src.to_dtype(to).unwrap());
            let got = bits(&on_gpu.to_dtype(to).unwrap());
            if let Some(i) = (0..want.len()).find(|&i| want[i] != got[i]) {
                panic!(
                    "{from} -> {to}: element {i} (source {}) is {:#x} on {d}, {:#x} on the CPU",
                    src.to_f64_vec().unwrap()[i],
                    got[i],
                    want[i]
                );
            }
        }
    }
}

#[test]
fn elementwise_work_never_waits_for_the_host() {
    let Some((d, _turn)) = gpu("elementwise_work_never_waits_for_the_host") else {
        return;
    };
    let x = Tensor::arange(0.0f64, 600.0f64, &Device::Cpu)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .reshape(&[20, 30])
        .unwrap()
        .mul(0.37)
        .unwrap()
        .sub(100.0)
        .unwrap();
    let compute = |x: &Tensor| -> Vec<Tensor> {
        let xt = x.t().unwrap(); // a transposed operand
        let mut outs = vec![];
        for dt in NATIVE {
            let a = xt.to_dtype(dt).unwrap();
            let b = x.narrow(1, 5, 20).unwrap().to_dtype(dt).unwrap(); // stepped rows
            let s = a
                .narrow(0, 0, 20)
                .unwrap()
                .maximum(&b.t().unwrap())
                .unwrap();
            let c = if dt.is_float() {
                s.mul(&s)
                    .unwrap()
                    .sqrt()
                    .unwrap()
                    .exp2()
                    .unwrap()
                    .neg()
                    .unwrap()
            } else if dt == DType::Bool {
                s.logical_not().unwrap().logical_xor(&s).unwrap()
            } else {
                s.abs().unwrap().bitwise_xor(&s).unwrap()
            };
            let w = c.ge(&s).unwrap().where_cond(&c, &s).unwrap();
            outs.push(w.to_dtype(DType::F32).unwrap());
        }
        outs
    };
    let want = compute(&x);
    let xg = x.to_device(&d).unwrap();
    let before = webgpu::sync_count(0);
    let got = {
        let _no_waits = debug::forbid_sync();
        compute(&xg)
    };
    assert_eq!(webgpu::sync_count(0), before, "a host wait inside the step");
    // what still runs as a CPU round trip (i64 arithmetic) is a counted wait, refused here
    let i = Tensor::from_vec(vec![1i64, 2, 3], [3])
        .unwrap()
        .to_device(&d)
        .unwrap();
    {
        let _no_waits = debug::forbid_sync();
        let e = i.add(&i).unwrap_err();
        assert!(matches!(e, Error::HostSync { .. }), "{e}");
    }
    for (dt, (g, w)) in NATIVE.iter().zip(got.iter().zip(&want)) {
        let (g, w) = (g.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap());
        let same = g
            .iter()
            .zip(&w)
            .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
        assert!(same, "{dt}: {g:?} vs {w:?}");
    }
}

#[test]
fn writes_into_shared_words_are_never_lost() {
    let Some((d, _turn)) = gpu("writes_into_shared_words_are_never_lost") else {
        return;
    };
    // four u8 / bool / i8 elements and two halves share each word; a transposed output
    // puts a word's elements in different workgroups, a stepped one leaves gaps between
    for dt in [DType::U8, DType::I8, DType::Bool, DType::F16, DType::BF16] {
        let n = 257;
        let src = Tensor::arange(0i64, (n * n) as i64, &Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap()
            .reshape(&[n as i64, n as i64])
            .unwrap()
            .to_dtype(dt)
            .unwrap();
        let dst_cpu = Tensor::ones([n, 2 * n], dt, &Device::Cpu).unwrap();
        let dst_gpu = dst_cpu.to_device(&d).unwrap();
        let src_gpu = src.to_device(&d).unwrap();
        for (dst, s) in [(&dst_cpu, &src), (&dst_gpu, &src_gpu)] {
            // every other column, from a transposed source
            let view = dst.narrow(1, 0, 2 * n - 1).unwrap();
            let stepped = view.as_strided(&[n, n], &[2 * n, 2], 0).unwrap();
            stepped.copy_(&s.t().unwrap()).unwrap();
        }
        assert_eq!(bits(&dst_gpu), bits(&dst_cpu), "{dt}");
    }
}

#[test]
fn the_allocator_reuses_freed_buffers_and_counts_them() {
    let Some((d, _turn)) = gpu("the_allocator_reuses_freed_buffers_and_counts_them") else {
        return;
    };
    let n = 3 << 20; // a size no other test of this file makes
    let t = Tensor::zeros([n], DType::F32, &d).unwrap();
    let s1 = memory_stats(d);
    assert!(s1.allocated_bytes >= (n * 4) as u64, "{s1}");
    drop(t);
    let s2 = memory_stats(d);
    assert_eq!(
        s2.allocated_bytes + (n * 4) as u64,
        s1.allocated_bytes,
        "{s2}"
    );
    assert!(s2.largest_free_block >= (n * 4) as u64, "{s2}");
    // the same size again comes from the cache: reserved does not grow, and it reads zeros
    let t = Tensor::zeros([n], DType::F32, &d).unwrap();
    let s3 = memory_stats(d);
    assert_eq!(s3.reserved_bytes, s2.reserved_bytes, "{s3}");
    assert_eq!(s3.allocation_count, s2.allocation_count + 1, "{s3}");
    let v = t.to_vec::<f32>().unwrap();
    assert!(v.iter().all(|&x| x == 0.0));
    // an impossible size is an error, not an abort
    let e = Tensor::zeros([1usize << 40], DType::F32, &d).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
}

#[test]
fn long_products_sum_every_term() {
    let Some((d, _turn)) = gpu("long_products_sum_every_term") else {
        return;
    };
    // llvmpipe (lavapipe) ends a shader loop after 65,535 iterations without a word: a k loop
    // of one iteration per term lost ~10% of a 65,025-term dot product before the unrolling
    for k in [65_025i64, 200_003] {
        let a = Tensor::full([1, k as usize], 0.33, DType::F32, &Device::Cpu).unwrap();
        let b = a.t().unwrap();
        let want = a.matmul(&b).unwrap().item_f64().unwrap();
        let (ag, bg) = (a.to_device(&d).unwrap(), b.to_device(&d).unwrap());
        let got = ag.matmul(&bg).unwrap().item_f64().unwrap();
        // γ_{k−1}·Σ|terms| for any summation order in f32, plus the CPU's own share
        let sum_abs = k as f64 * (0.33f32 as f64).powi(2);
        let bound = 2.0 * (k - 1) as f64 * f32::EPSILON as f64 / 2.0 * sum_abs;
        assert!(
            (got - want).abs() <= bound,
            "k {k}: {got} on {d}, {want} on the CPU (bound {bound})"
        );
    }
}

/// Generator states of the random-draw tests: the start of a stream, an odd offset (pairs of
/// words that straddle Philox blocks), a draw that crosses word 2³², one past 2³⁴ (block
/// indices with a high word) and one that wraps around 2⁶⁴; seeds with both halves set.
const STATES: [GeneratorState; 5] = [
    GeneratorState { seed: 0, offset: 0 },
    GeneratorState {
        seed: 0xdead_beef_0123_4567,
        offset: 7,
    },
    GeneratorState {
        seed: 42,
        offset: (1 << 32) - 1001,
    },
    GeneratorState {
        seed: 0x0123_4567_89ab_cdef,
        offset: (1 << 34) + 3,
    },
    GeneratorState {
        seed: u64::MAX,
        offset: u64::MAX - 500,
    },
];

/// A random draw made on a device from a generator.
type Draw = Box<dyn Fn(&Device, &Generator) -> stride_core::Result<Tensor>>;

const ALL9: [DType; 9] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::U32,
    DType::I8,
    DType::U8,
    DType::Bool,
    DType::I64,
];

/// The base of the in-place draws, made on `d` without a host wait: 7s (a native fill), or
/// zeros for i64 (whose fill is a CPU round trip). Its elements outside the view drawn into
/// must stay as they are.
fn sevens(shape: &[usize], dt: DType, d: &Device) -> stride_core::Result<Tensor> {
    if dt == DType::I64 {
        return Tensor::zeros(shape.to_vec(), dt, d);
    }
    Tensor::full(shape.to_vec(), 7, dt, d)
}

/// `u24` of word `offset + j` of the generator's stream, as a probability: element `j` of a
/// bernoulli draw with exactly this `p` is 0 (`u24 < p` is false), with a hair more it is 1.
fn p_at(g: &Generator, j: u64) -> f64 {
    let s = g.get_state();
    (philox::word(s.seed, s.offset.wrapping_add(j)) >> 8) as f64 / 16_777_216.0
}

/// Every draw the wgpu backend makes in WGSL: uniforms into each float dtype over ranges
/// whose rounding and cap differ, randint into every dtype (the widest ranges each holds, and
/// small ones), bernoulli into every dtype (p = 0.3, 0, 1 and p on a drawn u24 exactly),
/// dropout masks; new tensors of odd sizes and in-place fills through transposed, narrowed
/// and stepped views of a base whose other elements must stay untouched.
fn native_draws() -> Vec<(String, Draw)> {
    let mut v: Vec<(String, Draw)> = vec![];
    let odd = [37usize, 29];
    for dt in [DType::F32, DType::F16, DType::BF16] {
        v.push((
            format!("rand {dt}"),
            Box::new(move |d, g| Tensor::rand([129, 131], dt, d, Some(g))),
        ));
        v.push((
            format!("rand {dt} scalar"),
            Box::new(move |d, g| Tensor::rand(Vec::<usize>::new(), dt, d, Some(g))),
        ));
        let ranges = [
            (-3.0, 5.0),
            (0.0, 1e-3),
            (-1e-3, 0.0),
            (1.0, 1.0 + 1e-7),
            (-65504.0, 65504.0),
            (5.0, 5.0),
            (1e-30, 3e-30),
            (-1.0e4, -999.5),
        ];
        for (lo, hi) in ranges {
            v.push((
                format!("uniform_({lo}, {hi}) {dt}"),
                Box::new(move |d, g| Tensor::zeros(odd, dt, d)?.uniform_(lo, hi, Some(g))),
            ));
        }
        v.push((
            format!("uniform_(-3, 5) {dt} into a transposed, narrowed view"),
            Box::new(move |d, g| {
                let base = sevens(&[13, 9], dt, d)?;
                base.t()?.narrow(0, 1, 7)?.uniform_(-3.0, 5.0, Some(g))?;
                Ok(base)
            }),
        ));
        for p in [0.25, 1.0] {
            v.push((
                format!("dropout_mask({p}) {dt}"),
                Box::new(move |d, g| Tensor::dropout_mask(odd, p, dt, d, Some(g))),
            ));
        }
    }
    for dt in ALL9 {
        let mut ranges: Vec<(i64, i64)> = match dt {
            DType::I64 => vec![(i64::MIN / 2, i64::MAX / 2), (i64::MIN, i64::MAX)],
            DType::I32 => vec![(i32::MIN as i64, i32::MAX as i64)],
            DType::U32 => vec![(0, u32::MAX as i64)],
            DType::I8 => vec![(-128, 128)],
            DType::U8 => vec![(0, 256), (3, 200), (0, 3)],
            DType::Bool => vec![(0, 2)],
            DType::F32 => vec![(-(1 << 24), (1 << 24) + 1)],
            DType::F16 => vec![(-2048, 2049)],
            _ => vec![(-256, 257)],
        };
        if !matches!(dt, DType::U32 | DType::U8 | DType::Bool) {
            ranges.push((-5, 17));
        }
        for (lo, hi) in ranges {
            v.push((
                format!("randint({lo}, {hi}) {dt}"),
                Box::new(move |d, g| Tensor::randint(lo, hi, odd, dt, d, Some(g))),
            ));
        }
        for p in [0.3, 0.0, 1.0] {
            v.push((
                format!("bernoulli_scalar({p}) {dt}"),
                Box::new(move |d, g| Tensor::bernoulli_scalar(odd, p, dt, d, Some(g))),
            ));
        }
        v.push((
            format!("bernoulli_scalar(p = u24 of element 5, and a hair above) {dt}"),
            Box::new(move |d, g| {
                let p = p_at(g, 5);
                let base = sevens(&[22], dt, d)?;
                base.narrow(0, 0, 11)?.bernoulli_(p, Some(g))?;
                // the same words again, now with p a hair above element 5's u24
                let s = g.get_state();
                g.set_state(GeneratorState {
                    offset: s.offset.wrapping_sub(11),
                    ..s
                });
                base.narrow(0, 11, 11)?.bernoulli_(p + 1e-12, Some(g))?;
                Ok(base)
            }),
        ));
        v.push((
            format!("bernoulli_(0.3) {dt} into a transposed, stepped view"),
            Box::new(move |d, g| {
                let base = sevens(&[13, 10], dt, d)?;
                base.t()?.slice(0, 1, 10, 2)?.bernoulli_(0.3, Some(g))?;
                Ok(base)
            }),
        ));
    }
    v.push((
        "dropout_mask_bool(0.3)".into(),
        Box::new(move |d, g| Tensor::dropout_mask_bool(odd, 0.3, d, Some(g))),
    ));
    v
}

/// Draws `draw` on the CPU and on `gpu` from generators in `state`: the same bits, and the
/// generators end in the same state.
fn same_draw(gpu: &Device, state: GeneratorState, name: &str, draw: &Draw) {
    let (gc, gg) = (Generator::new(0), Generator::new(0));
    gc.set_state(state);
    gg.set_state(state);
    let want = draw(&Device::Cpu, &gc).unwrap_or_else(|e| panic!("{name} on the CPU: {e}"));
    let got = {
        let _no_waits = debug::forbid_sync();
        draw(gpu, &gg).unwrap_or_else(|e| panic!("{name} on {gpu}: {e}"))
    };
    assert_eq!(got.device(), *gpu, "{name}");
    let (w, g) = (bits(&want), bits(&got));
    if let Some(i) = (0..w.len()).find(|&i| w[i] != g[i]) {
        panic!(
            "{name} from {state:?}: element {i} (of {}) is {:#x} on {gpu}, {:#x} on the CPU",
            w.len(),
            g[i],
            w[i]
        );
    }
    assert_eq!(w.len(), g.len(), "{name}");
    assert_eq!(
        gc.get_state(),
        gg.get_state(),
        "{name}: the generators part ways"
    );
}

#[test]
fn random_draws_are_the_cpus_bits_and_never_wait() {
    let Some((d, _turn)) = gpu("random_draws_are_the_cpus_bits_and_never_wait") else {
        return;
    };
    let draws = native_draws();
    let (syncs, launches) = (webgpu::sync_count(0), webgpu::launch_count(0));
    let mut n = 0;
    for state in STATES {
        for (name, draw) in &draws {
            same_draw(&d, state, name, draw);
            n += 1;
        }
    }
    // the draws themselves never waited (bits() reads back: one wait per tensor compared)
    assert_eq!(
        webgpu::sync_count(0) - syncs,
        n as u64,
        "host waits besides the reads"
    );
    assert!(webgpu::launch_count(0) - launches >= n as u64);
    println!("{n} draws, bit for bit the CPU's");
}

/// What still runs as a CPU round trip — normals (the `libm` f64 routines), randperm's sort
/// and uniforms over bounds below 2⁻⁹⁰⁰ — gives the CPU's bits too; a normal draw is a counted
/// host wait, refused under `forbid_sync`.
#[test]
fn random_round_trips_are_the_cpus_bits() {
    let Some((d, _turn)) = gpu("random_round_trips_are_the_cpus_bits") else {
        return;
    };
    let draws: Vec<(&str, Draw)> = vec![
        (
            "randn f32",
            Box::new(|d, g| Tensor::randn([37, 29], DType::F32, d, Some(g))),
        ),
        (
            "normal_(1, 2) bf16 transposed",
            Box::new(|d, g| {
                let base = sevens(&[13, 9], DType::BF16, d)?;
                base.t()?.normal_(1.0, 2.0, Some(g))?;
                Ok(base)
            }),
        ),
        (
            "uniform_(0, 1e-300) f32",
            Box::new(|d, g| Tensor::zeros([37], DType::F32, d)?.uniform_(0.0, 1e-300, Some(g))),
        ),
    ];
    for state in STATES {
        for (name, draw) in &draws {
            let (gc, gg) = (Generator::new(0), Generator::new(0));
            gc.set_state(state);
            gg.set_state(state);
            let want = bits(&draw(&Device::Cpu, &gc).unwrap());
            let got = bits(&draw(&d, &gg).unwrap());
            assert_eq!(got, want, "{name} from {state:?}");
            assert_eq!(gc.get_state(), gg.get_state(), "{name}");
        }
        // randperm: its 64-bit keys are drawn in WGSL (bits64), sorted on the host
        for dt in [DType::I64, DType::I32, DType::F32] {
            let (gc, gg) = (Generator::new(0), Generator::new(0));
            gc.set_state(state);
            gg.set_state(state);
            let want = bits(&Tensor::randperm(1001, dt, &Device::Cpu, Some(&gc)).unwrap());
            let got = bits(&Tensor::randperm(1001, dt, &d, Some(&gg)).unwrap());
            assert_eq!(got, want, "randperm {dt} from {state:?}");
        }
    }
    let _no_waits = debug::forbid_sync();
    let e = Tensor::randn([3], DType::F32, &d, None).unwrap_err();
    assert!(matches!(e, Error::HostSync { .. }), "{e}");
}

#[test]
fn i64_where_selects_word_pairs_without_a_round_trip() {
    let Some((d, _turn)) = gpu("i64_where_selects_word_pairs_without_a_round_trip") else {
        return;
    };
    // values whose high words differ (a narrowing to 32 bits would lose them)
    let a: Vec<i64> = (0..12).map(|k| (k << 40) - 7 * k).collect();
    let b: Vec<i64> = (0..12).map(|k| -(k << 35) + 3).collect();
    let c: Vec<bool> = (0..12).map(|k| k % 3 != 1).collect();
    let (a, b, c) = (
        Tensor::from_vec(a, [3, 4]).unwrap(),
        Tensor::from_vec(b, [4, 3]).unwrap().t().unwrap(),
        Tensor::from_vec(c, [3, 4]).unwrap(),
    );
    let want = c.where_cond(&a, &b).unwrap().to_vec::<i64>().unwrap();
    let (ag, bg, cg) = (
        a.to_device(&d).unwrap(),
        b.to_device(&d).unwrap(),
        c.to_device(&d).unwrap(),
    );
    let before = webgpu::sync_count(0);
    let got = cg.where_cond(&ag, &bg).unwrap();
    // a scalar branch too (the SAE's "last active step" update)
    let got2 = cg.where_cond(5_000_000_000i64, &bg).unwrap();
    assert_eq!(webgpu::sync_count(0), before, "a host wait");
    assert_eq!(got.to_vec::<i64>().unwrap(), want);
    let want2 = c.where_cond(5_000_000_000i64, &b).unwrap();
    assert_eq!(
        got2.to_vec::<i64>().unwrap(),
        want2.to_vec::<i64>().unwrap()
    );
}

#[test]
fn integer_division_by_zero_is_reported_at_the_next_read() {
    let Some((d, _turn)) = gpu("integer_division_by_zero_is_reported_at_the_next_read") else {
        return;
    };
    for dt in [DType::I32, DType::U32, DType::I8, DType::U8] {
        let a = Tensor::from_vec(vec![7i32, -9, 12, 5], [4])
            .unwrap()
            .to_dtype(dt)
            .unwrap()
            .to_device(&d)
            .unwrap();
        let good = Tensor::from_vec(vec![2i32, 3, 5, 1], [4])
            .unwrap()
            .to_dtype(dt)
            .unwrap()
            .to_device(&d)
            .unwrap();
        let zero = Tensor::from_vec(vec![2i32, 0, 5, 1], [4])
            .unwrap()
            .to_dtype(dt)
            .unwrap()
            .to_device(&d)
            .unwrap();
        let want = a
            .to_device(&Device::Cpu)
            .unwrap()
            .floor_divide(&good.to_device(&Device::Cpu).unwrap())
            .unwrap();
        let before = webgpu::sync_count(0);
        let q = a.floor_divide(&good).unwrap();
        let r = a.remainder(&zero).unwrap(); // queued; the check fails on the device
        let x = a.clone_tensor().unwrap();
        x.floor_divide_(&zero).unwrap(); // in place: must leave x as it was
        assert_eq!(webgpu::sync_count(0), before, "{dt}: a host wait");
        let err = r.to_dtype(DType::I64).unwrap_err();
        assert!(
            matches!(err, Error::HostSync { .. } | Error::DeviceCheck { .. }),
            "{err}"
        );
        let err = webgpu::check_errors(0).unwrap_err();
        let Error::DeviceCheck { cause, .. } = &err else {
            panic!("{dt}: {err}");
        };
        assert!(
            matches!(**cause, Error::ZeroDivision { .. }),
            "{dt}: {cause}"
        );
        assert!(webgpu::take_error(0).unwrap().is_some());
        assert_eq!(bits(&x), bits(&a), "{dt}: the failed op wrote");
        assert_eq!(bits(&q), bits(&want), "{dt}");
        // at the op itself with sync checks on
        let _here = stride_core::sync_checks_here();
        let e = a.floor_divide(&zero).unwrap_err();
        assert!(matches!(e, Error::ZeroDivision { .. }), "{dt}: {e}");
    }
}
