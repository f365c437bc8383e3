//! (b) The harness can fail: fake ops with the bugs stride exists to prevent must each be
//! caught, with the right reason, in the right rows only.

use stride_check::registry::{self, dtypes};
use stride_check::{run_ops, Config, Form, OpInfo, Reason, Report};
use stride_core::{DType, Tensor};

fn entry(name: &str) -> OpInfo {
    registry::find(name)
        .unwrap_or_else(|| panic!("no registry entry {name}"))
        .clone()
}

fn run(op: &OpInfo) -> Report {
    run_ops(&Config::default(), [op])
}

/// Every failing row's first failure has a reason accepted by `ok`.
fn assert_reasons(report: &Report, ok: impl Fn(&Reason) -> bool) {
    assert!(!report.ok(), "the bug went unnoticed");
    for (k, f) in report.failures() {
        assert!(ok(&f.reason), "row {k:?} failed for another reason: {f}");
    }
}

/// The storage index one past the last element of a view (a guard: every layout the
/// harness builds has guard elements after its view).
fn one_past_the_end(t: &Tensor) -> usize {
    if t.numel() == 0 {
        return t.storage_offset();
    }
    t.storage_offset()
        + t.shape()
            .iter()
            .zip(t.stride())
            .map(|(&n, &s)| (n - 1) * s)
            .sum::<usize>()
        + 1
}

/// PyTorch's Apple-GPU bug: addcmul_ into a non-contiguous tensor computes into a
/// contiguous temporary and drops it (Adam froze a transposed weight, silently). The same
/// for `_out`.
#[test]
fn dropped_write_into_a_non_contiguous_output_is_caught() {
    let op = entry("addcmul")
        .inplace(|a, p| {
            let s = a[0].t();
            if s.is_contiguous() {
                return s.addcmul_(a[1].o(), a[2].o(), p.scalars[0]);
            }
            let tmp = s.contiguous()?;
            tmp.addcmul_(a[1].o(), a[2].o(), p.scalars[0])?; // the result dies with tmp
            Ok(s.clone())
        })
        .out(|a, p, out| {
            if out.is_contiguous() {
                return a[0].t().addcmul_out(a[1].o(), a[2].o(), p.scalars[0], out);
            }
            let tmp = out.contiguous()?;
            a[0].t()
                .addcmul_out(a[1].o(), a[2].o(), p.scalars[0], &tmp)?;
            Ok(out.clone())
        });
    let report = run(&op);
    assert!(!report.ok(), "the bug went unnoticed");
    let (failing, overlaps): (Vec<_>, Vec<_>) = report
        .failures()
        .into_iter()
        .map(|(k, f)| (k.clone(), f.clone()))
        .partition(|(k, _)| k.layout != "expanded");
    // the fake also "succeeds" on an expanded (overlapping) self or out instead of refusing it
    for (_, f) in &overlaps {
        assert!(
            matches!(
                f.reason,
                Reason::MissingError { .. } | Reason::Unwritten { .. }
            ),
            "{f}"
        );
    }
    // caught in place and into _out, through transposed/permuted/stepped outputs …
    for form in [Form::InPlace, Form::Out] {
        for layout in ["transposed", "permuted", "stepped"] {
            assert!(
                failing
                    .iter()
                    .any(|(k, _)| k.form == form && k.layout == layout),
                "{form} {layout} not caught"
            );
        }
    }
    for (k, f) in &failing {
        // … never in the functional form, never for a contiguous output
        assert_ne!(k.form, Form::Functional);
        assert_ne!(k.layout, "contiguous", "{f}");
        let Reason::Unwritten { poisoned, .. } = f.reason else {
            panic!("another reason: {f}")
        };
        assert_eq!(
            poisoned,
            k.form == Form::Out,
            "in place the old value stays; _out the poison"
        );
        let text = f.to_string();
        assert!(
            text.contains("never written") && text.contains("strides"),
            "{text}"
        );
    }
}

/// A kernel that writes one element past its view.
#[test]
fn a_write_past_the_view_clobbers_a_guard() {
    let op = entry("neg").dtypes(dtypes::NUMERIC).out(|a, _, out| {
        a[0].t().neg_out(out)?;
        let past = one_past_the_end(out);
        out.as_strided(&[1], &[1], past)?.add_(1)?;
        Ok(out.clone())
    });
    let report = run(&op);
    assert_reasons(&report, |r| matches!(r, Reason::GuardClobbered { .. }));
    let failing = report.failures();
    for layout in [
        "contiguous",
        "transposed",
        "stepped",
        "offset",
        "unit-strides",
    ] {
        assert!(
            failing
                .iter()
                .any(|(k, _)| k.form == Form::Out && k.layout == layout),
            "{layout} not caught"
        );
    }
    assert!(failing.iter().all(|(k, _)| k.form == Form::Out));
    let (_, f) = failing[0];
    assert!(f.to_string().contains("stray write"), "{f}");
}

/// An op whose result dtype changes silently (exp of f32 returning f64).
#[test]
fn a_wrong_result_dtype_is_caught() {
    let op = entry("exp").functional(|a, _| a[0].t().exp()?.to_dtype(DType::F64));
    let report = run(&op);
    assert_reasons(&report, |r| {
        matches!(
            r,
            Reason::WrongDType {
                got: DType::F64,
                ..
            }
        )
    });
    let failing = report.failures();
    assert!(failing.iter().all(|(k, _)| k.form == Form::Functional));
    // f64 inputs really give f64: those rows pass
    assert!(failing.iter().all(|(k, _)| k.dtype != "f64"));
    assert!(report
        .rows
        .iter()
        .any(|(k, r)| k.dtype == "f64" && r.failed == 0 && r.passed > 0));
    assert!(
        failing.iter().any(|(k, _)| k.dtype == "f32")
            && failing.iter().any(|(k, _)| k.dtype == "i32")
    );
}

/// A kernel that is wrong in one dtype only (bf16), at one element.
#[test]
fn a_wrong_value_in_one_dtype_is_caught_in_that_dtype_only() {
    let op = entry("neg").functional(|a, _| {
        let r = a[0].t().neg()?;
        if r.dtype() == DType::BF16 && r.numel() > 0 {
            r.as_strided(&[1], &[1], r.storage_offset())?.add_(1.0)?;
        }
        Ok(r)
    });
    let report = run(&op);
    assert_reasons(&report, |r| {
        matches!(r, Reason::WrongValues { mismatches: 1, .. })
    });
    let failing = report.failures();
    assert!(failing
        .iter()
        .all(|(k, _)| k.dtype == "bf16" && k.form == Form::Functional));
    for (k, r) in &report.rows {
        if k.dtype != "bf16" {
            assert_eq!(r.failed, 0, "{k:?}");
        }
    }
    let text = failing[0].1.to_string();
    assert!(
        text.contains("worst at") && text.contains("max abs err"),
        "{text}"
    );
}

/// A view op that copies, an op that panics, an op that writes into an overlapping output
/// instead of refusing it, and an op that modifies its input: each has its reason.
#[test]
fn copies_panics_accepted_overlaps_and_modified_inputs_are_caught() {
    let copy = entry("transpose")
        .functional(|a, p| a[0].t().transpose(p.dims[0], p.dims[1])?.contiguous());
    let r = run(&copy);
    assert_reasons(&r, |r| {
        matches!(
            r,
            Reason::Aliasing {
                expected_shared: true
            }
        )
    });

    let panics = entry("sqrt").functional(|a, _| {
        if a[0].t().numel() == 0 {
            panic!("index out of bounds");
        }
        a[0].t().sqrt()
    });
    let r = run(&panics);
    assert_reasons(
        &r,
        |r| matches!(r, Reason::Panicked { message } if message.contains("out of bounds")),
    );

    let broadcast = entry("zeros").functional(|_, p| {
        let one = Tensor::zeros([1], p.dtype.unwrap(), &p.dev())?;
        let shape: Vec<i64> = p.sizes.clone();
        if shape.is_empty() {
            return one.reshape(&[]);
        }
        one.reshape(&vec![1; shape.len()])?.expand(&shape) // values right, but one shared element
    });
    let r = run(&broadcast);
    assert_reasons(&r, |r| matches!(r, Reason::NotDense { .. }));

    let lenient = entry("abs").out(|a, _, out| {
        if !stride_check::reference::is_non_overlapping(out.shape(), out.stride()) {
            return Ok(out.clone()); // should have been refused
        }
        a[0].t().abs_out(out)
    });
    let r = run(&lenient);
    assert_reasons(&r, |r| matches!(r, Reason::MissingError { .. }));
    assert!(r.failures().iter().all(|(k, _)| k.layout == "expanded"));

    let scribbles = entry("mul").functional(|a, _| {
        let x = a[0].t();
        let r = x.mul(a[1].o())?;
        if x.numel() > 0 && x.dtype() == DType::F32 {
            x.as_strided(&[1], &[1], x.storage_offset())?.mul_(0.5)?;
        }
        Ok(r)
    });
    let r = run(&scribbles);
    assert_reasons(&r, |r| matches!(r, Reason::InputModified { .. }));
}

/// A device this machine lacks is reported, not run (an ordinal no machine has, so this
/// holds on a GPU machine too).
#[test]
fn an_unavailable_device_is_reported() {
    let cfg = Config {
        device: stride_core::Device::Cuda(999),
        ..Config::default()
    };
    let report = run_ops(&cfg, [&entry("neg")]);
    assert!(!report.ok());
    let e = report.device_error.as_deref().expect("device error");
    assert!(e.contains("cuda:999"), "{e}");
    assert!(report.table().contains("can't run"));
}

/// An index kernel that reads its index operand as if it were contiguous (the strides of
/// the index ignored) is caught exactly where the index is strided: stepped, and expanded
/// (stride 0, a broadcast index) — in every index dtype.
#[test]
fn index_operand_strides_ignored_is_caught() {
    let op = entry("index_select").functional(|a, p| {
        let idx = a[1].t();
        let flat = if idx.dim() == 1 {
            idx.as_strided(idx.shape(), &[1], idx.storage_offset())?
        } else {
            idx.clone()
        };
        a[0].t().index_select(p.dims[0], &flat)
    });
    let report = run(&op);
    assert!(!report.ok(), "the bug went unnoticed");
    for (k, f) in report.failures() {
        assert!(
            k.layout == "stepped" || k.layout == "expanded",
            "row {k:?} failed, but its index is contiguous: {f}"
        );
    }
    for layout in ["stepped", "expanded"] {
        for idx in ["i64", "i32", "u32"] {
            assert!(
                report
                    .failures()
                    .iter()
                    .any(|(k, _)| k.layout == layout && k.dtype.ends_with(&format!("/{idx}"))),
                "not caught with a {layout} {idx} index"
            );
        }
    }
}

/// A two-result op (`max_dim_out(values, indices)`) whose indices go through a contiguous
/// temporary that is dropped when the indices output is strided: caught through the
/// `max_dim.indices` entry in every strided output layout, as unwritten (poisoned) indices.
#[test]
fn dropped_write_of_a_second_result_is_caught() {
    let op = entry("max_dim.indices").out(|a, p, o| {
        let x = a[0].t();
        let vals = Tensor::zeros(o.shape().to_vec(), x.dtype(), &o.device())?;
        if o.is_contiguous() {
            return Ok(x.max_dim_out(p.dims[0], p.keepdim, &vals, o)?.1);
        }
        let tmp = o.contiguous()?;
        x.max_dim_out(p.dims[0], p.keepdim, &vals, &tmp)?; // the indices die with tmp
        Ok(o.clone())
    });
    let report = run(&op);
    assert!(!report.ok(), "the bug went unnoticed");
    for (k, f) in report.failures() {
        assert_eq!(k.form, Form::Out, "{f}");
        assert!(
            matches!(
                f.reason,
                Reason::Unwritten { .. } | Reason::MissingError { .. }
            ),
            "{f}"
        );
    }
    for layout in ["transposed", "stepped"] {
        assert!(
            report
                .failures()
                .iter()
                .any(|(k, f)| k.layout == layout && matches!(f.reason, Reason::Unwritten { .. })),
            "not caught with a {layout} indices output"
        );
    }
}
