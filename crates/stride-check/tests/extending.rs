//! The README's two "a few lines" entries — a reduction and a matrix product — run through the
//! whole matrix against stride's real kernels (`sum_dims`, `matmul`): every layout, the size
//! sweep, every dtype, refused dims and shapes. The f64 references are the registry's plain
//! loops (`reference::reduce`, `reference::matmul`), which call no stride op, so the check
//! compares two independent computations; each test also runs the same entry over a kernel
//! with a deliberate error and requires the matrix to catch it (a check that can't fail
//! proves nothing).

use stride_check::reference;
use stride_check::registry::{dtypes, matmul_sampler, reduction_sampler};
use stride_check::{run_ops, ArgSpec, Config, DTypeRule, Domain, Family, OpInfo, Reason, Tol};
use stride_core::{DType, Tensor};

fn sum_entry(
    f: impl Fn(&Tensor, &[i64], bool) -> stride_core::Result<Tensor> + Send + Sync + 'static,
) -> OpInfo {
    OpInfo::new("sum", Family::Reduction)
        .args(vec![ArgSpec::tensor("self", Domain::any())])
        .dtypes(dtypes::ALL)
        .rule(DTypeRule::Map(
            |d| if d.is_float() { d } else { DType::I64 },
        ))
        .tol(|d| Tol::default_for(d).scaled(16.0))
        .sampler(reduction_sampler(Domain::any()))
        .reference(|c, a| {
            reference::reduce(a[0].t(), &c.params.dims, c.params.keepdim, |v| {
                v.iter().sum()
            })
        })
        .functional(move |a, p| f(a[0].t(), &p.dims, p.keepdim))
}

fn matmul_entry(
    f: impl Fn(&Tensor, &Tensor) -> stride_core::Result<Tensor> + Send + Sync + 'static,
) -> OpInfo {
    OpInfo::new("matmul", Family::Matmul)
        .args(vec![
            ArgSpec::tensor("self", Domain::range(-1.0, 1.0)),
            ArgSpec::tensor("other", Domain::range(-1.0, 1.0)),
        ])
        .dtypes(dtypes::FLOATS)
        .tol(|d| Tol::default_for(d).scaled(40.0))
        .sampler(matmul_sampler(Domain::range(-1.0, 1.0)))
        .reference(|_, a| reference::matmul(a[0].t(), a[1].t()))
        .functional(move |a, _| f(a[0].t(), a[1].t()))
}

/// Whether some failing row of the report failed for wrong values.
fn has_wrong_values(report: &stride_check::Report) -> bool {
    report
        .failures()
        .iter()
        .any(|(_, f)| matches!(f.reason, Reason::WrongValues { .. }))
}

#[test]
fn a_reduction_entry_is_a_few_lines() {
    let sum = sum_entry(|x, dims, keepdim| x.sum_dims(dims, keepdim));
    let report = run_ops(&Config::default(), [&sum]);
    assert!(report.ok(), "{}", report.table());
    assert!(report
        .rows
        .keys()
        .any(|k| k.layout == "transposed" && k.dtype == "i32"));
    assert!(report.rows.values().map(|r| r.passed).sum::<u64>() > 100);

    // negative control: one unit too much in every output must fail, in every dtype
    let wrong = sum_entry(|x, dims, keepdim| x.sum_dims(dims, keepdim)?.add(1i64));
    let report = run_ops(&Config::default(), [&wrong]);
    assert!(!report.ok(), "a sum off by one passed:\n{}", report.table());
    assert!(has_wrong_values(&report), "{}", report.table());
    for d in ["f64", "f32", "f16", "bf16", "i32"] {
        assert!(
            report
                .rows
                .iter()
                .any(|(k, r)| k.dtype == d && r.failed > 0),
            "sum + 1 passed every {d} case"
        );
    }
}

#[test]
fn a_matmul_entry_is_a_few_lines() {
    let matmul = matmul_entry(|a, b| a.matmul(b));
    let report = run_ops(&Config::default(), [&matmul]);
    assert!(report.ok(), "{}", report.table());
    assert!(report.rows.keys().any(|k| k.layout == "permuted"));
    assert!(report
        .rows
        .keys()
        .any(|k| k.layout == "rejects" && k.dtype == "i64"));

    // negative control: a product that drops the last term of every dot product (the last
    // column of `a` and row of `b`) must fail
    let wrong = matmul_entry(|a, b| {
        let k = a.shape().last().copied().unwrap_or(0);
        if k < 2 || b.dim() < 2 || a.dim() < 2 {
            return a.matmul(b);
        }
        a.narrow(-1, 0, k - 1)?.matmul(&b.narrow(-2, 0, k - 1)?)
    });
    let report = run_ops(&Config::default(), [&wrong]);
    assert!(
        !report.ok(),
        "a matmul dropping a term passed:\n{}",
        report.table()
    );
    assert!(has_wrong_values(&report), "{}", report.table());
}
