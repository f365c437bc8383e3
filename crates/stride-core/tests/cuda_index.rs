//! The CUDA index and sort kernels against the CPU backend, bit for bit: gather/scatter
//! families, masked scans, sort/topk/kth, unique, searchsorted, bincount, histc, over
//! transposed, stepped, offset and expanded layouts of every operand, every dtype, all three
//! index dtypes, duplicates, NaN and ±0, long rows, and error paths (operands unchanged).
//! Every test skips — saying so — where there is no GPU.
//!
//! Comparisons are on element bits (so -0.0 and 0.0 differ), except that all NaNs compare
//! equal: x86 and CUDA arithmetic produce different NaN payloads.

mod idx_common;

use idx_common::*;
use stride_core::{bf16, cuda, f16, DType, Device, ScatterReduce, Tensor};

const CPU: Device = Device::Cpu;
const ALL: [DType; 10] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I64,
    DType::I32,
    DType::U32,
    DType::U8,
    DType::I8,
    DType::Bool,
];

/// The GPU, or None after printing why the test is skipped.
fn gpu(test: &str) -> Option<Device> {
    // skips, saying so, without a GPU; fails instead under STRIDE_REQUIRE_CUDA=1
    cuda::require_or_skip(test)
}

const NAN_BITS: u64 = u64::MAX;

/// The bits of every element in logical order (NaNs canonicalised), from any device.
fn bits(t: &Tensor) -> Vec<u64> {
    let t = t.to_device(&CPU).unwrap();
    fn nan_or(b: u64, nan: bool) -> u64 {
        if nan {
            NAN_BITS
        } else {
            b
        }
    }
    match t.dtype() {
        DType::F64 => t
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .map(|v| nan_or(v.to_bits(), v.is_nan()))
            .collect(),
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| nan_or(v.to_bits() as u64, v.is_nan()))
            .collect(),
        DType::F16 => t
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| nan_or(v.to_bits() as u64, v.is_nan()))
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| nan_or(v.to_bits() as u64, v.is_nan()))
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&v| v as u32 as u64)
            .collect(),
        DType::U32 => t
            .to_vec::<u32>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
        DType::U8 => t
            .to_vec::<u8>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
        DType::I8 => t
            .to_vec::<i8>()
            .unwrap()
            .iter()
            .map(|&v| v as u8 as u64)
            .collect(),
        DType::Bool => t
            .to_vec::<bool>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect(),
    }
}

#[track_caller]
fn assert_bits(cpu: &Tensor, gpu: &Tensor, ctx: &str) {
    assert_eq!(cpu.shape(), gpu.shape(), "{ctx}: shapes");
    assert_eq!(cpu.dtype(), gpu.dtype(), "{ctx}: dtypes");
    let (a, b) = (bits(cpu), bits(gpu));
    if a != b {
        let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
        panic!(
            "{ctx}: CUDA differs from the CPU first at logical element {first} of {}: cpu {:?} vs cuda {:?} (as f64: {:?} vs {:?})",
            a.len(),
            a.get(first),
            b.get(first),
            cpu.to_f64_vec().unwrap().get(first),
            gpu.to_f64_vec().unwrap().get(first)
        );
    }
}

/// Both results succeed with the same buffers, or fail with the same message.
#[track_caller]
fn same_outcome<T: std::fmt::Debug>(
    cpu: stride_core::Result<T>,
    gpu: stride_core::Result<T>,
    both: &Both,
    ctx: &str,
) {
    match (cpu, gpu) {
        (Ok(_), Ok(_)) => both.assert_same(ctx),
        (Err(a), Err(b)) => {
            assert_eq!(a.to_string(), b.to_string(), "{ctx}: the same error");
            both.assert_same(&format!("{ctx} (after the error)"));
        }
        (a, b) => panic!("{ctx}: cpu {a:?} vs cuda {b:?}"),
    }
}

/// One tensor with one layout on both devices: the CPU view of [`lay`], and the same
/// guard-filled buffer moved to the GPU and viewed with the same strides.
struct Both {
    name: &'static str,
    cpu: Tensor,
    gpu: Tensor,
    cbase: Tensor,
    gbase: Tensor,
}

impl Both {
    fn of(l: Laid, g: &Device) -> Both {
        let gbase = l.base.to_device(g).unwrap();
        let gpu = gbase
            .as_strided(l.t.shape(), l.t.stride(), l.t.storage_offset())
            .unwrap();
        Both {
            name: l.name,
            cpu: l.t,
            gpu,
            cbase: l.base,
            gbase,
        }
    }
    /// Both whole buffers (views and guards) are equal bit for bit.
    #[track_caller]
    fn assert_same(&self, ctx: &str) {
        assert_bits(
            &self.cbase,
            &self.gbase,
            &format!("{ctx} [{} buffer]", self.name),
        );
    }
}

/// [`layouts`] on both devices, plus (for ndim ≥ 2, when `expand` is given) an expanded
/// layout: row 0 broadcast over dim 0 (the values must repeat row 0).
fn both_layouts(vals: &[f64], shape: &[usize], dtype: DType, g: &Device) -> Vec<Both> {
    layouts(vals, shape, dtype)
        .into_iter()
        .map(|l| Both::of(l, g))
        .collect()
}

fn on(t: &Tensor, g: &Device) -> Tensor {
    t.to_device(g).unwrap()
}

/// Values with ties, both zeros, and (for floats) NaN, infinities and non-integers.
fn tricky(dtype: DType, n: usize, rng: &mut Rng) -> Vec<f64> {
    (0..n)
        .map(|_| match dtype {
            DType::Bool => rng.below(2) as f64,
            DType::U8 | DType::U32 => rng.below(20) as f64,
            d if d.is_int() => rng.below(40) as f64 - 20.0,
            _ => match rng.below(16) {
                0 => f64::NAN,
                1 => -0.0,
                2 => f64::INFINITY,
                3 => f64::NEG_INFINITY,
                4 => 0.0,
                _ => (rng.below(600) as f64 - 300.0) / 7.0,
            },
        })
        .collect()
}

/// Finite values (non-integers for floats, small for integers) whose sums round.
fn finite(dtype: DType, n: usize, rng: &mut Rng) -> Vec<f64> {
    (0..n)
        .map(|_| match dtype {
            DType::Bool => rng.below(2) as f64,
            DType::U8 | DType::U32 => rng.below(7) as f64,
            d if d.is_int() => rng.below(9) as f64 - 4.0,
            _ => (rng.uniform() - 0.5) * 6.0,
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// gather family

#[test]
fn gathers_match_the_cpu_over_layouts_dtypes_and_index_dtypes() {
    let Some(g) = gpu("gathers_match_the_cpu_over_layouts_dtypes_and_index_dtypes") else {
        return;
    };
    let mut rng = Rng(11);
    let xs = [5usize, 7];
    for dt in ALL {
        let x = tricky(dt, 35, &mut rng);
        for xl in both_layouts(&x, &xs, dt, &g).into_iter().step_by(2) {
            for idt in INDEX_DTYPES {
                // gather along both dims, index contiguous / transposed / expanded
                for d in 0..2 {
                    let is = [4usize, 6];
                    let idx: Vec<f64> = (0..24).map(|_| rng.below(xs[d]) as f64).collect();
                    let row0: Vec<f64> = (0..24).map(|i| idx[i % 6]).collect();
                    let cases = [
                        ("contiguous", tensor(&idx, &is, idt)),
                        ("transposed", tensor(&idx, &[6, 4], idt).t().unwrap()),
                        (
                            "expanded",
                            tensor(&row0[..6], &[1, 6], idt).expand(&[4, 6]).unwrap(),
                        ),
                    ];
                    for (iname, it) in &cases {
                        let itg = if *iname == "expanded" {
                            on(&tensor(&row0[..6], &[1, 6], idt), &g)
                                .expand(&[4, 6])
                                .unwrap()
                        } else if *iname == "transposed" {
                            on(&tensor(&idx, &[6, 4], idt), &g).t().unwrap()
                        } else {
                            on(it, &g)
                        };
                        let want = xl.cpu.gather(d as i64, it).unwrap();
                        let got = xl.gpu.gather(d as i64, &itg).unwrap();
                        assert_eq!(got.device(), g);
                        assert_bits(
                            &want,
                            &got,
                            &format!("gather {dt} x:{} d{d} idx:{iname} {idt}", xl.name),
                        );
                    }
                }
                // index_select / embedding (a broadcast index), take (wrapping negatives)
                let sel: Vec<f64> = [4.0, 0.0, 4.0, 2.0, 1.0, 1.0].to_vec();
                for d in 0..2i64 {
                    let sel_d: Vec<f64> = sel.iter().map(|v| v % xs[d as usize] as f64).collect();
                    let si = tensor(&sel_d, &[6], idt);
                    assert_bits(
                        &xl.cpu.index_select(d, &si).unwrap(),
                        &xl.gpu.index_select(d, &on(&si, &g)).unwrap(),
                        &format!("index_select {dt} x:{} d{d} {idt}", xl.name),
                    );
                }
                let e2 = tensor(&sel, &[2, 3], idt);
                assert_bits(
                    &xl.cpu.embedding(&e2).unwrap(),
                    &xl.gpu.embedding(&on(&e2, &g)).unwrap(),
                    &format!("embedding {dt} x:{} {idt}", xl.name),
                );
                let tk: Vec<f64> = if idt == DType::U32 {
                    vec![0.0, 34.0, 17.0, 3.0]
                } else {
                    vec![0.0, -1.0, -35.0, 17.0, 34.0]
                };
                let ti = tensor(&tk, &[tk.len()], idt);
                assert_bits(
                    &xl.cpu.take(&ti).unwrap(),
                    &xl.gpu.take(&on(&ti, &g)).unwrap(),
                    &format!("take {dt} x:{} {idt}", xl.name),
                );
            }
        }
    }
}

#[test]
fn gather_into_strided_outputs_writes_through_their_strides() {
    let Some(g) = gpu("gather_into_strided_outputs_writes_through_their_strides") else {
        return;
    };
    let mut rng = Rng(12);
    let x = finite(DType::F32, 6 * 8, &mut rng);
    let xt = tensor(&x, &[6, 8], DType::F32);
    let idx = tensor(&[5.0, 0.0, 3.0, 3.0], &[4], DType::I64);
    for ol in layouts(&vec![0.0; 32], &[4, 8], DType::F32) {
        let o = Both::of(ol, &g);
        xt.index_select_out(0, &idx, &o.cpu).unwrap();
        on(&xt, &g)
            .index_select_out(0, &on(&idx, &g), &o.gpu)
            .unwrap();
        o.assert_same("index_select_out");
    }
}

// ---------------------------------------------------------------------------------------------
// scatter family

#[derive(Clone, Copy, Debug)]
enum Sc {
    Scatter,
    ScatterValue,
    ScatterAdd,
    Reduce(ScatterReduce, bool),
}

fn scatter_ops() -> Vec<Sc> {
    let mut v = vec![Sc::Scatter, Sc::ScatterValue, Sc::ScatterAdd];
    for r in [
        ScatterReduce::Sum,
        ScatterReduce::Prod,
        ScatterReduce::Mean,
        ScatterReduce::Amax,
        ScatterReduce::Amin,
    ] {
        for incl in [true, false] {
            v.push(Sc::Reduce(r, incl));
        }
    }
    v
}

fn run_scatter(op: Sc, t: &Tensor, d: i64, i: &Tensor, s: &Tensor) -> stride_core::Result<Tensor> {
    match op {
        Sc::Scatter => t.scatter_(d, i, s),
        Sc::ScatterValue => t.scatter_value_(d, i, 2.0),
        Sc::ScatterAdd => t.scatter_add_(d, i, s),
        Sc::Reduce(r, incl) => t.scatter_reduce_(d, i, s, r, incl),
    }
}

#[test]
fn scatters_match_the_cpu_bit_for_bit_through_every_destination_layout() {
    let Some(g) = gpu("scatters_match_the_cpu_bit_for_bit_through_every_destination_layout") else {
        return;
    };
    let mut rng = Rng(21);
    // (self shape, dim, index shape, src shape): many duplicates along the axis
    let cases = [
        (vec![3usize, 5], 0usize, vec![9usize, 4], vec![9usize, 5]),
        (vec![4, 3], 1, vec![4, 11], vec![4, 12]),
        (vec![3, 4, 2], 1, vec![2, 9, 2], vec![3, 9, 2]),
    ];
    for (xs, d, is, ss) in cases {
        for dt in ALL {
            let base = finite(dt, xs.iter().product(), &mut rng);
            let mut src = finite(dt, ss.iter().product(), &mut rng);
            if dt.is_float() {
                src[1] = f64::NAN; // amax/amin propagate it; sums carry it
                src[4] = -0.0;
            }
            let idx: Vec<f64> = (0..is.iter().product::<usize>())
                .map(|_| rng.below(xs[d]) as f64)
                .collect();
            for (oi, op) in scatter_ops().into_iter().enumerate() {
                if dt == DType::Bool && !matches!(op, Sc::Scatter | Sc::ScatterValue) {
                    continue;
                }
                // one index dtype per (op, dtype), rotating, so all three meet every op; the
                // i32 index is transposed
                let li = (oi + dt as usize) % 3;
                {
                    let idt = INDEX_DTYPES[li];
                    let it = tensor(&idx, &is, idt);
                    let st = tensor(&src, &ss, dt);
                    // the index transposed for one index dtype
                    let (itc, itg) = if li == 1 {
                        let mut rs = is.clone();
                        rs.reverse();
                        let tr = |t: Tensor| {
                            let p: Vec<i64> = (0..rs.len() as i64).rev().collect();
                            t.permute(&p).unwrap()
                        };
                        let raw = it
                            .permute(&(0..is.len() as i64).rev().collect::<Vec<_>>())
                            .unwrap()
                            .contiguous()
                            .unwrap();
                        (tr(raw.clone()), tr(on(&raw, &g)))
                    } else {
                        (it.clone(), on(&it, &g))
                    };
                    for dl in both_layouts(&base, &xs, dt, &g) {
                        let ctx = format!(
                            "{op:?} {dt} self:{} {xs:?} d{d} idx {idt}{}",
                            dl.name,
                            if li == 1 { " transposed" } else { "" }
                        );
                        let a = run_scatter(op, &dl.cpu, d as i64, &itc, &st);
                        let b = run_scatter(op, &dl.gpu, d as i64, &itg, &on(&st, &g));
                        same_outcome(a, b, &dl, &ctx);
                    }
                }
            }
        }
    }
}

#[test]
fn index_add_copy_fill_match_the_cpu() {
    let Some(g) = gpu("index_add_copy_fill_match_the_cpu") else {
        return;
    };
    let mut rng = Rng(22);
    let xs = [6usize, 5];
    for dt in ALL {
        let base = finite(dt, 30, &mut rng);
        for idt in INDEX_DTYPES {
            for d in 0..2usize {
                let m = 9;
                let idx: Vec<f64> = (0..m).map(|_| rng.below(xs[d]) as f64).collect();
                let it = tensor(&idx, &[m], idt);
                let mut ss = xs.to_vec();
                ss[d] = m;
                let src = tensor(&finite(dt, ss.iter().product(), &mut rng), &ss, dt);
                for dl in both_layouts(&base, &xs, dt, &g) {
                    let ctx = format!("{dt} self:{} d{d} {idt}", dl.name);
                    if dt != DType::Bool {
                        let alpha: stride_core::Scalar = if dt.is_float() {
                            2.5f64.into()
                        } else {
                            3i64.into()
                        };
                        for a in [alpha, 1i64.into()] {
                            let r1 = dl.cpu.index_add_(d as i64, &it, &src, a);
                            let r2 = dl.gpu.index_add_(d as i64, &on(&it, &g), &on(&src, &g), a);
                            same_outcome(r1, r2, &dl, &format!("index_add_ alpha {a:?} {ctx}"));
                        }
                    }
                    let r1 = dl.cpu.index_copy_(d as i64, &it, &src);
                    let r2 = dl.gpu.index_copy_(d as i64, &on(&it, &g), &on(&src, &g));
                    same_outcome(r1, r2, &dl, &format!("index_copy_ {ctx}"));
                    let r1 = dl.cpu.index_fill_(d as i64, &it, 1.0);
                    let r2 = dl.gpu.index_fill_(d as i64, &on(&it, &g), 1.0);
                    same_outcome(r1, r2, &dl, &format!("index_fill_ {ctx}"));
                }
            }
        }
    }
}

#[test]
fn scatters_whose_index_varies_along_the_axis_only_match_the_cpu() {
    // index_add/index_copy/index_fill and expanded indices with long axes: the path that
    // sorts the axis by destination row
    let Some(g) = gpu("scatters_whose_index_varies_along_the_axis_only_match_the_cpu") else {
        return;
    };
    let mut rng = Rng(24);
    let m = 200;
    for (di, dt) in ALL.into_iter().enumerate() {
        for d in 0..2usize {
            // one index dtype per (dtype, dim), rotating
            let idt = INDEX_DTYPES[(di + d) % 3];
            {
                let xs = if d == 0 { vec![7usize, 5] } else { vec![5, 7] };
                let base = finite(dt, 35, &mut rng);
                let idx: Vec<f64> = (0..m).map(|_| rng.below(7) as f64).collect();
                let it = tensor(&idx, &[m], idt);
                let mut ss = xs.clone();
                ss[d] = m;
                let mut sv = finite(dt, ss.iter().product(), &mut rng);
                if dt.is_float() {
                    sv[3] = f64::NAN;
                }
                let src = tensor(&sv, &ss, dt);
                // the index expanded over the other dim (stride 0)
                let (ishape, eshape): (Vec<i64>, Vec<i64>) = if d == 0 {
                    (vec![m as i64, 1], vec![m as i64, 5])
                } else {
                    (vec![1, m as i64], vec![5, m as i64])
                };
                let ie = it.reshape(&ishape).unwrap();
                let ieg = on(&it, &g).reshape(&ishape).unwrap();
                let (ie, ieg) = (ie.expand(&eshape).unwrap(), ieg.expand(&eshape).unwrap());
                for dl in both_layouts(&base, &xs, dt, &g).into_iter().step_by(2) {
                    let ctx = format!("{dt} self:{} d{d} {idt}", dl.name);
                    let di = d as i64;
                    if dt != DType::Bool {
                        let a: stride_core::Scalar = if dt.is_float() {
                            0.75f64.into()
                        } else {
                            2i64.into()
                        };
                        let r1 = dl.cpu.index_add_(di, &it, &src, a);
                        let r2 = dl.gpu.index_add_(di, &on(&it, &g), &on(&src, &g), a);
                        same_outcome(r1, r2, &dl, &format!("index_add_ {ctx}"));
                    }
                    let r1 = dl.cpu.index_copy_(di, &it, &src);
                    let r2 = dl.gpu.index_copy_(di, &on(&it, &g), &on(&src, &g));
                    same_outcome(r1, r2, &dl, &format!("index_copy_ {ctx}"));
                    let r1 = dl.cpu.index_fill_(di, &it, 1.0);
                    let r2 = dl.gpu.index_fill_(di, &on(&it, &g), 1.0);
                    same_outcome(r1, r2, &dl, &format!("index_fill_ {ctx}"));
                    for op in scatter_ops() {
                        if dt == DType::Bool && !matches!(op, Sc::Scatter | Sc::ScatterValue) {
                            continue;
                        }
                        let r1 = run_scatter(op, &dl.cpu, di, &ie, &src);
                        let r2 = run_scatter(op, &dl.gpu, di, &ieg, &on(&src, &g));
                        same_outcome(r1, r2, &dl, &format!("{op:?} expanded index {ctx}"));
                    }
                }
            }
        }
    }
}

#[test]
fn long_scatter_adds_round_in_the_cpus_order() {
    let Some(g) = gpu("long_scatter_adds_round_in_the_cpus_order") else {
        return;
    };
    let mut rng = Rng(23);
    for dt in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        // 1-D: 100k positions into 10 bins (one fiber walks them all)
        let n = 100_000;
        let idx: Vec<f64> = (0..n).map(|_| rng.below(10) as f64).collect();
        let src = tensor(&finite(dt, n, &mut rng), &[n], dt);
        let it = tensor(&idx, &[n], DType::I64);
        let z = Tensor::zeros([10], dt, &CPU).unwrap();
        let want = z.scatter_add(0, &it, &src).unwrap();
        let got = on(&z, &g)
            .scatter_add(0, &on(&it, &g), &on(&src, &g))
            .unwrap();
        assert_bits(&want, &got, &format!("1-D scatter_add {dt}"));
        // an embedding backward: 5000 rows into a [1000, 64] table
        let m = 5000;
        let rows: Vec<f64> = (0..m).map(|_| rng.below(1000) as f64).collect();
        let ri = tensor(&rows, &[m], DType::I32);
        let grad = tensor(&finite(dt, m * 64, &mut rng), &[m, 64], dt);
        let table = Tensor::zeros([1000, 64], dt, &CPU).unwrap();
        let want = table.index_add(0, &ri, &grad, 1i64).unwrap();
        let got = on(&table, &g)
            .index_add(0, &on(&ri, &g), &on(&grad, &g), 1i64)
            .unwrap();
        assert_bits(&want, &got, &format!("index_add rows {dt}"));
    }
}

// out-of-range indices: tests/cuda_deferred.rs (a deferred error is the whole device's, so
// those tests run alone in their own binary)

// ---------------------------------------------------------------------------------------------
// masked scans

#[test]
fn masked_scans_match_the_cpu() {
    let Some(g) = gpu("masked_scans_match_the_cpu") else {
        return;
    };
    let mut rng = Rng(31);
    let shape = [6usize, 7];
    for dt in ALL {
        let x = tricky(dt, 42, &mut rng);
        let m: Vec<f64> = (0..42).map(|_| rng.below(2) as f64).collect();
        for xl in both_layouts(&x, &shape, dt, &g) {
            for ml in both_layouts(&m, &shape, DType::Bool, &g)
                .into_iter()
                .step_by(2)
            {
                let ctx = format!("{dt} x:{} mask:{}", xl.name, ml.name);
                assert_bits(
                    &xl.cpu.masked_select(&ml.cpu).unwrap(),
                    &xl.gpu.masked_select(&ml.gpu).unwrap(),
                    &format!("masked_select {ctx}"),
                );
                let src = tensor(&tricky(dt, 50, &mut rng), &[50], dt);
                xl.cpu.masked_scatter_(&ml.cpu, &src).unwrap();
                xl.gpu.masked_scatter_(&ml.gpu, &on(&src, &g)).unwrap();
                xl.assert_same(&format!("masked_scatter_ {ctx}"));
            }
            // a broadcast mask (one row for every row)
            let row = tensor(&m[..7], &[1, 7], DType::Bool);
            assert_bits(
                &xl.cpu.masked_select(&row).unwrap(),
                &xl.gpu.masked_select(&on(&row, &g)).unwrap(),
                &format!("masked_select {dt} x:{} broadcast mask", xl.name),
            );
            assert_bits(
                &xl.cpu.nonzero().unwrap(),
                &xl.gpu.nonzero().unwrap(),
                &format!("nonzero {dt} x:{}", xl.name),
            );
        }
    }
    // long: many chunks of the compaction
    let n = 1_000_003;
    let m: Vec<bool> = (0..n).map(|_| rng.below(3) == 0).collect();
    let mt = Tensor::from_vec(m, [n]).unwrap();
    let x = Tensor::from_vec((0..n as i64).collect::<Vec<_>>(), [n]).unwrap();
    assert_bits(
        &x.masked_select(&mt).unwrap(),
        &on(&x, &g).masked_select(&on(&mt, &g)).unwrap(),
        "long masked_select",
    );
    let x3 = x.reshape(&[1, n as i64, 1]).unwrap();
    assert_bits(
        &x3.nonzero().unwrap(),
        &on(&x3, &g).nonzero().unwrap(),
        "long nonzero",
    );
    // a short source is an error before anything is written
    let xg = on(&tensor(&[1.0; 6], &[6], DType::F32), &g);
    let mk = on(
        &tensor(&[1.0, 0.0, 1.0, 1.0, 0.0, 1.0], &[6], DType::Bool),
        &g,
    );
    let e = xg
        .masked_scatter_(&mk, &on(&tensor(&[5.0; 3], &[3], DType::F32), &g))
        .unwrap_err();
    assert!(e.to_string().contains("selects 4"), "{e}");
    assert_eq!(xg.to_f64_vec().unwrap(), vec![1.0; 6]);
}

// ---------------------------------------------------------------------------------------------
// sort, topk, kth

#[test]
fn sorts_match_the_cpu_values_and_indices() {
    let Some(g) = gpu("sorts_match_the_cpu_values_and_indices") else {
        return;
    };
    let mut rng = Rng(41);
    for shape in [
        vec![7usize, 33],
        vec![300, 17],
        vec![3, 2049],
        vec![2, 5000],
        vec![1, 1],
        vec![4, 0],
    ] {
        let n: usize = shape.iter().product();
        for dt in ALL {
            let x = tricky(dt, n, &mut rng);
            for xl in both_layouts(&x, &shape, dt, &g).into_iter().step_by(3) {
                for d in 0..2i64 {
                    for desc in [false, true] {
                        let ctx = format!("sort {dt} {shape:?} x:{} d{d} desc={desc}", xl.name);
                        let (wv, wi) = xl.cpu.sort(d, desc, true).unwrap();
                        let (gv, gi) = xl.gpu.sort(d, desc, true).unwrap();
                        assert_bits(&wv, &gv, &format!("{ctx} values"));
                        assert_bits(&wi, &gi, &format!("{ctx} indices"));
                    }
                }
            }
        }
    }
}

#[test]
fn long_rows_sort_like_the_cpu() {
    let Some(g) = gpu("long_rows_sort_like_the_cpu") else {
        return;
    };
    let mut rng = Rng(42);
    for (n, dt) in [
        (1_000_000usize, DType::F32),
        (100_003, DType::F16),
        (100_003, DType::I64),
        (262_145, DType::BF16),
        (150_000, DType::U8),
        (100_000, DType::Bool),
        (131_072, DType::F64),
    ] {
        let x = tensor(&tricky(dt, n, &mut rng), &[n], dt);
        for desc in [false, true] {
            let (wv, wi) = x.sort(0, desc, true).unwrap();
            let (gv, gi) = on(&x, &g).sort(0, desc, true).unwrap();
            let ctx = format!("sort {dt} n={n} desc={desc}");
            assert_bits(&wv, &gv, &format!("{ctx} values"));
            assert_bits(&wi, &gi, &format!("{ctx} indices"));
        }
        let k = 1000.min(n);
        let (wv, wi) = x.topk(k, 0, true, true).unwrap();
        let (gv, gi) = on(&x, &g).topk(k, 0, true, true).unwrap();
        assert_bits(&wv, &gv, &format!("topk {dt} n={n}"));
        assert_bits(&wi, &gi, &format!("topk indices {dt} n={n}"));
        if dt != DType::Bool {
            let (wv, wi) = x.median_dim(0, false).unwrap();
            let (gv, gi) = on(&x, &g).median_dim(0, false).unwrap();
            assert_bits(&wv, &gv, &format!("median {dt} n={n}"));
            assert_bits(&wi, &gi, &format!("median index {dt} n={n}"));
        }
    }
    // a long transposed row: dim 0 of a [3000, 3] tensor, stride 3
    let x = tensor(&tricky(DType::F32, 9000, &mut rng), &[3000, 3], DType::F32);
    let (wv, wi) = x.sort(0, false, true).unwrap();
    let (gv, gi) = on(&x, &g).sort(0, false, true).unwrap();
    assert_bits(&wv, &gv, "sort strided long rows");
    assert_bits(&wi, &gi, "sort strided long rows, indices");
}

#[test]
fn topk_kthvalue_median_match_the_cpu() {
    let Some(g) = gpu("topk_kthvalue_median_match_the_cpu") else {
        return;
    };
    let mut rng = Rng(43);
    // [4, 1536]: shared-memory rows that take the selection for k <= n / 16 (the SAE's k 32);
    // [2, 24577]: the SAE's 24,576 latents (+1), selected
    for shape in [
        vec![5usize, 40],
        vec![3, 3000],
        vec![64, 9],
        vec![4, 1536],
        vec![2, 24577],
    ] {
        let n: usize = shape.iter().product();
        for dt in ALL {
            let mut x = tricky(dt, n, &mut rng);
            if dt.is_float() {
                // row 1 without NaNs (median then selects), the others with some
                for v in x.iter_mut().skip(shape[1]).take(shape[1]) {
                    if v.is_nan() {
                        *v = 1.5;
                    }
                }
            }
            for xl in both_layouts(&x, &shape, dt, &g).into_iter().step_by(3) {
                let len = shape[1];
                for k in [1, 3, 32, 64, 1024, len] {
                    if k > len {
                        continue;
                    }
                    for largest in [true, false] {
                        let ctx =
                            format!("topk {dt} {shape:?} x:{} k={k} largest={largest}", xl.name);
                        let (wv, wi) = xl.cpu.topk(k, 1, largest, true).unwrap();
                        let (gv, gi) = xl.gpu.topk(k, 1, largest, true).unwrap();
                        assert_bits(&wv, &gv, &ctx);
                        assert_bits(&wi, &gi, &format!("{ctx} indices"));
                    }
                }
                if dt == DType::Bool {
                    continue;
                }
                for k in [1, len / 2 + 1, len] {
                    let ctx = format!("kthvalue {dt} {shape:?} x:{} k={k}", xl.name);
                    let (wv, wi) = xl.cpu.kthvalue(k, 1, true).unwrap();
                    let (gv, gi) = xl.gpu.kthvalue(k, 1, true).unwrap();
                    assert_bits(&wv, &gv, &ctx);
                    assert_bits(&wi, &gi, &format!("{ctx} indices"));
                }
                let (wv, wi) = xl.cpu.median_dim(1, false).unwrap();
                let (gv, gi) = xl.gpu.median_dim(1, false).unwrap();
                let ctx = format!("median {dt} {shape:?} x:{}", xl.name);
                assert_bits(&wv, &gv, &ctx);
                assert_bits(&wi, &gi, &format!("{ctx} indices"));
                assert_bits(&xl.cpu.median().unwrap(), &xl.gpu.median().unwrap(), &ctx);
            }
        }
    }
}

/// Long rows with `k <= 1024` take the selection kernel (`k_topk_select`): values and indices
/// must still be the CPU's, ties (many in `tricky` data and in bool/u8 rows) included.
#[test]
fn topk_by_selection_matches_the_cpu() {
    let Some(g) = gpu("topk_by_selection_matches_the_cpu") else {
        return;
    };
    let mut rng = Rng(44);
    for (shape, dts) in [
        (vec![6usize, 5000], ALL.to_vec()),
        (vec![256, 8192], vec![DType::F32]),
        (vec![2, 70_000], vec![DType::F32, DType::I64]),
    ] {
        let n: usize = shape.iter().product();
        for dt in dts {
            let x = tricky(dt, n, &mut rng);
            for xl in both_layouts(&x, &shape, dt, &g).into_iter().step_by(3) {
                for k in [1, 16, 1000, 1024] {
                    for largest in [true, false] {
                        let ctx =
                            format!("topk {dt} {shape:?} x:{} k={k} largest={largest}", xl.name);
                        let (wv, wi) = xl.cpu.topk(k, 1, largest, true).unwrap();
                        let (gv, gi) = xl.gpu.topk(k, 1, largest, true).unwrap();
                        assert_bits(&wv, &gv, &ctx);
                        assert_bits(&wi, &gi, &format!("{ctx} indices"));
                    }
                }
            }
        }
    }
    // normal values, the SAE's rows: the k-th key's top-byte bucket is small, so the kernel
    // takes its two-read path (winners and candidates collected in one ordered pass); rows
    // also seen transposed, and a length that is not a multiple of the pass's step
    let gen = stride_core::Generator::new(45);
    for (rows, n, k) in [
        (64usize, 24576usize, 64usize),
        (33, 24577, 64),
        (128, 1536, 32),
    ] {
        let x = Tensor::randn([rows, n], DType::F32, &Device::Cpu, Some(&gen)).unwrap();
        for (name, x) in [
            ("dense", x.clone()),
            (
                "transposed",
                x.t().unwrap().contiguous().unwrap().t().unwrap(),
            ),
        ] {
            for largest in [true, false] {
                let ctx =
                    format!("topk of normal values [{rows}, {n}] {name} k={k} largest={largest}");
                let (wv, wi) = x.topk(k, 1, largest, true).unwrap();
                let (gv, gi) = on(&x, &g).topk(k, 1, largest, true).unwrap();
                assert_bits(&wv, &gv, &ctx);
                assert_bits(&wi, &gi, &format!("{ctx} indices"));
            }
        }
    }
    // values bunched within one binade: the top digit's bucket holds the whole row (more than
    // the kernel's 2,048 candidates), so further digits come from the row until the bucket fits
    // (1 + u: one more digit; 1 + u/128: two more)
    for (rows, n, k, scale) in [
        (8usize, 24576usize, 64usize, 1.0f64),
        (8, 24576, 64, 1.0 / 128.0),
    ] {
        let x = Tensor::zeros([rows, n], DType::F32, &Device::Cpu).unwrap();
        x.uniform_(1.0, 1.0 + scale, Some(&gen)).unwrap();
        for largest in [true, false] {
            let ctx = format!("topk of 1 + {scale} U(0, 1) [{rows}, {n}] k={k} largest={largest}");
            let (wv, wi) = x.topk(k, 1, largest, true).unwrap();
            let (gv, gi) = on(&x, &g).topk(k, 1, largest, true).unwrap();
            assert_bits(&wv, &gv, &ctx);
            assert_bits(&wi, &gi, &format!("{ctx} indices"));
        }
    }
    // all equal: every key ties with the threshold
    let x = Tensor::zeros([3, 4000], DType::F32, &Device::Cpu).unwrap();
    let (wv, wi) = x.topk(700, 1, true, true).unwrap();
    let (gv, gi) = on(&x, &g).topk(700, 1, true, true).unwrap();
    assert_bits(&wv, &gv, "topk of equal values");
    assert_bits(&wi, &gi, "topk of equal values, indices");
}

// ---------------------------------------------------------------------------------------------
// unique, searchsorted, bincount, histc

#[test]
fn unique_and_searchsorted_match_the_cpu() {
    let Some(g) = gpu("unique_and_searchsorted_match_the_cpu") else {
        return;
    };
    let mut rng = Rng(51);
    for dt in ALL {
        for n in [0usize, 1, 37, 5000] {
            let x = tensor(&tricky(dt, n, &mut rng), &[n], dt);
            let (wv, wi, wc) = x.unique(true, true, true).unwrap();
            let (gv, gi, gc) = on(&x, &g).unique(true, true, true).unwrap();
            let ctx = format!("unique {dt} n={n}");
            assert_bits(&wv, &gv, &ctx);
            assert_bits(&wi.unwrap(), &gi.unwrap(), &format!("{ctx} inverse"));
            assert_bits(&wc.unwrap(), &gc.unwrap(), &format!("{ctx} counts"));
        }
        // searchsorted: one sorted sequence, and one per row
        let seq = tensor(&tricky(dt, 50, &mut rng), &[50], dt)
            .sort(0, false, true)
            .unwrap()
            .0;
        let rows = tensor(&tricky(dt, 4 * 30, &mut rng), &[4, 30], dt)
            .sort(1, false, true)
            .unwrap()
            .0;
        let vals = tensor(&tricky(dt, 4 * 9, &mut rng), &[4, 9], dt);
        for right in [false, true] {
            for (name, s) in [("1-D", &seq), ("rows", &rows)] {
                let ctx = format!("searchsorted {dt} {name} right={right}");
                assert_bits(
                    &s.searchsorted(&vals, right).unwrap(),
                    &on(s, &g).searchsorted(&on(&vals, &g), right).unwrap(),
                    &ctx,
                );
                let vt = vals.t().unwrap().contiguous().unwrap().t().unwrap();
                assert_bits(
                    &s.searchsorted(&vt, right).unwrap(),
                    &on(s, &g)
                        .searchsorted(
                            &on(&vals.t().unwrap().contiguous().unwrap(), &g)
                                .t()
                                .unwrap(),
                            right,
                        )
                        .unwrap(),
                    &format!("{ctx} transposed values"),
                );
            }
        }
    }
}

#[test]
fn bincount_and_histc_match_the_cpu() {
    let Some(g) = gpu("bincount_and_histc_match_the_cpu") else {
        return;
    };
    let mut rng = Rng(61);
    for idt in [DType::I64, DType::I32, DType::U8, DType::U32, DType::I8] {
        for n in [0usize, 7, 100_000] {
            let v: Vec<f64> = (0..n).map(|_| rng.below(50) as f64).collect();
            let x = tensor(&v, &[n], idt);
            let ctx = format!("bincount {idt} n={n}");
            assert_bits(
                &x.bincount(None, 3).unwrap(),
                &on(&x, &g).bincount(None, 3).unwrap(),
                &ctx,
            );
            for wd in [DType::F32, DType::F64, DType::F16] {
                let w = tensor(&finite(DType::F32, n, &mut rng), &[n], wd);
                assert_bits(
                    &x.bincount(Some(&w), 60).unwrap(),
                    &on(&x, &g).bincount(Some(&on(&w, &g)), 60).unwrap(),
                    &format!("{ctx} weights {wd}"),
                );
            }
        }
    }
    let neg = ints(&[1, -2, 3], &[3], DType::I64);
    assert_eq!(
        neg.bincount(None, 0).unwrap_err().to_string(),
        on(&neg, &g).bincount(None, 0).unwrap_err().to_string()
    );
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        // finite data: min == max takes the data's extrema
        let fx = tensor(&finite(dt, 100, &mut rng), &[100], dt);
        for bins in [5usize, 64] {
            assert_bits(
                &fx.histc(bins, 0.0, 0.0).unwrap(),
                &on(&fx, &g).histc(bins, 0.0, 0.0).unwrap(),
                &format!("histc {dt} bins={bins} over the data's range"),
            );
        }
        for xl in both_layouts(&tricky(dt, 6 * 50, &mut rng), &[6, 50], dt, &g)
            .into_iter()
            .step_by(2)
        {
            for (bins, lo, hi) in [
                (10usize, -20.0, 20.0),
                (7, 0.0, 0.0),
                (1, -1.0, 1.0),
                (33, -3.3, 41.0),
            ] {
                let ctx = format!("histc {dt} x:{} bins={bins} [{lo}, {hi}]", xl.name);
                let want = xl.cpu.histc(bins, lo, hi);
                let got = xl.gpu.histc(bins, lo, hi);
                match (want, got) {
                    (Ok(w), Ok(gt)) => assert_bits(&w, &gt, &ctx),
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{ctx}"),
                    (a, b) => panic!("{ctx}: cpu {a:?} vs cuda {b:?}"),
                }
            }
        }
    }
}
