//! (b) The harness can fail on precision (issue #22, item 3): fake entries — the registry's
//! own entry (same sampler, reference and bound) with a deliberately wrong call — run
//! through the real runner must be reported as wrong values, in the dtypes where they are
//! wrong. Each of these passed the old tolerances (per-dtype constants × 4–8 × √n).

use stride_check::registry;
use stride_check::{run_ops, Config, Form, OpInfo, Reason, Report, Tol};
use stride_core::{DType, Tensor};

fn entry(name: &str) -> OpInfo {
    registry::find(name)
        .unwrap_or_else(|| panic!("no registry entry {name}"))
        .clone()
}

fn run(op: &OpInfo) -> Report {
    run_ops(&Config::default(), [op])
}

/// The functional form failed with wrong values in each of `dtypes` (the report's dtype
/// column), and every failure is a value failure.
fn caught_in(report: &Report, dtypes: &[&str]) {
    assert!(!report.ok(), "the bug went unnoticed");
    for (k, f) in report.failures() {
        assert!(
            matches!(f.reason, Reason::WrongValues { .. }),
            "row {k:?} failed for another reason: {f}"
        );
    }
    for d in dtypes {
        assert!(
            report
                .failures()
                .iter()
                .any(|(k, _)| k.form == Form::Functional && k.dtype == *d),
            "not caught in {d}"
        );
    }
}

/// No failure in the rows of `dtypes` (where the fake computes correctly).
fn clean_in(report: &Report, dtypes: &[&str]) {
    for (k, f) in report.failures() {
        assert!(!dtypes.contains(&k.dtype.as_str()), "row {k:?}: {f}");
    }
}

/// An f16 sum with an f16 accumulator (one rounding to f16 per addition), as the CPU's f16
/// matmul did per block of 512: the long lines (n = 1022 … 8194 values near 10, or on a
/// 1/8 grid whose exact sum an f32 accumulator gets) show it.
#[test]
fn an_f16_accumulator_is_caught() {
    let op = entry("sum.all").functional(|a, _| {
        let x = a[0].t();
        if x.dtype() != DType::F16 || x.numel() < 2 {
            return x.sum();
        }
        let flat = x.reshape(&[-1])?;
        let mut acc = flat.select(0, 0)?.contiguous()?;
        for i in 1..flat.numel() {
            acc = acc.add(&flat.select(0, i as i64)?)?; // f16 + f16 → f16: rounds each step
        }
        Ok(acc)
    });
    let report = run(&op);
    caught_in(&report, &["f16"]);
    clean_in(&report, &["f64", "f32", "bf16"]);
}

/// A sum that drops the last element of each line (an off-by-one tail loop): with the old
/// tolerance an f16 sum of 1,000 values near 10 could be off by 12 %.
#[test]
fn a_dropped_tail_element_is_caught() {
    let op = entry("sum").functional(|a, p| {
        let x = a[0].t();
        if p.dims == [-1] && x.dim() > 0 && x.size(-1)? > 1 {
            let n = x.size(-1)?;
            return x.narrow(-1, 0, n - 1)?.sum_dims(&p.dims, p.keepdim);
        }
        x.sum_dims(&p.dims, p.keepdim)
    });
    let report = run(&op);
    caught_in(&report, &["f64", "f32", "f16", "bf16"]);
    // the old f16 tolerance at n = 1022: the 10 dropped from a sum near 10,220 passed
    let old = Tol::default_for(DType::F16).scaled(4.0 * 1022f64.sqrt());
    assert!(old.close(10_210.0, 10_220.0));
}

/// An amax that returns the second-largest element of each line.
#[test]
fn a_second_largest_instead_of_the_largest_is_caught() {
    let op = entry("amax").functional(|a, p| {
        let x = a[0].t();
        if p.dims == [-1] && x.dim() > 0 && x.size(-1)? > 1 {
            let second = x.topk(2, -1, true, true)?.0.select(-1, 1)?.clone_tensor()?;
            return if p.keepdim {
                second.unsqueeze(-1)
            } else {
                Ok(second)
            };
        }
        x.amax(&p.dims, p.keepdim)
    });
    let report = run(&op);
    caught_in(&report, &["f64", "f32", "f16", "bf16"]);
}

/// The relative size of one ulp at 1 for a float dtype.
fn eps(d: DType) -> f64 {
    match d {
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        DType::F32 => 2f64.powi(-23),
        _ => 2f64.powi(-52),
    }
}

/// A mean off by three ulps of its dtype (a wrong final scaling): beyond ½ ulp plus the
/// accumulation bound in f16 and bf16, where the old tolerance at n ≈ 1,000 allowed 12 %
/// (f16) and 100 % (bf16). In f32 and f64 three ulps are within the any-order summation
/// bound `γ_{n−1} Σ|x| / n` of these lengths, so they are not asserted.
#[test]
fn a_mean_off_by_a_few_ulps_is_caught_in_half_precision() {
    let op = entry("mean").functional(|a, p| {
        let x = a[0].t();
        let m = x.mean_dims(&p.dims, p.keepdim)?;
        m.mul(1.0 + 3.0 * eps(x.dtype()))
    });
    let report = run(&op);
    caught_in(&report, &["f16", "bf16"]);
    let old = Tol::default_for(DType::F16).scaled(4.0 * 1022f64.sqrt());
    assert!(old.close(100.0 * (1.0 + 3.0 * eps(DType::F16)), 100.0));
}

/// A softmax that returns 1/n everywhere (the uniform distribution).
#[test]
fn a_uniform_softmax_is_caught() {
    let op = entry("softmax").functional(|a, p| {
        let x = a[0].t();
        x.softmax(p.dims[0])?; // the real op's argument checks (dtype, dim)
        let n = if x.dim() == 0 { 1 } else { x.size(p.dims[0])? };
        Tensor::full(x.shape().to_vec(), 1.0 / n as f64, x.dtype(), &x.device())
    });
    let report = run(&op);
    caught_in(&report, &["f64", "f32", "f16", "bf16"]);
}

/// A prod that returns 0 (the value a product of values in (−1, 1) vanishes to, which the
/// old samples and tolerances accepted).
#[test]
fn a_prod_returning_zero_is_caught() {
    let op = entry("prod").functional(|a, p| {
        let x = a[0].t();
        let r = x.prod_dims(&p.dims, p.keepdim)?;
        Tensor::zeros(r.shape().to_vec(), r.dtype(), &r.device())
    });
    let report = run(&op);
    caught_in(&report, &["f64", "f32", "f16", "bf16"]);
}
