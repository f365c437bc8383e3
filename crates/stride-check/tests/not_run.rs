//! Nothing passes by not running: a case the device has no kernel for
//! (`Error::NotImplemented`) is counted in its row and in the report, shown in the table,
//! makes the report not `ok` (so `stride check` exits non-zero unless
//! `--allow-unimplemented`), and a row made only of such cases — or only of refusals — does
//! not count as coverage.

use stride_check::registry;
use stride_check::{run_ops, Config, Form, OpInfo};
use stride_core::{DType, Device, Error};

fn neg() -> OpInfo {
    registry::find("neg").expect("neg is registered").clone()
}

fn missing(op: &'static str) -> Error {
    Error::NotImplemented {
        op,
        device: Device::Cpu,
    }
}

#[test]
fn an_op_without_a_kernel_is_counted_shown_and_fails_the_run() {
    // the functional form has no kernel anywhere; in-place and `_out` are real
    let op = neg().functional(|_, _| Err(missing("neg")));
    let report = run_ops(&Config::default(), [&op]);
    let ni = report.not_implemented_total();
    assert!(ni > 50, "{ni} cases counted as not implemented");
    assert_eq!(report.not_implemented.get("neg"), Some(&ni));
    assert_eq!(report.failed(), 0, "{}", report.table());
    assert!(!report.ok(), "a run with unimplemented cases is not ok");
    assert!(report.ok_allowing_unimplemented());
    let err = report.verdict(false).unwrap_err();
    assert!(
        err.contains("did not run") && err.contains("neg") && err.contains("--allow-unimplemented"),
        "{err}"
    );
    assert_eq!(report.verdict(true), Ok(()));
    // shown: the summary line, the NI cells, the JSON counts
    let table = report.table();
    assert!(
        table.contains("NOT RUN:") && table.contains("neg (") && table.contains("NI"),
        "{table}"
    );
    assert!(
        report.json().contains("\"not_implemented\":{\"neg\":"),
        "{}",
        report.json()
    );
    // coverage: the functional form's rows hold only refusals (unclaimed dtypes are refused
    // before the kernel) and missing kernels, so it did not run; the other forms did
    assert!(!report.ran("neg", Form::Functional));
    assert!(report.ran("neg", Form::InPlace) && report.ran("neg", Form::Out));
    assert!(report
        .rows
        .iter()
        .filter(|(k, _)| k.form == Form::Functional)
        .all(|(_, r)| r.checked() == 0));
    let (ops, forms, _, _) = report.coverage();
    assert_eq!(
        (ops, forms),
        (1, 2),
        "coverage counts only rows with checked results"
    );
}

#[test]
fn one_dtype_without_a_kernel_is_not_a_pass() {
    let op = neg()
        .functional(|a, _| {
            if a[0].t().dtype() == DType::BF16 {
                return Err(missing("neg"));
            }
            a[0].t().neg()
        })
        .inplace(|a, _| a[0].t().neg_())
        .out(|a, _, o| a[0].t().neg_out(o));
    let report = run_ops(&Config::default(), [&op]);
    assert!(report.not_implemented_total() > 0);
    assert!(!report.ok());
    for (k, r) in &report.rows {
        if r.not_implemented > 0 {
            assert!(k.dtype.starts_with("bf16"), "{k:?}");
            assert_eq!(k.form, Form::Functional);
        }
    }
    // the bf16 functional rows were not passed by the unimplemented cases
    assert!(report
        .rows
        .iter()
        .filter(|(k, _)| k.form == Form::Functional && k.dtype == "bf16" && k.layout != "rejects")
        .all(|(_, r)| r.checked() == 0));
}

#[test]
fn the_real_registry_has_no_unimplemented_case_on_the_cpu() {
    let report = run_ops(&Config::default(), [&neg()]);
    assert_eq!(report.not_implemented_total(), 0);
    assert!(report.ok(), "{}", report.table());
    assert_eq!(report.verdict(false), Ok(()));
}
