//! `Tensor::grouped_matmul` (both forms): against a loop of per-group products, gradients
//! (twice), its errors, autocast; on a GPU every kernel orientation against an f64
//! reference within its error bound, with no host wait, and the deferred offsets check.
//! (The registry's entry `grouped_matmul` covers the layouts and dtypes on every device.)

use stride_core::autocast::autocast;
use stride_core::autograd::{gradcheck, gradgradcheck, GradcheckOptions};
use stride_core::{cuda, DType, Device, Generator, Result, Tensor};

/// Group sizes crossing the CUDA kernels' 64- and 128-row tiles, with an empty group; and
/// rows past the last group.
const SIZES: [usize; 4] = [129, 0, 64, 100];
const TAIL: usize = 7;

fn offsets(sizes: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
    let mut end = 0i64;
    let v: Vec<i64> = sizes
        .iter()
        .map(|&s| {
            end += s as i64;
            end
        })
        .collect();
    Tensor::from_vec(v, [sizes.len()])?
        .to_dtype(dtype)?
        .to_device(device)
}

/// The rows form as a loop: rows of group g times b[g]; zeros past the last group.
fn rows_loop(a: &Tensor, b: &Tensor, sizes: &[usize]) -> Result<Tensor> {
    let n = b.shape()[2];
    let mut parts = vec![];
    let mut start = 0;
    for (g, &s) in sizes.iter().enumerate() {
        parts.push(
            a.narrow(0, start as i64, s)?
                .matmul(&b.select(0, g as i64)?)?,
        );
        start += s;
    }
    let tail = a.shape()[0] - start;
    parts.push(Tensor::zeros([tail, n], a.dtype(), &a.device())?);
    Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)
}

/// The contraction form as a loop: `a[:, rows_g]·b[rows_g]` for each group.
fn contraction_loop(a: &Tensor, b: &Tensor, sizes: &[usize]) -> Result<Tensor> {
    let mut parts = vec![];
    let mut start = 0;
    for &s in sizes {
        let p = a
            .narrow(1, start as i64, s)?
            .matmul(&b.narrow(0, start as i64, s)?)?;
        parts.push(p.unsqueeze(0)?);
        start += s;
    }
    Tensor::cat(&parts.iter().collect::<Vec<_>>(), 0)
}

fn randn(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor> {
    Tensor::randn(
        shape.to_vec(),
        DType::F32,
        &Device::Cpu,
        Some(&Generator::new(seed)),
    )?
    .to_dtype(dtype)
}

#[test]
fn equals_a_loop_of_products_on_the_cpu() -> Result<()> {
    let r: usize = SIZES.iter().sum::<usize>() + TAIL;
    for offs_dtype in [DType::I64, DType::I32] {
        let offs = offsets(&SIZES, offs_dtype, &Device::Cpu)?;
        let (a, b) = (
            randn(&[r, 40], DType::F64, 1)?,
            randn(&[4, 40, 24], DType::F64, 2)?,
        );
        let got = a.grouped_matmul(&b, &offs)?;
        assert_eq!(got.shape(), &[r, 24]);
        // each group is the same CPU product on the same sub-views: the same bits
        assert_eq!(got.to_f64_vec()?, rows_loop(&a, &b, &SIZES)?.to_f64_vec()?);
        let (a, b) = (
            randn(&[24, r], DType::F64, 3)?,
            randn(&[r, 16], DType::F64, 4)?,
        );
        let got = a.grouped_matmul(&b, &offs)?;
        assert_eq!(got.shape(), &[4, 24, 16]);
        assert_eq!(
            got.to_f64_vec()?,
            contraction_loop(&a, &b, &SIZES)?.to_f64_vec()?
        );
        // the empty group's matrix is zeros
        assert!(got.select(0, 1)?.to_f64_vec()?.iter().all(|&v| v == 0.0));
    }
    Ok(())
}

#[test]
fn gradients_twice_in_both_forms() -> Result<()> {
    let sizes = [2, 0, 3];
    let offs = offsets(&sizes, DType::I64, &Device::Cpu)?;
    let opts = GradcheckOptions::default();
    let leaf = |shape: &[usize], seed| -> Result<Tensor> {
        randn(shape, DType::F64, seed)?.requires_grad_(true)
    };
    // rows form, with one row past the last group (its gradient is zero)
    let (a, b) = (leaf(&[6, 3], 5)?, leaf(&[3, 3, 2], 6)?);
    let f = |x: &[Tensor]| x[0].grouped_matmul(&x[1], &offs);
    gradcheck(f, &[a.clone(), b.clone()], opts)?;
    gradgradcheck(f, &[a, b], opts)?;
    // contraction form; also through transposed operands
    let (a, b) = (leaf(&[2, 5], 7)?, leaf(&[5, 3], 8)?);
    let f = |x: &[Tensor]| x[0].grouped_matmul(&x[1], &offs);
    gradcheck(f, &[a.clone(), b.clone()], opts)?;
    gradgradcheck(f, &[a, b], opts)?;
    let (at, bt) = (leaf(&[5, 2], 9)?, leaf(&[3, 5], 10)?);
    let f = |x: &[Tensor]| x[0].t()?.grouped_matmul(&x[1].t()?, &offs);
    gradcheck(f, &[at, bt], opts)
}

#[test]
fn errors_say_what_is_wrong() -> Result<()> {
    let cpu = Device::Cpu;
    let a = Tensor::ones([5, 3], DType::F32, &cpu)?;
    let b = Tensor::ones([2, 3, 4], DType::F32, &cpu)?;
    let err = |r: Result<Tensor>| r.unwrap_err().to_string();
    for (offs, at) in [(vec![3i64, 2], 1), (vec![-1, 2], 0), (vec![2, 6], 1)] {
        let e = err(a.grouped_matmul(&b, &Tensor::from_vec(offs, [2])?));
        assert!(
            e.contains(&format!("offset {at} is out of order")) && e.contains("[0, 5]"),
            "{e}"
        );
    }
    let ok = Tensor::from_vec(vec![2i64, 5], [2])?;
    let e = err(a.grouped_matmul(&b.to_dtype(DType::F64)?, &ok));
    assert!(e.contains("share one float dtype"), "{e}");
    let e = err(a.grouped_matmul(&b, &ok.to_dtype(DType::F32)?));
    assert!(e.contains("i32 or i64"), "{e}");
    let e = err(a.grouped_matmul(&b, &Tensor::from_vec(vec![5i64], [1])?));
    assert!(e.contains("one per group"), "{e}");
    let e = err(a.grouped_matmul(&Tensor::ones([2, 4, 4], DType::F32, &cpu)?, &ok));
    assert!(e.contains("cannot be multiplied"), "{e}");
    let e = err(a.unsqueeze(0)?.grouped_matmul(&b, &ok));
    assert!(e.contains("grouped product"), "{e}");
    // absurd sizes: a result of 2⁸⁰ elements from broadcast views is an error, not a panic
    let huge = 1i64 << 40;
    let one = Tensor::ones([1, 1], DType::F32, &cpu)?;
    let (wide_a, wide_b) = (one.expand(&[huge, 1])?, one.expand(&[1, huge])?);
    let one_group = Tensor::from_vec(vec![1i64], [1])?;
    assert!(wide_a.grouped_matmul(&wide_b, &one_group).is_err());
    Ok(())
}

#[test]
fn autocast_runs_it_in_the_lower_dtype() -> Result<()> {
    let a = randn(&[6, 8], DType::F32, 11)?;
    let b = randn(&[2, 8, 4], DType::F32, 12)?;
    let offs = offsets(&[4, 2], DType::I64, &Device::Cpu)?;
    let _ac = autocast(DType::BF16)?;
    let y = a.grouped_matmul(&b, &offs)?;
    assert_eq!(y.dtype(), DType::BF16);
    Ok(())
}

// ----- CUDA -----------------------------------------------------------------------------------

/// `|got − want| ≤ u·|want| + (1 + u)·γ_k·Σ|terms|` elementwise (one rounding of the
/// result in a dtype of unit roundoff `u`, a sum of k exact products in f32 or f64).
fn within_bound(got: &[f64], want: &[f64], mag: &[f64], k: usize, out: DType, what: &str) {
    let u = match out {
        DType::BF16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        DType::F32 => 2f64.powi(-24),
        _ => 2f64.powi(-53),
    };
    let acc_u = if out == DType::F64 {
        2f64.powi(-53)
    } else {
        2f64.powi(-24)
    };
    let gamma = k as f64 * acc_u / (1.0 - k as f64 * acc_u);
    for (i, ((&g, &w), &m)) in got.iter().zip(want).zip(mag).enumerate() {
        let bound = u * w.abs() + (1.0 + u) * gamma * m;
        assert!(
            (g - w).abs() <= bound,
            "{what}: element {i}: {g} vs {w} (bound {bound})"
        );
    }
}

/// The operand `shape` laid out with its unit stride on dim `unit` (0 or 1), or with no
/// unit stride at all (`None`), holding `values` (a CPU tensor of that shape).
fn laid_out(values: &Tensor, unit: Option<usize>, device: &Device) -> Result<Tensor> {
    let v = values.to_device(device)?;
    match unit {
        Some(1) => Ok(v),
        Some(_) => v.t()?.contiguous()?.t(),
        None => {
            // every element two apart: (…, 2) with the values in slot 0
            let s = v.shape().to_vec();
            let wide = Tensor::zeros([s[0], s[1], 2], v.dtype(), device)?;
            wide.select(2, 0)?.copy_(&v)?;
            wide.select(2, 0)
        }
    }
}

#[test]
fn cuda_every_orientation_within_its_bound_without_waiting() -> Result<()> {
    let Some(dev) = cuda::require_or_skip("grouped_matmul on cuda") else {
        return Ok(());
    };
    let r: usize = SIZES.iter().sum::<usize>() + TAIL;
    let (k, n) = (72, 136);
    for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
        let offs = offsets(&SIZES, DType::I64, &dev)?;
        // rows form: a (r, k), b (G, k, n)
        let a = randn(&[r, k], dtype, 20)?;
        let b = randn(&[4, k, n], dtype, 21)?;
        let a64 = a.to_dtype(DType::F64)?;
        let b64 = b.to_dtype(DType::F64)?;
        let cpu_offs = offsets(&SIZES, DType::I64, &Device::Cpu)?;
        let want = a64.grouped_matmul(&b64, &cpu_offs)?.to_f64_vec()?;
        let mag = a64
            .abs()?
            .grouped_matmul(&b64.abs()?, &cpu_offs)?
            .to_f64_vec()?;
        for ua in [Some(1), Some(0), None] {
            for ub in [Some(1), Some(0), None] {
                let da = laid_out(&a, ua, &dev)?;
                // b's matrices: unit stride along n (1) or along k (0)
                let db = match ub {
                    Some(1) => b.to_device(&dev)?,
                    Some(_) => b
                        .transpose(1, 2)?
                        .contiguous()?
                        .transpose(1, 2)?
                        .to_device(&dev)?,
                    None => {
                        let wide = Tensor::zeros([4, k, n, 2], dtype, &dev)?;
                        wide.select(3, 0)?.copy_(&b.to_device(&dev)?)?;
                        wide.select(3, 0)?
                    }
                };
                let y = {
                    let _no_waits = stride_core::debug::forbid_sync();
                    da.grouped_matmul(&db, &offs)?
                };
                let what = format!("rows form {dtype} a unit {ua:?} b unit {ub:?}");
                within_bound(&y.to_f64_vec()?, &want, &mag, k, dtype, &what);
            }
        }
        // contraction form: a (m, r), b (r, n) → (G, m, n)
        let m = 72;
        let a = randn(&[m, r], dtype, 22)?;
        let b = randn(&[r, n], dtype, 23)?;
        let (a64, b64) = (a.to_dtype(DType::F64)?, b.to_dtype(DType::F64)?);
        let want = a64.grouped_matmul(&b64, &cpu_offs)?.to_f64_vec()?;
        let mag = a64
            .abs()?
            .grouped_matmul(&b64.abs()?, &cpu_offs)?
            .to_f64_vec()?;
        for ua in [Some(1), Some(0), None] {
            for ub in [Some(1), Some(0), None] {
                let (da, db) = (laid_out(&a, ua, &dev)?, laid_out(&b, ub, &dev)?);
                let y = {
                    let _no_waits = stride_core::debug::forbid_sync();
                    da.grouped_matmul(&db, &offs)?
                };
                let what = format!("contraction form {dtype} a unit {ua:?} b unit {ub:?}");
                within_bound(&y.to_f64_vec()?, &want, &mag, 129, dtype, &what);
            }
        }
    }
    Ok(())
}

#[test]
fn cuda_gradients_match_the_cpu() -> Result<()> {
    let Some(dev) = cuda::require_or_skip("grouped_matmul gradients on cuda") else {
        return Ok(());
    };
    let r: usize = SIZES.iter().sum::<usize>() + TAIL;
    let run = |device: &Device| -> Result<Vec<Vec<f64>>> {
        let offs = offsets(&SIZES, DType::I32, device)?;
        let a = randn(&[r, 48], DType::F64, 30)?
            .to_device(device)?
            .requires_grad_(true)?;
        let b = randn(&[4, 48, 40], DType::F64, 31)?
            .to_device(device)?
            .requires_grad_(true)?;
        let g = randn(&[r, 40], DType::F64, 32)?.to_device(device)?;
        a.grouped_matmul(&b, &offs)?.mul(&g)?.sum()?.backward()?;
        Ok(vec![
            a.grad().unwrap().to_f64_vec()?,
            b.grad().unwrap().to_f64_vec()?,
        ])
    };
    let (cpu, gpu) = (run(&Device::Cpu)?, run(&dev)?);
    for (c, g) in cpu.iter().zip(&gpu) {
        for (x, y) in c.iter().zip(g) {
            // f64 sums of at most 129 terms of magnitude < 50 in either order
            assert!((x - y).abs() <= 1e-11 * (1.0 + x.abs()), "{x} vs {y}");
        }
    }
    Ok(())
}

#[test]
fn cuda_bad_offsets_are_a_deferred_error() -> Result<()> {
    let Some(dev) = cuda::require_or_skip("grouped_matmul offsets check on cuda") else {
        return Ok(());
    };
    let a = Tensor::ones([5, 3], DType::BF16, &dev)?;
    let b = Tensor::ones([2, 3, 4], DType::BF16, &dev)?;
    let bad = Tensor::from_vec(vec![4i64, 2], [2])?.to_device(&dev)?;
    let y = a.grouped_matmul(&b, &bad)?;
    let e = y.to_f64_vec().unwrap_err().to_string();
    assert!(e.contains("offset 1 is out of order"), "{e}");
    let ordinal = match dev {
        Device::Cuda(i) => i,
        _ => unreachable!(),
    };
    // the error stays until taken
    assert!(cuda::take_error(ordinal)?.is_some());
    // the device stays usable, and a good call works
    let good = Tensor::from_vec(vec![2i64, 5], [2])?.to_device(&dev)?;
    let y = a.grouped_matmul(&b, &good)?;
    assert_eq!(y.to_f64_vec()?, vec![3.0; 20]);
    Ok(())
}
