//! Process groups and their collectives, with the ranks as threads of this test: on the CPU
//! (the TCP backend) everywhere, and on two GPUs over NCCL where a machine has them (skipped,
//! saying so, with fewer — mandatory under STRIDE_REQUIRE_MULTI_GPU=1).
//!
//! Every expected value is computed here in f64 from the ranks' inputs, and every rank must
//! end with the same bits.

use stride_core::distributed::{ProcessGroup, ReduceOp};
use stride_core::{cuda, DType, Device, Result, Tensor};

fn world<T: Send + 'static>(
    devices: &[Device],
    f: impl Fn(ProcessGroup) -> Result<T> + Send + Sync + 'static,
) -> Vec<Result<T>> {
    stride_core::distributed::run_threads(devices, f)
}

fn two_gpus(test: &str) -> Option<Vec<Device>> {
    cuda::require_gpus_or_skip(test, 2)
}

/// Rank `r`'s input: distinct per rank and element, exact in every float dtype used.
fn input(r: usize, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7 + r * 3) % 11) as f64 - 5.0 + 0.5 * r as f64)
        .collect()
}

fn expected(op: ReduceOp, world: usize, n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let vals: Vec<f64> = (0..world).map(|r| input(r, n)[i]).collect();
            match op {
                ReduceOp::Sum => vals.iter().sum(),
                ReduceOp::Avg => vals.iter().sum::<f64>() / world as f64,
                ReduceOp::Product => vals.iter().product(),
                ReduceOp::Max => vals.iter().cloned().fold(f64::MIN, f64::max),
                ReduceOp::Min => vals.iter().cloned().fold(f64::MAX, f64::min),
            }
        })
        .collect()
}

/// A `(4, n/4)` tensor of rank `r`'s input; with `strided`, a transposed view (not
/// contiguous), so the collective must read and write through its strides.
fn operand(r: usize, n: usize, dtype: DType, dev: Device, strided: bool) -> Result<Tensor> {
    let v = Tensor::from_vec(input(r, n), [4, n / 4])?
        .to_dtype(dtype)?
        .to_device(&dev)?;
    if !strided {
        return Ok(v);
    }
    let t = Tensor::zeros([n / 4, 4], dtype, &dev)?.t()?;
    assert!(!t.is_contiguous());
    t.copy_(&v)?;
    Ok(t)
}

fn all_reduce_case(devices: Vec<Device>) {
    let world_n = devices.len();
    let n = 4 * 37;
    let out = world(&devices, move |g| {
        let mut results = vec![];
        for dtype in [DType::F32, DType::BF16, DType::F64, DType::I64, DType::I32] {
            for op in [
                ReduceOp::Sum,
                ReduceOp::Avg,
                ReduceOp::Product,
                ReduceOp::Max,
                ReduceOp::Min,
            ] {
                if op == ReduceOp::Avg && !dtype.is_float() {
                    continue;
                }
                for strided in [false, true] {
                    let t = operand(g.rank(), n, dtype, g.device(), strided)?;
                    g.all_reduce_(&t, op)?.wait()?;
                    results.push((
                        dtype,
                        op,
                        strided,
                        t.to_dtype(DType::F64)?.flatten(0, -1)?.to_vec::<f64>()?,
                    ));
                }
            }
        }
        Ok(results)
    });
    let out: Vec<_> = out.into_iter().map(|r| r.expect("rank failed")).collect();
    for (dtype, op, strided, got) in &out[0] {
        // integer inputs: the fractional parts are dropped by the cast, so the expectation
        // is computed from the truncated values
        let want: Vec<f64> = if dtype.is_float() {
            expected(*op, world_n, n)
        } else {
            (0..n)
                .map(|i| {
                    let vals: Vec<f64> = (0..world_n).map(|r| input(r, n)[i].trunc()).collect();
                    match op {
                        ReduceOp::Sum => vals.iter().sum(),
                        ReduceOp::Product => vals.iter().product(),
                        ReduceOp::Max => vals.iter().cloned().fold(f64::MIN, f64::max),
                        _ => vals.iter().cloned().fold(f64::MAX, f64::min),
                    }
                })
                .collect()
        };
        // the flattened view of the (4, n/4) operand is in logical order, so compare after
        // the same reshape of the expectation (row-major in both)
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // the inputs are exact in every dtype; each of the at most `world` roundings of a
            // float reduction (sums of partial results, NCCL's pre-scaled average) is within
            // the dtype's unit roundoff u, relative: |error| ≤ world·u·|w|. Integers: exact.
            let u = match dtype {
                DType::BF16 => 2f64.powi(-8),
                DType::F32 => 2f64.powi(-24),
                DType::F64 => 2f64.powi(-53),
                _ => 0.0,
            };
            let tol = world_n as f64 * u * w.abs();
            assert!(
                (g - w).abs() <= tol,
                "{dtype:?} {op:?} strided={strided} element {i}: {g} vs {w}"
            );
        }
    }
    for other in &out[1..] {
        for (a, b) in out[0].iter().zip(other) {
            assert_eq!(a.3, b.3, "ranks differ for {:?} {:?}", a.0, a.1);
        }
    }
}

#[test]
fn cpu_all_reduce_every_op_dtype_and_layout() {
    all_reduce_case(vec![Device::Cpu; 3]);
}

#[test]
fn cuda_all_reduce_every_op_dtype_and_layout() {
    if let Some(d) = two_gpus("cuda_all_reduce_every_op_dtype_and_layout") {
        all_reduce_case(d);
    }
}

fn movement_case(devices: Vec<Device>) {
    let w = devices.len();
    let out = world(&devices, move |g| {
        let r = g.rank();
        // broadcast from the last rank into a strided tensor
        let b = operand(r, 16, DType::F32, g.device(), true)?;
        g.broadcast_(&b, w - 1)?.wait()?;
        // all-gather of (2, 3) blocks
        let x = Tensor::from_vec(
            (0..6).map(|i| (10 * r + i) as i64).collect::<Vec<_>>(),
            [2, 3],
        )?
        .to_device(&g.device())?;
        let gathered = g.all_gather(&x)?;
        // reduce-scatter: (w·2, 3), this rank keeps its 2 rows of the sum
        let big = Tensor::from_vec(
            (0..w * 6).map(|i| (i + r) as f32).collect::<Vec<_>>(),
            [w * 2, 3],
        )?
        .to_device(&g.device())?;
        let part = g.reduce_scatter(&big, ReduceOp::Sum)?;
        // a bool tensor can be broadcast (data movement)
        let flags = Tensor::from_vec(vec![r == 0, r != 0, true], [3])?.to_device(&g.device())?;
        g.broadcast_(&flags, 0)?.wait()?;
        g.barrier()?;
        Ok((
            b.flatten(0, -1)?.to_vec::<f32>()?,
            gathered.shape().to_vec(),
            gathered.flatten(0, -1)?.to_vec::<i64>()?,
            part.flatten(0, -1)?.to_vec::<f32>()?,
            flags.to_vec::<bool>()?,
        ))
    });
    for (r, o) in out.into_iter().enumerate() {
        let (b, gshape, gathered, part, flags) = o.expect("rank failed");
        let root: Vec<f32> = operand(w - 1, 16, DType::F32, Device::Cpu, true)
            .unwrap()
            .flatten(0, -1)
            .unwrap()
            .to_vec()
            .unwrap();
        assert_eq!(b, root, "rank {r}: broadcast");
        assert_eq!(gshape, vec![2 * w, 3]);
        let want: Vec<i64> = (0..w)
            .flat_map(|q| (0..6).map(move |i| (10 * q + i) as i64))
            .collect();
        assert_eq!(gathered, want, "rank {r}: all_gather");
        let want: Vec<f32> = (0..6)
            .map(|j| (0..w).map(|q| (r * 6 + j + q) as f32).sum())
            .collect();
        assert_eq!(part, want, "rank {r}: reduce_scatter");
        assert_eq!(flags, vec![true, false, true], "rank {r}: bool broadcast");
    }
}

#[test]
fn cpu_broadcast_gather_scatter_barrier() {
    movement_case(vec![Device::Cpu; 3]);
}

#[test]
fn cuda_broadcast_gather_scatter_barrier() {
    if let Some(d) = two_gpus("cuda_broadcast_gather_scatter_barrier") {
        movement_case(d);
    }
}

#[test]
fn cuda_collectives_queue_without_host_waits() {
    let Some(d) = two_gpus("cuda_collectives_queue_without_host_waits") else {
        return;
    };
    let out = world(&d, |g| {
        let t = Tensor::full([1 << 20], 1.0, DType::F32, &g.device())?;
        let Device::Cuda(ordinal) = g.device() else {
            unreachable!()
        };
        let before = cuda::sync_count(ordinal);
        {
            let _guard = stride_core::debug::forbid_sync();
            for _ in 0..4 {
                g.all_reduce_(&t, ReduceOp::Sum)?.wait()?;
                let _ = t.mul(0.5)?;
            }
        }
        let after = cuda::sync_count(ordinal);
        Ok((after - before, t.to_vec::<f32>()?[12345]))
    });
    for o in out {
        let (syncs, v) = o.expect("rank failed");
        assert_eq!(syncs, 0);
        assert_eq!(v, 16.0); // 1 → 2 → 4 → 8 → 16 (the mul's result is discarded)
    }
}

#[test]
fn wrong_operands_are_errors() {
    let out = world(&[Device::Cpu, Device::Cpu], |g| {
        let errs = [
            g.all_reduce_(&Tensor::from_vec(vec![true, false], [2])?, ReduceOp::Sum)
                .err()
                .map(|e| e.to_string()),
            g.all_reduce_(&Tensor::from_vec(vec![1i64, 2], [2])?, ReduceOp::Avg)
                .err()
                .map(|e| e.to_string()),
            g.broadcast_(&Tensor::zeros([2], DType::F32, &Device::Cpu)?, 5)
                .err()
                .map(|e| e.to_string()),
            g.all_reduce_(
                &Tensor::zeros([2], DType::F32, &Device::Cpu)?.requires_grad_(true)?,
                ReduceOp::Sum,
            )
            .err()
            .map(|e| e.to_string()),
            g.all_gather_into(
                &Tensor::zeros([3], DType::F32, &Device::Cpu)?,
                &Tensor::zeros([2], DType::F32, &Device::Cpu)?,
            )
            .err()
            .map(|e| e.to_string()),
            g.reduce_scatter(
                &Tensor::zeros([3], DType::F32, &Device::Cpu)?,
                ReduceOp::Sum,
            )
            .err()
            .map(|e| e.to_string()),
        ];
        // different sizes on different ranks: an error on both, not a hang
        let n = 3 + g.rank();
        let mismatch = g
            .all_reduce_(
                &Tensor::zeros([n], DType::F32, &Device::Cpu)?,
                ReduceOp::Sum,
            )
            .err()
            .map(|e| e.to_string());
        Ok((errs, mismatch))
    });
    for o in out {
        let (errs, mismatch) = o.expect("rank failed");
        let words = [
            "bool",
            "Avg needs a float",
            "root 5",
            "not differentiable",
            "world size 2",
            "divisible",
        ];
        for (e, w) in errs.iter().zip(words) {
            let e = e
                .as_ref()
                .unwrap_or_else(|| panic!("no error where one about {w:?} was expected"));
            assert!(e.contains(w), "{e}");
        }
        let m = mismatch.expect("mismatched sizes must be an error");
        assert!(m.contains("different sizes"), "{m}");
    }
}

#[test]
fn a_rank_on_another_kind_of_device_is_an_error() {
    let Some(_) = two_gpus("a_rank_on_another_kind_of_device_is_an_error") else {
        return;
    };
    let out = world(&[Device::Cpu, Device::Cuda(1)], |_g| Ok(()));
    let e = out[1]
        .as_ref()
        .expect_err("a CUDA rank with a CPU rank 0 is an error");
    assert!(
        e.to_string()
            .contains("every rank must be on a CUDA device"),
        "{e}"
    );
}

#[test]
fn from_env_without_a_rank_says_how_to_start() {
    // this test process is not a rank (the test harness never sets STRIDE_RANK)
    if std::env::var("STRIDE_RANK").is_ok() || std::env::var("RANK").is_ok() {
        return;
    }
    let e = ProcessGroup::from_env().err().expect("not a rank");
    assert!(e.to_string().contains("launch"), "{e}");
}
