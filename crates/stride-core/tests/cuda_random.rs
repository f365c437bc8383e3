//! Random fills and `flip` on CUDA against the CPU, bit for bit (DESIGN.md invariant 6: the
//! same seed gives the same numbers on every device). Each test skips, saying so, where there
//! is no GPU.

use stride_core::{cuda, DType, Device, Generator, Tensor};

fn gpu(test: &str) -> Option<Device> {
    // skips, saying so, without a GPU; fails instead under STRIDE_REQUIRE_CUDA=1
    cuda::require_or_skip(test)
}

/// Every element's exact value as 64 bits (floats widen exactly to f64; integers to i64).
fn bits(t: &Tensor) -> Vec<u64> {
    let t = t.to_device(&Device::Cpu).unwrap();
    if t.dtype().is_float() {
        let v = t.to_dtype(DType::F64).unwrap().to_vec::<f64>().unwrap();
        v.iter().map(|x| x.to_bits()).collect()
    } else {
        let v = t.to_dtype(DType::I64).unwrap().to_vec::<i64>().unwrap();
        v.iter().map(|&x| x as u64).collect()
    }
}

fn same(what: &str, cpu: &Tensor, gpu: &Tensor) {
    assert_eq!(cpu.shape(), gpu.shape(), "{what}: shapes");
    assert_eq!(cpu.dtype(), gpu.dtype(), "{what}: dtypes");
    let (a, b) = (bits(cpu), bits(gpu));
    let bad = a.iter().zip(&b).position(|(x, y)| x != y);
    assert!(
        bad.is_none(),
        "{what}: element {} differs: cpu bits {:x}, cuda bits {:x} ({} elements)",
        bad.unwrap(),
        a[bad.unwrap()],
        b[bad.unwrap()],
        a.len()
    );
}

const FLOATS: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];

/// One sequence of draws from one generator per device; the second and later draws start at
/// odd offsets within a Philox block.
#[test]
fn fresh_draws_match_cpu_bit_for_bit() {
    let Some(g) = gpu("fresh_draws_match_cpu_bit_for_bit") else {
        return;
    };
    let cpu = Device::Cpu;
    for dt in FLOATS {
        let (gc, gg) = (Generator::new(1234), Generator::new(1234));
        for (what, shape) in [("odd", vec![1001usize]), ("3-d", vec![7, 33, 65])] {
            let a = Tensor::rand(shape.clone(), dt, &cpu, Some(&gc)).unwrap();
            let b = Tensor::rand(shape.clone(), dt, &g, Some(&gg)).unwrap();
            same(&format!("rand {dt} {what}"), &a, &b);
            let a = Tensor::randn(shape.clone(), dt, &cpu, Some(&gc)).unwrap();
            let b = Tensor::randn(shape.clone(), dt, &g, Some(&gg)).unwrap();
            same(&format!("randn {dt} {what}"), &a, &b);
            let a = Tensor::dropout_mask(shape.clone(), 0.3, dt, &cpu, Some(&gc)).unwrap();
            let b = Tensor::dropout_mask(shape.clone(), 0.3, dt, &g, Some(&gg)).unwrap();
            same(&format!("dropout_mask {dt} {what}"), &a, &b);
        }
        // a large draw: many Philox blocks, both Box–Muller halves, the uniform cap
        let a = Tensor::randn([1 << 20], dt, &cpu, Some(&gc)).unwrap();
        let b = Tensor::randn([1 << 20], dt, &g, Some(&gg)).unwrap();
        same(&format!("randn {dt} 1M"), &a, &b);
        let a = Tensor::empty([1 << 20], dt, &cpu).unwrap();
        let b = Tensor::empty([1 << 20], dt, &g).unwrap();
        a.uniform_(-2.0, 1.0 - 1e-9, Some(&gc)).unwrap();
        b.uniform_(-2.0, 1.0 - 1e-9, Some(&gg)).unwrap();
        same(&format!("uniform_ {dt} 1M near-1 high"), &a, &b);
    }
    let (gc, gg) = (Generator::new(7), Generator::new(7));
    for dt in [
        DType::I64,
        DType::I32,
        DType::U32,
        DType::U8,
        DType::I8,
        DType::F32,
    ] {
        let (lo, hi) = if matches!(dt, DType::U8 | DType::U32) {
            (3, 250)
        } else {
            (-100, 120)
        };
        let a = Tensor::randint(lo, hi, [513, 3], dt, &cpu, Some(&gc)).unwrap();
        let b = Tensor::randint(lo, hi, [513, 3], dt, &g, Some(&gg)).unwrap();
        same(&format!("randint {dt}"), &a, &b);
    }
    let a = Tensor::randint(i64::MIN, i64::MAX, [999], DType::I64, &cpu, Some(&gc)).unwrap();
    let b = Tensor::randint(i64::MIN, i64::MAX, [999], DType::I64, &g, Some(&gg)).unwrap();
    same("randint full i64 range", &a, &b);
    for dt in DType::ALL {
        let a = Tensor::bernoulli_scalar([1000], 0.25, dt, &cpu, Some(&gc)).unwrap();
        let b = Tensor::bernoulli_scalar([1000], 0.25, dt, &g, Some(&gg)).unwrap();
        same(&format!("bernoulli {dt}"), &a, &b);
    }
    let a = Tensor::randperm(1000, DType::I64, &cpu, Some(&gc)).unwrap();
    let b = Tensor::randperm(1000, DType::I64, &g, Some(&gg)).unwrap();
    same("randperm", &a, &b);
    assert_eq!(
        gc.get_state(),
        gg.get_state(),
        "both generators advanced alike"
    );
}

/// In-place fills through non-contiguous CUDA views write the same values as on the CPU and
/// leave the other elements alone.
#[test]
fn in_place_fills_through_views_match_cpu() {
    let Some(g) = gpu("in_place_fills_through_views_match_cpu") else {
        return;
    };
    for dt in FLOATS {
        let (gc, gg) = (Generator::new(99), Generator::new(99));
        let base_c = Tensor::full([40, 30], 5.0, dt, &Device::Cpu).unwrap();
        let base_g = base_c.to_device(&g).unwrap();
        type View = fn(&Tensor) -> Tensor;
        let views: [(&str, View); 3] = [
            ("transposed", |t| t.t().unwrap()),
            ("stepped", |t| t.slice(0, 1, 40, 3).unwrap()),
            ("column", |t| t.select(1, 7).unwrap()),
        ];
        for (what, view) in views {
            view(&base_c).normal_(1.0, 2.0, Some(&gc)).unwrap();
            view(&base_g).normal_(1.0, 2.0, Some(&gg)).unwrap();
            same(
                &format!("normal_ {dt} {what} (whole base)"),
                &base_c,
                &base_g,
            );
            view(&base_c).uniform_(0.0, 3.0, Some(&gc)).unwrap();
            view(&base_g).uniform_(0.0, 3.0, Some(&gg)).unwrap();
            same(
                &format!("uniform_ {dt} {what} (whole base)"),
                &base_c,
                &base_g,
            );
            view(&base_c).bernoulli_(0.5, Some(&gc)).unwrap();
            view(&base_g).bernoulli_(0.5, Some(&gg)).unwrap();
            same(
                &format!("bernoulli_ {dt} {what} (whole base)"),
                &base_c,
                &base_g,
            );
        }
    }
}

#[test]
fn flip_matches_cpu_in_every_layout() {
    let Some(g) = gpu("flip_matches_cpu_in_every_layout") else {
        return;
    };
    let x = Tensor::arange(0i64, 4 * 5 * 6, &Device::Cpu)
        .unwrap()
        .reshape(&[4, 5, 6])
        .unwrap();
    for dt in [DType::F32, DType::BF16, DType::I64, DType::U8, DType::Bool] {
        let xc = x.to_dtype(dt).unwrap();
        let views: [(&str, Tensor); 4] = [
            ("contiguous", xc.clone()),
            ("transposed", xc.transpose(0, 2).unwrap()),
            ("stepped", xc.slice(2, 1, 6, 2).unwrap()),
            (
                "expanded",
                xc.narrow(0, 1, 1).unwrap().expand(&[3, 5, 6]).unwrap(),
            ),
        ];
        for (what, v) in views {
            let vg = v.to_device(&g).unwrap();
            for dims in [&[0i64][..], &[2], &[0, 1, 2], &[-1, 0], &[]] {
                let a = v.flip(dims).unwrap();
                let b = vg.flip(dims).unwrap();
                same(&format!("flip {dims:?} of {what} {dt}"), &a, &b);
            }
        }
    }
}
