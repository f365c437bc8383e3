//! The CUDA device, its memory and transfers. Every test runs on a machine with a GPU and
//! skips — saying so — where there is none; `no_gpu_is_a_clear_error` runs everywhere.
//!
//! The op-by-op conformance of the CUDA kernels is the registry's job:
//! `stride check --device cuda` (and stride-check's `tests/cuda.rs`).

use stride_core::{cuda, memory_stats, DType, Device, Error, Tensor};

/// The GPU and a lock held for the whole test, or None after printing why the test is
/// skipped. The tests of this file read process-wide counters (syncs, allocator statistics),
/// so they take turns on the device.
fn gpu(test: &str) -> Option<(Device, std::sync::MutexGuard<'static, ()>)> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // skips, saying so, without a GPU; fails instead under STRIDE_REQUIRE_CUDA=1
    let device = cuda::require_or_skip(test)?;
    let turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    Some((device, turn))
}

fn seq(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i as f32) * 0.5 - 3.0).collect()
}

#[test]
fn no_gpu_is_a_clear_error() {
    if cuda::is_available() {
        // the ordinal past the last device must fail, naming how many there are
        let n = cuda::device_count();
        let e = Device::cuda(n).unwrap_err();
        assert!(e.to_string().contains("CUDA device"), "{e}");
        return;
    }
    let e = Device::cuda(0).unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("cuda:0") && msg.contains("Device::Cpu"),
        "{msg}"
    );
    // ops on a CUDA device fail the same way, never panic
    let e = Tensor::zeros([2], DType::F32, &Device::Cuda(0)).unwrap_err();
    assert!(matches!(e, Error::DeviceUnavailable { .. }), "{e}");
    let x = Tensor::from_vec(vec![1.0f32], [1]).unwrap();
    assert!(x.to_device(&Device::Cuda(0)).is_err());
    assert_eq!(cuda::sync_count(0), 0);
    assert_eq!(memory_stats(Device::Cuda(0)).allocated_bytes, 0);
}

#[test]
fn round_trip_every_dtype_and_layout() {
    let Some((g, _turn)) = gpu("round_trip_every_dtype_and_layout") else {
        return;
    };
    let base = Tensor::from_vec(seq(6 * 5), [6, 5]).unwrap();
    for dt in DType::ALL {
        let x = base.to_dtype(dt).unwrap();
        let views = [
            ("contiguous", x.clone()),
            ("transposed", x.t().unwrap()),
            ("stepped", x.slice(0, 0, 6, 2).unwrap()),
            ("offset", x.narrow(1, 1, 3).unwrap()),
            (
                "expanded",
                x.select(0, 2)
                    .unwrap()
                    .unsqueeze(0)
                    .unwrap()
                    .expand(&[4, 5])
                    .unwrap(),
            ),
        ];
        for (name, v) in views {
            let d = v.to_device(&g).unwrap();
            assert_eq!(d.device(), g);
            assert_eq!(
                d.dtype(),
                dt,
                "{name} {dt}: the dtype must survive the transfer"
            );
            assert_eq!(d.shape(), v.shape());
            if v.layout().is_non_overlapping_and_dense() {
                assert_eq!(
                    d.stride(),
                    v.stride(),
                    "{name} {dt}: dense strides are kept"
                );
            }
            let back = d.to_device(&Device::Cpu).unwrap();
            assert_eq!(
                back.to_f64_vec().unwrap(),
                v.to_f64_vec().unwrap(),
                "{name} {dt}"
            );
        }
    }
}

#[test]
fn index_dtypes_survive_broadcast_and_contiguous_on_the_gpu() {
    // candle's Metal bug: u32 indices became f32 after unsqueeze → broadcast → contiguous
    let Some((g, _turn)) = gpu("index_dtypes_survive_broadcast_and_contiguous_on_the_gpu") else {
        return;
    };
    for dt in [DType::U32, DType::I32, DType::I64] {
        let idx = Tensor::from_vec(vec![3i64, 0, 2], [3])
            .unwrap()
            .to_dtype(dt)
            .unwrap()
            .to_device(&g)
            .unwrap();
        let b = idx
            .unsqueeze(0)
            .unwrap()
            .expand(&[4, 3])
            .unwrap()
            .contiguous()
            .unwrap();
        assert_eq!(b.dtype(), dt);
        assert_eq!(b.device(), g);
        let host = b.to_device(&Device::Cpu).unwrap();
        assert_eq!(host.dtype(), dt);
        assert_eq!(host.to_f64_vec().unwrap(), [3.0, 0.0, 2.0].repeat(4));
    }
}

#[test]
fn only_reads_wait_for_the_gpu() {
    let Some((g, _turn)) = gpu("only_reads_wait_for_the_gpu") else {
        return;
    };
    let x = Tensor::from_vec(seq(1 << 16), [256, 256])
        .unwrap()
        .to_device(&g)
        .unwrap();
    let before = cuda::sync_count(0);
    // a chain of queued work: no waits
    let mut y = x.mul(0.5).unwrap();
    for _ in 0..20 {
        y = y.add(&x.t().unwrap()).unwrap().tanh().unwrap();
    }
    y.mul_(&x).unwrap();
    assert_eq!(
        cuda::sync_count(0),
        before,
        "queued ops must not wait for the GPU"
    );
    let v = y.to_vec::<f32>().unwrap();
    assert_eq!(cuda::sync_count(0), before + 1, "to_vec waits exactly once");
    assert_eq!(v.len(), 1 << 16);
    let s = format!("{}", y.narrow(0, 0, 1).unwrap());
    assert!(s.contains("cuda:0"), "{s}");
    assert!(
        cuda::sync_count(0) >= before + 2,
        "Display reads, so it waits"
    );
}

#[test]
fn allocator_caches_counts_and_recovers_from_oom() {
    let Some((g, _turn)) = gpu("allocator_caches_counts_and_recovers_from_oom") else {
        return;
    };
    let s0 = memory_stats(g);
    let t = Tensor::zeros([1 << 20], DType::F32, &g).unwrap(); // 4 MiB
    let s1 = memory_stats(g);
    assert_eq!(s1.allocated_bytes, s0.allocated_bytes + (4 << 20));
    assert!(s1.peak_bytes >= s1.allocated_bytes);
    assert_eq!(s1.allocation_count, s0.allocation_count + 1);
    drop(t);
    let s2 = memory_stats(g);
    assert_eq!(
        s2.allocated_bytes, s0.allocated_bytes,
        "freed bytes are no longer allocated"
    );
    assert!(
        s2.reserved_bytes >= s2.allocated_bytes + (4 << 20),
        "but stay cached"
    );
    assert!(s2.largest_free_block >= 4 << 20);
    // the same size class is reused without asking the driver
    let t = Tensor::zeros([1 << 20], DType::F32, &g).unwrap();
    assert_eq!(memory_stats(g).reserved_bytes, s2.reserved_bytes);
    drop(t);
    cuda::empty_cache(0).unwrap();
    assert!(memory_stats(g).reserved_bytes < s2.reserved_bytes);

    // far more than any GPU has: an error naming the request, and the device stays usable
    let e = Tensor::zeros([1usize << 50], DType::F32, &g).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains("out of memory") && msg.contains("empty_cache"),
        "{msg}"
    );
    let x = Tensor::from_vec(vec![1.0f32, 2.0], [2])
        .unwrap()
        .to_device(&g)
        .unwrap();
    assert_eq!(x.add(&x).unwrap().to_vec::<f32>().unwrap(), [2.0, 4.0]);
}

#[test]
fn mixing_devices_is_an_error_naming_both() {
    let Some((g, _turn)) = gpu("mixing_devices_is_an_error_naming_both") else {
        return;
    };
    let a = Tensor::from_vec(vec![1.0f32, 2.0], [2]).unwrap();
    let b = a.to_device(&g).unwrap();
    let e = a.add(&b).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("cpu") && msg.contains("cuda:0"), "{msg}");
    assert_eq!(a.to_vec::<f32>().unwrap(), [1.0, 2.0]);
}

/// cuBLAS products against the CPU's `gemm` for every operand form (plain, transposed,
/// stepped, batched with a broadcast batch dim, a vector), every float dtype.
#[test]
fn matmul_matches_the_cpu_for_every_operand_form() {
    let Some((g, _turn)) = gpu("matmul_matches_the_cpu_for_every_operand_form") else {
        return;
    };
    let mk = |shape: &[usize], salt: usize| {
        let n: usize = shape.iter().product();
        let v: Vec<f64> = (0..n)
            .map(|i| (((i * 7 + salt * 13) % 23) as f64 - 11.0) / 8.0)
            .collect();
        Tensor::from_vec(v, shape.to_vec()).unwrap()
    };
    let a = mk(&[3, 37, 65], 1);
    let b = mk(&[65, 29], 2);
    let cases: Vec<(&str, Tensor, Tensor)> = vec![
        ("plain 2-d", a.select(0, 1).unwrap(), b.clone()),
        (
            "both transposed",
            b.t()
                .unwrap()
                .contiguous()
                .unwrap()
                .t()
                .unwrap()
                .t()
                .unwrap(),
            a.select(0, 0).unwrap().t().unwrap(),
        ),
        (
            "stepped rows",
            a.select(0, 2).unwrap().slice(0, 0, 37, 2).unwrap(),
            b.clone(),
        ),
        ("batched, broadcast rhs", a.clone(), b.clone()),
        (
            "matrix x vector",
            a.select(0, 1).unwrap(),
            b.select(1, 3).unwrap(),
        ),
        (
            "batched, transposed lhs",
            a.transpose(1, 2).unwrap(),
            mk(&[3, 37, 5], 3),
        ),
    ];
    for dt in [DType::F64, DType::F32, DType::F16, DType::BF16] {
        // The bound, derived (issue #22): every operand is a multiple of 1/8 with |v| ≤ 11/8
        // (exact in every float dtype), so every product is a multiple of 2⁻⁶ with
        // |p| ≤ 121/64, and with k ≤ 65 every partial sum, in any order, is a multiple of
        // 2⁻⁶ below 65 · 121/64 < 2⁷ — at most 13 significant bits, exact in an f32 (or
        // f64) accumulator. The only rounding is the final one to `dt`, which is
        // deterministic: CUDA and the CPU must both return the f64 product rounded to `dt`,
        // bit for bit. (The old 1e-2 / 1e-1 relative tolerances passed a cuBLAS computing
        // in f16 or bf16, whose partial sums near 100 round to 1/16 or 1/2.)
        for (what, x, y) in &cases {
            let want = x
                .to_dtype(DType::F64)
                .unwrap()
                .matmul(&y.to_dtype(DType::F64).unwrap())
                .unwrap()
                .to_dtype(dt)
                .unwrap()
                .to_f64_vec()
                .unwrap();
            let (x, y) = (x.to_dtype(dt).unwrap(), y.to_dtype(dt).unwrap());
            let cpu = x.matmul(&y).unwrap().to_f64_vec().unwrap();
            let got = x
                .to_device(&g)
                .unwrap()
                .matmul(&y.to_device(&g).unwrap())
                .unwrap();
            assert_eq!(got.dtype(), dt, "{what} {dt}");
            let got = got.to_f64_vec().unwrap();
            assert_eq!(got.len(), want.len(), "{what} {dt}");
            for (i, ((p, c), q)) in got.iter().zip(&cpu).zip(&want).enumerate() {
                assert_eq!(p, q, "{what} {dt}: element {i}: cuda {p}, exact {q}");
                assert_eq!(c, q, "{what} {dt}: element {i}: cpu {c}, exact {q}");
            }
        }
    }
}

#[test]
fn gradients_flow_back_across_devices() {
    let Some((g, _turn)) = gpu("gradients_flow_back_across_devices") else {
        return;
    };
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = x.to_device(&g).unwrap().mul(3.0).unwrap();
    let y = y.mul(&y).unwrap().to_device(&Device::Cpu).unwrap(); // 9x²
    y.sum().unwrap().backward().unwrap();
    let gr = x.grad().unwrap();
    assert_eq!(gr.device(), Device::Cpu);
    assert_eq!(gr.to_vec::<f32>().unwrap(), [18.0, 36.0, 54.0]);
}

#[test]
fn elementwise_matches_the_cpu_bit_for_bit_where_ieee_defines_it() {
    let Some((g, _turn)) = gpu("elementwise_matches_the_cpu_bit_for_bit_where_ieee_defines_it")
    else {
        return;
    };
    let a = Tensor::from_vec(seq(64 * 33), [64, 33]).unwrap();
    let b = Tensor::from_vec(seq(33 * 64).into_iter().rev().collect(), [33, 64])
        .unwrap()
        .t()
        .unwrap();
    for dt in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        let (a, b) = (a.to_dtype(dt).unwrap(), b.to_dtype(dt).unwrap());
        let (ga, gb) = (a.to_device(&g).unwrap(), b.to_device(&g).unwrap());
        let cpu = a
            .mul(&b)
            .unwrap()
            .add(&a)
            .unwrap()
            .div(&b)
            .unwrap()
            .sqrt()
            .unwrap();
        let gpu = ga
            .mul(&gb)
            .unwrap()
            .add(&ga)
            .unwrap()
            .div(&gb)
            .unwrap()
            .sqrt()
            .unwrap();
        let (c, d) = (cpu.to_f64_vec().unwrap(), gpu.to_f64_vec().unwrap());
        for (i, (x, y)) in c.iter().zip(&d).enumerate() {
            assert!(
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                "{dt} at {i}: cpu {x} gpu {y}"
            );
        }
        // addcmul into a transposed output, in place: the frozen-Adam bug
        let w = Tensor::from_vec(seq(33 * 64), [33, 64])
            .unwrap()
            .to_dtype(dt)
            .unwrap();
        let wt_cpu = w.clone_tensor().unwrap().t().unwrap();
        let wt_gpu = w.to_device(&g).unwrap().t().unwrap();
        wt_cpu.addcmul_(&a, &b, 0.25).unwrap();
        wt_gpu.addcmul_(&ga, &gb, 0.25).unwrap();
        assert_eq!(
            wt_gpu.to_f64_vec().unwrap(),
            wt_cpu.to_f64_vec().unwrap(),
            "{dt}"
        );
    }
}

#[test]
fn second_use_of_a_kernel_compiles_nothing() {
    let Some((g, _turn)) = gpu("second_use_of_a_kernel_compiles_nothing") else {
        return;
    };
    let x = Tensor::from_vec(seq(100), [100])
        .unwrap()
        .to_device(&g)
        .unwrap();
    x.sin().unwrap();
    let (compiled, loaded) = cuda::kernel_cache_stats();
    x.sin().unwrap();
    assert_eq!(cuda::kernel_cache_stats(), (compiled, loaded));
    assert!(compiled + loaded > 0);
}

/// The dense kernels' row walk (kernels/elementwise.cu `Rows`): a walk of two dims whose
/// inner dim is dense (a bias add `[B, n] + [n]`, a per-row scalar `[B, n] - [B, 1]`, writes
/// into a column slice) runs row by row with vector accesses when rows hold whole aligned
/// vectors, and through the strided kernel otherwise; both must equal the CPU bit for bit,
/// in every family (unary, binary, ternary, cast, copy, fill).
#[test]
fn row_broadcasts_match_the_cpu_bit_for_bit() {
    let Some((g, _turn)) = gpu("row_broadcasts_match_the_cpu_bit_for_bit") else {
        return;
    };
    let same = |c: &Tensor, d: &Tensor, ctx: &str| {
        let (c, d) = (c.to_f64_vec().unwrap(), d.to_f64_vec().unwrap());
        assert_eq!(c.len(), d.len(), "{ctx}");
        for (i, (x, y)) in c.iter().zip(&d).enumerate() {
            assert!(
                x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
                "{ctx} at {i}: cpu {x} gpu {y}"
            );
        }
    };
    let on = |t: &Tensor| t.to_device(&g).unwrap();
    // 96 columns: rows of whole vectors (the row walk); 98: not (the strided kernel)
    for (rows, cols) in [(64usize, 96usize), (64, 98), (7, 4), (129, 1024)] {
        for dt in [DType::F32, DType::F16, DType::F64, DType::I32, DType::U8] {
            let a = Tensor::from_vec(seq(rows * cols), [rows, cols])
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let bias = Tensor::from_vec(seq(cols).into_iter().rev().collect(), [cols])
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let per_row = Tensor::from_vec(seq(rows), [rows, 1])
                .unwrap()
                .to_dtype(dt)
                .unwrap();
            let ctx = format!("{dt} [{rows}, {cols}]");
            let (ga, gb, gr) = (on(&a), on(&bias), on(&per_row));
            same(
                &a.add(&bias).unwrap(),
                &ga.add(&gb).unwrap(),
                &format!("bias add {ctx}"),
            );
            same(
                &bias.sub(&a).unwrap(),
                &gb.sub(&ga).unwrap(),
                &format!("bias sub {ctx}"),
            );
            same(
                &a.mul(&per_row).unwrap(),
                &ga.mul(&gr).unwrap(),
                &format!("per-row mul {ctx}"),
            );
            same(&a.neg().unwrap(), &ga.neg().unwrap(), &format!("neg {ctx}"));
            let mask = per_row.gt(0.0).unwrap();
            same(
                &mask.where_cond(&a, &bias).unwrap(),
                &on(&mask).where_cond(&ga, &gb).unwrap(),
                &format!("where {ctx}"),
            );
            // outputs that are column slices of a wider buffer: aligned (from column 4 of a
            // row of cols + 8) and not (from column 1)
            for start in [4usize, 1] {
                let wide = cols + 8;
                let base = Tensor::from_vec(seq(rows * wide), [rows, wide])
                    .unwrap()
                    .to_dtype(dt)
                    .unwrap();
                let gbase = on(&base);
                let (c, d) = (
                    base.narrow(1, start as i64, cols).unwrap(),
                    gbase.narrow(1, start as i64, cols).unwrap(),
                );
                let ctx = format!("{ctx} into columns {start}..");
                c.copy_(&a).unwrap();
                d.copy_(&ga).unwrap();
                same(&base, &gbase, &format!("copy {ctx}"));
                c.copy_(&a.to_dtype(DType::F32).unwrap()).unwrap();
                d.copy_(&ga.to_dtype(DType::F32).unwrap()).unwrap();
                same(&base, &gbase, &format!("cast {ctx}"));
                c.fill_(3).unwrap();
                d.fill_(3).unwrap();
                same(&base, &gbase, &format!("fill {ctx}"));
                c.add_(&bias).unwrap();
                d.add_(&gb).unwrap();
                same(&base, &gbase, &format!("add_ {ctx}"));
            }
        }
    }
}

/// `arange` and `linspace` on a GPU are computed there (an upload would wait for the
/// device) and give the host formula's values bit for bit: integers (wrapping i64
/// included), float steps that don't divide the range, empty ranges, one step.
#[test]
fn arange_is_made_on_the_gpu_with_the_hosts_values() {
    let Some((dev, _turn)) = gpu("arange_is_made_on_the_gpu_with_the_hosts_values") else {
        return;
    };
    let ints: &[(i64, i64, i64)] = &[
        (0, 17, 1),
        (-5, 40, 3),
        (10, -7, -2),
        (3, 3, 1),
        (i64::MIN, i64::MAX, 1 << 61),
        (i64::MAX - 10, i64::MAX, 4),
    ];
    let floats: &[(f64, f64, f64)] = &[(0.0, 1.0, 0.1), (-2.5, 3.0, 0.3), (1e6, 1e6 + 1.0, 1e-3)];
    let _no_waits = stride_core::debug::forbid_sync();
    let on_gpu: Vec<Tensor> = ints
        .iter()
        .map(|&(a, b, s)| Tensor::arange_step(a, b, s, &dev).unwrap())
        .chain(
            floats
                .iter()
                .map(|&(a, b, s)| Tensor::arange_step(a, b, s, &dev).unwrap()),
        )
        .collect();
    drop(_no_waits);
    let spaces: &[(f64, f64, usize, DType)] = &[
        (0.0, 1.0, 7, DType::F32),
        (-3.3, 10.1, 1000, DType::F64),
        (5.0, -5.0, 11, DType::BF16),
        (1.0, 100.0, 37, DType::I64),
        (2.5, 9.0, 1, DType::F32),
        (0.0, 1.0, 0, DType::F32),
    ];
    let lin_gpu: Vec<Tensor> = {
        let _no_waits = stride_core::debug::forbid_sync();
        spaces
            .iter()
            .map(|&(a, b, n, d)| Tensor::linspace(a, b, n, d, &dev).unwrap())
            .collect()
    };
    for (g, &(a, b, n, d)) in lin_gpu.iter().zip(spaces) {
        let host = Tensor::linspace(a, b, n, d, &Device::Cpu).unwrap();
        assert_eq!(
            (g.dtype(), g.shape()),
            (host.dtype(), host.shape()),
            "linspace {a} {b} {n}"
        );
        let bits = |t: &Tensor| -> Vec<u64> {
            t.to_device(&Device::Cpu)
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        assert_eq!(bits(g), bits(&host), "linspace {a} {b} {n} {d}");
    }
    for (k, g) in on_gpu.iter().enumerate() {
        let host = if k < ints.len() {
            let (a, b, s) = ints[k];
            Tensor::arange_step(a, b, s, &Device::Cpu).unwrap()
        } else {
            let (a, b, s) = floats[k - ints.len()];
            Tensor::arange_step(a, b, s, &Device::Cpu).unwrap()
        };
        assert_eq!(g.dtype(), host.dtype(), "case {k}");
        assert_eq!(g.shape(), host.shape(), "case {k}");
        let g = g.to_device(&Device::Cpu).unwrap();
        if host.dtype() == DType::I64 {
            assert_eq!(
                g.to_vec::<i64>().unwrap(),
                host.to_vec::<i64>().unwrap(),
                "case {k}"
            );
        } else {
            let bits = |t: &Tensor| -> Vec<u32> {
                t.to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            };
            assert_eq!(bits(&g), bits(&host), "case {k}");
        }
    }
}

/// Copies whose innermost dim is contiguous on both sides move 16-byte words
/// (`k_copy_vec16`): the head permutations of attention, into new tensors and into permuted
/// destinations, in every element width — and the layouts that must not take that path (a
/// row that is not a whole number of words, a row start off a word, a reversed innermost
/// dim) still copy right. Bit for bit against the CPU.
#[test]
fn permuted_row_copies_match_the_cpu() {
    let Some((dev, _turn)) = gpu("permuted_row_copies_match_the_cpu") else {
        return;
    };
    for dtype in [DType::U8, DType::BF16, DType::F32, DType::F64] {
        for inner in [64usize, 60, 8, 130] {
            let n = 2 * 3 * 5 * inner;
            let host = Tensor::arange(0i64, n as i64, &Device::Cpu)
                .unwrap()
                .remainder(251i64)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
                .reshape(&[2, 3, 5, inner as i64])
                .unwrap();
            let gpu = host.to_device(&dev).unwrap();
            let cases: Vec<(&str, Box<dyn Fn(&Tensor) -> Tensor>)> = vec![
                (
                    "permute",
                    Box::new(|t| t.permute(&[0, 2, 1, 3]).unwrap().contiguous().unwrap()),
                ),
                (
                    "into permuted",
                    Box::new(|t| {
                        let o = Tensor::zeros([2, 5, 3, inner], t.dtype(), &t.device()).unwrap();
                        o.permute(&[0, 2, 1, 3]).unwrap().copy_(t).unwrap();
                        o
                    }),
                ),
                (
                    "row off a word",
                    Box::new(|t| {
                        let w = t.size(3).unwrap() - 1;
                        t.narrow(3, 1, w)
                            .unwrap()
                            .permute(&[0, 2, 1, 3])
                            .unwrap()
                            .contiguous()
                            .unwrap()
                    }),
                ),
                (
                    "reversed rows",
                    Box::new(|t| {
                        t.flip(&[3])
                            .unwrap()
                            .permute(&[0, 2, 1, 3])
                            .unwrap()
                            .contiguous()
                            .unwrap()
                    }),
                ),
            ];
            for (name, f) in &cases {
                let want = f(&host)
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap();
                let got = f(&gpu)
                    .to_device(&Device::Cpu)
                    .unwrap()
                    .to_dtype(DType::F64)
                    .unwrap()
                    .to_vec::<f64>()
                    .unwrap();
                assert_eq!(got, want, "{dtype} inner {inner}: {name}");
            }
        }
    }
}
